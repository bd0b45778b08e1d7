// RUN: strata-opt %s -split-input-file --strata-gemm-epilogue-fusion | FileCheck %s
// RUN: strata-opt %s -split-input-file --strata-gemm-epilogue-fusion=target=cuda | FileCheck %s --check-prefix=CUDA

// Forward and backward of linear + gelu, as autodiff writes them.
// CHECK-LABEL: func @gelu
func.func @gelu(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) {
  // CHECK: %[[Y:.*]], %[[AUX:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2 {activation = #strata.activation<gelu_tanh>, strata.role = #strata.role<forward>, strata.stage = 1 : i64, with_aux}
  %0 = strata.matmul %x, %w {strata.role = #strata.role<forward>, strata.stage = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %2 = strata.gelu %1 {approximate = #strata.gelu<tanh>} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  // CHECK-NOT: strata.gelu_grad
  // CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = strata.fused_gemm_epilogue_grad %arg0, %arg1, %arg3, %[[AUX]] {activation = #strata.activation<gelu_tanh>, strata.role = #strata.role<backward>, strata.stage = 1 : i64}
  %dz = strata.gelu_grad %1, %dy {approximate = #strata.gelu<tanh>} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %db = strata.bias_add_grad %dz : (tensor<2x4x16xf32>) -> tensor<16xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dz {strata.role = #strata.role<backward>, strata.stage = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<8x16xf32>)
  // CHECK-NOT: strata.matmul
  // CHECK-NOT: strata.bias_add
  // CHECK: return %[[Y]], %[[DX]], %[[DW]], %[[DB]]
  return %2, %dx, %dw, %db : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>
}

// cuBLASLt's gelu aux output needs N % 8 == 0: 16 is fine.
// CUDA-LABEL: func @gelu
// CUDA: strata.fused_gemm_epilogue {{.*}}activation = #strata.activation<gelu_tanh>

// -----

// relu: the gradient reads the fused output.
// CHECK-LABEL: func @relu
func.func @relu(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) {
  // CHECK: %[[Y:.*]], %[[AUX:.*]] = strata.fused_gemm_epilogue {{.*}} {activation = #strata.activation<relu>, with_aux}
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = strata.relu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.fused_gemm_epilogue_grad %arg0, %arg1, %arg3, %[[AUX]] {activation = #strata.activation<relu>}
  %dz = strata.relu_grad %2, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %db = strata.bias_add_grad %dz : (tensor<4x16xf32>) -> tensor<16xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dz : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>)
  return %dx, %dw, %db : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>
}

// On CUDA, relu with an aux output needs N % 128 == 0: only matmul + bias
// fuse, and so only their gradients.
// CUDA-LABEL: func @relu
// CUDA: %[[PRE:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CUDA: %[[R:.*]] = strata.relu %[[PRE]]
// CUDA: %[[DZ:.*]] = strata.relu_grad %[[R]], %arg3
// CUDA: strata.fused_gemm_epilogue_grad %arg0, %arg1, %[[DZ]] :

// -----

// No activation: inference-style linear.
// CHECK-LABEL: func @linear
func.func @linear(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  // CHECK: %[[Y:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK-NEXT: return %[[Y]]
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}

// -----

// A weight in PyTorch's [out, in] layout, read transposed (imported
// nn.Linear): forward and backward fuse with transpose_weight.
// CHECK-LABEL: func @transposed_weight
func.func @transposed_weight(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %dy: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) {
  // CHECK: %[[Y:.*]], %[[AUX:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2 {activation = #strata.activation<relu>, transpose_weight, with_aux} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  %0 = strata.matmul %x, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = strata.relu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = strata.fused_gemm_epilogue_grad %arg0, %arg1, %arg3, %[[AUX]] {activation = #strata.activation<relu>, transpose_weight} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>)
  %dz = strata.relu_grad %2, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %db = strata.bias_add_grad %dz : (tensor<4x16xf32>) -> tensor<16xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dz {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<16x8xf32>)
  // CHECK: return %[[Y]], %[[DX]], %[[DW]], %[[DB]]
  return %2, %dx, %dw, %db : tensor<4x16xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32>
}

// -----

// What must not fuse, one guard each.
// CHECK-LABEL: func @guards
func.func @guards(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %xt: tensor<8x4xf32>, %b: tensor<16xf32>,
                  %w3: tensor<2x8x16xf32>, %x64: tensor<4x8xf64>, %w64: tensor<8x16xf64>, %b64: tensor<16xf64>)
    -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<4x16xf64>, tensor<4x16xf32>, tensor<4x16xf32>) {
  // CHECK-NOT: strata.fused_gemm_epilogue
  // A transposed input.
  %t0 = strata.matmul %xt, %w {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %t1 = strata.bias_add %t0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // A batched (rank-3) weight.
  %r0 = strata.matmul %x, %w3 : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %r1 = strata.bias_add %r0, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // f64 (Paddle skips it too).
  %d0 = strata.matmul %x64, %w64 : (tensor<4x8xf64>, tensor<8x16xf64>) -> tensor<4x16xf64>
  %d1 = strata.bias_add %d0, %b64 : (tensor<4x16xf64>, tensor<16xf64>) -> tensor<4x16xf64>
  // The product is used elsewhere too.
  %u0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %u1 = strata.bias_add %u0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: return
  return %t1, %u0, %r1, %d1, %u1, %u1 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x4x16xf32>, tensor<4x16xf64>, tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// The pre-activation is used by something else: GEMM + bias fuse, the
// activation stays.
// CHECK-LABEL: func @pre_used
func.func @pre_used(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  // CHECK: %[[P:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.relu %[[P]]
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = strata.relu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %2, %1 : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// A residual branch: the gradient of the sum (dz) is also the gradient of
// the skip connection, which the layer below reads. Without an activation
// the backward fuses all the same, and dz keeps its other reader.
// CHECK-LABEL: func @residual
func.func @residual(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>, %dz: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) {
  // CHECK: %[[Y:.*]] = strata.fused_gemm_epilogue %arg0, %arg1, %arg2
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = strata.add %x, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = strata.fused_gemm_epilogue_grad %arg0, %arg1, %arg3 :
  // CHECK-NOT: strata.bias_add_grad
  // CHECK-NOT: strata.matmul_grad
  %db = strata.bias_add_grad %dz : (tensor<4x8xf32>) -> tensor<8xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dz : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x8xf32>)
  // CHECK: %[[SKIP:.*]] = strata.add %arg3, %[[DX]]
  %dxs = strata.add %dz, %dx : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: return %{{.*}}, %[[SKIP]], %[[DW]], %[[DB]]
  return %y, %dxs, %dw, %db : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>
}

// -----

// With a fused activation, its gradient read by anything else would have
// to be computed twice: the backward stays unfused.
// CHECK-LABEL: func @act_grad_read_elsewhere
func.func @act_grad_read_elsewhere(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<4x16xf32>) {
  // CHECK: strata.fused_gemm_epilogue {{.*}}with_aux
  // CHECK-NOT: strata.fused_gemm_epilogue_grad
  // CHECK: strata.gelu_grad
  // CHECK-NEXT: strata.bias_add_grad
  // CHECK-NEXT: strata.matmul_grad
  // CHECK-NOT: strata.fused_gemm_epilogue_grad
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = strata.gelu %1 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %dz = strata.gelu_grad %1, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %db = strata.bias_add_grad %dz : (tensor<4x16xf32>) -> tensor<16xf32>
  %dx, %dw = strata.matmul_grad %x, %w, %dz : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>)
  return %2, %dx, %dw, %db, %dz : tensor<4x16xf32>, tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<4x16xf32>
}
