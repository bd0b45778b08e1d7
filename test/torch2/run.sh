#!/usr/bin/env bash
# Hugging Face GPT-2 and LLaMA (small configurations) through torch.export
# on PyTorch 2.x: imported, trained by Strata and by PyTorch eager, losses
# compared; then the imported programs under ZeRO-3 and a 1F1B pipeline on 2
# ranks, and with fused attention (and GPT-2's written-out GELU taken into
# the GEMM epilogue, LLaMA's written-out RMSNorm as one op), against their
# single-rank run.
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
for model in gpt2 llama qwen2 gemma phi3; do
  # Fused attention takes every attention of the imported model (no
  # softmax left unfused, no warning) and reads q, k and v where the
  # projections wrote them: no transposes left (LLaMA's rotary embedding
  # computed in that layout), and the grouped keys and values (every
  # model here but GPT-2 has two key heads for four query heads) with
  # their own heads: no repeat left.
  "$build/bin/strata-opt" --strategy="$out/flash.yaml" "$out/$model.mlir" \
    -o "$out/$model-flash.mlir" 2> "$out/$model-flash.err"
  if [ -s "$out/$model-flash.err" ] || grep -q 'strata.softmax\|strata.transpose\|strata.broadcast_to' "$out/$model-flash.mlir"; then
    cat "$out/$model-flash.err"
    echo "$model: attention left unfused, or its operands copied by transposes or repeats" >&2
    exit 1
  fi
  # GPT-2's GELU, which Hugging Face writes out, runs as the gelu op in
  # the GEMM epilogue (no tanh left); LLaMA's RMSNorm as the rms_norm op
  # (no rsqrt left). Neither strategy warns of a key that changes nothing.
  # (The LLaMA family's decoders all get LLaMA's fused passes.)
  cp "$out/fused-$([ "$model" = gpt2 ] && echo gpt2 || echo llama).yaml" "$out/fused.yaml"
  "$build/bin/strata-opt" --strategy="$out/fused.yaml" "$out/$model.mlir" \
    -o "$out/$model-fused.mlir" 2> "$out/$model-fused.err"
  if [ -s "$out/$model-fused.err" ]; then
    cat "$out/$model-fused.err"
    exit 1
  fi
  if [ "$model" = gpt2 ] && { grep -q strata.tanh "$out/$model-fused.mlir" ||
    ! grep -q 'strata.fused_gemm_epilogue .*gelu_tanh' "$out/$model-fused.mlir"; }; then
    echo "$model: the written-out GELU is not in the GEMM epilogue" >&2
    exit 1
  fi
  if [ "$model" != gpt2 ] && { grep -q strata.rsqrt "$out/$model-fused.mlir" ||
    ! grep -q 'strata.rms_norm ' "$out/$model-fused.mlir"; }; then
    echo "$model: the written-out RMSNorm is not one rms_norm op" >&2
    exit 1
  fi
  for strategy in base z3 pp2 flash fused; do
    nproc=2
    [ "$strategy" = base ] || [ "$strategy" = flash ] || [ "$strategy" = fused ] && nproc=1
    "$build/bin/strata-run" "$out/$model.mlir" --init "$out/$model.safetensors" \
      --data "$out/tokens.bin" --data-format uint16 --steps 8 --seed 3 \
      --strategy "$out/$strategy.yaml" --nproc $nproc --quiet > "$out/$model-$strategy.txt"
  done
  for strategy in z3 pp2 flash fused; do
    echo -n "$model $strategy against one rank: "
    /usr/bin/python3 "$root/test/run/compare_losses.py" "$out/$model-base.txt" \
      "$out/$model-$strategy.txt" --rtol 1e-5
  done
done

# Plain PyTorch's grouped-query attention (scaled_dot_product_attention
# with enable_gqa, one key and value head for four query heads): the
# importer repeats the key and value heads as PyTorch does, and fused
# attention reads them unrepeated (no softmax, transpose or repeat left),
# training the unfused program's losses.
"$build/bin/strata-opt" --strategy="$out/flash.yaml" "$out/gqa.mlir" \
  -o "$out/gqa-flash.mlir" 2> "$out/gqa-flash.err"
if [ -s "$out/gqa-flash.err" ] || ! grep -q 'strata.broadcast_to' "$out/gqa.mlir" ||
  grep -q 'strata.softmax\|strata.transpose\|strata.broadcast_to' "$out/gqa-flash.mlir"; then
  cat "$out/gqa-flash.err"
  echo "gqa: the grouped keys and values are not read unrepeated by fused attention" >&2
  exit 1
fi
for strategy in base flash; do
  "$build/bin/strata-run" "$out/gqa.mlir" --init "$out/gqa.safetensors" \
    --data "$out/tokens.bin" --data-format uint16 --steps 8 --seed 3 \
    --strategy "$out/$strategy.yaml" --quiet > "$out/gqa-$strategy.txt"
done
echo -n "gqa flash against one rank: "
/usr/bin/python3 "$root/test/run/compare_losses.py" "$out/gqa-base.txt" \
  "$out/gqa-flash.txt" --rtol 1e-5
