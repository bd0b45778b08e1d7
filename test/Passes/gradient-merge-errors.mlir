// RUN: not strata-opt %s --strata-autodiff --strata-gradient-merge=k-steps=4 2>&1 | FileCheck %s --check-prefix=DIVIDE
// RUN: not strata-opt %s --strata-gradient-merge=k-steps=2 2>&1 | FileCheck %s --check-prefix=NOGRAD
// RUN: not strata-opt %s --strata-autodiff --strata-gradient-merge=k-steps=0 2>&1 | FileCheck %s --check-prefix=ZERO
// DIVIDE: error: strata-gradient-merge: argument 0 ('tensor<6x3xf32>') has no leading batch dimension divisible by k-steps = 4
// NOGRAD: error: strata-gradient-merge: the step returns no gradients (run strata-autodiff first, and this pass before strata-optimizer)
// ZERO: error: strata-gradient-merge: k-steps must be >= 1, got 0

strata.param @w : tensor<3x2xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<6x3xf32>, %y: tensor<6xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<3x2xf32>
  %0 = strata.matmul %x, %w : (tensor<6x3xf32>, tensor<3x2xf32>) -> tensor<6x2xf32>
  %loss = strata.cross_entropy %0, %y : (tensor<6x2xf32>, tensor<6xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
