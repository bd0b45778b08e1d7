//===- MemoryPlan.h - Static memory plan of a step --------------*- C++ -*-===//
//
// Every intermediate value of a step function gets an offset in one arena,
// from liveness: two values share bytes only if their lifetimes do not
// overlap, and an elementwise op may write its result over an operand that
// dies there (in place); the tensors that strata.pack lays end to end are
// planned inside the packed buffer, and strata.unpack's results inside its
// input, where nothing else needs them apart. Parameters, optimizer state
// and the batch live outside the arena, for the whole run. The plan is
// known before the run: its peak is what the runtime will allocate.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_ANALYSIS_MEMORYPLAN_H
#define STRATA_ANALYSIS_MEMORYPLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace strata {

struct PlannedBuffer {
  /// The values stored in this buffer: one, or a chain of in-place results.
  std::vector<mlir::Value> values;
  int64_t bytes = 0;
  /// Op indices (in the step's block) of the first definition and last use.
  int64_t start = 0, end = 0;
  int64_t offset = 0;
  /// A part of another buffer (a tensor packed into a communication bucket,
  /// or unpacked from one, in place): its index, and the byte offset in it.
  /// Such a buffer is not placed itself; its offset is the parent's plus
  /// `inner`. It keeps its own life (a packed tensor's ends at the pack,
  /// an unpacked one's starts at the unpack), and the parent's bytes are
  /// taken from the pack to the unpack only: placement treats a bucket and
  /// its parts as one shape.
  std::optional<size_t> parent;
  int64_t inner = 0;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  /// Size of the arena of intermediate values.
  int64_t arenaBytes = 0;
  /// Parameters and state (strata.param, strata.state), resident.
  int64_t persistentBytes = 0;
  /// The step's arguments (one batch).
  int64_t inputBytes = 0;
  /// The liveness lower bound: the most bytes alive at one op.
  int64_t livePeakBytes = 0;
  int64_t inPlaceOps = 0;
  /// Tensors packed into or unpacked from a bucket without a copy.
  int64_t packedInPlace = 0;

  int64_t peakBytes() const {
    return arenaBytes + persistentBytes + inputBytes;
  }
};

/// The strata.assign ops of `block` (a step's body) that must wait for the
/// end of the step: their parameter or state is read after them (a read op
/// there, or an earlier read whose value is used there). Their values stay
/// alive until the step returns; any other assignment can happen where it
/// stands. One pass over the block.
llvm::DenseSet<mlir::Operation *> deferredAssigns(mlir::Block &block);

/// Where a collective that starts at `op` (all_reduce, broadcast,
/// reduce_scatter, all_gather) completes: before the first op of its block
/// that reads its result, or, when nothing does, before the next op (the
/// result's bytes may be reused there). Between the two the runtime's
/// collective is in flight; reduce_scatter and all_gather read their input
/// until it completes, so the plan keeps that input alive.
mlir::Operation *collectiveWaitPoint(mlir::Operation *op);

/// Bytes of a ranked tensor type (0 for anything else, e.g. tokens).
int64_t tensorBytes(mlir::Type type);

/// What a rank holds for training, in ZeRO's terms: parameters (every
/// strata.param), gradients (those its optimizer phase reads: the updates'
/// inputs, or global-norm clipping's, which reads every gradient unless
/// ZeRO-2 shards it; a gradient nobody reads dies at its all-reduce) and
/// optimizer state (the strata.state its program declares: sharding leaves
/// each rank its own share).
struct TrainingMemory {
  int64_t paramBytes = 0, gradBytes = 0, stateBytes = 0;
};
TrainingMemory trainingMemory(mlir::ModuleOp module);

/// The most bytes a step's tensors (its module's parameters and state, its
/// arguments and every result of its ops but the views of parameters and
/// state) may take together: the plan's sums and offsets are int64 byte
/// counts.
constexpr int64_t kMaxStepBytes = int64_t(1) << 62;

/// Whether `func`'s tensors take at most kMaxStepBytes (no machine holds
/// more); reports an error at the step otherwise, naming `pass`.
mlir::LogicalResult checkStepBytes(mlir::func::FuncOp func,
                                   llvm::StringRef pass);

/// Plans `func`, aligning every buffer to `alignment` bytes (within
/// checkStepBytes's bound).
MemoryPlan planMemory(mlir::func::FuncOp func, int64_t alignment = 64);

} // namespace strata

#endif // STRATA_ANALYSIS_MEMORYPLAN_H
