// RUN: strata-opt %s -split-input-file --strata-gemm-padding | FileCheck %s
// The CPU target runs any width as fast: nothing is padded.
// RUN: strata-opt %s -split-input-file --strata-gemm-padding=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: not strata-opt %s -split-input-file --strata-gemm-padding=target=tpu 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: strata-gemm-padding: unknown target 'tpu' (cpu, cuda)

// An LM head on GPT-2's vocabulary (50257 columns, odd): the tied
// embedding [V, H] read transposed is padded by 7 rows to 50264, the
// product then has 50264 columns, and the loss, its only reader, reads
// them with the first 50257 as its classes (no slice). The matmul's
// attributes stay; the pad carries them too.
// CHECK-LABEL: func @lm_head
// CHECK: %[[W:.*]] = strata.pad %arg1 {dim = 0 : i64, high = 7 : i64, low = 0 : i64, strata.layer = "head"} : (tensor<50257x768xf32>) -> tensor<50264x768xf32>
// CHECK-NEXT: %[[P:.*]] = strata.matmul %arg0, %[[W]] {strata.layer = "head", transpose_rhs} : (tensor<4x64x768xf32>, tensor<50264x768xf32>) -> tensor<4x64x50264xf32>
// CHECK-NEXT: strata.cross_entropy %[[P]], %arg2 {classes = 50257 : i64} : (tensor<4x64x50264xf32>, tensor<4x64xi32>) -> tensor<f32>
// CHECK-NOT: strata.slice
// CPU-LABEL: func @lm_head
// CPU-NOT: strata.pad
// CPU: strata.matmul %arg0, %arg1 {strata.layer = "head", transpose_rhs} : (tensor<4x64x768xf32>, tensor<50257x768xf32>) -> tensor<4x64x50257xf32>
func.func @lm_head(%x: tensor<4x64x768xf32>, %wte: tensor<50257x768xf32>, %labels: tensor<4x64xi32>) -> tensor<f32> {
  %logits = strata.matmul %x, %wte {strata.layer = "head", transpose_rhs} : (tensor<4x64x768xf32>, tensor<50257x768xf32>) -> tensor<4x64x50257xf32>
  %loss = strata.cross_entropy %logits, %labels : (tensor<4x64x50257xf32>, tensor<4x64xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// An imported model's loss reads the logits through a reshape that keeps
// rows whole (logits.view(-1, V)): the reshape takes the padded rows.
// CHECK-LABEL: func @lm_head_viewed
// CHECK: %[[P:.*]] = strata.matmul {{.*}} -> tensor<4x64x50264xf32>
// CHECK-NEXT: %[[V:.*]] = strata.reshape %[[P]] : (tensor<4x64x50264xf32>) -> tensor<256x50264xf32>
// CHECK-NEXT: strata.cross_entropy %[[V]], %arg2 {classes = 50257 : i64} : (tensor<256x50264xf32>, tensor<256xi32>) -> tensor<f32>
// CHECK-NOT: strata.slice
func.func @lm_head_viewed(%x: tensor<4x64x768xf32>, %wte: tensor<50257x768xf32>, %labels: tensor<256xi32>) -> tensor<f32> {
  %logits = strata.matmul %x, %wte {transpose_rhs} : (tensor<4x64x768xf32>, tensor<50257x768xf32>) -> tensor<4x64x50257xf32>
  %rows = strata.reshape %logits : (tensor<4x64x50257xf32>) -> tensor<256x50257xf32>
  %loss = strata.cross_entropy %rows, %labels : (tensor<256x50257xf32>, tensor<256xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A reshape that splits the rows (the last dimension changes): the slice
// stays.
// CHECK-LABEL: func @lm_head_regrouped
// CHECK: strata.slice
func.func @lm_head_regrouped(%x: tensor<4x64x768xf32>, %wte: tensor<50257x768xf32>, %labels: tensor<4x64x29xi32>) -> tensor<f32> {
  %logits = strata.matmul %x, %wte {transpose_rhs} : (tensor<4x64x768xf32>, tensor<50257x768xf32>) -> tensor<4x64x50257xf32>
  %rows = strata.reshape %logits : (tensor<4x64x50257xf32>) -> tensor<4x64x29x1733xf32>
  %loss = strata.cross_entropy %rows, %labels : (tensor<4x64x29x1733xf32>, tensor<4x64x29xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Logits that the loss and another op read: the slice stays, and the loss
// reads the real columns.
// CHECK-LABEL: func @lm_head_and_more
// CHECK: %[[L:.*]] = strata.slice {{.*}} -> tensor<4x64x50257xf32>
// CHECK-NEXT: strata.cross_entropy %[[L]], %arg2 : (tensor<4x64x50257xf32>
func.func @lm_head_and_more(%x: tensor<4x64x768xf32>, %wte: tensor<50257x768xf32>, %labels: tensor<4x64xi32>) -> (tensor<f32>, tensor<4x64x50257xf32>) {
  %logits = strata.matmul %x, %wte {transpose_rhs} : (tensor<4x64x768xf32>, tensor<50257x768xf32>) -> tensor<4x64x50257xf32>
  %loss = strata.cross_entropy %logits, %labels : (tensor<4x64x50257xf32>, tensor<4x64xi32>) -> tensor<f32>
  return %loss, %logits : tensor<f32>, tensor<4x64x50257xf32>
}

// -----

// A weight [K, N] (not transposed) is padded along its columns.
// CHECK-LABEL: func @columns
// CHECK: strata.pad %arg1 {dim = 1 : i64, high = 3 : i64, low = 0 : i64} : (tensor<512x1021xf32>) -> tensor<512x1024xf32>
// CHECK: strata.slice {{.*}} {dim = 1 : i64, size = 1021 : i64, start = 0 : i64} : (tensor<256x1024xf32>) -> tensor<256x1021xf32>
func.func @columns(%x: tensor<256x512xf32>, %w: tensor<512x1021xf32>) -> tensor<256x1021xf32> {
  %y = strata.matmul %x, %w : (tensor<256x512xf32>, tensor<512x1021xf32>) -> tensor<256x1021xf32>
  return %y : tensor<256x1021xf32>
}

// -----

// Left alone: a width that is a multiple of 8; too few summed terms (K <
// 256); too small a product (< 2^24 multiply-adds); a result a bias_add
// reads (the GEMM epilogue fuses the pair); a transposed left operand; a
// batched (rank-3) right operand.
// CHECK-LABEL: func @left_alone
// CHECK-NOT: strata.pad
// CHECK-NOT: strata.slice
// CHECK: return
func.func @left_alone(%x: tensor<256x512xf32>, %w8: tensor<512x1024xf32>, %xs: tensor<256x128xf32>, %ws: tensor<128x1021xf32>, %xt: tensor<16x512xf32>, %wt: tensor<512x1021xf32>, %b: tensor<1021xf32>, %xl: tensor<512x256xf32>, %xb: tensor<4x256x512xf32>, %wb: tensor<4x512x1021xf32>) -> (tensor<256x1024xf32>, tensor<256x1021xf32>, tensor<16x1021xf32>, tensor<256x1021xf32>, tensor<256x1021xf32>, tensor<4x256x1021xf32>) {
  %a = strata.matmul %x, %w8 : (tensor<256x512xf32>, tensor<512x1024xf32>) -> tensor<256x1024xf32>
  %c = strata.matmul %xs, %ws : (tensor<256x128xf32>, tensor<128x1021xf32>) -> tensor<256x1021xf32>
  %d = strata.matmul %xt, %wt : (tensor<16x512xf32>, tensor<512x1021xf32>) -> tensor<16x1021xf32>
  %e0 = strata.matmul %x, %wt : (tensor<256x512xf32>, tensor<512x1021xf32>) -> tensor<256x1021xf32>
  %e = strata.bias_add %e0, %b : (tensor<256x1021xf32>, tensor<1021xf32>) -> tensor<256x1021xf32>
  %f = strata.matmul %xl, %wt {transpose_lhs} : (tensor<512x256xf32>, tensor<512x1021xf32>) -> tensor<256x1021xf32>
  %g = strata.matmul %xb, %wb : (tensor<4x256x512xf32>, tensor<4x512x1021xf32>) -> tensor<4x256x1021xf32>
  return %a, %c, %d, %e, %f, %g : tensor<256x1024xf32>, tensor<256x1021xf32>, tensor<16x1021xf32>, tensor<256x1021xf32>, tensor<256x1021xf32>, tensor<4x256x1021xf32>
}
