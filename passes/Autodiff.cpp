//===- Autodiff.cpp - Reverse-mode differentiation of the loss ------------===//

#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

namespace strata {
#define GEN_PASS_DEF_STRATAAUTODIFF
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {


bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Builds the backward of one function.
class Differentiator {
public:
  Differentiator(func::FuncOp func, ModuleOp module)
      : func(func), module(module), builder(func.getContext()) {}

  LogicalResult run();

private:
  /// Creates a backward op at the current insertion point.
  template <typename OpTy, typename... Args>
  OpTy make(Location loc, Args &&...args) {
    auto op = OpTy::create(builder, loc, std::forward<Args>(args)...);
    setRole(op, Role::Backward);
    return op;
  }

  Value constant(Location loc, RankedTensorType type, double value) {
    auto attr = DenseElementsAttr::get(
        type, builder.getFloatAttr(type.getElementType(), value));
    return make<arith::ConstantOp>(loc, attr);
  }

  /// Adds `grad` to the adjoint of `v`.
  void accumulate(Location loc, Value v, Value grad) {
    if (!isFloatTensor(v))
      return;
    auto it = adjoints.find(v);
    if (it == adjoints.end()) {
      adjoints[v] = grad;
      return;
    }
    it->second = make<AddOp>(loc, it->second, grad);
  }

  /// `grad` summed down to the shape of `like` when broadcasting stretched
  /// it.
  Value reduceTo(Location loc, Value grad, Value like) {
    if (grad.getType() == like.getType())
      return grad;
    return make<SumToOp>(loc, like.getType(), grad);
  }

  LogicalResult backprop(Operation *op);
  void concatTiledPads();

  func::FuncOp func;
  ModuleOp module;
  OpBuilder builder;
  DenseMap<Value, Value> adjoints;
  llvm::StringMap<Value> paramGrads;
};

LogicalResult Differentiator::backprop(Operation *op) {
  Location loc = op->getLoc();
  auto adj = [&](unsigned i = 0) { return adjoints.lookup(op->getResult(i)); };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp) { return success(); })
      .Case([&](GetParamOp g) {
        Value &grad = paramGrads[g.getName()];
        grad = grad ? Value(make<AddOp>(loc, grad, adj())) : adj();
        return success();
      })
      .Case([&](MatmulOp m) {
        auto grad = make<MatmulGradOp>(loc, m.getLhs(), m.getRhs(), adj(),
                                       m.getTransposeLhs(),
                                       m.getTransposeRhs());
        accumulate(loc, m.getLhs(), grad.getLhsGrad());
        accumulate(loc, m.getRhs(), grad.getRhsGrad());
        return success();
      })
      .Case([&](AddOp o) {
        accumulate(loc, o.getLhs(), reduceTo(loc, adj(), o.getLhs()));
        accumulate(loc, o.getRhs(), reduceTo(loc, adj(), o.getRhs()));
        return success();
      })
      .Case([&](SubOp o) {
        accumulate(loc, o.getLhs(), reduceTo(loc, adj(), o.getLhs()));
        Value neg = make<ScaleOp>(loc, adj(), builder.getF64FloatAttr(-1.0));
        accumulate(loc, o.getRhs(), reduceTo(loc, neg, o.getRhs()));
        return success();
      })
      .Case([&](MulOp o) {
        Value dl = make<MulOp>(loc, adj(), o.getRhs());
        Value dr = make<MulOp>(loc, adj(), o.getLhs());
        accumulate(loc, o.getLhs(), reduceTo(loc, dl, o.getLhs()));
        accumulate(loc, o.getRhs(), reduceTo(loc, dr, o.getRhs()));
        return success();
      })
      .Case([&](DivOp o) {
        // d(a/b) = da/b - (a/b) db/b
        Value dyOverB = make<DivOp>(loc, adj(), o.getRhs());
        accumulate(loc, o.getLhs(), reduceTo(loc, dyOverB, o.getLhs()));
        Value quotient = make<DivOp>(loc, o.getLhs(), o.getRhs());
        Value dr = make<ScaleOp>(loc, make<MulOp>(loc, dyOverB, quotient),
                                 builder.getF64FloatAttr(-1.0));
        accumulate(loc, o.getRhs(), reduceTo(loc, dr, o.getRhs()));
        return success();
      })
      .Case([&](ScaleOp o) {
        accumulate(loc, o.getInput(),
                   make<ScaleOp>(loc, adj(), o.getFactorAttr()));
        return success();
      })
      .Case([&](BiasAddOp o) {
        accumulate(loc, o.getInput(), adj());
        accumulate(loc, o.getBias(), make<BiasAddGradOp>(loc, adj()));
        return success();
      })
      .Case([&](ReluOp o) {
        accumulate(loc, o.getInput(),
                   make<ReluGradOp>(loc, o.getResult(), adj()));
        return success();
      })
      .Case([&](GeluOp o) {
        accumulate(loc, o.getInput(),
                   make<GeluGradOp>(loc, o.getInput(), adj(),
                                    o.getApproximate()));
        return success();
      })
      .Case([&](SiluOp o) {
        accumulate(loc, o.getInput(),
                   make<SiluGradOp>(loc, o.getInput(), adj()));
        return success();
      })
      .Case([&](TanhOp o) {
        // dy (1 - y^2) = dy - (dy y) y
        Value y = o.getResult();
        accumulate(
            loc, o.getInput(),
            make<SubOp>(loc, adj(),
                        make<MulOp>(loc, make<MulOp>(loc, adj(), y), y)));
        return success();
      })
      .Case([&](RsqrtOp o) {
        // d(x^-1/2) = -1/2 x^-3/2 = -1/2 y^3
        Value y = o.getResult();
        Value cube = make<MulOp>(loc, y, make<MulOp>(loc, y, y));
        accumulate(loc, o.getInput(),
                   make<ScaleOp>(loc, make<MulOp>(loc, adj(), cube),
                                 builder.getF64FloatAttr(-0.5)));
        return success();
      })
      .Case([&](DropoutOp o) {
        auto grad = make<DropoutGradOp>(loc, adj(), o.getProbAttr(),
                                        o.getKeyAttr());
        // The mask is keyed by the micro-batch too: keep the forward's.
        if (auto mb = getMicroBatch(o))
          grad->setAttr(StrataDialect::kMicroBatchAttrName,
                        builder.getI64IntegerAttr(*mb));
        accumulate(loc, o.getInput(), grad);
        return success();
      })
      .Case([&](SoftmaxOp o) {
        accumulate(loc, o.getInput(),
                   make<SoftmaxGradOp>(loc, o.getResult(), adj()));
        return success();
      })
      .Case([&](LayerNormOp o) {
        auto grad = make<LayerNormGradOp>(loc, o.getInput(), o.getGamma(),
                                          adj(), o.getEpsilonAttr());
        accumulate(loc, o.getInput(), grad.getInputGrad());
        accumulate(loc, o.getGamma(), grad.getGammaGrad());
        accumulate(loc, o.getBeta(), grad.getBetaGrad());
        return success();
      })
      .Case([&](RmsNormOp o) {
        auto grad = make<RmsNormGradOp>(loc, o.getInput(), o.getGamma(), adj(),
                                        o.getEpsilonAttr());
        accumulate(loc, o.getInput(), grad.getInputGrad());
        accumulate(loc, o.getGamma(), grad.getGammaGrad());
        return success();
      })
      .Case([&](EmbeddingOp o) {
        accumulate(loc, o.getTable(),
                   make<EmbeddingGradOp>(loc, o.getTable().getType(),
                                         o.getIds(), adj(),
                                         o.getPaddingIdxAttr()));
        return success();
      })
      .Case([&](ReshapeOp o) {
        accumulate(loc, o.getInput(),
                   make<ReshapeOp>(loc, o.getInput().getType(), adj()));
        return success();
      })
      .Case([&](CastOp o) {
        accumulate(loc, o.getInput(),
                   make<CastOp>(loc, o.getInput().getType(), adj()));
        return success();
      })
      .Case([&](TransposeOp o) {
        ArrayRef<int64_t> perm = o.getPermutation();
        SmallVector<int64_t> inverse(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          inverse[p] = i;
        accumulate(loc, o.getInput(),
                   make<TransposeOp>(loc, adj(),
                                     builder.getDenseI64ArrayAttr(inverse)));
        return success();
      })
      .Case([&](SliceOp o) {
        int64_t dim = o.getDim(), start = o.getStart(), size = o.getSize(),
                stride = o.getStride();
        int64_t full = tensorType(o.getInput()).getDimSize(dim);
        Value grad = adj();
        // The elements of `dim` the gradient spans from `start`.
        int64_t span = size;
        if (stride > 1) {
          // Zeros between the elements: [.., size, ..] -> [.., size, 1, ..]
          // -> [.., size, stride, ..] (padded) -> [.., size * stride, ..],
          // cut where the input's dimension ends.
          RankedTensorType type = tensorType(grad);
          SmallVector<int64_t> shape(type.getShape());
          shape.insert(shape.begin() + dim + 1, 1);
          grad = make<ReshapeOp>(loc, type.clone(shape), grad);
          grad = make<PadOp>(loc, grad, builder.getI64IntegerAttr(dim + 1),
                             builder.getI64IntegerAttr(0),
                             builder.getI64IntegerAttr(stride - 1));
          shape.erase(shape.begin() + dim + 1);
          shape[dim] = size * stride;
          grad = make<ReshapeOp>(loc, type.clone(shape), grad);
          span = std::min(size * stride, full - start);
          if (span < size * stride)
            grad = make<SliceOp>(loc, grad, o.getDimAttr(),
                                 builder.getI64IntegerAttr(0),
                                 builder.getI64IntegerAttr(span));
        }
        accumulate(loc, o.getInput(),
                   make<PadOp>(loc, grad, o.getDimAttr(), o.getStartAttr(),
                               builder.getI64IntegerAttr(full - start - span)));
        return success();
      })
      .Case([&](PadOp o) {
        int64_t size = tensorType(o.getInput()).getDimSize(o.getDim());
        accumulate(loc, o.getInput(),
                   make<SliceOp>(loc, adj(), o.getDimAttr(), o.getLowAttr(),
                                 builder.getI64IntegerAttr(size)));
        return success();
      })
      .Case([&](ConcatOp o) {
        int64_t dim = o.getDim(), start = 0;
        for (Value in : o.getInputs()) {
          int64_t size = tensorType(in).getDimSize(dim);
          accumulate(loc, in,
                     make<SliceOp>(loc, adj(), o.getDimAttr(),
                                   builder.getI64IntegerAttr(start),
                                   builder.getI64IntegerAttr(size)));
          start += size;
        }
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto o) {
        accumulate(loc, o.getInput(),
                   make<ReduceGradOp>(loc, adj(), o.getInput(), o.getDims(),
                                      isa<ReduceMeanOp>(op)));
        return success();
      })
      .Case([&](BroadcastToOp o) {
        accumulate(loc, o.getInput(), reduceTo(loc, adj(), o.getInput()));
        return success();
      })
      .Case([&](SumToOp o) {
        accumulate(loc, o.getInput(),
                   make<BroadcastToOp>(loc, o.getInput().getType(), adj()));
        return success();
      })
      .Case([&](CrossEntropyOp o) {
        accumulate(loc, o.getLogits(),
                   make<CrossEntropyGradOp>(loc, o.getLogits(), o.getLabels(),
                                            adj(), o.getClassesAttr()));
        return success();
      })
      .Case([&](FusedGemmEpilogueOp o) -> LogicalResult {
        if (o.getActivation() != Activation::None && !o.getAux())
          return o.emitOpError("autodiff needs 'with_aux' on a fused GEMM "
                               "with an activation");
        if (o.getAux() && adj(1))
          return o.emitOpError("autodiff does not differentiate through the "
                               "aux result");
        auto grad = make<FusedGemmEpilogueGradOp>(
            loc, o.getInput(), o.getWeight(), adj(0), o.getAux(),
            o.getActivation(), o.getTransposeWeight());
        accumulate(loc, o.getInput(), grad.getInputGrad());
        accumulate(loc, o.getWeight(), grad.getWeightGrad());
        accumulate(loc, o.getBias(), grad.getBiasGrad());
        return success();
      })
      .Case([&](AttentionOp o) -> LogicalResult {
        if (adj(1))
          return o.emitOpError("autodiff does not differentiate through the "
                               "logsumexp result");
        auto grad = make<AttentionGradOp>(
            loc, o.getQuery(), o.getKey(), o.getValue(), o.getResult(),
            o.getLogsumexp(), adj(0), o.getScaleAttr(), o.getCausalAttr(),
            o.getDropoutAttr(), o.getDropoutKeyAttr());
        // The dropout mask is keyed by the micro-batch too: keep the
        // forward's.
        if (auto mb = getMicroBatch(o))
          grad->setAttr(StrataDialect::kMicroBatchAttrName,
                        builder.getI64IntegerAttr(*mb));
        accumulate(loc, o.getQuery(), grad.getQueryGrad());
        accumulate(loc, o.getKey(), grad.getKeyGrad());
        accumulate(loc, o.getValue(), grad.getValueGrad());
        return success();
      })
      .Case([&](FusedDropoutAddOp o) {
        auto grad = make<FusedDropoutAddGradOp>(loc, adj(), o.getProbAttr(),
                                                o.getKeyAttr());
        if (auto mb = getMicroBatch(o))
          grad->setAttr(StrataDialect::kMicroBatchAttrName,
                        builder.getI64IntegerAttr(*mb));
        accumulate(loc, o.getInput(), grad.getInputGrad());
        accumulate(loc, o.getResidual(), grad.getResidualGrad());
        return success();
      })
      .Default([&](Operation *) {
        return op->emitOpError()
               << "is on the path to the loss but has no derivative rule";
      });
}

LogicalResult Differentiator::run() {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret.getOperand(0);

  for (Operation &op : body.without_terminator())
    if (!getRole(&op))
      setRole(&op, Role::Forward);

  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);

  // The backward starts from 1, or from the loss scale of mixed precision
  // (gradients too small for float16 are scaled up; it is divided out of
  // the parameter gradients below).
  builder.setInsertionPoint(ret);
  RankedTensorType lossType = tensorType(loss);
  Value lossScale, inverseScale;
  if (StateOp state = findLossScaleState(module)) {
    if (state.getTensorType() != lossType)
      return state.emitOpError("is a loss scale of type ")
             << state.getTensorType() << ", but the loss is " << lossType;
    lossScale = make<GetStateOp>(
        ret.getLoc(), lossType, FlatSymbolRefAttr::get(state.getSymNameAttr()));
    adjoints[loss] = lossScale;
    inverseScale = make<DivOp>(
        ret.getLoc(), constant(ret.getLoc(), lossType, 1.0), lossScale);
    // strata.scale_by's factor is f32 (exact from a bf16 or f16 loss).
    if (!lossType.getElementType().isF32())
      inverseScale = make<CastOp>(
          ret.getLoc(), lossType.clone(builder.getF32Type()), inverseScale);
  } else {
    adjoints[loss] = constant(ret.getLoc(), lossType, 1.0);
  }
  for (Operation *op : llvm::reverse(forward)) {
    if (llvm::none_of(op->getResults(),
                      [&](Value r) { return adjoints.count(r); }))
      continue;
    Operation *last = ret->getPrevNode();
    if (failed(backprop(op)))
      return failure();
    // The backward of an op runs on its pipeline stage.
    if (std::optional<int64_t> stage = getStage(op))
      for (Operation *grad = last->getNextNode(); grad != ret;
           grad = grad->getNextNode())
        if (!getStage(grad))
          grad->setAttr(StrataDialect::kStageAttrName,
                        builder.getI64IntegerAttr(*stage));
  }

  // (The adjoints are not read after this: the rewrite below erases some.)
  adjoints.clear();
  concatTiledPads();

  SmallVector<Value> results = {loss};
  SmallVector<FlatSymbolRefAttr> gradOf;
  for (ParamOp param : module.getOps<ParamOp>()) {
    if (param.getFrozen())
      continue;
    Value grad = paramGrads.lookup(param.getSymName());
    if (grad && inverseScale) {
      // Right where the gradient is complete, so that data parallelism's
      // buckets close as early as without loss scaling.
      OpBuilder::InsertionGuard guard(builder);
      if (Operation *def = grad.getDefiningOp())
        builder.setInsertionPointAfter(def);
      // A low-precision gradient (level o2) is unscaled in f32 and rounded
      // once, as Paddle's check_finite_and_unscale does (the inverse of a
      // scale such as 26214.4 is no float16 number).
      Value unscaled = make<ScaleByOp>(param.getLoc(), grad, inverseScale);
      if (Operation *def = grad.getDefiningOp())
        if (std::optional<int64_t> stage = getStage(def))
          unscaled.getDefiningOp()->setAttr(StrataDialect::kStageAttrName,
                                            builder.getI64IntegerAttr(*stage));
      grad = unscaled;
    }
    // A parameter the loss does not reach gets no gradient, and so no
    // update, as a frozen one (PyTorch's and Paddle's optimizers skip a
    // parameter without a gradient: no weight decay, no moments).
    if (!grad)
      continue;
    results.push_back(grad);
    gradOf.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  if (gradOf.empty())
    return func.emitError()
           << "strata-autodiff: the loss reaches no trainable strata.param: "
              "the step has nothing to train";
  func::ReturnOp::create(builder, ret.getLoc(), results);
  ret.erase();
  func.setType(builder.getFunctionType(func.getArgumentTypes(),
                                       ValueRange(results).getTypes()));
  for (auto [i, ref] : llvm::enumerate(gradOf))
    func.setResultAttr(i + 1, StrataDialect::kGradOfAttrName, ref);

  // The rules compute the adjoint of every float operand; those of values
  // no parameter reaches (a constant such as a rotary table, a frozen
  // parameter, the batch) and the backward ops that only they read are
  // erased here, users before their operands.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (getRole(&op) == Role::Backward && isOpTriviallyDead(&op))
      op.erase();
  return success();
}

/// The gradients of slices that together cover a tensor along one dimension
/// (a fused q/k/v projection split in three) are pads of each slice's
/// gradient with zeros, summed: written as one concat of those gradients
/// instead (the same values, x + 0 = x, without the zeros and the adds), and
/// the sum's other terms added to it.
void Differentiator::concatTiledPads() {
  OpBuilder::InsertionGuard guard(builder);
  // Parameters' gradients are held here besides their uses: a term that is
  // one (the same adjoint handed to two inputs) stays.
  llvm::DenseSet<Value> held;
  for (const auto &entry : paramGrads)
    held.insert(entry.second);
  SmallVector<AddOp> roots;
  func.walk([&](AddOp add) {
    if (getRole(add) == Role::Backward &&
        !(add->hasOneUse() && isa<AddOp>(*add->user_begin())))
      roots.push_back(add);
  });
  for (AddOp root : roots) {
    auto type = dyn_cast<RankedTensorType>(root.getType());
    SmallVector<Operation *> adds;
    SmallVector<PadOp> pads;
    SmallVector<Value> others;
    // The sum's terms: adds of its type read only inside the sum, down to
    // backward pads read only by them, and any other terms of its type
    // (LLaMA's rotary embedding sums the halves' pads with a product).
    std::function<bool(Value)> terms = [&](Value v) {
      if (v.getType() != type)
        return false;
      bool own = v.hasOneUse() && !held.contains(v);
      Operation *def = v.getDefiningOp();
      if (auto pad = dyn_cast_or_null<PadOp>(def);
          own && pad && getRole(pad) == Role::Backward) {
        pads.push_back(pad);
        return true;
      }
      if (auto add = dyn_cast_or_null<AddOp>(def); own && add) {
        adds.push_back(add);
        return terms(add.getLhs()) && terms(add.getRhs());
      }
      others.push_back(v);
      return true;
    };
    if (!type || !terms(root.getLhs()) || !terms(root.getRhs()) || pads.empty())
      continue;
    // Pads along one dimension whose parts lie side by side from 0 to the
    // end.
    int64_t dim = pads.front().getDim();
    llvm::sort(pads, [](PadOp a, PadOp b) { return a.getLow() < b.getLow(); });
    int64_t next = 0;
    bool tiles = llvm::all_of(pads, [&](PadOp pad) {
      if (pad.getDim() != dim || pad.getLow() != next)
        return false;
      next += tensorType(pad.getInput()).getDimSize(dim);
      return true;
    });
    if (!tiles || next != type.getDimSize(dim))
      continue;
    builder.setInsertionPoint(root);
    SmallVector<Value> parts;
    for (PadOp pad : pads)
      parts.push_back(pad.getInput());
    auto concat = ConcatOp::create(builder, root.getLoc(), type, parts,
                                   builder.getI64IntegerAttr(dim));
    copyMetadata(root, concat);
    Value sum = concat.getResult();
    for (Value other : others) {
      auto add = AddOp::create(builder, root.getLoc(), sum, other);
      copyMetadata(root, add);
      sum = add.getResult();
    }
    root.getResult().replaceAllUsesWith(sum);
    // (A parameter's gradient may be the sum itself.)
    for (auto &entry : paramGrads)
      if (entry.second == root.getResult())
        entry.second = sum;
    root.erase();
    for (Operation *add : adds)
      add->dropAllReferences();
    for (Operation *add : adds)
      add->erase();
    for (PadOp pad : pads)
      pad.erase();
  }
}

/// A step to differentiate: one scalar float result (the loss, which the
/// pass has checked carries no gradient mark).
bool needsDifferentiation(func::FuncOp func) {
  if (func.isExternal() || func.getNumResults() != 1)
    return false;
  auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[0]);
  return type && type.getRank() == 0 && isa<FloatType>(type.getElementType());
}

struct AutodiffPass : public strata::impl::StrataAutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> step = getStepFunction(module, "strata-autodiff");
    if (failed(step))
      return signalPassFailure();
    func::FuncOp f = *step;
    // The passes after autodiff find a step's gradients from result 1 on
    // (returnsGradients); a gradient marked in place of the loss is neither
    // a step to differentiate nor a differentiated one.
    if (f.getNumResults() &&
        f.getResultAttr(0, StrataDialect::kGradOfAttrName)) {
      f.emitError() << "strata-autodiff: @" << f.getName()
                    << "'s result 0 is marked "
                    << StrataDialect::kGradOfAttrName
                    << ", but a step's first result is its loss (the gradients "
                       "follow it)";
      return signalPassFailure();
    }
    if (!returnsGradients(f) && !needsDifferentiation(f)) {
      std::string types;
      llvm::raw_string_ostream os(types);
      llvm::interleaveComma(f.getResultTypes(), os);
      f.emitError() << "strata-autodiff: @" << f.getName() << " returns ("
                    << types
                    << "); a training step returns its loss, one scalar float "
                       "(the gradients are derived from it)";
      return signalPassFailure();
    }
    if (!needsDifferentiation(f))
      return;
    // (After the optimizer the step returns its loss alone again.)
    if (failed(checkRunsBefore(
            module, "strata-autodiff",
            {"strata-optimizer", "strata-sharding", "strata-pipeline"})))
      return signalPassFailure();
    if (module.getOps<ParamOp>().empty()) {
      f.emitError() << "strata-autodiff: the program declares no "
                       "strata.param: a step without parameters has nothing "
                       "to train";
      return signalPassFailure();
    }
    // Each dropout draws the mask of its key: two with one key would drop
    // the same elements of same-shaped tensors.
    llvm::DenseMap<int64_t, Operation *> dropoutKeys;
    WalkResult keys = f.walk([&](Operation *op) {
      std::optional<int64_t> key =
          TypeSwitch<Operation *, std::optional<int64_t>>(op)
              .Case<DropoutOp, FusedDropoutAddOp>(
                  [](auto d) { return int64_t(d.getKey()); })
              .Case([](AttentionOp a) -> std::optional<int64_t> {
                if (a.getDropout().convertToDouble() > 0.0)
                  return int64_t(a.getDropoutKey());
                return std::nullopt;
              })
              .Default([](Operation *) { return std::nullopt; });
      if (!key)
        return WalkResult::advance();
      auto [it, inserted] = dropoutKeys.try_emplace(*key, op);
      if (inserted)
        return WalkResult::advance();
      InFlightDiagnostic diag =
          op->emitOpError() << "uses dropout key " << *key
                            << ", as another dropout does: both would drop "
                               "the same elements (a program's dropout keys "
                               "are unique)";
      diag.attachNote(it->second->getLoc())
          << "the other dropout with key " << *key;
      return WalkResult::interrupt();
    });
    if (keys.wasInterrupted())
      return signalPassFailure();
    if (llvm::all_of(module.getOps<ParamOp>(),
                     [](ParamOp p) { return p.getFrozen(); })) {
      f.emitError() << "strata-autodiff: every strata.param of the program is "
                       "{frozen}: a step without a trainable parameter has "
                       "nothing to train";
      return signalPassFailure();
    }
    if (failed(Differentiator(f, module).run()))
      return signalPassFailure();
    recordPass(module, "strata-autodiff");
  }
};

} // namespace
