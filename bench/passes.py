#!/usr/bin/python3
"""Step time and planned memory of the benchmark GPT under the one-rank
strategy passes (fusions, recompute), on the CPU runtime.

    /usr/bin/python3 bench/passes.py --build build --threads 1

Prints, per strategy, the median step time, its ratio to the baseline (no
strategy pass), the planned peak memory (arena + parameters + optimizer
state + batch) and the arena alone.
"""

import argparse
import json
import os
import statistics
import subprocess

STRATEGIES = {
    "baseline": {},
    "gemm_epilogue + dropout_add": {
        "fused_passes": {"enable": True, "gemm_epilogue": True,
                         "dropout_add": True}},
    "recompute (full, h0-h3)": {
        "recompute": {"enable": True, "checkpoints": ["h0", "h1", "h2", "h3"]}},
    "recompute (selective: matmuls kept)": {
        "recompute": {"enable": True, "checkpoints": ["h0", "h1", "h2", "h3"],
                      "refined_ops_patterns": [
                          {"main_ops": ["matmul"], "num": -1,
                           "pre_ops": [], "suf_ops": []}]}},
    "fusions + full recompute": {
        "fused_passes": {"enable": True, "gemm_epilogue": True,
                         "dropout_add": True},
        "recompute": {"enable": True, "checkpoints": ["h0", "h1", "h2", "h3"]}},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/strata-bench-passes")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    bin_dir = os.path.join(args.build, "bin")
    program = os.path.join(args.workdir, "gpt.mlir")
    subprocess.run([os.path.join(bin_dir, "strata-gen"), "gpt", "--layers",
                    "4", "--hidden", "256", "--heads", "4", "--seq", "128",
                    "--vocab", "256", "--batch", "8", "--dropout", "0.1",
                    "-o", program], check=True)
    print("GPT 4 layers, hidden 256, 4 heads, seq 128, batch 8, dropout 0.1, "
          "AdamW; %d thread(s)" % args.threads)
    print("%-38s %10s %7s %14s %12s" % ("strategy", "step ms", "ratio",
                                         "planned peak", "arena"))
    base = None
    for name, sections in STRATEGIES.items():
        strategy = dict(sections)
        strategy["optimizer"] = {"type": "adamw", "learning_rate": 0.001}
        path = os.path.join(args.workdir, "s.json")
        with open(path, "w") as f:
            json.dump(strategy, f)
        report = os.path.join(args.workdir, "r.json")
        subprocess.run([os.path.join(bin_dir, "strata-run"), program,
                        "--strategy", path, "--steps",
                        str(args.warmup + args.steps), "--cpu-threads",
                        str(args.threads), "--report", report, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            r = json.load(f)
        ms = statistics.median(r["step_time_ms"][args.warmup:])
        base = base or ms
        print("%-38s %10.1f %7.2f %11.1f MB %9.1f MB" % (
            name, ms, ms / base, r["planned_peak_bytes"][0] / 2 ** 20,
            r["arena_bytes"] / 2 ** 20))


if __name__ == "__main__":
    main()
