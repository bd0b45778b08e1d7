"""What the importer cannot express is an error naming the ATen op."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import strata.import_torch as importer


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


try:
    importer.import_module(Gated(), (torch.randn(2, 4), torch.tensor([0, 1])),
                           F.cross_entropy)
except importer.UnsupportedError as e:
    print(e)

try:
    importer.import_module(nn.Linear(4, 3), (torch.randn(2, 4), torch.randn(2, 3)),
                           F.mse_loss)
except importer.UnsupportedError as e:
    print(e)
