"""Strata from Python: compile a training program with a strategy and train it.

A thin binding of Strata's C API (``include/strata-c/Strata.h``) through
ctypes, which needs no compiled extension and no MLIR Python bindings: the
package loads ``libStrataC.so`` and calls it.

    import strata
    exe = strata.compile(open("mlp.mlir").read(), strategy="adamw.yaml")
    batch = exe.read_batch(0)          # or numpy arrays of exe.inputs' shapes
    loss = exe.step(batch)
    exe.save("mlp.safetensors", steps_done=1)

Errors of the compiler arrive as ``strata.StrataError``, carrying the
diagnostics (severity, ``file:line:col``, message); its warnings on calls
that succeed (a strategy key that changes nothing in the program) as
``strata.StrataWarning`` through Python's ``warnings``.
"""

from ._api import (Diagnostic, Executable, Input, MemoryPlan, StrataError,
                   StrataWarning, api_version, compile, library_path)

__all__ = ["Diagnostic", "Executable", "Input", "MemoryPlan", "StrataError",
           "StrataWarning", "api_version", "compile", "library_path"]
