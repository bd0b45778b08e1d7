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

#include "mlir/IR/Block.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/DenseMap.h"

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
};

} // namespace strata

#endif // STRATA_PASSES_PIPELINEPLACEMENT_H
