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

#include "strata/Dialect/Strata.h"

#include "mlir/IR/Operation.h"

#include <optional>
#include <string>

namespace strata {

/// Result types of `op`, whose operands now carry 1/k of the batch, given
/// the types its first operand and results had on the whole batch.
mlir::FailureOr<llvm::SmallVector<mlir::Type>>
splitResultTypes(mlir::Operation *op, mlir::Type oldOperand,
                 mlir::TypeRange oldResults, int64_t k);

/// An op of the forward pass that would compute otherwise on a part of the
/// batch than on the whole, and why (in the user's terms).
struct BatchMixing {
  mlir::Operation *op;
  std::string reason;
};

/// The first forward op of `body` (roles forward or none) that does not
/// compute each part of the batch's leading dimension from that part
/// alone, when the block's arguments are split into `k` parts: one that
/// pairs, reduces, slices, moves or normalizes over rows of the batch, or
/// uses the batch's mean loss other than linearly. Only
/// strata.cross_entropy and strata.reduce_mean or reduce_sum over every
/// dimension reduce over the batch (the mean of equal parts' means is the
/// whole's mean, and their gradients follow from the part's rows; a sum,
/// rescaled by rescaleBatchSums, likewise). None when every forward op is
/// row-wise.
/// With `sums`, also collects the sums over the whole batch (reduce_sum of
/// rows of the batch over every dimension), for rescaleBatchSums.
std::optional<BatchMixing>
findBatchMixing(mlir::Block &body, int64_t k,
                llvm::SmallVectorImpl<ReduceSumOp> *sums = nullptr);

/// Multiplies each sum over the whole batch (as findBatchMixing collects
/// them), and the result gradient of its strata.reduce_grad, by `k`: the
/// mean of `k` equal parts' rescaled sums is the whole's sum, as their
/// averaged gradients are its gradient. Fails, at the sum, when autodiff
/// did not make its gradient. `split` says what makes the parts, for the
/// message.
mlir::LogicalResult rescaleBatchSums(llvm::ArrayRef<ReduceSumOp> sums,
                                     int64_t k, llvm::StringRef split);

} // namespace strata

#endif // STRATA_PASSES_BATCHSPLIT_H
