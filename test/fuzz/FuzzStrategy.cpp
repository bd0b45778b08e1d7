//===- FuzzStrategy.cpp - libFuzzer target: the strategy reader ----------===//
//
// Any bytes as a strategy file: read, validated against a world of 4, its
// pass plan made; an accepted strategy must write and read back to itself.
//
//===----------------------------------------------------------------------===//

#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  strata::StrategyContext context;
  context.worldSize = 4;
  auto strategy = strata::parseStrategy(text, "fuzz.yaml", context);
  if (!strategy) {
    llvm::consumeError(strategy.takeError());
    return 0;
  }
  for (int64_t rank = 0; rank < 4; ++rank)
    for (const strata::PlannedPass &p : strata::planPasses(*strategy, 4, rank))
      (void)p.options();
  // What --print-strategy writes reads back as the same strategy.
  for (const std::string &written :
       {strata::toYaml(*strategy), strata::toJson(*strategy)}) {
    auto again = strata::parseStrategy(written, "written", context);
    if (!again || *again != *strategy)
      abort();
  }
  return 0;
}
