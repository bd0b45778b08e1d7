"""A PyTorch MLP imported and trained by Strata for 20 AdamW steps: the
losses equal PyTorch eager's from the same weights and batches.

usage: import_mlp.py STRATEGY WEIGHTS   (prints both loss traces)
"""

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import strata
import strata.import_torch as importer

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(16, 32)
        self.fc1 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(torch.relu(self.fc1(torch.relu(self.fc0(x)))))


model = MLP()
rng = np.random.default_rng(0)
batches = [(torch.from_numpy(rng.standard_normal((8, 16), np.float32)),
            torch.from_numpy(rng.integers(0, 8, 8)))
           for _ in range(20)]

program = importer.import_module(model, batches[0], F.cross_entropy,
                                 input_names=["features", "labels"])
program.save_weights(sys.argv[2])
exe = strata.compile(program.text, strategy=sys.argv[1], name="mlp.mlir")
exe.load(sys.argv[2])
strata_losses = [exe.step(program.batch(x, y)) for x, y in batches]

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch_losses = []
for x, y in batches:
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    torch_losses.append(loss.item())

for i, (a, b) in enumerate(zip(strata_losses, torch_losses)):
    print("step %d strata %r torch %r" % (i, a, b))
worst = max(abs(a - b) / abs(b) for a, b in zip(strata_losses, torch_losses))
print("max relative difference %.1e" % worst)
print("parameters:", ", ".join(program.weights))
if worst > 1e-4:
    sys.exit("the losses differ by more than 1e-4 relative")
