//===- RecomputeCasts.cpp - Cast again in the backward what it reads ------===//
//
// Mixed precision surrounds the ops it keeps in f32 with casts. After
// autodiff the backward often reads both sides of such a cast: softmax's
// f32 output (its gradient reads it) and the bf16 copy of it (the next
// product's gradient reads that), or o1's f32 weight (resident) and its
// bf16 copy. Keeping both for the backward costs the copy's bytes for the
// whole forward pass; casting again where the backward reads it costs one
// pass over the value.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "strata/Dialect/Program.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace strata {
#define GEN_PASS_DEF_STRATARECOMPUTECASTS
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

bool isBackward(Operation *op) {
  std::optional<Role> role = getRole(op);
  return role && *role == Role::Backward;
}

int64_t bits(Value v) {
  RankedTensorType t = tensorType(v);
  return t.getNumElements() * t.getElementTypeBitWidth();
}

struct RecomputeCastsPass
    : public strata::impl::StrataRecomputeCastsBase<RecomputeCastsPass> {
  using StrataRecomputeCastsBase::StrataRecomputeCastsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<func::FuncOp> step =
        getDifferentiatedStep(module, "strata-recompute-casts");
    if (failed(step))
      return signalPassFailure();
    Block &body = step->getBody().front();
    OpBuilder builder(&getContext());
    // Where an op runs: its pipeline stage and micro-batch.
    auto place = [](Operation *op) {
      return std::make_pair(getStage(op), getMicroBatch(op));
    };
    for (Operation &op : llvm::make_early_inc_range(body)) {
      auto cast = dyn_cast<CastOp>(op);
      if (!cast || getRole(cast) != Role::Forward)
        continue;
      Value in = cast.getInput(), out = cast.getResult();
      // The backward's reads where the cast runs (a read on another stage
      // or micro-batch keeps the value the pipeline sends it).
      SmallVector<OpOperand *> reads;
      for (OpOperand &use : out.getUses())
        if (isBackward(use.getOwner()) && !readsOnlyType(use) &&
            place(use.getOwner()) == place(cast))
          reads.push_back(&use);
      if (reads.empty())
        continue;
      // The operand where the cast runs too (a step input: outside any
      // pipeline).
      Operation *def = in.getDefiningOp();
      if (def ? place(def) != place(cast) : getStage(cast).has_value())
        continue;
      // Keeping the operand costs nothing more when it lives for the whole
      // step (a parameter unless ZeRO-3 gathers it, state, a step input) or
      // the backward reads it anyway, and less when it is the narrower.
      bool resident = !def || isa<GetStateOp>(def) ||
                      (isa<GetParamOp>(def) && residentParams);
      bool kept = llvm::any_of(in.getUsers(), isBackward);
      if (!resident && !kept && bits(in) >= bits(out))
        continue;
      Operation *first = reads.front()->getOwner();
      for (OpOperand *use : reads)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      builder.setInsertionPoint(first);
      Operation *again = builder.clone(*cast);
      setRole(again, Role::Backward);
      for (OpOperand *use : reads)
        use->set(again->getResult(0));
    }
    recordPass(module, "strata-recompute-casts");
  }
};

} // namespace
