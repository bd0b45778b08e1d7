// RUN: strata-opt %s --strata-gradient-merge=k-steps=2 | FileCheck %s
// RUN: strata-opt %s --strata-gradient-merge='k-steps=2 avg=false' | FileCheck %s --check-prefix=SUM
// RUN: strata-opt %s --strata-gradient-merge=k-steps=1 | FileCheck %s --check-prefix=K1
// End-to-end equivalence with the unsplit program: test/run/gradient-merge.test.

strata.param @w : tensor<3x2xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<3x2xf32> {strata.grad_of = @w})
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> (tensor<f32>, tensor<3x2xf32> {strata.grad_of = @w}) {
  // Parameter reads and constants do not depend on the batch: shared.
  // CHECK: %[[W:.*]] = strata.get_param @w
  // CHECK: %[[CST:.*]] = arith.constant
  %w = strata.get_param @w {strata.role = #strata.role<forward>} : tensor<3x2xf32>
  %one = arith.constant {strata.role = #strata.role<backward>} dense<1.0> : tensor<f32>
  // Micro-batch 0.
  // CHECK: %[[X0:.*]] = strata.slice %arg0 {dim = 0 : i64, size = 2 : i64, start = 0 : i64, strata.micro_batch = 0 : i64, strata.role = #strata.role<forward>} : (tensor<4x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[Y0:.*]] = strata.slice %arg1 {dim = 0 : i64, size = 2 : i64, start = 0 : i64
  // CHECK: %[[L0IN:.*]] = strata.matmul %[[X0]], %[[W]] {strata.micro_batch = 0 : i64, strata.role = #strata.role<forward>} : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  // CHECK: %[[L0:.*]] = strata.cross_entropy %[[L0IN]], %[[Y0]] {strata.micro_batch = 0 : i64
  // CHECK: %[[D0:.*]] = strata.cross_entropy_grad %[[L0IN]], %[[Y0]], %[[CST]] {strata.micro_batch = 0 : i64
  // CHECK: %{{.*}}, %[[G0:.*]] = strata.matmul_grad %[[X0]], %[[W]], %[[D0]]
  // Micro-batch 1.
  // CHECK: %[[X1:.*]] = strata.slice %arg0 {dim = 0 : i64, size = 2 : i64, start = 2 : i64, strata.micro_batch = 1 : i64
  // CHECK: %[[L1:.*]] = strata.cross_entropy {{.*}}strata.micro_batch = 1 : i64
  // CHECK: %{{.*}}, %[[G1:.*]] = strata.matmul_grad %[[X1]]
  // CHECK: %[[LS:.*]] = strata.add %[[L0]], %[[L1]]
  // CHECK: %[[GS:.*]] = strata.add %[[G0]], %[[G1]]
  // CHECK: %[[LM:.*]] = strata.scale %[[LS]] {factor = 5.000000e-01 : f64
  // CHECK: %[[GM:.*]] = strata.scale %[[GS]] {factor = 5.000000e-01 : f64
  // CHECK: return %[[LM]], %[[GM]]
  %0 = strata.matmul %x, %w {strata.role = #strata.role<forward>} : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %loss = strata.cross_entropy %0, %y {strata.role = #strata.role<forward>} : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  %d = strata.cross_entropy_grad %0, %y, %one {strata.role = #strata.role<backward>} : (tensor<4x2xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x2xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %d {strata.role = #strata.role<backward>} : (tensor<4x3xf32>, tensor<3x2xf32>, tensor<4x2xf32>) -> (tensor<4x3xf32>, tensor<3x2xf32>)
  return %loss, %dw : tensor<f32>, tensor<3x2xf32>
}

// Summed gradients: the loss is still the mean, the gradient is not scaled.
// SUM: %[[LS:.*]] = strata.add
// SUM: %[[GS:.*]] = strata.add
// SUM: %[[LM:.*]] = strata.scale %[[LS]] {factor = 5.000000e-01 : f64
// SUM-NOT: strata.scale
// SUM: return %[[LM]], %[[GS]]

// K1-NOT: strata.slice
// K1: return
// K1-NOT: strata.slice
