// RUN: not strata-opt %s --strata-amp='dtype=bfloat16 level=o3' 2>&1 | FileCheck %s --check-prefix=LEVEL
// RUN: not strata-opt %s --strata-amp='dtype=float32' 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not strata-opt %s --strata-amp='dtype=bfloat16 custom-white-list=softmx' 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not strata-opt %s --strata-amp='dtype=bfloat16 custom-white-list=gelu custom-black-list=gelu' 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not strata-opt %s --strata-autodiff --strata-amp='dtype=bfloat16' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not strata-opt %s --strata-amp='dtype=bfloat16 fp16-guard=true' 2>&1 | FileCheck %s --check-prefix=GUARDO1
// RUN: not strata-opt %s --strata-amp='dtype=bfloat16 level=o2 fp16-guard=true' 2>&1 | FileCheck %s --check-prefix=NOGUARD
// LEVEL: error: strata-amp: level must be o1 or o2, got 'o3'
// DTYPE: error: strata-amp: dtype must be float16 or bfloat16, got 'float32'
// NAME: error: strata-amp: custom-white-list names 'softmx', which is not an op mixed precision decides; did you mean 'softmax'?
// BOTH: error: strata-amp: 'gelu' is in both custom-white-list and custom-black-list
// ORDER: error: strata-amp: 'train_step' already has its backward: mixed precision rewrites the forward program and runs before strata-autodiff
// GUARDO1: error: strata-amp: fp16-guard applies to level o2 (level o1 decides per op by the lists)
// NOGUARD: error: strata-amp: fp16-guard: no op of 'train_step' carries strata.amp_guard, so nothing would compute in bfloat16

strata.param @w : tensor<4x4xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<2x4xf32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<4x4xf32>
  %0 = strata.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = strata.reduce_sum %0 {dims = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
