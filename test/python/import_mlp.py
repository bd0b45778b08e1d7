"""A PyTorch MLP imported and trained by Strata for 20 AdamW steps: the
losses equal PyTorch eager's from the same weights and batches.

usage: import_mlp.py STRATEGY WEIGHTS [--freeze-fc0]   (prints both loss
traces; --freeze-fc0: the first layer does not train, requires_grad=False)

Strata's trained weights are then loaded into a copy of the untrained
module and compared with PyTorch's trained ones.
"""

import copy
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import strata.import_torch as importer
from compare import compare

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
if "--freeze-fc0" in sys.argv:
    model.fc0.requires_grad_(False)
rng = np.random.default_rng(0)
batches = [(torch.from_numpy(rng.standard_normal((8, 16), np.float32)),
            torch.from_numpy(rng.integers(0, 8, 8)))
           for _ in range(20)]

program = importer.import_module(model, batches[0], F.cross_entropy,
                                 input_names=["features", "labels"])
program.save_weights(sys.argv[2])
untrained = copy.deepcopy(model)
compare(program, model, F.cross_entropy, batches, sys.argv[1], sys.argv[2],
        name="mlp.mlir", save="trained.safetensors")
print("parameters:", ", ".join(program.weights))
# Strata's trained weights go back into the untrained copy: they are
# PyTorch's trained ones (both took the same 20 AdamW steps); a frozen
# layer, which the program holds as constants, stays as it is.
print("loaded back:", ", ".join(
    importer.load_state_dict(untrained, "trained.safetensors")))
for (name, ours), theirs in zip(untrained.named_parameters(),
                                model.parameters()):
    gap = (ours - theirs).abs().max().item()
    if gap > 1e-4 * theirs.abs().max().item():
        sys.exit("%s: Strata's trained weights differ from PyTorch's by %g"
                 % (name, gap))
print("trained weights equal PyTorch's:",
      ", ".join(n for n, _ in untrained.named_parameters()))
