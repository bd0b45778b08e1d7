#!/usr/bin/env bash
# A virtual environment with PyTorch 2.x and transformers from PyPI, for the
# checks and benchmarks that compare with them (the lit suite does not use
# it: it runs on Debian's PyTorch 1.13).
#   test/torch2/setup-venv.sh [VENV]      (default: build/torch2-venv)
# PyPI's torch wheel pulls in NVIDIA's CUDA libraries: about 5 GiB.
set -euo pipefail
venv=${1:-build/torch2-venv}
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet torch transformers numpy
"$venv/bin/python" -c 'import torch, transformers; print("PyTorch", torch.__version__, "transformers", transformers.__version__)'
