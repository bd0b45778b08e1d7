"""A PyTorch regression MLP with a mean-squared loss (F.mse_loss, or the
mean written out) imported and trained by Strata for 20 AdamW steps: the
losses equal PyTorch eager's from the same weights and batches.

usage: import_regression.py STRATEGY WEIGHTS mse|mean|sum
(writes regression.mlir, the imported program)
"""

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import strata.import_torch as importer
from compare import compare

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
losses = {
    "mse": F.mse_loss,
    "mean": lambda out, target: ((out - target) ** 2).mean(),
    "sum": lambda out, target: F.mse_loss(out, target, reduction="sum"),
}
loss = losses[sys.argv[3]]
rng = np.random.default_rng(0)
batches = [(torch.from_numpy(rng.standard_normal((8, 16), np.float32)),
            torch.from_numpy(rng.standard_normal((8, 4), np.float32)))
           for _ in range(20)]
program = importer.import_module(model, batches[0], loss,
                                 input_names=["features", "targets"])
program.save_weights(sys.argv[2])
program.save("regression.mlir")
compare(program, model, loss, batches, sys.argv[1], sys.argv[2],
        name="regression.mlir")
