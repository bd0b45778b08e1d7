#!/usr/bin/env bash
# Installs every Debian package Strata needs. Idempotent: packages already
# present are skipped, so a second run costs only the dpkg query.
set -euo pipefail

packages=(
  # Compiler toolchain and build system.
  build-essential cmake ninja-build ccache git python3
  # MLIR/LLVM 22 (libMLIR.so, headers, mlir-tblgen, lit, FileCheck).
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  # Runtime dependencies: oneDNN (GEMM), OpenMPI (collectives),
  # Random123 (counter-based Philox RNG, header-only).
  libdnnl-dev libopenmpi-dev openmpi-bin librandom123-dev
  # Unit tests; PyTorch as the reference the training tests compare with,
  # and OpenBLAS as its BLAS (Debian's torch otherwise falls back to the
  # netlib reference BLAS, ~3 GFLOP/s: no fair peer for bench/).
  libgtest-dev libgmock-dev python3-torch libopenblas0-pthread
  # The Python package: NumPy arrays, and mpi4py for jobs of several ranks
  # (the caller's communicator).
  python3-numpy python3-mpi4py
  # `pip install` of the Python package, tested offline in a venv.
  python3-venv python3-pip python3-setuptools python3-wheel
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
