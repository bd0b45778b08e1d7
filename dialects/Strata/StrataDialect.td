//===- StrataDialect.td - Strata dialect definition --------*- tablegen -*-===//
//
// The dialect, its enums, attributes and types.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECT_TD
#define STRATA_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Strata_Dialect : Dialect {
  let name = "strata";
  let cppNamespace = "::strata";
  let summary = "Training programs for distributed deep-learning compilation";
  let description = [{
    The `strata` dialect expresses one training step of a model: parameters
    and their initialisers, the forward computation and its loss, the
    backward ops that autodiff appends, optimizer updates, collectives with
    explicit groups and ordering tokens, and the fused ops that strategy
    passes introduce.

    All values are statically shaped tensors (builtin `tensor<...>` types);
    every op is value-semantic except the collectives, which have a
    communication side effect and are ordered by `!strata.token` values.

    Passes rely on discardable attributes that the dialect verifies on any
    op that carries them:

    * `strata.role = #strata.role<forward|backward|optimizer|communication>`
    * `strata.stage = N : i64` — the pipeline stage (N >= 0)
    * `strata.micro_batch = N : i64` — the micro-batch (N >= 0)
    * `strata.grad_of = @param` — the `strata.param` this value is the
      gradient of (on the op producing the gradient)
    * `strata.layer = "h3"` — the model layer an op belongs to, as written
      by the program's author; recompute segments and pipeline placement
      refer to layers by this name
    * `strata.amp_guard` — a unit attribute: the op is under a mixed
      precision guard (Paddle's `fp16_guard()`), which `strata-amp`'s
      `fp16-guard` limits level o2 to
    * `strata.bucket = N : i64` — the gradient bucket of a collective
      (N >= 0); a runtime may fuse the collectives of one bucket
    * `strata.job = "F3"` — the pipeline job an op runs in (`strata-pipeline`:
      F, B or W and the micro-batch, `.c` for chunk c under VPP)
    * `strata.schedule = ["F0 F1 B0 ...", ...]` — on a module, every
      pipeline stage's job list (`strata-pipeline`)
    * `strata.passes = ["strata-autodiff", ...]` — on a module, the passes
      that changed the program's form, in the order they ran; a pass refuses
      a program that has been through itself or a pass it must precede
    * `strata.rank = N : i64` — on a module, the rank whose program
      `strata-sharding` or `strata-pipeline` made (N >= 0)

    On a step function's arguments `strata.name = "features"` names an
    input (a non-empty string); on its results `strata.grad_of = @param`
    marks a gradient. Any other `strata.` attribute, and an attribute that
    an op neither has nor takes from another dialect, is refused.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr llvm::StringLiteral kRoleAttrName = "strata.role";
    /// On a step function's argument: the input's name ("features").
    static constexpr llvm::StringLiteral kInputNameAttrName = "strata.name";
    static constexpr llvm::StringLiteral kPassesAttrName = "strata.passes";
    static constexpr llvm::StringLiteral kRankAttrName = "strata.rank";
    static constexpr llvm::StringLiteral kStageAttrName = "strata.stage";
    static constexpr llvm::StringLiteral kMicroBatchAttrName =
        "strata.micro_batch";
    static constexpr llvm::StringLiteral kGradOfAttrName = "strata.grad_of";
    static constexpr llvm::StringLiteral kLayerAttrName = "strata.layer";
    static constexpr llvm::StringLiteral kAmpGuardAttrName = "strata.amp_guard";
    /// On the loss-scale state of mixed precision: how it is updated
    /// (dynamic, incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio,
    /// decr_ratio) and its counters of good and bad steps (good, bad).
    static constexpr llvm::StringLiteral kLossScalingAttrName =
        "strata.loss_scaling";
    static constexpr llvm::StringLiteral kJobAttrName = "strata.job";
    static constexpr llvm::StringLiteral kBucketAttrName = "strata.bucket";
    /// On a step function: the micro-batches per rank (gradient merge) and
    /// the data-parallel shards of the batch; together they place each
    /// micro-batch in the global batch (dropout masks).
    static constexpr llvm::StringLiteral kMicroBatchesAttrName =
        "strata.micro_batches";
    static constexpr llvm::StringLiteral kShardsAttrName = "strata.shards";

  private:
    void registerAttributes();
    void registerTypes();
  public:
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Strata_Role : I32EnumAttr<"Role", "role of an op in a training step", [
    I32EnumAttrCase<"Forward", 0, "forward">,
    I32EnumAttrCase<"Backward", 1, "backward">,
    I32EnumAttrCase<"Optimizer", 2, "optimizer">,
    I32EnumAttrCase<"Communication", 3, "communication">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "GELU formula", [
    I32EnumAttrCase<"Erf", 0, "erf">,
    I32EnumAttrCase<"Tanh", 1, "tanh">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_Activation : I32EnumAttr<"Activation",
    "activation applied by a GEMM epilogue", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Relu", 1, "relu">,
    I32EnumAttrCase<"GeluTanh", 2, "gelu_tanh">,
    I32EnumAttrCase<"GeluErf", 3, "gelu_erf">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_ReduceKind : I32EnumAttr<"ReduceKind",
    "reduction applied by a collective", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Mean", 1, "mean">,
    I32EnumAttrCase<"Max", 2, "max">,
    I32EnumAttrCase<"Min", 3, "min">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_GridAxis : I32EnumAttr<"GridAxis",
    "an axis of the rank grid, outermost first", [
    I32EnumAttrCase<"Pp", 0, "pp">,
    I32EnumAttrCase<"Dp", 1, "dp">,
    I32EnumAttrCase<"Sharding", 2, "sharding">,
    I32EnumAttrCase<"Mp", 3, "mp">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_LrScheduleKind : I32EnumAttr<"LrScheduleKind",
    "learning-rate schedule", [
    I32EnumAttrCase<"Constant", 0, "constant">,
    I32EnumAttrCase<"LinearWarmup", 1, "linear_warmup">,
    I32EnumAttrCase<"Cosine", 2, "cosine">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

def Strata_InitKind : I32EnumAttr<"InitKind", "parameter initialiser", [
    I32EnumAttrCase<"Zeros", 0, "zeros">,
    I32EnumAttrCase<"Ones", 1, "ones">,
    I32EnumAttrCase<"Normal", 2, "normal">,
    I32EnumAttrCase<"Uniform", 3, "uniform">,
    I32EnumAttrCase<"Constant", 4, "constant">,
    I32EnumAttrCase<"Master", 5, "master">]> {
  let cppNamespace = "::strata";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Strata_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Strata_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Strata_RoleAttr : EnumAttr<Strata_Dialect, Strata_Role, "role"> {
  let assemblyFormat = "`<` $value `>`";
}
def Strata_GeluApproximationAttr
    : EnumAttr<Strata_Dialect, Strata_GeluApproximation, "gelu"> {
  let assemblyFormat = "`<` $value `>`";
}
def Strata_ActivationAttr
    : EnumAttr<Strata_Dialect, Strata_Activation, "activation"> {
  let assemblyFormat = "`<` $value `>`";
}
def Strata_ReduceKindAttr
    : EnumAttr<Strata_Dialect, Strata_ReduceKind, "reduce"> {
  let assemblyFormat = "`<` $value `>`";
}

def Strata_LrScheduleKindAttr
    : EnumAttr<Strata_Dialect, Strata_LrScheduleKind, "lr"> {
  let assemblyFormat = "`<` $value `>`";
}

def Strata_InitAttr : Strata_Attr<"Init", "init"> {
  let summary = "How a parameter is initialised";
  let description = [{
    `#strata.init<zeros>`, `#strata.init<ones>`, `#strata.init<normal, S>`
    (mean 0, standard deviation S) or `#strata.init<uniform, S>` (uniform in
    [-S, S]), S an f64 value such as `2.000000e-02`, or
    `#strata.init<constant, V>` (every element V: the loss scale of mixed
    precision starts so), or `#strata.init<master>`: an f32 state holding
    the full-precision value of the low-precision parameter named by its
    `of` (mixed precision's master weight), which starts as that parameter's
    initial value before rounding and which checkpoints store under the
    parameter's name. The runtime draws the random values from the
    counter-based RNG keyed by the run's seed and the parameter's name, so
    initial weights do not depend on the number of ranks or the order of
    parameters.
  }];
  let parameters = (ins "InitKind":$kind,
                        OptionalParameter<"::mlir::FloatAttr">:$scale);
  let assemblyFormat = "`<` $kind (`,` $scale^)? `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Strata_TokenType : TypeDef<Strata_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "Orders collectives";
  let description = [{
    Every collective consumes a token and produces a new one. The chain of
    tokens fixes the order of communication in the program, so that no
    transformation can reorder a send/recv pair into a deadlock.
  }];
}

#endif // STRATA_DIALECT_TD
