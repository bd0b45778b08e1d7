//===- Optimizer.cpp - Parameter updates from the returned gradients ------===//

#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <limits>

namespace strata {
#define GEN_PASS_DEF_STRATAOPTIMIZER
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

enum class Kind { Sgd, Momentum, Adam, AdamW, Lamb, Lars };

struct OptimizerPass
    : public strata::impl::StrataOptimizerBase<OptimizerPass> {
  using StrataOptimizerBase::StrataOptimizerBase;

  void runOnOperation() override;

private:
  /// Declares `name` (made unique) as state, after the module's other
  /// declarations; returns its symbol.
  FlatSymbolRefAttr declareState(StringRef name, RankedTensorType type,
                                 InitKind init, FlatSymbolRefAttr of);
  LogicalResult rewrite(func::FuncOp func);

  template <typename OpTy, typename... Args>
  OpTy make(OpBuilder &b, Location loc, Args &&...args) {
    auto op = OpTy::create(b, loc, std::forward<Args>(args)...);
    setRole(op, Role::Optimizer);
    return op;
  }

  Kind kind;
  double decay = 0, eps = 0;
  SymbolTable *symbols = nullptr;
  Operation *lastDeclared = nullptr;
};

FlatSymbolRefAttr OptimizerPass::declareState(StringRef name,
                                              RankedTensorType type,
                                              InitKind init,
                                              FlatSymbolRefAttr of) {
  ModuleOp module = getOperation();
  OpBuilder b(module.getContext());
  if (lastDeclared)
    b.setInsertionPointAfter(lastDeclared);
  else
    b.setInsertionPointToStart(module.getBody());
  auto state = StateOp::create(b, module.getLoc(), name, type,
                               InitAttr::get(b.getContext(), init, FloatAttr()),
                               of);
  symbols->insert(state); // renames on a clash
  lastDeclared = state;
  return FlatSymbolRefAttr::get(state.getSymNameAttr());
}

LogicalResult OptimizerPass::rewrite(func::FuncOp func) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  Location loc = ret.getLoc();
  MLIRContext *ctx = b.getContext();

  SmallVector<Value> grads;
  SmallVector<FlatSymbolRefAttr> params;
  for (unsigned i = 1; i < func.getNumResults(); ++i) {
    auto ref = func.getResultAttrOfType<FlatSymbolRefAttr>(
        i, StrataDialect::kGradOfAttrName);
    if (!ref)
      return mlir::emitError(func.getLoc())
             << "result " << i << " is not a gradient (no strata.grad_of)";
    Value grad = ret.getOperand(i);
    // Master gradients: a low-precision gradient goes to f32 before the
    // norm, clipping and the update.
    if (masterGrad && !tensorType(grad).getElementType().isF32())
      grad = make<CastOp>(b, loc, tensorType(grad).clone(b.getF32Type()), grad);
    grads.push_back(grad);
    params.push_back(ref);
  }
  // (The strategy refuses use_master_grad at level o1 likewise.)
  if (masterGrad && llvm::all_of(ret.getOperands().drop_front(), [](Value g) {
        return tensorType(g).getElementType().isF32();
      }))
    return mlir::emitError(func.getLoc())
           << "strata-optimizer: master-grad changes nothing: every gradient "
              "of the step is f32 already (level o1, or every parameter kept "
              "f32 at level o2)";

  // Under loss scaling, an update happens only when every gradient is
  // finite: the global norm decides, which data parallelism (gradients
  // all-reduced first) and sharding (the norm summed over the group) make
  // the same on every rank (strata-pipeline gives each stage the norm of
  // all stages' gradients). It rides on the clipping op; without clipping
  // that op's bound is the largest f32, which scales finite gradients by
  // exactly 1.
  StateOp lossScale = findLossScaleState(func->getParentOfType<ModuleOp>());
  Value guard;
  if ((gradClipNorm > 0.0 || lossScale) && !grads.empty()) {
    Value norm = make<GlobalNormOp>(b, loc, grads);
    double bound = gradClipNorm > 0.0
                       ? double(gradClipNorm)
                       : double(std::numeric_limits<float>::max());
    auto clip =
        make<ClipByGlobalNormOp>(b, loc, grads, norm, b.getF64FloatAttr(bound));
    grads.assign(clip.getResults().begin(), clip.getResults().end());
    if (lossScale)
      guard = norm;
  }

  // The step counter (which a skipped step does not advance) and the
  // learning rate.
  auto i64 = RankedTensorType::get({}, b.getI64Type());
  FlatSymbolRefAttr stepSym = declareState(
      kStepCountStateName, i64, InitKind::Zeros, FlatSymbolRefAttr());
  Value oldStep = make<GetStateOp>(b, loc, i64, stepSym);
  Value one =
      guard ? Value(make<IsFiniteOp>(b, loc, guard))
            : Value(make<arith::ConstantOp>(
                  b, loc, DenseElementsAttr::get(i64, b.getI64IntegerAttr(1))));
  Value step = make<arith::AddIOp>(b, loc, oldStep, one);
  make<AssignOp>(b, loc, stepSym, step);
  auto scheduleKind = llvm::StringSwitch<std::optional<LrScheduleKind>>(
                          lrSchedule)
                          .Case("constant", LrScheduleKind::Constant)
                          .Case("linear_warmup", LrScheduleKind::LinearWarmup)
                          .Case("cosine", LrScheduleKind::Cosine)
                          .Default(std::nullopt);
  if (!scheduleKind)
    return emitError(loc) << "unknown lr-schedule '" << lrSchedule
                          << "' (constant, linear_warmup, cosine)";
  if (*scheduleKind == LrScheduleKind::Cosine && decaySteps < 1)
    return emitError(loc) << "lr-schedule cosine needs decay-steps >= 1";
  if (*scheduleKind == LrScheduleKind::LinearWarmup && warmupSteps < 1)
    return emitError(loc)
           << "lr-schedule linear_warmup needs warmup-steps >= 1";
  Value lr = make<LrScheduleOp>(
      b, loc, step, LrScheduleKindAttr::get(ctx, *scheduleKind),
      b.getF64FloatAttr(learningRate), b.getI64IntegerAttr(warmupSteps),
      b.getI64IntegerAttr(decaySteps), b.getF64FloatAttr(minLr));

  for (auto [ref, grad] : llvm::zip(params, grads)) {
    auto param = symbols->lookup<ParamOp>(ref.getValue());
    if (!param)
      return mlir::emitError(func.getLoc()) << ref << " is not a strata.param";
    RankedTensorType paramType = param.getTensorType();
    Location ploc = param.getLoc();
    // A low-precision parameter (mixed precision level o2) is updated
    // through its f32 master weight, which its state has the type of.
    RankedTensorType type = paramType.clone(b.getF32Type());
    FlatSymbolRefAttr masterSym;
    Value master;
    if (!paramType.getElementType().isF32()) {
      masterSym = declareState((ref.getValue() + ".master").str(), type,
                               InitKind::Master, ref);
      master = make<GetStateOp>(b, ploc, type, masterSym);
    }
    bool excluded = llvm::any_of(excludeFromWeightDecay, [&](StringRef s) {
      return ref.getValue().contains(s);
    });
    FloatAttr wd = b.getF64FloatAttr(excluded ? 0.0 : decay);
    Value p = make<GetParamOp>(b, ploc, paramType, ref);
    auto stateOf = [&](StringRef suffix) {
      FlatSymbolRefAttr sym = declareState(
          (ref.getValue() + "." + suffix).str(), type, InitKind::Zeros, ref);
      return std::make_pair(sym, Value(make<GetStateOp>(b, ploc, type, sym)));
    };
    Operation *update = nullptr;
    switch (kind) {
    case Kind::Sgd:
      update = make<SgdUpdateOp>(b, ploc, p, grad, lr, guard, master, wd);
      break;
    case Kind::Momentum:
    case Kind::Lars: {
      auto [vSym, v] = stateOf("velocity");
      if (kind == Kind::Momentum)
        update = make<MomentumUpdateOp>(
            b, ploc, p, grad, v, lr, guard, master, b.getF64FloatAttr(momentum),
            useNesterov ? b.getUnitAttr() : UnitAttr(), wd);
      else
        update = make<LarsUpdateOp>(
            b, ploc, p, grad, v, lr, guard, master, b.getF64FloatAttr(momentum),
            b.getF64FloatAttr(larsCoeff), wd, b.getF64FloatAttr(eps));
      make<AssignOp>(b, ploc, vSym, update->getResult(1));
      break;
    }
    case Kind::Adam:
    case Kind::AdamW:
    case Kind::Lamb: {
      auto [mSym, m] = stateOf("moment1");
      auto [vSym, v] = stateOf(kSecondMomentSuffix);
      auto b1 = b.getF64FloatAttr(beta1), b2 = b.getF64FloatAttr(beta2);
      auto e = b.getF64FloatAttr(eps);
      update = kind == Kind::Adam
                   ? make<AdamUpdateOp>(b, ploc, p, grad, m, v, lr, step, guard,
                                        master, b1, b2, e, wd)
                         .getOperation()
               : kind == Kind::AdamW
                   ? make<AdamWUpdateOp>(b, ploc, p, grad, m, v, lr, step,
                                         guard, master, b1, b2, e, wd)
                         .getOperation()
                   : make<LambUpdateOp>(b, ploc, p, grad, m, v, lr, step, guard,
                                        master, b1, b2, e, wd)
                         .getOperation();
      make<AssignOp>(b, ploc, mSym, update->getResult(1));
      make<AssignOp>(b, ploc, vSym, update->getResult(2));
      break;
    }
    }
    make<AssignOp>(b, ploc, ref, update->getResult(0));
    if (master)
      make<AssignOp>(b, ploc, masterSym,
                     update->getResult(update->getNumResults() - 1));
  }

  // Paddle's dynamic rule moves the loss scale (a static scale stays).
  if (guard) {
    DictionaryAttr config = lossScale->getAttrOfType<DictionaryAttr>(
        StrataDialect::kLossScalingAttrName);
    auto good = config.getAs<FlatSymbolRefAttr>("good");
    auto bad = config.getAs<FlatSymbolRefAttr>("bad");
    if (config.get("dynamic") && good && bad) {
      auto f32 = RankedTensorType::get({}, b.getF32Type());
      auto scaleSym = FlatSymbolRefAttr::get(lossScale.getSymNameAttr());
      auto update = make<UpdateLossScalingOp>(
          b, loc, guard, make<GetStateOp>(b, loc, f32, scaleSym),
          make<GetStateOp>(b, loc, i64, good),
          make<GetStateOp>(b, loc, i64, bad),
          config.getAs<IntegerAttr>("incr_every_n_steps"),
          config.getAs<IntegerAttr>("decr_every_n_nan_or_inf"),
          config.getAs<FloatAttr>("incr_ratio"),
          config.getAs<FloatAttr>("decr_ratio"));
      make<AssignOp>(b, loc, scaleSym, update.getNewScale());
      make<AssignOp>(b, loc, good, update.getNewGood());
      make<AssignOp>(b, loc, bad, update.getNewBad());
    }
  }

  Value loss = ret.getOperand(0);
  func::ReturnOp::create(b, loc, loss);
  ret.erase();
  func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                 {loss.getType()}));
  return success();
}

void OptimizerPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto parsed = llvm::StringSwitch<std::optional<Kind>>(type)
                    .Case("sgd", Kind::Sgd)
                    .Case("momentum", Kind::Momentum)
                    .Case("adam", Kind::Adam)
                    .Case("adamw", Kind::AdamW)
                    .Case("lamb", Kind::Lamb)
                    .Case("lars", Kind::Lars)
                    .Default(std::nullopt);
  if (!parsed) {
    mlir::emitError(module.getLoc()) << "strata-optimizer: unknown type '" << type
                       << "' (sgd, momentum, adam, adamw, lamb, lars)";
    return signalPassFailure();
  }
  kind = *parsed;
  // (A negative value asks for the default below; NaN is an error.)
  if (std::isnan(weightDecay) || std::isnan(epsilon)) {
    mlir::emitError(module.getLoc())
        << "strata-optimizer: weight-decay and epsilon must be numbers";
    return signalPassFailure();
  }
  // Paddle's defaults by optimizer.
  decay = weightDecay >= 0.0 ? double(weightDecay)
          : (kind == Kind::AdamW || kind == Kind::Lamb) ? 0.01
          : kind == Kind::Lars                          ? 0.0005
                                                        : 0.0;
  eps = epsilon >= 0.0 ? double(epsilon)
        : kind == Kind::Lamb ? 1e-6
        : kind == Kind::Lars ? 0.0
                             : 1e-8;
  // The ranges of the strategy's optimizer keys (NaN fails every test).
  auto fail = [&](const Twine &message) {
    mlir::emitError(module.getLoc()) << "strata-optimizer: " << message;
    signalPassFailure();
  };
  auto finite = [](double v) { return std::isfinite(v); };
  if (!(learningRate > 0.0) || !finite(learningRate))
    return fail("learning-rate must be positive and finite");
  if (!(decay >= 0.0) || !finite(decay))
    return fail("weight-decay must be >= 0 and finite");
  // (An empty name is in every parameter's: it would exclude them all.)
  if (llvm::is_contained(excludeFromWeightDecay, ""))
    return fail("exclude-from-weight-decay has an empty name (it would match "
                "every parameter): remove the trailing or doubled comma");
  if (!(eps >= 0.0) || !finite(eps))
    return fail("epsilon must be >= 0 and finite");
  if ((kind == Kind::Adam || kind == Kind::AdamW || kind == Kind::Lamb) &&
      !(float(eps) > 0.0f))
    return fail("epsilon of adam, adamw and lamb must be a positive f32: the "
                "update divides by sqrt(v) + epsilon, 0 / 0 for an element "
                "whose gradients have all been 0");
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    return fail("beta1 and beta2 must be in [0, 1)");
  if (!(momentum >= 0.0 && momentum < 1.0))
    return fail("momentum must be in [0, 1)");
  if (!(larsCoeff > 0.0) || !finite(larsCoeff))
    return fail("lars-coeff must be positive and finite");
  if (!(gradClipNorm >= 0.0) || !finite(gradClipNorm))
    return fail("grad-clip-norm must be >= 0 and finite (0 disables "
                "clipping)");
  if (warmupSteps < 0 || decaySteps < 0)
    return fail("warmup-steps and decay-steps must be >= 0");
  if (!(minLr >= 0.0 && minLr <= learningRate))
    return fail("min-lr must be in [0, learning-rate]");
  if (failed(checkRunsBefore(
          module, "strata-optimizer",
          {"strata-optimizer", "strata-sharding", "strata-pipeline"})))
    return signalPassFailure();

  SymbolTable symbolTable(module);
  symbols = &symbolTable;
  lastDeclared = lastDeclaration(module);

  FailureOr<func::FuncOp> step =
      getDifferentiatedStep(module, "strata-optimizer");
  if (failed(step))
    return signalPassFailure();
  if (failed(rewrite(*step)))
    return signalPassFailure();
  recordPass(module, "strata-optimizer");
}

} // namespace
