// RUN: strata-opt %s -split-input-file --strata-rank-grid=sharding=2 --strata-sharding="stage=4 rank=0" -verify-diagnostics
// RUN: not strata-opt %s --strata-rank-grid=sharding=2 --strata-sharding="stage=1 rank=0 partition=round_robin" 2>&1 | FileCheck %s --check-prefix=PARTITION

// expected-error@+1 {{strata-sharding: stage must be 1, 2 or 3}}
module {
  func.func @train_step() {
    return
  }
}
// RUN: not strata-opt %s --strata-rank-grid=sharding=2 --strata-sharding="stage=1 rank=0 bucket-mb=0" 2>&1 | FileCheck %s --check-prefix=BUCKET
// BUCKET: strata-sharding: bucket-mb must be positive (sharding.comm_buffer_size_MB)
// PARTITION: strata-sharding: unknown partition 'round_robin' (greedy_even or use_order)
