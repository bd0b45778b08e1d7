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

#include <functional>
#include <memory>

namespace mlir {
class PassManager;
class Pass;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace strata {

struct PlannedPass {
  /// Registered pass argument, e.g. "strata-gradient-merge".
  std::string name;
  /// The strategy key that selected the pass ("always" for the passes
  /// every training program needs).
  std::string reason;
  /// Makes the pass from its typed options; empty when the pass is not
  /// implemented yet.
  std::function<std::unique_ptr<mlir::Pass>()> create;
  /// What the plan should tell about the choice, or empty.
  std::string note;
  /// What the pass rewrites, for the warning when it finds none of it in a
  /// program ("a matmul followed by bias_add"); empty for the passes that
  /// always change the program.
  std::string rewrites;

  /// The pass's options in pass-pipeline syntax, e.g. "avg=true k-steps=4"
  /// (for display: the pass is made by `create`, never from this text).
  std::string options() const;
};

/// The passes `strategy` selects, in pipeline order. `worldSize`, when
/// known, decides whether data parallelism is needed; `rank` is the rank
/// whose program is made (sharding makes one program per rank); the passes
/// whose rewrites depend on the backend follow runtime target `target`
/// ("cpu", "cuda").
std::vector<PlannedPass> planPasses(const Strategy &strategy,
                                    std::optional<int64_t> worldSize,
                                    int64_t rank = 0,
                                    llvm::StringRef target = "cpu");

/// An error naming the strategy key (and where the file set it) of the
/// first planned pass that is not implemented yet, or success.
llvm::Error checkPlanImplemented(llvm::ArrayRef<PlannedPass> plan,
                                 const Strategy &strategy);

/// Appends the planned passes to `pm` (after checkPlanImplemented), behind
/// a check that the step's batch splits as the strategy asks on a job of
/// `worldSize` ranks (one when unknown; checkBatchSplit, reported at the
/// strategy key as an error diagnostic). A pass
/// that a strategy key selected and that leaves the program as it found it
/// (flash_attention on a program without attention, say) is reported as a
/// warning on the module, naming the key and where the file set it: the
/// same strategy file serves programs it does not all apply to, so this is
/// not an error.
llvm::Error addPlannedPasses(mlir::PassManager &pm,
                             llvm::ArrayRef<PlannedPass> plan,
                             const Strategy &strategy,
                             std::optional<int64_t> worldSize);

/// Checks that the step's batch splits over the data-parallel ranks of a
/// `worldSize` job and then into the micro-batches of gradient merge or the
/// pipeline (of `pipeline.micro_batch_size` rows when that is given). The
/// error names the strategy key (with its file:line:col) and says what to
/// change. (addPlannedPasses checks it before the passes run; strata-run's
/// launcher before it launches the ranks.)
llvm::Error checkBatchSplit(const Strategy &strategy,
                            mlir::func::FuncOp step, int64_t worldSize);

} // namespace strata

#endif // STRATA_STRATEGY_PASSPLAN_H
