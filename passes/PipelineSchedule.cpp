//===- PipelineSchedule.cpp - Pipeline schedules and their bubble ---------===//

#include "strata/Passes/PipelineSchedule.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace llvm;

namespace strata {

namespace {

/// Paddle's job list shape: `warmup` forwards, then pairs [B, F] while
/// forwards remain, then the remaining backwards.
std::vector<Entry> warmupPairs(int64_t warmup, int64_t m) {
  std::vector<Entry> list;
  int64_t f = 0, b = 0;
  for (; f < std::min(warmup, m); ++f)
    list.push_back({Step::F, f});
  for (; f < m; ++f, ++b) {
    list.push_back({Step::B, b});
    list.push_back({Step::F, f});
  }
  for (; b < m; ++b)
    list.push_back({Step::B, b});
  return list;
}

} // namespace

std::string entryName(const Entry &e, bool chunks) {
  const char *names[] = {"F", "B", "I", "W"};
  std::string name = names[int(e.step)];
  name += std::to_string(e.microBatch);
  if (chunks) {
    name += '.';
    name += std::to_string(e.chunk);
  }
  return name;
}

Expected<std::vector<std::vector<Entry>>>
makeSchedule(StringRef mode, int64_t p, int64_t m, int64_t v) {
  std::vector<std::vector<Entry>> stages(p);
  bool needsM = mode == "1F1B" || mode == "Eager1F1B" || mode == "ZBH1";
  if (needsM && m < p) {
    return createStringError(
        inconvertibleErrorCode(),
        llvm::formatv("schedule {0} needs at least pp-degree micro-batches "
                      "(accumulate_steps >= pp_degree): {1} micro-batches for "
                      "{2} stages",
                      mode, m, p));
  }
  if (mode != "VPP" && v > 1) {
    return createStringError(
        inconvertibleErrorCode(),
        llvm::formatv("vpp-degree {0} needs schedule VPP, not {1}", v, mode));
  }
  if (mode == "FThenB") {
    for (int64_t s = 0; s < p; ++s) {
      for (int64_t i = 0; i < m; ++i)
        stages[s].push_back({Step::F, i});
      for (int64_t i = 0; i < m; ++i)
        stages[s].push_back({Step::B, i});
    }
    return stages;
  }
  if (mode == "1F1B") {
    for (int64_t s = 0; s < p; ++s)
      stages[s] = warmupPairs(p - s, m);
    return stages;
  }
  if (mode == "Eager1F1B") {
    for (int64_t s = 0; s < p; ++s)
      stages[s] = warmupPairs(2 * (p - s) - 1, m);
    return stages;
  }
  if (mode == "ZBH1") {
    // 1F1B, except that the first S backwards of stage S compute only input
    // gradients; their weight gradients fill the cool-down at the end.
    for (int64_t s = 0; s < p; ++s) {
      std::vector<Entry> &list = stages[s];
      int64_t f = 0, b = 0;
      for (; f < p - s; ++f)
        list.push_back({Step::F, f});
      for (int64_t i = 0; i < s && f < m; ++i, ++f, ++b) {
        list.push_back({Step::I, b});
        list.push_back({Step::F, f});
      }
      for (; f < m; ++f, ++b) {
        list.push_back({Step::B, b});
        list.push_back({Step::F, f});
      }
      for (; b < m; ++b)
        list.push_back({Step::B, b});
      // The deferred weight gradients of the micro-batches run as I.
      for (const Entry &e : std::vector<Entry>(list))
        if (e.step == Step::I)
          list.push_back({Step::W, e.microBatch});
    }
    return stages;
  }
  if (mode == "VPP") {
    if (v < 2) {
      return createStringError(inconvertibleErrorCode(),
                               "schedule VPP needs vpp-degree >= 2");
    }
    if (m % p != 0) {
      return createStringError(
          inconvertibleErrorCode(),
          llvm::formatv("schedule VPP needs the micro-batches to be a multiple "
                        "of pp-degree: {0} micro-batches for {1} stages",
                        m, p));
    }
    // Megatron's interleaved schedule: virtual micro-batch k runs chunk
    // (k / p) mod v of micro-batch (k / (p v)) p + k mod p; backwards visit
    // the chunks in reverse.
    int64_t total = m * v;
    auto virtualEntry = [&](int64_t k, bool forward) {
      int64_t chunk = (k / p) % v;
      if (!forward)
        chunk = v - 1 - chunk;
      return Entry{forward ? Step::F : Step::B, (k / (p * v)) * p + k % p,
                   chunk};
    };
    for (int64_t s = 0; s < p; ++s) {
      int64_t warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
      std::vector<Entry> &list = stages[s];
      int64_t f = 0, b = 0;
      for (; f < warmup; ++f)
        list.push_back(virtualEntry(f, true));
      for (; f < total; ++f, ++b) {
        list.push_back(virtualEntry(f, true));
        list.push_back(virtualEntry(b, false));
      }
      for (; b < total; ++b)
        list.push_back(virtualEntry(b, false));
    }
    return stages;
  }
  return createStringError(inconvertibleErrorCode(),
                           ("unknown schedule '" + mode +
                            "' (expected FThenB, 1F1B, Eager1F1B, VPP or ZBH1)")
                               .str());
}

double pipelineBubble(StringRef schedule, int64_t pp, int64_t m, int64_t v) {
  double bubble = double(pp - 1);
  if (schedule == "VPP")
    bubble /= double(std::max<int64_t>(v, 1));
  else if (schedule == "ZBH1")
    bubble /= 3.0;
  return bubble / (double(m) + bubble);
}

} // namespace strata
