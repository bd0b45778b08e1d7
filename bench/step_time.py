#!/usr/bin/python3
"""Step time of strata-run (CPU runtime) against PyTorch eager, same machine,
same thread count pinned on both sides.

For each model it prints Strata's and PyTorch's median step time, the ratio
Strata/PyTorch (below 1: Strata is faster), and the GEMM throughput each
achieves as a fraction of this machine's fp32 GEMM rate (measured here with
torch.mm on 1024^3, the same thread count). The FLOPs of a step are the
matrix products' (strata-program-stats' matmul-flops, gradients included).

    /usr/bin/python3 bench/step_time.py --build build --threads 1
    /usr/bin/python3 bench/step_time.py --build build --threads 2 --models gpt

Both sides start from the same weights (strata-run --steps 0 --save) and
train with AdamW; PyTorch uses its fused GELU/softmax/layer-norm kernels and
OpenBLAS (Debian's libopenblas0-pthread, set up by .ci/setup-debian.sh).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "reference"))

MODELS = {
    "mlp": {"gen": ["mlp", "--sizes", "784,1024,1024,10", "--batch", "256"],
            "desc": "MLP 784-1024-1024-10, batch 256"},
    "gpt": {"gen": ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4",
                    "--seq", "128", "--vocab", "256", "--batch", "8"],
            "desc": "GPT 4 layers, hidden 256, 4 heads, seq 128, batch 8"},
}


# strata-run gets the environment as it was, not the PyTorch pinning below
# (it sets its own threads with --cpu-threads).
STRATA_ENV = dict(os.environ)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=STRATA_ENV, **kw).stdout


def gemm_rate(torch):
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(5):
            a @ b
        best = min(best, (time.perf_counter() - t) / 5)
    return 2 * 1024 ** 3 / best / 1e9


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


def strata_step_ms(build, program, strategy, threads, steps, warmup, workdir,
                   name):
    report = os.path.join(workdir, name + ".report.json")
    run([os.path.join(build, "bin", "strata-run"), program, "--strategy",
         strategy, "--steps", str(warmup + steps), "--cpu-threads",
         str(threads), "--report", report, "--quiet"])
    with open(report) as f:
        times = json.load(f)["step_time_ms"][warmup:]
    return statistics.median(times), json.load(open(report))


def torch_step_ms(torch, compare, model, init, threads, steps, warmup):
    params = {n: t.float().requires_grad_() for n, t in init.items()
              if "moment" not in n and n != "step"}
    opt = torch.optim.AdamW(params.values(), lr=1e-3, eps=1e-8,
                            weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    if model == "mlp":
        batch = {"features": torch.randn(256, 784, generator=g),
                 "labels": torch.randint(0, 10, (256,), generator=g)}
        loss_fn = lambda p, b: compare.mlp_loss(p, b, 3)  # noqa: E731
    else:
        tokens = torch.randint(0, 256, (8, 129), generator=g)
        batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}
        loss_fn = lambda p, b: compare.gpt_loss(p, b, 4, 4)  # noqa: E731
    times = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(params, batch)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times[warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", default="mlp,gpt")
    ap.add_argument("--workdir", default="/tmp/strata-bench")
    args = ap.parse_args()
    # Pin PyTorch's intra-op threads and its BLAS before importing it.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    # Idle OpenMP workers must not spin against OpenBLAS's own threads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import compare_torch as compare
    torch.set_num_threads(args.threads)
    os.makedirs(args.workdir, exist_ok=True)

    peak = gemm_rate(torch)
    print("machine: fp32 GEMM 1024^3 (torch.mm) %.1f GFLOP/s on %d thread(s)"
          % (peak, args.threads))
    strategy = os.path.join(args.workdir, "adamw.json")
    with open(strategy, "w") as f:
        json.dump({"optimizer": {"type": "adamw", "learning_rate": 0.001}}, f)
    print("%-52s %10s %10s %7s %16s %16s" % (
        "model", "strata ms", "torch ms", "ratio", "strata GFLOP/s",
        "torch GFLOP/s"))
    for name in args.models.split(","):
        m = MODELS[name]
        program = os.path.join(args.workdir, name + ".mlir")
        run([os.path.join(args.build, "bin", "strata-gen")] + m["gen"] +
            ["-o", program])
        init = os.path.join(args.workdir, name + ".init.safetensors")
        run([os.path.join(args.build, "bin", "strata-run"), program,
             "--strategy", strategy, "--steps", "0", "--save", init,
             "--quiet"])
        flops = matmul_flops(args.build, program, strategy)
        ours, report = strata_step_ms(args.build, program, strategy,
                                      args.threads, args.steps, args.warmup,
                                      args.workdir, name)
        theirs = torch_step_ms(torch, compare, name,
                               compare.read_safetensors(init), args.threads,
                               args.steps, args.warmup)
        g_ours, g_theirs = flops / ours / 1e6, flops / theirs / 1e6
        print("%-52s %10.2f %10.2f %7.2f %8.1f (%3.0f%%) %8.1f (%3.0f%%)" % (
            m["desc"], ours, theirs, ours / theirs, g_ours,
            100 * g_ours / peak, g_theirs, 100 * g_theirs / peak))
        print("  strata: planned peak %.1f MB, kernel scratch %.1f MB, "
              "process RSS %.1f MB" % (
                  report["planned_peak_bytes"][0] / 2 ** 20,
                  report["scratch_bytes"] / 2 ** 20,
                  report["measured_peak_bytes"][0] / 2 ** 20))


if __name__ == "__main__":
    main()
