// RUN: strata-opt %S/../../examples/mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split | FileCheck %s --check-prefix=COST2
// RUN: strata-opt %S/../../examples/mlp.mlir --strata-rank-grid=pp=3 --strata-stage-split | FileCheck %s --check-prefix=COST3
// RUN: strata-opt %s --strata-rank-grid=pp=2 --strata-stage-split | FileCheck %s --check-prefix=ANNOTATED
// RUN: strata-opt %s --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff | FileCheck %s --check-prefix=BACKWARD
// RUN: not strata-opt %S/../../examples/mlp.mlir --strata-rank-grid=pp=5 --strata-stage-split 2>&1 | FileCheck %s --check-prefix=UNITS
// RUN: not strata-opt %S/../../examples/mlp.mlir --strata-autodiff --strata-rank-grid=pp=2 --strata-stage-split 2>&1 | FileCheck %s --check-prefix=ORDER

// By cost (FLOPs + 4 x bytes written), whole layers per stage: on the
// 784-1024-1024-10 MLP, fc0 (0.42 GFLOP) against fc1 + fc2 + the loss
// (0.55 GFLOP) is the most even cut in two; in three, one layer each.
// COST2-LABEL: func.func @train_step
// COST2: strata.get_param @fc0.weight {strata.layer = "fc0"}
// COST2: strata.matmul %arg0, %{{.*}} {strata.layer = "fc0", strata.stage = 0 : i64}
// COST2: strata.relu %{{.*}} {strata.layer = "fc0", strata.stage = 0 : i64}
// COST2: strata.matmul %{{.*}} {strata.layer = "fc1", strata.stage = 1 : i64}
// COST2: strata.matmul %{{.*}} {strata.layer = "fc2", strata.stage = 1 : i64}
// COST2: strata.cross_entropy %{{.*}} {strata.stage = 1 : i64}
// COST3-LABEL: func.func @train_step
// COST3: strata.matmul %arg0, %{{.*}} {strata.layer = "fc0", strata.stage = 0 : i64}
// COST3: strata.matmul %{{.*}} {strata.layer = "fc1", strata.stage = 1 : i64}
// COST3: strata.matmul %{{.*}} {strata.layer = "fc2", strata.stage = 2 : i64}
// COST3: strata.cross_entropy %{{.*}} {strata.stage = 2 : i64}

// Annotations (Paddle's device_guard) win; an op without one follows the
// annotated op before it; reads and constants stay unplaced.
// ANNOTATED-LABEL: func.func @train_step
// ANNOTATED: strata.get_param @w0 : tensor<4x4xf32>
// ANNOTATED: strata.matmul {{.*}} {strata.stage = 0 : i64}
// ANNOTATED: strata.relu {{.*}} {strata.stage = 0 : i64}
// ANNOTATED: strata.matmul {{.*}} {strata.stage = 1 : i64}
// ANNOTATED: strata.cross_entropy {{.*}} {strata.stage = 1 : i64}

// strata-autodiff puts each backward op on its forward op's stage.
// BACKWARD-LABEL: func.func @train_step
// BACKWARD: strata.cross_entropy_grad {{.*}}strata.stage = 1 : i64
// BACKWARD: strata.matmul_grad {{.*}}strata.stage = 1 : i64
// BACKWARD: strata.relu_grad {{.*}}strata.stage = 0 : i64
// BACKWARD: strata.matmul_grad {{.*}}strata.stage = 0 : i64

// UNITS: error: strata-stage-split: the step has 4 units (runs of ops of one strata.layer) for 5 stages; annotate ops with strata.stage to split inside a layer
// ORDER: error: strata-stage-split: the step is already differentiated; run this pass before strata-autodiff, which puts each backward op on the stage of its forward op

module {
  strata.param @w0 : tensor<4x4xf32> init <ones>
  strata.param @w1 : tensor<4x4xf32> init <ones>
  func.func @train_step(%x: tensor<4x4xf32>, %y: tensor<4xi32>) -> tensor<f32> {
    %w0 = strata.get_param @w0 : tensor<4x4xf32>
    %h = strata.matmul %x, %w0 {strata.stage = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %r = strata.relu %h : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %w1 = strata.get_param @w1 : tensor<4x4xf32>
    %o = strata.matmul %r, %w1 {strata.stage = 1 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %l = strata.cross_entropy %o, %y : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
