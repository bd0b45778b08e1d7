"""A nanoGPT-style GPT-2 written in plain PyTorch, imported and trained by
Strata for 20 AdamW steps: the losses equal PyTorch eager's from the same
weights and batches (dropout 0). With dropout, the program has Strata's
dropout ops at PyTorch's places.

usage: import_gpt.py STRATEGY OUT_DIR
"""

import os
import sys

import torch

import strata
import strata.import_torch as importer
from models import GPT, lm_loss

from compare import compare, token_batches

strategy, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = GPT()
batches = token_batches(vocab=64, batch=4, seq=16, steps=20)
program = importer.import_module(model, batches[0], lm_loss,
                                 input_names=["tokens", "targets"])
program.save(os.path.join(out, "gpt.mlir"))
program.save_weights(os.path.join(out, "gpt.safetensors"))
print("parameters:", ", ".join(program.weights))
compare(program, model, lm_loss, batches, strategy,
        os.path.join(out, "gpt.safetensors"))

dropped = importer.import_module(GPT(dropout=0.1), batches[0], lm_loss)
with open(os.path.join(out, "gpt-dropout.mlir"), "w") as f:
    f.write(dropped.text)
