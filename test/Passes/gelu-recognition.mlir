// RUN: strata-opt %s -split-input-file --strata-gelu-recognition | FileCheck %s
// It runs on the forward program, before autodiff.
// RUN: strata-gen gpt --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 16 --batch 2 | strata-opt --strata-autodiff | not strata-opt --strata-gelu-recognition 2>&1 | FileCheck %s --check-prefix=AFTER
// AFTER: error: strata-gelu-recognition: the program has been through strata-autodiff, which runs after strata-gelu-recognition; run strata-gelu-recognition first

// Hugging Face's NewGELUActivation as the importer writes it.
// CHECK-LABEL: func @hugging_face
func.func @hugging_face(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[M:.*]] = strata.matmul %arg0, %arg1
  // CHECK-NEXT: %[[X:.*]] = strata.bias_add %[[M]], %arg2
  // CHECK-NEXT: %[[G:.*]] = strata.gelu %[[X]] {approximate = #strata.gelu<tanh>, strata.layer = "h.0"}
  // CHECK-NEXT: return %[[G]]
  %m = strata.matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %x = strata.bias_add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %h = strata.scale %x {factor = 5.000000e-01 : f64, strata.layer = "h.0"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %x2 = strata.mul %x, %x {strata.layer = "h.0"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %x3 = strata.mul %x2, %x {strata.layer = "h.0"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = strata.scale %x3 {factor = 4.471500e-02 : f64, strata.layer = "h.0"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %i = strata.add %x, %c {strata.layer = "h.0"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = strata.scale %i {factor = 0.79788456080286541 : f64, strata.layer = "h.0"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = strata.tanh %u {strata.layer = "h.0"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %s = strata.add %t, %one {strata.layer = "h.0"} : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %y = strata.mul %h, %s {strata.layer = "h.0"} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Other groupings: 0.5 on the product, factors as a mul by a constant
// (sqrt(2/pi) rounded to f32), operands swapped, x^3 as x * (x * x), x a
// matmul result.
// CHECK-LABEL: func @other_forms
func.func @other_forms(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[X:.*]] = strata.matmul
  // CHECK-NEXT: %[[G:.*]] = strata.gelu %[[X]] {approximate = #strata.gelu<tanh>}
  // CHECK-NEXT: return %[[G]]
  %x = strata.matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %x2 = strata.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %x3 = strata.mul %x, %x2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %k = arith.constant dense<4.471500e-02> : tensor<f32>
  %c = strata.mul %k, %x3 : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %i = strata.add %c, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = arith.constant dense<0.797884583> : tensor<f32>
  %u = strata.mul %i, %r : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %t = strata.tanh %u : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %s = strata.add %one, %t : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = strata.mul %s, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = strata.scale %p {factor = 5.000000e-01 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func @keep
func.func @keep(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>) {
  // Another function than GELU (0.04 instead of 0.044715): kept.
  // CHECK: strata.tanh
  %m = strata.matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %h = strata.scale %m {factor = 5.000000e-01 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %m2 = strata.mul %m, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m3 = strata.mul %m2, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = strata.scale %m3 {factor = 4.000000e-02 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %i = strata.add %m, %c : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = strata.scale %i {factor = 0.79788456080286541 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = strata.tanh %u : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %s = strata.add %t, %one : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %y = strata.mul %h, %s : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // An intermediate value read elsewhere too (the tanh, returned): kept.
  // CHECK: strata.tanh
  %h1 = strata.scale %m {factor = 5.000000e-01 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %n2 = strata.mul %m, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %n3 = strata.mul %n2, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c1 = strata.scale %n3 {factor = 4.471500e-02 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %i1 = strata.add %m, %c1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u1 = strata.scale %i1 {factor = 0.79788456080286541 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %t1 = strata.tanh %u1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %s1 = strata.add %t1, %one : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %y1 = strata.mul %h1, %s1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // A constant that broadcasts the chain's values (1 + tanh, [4, 16], to
  // [2, 4, 16]): kept.
  // CHECK: strata.tanh
  %h2 = strata.scale %m {factor = 5.000000e-01 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %x2 = strata.mul %m, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %x3 = strata.mul %x2, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c2 = strata.scale %x3 {factor = 4.471500e-02 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %i2 = strata.add %m, %c2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u2 = strata.scale %i2 {factor = 0.79788456080286541 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %t2 = strata.tanh %u2 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %ones = arith.constant dense<1.000000e+00> : tensor<2x4x16xf32>
  %s2 = strata.add %t2, %ones : (tensor<4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %y2 = strata.mul %h2, %s2 : (tensor<4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %z = strata.add %y1, %t1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK-NOT: strata.gelu
  return %y, %z, %y2 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>
}

// -----

// 0.5 on 1 + tanh, and 0.5 on the product as a mul by a constant; x any
// value (a function argument here). The constants die with the chain.
// CHECK-LABEL: func @half_elsewhere
func.func @half_elsewhere(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  // CHECK-NEXT: %[[A:.*]] = strata.gelu %arg0 {approximate = #strata.gelu<tanh>}
  // CHECK-NEXT: %[[B:.*]] = strata.gelu %arg0 {approximate = #strata.gelu<tanh>}
  // CHECK-NEXT: return %[[A]], %[[B]]
  %half = arith.constant dense<5.000000e-01> : tensor<f32>
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %x2 = strata.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %x3 = strata.mul %x2, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = strata.scale %x3 {factor = 4.471500e-02 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %i = strata.add %x, %c : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %u = strata.scale %i {factor = 0.79788456080286541 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %t = strata.tanh %u : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = strata.add %t, %one : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %hs = strata.scale %s {factor = 5.000000e-01 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = strata.mul %x, %hs : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z2 = strata.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %z3 = strata.mul %z2, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %d = strata.scale %z3 {factor = 4.471500e-02 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %j = strata.add %d, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %v = strata.scale %j {factor = 0.79788456080286541 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = strata.tanh %v : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %q = strata.add %one, %r : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = strata.mul %x, %q : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %w = strata.mul %half, %p : (tensor<f32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y, %w : tensor<4x16xf32>, tensor<4x16xf32>
}
