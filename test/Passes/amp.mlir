// RUN: strata-opt %s -split-input-file --strata-amp='dtype=bfloat16' | FileCheck %s
// RUN: strata-opt %s -split-input-file --strata-amp='dtype=float16' | FileCheck %s --check-prefix=F16
// RUN: strata-opt %s -split-input-file --strata-amp='dtype=bfloat16 custom-white-list=softmax custom-black-list=matmul' | FileCheck %s --check-prefix=CUSTOM
// RUN: strata-opt %s -split-input-file --strata-amp='dtype=bfloat16' --strata-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: strata-opt %s -split-input-file --strata-amp='dtype=bfloat16 level=o2' | FileCheck %s --check-prefix=O2

// A block: Linear + GELU, a residual add, layer norm, attention-style
// softmax, the loss. Parameters stay f32 and are cast where a low-precision
// op reads them; the step still returns an f32 loss.
strata.param @w : tensor<8x8xf32> init <normal, 1.0>
strata.param @b : tensor<8xf32> init <zeros>
strata.param @g : tensor<8xf32> init <ones>
strata.param @e : tensor<8xf32> init <zeros>

// CHECK-LABEL: func @train_step
// CHECK-SAME: -> tensor<f32>
// CHECK: %[[W:.*]] = strata.get_param @w : tensor<8x8xf32>
// CHECK: %[[B:.*]] = strata.get_param @b : tensor<8xf32>
// The white-list GEMM reads both operands in bf16, one cast each, carrying
// its reader's layer.
// CHECK: %[[XL:.*]] = strata.cast %arg0 {strata.layer = "h0"} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK: %[[WL:.*]] = strata.cast %[[W]] {strata.layer = "h0"} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
// CHECK: %[[MM:.*]] = strata.matmul %[[XL]], %[[WL]] {strata.layer = "h0"} : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
// bias_add follows its input: the bias is cast.
// CHECK: %[[BL:.*]] = strata.cast %[[B]]
// CHECK: %[[Y:.*]] = strata.bias_add %[[MM]], %[[BL]] {{.*}} -> tensor<4x8xbf16>
// Gray ops with low inputs stay low.
// CHECK: %[[G:.*]] = strata.gelu %[[Y]] {{.*}} -> tensor<4x8xbf16>
// A mixed add (f32 residual + bf16) computes in f32.
// CHECK: %[[GW:.*]] = strata.cast %[[G]] {strata.layer = "h0"} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK: %[[R:.*]] = strata.add %arg0, %[[GW]] {{.*}} -> tensor<4x8xf32>
// CHECK: strata.layer_norm %[[R]], {{.*}} -> tensor<4x8xf32>
// The second GEMM reads the normalised activations and the same weight cast.
// CHECK: strata.matmul {{.*}} -> tensor<4x8xbf16>
// Black-list softmax and cross-entropy widen their input.
// CHECK: %[[SW:.*]] = strata.cast {{.*}} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK: %[[S:.*]] = strata.softmax %[[SW]] {{.*}} -> tensor<4x8xf32>
// CHECK: strata.cross_entropy %[[S]], %arg1 {{.*}} -> tensor<f32>
// CHECK-NOT: strata.cast
// CHECK: return

// F16-LABEL: func @train_step
// F16: strata.matmul {{.*}} -> tensor<4x8xf16>

// A custom white entry overrides the black list and the other way round.
// CUSTOM-LABEL: func @train_step
// CUSTOM: strata.matmul {{.*}} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
// CUSTOM: strata.softmax {{.*}} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>

// The backward runs in the forward's precision: the GEMM's gradient in
// bf16, the cast's gradient back to f32, so the weight's gradient is f32.
// GRAD-LABEL: func @train_step
// GRAD: strata.matmul_grad {{.*}} : (tensor<4x8xbf16>, tensor<8x8xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8x8xbf16>)
// GRAD: strata.cast {{.*}} : (tensor<8x8xbf16>) -> tensor<8x8xf32>
// GRAD: return {{.*}} : tensor<f32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
func.func @train_step(%x: tensor<4x8xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8x8xf32>
  %b = strata.get_param @b : tensor<8xf32>
  %g = strata.get_param @g : tensor<8xf32>
  %e = strata.get_param @e : tensor<8xf32>
  %0 = strata.matmul %x, %w {strata.layer = "h0"} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = strata.bias_add %0, %b {strata.layer = "h0"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = strata.gelu %1 {approximate = #strata.gelu<tanh>, strata.layer = "h0"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = strata.add %x, %2 {strata.layer = "h0"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = strata.layer_norm %3, %g, %e {epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %5 = strata.matmul %4, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %6 = strata.softmax %5 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %loss = strata.cross_entropy %6, %labels : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Cross-entropy computes in f32 from any float type and returns an f32
// loss: the low-precision logits of the LM head's GEMM reach it without a
// widening cast, and its gradient is bf16, ready for the GEMM's gradient.
// CHECK-LABEL: func @lm_head
// CHECK: %[[LOGITS:.*]] = strata.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: %[[LOSS:.*]] = strata.cross_entropy %[[LOGITS]], %arg1 : (tensor<4x8xbf16>, tensor<4xi32>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// GRAD-LABEL: func @lm_head
// GRAD: %[[LOGITS:.*]] = strata.matmul {{.*}} -> tensor<4x8xbf16>
// GRAD: %[[DL:.*]] = strata.cross_entropy_grad %[[LOGITS]], %arg1, %{{.*}} : (tensor<4x8xbf16>, tensor<4xi32>, tensor<f32>) -> tensor<4x8xbf16>
// GRAD: strata.matmul_grad %{{.*}}, %{{.*}}, %[[DL]] {{.*}}: (tensor<4x8xbf16>, tensor<8x8xbf16>, tensor<4x8xbf16>)
strata.param @w : tensor<8x8xf32> init <normal, 1.0>
func.func @lm_head(%x: tensor<4x8xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8x8xf32>
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %loss = strata.cross_entropy %0, %labels : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A step whose last op computes in the low type still returns the f32 it
// declares.
// CHECK-LABEL: func @train_step
// CHECK: %[[M:.*]] = strata.matmul {{.*}} -> tensor<1x1xbf16>
// CHECK: %[[R:.*]] = strata.reshape %[[M]] : (tensor<1x1xbf16>) -> tensor<bf16>
// CHECK: %[[L:.*]] = strata.cast %[[R]] : (tensor<bf16>) -> tensor<f32>
// CHECK: return %[[L]] : tensor<f32>
strata.param @w : tensor<2x1xf32> init <normal, 1.0>
func.func @train_step(%x: tensor<1x2xf32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<2x1xf32>
  %0 = strata.matmul %x, %w : (tensor<1x2xf32>, tensor<2x1xf32>) -> tensor<1x1xf32>
  %1 = strata.reshape %0 : (tensor<1x1xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Fused attention is a white-list op ([S, H, D] = [2, 4, 8]): q, k and v
// cast to the low type, the output in it, the log-sum-exp ([H, S]) in f32
// (the kernel's softmax is f32 inside).
// CHECK-LABEL: func @train_step
// CHECK: %[[KP:.*]] = strata.get_param @k
// CHECK: %[[Q:.*]] = strata.cast %arg0 : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[K:.*]] = strata.cast %[[KP]] : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[V:.*]] = strata.cast %arg1 : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[O:.*]], %{{.*}} = strata.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f64} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<4x2xf32>)
// CHECK: strata.reduce_sum
// GRAD-LABEL: func @train_step
// GRAD: strata.attention_grad {{.*}} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<4x2xf32>, tensor<2x4x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>)
strata.param @k : tensor<2x4x8xf32> init <normal, 1.0>
func.func @train_step(%q: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<f32> {
  %k = strata.get_param @k : tensor<2x4x8xf32>
  %o, %lse = strata.attention %q, %k, %v {causal, scale = 0.5 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<4x2xf32>)
  %s = strata.reduce_sum %o {dims = array<i64: 0, 1, 2>} : (tensor<2x4x8xf32>) -> tensor<f32>
  return %s : tensor<f32>
}


// -----

// RMS norm is on the black list at level o1 (f32, as layer norm) and
// computes in the low type at level o2.
strata.param @w : tensor<8x8xf32> init <normal, 1.0>
strata.param @g : tensor<8xf32> init <ones>

// CHECK-LABEL: func @rms_norm
// CHECK: %[[MM:.*]] = strata.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK-NEXT: %[[MW:.*]] = strata.cast %[[MM]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: strata.rms_norm %[[MW]], %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// O2-LABEL: func @rms_norm
// O2: strata.rms_norm {{.*}} : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
func.func @rms_norm(%x: tensor<4x8xf32>, %labels: tensor<4xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<8x8xf32>
  %g = strata.get_param @g : tensor<8xf32>
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = strata.rms_norm %0, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %loss = strata.cross_entropy %1, %labels : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
