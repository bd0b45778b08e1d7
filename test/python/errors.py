"""Errors from Python: the compiler's diagnostics arrive as StrataError."""

import warnings

import numpy as np

import strata

# A malformed program: the error names the place.
try:
    strata.compile("func.func @train_step() {\n  %0 = strata.nope\n}\n",
                   name="bad.mlir")
except strata.StrataError as e:
    print("parse:", e.diagnostics[0])

# A step that returns no loss: the error at the step, without the step in
# generic form after it.
try:
    strata.compile("func.func @train_step(%x: tensor<8xf32>) -> tensor<8xf32> "
                   "{\n  return %x : tensor<8xf32>\n}\n", name="noloss.mlir")
except strata.StrataError as e:
    print("no loss:", "see current operation" in str(e), e.diagnostics[0])

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

# A strategy key that changes nothing in the program: a warning, and the
# program compiles.
with open("flash.yaml", "w") as f:
    f.write("fused_passes: {enable: true, flash_attention: true}\n")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    strata.compile("mlp.mlir", strategy="flash.yaml")
for w in caught:
    print("warning:", w.category.__name__, w.filename.endswith("errors.py"),
          w.message)

# A batch that does not split as the strategy asks: named at its key.
with open("k3.yaml", "w") as f:
    f.write("gradient_merge: {enable: true, k_steps: 3}\n")
try:
    strata.compile("mlp.mlir", strategy="k3.yaml")
except strata.StrataError as e:
    print("split:", e.diagnostics[0])

# A warning turned into an exception by a warnings filter.
with warnings.catch_warnings():
    warnings.simplefilter("error", strata.StrataWarning)
    try:
        strata.compile("mlp.mlir", strategy="flash.yaml")
    except strata.StrataWarning as w:
        print("as error:", w.diagnostic.severity)
