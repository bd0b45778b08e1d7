"""Errors from Python: the compiler's diagnostics arrive as StrataError."""

import numpy as np

import strata

# A malformed program: the error names the place.
try:
    strata.compile("func.func @train_step() {\n  %0 = strata.nope\n}\n",
                   name="bad.mlir")
except strata.StrataError as e:
    print("parse:", e.diagnostics[0])

# A wrong strategy key: the strategy file's place and the suggestion.
try:
    strata.compile(open("mlp.mlir").read(), strategy="typo.yaml")
except strata.StrataError as e:
    print("strategy:", str(e).splitlines()[0])

exe = strata.compile("mlp.mlir")
# A batch of the wrong shape is refused before it reaches the compiler.
try:
    exe.step([np.zeros((3, 16), np.float32), np.zeros(8, np.int32)])
except ValueError as e:
    print("batch:", e)
# A missing checkpoint.
try:
    exe.load("missing.safetensors")
except strata.StrataError as e:
    print("load:", str(e).splitlines()[0])
# Several ranks need their communicator.
try:
    strata.compile("mlp.mlir", world_size=2)
except ValueError as e:
    print("ranks:", e)
