#!/usr/bin/env python3
"""Compares the `step <i> loss <value>` lines of two strata-run outputs (a
NaN on either side is a difference)."""
import argparse
import math
import sys

ap = argparse.ArgumentParser()
ap.add_argument("expected")
ap.add_argument("actual")
ap.add_argument("--rtol", type=float, required=True)
args = ap.parse_args()


def losses(path):
    with open(path) as f:
        return [float(l.split()[3]) for l in f if l.startswith("step ")]


a, b = losses(args.expected), losses(args.actual)
if len(a) != len(b) or not a:
    sys.exit("different step counts: %d vs %d" % (len(a), len(b)))
# (max() would pass over a NaN after the first step: a NaN counts as inf.)
worst = max(math.inf if math.isnan(d) else d
            for d in (abs(x - y) / max(abs(x), 1e-300) for x, y in zip(a, b)))
print("steps %d, max relative difference %.3e (rtol %.1e)" % (len(a), worst,
                                                               args.rtol))
sys.exit(0 if worst <= args.rtol else 1)
