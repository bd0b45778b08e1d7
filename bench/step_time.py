#!/usr/bin/env python3
"""Training step time of strata-run (CPU runtime) against PyTorch 2.x, eager,
tuned and compiled, same machine, same weights and batches, same threads,
interleaved in one run.

    python3 bench/step_time.py --build build [--threads 1,2] [--models ...]

It runs itself under the Python of build/torch2-venv (PyTorch 2.x from
PyPI), which test/torch2/setup-venv.sh makes when it is missing (about 5
GiB, once). For each model and thread count it prints the median step time
of Strata and of three PyTorch runs: *eager* (the model as written, torch's
default AdamW), *tuned* (fused AdamW; for the GPT, scaled_dot_product_attention
with the causal mask and addmm for the biased products) and *compiled*
(torch.compile of the tuned loss, fused AdamW), then Strata / best PyTorch
(below 1: Strata is faster), for Strata's program as written (AdamW) and
with its fused passes (fused_passes: gemm_epilogue, dropout_add and
flash_attention, those the model has; Strata's counterpart of the tuned and
compiled runs), and
*Strata tuned*: the fused passes with --gemm-autotune (each distinct f32
product timed once through each of the runtime's GEMM paths, the fastest
kept).
Each side's GEMM ceiling is measured on the
same threads, an fp32 1024^3 product through its own library (Strata:
strata_rt_gemm of the CPU runtime, its packed GEMM on AVX2 processors and
oneDNN elsewhere; PyTorch: torch.mm, oneDNN/MKL),
and each side's achieved fraction of it is the step's matrix-product FLOPs
(strata-program-stats' matmul-flops, gradients included) over its step time.
Rounds alternate the sides (--rounds) so that a slow spell of the machine
hits both.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "reference"))
# The tuned PyTorch GPT, shared with the GPU benchmark.
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
from torch_gpt import gpt_loss_tuned  # noqa: E402

MODELS = {
    "mlp": {"gen": ["mlp", "--sizes", "784,1024,1024,10", "--batch", "256"],
            "desc": "MLP 784-1024-1024-10 b256",
            # No attention, no dropout: only the GEMM epilogue applies.
            "fused": {"gemm_epilogue": True}},
    "gpt": {"gen": ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4",
                    "--seq", "128", "--vocab", "256", "--batch", "8"],
            "desc": "GPT 4L h256 a4 s128 b8", "layers": 4, "heads": 4},
    "gpt768": {"gen": ["gpt", "--layers", "2", "--hidden", "768", "--heads",
                       "12", "--seq", "256", "--vocab", "256", "--batch", "4"],
               "desc": "GPT 2L h768 a12 s256 b4", "layers": 2, "heads": 12},
}



def ensure_torch2(build):
    """Re-executes this script under the venv's Python (making the venv
    first when it is missing) unless PyTorch 2.x is already importable."""
    try:
        import torch
        if int(torch.__version__.split(".")[0]) >= 2:
            return
    except ImportError:
        pass
    venv = os.path.join(build, "torch2-venv")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([os.path.join(ROOT, "test", "torch2", "setup-venv.sh"),
                        venv], check=True)
    os.execv(python, [python] + sys.argv)




def best_rate(fn, flops, reps=5):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return flops / best / 1e9


def strata_gemm_rate(build, threads, m=1024, n=1024, k=1024, trans_a=0,
                     trans_b=0):
    """GFLOP/s of the CPU runtime's fp32 GEMM, m x n x k (A stored k x m
    when trans_a, B n x k when trans_b), on `threads` threads."""
    lib = ctypes.CDLL(os.path.join(build, "lib", "libstrata_runtime_cpu.so"))

    # StrataRtOptions, every field (strata_rt_default_options writes them
    # all: a shorter struct here is a buffer overrun).
    class Options(ctypes.Structure):
        _fields_ = [("abiVersion", ctypes.c_int64), ("size", ctypes.c_int64),
                    ("seed", ctypes.c_uint64), ("rank", ctypes.c_int64),
                    ("shard", ctypes.c_int64), ("threads", ctypes.c_int64),
                    ("device", ctypes.c_int64), ("tf32", ctypes.c_int64),
                    ("collectiveTimeout", ctypes.c_int64),
                    ("gemmAutotune", ctypes.c_int64)]
    opts = Options()
    lib.strata_rt_default_options(ctypes.byref(opts))
    opts.threads = threads
    err = ctypes.create_string_buffer(512)
    lib.strata_rt_create.restype = ctypes.c_void_p
    ctx = lib.strata_rt_create(ctypes.byref(opts), err, 512)
    if not ctx:
        raise RuntimeError(err.value.decode())
    ctx = ctypes.c_void_p(ctx)
    a, b = (ctypes.c_float * (m * k))(), (ctypes.c_float * (k * n))()
    c = (ctypes.c_float * (m * n))()
    for i in range(m * k):
        a[i] = 1.0 / (1 + i % 7)
    for i in range(k * n):
        b[i] = 1.0 / (1 + i % 5)
    i64 = ctypes.c_int64
    lib.strata_rt_gemm.argtypes = [ctypes.c_void_p] + [i64] * 5 + [
        ctypes.c_void_p, i64, i64, i64, ctypes.c_void_p, i64, i64, i64,
        ctypes.c_void_p, i64, ctypes.c_void_p, i64, i64, i64]
    f32 = 0

    def gemm():
        lib.strata_rt_gemm(ctx, 0, 1, m, n, k, a, f32, 0, trans_a, b, f32, 0,
                           trans_b, c, f32, None, f32, 0, 0)
    rate = best_rate(gemm, 2 * m * n * k)
    lib.strata_rt_destroy(ctx)
    return rate


def matmul_flops(build, program, strategy):
    opt = os.path.join(build, "bin", "strata-opt")
    lowered = run([opt, "--strategy=" + strategy, program])
    stats = subprocess.run([opt, "--strata-program-stats", "-o", "/dev/null"],
                           input=lowered, capture_output=True, text=True,
                           check=True).stderr
    for line in stats.splitlines():
        if line.startswith("matmul-flops:"):
            return int(line.split()[1])
    raise RuntimeError("no matmul-flops in\n" + stats)


def strata_times(build, program, strategy, threads, steps, warmup, report,
                 extra=()):
    """Rank 0's step times (ms) of a strata-run after `warmup` steps;
    `extra`: more strata-run options (--nproc N, ...)."""
    run([os.path.join(build, "bin", "strata-run"), program, "--strategy",
         strategy, "--steps", str(warmup + steps), "--cpu-threads",
         str(threads), "--report", report, "--quiet"] + list(extra))
    with open(report) as f:
        return json.load(f)["step_time_ms"][warmup:]


class TorchRun:
    """One PyTorch variant of one model: its parameters, optimizer, batch
    and loss function, ready to step."""

    def __init__(self, torch, compare, model, init, variant):
        m = MODELS[model]
        self.torch = torch
        self.params = {n: t.float().clone().requires_grad_()
                       for n, t in init.items()
                       if "moment" not in n and n != "step"}
        fused = variant != "eager"
        self.opt = torch.optim.AdamW(self.params.values(), lr=1e-3, eps=1e-8,
                                     weight_decay=0.01,
                                     **({"fused": True} if fused else {}))
        g = torch.Generator().manual_seed(0)
        if model == "mlp":
            self.batch = {"features": torch.randn(256, 784, generator=g),
                          "labels": torch.randint(0, 10, (256,), generator=g)}
            loss = lambda p, b: compare.mlp_loss(p, b, 3)  # noqa: E731
        else:
            seq, vocab = init["wpe"].shape[0], init["wte"].shape[0]
            rows = int(m["gen"][m["gen"].index("--batch") + 1])
            tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g)
            self.batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}
            layers, heads = m["layers"], m["heads"]
            if variant == "eager":
                loss = lambda p, b: compare.gpt_loss(  # noqa: E731
                    p, b, layers, heads)
            else:
                loss = lambda p, b: gpt_loss_tuned(  # noqa: E731
                    torch, p, b, layers, heads)
        self.loss = torch.compile(loss) if variant == "compiled" else loss

    def step(self):
        t = time.perf_counter()
        self.opt.zero_grad()
        self.loss(self.params, self.batch).backward()
        self.opt.step()
        return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="mlp,gpt,gpt768")
    ap.add_argument("--workdir", default="/tmp/strata-step-bench")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    ensure_torch2(build)
    import torch
    import compare_torch as compare
    os.makedirs(args.workdir, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    print("cpu: %s, %d logical cores; PyTorch %s" % (
        cpu_model(), os.cpu_count(), torch.__version__))
    # GEMM ceilings: measured again before every row, the best kept (a
    # single measurement on a shared machine can catch a slow spell).
    ceilings = {n: (0.0, 0.0) for n in threads}
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)

    def measure_ceiling(n):
        torch.set_num_threads(n)
        ours, theirs = ceilings[n]
        ceilings[n] = (max(ours, strata_gemm_rate(build, n)),
                       max(theirs, best_rate(lambda: x @ y, 2 * 1024 ** 3)))
    strategy = os.path.join(args.workdir, "adamw.json")
    adamw = {"optimizer": {"type": "adamw", "learning_rate": 0.001}}
    with open(strategy, "w") as f:
        json.dump(adamw, f)
    print()
    print("| model | threads | Strata ms | Strata fused ms | Strata tuned ms"
          " | eager ms | tuned ms | compiled ms | Strata / best | fused / best"
          " | Strata tuned / best | Strata GEMM % | best PyTorch GEMM % |")
    print("| --- " * 13 + "|")
    for name in args.models.split(","):
        m = MODELS[name]
        program = os.path.join(args.workdir, name + ".mlir")
        run([os.path.join(build, "bin", "strata-gen")] + m["gen"] +
            ["-o", program])
        init_path = os.path.join(args.workdir, name + ".init.safetensors")
        run([os.path.join(build, "bin", "strata-run"), program, "--strategy",
             strategy, "--steps", "0", "--save", init_path, "--quiet"])
        init = compare.read_safetensors(init_path)
        fused = os.path.join(args.workdir, name + ".fused.json")
        with open(fused, "w") as f:
            json.dump(dict(adamw, fused_passes=dict(
                {"enable": True},
                **m.get("fused", {"gemm_epilogue": True, "dropout_add": True,
                                  "flash_attention": True}))), f)
        flops = matmul_flops(build, program, strategy)
        for n in threads:
            measure_ceiling(n)
            variants = {v: TorchRun(torch, compare, name, init, v)
                        for v in ("eager", "tuned", "compiled")}
            times = {k: [] for k in ["strata", "fused", "autotuned"] +
                     list(variants)}
            for _ in range(args.rounds):
                for k, path, extra in (
                        ("strata", strategy, ()), ("fused", fused, ()),
                        ("autotuned", fused, ("--gemm-autotune",))):
                    times[k] += strata_times(
                        build, program, path, n, args.steps, args.warmup,
                        os.path.join(args.workdir, name + ".report.json"),
                        extra)
                for v, r in variants.items():
                    ms = [r.step() for _ in range(args.warmup + args.steps)]
                    times[v] += ms[args.warmup:]
            med = {k: statistics.median(v) for k, v in times.items()}
            best = min(med[v] for v in variants)
            ours, theirs = ceilings[n]
            print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f"
                  " | %.2f | %.2f | %.0f%% of %.0f | %.0f%% of %.0f |" % (
                      m["desc"], n, med["strata"], med["fused"],
                      med["autotuned"], med["eager"], med["tuned"],
                      med["compiled"], med["strata"] / best,
                      med["fused"] / best, med["autotuned"] / best,
                      100 * flops / med["strata"] / 1e6 / ours, ours,
                      100 * flops / best / 1e6 / theirs, theirs), flush=True)
    for n in threads:
        print("fp32 GEMM 1024^3 on %d thread(s), best of the rows' "
              "measurements: Strata %.1f GFLOP/s, PyTorch %.1f GFLOP/s"
              % (n, *ceilings[n]))


if __name__ == "__main__":
    main()
