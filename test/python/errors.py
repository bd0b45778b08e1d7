"""Errors from Python: the compiler's diagnostics arrive as StrataError."""

import os
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
# A name the step does not take (a typo would otherwise go unnoticed).
try:
    exe.step({"features": np.zeros((8, 16), np.float32),
              "labels": np.zeros(8, np.int32), "label": 0})
except ValueError as e:
    print("extra input:", e)
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

# Misuse of an executable: wrong argument types and ranges, a closed or
# copied executable. Python exceptions, never a crash.
import copy
import os
import threading

def outcome(call):
    try:
        call()
        return "ok"
    except Exception as e:  # noqa: BLE001 - the test prints what was raised
        return "%s: %s" % (type(e).__name__, e)

# A message naming a path that is not UTF-8 (a missing strategy file): a
# StrataError with the byte escaped, not a UnicodeDecodeError.
print("bytes path:", outcome(lambda: strata.compile(
    "mlp.mlir", strategy=b"no-\xff.yaml")))

exe = strata.compile("mlp.mlir")
good = exe.read_batch(0)
print("read_batch(-1):", outcome(lambda: exe.read_batch(-1)))
print("read_batch('a'):", outcome(lambda: exe.read_batch("a")))
# Token ids in a file of uint16 (0, 1, ..., 249, 0, ...): each target is the
# id after its token; the format is checked and the .bin name read as text
# refused.
gpt = strata.compile("gpt.mlir")
(np.arange(1000) % 250).astype("<u2").tofile("ids.bin")
ids = gpt.read_batch(2, "ids.bin", format="uint16")
print("uint16:", ids["tokens"].shape,
      bool(np.all(ids["targets"] == (ids["tokens"] + 1) % 250)))
print("format='utf8':", outcome(lambda: gpt.read_batch(0, "ids.bin",
                                                        format="utf8")))
print("format=16:", outcome(lambda: gpt.read_batch(0, "ids.bin", format=16)))
print("as text:", outcome(lambda: gpt.read_batch(0, "ids.bin")))
# The token file read (mapped, not copied) is read and checked again when
# it changed since (a truncated file would end the process).
gpt.read_batch(1, "ids.bin", format="uint16")
with open("ids.bin", "r+b") as f:
    f.truncate(20)
print("changed:", outcome(lambda: gpt.read_batch(2, "ids.bin",
                                                  format="uint16")))
# A float16 step whose gradients overflow at a static loss scale changes no
# parameter: a StrataWarning says so, at the line that called step().
with open("overflow.yaml", "w") as f:
    f.write("amp: {enable: true, init_loss_scaling: 1.0e+30, "
            "use_dynamic_loss_scaling: false}\n")
overflowing = strata.compile("gpt.mlir", strategy="overflow.yaml")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    overflowing.step(overflowing.read_batch(0))
print("skipped:", [(w.category.__name__, str(w.message)) for w in caught])
print("warned at:", [os.path.basename(w.filename) for w in caught])
print("save(steps_done=-5):", outcome(lambda: exe.save("n.st", steps_done=-5)))
print("save(2**70):", outcome(lambda: exe.save("n.st", steps_done=2**70)))
print("save(NUL):", outcome(lambda: exe.save("a\0b")))
print("seed=2**64:", outcome(lambda: strata.compile("mlp.mlir", seed=2**64)))
print("strategy='':", outcome(lambda: strata.compile("mlp.mlir", strategy="")))
print("backend=None:", outcome(lambda: strata.compile("mlp.mlir",
                                                      backend=None)))
print("threads=100000:", outcome(lambda: strata.compile("mlp.mlir",
                                                        threads=100000)))
print("no such file:", outcome(lambda: strata.compile("mlp_copy.txt")))
print("autotune, reference:", outcome(lambda: strata.compile(
    "mlp.mlir", backend="reference", gemm_autotune=True)))
print("collective_timeout='1':", outcome(lambda: strata.compile(
    "mlp.mlir", collective_timeout="1")))
print("collective_timeout=-1:", outcome(lambda: strata.compile(
    "mlp.mlir", collective_timeout=-1)))
print("program=3:", outcome(lambda: strata.compile(3)))
print("copy:", outcome(lambda: copy.copy(exe)))
# (The C API below Python refuses a negative step count itself.)
print("C save(-5):", outcome(lambda: exe._session.check(
    strata._api._save(exe._handle, b"n.st", -5))))
# Two threads share the executable, one call at a time.
threads = [threading.Thread(target=lambda: [exe.step(good) for _ in range(3)])
           for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("two threads: six steps, loss finite:", np.isfinite(exe.step(good)))
# The garbage collector may finalise an executable's session first (both
# unreachable): the C session lives until its last executable is gone.
exe._session.close()
print("session closed first:", outcome(lambda: exe.step(good)))
exe.close()
print("after close:", outcome(lambda: exe.step(good)))
with strata.compile("mlp.mlir") as scoped:
    pass
print("after with:", outcome(lambda: scoped.memory_plan()))

# A step that fails at its end may have updated part of the state: the
# executable trains and saves nothing more until a checkpoint is loaded.
exe = strata.compile("mlp.mlir")
exe.save("start.safetensors")
bad = dict(good)
bad["labels"] = np.full_like(good["labels"], 100)
print("bad labels:", outcome(lambda: exe.step(bad)))
print("then step:", outcome(lambda: exe.step(good)))
print("then save:", outcome(lambda: exe.save("after.safetensors")))
print("loaded:", exe.load("start.safetensors"),
      "first loss equal:", exe.step(good) == strata.compile("mlp.mlir").step(good))

# A NaN in the batch reaches the loss (ReLU keeps it, as PyTorch's does) and
# is reported, where it used to vanish into NaN weights with a finite loss.
poisoned = strata.compile("mlp.mlir")
nan = {k: v.copy() for k, v in good.items()}
nan["features"][0, 0] = np.nan
print("NaN feature:", outcome(lambda: poisoned.step(nan)))

# Checkpoints are written beside their path and renamed over it: a path that
# is not a regular file is refused, a symbolic link's target is replaced.
os.mkfifo("fifo")
print("save to a FIFO:", outcome(lambda: exe.save("fifo")))
print("still a FIFO:", os.path.exists("fifo") and not os.path.isfile("fifo"))
exe.save("target.safetensors", steps_done=1)
os.symlink("target.safetensors", "link.safetensors")
exe.save("link.safetensors", steps_done=2)
print("link kept:", os.path.islink("link.safetensors"),
      "target written:", exe.load("target.safetensors") == 2,
      "no temp left:", not [n for n in os.listdir(".") if ".tmp-" in n])
os.symlink("missing.safetensors", "dangling.safetensors")
print("dangling link:", outcome(lambda: exe.save("dangling.safetensors")))

# A step's error names the op's place in the file when a front end wrapped
# it in a name (as an importer names a layer), on either backend.
named = "\n".join(
    line + ' loc("loss"("model.py":10:2))'
    if "strata.cross_entropy" in line else line
    for line in open("mlp.mlir").read().splitlines())
for backend in ("cpu", "reference"):
    exe = strata.compile(named, backend=backend)
    batch = exe.read_batch(0)
    batch["labels"][3] = 77
    print("named place (%s):" % backend,
          outcome(lambda: exe.step(batch)).splitlines()[0])
