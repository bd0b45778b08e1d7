"""Indexing by lists of positions and in-place arithmetic, imported and
trained by Strata for 20 AdamW steps: the losses equal PyTorch eager's from
the same weights and batches.

- h[:, [0, 2, 4, 6]] (evenly spaced: one strided slice), h[:, [7, 1, 2]]
  (a slice, then a run of two: joined), h[:, [-1]] (Falcon's x[..., [-2]]);
- torch.baddbmm with beta and alpha;
- out += ... on a tensor that another Python name shares (both see the
  update, as in PyTorch), and *= on a fresh tensor.

usage: import_indexing.py STRATEGY WEIGHTS
"""

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import strata.import_torch as importer
from compare import compare


class Indexed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.head = nn.Linear(8, 4)
        self.skip = nn.Linear(16, 4)
        self.mix = nn.Parameter(torch.randn(1, 4))

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        picked = torch.cat([h[:, [0, 2, 4, 6]], h[:, [7, 1, 2]],
                            h[:, [-1]]], dim=-1)
        out = self.head(picked)
        # beta * input + alpha * the product (Bloom's ALiBi scores).
        out = torch.baddbmm(out[:, None, :], out[:, None, :1],
                            self.mix[None].expand(out.shape[0], 1, 4),
                            beta=0.5, alpha=2.0).sum(1)
        same = out
        out += self.skip(x)
        gate = out * 0.5
        gate *= out
        return same + gate


torch.manual_seed(0)
model = Indexed()
rng = np.random.default_rng(0)
batches = [(torch.from_numpy(rng.standard_normal((8, 16), np.float32)),
            torch.from_numpy(rng.integers(0, 4, 8)))
           for _ in range(20)]
program = importer.import_module(model, batches[0], F.cross_entropy,
                                 input_names=["features", "labels"])
program.save_weights(sys.argv[2])
program.save("indexing.mlir")
compare(program, model, F.cross_entropy, batches, sys.argv[1], sys.argv[2],
        name="indexing.mlir")
