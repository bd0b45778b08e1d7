#!/usr/bin/env python3
"""Compares two safetensors checkpoints tensor by tensor: the same names,
dtypes and shapes, float values within atol + rtol * |b| (the atol for
values near zero), integers equal. Prints the worst relative difference;
exits 1 with the first offending tensor otherwise.

    compare_tensors.py a.safetensors b.safetensors [--rtol 1e-5] [--atol 1e-7]
                       [--exclude PREFIX ...]
"""

import argparse
import array
import json
import math
import struct
import sys

FORMATS = {"F32": "f", "F64": "d", "I32": "i", "I64": "q"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in FORMATS:
            sys.exit("%s: tensor '%s' has dtype %s, which this script does "
                     "not read" % (path, name, dtype))
        begin, end = info["data_offsets"]
        values = array.array(FORMATS[dtype])
        values.frombytes(body[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (dtype, info["shape"], values)
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-7)
    ap.add_argument("--exclude", action="append", default=[],
                    help="skip the tensors whose name starts so")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    for t in (a, b):
        for name in [n for n in t if n.startswith(tuple(args.exclude))]:
            del t[name]
    if sorted(a) != sorted(b):
        sys.exit("different tensors: only in %s: %s; only in %s: %s" % (
            args.a, sorted(set(a) - set(b)), args.b, sorted(set(b) - set(a))))
    worst = 0.0
    for name in sorted(a):
        (ta, sa, va), (tb, sb, vb) = a[name], b[name]
        if (ta, sa) != (tb, sb):
            sys.exit("tensor '%s': %s %s vs %s %s" % (name, ta, sa, tb, sb))
        for i, (x, y) in enumerate(zip(va, vb)):
            if ta.startswith("I"):
                if x != y:
                    sys.exit("tensor '%s'[%d]: %d vs %d" % (name, i, x, y))
                continue
            diff = abs(x - y)
            # A NaN or infinity equals nothing within a tolerance (and
            # NaN compares false with any bound): bitwise the same
            # infinity, or a difference.
            if not (math.isfinite(x) and math.isfinite(y)):
                if x != y:
                    sys.exit("tensor '%s'[%d]: %r vs %r" % (name, i, x, y))
                continue
            if diff > args.atol + args.rtol * abs(y):
                sys.exit("tensor '%s'[%d]: %r vs %r (rtol %g)" % (
                    name, i, x, y, args.rtol))
            if abs(y) * args.rtol > args.atol:
                worst = max(worst, diff / abs(y))
    print("%d tensors equal within rtol %g, atol %g (worst relative "
          "difference where rtol dominates: %.2e)"
          % (len(a), args.rtol, args.atol, worst))


if __name__ == "__main__":
    main()
