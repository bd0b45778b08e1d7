//===- GradientMerge.cpp - Micro-batches of the global batch --------------===//

#include "BatchSplit.h"
#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"

namespace strata {
#define GEN_PASS_DEF_STRATAGRADIENTMERGE
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

struct GradientMergePass
    : public strata::impl::StrataGradientMergeBase<GradientMergePass> {
  using StrataGradientMergeBase::StrataGradientMergeBase;

  void runOnOperation() override {
    if (kSteps < 1) {
      mlir::emitError(getOperation().getLoc())
          << "strata-gradient-merge: k-steps must be >= 1, got "
          << static_cast<int64_t>(kSteps);
      return signalPassFailure();
    }
    if (kSteps == 1)
      return;
    if (failed(checkRunsBefore(getOperation(), "strata-gradient-merge",
                               {"strata-gradient-merge", "strata-data-parallel",
                                "strata-optimizer", "strata-sharding",
                                "strata-pipeline"})))
      return signalPassFailure();
    FailureOr<func::FuncOp> step =
        getDifferentiatedStep(getOperation(), "strata-gradient-merge",
                              ", and this pass before strata-optimizer");
    if (failed(step))
      return signalPassFailure();
    if (failed(split(*step)))
      return signalPassFailure();
    recordPass(getOperation(), "strata-gradient-merge");
  }

  LogicalResult split(func::FuncOp func) {
    const int64_t k = kSteps;
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() < 1 || type.getDimSize(0) % k != 0)
        return mlir::emitError(func.getLoc())
               << "strata-gradient-merge: argument " << arg.getArgNumber()
               << " (" << type << ") has no leading batch dimension "
               << "divisible by k-steps = " << k;
    }
    if (failed(prepareBatchSplit(
            body, k,
            "strata-gradient-merge splits the batch's leading dimension "
            "into " +
                std::to_string(k) + " micro-batches")))
      return failure();
    // The ops that depend on the batch are cloned per micro-batch.
    DenseSet<Value> batchValues(body.getArguments().begin(),
                                body.getArguments().end());
    SmallVector<Operation *> perMicroBatch;
    for (Operation &op : body.without_terminator()) {
      if (llvm::none_of(op.getOperands(),
                        [&](Value v) { return batchValues.contains(v); }))
        continue;
      if (!isPure(&op))
        return op.emitOpError()
               << "has side effects and depends on the batch: gradient "
                  "merge cannot replicate it per micro-batch";
      perMicroBatch.push_back(&op);
      for (Value r : op.getResults())
        batchValues.insert(r);
    }

    OpBuilder b(ret);
    MLIRContext *ctx = func.getContext();
    auto microBatchAttr = [&](int64_t m) {
      return IntegerAttr::get(IntegerType::get(ctx, 64), m);
    };
    SmallVector<Value> merged;
    for (int64_t m = 0; m < k; ++m) {
      IRMapping map;
      for (BlockArgument arg : body.getArguments()) {
        auto type = cast<RankedTensorType>(arg.getType());
        int64_t size = type.getDimSize(0) / k;
        auto slice = SliceOp::create(b, arg.getLoc(), arg,
                                     b.getI64IntegerAttr(0),
                                     b.getI64IntegerAttr(m * size),
                                     b.getI64IntegerAttr(size));
        setRole(slice, Role::Forward);
        slice->setAttr(StrataDialect::kMicroBatchAttrName, microBatchAttr(m));
        map.map(arg, slice.getResult());
      }
      for (Operation *op : perMicroBatch) {
        Operation *clone = b.clone(*op, map);
        auto types = splitResultTypes(
            clone, op->getNumOperands() ? op->getOperand(0).getType() : Type(),
            op->getResultTypes(), k);
        if (failed(types))
          return op->emitOpError()
                 << "cannot be split into " << k
                 << " micro-batches along its leading dimension";
        for (auto [result, type] : llvm::zip(clone->getResults(), *types))
          result.setType(type);
        clone->setAttr(StrataDialect::kMicroBatchAttrName, microBatchAttr(m));
        map.map(op->getResults(), clone->getResults());
      }
      // Running sums of the loss and of every gradient, in f32 whatever
      // the gradient's type (a bf16 sum loses the small micro-batch
      // gradients).
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        Value value = map.lookupOrDefault(v);
        if (auto t = cast<RankedTensorType>(value.getType());
            isa<FloatType>(t.getElementType()) &&
            t.getElementType().getIntOrFloatBitWidth() < 32) {
          auto widen =
              CastOp::create(b, ret.getLoc(), t.clone(b.getF32Type()), value);
          setRole(widen, i == 0 ? Role::Forward : Role::Backward);
          widen->setAttr(StrataDialect::kMicroBatchAttrName, microBatchAttr(m));
          value = widen;
        }
        if (m == 0) {
          merged.push_back(value);
          continue;
        }
        auto add = AddOp::create(b, ret.getLoc(), merged[i], value);
        setRole(add, i == 0 ? Role::Forward : Role::Backward);
        merged[i] = add;
      }
    }
    for (auto [i, v] : llvm::enumerate(merged)) {
      if (i > 0 && !avg)
        continue;
      auto mean = ScaleOp::create(b, ret.getLoc(), v,
                                  b.getF64FloatAttr(1.0 / double(k)));
      setRole(mean, i == 0 ? Role::Forward : Role::Backward);
      merged[i] = mean;
    }
    ret->setOperands(merged);
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(),
                                   ValueRange(merged).getTypes()));
    func->setAttr(StrataDialect::kMicroBatchesAttrName,
                  b.getI64IntegerAttr(k));
    for (Operation *op : llvm::reverse(perMicroBatch))
      op->erase();
    if (failed(verify(func)))
      return mlir::emitError(func.getLoc()) << "strata-gradient-merge: the program does "
                                 "not split into "
                              << k << " micro-batches along dimension 0";
    return success();
  }
};

} // namespace
