#!/usr/bin/python3
"""Per-rank training memory and step time of the benchmark GPT under data
parallelism and ZeRO stages 1, 2 and 3 on 1, 2 and 4 ranks, against the ZeRO
accounting of the ZeRO paper (fp32 AdamW: parameters 4 Psi,
gradients 4 Psi, optimizer state 8 Psi, divided by N where sharded).

    /usr/bin/python3 bench/zero_memory.py --build build

Memory figures come from strata-run's report (`param_bytes`, `grad_bytes`,
`optimizer_state_bytes`: what each rank's compiled program holds; AdamW
with global-norm clipping, which reads every gradient unless stage 2 shards
it;
`planned_peak_bytes`: its whole static plan). The step time is the median
over the run; with more ranks than the machine's 2 cores it measures
oversubscription, not scaling. *sent MB* is what rank 0's program sends
per step through its collectives, by the ring model (all-reduce 2(N-1)/N
of its buffer, reduce-scatter (N-1)/N of its input, all-gather (N-1)/N of
its output, broadcast the buffer, from the root), counted from the
compiled program (`strata-opt --world-size N --rank 0`).
"""

import argparse
import json
import os
import re
import statistics
import subprocess


COLLECTIVE = re.compile(
    r"strata\.(all_reduce|reduce_scatter|all_gather|broadcast) .*\{group = "
    r"@([\w.]+).*: \(tensor<([0-9x]+)xf32>, !strata.token\) -> "
    r"\(tensor<([0-9x]+)xf32>")
GROUP = re.compile(r"strata\.comm_group @([\w.]+) ranks \[array<i64: ([^>]*)>")


def elements(shape):
    n = 1
    for d in shape.split("x"):
        n *= int(d)
    return n


def sent_bytes(ir):
    """Bytes rank 0 sends per step through collectives (ring model)."""
    sizes = {m.group(1): len(m.group(2).split(",")) for m in GROUP.finditer(ir)}
    total = 0.0
    for m in COLLECTIVE.finditer(ir):
        kind, n = m.group(1), sizes[m.group(2)]
        inp, out = elements(m.group(3)) * 4, elements(m.group(4)) * 4
        total += {"all_reduce": 2 * (n - 1) / n * inp,
                  "reduce_scatter": (n - 1) / n * inp,
                  "all_gather": (n - 1) / n * out,
                  "broadcast": inp}[kind]
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--workdir", default="/tmp/strata-bench-zero")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    bin_dir = os.path.join(args.build, "bin")
    program = os.path.join(args.workdir, "gpt.mlir")
    subprocess.run([os.path.join(bin_dir, "strata-gen"), "gpt", "--layers",
                    "4", "--hidden", "256", "--heads", "4", "--seq", "128",
                    "--vocab", "256", "--batch", "8", "-o", program],
                   check=True)
    print("GPT 4 layers, hidden 256, seq 128, batch 8 (global), AdamW, fp32")
    print("%-16s %5s %26s %26s %26s %14s %18s %8s %9s" % (
        "strategy", "ranks", "params MB", "grads MB", "optimizer state MB",
        "formula", "planned MB", "sent MB", "step ms"))
    for ranks in (1, 2, 4):
        for stage in (0, 1, 2, 3):
            if stage and ranks == 1:
                continue
            strategy = {"optimizer": {"type": "adamw", "learning_rate": 1e-3,
                                      "grad_clip_norm": 1.0}}
            if stage:
                # Stage 3 splits every parameter (Paddle's default
                # segment_size keeps those under 2^20 elements whole).
                strategy["sharding"] = {"enable": True, "stage": stage,
                                        "degree": ranks, "segment_size": 1}
            path = os.path.join(args.workdir, "s.json")
            with open(path, "w") as f:
                json.dump(strategy, f)
            report = os.path.join(args.workdir, "r.json")
            subprocess.run([os.path.join(bin_dir, "strata-run"), program,
                            "--strategy", path, "--steps", str(args.steps),
                            "--nproc", str(ranks), "--report", report,
                            "--quiet"], check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                r = json.load(f)
            ir = subprocess.run([os.path.join(bin_dir, "strata-opt"), program,
                                 "--strategy=" + path,
                                 "--world-size=%d" % ranks, "--rank=0"],
                                check=True, capture_output=True,
                                text=True).stdout
            mb = 2 ** 20
            psi4 = sum(r["param_bytes"]) if stage == 3 else r["param_bytes"][0]
            states = r["optimizer_state_bytes"]
            expected = 2 * psi4 / (ranks if stage else 1)
            worst = max(abs(s - expected) / expected for s in states)
            print("%-16s %5d %26s %26s %26s %14s %18s %8.1f %9.0f" % (
                "ZeRO-%d" % stage if stage else "data parallel", ranks,
                " / ".join("%.2f" % (p / mb) for p in r["param_bytes"]),
                " / ".join("%.2f" % (g / mb) for g in r["grad_bytes"]),
                " / ".join("%.2f" % (s / mb) for s in states),
                "%.2f %+.1f%%" % (expected / mb, 100 * worst),
                " / ".join("%.0f" % (p / mb) for p in r["planned_peak_bytes"]),
                sent_bytes(ir) / mb,
                statistics.median(r["step_time_ms"][2:])))


if __name__ == "__main__":
    main()
