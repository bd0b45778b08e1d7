#!/usr/bin/env python3
"""The CPU runtime's f32 GEMM on the products of the step-time benchmark's
models, against PyTorch 2.x's torch.mm, same machine, same threads: GFLOP/s
per shape of

- Strata's default path on this processor (its packed GEMM where the
  widest kernels the processor runs are AVX2, oneDNN's matmul primitive on
  AVX-512 processors);
- oneDNN's matmul primitive (the runtime under STRATA_CPU_ISA=baseline,
  where it runs every product);
- torch.mm on the same layouts (a transposed operand as a transposed view).

    python3 bench/gemm_shapes.py --build build [--threads 1,2]

Best of 5 calls after 3 warm-ups, hot caches. It runs itself under the
Python of build/torch2-venv (test/torch2/setup-venv.sh makes it), and
measures oneDNN's path in a child process (the kernel build is chosen once
per process).
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import STRATA_ENV, cpu_model  # noqa: E402
from step_time import best_rate, ensure_torch2, strata_gemm_rate  # noqa: E402

# (m, n, k, A transposed, B transposed): the forward products, the input
# gradients (B transposed) and the weight gradients (A transposed) of the
# step-time benchmark's GPTs (1024 tokens) and MLP (batch 256).
SHAPES = {
    "GPT h768": [(1024, 2304, 768, 0, 0), (1024, 768, 2304, 0, 1),
                 (768, 2304, 1024, 1, 0), (1024, 3072, 768, 0, 0),
                 (1024, 768, 3072, 0, 1), (768, 3072, 1024, 1, 0),
                 (1024, 768, 3072, 0, 0), (1024, 3072, 768, 0, 1),
                 (3072, 768, 1024, 1, 0)],
    "GPT h256": [(1024, 768, 256, 0, 0), (1024, 256, 768, 0, 1),
                 (256, 768, 1024, 1, 0), (1024, 1024, 256, 0, 0),
                 (1024, 256, 1024, 0, 1), (256, 1024, 1024, 1, 0)],
    "MLP": [(256, 1024, 784, 0, 0), (256, 1024, 1024, 0, 0),
            (256, 1024, 1024, 0, 1), (1024, 1024, 256, 1, 0),
            (784, 1024, 256, 1, 0), (256, 10, 1024, 0, 0),
            (256, 1024, 10, 0, 1)],
}


def strata_rates(build, threads):
    return {"isa": isa(build),
            "rates": [strata_gemm_rate(build, threads, *s)
                      for shapes in SHAPES.values() for s in shapes]}


def isa(build):
    import ctypes
    lib = ctypes.CDLL(os.path.join(build, "lib", "libstrata_runtime_cpu.so"))
    lib.strata_rt_isa.restype = ctypes.c_char_p
    return lib.strata_rt_isa().decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--strata-only", type=int, metavar="THREADS",
                    help=argparse.SUPPRESS)  # (the child process)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if args.strata_only:
        print(json.dumps(strata_rates(build, args.strata_only)))
        return
    ensure_torch2(build)
    import torch
    print("cpu: %s, %d logical cores; PyTorch %s; Strata's kernels: %s" % (
        cpu_model(), os.cpu_count(), torch.__version__, isa(build)))
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        ours = strata_rates(build, threads)["rates"]
        env = dict(STRATA_ENV, STRATA_CPU_ISA="baseline")
        onednn = json.loads(subprocess.run(
            [sys.executable, __file__, "--build", build, "--strata-only",
             str(threads)], env=env, check=True, capture_output=True,
            text=True).stdout)["rates"]
        print("\n%d thread(s), GFLOP/s:\n" % threads)
        print("| model | m x n x k | Strata | oneDNN primitive | torch.mm |"
              " Strata / torch |")
        print("| --- | --- | --- | --- | --- | --- |")
        i = 0
        for model, shapes in SHAPES.items():
            for m, n, k, ta, tb in shapes:
                a = torch.randn(k, m).t() if ta else torch.randn(m, k)
                b = torch.randn(n, k).t() if tb else torch.randn(k, n)
                theirs = best_rate(lambda: torch.mm(a, b), 2 * m * n * k)
                print("| %s | %d x %d x %d%s%s | %.1f | %.1f | %.1f | %.2f |" % (
                    model, m, n, k, " (A^T)" if ta else "",
                    " (B^T)" if tb else "", ours[i], onednn[i], theirs,
                    ours[i] / theirs), flush=True)
                i += 1


if __name__ == "__main__":
    main()
