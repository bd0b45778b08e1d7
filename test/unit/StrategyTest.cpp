//===- StrategyTest.cpp - Strategy model, files and pass plan -------------===//

#include "StrataTestContext.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace strata;

namespace {

Strategy parseOk(llvm::StringRef text, StrategyContext context = {}) {
  auto s = parseStrategy(text, "test.yaml", context);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return Strategy();
  }
  return std::move(*s);
}

std::string parseError(llvm::StringRef text, StrategyContext context = {}) {
  auto s = parseStrategy(text, "test.yaml", context);
  if (s) {
    ADD_FAILURE() << "expected an error for:\n" << text.str();
    return "";
  }
  return llvm::toString(s.takeError());
}

TEST(Strategy, EmptyIsDefaults) {
  Strategy s = parseOk("");
  Strategy defaults;
  defaults.optimizer.weight_decay = 0.01; // filled in for adamw
  defaults.optimizer.epsilon = 1e-8;
  EXPECT_EQ(s, defaults);
  EXPECT_EQ(s.sharding.degree, 8);
  EXPECT_TRUE(s.gradient_merge.avg);
}

TEST(Strategy, SaveLoadSaveIsStable) {
  Strategy s = parseOk(R"(
sharding: {enable: true, stage: 3, degree: 4}
recompute:
  enable: true
  checkpoints: [h0, h1]
  refined_ops_patterns: [{main_ops: [matmul], num: 2}]
optimizer: {type: lamb, exclude_from_weight_decay: [bias, "ln f"]}
)");
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("strata-test", dir));
  for (const char *name : {"s.yaml", "s.json"}) {
    llvm::SmallString<128> path(dir);
    llvm::sys::path::append(path, name);
    ASSERT_FALSE(static_cast<bool>(saveStrategy(s, path)));
    auto loaded = loadStrategy(path);
    ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
    EXPECT_EQ(*loaded, s) << name;
    EXPECT_EQ(loaded->recompute.refined_ops_patterns[0].num, 2);
    EXPECT_EQ(loaded->optimizer.exclude_from_weight_decay[1], "ln f");
    llvm::sys::fs::remove(path);
  }
  llvm::sys::fs::remove(dir);
}

TEST(Strategy, SaveToMissingDirectoryFails) {
  llvm::Error err = saveStrategy(Strategy(), "/nonexistent-dir/x.yaml");
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("cannot write"),
            std::string::npos);
}

TEST(Strategy, PipelineForcesGradientMerge) {
  Strategy s = parseOk("pipeline: {enable: true, accumulate_steps: 4}");
  EXPECT_TRUE(s.gradient_merge.enable);
  EXPECT_EQ(s.gradient_merge.k_steps, 4);
  EXPECT_TRUE(s.gradient_merge.avg);
  // Agreeing explicit values are fine; contradicting ones are not.
  parseOk("pipeline: {enable: true, accumulate_steps: 4}\n"
          "gradient_merge: {k_steps: 4}");
  EXPECT_NE(parseError("pipeline: {enable: true, accumulate_steps: 4}\n"
                       "gradient_merge: {k_steps: 2}")
                .find("test.yaml:2:18: error: 'gradient_merge.k_steps' (2) "
                      "contradicts"),
            std::string::npos);
}

TEST(Strategy, WorldSizeChecks) {
  StrategyContext world4{4};
  parseOk("sharding: {enable: true, degree: 2}", world4);
  EXPECT_EQ(dataParallelDegree(
                parseOk("sharding: {enable: true, degree: 2}", world4), 4),
            2);
  EXPECT_NE(parseError("sharding: {enable: true, degree: 3}", world4)
                .find("'sharding.degree' (3) does not divide the 4 ranks"),
            std::string::npos);
  EXPECT_NE(parseError("sharding: {enable: true}", world4)
                .find("the default degree is 8: set sharding.degree"),
            std::string::npos);
  EXPECT_NE(parseError("sharding: {enable: true}", StrategyContext{0})
                .find("the world size must be in [1, 1048576], got 0"),
            std::string::npos);
  EXPECT_NE(parseError("{}", StrategyContext{kMaxRanks + 1})
                .find("the world size must be in [1, 1048576], got 1048577"),
            std::string::npos);
}

TEST(Strategy, JobContext) {
  EXPECT_FALSE(jobContext(0, 0)->worldSize.has_value());
  EXPECT_EQ(jobContext(4, 3)->worldSize, 4);
  auto refused = [](int64_t worldSize, int64_t rank) {
    auto job = jobContext(worldSize, rank);
    return job ? std::string() : llvm::toString(job.takeError());
  };
  EXPECT_EQ(refused(-1, 0),
            "world size -1 is not in [0, 1048576] (0: unknown)");
  EXPECT_EQ(refused(kMaxRanks + 1, 0),
            "world size 1048577 is not in [0, 1048576] (0: unknown)");
  EXPECT_EQ(refused(4, 4), "rank 4 is not a rank of a job of 4 ranks");
  EXPECT_EQ(refused(4, -1), "rank -1 is not a rank of a job of 4 ranks");
  EXPECT_EQ(refused(0, 1), "rank 1 is not a rank of a job of 1 rank");
}

TEST(Strategy, FleetConfigsOfDisabledOptimizerAreRefused) {
  EXPECT_NE(parseError("lamb_configs: {lamb_weight_decay: 0.5}")
                .find("'lamb_configs' has no effect: lamb is not enabled"),
            std::string::npos);
  Strategy s = parseOk("lamb: true\nlamb_configs: {lamb_weight_decay: 0.5}");
  EXPECT_EQ(s.optimizer.type, "lamb");
  EXPECT_EQ(*s.optimizer.weight_decay, 0.5);
  EXPECT_NE(parseError("lamb_configs: {lamb_weight_decai: 0.5}")
                .find("did you mean 'lamb_weight_decay'?"),
            std::string::npos);
}

TEST(Strategy, WhereNamesFileLineColumn) {
  Strategy s = parseOk("\n\nsharding:\n  enable: true\n  stage: 2\n");
  EXPECT_EQ(s.where("sharding.stage"), "test.yaml:5:3");
  EXPECT_EQ(s.where("sharding.degree"), "");
}

TEST(Strategy, NumbersRoundTripShortest) {
  EXPECT_EQ(formatStrategyNumber(0.9), "0.9");
  EXPECT_EQ(formatStrategyNumber(256), "256.0");
  EXPECT_EQ(formatStrategyNumber(1e-8), "1e-08");
  EXPECT_EQ(formatStrategyNumber(0.1 + 0.2), "0.30000000000000004");
}

TEST(PassPlan, OrderAndPipelineText) {
  Strategy s = parseOk(R"(
pipeline: {enable: true, pp_degree: 2, accumulate_steps: 4}
fused_passes: {enable: true, gemm_epilogue: true, rms_norm: true}
recompute: {enable: true, checkpoints: [h0]}
amp: {enable: true, dtype: bfloat16}
sharding: {enable: true, degree: 2}
)",
                       StrategyContext{8});
  std::vector<std::string> names;
  for (const PlannedPass &p : planPasses(s, 8))
    names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "strata-rms-norm-recognition", "strata-gelu-recognition",
                "strata-amp", "strata-rank-grid", "strata-stage-split",
                "strata-autodiff", "strata-gemm-epilogue-fusion",
                "strata-recompute-casts", "strata-recompute",
                "strata-gradient-merge", "strata-data-parallel",
                "strata-optimizer", "strata-sharding", "strata-pipeline"}));
  // Plain data parallel (and its rank grid) appears only when the world
  // size is known.
  Strategy plain = parseOk("");
  EXPECT_EQ(planPasses(plain, std::nullopt).size(), 2u);
  std::vector<PlannedPass> four = planPasses(plain, 4);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four[0].name, "strata-rank-grid");
  EXPECT_EQ(four[0].options(), "dp=4 mp=1 pp=1 sharding=1");
  EXPECT_EQ(four[2].name, "strata-data-parallel");
  EXPECT_EQ(planPasses(plain, 1).size(), 2u);
  // The grid of the hybrid strategy: 8 ranks = pp 2 x sharding 2 x dp 2.
  EXPECT_EQ(planPasses(s, 8)[3].options(), "dp=2 mp=1 pp=2 sharding=2");
}

// Registers Strata's passes, so the test does not depend on which tests ran
// before it in the same process (ctest runs each one alone).
class PassPlanRegistered : public StrataTestContext, public ::testing::Test {};

TEST_F(PassPlanRegistered, AddsRegisteredPassesAndRejectsMissingOnes) {
  // A planned pass without an implementation names the strategy key that
  // selected it.
  Strategy amp = parseOk("amp: {enable: true, dtype: bfloat16}");
  std::vector<PlannedPass> ampPlan = planPasses(amp, std::nullopt);
  ASSERT_EQ(ampPlan.front().name, "strata-amp");
  ampPlan.front().create = nullptr;
  mlir::PassManager before(&context, "builtin.module");
  llvm::Error missing = addPlannedPasses(before, ampPlan, amp, std::nullopt);
  ASSERT_TRUE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(std::move(missing))
                .find("test.yaml:1:7: error: 'amp.enable' selects pass "
                      "'strata-amp', which is not implemented yet"),
            std::string::npos);

  Strategy s = parseOk("pipeline: {enable: true, schedule_mode: FThenB}");
  std::vector<PlannedPass> plan = planPasses(s, std::nullopt);
  ASSERT_EQ(plan.back().name, "strata-pipeline");
  std::vector<PlannedPass> onlyPipeline = {plan.back()};
  mlir::PassManager pm(&context, "builtin.module");
  llvm::Error added = addPlannedPasses(pm, onlyPipeline, s, std::nullopt);
  ASSERT_FALSE(static_cast<bool>(added)) << llvm::toString(std::move(added));
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  EXPECT_EQ(text, "builtin.module(strata-strategy-check{strategy=test.yaml "
                  "world-size=0},strata-pipeline{accumulate-steps=1 "
                  "micro-batch-size=1 rank=0 schedule=FThenB vpp-degree=1})");
}

} // namespace
