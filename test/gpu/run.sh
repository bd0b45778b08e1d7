#!/bin/bash
# The GPU check of the CUDA runtime, on a machine with a GPU (see
# prepare.py, which wrote this bundle on a machine with MLIR): builds the
# runtime with CMake and nvcc, checks every kernel against the CPU runtime's
# outputs, trains each prepared program and compares its losses with the
# CPU runtime's (rtol 1e-4), then runs one program and the kernel check
# under compute-sanitizer. Exits non-zero when anything fails.
set -u
cd "$(dirname "$0")"
nvidia-smi -L || { echo "no GPU: nvidia-smi failed"; exit 1; }
nvcc --version | tail -1
if ! { cmake -S . -B build > build.log 2>&1 &&
       cmake --build build -j "$(nproc)" >> build.log 2>&1; }; then
  tail -40 build.log
  echo "FAIL: build"
  exit 1
fi
status=0
echo "== kernels"
build/kernel_check compare --runtime build/libstrata_runtime_cuda.so \
  --dir kernels || status=1
for dir in programs/*/; do
  name=$(basename "$dir")
  read -r steps seed < "$dir/run.txt"
  echo "== $name ($steps steps)"
  if build/step_"$name" "$dir" "$steps" "$seed" > "$dir/cuda.txt"; then
    python3 compare_losses.py "$dir/cpu.txt" "$dir/cuda.txt" --rtol 1e-4 ||
      status=1
  else
    echo "FAIL: $name did not run"
    status=1
  fi
done
sanitizer=$(command -v compute-sanitizer ||
            echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
  echo "== compute-sanitizer (memcheck)"
  "$sanitizer" --error-exitcode 3 build/step_gpt programs/gpt 2 3 \
    > /dev/null || { echo "FAIL: compute-sanitizer step_gpt"; status=1; }
  "$sanitizer" --error-exitcode 3 build/kernel_check compare \
    --runtime build/libstrata_runtime_cuda.so --dir kernels > /dev/null ||
    { echo "FAIL: compute-sanitizer kernel_check"; status=1; }
else
  echo "compute-sanitizer not found: skipped"
fi
[ $status -eq 0 ] && echo "GPU check passed" || echo "GPU check FAILED"
exit $status
