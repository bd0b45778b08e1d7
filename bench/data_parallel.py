#!/usr/bin/env python3
"""Data-parallel speed-up on this machine: Strata's data parallelism against
PyTorch 2.x's DistributedDataParallel, the same GPT, weights and global
batch, one thread per rank, interleaved in one run.

    python3 bench/data_parallel.py --build build [--nproc 2] [--rounds 3]

Each round runs, in turn: strata-run on one rank and on --nproc ranks
(`--nproc N`, one thread each; also with --blocking-collectives), then
PyTorch in one process and under DDP on --nproc processes (gloo over
loopback, one thread each, each process pinned to its own core). Both
sides' PyTorch runs use its tuned step (fused AdamW,
scaled_dot_product_attention, addmm), DDP's default 25 MB gradient buckets
overlapping the backward pass. Each rank trains its share of the same
global batch (8 rows by default). It prints the median step time of each
run (rank 0's clock, steps after --warmup) per round and overall, and each
side's speed-up: one rank's step time over N ranks' (N is ideal).

It runs itself under the Python of build/torch2-venv (PyTorch 2.x from
PyPI), which test/torch2/setup-venv.sh makes when it is missing.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

# step_time also puts test/reference (compare_torch) and test/gpu
# (torch_gpt) on the path, here and in the spawned PyTorch processes.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, run  # noqa: E402
from step_time import MODELS, ensure_torch2, strata_times  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_worker(rank, world, port, init_path, layers, heads, rows, steps,
                 out):
    """One process of PyTorch's run: `world` 1 is the plain step, more is
    DDP. Rank 0 writes its step times (ms) to `out`."""
    import torch
    import torch.distributed as dist
    import compare_torch as compare
    from torch_gpt import gpt_loss_tuned
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    init = compare.read_safetensors(init_path)

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # ParameterDict keys cannot hold '.'.
            self.p = torch.nn.ParameterDict({
                n.replace(".", "/"): torch.nn.Parameter(t.float().clone())
                for n, t in init.items()
                if "moment" not in n and n != "step"})

        def forward(self, batch):
            p = {n.replace("/", "."): t for n, t in self.p.items()}
            return gpt_loss_tuned(torch, p, batch, layers, heads)

    model = Gpt()
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" %
                                port, rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8,
                            weight_decay=0.01, fused=True)
    seq, vocab = init["wpe"].shape[0], init["wte"].shape[0]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g)
    share = rows // world
    tokens = tokens[rank * share:(rank + 1) * share]
    batch = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:]}
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        opt.zero_grad()
        model(batch).backward()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)


def torch_times(args, world, init_path, m, rows, workdir):
    import torch.multiprocessing as mp
    out = os.path.join(workdir, "torch-%d.json" % world)
    mp.spawn(torch_worker, nprocs=world,
             args=(world, free_port(), init_path, m["layers"], m["heads"],
                   rows, args.warmup + args.steps, out))
    with open(out) as f:
        return json.load(f)[args.warmup:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt", choices=["gpt", "gpt768"])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=17)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None,
                    help="scratch directory (default: a new temporary one)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    n = args.nproc
    m = MODELS[args.model]
    rows = int(m["gen"][m["gen"].index("--batch") + 1])
    if n < 2 or rows % n:
        sys.exit("--nproc must be at least 2 and divide the batch of %d rows"
                 % rows)
    ensure_torch2(build)
    import torch
    workdir = args.workdir or tempfile.mkdtemp(prefix="strata-dp-bench-")
    os.makedirs(workdir, exist_ok=True)
    print("cpu: %s, %d logical cores; PyTorch %s; %d ranks x 1 thread" % (
        cpu_model(), os.cpu_count(), torch.__version__, n), flush=True)
    program = os.path.join(workdir, args.model + ".mlir")
    run([os.path.join(build, "bin", "strata-gen")] + m["gen"] +
        ["-o", program])
    strategy = os.path.join(workdir, "adamw.json")
    with open(strategy, "w") as f:
        json.dump({"optimizer": {"type": "adamw", "learning_rate": 0.001}}, f)
    init_path = os.path.join(workdir, "init.safetensors")
    run([os.path.join(build, "bin", "strata-run"), program, "--strategy",
         strategy, "--steps", "0", "--save", init_path, "--quiet"])
    report = os.path.join(workdir, "report.json")

    def strata(nproc, *extra):
        return lambda: strata_times(
            build, program, strategy, 1, args.steps, args.warmup, report,
            (["--nproc", str(nproc)] if nproc > 1 else []) + list(extra))

    def pytorch(world):
        return lambda: torch_times(args, world, init_path, m, rows, workdir)

    runs = [
        ("Strata, 1 rank", strata(1)),
        ("Strata, %d ranks" % n, strata(n)),
        ("Strata, %d ranks, blocking collectives" % n,
         strata(n, "--blocking-collectives")),
        ("PyTorch, 1 process", pytorch(1)),
        ("PyTorch DDP, %d processes" % n, pytorch(n)),
    ]
    times = {name: [] for name, _ in runs}
    medians = {name: [] for name, _ in runs}
    for r in range(args.rounds):
        for name, fn in runs:
            t = fn()
            times[name] += t
            medians[name].append(statistics.median(t))
        print("round %d: %s" % (r + 1, ", ".join(
            "%s %.1f ms" % (name, medians[name][-1]) for name, _ in runs)),
            flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print()
    print("%s, global batch as generated, median ms/step of %d rounds x %d"
          " steps:" % (m["desc"], args.rounds, args.steps))
    print()
    print("| run | ms/step | per round | speed-up |")
    print("| --- | --- | --- | --- |")
    for name, _ in runs:
        base = med["PyTorch, 1 process" if name.startswith("PyTorch")
                   else "Strata, 1 rank"]
        print("| %s | %.1f | %s | %.2fx |" % (
            name, med[name], " / ".join("%.1f" % x for x in medians[name]),
            base / med[name]))
    print()
    print("Strata on %d ranks / PyTorch DDP on %d processes: %.2f" % (
        n, n, med["Strata, %d ranks" % n] / med["PyTorch DDP, %d processes" % n]))


if __name__ == "__main__":
    main()
