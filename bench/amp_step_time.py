#!/usr/bin/env python3
"""Mixed precision: step time and planned memory of Strata in f32, bf16 and
fp16 (levels o1 and o2) against PyTorch 2.x eager with CPU autocast in the
same type (PyTorch has no level o2 of its own: autocast is its mixed
precision), same machine, same thread count, interleaved in one run.

Run it with the Python of a virtual environment that has PyTorch 2.x from
PyPI (test/torch2/setup-venv.sh makes one; Debian's PyTorch 1.13 has no
float16 autocast on the CPU):

    test/torch2/setup-venv.sh build/torch2-venv
    build/torch2-venv/bin/python bench/amp_step_time.py --build build --threads 1

For each model and precision it prints the median step time of both sides,
the ratio Strata / PyTorch (below 1: Strata is faster), and Strata's planned
peak bytes per rank, its activation peak and its parameters + gradients,
each against its f32 run's; then Strata's step in each low-precision mode
against its own f32 step, round by round (the goal for fp16 o2 on CPUs
without f16 arithmetic: no slower than f32). The modes ending in -fused add
Strata's fused passes (f32-fused among them), and compare with f32-fused. Both sides start from the same
weights (strata-run --steps 0 --save) and train with AdamW; PyTorch's
float16 run uses its GradScaler (dynamic loss scaling, as Strata's).

With --rounds N (default 2) every Strata mode and PyTorch's f32 and bf16
runs are measured once per round, interleaved, and the tables give the
median of the rounds' medians, so that a machine whose speed drifts during
the run weighs on every mode alike. PyTorch's float16 autocast step (about
25x slower than the rest on CPUs without f16 GEMM kernels) runs in the
first round only. --no-torch measures Strata's modes alone (the PyTorch
columns then read nan).
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "reference"))

MODELS = {
    "gpt": (["--layers", "4", "--hidden", "256", "--heads", "4", "--seq",
             "128", "--vocab", "256", "--batch", "8"],
            "GPT 4L h256 a4 s128 b8", 4, 4),
    "gpt768": (["--layers", "2", "--hidden", "768", "--heads", "12", "--seq",
                "256", "--vocab", "256", "--batch", "4"],
               "GPT 2L h768 a12 s256 b4 (GEMM-bound)", 2, 12),
}
PRECISIONS = {
    "f32": None,
    "bf16": {"enable": True, "dtype": "bfloat16"},
    "fp16": {"enable": True, "dtype": "float16"},
    "bf16-o2": {"enable": True, "dtype": "bfloat16", "level": "o2"},
    "fp16-o2": {"enable": True, "dtype": "float16", "level": "o2"},
    # With Strata's fused passes (GEMM epilogues, dropout + add, fused
    # attention), against the same PyTorch run as without; Strata's own
    # ratios of these are to f32 with the fused passes.
    "f32-fused": None,
    "bf16-o2-fused": {"enable": True, "dtype": "bfloat16", "level": "o2"},
    "fp16-o2-fused": {"enable": True, "dtype": "float16", "level": "o2"},
}
FUSED = {"enable": True, "gemm_epilogue": True, "dropout_add": True,
         "flash_attention": True}





def strata_step(build, program, strategy, threads, steps, warmup, report):
    run([os.path.join(build, "bin", "strata-run"), program, "--strategy",
         strategy, "--steps", str(warmup + steps), "--cpu-threads",
         str(threads), "--report", report, "--quiet"])
    with open(report) as f:
        r = json.load(f)
    return statistics.median(r["step_time_ms"][warmup:]), {
        "peak": r["planned_peak_bytes"][0],
        "activations": r["activation_peak_bytes"][0],
        "params+grads": r["param_bytes"][0] + r["grad_bytes"][0]}


def torch_step(torch, compare, init, rows, layers, heads, precision, steps,
               warmup):
    params = {n: t.float().requires_grad_() for n, t in init.items()
              if "moment" not in n and n != "step"}
    opt = torch.optim.AdamW(params.values(), lr=1e-3, eps=1e-8,
                            weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    seq, vocab = init["wpe"].shape[0], init["wte"].shape[0]
    tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g)
    batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = (torch.amp.GradScaler("cpu") if dtype == torch.float16 else None)
    times = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        opt.zero_grad()
        if dtype is None:
            loss = compare.gpt_loss(params, batch, layers, heads)
        else:
            with torch.autocast("cpu", dtype=dtype):
                loss = compare.gpt_loss(params, batch, layers, heads).float()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times[warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="gpt,gpt768")
    ap.add_argument("--workdir", default="/tmp/strata-amp-bench")
    ap.add_argument("--no-torch", action="store_true",
                    help="Strata's modes only (PyTorch's CPU autocast takes "
                    "minutes a step of the h768 GPT where the processor has "
                    "no bf16 / f16 arithmetic)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    for name in args.models.split(","):
        if name not in MODELS:
            ap.error("unknown model '%s' (one of %s)" % (name,
                                                         ", ".join(MODELS)))
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    import compare_torch as compare
    torch.set_num_threads(args.threads)
    os.makedirs(args.workdir, exist_ok=True)
    print("cpu: %s; %d thread(s); PyTorch %s; %d round(s)" % (
        cpu_model(), args.threads, torch.__version__, args.rounds))
    print("%-38s %-13s %10s %10s %7s %16s %16s %16s" % (
        "model", "type", "strata ms", "torch ms", "ratio", "planned peak",
        "activations", "params+grads"))
    for name in args.models.split(","):
        gen, desc, layers, heads = MODELS[name]
        rows = int(gen[gen.index("--batch") + 1])
        program = os.path.join(args.workdir, name + ".mlir")
        with open(program, "w") as f:
            f.write(run([os.path.join(args.build, "bin", "strata-gen"), "gpt"]
                        + gen))
        init_path = os.path.join(args.workdir, name + ".init.safetensors")
        strategies = {}
        for precision, amp in PRECISIONS.items():
            strategy = os.path.join(args.workdir,
                                    "%s-%s.json" % (name, precision))
            s = {"optimizer": {"type": "adamw", "learning_rate": 0.001}}
            if amp:
                s["amp"] = amp
            if precision.endswith("-fused"):
                s["fused_passes"] = FUSED
            with open(strategy, "w") as f:
                json.dump(s, f)
            strategies[precision] = strategy
        run([os.path.join(args.build, "bin", "strata-run"), program,
             "--strategy", strategies["f32"], "--steps", "0", "--save",
             init_path, "--quiet"])
        init = compare.read_safetensors(init_path)
        strata_ms = {p: [] for p in PRECISIONS}
        torch_ms = {}
        memory = {}
        for round_ in range(args.rounds):
            for precision, strategy in strategies.items():
                ms, memory[precision] = strata_step(
                    args.build, program, strategy, args.threads, args.steps,
                    args.warmup, os.path.join(
                        args.workdir, "%s-%s.report.json" % (name, precision)))
                strata_ms[precision].append(ms)
            # PyTorch's run of each type (o1 and o2 compare with the same
            # autocast run); float16 in the first round only.
            for peer in ("f32", "bf16", "fp16"):
                if (peer == "fp16" and round_ > 0) or args.no_torch:
                    continue
                torch_ms.setdefault(peer, []).append(torch_step(
                    torch, compare, init, rows, layers, heads, peer,
                    args.steps, args.warmup))
        f32 = memory["f32"]
        ours = {p: statistics.median(v) for p, v in strata_ms.items()}
        for precision in PRECISIONS:
            peer = statistics.median(
                torch_ms.get(precision.split("-")[0], [float("nan")]))
            print("%-38s %-13s %10.1f %10.1f %7.2f" % (
                desc, precision, ours[precision], peer,
                ours[precision] / peer)
                + "".join(" %8.1f MB %4.0f%%" % (
                    memory[precision][k] / 1e6,
                    100.0 * memory[precision][k] / f32[k])
                          for k in ("peak", "activations", "params+grads")))
        # Each mode against Strata's own f32 step of the same round (the
        # fused modes against f32 with the fused passes).
        print("%-38s Strata's step against its f32 step (fused: against "
              "f32-fused), per round:" % desc)
        for precision in PRECISIONS:
            if precision.startswith("f32"):
                continue
            base = "f32-fused" if precision.endswith("-fused") else "f32"
            ratios = [m / f for m, f in zip(strata_ms[precision],
                                            strata_ms[base])]
            print("  %-13s %s (median %.3f)" % (
                precision, " ".join("%.3f" % r for r in ratios),
                statistics.median(ratios)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
