// RUN: strata-opt %s -split-input-file --strata-autodiff -verify-diagnostics

strata.comm_group @dp ranks [array<i64: 0, 1>]
strata.param @a : tensor<8xf32> init <normal, 1.0>

func.func @collective_on_path() -> tensor<f32> {
  %a = strata.get_param @a : tensor<8xf32>
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{'strata.all_reduce' op is on the path to the loss but has no derivative rule}}
  %s, %t1 = strata.all_reduce %a, %t {group = @dp} : (tensor<8xf32>, !strata.token) -> (tensor<8xf32>, !strata.token)
  %l = strata.reduce_sum %s {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

strata.param @x : tensor<2x4xf32> init <normal, 1.0>
strata.param @w : tensor<4x3xf32> init <normal, 1.0>
strata.param @b : tensor<3xf32> init <zeros>

func.func @fused_without_aux() -> tensor<f32> {
  %x = strata.get_param @x : tensor<2x4xf32>
  %w = strata.get_param @w : tensor<4x3xf32>
  %b = strata.get_param @b : tensor<3xf32>
  // expected-error@+1 {{autodiff needs 'with_aux' on a fused GEMM with an activation}}
  %y = strata.fused_gemm_epilogue %x, %w, %b {activation = #strata.activation<relu>} : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = strata.reduce_sum %y {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

strata.param @a : tensor<8xf32> init <normal, 1.0>

func.func @backward_op_on_path() -> tensor<f32> {
  %a = strata.get_param @a : tensor<8xf32>
  // expected-error@+1 {{'strata.relu_grad' op is on the path to the loss but has no derivative rule}}
  %g = strata.relu_grad %a, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %g {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Loss scaling's unscale is made by autodiff, after the backward: it has no
// derivative of its own.
strata.param @c : tensor<8xf32> init <normal, 1.0>

func.func @unscale_on_path(%s: tensor<f32>) -> tensor<f32> {
  %c = strata.get_param @c : tensor<8xf32>
  // expected-error@+1 {{'strata.scale_by' op is on the path to the loss but has no derivative rule}}
  %u = strata.scale_by %c, %s : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %l = strata.reduce_sum %u {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A step that returns no scalar loss has nothing to differentiate.
// expected-error@+1 {{strata-autodiff: @not_a_loss returns (tensor<8xf32>); a training step returns its loss, one scalar float (the gradients are derived from it)}}
func.func @not_a_loss(%x: tensor<8xf32>) -> tensor<8xf32> {
  %r = strata.relu %x : (tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// The loss comes first; a gradient marked in its place is refused (the
// passes after autodiff read the gradients from result 1 on).
strata.param @a : tensor<8xf32> init <normal, 1.0>
// expected-error@+1 {{strata-autodiff: @marked_loss's result 0 is marked strata.grad_of, but a step's first result is its loss (the gradients follow it)}}
func.func @marked_loss(%x: tensor<8xf32>) -> (tensor<f32> {strata.grad_of = @a}) {
  %l = strata.reduce_sum %x {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A program without parameters has nothing to train.
// expected-error@+1 {{strata-autodiff: the program declares no strata.param: a step without parameters has nothing to train}}
func.func @no_params(%x: tensor<8xf32>) -> tensor<f32> {
  %l = strata.reduce_sum %x {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Two dropouts with one key would drop the same elements.
strata.param @w : tensor<8xf32> init <normal, 1.0>
func.func @same_key(%x: tensor<8xf32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8xf32>
  %y = strata.mul %x, %w : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  // expected-note@+1 {{the other dropout with key 3}}
  %a = strata.dropout %y {key = 3 : i64, prob = 0.5 : f64} : (tensor<8xf32>) -> tensor<8xf32>
  // expected-error@+1 {{'strata.fused_dropout_add' op uses dropout key 3, as another dropout does: both would drop the same elements (a program's dropout keys are unique)}}
  %b = strata.fused_dropout_add %y, %a {key = 3 : i64, prob = 0.5 : f64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %b {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Nor one whose parameters are all frozen.
strata.param @f : tensor<8xf32> init <normal, 1.0> {frozen}
// expected-error@+1 {{strata-autodiff: every strata.param of the program is {frozen}: a step without a trainable parameter has nothing to train}}
func.func @all_frozen(%x: tensor<8xf32>) -> tensor<f32> {
  %f = strata.get_param @f : tensor<8xf32>
  %y = strata.mul %x, %f : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %y {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Nor one whose loss reaches none of its trainable parameters.
strata.param @f : tensor<8xf32> init <normal, 1.0> {frozen}
strata.param @w : tensor<8xf32> init <normal, 1.0>
// expected-error@+1 {{strata-autodiff: the loss reaches no trainable strata.param: the step has nothing to train}}
func.func @unreached(%x: tensor<8xf32>) -> tensor<f32> {
  %f = strata.get_param @f : tensor<8xf32>
  %y = strata.mul %x, %f : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %y {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Every pass walks the step as one block that ends in func.return (another
// dialect's terminator parses, and is refused where it stands).
strata.param @w : tensor<8xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<8xf32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8xf32>
  %y = strata.mul %x, %w : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %y {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  // expected-error@+1 {{strata-autodiff: the step function @train_step ends in 'llvm.unreachable'; a step ends in func.return of its loss}}
  llvm.unreachable
}
