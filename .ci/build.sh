#!/usr/bin/env bash
# Installs what Strata needs (Debian 12) and builds it into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/setup-debian.sh

BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
ninja -C "$BUILD_DIR"
