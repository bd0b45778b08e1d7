//===- PipelinePlacement.h - Where each op of a pipeline runs ---*- C++ -*-===//
//
// Internal to the passes: the placement strata-pipeline computes (every op's
// stage and job) and the rewrites that work on it before the rank's program
// is cut out: the weight-gradient split of ZBH1 (PipelineWeightGradients.cpp)
// and per-stage global-norm clipping (PipelineClipping.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_PIPELINEPLACEMENT_H
#define STRATA_PASSES_PIPELINEPLACEMENT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace strata {

/// Where an op runs. `stage` is the virtual stage (-1: every stage that
/// needs it); `part` the job: pre, F, B (input-gradient part), W, post.
enum class Part { Pre, F, B, W, Post };

struct Place {
  int64_t stage = -1;
  Part part = Part::Pre;
  int64_t microBatch = -1;
  bool replicated = false;
  bool dead = false;
};

/// A message: `value` computed on rank stage `from`, read on `to`.
struct Message {
  mlir::Value value;
  int64_t from, to;
  /// Index of the send in the sender's sequence / of the receive in the
  /// receiver's (items before which it goes).
  size_t sendAfter = 0, recvBefore = 0;
};

/// A send or a receive of a stage, before the item at `at` of its sequence
/// (receives of one channel in `tiebreak` order).
struct StageEvent {
  bool send;
  Message *msg;
  size_t at;
  size_t tiebreak;
};

/// Every op's place, and the stage layout: `ppDegree` rank stages of
/// `chunks` virtual stages each (interleaved schedule).
struct PipelinePlacement {
  int64_t ppDegree = 1;
  int64_t chunks = 1;
  llvm::DenseMap<mlir::Operation *, Place> places;
  /// Position of each op in the step as written.
  llvm::DenseMap<mlir::Operation *, size_t> order;

  int64_t stages() const { return ppDegree * chunks; }
  int64_t rankStage(int64_t vstage) const { return vstage % ppDegree; }
  int64_t chunkOf(int64_t vstage) const { return vstage / ppDegree; }

  /// ZBH1: splits every product's gradient into an input-gradient op and a
  /// weight-gradient op (before placement).
  static void splitWeightGradients(mlir::Block &body);
  /// ZBH1: moves the backward ops that no input gradient sent to another
  /// stage depends on into the weight part W.
  mlir::LogicalResult classifyWeightParts(mlir::Block &body);
  /// Global-norm clipping over gradients of several stages, per stage.
  mlir::LogicalResult splitClipping(mlir::Block &body);

  /// Cuts the program of rank stage `me` out of the placed step
  /// (PipelineRankProgram.cpp): the ops of `ops[me]` in order, the sends and
  /// receives of `events[me]` over `pp` on one token chain with the
  /// collectives, the ops not `on[me]` and the declarations it no longer
  /// reads erased, `schedule` recorded as the module's `strata.schedule`.
  mlir::LogicalResult
  emitRankProgram(mlir::ModuleOp module, mlir::func::FuncOp func, int64_t me,
                  mlir::FlatSymbolRefAttr pp,
                  llvm::ArrayRef<llvm::SmallVector<mlir::Operation *>> ops,
                  llvm::ArrayRef<llvm::DenseSet<mlir::Operation *>> on,
                  llvm::ArrayRef<std::vector<StageEvent>> events,
                  llvm::ArrayRef<mlir::Attribute> schedule);
};

} // namespace strata

#endif // STRATA_PASSES_PIPELINEPLACEMENT_H
