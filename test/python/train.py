"""Trains a program through the Python package and prints strata-run's lines.

usage: train.py PROGRAM STEPS SEED [--strategy FILE] [--resume-at N FILE]
                [--gemm-autotune]

Prints `step <i> loss <value>` per step (as strata-run does), so that the
losses compare bit for bit. Under mpirun every rank trains (mpi4py's
COMM_WORLD is the job) and rank 0 prints. With --resume-at N FILE the executable saves a
checkpoint after N steps, and a new executable loads it and trains the rest.
"""

import argparse

import strata

parser = argparse.ArgumentParser()
parser.add_argument("program")
parser.add_argument("steps", type=int)
parser.add_argument("seed", type=int)
parser.add_argument("--strategy")
parser.add_argument("--resume-at", nargs=2, metavar=("N", "FILE"))
parser.add_argument("--gemm-autotune", action="store_true")
args = parser.parse_args()

exe = strata.compile(args.program, strategy=args.strategy, seed=args.seed,
                     gemm_autotune=args.gemm_autotune)
# Under mpirun every rank trains; rank 0 prints.
out = print if exe.rank == 0 else (lambda *a, **k: None)
out("ranks: %d" % exe.world_size)
for spec in exe.inputs:
    out("input %s: %s %s" % (spec.name, spec.dtype, list(spec.shape)))
resume_at = int(args.resume_at[0]) if args.resume_at else None
for i in range(args.steps):
    if i == resume_at:
        exe.save(args.resume_at[1], steps_done=i)
        exe.close()
        exe = strata.compile(args.program, strategy=args.strategy,
                             seed=args.seed)
        out("resumed after step %d" % exe.load(args.resume_at[1]))
    out("step %d loss %r" % (i, exe.step(exe.read_batch(i))))
plan = exe.memory_plan()
out("memory: peak %d parameters %d" % (plan.peak, plan.parameters))
exe.close()
