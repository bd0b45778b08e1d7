//===- BatchSplit.h - Retyping ops for a fraction of the batch --*- C++ -*-===//
//
// Shared by the passes that give a program a part of its batch: gradient
// merge (micro-batches) and data parallelism (each rank's shard). The batch
// dimension leads; ops whose result type follows from their operands are
// re-inferred, ops that spell it out follow their operand's leading
// dimension.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_BATCHSPLIT_H
#define STRATA_PASSES_BATCHSPLIT_H

#include "mlir/IR/Operation.h"

namespace strata {

/// Result types of `op`, whose operands now carry 1/k of the batch, given
/// the types its first operand and results had on the whole batch.
mlir::FailureOr<llvm::SmallVector<mlir::Type>>
splitResultTypes(mlir::Operation *op, mlir::Type oldOperand,
                 mlir::TypeRange oldResults, int64_t k);

/// Prepares `body` for a split of its batch's leading dimension into `k`
/// parts: refuses, at the op, the first forward op (roles forward or none)
/// that would compute otherwise on a part than on the whole (one that
/// pairs, reduces, slices, moves or normalizes over rows of the batch, or
/// uses the loss over the whole batch other than linearly), then rescales
/// each sum over the whole batch for the parts. Only strata.cross_entropy
/// and strata.reduce_mean or reduce_sum over every dimension reduce over
/// the batch: the mean of equal parts' means is the whole's mean, and their
/// gradients follow from the part's rows; a sum and its gradient are
/// multiplied by `k` on each part, so that the parts' mean is the whole's
/// sum (which needs the strata.reduce_grad autodiff made). `split` says
/// what makes the parts, for the messages.
mlir::LogicalResult prepareBatchSplit(mlir::Block &body, int64_t k,
                                      llvm::StringRef split);

} // namespace strata

#endif // STRATA_PASSES_BATCHSPLIT_H
