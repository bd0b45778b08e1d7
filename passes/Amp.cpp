//===- Amp.cpp - Mixed precision: per-op compute types and casts ----------===//
//
// One walk over the forward step in program order. Each op's compute type
// follows from its list (white: the low type, black: f32) or, for the rest,
// from its inputs (level o1) or the low type (level o2, whose parameters
// are retyped first); operands are cast to it and the results retyped.
// Casts are shared per (value, type) and sit before their first reader,
// with its location and layer.
//
//===----------------------------------------------------------------------===//

#include "strata/Passes/Amp.h"
#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <limits>

namespace strata {
#define GEN_PASS_DEF_STRATAAMP
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

constexpr llvm::StringLiteral kListable[] = {"matmul",
                                             "add",
                                             "sub",
                                             "mul",
                                             "div",
                                             "scale",
                                             "bias_add",
                                             "relu",
                                             "gelu",
                                             "silu",
                                             "rsqrt",
                                             "tanh",
                                             "dropout",
                                             "softmax",
                                             "layer_norm",
                                             "rms_norm",
                                             "embedding",
                                             "reshape",
                                             "transpose",
                                             "reduce_sum",
                                             "reduce_mean",
                                             "broadcast_to",
                                             "sum_to",
                                             "slice",
                                             "pad",
                                             "concat",
                                             "cross_entropy",
                                             "fused_gemm_epilogue",
                                             "fused_dropout_add",
                                             "attention"};
// Paddle's white list (matmul, the fused GEMM epilogue) and black list
// (softmax, layer norm, losses, sums and means), plus RMS norm and rsqrt
// (an RMSNorm written out): its statistics stay in f32 like layer norm's. Fused
// attention is white, as Paddle's flash attention (16-bit only): its products
// read the low type, its softmax and log-sum-exp are f32 inside the kernel.
constexpr llvm::StringLiteral kWhite[] = {"matmul", "fused_gemm_epilogue",
                                          "attention"};
constexpr llvm::StringLiteral kBlack[] = {
    "softmax",    "layer_norm",  "rms_norm", "cross_entropy",
    "reduce_sum", "reduce_mean", "rsqrt"};
// Ops whose kernels read any float type, compute in f32 and return f32
// (the loss): where the lists decide f32 they read the low type as it is,
// since a widening cast before them would change nothing but the bytes
// moved.
constexpr llvm::StringLiteral kComputesInF32[] = {"cross_entropy"};
// Level o2 computes layer norm and RMS norm in the low type, as Paddle's pure
// low precision does (its statistics accumulate in f32 inside the kernel, and
// its output feeds GEMMs that read the low type anyway).
constexpr llvm::StringLiteral kBlackO2[] = {
    "softmax", "cross_entropy", "reduce_sum", "reduce_mean", "rsqrt"};

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

Type elementOf(Value v) { return tensorType(v).getElementType(); }

struct AmpPass : public strata::impl::StrataAmpBase<AmpPass> {
  using StrataAmpBase::StrataAmpBase;

  void runOnOperation() override;

  /// `v` in element type `type`: itself, or a (shared) cast before `user`.
  Value castTo(Value v, Type type, Operation *user) {
    if (elementOf(v) == type)
      return v;
    Value &cached = casts[{v, type}];
    if (!cached) {
      OpBuilder b(user);
      auto cast =
          CastOp::create(b, user->getLoc(), tensorType(v).clone(type), v);
      // The reader's layer (and stage), for recompute and the pipeline.
      for (StringRef name :
           {StrataDialect::kLayerAttrName, StrataDialect::kStageAttrName,
            StrataDialect::kMicroBatchAttrName})
        if (Attribute a = user->getAttr(name))
          cast->setAttr(name, a);
      cached = cast;
    }
    return cached;
  }

  /// Checks the loss-scaling options (float16) before anything changes.
  LogicalResult checkLossScaling(ModuleOp module);
  /// Declares @loss_scale and its counters (float16).
  void declareLossScale(ModuleOp module);

  DenseMap<std::pair<Value, Type>, Value> casts;
};

LogicalResult AmpPass::checkLossScaling(ModuleOp module) {
  auto fail = [&](const Twine &message) {
    return emitError(module.getLoc()) << "strata-amp: " << message;
  };
  // (The scale is an f32 state.)
  if (!(initLossScaling <= double(std::numeric_limits<float>::max())) ||
      !(initLossScaling >= 1.0))
    return fail("init-loss-scaling must be at least 1 (a scale below 1 "
                "pushes float16 gradients toward underflow) and at most the "
                "largest f32 (3.4e38)");
  if (incrEveryNSteps < 1 || decrEveryNNanOrInf < 1)
    return fail("incr-every-n-steps and decr-every-n-nan-or-inf must be >= 1");
  if (!(incrRatio > 1.0) || !std::isfinite(double(incrRatio)) ||
      !(decrRatio > 0.0 && decrRatio < 1.0))
    return fail("incr-ratio must be > 1 and finite, and decr-ratio in (0, 1)");
  if (findLossScaleState(module))
    return fail("the program already declares a loss scale");
  return success();
}

void AmpPass::declareLossScale(ModuleOp module) {
  OpBuilder b(module.getContext());
  if (Operation *last = lastDeclaration(module))
    b.setInsertionPointAfter(last);
  else
    b.setInsertionPointToStart(module.getBody());
  SymbolTable symbols(module);
  auto declare = [&](StringRef name, RankedTensorType type, InitAttr init) {
    auto state = StateOp::create(b, module.getLoc(), name, type, init,
                                 FlatSymbolRefAttr());
    symbols.insert(state); // renames on a clash
    b.setInsertionPointAfter(state);
    return state;
  };
  auto f32 = RankedTensorType::get({}, b.getF32Type());
  auto i64 = RankedTensorType::get({}, b.getI64Type());
  StateOp scale = declare(kLossScaleStateName, f32,
                          InitAttr::get(b.getContext(), InitKind::Constant,
                                        b.getF64FloatAttr(initLossScaling)));
  InitAttr zeros = InitAttr::get(b.getContext(), InitKind::Zeros, FloatAttr());
  StateOp good = declare((scale.getSymName() + ".good").str(), i64, zeros);
  StateOp bad = declare((scale.getSymName() + ".bad").str(), i64, zeros);
  SmallVector<NamedAttribute> config = {
      b.getNamedAttr("incr_every_n_steps",
                     b.getI64IntegerAttr(incrEveryNSteps)),
      b.getNamedAttr("decr_every_n_nan_or_inf",
                     b.getI64IntegerAttr(decrEveryNNanOrInf)),
      b.getNamedAttr("incr_ratio", b.getF64FloatAttr(incrRatio)),
      b.getNamedAttr("decr_ratio", b.getF64FloatAttr(decrRatio)),
      b.getNamedAttr("good", FlatSymbolRefAttr::get(good.getSymNameAttr())),
      b.getNamedAttr("bad", FlatSymbolRefAttr::get(bad.getSymNameAttr()))};
  if (useDynamicLossScaling)
    config.push_back(b.getNamedAttr("dynamic", b.getUnitAttr()));
  scale->setAttr(StrataDialect::kLossScalingAttrName,
                 b.getDictionaryAttr(config));
}

void AmpPass::runOnOperation() {
  ModuleOp module = getOperation();
  casts.clear();
  auto fail = [&](const Twine &message) {
    emitError(module.getLoc()) << "strata-amp: " << message;
    signalPassFailure();
  };
  if (level != "o1" && level != "o2")
    return fail("level must be o1 or o2, got '" + level + "'");
  Type low;
  if (dtype == "bfloat16")
    low = BFloat16Type::get(&getContext());
  else if (dtype == "float16")
    low = Float16Type::get(&getContext());
  else
    return fail("dtype must be float16 or bfloat16, got '" + dtype + "'");
  Type f32 = Float32Type::get(&getContext());

  // The lists: defaults, then the custom entries, which override.
  const bool o2 = level == "o2";
  llvm::StringSet<> white, black;
  for (StringRef n : kWhite)
    white.insert(n);
  for (StringRef n : o2 ? ArrayRef(kBlackO2) : ArrayRef(kBlack))
    black.insert(n);
  for (auto [list, name, other] :
       {std::tuple(&customWhiteList, "custom-white-list", &customBlackList),
        std::tuple(&customBlackList, "custom-black-list", &customWhiteList)})
    for (const std::string &n : *list) {
      if (!llvm::is_contained(kListable, n)) {
        std::string hint;
        unsigned best = 3;
        for (StringRef candidate : kListable)
          if (unsigned d = candidate.edit_distance(n); d < best) {
            best = d;
            hint = ("; did you mean '" + candidate + "'?").str();
          }
        return fail(Twine(name) + " names '" + n +
                    "', which is not an op mixed precision decides" + hint);
      }
      if (llvm::is_contained(*other, n))
        return fail("'" + n +
                    "' is in both custom-white-list and custom-black-list");
    }
  for (const std::string &n : customWhiteList) {
    white.insert(n);
    black.erase(n);
  }
  for (const std::string &n : customBlackList) {
    black.insert(n);
    white.erase(n);
  }
  if (fp16Guard && !o2)
    return fail("fp16-guard applies to level o2 (level o1 decides per op by "
                "the lists)");

  FailureOr<func::FuncOp> step = getStepFunction(module, "strata-amp");
  if (failed(step))
    return signalPassFailure();
  func::FuncOp func = *step;
  if (returnsGradients(func))
    return fail("'" + func.getSymName() +
                "' already has its backward: mixed precision rewrites the "
                "forward program and runs before strata-autodiff");
  if (failed(checkRunsBefore(module, "strata-amp",
                             {"strata-amp", "strata-stage-split",
                              "strata-autodiff", "strata-gradient-merge",
                              "strata-data-parallel", "strata-optimizer",
                              "strata-sharding", "strata-pipeline"})))
    return signalPassFailure();

  // Mixed precision lowers an f32 program: an f64 one (the reference
  // backend's) would have its black-list ops cut to f32 and a loss scale
  // of another type than its loss.
  bool f64 = func.walk([](Operation *op) {
                   for (Type t : op->getResultTypes())
                     if (auto tensor = dyn_cast<RankedTensorType>(t);
                         tensor && tensor.getElementType().isF64())
                       return WalkResult::interrupt();
                   return WalkResult::advance();
                 })
                 .wasInterrupted();
  if (f64)
    return fail("'" + func.getSymName() +
                "' computes in f64: mixed precision lowers f32 programs "
                "(f64 trains on the reference backend without it)");

  // Under fp16-guard, level o2 applies to the guarded ops only.
  auto guarded = [&](Operation *op) {
    return !fp16Guard || op->hasAttr(StrataDialect::kAmpGuardAttrName);
  };
  bool anyGuarded = func.walk([](Operation *op) {
                          return op->hasAttr(StrataDialect::kAmpGuardAttrName)
                                     ? WalkResult::interrupt()
                                     : WalkResult::advance();
                        })
                        .wasInterrupted();
  if (fp16Guard && !anyGuarded)
    return fail("fp16-guard: no op of '" + func.getSymName() +
                "' carries strata.amp_guard, so nothing would compute in " +
                dtype);

  const bool lossScaling =
      low.isF16() && (useDynamicLossScaling || initLossScaling != 1.0);
  if (lossScaling && failed(checkLossScaling(module)))
    return signalPassFailure();
  // Whether any parameter or op ends up in the low type: loss scaling
  // protects float16 gradients, and a program without any needs none.
  bool anyLow = false;
  // Level o2: parameters in the low type, but those a black-list op reads
  // directly and, under fp16-guard, those an unguarded op reads (they stay
  // f32 and are read as they are). So do those the loss does not reach:
  // they get no gradient, so no f32 master weight, and nothing would
  // compute with their rounded value but their checkpoint.
  if (o2) {
    llvm::StringMap<SmallVector<GetParamOp>> reads;
    llvm::StringSet<> keepF32, reachLoss;
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    SetVector<Operation *> lossSlice;
    if (ret.getNumOperands() > 0) {
      BackwardSliceOptions options;
      options.inclusive = true;
      options.omitBlockArguments = true;
      (void)getBackwardSlice(ret.getOperand(0), &lossSlice, options);
    }
    func.walk([&](GetParamOp get) {
      reads[get.getName()].push_back(get);
      if (lossSlice.contains(get))
        reachLoss.insert(get.getName());
      for (Operation *user : get->getUsers())
        if (black.contains(user->getName().stripDialect()) || !guarded(user))
          keepF32.insert(get.getName());
    });
    for (ParamOp param : module.getOps<ParamOp>()) {
      RankedTensorType type = param.getTensorType();
      if (!type.getElementType().isF32() ||
          keepF32.contains(param.getSymName()) ||
          !reachLoss.contains(param.getSymName()))
        continue;
      param.setType(type.clone(low));
      anyLow = true;
      for (GetParamOp get : reads.lookup(param.getSymName()))
        get.getResult().setType(type.clone(low));
    }
  }

  for (Operation &opRef : llvm::make_early_inc_range(func.getBody().front())) {
    Operation *op = &opRef;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // The step's results keep their declared types.
      for (auto [i, type] :
           llvm::enumerate(func.getFunctionType().getResults()))
        if (auto t = dyn_cast<RankedTensorType>(type);
            t && isFloatTensor(ret.getOperand(i)))
          ret.setOperand(i, castTo(ret.getOperand(i), t.getElementType(), op));
      continue;
    }
    if (op->getDialect() !=
            module.getContext()->getLoadedDialect<StrataDialect>() ||
        isa<CastOp>(op))
      continue;
    if (std::optional<Role> role = getRole(op); role && *role != Role::Forward)
      return fail("'" + op->getName().getStringRef() +
                  "' is not a forward op: mixed precision runs before "
                  "strata-autodiff and the optimizer");
    SmallVector<unsigned> floats;
    for (OpOperand &operand : op->getOpOperands())
      if (isFloatTensor(operand.get()))
        floats.push_back(operand.getOperandNumber());
    if (floats.empty())
      continue;
    StringRef name = op->getName().stripDialect();
    Type compute;
    if (!guarded(op)) {
      compute = f32;
    } else if (white.contains(name)) {
      compute = low;
    } else if (black.contains(name)) {
      compute = f32;
    } else if (o2 && llvm::is_contained(kListable, name)) {
      compute = low;
    } else if (isa<BiasAddOp>(op)) {
      compute = elementOf(op->getOperand(0));
    } else {
      bool allLow = llvm::all_of(floats, [&](unsigned i) {
        return elementOf(op->getOperand(i)) == low;
      });
      compute = allLow ? low : f32;
    }
    anyLow |= compute == low;
    const bool readsAsIs =
        compute == f32 && llvm::is_contained(kComputesInF32, name);
    bool changed = false;
    for (unsigned i : floats) {
      Value v = op->getOperand(i);
      if (elementOf(v) != compute && !readsAsIs) {
        op->setOperand(i, castTo(v, compute, op));
        changed = true;
      }
    }
    bool retype = llvm::any_of(op->getResults(), [&](Value r) {
      return isFloatTensor(r) && elementOf(r) != compute;
    });
    if (!changed && !retype)
      continue;
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      SmallVector<Type> types;
      if (failed(infer.inferReturnTypes(
              op->getContext(), op->getLoc(), op->getOperands(),
              op->getAttrDictionary(), op->getPropertiesStorage(),
              op->getRegions(), types)))
        return signalPassFailure();
      for (auto [result, type] : llvm::zip(op->getResults(), types))
        result.setType(type);
      continue;
    }
    // Ops that spell out their result type (reshape, broadcast_to, ...).
    for (Value result : op->getResults())
      if (isFloatTensor(result))
        result.setType(tensorType(result).clone(compute));
  }

  if (anyLow && lossScaling)
    declareLossScale(module);
  // (A program with nothing in the low type is left as it was.)
  if (anyLow)
    recordPass(module, "strata-amp");
}

} // namespace

llvm::ArrayRef<llvm::StringLiteral> strata::amp::listableOps() {
  return kListable;
}
llvm::ArrayRef<llvm::StringLiteral> strata::amp::defaultWhiteList() {
  return kWhite;
}
llvm::ArrayRef<llvm::StringLiteral> strata::amp::defaultBlackList(bool o2) {
  return o2 ? ArrayRef(kBlackO2) : ArrayRef(kBlack);
}
