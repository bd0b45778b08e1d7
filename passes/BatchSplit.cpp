//===- BatchSplit.cpp - Retyping ops for a fraction of the batch ----------===//

#include "BatchSplit.h"
#include "PassUtils.h"

#include "strata/Dialect/Strata.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <optional>
#include <string>

using namespace mlir;
using namespace strata;

static RankedTensorType withDim(RankedTensorType t, int64_t dim,
                                int64_t size) {
  SmallVector<int64_t> shape(t.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, t.getElementType());
}

FailureOr<SmallVector<Type>> strata::splitResultTypes(Operation *op,
                                                      Type oldOperand,
                                                      TypeRange oldResults,
                                                      int64_t k) {
  SmallVector<Type> types;
  if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getAttrDictionary(), op->getPropertiesStorage(),
            op->getRegions(), types)))
      return failure();
    return types;
  }
  // Ops that spell out their result type: the batch dimension follows the
  // operand's.
  if (op->getNumOperands() == 0 || oldResults.size() != 1)
    return failure();
  auto oldIn = cast<RankedTensorType>(oldOperand);
  auto newIn = cast<RankedTensorType>(op->getOperand(0).getType());
  auto oldOut = cast<RankedTensorType>(oldResults[0]);
  bool split = oldIn != newIn;
  if (!split || isa<EmbeddingGradOp>(op))
    return SmallVector<Type>{oldOut};
  if (isa<CastOp>(op))
    return SmallVector<Type>{newIn.clone(oldOut.getElementType())};
  if (isa<ReshapeOp>(op)) {
    if (oldOut.getRank() < 1 || oldOut.getDimSize(0) % k != 0)
      return failure();
    return SmallVector<Type>{withDim(oldOut, 0, oldOut.getDimSize(0) / k)};
  }
  if (isa<SumToOp, BroadcastToOp>(op)) {
    // Shapes align on the right: the operand's leading dimension is the
    // result's dimension `offset`, when that exists.
    int64_t offset = oldOut.getRank() - oldIn.getRank();
    if (offset < 0 || oldOut.getDimSize(offset) != oldIn.getDimSize(0))
      return SmallVector<Type>{oldOut};
    return SmallVector<Type>{withDim(oldOut, offset, newIn.getDimSize(0))};
  }
  return failure();
}

namespace {
/// How a forward value depends on the batch: its leading dimension holds
/// the batch's rows, each computed from its own (Rows), or it is a loss
/// over the whole batch (Loss), which parts of the batch average into the
/// whole's.
enum class Dependence { Rows, Loss };
} // namespace

static int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : 0;
}

/// The dimensions a reduce_sum or reduce_mean reduces; none for other ops.
static ArrayRef<int64_t> reducedDims(Operation *op) {
  if (auto sum = dyn_cast<ReduceSumOp>(op))
    return sum.getDims();
  if (auto mean = dyn_cast<ReduceMeanOp>(op))
    return mean.getDims();
  return {};
}

/// A reduction over every dimension of a tensor (to the loss).
static bool reducesEverything(Operation *op) {
  int64_t rank = op->getNumOperands() ? rankOf(op->getOperand(0)) : 0;
  return rank > 0 && int64_t(reducedDims(op).size()) == rank;
}

/// An op whose result, on a part of the batch, averages with the other
/// parts' into the whole's: a mean over the whole batch (strata.cross_entropy;
/// strata.reduce_mean over every dimension, whose gradient strata.reduce_grad
/// divides by the part's count), or a sum over it, which rescaleBatchSums
/// multiplies by the number of parts.
static bool lossOverBatch(Operation *op) {
  return isa<CrossEntropyOp>(op) || reducesEverything(op);
}

namespace {
/// An op of the forward pass that would compute otherwise on a part of the
/// batch than on the whole, and why (in the user's terms).
struct BatchMixing {
  Operation *op;
  std::string reason;
};
} // namespace

/// The first forward op of `body` that does not compute each part of the
/// batch from that part alone (prepareBatchSplit), or none; collects the
/// sums over the whole batch (reduce_sum of rows over every dimension) in
/// `sums`.
static std::optional<BatchMixing>
findBatchMixing(Block &body, int64_t k, SmallVectorImpl<ReduceSumOp> &sums) {
  DenseMap<Value, Dependence> dep;
  for (BlockArgument arg : body.getArguments())
    dep[arg] = Dependence::Rows;
  auto on = [&](Value v) -> std::optional<Dependence> {
    auto it = dep.find(v);
    if (it == dep.end())
      return std::nullopt;
    return it->second;
  };
  for (Operation &op : body.without_terminator()) {
    if (std::optional<Role> role = getRole(&op); role && *role != Role::Forward)
      continue;
    bool rows = false, loss = false;
    for (Value v : op.getOperands()) {
      std::optional<Dependence> d = on(v);
      rows |= d == Dependence::Rows;
      loss |= d == Dependence::Loss;
    }
    if (!rows && !loss)
      continue;
    auto mixes = [&](std::string reason) {
      return std::optional<BatchMixing>(BatchMixing{&op, std::move(reason)});
    };
    // The loss: only linear uses keep parts averaging into the whole.
    if (loss) {
      auto oneElement = [](Value v) {
        auto t = dyn_cast<RankedTensorType>(v.getType());
        return t && t.hasStaticShape() && t.getNumElements() == 1;
      };
      bool linear =
          !rows && (isa<AddOp, SubOp, ScaleOp, CastOp, ReshapeOp>(op) ||
                    // A reduction of the one element: the element itself.
                    (isa<ReduceSumOp, ReduceMeanOp>(op) &&
                     oneElement(op.getOperand(0))) ||
                    (isa<MulOp>(op) &&
                     !(on(op.getOperand(0)) && on(op.getOperand(1)))) ||
                    (isa<DivOp>(op) && !on(op.getOperand(1))));
      if (!linear)
        return mixes("uses the loss over the whole batch (a mean or sum) "
                     "other than linearly (a part of the batch has its own)");
      for (Value r : op.getResults())
        dep[r] = Dependence::Loss;
      continue;
    }
    // Every operand that holds rows has them as the result's dimension 0.
    auto sameRank = [&](Value result) {
      return llvm::all_of(op.getOperands(), [&](Value v) {
        return !on(v) || rankOf(v) == rankOf(result);
      });
    };
    // An operand that does not come from the batch but has as many rows
    // as the result's dimension 0, where the batch is (a constant or a
    // parameter of the batch's shape): each part would need its own rows
    // of it.
    auto foreignRows = [&](Value result) -> std::optional<std::string> {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type || type.getRank() < 1 || type.getDimSize(0) <= 1)
        return std::nullopt;
      for (Value v : op.getOperands())
        if (auto t = dyn_cast<RankedTensorType>(v.getType());
            !on(v) && t && t.getRank() == type.getRank() &&
            t.getDimSize(0) == type.getDimSize(0))
          return "combines the batch's rows with a tensor of " +
                 std::to_string(t.getDimSize(0)) +
                 " rows that does not come from the batch (a constant or a "
                 "parameter): each part of the batch would need its own "
                 "rows of it";
      return std::nullopt;
    };
    std::optional<std::string> reason =
        TypeSwitch<Operation *, std::optional<std::string>>(&op)
            .Case<AddOp, SubOp, MulOp, DivOp, BiasAddOp, ScaleOp, ScaleByOp,
                  ReluOp, GeluOp, SiluOp, RsqrtOp, TanhOp, CastOp, DropoutOp,
                  FusedDropoutAddOp>(
                [&](Operation *o) -> std::optional<std::string> {
                  if (isa<ScaleByOp>(o) && on(o->getOperand(1)))
                    return std::string("scales by a factor computed from the "
                                       "batch");
                  if (!sameRank(o->getResult(0)))
                    return std::string("broadcasts rows of the batch along "
                                       "another dimension");
                  return foreignRows(o->getResult(0));
                })
            .Case([&](MatmulOp m) -> std::optional<std::string> {
              int64_t rank = rankOf(m.getResult());
              bool lhs = bool(on(m.getLhs())), rhs = bool(on(m.getRhs()));
              if (rank >= 3 && sameRank(m.getResult()))
                return foreignRows(m.getResult()); // a batch dimension
              if (lhs && rhs)
                return std::string("multiplies two matrices that both hold "
                                   "rows of the batch (such as x x^T)");
              if ((lhs && m.getTransposeLhs()) || (rhs && !m.getTransposeRhs()))
                return std::string("contracts over the batch dimension");
              if (rhs || rankOf(m.getLhs()) != rank)
                return std::string("moves the batch dimension from the "
                                   "front");
              return std::nullopt;
            })
            .Case([&](FusedGemmEpilogueOp f) -> std::optional<std::string> {
              if (on(f.getWeight()) || on(f.getBias()))
                return std::string("multiplies by a weight computed from the "
                                   "batch");
              return std::nullopt;
            })
            .Case([&](EmbeddingOp e) -> std::optional<std::string> {
              if (on(e.getTable()))
                return std::string("looks up rows of a table computed from "
                                   "the batch");
              return std::nullopt;
            })
            .Case([&](AttentionOp a) -> std::optional<std::string> {
              // [..., S, H, D]: the batch is one of the leading "...".
              if (!sameRank(a.getResult()) || rankOf(a.getResult()) < 4)
                return std::string("attends across rows of the batch (its "
                                   "sequence dimension is the batch's)");
              return std::nullopt;
            })
            .Case([&](SoftmaxOp sm) -> std::optional<std::string> {
              if (rankOf(sm.getInput()) < 2)
                return std::string("normalizes over the batch dimension");
              return std::nullopt;
            })
            .Case([&](LayerNormOp ln) -> std::optional<std::string> {
              if (on(ln.getGamma()) || on(ln.getBeta()))
                return std::string("normalizes with a scale or shift computed "
                                   "from the batch");
              if (rankOf(ln.getGamma()) >= rankOf(ln.getInput()))
                return std::string("normalizes over the batch dimension");
              return std::nullopt;
            })
            .Case([&](RmsNormOp rn) -> std::optional<std::string> {
              if (on(rn.getGamma()))
                return std::string("normalizes with a scale computed from "
                                   "the batch");
              if (rankOf(rn.getGamma()) >= rankOf(rn.getInput()))
                return std::string("normalizes over the batch dimension");
              return std::nullopt;
            })
            .Case([&](TransposeOp t) -> std::optional<std::string> {
              if (t.getPermutation().empty() || t.getPermutation()[0] != 0)
                return std::string("moves the batch dimension from the "
                                   "front");
              return std::nullopt;
            })
            .Case([&](ReshapeOp r) -> std::optional<std::string> {
              auto out = cast<RankedTensorType>(r.getResult().getType());
              if (out.getRank() < 1 || out.getDimSize(0) % k != 0)
                return "reshapes the batch into a leading dimension of " +
                       std::to_string(out.getRank() ? out.getDimSize(0) : 1) +
                       ", which does not split into " + std::to_string(k) +
                       " parts";
              return std::nullopt;
            })
            .Case<ReduceSumOp, ReduceMeanOp>(
                [&](Operation *o) -> std::optional<std::string> {
                  if (!llvm::is_contained(reducedDims(o), 0) ||
                      lossOverBatch(o))
                    return std::nullopt;
                  return std::string("reduces over the batch dimension");
                })
            .Case([&](SliceOp sl) -> std::optional<std::string> {
              // Gradient merge's own slices make the micro-batches.
              if (sl.getDim() == 0 && !getMicroBatch(sl))
                return std::string("takes rows of the batch (a slice of "
                                   "dimension 0)");
              return std::nullopt;
            })
            .Case([&](PadOp pd) -> std::optional<std::string> {
              if (pd.getDim() == 0)
                return std::string("pads the batch dimension");
              return std::nullopt;
            })
            .Case([&](ConcatOp c) -> std::optional<std::string> {
              if (c.getDim() == 0 || !sameRank(c.getResult()))
                return std::string("concatenates along the batch dimension");
              return std::nullopt;
            })
            .Case<BroadcastToOp, SumToOp>(
                [&](Operation *o) -> std::optional<std::string> {
                  if (!sameRank(o->getResult(0)))
                    return std::string(isa<SumToOp>(o)
                                           ? "sums over the batch dimension"
                                           : "moves the batch dimension (to "
                                             "another rank)");
                  auto in = cast<RankedTensorType>(o->getOperand(0).getType());
                  auto out = cast<RankedTensorType>(o->getResult(0).getType());
                  if (in.getRank() > 0 && in.getDimSize(0) != out.getDimSize(0))
                    return std::string(isa<SumToOp>(o)
                                           ? "sums over the batch dimension"
                                           : "broadcasts along the batch "
                                             "dimension");
                  return std::nullopt;
                })
            .Case([&](CrossEntropyOp) -> std::optional<std::string> {
              return std::nullopt;
            })
            .Default([&](Operation *) -> std::optional<std::string> {
              return std::string("is not known to compute each row of the "
                                 "batch from that row alone");
            });
    if (reason)
      return mixes(*reason);
    for (Value r : op.getResults())
      dep[r] = lossOverBatch(&op) ? Dependence::Loss : Dependence::Rows;
    if (auto sum = dyn_cast<ReduceSumOp>(op); sum && lossOverBatch(sum))
      sums.push_back(sum);
  }
  return std::nullopt;
}

/// Whether `v` is computed from a parameter that trains (so that autodiff
/// made the gradient of what reads it).
static bool readsTrainedParam(Value v) {
  SmallVector<Value> work = {v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def)
      continue;
    if (auto get = dyn_cast<GetParamOp>(def)) {
      auto param =
          SymbolTable::lookupNearestSymbolFrom<ParamOp>(get, get.getNameAttr());
      if (param && !param.getFrozen())
        return true;
      continue;
    }
    for (Value in : def->getOperands())
      if (seen.insert(in).second)
        work.push_back(in);
  }
  return false;
}

/// Multiplies each sum, and the result gradient of its strata.reduce_grad,
/// by `k`; fails, at the sum, when autodiff did not make the gradient of a
/// sum that a trained parameter reaches.
static LogicalResult rescaleBatchSums(ArrayRef<ReduceSumOp> sums, int64_t k,
                                      StringRef split) {
  if (k == 1)
    return success();
  for (ReduceSumOp sum : sums) {
    OpBuilder b(sum);
    // Its gradients: strata.reduce_grad of the same input and dimensions.
    SmallVector<ReduceGradOp> grads;
    for (Operation *user : sum.getInput().getUsers())
      if (auto grad = dyn_cast<ReduceGradOp>(user);
          grad && !grad.getMean() && grad.getDims() == sum.getDims())
        grads.push_back(grad);
    if (grads.empty() && readsTrainedParam(sum.getInput()))
      return sum.emitOpError()
             << "sums over the batch, and the program has no "
                "strata.reduce_grad of it (a backward written by hand), so "
                "its gradient cannot be rescaled for the parts of the batch: "
             << split;
    auto factor = b.getF64FloatAttr(double(k));
    b.setInsertionPointAfter(sum);
    auto scaled = ScaleOp::create(b, sum.getLoc(), sum.getResult(), factor);
    copyMetadata(sum, scaled);
    sum.getResult().replaceAllUsesExcept(scaled.getResult(), scaled);
    for (ReduceGradOp grad : grads) {
      b.setInsertionPoint(grad);
      auto adjoint =
          ScaleOp::create(b, grad.getLoc(), grad.getResultGrad(), factor);
      copyMetadata(grad, adjoint);
      grad.getResultGradMutable().assign(adjoint.getResult());
    }
  }
  return success();
}

LogicalResult strata::prepareBatchSplit(Block &body, int64_t k,
                                        StringRef split) {
  SmallVector<ReduceSumOp> sums;
  if (std::optional<BatchMixing> mixing = findBatchMixing(body, k, sums))
    return mixing->op->emitOpError()
           << mixing->reason << ", so it cannot run on 1/" << k
           << " of the batch: " << split;
  return rescaleBatchSums(sums, k, split);
}
