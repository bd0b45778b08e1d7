#!/usr/bin/env python3
"""Summarises a strata-run --trace file: ranks, steps, event categories, and
checks that every op event lies inside its step on its rank."""
import json
import sys

with open(sys.argv[1]) as f:
    events = json.load(f)["traceEvents"]
steps = {}
for e in events:
    if e.get("cat") == "step":
        steps[(e["pid"], e["name"])] = (e["ts"], e["ts"] + e["dur"])
for e in events:
    if e.get("ph") == "X" and e["cat"] != "step":
        begin, end = steps[(e["pid"], "step %d" % e["args"]["step"])]
        assert begin <= e["ts"] and e["ts"] + e["dur"] <= end + 1e-3, e
print("ranks", sorted({e["pid"] for e in events}))
print("steps", sorted({name for (_, name) in steps}))
print("categories", sorted({e["cat"] for e in events if "cat" in e}))
print("names", " ".join(sorted({e["name"] for e in events
                                 if e.get("cat") == "communication"})))
# The ranks' clocks agree: a step's all-reduce holds every rank inside the
# step at one moment, so the ranks' events of each step overlap in time.
ranks = sorted({pid for (pid, _) in steps})
aligned = all(
    max(steps[(r, name)][0] for r in ranks) <=
    min(steps[(r, name)][1] for r in ranks)
    for name in {name for (_, name) in steps})
print("aligned", aligned)
