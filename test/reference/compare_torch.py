#!/usr/bin/env python3
"""Trains the same MLP and GPT with strata-run and with PyTorch and compares
the loss traces.

Both sides start from the same safetensors weights (strata-run --steps 0
--save), consume the same batches (strata-run --dump-batches) and apply the
same optimizer. With --backend reference (float64) PyTorch runs in float64 too
and the traces must agree to rtol 1e-10 (only summation order differs;
measured: <= 4e-16); with --backend cpu (the CPU runtime, float32) PyTorch
runs in float32 and the tolerance is rtol 1e-4. Dropout is 0 here: the two
frameworks draw different masks.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys

import torch

torch.set_num_threads(1)

DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8),
          "I32": (torch.int32, 4), "I64": (torch.int64, 8)}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    payload = data[8 + size:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, _ = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(payload[begin:end]), dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("command failed: %s\n%s" % (" ".join(cmd), result.stderr))
    return result.stdout


def strata_losses(args, program, strategy, steps, workdir, tag):
    init = os.path.join(workdir, tag + ".init.safetensors")
    batches = os.path.join(workdir, tag + ".batches.safetensors")
    common = [args.strata_run, program, "--strategy", strategy, "--seed", "3",
              "--quiet", "--backend", args.backend]
    run(common + ["--steps", "0", "--save", init])
    out = run(common + ["--steps", str(steps), "--init", init,
                        "--dump-batches", batches])
    losses = [float(line.split()[3]) for line in out.splitlines()
              if line.startswith("step ")]
    assert len(losses) == steps, out
    return losses, read_safetensors(init), read_safetensors(batches)


# ---- the models, written as in strata-gen ---------------------------------

def mlp_loss(p, batch, layers):
    x = batch["features"]
    for i in range(layers):
        x = x @ p["fc%d.weight" % i] + p["fc%d.bias" % i]
        if i + 1 < layers:
            x = torch.relu(x)
    return torch.nn.functional.cross_entropy(x, batch["labels"].long())


def gpt_loss(p, batch, layers, heads):
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    b, s = tokens.shape
    h = p["wte"].shape[1]
    d = h // heads

    def ln(x, name):
        return torch.nn.functional.layer_norm(
            x, (h,), p[name + ".weight"], p[name + ".bias"], eps=1e-5)

    def linear(x, name):
        return x @ p[name + ".weight"] + p[name + ".bias"]

    def split(x):
        return x.reshape(b, s, heads, d).transpose(1, 2)

    x = p["wte"][tokens] + p["wpe"]
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    for l in range(layers):
        pre = "h%d." % l
        y = ln(x, pre + "ln_1")
        q, k, v = (split(linear(y, pre + "attn." + n)) for n in "qkv")
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + linear(ctx, pre + "attn.proj")
        y = ln(x, pre + "ln_2")
        y = torch.nn.functional.gelu(linear(y, pre + "mlp.fc"),
                                     approximate="tanh")
        x = x + linear(y, pre + "mlp.proj")
    x = ln(x, "ln_f")
    logits = x @ p["wte"].t()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


# ---- the optimizers, Paddle's semantics -----------------------------------

def lr_at(opt, step):
    base, warm = opt["learning_rate"], opt.get("warmup_steps", 0)
    kind = opt.get("lr_schedule", "constant")
    if kind != "constant" and warm > 0 and step < warm:
        return base * step / warm
    if kind == "cosine":
        t = min(1.0, max(0.0, (step - warm) / opt["decay_steps"]))
        lo = opt.get("min_lr", 0.0)
        return lo + (base - lo) * 0.5 * (1 + math.cos(math.pi * t))
    return base


class Lamb(torch.optim.Optimizer):
    """Paddle's LAMB, written out: Adam's bias-corrected direction plus
    decoupled weight decay, r = m^ / (sqrt(v^) + eps) + wd p, and the step
    lr |p| / |r| r per tensor (a trust ratio of 1 when either norm is 0)."""

    def __init__(self, params, wd, eps):
        super().__init__(params, {"lr": 1.0})
        self.wd, self.eps, self.b1, self.b2 = wd, eps, 0.9, 0.999

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                s = self.state[p]
                if not s:
                    s.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                s["t"] += 1
                g, b1, b2 = p.grad, self.b1, self.b2
                s["m"].mul_(b1).add_(g, alpha=1 - b1)
                s["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                r = ((s["m"] / (1 - b1 ** s["t"]))
                     / ((s["v"] / (1 - b2 ** s["t"])).sqrt() + self.eps)
                     + self.wd * p)
                pn, rn = p.norm().item(), r.norm().item()
                trust = pn / rn if pn > 0 and rn > 0 else 1.0
                p.sub_(group["lr"] * trust * r)


class Lars(torch.optim.Optimizer):
    """Paddle's LARS momentum, written out: a local rate per tensor,
    lr coeff |p| / (|g| + wd |p| + eps) (lr when either norm is 0), then
    v = mu v + local (g + wd p) and p -= v."""

    def __init__(self, params, wd, eps, coeff):
        super().__init__(params, {"lr": 1.0})
        self.wd, self.eps, self.coeff, self.mu = wd, eps, coeff, 0.9

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                s = self.state.setdefault(p, {})
                if not s:
                    s["v"] = torch.zeros_like(p)
                g, lr = p.grad, group["lr"]
                pn, gn = p.norm().item(), g.norm().item()
                local = (lr * self.coeff * pn / (gn + self.wd * pn + self.eps)
                         if pn > 0 and gn > 0 else lr)
                s["v"].mul_(self.mu).add_(g + self.wd * p, alpha=local)
                p.sub_(s["v"])


def make_optimizer(opt, params):
    kind = opt["type"]
    wd = opt.get("weight_decay",
                 {"adamw": 0.01, "lamb": 0.01, "lars": 0.0005}.get(kind, 0.0))
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1.0, weight_decay=wd)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=1.0, momentum=0.9, weight_decay=wd,
                               nesterov=opt.get("use_nesterov", False))
    if kind == "adam":
        return torch.optim.Adam(params, lr=1.0, eps=1e-8, weight_decay=wd)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1.0, eps=1e-8, weight_decay=wd)
    if kind == "lamb":
        return Lamb(params, wd, opt.get("epsilon", 1e-6))
    if kind == "lars":
        return Lars(params, wd, opt.get("epsilon", 0.0),
                    opt.get("lars_coeff", 0.001))
    raise ValueError(kind)


def torch_losses(init, batches, steps, opt, loss_fn):
    params = {n: t.to(torch.get_default_dtype()).requires_grad_() for n, t in init.items()
              if not n.startswith("step") and "moment" not in n
              and "velocity" not in n}
    optimizer = make_optimizer(opt, list(params.values()))
    losses = []
    for i in range(steps):
        batch = {n.split(".", 1)[1]: (t.to(torch.get_default_dtype()) if t.is_floating_point()
                                       else t)
                 for n, t in batches.items() if n.startswith("step%d." % i)}
        optimizer.zero_grad()
        loss = loss_fn(params, batch)
        loss.backward()
        clip = opt.get("grad_clip_norm", 0.0)
        if clip > 0:  # Paddle's ClipGradByGlobalNorm
            norm = torch.sqrt(sum((q.grad ** 2).sum() for q in params.values()))
            scale = clip / max(norm.item(), clip)
            for q in params.values():
                q.grad.mul_(scale)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(opt, i + 1)
        optimizer.step()
        losses.append(loss.item())
    return losses


def compare(name, ours, theirs, rtol):
    # (A NaN on either side counts as an infinite difference.)
    worst = max(math.inf if math.isnan(d) else d
                for d in (abs(a - b) / max(abs(b), 1e-12)
                          for a, b in zip(ours, theirs)))
    print("%-28s steps %d  first loss %.6f  last loss %.6f  max rel diff %.2e"
          % (name, len(ours), ours[0], ours[-1], worst))
    if worst > rtol:
        for i, (a, b) in enumerate(zip(ours, theirs)):
            print("  step %d strata %.12f torch %.12f" % (i, a, b))
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata-run", required=True)
    ap.add_argument("--strata-gen", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backend", choices=["reference", "cpu"],
                    default="reference")
    ap.add_argument("--rtol", type=float)
    ap.add_argument("--amp", choices=["bfloat16"],
                    help="train the GPT in mixed precision (level o1) against "
                         "torch.autocast on the CPU in the same type")
    args = ap.parse_args()
    if args.backend == "reference":
        torch.set_default_dtype(torch.float64)
    if args.rtol is None:
        args.rtol = (1e-2 if args.amp else
                     1e-10 if args.backend == "reference" else 1e-4)
    os.makedirs(args.workdir, exist_ok=True)

    mlp = os.path.join(args.workdir, "mlp.mlir")
    with open(mlp, "w") as f:
        f.write(run([args.strata_gen, "mlp", "--sizes", "12,24,16,5",
                     "--batch", "8"]))
    gpt = os.path.join(args.workdir, "gpt.mlir")
    with open(gpt, "w") as f:
        f.write(run([args.strata_gen, "gpt", "--layers", "2", "--hidden",
                     "16", "--heads", "2", "--seq", "8", "--vocab", "256",
                     "--batch", "2"]))

    configs = [
        ("adamw", {"type": "adamw", "learning_rate": 0.01}),
        ("sgd", {"type": "sgd", "learning_rate": 0.1}),
        ("momentum-nesterov", {"type": "momentum", "learning_rate": 0.05,
                               "use_nesterov": True}),
        ("adam-l2", {"type": "adam", "learning_rate": 0.01,
                     "weight_decay": 0.01}),
        ("adamw-clip-cosine", {"type": "adamw", "learning_rate": 0.02,
                               "grad_clip_norm": 0.5,
                               "lr_schedule": "cosine", "warmup_steps": 3,
                               "decay_steps": 10, "min_lr": 0.001}),
        ("lamb", {"type": "lamb", "learning_rate": 0.01}),
        ("lars", {"type": "lars", "learning_rate": 1.0, "lars_coeff": 0.02}),
    ]
    ok = True
    models = [("mlp", mlp, lambda p, b: mlp_loss(p, b, 3)),
              ("gpt", gpt, lambda p, b: gpt_loss(p, b, 2, 2))]
    if args.amp:
        # The GEMMs in bfloat16, the rest as autocast decides (its lists
        # differ from Paddle's in places: only the losses are compared).
        dtype = getattr(torch, args.amp)

        def autocast(fn):
            def run_autocast(p, b):
                with torch.autocast("cpu", dtype=dtype):
                    return fn(p, b).float()
            return run_autocast
        models = [("gpt", gpt, autocast(lambda p, b: gpt_loss(p, b, 2, 2)))]
        configs = [c for c in configs if c[0] in ("adamw",
                                                  "adamw-clip-cosine")]
    for model, program, fn in models:
        for tag, opt in configs:
            if model == "gpt" and tag not in ("adamw", "sgd",
                                              "adamw-clip-cosine"):
                continue
            strategy = os.path.join(args.workdir, "%s-%s.json" % (model, tag))
            with open(strategy, "w") as f:
                json.dump({"optimizer": opt, "amp": {"enable": True,
                                                     "dtype": args.amp}}
                          if args.amp else {"optimizer": opt}, f)
            ours, init, batches = strata_losses(
                args, program, strategy, args.steps, args.workdir,
                model + "-" + tag)
            theirs = torch_losses(init, batches, args.steps, opt, fn)
            ok &= compare("%s %s" % (model, tag), ours, theirs, args.rtol)
    if ok:
        print("PASS: strata-run matches PyTorch")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
