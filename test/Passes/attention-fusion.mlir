// RUN: strata-opt %s -split-input-file --strata-attention-fusion | FileCheck %s
// A softmax left unfused is said once, with the reason and the count:
// RUN: strata-opt %s -split-input-file --strata-attention-fusion -o /dev/null 2>&1 | FileCheck %s --check-prefix=WARN
// After autodiff the softmax has the backward's readers: the pass order is
// named.
// RUN: strata-gen gpt --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 16 --batch 2 | strata-opt --strata-autodiff | not strata-opt --strata-attention-fusion 2>&1 | FileCheck %s --check-prefix=AFTER
// AFTER: error: strata-attention-fusion: the program has been through strata-autodiff, which runs after strata-attention-fusion; run strata-attention-fusion first
// WARN-NOT: warning
// WARN: attention-fusion.mlir:[[@LINE+242]]:9: warning: strata-attention-fusion left 4 of 4 softmax ops unfused; this one: the probabilities have other readers (or none)
// WARN-NOT: warning

// The GPT's causal attention: the projections' [batch, seq, heads, head]
// split into heads by transposes, q k^T, scale, causal softmax, times v, and
// the heads put back side by side. The fused op reads the projections where
// they are and writes the layout the last transpose made: no transpose is
// left.
// CHECK-LABEL: func @heads
func.func @heads(%xq: tensor<2x16x4x8xf32>, %xk: tensor<2x16x4x8xf32>, %xv: tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32> {
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg2 {causal, scale = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %s = strata.matmul %q, %k {transpose_rhs, strata.layer = "h0"} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %z = strata.scale %s {factor = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %p = strata.softmax %z {causal, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = strata.matmul %p, %v {strata.layer = "h0"} : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %t : tensor<2x16x4x8xf32>
}

// -----

// LLaMA's rotary embedding between the heads' split and q k^T (q * cos +
// rotate_half(q) * sin, the halves sliced, negated and joined along the
// head dimension): computed on the projections' layout instead, the
// tables' sequence and head dimensions swapped (the same elements), so that
// no transpose is left.
// CHECK-LABEL: func @rotary
func.func @rotary(%xq: tensor<1x4x2x4xf32>, %xk: tensor<1x4x2x4xf32>, %xv: tensor<1x4x2x4xf32>) -> tensor<1x4x2x4xf32> {
  // CHECK-NOT: strata.transpose
  // CHECK: %[[COS:.*]] = arith.constant dense<{{\[\[\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]], {{\[\[}}5.000000e+00, {{.*}} : tensor<1x4x1x4xf32>
  // CHECK: %[[SIN:.*]] = arith.constant dense<5.000000e-01> : tensor<1x4x1x4xf32>
  // CHECK: %[[QC:.*]] = strata.mul %arg0, %[[COS]] {strata.layer = "h0"} : (tensor<1x4x2x4xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x2x4xf32>
  // CHECK: %[[Q1:.*]] = strata.slice %arg0 {dim = 3 : i64, size = 2 : i64, start = 0 : i64, strata.layer = "h0"} : (tensor<1x4x2x4xf32>) -> tensor<1x4x2x2xf32>
  // CHECK: %[[Q2:.*]] = strata.slice %arg0 {dim = 3 : i64, size = 2 : i64, start = 2 : i64, strata.layer = "h0"}
  // CHECK: %[[N:.*]] = strata.scale %[[Q2]]
  // CHECK: %[[RH:.*]] = strata.concat %[[N]], %[[Q1]] {dim = 3 : i64, strata.layer = "h0"} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x4x2x4xf32>
  // CHECK: %[[QS:.*]] = strata.mul %[[RH]], %[[SIN]]
  // CHECK: %[[QR:.*]] = strata.add %[[QC]], %[[QS]] {strata.layer = "h0"} : (tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>) -> tensor<1x4x2x4xf32>
  // CHECK: %[[KR:.*]] = strata.add
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %[[QR]], %[[KR]], %arg2 {causal, scale = 5.000000e-01 : f64, strata.layer = "h0"} : (tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>) -> (tensor<1x4x2x4xf32>, tensor<1x2x4xf32>)
  // CHECK-NEXT: return %[[O]]
  %cos = arith.constant dense<[[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0], [13.0, 14.0, 15.0, 16.0]]]]> : tensor<1x1x4x4xf32>
  %sin = arith.constant dense<0.5> : tensor<4x4xf32>
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %qc = strata.mul %q, %cos {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %q1 = strata.slice %q {dim = 3 : i64, start = 0 : i64, size = 2 : i64, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x2xf32>
  %q2 = strata.slice %q {dim = 3 : i64, start = 2 : i64, size = 2 : i64, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x2xf32>
  %qn = strata.scale %q2 {factor = -1.0 : f64, strata.layer = "h0"} : (tensor<1x2x4x2xf32>) -> tensor<1x2x4x2xf32>
  %qh = strata.concat %qn, %q1 {dim = 3 : i64, strata.layer = "h0"} : (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x4x4xf32>
  %qs = strata.mul %qh, %sin {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %qr = strata.add %qc, %qs {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %kc = strata.mul %k, %cos {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %k1 = strata.slice %k {dim = 3 : i64, start = 0 : i64, size = 2 : i64, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x2xf32>
  %k2 = strata.slice %k {dim = 3 : i64, start = 2 : i64, size = 2 : i64, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x2xf32>
  %kn = strata.scale %k2 {factor = -1.0 : f64, strata.layer = "h0"} : (tensor<1x2x4x2xf32>) -> tensor<1x2x4x2xf32>
  %kh = strata.concat %kn, %k1 {dim = 3 : i64, strata.layer = "h0"} : (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>) -> tensor<1x2x4x4xf32>
  %ks = strata.mul %kh, %sin {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %kr = strata.add %kc, %ks {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %s = strata.matmul %qr, %kr {transpose_rhs, strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %z = strata.scale %s {factor = 0.5 : f64, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = strata.softmax %z {causal, strata.layer = "h0"} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = strata.matmul %p, %v {strata.layer = "h0"} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x2x4x4xf32>) -> tensor<1x4x2x4xf32>
  return %t : tensor<1x4x2x4xf32>
}

// -----

// Grouped-query attention: two key/value heads, each read by two query
// heads (Hugging Face's repeat_kv: a reshape, broadcast_to, a reshape).
// The fused op reads the keys and values in the projections' layout with
// their own two heads: no transpose, no repeat left.
// CHECK-LABEL: func @grouped
func.func @grouped(%xq: tensor<1x4x4x2xf32>, %xk: tensor<1x4x2x2xf32>, %xv: tensor<1x4x2x2xf32>) -> tensor<1x4x4x2xf32> {
  // CHECK-NOT: strata.transpose
  // CHECK-NOT: strata.broadcast_to
  // CHECK: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg2 {causal, scale = 1.000000e+00 : f64} : (tensor<1x4x4x2xf32>, tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x2xf32>) -> tensor<1x2x4x2xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x2xf32>) -> tensor<1x2x4x2xf32>
  %ku = strata.reshape %k : (tensor<1x2x4x2xf32>) -> tensor<1x2x1x4x2xf32>
  %kb = strata.broadcast_to %ku : (tensor<1x2x1x4x2xf32>) -> tensor<1x2x2x4x2xf32>
  %kr = strata.reshape %kb : (tensor<1x2x2x4x2xf32>) -> tensor<1x4x4x2xf32>
  %vu = strata.reshape %v : (tensor<1x2x4x2xf32>) -> tensor<1x2x1x4x2xf32>
  %vb = strata.broadcast_to %vu : (tensor<1x2x1x4x2xf32>) -> tensor<1x2x2x4x2xf32>
  %vr = strata.reshape %vb : (tensor<1x2x2x4x2xf32>) -> tensor<1x4x4x2xf32>
  %s = strata.matmul %q, %kr {transpose_rhs} : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x4xf32>
  %p = strata.softmax %s {causal} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = strata.matmul %p, %vr : (tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  return %t : tensor<1x4x4x2xf32>
}

// -----

// Keys repeated from two heads but values with four of their own: the
// fused op takes as many key as value heads, so the keys' repeat is made
// in the projections' layout and read with four heads.
// CHECK-LABEL: func @grouped_keys_only
func.func @grouped_keys_only(%xq: tensor<1x4x4x2xf32>, %xk: tensor<1x4x2x2xf32>, %xv: tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32> {
  // CHECK-NOT: strata.transpose
  // CHECK: %[[KU:.*]] = strata.reshape %arg1 : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x1x2xf32>
  // CHECK-NEXT: %[[KB:.*]] = strata.broadcast_to %[[KU]] : (tensor<1x4x2x1x2xf32>) -> tensor<1x4x2x2x2xf32>
  // CHECK-NEXT: %[[K:.*]] = strata.reshape %[[KB]] : (tensor<1x4x2x2x2xf32>) -> tensor<1x4x4x2xf32>
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %arg0, %[[K]], %arg2 {causal, scale = 1.000000e+00 : f64} : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x2xf32>) -> tensor<1x2x4x2xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %ku = strata.reshape %k : (tensor<1x2x4x2xf32>) -> tensor<1x2x1x4x2xf32>
  %kb = strata.broadcast_to %ku : (tensor<1x2x1x4x2xf32>) -> tensor<1x2x2x4x2xf32>
  %kr = strata.reshape %kb : (tensor<1x2x2x4x2xf32>) -> tensor<1x4x4x2xf32>
  %s = strata.matmul %q, %kr {transpose_rhs} : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x4xf32>
  %p = strata.softmax %s {causal} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = strata.matmul %p, %v : (tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  return %t : tensor<1x4x4x2xf32>
}

// -----

// A table per head and position ([heads, seq, head], both swapped
// dimensions longer than 1) is not taken: q is read as it is, one head
// each, and the transposes stay.
// CHECK-LABEL: func @table_per_head
func.func @table_per_head(%xq: tensor<1x4x2x4xf32>, %xk: tensor<1x4x2x4xf32>, %xv: tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32> {
  // CHECK: strata.transpose %arg0
  // CHECK: strata.attention {{.*}} : (tensor<1x2x4x1x4xf32>, tensor<1x2x4x1x4xf32>, tensor<1x2x4x1x4xf32>)
  %c = arith.constant dense<0.5> : tensor<2x4x4xf32>
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %qc = strata.mul %q, %c : (tensor<1x2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %s = strata.matmul %qc, %k {transpose_rhs} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = strata.softmax %s {causal} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = strata.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %o : tensor<1x2x4x4xf32>
}

// -----

// The split heads read elsewhere too (q returned), and the product read as
// it is: the transpose of q stays for its other reader, and the product is
// the fused result transposed back.
// CHECK-LABEL: func @shared
func.func @shared(%xq: tensor<2x16x4x8xf32>, %xk: tensor<2x16x4x8xf32>, %xv: tensor<2x16x4x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) {
  // CHECK-NEXT: %[[Q:.*]] = strata.transpose %arg0
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg2 {scale = 1.000000e+00 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
  // CHECK-NEXT: %[[B:.*]] = strata.transpose %[[O]] {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  // CHECK-NEXT: return %[[B]], %[[Q]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %p = strata.softmax %s : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = strata.matmul %p, %v : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %o, %q : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>
}

// -----

// Heads already apart ([batch, heads, seq, head] arguments; one value not
// from a transpose): the leading dimensions are the batch, one head each
// (reshapes, no copies), and the result reshaped back.
// CHECK-LABEL: func @causal
func.func @causal(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %xv: tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32> {
  // CHECK-NEXT: %[[V:.*]] = strata.transpose %arg2
  // CHECK-NEXT: %[[RQ:.*]] = strata.reshape %arg0 {strata.layer = "h0"} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x1x8xf32>
  // CHECK-NEXT: %[[RK:.*]] = strata.reshape %arg1 {strata.layer = "h0"} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x1x8xf32>
  // CHECK-NEXT: %[[RV:.*]] = strata.reshape %[[V]] {strata.layer = "h0"} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x1x8xf32>
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %[[RQ]], %[[RK]], %[[RV]] {causal, scale = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x4x16x1x8xf32>, tensor<2x4x16x1x8xf32>, tensor<2x4x16x1x8xf32>) -> (tensor<2x4x16x1x8xf32>, tensor<2x4x1x16xf32>)
  // CHECK-NEXT: %[[R:.*]] = strata.reshape %[[O]] {strata.layer = "h0"} : (tensor<2x4x16x1x8xf32>) -> tensor<2x4x16x8xf32>
  // CHECK-NEXT: return %[[R]]
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %s = strata.matmul %q, %k {transpose_rhs, strata.layer = "h0"} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %z = strata.scale %s {factor = 0.35355339059327373 : f64, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %p = strata.softmax %z {causal, strata.layer = "h0"} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = strata.matmul %p, %v {strata.layer = "h0"} : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %o : tensor<2x4x16x8xf32>
}

// -----

// Dropout on the probabilities (GPT-2's attn_pdrop): the fused op drops
// them with the dropout's key and probability (the same mask), and keeps
// the micro-batch the mask is keyed by.
// CHECK-LABEL: func @dropout
func.func @dropout(%xq: tensor<2x16x4x8xf32>, %xk: tensor<2x16x4x8xf32>, %xv: tensor<2x16x4x8xf32>) -> tensor<2x16x4x8xf32> {
  // CHECK-NEXT: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg2 {causal, dropout = 1.000000e-01 : f64, dropout_key = 3 : i64, scale = 0.35355339059327373 : f64, strata.micro_batch = 1 : i64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>, strata.micro_batch = 1 : i64} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>, strata.micro_batch = 1 : i64} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %v = strata.transpose %xv {permutation = array<i64: 0, 2, 1, 3>, strata.micro_batch = 1 : i64} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %s = strata.matmul %q, %k {transpose_rhs, strata.micro_batch = 1 : i64} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %z = strata.scale %s {factor = 0.35355339059327373 : f64, strata.micro_batch = 1 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %p = strata.softmax %z {causal, strata.micro_batch = 1 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %d = strata.dropout %p {key = 3 : i64, prob = 0.1 : f64, strata.micro_batch = 1 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = strata.matmul %d, %v {strata.micro_batch = 1 : i64} : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>, strata.micro_batch = 1 : i64} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %t : tensor<2x16x4x8xf32>
}

// -----

// Without the scale (1.0), not causal, keys longer than queries, a value
// width of its own.
// CHECK-LABEL: func @cross
func.func @cross(%q: tensor<3x5x8xf32>, %k: tensor<3x7x8xf32>, %v: tensor<3x7x6xf32>) -> tensor<3x5x6xf32> {
  // CHECK: strata.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64} : (tensor<3x5x1x8xf32>, tensor<3x7x1x8xf32>, tensor<3x7x1x6xf32>) -> (tensor<3x5x1x6xf32>, tensor<3x1x5xf32>)
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<3x5x8xf32>, tensor<3x7x8xf32>) -> tensor<3x5x7xf32>
  %p = strata.softmax %s : (tensor<3x5x7xf32>) -> tensor<3x5x7xf32>
  %o = strata.matmul %p, %v : (tensor<3x5x7xf32>, tensor<3x7x6xf32>) -> tensor<3x5x6xf32>
  return %o : tensor<3x5x6xf32>
}

// -----

// bf16 attention as written (a program imported in bf16): fused, the
// log-sum-exp in f32. One head of rank 2 ([seq, head]).
// CHECK-LABEL: func @bf16
func.func @bf16(%q: tensor<16x8xbf16>, %k: tensor<16x8xbf16>, %v: tensor<16x8xbf16>) -> tensor<16x8xbf16> {
  // CHECK: strata.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 1.000000e+00 : f64} : (tensor<16x1x8xbf16>, tensor<16x1x8xbf16>, tensor<16x1x8xbf16>) -> (tensor<16x1x8xbf16>, tensor<1x16xf32>)
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<16x8xbf16>, tensor<16x8xbf16>) -> tensor<16x16xbf16>
  %p = strata.softmax %s {causal} : (tensor<16x16xbf16>) -> tensor<16x16xbf16>
  %o = strata.matmul %p, %v : (tensor<16x16xbf16>, tensor<16x8xbf16>) -> tensor<16x8xbf16>
  return %o : tensor<16x8xbf16>
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
  // The dropped probabilities are read elsewhere (returned).
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

// -----

// Keys that are the values, repeated once for grouped-query attention: the
// fused op reads the unrepeated heads as both, and the repeat dies once.
// CHECK-LABEL: func @grouped_shared
func.func @grouped_shared(%xq: tensor<1x4x4x2xf32>, %xk: tensor<1x4x2x2xf32>) -> tensor<1x4x4x2xf32> {
  // CHECK-NOT: strata.broadcast_to
  // CHECK: %[[O:.*]], %{{.*}} = strata.attention %arg0, %arg1, %arg1 {causal, scale = 1.000000e+00 : f64} : (tensor<1x4x4x2xf32>, tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> (tensor<1x4x4x2xf32>, tensor<1x4x4xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %k = strata.transpose %xk {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x2x2xf32>) -> tensor<1x2x4x2xf32>
  %ku = strata.reshape %k : (tensor<1x2x4x2xf32>) -> tensor<1x2x1x4x2xf32>
  %kb = strata.broadcast_to %ku : (tensor<1x2x1x4x2xf32>) -> tensor<1x2x2x4x2xf32>
  %kr = strata.reshape %kb : (tensor<1x2x2x4x2xf32>) -> tensor<1x4x4x2xf32>
  %s = strata.matmul %q, %kr {transpose_rhs} : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x4xf32>
  %p = strata.softmax %s {causal} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %o = strata.matmul %p, %kr : (tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  return %t : tensor<1x4x4x2xf32>
}

// -----

// Multi-query attention (Falcon's): one key and value head, which the
// products broadcast over the query heads, is read as one key head that
// every query head shares (a reshape moves its unit head dimension).
// CHECK-LABEL: func @multi_query
func.func @multi_query(%xq: tensor<2x4x4x2xf32>, %k: tensor<2x1x4x2xf32>, %v: tensor<2x1x4x2xf32>) -> tensor<2x4x4x2xf32> {
  // CHECK-DAG: %[[K:.*]] = strata.reshape %arg1 : (tensor<2x1x4x2xf32>) -> tensor<2x4x1x2xf32>
  // CHECK-DAG: %[[V:.*]] = strata.reshape %arg2 : (tensor<2x1x4x2xf32>) -> tensor<2x4x1x2xf32>
  // CHECK: %[[O:.*]], %{{.*}} = strata.attention %arg0, %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f64} : (tensor<2x4x4x2xf32>, tensor<2x4x1x2xf32>, tensor<2x4x1x2xf32>) -> (tensor<2x4x4x2xf32>, tensor<2x4x4xf32>)
  // CHECK-NEXT: return %[[O]]
  %q = strata.transpose %xq {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32>
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<2x4x4x2xf32>, tensor<2x1x4x2xf32>) -> tensor<2x4x4x4xf32>
  %ss = strata.scale %s {factor = 5.000000e-01 : f64} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %p = strata.softmax %ss {causal} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %o = strata.matmul %p, %v : (tensor<2x4x4x4xf32>, tensor<2x1x4x2xf32>) -> tensor<2x4x4x2xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x4x2xf32>) -> tensor<2x4x4x2xf32>
  return %t : tensor<2x4x4x2xf32>
}

// -----

// Not where q's heads are not split off from the projection's layout (they
// would be batch dimensions, which the shared head does not have): left
// unfused, saying why.
// CHECK-LABEL: func @multi_query_heads_first
// CHECK: strata.softmax
// WARN: attention-fusion.mlir:[[@LINE+4]]:{{[0-9]+}}: warning: strata-attention-fusion left 1 of 1 softmax ops unfused; this one: k and v are one head that every head of q reads, but q's heads are not split off from the projection's layout
// WARN-NOT: warning
func.func @multi_query_heads_first(%q: tensor<2x4x4x2xf32>, %k: tensor<2x1x4x2xf32>) -> tensor<2x4x4x2xf32> {
  %s = strata.matmul %q, %k {transpose_rhs} : (tensor<2x4x4x2xf32>, tensor<2x1x4x2xf32>) -> tensor<2x4x4x4xf32>
  %p = strata.softmax %s {causal} : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %o = strata.matmul %p, %k : (tensor<2x4x4x4xf32>, tensor<2x1x4x2xf32>) -> tensor<2x4x4x2xf32>
  return %o : tensor<2x4x4x2xf32>
}
