//===- PipelineSchedule.h - Pipeline schedules and their bubble -*- C++ -*-===//
//
// The micro-batch schedules of pipeline parallelism as a pure library: the
// jobs each stage runs, in order, for P stages and M micro-batches, and the
// bubble each schedule leaves. strata-pipeline orders a rank's ops by them;
// the report prints the bubble.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_PIPELINESCHEDULE_H
#define STRATA_PASSES_PIPELINESCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// A schedule entry: the forward of a micro-batch, its whole backward, or
/// (ZBH1) only the input-gradient part (I) or only the weight-gradient part
/// (W).
enum class Step { F, B, I, W };

struct Entry {
  Step step;
  int64_t microBatch;
  int64_t chunk = 0;
};

/// "F3", "B0", "W1"; with `chunks`, "F3.1" (chunk 1 of the interleaved
/// schedule).
std::string entryName(const Entry &e, bool chunks);

/// The jobs of every stage in order for schedule `mode` (FThenB, 1F1B,
/// Eager1F1B, VPP, ZBH1), `p` stages, `m` micro-batches and `v` chunks per
/// stage; an error saying which setting the schedule cannot run with.
llvm::Expected<std::vector<std::vector<Entry>>>
makeSchedule(llvm::StringRef mode, int64_t p, int64_t m, int64_t v);

/// The pipeline bubble as a fraction of the step, by the schedules' formulas
/// for `pp` stages and `m` micro-batches: FThenB,
/// 1F1B and Eager1F1B (p-1)/(m+p-1); VPP with v chunks (p-1)/(v m+p-1)
/// (the bubble divided by v); ZBH1 with equal forward, input-gradient and
/// weight-gradient times (p-1)/3 / (m+(p-1)/3) (a third of 1F1B's bubble).
double pipelineBubble(llvm::StringRef schedule, int64_t pp, int64_t m,
                      int64_t v);

} // namespace strata

#endif // STRATA_PASSES_PIPELINESCHEDULE_H
