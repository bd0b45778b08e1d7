// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime | FileCheck %s --check-prefixes=CHECK,AUX,BWD,BWDNEG,CONST,DEFER,P2P,GROUP,OVERLAP
// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime | FileCheck %s --check-prefix=COLL
// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime | FileCheck %s --check-prefix=PACK
// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime | FileCheck %s --check-prefix=BIG
// The target sets the buffer alignment (256 bytes for cuda, 64 for cpu):
// the same plan's buffers at 0, 256, 512, ... instead of 0, 64, 128, ...
// RUN: strata-opt %s -split-input-file --strata-lower-to-runtime=target=cuda | FileCheck %s --check-prefix=CUDA
// CUDA: module attributes {strata.rt.abi_version = 15 : i64, strata.rt.arena_bytes = 1280 : i64
// CUDA: llvm.getelementptr %arg1[256]
// An explicit alignment wins over the target's.
// RUN: strata-opt %s -split-input-file "--strata-lower-to-runtime=target=cuda alignment=64" | FileCheck %s --check-prefix=ALIGN64
// ALIGN64: module attributes {strata.rt.abi_version = 15 : i64, strata.rt.arena_bytes = 320 : i64
// RUN: not strata-opt %s -split-input-file --strata-lower-to-runtime=target=tpu 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: strata-lower-to-runtime: unknown target 'tpu' (cpu, cuda)

// The step becomes strata_step(ctx, arena, persistent, inputs, outputs):
// one runtime call per op, intermediate values at their planned arena
// offsets, parameters and state through the persistent table.

// The module records the runtime ABI version it was lowered for, as an
// attribute and as data for a host that links the object file; the step
// asks the runtime to accept it before anything else and returns at once
// if refused.
// CHECK: module attributes {strata.rt.abi_version = 15 : i64, strata.rt.arena_bytes = 320 : i64, strata.rt.persistent = ["w", "b", "v"], strata.rt.site_roles = [{{.*}}], strata.rt.sites = ["{{.*}}lower-to-runtime.mlir:{{[0-9]+}}:{{[0-9]+}}: strata.get_param",
// CHECK-DAG: llvm.mlir.global internal constant @{{.*}}(dense<[3, 2, 1, 3, 0]> : tensor<5xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @{{.*}}(dense<[3, 2, 1, 0]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global external constant @strata_step_abi_version(dense<15> : tensor<1xi64>)
// Every tensor is a pointer followed by its element type (0: f32).
// CHECK-DAG: llvm.func @strata_rt_gemm(!llvm.ptr, i64, i64, i64, i64, i64, !llvm.ptr, i64, i64, i64, !llvm.ptr, i64, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64, i64)
// CHECK-LABEL: llvm.func @strata_step(
// CHECK-SAME: %[[CTX:[a-z0-9]+]]: !llvm.ptr, %[[ARENA:[a-z0-9]+]]: !llvm.ptr, %[[RES:[a-z0-9]+]]: !llvm.ptr, %[[IN:[a-z0-9]+]]: !llvm.ptr, %[[OUT:[a-z0-9]+]]: !llvm.ptr)
// CHECK-NEXT: %[[V:.*]] = llvm.mlir.constant(15 : i64)
// CHECK-NEXT: %[[REFUSED:.*]] = llvm.call @strata_rt_step_begin(%[[CTX]], %[[V]])
// CHECK-NEXT: %[[ZERO:.*]] = llvm.mlir.constant(0 : i64)
// CHECK-NEXT: %[[OK:.*]] = llvm.icmp "eq" %[[REFUSED]], %[[ZERO]]
// CHECK-NEXT: llvm.cond_br %[[OK]], ^[[BODY:bb[0-9]+]], ^[[EXIT:bb[0-9]+]]
// CHECK-NEXT: ^[[BODY]]:
// CHECK: %[[XS:.*]] = llvm.getelementptr %[[IN]][0]
// CHECK: %[[X:.*]] = llvm.load %[[XS]]
// CHECK: %[[LS:.*]] = llvm.getelementptr %[[IN]][1]
// CHECK: %[[LABELS:.*]] = llvm.load %[[LS]]
// CHECK: %[[WS:.*]] = llvm.getelementptr %[[RES]][0]
// CHECK: %[[W:.*]] = llvm.load %[[WS]]
// CHECK: %[[BS:.*]] = llvm.getelementptr %[[RES]][1]
// CHECK: %[[B:.*]] = llvm.load %[[BS]]
// The fused GEMM is one call with the bias and the ReLU epilogue (act 1).
// Arguments: site 2, batch 1, M 2, N 3, K 4, no batch strides or
// transposes, activation 1 (ReLU), no accumulation.
// CHECK: %[[Y:.*]] = llvm.getelementptr %[[ARENA]][0]
// CHECK-NEXT: %[[F32:.*]] = llvm.mlir.constant(0 : i64)
// CHECK-NEXT: llvm.mlir.constant(2 : i64)
// CHECK-NEXT: llvm.mlir.constant(1 : i64)
// CHECK-NEXT: llvm.mlir.constant(2 : i64)
// CHECK-NEXT: llvm.mlir.constant(3 : i64)
// CHECK-NEXT: llvm.mlir.constant(4 : i64)
// CHECK-COUNT-4: llvm.mlir.constant(0 : i64)
// CHECK-NEXT: %[[RELU:.*]] = llvm.mlir.constant(1 : i64)
// CHECK-NEXT: llvm.mlir.constant(0 : i64)
// CHECK: llvm.call @strata_rt_gemm(%[[CTX]], {{.*}}, %[[X]], %[[F32]], {{.*}}, %[[W]], %[[F32]], {{.*}}, %[[Y]], %[[F32]], %[[B]], %[[F32]], %[[RELU]], {{.*}})
// CHECK: %[[T:.*]] = llvm.getelementptr %[[ARENA]][64]
// CHECK: llvm.call @strata_rt_strided_copy(%[[CTX]], {{.*}}, %[[T]], %[[Y]],
// CHECK: llvm.call @strata_rt_reduce(%[[CTX]], {{.*}}, %[[T]],
// CHECK: llvm.call @strata_rt_cross_entropy(%[[CTX]], {{.*}}, %[[Y]], %{{.*}}, %[[LABELS]],
// CHECK: llvm.call @strata_rt_fill(
// The momentum update is the last reader of @w and @v: it writes them in
// place (new param -> @w's buffer, new velocity -> @v's).
// CHECK: %[[VS:.*]] = llvm.getelementptr %[[RES]][2]
// CHECK: %[[V:.*]] = llvm.load %[[VS]]
// CHECK: %[[NWS:.*]] = llvm.getelementptr %[[RES]][0]
// CHECK: %[[NW:.*]] = llvm.load %[[NWS]]
// CHECK: %[[NVS:.*]] = llvm.getelementptr %[[RES]][2]
// CHECK: %[[NV:.*]] = llvm.load %[[NVS]]
// CHECK: llvm.call @strata_rt_momentum(%[[CTX]], %{{.*}}, %[[NW]], %{{.*}}, %[[NV]], %{{.*}}, %[[W]], %{{.*}}, %[[W]], %{{.*}}, %[[V]],
// CHECK: llvm.call @strata_rt_binary(
// @b is read by the add: its new value is copied when the step ends, and
// the loss goes to the first output.
// CHECK: %[[BS2:.*]] = llvm.getelementptr %[[RES]][1]
// CHECK: %[[B2:.*]] = llvm.load %[[BS2]]
// CHECK: llvm.call @strata_rt_copy(%[[CTX]], %{{.*}}, %[[B2]],
// CHECK: %[[OS:.*]] = llvm.getelementptr %[[OUT]][0]
// CHECK: %[[O:.*]] = llvm.load %[[OS]]
// CHECK: llvm.call @strata_rt_copy(%[[CTX]], %{{.*}}, %[[O]],
// CHECK-NEXT: llvm.call @strata_rt_step_end(%[[CTX]])
// CHECK-NEXT: llvm.return
// CHECK-NEXT: ^[[EXIT]]:
// CHECK-NEXT: llvm.return
// No Strata op is left.
// CHECK-NOT: strata.

strata.param @w : tensor<4x3xf32> init <normal, 1.0>
strata.param @b : tensor<3xf32> init <zeros>
strata.state @v : tensor<4x3xf32> init <zeros> of @w

func.func @train_step(%x: tensor<2x4xf32>, %labels: tensor<2xi32>) -> tensor<f32> {
  %w = strata.get_param @w : tensor<4x3xf32>
  %b = strata.get_param @b : tensor<3xf32>
  %y = strata.fused_gemm_epilogue %x, %w, %b {activation = #strata.activation<relu>} : (tensor<2x4xf32>, tensor<4x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %t = strata.transpose %y {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %s = strata.reduce_sum %t {dims = array<i64: 1>} : (tensor<3x2xf32>) -> tensor<3xf32>
  %l = strata.cross_entropy %y, %labels : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<f32>
  %lr = arith.constant dense<0.5> : tensor<f32>
  %v = strata.get_state @v : tensor<4x3xf32>
  %nw, %nv = strata.momentum_update %w, %w, %v, %lr : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<f32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  strata.assign @w, %nw : tensor<4x3xf32>
  strata.assign @v, %nv : tensor<4x3xf32>
  %nb = strata.add %b, %s : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  strata.assign @b, %nb : tensor<3xf32>
  return %l : tensor<f32>
}

// -----
// A fused GEMM that keeps its pre-activation for the gradient is one call:
// the epilogue writes both (cuBLASLt's GELU_AUX_BIAS on the CUDA runtime).
// AUX-LABEL: module attributes
// AUX: llvm.func @strata_step(
// AUX: llvm.call @strata_rt_gemm_aux(%{{[a-z0-9]+}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, i64, i64, i64, !llvm.ptr, i64, i64, !llvm.ptr, i64, i64, !llvm.ptr, i64, !llvm.ptr, i64, !llvm.ptr, i64, i64) -> ()
// AUX-NOT: @strata_rt_unary(
func.func @train_step(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %y, %aux = strata.fused_gemm_epilogue %x, %w, %b {activation = #strata.activation<gelu_tanh>, with_aux} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  %s = strata.add %y, %aux : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}

// -----
// The backward epilogues. Layer 2's gradient (no activation) feeds layer 1's
// activation gradient: layer 2's input-gradient GEMM applies it
// (strata_rt_gemm_dact with GELU's code 2 and layer 1's pre-activation;
// cuBLASLt's DGELU on the CUDA runtime) and layer 1 reads the result as it
// is. Each weight gradient's GEMM writes the bias gradient too
// (strata_rt_gemm_bgrad: of B = dz for x^T dz, operand 1; BGRADA), so no
// activation-gradient or reduction kernel is left.
// BWD-LABEL: module attributes
// BWD: llvm.func @strata_step(
// BWD: llvm.call @strata_rt_gemm_aux(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[AUX:[0-9]+]],
// BWD-NOT: @strata_rt_act_grad(
// BWD: %[[GELU:[0-9]+]] = llvm.mlir.constant(2 : i64)
// BWD-NEXT: llvm.call @strata_rt_gemm_dact(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[DH:[0-9]+]], %{{[0-9]+}}, %[[AUX]], %{{[0-9]+}}, %[[GELU]])
// BWD-NOT: @strata_rt_act_grad(
// BWD-NOT: @strata_rt_reduce(
// BWD: llvm.call @strata_rt_gemm_bgrad(
// BWD-NOT: @strata_rt_act_grad(
// BWD-NOT: @strata_rt_reduce(
// BWD: llvm.call @strata_rt_gemm(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[DH]],
// BWD-NOT: @strata_rt_act_grad(
// BWD-NOT: @strata_rt_reduce(
// BWD: llvm.call @strata_rt_gemm_bgrad(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[DH]],
// BWD-NOT: @strata_rt_act_grad(
// BWD-NOT: @strata_rt_reduce(
func.func @train_step(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>, %w2: tensor<16x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<8xf32>) {
  %h, %aux = strata.fused_gemm_epilogue %x, %w1, %b1 {activation = #strata.activation<gelu_tanh>, with_aux} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  %dh, %dw2, %db2 = strata.fused_gemm_epilogue_grad %h, %w2, %dy : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32>)
  %dx, %dw1, %db1 = strata.fused_gemm_epilogue_grad %x, %w1, %dh, %aux {activation = #strata.activation<gelu_tanh>} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return %dx, %dw1, %db1, %dw2, %db2 : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<8xf32>
}

// -----
// Not fused into the GEMM: the input gradient has another reader, so layer 1
// applies its activation gradient itself, in place of its pre-activation.
// BWDNEG-LABEL: module attributes
// BWDNEG: llvm.func @strata_step(
// BWDNEG-NOT: @strata_rt_gemm_dact(
// BWDNEG: llvm.call @strata_rt_gemm(
// BWDNEG-NOT: @strata_rt_gemm_dact(
// BWDNEG: llvm.call @strata_rt_gemm_bgrad(
// BWDNEG-NOT: @strata_rt_gemm_dact(
// BWDNEG: llvm.call @strata_rt_act_grad(
// BWDNEG-NOT: @strata_rt_gemm_dact(
// BWDNEG: llvm.call @strata_rt_gemm(
// BWDNEG-NOT: @strata_rt_gemm_dact(
// BWDNEG: llvm.call @strata_rt_gemm_bgrad(
func.func @train_step(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>, %w2: tensor<8x16xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8xf32>, tensor<4x16xf32>) {
  %h, %aux = strata.fused_gemm_epilogue %x, %w1, %b1 {activation = #strata.activation<gelu_tanh>, with_aux} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  %dh, %dw2, %db2 = strata.fused_gemm_epilogue_grad %h, %w2, %dy {transpose_weight} : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>)
  %dx, %dw1, %db1 = strata.fused_gemm_epilogue_grad %x, %w1, %dh, %aux {activation = #strata.activation<gelu_tanh>} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return %dx, %dw1, %db1, %dw2, %db2, %dh : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8xf32>, tensor<4x16xf32>
}

// -----
// A non-splat constant is a global copied into its buffer.
// CONST-LABEL: module attributes
// CONST: llvm.mlir.global internal constant @__strata_const{{[0-9]+}}(dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32>)
// CONST: llvm.func @strata_step(
// CONST: %[[G:.*]] = llvm.mlir.addressof @__strata_const
// CONST: llvm.call @strata_rt_copy(%{{.*}}, %{{.*}}, %{{.*}}, %[[G]],
func.func @train_step() -> tensor<2xf32> {
  %c = arith.constant dense<[0.0, 1.0]> : tensor<2xf32>
  return %c : tensor<2xf32>
}

// -----
// @b is read after its assign (%b is a view of its buffer): the copy waits
// for the end of the step.
// DEFER-LABEL: strata.rt.persistent = ["b"]
// DEFER: llvm.func @strata_step(%[[CTX:[a-z0-9]+]]: !llvm.ptr, %{{[a-z0-9]+}}: !llvm.ptr, %[[RES:[a-z0-9]+]]: !llvm.ptr
// DEFER: llvm.call @strata_rt_unary(
// DEFER: llvm.call @strata_rt_binary(
// DEFER: %[[BS:.*]] = llvm.getelementptr %[[RES]][0]
// DEFER: %[[B:.*]] = llvm.load %[[BS]]
// DEFER: llvm.call @strata_rt_copy(%[[CTX]], %{{.*}}, %[[B]],
// DEFER: llvm.return
strata.param @b : tensor<3xf32> init <zeros>
func.func @train_step() -> tensor<3xf32> {
  %b = strata.get_param @b : tensor<3xf32>
  %n = strata.scale %b {factor = 2.0 : f64} : (tensor<3xf32>) -> tensor<3xf32>
  strata.assign @b, %n : tensor<3xf32>
  %r = strata.add %b, %n : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----
// Point to point: the runtime gets the buffer, its element type (0: f32),
// its length, the peer's index in the group and the group's rank lists.
// P2P-LABEL: module attributes
// P2P: llvm.mlir.global internal constant @[[GROUP:.*]](dense<[2, 2, 0, 2, 2, 1, 3]> : tensor<7xi64>)
// The step first makes its communicators: one entry (peer 1 of @pp).
// P2P: llvm.mlir.global internal constant @[[PLAN:.*]](dense<[1, 1, 2, 2, 0, 2, 2, 1, 3]> : tensor<9xi64>)
// P2P: llvm.func @strata_step(
// P2P: llvm.call @strata_rt_step_begin
// P2P: %[[P:.*]] = llvm.mlir.addressof @[[PLAN]]
// P2P-NEXT: llvm.call @strata_rt_connect(%arg0, %{{.*}}, %[[P]])
// P2P: %[[G1:.*]] = llvm.mlir.addressof @[[GROUP]]
// P2P: llvm.call @strata_rt_send(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[G1]]) : (!llvm.ptr, i64, !llvm.ptr, i64, i64, i64, !llvm.ptr) -> ()
// P2P: llvm.call @strata_rt_recv(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, !llvm.ptr, i64, i64, i64, !llvm.ptr) -> ()
strata.comm_group @pp ranks [array<i64: 0, 2>, array<i64: 1, 3>]
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %t = strata.init_token : !strata.token
  %t1 = strata.send %x, %t {group = @pp, peer = 1} : (tensor<4xf32>, !strata.token) -> !strata.token
  %y, %t2 = strata.recv %t1 {group = @pp, peer = 1} : (!strata.token) -> (tensor<4xf32>, !strata.token)
  return %y : tensor<4xf32>
}

// -----
// Collectives: one entry point with the collective's code (2: reduce_scatter,
// 3: all_gather), started where the op stands and completed right before
// the first op that reads the result.
// COLL-LABEL: llvm.mlir.global internal constant @{{.*}}(dense<[1, 2, 0, 1]>
// The communicators first: both collectives use @dp, one entry (peer -1: a
// collective), at the first collective's site (1).
// COLL: llvm.mlir.global internal constant @[[CPLAN:.*]](dense<[1, -1, 1, 2, 0, 1]>
// COLL: llvm.call @strata_rt_step_begin
// COLL: %[[CSITE:.*]] = llvm.mlir.constant(1 : i64) : i64
// COLL-NEXT: %[[CP:.*]] = llvm.mlir.addressof @[[CPLAN]]
// COLL-NEXT: llvm.call @strata_rt_connect(%arg0, %[[CSITE]], %[[CP]])
// COLL: %[[RS:.*]] = llvm.mlir.constant(2 : i64) : i64
// COLL: llvm.call @strata_rt_collective(%arg0, %{{.*}}, %[[RS]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, i64, !llvm.ptr, !llvm.ptr, i64, i64, i64, i64, !llvm.ptr) -> ()
// COLL-NOT: llvm.call
// COLL: llvm.call @strata_rt_wait
// COLL-NOT: llvm.call
// COLL: llvm.call @strata_rt_unary
// COLL: %[[SITE:.*]] = llvm.mlir.constant(3 : i64) : i64
// COLL-NEXT: %[[AG:.*]] = llvm.mlir.constant(3 : i64) : i64
// COLL-NOT: llvm.call
// COLL: llvm.call @strata_rt_collective(%arg0, %[[SITE]], %[[AG]],
// COLL-NOT: llvm.call
// COLL: llvm.call @strata_rt_wait
// COLL-NOT: llvm.call
// COLL: llvm.call @strata_rt_copy
strata.comm_group @dp ranks [array<i64: 0, 1>]
func.func @train_step(%x: tensor<8x2xf32>) -> tensor<8x2xf32> {
  %t = strata.init_token : !strata.token
  %s, %t1 = strata.reduce_scatter %x, %t {group = @dp, kind = #strata.reduce<mean>} : (tensor<8x2xf32>, !strata.token) -> (tensor<4x2xf32>, !strata.token)
  %d = strata.scale %s {factor = 2.0 : f64} : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %g, %t2 = strata.all_gather %d, %t1 {group = @dp} : (tensor<4x2xf32>, !strata.token) -> (tensor<8x2xf32>, !strata.token)
  return %g : tensor<8x2xf32>
}

// -----
// A concat copies each input's rows into its columns of the result:
// rows = 2 (the dimensions before `dim`), 3 of 5 elements per row at 0,
// then 2 at 3.
// CHECK-LABEL: strata.rt.sites = ["{{.*}}: strata.concat",
// CHECK: %[[OUT:.*]] = llvm.getelementptr %arg1[{{[0-9]+}}]
// CHECK: %[[R0:.*]] = llvm.mlir.constant(2 : i64)
// CHECK-NEXT: %[[N0:.*]] = llvm.mlir.constant(3 : i64)
// CHECK-NEXT: %[[W0:.*]] = llvm.mlir.constant(5 : i64)
// CHECK-NEXT: %[[AT0:.*]] = llvm.mlir.constant(0 : i64)
// CHECK-NEXT: llvm.call @strata_rt_copy_rows(%arg0, %{{.*}}, %[[OUT]], %{{.*}}, %{{.*}}, %[[R0]], %[[N0]], %[[W0]], %[[AT0]])
// CHECK: %[[R1:.*]] = llvm.mlir.constant(2 : i64)
// CHECK-NEXT: %[[N1:.*]] = llvm.mlir.constant(2 : i64)
// CHECK-NEXT: %[[W1:.*]] = llvm.mlir.constant(5 : i64)
// CHECK-NEXT: %[[AT1:.*]] = llvm.mlir.constant(3 : i64)
// CHECK-NEXT: llvm.call @strata_rt_copy_rows(%arg0, %{{.*}}, %[[OUT]], %{{.*}}, %{{.*}}, %[[R1]], %[[N1]], %[[W1]], %[[AT1]])
// The reshape lives in the concat's buffer (the memory plan puts it in
// place): no copy.
// CHECK-NOT: llvm.call @strata_rt_copy(
// A pad fills zeros, then copies its input's rows at `low` (1 row of 5).
// CHECK: llvm.call @strata_rt_fill
// CHECK: %[[PN:.*]] = llvm.mlir.constant(5 : i64)
// CHECK-NEXT: %[[PW:.*]] = llvm.mlir.constant(15 : i64)
// CHECK-NEXT: %[[PAT:.*]] = llvm.mlir.constant(5 : i64)
// CHECK-NEXT: llvm.call @strata_rt_copy_rows(%arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[PN]], %[[PW]], %[[PAT]])
func.func @train_step(%a: tensor<2x3xf32>, %b: tensor<2x2xf32>) -> tensor<2x3x5xf32> {
  %c = strata.concat %a, %b {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %r = strata.reshape %c : (tensor<2x5xf32>) -> tensor<2x1x5xf32>
  %p = strata.pad %r {dim = 1 : i64, low = 1 : i64, high = 1 : i64} : (tensor<2x1x5xf32>) -> tensor<2x3x5xf32>
  return %p : tensor<2x3x5xf32>
}

// -----
// SiLU, its gradient, rsqrt and tanh: unary op codes 5, 6 and 7 of
// strata_rt_unary,
// activation 5 of strata_rt_act_grad.
// CHECK-LABEL: strata.rt.sites = ["{{.*}}: strata.silu",
// CHECK: llvm.call @strata_rt_step_begin
// CHECK: %[[SILU:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: llvm.call @strata_rt_unary(%arg0, %{{.*}}, %[[SILU]],
// CHECK: %[[RSQRT:.*]] = llvm.mlir.constant(6 : i64)
// CHECK: llvm.call @strata_rt_unary(%arg0, %{{.*}}, %[[RSQRT]],
// CHECK: %[[TANH:.*]] = llvm.mlir.constant(7 : i64)
// CHECK: llvm.call @strata_rt_unary(%arg0, %{{.*}}, %[[TANH]],
// CHECK: %[[ACT:.*]] = llvm.mlir.constant(5 : i64)
// CHECK: llvm.call @strata_rt_act_grad(%arg0, %{{.*}}, %[[ACT]],
func.func @train_step(%x: tensor<8xf32>, %dy: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %s = strata.silu %x : (tensor<8xf32>) -> tensor<8xf32>
  %r0 = strata.rsqrt %x : (tensor<8xf32>) -> tensor<8xf32>
  %r = strata.tanh %r0 : (tensor<8xf32>) -> tensor<8xf32>
  %g = strata.silu_grad %x, %dy : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %s, %r, %g : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----
// Buckets in place: the memory plan puts %a and %b where strata.pack lays
// them (bytes 0 and 16 of its buffer), so their producers write them there
// and the pack only zero-fills its padding; the unpacked tensors are read
// where they lie. The only copy is the step's result.
// PACK-LABEL: strata.unpack
// PACK: %[[A:.*]] = llvm.getelementptr %arg1[0]
// PACK-NOT: llvm.call
// PACK: llvm.call @strata_rt_unary(%arg0, %{{.*}}, %{{.*}}, %[[A]],
// PACK: %[[B:.*]] = llvm.getelementptr %arg1[16]
// PACK-NOT: llvm.call
// PACK: llvm.call @strata_rt_unary(%arg0, %{{.*}}, %{{.*}}, %[[B]],
// PACK-NOT: llvm.call
// PACK: llvm.call @strata_rt_fill
// PACK-NOT: strata_rt_copy
// PACK: llvm.call @strata_rt_binary
// PACK-NOT: llvm.call
// PACK: llvm.call @strata_rt_copy
// PACK-NOT: strata_rt_copy
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = strata.scale %x {factor = 2.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %b = strata.scale %x {factor = 3.0 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %p = strata.pack %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<12xf32>
  %r = strata.scale %p {factor = 0.5 : f64} : (tensor<12xf32>) -> tensor<12xf32>
  %c, %d = strata.unpack %r {offset = 0 : i64} : (tensor<12xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %s = strata.add %c, %d : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----
// An arena offset past 256 MiB is an i64 value: a GEP's constant index
// holds 29 bits and would wrap it onto another buffer (or before the arena).
// BIG: strata.rt.arena_bytes = 536870912
// (PACK's last check ends where this case begins.)
// PACK: strata.rt.arena_bytes = 536870912
// BIG: %[[AT:.*]] = llvm.mlir.constant(268435456 : i64) : i64
// BIG-NEXT: llvm.getelementptr %arg1[%[[AT]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
func.func @train_step(%a: tensor<67108864xf32>) -> tensor<67108864xf32> {
  %x = strata.scale %a {factor = 2.0 : f64} : (tensor<67108864xf32>) -> tensor<67108864xf32>
  %y = strata.scale %x {factor = 3.0 : f64} : (tensor<67108864xf32>) -> tensor<67108864xf32>
  %z = strata.add %x, %y : (tensor<67108864xf32>, tensor<67108864xf32>) -> tensor<67108864xf32>
  return %z : tensor<67108864xf32>
}

// -----
// Consecutive updates form a group, which a runtime may run together
// (the CUDA runtime launches a group's Adam updates as one kernel): it
// begins before the first update (site 2) and ends after the last, with
// the first's site. Reads of parameters and assigns written in place do
// not break a group; the add does, and the update after it, alone, has
// none.
// GROUP: strata.rt.persistent = ["a", "b", "c", "d"]
// GROUP: llvm.call @strata_rt_fill(
// GROUP: %[[FIRST:.*]] = llvm.mlir.constant(2 : i64)
// GROUP-NEXT: llvm.call @strata_rt_updates_begin(%{{.*}}, %[[FIRST]])
// GROUP-NEXT: %[[S2:.*]] = llvm.mlir.constant(2 : i64)
// GROUP-COUNT-2: llvm.call @strata_rt_sgd(%{{[a-z0-9]+}}, %{{.*}})
// GROUP: llvm.call @strata_rt_sgd(%{{[a-z0-9]+}}, %{{.*}})
// GROUP-NEXT: %[[END:.*]] = llvm.mlir.constant(2 : i64)
// GROUP-NEXT: llvm.call @strata_rt_updates_end(%{{.*}}, %[[END]])
// GROUP-NOT: strata_rt_updates_begin
// GROUP: llvm.call @strata_rt_binary(
// GROUP-NOT: strata_rt_updates_
// GROUP: llvm.call @strata_rt_sgd(
// GROUP-NOT: strata_rt_updates_
// GROUP: llvm.call @strata_rt_step_end(
strata.param @a : tensor<8xf32> init <zeros>
strata.param @b : tensor<8xf32> init <zeros>
strata.param @c : tensor<8xf32> init <zeros>
strata.param @d : tensor<8xf32> init <zeros>

func.func @train_step(%g: tensor<8xf32>) -> tensor<8xf32> {
  %lr = arith.constant dense<0.5> : tensor<f32>
  %a = strata.get_param @a : tensor<8xf32>
  %a1 = strata.sgd_update %a, %g, %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  strata.assign @a, %a1 : tensor<8xf32>
  %b = strata.get_param @b : tensor<8xf32>
  %b1 = strata.sgd_update %b, %g, %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  strata.assign @b, %b1 : tensor<8xf32>
  %c = strata.get_param @c : tensor<8xf32>
  %c1 = strata.sgd_update %c, %g, %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  strata.assign @c, %c1 : tensor<8xf32>
  %s = strata.add %g, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %d = strata.get_param @d : tensor<8xf32>
  %d1 = strata.sgd_update %d, %s, %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  strata.assign @d, %d1 : tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----
// No group where one update would write what another reads: the memory
// plan gives @b's new value (read by the add after both) the arena bytes
// of @a's gradient, which dies at @a's update, so one launch of both
// (the CUDA runtime's group) would overwrite the gradient it reads.
// OVERLAP: strata.rt.persistent = ["a", "b", "am", "av", "bm", "bv", "step"]
// OVERLAP: %[[GA:.*]] = llvm.getelementptr %arg1[0]
// OVERLAP-NOT: strata_rt_updates_begin
// OVERLAP: llvm.call @strata_rt_adam({{.*}}, %[[GA]], {{.*}})
// OVERLAP-NOT: strata_rt_updates_begin
// OVERLAP: %[[B1:.*]] = llvm.getelementptr %arg1[0]
// OVERLAP-NOT: strata_rt_updates_begin
// OVERLAP: llvm.call @strata_rt_adam(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %[[B1]],
// OVERLAP-NOT: strata_rt_updates_
// OVERLAP: llvm.call @strata_rt_step_end(
strata.param @a : tensor<1024xf32> init <zeros>
strata.param @b : tensor<1024xf32> init <zeros>
strata.state @am : tensor<1024xf32> init <zeros> of @a
strata.state @av : tensor<1024xf32> init <zeros> of @a
strata.state @bm : tensor<1024xf32> init <zeros> of @b
strata.state @bv : tensor<1024xf32> init <zeros> of @b
strata.state @step : tensor<i64> init <zeros>

func.func @train_step(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {
  %lr = arith.constant dense<0.5> : tensor<f32>
  %step = strata.get_state @step : tensor<i64>
  %ga = strata.add %x, %x : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %gb = strata.add %y, %y : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  %a = strata.get_param @a : tensor<1024xf32>
  %am = strata.get_state @am : tensor<1024xf32>
  %av = strata.get_state @av : tensor<1024xf32>
  %a1, %am1, %av1 = strata.adam_update %a, %ga, %am, %av, %lr, %step : (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<f32>, tensor<i64>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>)
  strata.assign @am, %am1 : tensor<1024xf32>
  strata.assign @av, %av1 : tensor<1024xf32>
  %b = strata.get_param @b : tensor<1024xf32>
  %bm = strata.get_state @bm : tensor<1024xf32>
  %bv = strata.get_state @bv : tensor<1024xf32>
  %b1, %bm1, %bv1 = strata.adam_update %b, %gb, %bm, %bv, %lr, %step : (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<f32>, tensor<i64>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>)
  strata.assign @bm, %bm1 : tensor<1024xf32>
  strata.assign @bv, %bv1 : tensor<1024xf32>
  %s = strata.add %a1, %b1 : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>
  strata.assign @a, %a1 : tensor<1024xf32>
  strata.assign @b, %b1 : tensor<1024xf32>
  return %s : tensor<1024xf32>
}
