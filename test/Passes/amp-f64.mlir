// Mixed precision lowers f32 programs: an f64 one is refused (its loss
// scale would be f32 and its black-list ops cut to f32).
// RUN: not strata-opt %s --strata-amp 2>&1 | FileCheck %s
// CHECK: error: strata-amp: 'train_step' computes in f64: mixed precision lowers f32 programs (f64 trains on the reference backend without it)

strata.param @w : tensor<4x8xf64> init <zeros>
func.func @train_step(%x: tensor<2x4xf64>) -> tensor<f64> {
  %w = strata.get_param @w : tensor<4x8xf64>
  %m = strata.matmul %x, %w : (tensor<2x4xf64>, tensor<4x8xf64>) -> tensor<2x8xf64>
  %c = strata.reduce_sum %m {dims = array<i64: 0, 1>} : (tensor<2x8xf64>) -> tensor<f64>
  return %c : tensor<f64>
}
