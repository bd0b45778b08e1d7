// RUN: strata-opt %s -split-input-file --strata-autodiff | FileCheck %s
// Numerical correctness of every rule: test/unit/AutodiffTest.cpp.

strata.param @w : tensor<4x3xf32> init <normal, 1.0>
strata.param @b : tensor<3xf32> init <zeros>
strata.param @frozen : tensor<3xf32> init <ones> {frozen}
strata.param @unused : tensor<2xf32> init <zeros>

// CHECK-LABEL: func.func @train_step
// A parameter the loss does not reach (@unused), like a frozen one, gets
// no gradient (and so no update: PyTorch skips a parameter without one).
// CHECK-SAME: -> (tensor<f32>, tensor<4x3xf32> {strata.grad_of = @w}, tensor<3xf32> {strata.grad_of = @b})
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2xi32>) -> tensor<f32> {
  // CHECK: %[[W:.*]] = strata.get_param @w {strata.role = #strata.role<forward>}
  %w = strata.get_param @w : tensor<4x3xf32>
  %b = strata.get_param @b : tensor<3xf32>
  %f = strata.get_param @frozen : tensor<3xf32>
  // CHECK: %[[MM:.*]] = strata.matmul %{{.*}}, %[[W]] {strata.role = #strata.role<forward>}
  %0 = strata.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = strata.bias_add %0, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[Z:.*]] = strata.mul %{{.*}}, %{{.*}} {strata.role = #strata.role<forward>}
  %2 = strata.mul %1, %f : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[L:.*]] = strata.cross_entropy %[[Z]]
  %loss = strata.cross_entropy %2, %y : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[ONE:.*]] = arith.constant {strata.role = #strata.role<backward>} dense<1.000000e+00> : tensor<f32>
  // CHECK: %[[DZ:.*]] = strata.cross_entropy_grad %[[Z]], %{{.*}}, %[[ONE]] {strata.role = #strata.role<backward>}
  // The frozen factor gets no gradient of its own: the mul rule's
  // gradient of the other operand is all that is left of it.
  // CHECK: %[[D1:.*]] = strata.mul %[[DZ]], %{{.*}} {strata.role = #strata.role<backward>}
  // CHECK-NEXT: %[[DB:.*]] = strata.bias_add_grad %[[D1]]
  // CHECK: %{{.*}}, %[[DW:.*]] = strata.matmul_grad %{{.*}}, %[[W]], %[[D1]] {strata.role = #strata.role<backward>}
  // CHECK-NOT: dense<0.000000e+00>
  // CHECK: return %[[L]], %[[DW]], %[[DB]] : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>{{$}}
  return %loss : tensor<f32>
}

// -----

// A parameter read twice (tied weights) gets the sum of both adjoints.
strata.param @t : tensor<5x3xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @tied
func.func @tied(%ids: tensor<2xi32>, %y: tensor<2xi32>) -> tensor<f32> {
  %t = strata.get_param @t : tensor<5x3xf32>
  %e = strata.embedding %t, %ids : (tensor<5x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
  %logits = strata.matmul %e, %t {transpose_rhs} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x5xf32>
  %loss = strata.cross_entropy %logits, %y : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[DE:.*]], %[[DT1:.*]] = strata.matmul_grad %{{.*}}, %{{.*}}, %{{.*}} {strata.role = #strata.role<backward>, transpose_rhs}
  // CHECK: %[[DT2:.*]] = strata.embedding_grad %{{.*}}, %[[DE]]
  // CHECK: %[[SUM:.*]] = strata.add %[[DT1]], %[[DT2]]
  // CHECK: return %{{.*}}, %[[SUM]]
  return %loss : tensor<f32>
}

// -----

// Broadcasting in the forward pass is summed away in the backward pass.
strata.param @a : tensor<3x4xf32> init <normal, 1.0>
strata.param @v : tensor<4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @broadcast
func.func @broadcast() -> tensor<f32> {
  %a = strata.get_param @a : tensor<3x4xf32>
  %v = strata.get_param @v : tensor<4xf32>
  %s = strata.sub %a, %v : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %l = strata.reduce_mean %s {dims = array<i64: 0, 1>} : (tensor<3x4xf32>) -> tensor<f32>
  // CHECK: %[[G:.*]] = strata.reduce_grad %{{.*}}, %[[S:.*]] {dims = array<i64: 0, 1>, mean, strata.role = #strata.role<backward>} : (tensor<f32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  // CHECK: %[[NEG:.*]] = strata.scale %[[G]] {factor = -1.000000e+00 : f64
  // CHECK: %[[DV:.*]] = strata.sum_to %[[NEG]] {{.*}} : (tensor<3x4xf32>) -> tensor<4xf32>
  // CHECK: return %{{.*}}, %[[G]], %[[DV]]
  return %l : tensor<f32>
}

// -----

// Dropout's backward replays the forward mask: same key, same micro-batch.
strata.param @a : tensor<8xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @dropout
func.func @dropout() -> tensor<f32> {
  %a = strata.get_param @a : tensor<8xf32>
  %d = strata.dropout %a {key = 5 : i64, prob = 0.25 : f64, strata.micro_batch = 2 : i64} : (tensor<8xf32>) -> tensor<8xf32>
  %l = strata.reduce_sum %d {dims = array<i64: 0>} : (tensor<8xf32>) -> tensor<f32>
  // CHECK: strata.dropout_grad %{{.*}} {key = 5 : i64, prob = 2.500000e-01 : f64, strata.micro_batch = 2 : i64, strata.role = #strata.role<backward>}
  return %l : tensor<f32>
}

// -----

// Functions that already return gradients (a framework's own backward) are
// left alone (a step that returns no scalar loss is an error:
// autodiff-errors.mlir).
strata.param @a : tensor<8xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @handwritten
// CHECK-NOT: strata.role
// CHECK: return
func.func @handwritten(%g: tensor<8xf32>) -> (tensor<f32>, tensor<8xf32> {strata.grad_of = @a}) {
  %c = arith.constant dense<0.0> : tensor<f32>
  return %c, %g : tensor<f32>, tensor<8xf32>
}


// -----

// A slice's gradient is the adjoint between zeros (a pad); a concat's is a
// slice per input, each added to that input's adjoint.
strata.param @s : tensor<2x6xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @slices
func.func @slices(%y: tensor<2xi32>) -> tensor<f32> {
  %s = strata.get_param @s : tensor<2x6xf32>
  // CHECK: %[[LO:.*]] = strata.slice %[[S:.*]] {dim = 1 : i64, size = 2 : i64, start = 1 : i64
  %lo = strata.slice %s {dim = 1 : i64, start = 1 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %c = strata.concat %lo, %s {dim = 1 : i64} : (tensor<2x2xf32>, tensor<2x6xf32>) -> tensor<2x8xf32>
  %l = strata.cross_entropy %c, %y : (tensor<2x8xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[DC:.*]] = strata.cross_entropy_grad
  // CHECK: %[[D0:.*]] = strata.slice %[[DC]] {dim = 1 : i64, size = 2 : i64, start = 0 : i64, strata.role = #strata.role<backward>}
  // CHECK: %[[D1:.*]] = strata.slice %[[DC]] {dim = 1 : i64, size = 6 : i64, start = 2 : i64, strata.role = #strata.role<backward>}
  // CHECK: %[[PAD:.*]] = strata.pad %[[D0]] {dim = 1 : i64, high = 3 : i64, low = 1 : i64, strata.role = #strata.role<backward>} : (tensor<2x2xf32>) -> tensor<2x6xf32>
  // CHECK: strata.add %[[D1]], %[[PAD]]
  return %l : tensor<f32>
}

// -----

// Slices that together cover a tensor (a fused q/k/v projection split in
// three): their gradients are one concat, in the order of the slices, not
// pads summed. Slices that leave part of it out keep their pads.
strata.param @qkv : tensor<2x6xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @split
func.func @split(%y: tensor<2xi32>) -> tensor<f32> {
  %p = strata.get_param @qkv : tensor<2x6xf32>
  %q = strata.slice %p {dim = 1 : i64, start = 0 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %k = strata.slice %p {dim = 1 : i64, start = 2 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %v = strata.slice %p {dim = 1 : i64, start = 4 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %qk = strata.mul %q, %k : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %o = strata.add %qk, %v : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %l = strata.cross_entropy %o, %y : (tensor<2x2xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[DO:.*]] = strata.cross_entropy_grad
  // CHECK: %[[DQ:.*]] = strata.mul %[[DO]], %[[K:.*]] {strata.role
  // CHECK: %[[DK:.*]] = strata.mul %[[DO]], %[[Q:.*]] {strata.role
  // CHECK-NOT: strata.pad
  // CHECK: %[[CAT:.*]] = strata.concat %[[DQ]], %[[DK]], %[[DO]] {dim = 1 : i64, strata.role = #strata.role<backward>} : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
  // CHECK: return %{{.*}}, %[[CAT]]
  return %l : tensor<f32>
}

// -----

// One adjoint handed to two inputs (an add's): the pad that is @p's whole
// gradient is also a term of @q's sum, which therefore stays a sum of pads.
strata.param @p : tensor<2x6xf32> init <normal, 1.0>
strata.param @q : tensor<2x6xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @shared
func.func @shared(%y: tensor<2xi32>) -> tensor<f32> {
  %p = strata.get_param @p : tensor<2x6xf32>
  %q = strata.get_param @q : tensor<2x6xf32>
  %a = strata.add %p, %q : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %a3 = strata.slice %a {dim = 1 : i64, start = 4 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %q0 = strata.slice %q {dim = 1 : i64, start = 0 : i64, size = 4 : i64} : (tensor<2x6xf32>) -> tensor<2x4xf32>
  %x = strata.concat %q0, %a3 {dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
  %l = strata.cross_entropy %x, %y : (tensor<2x6xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[P:.*]] = strata.pad %{{.*}} {dim = 1 : i64, high = 0 : i64, low = 4 : i64
  // CHECK: %[[Q:.*]] = strata.add %{{.*}}, %[[P]]
  // CHECK-NOT: strata.concat
  // CHECK: return %{{.*}}, %[[P]], %[[Q]]
  return %l : tensor<f32>
}

// -----

strata.param @qk : tensor<2x6xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @part
func.func @part(%y: tensor<2xi32>) -> tensor<f32> {
  %p = strata.get_param @qk : tensor<2x6xf32>
  %q = strata.slice %p {dim = 1 : i64, start = 0 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %k = strata.slice %p {dim = 1 : i64, start = 2 : i64, size = 2 : i64} : (tensor<2x6xf32>) -> tensor<2x2xf32>
  %qk = strata.mul %q, %k : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %l = strata.cross_entropy %qk, %y : (tensor<2x2xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK-COUNT-2: strata.pad
  // CHECK-NOT: strata.concat
  return %l : tensor<f32>
}

// -----

// LLaMA's rotate_half (the halves swapped, one negated) times a table,
// plus the input times another: the halves' gradients are one concat, and
// the product's term is added to it.
strata.param @x : tensor<2x4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @rotate_half
func.func @rotate_half(%y: tensor<2xi32>) -> tensor<f32> {
  %x = strata.get_param @x : tensor<2x4xf32>
  %c = arith.constant dense<[[0.5, 0.25, 2.0, 4.0]]> : tensor<1x4xf32>
  %x1 = strata.slice %x {dim = 1 : i64, start = 0 : i64, size = 2 : i64} : (tensor<2x4xf32>) -> tensor<2x2xf32>
  %x2 = strata.slice %x {dim = 1 : i64, start = 2 : i64, size = 2 : i64} : (tensor<2x4xf32>) -> tensor<2x2xf32>
  %n = strata.scale %x2 {factor = -1.0 : f64} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %h = strata.concat %n, %x1 {dim = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  %a = strata.mul %x, %c : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  %r = strata.add %a, %h : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = strata.cross_entropy %r, %y : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
  // CHECK: %[[DR:.*]] = strata.cross_entropy_grad
  // CHECK: %[[DA:.*]] = strata.mul %[[DR]], %{{.*}} {strata.role
  // CHECK: %[[DN:.*]] = strata.slice %[[DR]] {dim = 1 : i64, size = 2 : i64, start = 0 : i64
  // CHECK: %[[D1:.*]] = strata.slice %[[DR]] {dim = 1 : i64, size = 2 : i64, start = 2 : i64
  // CHECK: %[[D2:.*]] = strata.scale %[[DN]]
  // CHECK-NOT: strata.pad
  // CHECK: %[[CAT:.*]] = strata.concat %[[D1]], %[[D2]] {dim = 1 : i64, strata.role = #strata.role<backward>}
  // CHECK-NEXT: %[[DX:.*]] = strata.add %[[CAT]], %[[DA]] {strata.role = #strata.role<backward>}
  // CHECK-NEXT: return %{{.*}}, %[[DX]]
  return %l : tensor<f32>
}

// -----

// Values no parameter reaches (a constant table, the batch) get no
// gradient: the rules' products for them, and the sums that reduce them
// to a broadcast operand's shape, are not left in the step.
strata.param @q : tensor<2x4xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @constant_factor
func.func @constant_factor(%x: tensor<2x4xf32>) -> tensor<f32> {
  %q = strata.get_param @q : tensor<2x4xf32>
  // CHECK: %[[C:.*]] = arith.constant {strata.role = #strata.role<forward>} dense<{{\[\[}}1.0
  %c = arith.constant dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>
  %p = strata.mul %q, %c : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  %r = strata.mul %p, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = strata.reduce_mean %r {dims = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  // CHECK: %[[G:.*]] = strata.reduce_grad
  // CHECK-NEXT: %[[DP:.*]] = strata.mul %[[G]], %arg0
  // CHECK-NEXT: %[[DQ:.*]] = strata.mul %[[DP]], %[[C]]
  // CHECK-NEXT: return %{{.*}}, %[[DQ]]
  return %l : tensor<f32>
}
