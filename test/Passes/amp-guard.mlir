// RUN: strata-opt %s --strata-amp='dtype=bfloat16 level=o2 fp16-guard=true' | FileCheck %s

// Level o2 under a guard (Paddle's use_fp16_guard): the guarded matmul and
// its parameter in bf16; the unguarded matmul in f32, and the parameter
// both read stays f32 (the guarded one casts it).
// CHECK-LABEL: strata.param @a : tensor<4x4xbf16>
// CHECK: strata.param @b : tensor<4x4xf32>
// CHECK-LABEL: func @train_step
// CHECK: %[[A:.*]] = strata.get_param @a : tensor<4x4xbf16>
// CHECK: %[[B:.*]] = strata.get_param @b : tensor<4x4xf32>
// CHECK: %[[XL:.*]] = strata.cast %arg0 {{.*}}-> tensor<2x4xbf16>
// CHECK: %[[M:.*]] = strata.matmul %[[XL]], %[[A]] {strata.amp_guard}
// CHECK-SAME: -> tensor<2x4xbf16>
// CHECK: %[[BL:.*]] = strata.cast %[[B]] {{.*}}-> tensor<4x4xbf16>
// CHECK: strata.matmul %[[M]], %[[BL]] {strata.amp_guard}
// CHECK-SAME: -> tensor<2x4xbf16>
// CHECK: %[[W:.*]] = strata.cast %{{.*}} : (tensor<2x4xbf16>) -> tensor<2x4xf32>
// CHECK: strata.matmul %[[W]], %[[B]] : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
strata.param @a : tensor<4x4xf32> init <normal, 1.0>
strata.param @b : tensor<4x4xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<2x4xf32>) -> tensor<f32> {
  %a = strata.get_param @a : tensor<4x4xf32>
  %b = strata.get_param @b : tensor<4x4xf32>
  %0 = strata.matmul %x, %a {strata.amp_guard} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = strata.matmul %0, %b {strata.amp_guard} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = strata.matmul %1, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %3 = strata.reduce_sum %2 {dims = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  return %3 : tensor<f32>
}
