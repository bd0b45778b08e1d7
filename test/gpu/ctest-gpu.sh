#!/bin/bash
# ctest's `gpu-check` (label gpu): the GPU check of the CUDA runtime on this
# machine when it has a GPU (the bundle of prepare.py, built and run here);
# "skipped: no CUDA device" (exit 77, which ctest reports as skipped)
# otherwise.
#   ctest-gpu.sh SOURCE_DIR BUILD_DIR
set -u
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "skipped: no CUDA device"
  exit 77
fi
bundle=$(mktemp -d "${TMPDIR:-/tmp}/strata-gpu-check.XXXXXX")
trap 'rm -rf "$bundle"' EXIT
python3 "$1/test/gpu/prepare.py" --build "$2" --out "$bundle/check" &&
  bash "$bundle/check/run.sh"
