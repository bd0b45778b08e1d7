#!/usr/bin/python3
"""Compile time of large training steps: does it grow linearly with layers?

    /usr/bin/python3 bench/compile_time.py --build build [--runs 3]

For GPT-2 XL shapes (hidden 1600, 25 heads, 1024 positions, vocabulary 50257,
batch 4) at 12, 24 and 48 layers, with AdamW, full recompute (every block a
checkpoint) and ZeRO-3 over 4 ranks: the wall time of rank 0's compile
(`strata-opt --strategy`: autodiff, recompute, optimizer, data parallelism,
sharding), of its lowering to the runtime ABI (`--strata-lower-to-runtime`,
which plans the step's memory) and of its machine code (what strata-run does
in-process, here through LLVM's tools: translation to LLVM IR, the IR passes
at O2, code generation without optimization), the ratio per doubling of
layers, and the
static plan's arena against the liveness bound. Then a GPT-3 175B-shaped step
(96 layers, hidden 12288, 96 heads, 2048 positions, batch 32) with 8 pipeline
stages (8 micro-batches) x ZeRO-3 over 4 ranks: each of the first and last
stage's programs (rank 0 and rank 28 of 32). Median of --runs runs.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model  # noqa: E402



def timed(cmd, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine_code(llvm_bin, lowered, tmp, runs):
    """Seconds to turn a lowered module into an object file as strata-run
    does: LLVM IR, the IR passes at O2, code generation at O0 for the
    host."""
    ll = os.path.join(tmp, "step.ll")
    bc = os.path.join(tmp, "step.bc")
    obj = os.path.join(tmp, "step.o")
    tools = [
        [os.path.join(llvm_bin, "mlir-translate"), "--mlir-to-llvmir",
         lowered, "-o", ll],
        [os.path.join(llvm_bin, "opt"), "-O2", ll, "-o", bc],
        [os.path.join(llvm_bin, "llc"), "-O0", "-mcpu=native",
         "-relocation-model=pic", "-filetype=obj", bc, "-o", obj],
    ]
    return sum(timed(cmd, runs) for cmd in tools)


def stats(opt, program):
    out = subprocess.run([opt, program, "--strata-program-stats",
                          "-o", os.devnull], check=True, text=True,
                         capture_output=True)
    text = out.stdout + out.stderr
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(": ")
        if key in ("activation-peak-bytes", "planned-arena-bytes"):
            values[key] = int(value)
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", type=int, nargs="+", default=[12, 24, 48])
    ap.add_argument("--skip-gpt3", action="store_true")
    ap.add_argument("--llvm-bin", default="/usr/lib/llvm-22/bin",
                    help="where mlir-translate, opt and llc are")
    args = ap.parse_args()
    gen = os.path.join(args.build, "bin", "strata-gen")
    opt = os.path.join(args.build, "bin", "strata-opt")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical cores")

    with tempfile.TemporaryDirectory(prefix="strata-compile-") as tmp:
        rows = []
        print("| layers | compile s | lower + plan s | machine code s | total s"
              " | x per doubling | arena GB | liveness bound GB |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for layers in args.layers:
            program = os.path.join(tmp, f"xl{layers}.mlir")
            strategy = os.path.join(tmp, f"xl{layers}.yaml")
            compiled = os.path.join(tmp, f"xl{layers}.rank0.mlir")
            subprocess.run([gen, "gpt", "--layers", str(layers), "--hidden",
                            "1600", "--heads", "25", "--seq", "1024",
                            "--vocab", "50257", "--batch", "4", "-o", program],
                           check=True)
            checkpoints = ", ".join(f"h{i}" for i in range(layers))
            with open(strategy, "w") as f:
                f.write("optimizer: {type: adamw}\n"
                        f"recompute: {{enable: true, checkpoints: [{checkpoints}]}}\n"
                        "sharding: {enable: true, stage: 3, degree: 4}\n")
            compile_s = timed([opt, f"--strategy={strategy}", "--world-size=4",
                               "--rank=0", program, "-o", compiled], args.runs)
            lowered = os.path.join(tmp, f"xl{layers}.lowered.mlir")
            lower_s = timed([opt, compiled, "--strata-lower-to-runtime", "-o",
                             lowered], args.runs)
            code_s = machine_code(args.llvm_bin, lowered, tmp, args.runs)
            total = compile_s + lower_s + code_s
            ratio = ""
            if rows and layers == 2 * rows[-1][0]:
                ratio = f"{total / rows[-1][1]:.2f}"
            rows.append((layers, total))
            s = stats(opt, compiled)
            print(f"| {layers} | {compile_s:.2f} | {lower_s:.2f} | {code_s:.2f}"
                  f" | {total:.2f} | {ratio} | {s['planned-arena-bytes'] / 1e9:.2f}"
                  f" | {s['activation-peak-bytes'] / 1e9:.2f} |", flush=True)

        if args.skip_gpt3:
            return
        program = os.path.join(tmp, "gpt3.mlir")
        strategy = os.path.join(tmp, "gpt3.yaml")
        subprocess.run([gen, "gpt", "--layers", "96", "--hidden", "12288",
                        "--heads", "96", "--seq", "2048", "--vocab", "50257",
                        "--batch", "32", "-o", program], check=True)
        with open(strategy, "w") as f:
            f.write("optimizer: {type: adamw}\n"
                    "pipeline: {enable: true, pp_degree: 8, accumulate_steps: 8}\n"
                    "sharding: {enable: true, stage: 3, degree: 4}\n")
        print()
        print("| GPT-3 shape, pp 8 x ZeRO-3 4 | compile s | lower + plan s"
              " | machine code s | total s |")
        print("| --- | --- | --- | --- | --- |")
        for rank, stage in ((0, "first"), (28, "last")):
            compiled = os.path.join(tmp, f"gpt3.rank{rank}.mlir")
            compile_s = timed([opt, f"--strategy={strategy}", "--world-size=32",
                               f"--rank={rank}", program, "-o", compiled],
                              args.runs)
            lowered = os.path.join(tmp, f"gpt3.rank{rank}.lowered.mlir")
            lower_s = timed([opt, compiled, "--strata-lower-to-runtime", "-o",
                             lowered], args.runs)
            code_s = machine_code(args.llvm_bin, lowered, tmp, args.runs)
            print(f"| {stage} stage (rank {rank}) | {compile_s:.2f} |"
                  f" {lower_s:.2f} | {code_s:.2f} |"
                  f" {compile_s + lower_s + code_s:.2f} |", flush=True)


if __name__ == "__main__":
    main()
