//===- PipelineScheduleTest.cpp - The schedule library on its own ---------===//

#include "strata/Passes/PipelineSchedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <gtest/gtest.h>

using namespace strata;

namespace {

/// Each stage's jobs as "F0 F1 B0 ...".
std::vector<std::string> names(llvm::StringRef mode, int64_t p, int64_t m,
                               int64_t v = 1) {
  auto schedule = makeSchedule(mode, p, m, v);
  EXPECT_TRUE(static_cast<bool>(schedule))
      << llvm::toString(schedule.takeError());
  std::vector<std::string> stages;
  if (!schedule)
    return stages;
  for (const std::vector<Entry> &jobs : *schedule) {
    std::vector<std::string> words;
    for (const Entry &e : jobs)
      words.push_back(entryName(e, v > 1));
    stages.push_back(llvm::join(words, " "));
  }
  return stages;
}

std::string error(llvm::StringRef mode, int64_t p, int64_t m, int64_t v = 1) {
  auto schedule = makeSchedule(mode, p, m, v);
  if (schedule)
    return "";
  return llvm::toString(schedule.takeError());
}

TEST(PipelineSchedule, FThenBAnd1F1B) {
  EXPECT_EQ(
      names("FThenB", 2, 3),
      (std::vector<std::string>{"F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2"}));
  // Stage s warms up with P - s forwards, then alternates B and F.
  EXPECT_EQ(
      names("1F1B", 2, 3),
      (std::vector<std::string>{"F0 F1 B0 F2 B1 B2", "F0 B0 F1 B1 F2 B2"}));
}

TEST(PipelineSchedule, ZeroBubbleDefersWeightGradients) {
  // Stage s runs its first s backwards as input gradients only (I); their
  // weight gradients (W) fill the cool-down.
  EXPECT_EQ(names("ZBH1", 2, 2),
            (std::vector<std::string>{"F0 F1 B0 B1", "F0 I0 F1 B1 W0"}));
}

TEST(PipelineSchedule, EveryJobOnceOnEveryStage) {
  for (const char *mode : {"FThenB", "1F1B", "Eager1F1B", "ZBH1"}) {
    std::vector<std::string> stages = names(mode, 4, 8);
    ASSERT_EQ(stages.size(), 4u);
    for (auto [s, stage] : llvm::enumerate(stages)) {
      llvm::SmallVector<llvm::StringRef> jobs;
      llvm::StringRef(stage).split(jobs, ' ');
      // A forward and a backward per micro-batch; ZBH1 adds the deferred W
      // of stage s's first s backwards.
      size_t expected = 16 + (std::string(mode) == "ZBH1" ? s : 0);
      EXPECT_EQ(jobs.size(), expected) << mode << ": " << stage;
    }
  }
  // VPP: each chunk of each micro-batch, forward and backward.
  for (const std::string &stage : names("VPP", 2, 4, 2)) {
    llvm::SmallVector<llvm::StringRef> jobs;
    llvm::StringRef(stage).split(jobs, ' ');
    EXPECT_EQ(jobs.size(), 16u) << stage;
  }
}

TEST(PipelineSchedule, RefusesWhatItCannotRun) {
  EXPECT_EQ(error("1F1B", 4, 2),
            "schedule 1F1B needs at least pp-degree micro-batches "
            "(accumulate_steps >= pp_degree): 2 micro-batches for 4 stages");
  EXPECT_EQ(error("1F1B", 2, 4, 2),
            "vpp-degree 2 needs schedule VPP, not 1F1B");
  EXPECT_EQ(error("VPP", 2, 4), "schedule VPP needs vpp-degree >= 2");
  EXPECT_EQ(error("GPipe", 2, 4),
            "unknown schedule 'GPipe' (expected FThenB, 1F1B, Eager1F1B, VPP "
            "or ZBH1)");
}

TEST(PipelineSchedule, Bubble) {
  // (p-1)/(m+p-1); VPP divides the bubble by v, ZBH1 by 3.
  EXPECT_DOUBLE_EQ(pipelineBubble("1F1B", 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(pipelineBubble("VPP", 4, 8, 2), 1.5 / 9.5);
  EXPECT_DOUBLE_EQ(pipelineBubble("ZBH1", 4, 8, 1), 1.0 / 9.0);
  EXPECT_DOUBLE_EQ(pipelineBubble("FThenB", 1, 8, 1), 0.0);
}

} // namespace
