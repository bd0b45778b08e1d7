"""Runs TOOL on damaged copies FIRST..LAST-1 of a bytecode program (copy i:
the i-th draw of 1-4 random bytes replaced, seed 1) and counts the
outcomes: accepted (exit 0), refused with an error (exit 1), or crashed (a
signal, or LLVM's crash report). A fatal error of MLIR's bytecode reader
must be an error naming the file.

usage: damaged_bytecode.py TOOL PROGRAM.mlirbc FIRST LAST"""

import os
import random
import subprocess
import sys

tool, program = sys.argv[1], sys.argv[2]
first, last = int(sys.argv[3]), int(sys.argv[4])
data = open(program, "rb").read()
rng = random.Random(1)
outcomes = {"accepted": 0, "refused": 0, "crashed": 0}
fatal = None
for i in range(last):
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
    if i < first:
        continue
    path = "damaged-%d.mlirbc" % i
    with open(path, "wb") as f:
        f.write(damaged)
    try:
        run = subprocess.run([tool, path, "-o", os.devnull],
                             capture_output=True, text=True, errors="replace",
                             timeout=120)
    except subprocess.TimeoutExpired:
        print("time-out on %s" % path)
        outcomes["crashed"] += 1
        continue
    crashed = (run.returncode not in (0, 1) or "Stack dump" in run.stderr
               or "Sanitizer" in run.stderr)
    if crashed:
        print("crash on %s (exit %d):\n%s" % (path, run.returncode,
                                              run.stderr[-2000:]))
    outcomes["crashed" if crashed else
             "accepted" if run.returncode == 0 else "refused"] += 1
    if "is MLIR bytecode, whose reader fails" in run.stderr and not fatal:
        fatal = run.stderr.strip().replace(path, "DAMAGED")
    if not crashed:
        os.remove(path)
print("crashed:", outcomes["crashed"])
print("fatal error reported:", fatal)
