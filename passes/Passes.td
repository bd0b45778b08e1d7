//===- Passes.td - Strata passes ---------------------------*- tablegen -*-===//

#ifndef STRATA_PASSES_TD
#define STRATA_PASSES_TD

include "mlir/Pass/PassBase.td"

def StrataProgramStats : Pass<"strata-program-stats", "mlir::ModuleOp"> {
  let summary = "Prints parameter, op and FLOP counts of a program";
  let description = [{
    Reports, without changing the module: the number of `strata.param`s and
    their total elements and bytes, the bytes of `strata.state` and of one
    batch, the static memory plan of the step (`planned-arena-bytes`: one
    arena for every intermediate value, offsets from liveness with in-place
    reuse; `activation-peak-bytes`: the most bytes alive at one op, the
    bound any plan must meet; `planned-peak-bytes`: arena + parameters and
    state + batch; `in-place-ops`: results that reuse an operand's buffer;
    `packed-in-place`: tensors written straight into a communication
    bucket or left in it when unpacked, without a copy), the count of every op kind in the module, and the
    floating-point operations of the matrix products (2·M·N·K per product,
    gradients included). The report goes to stderr, or to the file
    named by `output`. Used to check the size of generated models and to
    count the ops a pass rewrites.

    ```
    strata-gen gpt --layers 2 | strata-opt --strata-program-stats -o /dev/null
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the report to ('-' for stderr)">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataAmp : Pass<"strata-amp", "mlir::ModuleOp"> {
  let summary = "Mixed precision: ops compute in bf16 or f16 where that is safe";
  let description = [{
    Runs on the forward program, before autodiff (a step that already has
    its backward is an error). Level `o1` (Paddle's default) keeps the
    parameters in f32 and decides, op by op in program order, the type each
    computes in:

    - white-list ops (`matmul`, `fused_gemm_epilogue`, `attention`) compute
      in `dtype`;
    - black-list ops (`softmax`, `layer_norm`, `cross_entropy`,
      `reduce_sum`, `reduce_mean`, `rsqrt`) compute in f32;
    - every other op follows its inputs: in `dtype` when all its
      floating-point inputs are, in f32 when any is f32 (the low ones are
      widened). `bias_add` follows its input and casts the bias, as a
      Linear layer's GEMM does.

    Operands whose type differs from the op's compute type get an explicit
    `strata.cast` (one per value and type, at the location of its first
    reader, so pipeline stages and recompute segments keep it with its
    reader); results take the compute type. The step's results keep their
    declared types. Autodiff then differentiates through the casts, so the
    backward runs in the same precision as the forward and every parameter
    gradient arrives in f32.

    `custom-white-list` and `custom-black-list` add op names (without the
    `strata.` prefix) to the lists; a custom entry overrides the default
    list that names the same op. An unknown name, or one in both custom
    lists, is an error.

    Level `o2` (Paddle's pure low precision) first retypes the parameters
    to `dtype`, but those a black-list op reads directly and those the loss
    does not reach (no gradient, so no master weight), and then computes
    every op that the lists can name in `dtype` unless it is on the black
    list, whose default at o2 is Paddle's (`softmax`, `cross_entropy`,
    `reduce_sum`, `reduce_mean`) plus `rsqrt`: layer norm computes in
    `dtype` (its statistics accumulate in f32 inside the kernel).
    Parameter gradients arrive in `dtype`, and strata-optimizer keeps an
    f32 master weight for each low-precision parameter.

    With `fp16-guard` (level `o2` only; Paddle's `use_fp16_guard`), level
    `o2` applies to the ops that carry the unit attribute `strata.amp_guard`
    (Paddle's `fp16_guard()` region; `strata-gen --amp-guard` marks a
    model's blocks): the others compute in f32, and a parameter becomes
    low precision only when every op that reads it is guarded (and none is
    on the black list). A step without a guarded op is an error.

    With `float16` the pass also declares the loss scale, unless it is
    static and 1 or no parameter or op ends up in float16 (the lists keep
    them all f32): the state `@loss_scale` (f32, starting at
    `init-loss-scaling`, with the dynamic rule's settings in its
    `strata.loss_scaling` attribute) and its counters `@loss_scale.good` and
    `@loss_scale.bad`. strata-autodiff then starts the backward from the
    scale and divides it out of the parameter gradients; strata-optimizer
    skips every update (parameters, state, step counter) of a step whose
    gradients are not finite, and moves the scale by Paddle's dynamic rule
    (see `strata.update_loss_scaling`). bfloat16 has f32's exponent range
    and scales no loss.

    ```
    strata-opt gpt.mlir --strata-amp='dtype=bfloat16'
    ```
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", "\"float16\"",
           "Low-precision type: float16 or bfloat16">,
    Option<"level", "level", "std::string", "\"o1\"",
           "o1 (per-op casts, f32 parameters) or o2 (low-precision "
           "parameters, f32 master weights)">,
    ListOption<"customWhiteList", "custom-white-list", "std::string",
               "More ops that compute in the low type">,
    ListOption<"customBlackList", "custom-black-list", "std::string",
               "More ops that compute in f32">,
    Option<"fp16Guard", "fp16-guard", "bool", "false",
           "Level o2 only for ops marked strata.amp_guard (Paddle's "
           "use_fp16_guard); the others compute in f32">,
    Option<"useDynamicLossScaling", "use-dynamic-loss-scaling", "bool",
           "true", "float16: move the loss scale by Paddle's rule">,
    Option<"initLossScaling", "init-loss-scaling", "double", "32768.0",
           "float16: the first loss scale, at least 1 (1 and static: none)">,
    Option<"incrEveryNSteps", "incr-every-n-steps", "int64_t", "1000",
           "float16: finite steps before the scale grows">,
    Option<"decrEveryNNanOrInf", "decr-every-n-nan-or-inf", "int64_t", "2",
           "float16: overflowed steps before the scale shrinks">,
    Option<"incrRatio", "incr-ratio", "double", "2.0",
           "float16: factor of growth (> 1)">,
    Option<"decrRatio", "decr-ratio", "double", "0.8",
           "float16: factor of shrinking (in (0, 1))">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataAutodiff : Pass<"strata-autodiff", "mlir::ModuleOp"> {
  let summary = "Appends the backward of the loss (reverse-mode autodiff)";
  let description = [{
    Differentiates the step function (`@train_step`, or the module's one
    function), which returns a single scalar floating-point loss and has
    not been differentiated yet (no result carries `strata.grad_of`); a
    step that returns anything else (nothing, several values, a tensor) is
    an error naming what it returns. Backward ops are appended before the return, in
    reverse order of the forward ops, with `strata.role = backward` and the
    location of the forward op they differentiate; forward ops without a role
    get `strata.role = forward`. Adjoints of values used several times are
    summed, so a parameter read twice (the GPT's tied embedding) gets one
    gradient. Where the uses are slices that together cover the value along
    one dimension (a fused q/k/v projection split in three, as PyTorch
    programs have it), their gradients are one `strata.concat` instead of
    pads with zeros added up: the same values, without the zeros.

    The function then returns the loss followed by the gradient of every
    trainable (not `frozen`) `strata.param`, in declaration order, each
    result marked `{strata.grad_of = @param}`. A parameter without a path
    to the loss gets no gradient, and so no update, as a frozen one
    (PyTorch's and Paddle's optimizers skip a parameter without a gradient:
    no weight decay, no moments); a loss that reaches no trainable parameter
    is an error. Functions that already return
    gradients (frameworks may hand in their own backward) are left alone.

    Every forward op of the dialect is supported, and the fused forward ops
    (`fused_gemm_epilogue` needs `with_aux` when it has an activation). An
    op on the path to the loss that has no derivative rule (a backward,
    optimizer or communication op) is an error naming the op.

    ```
    strata-gen mlp --sizes 4,3 --batch 2 | strata-opt --strata-autodiff
    ```
  }];
  let dependentDialects = ["::strata::StrataDialect",
                           "::mlir::arith::ArithDialect"];
}

def StrataOptimizer : Pass<"strata-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends the optimizer update of every trainable parameter";
  let description = [{
    Consumes the gradients that `strata-autodiff` returns (results marked
    `strata.grad_of`) and appends, before the return:

    * the step counter: `strata.state @step : tensor<i64>`, incremented
      once per step; the 1-based step number feeds bias correction and the
      learning-rate schedule (`strata.lr_schedule`);
    * with `grad-clip-norm` > 0, global-norm clipping of all gradients
      together (Paddle's ClipGradByGlobalNorm);
    * per parameter, the update op of `type` (sgd, momentum, adam, adamw,
      lamb, lars) with its optimizer state as `strata.state @P.moment1`,
      `@P.moment2` or `@P.velocity` (`of @P`), and `strata.assign` of the
      new parameter and state values. A bf16 or f16 parameter (mixed
      precision level o2) gets an f32 master weight, `strata.state
      @P.master init <master> of @P`: the update computes from it, its state
      is f32, and the parameter is assigned the new master rounded. With
      `master-grad`, low-precision gradients are cast to f32 first, so
      clipping and the update read f32 gradients.

    The function then returns only the loss. Hyper-parameters and defaults
    are Paddle's; `weight-decay` and `epsilon` below 0 mean the type's
    default (adamw and lamb decay 0.01, lars 0.0005, others 0; lamb epsilon
    1e-6, lars 0, others 1e-8). Parameters whose name contains one of
    `exclude-from-weight-decay` get no weight decay. New ops carry
    `strata.role = optimizer`. A module without a differentiated function
    is an error (run strata-autodiff first).
  }];
  let options = [
    Option<"type", "type", "std::string", "\"adamw\"",
           "sgd, momentum, adam, adamw, lamb or lars">,
    Option<"learningRate", "learning-rate", "double", "0.001",
           "Base learning rate">,
    Option<"weightDecay", "weight-decay", "double", "-1.0",
           "Weight decay (< 0: the type's default)">,
    Option<"beta1", "beta1", "double", "0.9", "Adam-family beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam-family beta2">,
    Option<"epsilon", "epsilon", "double", "-1.0",
           "Epsilon (< 0: the type's default)">,
    Option<"momentum", "momentum", "double", "0.9",
           "Momentum of momentum and lars">,
    Option<"useNesterov", "use-nesterov", "bool", "false",
           "Nesterov momentum">,
    Option<"larsCoeff", "lars-coeff", "double", "0.001",
           "LARS trust coefficient">,
    ListOption<"excludeFromWeightDecay", "exclude-from-weight-decay",
               "std::string",
               "Parameter-name substrings that get no weight decay">,
    Option<"gradClipNorm", "grad-clip-norm", "double", "0.0",
           "Global-norm gradient clipping threshold (0: off)">,
    Option<"lrSchedule", "lr-schedule", "std::string", "\"constant\"",
           "constant, linear_warmup or cosine">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0",
           "Linear warm-up steps">,
    Option<"decaySteps", "decay-steps", "int64_t", "0",
           "Cosine decay steps after warm-up">,
    Option<"minLr", "min-lr", "double", "0.0",
           "Final learning rate of the cosine schedule">,
    Option<"masterGrad", "master-grad", "bool", "false",
           "Cast low-precision gradients to f32 before clipping and the "
           "update (mixed precision's use_master_grad)">
  ];
  let dependentDialects = ["::strata::StrataDialect",
                           "::mlir::arith::ArithDialect"];
}

def StrataGemmEpilogueFusion
    : Pass<"strata-gemm-epilogue-fusion", "mlir::ModuleOp"> {
  let summary = "Fuses matmul + bias [+ relu/gelu] and its gradient";
  let description = [{
    Forward: `matmul(x, w)` followed by `bias_add` and optionally `relu` or
    `gelu` becomes one `strata.fused_gemm_epilogue` (the cuBLASLt / oneDNN
    epilogue). With an activation the fused op also yields the
    pre-activation (`with_aux`), which replaces the remaining uses of the
    bias_add result (e.g. `gelu_grad`).

    Backward: `matmul_grad(x, w, dz)` and `bias_add_grad(dz)` of a fused
    GEMM — with `dz = relu_grad / gelu_grad(dy)` when the forward fused the
    activation — become one `strata.fused_gemm_epilogue_grad` yielding dx,
    dw and dbias. The activation gradient is fused only if the forward
    activation was, and then only if nothing else reads it. Without an
    activation, `dz` may have other readers: a residual branch's output
    gradient is also the skip connection's, which the layer below reads.

    Guards (as Paddle's fuse_gemm_epilogue): no transposed input (a
    transposed weight, `transpose_rhs`, fuses as `transpose_weight`), weight rank 2,
    input rank >= 2, bias rank 1, not f64; the matmul and bias_add results
    used only by the pattern. Whether the activation may join depends on
    the target's epilogue: `target=cuda` needs N % 128 == 0 for relu and
    N % 8 == 0 for gelu (cuBLASLt's aux-output alignment); `target=cpu`
    (oneDNN post-ops) has no such rule. The rule is the runtime target's
    (the same targets as `strata-lower-to-runtime`). Role, stage and micro-batch
    attributes of the matched ops carry over to the fused ops.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"",
           "Backend whose epilogue rules apply: cpu or cuda">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataGemmPadding : Pass<"strata-gemm-padding", "mlir::ModuleOp"> {
  let summary = "Pads large GEMMs' output columns to the target's multiple";
  let description = [{
    `matmul(x, w)` with a rank-2 weight `w` whose output width N (the
    vocabulary of an LM head, say 50257) is not a multiple of the target's
    `getGemmColumnMultiple()` becomes `matmul(x, pad(w))` followed by a
    `slice` of the N real columns, as PyTorch's compiler and llm.c pad such
    shapes: every leading dimension of the product and of its gradients
    (autodiff differentiates the pad and the slice) is then a multiple of
    it. Where only `cross_entropy` reads the product (an LM head's
    logits), directly or through reshapes that keep rows whole (an
    imported model's `logits.view(-1, V)`), there is no slice: the loss reads the padded rows with
    `classes = N` (its softmax over the real columns; the padding's
    gradient is zero), which saves a copy of the logits and one of their
    gradient. The padded columns are zeros: values are unchanged but for
    the order of sums (the input's gradient sums over the padded width,
    which a GEMM library may block otherwise than the real one).

    Only products worth the copies are padded: at least 256 summed terms
    (K) and 2^24 multiply-adds. A matmul whose result a `bias_add` reads
    is left alone (the GEMM epilogue fuses that pair). Runs before mixed
    precision and autodiff; a strategy selects it for targets with a
    multiple (`cuda`: 8); with `target=cpu` (multiple 1) it changes
    nothing.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cuda\"",
           "Runtime target whose GEMM column multiple applies: cpu or cuda">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataGeluRecognition
    : Pass<"strata-gelu-recognition", "mlir::ModuleOp"> {
  let summary = "Rewrites a GELU written out in its tanh form as strata.gelu";
  let description = [{
    Runs before `strata-autodiff`, on the forward program, so that
    `strata-gemm-epilogue-fusion` can take the activation into the GEMM.
    Programs imported from PyTorch write GPT-2's GELU out (Hugging Face's
    `NewGELUActivation`):

    ```mlir
    %h = strata.scale %x {factor = 0.5}
    %x2 = strata.mul %x, %x
    %x3 = strata.mul %x2, %x
    %c = strata.scale %x3 {factor = 0.044715}
    %i = strata.add %x, %c
    %u = strata.scale %i {factor = 0.7978845608028654}   // sqrt(2 / pi)
    %t = strata.tanh %u
    %s = strata.add %t, %one                             // a constant 1
    %y = strata.mul %h, %s
    ```

    which becomes `strata.gelu %x {approximate = #strata.gelu<tanh>}`: one
    kernel instead of nine, one activation kept for the gradient instead of
    several, and the same function (the results move at rounding level);
    after a GEMM's `bias_add` the epilogue fusion then takes it. Operands of
    `mul` and `add` in either order; a factor as `scale` or as a `mul` by a
    constant; 0.5 on `x`, on the product or on `1 + tanh`; x^3 as `x * x *
    x` grouped either way. Matched where every intermediate value has no
    other reader, all have `x`'s type (no broadcasting but the constants')
    and the constants are these within 1e-6 relative.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataRmsNormRecognition
    : Pass<"strata-rms-norm-recognition", "mlir::ModuleOp"> {
  let summary = "Rewrites an RMS normalisation written out as strata.rms_norm";
  let description = [{
    Runs before `strata-autodiff` and `strata-amp`, on the forward program.
    Programs imported from PyTorch write LLaMA's RMSNorm out (Hugging
    Face's `LlamaRMSNorm`; `torch.nn.RMSNorm` is imported as
    `strata.rms_norm` itself):

    ```mlir
    %sq = strata.mul %x, %x
    %ms = strata.reduce_mean %sq {dims = array<i64: 2>, keep_dims}
    %v = strata.add %ms, %eps                            // a constant
    %r = strata.rsqrt %v
    %n = strata.mul %x, %r
    %y = strata.mul %w, %n                               // w: [hidden]
    ```

    which becomes `strata.rms_norm %x, %w {epsilon = ...}`: one kernel
    instead of six (and one for the gradient instead of about ten), `x`
    alone kept for the gradient instead of the squares, the statistic and
    the normalised rows, and the same function (the results move at
    rounding level). Operands of `mul` and `add` in either order. Matched
    where the mean is over the last dimension only, every intermediate
    value has no other reader, `eps` is a positive splat constant, `w` has
    rank 1 and all have `x`'s element type.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataDropoutAddFusion
    : Pass<"strata-dropout-add-fusion", "mlir::ModuleOp"> {
  let summary = "Fuses dropout(x) + residual";
  let description = [{
    `add(dropout(x), y)` (either operand order, same types, the dropout used
    only by the add) becomes `strata.fused_dropout_add(x, y)` with the
    dropout's key and probability, so the mask, and hence the loss, is
    bitwise that of the unfused program.

    The backward needs no rewrite in Strata's IR: the gradient of `add` is
    the incoming gradient itself (no add_grad op exists), so the pair that
    Paddle fuses reduces to the `dropout_grad` already there, which
    replays the same mask.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataAttentionFusion
    : Pass<"strata-attention-fusion", "mlir::ModuleOp"> {
  let summary = "Fuses scaled dot-product attention into strata.attention";
  let description = [{
    Runs before `strata-autodiff`, on the forward program. The chain

    ```mlir
    %s = strata.matmul %q, %k {transpose_rhs}   // [..., S, T]
    %z = strata.scale %s {factor = c}           // optional
    %p = strata.softmax %z                      // {causal} optional
    %o = strata.matmul %p, %v                   // [..., S, Dv]
    ```

    becomes one `strata.attention {scale = c[, causal]}` when the scores,
    the scaled scores and the probabilities have no other use and `q`, `k`
    and `v` have the same leading (batch, head) dimensions. The fused op
    reads [..., S, H, D] (heads side by side in a row, as a projection writes
    them): when `q`, `k` and `v` are each a transpose of the sequence and
    head dimensions of such a tensor (the GPT's split into heads), it reads
    those tensors in place, and a transpose of its product back to [..., S,
    H, Dv] reads its result instead; the transposes die, and the program
    copies no head. Ops between such a transpose and q k^T that work on
    each element (`add`, `sub`, `mul`, `div`, `scale`) or along a dimension
    (`slice`, `concat`, the dimension then the one it moved to): LLaMA's
    rotary embedding, q * cos + rotate_half(q) * sin, are computed on [...,
    S, H, D] instead, their constant tables' S and H
    swapped where one of the two is 1 (the same elements). Keys and values
    that grouped-query attention repeats alike for the query heads sharing
    them (Hugging Face's `repeat_kv`: a reshape, `broadcast_to` and a
    reshape) are read unrepeated: the fused op shares each key and value
    head among its group of query heads, and the repeat dies; a repeat of
    the keys or the values alone is computed on [..., S, H, D]. One key and
    value head that the products broadcast over the query heads ([..., 1,
    T, D] against q's [..., H, S, D]: multi-query attention, Falcon's) is
    read as one key head every query head shares, where q is read in
    place. Otherwise
    the leading dimensions stay the batch with one head (reshapes, no
    copies). (f32, bf16 or f16; the kernels sum in f32
    and keep the softmax and the
    log-sum-exp in f32; in bf16 on CPUs with AVX512-BF16 the products are
    bf16 dot products, the probabilities and their gradient rounded to bf16
    as the unfused program's matmuls read them). Autodiff then differentiates `strata.attention` with one
    `strata.attention_grad`. The fused op never stores the [S, T]
    probabilities: its kernel works on blocks of query rows (with `causal`,
    only the keys a block can see) and keeps each row's log-sum-exp, from
    which the gradient recomputes the probabilities. The activation memory
    of attention becomes linear in the sequence, and causal attention does
    about half the products.

    A `strata.dropout` between the softmax and the product with `v` (GPT-2's
    attention dropout) is fused too: the op takes its probability and key
    (`dropout`, `dropout_key`) and its kernels draw the dropout's own mask
    for each (batch, head, query, key) of the [..., H, S, T] probabilities,
    keyed by micro-batch and rank as the unfused op's, so the losses stay
    the unfused program's.

    Not fused: a chain whose probabilities (dropped or not) are read
    elsewhere, a transposed `v`, broadcast (shared) keys or values, and a
    chain with casts in it. A softmax left unfused is reported once, as a
    warning at the first one with its reason and the count, so that a
    strategy asking for fused attention says where the program does not get
    it (the PyTorch importer's attention, written with `@` or
    scaled_dot_product_attention, is fused). A strategy runs this pass
    before `strata-amp`, which treats the fused op as a white-list op.
  }];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataGradientMerge : Pass<"strata-gradient-merge", "mlir::ModuleOp"> {
  let summary = "Splits the batch into k micro-batches and merges their gradients";
  let description = [{
    Runs on a differentiated function (after `strata-autodiff`, before
    `strata-optimizer`). The program's batch is the global batch of one
    optimizer step: the pass takes micro-batch m of every argument with
    `strata.slice` along dimension 0, clones the forward and backward ops
    that depend on the batch once per micro-batch (`strata.micro_batch =
    m`), and returns the mean of the micro-batch losses and, per parameter,
    the sum of the micro-batch gradients, divided by k when `avg` is true.
    Ops that do not depend on the batch (parameter reads, constants) are
    shared. The optimizer that follows therefore runs once per k
    micro-batches, on the merged gradients.

    With `avg`, the merged gradient is the gradient of the whole batch, so
    losses equal the unsplit program's (dropout masks are keyed by global
    element index); with `avg=false` the gradient is k times larger, as in
    Paddle. Accumulation stays in SSA values within the step: there is no
    persistent `grad@MERGE` buffer to zero. Every argument's first
    dimension must be divisible by `k-steps`. Gradients are accumulated in
    f32 whatever their type: a bf16 or f16 gradient (mixed precision level
    o2) is cast to f32 before its sum, and the step returns it in f32.
  }];
  let options = [
    Option<"kSteps", "k-steps", "int64_t", "1",
           "Micro-batches per optimizer step">,
    Option<"avg", "avg", "bool", "true",
           "Average (true) or sum (false) the micro-batch gradients">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataRecompute : Pass<"strata-recompute", "mlir::ModuleOp"> {
  let summary = "Recomputes forward activations in the backward pass";
  let description = [{
    Runs on a differentiated function. Each checkpoint names a layer: the
    ops whose location is `NAME` or `NAME.*` (strata-gen names them `h0`,
    `h1`, ... for the GPT blocks, `fc0`, ... for the MLP layers) form a
    segment. Only what enters a segment (its input, the checkpointed value)
    stays alive from the forward pass; every value the segment computes and
    the backward reads is recomputed by a clone of the segment's ops placed
    just before the first backward op that needs it. Replayed dropout ops
    keep their key and micro-batch, so they draw the same mask: the losses
    are bitwise those of the program without recompute.

    `no-recompute-segments` lists indices into `checkpoints` of segments to
    keep as they are (an index out of range is an error).
    `refined-ops-patterns` makes recompute selective: each pattern
    `main|num|pre|suf` (op names joined by '+', e.g. `matmul|-1||`) keeps
    the first `num` (-1: all) ops of a segment named in `main` (with a
    producer named in `pre` and a user named in `suf`, when given), so their
    results stay alive and are not recomputed. A checkpoint that names no
    op is an error.
  }];
  let options = [
    ListOption<"checkpoints", "checkpoints", "std::string",
               "Layers whose activations are recomputed">,
    ListOption<"noRecomputeSegments", "no-recompute-segments", "int64_t",
               "Indices of checkpoints not to recompute">,
    ListOption<"refinedOpsPatterns", "refined-ops-patterns", "std::string",
               "Ops to keep: main|num|pre|suf, op names joined by '+'">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataRecomputeCasts
    : Pass<"strata-recompute-casts", "mlir::ModuleOp"> {
  let summary = "Casts again in the backward pass what it reads of a cast";
  let description = [{
    Runs on a differentiated function (after `strata-autodiff` and the
    fusion passes, whose patterns match the backward's operands against the
    forward's). A forward `strata.cast` whose result the backward reads is
    cloned just before the first backward op that reads it, and the
    backward reads the clone, when keeping the cast's operand instead costs
    no more memory: the operand lives for the whole step (a parameter,
    optimizer state, a step input), the backward reads it too, or it is the
    narrower type. The forward's copy then dies where the forward stops
    reading it.

    Mixed precision is where this pays: under `amp` level o2 the backward
    read softmax's f32 probabilities (for its gradient) and their bf16 copy
    (for the next product's), under o1 the f32 weights (resident) and their
    bf16 copies. The values are the same, so are the losses; each recast
    costs one pass over its value. `strata-run --strategy` with `amp`
    runs it.

    Only reads on the cast's own pipeline stage and micro-batch are
    recast, from an operand there (a value another stage sends stays as
    the pipeline sends it). `resident-params=false` (what a strategy with
    sharding stage 3 sets: ZeRO-3 gathers a parameter again for each
    backward read) counts parameters as activations.
  }];
  let options = [
    Option<"residentParams", "resident-params", "bool", "true",
           "Parameters live for the whole step (false under ZeRO-3)">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataStrategyCheck : Pass<"strata-strategy-check", "mlir::ModuleOp"> {
  let summary = "Checks that the step's batch splits as a strategy file asks";
  let description = [{
    The first pass of every strategy's pipeline (`strata-opt --strategy`,
    `strata-run`, the C API and Python): reads the strategy file and
    checks that the step's batch divides over the data-parallel ranks of
    a job of `world-size` ranks (when it is known: 0 leaves the strategy's
    parallel degrees unchecked against it and splits the batch over one
    data-parallel rank, as `strata-opt --strategy` does without
    `--world-size`), then into the micro-batches of gradient
    merge (`gradient_merge.k_steps`) or of the pipeline
    (`pipeline.accumulate_steps`), and that it agrees with
    `pipeline.micro_batch_size` where that is set. A batch that does not
    split is an error reported at the strategy key that asks for the
    split (the strategy file's line and column), or at the step function
    when no key does. It changes nothing.

    It is a pass so that a printed strategy pipeline
    (`--dump-pass-pipeline`, a crash reproducer) runs again from its text:

    ```
    strata-opt step.mlir --pass-pipeline='builtin.module(strata-strategy-check{strategy=dp.yaml world-size=4})'
    ```
  }];
  let options = [
    Option<"strategyFile", "strategy", "std::string", /*default=*/"",
           "The strategy file (YAML or JSON)">,
    Option<"worldSize", "world-size", "int64_t", "0",
           "Ranks of the job (0: unknown, the parallel degrees are not "
           "checked against it, as strata-opt's --world-size)">,
  ];
}

def StrataRankGrid : Pass<"strata-rank-grid", "mlir::ModuleOp"> {
  let summary = "Declares the job's rank grid (pp x dp x sharding x mp)";
  let description = [{
    Runs first when a program is distributed: declares
    `strata.rank_grid @ranks` with the given axis sizes, from which
    `strata-stage-split`, `strata-data-parallel`, `strata-sharding` and
    `strata-pipeline` take their degrees and derive their communication
    groups. A strategy sets `pp` to `pipeline.pp_degree`, `sharding` to
    `sharding.degree`, and `dp` to the rest of the world size. Running it
    on a program that declares the same grid changes nothing; a different
    grid is an error.

    ```mlir
    strata.rank_grid @ranks(pp = 2, dp = 1, sharding = 2, mp = 1)
    ```
  }];
  let options = [
    Option<"pp", "pp", "int64_t", "1", "Pipeline stages">,
    Option<"dp", "dp", "int64_t", "1",
           "Data-parallel replicas outside sharding">,
    Option<"sharding", "sharding", "int64_t", "1",
           "Ranks that divide the optimizer state (ZeRO)">,
    Option<"mp", "mp", "int64_t", "1",
           "Tensor-parallel ranks (1: not implemented yet)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataDataParallel : Pass<"strata-data-parallel", "mlir::ModuleOp"> {
  let summary = "Splits the batch over ranks and averages the gradients";
  let description = [{
    Runs on a differentiated function (after `strata-autodiff` and
    `strata-gradient-merge`, before `strata-optimizer`), for the ranks of
    one pipeline stage of the rank grid (its `dp` x `sharding` axes: degree
    D), which run the same program. Each rank's arguments become its shard
    of the global batch (1/D of the leading dimension: rank r of the group
    holds rows [r B/D, (r+1) B/D)), and the ops that depend on the batch are
    retyped. Every gradient is averaged over `strata.comm_group @dp` by a
    `strata.all_reduce` (mean), and so is the loss, so the optimizer updates
    identical replicas and every rank reports the global mean loss.

    Gradients are grouped into buckets of at most `bucket-mb` MB in the
    order they become ready in the backward pass, separately per element
    type (as Paddle) and per home stage of their parameter (the first
    pipeline stage that reads it, so that a bucket never spans stages); the
    bucket that closes last in each group (the first layers' gradients,
    which cannot overlap compute) is capped at `last-bucket-mb`. Each bucket
    is one flat buffer: right after its last gradient is computed the
    gradients are packed (`strata.pack`), one `strata.all_reduce` (mean,
    `strata.bucket = i`) averages the buffer, and a `strata.unpack` before
    the step's results gives the gradients back, where the runtime completes
    the all-reduce, so it overlaps the rest of the backward pass. The
    ordering token chains the collectives in program order. The memory plan
    lets the producers write into the bucket and leaves the unpacked
    gradients in it where that does not raise the arena. A parameter
    without a gradient path has no gradient (strata-autodiff gives it
    none) on any rank, so no rank waits for a collective another rank
    skips (`find-unused-parameters` changes nothing in a static program).

    With `fp16-allreduce` (fleet's `fp16_allreduce`) each rank's f32 bucket
    is divided by D and cast to f16 after packing, summed in f16 (half the
    bytes on the wire; every sum rounds to f16, so values outside f16's
    normal range lose precision), and cast back before unpacking.
  }];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", "25.0",
           "Gradient bucket size in MB">,
    Option<"lastBucketMb", "last-bucket-mb", "double", "1.0",
           "Cap of the bucket that closes last, in MB">,
    Option<"findUnusedParameters", "find-unused-parameters", "bool",
           "false", "Accepted for Paddle compatibility (see above)">,
    Option<"fp16Allreduce", "fp16-allreduce", "bool", "false",
           "All-reduce f32 gradient buckets in f16">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataLowerToRuntime : Pass<"strata-lower-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lowers the step to calls of the runtime C ABI (LLVM dialect)";
  let description = [{
    Turns `@train_step` into the LLVM-dialect function

    ```
    void strata_step(StrataRtContext *ctx, void *arena, void **persistent,
                     void **inputs, void **outputs)
    ```

    with one call of `include/strata/Runtime/StrataRuntime.h` per op. Every
    intermediate value gets its offset in one arena from the static memory
    plan (the same plan `strata-program-stats` reports); parameters and
    state are resident buffers the host passes in `persistent`, in the order
    of the module attribute `strata.rt.persistent`. Shapes and strides are
    constants. An update (SGD ... LARS) whose parameter or state is not read
    after it writes its result into the resident buffer directly; any other
    `strata.assign` is a copy when the step ends. The module also gets
    `strata.rt.arena_bytes`, `strata.rt.sites` (the location and op of each
    call site, by which the runtime names a failing op) and
    `strata.rt.site_roles` (each site's `strata.role`, for traces). With
    `trace=true` every op's calls are bracketed by `strata_rt_trace_begin`
    and `strata_rt_trace_end`.

    Each op family (GEMM, elementwise, data movement, dropout,
    normalisation, loss, embedding, optimizer, collectives, point-to-point)
    has its patterns; what depends on the backend (element types, GEMM batch
    layouts, collective splits, buffer alignment) is asked of the runtime
    target (`target=cpu`, the default, or `cuda`). Every tensor argument of a
    call carries its element type; the step first calls
    `strata_rt_step_begin` with the ABI version it was lowered for
    (`strata.rt.abi_version`, also the data symbol `strata_step_abi_version`)
    and ends with `strata_rt_step_end`.

    The result is ready for `mlir-translate --mlir-to-llvmir`, the JIT of
    `strata-run --backend cpu`, or `strata-run --emit=obj`. On the CPU
    target values must be f32 (integers i32/i64); an op the target has no
    kernel for is an error that names it.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"",
           "Runtime target whose rules apply: cpu or cuda">,
    Option<"alignment", "alignment", "int64_t", "0",
           "Alignment of every arena buffer, in bytes (0: the target's, 64 "
           "on the CPU)">,
    Option<"trace", "trace", "bool", "false",
           "Call strata_rt_trace_begin/end around every op (strata-run "
           "--trace)">
  ];
  let dependentDialects = ["::strata::StrataDialect",
                           "::mlir::LLVM::LLVMDialect"];
}

def StrataSharding : Pass<"strata-sharding", "mlir::ModuleOp"> {
  let summary = "ZeRO stages 1-3: each rank keeps the optimizer state "
                "(stage 2: and gradients; stage 3: and parameters) of the "
                "parameters it owns";
  let description = [{
    Runs after `strata-data-parallel` (batch shards, gradients averaged over
    every rank; without it every rank trains the whole batch, the same
    gradients, which is correct but does the work D times) and
    `strata-optimizer`, and produces the program of rank
    `rank`. The rank grid's `sharding` axis (degree D) forms groups of D
    consecutive ranks (hybrid sharding when its `dp` axis is more than 1:
    `@sharding_dp` groups the ranks that hold the same share). Every
    `strata.param` gets an owner in its group:
    `greedy_even` gives each parameter, largest first, to the rank with the
    fewest elements so far (Paddle goes in parameter order; largest-first
    keeps the shards even where parameter order left them 13% apart on the
    benchmark GPT at 4 ranks); `use_order` cuts the parameter list into
    D contiguous parts of about equal size.

    Stage 1: this rank keeps only the optimizer updates and the optimizer
    state (moments, velocities) of the parameters it owns. When the step
    ends each rank packs its updated parameters (`strata.pack`, padded to
    the largest share of the bucket), one `strata.all_gather` over
    `@sharding` per bucket of `bucket-mb` per rank gives every rank all of
    them, and each rank unpacks and assigns the others' (the replicas stay
    identical). The optimizer state per rank shrinks to 1/D.

    Stage 2 also shards the gradients. Each bucket of data parallelism's
    gradient all-reduces (per pipeline stage: a parameter's home stage)
    becomes one `strata.reduce_scatter` (mean) of the bucket packed by
    owner: rank r's segment holds the gradients of the parameters r owns, so
    each rank receives only its own and unpacks them; in hybrid sharding the
    share is then all-reduced over `@sharding_dp`, the ranks that hold the
    same share. Global-norm clipping reads only the owned gradients (each
    rank's partial norm goes to its slot of a D-vector that the group
    sums; the norm of that vector is the global norm; with pipeline stages
    one such sum per stage, whose norms `strata-pipeline` then combines
    across stages). Per step a rank sends about Ψ for the reduce-scatter
    and Ψ for the all-gather, as ZeRO does. A bucket with a gradient read by
    more than its parameter's update and clipping stays an all-reduce.

    Stage 3 also shards the parameters of at least `segment-size` elements
    (smaller ones stay replicated, as Paddle's `segment_size`): only the
    owner declares such a parameter; the forward reads of each read op
    become a `strata.broadcast` from the owner into a buffer of the step,
    and the backward reads a second one, so the gathered copy dies in
    between (the memory plan frees it). Each gather starts where the
    previous one is first used (prefetch: the runtime completes it right
    before its own first use). The owner's optimizer updates its resident
    copy; no end-of-step gather. Every decision depends on the program, not
    on the rank, so all ranks issue the same collectives in the same order.

    `offload` changes nothing on the CPU runtime (the state is in host
    memory already); `sync-comm` is accepted for Paddle compatibility. The
    gradient buckets are data parallelism's (`comm_buffer_size`).
  }];
  let options = [
    Option<"stage", "stage", "int64_t", "1", "ZeRO stage (1, 2, 3)">,
    Option<"rank", "rank", "int64_t", "0",
           "The rank whose program to make (in the rank grid)">,
    Option<"partition", "partition", "std::string", "\"greedy_even\"",
           "Owner assignment: greedy_even or use_order">,
    Option<"segmentSize", "segment-size", "int64_t", "1048576",
           "Parameters smaller than this stay replicated (stage 3)">,
    Option<"offload", "offload", "bool", "false",
           "Optimizer state in host memory">,
    Option<"syncComm", "sync-comm", "bool", "false",
           "Synchronous communication (stage 3)">,
    Option<"bucketMb", "bucket-mb", "double", "256.0",
           "Parameter all-gather bucket size per rank in MB "
           "(sharding.comm_buffer_size_MB)">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataStageSplit : Pass<"strata-stage-split", "mlir::ModuleOp"> {
  let summary = "Places every forward op on a pipeline stage";
  let description = [{
    Runs before `strata-autodiff`, which puts the backward of every op on the
    op's stage; `strata-pipeline` then gives each rank its stage's ops. There
    are P x `vpp-degree` (virtual) stages, P the rank grid's `pp` axis;
    virtual stage `c` runs on rank stage `c mod P` (chunk `c / P`), as in
    the interleaved schedule.

    Ops annotated with `strata.stage` (the counterpart of Paddle's
    `device_guard`) keep their stage and an op without one takes the stage
    of the annotated op before it (stage 0 before the first). Without any
    annotation the stages are balanced by cost: the program is cut into
    units (maximal runs of ops of one `strata.layer`; ops without a layer
    form units of their own) and the units into contiguous stages that
    minimise the largest stage cost. An op's cost is its FLOPs (products:
    2·M·N·K) plus 4 × the bytes it writes (elementwise ops are memory-bound:
    this machine does about 4 FLOPs per byte of memory bandwidth).
    Reads of parameters and state and constants get no stage: they go where
    they are used.

    ```mlir
    %h = strata.matmul %x, %w {strata.stage = 1 : i64} : ...
    ```
  }];
  let options = [
    Option<"vppDegree", "vpp-degree", "int64_t", "1",
           "Chunks per stage (interleaved schedule)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

def StrataPipeline : Pass<"strata-pipeline", "mlir::ModuleOp"> {
  let summary = "The program of one pipeline stage, ops ordered by a "
                "micro-batch schedule, values crossing stages sent and "
                "received";
  let description = [{
    Runs last, on a step whose ops carry `strata.stage` (`strata-stage-split`
    and `strata-autodiff`) and `strata.micro_batch` (`strata-gradient-merge`
    with `accumulate-steps` micro-batches), and produces the program of rank
    `rank`. The stages are the rank grid's `pp` axis, its outermost: a stage
    is a block of consecutive ranks, and `@pp` groups the ranks of one
    pipeline (the ranks that differ only in their stage).

    Each op belongs to a job: F(m) (the forward of micro-batch m), B(m) (its
    backward, with the forward ops that recompute re-runs), W(m) (ZBH1: the
    weight gradients, split from B), `pre` (reads of parameters and state)
    or `post` (the optimizer). Ops without a micro-batch run in the job of
    their latest operand. Scalar bookkeeping (the step counter, learning
    rate, constants) runs on every stage; a parameter lives on the first
    stage that reads it and other stages that read it (the GPT's tied
    embedding) receive it each step and send their part of its gradient
    back, where it is summed. A global norm over several stages' gradients
    becomes one norm per stage, sent to every other stage and combined
    there: each stage clips its own gradients with the combined norm, and
    under loss scaling guards its updates with it and computes its own
    copy of the step counter and the loss scale from it (the same values on
    every stage).

    Schedules (S = stage, P = pipeline stages, M = micro-batches):
    - `FThenB`: all forwards, then all backwards.
    - `1F1B` (M >= P): P-S forwards, then pairs [B, F], then the remaining
      backwards (Paddle's job list; Megatron's warm-up of P-S-1 is the same
      sequence).
    - `Eager1F1B` (M >= P): min(2(P-S)-1, M) forwards, then as 1F1B.
    - `VPP` (`vpp-degree` v >= 2 chunks per stage, M % P == 0): Megatron's
      interleaved schedule; forwards visit chunks in groups of P
      micro-batches, (P-S-1)·2 + (v-1)·P warm-up forwards.
    - `ZBH1` (M >= P): 1F1B with each backward split into B (input
      gradients) and W (weight gradients); a stage delays its W jobs into
      the bubble of the cool-down (W(m) runs after B(m + S) in the steady
      state).

    A value used on another stage is sent right after it is computed
    (`strata.send`, buffered: the sender goes on) and received right before
    its first use (`strata.recv`); the receives of one channel keep the
    order of its sends. The pass then simulates every stage's sends and
    receives and refuses the program, naming the stages and micro-batches
    involved, if some stage would wait forever or receive a message meant
    for another receive. The schedule of every stage is recorded in the
    module attribute `strata.schedule`.
  }];
  let options = [
    Option<"vppDegree", "vpp-degree", "int64_t", "1",
           "Chunks per stage (VPP)">,
    Option<"schedule", "schedule", "std::string", "\"1F1B\"",
           "FThenB, 1F1B, Eager1F1B, VPP or ZBH1">,
    Option<"microBatchSize", "micro-batch-size", "int64_t", "1",
           "Rows per micro-batch (checked against the program unless 1, "
           "Paddle's default)">,
    Option<"accumulateSteps", "accumulate-steps", "int64_t", "1",
           "Micro-batches per step (the program's strata.micro_batches)">,
    Option<"rank", "rank", "int64_t", "0",
           "The rank whose program to make (in the rank grid)">,
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

#endif // STRATA_PASSES_TD
