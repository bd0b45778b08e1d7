// RUN: not strata-opt %s --strata-recompute=checkpoints=h9 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not strata-opt %s --strata-recompute='checkpoints=h0 no-recompute-segments=1' 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not strata-opt %s --strata-recompute='checkpoints=h0 refined-ops-patterns=matmul' 2>&1 | FileCheck %s --check-prefix=PATTERN
// RUN: not strata-opt %s --strata-recompute 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not strata-opt %s --strata-recompute='checkpoints=h0 refined-ops-patterns=matmull|1||' 2>&1 | FileCheck %s --check-prefix=OPNAME
// NAME: error: strata-recompute: checkpoint 'h9' names no layer (no forward op has strata.layer = "h9"); the program's layers: h0
// OPNAME: error: strata-recompute: refined_ops_patterns names 'matmull', which is not an op
// RANGE: error: strata-recompute: no_recompute_segments index 1 is out of range: there is 1 checkpoint
// PATTERN: error: strata-recompute: refined-ops-patterns entry 'matmul' is not main|num|pre|suf
// NONE: error: strata-recompute: no checkpoints given
// A second run would recompute the recomputed ops again: refused.
// RUN: strata-gen gpt --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 16 --batch 2 | strata-opt --strata-autodiff --strata-recompute=checkpoints=h0 | not strata-opt --strata-recompute=checkpoints=h0 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: error: strata-recompute: the program has been through strata-recompute already (its 'strata.passes' attribute records it); it runs once

strata.param @w : tensor<4x4xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<2x4xf32>) -> (tensor<f32>, tensor<4x4xf32> {strata.grad_of = @w}) {
  %w = strata.get_param @w {strata.role = #strata.role<forward>, strata.layer = "h0"} : tensor<4x4xf32>
  %c = arith.constant dense<0.0> : tensor<f32>
  %z = arith.constant dense<0.0> : tensor<4x4xf32>
  return %c, %z : tensor<f32>, tensor<4x4xf32>
}
