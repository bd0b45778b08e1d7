// Data parallelism and gradient merge give each rank or micro-batch a part
// of the batch's leading dimension. A forward op that would compute
// otherwise on a part than on the whole (pairing, reducing, slicing, moving
// or normalizing over rows of the batch, or using the mean loss other than
// linearly) is refused at its line by both passes; row-wise programs and
// linear combinations of losses over the whole batch (strata.cross_entropy,
// reduce_mean or reduce_sum over every dimension) split.
// RUN: strata-opt %s -split-input-file -verify-diagnostics --strata-autodiff --strata-rank-grid=dp=2 --strata-data-parallel -o /dev/null
// RUN: strata-opt %s -split-input-file -verify-diagnostics --strata-autodiff --strata-gradient-merge=k-steps=2 -o /dev/null
// RUN: not strata-opt %s -split-input-file --strata-autodiff --strata-rank-grid=dp=2 --strata-data-parallel 2>&1 | FileCheck %s --check-prefix=DP
// RUN: not strata-opt %s -split-input-file --strata-autodiff --strata-gradient-merge=k-steps=2 2>&1 | FileCheck %s --check-prefix=GM
// DP: error: 'strata.matmul' op multiplies two matrices that both hold rows of the batch (such as x x^T), so it cannot run on 1/2 of the batch: strata-data-parallel gives each of 2 ranks a part of the batch's leading dimension
// GM: error: 'strata.matmul' op multiplies two matrices that both hold rows of the batch (such as x x^T), so it cannot run on 1/2 of the batch: strata-gradient-merge splits the batch's leading dimension into 2 micro-batches

// In-batch similarity (contrastive losses): each part would pair its own
// rows only.
strata.param @w : tensor<2x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x2xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<2x2xf32>
  %e = strata.matmul %x, %w : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  // expected-error @+1 {{multiplies two matrices that both hold rows of the batch (such as x x^T)}}
  %sim = strata.matmul %x, %x {transpose_rhs} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x4xf32>
  %p = strata.matmul %sim, %e : (tensor<4x4xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %p, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The first rows of the batch.
strata.param @w : tensor<2x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x2xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<2x2xf32>
  // expected-error @+1 {{takes rows of the batch (a slice of dimension 0)}}
  %xs = strata.slice %x {dim = 0 : i64, start = 0 : i64, size = 2 : i64} : (tensor<4x2xf32>) -> tensor<2x2xf32>
  %ys = strata.slice %y {dim = 0 : i64, start = 0 : i64, size = 2 : i64} : (tensor<4xi32>) -> tensor<2xi32>
  %e = strata.matmul %xs, %w : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %l = strata.cross_entropy %e, %ys : (tensor<2x2xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A softmax over the batch dimension, through a transpose.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{moves the batch dimension from the front}}
  %t = strata.transpose %x {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %s = strata.softmax %t : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %b = strata.transpose %s {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %w = strata.get_param @w : tensor<3x2xf32>
  %e = strata.matmul %b, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Centering the features over the batch (one-row parts would give zeros).
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'strata.reduce_mean' op reduces over the batch dimension, so it cannot run on 1/2 of the batch}}
  %mu = strata.reduce_mean %x {dims = array<i64: 0>} : (tensor<4x3xf32>) -> tensor<3xf32>
  %c = strata.sub %x, %mu : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %w = strata.get_param @w : tensor<3x2xf32>
  %e = strata.matmul %c, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A summed loss with a backward written by hand: the sum is rescaled by
// the number of parts only with the gradient autodiff made
// (strata.reduce_grad); autodiff leaves a function that returns gradients
// alone.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> (tensor<f32>, tensor<3x2xf32> {strata.grad_of = @w}) {
  %w = strata.get_param @w {strata.role = #strata.role<forward>} : tensor<3x2xf32>
  %h = strata.matmul %x, %w {strata.role = #strata.role<forward>} : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  // expected-error @+1 {{sums over the batch, and the program has no strata.reduce_grad of it (a backward written by hand), so its gradient cannot be rescaled for the parts of the batch}}
  %l = strata.reduce_sum %h {dims = array<i64: 0, 1>, strata.role = #strata.role<forward>} : (tensor<4x2xf32>) -> tensor<f32>
  %one = arith.constant {strata.role = #strata.role<backward>} dense<1.0> : tensor<4x2xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %one {strata.role = #strata.role<backward>} : (tensor<4x3xf32>, tensor<3x2xf32>, tensor<4x2xf32>) -> (tensor<4x3xf32>, tensor<3x2xf32>)
  return %l, %dw : tensor<f32>, tensor<3x2xf32>
}

// -----

// A mean over the batch that is not the loss's: each part would center on
// its own rows.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<3x2xf32>
  %h = strata.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %m = strata.reduce_mean %h {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  // expected-error @+1 {{uses the loss over the whole batch (a mean or sum) other than linearly (a part of the batch has its own)}}
  %c = strata.sub %h, %m : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %c, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The mean loss squared: a part's square is not the whole's.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<3x2xf32>
  %h = strata.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %h, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  // expected-error @+1 {{uses the loss over the whole batch (a mean or sum) other than linearly (a part of the batch has its own)}}
  %sq = strata.mul %l, %l : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %sq : tensor<f32>
}

// -----

// A softmax over a batch of scalars.
strata.param @w : tensor<3x1xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<3x1xf32>
  %h = strata.matmul %x, %w : (tensor<4x3xf32>, tensor<3x1xf32>) -> tensor<4x1xf32>
  %v = strata.reshape %h : (tensor<4x1xf32>) -> tensor<4xf32>
  // expected-error @+1 {{normalizes over the batch dimension}}
  %p = strata.softmax %v : (tensor<4xf32>) -> tensor<4xf32>
  %q = strata.reshape %p : (tensor<4xf32>) -> tensor<4x1xf32>
  %b = strata.broadcast_to %q : (tensor<4x1xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %b, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Rows of the batch added along another dimension (with one row a part
// the shapes still broadcast).
strata.param @w : tensor<3x3xf32> init <uniform, 0.5>
strata.param @b : tensor<5x1x3xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<2x3xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<3x3xf32>
  %b = strata.get_param @b : tensor<5x1x3xf32>
  %h = strata.matmul %x, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  // expected-error @+1 {{broadcasts rows of the batch along another dimension}}
  %a = strata.add %b, %h : (tensor<5x1x3xf32>, tensor<2x3xf32>) -> tensor<5x2x3xf32>
  %r = strata.reduce_sum %a {dims = array<i64: 0>} : (tensor<5x2x3xf32>) -> tensor<2x3xf32>
  %l = strata.cross_entropy %r, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Attention whose sequence dimension is the batch's ([S, H, D]: no batch
// dimension), as attention fusion makes of a 2-D q k^T chain.
strata.param @w : tensor<8x8xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x2x8xf32>, %y: tensor<4x2xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8x8xf32>
  %q = strata.matmul %x, %w : (tensor<4x2x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8xf32>
  // expected-error @+1 {{attends across rows of the batch (its sequence dimension is the batch's)}}
  %o, %lse = strata.attention %q, %x, %x {scale = 0.5 : f64, causal} : (tensor<4x2x8xf32>, tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> (tensor<4x2x8xf32>, tensor<2x4xf32>)
  %l = strata.cross_entropy %o, %y : (tensor<4x2x8xf32>, tensor<4x2xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A sum over the batch at the same rank.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{sums over the batch dimension}}
  %s = strata.sum_to %x : (tensor<4x3xf32>) -> tensor<1x3xf32>
  %b = strata.broadcast_to %s : (tensor<1x3xf32>) -> tensor<4x3xf32>
  %w = strata.get_param @w : tensor<3x2xf32>
  %e = strata.matmul %b, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A constant with the batch's rows (each part would need its own rows of
// it; the shapes used to be reported as not broadcasting).
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %c = arith.constant dense<1.0> : tensor<4x3xf32>
  // expected-error @+1 {{combines the batch's rows with a tensor of 4 rows that does not come from the batch (a constant or a parameter): each part of the batch would need its own rows of it}}
  %xc = strata.add %x, %c : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %w = strata.get_param @w : tensor<3x2xf32>
  %e = strata.matmul %xc, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A batched product with a parameter of the batch's shape.
strata.param @w : tensor<4x3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x5x3xf32>, %y: tensor<4x5xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<4x3x2xf32>
  // expected-error @+1 {{combines the batch's rows with a tensor of 4 rows that does not come from the batch}}
  %e = strata.matmul %x, %w : (tensor<4x5x3xf32>, tensor<4x3x2xf32>) -> tensor<4x5x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x5x2xf32>, tensor<4x5xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A sum over the batch to a lower rank.
strata.param @w : tensor<3x2xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{sums over the batch dimension}}
  %s = strata.sum_to %x : (tensor<4x3xf32>) -> tensor<3xf32>
  %b = strata.broadcast_to %s : (tensor<3xf32>) -> tensor<4x3xf32>
  %w = strata.get_param @w : tensor<3x2xf32>
  %e = strata.matmul %b, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %e, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// W x^T: the batch becomes the product's columns.
strata.param @w : tensor<2x3xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x3xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<2x3xf32>
  // expected-error @+1 {{moves the batch dimension from the front}}
  %e = strata.matmul %w, %x {transpose_rhs} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %t = strata.transpose %e {permutation = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %l = strata.cross_entropy %t, %y : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Row-wise: batched products of two batch operands (attention's), a
// transpose that keeps the batch first, a reshape that merges it with the
// sequence, reductions over other dimensions, and a weighted sum of two
// cross-entropy losses, a mean-squared one and a summed one.
strata.param @w : tensor<8x8xf32> init <uniform, 0.5>
func.func @train_step(%x: tensor<4x2x8xf32>, %y: tensor<4x2xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8x8xf32>
  %q = strata.matmul %x, %w : (tensor<4x2x8xf32>, tensor<8x8xf32>) -> tensor<4x2x8xf32>
  %s = strata.matmul %q, %x {transpose_rhs} : (tensor<4x2x8xf32>, tensor<4x2x8xf32>) -> tensor<4x2x2xf32>
  %p = strata.softmax %s : (tensor<4x2x2xf32>) -> tensor<4x2x2xf32>
  %o = strata.matmul %p, %q : (tensor<4x2x2xf32>, tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
  %t = strata.transpose %o {permutation = array<i64: 0, 2, 1>} : (tensor<4x2x8xf32>) -> tensor<4x8x2xf32>
  %m = strata.reduce_mean %t {dims = array<i64: 2>} : (tensor<4x8x2xf32>) -> tensor<4x8xf32>
  %r = strata.reshape %o : (tensor<4x2x8xf32>) -> tensor<8x8xf32>
  %yr = strata.reshape %y : (tensor<4x2xi32>) -> tensor<8xi32>
  %l1 = strata.cross_entropy %r, %yr : (tensor<8x8xf32>, tensor<8xi32>) -> tensor<f32>
  %y0 = strata.slice %y {dim = 1 : i64, start = 0 : i64, size = 1 : i64} : (tensor<4x2xi32>) -> tensor<4x1xi32>
  %y1 = strata.reshape %y0 : (tensor<4x1xi32>) -> tensor<4xi32>
  %l2 = strata.cross_entropy %m, %y1 : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  %l2s = strata.scale %l2 {factor = 0.5 : f64} : (tensor<f32>) -> tensor<f32>
  %l12 = strata.add %l1, %l2s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %sq = strata.mul %m, %m : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l3 = strata.reduce_mean %sq {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  %l4 = strata.reduce_sum %sq {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  %l34 = strata.add %l3, %l4 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %l = strata.add %l12, %l34 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}
