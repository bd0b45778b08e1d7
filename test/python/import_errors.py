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


class Outer(nn.Module):
    """Calls Gated: the error names Gated's line (the innermost frame of
    the model's source), not this one."""

    def __init__(self):
        super().__init__()
        self.gated = Gated()

    def forward(self, x):
        return self.gated(x) * 2


try:
    importer.import_module(Outer(), (torch.randn(2, 4), torch.tensor([0, 1])),
                           F.cross_entropy)
except importer.UnsupportedError as e:
    print(e)

try:
    importer.import_module(nn.Linear(4, 3), (torch.randn(2, 4), torch.randn(2, 3)),
                           F.smooth_l1_loss)
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

# What would differentiate otherwise than PyTorch is refused: a gradient
# stopped by detach() or .data, or by torch.no_grad, a custom Function's own
# backward, a module backward hook; and random numbers drawn without a
# tensor to follow (they would be drawn once, at import).
class Two(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.a, self.b, self.kind = nn.Linear(4, 6), nn.Linear(6, 3), kind

    def forward(self, x):
        if self.kind == "detach":
            y = self.a(x)
            return self.b(y.detach()) + y[:, :3]
        if self.kind == "no_grad":
            with torch.no_grad():
                y = self.a(x)
            return self.b(y)
        if self.kind == "function":
            return self.b(Reverse.apply(self.a(x)))
        if self.kind == "randn":
            return self.b(self.a(x + 0.1 * torch.randn(x.shape)))
        return self.b(self.a(x))


class Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return -g


for kind in ("detach", "no_grad", "function", "randn"):
    attempt(Two(kind), (x, labels), F.cross_entropy)
hooked = Two("plain")
hooked.b.register_full_backward_hook(lambda m, gi, go: None)
attempt(hooked, (x, labels), F.cross_entropy)

# A parameter the step never reads imports without a warning (it gets no
# gradient and no update, as in PyTorch); a submodule the user put in eval
# mode stays so (its dropout off), and every module's mode is as it was.
import warnings

unread = Two("plain")
unread.extra = nn.Parameter(torch.ones(2))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    importer.import_module(unread, (x, labels), F.cross_entropy)
print("unread:", [str(w.message) for w in caught])
model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5))
model[1].eval()
program = importer.import_module(model, (x, labels), F.cross_entropy)
print("eval dropout:", program.text.count("strata.dropout"),
      [m.training for m in model.modules()])
model.eval()
program = importer.import_module(model, (x, labels), F.cross_entropy)
print("eval model:", program.text.count("strata.dropout"),
      [m.training for m in model.modules()])

# bfloat16 weights load as their values.
header = (b'{"weight": {"dtype": "BF16", "shape": [3, 4], '
          b'"data_offsets": [0, 24]}, "bias": {"dtype": "BF16", '
          b'"shape": [3], "data_offsets": [24, 30]}}')
with open("bf16.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header)
    f.write(struct.pack("<12H", *([0x3f80] * 6 + [0xc000] * 6)))  # 1, -2
    f.write(struct.pack("<3H", 0x3f00, 0x3f00, 0x3f00))  # 0.5
linear = nn.Linear(4, 3)
importer.load_state_dict(linear, "bf16.safetensors")
print("bf16:", linear.weight.flatten().tolist(), linear.bias.tolist())

# Arithmetic on integer tensors (Strata's ops compute in floating point),
# a Python number among the inputs; a parameter name beyond ASCII imports.
attempt(nn.Linear(4, 3), (x, labels),
        lambda o, t: F.cross_entropy(o, t * 1))
try:
    importer.import_module(nn.Linear(4, 3), (x, 2.0), F.cross_entropy)
except TypeError as e:
    print("TypeError:", e)


class Shifted(nn.Linear):
    def __init__(self):
        super().__init__(4, 3)
        self.register_parameter("größe", nn.Parameter(torch.ones(3)))

    def forward(self, x):
        return super().forward(x) + getattr(self, "größe")


program = importer.import_module(Shifted(), (x, labels), F.cross_entropy)
import strata

print("non-ascii:", '@"größe"' in program.text,
      [i.name for i in strata.compile(program.text).inputs])

# detach() of what no trained parameter reaches (the target, a buffer)
# imports; a loss in a dict, or first of several outputs, is the one
# checked; a parameter read only by another output is unread (no gradient,
# no update, no warning);
# a loss computed wholly under torch.no_grad is refused; negating an
# integer tensor is integer arithmetic.
attempt(nn.Linear(4, 3), (x, labels),
        lambda o, t: F.cross_entropy(o, t.detach()))


class Outputs(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.a, self.b, self.kind = nn.Linear(4, 3), nn.Linear(4, 3), kind

    def forward(self, x, t):
        loss = F.cross_entropy(self.a(x), t)
        if self.kind == "dict":
            return {"total": loss}
        if self.kind == "aux":
            return loss, self.b(x)
        with torch.no_grad():
            return F.cross_entropy(self.a(x) + self.b(x), t)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for kind in ("dict", "aux", "no_grad"):
        attempt(Outputs(kind), (x, labels), None)
print("aux:", [str(w.message).split(":")[1] for w in caught])
attempt(nn.Linear(4, 3), (x, labels),
        lambda o, t: F.cross_entropy(o, -(-t)))


class InPlace(nn.Module):
    """h += y: imported where h is the only name of its tensor (another
    Python name for the same tensor sees the update, as in PyTorch);
    refused where the update would change another tensor too: h a view of
    y, or a view of h taken before the update."""

    def __init__(self, kind):
        super().__init__()
        self.fc, self.kind = nn.Linear(4, 6), kind

    def forward(self, x):
        y = self.fc(x)
        if self.kind == "view":
            h = y[:, :3]
            h += 1.0 * x[:, :3]
            return y[:, :3] + h
        h = y * 2
        if self.kind == "viewed":
            seen = h.t()
            h += y
            return seen.t() + h
        same = h
        h += y
        return same + h


for kind in ("view", "viewed", "same"):
    attempt(InPlace(kind), (x, labels), F.cross_entropy)
