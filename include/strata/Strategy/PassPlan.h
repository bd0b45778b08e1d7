//===- PassPlan.h - The passes a strategy selects ---------------*- C++ -*-===//
//
// Turns a strategy into an ordered list of Strata passes with their
// options. docs/strategy.md gives the order and the reason for each
// position.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_STRATEGY_PASSPLAN_H
#define STRATA_STRATEGY_PASSPLAN_H

#include "strata/Strategy/Strategy.h"

#include "llvm/ADT/ArrayRef.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace strata {

struct PlannedPass {
  /// Registered pass argument, e.g. "strata-gradient-merge".
  std::string name;
  /// Options in pass-pipeline syntax, e.g. "k-steps=4 avg=true".
  std::string options;
  /// The strategy key that selected the pass ("always" for the passes
  /// every training program needs).
  std::string reason;
};

/// The passes `strategy` selects, in pipeline order. `worldSize`, when
/// known, decides whether data parallelism is needed; `rank` is the rank
/// whose program is made (sharding makes one program per rank).
std::vector<PlannedPass> planPasses(const Strategy &strategy,
                                    std::optional<int64_t> worldSize,
                                    int64_t rank = 0);

/// Textual pipeline: "strata-a,strata-b{opt=1}".
std::string pipelineText(llvm::ArrayRef<PlannedPass> plan);

/// Appends the planned passes to `pm`. A pass that is not registered (its
/// feature is not implemented yet) is an error naming the strategy key
/// that selected it and where the file set it.
llvm::Error addPlannedPasses(mlir::OpPassManager &pm,
                             llvm::ArrayRef<PlannedPass> plan,
                             const Strategy &strategy);

} // namespace strata

#endif // STRATA_STRATEGY_PASSPLAN_H
