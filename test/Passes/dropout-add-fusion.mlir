// RUN: strata-opt %s -split-input-file --strata-dropout-add-fusion | FileCheck %s

// CHECK-LABEL: func @fuse
func.func @fuse(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: %[[A:.*]] = strata.fused_dropout_add %arg0, %arg1 {key = 3 : i64, prob = 1.000000e-01 : f64, strata.micro_batch = 2 : i64, strata.role = #strata.role<forward>}
  %d = strata.dropout %x {key = 3 : i64, prob = 0.1 : f64, strata.micro_batch = 2 : i64, strata.role = #strata.role<forward>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = strata.add %r, %d : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // Either operand order.
  // CHECK: %[[B:.*]] = strata.fused_dropout_add %[[A]], %arg1 {key = 4 : i64
  %e = strata.dropout %0 {key = 4 : i64, prob = 0.1 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = strata.add %e, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NOT: strata.dropout
  // CHECK: return %[[A]], %[[B]]
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func @keep
func.func @keep(%x: tensor<4x8xf32>, %r: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // Broadcasting residual: not fused.
  // CHECK: strata.dropout {{.*}}key = 1
  // CHECK: strata.add
  %d = strata.dropout %x {key = 1 : i64, prob = 0.1 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = strata.add %d, %r : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // The dropout output is used elsewhere: not fused.
  // CHECK: strata.dropout {{.*}}key = 2
  // CHECK: strata.add
  %e = strata.dropout %x {key = 2 : i64, prob = 0.1 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = strata.add %e, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = strata.mul %e, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK-NOT: strata.fused_dropout_add
  return %0, %2 : tensor<4x8xf32>, tensor<4x8xf32>
}
