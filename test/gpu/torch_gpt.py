#!/usr/bin/env python3
"""PyTorch's side of the GPU benchmark: the GPT of strata-gen (pre-LayerNorm
blocks, learned positions, tanh GELU, LM head tied to the token embedding,
no dropout) at GPT-2 124M's shape, trained with PyTorch's fastest settings
(bf16 autocast, fused AdamW, scaled_dot_product_attention, torch.compile)
on the same device; prints "time <ms> ms/step" like step_driver --time.

  python3 torch_gpt.py --batch 4 [--steps 20] [--eager]
"""
import argparse
import time

LAYERS, HIDDEN, HEADS, SEQ, VOCAB = 12, 768, 12, 1024, 50257


def gpt_loss_tuned(torch, p, batch, layers, heads):
    """strata-gen's GPT with PyTorch's fast paths: fused attention (SDPA,
    causal) and addmm for the biased products (bench/step_time.py's CPU
    peer uses it too)."""
    F = torch.nn.functional
    tokens, targets = batch["tokens"], batch["targets"]
    b, s = tokens.shape
    h = p["wte"].shape[1]
    d = h // heads

    def linear(x, name):
        return torch.addmm(p[name + ".bias"], x.reshape(-1, x.shape[-1]),
                           p[name + ".weight"]).reshape(*x.shape[:-1], -1)

    def ln(x, name):
        return F.layer_norm(x, (h,), p[name + ".weight"], p[name + ".bias"],
                            eps=1e-5)

    def split(x):
        return x.reshape(b, s, heads, d).transpose(1, 2)

    x = p["wte"][tokens] + p["wpe"]
    for l in range(layers):
        pre = "h%d." % l
        y = ln(x, pre + "ln_1")
        q, k, v = (split(linear(y, pre + "attn." + n)) for n in "qkv")
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + linear(ctx.transpose(1, 2).reshape(b, s, h),
                       pre + "attn.proj")
        y = ln(x, pre + "ln_2")
        y = F.gelu(linear(y, pre + "mlp.fc"), approximate="tanh")
        x = x + linear(y, pre + "mlp.proj")
    x = ln(x, "ln_f")
    logits = x.reshape(-1, h) @ p["wte"].t()
    return F.cross_entropy(logits, targets.reshape(-1))


def make_params(torch, device):
    g = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(device)

    p = {"wte": w(VOCAB, HIDDEN), "wpe": w(SEQ, HIDDEN),
         "ln_f.weight": torch.ones(HIDDEN, device=device),
         "ln_f.bias": torch.zeros(HIDDEN, device=device)}
    for l in range(LAYERS):
        pre = "h%d." % l
        for ln in ("ln_1", "ln_2"):
            p[pre + ln + ".weight"] = torch.ones(HIDDEN, device=device)
            p[pre + ln + ".bias"] = torch.zeros(HIDDEN, device=device)
        for name, shape in (("attn.q", (HIDDEN, HIDDEN)),
                            ("attn.k", (HIDDEN, HIDDEN)),
                            ("attn.v", (HIDDEN, HIDDEN)),
                            ("attn.proj", (HIDDEN, HIDDEN)),
                            ("mlp.fc", (HIDDEN, 4 * HIDDEN)),
                            ("mlp.proj", (4 * HIDDEN, HIDDEN))):
            p[pre + name + ".weight"] = w(*shape)
            p[pre + name + ".bias"] = torch.zeros(shape[1], device=device)
    return {n: t.requires_grad_() for n, t in p.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--eager", action="store_true",
                    help="no torch.compile")
    ap.add_argument("--device", default="cuda",
                    help="cuda (the benchmark), or cpu to try the script")
    args = ap.parse_args()
    import torch
    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = True
    params = make_params(torch, device)
    opt = torch.optim.AdamW(params.values(), lr=6e-4, weight_decay=0.1,
                            fused=True)
    g = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, VOCAB, (args.batch, SEQ + 1), generator=g)
    tokens = tokens.to(device)
    batch = {"tokens": tokens[:, :-1].contiguous(),
             "targets": tokens[:, 1:].contiguous()}

    def loss(p, b):
        return gpt_loss_tuned(torch, p, b, LAYERS, HEADS)

    loss_fn = loss if args.eager else torch.compile(loss)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn(params, batch)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):  # warm-up (compilation)
        step()
    sync()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print("device %s, torch %s" % (name, torch.__version__))
    print("time %.3f ms/step" % (sum(times) / len(times)))


if __name__ == "__main__":
    main()
