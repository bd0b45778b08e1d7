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

} // namespace strata

#endif // STRATA_PASSES_BATCHSPLIT_H
