// RUN: strata-opt %s -split-input-file --strata-recompute=checkpoints=h0 | FileCheck %s
// RUN: strata-opt %s -split-input-file --strata-recompute='checkpoints=h0 refined-ops-patterns=matmul|-1||' | FileCheck %s --check-prefix=SELECTIVE
// RUN: strata-opt %s -split-input-file --strata-recompute='checkpoints=h0 no-recompute-segments=0' | FileCheck %s --check-prefix=SKIP
// Bitwise-equal losses: test/run/recompute.test.

strata.param @w : tensor<4x4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @train_step
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> (tensor<f32>, tensor<4x4xf32> {strata.grad_of = @w}) {
  %w = strata.get_param @w {strata.role = #strata.role<forward>, strata.layer = "h0"} : tensor<4x4xf32>
  // CHECK: %[[MM:.*]] = strata.matmul %arg0, %[[W:.*]] {strata.layer = "h0"
  // CHECK: %[[G:.*]] = strata.gelu %[[MM]]
  // CHECK: %[[D:.*]] = strata.dropout %[[G]] {key = 7 : i64
  %0 = strata.matmul %x, %w {strata.role = #strata.role<forward>, strata.layer = "h0"} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = strata.gelu %0 {strata.role = #strata.role<forward>, strata.layer = "h0"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = strata.dropout %1 {key = 7 : i64, prob = 0.5 : f64, strata.role = #strata.role<forward>, strata.layer = "h0"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %loss = strata.cross_entropy %2, %y {strata.role = #strata.role<forward>} : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  %one = arith.constant {strata.role = #strata.role<backward>} dense<1.0> : tensor<f32>
  // The loss's gradient reads the segment's output: the segment is replayed
  // just before it, dropout with the same key.
  // CHECK: %[[MM2:.*]] = strata.matmul %arg0, %[[W]] {strata.layer = "h0"
  // CHECK: %[[G2:.*]] = strata.gelu %[[MM2]]
  // CHECK: %[[D2:.*]] = strata.dropout %[[G2]] {key = 7 : i64
  // CHECK: %[[DL:.*]] = strata.cross_entropy_grad %[[D2]], %arg1
  %dl = strata.cross_entropy_grad %2, %y, %one {strata.role = #strata.role<backward>} : (tensor<2x4xf32>, tensor<2xi32>, tensor<f32>) -> tensor<2x4xf32>
  %dd = strata.dropout_grad %dl {key = 7 : i64, prob = 0.5 : f64, strata.role = #strata.role<backward>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: strata.gelu_grad %[[MM2]]
  %dg = strata.gelu_grad %0, %dd {strata.role = #strata.role<backward>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dg {strata.role = #strata.role<backward>} : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
  return %loss, %dw : tensor<f32>, tensor<4x4xf32>
}

// Selective: the matmul is kept, gelu and dropout are replayed on it.
// SELECTIVE: %[[MM:.*]] = strata.matmul
// SELECTIVE-NOT: strata.matmul %
// SELECTIVE: strata.gelu %[[MM]]
// SELECTIVE: %[[G2:.*]] = strata.gelu %[[MM]]
// SELECTIVE: strata.dropout %[[G2]]
// SELECTIVE: strata.cross_entropy_grad
// SELECTIVE: strata.gelu_grad %[[MM]]

// SKIP-COUNT-1: strata.matmul %
// SKIP-NOT: strata.matmul %

// -----

// Pipeline stages: a backward op of another stage (h1's product gradient,
// stage 1) keeps reading the original segment output it received; the
// segment's own stage (h0's GELU gradient, stage 0) reads the replay.
strata.param @w : tensor<4x4xf32> init <normal, 1.0>
strata.param @v : tensor<4x4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @staged
// SKIP-LABEL: func.func @staged
func.func @staged(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> (tensor<f32>, tensor<4x4xf32> {strata.grad_of = @w}, tensor<4x4xf32> {strata.grad_of = @v}) {
  %w = strata.get_param @w {strata.role = #strata.role<forward>, strata.layer = "h0", strata.stage = 0 : i64} : tensor<4x4xf32>
  %v = strata.get_param @v {strata.role = #strata.role<forward>, strata.layer = "h1", strata.stage = 1 : i64} : tensor<4x4xf32>
  // CHECK: %[[MM:.*]] = strata.matmul %arg0, %{{.*}} {strata.layer = "h0"
  // CHECK: %[[G:.*]] = strata.gelu %[[MM]]
  %0 = strata.matmul %x, %w {strata.role = #strata.role<forward>, strata.layer = "h0", strata.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = strata.gelu %0 {strata.role = #strata.role<forward>, strata.layer = "h0", strata.stage = 0 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = strata.matmul %1, %v {strata.role = #strata.role<forward>, strata.layer = "h1", strata.stage = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %loss = strata.cross_entropy %2, %y {strata.role = #strata.role<forward>, strata.stage = 1 : i64} : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  %one = arith.constant {strata.role = #strata.role<backward>} dense<1.0> : tensor<f32>
  %dl = strata.cross_entropy_grad %2, %y, %one {strata.role = #strata.role<backward>, strata.stage = 1 : i64} : (tensor<2x4xf32>, tensor<2xi32>, tensor<f32>) -> tensor<2x4xf32>
  // CHECK: strata.matmul_grad %[[G]], %{{.*}}, %{{.*}} {strata.role = #strata.role<backward>, strata.stage = 1
  %d1, %dv = strata.matmul_grad %1, %v, %dl {strata.role = #strata.role<backward>, strata.stage = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
  // CHECK: %[[MM2:.*]] = strata.matmul %arg0, %{{.*}} {strata.layer = "h0"
  // CHECK: strata.gelu_grad %[[MM2]]
  %dg = strata.gelu_grad %0, %d1 {strata.role = #strata.role<backward>, strata.stage = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dg {strata.role = #strata.role<backward>, strata.stage = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
  return %loss, %dw, %dv : tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// strata.reduce_grad reads only its input's type: the GELU output it names
// is not replayed (only the product, which gelu_grad reads, is).
strata.param @w : tensor<4x4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @shape_only
func.func @shape_only(%x: tensor<2x4xf32>) -> (tensor<f32>, tensor<4x4xf32> {strata.grad_of = @w}) {
  %w = strata.get_param @w {strata.role = #strata.role<forward>, strata.layer = "h0"} : tensor<4x4xf32>
  // CHECK: %[[G:.*]] = strata.gelu
  %0 = strata.matmul %x, %w {strata.role = #strata.role<forward>, strata.layer = "h0"} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = strata.gelu %0 {strata.role = #strata.role<forward>, strata.layer = "h0"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %loss = strata.reduce_mean %1 {dims = array<i64: 0, 1>, strata.role = #strata.role<forward>} : (tensor<2x4xf32>) -> tensor<f32>
  %one = arith.constant {strata.role = #strata.role<backward>} dense<1.0> : tensor<f32>
  // CHECK: strata.reduce_grad %{{.*}}, %[[G]]
  // CHECK: %[[MM2:.*]] = strata.matmul
  // CHECK-NOT: strata.gelu %
  // CHECK: strata.gelu_grad %[[MM2]]
  %d1 = strata.reduce_grad %one, %1 {dims = array<i64: 0, 1>, mean, strata.role = #strata.role<backward>} : (tensor<f32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %d0 = strata.gelu_grad %0, %d1 {strata.role = #strata.role<backward>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %d0 {strata.role = #strata.role<backward>} : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>)
  return %loss, %dw : tensor<f32>, tensor<4x4xf32>
}
