"""A model written in plain PyTorch (models.py: a nanoGPT-style GPT-2, a
LLaMA-style decoder, or that decoder with GPT-J's interleaved rotary
embedding), imported and trained by Strata for 20 AdamW steps: the
losses equal PyTorch eager's from the same weights and batches (no dropout).
For the GPT, the same model with dropout is imported too, to show where the
dropout ops go.

usage: import_model.py gpt|llama|llama_interleaved STRATEGY OUT_DIR
"""

import os
import sys

import strata.import_torch as importer
from models import GPT, gpt, llama, llama_interleaved, lm_loss

from compare import compare, token_batches

name, strategy, out = sys.argv[1:4]
model = {"gpt": gpt, "llama": llama,
         "llama_interleaved": llama_interleaved}[name]()
batches = token_batches(vocab=64, batch=4, seq=16, steps=20)
program = importer.import_module(model, batches[0], lm_loss,
                                 input_names=["tokens", "targets"])
program.save(os.path.join(out, name + ".mlir"))
program.save_weights(os.path.join(out, name + ".safetensors"))
print("parameters:", ", ".join(program.weights))
compare(program, model, lm_loss, batches, strategy,
        os.path.join(out, name + ".safetensors"))

if name == "gpt":
    dropped = importer.import_module(GPT(dropout=0.1), batches[0], lm_loss)
    dropped.save(os.path.join(out, "gpt-dropout.mlir"))
