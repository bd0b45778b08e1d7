// RUN: strata-opt %s --strata-rank-grid=sharding=2 --strata-autodiff --strata-data-parallel --strata-optimizer=type=sgd --strata-sharding="stage=1 rank=0" | FileCheck %s --check-prefix=ZERO1
// RUN: strata-opt %s --strata-rank-grid="dp=2 sharding=2" --strata-autodiff --strata-data-parallel --strata-optimizer=type=sgd --strata-sharding="stage=2 rank=1" | FileCheck %s --check-prefix=ZERO2
// End-to-end runs against the baseline: test/run/sharding.test.

// greedy_even gives the largest parameter first to the least loaded rank:
// @w (16 elements) to rank 0 of each sharding group, @b to rank 1.

// ZeRO-1, rank 0: gradients all-reduced whole, only @w updated here; at the
// end of the step each rank's updated parameters are gathered and the
// others' assigned.
// ZERO1-LABEL: module
// ZERO1: strata.comm_group @dp ranks [array<i64: 0, 1>]
// ZERO1: strata.comm_group @sharding ranks [array<i64: 0, 1>]
// ZERO1-NOT: strata.comm_group
// ZERO1-LABEL: func.func @train_step
// ZERO1: %[[BUCKET:.*]], %{{.*}} = strata.all_reduce %{{.*}} {group = @dp, kind = #strata.reduce<mean>, strata.bucket = 0 : i64
// ZERO1: %[[GRADS:.*]]:2 = strata.unpack %[[BUCKET]]
// ZERO1: %[[W:.*]] = strata.sgd_update %{{.*}}, %[[GRADS]]#1, %{{.*}} : (tensor<4x4xf32>
// ZERO1-NOT: strata.sgd_update
// ZERO1: %[[MINE:.*]] = strata.pack %[[W]] {{.*}} : (tensor<4x4xf32>) -> tensor<16xf32>
// ZERO1: %[[ALL:.*]], %{{.*}} = strata.all_gather %[[MINE]], %{{.*}} {group = @sharding
// ZERO1-SAME: (tensor<16xf32>, !strata.token) -> (tensor<32xf32>, !strata.token)
// ZERO1: strata.assign @w, %[[W]]
// ZERO1: %[[B:.*]] = strata.unpack %[[ALL]] {offset = 16 : i64{{.*}}} : (tensor<32xf32>) -> tensor<4xf32>
// ZERO1: strata.assign @b, %[[B]]

// ZeRO-2 on 2 x 2 ranks (hybrid), rank 1: the bucket is reduce-scattered
// over the sharding group, each share then all-reduced over the ranks that
// hold it (@sharding_dp); rank 1 receives and updates @b only.
// ZERO2-LABEL: module
// ZERO2: strata.rank_grid @ranks(pp = 1, dp = 2, sharding = 2, mp = 1)
// ZERO2: strata.comm_group @dp ranks [array<i64: 0, 1, 2, 3>]
// ZERO2: strata.comm_group @sharding ranks [array<i64: 0, 1>, array<i64: 2, 3>]
// ZERO2: strata.comm_group @sharding_dp ranks [array<i64: 0, 2>, array<i64: 1, 3>]
// ZERO2-LABEL: func.func @train_step
// ZERO2-SAME: (%{{.*}}: tensor<2x4xf32>, %{{.*}}: tensor<2xi32>)
// ZERO2: %[[SHARE:.*]], %{{.*}} = strata.reduce_scatter %{{.*}} {group = @sharding, kind = #strata.reduce<mean>
// ZERO2-SAME: (tensor<32xf32>, !strata.token) -> (tensor<16xf32>, !strata.token)
// ZERO2: %[[AVG:.*]], %{{.*}} = strata.all_reduce %[[SHARE]], %{{.*}} {group = @sharding_dp, kind = #strata.reduce<mean>
// ZERO2: %[[DB:.*]] = strata.unpack %[[AVG]] {{.*}} -> tensor<4xf32>
// ZERO2: %[[B:.*]] = strata.sgd_update %{{.*}}, %[[DB]], %{{.*}} : (tensor<4xf32>
// ZERO2-NOT: strata.sgd_update
// ZERO2: strata.all_gather %{{.*}} {group = @sharding
// ZERO2: strata.assign @w
// ZERO2: strata.assign @b, %[[B]]

strata.param @w : tensor<4x4xf32> init <normal, 1.0>
strata.param @b : tensor<4xf32> init <zeros>

func.func @train_step(%x: tensor<8x4xf32>, %labels: tensor<8xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<4x4xf32>
  %b = strata.get_param @b : tensor<4xf32>
  %h = strata.matmul %x, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %y = strata.bias_add %h, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %l = strata.cross_entropy %y, %labels : (tensor<8x4xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
