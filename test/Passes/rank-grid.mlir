// RUN: strata-opt %s -split-input-file --strata-rank-grid="pp=2 dp=2 sharding=2" -verify-diagnostics | FileCheck %s
// RUN: not strata-opt %s -split-input-file --strata-rank-grid="mp=2" 2>&1 | FileCheck %s --check-prefix=MP
// RUN: not strata-opt %s -split-input-file --strata-rank-grid="pp=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not strata-opt %s -split-input-file --strata-sharding 2>&1 | FileCheck %s --check-prefix=NOGRID

// The grid goes first in the module; every distributing pass derives its
// groups from it (test/Passes/sharding.mlir, pipeline.mlir).

// CHECK-LABEL: module
// CHECK-NEXT: strata.rank_grid @ranks(pp = 2, dp = 2, sharding = 2, mp = 1)
// CHECK-NEXT: strata.param @w

// MP: error: strata-rank-grid: mp 2: tensor parallelism is not implemented yet
// ZERO: error: strata-rank-grid: pp must be in [1, 1048576], got 0
// NOGRID: error: strata-sharding: the program declares no strata.rank_grid; run strata-rank-grid first (e.g. --strata-rank-grid="dp=2")

strata.param @w : tensor<4xf32> init <ones>

func.func @train_step(%x: tensor<8x4xf32>) -> tensor<f32> {
  %l = arith.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

// -----

// A program that declares the same grid is left as it is.
// CHECK-LABEL: module
// CHECK-NEXT: strata.rank_grid @ranks(pp = 2, dp = 2, sharding = 2, mp = 1)
// CHECK-NOT: strata.rank_grid
strata.rank_grid @ranks(pp = 2, dp = 2, sharding = 2, mp = 1)

// -----

// expected-error@+1 {{strata-rank-grid: the program declares another rank grid than (pp = 2, dp = 2, sharding = 2, mp = 1)}}
strata.rank_grid @ranks(pp = 1, dp = 8, sharding = 1, mp = 1)
