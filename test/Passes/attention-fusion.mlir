// RUN: strata-opt %s -split-input-file --strata-attention-fusion | FileCheck %s

// The GPT's causal attention: q k^T, scale, causal softmax, times v.
// CHECK-LABEL: func @causal
func.func @causal(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %v: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg2 {causal, scale = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
  // CHECK-NEXT: return %[[O]]
  %s = strata.matmul %q, %k {transpose_rhs, strata.layer = "h0"} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %z = strata.scale %s {factor = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %p = strata.softmax %z {causal, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = strata.matmul %p, %v {strata.layer = "h0"} : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %o : tensor<2x4x16x8xf32>
}

// -----

// Without the scale (1.0), not causal, keys longer than queries, a value
// width of its own.
// CHECK-LABEL: func @cross
func.func @cross(%q: tensor<3x5x8xf32>, %k: tensor<3x7x8xf32>, %v: tensor<3x7x6xf32>) -> tensor<3x5x6xf32> {
  // CHECK-NEXT: strata.attention %arg0, %arg1, %arg2 {scale = 1.000000e+00 : f64} : (tensor<3x5x8xf32>, tensor<3x7x8xf32>, tensor<3x7x6xf32>) -> (tensor<3x5x6xf32>, tensor<3x5xf32>)
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<3x5x8xf32>, tensor<3x7x8xf32>) -> tensor<3x5x7xf32>
  %p = strata.softmax %s : (tensor<3x5x7xf32>) -> tensor<3x5x7xf32>
  %o = strata.matmul %p, %v : (tensor<3x5x7xf32>, tensor<3x7x6xf32>) -> tensor<3x5x6xf32>
  return %o : tensor<3x5x6xf32>
}

// -----

// bf16 attention as written (a program imported in bf16): fused, the
// log-sum-exp in f32.
// CHECK-LABEL: func @bf16
func.func @bf16(%q: tensor<2x16x8xbf16>, %k: tensor<2x16x8xbf16>, %v: tensor<2x16x8xbf16>) -> tensor<2x16x8xbf16> {
  // CHECK-NEXT: strata.attention %arg0, %arg1, %arg2 {causal, scale = 1.000000e+00 : f64} : (tensor<2x16x8xbf16>, tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> (tensor<2x16x8xbf16>, tensor<2x16xf32>)
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x16xbf16>
  %p = strata.softmax %s {causal} : (tensor<2x16x16xbf16>) -> tensor<2x16x16xbf16>
  %o = strata.matmul %p, %v : (tensor<2x16x16xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x8xbf16>
  return %o : tensor<2x16x8xbf16>
}

// -----

// CHECK-LABEL: func @keep
func.func @keep(%q: tensor<2x16x8xf32>, %k: tensor<2x16x8xf32>, %v: tensor<2x16x8xf32>, %w: tensor<16x8xf32>, %qh: tensor<2x16x8xbf16>) -> (tensor<2x16x8xf32>, tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xbf16>) {
  // CHECK-NOT: strata.attention
  // The probabilities are read elsewhere (returned).
  %s0 = strata.matmul %q, %k {transpose_rhs} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x16xf32>
  %p0 = strata.softmax %s0 {causal} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %o0 = strata.matmul %p0, %v : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %o1 = strata.matmul %p0, %v : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // Dropout on the probabilities.
  %s2 = strata.matmul %q, %k {transpose_rhs} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x16xf32>
  %p2 = strata.softmax %s2 {causal} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %d2 = strata.dropout %p2 {key = 1 : i64, prob = 0.1 : f64} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %o2 = strata.matmul %d2, %v : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // Keys shared by every batch (a rank-2 key broadcasts).
  %s3 = strata.matmul %q, %w {transpose_rhs} : (tensor<2x16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x16xf32>
  %p3 = strata.softmax %s3 : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %o3 = strata.matmul %p3, %v : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // Casts in the chain (mixed precision's softmax in f32 between bf16
  // products): the pass runs before strata-amp, not after.
  %s4 = strata.matmul %qh, %qh {transpose_rhs} : (tensor<2x16x8xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x16xbf16>
  %c4 = strata.cast %s4 : (tensor<2x16x16xbf16>) -> tensor<2x16x16xf32>
  %p4 = strata.softmax %c4 {causal} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %b4 = strata.cast %p4 : (tensor<2x16x16xf32>) -> tensor<2x16x16xbf16>
  %o4 = strata.matmul %b4, %qh : (tensor<2x16x16xbf16>, tensor<2x16x8xbf16>) -> tensor<2x16x8xbf16>
  return %o0, %d2, %o2, %o3, %o4 : tensor<2x16x8xf32>, tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xbf16>
}
