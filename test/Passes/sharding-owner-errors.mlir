// RUN: strata-opt %s --strata-rank-grid=sharding=2 --strata-sharding="stage=1 rank=1" -verify-diagnostics

strata.param @w : tensor<4xf32> init <zeros>

func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %lr = arith.constant dense<0.1> : tensor<f32>
  %w = strata.get_param @w : tensor<4xf32>
  // expected-error@+1 {{'strata.sgd_update' op updates a value that is not a strata.get_param; strata-sharding cannot assign it an owner}}
  %n = strata.sgd_update %x, %w, %lr : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %n : tensor<4xf32>
}
