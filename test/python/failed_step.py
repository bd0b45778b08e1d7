"""Under mpirun: a step that fails on one rank only (a token id outside the
vocabulary in the rows of the last rank) is refused on every rank, and
every rank then refuses to train and to save until a checkpoint is loaded
(a rank that went on alone would wait for the others in a collective).

usage: failed_step.py PROGRAM STRATEGY   (each rank writes its outcomes to
failed-RANK.txt)
"""

import sys

import strata

exe = strata.compile(sys.argv[1], strategy=sys.argv[2])
exe.save("start.safetensors")
batch = exe.read_batch(0)
rows = batch["tokens"].shape[0]
bad = {k: v.copy() for k, v in batch.items()}
bad["tokens"][rows - 1, 0] = 10**6  # in the last rank's rows


def outcome(call):
    try:
        call()
        return "ok"
    except strata.StrataError as e:
        return str(e).splitlines()[0]


lines = ["failed step: " + outcome(lambda: exe.step(bad)),
         "then step: " + outcome(lambda: exe.step(batch)),
         "then save: " + outcome(lambda: exe.save("after.safetensors")),
         "load: %d" % exe.load("start.safetensors"),
         "then step: " + outcome(lambda: exe.step(batch))]
with open("failed-%d.txt" % exe.rank, "w") as f:
    for line in lines:
        f.write("rank %d %s\n" % (exe.rank, line))
