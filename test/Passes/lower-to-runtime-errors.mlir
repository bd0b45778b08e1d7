// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime -verify-diagnostics

strata.param @w : tensor<4xf64> init <zeros>

func.func @train_step() -> tensor<4xf64> {
  %w = strata.get_param @w : tensor<4xf64>
  // expected-error@+1 {{'strata.relu' op has a 'tensor<4xf64>' value; the CPU runtime has no kernels for 'f64'}}
  %r = strata.relu %w : (tensor<4xf64>) -> tensor<4xf64>
  return %r : tensor<4xf64>
}

// -----

// Low-precision tensors compute, but optimizer updates take f32 parameters
// and state.
strata.param @w : tensor<4xbf16> init <zeros>

func.func @train_step() -> tensor<4xbf16> {
  %w = strata.get_param @w : tensor<4xbf16>
  %r = strata.scale %w {factor = 2.0 : f64} : (tensor<4xbf16>) -> tensor<4xbf16>
  %lr = arith.constant dense<0.1> : tensor<f32>
  // expected-error@+1 {{'strata.sgd_update' op has a 'tensor<4xbf16>' value; optimizer updates compute in f32}}
  %n = strata.sgd_update %w, %r, %lr {weight_decay = 0.0 : f64} : (tensor<4xbf16>, tensor<4xbf16>, tensor<f32>) -> tensor<4xbf16>
  return %n : tensor<4xbf16>
}

// -----

func.func @train_step(%a: tensor<4xi8>, %b: tensor<4xi8>) -> tensor<4xi8> {
  // expected-error@+1 {{'arith.addi' op has a 'tensor<4xi8>' value; the CPU runtime takes integers as i32 or i64}}
  %c = arith.addi %a, %b : tensor<4xi8>
  return %c : tensor<4xi8>
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
strata.param @w : tensor<4x2xf32> init <zeros>

func.func @train_step() -> tensor<4x4xf32> {
  %w = strata.get_param @w : tensor<4x2xf32>
  %t = strata.init_token : !strata.token
  // expected-error@+1 {{'strata.all_gather' op splits dimension 1 after a dimension of size 4; the CPU runtime needs each rank's slice contiguous (split the leading dimension)}}
  %g, %t1 = strata.all_gather %w, %t {group = @dp, dim = 1 : i64} : (tensor<4x2xf32>, !strata.token) -> (tensor<4x4xf32>, !strata.token)
  return %g : tensor<4x4xf32>
}

// -----

strata.comm_group @dp ranks [array<i64: 0, 1>]
strata.param @w : tensor<4xf32> init <zeros>

// expected-error@+1 {{returns a '!strata.token' value; a step lowered to the runtime returns tensors}}
func.func @train_step() -> !strata.token {
  %w = strata.get_param @w : tensor<4xf32>
  %t = strata.init_token : !strata.token
  %g, %t1 = strata.all_gather %w, %t {group = @dp} : (tensor<4xf32>, !strata.token) -> (tensor<8xf32>, !strata.token)
  return %t1 : !strata.token
}

// -----

// A broadcast beyond the batched GEMMs runs one GEMM per batch of the
// result (run/matmul-broadcast.test), up to 4096 of them.
strata.param @a : tensor<65x1x2x2xf32> init <zeros>
strata.param @b : tensor<64x2x2xf32> init <zeros>

func.func @train_step() -> tensor<65x64x2x2xf32> {
  %a = strata.get_param @a : tensor<65x1x2x2xf32>
  %b = strata.get_param @b : tensor<64x2x2xf32>
  // expected-error@+1 {{'strata.matmul' op broadcasts batch dimensions into 4160 products, which the runtime runs one by one; at most 4096 are supported}}
  %c = strata.matmul %a, %b : (tensor<65x1x2x2xf32>, tensor<64x2x2xf32>) -> tensor<65x64x2x2xf32>
  return %c : tensor<65x64x2x2xf32>
}

// -----

// expected-error@+1 {{strata-lower-to-runtime: the program has no step function (a function named @train_step, or the only function with a body)}}
module {
  func.func private @declared()
}

// -----

// expected-error@+1 {{strata-lower-to-runtime: the program has 2 functions with a body (@forward, @backward) and none is named @train_step: which one is the step?}}
module {
  func.func @forward() {
    return
  }
  func.func @backward() {
    return
  }
}

// -----

module {
  func.func @train_step() {
    return
  }
  // expected-error@+1 {{only the step (@train_step) can be lowered to the runtime}}
  func.func @helper() {
    return
  }
}
