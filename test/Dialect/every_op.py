#!/usr/bin/env python3
"""Fails when an op that StrataOps.td defines has no CHECK line in ops.mlir,
so that ops.mlir's round trip covers every op the dialect has.

usage: every_op.py StrataOps.td ops.mlir"""
import re
import sys

td, test = (open(p).read() for p in sys.argv[1:3])
ops = sorted(set(re.findall(r'Op<"([a-z_]+)"', td)))
checked = {op for line in re.findall(r"//\s*CHECK:(.*)", test)
           for op in re.findall(r"\bstrata\.([a-z_]+)", line)}
missing = [op for op in ops if op not in checked]
if not ops or missing:
    sys.exit("ops without a CHECK line in %s: %s" % (sys.argv[2],
                                                       ", ".join(missing)))
print("%d ops, each checked" % len(ops))
