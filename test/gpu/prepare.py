#!/usr/bin/env python3
"""Prepares the GPU check of the CUDA runtime on a machine with MLIR.

A machine with a GPU may have no MLIR and no Strata build, so this script
writes a self-contained directory (the bundle) that needs only CMake, a C++
compiler and the CUDA toolkit there:

  src/        the CUDA runtime's sources, the ABI header, Random123's headers
  kernels/    every kernel's outputs on the CPU runtime (kernel_check write)
  programs/   per test program: the step as an object file lowered for the
              CUDA target, its initial parameters and state (p<i>.bin in the
              order of the lowered module's strata.rt.persistent), each
              step's inputs (s<step>.in<j>.bin) and the CPU runtime's losses
  benches/    GPT-2 124M (bf16 o2) steps for the CUDA target at batch 4 and
              16, unfused and with fused attention (and at batch 4 with the
              softmax on the amp white list), with one batch of random
              tokens, for the tokens/s benchmark against PyTorch
              (torch_gpt.py); their parameters start at zero (a GPU's GEMMs
              take as long whatever the values). Their steps are emitted
              with tracing, and sites.txt names their ops, for run.sh
              --profile
  CMakeLists.txt, run.sh, kernel_check.cpp, step_driver.c,
  fragment_probe.cu, compare_losses.py

Copy the bundle to the GPU machine and run `bash run.sh` there.

  python3 test/gpu/prepare.py --build build --out build/gpu-check
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# name: (strata-gen arguments, strategy YAML, steps, seed, loss rtol). f32
# programs: 1e-4 (TF32 off; sums in other orders). bf16: 1e-2, the bound the
# project sets for bf16 against another implementation (PyTorch's
# autocast); each side rounds its GEMMs' f32 sums to bf16 after summing in
# its own order.
GPT = ["gpt", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32",
       "--vocab", "256", "--batch", "4", "--dropout", "0.1"]
# With dropout on the attention probabilities too: fused attention draws
# the dropout's mask in its kernels.
GPT_ATTENTION_DROPOUT = GPT + ["--attention-dropout", "0.1"]
PROGRAMS = {
    "gpt": (GPT, "optimizer: {type: adamw, learning_rate: 0.001}\n", 20, 3,
            1e-4),
    "gpt-fused-recompute-merge": (
        GPT_ATTENTION_DROPOUT,
        "optimizer: {type: adamw, learning_rate: 0.001}\n"
        "recompute: {enable: true, checkpoints: [h0, h1]}\n"
        "gradient_merge: {enable: true, k_steps: 2}\n"
        "fused_passes: {enable: true, gemm_epilogue: true, dropout_add: true,"
        " flash_attention: true}\n", 20, 3, 1e-4),
    "mlp-lamb-clip": (
        ["mlp", "--sizes", "32,64,64,10", "--batch", "16"],
        "optimizer: {type: lamb, learning_rate: 0.01, grad_clip_norm: 0.5}\n",
        20, 5, 1e-4),
    # A regression with a mean-squared loss over micro-batches: the
    # reduction's gradient (a broadcast copy, scaled).
    "mlp-mse-merge": (
        ["mlp", "--sizes", "32,64,64,8", "--batch", "16", "--loss", "mse"],
        "optimizer: {type: sgd, learning_rate: 0.05}\n"
        "gradient_merge: {enable: true, k_steps: 2}\n", 20, 5, 1e-4),
    # bf16 o2 with every fusion: bf16 GEMMs with the forward and backward
    # epilogues, bf16 fused attention, master weights.
    "gpt-bf16-o2-fused": (
        GPT_ATTENTION_DROPOUT,
        "optimizer: {type: adamw, learning_rate: 0.001}\n"
        "amp: {enable: true, dtype: bfloat16, level: o2}\n"
        "fused_passes: {enable: true, gemm_epilogue: true, dropout_add: true,"
        " flash_attention: true}\n", 20, 3, 1e-2),
}


# GPT-2 124M (llm.c's benchmark shape), bf16 o2, AdamW, no dropout; with
# the GEMM epilogues, and with fused attention too.
BENCH_STRATEGY = ("optimizer: {type: adamw, learning_rate: 0.0006, "
                  "weight_decay: 0.1}\n"
                  "amp: {enable: true, dtype: bfloat16, level: o2}\n"
                  "fused_passes: {enable: true, gemm_epilogue: true")
BENCHES = {}
for b in (4, 16):
    BENCHES["gpt2-124m-b%d" % b] = (b, BENCH_STRATEGY + "}\n")
    BENCHES["gpt2-124m-b%d-flash" % b] = (
        b, BENCH_STRATEGY + ", flash_attention: true}\n")
# Unfused, with the softmax on the amp white list: it reads and writes bf16
# instead of f32 between casts (Paddle's black list keeps it in f32).
BENCHES["gpt2-124m-b4-white-softmax"] = (4, BENCH_STRATEGY.replace(
    "level: o2}", "level: o2, custom_white_list: [softmax]}") + "}\n")


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True,
                          **kw).stdout


def safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = body[begin:end]
    return tensors


def low_precision_type(strategy):
    """The amp dtype of a strategy ("bfloat16" or "float16"; Paddle's
    default is float16), or None without amp."""
    if "amp:" not in strategy:
        return None
    m = re.search(r"dtype:\s*(\w+)", strategy)
    return m.group(1) if m else "float16"


def round_f32(data, dtype):
    """f32 bytes rounded to nearest, ties to even, to bf16 or f16 bytes, as
    the runtimes round."""
    n = len(data) // 4
    if dtype == "float16":
        return struct.pack("<%de" % n, *struct.unpack("<%df" % n, data))
    out = []
    for u in struct.unpack("<%dI" % n, data):
        if (u & 0x7fffffff) > 0x7f800000:
            out.append(0x7fc0)
        else:
            out.append((u + 0x7fff + ((u >> 16) & 1)) >> 16)
    return struct.pack("<%dH" % n, *out)


def prepare_program(name, spec, build, out):
    gen, strategy, steps, seed, rtol = spec
    bindir = os.path.join(build, "bin")
    work = os.path.join(out, "programs", name)
    os.makedirs(work)
    program = os.path.join(work, "program.mlir")
    with open(program, "w") as f:
        f.write(run(os.path.join(bindir, "strata-gen"), *gen))
    with open(os.path.join(work, "strategy.yaml"), "w") as f:
        f.write(strategy)
    strata_run = [os.path.join(bindir, "strata-run"), program, "--strategy",
                  os.path.join(work, "strategy.yaml"), "--seed", str(seed),
                  "--quiet"]
    run(*strata_run, "--backend", "cuda", "--emit=obj", "-o",
        os.path.join(work, "step.o"))
    lowered = run(*strata_run, "--backend", "cuda", "--emit=mlir", "-o", "-")
    persistent = json.loads(re.search(r"strata\.rt\.persistent = (\[[^]]*\])",
                                      lowered).group(1))
    run(*strata_run, "--steps", "0", "--save", os.path.join(work, "init.st"))
    expected = run(*strata_run, "--steps", str(steps), "--dump-batches",
                   os.path.join(work, "batches.st"))
    with open(os.path.join(work, "cpu.txt"), "w") as f:
        f.write(expected)
    init = safetensors(os.path.join(work, "init.st"))
    # A checkpoint stores a low-precision parameter as its f32 master weight
    # (which has no entry of its own): the master takes those bytes, the
    # parameter the same values rounded to its type.
    low = low_precision_type(strategy)
    missing = []
    for i, p in enumerate(persistent):
        if p.endswith(".master") and p[:-len(".master")] in init:
            data = init[p[:-len(".master")]]
        elif p in init and p + ".master" in persistent:
            data = round_f32(init[p], low)
        elif p in init:
            data = init[p]
        else:
            missing.append(p)
            continue
        with open(os.path.join(work, "p%d.bin" % i), "wb") as f:
            f.write(data)
    # The step's inputs, in the order of @train_step's arguments.
    signature = re.search(r"func\.func @train_step\(([^)]*)\)",
                          open(program).read()).group(1)
    inputs = re.findall(r'strata\.name = "([^"]+)"', signature)
    batches = safetensors(os.path.join(work, "batches.st"))
    for s in range(steps):
        for j, input_name in enumerate(inputs):
            with open(os.path.join(work, "s%d.in%d.bin" % (s, j)), "wb") as f:
                f.write(batches["step%d.%s" % (s, input_name)])
    with open(os.path.join(work, "run.txt"), "w") as f:
        f.write("%d %d %g\n" % (steps, seed, rtol))
    for f in ("init.st", "batches.st"):
        os.remove(os.path.join(work, f))
    print("%s: %d persistent buffers (%s start at zero), %d steps" %
          (name, len(persistent),
           ", ".join(missing) if missing else "none", steps))


def prepare_bench(name, batch, strategy_text, build, out):
    bindir = os.path.join(build, "bin")
    work = os.path.join(out, "benches", name)
    os.makedirs(work)
    seq, vocab = 1024, 50257
    program = os.path.join(work, "program.mlir")
    with open(program, "w") as f:
        f.write(run(os.path.join(bindir, "strata-gen"), "gpt", "--layers",
                    "12", "--hidden", "768", "--heads", "12", "--seq",
                    str(seq), "--vocab", str(vocab), "--batch", str(batch),
                    "--dropout", "0"))
    strategy = os.path.join(work, "strategy.yaml")
    with open(strategy, "w") as f:
        f.write(strategy_text)
    # The step records its ops' times when the driver profiles it
    # (--profile), named by the sites of sites.txt.
    strata_run = [os.path.join(bindir, "strata-run"), program, "--strategy",
                  strategy, "--backend", "cuda"]
    run(*strata_run, "--emit=obj", "--emit-tracing", "-o",
        os.path.join(work, "step.o"))
    lowered = run(*strata_run, "--emit=mlir", "-o", "-")
    sites = re.search(r"strata\.rt\.sites = \[(.*?)\]", lowered).group(1)
    with open(os.path.join(work, "sites.txt"), "w") as f:
        for site in re.findall(r'"((?:[^"\\]|\\.)*)"', sites):
            f.write(site.replace(os.path.dirname(program) + "/", "") + "\n")
    # One batch of tokens and next tokens (int32), seeded.
    state = 12345
    tokens = []
    for _ in range(batch * (seq + 1)):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        tokens.append((state >> 33) % vocab)
    rows = [tokens[r * (seq + 1):(r + 1) * (seq + 1)] for r in range(batch)]
    for j, part in enumerate((lambda r: r[:-1], lambda r: r[1:])):
        with open(os.path.join(work, "s0.in%d.bin" % j), "wb") as f:
            for r in rows:
                f.write(struct.pack("<%di" % seq, *part(r)))
    with open(os.path.join(work, "run.txt"), "w") as f:
        f.write("%d %d %d\n" % (batch, seq, vocab))
    print("%s: batch %d x %d tokens" % (name, batch, seq))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out or os.path.join(build, "gpu-check"))
    if os.path.exists(out):
        shutil.rmtree(out)
    src = os.path.join(out, "src")
    shutil.copytree(os.path.join(ROOT, "runtime", "common"),
                    os.path.join(src, "runtime", "common"))
    shutil.copytree(os.path.join(ROOT, "runtime", "cuda"),
                    os.path.join(src, "runtime", "cuda"))
    os.makedirs(os.path.join(src, "include", "strata", "Runtime"))
    shutil.copy(os.path.join(ROOT, "include", "strata", "Runtime",
                             "StrataRuntime.h"),
                os.path.join(src, "include", "strata", "Runtime"))
    shutil.copytree("/usr/include/Random123",
                    os.path.join(src, "include", "Random123"))
    for f in ("CMakeLists.txt", "run.sh", "kernel_check.cpp", "step_driver.c",
              "fragment_probe.cu", "torch_gpt.py"):
        shutil.copy(os.path.join(HERE, f), out)
    shutil.copy(os.path.join(ROOT, "test", "run", "compare_losses.py"), out)

    kernel_check = os.path.join(build, "bin", "strata-kernel-check")
    print(run(kernel_check, "write", "--runtime",
              os.path.join(build, "lib", "libstrata_runtime_cpu.so"), "--dir",
              os.path.join(out, "kernels")).strip())
    for name, spec in PROGRAMS.items():
        prepare_program(name, spec, build, out)
    for name, (batch, strategy) in BENCHES.items():
        prepare_bench(name, batch, strategy, build, out)
    print("bundle: %s (copy it to the GPU machine, run `bash run.sh`)" % out)


if __name__ == "__main__":
    sys.exit(main())
