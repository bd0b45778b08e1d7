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

# What would train otherwise than PyTorch is refused, naming it.
x, labels = torch.randn(2, 4), torch.tensor([0, 1])


def attempt(module, batch, loss_fn, **kwargs):
    try:
        importer.import_module(module, batch, loss_fn, **kwargs)
        print("imported")
    except (importer.UnsupportedError, ValueError) as e:
        print("%s: %s" % (type(e).__name__, e))


attempt(nn.Linear(4, 3), (x, labels),
        lambda o, t: F.cross_entropy(o, t, ignore_index=1))
attempt(nn.Linear(4, 3), (x, labels),
        lambda o, t: F.cross_entropy(o, t, ignore_index=-1))


class Frequency(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(5, 3, scale_grad_by_freq=True)

    def forward(self, ids):
        return self.e(ids).sum(1)


attempt(Frequency(), (torch.tensor([[1, 2], [2, 2]]), labels),
        F.cross_entropy)
attempt(nn.ReLU(), (x, labels), F.cross_entropy)
frozen = nn.Linear(4, 3).requires_grad_(False)
attempt(frozen, (x, labels), F.cross_entropy)
attempt(nn.Linear(4, 3), (x, labels), F.cross_entropy,
        input_names=["x", "x"])
attempt(nn.Linear(4, 3), (x, labels), F.cross_entropy,
        input_names=['x"y', "t"])


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, batch_first=True)

    def forward(self, seq):
        return self.lstm(seq)[0][:, -1]


attempt(Recurrent(), (torch.randn(2, 5, 4), labels), F.cross_entropy)


class DividedByZero(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x) / 0.0


attempt(DividedByZero(), (x, labels), F.cross_entropy)
# nn.Dropout at its default p = 0.5.
attempt(nn.Sequential(nn.Linear(4, 3), nn.Dropout()), (x, labels),
        F.cross_entropy)

# A batch whose indices the int32 conversion would wrap or truncate.
program = importer.import_module(nn.Linear(4, 3), (x, labels),
                                 F.cross_entropy)
for bad in (torch.tensor([2**32 + 1, 0]), torch.tensor([0.9, 1.7])):
    try:
        program.batch(x, bad)
    except ValueError as e:
        print("batch:", e)

# Damaged weights files: ValueError naming the file and what is wrong.
import struct

for header in (b"\xff" * 8 + b"{}",
               b'{"weight": {"dtype": "F32", "shape": [3, 4], '
               b'"data_offsets": [0, 4]}}'):
    with open("damaged.safetensors", "wb") as f:
        if not header.startswith(b"\xff"):
            f.write(struct.pack("<Q", len(header)))
        f.write(header + bytes(4))
    try:
        importer.load_state_dict(nn.Linear(4, 3), "damaged.safetensors")
    except ValueError as e:
        print("damaged:", e)
