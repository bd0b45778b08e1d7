"""Trains an imported program with Strata and its module with PyTorch eager
(AdamW, lr 1e-3) on the same batches (without a loss function, the
model's forward takes the whole batch and returns the loss), prints both
loss traces and fails when they differ by more than 1e-4 relative."""

import math
import sys

import numpy as np
import torch

import strata


def token_batches(vocab, batch, seq, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(torch.from_numpy(rng.integers(0, vocab, (batch, seq))),
             torch.from_numpy(rng.integers(0, vocab, (batch, seq))))
            for _ in range(steps)]


def compare(program, model, loss_fn, batches, strategy, weights,
            name="imported.mlir", save=None):
    exe = strata.compile(program.text, strategy=strategy, name=name)
    exe.load(weights)
    strata_losses = [exe.step(program.batch(*b)) for b in batches]
    if save:  # Strata's trained weights and state
        exe.save(save, len(batches))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch_losses = []
    for *inputs, target in batches:
        optimizer.zero_grad()
        # Without loss_fn the model takes the whole batch, target included.
        loss = loss_fn(model(*inputs), target) if loss_fn else \
            model(*inputs, target)
        loss.backward()
        optimizer.step()
        torch_losses.append(loss.item())

    for i, (a, b) in enumerate(zip(strata_losses, torch_losses)):
        print("step %d strata %r torch %r" % (i, a, b))
    # (A NaN on either side counts as an infinite difference.)
    worst = max(math.inf if math.isnan(d) else d
                for d in (abs(a - b) / abs(b)
                          for a, b in zip(strata_losses, torch_losses)))
    print("max relative difference %.1e" % worst)
    if worst > 1e-4:
        sys.exit("the losses differ by more than 1e-4 relative")
    return strata_losses
