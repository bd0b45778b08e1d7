#!/bin/bash
# The GPU check of the CUDA runtime, on a machine with a GPU (see
# prepare.py, which wrote this bundle on a machine with MLIR): builds the
# runtime with CMake and nvcc, checks every kernel against the CPU runtime's
# outputs, trains each prepared program and compares its losses with the
# CPU runtime's (rtol 1e-4 in f32, 1e-2 in bf16: the program's run.txt),
# times GPT-2 124M against PyTorch (torch_gpt.py), then runs one program and
# the kernel check under compute-sanitizer. Exits non-zero when a check
# fails. With --profile, each benchmark also writes every op's mean ms per
# step (from the runtime's trace) to profile-NAME.txt (and, for fused
# attention on the chunked products, profile-NAME-gemm.txt) and prints
# the op kinds that take the most. --only LIST runs only the stages named
# in LIST (comma-separated: kernels, attention, programs, bench, sanitizer,
# flash-sanitizer, and ncu, which only --only runs) after the build, for a
# device lent for a few minutes. Stage ncu profiles the flash attention
# kernels of GPT-2 124M at batch 16 with Nsight Compute (one forward and
# both gradient kernels: their speed of light, occupancy, warp stall
# reasons and pipe use, into ncu-flash.txt and the report ncu-flash.ncu-rep),
# where ncu is installed and may read the GPU's counters.
set -u
profile=0
stages=kernels,attention,programs,bench,ncu,sanitizer,flash-sanitizer
only=${stages/,ncu/}
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=1 ;;
    --only) only=${2:-}; shift ;;
    *) echo "usage: run.sh [--profile] [--only $stages]" >&2
       exit 2 ;;
  esac
  shift
done
if [ -z "${only//,/}" ]; then
  echo "run.sh: --only needs a stage (${stages//,/, })" >&2
  exit 2
fi
for stage in ${only//,/ }; do
  if [[ ",$stages," != *",$stage,"* ]]; then
    echo "run.sh: unknown stage '$stage' (${stages//,/, })" >&2
    exit 2
  fi
done
# Whether stage $1 was asked for.
wanted() { [[ ",$only," == *",$1,"* ]]; }
cd "$(dirname "$0")"
nvidia-smi -L || { echo "no GPU: nvidia-smi failed"; exit 1; }
command -v nvcc > /dev/null || export PATH="$PATH:/usr/local/cuda/bin"
nvcc --version | tail -1
# Every stage has a time limit: a kernel that hangs fails the check.
if ! { cmake -S . -B build > build.log 2>&1 &&
       cmake --build build -j "$(nproc)" >> build.log 2>&1; }; then
  tail -40 build.log
  echo "FAIL: build"
  exit 1
fi
status=0
# Some cases again under an environment setting: LOG, the cases' FILTER,
# then VAR=VALUE; prints the summary, or the failures (failing the check).
cases_again() {
  local log=$1 filter=$2
  shift 2
  if env "$@" timeout 300 build/kernel_check compare \
      --runtime build/libstrata_runtime_cuda.so --dir kernels \
      --filter "$filter" > "$log"; then
    tail -1 "$log"
  else
    grep -v '^PASS' "$log"
    status=1
  fi
}
if wanted kernels; then
  echo "== kernels"
  timeout 300 build/kernel_check compare \
    --runtime build/libstrata_runtime_cuda.so --dir kernels || status=1
  # The GEMMs whose bf16 / f16 activation runs on their f32 sums, one row
  # of sums at a time, as they run where the sums exceed their budget.
  echo "== GEMMs, f32 sums one row at a time"
  cases_again gemm-sums.log gemm STRATA_CUDA_GEMM_SUMS_BYTES=1
fi
if wanted attention; then
  # The tensor-core register layouts the flash kernels take (ldmatrix,
  # mma.sync): a failure here explains a failing bf16 or f16 attention case
  # of the kernels stage.
  echo "== mma.sync and ldmatrix layouts"
  timeout 60 build/fragment_probe || status=1
  # The chunked products (STRATA_CUDA_ATTENTION=gemm; f32 always takes
  # them, bf16 and f16 the flash kernels by default): the same cases, and
  # again one (batch, head) slice per chunk, as they run where the scores
  # of all slices exceed their scratch budget.
  echo "== attention kernels, chunked products (STRATA_CUDA_ATTENTION=gemm)"
  cases_again gemm.log attention STRATA_CUDA_ATTENTION=gemm
  echo "== attention kernels, chunked products, one slice per chunk"
  cases_again chunked.log attention STRATA_CUDA_ATTENTION=gemm \
    STRATA_CUDA_ATTENTION_CHUNK_BYTES=1
fi
wanted programs && for dir in programs/*/; do
  name=$(basename "$dir")
  read -r steps seed rtol < "$dir/run.txt"
  echo "== $name ($steps steps)"
  if timeout 300 build/step_"$name" "$dir" "$steps" "$seed" \
      > "$dir/cuda.txt"; then
    python3 compare_losses.py "$dir/cpu.txt" "$dir/cuda.txt" --rtol "$rtol" ||
      status=1
  else
    echo "FAIL: $name did not run"
    status=1
  fi
done
# The bf16 program with fused attention again, on the chunked products.
if wanted programs; then
  echo "== gpt-bf16-o2-fused, chunked products"
  read -r steps seed rtol < programs/gpt-bf16-o2-fused/run.txt
  if STRATA_CUDA_ATTENTION=gemm timeout 300 build/step_gpt-bf16-o2-fused \
      programs/gpt-bf16-o2-fused "$steps" "$seed" > gemm-losses.txt; then
    python3 compare_losses.py programs/gpt-bf16-o2-fused/cpu.txt \
      gemm-losses.txt --rtol "$rtol" || status=1
  else
    echo "FAIL: gpt-bf16-o2-fused did not run on the chunked products"
    status=1
  fi
fi
# The benchmark: GPT-2 124M, bf16 o2, tokens/s against PyTorch's compiled
# step on this GPU (not a pass/fail check). llm.c publishes ~145K tokens/s
# on one H100 at batch 4.
# One benchmark line: name, batch, sequence, Strata's and PyTorch's ms.
report() {
  python3 - "$@" <<'PY'
import sys
name, batch, seq, ours, theirs = sys.argv[1], int(sys.argv[2]), \
    int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
tok = batch * seq
print("%s: strata %.1f ms/step (%.0f tokens/s), torch.compile %.1f ms/step "
      "(%.0f tokens/s), strata / torch time %.2f" %
      (name, ours, tok / ours * 1e3, theirs, tok / theirs * 1e3, ours / theirs))
PY
}
# A benchmark's profile (--profile): every op's mean ms per step into the
# file $3, and the 12 op kinds that take the most, summed, on stdout.
profile_of() {
  timeout 300 build/step_"$1" "$2" 13 0 --profile > "$3"
  grep -E '^(time|ops) ' "$3"
  awk '$1 == "op" { ms[$NF] += $2; n[$NF]++ }
       END { for (k in ms) printf "kind %8.3f ms %4d x %s\n", ms[k], n[k], k }' \
    "$3" | sort -k2 -rn | head -12
}
declare -A torch_ms
wanted bench && for dir in benches/*/; do
  name=$(basename "$dir")
  read -r batch seq vocab < "$dir/run.txt"
  echo "== benchmark $name"
  ours=$(timeout 300 build/step_"$name" "$dir" 23 0 --time | awk '/^time/ {print $2}')
  # PyTorch's side once per batch size.
  if [ -z "${torch_ms[$batch]:-}" ]; then
    torch_ms[$batch]=$(timeout 600 python3 torch_gpt.py --batch "$batch" |
      awk '/^time/ {print $2}')
  fi
  theirs=${torch_ms[$batch]}
  [ $profile -eq 1 ] && profile_of "$name" "$dir" "profile-$name.txt"
  report "$name" "$batch" "$seq" "${ours:-nan}" "${theirs:-nan}"
  if [[ $name == *-flash ]]; then
    ours=$(STRATA_CUDA_ATTENTION=gemm timeout 300 build/step_"$name" "$dir" \
      23 0 --time | awk '/^time/ {print $2}')
    [ $profile -eq 1 ] && STRATA_CUDA_ATTENTION=gemm \
      profile_of "$name" "$dir" "profile-$name-gemm.txt"
    report "$name (chunked products)" "$batch" "$seq" "${ours:-nan}" \
      "${theirs:-nan}"
  fi
done
# Nsight Compute on the flash kernels of one step at batch 16: the last
# forward launch, then the two gradient kernels of the last layer, the
# first the backward pass reaches (12 forward launches come first). Not a
# pass/fail check: a missing ncu, or counters this machine does not let a
# user read, are reported and skipped.
if wanted ncu; then
  echo "== Nsight Compute, flash kernels (GPT-2 124M, batch 16)"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  bench=gpt2-124m-b16-flash
  if [ ! -x "$ncu" ]; then
    echo "ncu not found: skipped"
  elif [ ! -d "benches/$bench" ]; then
    echo "benches/$bench missing: skipped"
  else
    timeout 300 "$ncu" -k regex:flash --launch-skip 11 --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section InstructionStats --print-details all \
      --export ncu-flash --force-overwrite \
      build/step_$bench "benches/$bench" 1 0 > ncu-flash.txt 2>&1
    rc=$?
    if grep -q -i "ERR_NVGPUCTRPERM\|permission" ncu-flash.txt; then
      echo "ncu may not read this GPU's counters: skipped"
    elif [ $rc -ne 0 ]; then
      tail -5 ncu-flash.txt
      echo "ncu failed (exit $rc): not a check, see ncu-flash.txt"
    else
      grep -E "^  [a-zA-Z].*flash|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued|Issued Ipc" \
        ncu-flash.txt | head -40
    fi
  fi
fi
sanitizer=$(command -v compute-sanitizer ||
            echo /usr/local/cuda/bin/compute-sanitizer)
if ! wanted sanitizer && ! wanted flash-sanitizer; then
  :
elif [ -x "$sanitizer" ]; then
  # Its report, then its summary; a finding fails the check (exit 3), as
  # does the program's own failure.
  sanitize() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$sanitizer" --error-exitcode 3 "$@" \
      > "sanitizer-$name.log" 2>&1
    local rc=$?
    grep -E '^=========' "sanitizer-$name.log" | head -20
    [ $rc -eq 0 ] ||
      { echo "FAIL: compute-sanitizer $name (exit $rc)"; status=1; }
  }
  if wanted sanitizer; then
    echo "== compute-sanitizer (memcheck)"
    sanitize step_gpt 300 build/step_gpt programs/gpt 2 3
    sanitize kernel_check 600 build/kernel_check compare \
      --runtime build/libstrata_runtime_cuda.so --dir kernels
  fi
  # The flash kernels' shared-memory tiles (out-of-bounds and misaligned
  # accesses are what their host emulation cannot show): a stage of its
  # own, minutes where the whole kernel check takes ten.
  if wanted flash-sanitizer; then
    echo "== compute-sanitizer (memcheck), flash kernels"
    STRATA_CUDA_ATTENTION=flash sanitize flash 300 build/kernel_check \
      compare --runtime build/libstrata_runtime_cuda.so --dir kernels \
      --filter attention
  fi
else
  echo "compute-sanitizer not found: skipped"
fi
[ $status -eq 0 ] && echo "GPU check passed" || echo "GPU check FAILED"
exit $status
