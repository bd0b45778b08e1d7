#!/usr/bin/env python3
"""Mixed precision: the loss curves of the main job's GPT in f32 and in each
mixed-precision mode, and their gaps to f32's.

    python3 bench/amp_curves.py --build build [--steps 300] [--nproc 2]
            [--modes bf16-o1,bf16-o2,fp16-o1,fp16-o2]

The GPT is the main job's (4 layers, hidden 128, 4 heads, 64 tokens, batch
32, dropout 0.1) trained with examples/gpt_zero2.yaml (AdamW, clipping,
cosine decay, both fusions, ZeRO-2 of degree 2), its decay shortened to the
run, on --nproc ranks (at least 2) from --seed (weights and batches). For
each mode it prints the loss at a few steps, the mean of the last 50 steps
and, from step 50 on, the largest gap to f32 step by step and smoothed over
10 steps (relative to f32's). The curves are written to --workdir as
MODE.txt (strata-run's `step N loss X` lines).
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from amp_step_time import cpu_model  # noqa: E402

MODES = {
    "f32": None,
    "bf16-o1": "{enable: true, dtype: bfloat16}",
    "bf16-o2": "{enable: true, dtype: bfloat16, level: o2}",
    "fp16-o1": "{enable: true, dtype: float16}",
    "fp16-o2": "{enable: true, dtype: float16, level: o2}",
}


def losses(path):
    with open(path) as f:
        return [float(m.group(1)) for m in
                re.finditer(r"^step \d+ loss (\S+)$", f.read(), re.M)]


def smooth(values, window=10):
    return [sum(values[max(0, i - window + 1):i + 1]) /
            (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="bf16-o1,bf16-o2,fp16-o1,fp16-o2")
    ap.add_argument("--workdir", default="/tmp/strata-amp-curves")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")
    program = os.path.join(args.workdir, "gpt.mlir")
    subprocess.run([os.path.join(bin_dir, "strata-gen"), "gpt", "--layers",
                    "4", "--hidden", "128", "--heads", "4", "--seq", "64",
                    "--vocab", "256", "--batch", "32", "--dropout", "0.1",
                    "-o", program], check=True)
    with open(os.path.join(HERE, "..", "examples", "gpt_zero2.yaml")) as f:
        base = re.sub(r"decay_steps: \d+",
                      "decay_steps: %d" % max(1, args.steps - 20), f.read())
    print("cpu: %s; %d ranks; %d steps; seed %d" % (
        cpu_model(), args.nproc, args.steps, args.seed))
    curves = {}
    for mode in ["f32"] + args.modes.split(","):
        strategy = os.path.join(args.workdir, mode + ".yaml")
        with open(strategy, "w") as f:
            f.write(base + ("amp: %s\n" % MODES[mode] if MODES[mode] else ""))
        out = os.path.join(args.workdir, mode + ".txt")
        with open(out, "w") as f:
            subprocess.run([os.path.join(bin_dir, "strata-run"), program,
                            "--strategy", strategy, "--nproc",
                            str(args.nproc), "--steps", str(args.steps),
                            "--seed", str(args.seed), "--quiet"], check=True,
                           stdout=f)
        curves[mode] = losses(out)
        if len(curves[mode]) != args.steps:
            raise SystemExit("%s: %d losses, expected %d" %
                             (out, len(curves[mode]), args.steps))
    marks = sorted({0, 49, 99, 149, 199, 249, args.steps - 1})
    marks = [m for m in marks if m < args.steps]
    print("| mode | " + " | ".join("step %d" % m for m in marks) +
          " | mean of the last 50 | max gap from step 50 (step by step) |"
          " max gap smoothed over 10 |")
    print("|" + " --- |" * (len(marks) + 4))
    ref = curves["f32"]
    ref_smooth = smooth(ref)
    tail = min(50, args.steps)
    for mode, c in curves.items():
        mean = sum(c[-tail:]) / tail
        row = "| %s | " % mode + " | ".join("%.4f" % c[m] for m in marks)
        row += " | %.4f" % mean
        if mode == "f32":
            print(row + " | | |")
            continue
        start = min(50, args.steps - 1)
        gaps = [abs(c[i] - ref[i]) / ref[i] for i in range(start, len(c))]
        cs = smooth(c)
        sgaps = [abs(cs[i] - ref_smooth[i]) / ref_smooth[i]
                 for i in range(start, len(c))]
        worst = max(range(len(sgaps)), key=lambda i: sgaps[i]) + start
        print(row + " | %.2f%% | %.2f%% (step %d) |" % (
            100 * max(gaps), 100 * max(sgaps), worst))


if __name__ == "__main__":
    main()
