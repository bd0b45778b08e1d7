// Every verifier error of the dialect, with its message.
// RUN: strata-opt %s -split-input-file -verify-diagnostics

// expected-error@+1 {{init 'normal' needs a positive scale}}
strata.param @w : tensor<4xf32> init <normal>

// -----

// expected-error@+1 {{init 'zeros' takes no scale}}
strata.param @w : tensor<4xf32> init <zeros, 1.0>

// -----

// expected-error@+1 {{init scale must be an f64 value}}
strata.param @w : tensor<4xf32> init <uniform, 1.0 : f32>

// -----

func.func @f() {
  // expected-error@+1 {{expects parent op 'builtin.module'}}
  strata.param @w : tensor<4xf32> init <zeros>
  return
}

// -----

func.func @f() -> tensor<4xf32> {
  // expected-error@+1 {{'missing' does not name a strata.param}}
  %0 = strata.get_param @missing : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

strata.param @w : tensor<4xf32> init <zeros>
func.func @f() -> tensor<8xf32> {
  // expected-error@+1 {{result type 'tensor<8xf32>' differs from the type of parameter 'w': 'tensor<4xf32>'}}
  %0 = strata.get_param @w : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// expected-error@+1 {{needs at least one group}}
strata.comm_group @g ranks []

// -----

// expected-error@+1 {{has an empty group}}
strata.comm_group @g ranks [array<i64>]

// -----

// expected-error@+1 {{groups must have equal sizes, got 2 and 1}}
strata.comm_group @g ranks [array<i64: 0, 1>, array<i64: 2>]

// -----

// expected-error@+1 {{rank -1 is negative}}
strata.comm_group @g ranks [array<i64: 0, -1>]

// -----

// expected-error@+1 {{rank 1 appears in more than one group}}
strata.comm_group @g ranks [array<i64: 0, 1>, array<i64: 1, 2>]

// -----

func.func @f(%a: tensor<4xf32>, %b: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.matmul' op operands must have rank >= 2, got 1 and 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.matmul' op contracting dimensions differ: 3 vs 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4x3xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x4x3xf32>, %b: tensor<3x3x4xf32>) {
  // expected-error@+2 {{'strata.matmul' op batch dimensions [2] and [3] do not broadcast}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<2x4x3xf32>, tensor<3x3x4xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error@+2 {{'strata.matmul' op inferred type(s) 'tensor<4x5xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.matmul %a, %b : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<3x5xf16>) {
  // expected-error@+1 {{requires the same element type for all operands}}
  %0 = strata.matmul %a, %b : (tensor<4x3xf32>, tensor<3x5xf16>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xi32>, %b: tensor<3x5xi32>) {
  // expected-error@+1 {{operand #0 must be non-empty statically shaped tensor of f16, bf16, f32 or f64 values}}
  %0 = strata.matmul %a, %b : (tensor<4x3xi32>, tensor<3x5xi32>) -> tensor<4x5xi32>
  return
}

// -----

func.func @f(%a: tensor<?x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error@+1 {{operand #0 must be non-empty statically shaped tensor}}
  %0 = strata.matmul %a, %b : (tensor<?x3xf32>, tensor<3x5xf32>) -> tensor<?x5xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<2x3xf32>) {
  // expected-error@+2 {{'strata.add' op shapes [4, 3] and [2, 3] do not broadcast}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.add %a, %b : (tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %b: tensor<4xf32>) {
  // expected-error@+2 {{'strata.bias_add' op bias must have shape [3], got [4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.bias_add %a, %b : (tensor<4x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<f32>, %b: tensor<4xf32>) {
  // expected-error@+2 {{'strata.bias_add' op input must have rank >= 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.bias_add %a, %b : (tensor<f32>, tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error@+2 {{'strata.dropout' op prob must be in [0, 1), got 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.dropout %a {key = 0 : i64, prob = 1.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// A dropout's key is a 32-bit word of its mask's counter: keys 2^32 apart
// would draw the same mask.
func.func @f(%a: tensor<4xf32>) {
  // expected-error@+1 {{'strata.dropout' op attribute 'key' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 0 whose maximum value is 4294967295}}
  %0 = strata.dropout %a {key = 4294967296 : i64, prob = 0.5 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%q: tensor<2x4x2x8xf32>) {
  // expected-error@+1 {{'strata.attention' op attribute 'dropout_key' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 0}}
  %o, %l = strata.attention %q, %q, %q {scale = 0.5 : f64, dropout = 0.1 : f64, dropout_key = -1 : i64} : (tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>) -> (tensor<2x4x2x8xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.softmax' op causal softmax needs square trailing dimensions, got [4, 3]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.softmax %a {causal} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<f32>) {
  // expected-error@+2 {{'strata.softmax' op input must have rank >= 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.softmax %a : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %g: tensor<4xf32>, %b: tensor<3xf32>) {
  // expected-error@+2 {{'strata.layer_norm' op gamma must have shape [3], got [4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.layer_norm %a, %g, %b : (tensor<4x3xf32>, tensor<4xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %g: tensor<3xf32>) {
  // expected-error@+2 {{'strata.layer_norm' op epsilon must be positive}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.layer_norm %a, %g, %g {epsilon = 0.0 : f64} : (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%t: tensor<4xf32>, %ids: tensor<2xi32>) {
  // expected-error@+2 {{'strata.embedding' op table must have rank 2, got 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.embedding %t, %ids : (tensor<4xf32>, tensor<2xi32>) -> tensor<2xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+1 {{changes the number of elements: 12 vs 10}}
  %0 = strata.reshape %a : (tensor<4x3xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+1 {{changes the element type}}
  %0 = strata.reshape %a : (tensor<4x3xf32>) -> tensor<12xf16>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.transpose' op permutation has 1 entries for rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.transpose %a {permutation = array<i64: 0>} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.transpose' op permutation [1, 1] is not a permutation}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.transpose %a {permutation = array<i64: 1, 1>} : (tensor<4x3xf32>) -> tensor<3x3xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.reduce_sum' op dims [2] must be distinct and in [0, 2)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.reduce_sum %a {dims = array<i64: 2>} : (tensor<4x3xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.reduce_mean' op dims [0, 0] must be distinct and in [0, 2)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.reduce_mean %a {dims = array<i64: 0, 0>} : (tensor<4x3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>, %a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.reduce_grad' op result_grad's shape [4] is not the input's reduced over dims [0] ([3], or [1, 3] with the dimensions kept)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.reduce_grad %g, %a {dims = array<i64: 0>} : (tensor<4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%g: tensor<f32>, %a: tensor<4x3xf32>) {
  // expected-error@+2 {{'strata.reduce_grad' op dims [0, 2] must be distinct and in [0, 2)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.reduce_grad %g, %a {dims = array<i64: 0, 2>, mean} : (tensor<f32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%g: tensor<bf16>, %a: tensor<4x3xf32>) {
  // expected-error@+1 {{'strata.reduce_grad' op requires the same element type for all operands}}
  %0 = strata.reduce_grad %g, %a {dims = array<i64: 0, 1>, mean} : (tensor<bf16>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<3xf32>) {
  // expected-error@+1 {{input shape [3] does not broadcast to [4, 2]}}
  %0 = strata.broadcast_to %a : (tensor<3xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>) {
  // expected-error@+1 {{result shape [2] does not broadcast to the input shape [4, 3]}}
  %0 = strata.sum_to %a : (tensor<4x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<5xi32>) {
  // expected-error@+2 {{'strata.cross_entropy' op labels must have shape [4], got [5]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy %l, %y : (tensor<4x10xf32>, tensor<5xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<10xf32>, %y: tensor<i32>) {
  // expected-error@+2 {{'strata.cross_entropy' op logits must have rank >= 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy %l, %y : (tensor<10xf32>, tensor<i32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<4xi32>) {
  // expected-error@+2 {{'strata.cross_entropy' op classes must be in [1, 10] (the logits' last dimension), got 11}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy %l, %y {classes = 11 : i64} : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<4xi32>, %d: tensor<f32>) {
  // expected-error@+2 {{'strata.cross_entropy_grad' op classes must be in [1, 10] (the logits' last dimension), got 0}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy_grad %l, %y, %d {classes = 0 : i64} : (tensor<4x10xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %dy: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.matmul_grad' op result_grad has shape [4, 4], the product has [4, 5]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:2 = strata.matmul_grad %x, %w, %dy : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x4xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>)
  return
}

// -----

func.func @f(%dy: tensor<f32>) {
  // expected-error@+2 {{'strata.bias_add_grad' op result_grad must have rank >= 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.bias_add_grad %dy : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @f(%y: tensor<4xf32>, %dy: tensor<3xf32>) {
  // expected-error@+1 {{all of {output, result_grad} have same type}}
  %0 = strata.relu_grad %y, %dy : (tensor<4xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%dy: tensor<4xf32>) {
  // expected-error@+2 {{'strata.dropout_grad' op prob must be in [0, 1), got -0.5}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.dropout_grad %dy {key = 0 : i64, prob = -0.5 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %g: tensor<4xf32>) {
  // expected-error@+2 {{'strata.rms_norm' op gamma must have shape [3], got [4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.rms_norm %a, %g : (tensor<4x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<4x3xf32>, %g: tensor<3xf32>) {
  // expected-error@+2 {{'strata.rms_norm' op epsilon must be positive}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.rms_norm %a, %g {epsilon = -1.0 : f64} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %g: tensor<3xf32>, %dy: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.rms_norm_grad' op result_grad must have the input type}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:2 = strata.rms_norm_grad %x, %g, %dy : (tensor<4x3xf32>, tensor<3xf32>, tensor<4x4xf32>) -> (tensor<4x3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %g: tensor<3xf32>, %dy: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.layer_norm_grad' op result_grad must have the input type}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.layer_norm_grad %x, %g, %dy : (tensor<4x3xf32>, tensor<3xf32>, tensor<4x4xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @f(%ids: tensor<4xi32>, %dy: tensor<4x3xf32>) {
  // expected-error@+1 {{result_grad must have shape [4, 5], got [4, 3]}}
  %0 = strata.embedding_grad %ids, %dy : (tensor<4xi32>, tensor<4x3xf32>) -> tensor<10x5xf32>
  return
}

// -----

func.func @f(%ids: tensor<4xi32>, %dy: tensor<4x3xf32>) {
  // expected-error@+1 {{result must have rank 2}}
  %0 = strata.embedding_grad %ids, %dy : (tensor<4xi32>, tensor<4x3xf32>) -> tensor<30xf32>
  return
}

// -----

func.func @f(%ids: tensor<4xi32>, %dy: tensor<4x3xf32>) {
  // expected-error@+1 {{result and result_grad element types differ}}
  %0 = strata.embedding_grad %ids, %dy : (tensor<4xi32>, tensor<4x3xf32>) -> tensor<10x3xf16>
  return
}

// -----

func.func @f(%l: tensor<4x10xbf16>, %y: tensor<4xi32>, %d: tensor<bf16>) {
  // expected-error@+2 {{'strata.cross_entropy_grad' op loss_grad must have the loss's type, tensor<f32>}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy_grad %l, %y, %d : (tensor<4x10xbf16>, tensor<4xi32>, tensor<bf16>) -> tensor<4x10xbf16>
  return
}

// -----

func.func @f(%l: tensor<4x10xf32>, %y: tensor<4x1xi32>, %d: tensor<f32>) {
  // expected-error@+2 {{'strata.cross_entropy_grad' op labels must have shape [4], got [4, 1]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.cross_entropy_grad %l, %y, %d : (tensor<4x10xf32>, tensor<4x1xi32>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @f(%p: tensor<4xf32>, %g: tensor<5xf32>, %lr: tensor<f32>) {
  // expected-error@+2 {{'strata.sgd_update' op gradient and optimizer state must have the parameter's type}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.sgd_update %p, %g, %lr : (tensor<4xf32>, tensor<5xf32>, tensor<f32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%p: tensor<4xf32>, %m: tensor<4xf16>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error@+2 {{'strata.adamw_update' op gradient and optimizer state must have the parameter's type}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.adamw_update %p, %p, %m, %p, %lr, %s : (tensor<4xf32>, tensor<4xf32>, tensor<4xf16>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// scale_by's factor is an f32 scalar (the inverse of a loss scale is no
// float16 number).
func.func @f(%g: tensor<4xf16>, %s: tensor<f16>) {
  // expected-error@+1 {{operand #1 must be 0D tensor of 32-bit float values}}
  %0 = strata.scale_by %g, %s : (tensor<4xf16>, tensor<f16>) -> tensor<4xf16>
  return
}

// -----

func.func @f(%p: tensor<4xf32>, %lr: tensor<4xf32>) {
  // expected-error@+1 {{operand #2 must be 0D tensor}}
  %0 = strata.sgd_update %p, %p, %lr : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f() {
  // expected-error@+2 {{'strata.global_norm' op needs at least one input}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.global_norm : () -> tensor<f32>
  return
}

// -----

func.func @f(%g: tensor<4xf32>, %n: tensor<f32>) {
  // expected-error@+2 {{'strata.clip_by_global_norm' op max_norm must be positive}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.clip_by_global_norm %g, %n {max_norm = 0.0 : f64} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{group @nope does not name a strata.comm_group}}
  %0, %t1 = strata.all_reduce %x, %t {group = @nope} : (tensor<4xf32>, !strata.token) -> (tensor<4xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{result type must equal the input type}}
  %0, %t1 = strata.all_reduce %x, %t {group = @dp} : (tensor<4xf32>, !strata.token) -> (tensor<2xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{root 2 is outside the group of size 2}}
  %0, %t1 = strata.broadcast %x, %t {group = @dp, root = 2 : i64} : (tensor<4xf32>, !strata.token) -> (tensor<4xf32>, !strata.token)
  return
}

// -----

strata.comm_group @pp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{peer -1 is outside the group of size 2}}
  %t1 = strata.send %x, %t {group = @pp, peer = -1 : i64} : (tensor<4xf32>, !strata.token) -> !strata.token
  return
}

// -----

strata.comm_group @pp ranks [array<i64: 0, 1>]
func.func @f() {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{peer 5 is outside the group of size 2}}
  %0, %t1 = strata.recv %t {group = @pp, peer = 5 : i64} : (!strata.token) -> (tensor<4xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4x2xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{dimension 0 must be 1 x group size 2 = 2, got 4}}
  %0, %t1 = strata.reduce_scatter %x, %t {group = @dp} : (tensor<4x2xf32>, !strata.token) -> (tensor<1x2xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4x2xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{input and result may differ only in dimension 0}}
  %0, %t1 = strata.reduce_scatter %x, %t {group = @dp} : (tensor<4x2xf32>, !strata.token) -> (tensor<2x1xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @f(%x: tensor<4x2xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{dim 2 is out of range}}
  %0, %t1 = strata.all_gather %x, %t {group = @dp, dim = 2 : i64} : (tensor<4x2xf32>, !strata.token) -> (tensor<4x2xf32>, !strata.token)
  return
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1, 2, 3>]
func.func @f(%x: tensor<4x2xf32>) {
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{dimension 1 must be 2 x group size 4 = 8, got 4}}
  %0, %t1 = strata.all_gather %x, %t {group = @dp, dim = 1 : i64} : (tensor<4x2xf32>, !strata.token) -> (tensor<4x4xf32>, !strata.token)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5x1xf32>, %b: tensor<5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue' op weight must have rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.fused_gemm_epilogue %x, %w, %b : (tensor<4x3xf32>, tensor<3x5x1xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<3xf32>, %w: tensor<3x5xf32>, %b: tensor<5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue' op input must have rank >= 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.fused_gemm_epilogue %x, %w, %b : (tensor<3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<4x5xf32>, %b: tensor<5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue' op contracting dimensions differ: 3 vs 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.fused_gemm_epilogue %x, %w, %b : (tensor<4x3xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<4xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue' op bias must have shape [5], got [4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.fused_gemm_epilogue %x, %w, %b : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4xf32>) -> tensor<4x5xf32>
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue' op with_aux needs an activation}}
  // expected-error@+1 {{failed to infer returned types}}
  %0, %1 = strata.fused_gemm_epilogue %x, %w, %b {with_aux} : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %dy: tensor<4x4xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue_grad' op result_grad must have shape [4, 5]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x4xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %dy: tensor<4x5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue_grad' op an activation gradient needs the forward pre-activation (aux)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy {activation = #strata.activation<relu>} : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %dy: tensor<4x5xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue_grad' op aux is only used with an activation}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy, %dy : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %dy: tensor<4x5xf32>, %aux: tensor<5x4xf32>) {
  // expected-error@+2 {{'strata.fused_gemm_epilogue_grad' op aux must have the result_grad type}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy, %aux {activation = #strata.activation<relu>} : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>, tensor<5x4xf32>) -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+2 {{'strata.fused_dropout_add' op prob must be in [0, 1), got 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.fused_dropout_add %x, %x {key = 1 : i64, prob = 2.0 : f64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>, %y: tensor<3xf32>) {
  // expected-error@+1 {{all of {input, residual} have same type}}
  %0 = strata.fused_dropout_add %x, %y {key = 1 : i64, prob = 0.5 : f64} : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+2 {{'strata.fused_dropout_add_grad' op prob must be in [0, 1), got 1.5}}
  // expected-error@+1 {{failed to infer returned types}}
  %0:2 = strata.fused_dropout_add_grad %x {key = 1 : i64, prob = 1.5 : f64} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.role' must be a #strata.role<...> attribute}}
  %0 = strata.relu %x {strata.role = "forward"} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.stage' must be a non-negative i64 integer}}
  %0 = strata.relu %x {strata.stage = -1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.micro_batch' must be a non-negative i64 integer}}
  %0 = strata.relu %x {strata.micro_batch = 1 : i32} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.grad_of' names @f, which is not a strata.param}}
  %0 = strata.relu %x {strata.grad_of = @f} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.grad_of' must be a flat symbol reference}}
  %0 = strata.relu %x {strata.grad_of = 3 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{unknown Strata attribute 'strata.rol'}}
  %0 = strata.relu %x {strata.rol = #strata.role<forward>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// An attribute an op does not have is refused (kept, it would be ignored),
// with the nearest of its own.
func.func @f(%x: tensor<2x4x4xf32>) {
  // expected-error@+1 {{'strata.softmax' op has no attribute 'casual'; did you mean 'causal'?}}
  %0 = strata.softmax %x {casual} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+1 {{'strata.relu' op has no attribute 'alpha' (it takes none)}}
  %0 = strata.relu %x {alpha = 1.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error@+2 {{expected ::strata::Role to be one of: forward, backward, optimizer, communication}}
  // expected-error@+1 {{failed to parse Strata_RoleAttr parameter 'value'}}
  %0 = strata.relu %x {strata.role = #strata.role<sideways>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// expected-error@+1 {{integer state may only start as zeros or ones}}
strata.state @s : tensor<i64> init <normal, 1.0>

// -----

// expected-error@+1 {{'of' names @nope, which is not a strata.param}}
strata.state @s : tensor<4xf32> init <zeros> of @nope

// -----

strata.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error@+1 {{'w' does not name a strata.state}}
  %0 = strata.get_state @w : tensor<4xf32>
  return
}

// -----

strata.state @s : tensor<4xf32> init <zeros>
func.func @f(%v: tensor<4xf32>) {
  strata.assign @s, %v : tensor<4xf32>
  // expected-error@+1 {{'s' is assigned more than once in a step}}
  strata.assign @s, %v : tensor<4xf32>
  return
}

// -----

strata.state @s : tensor<4xf32> init <zeros>
func.func @f(%v: tensor<8xf32>) {
  // expected-error@+1 {{value type 'tensor<8xf32>' differs from the type of 's': 'tensor<4xf32>'}}
  strata.assign @s, %v : tensor<8xf32>
  return
}

// -----

func.func @f(%v: tensor<4xf32>) {
  // expected-error@+1 {{'nope' does not name a strata.param or strata.state}}
  strata.assign @nope, %v : tensor<4xf32>
  return
}

// -----

func.func @f(%s: tensor<i64>) {
  // expected-error@+2 {{'strata.lr_schedule' op cosine needs decay_steps >= 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %lr = strata.lr_schedule %s {kind = #strata.lr<cosine>, base_lr = 1.0 : f64} : (tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op range [6, 10) is outside dimension 0 of size 8}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 0 : i64, start = 6 : i64, size = 4 : i64} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// A start whose sum with the size overflows int64 is still out of range.
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op range starting at 9223372036854775807 of size 4 is outside dimension 1 of size 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 1 : i64, start = 9223372036854775807 : i64, size = 4 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

// A strided slice's last element, 1 + 3 * 3 = 10, lies past the dimension.
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op range of 4 elements 3 apart from 1 is outside dimension 0 of size 8}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 0 : i64, start = 1 : i64, size = 4 : i64, stride = 3 : i64} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// At the boundary: the fifth element, 4 * 2 = 8, is one past the end.
func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op range of 5 elements 2 apart from 0 is outside dimension 0 of size 8}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 0 : i64, start = 0 : i64, size = 5 : i64, stride = 2 : i64} : (tensor<8x4xf32>) -> tensor<5x4xf32>
  return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op stride must be at least 1, got 0}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 0 : i64, start = 0 : i64, size = 4 : i64, stride = 0 : i64} : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%x: tensor<8x4xf32>) {
  // expected-error@+2 {{'strata.slice' op dim 2 is out of range for rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.slice %x {dim = 2 : i64, start = 0 : i64, size = 1 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{'strata.pack' op packs 36 elements into 32}}
  %0 = strata.pack %x, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<32xf32>
  return
}

// -----

func.func @f(%x: tensor<8x4xf32>, %i: tensor<4xi32>) {
  // expected-error@+1 {{'strata.pack' op packs a 'tensor<4xi32>' into a 'tensor<36xf32>'}}
  %0 = strata.pack %x, %i : (tensor<8x4xf32>, tensor<4xi32>) -> tensor<36xf32>
  return
}

// -----

func.func @f(%x: tensor<32xf32>) {
  // expected-error@+1 {{'strata.unpack' op unpacks elements up to 36 from a buffer of 32}}
  %0:2 = strata.unpack %x {offset = 4 : i64} : (tensor<32xf32>) -> (tensor<4x4xf32>, tensor<16xf32>)
  return
}

// -----

func.func @f(%x: tensor<32xf32>) {
  // expected-error@+1 {{'strata.unpack' op offset -4 is negative}}
  %0:2 = strata.unpack %x {offset = -4 : i64} : (tensor<32xf32>) -> (tensor<4x4xf32>, tensor<16xf32>)
  return
}

// -----

// expected-error@+1 {{'strata.rank_grid' op axis sharding has size 0; every axis needs at least 1 rank}}
strata.rank_grid @ranks(pp = 1, dp = 2, sharding = 0, mp = 1)

// -----

strata.rank_grid @ranks(pp = 1, dp = 2, sharding = 1, mp = 1)
// expected-error@+1 {{'strata.rank_grid' op is a second rank grid; a program has one}}
strata.rank_grid @other(pp = 1, dp = 2, sharding = 1, mp = 1)

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error@+2 {{'strata.concat' op input of shape [3, 3] does not match [2, 3] outside dimension 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error@+2 {{'strata.concat' op dim 2 is out of range for rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.concat %a, %a {dim = 2 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xi32>) {
  // expected-error@+1 {{'strata.concat' op requires the same element type for all operands}}
  %0 = strata.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xi32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error@+2 {{'strata.pad' op low and high must not be negative, got -1 and 0}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.pad %a {dim = 1 : i64, low = -1 : i64, high = 0 : i64} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

// Paddings whose sum wraps around int64 (to a result smaller than the
// input) are refused, not computed.
func.func @f(%a: tensor<2x4xf32>) {
  // expected-error@+2 {{'strata.pad' op padding dimension 1 by 9223372036854775807 and 9223372036854775807 overflows its size}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = strata.pad %a {dim = 1 : i64, low = 9223372036854775807 : i64, high = 9223372036854775807 : i64} : (tensor<2x4xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error@+1 {{'strata.cast' op changes the shape: 'tensor<2x3xf32>' vs 'tensor<3x2xbf16>'}}
  %0 = strata.cast %a : (tensor<2x3xf32>) -> tensor<3x2xbf16>
  return
}

// -----

func.func @f(%a: tensor<2x3xi32>) {
  // expected-error@+1 {{'strata.cast' op operand #0 must be non-empty statically shaped tensor of f16, bf16, f32 or f64 values}}
  %0 = strata.cast %a : (tensor<2x3xi32>) -> tensor<2x3xbf16>
  return
}

// -----

func.func @f(%q: tensor<5x2x8xf32>, %k: tensor<7x2x8xf32>) {
  // expected-error@+2 {{'strata.attention' op causal attention needs as many queries as keys, got 5 and 7}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %k, %k {causal, scale = 1.0 : f64} : (tensor<5x2x8xf32>, tensor<7x2x8xf32>, tensor<7x2x8xf32>) -> (tensor<5x2x8xf32>, tensor<2x5xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x5x2x8xf32>, %k: tensor<3x7x2x8xf32>) {
  // expected-error@+2 {{'strata.attention' op query, key and value must have the same batch dimensions, and key and value the same heads, got [2, 5, 2, 8], [3, 7, 2, 8] and [3, 7, 2, 8]}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<2x5x2x8xf32>, tensor<3x7x2x8xf32>, tensor<3x7x2x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  return
}

// -----

func.func @f(%q: tensor<5x2x8xf32>) {
  // expected-error@+2 {{'strata.attention' op dropout must be in [0, 1), got 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %q, %q {dropout = 1.0 : f64, dropout_key = 2 : i64, scale = 1.0 : f64} : (tensor<5x2x8xf32>, tensor<5x2x8xf32>, tensor<5x2x8xf32>) -> (tensor<5x2x8xf32>, tensor<2x5xf32>)
  return
}

// -----

func.func @f(%q: tensor<5x2x8xf32>, %k: tensor<7x3x8xf32>) {
  // expected-error@+2 {{'strata.attention' op key and value heads (3) must divide the query heads (2)}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<5x2x8xf32>, tensor<7x3x8xf32>, tensor<7x3x8xf32>) -> (tensor<5x2x8xf32>, tensor<2x5xf32>)
  return
}

// -----

// Grouped-query attention: 6 query heads cannot share 4 key heads evenly.
func.func @f(%q: tensor<5x6x8xf32>, %k: tensor<7x4x8xf32>) {
  // expected-error@+2 {{'strata.attention' op key and value heads (4) must divide the query heads (6)}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %k, %k {scale = 1.0 : f64} : (tensor<5x6x8xf32>, tensor<7x4x8xf32>, tensor<7x4x8xf32>) -> (tensor<5x6x8xf32>, tensor<6x5xf32>)
  return
}

// -----

func.func @f(%q: tensor<5x4x8xf32>, %k: tensor<7x2x8xf32>, %v: tensor<7x1x8xf32>) {
  // expected-error@+2 {{'strata.attention' op query, key and value must have the same batch dimensions, and key and value the same heads, got [5, 4, 8], [7, 2, 8] and [7, 1, 8]}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<5x4x8xf32>, tensor<7x2x8xf32>, tensor<7x1x8xf32>) -> (tensor<5x4x8xf32>, tensor<4x5xf32>)
  return
}

// -----

func.func @f(%q: tensor<5x8xf32>) {
  // expected-error@+2 {{'strata.attention' op query, key and value must have the same rank, at least 3 ([..., sequence, heads, head size])}}
  // expected-error@+1 {{failed to infer returned types}}
  %o, %l = strata.attention %q, %q, %q {scale = 1.0 : f64} : (tensor<5x8xf32>, tensor<5x8xf32>, tensor<5x8xf32>) -> (tensor<5x8xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%q: tensor<5x2x8xf32>, %k: tensor<7x2x8xf32>, %lse: tensor<2x5xf32>) {
  // expected-error@+2 {{'strata.attention_grad' op result and result_grad must have type tensor<5x2x8xf32>}}
  // expected-error@+1 {{failed to infer returned types}}
  %g:3 = strata.attention_grad %q, %k, %k, %k, %lse, %q {scale = 1.0 : f64} : (tensor<5x2x8xf32>, tensor<7x2x8xf32>, tensor<7x2x8xf32>, tensor<7x2x8xf32>, tensor<2x5xf32>, tensor<5x2x8xf32>) -> (tensor<5x2x8xf32>, tensor<7x2x8xf32>, tensor<7x2x8xf32>)
  return
}

// -----

func.func @f(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {
  // expected-error@+1 {{'strata.add' op 'strata.amp_guard' must be a unit attribute}}
  %0 = strata.add %a, %a {strata.amp_guard = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// A dimension 0: nothing a program trains (the runtimes' sizes, the
// evaluator's counts assume elements).
// expected-error@+1 {{non-empty statically shaped tensor}}
strata.param @empty : tensor<0x5xf32> init <zeros>

// -----

// More than 2^53 elements (here 2^64, which wraps to 0 in 64 bits).
// expected-error@+1 {{non-empty statically shaped tensor}}
strata.param @huge : tensor<4294967296x4294967296xf32> init <zeros>

// -----

func.func @empty_batch(%a: tensor<0x3xf32>, %b: tensor<3x5xf32>) -> tensor<0x5xf32> {
  // expected-error@+1 {{operand #0 must be non-empty statically shaped tensor}}
  %0 = strata.matmul %a, %b : (tensor<0x3xf32>, tensor<3x5xf32>) -> tensor<0x5xf32>
  return %0 : tensor<0x5xf32>
}

// -----

// A step's arguments take strata.name, its results strata.grad_of.
// expected-error@+1 {{'func.func' op argument 0: unknown Strata attribute 'strata.nmae' (an argument takes 'strata.name')}}
func.func @f(%x: tensor<4xf32> {strata.nmae = "features"}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument 0: 'strata.name' must be a non-empty string}}
func.func @f(%x: tensor<4xf32> {strata.name = ""}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument 0: 'strata.name' holds a control character (a NUL, a newline): names are printable text}}
func.func @f(%x: tensor<4xf32> {strata.name = "fe\00atures"}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op result 0: unknown Strata attribute 'strata.name' (a result takes 'strata.grad_of')}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {strata.name = "y"}) {
  return %x : tensor<4xf32>
}
