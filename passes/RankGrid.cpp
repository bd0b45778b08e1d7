//===- RankGrid.cpp - Declare the job's rank grid -------------------------===//

#include "PassUtils.h"
#include "strata/Dialect/RankLimit.h"
#include "strata/Passes/Passes.h"

namespace strata {
#define GEN_PASS_DEF_STRATARANKGRID
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

struct RankGridPass : public strata::impl::StrataRankGridBase<RankGridPass> {
  using StrataRankGridBase::StrataRankGridBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const std::pair<const char *, int64_t> axes[] = {
        {"pp", pp}, {"dp", dp}, {"sharding", sharding}, {"mp", mp}};
    int64_t world = 1;
    for (auto [name, size] : axes) {
      if (size < 1 || size > kMaxRanks) {
        emitError(module.getLoc())
            << "strata-rank-grid: " << name << " must be in [1, " << kMaxRanks
            << "], got " << size;
        return signalPassFailure();
      }
      // (Checked as it grows: factors and products stay below 2^40.)
      if ((world *= size) > kMaxRanks) {
        emitError(module.getLoc())
            << "strata-rank-grid: pp x dp x sharding x mp is more than "
            << kMaxRanks << " ranks, the most a job may have";
        return signalPassFailure();
      }
    }
    if (mp != 1) {
      emitError(module.getLoc())
          << "strata-rank-grid: mp " << static_cast<int64_t>(mp)
          << ": tensor parallelism is not implemented yet";
      return signalPassFailure();
    }
    if (RankGridOp grid = findRankGrid(module)) {
      if (grid.getAxisSize(GridAxis::Pp) == pp &&
          grid.getAxisSize(GridAxis::Dp) == dp &&
          grid.getAxisSize(GridAxis::Sharding) == sharding &&
          grid.getAxisSize(GridAxis::Mp) == mp)
        return;
      grid.emitError() << "strata-rank-grid: the program declares another "
                          "rank grid than (pp = "
                       << static_cast<int64_t>(pp)
                       << ", dp = " << static_cast<int64_t>(dp)
                       << ", sharding = " << static_cast<int64_t>(sharding)
                       << ", mp = " << static_cast<int64_t>(mp) << ")";
      return signalPassFailure();
    }
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto grid =
        RankGridOp::create(b, module.getLoc(), "ranks", pp, dp, sharding, mp);
    SymbolTable(module).insert(grid);
  }
};

} // namespace
