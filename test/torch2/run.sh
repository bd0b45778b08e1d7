#!/usr/bin/env bash
# Hugging Face models (small configurations: GPT-2, the LLaMA family,
# GPT-J, Cohere, and more architectures in hf_models.py) through
# torch.export on PyTorch 2.x: imported, trained by Strata and by PyTorch
# eager, losses compared; then the imported programs of the first group
# under ZeRO-3 and a 1F1B pipeline on 2 ranks, and with fused attention
# (and a written-out GELU taken into the GEMM epilogue, LLaMA's
# written-out RMSNorm as one op), against their single-rank run.
#   test/torch2/run.sh [BUILD_DIR] [VENV]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
venv=${2:-$build/torch2-venv}
"$root/test/torch2/setup-venv.sh" "$venv"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export PYTHONPATH=$root/python STRATA_LIBRARY=$build/lib/libStrataC.so
"$venv/bin/python" "$root/test/torch2/hf_models.py" "$out" | grep -v '^step [1-9]'
# torch.nn.RMSNorm is imported as the rms_norm op itself.
if ! grep -q 'strata.rms_norm ' "$out/rmsnorm.mlir"; then
  echo "rmsnorm: torch.nn.RMSNorm is not imported as strata.rms_norm" >&2
  exit 1
fi

# Token ids below the models' vocabulary of 64, for strata-run.
"$venv/bin/python" -c "import numpy as np; np.random.default_rng(1).integers(0, 64, 20000).astype('<u2').tofile('$out/tokens.bin')"
cat > "$out/base.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
YAML
cat > "$out/z3.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
sharding: {enable: true, stage: 3, degree: 2}
YAML
cat > "$out/pp2.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
pipeline: {enable: true, pp_degree: 2, accumulate_steps: 4, schedule_mode: 1F1B}
YAML
cat > "$out/flash.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
fused_passes: {enable: true, flash_attention: true}
YAML
cat > "$out/fused-gpt2.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
fused_passes: {enable: true, gemm_epilogue: true, flash_attention: true}
YAML
cat > "$out/fused-llama.yaml" <<'YAML'
optimizer: {type: adamw, learning_rate: 0.01}
fused_passes: {enable: true, rms_norm: true, flash_attention: true}
YAML
# Compiles MODEL with fused attention (flash.yaml) into MODEL-flash.mlir
# and fails, saying WHY, on a warning or where an op of PATTERN is left.
#   fuses MODEL PATTERN WHY
fuses() {
  "$build/bin/strata-opt" --strategy="$out/flash.yaml" "$out/$1.mlir" \
    -o "$out/$1-flash.mlir" 2> "$out/$1-flash.err"
  if [ -s "$out/$1-flash.err" ] || grep -q "$2" "$out/$1-flash.mlir"; then
    cat "$out/$1-flash.err"
    echo "$1: $3" >&2
    exit 1
  fi
}

# Trains MODEL 8 steps on one rank and under each STRATEGY (z3 and pp2 on
# 2 ranks), and compares each run's losses with the one-rank run's.
#   against_one_rank MODEL STRATEGY...
against_one_rank() {
  local model=$1 strategy nproc
  shift
  for strategy in base "$@"; do
    nproc=1
    case $strategy in z3|pp2) nproc=2 ;; esac
    "$build/bin/strata-run" "$out/$model.mlir" --init "$out/$model.safetensors" \
      --data "$out/tokens.bin" --data-format uint16 --steps 8 --seed 3 \
      --strategy "$out/$strategy.yaml" --nproc $nproc --quiet > "$out/$model-$strategy.txt"
  done
  for strategy in "$@"; do
    echo -n "$model $strategy against one rank: "
    /usr/bin/python3 "$root/test/run/compare_losses.py" "$out/$model-base.txt" \
      "$out/$model-$strategy.txt" --rtol 1e-5
  done
}

for model in gpt2 llama qwen2 gemma phi3 gptj cohere; do
  # Fused attention takes every attention of the imported model (no
  # softmax left unfused, no warning) and reads q, k and v where the
  # projections wrote them: no transposes left (LLaMA's rotary embedding
  # computed in that layout), and the grouped keys and values (the LLaMA
  # family and Cohere have two key heads for four query heads) with
  # their own heads: no repeat left. Cohere rotates interleaved pairs
  # after splitting the heads (a stack and a reshape of the head size,
  # which the fusion does not move into the projections' layout): its
  # attention is fused in the heads-first layout, where q and k keep
  # their transposes and the grouped keys and values their repeat.
  unfused='strata.softmax\|strata.transpose\|strata.broadcast_to'
  [ "$model" = cohere ] && unfused='strata.softmax'
  fuses "$model" "$unfused" \
    "attention left unfused, or its operands copied by transposes or repeats"
  # GPT-2's and GPT-J's GELU, which Hugging Face writes out, runs as the
  # gelu op in the GEMM epilogue (no tanh left); the LLaMA family's
  # RMSNorm as the rms_norm op (no rsqrt left). Cohere (a layer norm
  # without bias, written out; a SiLU gate without biases) has nothing
  # more to fuse than its attention. No strategy warns of a key that
  # changes nothing.
  case $model in
    gpt2|gptj) family=gelu; cp "$out/fused-gpt2.yaml" "$out/fused.yaml" ;;
    cohere) family=none; cp "$out/flash.yaml" "$out/fused.yaml" ;;
    *) family=rms; cp "$out/fused-llama.yaml" "$out/fused.yaml" ;;
  esac
  "$build/bin/strata-opt" --strategy="$out/fused.yaml" "$out/$model.mlir" \
    -o "$out/$model-fused.mlir" 2> "$out/$model-fused.err"
  if [ -s "$out/$model-fused.err" ]; then
    cat "$out/$model-fused.err"
    exit 1
  fi
  if [ "$family" = gelu ] && { grep -q strata.tanh "$out/$model-fused.mlir" ||
    ! grep -q 'strata.fused_gemm_epilogue .*gelu_tanh' "$out/$model-fused.mlir"; }; then
    echo "$model: the written-out GELU is not in the GEMM epilogue" >&2
    exit 1
  fi
  if [ "$family" = rms ] && { grep -q strata.rsqrt "$out/$model-fused.mlir" ||
    ! grep -q 'strata.rms_norm ' "$out/$model-fused.mlir"; }; then
    echo "$model: the written-out RMSNorm is not one rms_norm op" >&2
    exit 1
  fi
  against_one_rank "$model" z3 pp2 flash fused
done

# An op the importer does not know is named at the line of the model's
# source that calls it, the innermost frame (torch.export lists the frames
# outermost first).
(cd "$out" && "$venv/bin/python" "$root/test/python/import_errors.py" > "$out/import-errors.txt" 2>&1)
first=$(grep -m 1 strata.import_torch "$out/import-errors.txt" || true)
case $first in
  *"import_errors.py:16 (return torch.sigmoid"*) ;;
  *) echo "import error location: $first" >&2; exit 1 ;;
esac

# Falcon's multi-query attention (one key and value head, broadcast by the
# products over the query heads): fused attention reads it as one key head
# shared by every query head (no softmax left), with the unfused losses.
if [ -f "$out/falcon.mlir" ]; then
  fuses falcon 'strata.softmax' "multi-query attention left unfused"
  against_one_rank falcon flash
fi

# Plain PyTorch's grouped-query attention (scaled_dot_product_attention
# with enable_gqa, one key and value head for four query heads): the
# importer repeats the key and value heads as PyTorch does, and fused
# attention reads them unrepeated (no softmax, transpose or repeat left),
# training the unfused program's losses.
if ! grep -q 'strata.broadcast_to' "$out/gqa.mlir"; then
  echo "gqa: the importer did not repeat the key and value heads" >&2
  exit 1
fi
fuses gqa 'strata.softmax\|strata.transpose\|strata.broadcast_to' \
  "the grouped keys and values are not read unrepeated by fused attention"
against_one_rank gqa flash
