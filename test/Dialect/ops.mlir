// Every op parses, prints and parses again, in custom and generic form.
// RUN: strata-opt %s | strata-opt | FileCheck %s
// RUN: strata-opt %s --mlir-print-op-generic | strata-opt | FileCheck %s
// RUN: %python %S/every_op.py %strata_src_root/dialects/Strata/StrataOps.td %s | FileCheck %s --check-prefix=EVERY
// EVERY: {{[0-9]+}} ops, each checked

// CHECK: strata.param @w : tensor<8x16xf32> init <normal, 2.000000e-02 : f64>
strata.param @w : tensor<8x16xf32> init <normal, 2.000000e-02 : f64>
// CHECK: strata.param @b : tensor<16xf32> init <zeros>
strata.param @b : tensor<16xf32> init <zeros>
// CHECK: strata.param @g : tensor<16xf32> init <ones> {frozen}
strata.param @g : tensor<16xf32> init <ones> {frozen}
// CHECK: strata.param @u : tensor<16x16xf32> init <uniform, 2.500000e-01 : f64>
strata.param @u : tensor<16x16xf32> init <uniform, 2.500000e-01 : f64>
// CHECK: strata.param @table : tensor<32x16xf32> init <normal, 1.000000e+00 : f64>
strata.param @table : tensor<32x16xf32> init <normal, 1.0>
// CHECK: strata.rank_grid @ranks(pp = 2, dp = 1, sharding = 2, mp = 1)
strata.rank_grid @ranks(pp = 2, dp = 1, sharding = 2, mp = 1)
// CHECK: strata.comm_group @dp ranks [array<i64: 0, 2>, array<i64: 1, 3>]
strata.comm_group @dp ranks [array<i64: 0, 2>, array<i64: 1, 3>]

// CHECK-LABEL: func @forward
func.func @forward(%x: tensor<4x8xf32>, %ids: tensor<4x3xi32>, %labels: tensor<4xi32>) -> tensor<f32> {
  // CHECK: strata.get_param @w : tensor<8x16xf32>
  %w = strata.get_param @w : tensor<8x16xf32>
  %b = strata.get_param @b : tensor<16xf32>
  %g = strata.get_param @g : tensor<16xf32>
  %table = strata.get_param @table : tensor<32x16xf32>
  // CHECK: strata.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %0 = strata.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.matmul {{.*}} {transpose_lhs, transpose_rhs}
  %t = strata.matmul %w, %x {transpose_lhs, transpose_rhs} : (tensor<8x16xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  // CHECK: strata.bias_add
  %1 = strata.bias_add %0, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.add {{.*}} (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = strata.add %1, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.sub
  %3 = strata.sub %2, %1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.reshape %{{.*}} : (tensor<16xf32>) -> tensor<1x16xf32>
  %c = strata.reshape %b : (tensor<16xf32>) -> tensor<1x16xf32>
  // CHECK: strata.reduce_sum %{{.*}} {dims = array<i64: 1>, keep_dims} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %r = strata.reduce_sum %3 {dims = array<i64: 1>, keep_dims} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  // CHECK: strata.mul {{.*}} (tensor<4x1xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %4 = strata.mul %r, %c : (tensor<4x1xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.pack {{.*}} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<96xf32>
  %flat = strata.pack %3, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<96xf32>
  // CHECK: strata.unpack {{.*}} {offset = 16 : i64} : (tensor<96xf32>) -> (tensor<4x16xf32>, tensor<16xf32>)
  %u:2 = strata.unpack %flat {offset = 16 : i64} : (tensor<96xf32>) -> (tensor<4x16xf32>, tensor<16xf32>)
  // CHECK: strata.div
  %5 = strata.div %4, %2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.scale {{.*}} {factor = 5.000000e-01 : f64}
  %6 = strata.scale %5 {factor = 0.5 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.relu
  %7 = strata.relu %6 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.gelu %{{.*}} : (tensor<4x16xf32>)
  %8 = strata.gelu %7 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.gelu {{.*}} {approximate = #strata.gelu<tanh>}
  %9 = strata.gelu %8 {approximate = #strata.gelu<tanh>} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.dropout {{.*}} {key = 7 : i64, prob = 1.000000e-01 : f64}
  %10 = strata.dropout %9 {key = 7 : i64, prob = 0.1 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.layer_norm {{.*}} {epsilon = 9.9999999999999995E-7 : f64}
  %11 = strata.layer_norm %10, %g, %b {epsilon = 1.0e-6 : f64} : (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.rms_norm %{{.*}}, %{{.*}} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %rms = strata.rms_norm %11, %g : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.softmax %{{.*}} :
  %12 = strata.softmax %11 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.softmax {{.*}} {causal}
  %sq = strata.reshape %12 : (tensor<4x16xf32>) -> tensor<4x4x4xf32>
  %13 = strata.softmax %sq {causal} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  // CHECK: strata.transpose {{.*}} {permutation = array<i64: 2, 0, 1>}
  %14 = strata.transpose %13 {permutation = array<i64: 2, 0, 1>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  // CHECK: strata.reduce_mean {{.*}} {dims = array<i64: 0, 2>}
  %15 = strata.reduce_mean %14 {dims = array<i64: 0, 2>} : (tensor<4x4x4xf32>) -> tensor<4xf32>
  // CHECK: strata.broadcast_to
  %16 = strata.broadcast_to %15 : (tensor<4xf32>) -> tensor<3x4xf32>
  // CHECK: strata.reduce_grad %{{.*}}, %{{.*}} {dims = array<i64: 0, 2>, mean} : (tensor<4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %rg = strata.reduce_grad %15, %14 {dims = array<i64: 0, 2>, mean} : (tensor<4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  // CHECK: strata.reduce_grad %{{.*}}, %{{.*}} {dims = array<i64: 1>} : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %rgk = strata.reduce_grad %r, %3 {dims = array<i64: 1>} : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.sum_to
  %17 = strata.sum_to %16 : (tensor<3x4xf32>) -> tensor<1x4xf32>
  // CHECK: strata.embedding {{.*}} -> tensor<4x3x16xf32>
  %18 = strata.embedding %table, %ids : (tensor<32x16xf32>, tensor<4x3xi32>) -> tensor<4x3x16xf32>
  // CHECK: strata.cross_entropy {{.*}} -> tensor<f32>
  %loss = strata.cross_entropy %12, %labels : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  // CHECK: strata.cross_entropy {{.*}} {classes = 15 : i64} {{.*}} -> tensor<f32>
  %padded = strata.cross_entropy %12, %labels {classes = 15 : i64} : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func @backward
func.func @backward(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %dy: tensor<4x16xf32>,
                    %g: tensor<16xf32>, %ids: tensor<4xi32>, %dl: tensor<f32>) {
  // CHECK: strata.matmul_grad {{.*}} -> (tensor<4x8xf32>, tensor<8x16xf32>)
  %dx, %dw = strata.matmul_grad %x, %w, %dy : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>)
  // CHECK: strata.bias_add_grad {{.*}} -> tensor<16xf32>
  %db = strata.bias_add_grad %dy : (tensor<4x16xf32>) -> tensor<16xf32>
  // CHECK: strata.relu_grad
  %0 = strata.relu_grad %dy, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.gelu_grad {{.*}} {approximate = #strata.gelu<tanh>}
  %1 = strata.gelu_grad %dy, %0 {approximate = #strata.gelu<tanh>} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.dropout_grad
  %2 = strata.dropout_grad %1 {key = 7 : i64, prob = 0.1 : f64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.softmax_grad
  %3 = strata.softmax_grad %2, %1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.layer_norm_grad {{.*}} -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  %4:3 = strata.layer_norm_grad %3, %g, %2 : (tensor<4x16xf32>, tensor<16xf32>, tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.rms_norm_grad {{.*}} {epsilon = 1.000000e-05 : f64} : {{.*}} -> (tensor<4x16xf32>, tensor<16xf32>)
  %rg:2 = strata.rms_norm_grad %3, %g, %2 {epsilon = 1.0e-5 : f64} : (tensor<4x16xf32>, tensor<16xf32>, tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>)
  // CHECK: strata.embedding_grad {{.*}} -> tensor<32x16xf32>
  %5 = strata.embedding_grad %ids, %4#0 : (tensor<4xi32>, tensor<4x16xf32>) -> tensor<32x16xf32>
  // CHECK: strata.cross_entropy_grad
  %6 = strata.cross_entropy_grad %3, %ids, %dl : (tensor<4x16xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x16xf32>
  return
}

// CHECK-LABEL: func @optimizer
func.func @optimizer(%p: tensor<16xf32>, %g: tensor<16xf32>, %m: tensor<16xf32>, %v: tensor<16xf32>,
                     %lr: tensor<f32>, %step: tensor<i64>, %q: tensor<4x4xf32>) {
  // CHECK: strata.sgd_update
  %0 = strata.sgd_update %p, %g, %lr : (tensor<16xf32>, tensor<16xf32>, tensor<f32>) -> tensor<16xf32>
  // CHECK: strata.momentum_update {{.*}} {momentum = 0.94999999999999996 : f64, use_nesterov}
  %1:2 = strata.momentum_update %p, %g, %v, %lr {momentum = 0.95 : f64, use_nesterov} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.adam_update
  %2:3 = strata.adam_update %p, %g, %m, %v, %lr, %step : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.adamw_update {{.*}} {weight_decay = 1.000000e-01 : f64}
  %3:3 = strata.adamw_update %p, %g, %m, %v, %lr, %step {weight_decay = 0.1 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.lamb_update
  %4:3 = strata.lamb_update %p, %g, %m, %v, %lr, %step {epsilon = 1.0e-6 : f64} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.lars_update
  %5:2 = strata.lars_update %p, %g, %v, %lr : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>)
  // CHECK: strata.global_norm {{.*}} -> tensor<f32>
  %n = strata.global_norm %g, %q : (tensor<16xf32>, tensor<4x4xf32>) -> tensor<f32>
  // CHECK: strata.scale_by {{.*}} : (tensor<16xf16>, tensor<f32>) -> tensor<16xf16>
  %h = strata.cast %g : (tensor<16xf32>) -> tensor<16xf16>
  %u = strata.scale_by %h, %n : (tensor<16xf16>, tensor<f32>) -> tensor<16xf16>
  // CHECK: strata.clip_by_global_norm {{.*}} {max_norm = 1.000000e+00 : f64}
  %c:2 = strata.clip_by_global_norm %g, %q, %n {max_norm = 1.0 : f64} : (tensor<16xf32>, tensor<4x4xf32>, tensor<f32>) -> (tensor<16xf32>, tensor<4x4xf32>)
  return
}

// CHECK-LABEL: func @collectives
func.func @collectives(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // CHECK: strata.init_token : !strata.token
  %t0 = strata.init_token : !strata.token
  // CHECK: strata.all_reduce {{.*}} {group = @dp, kind = #strata.reduce<mean>}
  %0, %t1 = strata.all_reduce %x, %t0 {group = @dp, kind = #strata.reduce<mean>} : (tensor<4x16xf32>, !strata.token) -> (tensor<4x16xf32>, !strata.token)
  // CHECK: strata.reduce_scatter {{.*}} -> (tensor<2x16xf32>, !strata.token)
  %1, %t2 = strata.reduce_scatter %0, %t1 {group = @dp} : (tensor<4x16xf32>, !strata.token) -> (tensor<2x16xf32>, !strata.token)
  // CHECK: strata.all_gather {{.*}} {dim = 1 : i64, group = @dp}
  %2, %t3 = strata.all_gather %1, %t2 {group = @dp, dim = 1 : i64} : (tensor<2x16xf32>, !strata.token) -> (tensor<2x32xf32>, !strata.token)
  // CHECK: strata.broadcast {{.*}} {group = @dp, root = 1 : i64}
  %3, %t4 = strata.broadcast %0, %t3 {group = @dp, root = 1 : i64} : (tensor<4x16xf32>, !strata.token) -> (tensor<4x16xf32>, !strata.token)
  // CHECK: strata.send {{.*}} {group = @dp, peer = 1 : i64}
  %t5 = strata.send %3, %t4 {group = @dp, peer = 1 : i64} : (tensor<4x16xf32>, !strata.token) -> !strata.token
  // CHECK: strata.recv {{.*}} -> (tensor<4x16xf32>, !strata.token)
  %4, %t6 = strata.recv %t5 {group = @dp, peer = 1 : i64} : (!strata.token) -> (tensor<4x16xf32>, !strata.token)
  return %4 : tensor<4x16xf32>
}

// CHECK-LABEL: func @fused
func.func @fused(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<4x16xf32>) {
  // CHECK: strata.fused_gemm_epilogue {{.*}} -> tensor<4x16xf32>
  %0 = strata.fused_gemm_epilogue %x, %w, %b : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.fused_gemm_epilogue {{.*}} {activation = #strata.activation<gelu_tanh>, with_aux}
  %1, %aux = strata.fused_gemm_epilogue %x, %w, %b {activation = #strata.activation<gelu_tanh>, with_aux} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  // CHECK: strata.fused_gemm_epilogue_grad {{.*}} -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  %2:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  // CHECK: strata.fused_gemm_epilogue_grad {{.*}} {activation = #strata.activation<gelu_tanh>}
  %3:3 = strata.fused_gemm_epilogue_grad %x, %w, %dy, %aux {activation = #strata.activation<gelu_tanh>} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  // CHECK: strata.fused_dropout_add
  %4 = strata.fused_dropout_add %1, %dy {key = 2 : i64, prob = 0.1 : f64} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.fused_dropout_add_grad
  %5:2 = strata.fused_dropout_add_grad %4 {key = 2 : i64, prob = 0.1 : f64} : (tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  return
}

// CHECK-LABEL: func @attention
// [batch 2, sequence 16, heads 4, head size 8 (values 6)]; the log-sum-exp
// [batch, heads, sequence].
func.func @attention(%q: tensor<2x16x4x8xf32>, %v: tensor<2x16x4x6xf32>, %do: tensor<2x16x4x6xf32>, %kg: tensor<2x16x2x8xf32>, %vg: tensor<2x16x2x6xf32>) {
  // CHECK: strata.attention {{.*}} {causal, scale = 1.250000e-01 : f64} : {{.*}} -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  %o, %lse = strata.attention %q, %q, %v {causal, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  // CHECK: strata.attention_grad {{.*}} -> (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>)
  %g:3 = strata.attention_grad %q, %q, %v, %o, %lse, %do {causal, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>, tensor<2x16x4x6xf32>, tensor<2x4x16xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>)
  // Dropout on the probabilities (0, the default, is not printed).
  // CHECK: strata.attention {{.*}} {dropout = 1.000000e-01 : f64, dropout_key = 4 : i64, scale = 1.250000e-01 : f64}
  %od, %lsed = strata.attention %q, %q, %v {dropout = 0.1 : f64, dropout_key = 4 : i64, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  // CHECK: strata.attention_grad {{.*}} {dropout = 1.000000e-01 : f64, dropout_key = 4 : i64, scale = 1.250000e-01 : f64}
  %gd:3 = strata.attention_grad %q, %q, %v, %od, %lsed, %do {dropout = 0.1 : f64, dropout_key = 4 : i64, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>, tensor<2x16x4x6xf32>, tensor<2x4x16xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>)
  // Grouped-query attention: 4 query heads share 2 key and value heads;
  // the key and value gradients have their operands' shapes.
  // CHECK: strata.attention {{.*}} : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x6xf32>) -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  %og, %lg = strata.attention %q, %kg, %vg {causal, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x6xf32>) -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  // CHECK: strata.attention_grad {{.*}} -> (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x6xf32>)
  %gg:3 = strata.attention_grad %q, %kg, %vg, %og, %lg, %do {causal, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x6xf32>, tensor<2x16x4x6xf32>, tensor<2x4x16xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x6xf32>)
  // CHECK: strata.attention {{.*}} {scale = 1.250000e-01 : f64}
  %o0, %l0 = strata.attention %q, %q, %v {dropout = 0.0 : f64, scale = 0.125 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x6xf32>) -> (tensor<2x16x4x6xf32>, tensor<2x4x16xf32>)
  return
}

// CHECK-LABEL: func @metadata
func.func @metadata(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // CHECK: strata.relu {{.*}} {strata.micro_batch = 3 : i64, strata.role = #strata.role<forward>, strata.stage = 1 : i64}
  %0 = strata.relu %x {strata.role = #strata.role<forward>, strata.stage = 1 : i64, strata.micro_batch = 3 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: strata.bias_add_grad {{.*}} {strata.grad_of = @b, strata.role = #strata.role<backward>}
  %1 = strata.bias_add_grad %0 {strata.role = #strata.role<backward>, strata.grad_of = @b} : (tensor<4x16xf32>) -> tensor<16xf32>
  return %0 : tensor<4x16xf32>
}

// CHECK: strata.state @step : tensor<i64> init <zeros>
strata.state @step : tensor<i64> init <zeros>
// CHECK: strata.state @b.moment1 : tensor<16xf32> init <zeros> of @b
strata.state @b.moment1 : tensor<16xf32> init <zeros> of @b

// CHECK-LABEL: func @state
func.func @state(%v: tensor<16xf32>) {
  // CHECK: strata.get_state @step : tensor<i64>
  %s = strata.get_state @step : tensor<i64>
  // CHECK: strata.lr_schedule {{.*}} {base_lr = 1.000000e-03 : f64, decay_steps = 10 : i64, kind = #strata.lr<cosine>}
  %lr = strata.lr_schedule %s {kind = #strata.lr<cosine>, base_lr = 1.0e-3 : f64, decay_steps = 10 : i64} : (tensor<i64>) -> tensor<f32>
  // CHECK: strata.assign @b.moment1, %{{.*}} : tensor<16xf32>
  strata.assign @b.moment1, %v : tensor<16xf32>
  // CHECK: strata.assign @step, %{{.*}} : tensor<i64>
  strata.assign @step, %s : tensor<i64>
  return
}

// CHECK-LABEL: func @concat
func.func @concat(%a: tensor<2x3x4xf32>, %b: tensor<2x1x4xf32>) -> tensor<2x4x4xf32> {
  // CHECK: strata.concat %{{.*}}, %{{.*}} {dim = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x1x4xf32>) -> tensor<2x4x4xf32>
  %0 = strata.concat %a, %b {dim = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x1x4xf32>) -> tensor<2x4x4xf32>
  return %0 : tensor<2x4x4xf32>
}

// CHECK-LABEL: func @silu_rsqrt
func.func @silu_rsqrt(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: strata.silu %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = strata.silu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: strata.silu_grad %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = strata.silu_grad %x, %dy : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: strata.rsqrt %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = strata.rsqrt %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: strata.tanh %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = strata.tanh %2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func @cast
func.func @cast(%x: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf16>) {
  // CHECK: strata.cast %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %0 = strata.cast %x : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  // CHECK: strata.cast %{{.*}} : (tensor<4x8xbf16>) -> tensor<4x8xf16>
  %1 = strata.cast %0 : (tensor<4x8xbf16>) -> tensor<4x8xf16>
  return %0, %1 : tensor<4x8xbf16>, tensor<4x8xf16>
}

// CHECK-LABEL: func @pad
func.func @pad(%a: tensor<2x3xf32>) -> tensor<2x6xf32> {
  // CHECK: strata.pad %{{.*}} {dim = 1 : i64, high = 2 : i64, low = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  %0 = strata.pad %a {dim = 1 : i64, low = 1 : i64, high = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// CHECK-LABEL: func @slice
func.func @slice(%x: tensor<8x32xi32>) -> tensor<4x32xi32> {
  // CHECK: strata.slice %{{.*}} {dim = 0 : i64, size = 4 : i64, start = 4 : i64} : (tensor<8x32xi32>) -> tensor<4x32xi32>
  %0 = strata.slice %x {dim = 0 : i64, start = 4 : i64, size = 4 : i64} : (tensor<8x32xi32>) -> tensor<4x32xi32>
  // A stride of 1 is the default, not printed; another is.
  // CHECK: strata.slice %{{.*}} {dim = 1 : i64, size = 4 : i64, start = 0 : i64} : (tensor<8x32xi32>) -> tensor<8x4xi32>
  %1 = strata.slice %x {dim = 1 : i64, start = 0 : i64, size = 4 : i64, stride = 1 : i64} : (tensor<8x32xi32>) -> tensor<8x4xi32>
  // CHECK: strata.slice %{{.*}} {dim = 1 : i64, size = 16 : i64, start = 1 : i64, stride = 2 : i64} : (tensor<8x32xi32>) -> tensor<8x16xi32>
  %2 = strata.slice %x {dim = 1 : i64, start = 1 : i64, size = 16 : i64, stride = 2 : i64} : (tensor<8x32xi32>) -> tensor<8x16xi32>
  return %0 : tensor<4x32xi32>
}

// Dynamic loss scaling's ops.
// CHECK-LABEL: func @loss_scaling
func.func @loss_scaling(%norm: tensor<f32>, %s: tensor<f32>, %g: tensor<i64>, %b: tensor<i64>) -> (tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>) {
  // CHECK: strata.is_finite %{{.*}} : (tensor<f32>) -> tensor<i64>
  %ok = strata.is_finite %norm : (tensor<f32>) -> tensor<i64>
  // CHECK: strata.update_loss_scaling %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {decr_every_n_nan_or_inf = 2 : i64, decr_ratio = 8.000000e-01 : f64, incr_every_n_steps = 1000 : i64, incr_ratio = 2.000000e+00 : f64} : (tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>) -> (tensor<f32>, tensor<i64>, tensor<i64>)
  %s1, %g1, %b1 = strata.update_loss_scaling %norm, %s, %g, %b {decr_every_n_nan_or_inf = 2 : i64, decr_ratio = 0.8 : f64, incr_every_n_steps = 1000 : i64, incr_ratio = 2.0 : f64} : (tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>) -> (tensor<f32>, tensor<i64>, tensor<i64>)
  return %ok, %s1, %g1, %b1 : tensor<i64>, tensor<f32>, tensor<i64>, tensor<i64>
}

// Cross-entropy computes in f32 whatever its logits' type: bf16 and f16
// logits give an f32 loss and take an f32 loss gradient.
// CHECK-LABEL: func @low_precision_loss
func.func @low_precision_loss(%l: tensor<4x16xbf16>, %h: tensor<4x16xf16>, %y: tensor<4xi32>, %d: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<4x16xbf16>) {
  // CHECK: strata.cross_entropy %{{.*}} : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<f32>
  %0 = strata.cross_entropy %l, %y : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<f32>
  // CHECK: strata.cross_entropy %{{.*}} : (tensor<4x16xf16>, tensor<4xi32>) -> tensor<f32>
  %1 = strata.cross_entropy %h, %y : (tensor<4x16xf16>, tensor<4xi32>) -> tensor<f32>
  // CHECK: strata.cross_entropy_grad %{{.*}} : (tensor<4x16xbf16>, tensor<4xi32>, tensor<f32>) -> tensor<4x16xbf16>
  %2 = strata.cross_entropy_grad %l, %y, %d : (tensor<4x16xbf16>, tensor<4xi32>, tensor<f32>) -> tensor<4x16xbf16>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<4x16xbf16>
}
