//===- PipelineWeightGradients.cpp - ZBH1's input/weight gradient split ---===//
//
// The zero-bubble schedule (ZBH1) runs each backward in two jobs: B, the
// input gradients the previous stage waits for, and W, the weight gradients,
// which a stage delays into the bubble of the cool-down.
//
//===----------------------------------------------------------------------===//

#include "PipelinePlacement.h"
#include "strata/Dialect/Strata.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace strata;

/// ZBH1: a product's gradient becomes two ops, one for the input gradient
/// (B) and one for the weight gradient (W); the lowering computes only the
/// results that are read.
void PipelinePlacement::splitWeightGradients(Block &body) {
  SmallVector<MatmulGradOp> grads;
  for (Operation &op : body.without_terminator())
    if (auto grad = dyn_cast<MatmulGradOp>(op))
      if (!grad.getLhsGrad().use_empty() && !grad.getRhsGrad().use_empty())
        grads.push_back(grad);
  for (MatmulGradOp grad : grads) {
    OpBuilder b(grad->getNextNode());
    Operation *weight = b.clone(*grad.getOperation());
    grad.getRhsGrad().replaceAllUsesWith(weight->getResult(1));
  }
}

/// ZBH1: a backward op of a micro-batch belongs to the weight part W unless
/// an input gradient sent to another stage depends on it.
LogicalResult PipelinePlacement::classifyWeightParts(Block &body) {
  DenseSet<Operation *> inputPart;
  SmallVector<Operation *> worklist;
  for (Operation &op : body.without_terminator()) {
    const Place &p = places[&op];
    if (p.part != Part::B || p.replicated)
      continue;
    bool crosses = false;
    for (Operation *user : op.getUsers()) {
      auto it = places.find(user);
      if (it != places.end() && !it->second.replicated &&
          rankStage(it->second.stage) != rankStage(p.stage))
        crosses = true;
    }
    if (crosses)
      worklist.push_back(&op);
  }
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (!inputPart.insert(op).second)
      continue;
    const Place &p = places[op];
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp()) {
        const Place &d = places[def];
        if (d.part == Part::B && d.stage == p.stage &&
            d.microBatch == p.microBatch)
          worklist.push_back(def);
      }
  }
  for (Operation &op : body.without_terminator()) {
    Place &p = places[&op];
    if (p.part == Part::B && !p.replicated && !inputPart.contains(&op))
      p.part = Part::W;
  }
  return success();
}
