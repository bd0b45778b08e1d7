// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-optimizer | FileCheck %s --check-prefix=ADAMW
// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-optimizer='type=momentum use-nesterov=true learning-rate=0.1' | FileCheck %s --check-prefix=MOMENTUM
// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-optimizer='type=lamb grad-clip-norm=1.0 exclude-from-weight-decay=bias,ln' | FileCheck %s --check-prefix=LAMB
// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-optimizer='type=lars lr-schedule=cosine decay-steps=100 warmup-steps=5 min-lr=0.0001' | FileCheck %s --check-prefix=LARS
// Numerics: test/reference/torch.test (every type against PyTorch, LAMB and
// LARS written out from Paddle's formulas) and test/run/cpu-runtime.test.

strata.param @w : tensor<4x3xf32> init <normal, 1.0>
strata.param @bias : tensor<3xf32> init <zeros>
strata.param @frozen : tensor<3xf32> init <ones> {frozen}

func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<4x3xf32>
  %b = strata.get_param @bias : tensor<3xf32>
  %f = strata.get_param @frozen : tensor<3xf32>
  %0 = strata.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = strata.bias_add %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = strata.mul %1, %f : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %loss = strata.cross_entropy %2, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// ADAMW: strata.param @frozen
// ADAMW-NEXT: strata.state @step : tensor<i64> init <zeros>
// ADAMW-NEXT: strata.state @w.moment1 : tensor<4x3xf32> init <zeros> of @w
// ADAMW-NEXT: strata.state @w.moment2 : tensor<4x3xf32> init <zeros> of @w
// ADAMW-NEXT: strata.state @bias.moment1 : tensor<3xf32> init <zeros> of @bias
// ADAMW-NEXT: strata.state @bias.moment2 : tensor<3xf32> init <zeros> of @bias
// ADAMW-NOT: frozen.moment
// ADAMW-LABEL: func.func @train_step
// ADAMW-SAME: -> tensor<f32> {
// ADAMW: %[[S0:.*]] = strata.get_state @step {strata.role = #strata.role<optimizer>} : tensor<i64>
// ADAMW: %[[S:.*]] = arith.addi %[[S0]]
// ADAMW: strata.assign @step, %[[S]]
// ADAMW: %[[LR:.*]] = strata.lr_schedule %[[S]] {base_lr = 1.000000e-03 : f64, kind = #strata.lr<constant>
// ADAMW-NOT: strata.global_norm
// ADAMW: %[[P:.*]], %[[M:.*]], %[[V:.*]] = strata.adamw_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LR]], %[[S]] {strata.role = #strata.role<optimizer>}
// ADAMW: strata.assign @w.moment1, %[[M]]
// ADAMW: strata.assign @w.moment2, %[[V]]
// ADAMW: strata.assign @w, %[[P]]
// ADAMW: strata.adamw_update
// ADAMW: strata.assign @bias,
// ADAMW-NOT: strata.assign @frozen
// ADAMW: return %{{.*}} : tensor<f32>

// MOMENTUM: strata.state @w.velocity : tensor<4x3xf32> init <zeros> of @w
// MOMENTUM: strata.lr_schedule {{.*}}base_lr = 1.000000e-01 : f64
// MOMENTUM: strata.momentum_update {{.*}} {strata.role = #strata.role<optimizer>, use_nesterov}
// MOMENTUM: strata.assign @w.velocity

// Clipping takes every gradient at once; excluded names get no decay.
// LAMB: %[[N:.*]] = strata.global_norm %[[GW:.*]], %[[GB:.*]] {strata.role = #strata.role<optimizer>}
// LAMB: %[[C:.*]]:2 = strata.clip_by_global_norm %[[GW]], %[[GB]], %[[N]] {max_norm = 1.000000e+00 : f64
// LAMB: strata.lamb_update %{{.*}}, %[[C]]#0, {{.*}} {epsilon = 9.9999999999999995E-7 : f64, strata.role = #strata.role<optimizer>}
// LAMB: strata.lamb_update %{{.*}}, %[[C]]#1, {{.*}} {epsilon = 9.9999999999999995E-7 : f64, strata.role = #strata.role<optimizer>, weight_decay = 0.000000e+00 : f64}

// LARS: strata.lr_schedule {{.*}} {base_lr = 1.000000e-03 : f64, decay_steps = 100 : i64, kind = #strata.lr<cosine>, min_lr = 1.000000e-04 : f64, {{.*}}warmup_steps = 5 : i64}
// Paddle's LARS defaults (decay 0.0005, epsilon 0) are the op's.
// LARS: strata.lars_update {{.*}} {strata.role = #strata.role<optimizer>}
