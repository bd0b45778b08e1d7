#!/usr/bin/env python3
"""Training step time of Hugging Face models imported into Strata, against
the same models in PyTorch 2.x, same machine, same weights, same threads,
interleaved in one run.

    python3 bench/hf_step_time.py --build build [--threads 1,2] [--models gpt2,llama,llama_gqa,falcon]

The models are transformers' GPT2LMHeadModel and LlamaForCausalLM built from
a small configuration (nothing is downloaded) at the size of step_time.py's
GPT: 4 layers, hidden 256, 4 heads, 128 positions, vocabulary 256, batch 8;
LLaMA's MLP is 688 wide (SiLU-gated), its positions rotary; llama_gqa (not
run by default) is that LLaMA with grouped-query attention as Llama 3 has
it, 8 query heads of 32 sharing 2 key and value heads; falcon (not run by
default) is transformers' FalconForCausalLM at that size with multi-query
attention, 8 query heads of 32 and one key and value head (no biases, so
flash_attention is its one fused pass). Each is captured
with torch.export and imported by `strata.import_torch`, the program that
users bring from PyTorch, then trained with AdamW (lr 1e-3) by strata-run as
imported and with the fused passes the model has (fused_passes:
flash_attention, and gemm_epilogue for GPT-2's GELU or rms_norm for LLaMA's
RMSNorm), and by PyTorch as *eager* (the model as Hugging Face
writes it, its default attention, torch's default AdamW), *fused AdamW*
(the same with fused AdamW) and *compiled* (torch.compile of the loss,
fused AdamW).
It prints the median step time of each and Strata / best PyTorch (below 1:
Strata is faster). The losses of the two sides agree (test/torch2/run.sh
checks them); this benchmark only times.

It runs itself under the Python of build/torch2-venv (PyTorch 2.x and
transformers from PyPI), which test/torch2/setup-venv.sh makes when it is
missing.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
# The loss wrapper shared with test/torch2 (imported once PyTorch 2.x is).
sys.path.insert(0, os.path.join(ROOT, "test", "torch2"))
from benchlib import cpu_model  # noqa: E402
from step_time import ensure_torch2, strata_times  # noqa: E402

LAYERS, HIDDEN, HEADS, SEQ, VOCAB, BATCH = 4, 256, 4, 128, 256, 8
# The fused passes each model has something for.
FUSED = {"gpt2": {"gemm_epilogue": True, "flash_attention": True},
         "llama": {"rms_norm": True, "flash_attention": True},
         "llama_gqa": {"rms_norm": True, "flash_attention": True},
         "falcon": {"flash_attention": True}}


def make_model(name):
    import torch
    import transformers
    torch.manual_seed(0)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS,
            n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=0, eos_token_id=0))
    if name == "falcon":
        return transformers.FalconForCausalLM(transformers.FalconConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=8, hidden_dropout=0.0, attention_dropout=0.0,
            bos_token_id=0, eos_token_id=0))
    # llama_gqa: grouped-query attention as Llama 3 has it, four query
    # heads to a key and value head (8 heads of 32, 2 key heads).
    heads, kv = (8, 2) if name == "llama_gqa" else (HEADS, HEADS)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=688,
        num_hidden_layers=LAYERS, num_attention_heads=heads,
        num_key_value_heads=kv, max_position_embeddings=SEQ,
        bos_token_id=0, eos_token_id=0))


class TorchRun:
    """One PyTorch variant of one model (the same weights each time:
    make_model seeds), ready to step."""

    def __init__(self, torch, model, batch, variant):
        self.model = model
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=1e-3,
            **({} if variant == "eager" else {"fused": True}))
        self.loss = (torch.compile(self.model) if variant == "compiled"
                     else self.model)
        self.batch = batch

    def step(self):
        t = time.perf_counter()
        self.opt.zero_grad()
        self.loss(*self.batch).backward()
        self.opt.step()
        return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--workdir", default="/tmp/strata-hf-bench")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    ensure_torch2(build)
    import numpy as np
    import torch
    import transformers
    import strata.import_torch as importer
    from causal_lm import CausalLM
    os.makedirs(args.workdir, exist_ok=True)
    print("cpu: %s, %d logical cores; PyTorch %s, transformers %s" % (
        cpu_model(), os.cpu_count(), torch.__version__,
        transformers.__version__))
    # PyTorch steps one random batch again and again; strata-run reads its
    # default text data (the vocabulary is 256): the step time does not
    # depend on the tokens.
    rng = np.random.default_rng(1)
    batch = tuple(torch.from_numpy(t)
                  for t in rng.integers(0, VOCAB, (2, BATCH, SEQ)))
    adamw = {"optimizer": {"type": "adamw", "learning_rate": 0.001}}
    print()
    print("| model | threads | Strata ms | Strata fused ms | eager ms"
          " | fused AdamW ms | compiled ms | Strata / best | fused / best |")
    print("| --- " * 9 + "|")
    for name in args.models.split(","):
        program = importer.import_module(
            CausalLM(make_model(name)), batch,
            input_names=["tokens", "targets"], capture="export")
        path = os.path.join(args.workdir, name + ".mlir")
        program.save(path)
        weights = os.path.join(args.workdir, name + ".safetensors")
        program.save_weights(weights)
        extra = ("--init", weights)
        strategies = {}
        for key, fused in (("strata", None), ("fused", FUSED[name])):
            strategies[key] = os.path.join(args.workdir,
                                           "%s-%s.json" % (name, key))
            with open(strategies[key], "w") as f:
                json.dump(dict(adamw, **({"fused_passes": dict(
                    enable=True, **fused)} if fused else {})), f)
        for n in args.threads.split(","):
            n = int(n)
            torch.set_num_threads(n)
            variants = {v: TorchRun(torch, CausalLM(make_model(name)),
                                    batch, v)
                        for v in ("eager", "tuned", "compiled")}
            times = {k: [] for k in list(strategies) + list(variants)}
            for _ in range(args.rounds):
                for k, strategy in strategies.items():
                    times[k] += strata_times(
                        build, path, strategy, n, args.steps, args.warmup,
                        os.path.join(args.workdir, name + ".report.json"),
                        extra)
                for v, r in variants.items():
                    ms = [r.step() for _ in range(args.warmup + args.steps)]
                    times[v] += ms[args.warmup:]
            med = {k: statistics.median(v) for k, v in times.items()}
            best = min(med[v] for v in variants)
            print("| HF %s %dL h%d s%d b%d | %d | %.1f | %.1f | %.1f | %.1f"
                  " | %.1f | %.2f | %.2f |" % (
                      name, LAYERS, HIDDEN, SEQ, BATCH, n, med["strata"],
                      med["fused"], med["eager"], med["tuned"],
                      med["compiled"], med["strata"] / best,
                      med["fused"] / best), flush=True)


if __name__ == "__main__":
    main()
