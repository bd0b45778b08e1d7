// RUN: strata-opt %s --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer=type=sgd --strata-pipeline="accumulate-steps=2 schedule=FThenB rank=0" | FileCheck %s --check-prefix=STAGE0
// RUN: strata-opt %s --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer=type=sgd --strata-pipeline="accumulate-steps=2 schedule=FThenB rank=1" | FileCheck %s --check-prefix=STAGE1
// RUN: strata-opt %s --strata-rank-grid="pp=2 dp=2" --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-data-parallel --strata-optimizer=type=sgd --strata-pipeline="accumulate-steps=2 schedule=FThenB rank=3" | FileCheck %s --check-prefix=DP
// End-to-end runs against the baseline: test/run/pipeline.test.

// A two-stage program whose weight @w0 is read on both stages (as the GPT's
// tied embedding and LM head): it lives on stage 0, which sends it to
// stage 1 each step and sums stage 1's part of its gradient into its own.

// STAGE0-LABEL: module attributes {strata.passes = ["strata-stage-split", "strata-autodiff", "strata-gradient-merge", "strata-optimizer", "strata-pipeline"], strata.rank = 0 : i64, strata.schedule = ["F0 F1 B0 B1", "F0 F1 B0 B1"]}
// STAGE0-NEXT: strata.rank_grid @ranks(pp = 2, dp = 1, sharding = 1, mp = 1)
// STAGE0-NEXT: strata.param @w0
// STAGE0-NOT: strata.param @w1
// STAGE0: strata.comm_group @pp ranks [array<i64: 0, 1>]
// STAGE0-LABEL: func.func @train_step
// STAGE0: %[[T0:.*]] = strata.init_token
// STAGE0: %[[W0:.*]] = strata.get_param @w0
// STAGE0-NEXT: %[[T1:.*]] = strata.send %[[W0]], %[[T0]] {group = @pp, peer = 1 : i64, strata.role = #strata.role<communication>, strata.stage = 0 : i64}
// F0 and F1: each micro-batch's activation goes to stage 1.
// STAGE0: %[[X0:.*]] = strata.slice %arg0 {{.*}}strata.micro_batch = 0
// STAGE0: strata.matmul %[[X0]], %[[W0]] {strata.job = "F0", strata.micro_batch = 0 : i64, strata.role = #strata.role<forward>, strata.stage = 0 : i64}
// STAGE0: %[[A0:.*]] = strata.relu
// STAGE0-NEXT: %[[T2:.*]] = strata.send %[[A0]], %[[T1]] {group = @pp, peer = 1 : i64, strata.job = "F0", strata.micro_batch = 0 : i64
// STAGE0: %[[A1:.*]] = strata.relu
// STAGE0-NEXT: %[[T3:.*]] = strata.send %[[A1]], %[[T2]] {group = @pp, peer = 1 : i64, strata.job = "F1", strata.micro_batch = 1 : i64
// The loss (sent when stage 1's last forward ends) comes first on the
// channel from stage 1, then B0's two gradients: stage 1's part of @w0's
// gradient and the activation's gradient.
// STAGE0-NEXT: %[[LOSS:.*]], %[[T4:.*]] = strata.recv %[[T3]] {group = @pp, peer = 1 : i64, strata.role = #strata.role<communication>, strata.stage = 1 : i64} : (!strata.token) -> (tensor<f32>, !strata.token)
// STAGE0-NEXT: %[[PART0:.*]], %[[T5:.*]] = strata.recv %[[T4]] {group = @pp, peer = 1 : i64, strata.job = "B0", strata.micro_batch = 0 : i64{{.*}} -> (tensor<4x4xf32>, !strata.token)
// STAGE0-NEXT: %[[DA0:.*]], %{{.*}} = strata.recv %[[T5]] {group = @pp, peer = 1 : i64, strata.job = "B0", strata.micro_batch = 0 : i64{{.*}} -> (tensor<2x4xf32>, !strata.token)
// STAGE0-NEXT: strata.relu_grad %{{.*}}, %[[DA0]]
// STAGE0: %{{.*}}, %[[OWN0:.*]] = strata.matmul_grad
// STAGE0-NEXT: strata.add %[[PART0]], %[[OWN0]] {strata.job = "B0", strata.micro_batch = 0 : i64, strata.role = #strata.role<backward>, strata.stage = 0 : i64}
// STAGE0: strata.sgd_update
// STAGE0: strata.assign @w0
// STAGE0: return %[[LOSS]] : tensor<f32>

// STAGE1-LABEL: module attributes
// STAGE1: strata.param @w1
// STAGE1-NOT: strata.param @w0
// STAGE1-LABEL: func.func @train_step
// STAGE1: %[[T0:.*]] = strata.init_token
// STAGE1: %[[W0:.*]], %[[T1:.*]] = strata.recv %[[T0]] {group = @pp, peer = 0 : i64, strata.role = #strata.role<communication>, strata.stage = 0 : i64} : (!strata.token) -> (tensor<4x4xf32>, !strata.token)
// STAGE1-NEXT: %[[A0:.*]], %{{.*}} = strata.recv %[[T1]] {group = @pp, peer = 0 : i64, strata.job = "F0", strata.micro_batch = 0 : i64
// STAGE1-NEXT: %[[H0:.*]] = strata.matmul %[[A0]], %{{.*}} {strata.job = "F0", strata.micro_batch = 0 : i64, strata.role = #strata.role<forward>, strata.stage = 1 : i64}
// STAGE1-NEXT: strata.matmul %[[H0]], %[[W0]] {{.*}}transpose_rhs
// STAGE1: %[[LOSS:.*]] = strata.scale
// STAGE1-NEXT: strata.send %[[LOSS]], %{{.*}} {group = @pp, peer = 0 : i64, strata.role = #strata.role<communication>, strata.stage = 1 : i64}
// STAGE1: %[[DA:.*]], %[[DW0:.*]] = strata.matmul_grad %{{.*}}, %[[W0]], %{{.*}} {strata.job = "B0", strata.micro_batch = 0 : i64{{.*}}transpose_rhs
// STAGE1-NEXT: strata.send %[[DW0]]
// STAGE1: strata.sgd_update
// STAGE1: strata.assign @w1
// STAGE1: return %[[LOSS]] : tensor<f32>

// With 2 data-parallel replicas of the pipeline: ranks are stage-major
// (rank 3 is stage 1 of replica 1); data-parallel groups per stage, a
// pipeline group per replica. Gradient buckets are per stage: stage 1's
// holds @w1's gradient only (@w0's lives on stage 0).
// DP-LABEL: module attributes
// DP: strata.comm_group @dp ranks [array<i64: 0, 1>, array<i64: 2, 3>]
// DP: strata.comm_group @pp ranks [array<i64: 0, 2>, array<i64: 1, 3>]
// The collectives of a stage run in program order on every rank: the
// gradient bucket, then the loss.
// DP-LABEL: func.func @train_step
// DP: %[[FLAT:.*]] = strata.pack %{{[0-9]+}} {{.*}}strata.stage = 1 : i64} : (tensor<4x4xf32>) -> tensor<16xf32>
// DP-NEXT: %[[SUM:.*]], %{{.*}} = strata.all_reduce %[[FLAT]], %{{.*}} {group = @dp, kind = #strata.reduce<mean>, strata.bucket = {{[0-9]+}} : i64{{.*}} : (tensor<16xf32>, !strata.token)
// DP-NEXT: strata.unpack %[[SUM]] {{.*}}strata.stage = 1 : i64} : (tensor<16xf32>) -> tensor<4x4xf32>
// DP-NEXT: strata.all_reduce {{.*}}group = @dp, kind = #strata.reduce<mean>{{.*}} : (tensor<f32>, !strata.token)
// DP-NOT: strata.all_reduce
// DP: strata.assign @w1

module {
  strata.param @w0 : tensor<4x4xf32> init <ones>
  strata.param @w1 : tensor<4x4xf32> init <ones>
  func.func @train_step(%x: tensor<4x4xf32> {strata.name = "x"}, %y: tensor<4xi32> {strata.name = "y"}) -> tensor<f32> {
    %w0 = strata.get_param @w0 : tensor<4x4xf32>
    %h = strata.matmul %x, %w0 {strata.stage = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %r = strata.relu %h : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %w1 = strata.get_param @w1 : tensor<4x4xf32>
    %o = strata.matmul %r, %w1 {strata.stage = 1 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %t = strata.matmul %o, %w0 {transpose_rhs} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %l = strata.cross_entropy %t, %y : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
