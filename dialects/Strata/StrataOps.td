//===- StrataOps.td - Strata operations --------------------*- tablegen -*-===//

#ifndef STRATA_OPS_TD
#define STRATA_OPS_TD

include "Strata/StrataDialect.td"
include "Strata/StrataInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

// Tensors a program may hold: statically shaped, no dimension 0, at most
// 2^53 elements (strata::hasTrainableShape).
def Strata_TrainableShape : CPred<"::strata::hasTrainableShape($_self)">;
def Strata_FloatTensor
    : ConfinedType<StaticShapeTensorOf<[F16, BF16, F32, F64]>,
                   [Strata_TrainableShape],
                   "non-empty statically shaped tensor of f16, bf16, f32 or "
                   "f64 values">;
def Strata_IndexTensor
    : ConfinedType<StaticShapeTensorOf<[I32, I64]>, [Strata_TrainableShape],
                   "non-empty statically shaped tensor of i32 or i64 values">;
def Strata_Scalar : 0DTensorOf<[F16, BF16, F32, F64]>;
// A dropout's key: a 32-bit word of its mask's Philox counter.
def Strata_DropoutKey
    : ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<4294967295>]>;
def Strata_StepCounter : 0DTensorOf<[I64]>;
def Strata_AnyTensor
    : ConfinedType<StaticShapeTensorOf<[AnyType]>, [Strata_TrainableShape],
                   "non-empty statically shaped tensor">;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class Strata_Op<string mnemonic, list<Trait> traits = []>
    : Op<Strata_Dialect, mnemonic,
         !listconcat(traits, [Strata_KnownAttributes])>;

// A value-semantic op whose result types follow from its operands and
// attributes: the verifier checks them and builders need no result types.
class Strata_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Strata_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

// A value-semantic op whose result type is spelled out (reshape and the
// like): the verifier checks it against the operands.
class Strata_ShapeOp<string mnemonic, list<Trait> traits = []>
    : Strata_Op<mnemonic, !listconcat(traits, [Pure])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

class Strata_ElementwiseBinaryOp<string mnemonic, string formula>
    : Strata_ComputeOp<mnemonic, [SameOperandsElementType,
                                  Strata_InPlace<"0, 1">]> {
  let summary = "Elementwise " # formula # " with broadcasting";
  let description = [{
    Computes `}] # formula # [{` elementwise. Shapes broadcast as in NumPy:
    dimensions are aligned from the right and a dimension of size 1 is
    stretched to the other operand's size.

    ```mlir
    %0 = strata.}] # mnemonic # [{ %a, %b : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs);
  let results = (outs Strata_FloatTensor:$result);
}

//===----------------------------------------------------------------------===//
// Program structure
//===----------------------------------------------------------------------===//

def Strata_ParamOp : Strata_Op<"param", [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "Declares a trainable parameter";
  let description = [{
    A parameter is a tensor that persists across training steps. It lives at
    module level, is named by a symbol, and is read inside a step with
    `strata.get_param`. `init` says how it is initialised; `frozen`
    parameters get no gradient and no update.

    ```mlir
    strata.param @wte : tensor<256x64xf32> init <normal, 2.000000e-02>
    strata.param @ln_f.bias : tensor<64xf32> init <zeros>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Strata_FloatTensor>:$type,
                       Strata_InitAttr:$init,
                       UnitAttr:$frozen);
  let assemblyFormat = "$sym_name `:` $type `init` $init attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::RankedTensorType getTensorType() {
      return mlir::cast<mlir::RankedTensorType>(getType());
    }
  }];
}

def Strata_GetParamOp : Strata_Op<"get_param",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Reads a parameter";
  let description = [{
    Yields the current value of the parameter named by `name`. The result
    type must equal the parameter's declared type.

    ```mlir
    %w = strata.get_param @wte : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Strata_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Strata_RankGridOp : Strata_Op<"rank_grid",
    [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "The job's ranks as a grid with named axes";
  let description = [{
    The layout of the job's ranks, declared once (by `strata-rank-grid`,
    from the strategy) before any pass that distributes the program. The
    axes, outermost first: `pp` (pipeline stages), `dp` (data-parallel
    replicas outside sharding), `sharding` (ranks that divide the optimizer
    state, ZeRO), `mp` (tensor parallelism; 1 until it exists). Rank
    `((pp * DP + dp) * SHARDING + sharding) * MP + mp` sits at coordinates
    `(pp, dp, sharding, mp)`, so a sharding group is a run of consecutive
    ranks and a pipeline stage is a block of `DP * SHARDING * MP` ranks.
    Passes derive every `strata.comm_group` from it: the ranks that differ
    only along the group's axes form one list.

    ```mlir
    // 8 ranks: 2 pipeline stages, each 2 replicas of 2 sharding ranks.
    strata.rank_grid @ranks(pp = 2, dp = 2, sharding = 2, mp = 1)
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$pp, I64Attr:$dp,
                       I64Attr:$sharding, I64Attr:$mp);
  let assemblyFormat = [{
    $sym_name `(` `pp` `=` $pp `,` `dp` `=` $dp `,` `sharding` `=` $sharding
    `,` `mp` `=` $mp `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The size of an axis.
    int64_t getAxisSize(GridAxis axis);
    /// Number of ranks in the job.
    int64_t getWorldSize();
    /// The coordinate of `rank` along `axis`.
    int64_t getCoordinate(int64_t rank, GridAxis axis);
    /// The rank lists of the groups along `axes`: ranks that differ only in
    /// those coordinates form one list (ordered by their coordinates along
    /// `axes`, outermost first); lists are ordered by the other
    /// coordinates, outermost first.
    llvm::SmallVector<llvm::SmallVector<int64_t>>
    getGroups(llvm::ArrayRef<GridAxis> axes);
  }];
}

def Strata_CommGroupOp : Strata_Op<"comm_group",
    [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "Declares a family of communication groups";
  let description = [{
    Splits the world ranks into disjoint groups of equal size. A collective
    that names the symbol runs within the group that contains the calling
    rank; ranks given to a collective (`root`, `peer`) count within that
    group. Groups are created in the order of their declarations in the
    module, identically on every rank, so communicator set-up cannot
    deadlock.

    ```mlir
    // Two data-parallel groups of two ranks each on a world of four.
    strata.comm_group @dp ranks [array<i64: 0, 2>, array<i64: 1, 3>]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypedArrayAttrBase<DenseI64ArrayAttr,
                                          "array of rank lists">:$ranks);
  let assemblyFormat = "$sym_name `ranks` $ranks attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Number of ranks in each group.
    int64_t getGroupSize() {
      return mlir::cast<mlir::DenseI64ArrayAttr>(getRanks()[0]).size();
    }
  }];
}

def Strata_InitTokenOp : Strata_Op<"init_token", [Pure]> {
  let summary = "Starts a chain of collective ordering tokens";
  let description = [{
    ```mlir
    %t0 = strata.init_token : !strata.token
    ```
  }];
  let results = (outs Strata_TokenType:$token);
  let assemblyFormat = "attr-dict `:` type($token)";
}

def Strata_StateOp : Strata_Op<"state", [Symbol, HasParent<"mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Declares persistent state that is not trained";
  let description = [{
    Optimizer moments, the step counter and gradient accumulators: tensors
    that persist across steps like parameters but get no gradient. `of`
    names the parameter a state belongs to, so that partitioning passes
    place it with its parameter. Integer state may only start as zeros or
    ones.

    ```mlir
    strata.state @step : tensor<i64> init <zeros>
    strata.state @w.moment1 : tensor<64x64xf32> init <zeros> of @w
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Strata_AnyTensor>:$type,
                       Strata_InitAttr:$init,
                       OptionalAttr<FlatSymbolRefAttr>:$of);
  let assemblyFormat = "$sym_name `:` $type `init` $init (`of` $of^)? attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::RankedTensorType getTensorType() {
      return mlir::cast<mlir::RankedTensorType>(getType());
    }
  }];
}

def Strata_GetStateOp : Strata_Op<"get_state",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Reads a state";
  let description = [{
    Yields the value the state had at the start of the step.

    ```mlir
    %s = strata.get_state @step : tensor<i64>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Strata_AnyTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Strata_AssignOp : Strata_Op<"assign",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>,
     MemoryEffects<[MemWrite]>]> {
  let summary = "Sets the value a parameter or state has in the next step";
  let description = [{
    Reads of the same symbol within the step still see the old value; the
    new value takes effect when the step ends. A step assigns each symbol at
    most once.

    ```mlir
    strata.assign @w, %w_new : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Strata_AnyTensor:$value);
  let assemblyFormat = "$name `,` $value attr-dict `:` type($value)";
}

def Strata_LrScheduleOp : Strata_ComputeOp<"lr_schedule"> {
  let summary = "Learning rate of an update from its 1-based step number";
  let description = [{
    With s the step number: `constant` gives base_lr; `linear_warmup`
    base_lr * min(1, s / warmup_steps); `cosine` warms up linearly over
    warmup_steps, then decays to min_lr over decay_steps as
    min_lr + (base_lr - min_lr) (1 + cos(pi t)) / 2, t = min(1, (s -
    warmup_steps) / decay_steps).

    ```mlir
    %lr = strata.lr_schedule %s {kind = #strata.lr<cosine>, base_lr = 1.0e-03 : f64, decay_steps = 100 : i64} : (tensor<i64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Strata_StepCounter:$step,
                       Strata_LrScheduleKindAttr:$kind, F64Attr:$base_lr,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$decay_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr);
  let results = (outs 0DTensorOf<[F32]>:$lr);
}

//===----------------------------------------------------------------------===//
// Forward computation
//===----------------------------------------------------------------------===//

def Strata_MatmulOp : Strata_ComputeOp<"matmul", [SameOperandsElementType]> {
  let summary = "Batched matrix product";
  let description = [{
    Multiplies the last two dimensions of `lhs` ([..., M, K]) and `rhs`
    ([..., K, N]); leading (batch) dimensions broadcast as in NumPy, so a
    rank-2 `rhs` is shared by every batch. `transpose_lhs` / `transpose_rhs`
    swap the last two dimensions of the operand before the product.

    ```mlir
    %y = strata.matmul %x, %w : (tensor<8x16x64xf32>, tensor<64x256xf32>) -> tensor<8x16x256xf32>
    %s = strata.matmul %q, %k {transpose_rhs} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_AddOp : Strata_ElementwiseBinaryOp<"add", "lhs + rhs">;
def Strata_SubOp : Strata_ElementwiseBinaryOp<"sub", "lhs - rhs">;
def Strata_MulOp : Strata_ElementwiseBinaryOp<"mul", "lhs * rhs">;
def Strata_DivOp : Strata_ElementwiseBinaryOp<"div", "lhs / rhs">;

def Strata_ScaleOp : Strata_ComputeOp<"scale", [Strata_InPlace<"0">]> {
  let summary = "Multiplies by a compile-time constant";
  let description = [{
    ```mlir
    %y = strata.scale %x {factor = 0.125 : f64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, F64Attr:$factor);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_ScaleByOp : Strata_ComputeOp<"scale_by", [Strata_InPlace<"0">]> {
  let summary = "Multiplies by a run-time f32 scalar, rounded once";
  let description = [{
    Each element of `input` times `factor`, computed in f32 and rounded
    once to the input's type. Loss scaling unscales each gradient with it
    (the factor is the inverse of the loss scale, which is no float16
    number: 1 / 26214.4), as Paddle's check_finite_and_unscale does, in one
    pass over a bf16 or f16 gradient. It has no derivative rule: autodiff
    creates it.

    ```mlir
    %y = strata.scale_by %g, %inv : (tensor<64x64xf16>, tensor<f32>) -> tensor<64x64xf16>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, 0DTensorOf<[F32]>:$factor);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_BiasAddOp : Strata_ComputeOp<"bias_add",
    [SameOperandsElementType, Strata_InPlace<"0">]> {
  let summary = "Adds a bias along the last dimension";
  let description = [{
    `bias` has rank 1 and the size of the last dimension of `input`.

    ```mlir
    %y = strata.bias_add %x, %b : (tensor<8x16x64xf32>, tensor<64xf32>) -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$bias);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_ReluOp : Strata_ComputeOp<"relu", [Strata_InPlace<"0">]> {
  let summary = "max(x, 0)";
  let description = [{
    A NaN stays NaN (PyTorch's relu), so that a NaN in the batch reaches
    the loss, where training reports it.

    ```mlir
    %y = strata.relu %x : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_GeluOp : Strata_ComputeOp<"gelu", [Strata_InPlace<"0">]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate = #strata.gelu<erf>` (the default, as in Paddle and
    PyTorch) computes x * Phi(x) exactly; `#strata.gelu<tanh>` uses
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as GPT-2 does.

    ```mlir
    %y = strata.gelu %x {approximate = #strata.gelu<tanh>} : (tensor<8x256xf32>) -> tensor<8x256xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input,
      DefaultValuedAttr<Strata_GeluApproximationAttr,
                        "GeluApproximation::Erf">:$approximate);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_SiluOp : Strata_ComputeOp<"silu", [Strata_InPlace<"0">]> {
  let summary = "x * sigmoid(x) (swish), as in LLaMA's SwiGLU";
  let description = [{
    ```mlir
    %y = strata.silu %x : (tensor<8x256xf32>) -> tensor<8x256xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_RsqrtOp : Strata_ComputeOp<"rsqrt", [Strata_InPlace<"0">]> {
  let summary = "1 / sqrt(x), as in RMS normalisation";
  let description = [{
    ```mlir
    %y = strata.rsqrt %x : (tensor<8x1xf32>) -> tensor<8x1xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_TanhOp : Strata_ComputeOp<"tanh", [Strata_InPlace<"0">]> {
  let summary = "Hyperbolic tangent";
  let description = [{
    ```mlir
    %y = strata.tanh %x : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_CastOp : Strata_ShapeOp<"cast"> {
  let summary = "Converts the elements to another floating-point type";
  let description = [{
    Rounds each element to the result's element type (round to nearest
    even; values beyond the type's range become infinities). The shape is
    unchanged. `strata-amp` inserts casts where mixed precision changes an
    op's compute type; the gradient of a cast is the cast of the result's
    gradient back to the input's type.

    A cast to the input's own type folds away, and so does a round trip
    through a wider type (bf16 -> f32 -> bf16 is exact); f32 -> bf16 -> f32
    rounds, and stays.

    ```mlir
    %y = strata.cast %x : (tensor<8x64xf32>) -> tensor<8x64xbf16>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
  let hasFolder = 1;
}

def Strata_DropoutOp : Strata_ComputeOp<"dropout", [Strata_InPlace<"0">]> {
  let summary = "Inverted dropout with a counter-based mask";
  let description = [{
    Zeroes each element with probability `prob` and scales the others by
    1 / (1 - prob). The mask is drawn from Philox-4x32-10 keyed by the run
    seed, `key` and the element's index in the global batch (on micro-batch
    m of an op with n elements: m * n + i, the batch dimension leading), so
    it is identical whenever the op is replayed (recompute), fused, or the
    batch is split into micro-batches or ranks. `key` (0 to 2^32 - 1) must
    be unique among the program's dropouts as written (dropout ops, fused
    dropout-adds and attention dropouts; strata-autodiff refuses a key used
    twice); a replay or a micro-batch's copy of an op keeps its key.

    ```mlir
    %y = strata.dropout %x {key = 3 : i64, prob = 1.000000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, F64Attr:$prob, Strata_DropoutKey:$key);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_SoftmaxOp : Strata_ComputeOp<"softmax", [Strata_InPlace<"0">]> {
  let summary = "Softmax over the last dimension, optionally causal";
  let description = [{
    With `causal`, the last two dimensions must be square and element
    (i, j) with j > i is excluded (its output is 0), as in autoregressive
    attention.

    ```mlir
    %p = strata.softmax %s {causal} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, UnitAttr:$causal);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_LayerNormOp : Strata_ComputeOp<"layer_norm",
    [SameOperandsElementType]> {
  let summary = "Layer normalisation over the last dimension";
  let description = [{
    (x - mean) / sqrt(var + epsilon) * gamma + beta, with the statistics
    taken over the last dimension; `gamma` and `beta` have rank 1.

    ```mlir
    %y = strata.layer_norm %x, %g, %b {epsilon = 1.000000e-05 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$gamma,
                       Strata_FloatTensor:$beta,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_RmsNormOp : Strata_ComputeOp<"rms_norm",
    [SameOperandsElementType]> {
  let summary = "Root-mean-square normalisation over the last dimension";
  let description = [{
    x / sqrt(mean(x^2) + epsilon) * gamma, the mean taken over the last
    dimension; `gamma` has rank 1 (LLaMA's RMSNorm, PyTorch's
    `nn.RMSNorm`). `strata-rms-norm-recognition` makes it from the ops
    written out.

    ```mlir
    %y = strata.rms_norm %x, %g {epsilon = 1.000000e-06 : f64} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1e-6">:$epsilon);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_EmbeddingOp : Strata_ComputeOp<"embedding"> {
  let summary = "Row lookup in a table";
  let description = [{
    `table` is [V, H]; `ids` of any shape [...] gives a result [..., H].
    An id outside [0, V) is a runtime error. With `padding_idx` (PyTorch's
    `nn.Embedding(padding_idx=...)`), that row of the table gets no
    gradient: the lookups of it still read it.

    ```mlir
    %x = strata.embedding %wte, %tokens : (tensor<256x64xf32>, tensor<8x16xi32>) -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$table, Strata_IndexTensor:$ids,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_ReshapeOp : Strata_ShapeOp<"reshape", [Strata_InPlace<"0">]> {
  let summary = "Reinterprets the shape, keeping the element order";
  let description = [{
    ```mlir
    %y = strata.reshape %x : (tensor<8x16x64xf32>) -> tensor<8x16x4x16xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input);
  let results = (outs Strata_AnyTensor:$result);
}

def Strata_PackOp : Strata_ShapeOp<"pack"> {
  let summary = "Lays tensors end to end in one flat buffer";
  let description = [{
    The elements of every input, in order, then zeros up to the result's
    size: a communication bucket (Paddle's coalesced buffer). `strata-sharding`
    packs each rank's share of a gradient bucket for `strata.reduce_scatter`
    and each rank's updated parameters for `strata.all_gather`.

    ```mlir
    %flat = strata.pack %w, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<48xf32>
    ```
  }];
  let arguments = (ins Variadic<Strata_AnyTensor>:$inputs);
  let results = (outs 1DTensorOf<[AnyType]>:$result);
}

def Strata_UnpackOp : Strata_ShapeOp<"unpack"> {
  let summary = "Takes tensors out of a flat buffer";
  let description = [{
    Result i holds the input's elements from `offset` plus the sizes of the
    results before it, in its own shape: the inverse of `strata.pack`.

    ```mlir
    %w, %b = strata.unpack %flat {offset = 0 : i64} : (tensor<48xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins 1DTensorOf<[AnyType]>:$input,
                       DefaultValuedAttr<I64Attr, "0">:$offset);
  let results = (outs Variadic<Strata_AnyTensor>:$results);
}

def Strata_TransposeOp : Strata_ComputeOp<"transpose"> {
  let summary = "Permutes dimensions";
  let description = [{
    Result dimension i is input dimension `permutation[i]`.

    ```mlir
    %y = strata.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : (tensor<8x16x4x16xf32>) -> tensor<8x4x16x16xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Strata_AnyTensor:$result);
}

class Strata_ReduceOp<string mnemonic, string what>
    : Strata_ComputeOp<mnemonic> {
  let summary = what # " over the given dimensions";
  let description = [{
    Reduces `dims` (distinct, in range); with `keep_dims` the reduced
    dimensions stay with size 1.

    ```mlir
    %y = strata.}] # mnemonic # [{ %x {dims = array<i64: 1>} : (tensor<8x64xf32>) -> tensor<8xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keep_dims);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_ReduceSumOp : Strata_ReduceOp<"reduce_sum", "Sum">;
def Strata_ReduceMeanOp : Strata_ReduceOp<"reduce_mean", "Mean">;

def Strata_BroadcastToOp : Strata_ShapeOp<"broadcast_to"> {
  let summary = "Broadcasts to a larger shape";
  let description = [{
    The input shape must broadcast (NumPy rules) to the result shape.

    ```mlir
    %y = strata.broadcast_to %x : (tensor<64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_SumToOp : Strata_ShapeOp<"sum_to"> {
  let summary = "Sums broadcast dimensions away (the adjoint of broadcast_to)";
  let description = [{
    The result shape must broadcast to the input shape; the dimensions that
    broadcasting would stretch are summed.

    ```mlir
    %db = strata.sum_to %dy : (tensor<8x16x64xf32>) -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_SliceOp : Strata_ComputeOp<"slice"> {
  let summary = "A range of one dimension, every element or every stride-th";
  let description = [{
    `size` elements of dimension `dim`: `start`, `start + stride`, ...,
    `start + (size - 1) * stride` (`stride` defaults to 1, a contiguous
    range, and is printed only when it is not 1); the other dimensions are
    kept. Gradient merge uses it to take micro-batch m of a global batch
    (`dim = 0`, `start = m * size`); PyTorch's `x[..., 1::2]` is a slice
    with `stride = 2`. Its gradient pads with zeros (between the elements
    as well when the stride is above 1).

    ```mlir
    %mb = strata.slice %tokens {dim = 0 : i64, start = 4 : i64, size = 4 : i64} : (tensor<8x32xi32>) -> tensor<4x32xi32>
    %odd = strata.slice %x {dim = 1 : i64, start = 1 : i64, size = 4 : i64, stride = 2 : i64} : (tensor<2x8xf32>) -> tensor<2x4xf32>
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, I64Attr:$dim, I64Attr:$start,
                       I64Attr:$size, DefaultValuedAttr<I64Attr, "1">:$stride);
  let results = (outs Strata_AnyTensor:$result);
}

def Strata_PadOp : Strata_ComputeOp<"pad"> {
  let summary = "Zeros before and after one dimension";
  let description = [{
    The input with `low` zeros before and `high` zeros after it along
    dimension `dim`: the adjoint of `strata.slice`, whose gradient it is.

    ```mlir
    %y = strata.pad %x {dim = 1 : i64, low = 1 : i64, high = 2 : i64} : (tensor<4x3xf32>) -> tensor<4x6xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, I64Attr:$dim, I64Attr:$low,
                       I64Attr:$high);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_ConcatOp : Strata_ComputeOp<"concat", [SameOperandsElementType]> {
  let summary = "Joins tensors along one dimension";
  let description = [{
    The inputs, in order, along dimension `dim`; every other dimension is
    the same in all of them. Its gradient is a slice per input.

    ```mlir
    %y = strata.concat %a, %b {dim = 2 : i64} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Strata_AnyTensor>:$inputs, I64Attr:$dim);
  let results = (outs Strata_AnyTensor:$result);
}

def Strata_CrossEntropyOp : Strata_ComputeOp<"cross_entropy"> {
  let summary = "Mean softmax cross-entropy over tokens";
  let description = [{
    `logits` is [..., V] and `labels` (integers in [0, C)) has the leading
    shape [...]. The result is the mean over all leading positions of
    -log softmax(logits[..., :C])[label], a rank-0 tensor: f32 for bf16 and
    f16 logits (the op computes in f32, as a cast of the logits to f32
    before it would, so mixed precision reads the low type without one),
    else the logits' type. C, the number of classes, is `classes` where
    given (1 <= C <= V: the columns past it are padding, which the op never
    reads; strata-gemm-padding sets it), else V.

    ```mlir
    %loss = strata.cross_entropy %logits, %targets : (tensor<8x16x256xf32>, tensor<8x16xi32>) -> tensor<f32>
    %padded = strata.cross_entropy %logits, %targets {classes = 250 : i64} : (tensor<8x16x256xf32>, tensor<8x16xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IndexTensor:$labels,
                       OptionalAttr<I64Attr>:$classes);
  let results = (outs Strata_Scalar:$loss);
  let extraClassDeclaration = [{
    /// `classes`, or the logits' last dimension.
    int64_t getNumClasses() {
      return getClasses().value_or(getLogits().getType().getShape().back());
    }
  }];
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

def Strata_MatmulGradOp : Strata_ComputeOp<"matmul_grad",
    [SameOperandsElementType]> {
  let summary = "Gradients of strata.matmul";
  let description = [{
    Given the forward operands and the gradient of the result, yields the
    gradients of `lhs` and `rhs` (same shapes as the operands; batch
    dimensions that were broadcast are summed).

    ```mlir
    %dx, %dw = strata.matmul_grad %x, %w, %dy : (tensor<8x64xf32>, tensor<64x256xf32>, tensor<8x256xf32>) -> (tensor<8x64xf32>, tensor<64x256xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$lhs, Strata_FloatTensor:$rhs,
                       Strata_FloatTensor:$result_grad,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Strata_FloatTensor:$lhs_grad,
                      Strata_FloatTensor:$rhs_grad);
}

def Strata_BiasAddGradOp : Strata_ComputeOp<"bias_add_grad"> {
  let summary = "Gradient of the bias of strata.bias_add";
  let description = [{
    Sums the result gradient over every dimension but the last. (The input
    gradient of `bias_add` is the result gradient itself.)

    ```mlir
    %db = strata.bias_add_grad %dy : (tensor<8x16x64xf32>) -> tensor<64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$result_grad);
  let results = (outs Strata_FloatTensor:$bias_grad);
}

def Strata_ReluGradOp : Strata_ComputeOp<"relu_grad",
    [AllTypesMatch<["output", "result_grad"]>, Strata_InPlace<"1">]> {
  let summary = "Gradient of strata.relu from its output";
  let description = [{
    `result_grad` where the forward output is positive, 0 elsewhere.

    ```mlir
    %dx = strata.relu_grad %y, %dy : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$output, Strata_FloatTensor:$result_grad);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_GeluGradOp : Strata_ComputeOp<"gelu_grad",
    [AllTypesMatch<["input", "result_grad"]>, Strata_InPlace<"1">]> {
  let summary = "Gradient of strata.gelu from its input";
  let description = [{
    ```mlir
    %dx = strata.gelu_grad %x, %dy {approximate = #strata.gelu<tanh>} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$result_grad,
      DefaultValuedAttr<Strata_GeluApproximationAttr,
                        "GeluApproximation::Erf">:$approximate);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_SiluGradOp : Strata_ComputeOp<"silu_grad",
    [AllTypesMatch<["input", "result_grad"]>, Strata_InPlace<"1">]> {
  let summary = "Gradient of strata.silu from its input";
  let description = [{
    dy * s (1 + x (1 - s)) with s = sigmoid(x).

    ```mlir
    %dx = strata.silu_grad %x, %dy : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input,
                       Strata_FloatTensor:$result_grad);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_DropoutGradOp : Strata_ComputeOp<"dropout_grad",
    [Strata_InPlace<"0">]> {
  let summary = "Gradient of strata.dropout";
  let description = [{
    Regenerates the forward mask from `key` (no mask is stored) and applies
    it, with the same 1 / (1 - prob) scaling, to the result gradient.

    ```mlir
    %dx = strata.dropout_grad %dy {key = 3 : i64, prob = 1.000000e-01 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$result_grad, F64Attr:$prob,
                       Strata_DropoutKey:$key);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_SoftmaxGradOp : Strata_ComputeOp<"softmax_grad",
    [AllTypesMatch<["output", "result_grad"]>]> {
  let summary = "Gradient of strata.softmax from its output";
  let description = [{
    y * (dy - sum(y * dy)) over the last dimension; masked positions have
    y = 0 and so get no gradient.

    ```mlir
    %ds = strata.softmax_grad %p, %dp : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$output, Strata_FloatTensor:$result_grad);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_LayerNormGradOp : Strata_ComputeOp<"layer_norm_grad",
    [SameOperandsElementType]> {
  let summary = "Gradients of strata.layer_norm";
  let description = [{
    Recomputes the statistics from `input` and yields the gradients of the
    input, of gamma and of beta.

    ```mlir
    %dx, %dg, %db = strata.layer_norm_grad %x, %g, %dy {epsilon = 1.000000e-05 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$gamma,
                       Strata_FloatTensor:$result_grad,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$gamma_grad,
                      Strata_FloatTensor:$beta_grad);
}

def Strata_RmsNormGradOp : Strata_ComputeOp<"rms_norm_grad",
    [SameOperandsElementType]> {
  let summary = "Gradients of strata.rms_norm";
  let description = [{
    Recomputes the statistic from `input` and yields the gradients of the
    input and of gamma.

    ```mlir
    %dx, %dg = strata.rms_norm_grad %x, %g, %dy {epsilon = 1.000000e-06 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$gamma,
                       Strata_FloatTensor:$result_grad,
                       DefaultValuedAttr<F64Attr, "1e-6">:$epsilon);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$gamma_grad);
}

def Strata_EmbeddingGradOp : Strata_ShapeOp<"embedding_grad"> {
  let summary = "Gradient of the table of strata.embedding";
  let description = [{
    Scatter-adds the rows of the result gradient into a zero table of the
    result type ([V, H]), leaving out the ids equal to `padding_idx`.

    ```mlir
    %dt = strata.embedding_grad %tokens, %dx : (tensor<8x16xi32>, tensor<8x16x64xf32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Strata_IndexTensor:$ids, Strata_FloatTensor:$result_grad,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Strata_FloatTensor:$table_grad);
}

def Strata_ReduceGradOp : Strata_ComputeOp<"reduce_grad",
    [SameOperandsElementType]> {
  let summary = "Gradient of strata.reduce_sum and strata.reduce_mean";
  let description = [{
    `result_grad` (the reduction's result gradient, with or without the
    reduced dimensions kept) broadcast back over dimensions `dims` of
    `input`; with `mean`, divided by the number of elements those dimensions
    hold. Only `input`'s type is read: the result has it, and a pass that
    gives the program a part of its batch retypes the gradient with the
    input (a mean over the batch then divides by the part's rows).

    ```mlir
    %dx = strata.reduce_grad %dl, %x {dims = array<i64: 0, 1>, mean} : (tensor<f32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$result_grad,
                       Strata_FloatTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$mean);
  let results = (outs Strata_FloatTensor:$input_grad);
}

def Strata_CrossEntropyGradOp : Strata_ComputeOp<"cross_entropy_grad",
    [Strata_InPlace<"0">]> {
  let summary = "Gradient of strata.cross_entropy";
  let description = [{
    (softmax(logits) - onehot(labels)) * loss_grad / (number of positions),
    in the logits' type; `loss_grad` has the loss's type. With `classes`
    (as strata.cross_entropy's) the softmax is over the first `classes`
    columns and the padding's gradient is zero. The gradient may be
    written over the logits (a language model's largest activation), which
    the loss's forward has read: each row is read whole before it is
    written.

    ```mlir
    %dl = strata.cross_entropy_grad %logits, %targets, %dloss : (tensor<8x16x256xf32>, tensor<8x16xi32>, tensor<f32>) -> tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$logits, Strata_IndexTensor:$labels,
                       Strata_Scalar:$loss_grad,
                       OptionalAttr<I64Attr>:$classes);
  let results = (outs Strata_FloatTensor:$logits_grad);
  let extraClassDeclaration = [{
    /// `classes`, or the logits' last dimension.
    int64_t getNumClasses() {
      return getClasses().value_or(getLogits().getType().getShape().back());
    }
  }];
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// Optimizer state operands must have the parameter's type; the inferred
// results do. An update with a `guard` operand (the gradients' global norm,
// under loss scaling) changes nothing when the guard is not finite: the
// results equal the parameter and state operands. An update with a
// `master` operand (mixed precision level o2) updates that f32 master
// weight, returned last, and yields the parameter (bf16 or f16) as the
// master rounded; state then has the master's type and the gradient the
// parameter's or the master's. `leading` spells the operands before them.
class Strata_UpdateOp<string mnemonic, string leading>
    : Strata_ComputeOp<mnemonic, [Strata_OptimizerUpdateOpInterface,
                                  AttrSizedOperandSegments]> {
  let assemblyFormat = leading # [{ (`guard` $guard^)? (`master` $master^)?
    attr-dict `:` functional-type(operands, results)}];
}

def Strata_SgdUpdateOp
    : Strata_UpdateOp<"sgd_update", "$param `,` $grad `,` $lr"> {
  let summary = "Stochastic gradient descent step";
  let description = [{
    param - lr * (grad + weight_decay * param).

    ```mlir
    %p1 = strata.sgd_update %p, %g, %lr {weight_decay = 0.0 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<f32>) -> tensor<64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$param, Strata_FloatTensor:$grad,
                       Strata_Scalar:$lr,
                       Optional<0DTensorOf<[F32]>>:$guard,
                       Optional<Strata_FloatTensor>:$master,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay);
  let results = (outs Strata_FloatTensor:$new_param,
                      Optional<Strata_FloatTensor>:$new_master);
}

def Strata_MomentumUpdateOp
    : Strata_UpdateOp<"momentum_update",
                      "$param `,` $grad `,` $velocity `,` $lr"> {
  let summary = "Momentum step (Paddle's Momentum)";
  let description = [{
    v = momentum * v + (grad + weight_decay * param); param -= lr * v, or
    with Nesterov param -= lr * (grad + momentum * v).

    ```mlir
    %p1, %v1 = strata.momentum_update %p, %g, %v, %lr {momentum = 0.9 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>) -> (tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$param, Strata_FloatTensor:$grad,
                       Strata_FloatTensor:$velocity, Strata_Scalar:$lr,
                       Optional<0DTensorOf<[F32]>>:$guard,
                       Optional<Strata_FloatTensor>:$master,
                       DefaultValuedAttr<F64Attr, "0.9">:$momentum,
                       UnitAttr:$use_nesterov,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay);
  let results = (outs Strata_FloatTensor:$new_param,
                      Strata_FloatTensor:$new_velocity,
                      Optional<Strata_FloatTensor>:$new_master);
}

class Strata_AdamFamilyOp<string mnemonic, string defaultDecay>
    : Strata_UpdateOp<mnemonic, "$param `,` $grad `,` $moment1 `,` $moment2 "
                                "`,` $lr `,` $step"> {
  let arguments = (ins Strata_FloatTensor:$param, Strata_FloatTensor:$grad,
                       Strata_FloatTensor:$moment1, Strata_FloatTensor:$moment2,
                       Strata_Scalar:$lr, Strata_StepCounter:$step,
                       Optional<0DTensorOf<[F32]>>:$guard,
                       Optional<Strata_FloatTensor>:$master,
                       DefaultValuedAttr<F64Attr, "0.9">:$beta1,
                       DefaultValuedAttr<F64Attr, "0.999">:$beta2,
                       DefaultValuedAttr<F64Attr, "1e-8">:$epsilon,
                       DefaultValuedAttr<F64Attr, defaultDecay>:$weight_decay);
  let results = (outs Strata_FloatTensor:$new_param,
                      Strata_FloatTensor:$new_moment1,
                      Strata_FloatTensor:$new_moment2,
                      Optional<Strata_FloatTensor>:$new_master);
}

def Strata_AdamUpdateOp
    : Strata_AdamFamilyOp<"adam_update", "0.0"> {
  let summary = "Adam step with L2 weight decay added to the gradient";
  let description = [{
    `step` is the 1-based number of this update, used for bias correction.

    ```mlir
    %p1, %m1, %v1 = strata.adam_update %p, %g, %m, %v, %lr, %step : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
}

def Strata_AdamWUpdateOp
    : Strata_AdamFamilyOp<"adamw_update", "0.01"> {
  let summary = "AdamW step (decoupled weight decay, Paddle default 0.01)";
  let description = [{
    param *= (1 - lr * weight_decay) before the Adam step.

    ```mlir
    %p1, %m1, %v1 = strata.adamw_update %p, %g, %m, %v, %lr, %step {weight_decay = 0.01 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
}

def Strata_LambUpdateOp
    : Strata_AdamFamilyOp<"lamb_update", "0.01"> {
  let summary = "LAMB step (layer-wise trust ratio; Paddle default decay 0.01)";
  let description = [{
    r = m_hat / (sqrt(v_hat) + epsilon) + weight_decay * param;
    param -= lr * (||param|| / ||r||) * r (trust ratio 1 when a norm is 0).
    Paddle's default epsilon for LAMB is 1e-6: builders set it explicitly.

    ```mlir
    %p1, %m1, %v1 = strata.lamb_update %p, %g, %m, %v, %lr, %step {epsilon = 1.0e-06 : f64} : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>) -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
}

def Strata_LarsUpdateOp
    : Strata_UpdateOp<"lars_update", "$param `,` $grad `,` $velocity `,` $lr"> {
  let summary = "LARS momentum step (layer-wise adaptive rate)";
  let description = [{
    local_lr = lr * lars_coeff * ||param|| / (||grad|| + weight_decay *
    ||param|| + epsilon); v = momentum * v + local_lr * (grad + weight_decay
    * param); param -= v. Defaults as Paddle's LarsMomentum.

    ```mlir
    %p1, %v1 = strata.lars_update %p, %g, %v, %lr : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>) -> (tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$param, Strata_FloatTensor:$grad,
                       Strata_FloatTensor:$velocity, Strata_Scalar:$lr,
                       Optional<0DTensorOf<[F32]>>:$guard,
                       Optional<Strata_FloatTensor>:$master,
                       DefaultValuedAttr<F64Attr, "0.9">:$momentum,
                       DefaultValuedAttr<F64Attr, "0.001">:$lars_coeff,
                       DefaultValuedAttr<F64Attr, "0.0005">:$weight_decay,
                       DefaultValuedAttr<F64Attr, "0.0">:$epsilon);
  let results = (outs Strata_FloatTensor:$new_param,
                      Strata_FloatTensor:$new_velocity,
                      Optional<Strata_FloatTensor>:$new_master);
}

def Strata_GlobalNormOp : Strata_ComputeOp<"global_norm"> {
  let summary = "L2 norm of a list of tensors taken together";
  let description = [{
    sqrt(sum over all tensors and elements of x^2), in f32.

    ```mlir
    %n = strata.global_norm %g0, %g1 : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Strata_FloatTensor>:$inputs);
  let results = (outs 0DTensorOf<[F32]>:$norm);
}

def Strata_ClipByGlobalNormOp : Strata_ComputeOp<"clip_by_global_norm",
    [Strata_InPlaceEach]> {
  let summary = "Scales gradients so that their global norm is at most max_norm";
  let description = [{
    Each input times max_norm / max(norm, max_norm), where `norm` is their
    global norm (computed by `strata.global_norm`, possibly all-reduced over
    shards first). A result may take its input's buffer (the memory plan
    does so when the input is not read later); within the bound such a
    gradient is left as it is.

    ```mlir
    %c0, %c1 = strata.clip_by_global_norm %g0, %g1, %n {max_norm = 1.0 : f64} : (tensor<64x64xf32>, tensor<64xf32>, tensor<f32>) -> (tensor<64x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Variadic<Strata_FloatTensor>:$inputs,
                       0DTensorOf<[F32]>:$norm, F64Attr:$max_norm);
  let results = (outs Variadic<Strata_FloatTensor>:$results);
}

def Strata_IsFiniteOp : Strata_ComputeOp<"is_finite"> {
  let summary = "1 when a scalar is finite, else 0";
  let description = [{
    Under loss scaling, the step counter advances by `is_finite` of the
    gradients' global norm: a skipped step does not count.

    ```mlir
    %ok = strata.is_finite %norm : (tensor<f32>) -> tensor<i64>
    ```
  }];
  let arguments = (ins 0DTensorOf<[F32]>:$input);
  let results = (outs Strata_StepCounter:$result);
}

def Strata_UpdateLossScalingOp : Strata_ComputeOp<"update_loss_scaling"> {
  let summary = "Paddle's dynamic loss-scaling rule";
  let description = [{
    From the gradients' global norm (not finite: the step overflowed) and
    the loss scale with its counters of good and bad steps: on an overflow,
    good = 0 and bad += 1, and when bad reaches `decr_every_n_nan_or_inf`
    the scale is multiplied by `decr_ratio` (at least 1) and bad = 0; on a
    finite step, bad = 0 and good += 1, and when good reaches
    `incr_every_n_steps` the scale is multiplied by `incr_ratio` (when the
    product is finite) and good = 0.

    ```mlir
    %s1, %g1, %b1 = strata.update_loss_scaling %norm, %s, %g, %b {decr_every_n_nan_or_inf = 2 : i64, decr_ratio = 5.000000e-01 : f64, incr_every_n_steps = 1000 : i64, incr_ratio = 2.000000e+00 : f64} : (tensor<f32>, tensor<f32>, tensor<i64>, tensor<i64>) -> (tensor<f32>, tensor<i64>, tensor<i64>)
    ```
  }];
  let arguments = (ins 0DTensorOf<[F32]>:$norm, 0DTensorOf<[F32]>:$scale,
                       Strata_StepCounter:$good, Strata_StepCounter:$bad,
                       I64Attr:$incr_every_n_steps,
                       I64Attr:$decr_every_n_nan_or_inf, F64Attr:$incr_ratio,
                       F64Attr:$decr_ratio);
  let results = (outs 0DTensorOf<[F32]>:$new_scale,
                      Strata_StepCounter:$new_good,
                      Strata_StepCounter:$new_bad);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

class Strata_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Strata_Op<mnemonic, !listconcat(traits, [
          DeclareOpInterfaceMethods<SymbolUserOpInterface>,
          Strata_CollectiveOpInterface,
          MemoryEffects<[MemRead, MemWrite]>])> {
  let assemblyFormat =
      "operands attr-dict `:` functional-type(operands, results)";
}

def Strata_AllReduceOp : Strata_CollectiveOp<"all_reduce"> {
  let summary = "Reduces a tensor across a group; every rank gets the result";
  let description = [{
    ```
    rank 0: a0 ─┐
    rank 1: a1 ─┼─> a0 + a1 + a2 on every rank
    rank 2: a2 ─┘
    ```

    ```mlir
    %g2, %t1 = strata.all_reduce %g, %t0 {group = @dp, kind = #strata.reduce<mean>} : (tensor<64xf32>, !strata.token) -> (tensor<64xf32>, !strata.token)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_TokenType:$token,
                       FlatSymbolRefAttr:$group,
                       DefaultValuedAttr<Strata_ReduceKindAttr,
                                         "ReduceKind::Sum">:$kind);
  let results = (outs Strata_FloatTensor:$result, Strata_TokenType:$out_token);
}

def Strata_ReduceScatterOp : Strata_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduces across a group and leaves each rank one slice";
  let description = [{
    Dimension `dim` of the input is split into group-size equal slices; rank
    r of the group receives the reduction of slice r.

    ```mlir
    %s, %t1 = strata.reduce_scatter %g, %t0 {group = @dp} : (tensor<64x8xf32>, !strata.token) -> (tensor<32x8xf32>, !strata.token)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_TokenType:$token,
                       FlatSymbolRefAttr:$group,
                       DefaultValuedAttr<Strata_ReduceKindAttr,
                                         "ReduceKind::Sum">:$kind,
                       DefaultValuedAttr<I64Attr, "0">:$dim);
  let results = (outs Strata_FloatTensor:$result, Strata_TokenType:$out_token);
  let hasVerifier = 1;
}

def Strata_AllGatherOp : Strata_CollectiveOp<"all_gather"> {
  let summary = "Concatenates every rank's slice along a dimension";
  let description = [{
    ```mlir
    %p, %t1 = strata.all_gather %s, %t0 {group = @dp} : (tensor<32x8xf32>, !strata.token) -> (tensor<64x8xf32>, !strata.token)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_TokenType:$token,
                       FlatSymbolRefAttr:$group,
                       DefaultValuedAttr<I64Attr, "0">:$dim);
  let results = (outs Strata_FloatTensor:$result, Strata_TokenType:$out_token);
  let hasVerifier = 1;
}

def Strata_BroadcastOp : Strata_CollectiveOp<"broadcast",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "Copies the root's tensor to every rank of the group";
  let description = [{
    `root` is a position in the rank list of `group` that holds this rank
    (with lists `[0, 1], [2, 3]`, root 1 is rank 1 for ranks 0 and 1, rank
    3 for ranks 2 and 3). `strata-sharding` broadcasts each updated
    parameter from its owner this way.

    ```mlir
    %p, %t1 = strata.broadcast %p0, %t0 {group = @dp, root = 0 : i64} : (tensor<64xf32>, !strata.token) -> (tensor<64xf32>, !strata.token)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_TokenType:$token,
                       FlatSymbolRefAttr:$group, I64Attr:$root);
  let results = (outs Strata_FloatTensor:$result, Strata_TokenType:$out_token);
}

def Strata_SendOp : Strata_CollectiveOp<"send"> {
  let summary = "Sends a tensor to a peer of the group";
  let description = [{
    Matched by a `strata.recv` with the same type on the peer.

    ```mlir
    %t1 = strata.send %act, %t0 {group = @pp, peer = 1 : i64} : (tensor<8x16x64xf32>, !strata.token) -> !strata.token
    ```
  }];
  let arguments = (ins Strata_AnyTensor:$input, Strata_TokenType:$token,
                       FlatSymbolRefAttr:$group, I64Attr:$peer);
  let results = (outs Strata_TokenType:$out_token);
}

def Strata_RecvOp : Strata_CollectiveOp<"recv"> {
  let summary = "Receives a tensor of a static type from a peer of the group";
  let description = [{
    The token operand orders the receive (it has no data input).

    ```mlir
    %act, %t1 = strata.recv %t0 {group = @pp, peer = 0 : i64} : (!strata.token) -> (tensor<8x16x64xf32>, !strata.token)
    ```
  }];
  let arguments = (ins Strata_TokenType:$token, FlatSymbolRefAttr:$group,
                       I64Attr:$peer);
  let results = (outs Strata_AnyTensor:$result, Strata_TokenType:$out_token);
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

def Strata_FusedGemmEpilogueOp : Strata_ComputeOp<"fused_gemm_epilogue",
    [SameOperandsElementType]> {
  let summary = "matmul + bias [+ activation] as one GEMM";
  let description = [{
    relu/gelu(x @ w + bias), with `x` [..., K], `w` [K, N] and `bias` [N]
    (the cuBLASLt / oneDNN epilogue); with `transpose_weight`, `w` is [N, K]
    and read transposed (PyTorch's `nn.Linear` layout). With `with_aux` a
    second result holds the pre-activation value that the fused gradient
    needs.

    ```mlir
    %y, %pre = strata.fused_gemm_epilogue %x, %w, %b {activation = #strata.activation<gelu_tanh>, with_aux} : (tensor<8x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> (tensor<8x256xf32>, tensor<8x256xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$weight,
                       Strata_FloatTensor:$bias,
                       DefaultValuedAttr<Strata_ActivationAttr,
                                         "Activation::None">:$activation,
                       UnitAttr:$with_aux, UnitAttr:$transpose_weight);
  let results = (outs Strata_FloatTensor:$result,
                      Optional<Strata_FloatTensor>:$aux);
}

def Strata_FusedGemmEpilogueGradOp
    : Strata_ComputeOp<"fused_gemm_epilogue_grad", [SameOperandsElementType]> {
  let summary = "Gradients of strata.fused_gemm_epilogue";
  let description = [{
    Yields (d input, d weight, d bias). With an activation, the
    pre-activation `aux` of the forward op is required and the activation
    gradient is applied first. `transpose_weight` as on the forward op.

    ```mlir
    %dx, %dw, %db = strata.fused_gemm_epilogue_grad %x, %w, %dy : (tensor<8x64xf32>, tensor<64x256xf32>, tensor<8x256xf32>) -> (tensor<8x64xf32>, tensor<64x256xf32>, tensor<256xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$weight,
                       Strata_FloatTensor:$result_grad,
                       Optional<Strata_FloatTensor>:$aux,
                       DefaultValuedAttr<Strata_ActivationAttr,
                                         "Activation::None">:$activation,
                       UnitAttr:$transpose_weight);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$weight_grad,
                      Strata_FloatTensor:$bias_grad);
}

def Strata_FusedDropoutAddOp : Strata_ComputeOp<"fused_dropout_add",
    [AllTypesMatch<["input", "residual"]>, Strata_InPlace<"0, 1">]> {
  let summary = "dropout(x) + y in one pass";
  let description = [{
    Same mask as `strata.dropout` with the same `key`.

    ```mlir
    %z = strata.fused_dropout_add %x, %res {key = 3 : i64, prob = 1.000000e-01 : f64} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$input, Strata_FloatTensor:$residual,
                       F64Attr:$prob, Strata_DropoutKey:$key);
  let results = (outs Strata_FloatTensor:$result);
}

def Strata_FusedDropoutAddGradOp : Strata_ComputeOp<"fused_dropout_add_grad"> {
  let summary = "Gradients of strata.fused_dropout_add";
  let description = [{
    (dropout_grad(dz), dz) from one read of dz.

    ```mlir
    %dx, %dres = strata.fused_dropout_add_grad %dz {key = 3 : i64, prob = 1.000000e-01 : f64} : (tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$result_grad, F64Attr:$prob,
                       Strata_DropoutKey:$key);
  let results = (outs Strata_FloatTensor:$input_grad,
                      Strata_FloatTensor:$residual_grad);
}

def Strata_AttentionOp : Strata_ComputeOp<"attention",
    [SameOperandsElementType]> {
  let summary = "Scaled dot-product attention in one op (flash-style)";
  let description = [{
    For each head: softmax(scale * query @ key^T) @ value, with `query`
    [..., S, H, D], `key` [..., T, Hkv, D] and `value` [..., T, Hkv, Dv]
    (the leading, batch, dimensions equal; H heads of size D). Hkv divides
    H: query head h reads key and value head h / (H / Hkv), grouped-query
    attention's sharing of keys and values without repeating them (Hkv = H
    for multi-head attention). The layout is that of
    Paddle's flash_attention, a projection's output reshaped, so that no
    transpose to [..., H, S, D] is needed before or after it. The result is
    [..., S, H, Dv]. With `causal`, S = T and key j is masked for query i
    when j > i. The second result is the log-sum-exp of each query's scaled
    scores ([..., H, S], f32, or f64 for f64 attention): the gradient
    recomputes the probabilities from it, so the [S, T] matrix of
    probabilities is never stored. With `dropout` p > 0, the probabilities
    go through inverted dropout before their product with the values,
    with the mask strata.dropout {key = dropout_key, prob = p} draws for
    the [..., H, S, T] tensor of probabilities (element ((b H + h) S + i)
    T + j of micro-batch m at m n + that index, n the elements of the
    tensor), so the fused op trains the unfused chain's losses.
    `strata-attention-fusion` makes it from the unfused chain of ops.

    ```mlir
    %o, %lse = strata.attention %q, %k, %v {causal, scale = 1.250000e-01 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$query, Strata_FloatTensor:$key,
                       Strata_FloatTensor:$value, F64Attr:$scale,
                       UnitAttr:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                       DefaultValuedAttr<Strata_DropoutKey, "0">:$dropout_key);
  let results = (outs Strata_FloatTensor:$result,
                      Strata_FloatTensor:$logsumexp);
}

def Strata_AttentionGradOp : Strata_ComputeOp<"attention_grad"> {
  let summary = "Gradients of strata.attention";
  let description = [{
    Yields (d query, d key, d value) from the forward op's operands, its
    result and log-sum-exp, and the result's gradient; `scale`, `causal`,
    `dropout` and `dropout_key` as on the forward op (the same mask). A key
    or value head's gradient sums over the query heads that read it.

    ```mlir
    %dq, %dk, %dv = strata.attention_grad %q, %k, %v, %o, %lse, %do {causal, scale = 1.250000e-01 : f64} : (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x4x16xf32>, tensor<2x16x4x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>)
    ```
  }];
  let arguments = (ins Strata_FloatTensor:$query, Strata_FloatTensor:$key,
                       Strata_FloatTensor:$value, Strata_FloatTensor:$result,
                       Strata_FloatTensor:$logsumexp,
                       Strata_FloatTensor:$result_grad, F64Attr:$scale,
                       UnitAttr:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                       DefaultValuedAttr<Strata_DropoutKey, "0">:$dropout_key);
  let results = (outs Strata_FloatTensor:$query_grad,
                      Strata_FloatTensor:$key_grad,
                      Strata_FloatTensor:$value_grad);
}

#endif // STRATA_OPS_TD
