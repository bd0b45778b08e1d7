#!/usr/bin/env bash
# The main job. Training is not implemented yet (issue 4): for now this
# generates a GPT program, round-trips it through strata-opt and prints its
# statistics.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/build.sh
BUILD_DIR=${BUILD_DIR:-build}
bin="$BUILD_DIR/bin"
out="$BUILD_DIR/main"
mkdir -p "$out"

"$bin/strata-gen" gpt --layers 4 --hidden 256 --heads 4 --seq 128 \
  --vocab 256 --batch 8 --dropout 0.1 -o "$out/gpt.mlir"
"$bin/strata-opt" "$out/gpt.mlir" --strata-program-stats -o "$out/gpt.opt.mlir"
echo "main: wrote $out/gpt.mlir and $out/gpt.opt.mlir"
