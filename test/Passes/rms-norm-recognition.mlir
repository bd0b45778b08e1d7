// RUN: strata-opt %s -split-input-file --strata-rms-norm-recognition | FileCheck %s
// It runs on the forward program, before autodiff.
// RUN: strata-gen gpt --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 16 --batch 2 | strata-opt --strata-autodiff | not strata-opt --strata-rms-norm-recognition 2>&1 | FileCheck %s --check-prefix=AFTER
// AFTER: error: strata-rms-norm-recognition: the program has been through strata-autodiff, which runs after strata-rms-norm-recognition; run strata-rms-norm-recognition first

// Hugging Face's LlamaRMSNorm as the importer writes it; x has another
// reader (the residual).
// CHECK-LABEL: func @hugging_face
func.func @hugging_face(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  // CHECK-NEXT: %[[Y:.*]] = strata.rms_norm %arg0, %arg1 {epsilon = 9.9999999747524271E-7 : f64, strata.layer = "layers.0"} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK-NEXT: %[[R:.*]] = strata.add %arg0, %[[Y]]
  // CHECK-NEXT: return %[[Y]], %[[R]]
  %sq = strata.mul %x, %x {strata.layer = "layers.0"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %ms = strata.reduce_mean %sq {dims = array<i64: 2>, keep_dims, strata.layer = "layers.0"} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %eps = arith.constant dense<9.999999975e-07> : tensor<f32>
  %v = strata.add %ms, %eps {strata.layer = "layers.0"} : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %r = strata.rsqrt %v {strata.layer = "layers.0"} : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %n = strata.mul %x, %r {strata.layer = "layers.0"} : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = strata.mul %w, %n {strata.layer = "layers.0"} : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %res = strata.add %x, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y, %res : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// Operands the other way round, a rank-2 input, the constant shared by two
// norms (erased with the second); epsilon is the f32 constant's value.
// CHECK-LABEL: func @swapped
func.func @swapped(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %[[A:.*]] = strata.rms_norm %arg0, %arg1 {epsilon = 9.9999997473787516E-6 : f64}
  // CHECK-NEXT: %[[B:.*]] = strata.rms_norm %[[A]], %arg1 {epsilon = 9.9999997473787516E-6 : f64}
  // CHECK-NEXT: return %[[B]]
  %eps = arith.constant dense<1.000000e-05> : tensor<1xf32>
  %sq = strata.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms = strata.reduce_mean %sq {dims = array<i64: 1>, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = strata.add %eps, %ms : (tensor<1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = strata.rsqrt %v : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = strata.mul %r, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = strata.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %sq2 = strata.mul %y, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms2 = strata.reduce_mean %sq2 {dims = array<i64: 1>, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v2 = strata.add %ms2, %eps : (tensor<4x1xf32>, tensor<1xf32>) -> tensor<4x1xf32>
  %r2 = strata.rsqrt %v2 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n2 = strata.mul %y, %r2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y2 = strata.mul %w, %n2 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y2 : tensor<4x8xf32>
}

// -----

// What is not an RMS norm of the last dimension, or cannot be one op, is
// kept as written.
// CHECK-LABEL: func @keep
func.func @keep(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %e: tensor<f32>, %w2: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8x4xf32>) {
  // CHECK-NOT: strata.rms_norm
  %eps = arith.constant dense<1.000000e-05> : tensor<f32>
  // The statistic read elsewhere too.
  %sq = strata.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms = strata.reduce_mean %sq {dims = array<i64: 1>, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v = strata.add %ms, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = strata.rsqrt %v : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = strata.mul %x, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = strata.mul %w, %n : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // epsilon an argument, not a constant.
  %sq2 = strata.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms2 = strata.reduce_mean %sq2 {dims = array<i64: 1>, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v2 = strata.add %ms2, %e : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r2 = strata.rsqrt %v2 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n2 = strata.mul %x, %r2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y2 = strata.mul %w, %n2 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // A weight of rank 2.
  %sq3 = strata.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms3 = strata.reduce_mean %sq3 {dims = array<i64: 1>, keep_dims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %v3 = strata.add %ms3, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r3 = strata.rsqrt %v3 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %n3 = strata.mul %x, %r3 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y3 = strata.mul %w2, %n3 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // The mean over the first dimension: the columns' RMS.
  %xt = strata.transpose %x {permutation = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %sq4 = strata.mul %xt, %xt : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %ms4 = strata.reduce_mean %sq4 {dims = array<i64: 0>, keep_dims} : (tensor<8x4xf32>) -> tensor<1x4xf32>
  %v4 = strata.add %ms4, %eps : (tensor<1x4xf32>, tensor<f32>) -> tensor<1x4xf32>
  %r4 = strata.rsqrt %v4 : (tensor<1x4xf32>) -> tensor<1x4xf32>
  %n4 = strata.mul %xt, %r4 : (tensor<8x4xf32>, tensor<1x4xf32>) -> tensor<8x4xf32>
  %w4 = strata.reshape %w : (tensor<8xf32>) -> tensor<8x1xf32>
  %y4 = strata.mul %w4, %n4 : (tensor<8x1xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %y, %y2, %y3, %ms, %y4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<8x4xf32>
}
