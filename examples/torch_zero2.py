"""Train a PyTorch model with a Strata strategy, and take it back.

    mpirun -np 2 python3 examples/torch_zero2.py

1. A model written in plain PyTorch (an nn.Module) is imported: its forward
   and loss become a Strata program, its weights a safetensors file.
2. The program is compiled with ZeRO stage 2 over the two ranks (the rank
   and world come from MPI) and trained 20 AdamW steps: each rank feeds the
   whole batch and trains on its half.
3. The trained weights are saved (every rank writes its shard into one
   checkpoint) and loaded back into the nn.Module, whose own forward then
   gives the loss Strata reports for the next step.
"""

import os
import shutil
import sys
import tempfile

import numpy as np
import torch

import strata
import strata.import_torch as importer


class TinyLM(torch.nn.Module):
    """Any nn.Module the importer covers (docs/python.md): here a small
    next-token model with tied embeddings."""

    def __init__(self, vocab=64, hidden=32):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, hidden)
        self.fc = torch.nn.Linear(hidden, 4 * hidden)
        self.proj = torch.nn.Linear(4 * hidden, hidden)
        self.ln = torch.nn.LayerNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.wte.weight
        torch.nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, tokens):
        x = self.wte(tokens)
        x = x + self.proj(torch.nn.functional.gelu(self.fc(x)))
        return self.head(self.ln(x))


def lm_loss(logits, targets):
    return torch.nn.functional.cross_entropy(
        logits.view(-1, logits.size(-1)), targets.view(-1))


torch.manual_seed(0)
model = TinyLM()
vocab, batch, seq = 64, 4, 16
rng = np.random.default_rng(0)
batches = [(torch.from_numpy(rng.integers(0, vocab, (batch, seq))),
            torch.from_numpy(rng.integers(0, vocab, (batch, seq))))
           for _ in range(21)]

# 1. Import.
program = importer.import_module(model, batches[0], lm_loss,
                                 input_names=["tokens", "targets"])
from mpi4py import MPI  # noqa: E402  (strata.compile uses COMM_WORLD)
comm = MPI.COMM_WORLD
workdir = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
init = os.path.join(workdir, "init.safetensors")
if comm.rank == 0:
    program.save_weights(init)
comm.Barrier()

# 2. ZeRO-2 over the two ranks.
strategy = os.path.join(workdir, "zero2.yaml")
if comm.rank == 0:
    with open(strategy, "w") as f:
        f.write("optimizer: {type: adamw, learning_rate: 0.001}\n"
                "sharding: {enable: true, stage: 2, degree: 2}\n")
comm.Barrier()
exe = strata.compile(program.text, strategy=strategy, name="gpt.mlir")
exe.load(init)
for step, (x, y) in enumerate(batches[:20]):
    loss = exe.step(program.batch(x, y))
    if comm.rank == 0 and step % 5 == 0:
        print("step %d loss %.6f" % (step, loss))

# 3. Back to PyTorch.
trained = os.path.join(workdir, "trained.safetensors")
exe.save(trained, steps_done=20)
comm.Barrier()
next_loss = exe.step(program.batch(*batches[20]))
if comm.rank == 0:
    names = importer.load_state_dict(model, trained)
    with torch.no_grad():
        torch_loss = lm_loss(model(batches[20][0]), batches[20][1]).item()
    print("loaded %d parameters into the nn.Module" % len(names))
    print("step 20: strata %.6f, the PyTorch module %.6f" % (next_loss,
                                                             torch_loss))
    shutil.rmtree(workdir)
    if abs(next_loss - torch_loss) > 1e-5 * abs(torch_loss):
        sys.exit("the module's loss differs from Strata's")
