// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-recompute-casts | FileCheck %s
// RUN: not strata-opt %s -split-input-file --strata-recompute-casts 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-recompute-casts --strata-recompute-casts | FileCheck %s
// RUN: strata-opt %s -split-input-file --strata-autodiff --strata-recompute-casts=resident-params=false | FileCheck %s --check-prefix=ZERO3

// Before autodiff there is no backward to read anything.
// ERR: error: strata-recompute-casts: the step returns no gradients (run strata-autodiff first)

// A forward cast that the backward reads is cast again where the backward
// first reads it when its operand is kept anyway: read by the backward too
// (the f32 softmax output, which its gradient reads) or resident (a
// parameter). A widening cast's narrower operand is kept instead. A
// narrowing cast of a value the backward does not read stays saved.
strata.param @cw : tensor<8x8xf32> init <normal, 1.0>
strata.param @cv : tensor<8x8xbf16> init <normal, 1.0>

// CHECK-LABEL: func.func @casts
func.func @casts(%x: tensor<4x8xbf16>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @cw : tensor<8x8xf32>
  %v = strata.get_param @cv : tensor<8x8xbf16>
  // CHECK: %[[WL:.*]] = strata.cast %[[W:.*]] {strata.role = #strata.role<forward>} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  // Under ZeRO-3 a parameter is gathered again for each backward read:
  // its narrower copy is kept instead.
  // ZERO3-LABEL: func.func @casts
  // ZERO3: %[[ZWL:.*]] = strata.cast %[[ZW:.*]] {strata.role = #strata.role<forward>} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  // ZERO3-NOT: strata.cast %[[ZW]]
  // ZERO3: strata.matmul_grad %{{.*}}, %[[ZWL]], %{{.*}} {strata.role = #strata.role<backward>}
  %wl = strata.cast %w : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  // CHECK: %[[A:.*]] = strata.matmul %{{.*}}, %[[WL]]
  %a = strata.matmul %x, %wl : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: %[[AF:.*]] = strata.cast %[[A]] {strata.role = #strata.role<forward>} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %af = strata.cast %a : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: %[[P:.*]] = strata.softmax %[[AF]]
  %p = strata.softmax %af : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[PL:.*]] = strata.cast %[[P]] {strata.role = #strata.role<forward>} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %pl = strata.cast %p : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  // CHECK: %[[B:.*]] = strata.matmul %[[PL]], %[[V:.*]] {strata.role
  %b = strata.matmul %pl, %v : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: %[[H:.*]] = strata.tanh %[[B]]
  %h = strata.tanh %b : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: %[[HF:.*]] = strata.cast %[[H]] {strata.role = #strata.role<forward>} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %hf = strata.cast %h : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: %[[LOSS:.*]] = strata.cross_entropy %[[HF]]
  %l = strata.cross_entropy %hf, %y : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  // The loss's input, widened from the bf16 tanh output (which the tanh's
  // gradient reads too), is widened again for the loss's gradient.
  // CHECK: %[[HF2:.*]] = strata.cast %[[H]] {strata.role = #strata.role<backward>} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: strata.cross_entropy_grad %[[HF2]]
  // The product's operand, cast again from the f32 probabilities that the
  // softmax's gradient reads.
  // CHECK: %[[PL2:.*]] = strata.cast %[[P]] {strata.role = #strata.role<backward>} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  // CHECK: strata.matmul_grad %[[PL2]], %[[V]]
  // CHECK: strata.softmax_grad %[[P]]
  // The weight's bf16 copy, cast again from the resident parameter.
  // CHECK: %[[WL2:.*]] = strata.cast %[[W]] {strata.role = #strata.role<backward>} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  // CHECK: strata.matmul_grad %{{.*}}, %[[WL2]]
  return %l : tensor<f32>
}

// -----

// A narrowing cast of a value the backward does not read stays saved: its
// narrower copy is what the backward keeps.
strata.param @nw : tensor<8x8xbf16> init <normal, 1.0>

// CHECK-LABEL: func.func @narrowed
func.func @narrowed(%x: tensor<4x8xf32>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @nw : tensor<8x8xbf16>
  // CHECK: %[[E:.*]] = strata.scale
  %e = strata.scale %x {factor = 2.0 : f64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[EL:.*]] = strata.cast %[[E]] {strata.role = #strata.role<forward>}
  %el = strata.cast %e : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %m = strata.matmul %el, %w : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %mf = strata.cast %m : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %l = strata.cross_entropy %mf, %y : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  // CHECK-NOT: strata.cast %[[E]]
  // CHECK: strata.matmul_grad %[[EL]],
  return %l : tensor<f32>
}

// -----

// On a pipeline, only the reads on the cast's own stage are recast (a
// value of another stage's forward reaches the backward as the pipeline
// sends it); here the weight's copy is made on stage 0 and read by a
// product on stage 1, whose gradient (stage 1) keeps reading the copy.
strata.param @sw : tensor<8x8xf32> init <normal, 1.0>
strata.param @sv : tensor<8x8xf32> init <normal, 1.0>

// CHECK-LABEL: func.func @stages
func.func @stages(%x: tensor<4x8xbf16>, %y: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @sw {strata.stage = 0 : i64} : tensor<8x8xf32>
  %v = strata.get_param @sv {strata.stage = 1 : i64} : tensor<8x8xf32>
  // CHECK: %[[WL:.*]] = strata.cast %{{.*}} {strata.role = #strata.role<forward>, strata.stage = 0 : i64}
  %wl = strata.cast %w {strata.stage = 0 : i64} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  %a = strata.matmul %x, %wl {strata.stage = 0 : i64} : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: %[[VL:.*]] = strata.cast %[[V:.*]] {strata.role = #strata.role<forward>, strata.stage = 1 : i64}
  %vl = strata.cast %v {strata.stage = 1 : i64} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
  %b = strata.matmul %a, %wl {strata.stage = 1 : i64} : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %c = strata.matmul %b, %vl {strata.stage = 1 : i64} : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
  %cf = strata.cast %c {strata.stage = 1 : i64} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %l = strata.cross_entropy %cf, %y {strata.stage = 1 : i64} : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  // Stage 1's own weight is cast again on stage 1.
  // CHECK: %[[VL2:.*]] = strata.cast %[[V]] {strata.role = #strata.role<backward>, strata.stage = 1 : i64}
  // CHECK: strata.matmul_grad %{{.*}}, %[[VL2]], %{{.*}} {strata.role = #strata.role<backward>, strata.stage = 1 : i64}
  // Stage 0's copy, read on stage 1, stays as it is there.
  // CHECK: strata.matmul_grad %{{.*}}, %[[WL]], %{{.*}} {strata.role = #strata.role<backward>, strata.stage = 1 : i64}
  // and is cast again only for stage 0's own gradient.
  // CHECK: %[[WL2:.*]] = strata.cast %{{.*}} {strata.role = #strata.role<backward>, strata.stage = 0 : i64}
  // CHECK: strata.matmul_grad %{{.*}}, %[[WL2]], %{{.*}} {strata.role = #strata.role<backward>, strata.stage = 0 : i64}
  return %l : tensor<f32>
}
