// RUN: not strata-opt %s --strata-optimizer 2>&1 | FileCheck %s --check-prefix=NOGRAD
// RUN: not strata-opt %s --strata-optimizer --mlir-print-op-on-diagnostic 2>&1 | FileCheck %s --check-prefix=PRINTOP
// RUN: not strata-opt %s --strata-autodiff --strata-optimizer='type=adagrad' 2>&1 | FileCheck %s --check-prefix=TYPE
// RUN: not strata-opt %s --strata-autodiff --strata-optimizer='lr-schedule=cosine' 2>&1 | FileCheck %s --check-prefix=COSINE
// RUN: not strata-opt %s --strata-autodiff --strata-optimizer='lr-schedule=step' 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not strata-opt %s --strata-autodiff --strata-optimizer='learning-rate=0' 2>&1 | FileCheck %s --check-prefix=LR

// At the step, where it says which function it read, without the function
// in generic form after it (--mlir-print-op-on-diagnostic asks for that).
// NOGRAD: optimizer-errors.mlir:19:1: error: strata-optimizer: the step returns no gradients (run strata-autodiff first)
// NOGRAD-NOT: see current operation
// PRINTOP: optimizer-errors.mlir:19:1: note: see current operation
// TYPE: error: strata-optimizer: unknown type 'adagrad' (sgd, momentum, adam, adamw, lamb, lars)
// COSINE: error: lr-schedule cosine needs decay-steps >= 1
// SCHEDULE: error: unknown lr-schedule 'step' (constant, linear_warmup, cosine)
// LR: error: strata-optimizer: learning-rate must be positive

strata.param @w : tensor<4xf32> init <normal, 1.0>
func.func @train_step() -> tensor<f32> {
  %w = strata.get_param @w : tensor<4xf32>
  %l = strata.reduce_sum %w {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// An empty name in the exclusion list would match every parameter.
// RUN: not strata-opt %s --strata-autodiff --strata-optimizer='type=adamw exclude-from-weight-decay=bias,' 2>&1 | FileCheck %s --check-prefix=EMPTYNAME
// EMPTYNAME: error: strata-optimizer: exclude-from-weight-decay has an empty name (it would match every parameter): remove the trailing or doubled comma
