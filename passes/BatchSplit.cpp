//===- BatchSplit.cpp - Retyping ops for a fraction of the batch ----------===//

#include "BatchSplit.h"

#include "strata/Dialect/Strata.h"

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
