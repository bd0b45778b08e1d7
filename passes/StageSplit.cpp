//===- StageSplit.cpp - Pipeline stages of the forward ops ----------------===//

#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <limits>

namespace strata {
#define GEN_PASS_DEF_STRATASTAGESPLIT
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// Reads and constants: they go where they are used.
bool isFloating(Operation *op) {
  return isa<GetParamOp, GetStateOp, arith::ConstantOp, InitTokenOp>(op);
}

/// FLOPs plus 4 x the bytes written.
double cost(Operation *op) {
  double bytes = 0;
  for (Value r : op->getResults())
    if (auto type = dyn_cast<RankedTensorType>(r.getType()))
      bytes += double(type.getNumElements()) *
               double(std::max<int64_t>(
                   type.getElementType().getIntOrFloatBitWidth() / 8, 1));
  return double(matmulFlops(op)) + 4.0 * bytes;
}

/// Cuts `costs` into `parts` contiguous non-empty ranges minimising the
/// largest sum; returns the first unit of each part.
SmallVector<size_t> linearPartition(ArrayRef<double> costs, int64_t parts) {
  size_t n = costs.size();
  SmallVector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the least largest sum of the first i units in k parts.
  std::vector<std::vector<double>> best(parts + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> cut(parts + 1,
                                       std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k)
    for (size_t i = k; i <= n; ++i)
      for (size_t j = k - 1; j < i; ++j) {
        double value = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (value < best[k][i]) {
          best[k][i] = value;
          cut[k][i] = j;
        }
      }
  SmallVector<size_t> starts(parts);
  size_t i = n;
  for (int64_t k = parts; k >= 1; --k) {
    starts[k - 1] = cut[k][i];
    i = cut[k][i];
  }
  return starts;
}

struct StageSplitPass
    : public strata::impl::StrataStageSplitBase<StageSplitPass> {
  using StrataStageSplitBase::StrataStageSplitBase;

  /// The rank grid's pipeline stages.
  int64_t ppDegree = 1;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (vppDegree < 1) {
      mlir::emitError(module.getLoc())
          << "strata-stage-split: vpp-degree must be >= 1";
      return signalPassFailure();
    }
    FailureOr<RankGridOp> grid = getRankGrid(module, "strata-stage-split");
    if (failed(grid))
      return signalPassFailure();
    ppDegree = grid->getAxisSize(GridAxis::Pp);
    FailureOr<func::FuncOp> step =
        getStepFunction(module, "strata-stage-split");
    if (failed(step))
      return signalPassFailure();
    if (returnsGradients(*step)) {
      mlir::emitError(step->getLoc())
          << "strata-stage-split: the step is already differentiated; run "
             "this pass before strata-autodiff, which puts each backward op "
             "on the stage of its forward op";
      return signalPassFailure();
    }
    // (After the optimizer the step returns its loss alone again.)
    if (failed(checkRunsBefore(module, "strata-stage-split",
                               {"strata-autodiff", "strata-gradient-merge",
                                "strata-data-parallel", "strata-optimizer",
                                "strata-sharding", "strata-pipeline"})))
      return signalPassFailure();
    if (failed(split(*step)))
      return signalPassFailure();
    recordPass(module, "strata-stage-split");
  }

  LogicalResult split(func::FuncOp func) {
    const int64_t stages = ppDegree * vppDegree;
    Block &body = func.getBody().front();
    auto setStage = [&](Operation *op, int64_t stage) {
      op->setAttr(
          StrataDialect::kStageAttrName,
          IntegerAttr::get(IntegerType::get(op->getContext(), 64), stage));
    };

    bool annotated = false;
    for (Operation &op : body.without_terminator())
      if (std::optional<int64_t> stage = getStage(&op)) {
        annotated = true;
        if (*stage >= stages)
          return op.emitOpError()
                 << "is placed on stage " << *stage << ", but the pipeline "
                 << "has " << stages << " (the rank grid's pp " << ppDegree
                 << " x vpp-degree " << static_cast<int64_t>(vppDegree) << ")";
      }
    if (annotated) {
      int64_t current = 0;
      for (Operation &op : body.without_terminator()) {
        if (std::optional<int64_t> stage = getStage(&op))
          current = *stage;
        else if (!isFloating(&op))
          setStage(&op, current);
      }
      return success();
    }

    // Units: maximal runs of ops of one layer.
    SmallVector<SmallVector<Operation *>> units;
    SmallVector<double> costs;
    StringRef unitLayer;
    for (Operation &op : body.without_terminator()) {
      if (isFloating(&op))
        continue;
      StringRef layer = getLayer(&op);
      if (units.empty() || layer != unitLayer) {
        units.emplace_back();
        costs.push_back(0.0);
        unitLayer = layer;
      }
      units.back().push_back(&op);
      costs.back() += cost(&op);
    }
    if (int64_t(units.size()) < stages)
      return mlir::emitError(func.getLoc())
             << "strata-stage-split: the step has " << units.size()
             << (units.size() == 1 ? " unit" : " units")
             << " (runs of ops of one strata.layer) for " << stages
             << " stages; annotate ops with strata.stage to split inside a "
                "layer";
    SmallVector<size_t> starts = linearPartition(costs, stages);
    for (int64_t s = 0; s < stages; ++s) {
      size_t end = s + 1 < stages ? starts[s + 1] : units.size();
      for (size_t u = starts[s]; u < end; ++u)
        for (Operation *op : units[u])
          setStage(op, s);
    }
    return success();
  }
};

} // namespace
