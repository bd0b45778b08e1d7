//===- MemoryPlanTest.cpp - Static memory plan invariants -----------------===//

#include "strata/Analysis/MemoryPlan.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"

#include "StrataTestContext.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace strata;

namespace {

class MemoryPlanTest : public StrataTestContext,
                       public ::testing::TestWithParam<const char *> {};

TEST_P(MemoryPlanTest, LiveBuffersNeverShareBytes) {
  GptConfig config;
  config.layers = 2;
  config.hidden = 32;
  config.heads = 4;
  config.seq = 16;
  config.batch = 4;
  config.dropout = 0.1;
  OwningOpRef<ModuleOp> module = buildGpt(context, config);
  PassManager pm(&context);
  ASSERT_TRUE(succeeded(parsePassPipeline(GetParam(), pm)));
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto step = module->lookupSymbol<func::FuncOp>(kStepFunctionName);
  MemoryPlan plan = planMemory(step, 64);

  // Every value with bytes is in exactly one buffer.
  llvm::DenseSet<Value> planned;
  for (const PlannedBuffer &b : plan.buffers)
    for (Value v : b.values)
      EXPECT_TRUE(planned.insert(v).second);
  step.walk([&](Operation *op) {
    if (isa<GetParamOp, GetStateOp>(op))
      return;
    for (Value r : op->getResults()) {
      if (isa<RankedTensorType>(r.getType())) {
        EXPECT_TRUE(planned.contains(r)) << op->getName().getStringRef().str();
      }
    }
  });
  // Buffers alive at the same time never overlap (except a tensor planned
  // inside its communication bucket, within the bucket's bytes); all fit
  // the arena.
  bool buckets = false;
  step.walk([&](Operation *op) { buckets |= isa<PackOp, UnpackOp>(op); });
  int64_t parts = 0;
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const PlannedBuffer &a = plan.buffers[i];
    if (a.parent) {
      const PlannedBuffer &whole = plan.buffers[*a.parent];
      ++parts;
      EXPECT_FALSE(whole.parent) << "nested parts";
      EXPECT_LE(a.inner + a.bytes, whole.bytes);
      EXPECT_EQ(a.offset, whole.offset + a.inner);
      // A packed tensor lives up to the bucket's pack, an unpacked one
      // from the bucket's unpack on.
      EXPECT_TRUE(a.end == whole.start || a.start == whole.end);
    } else {
      EXPECT_EQ(a.offset % 64, 0);
    }
    EXPECT_LE(a.offset + a.bytes, plan.arenaBytes);
    for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
      const PlannedBuffer &b = plan.buffers[j];
      if (a.parent == j || b.parent == i)
        continue;
      bool together = a.start <= b.end && b.start <= a.end;
      bool overlap =
          a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(together && overlap) << "buffers " << i << " and " << j;
    }
  }
  // No plan beats the liveness bound; this one stays within 10% of it.
  EXPECT_GE(plan.arenaBytes, plan.livePeakBytes);
  EXPECT_LE(plan.arenaBytes, plan.livePeakBytes * 11 / 10);
  EXPECT_GT(plan.inPlaceOps, 0);
  EXPECT_EQ(parts, plan.packedInPlace);
  if (buckets) {
    EXPECT_GT(plan.packedInPlace, 0);
  }
}

class InPlacePlanTest : public StrataTestContext, public ::testing::Test {
protected:
  /// Plans @train_step of `source` into `plan`.
  void planStep(llvm::StringRef source) {
    module = parseSourceString<ModuleOp>(source, &context);
    ASSERT_TRUE(module);
    step = module->lookupSymbol<func::FuncOp>("train_step");
    plan = planMemory(step, 64);
  }
  /// The index of the buffer that holds `v`.
  std::optional<size_t> bufferOf(Value v) const {
    for (auto [i, b] : llvm::enumerate(plan.buffers))
      if (llvm::is_contained(b.values, v))
        return i;
    return std::nullopt;
  }

  OwningOpRef<ModuleOp> module;
  func::FuncOp step;
  MemoryPlan plan;
};

/// Clipping writes each gradient over its input when the input dies there
/// (result i over operand i, never over the norm), and only then.
TEST_F(InPlacePlanTest, ClippingOverwritesTheGradientsThatDieThere) {
  ASSERT_NO_FATAL_FAILURE(planStep(R"(
func.func @train_step(%a: tensor<64xf32>, %b: tensor<32xf32>) -> (tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) {
  %ga = strata.scale %a {factor = 2.0 : f64} : (tensor<64xf32>) -> tensor<64xf32>
  %gb = strata.scale %b {factor = 2.0 : f64} : (tensor<32xf32>) -> tensor<32xf32>
  %n = strata.global_norm %ga, %gb : (tensor<64xf32>, tensor<32xf32>) -> tensor<f32>
  %c:2 = strata.clip_by_global_norm %ga, %gb, %n {max_norm = 1.0 : f64} : (tensor<64xf32>, tensor<32xf32>, tensor<f32>) -> (tensor<64xf32>, tensor<32xf32>)
  %later = strata.relu %gb : (tensor<32xf32>) -> tensor<32xf32>
  return %c#0, %c#1, %later : tensor<64xf32>, tensor<32xf32>, tensor<32xf32>
})"));
  ClipByGlobalNormOp clip = *step.getOps<ClipByGlobalNormOp>().begin();
  ASSERT_TRUE(bufferOf(clip.getInputs()[0]));
  ASSERT_TRUE(bufferOf(clip.getInputs()[1]));
  // %ga dies at the clip: its result shares the buffer. %gb is read
  // later: its result has a buffer of its own.
  EXPECT_EQ(bufferOf(clip.getResult(0)), bufferOf(clip.getInputs()[0]));
  EXPECT_NE(bufferOf(clip.getResult(1)), bufferOf(clip.getInputs()[1]));
  EXPECT_NE(bufferOf(clip.getResult(1)), bufferOf(clip.getNorm()));
  // relu writes over %gb, which dies there.
  EXPECT_EQ(plan.inPlaceOps, 2);
}

/// The loss's gradient is written over the logits, a language model's
/// largest activation, when nothing reads them after it; over padded rows
/// too (the padding's gradient is written, zero).
TEST_F(InPlacePlanTest, CrossEntropyGradientOverwritesItsLogits) {
  ASSERT_NO_FATAL_FAILURE(planStep(R"(
func.func @train_step(%x: tensor<8x64xf32>, %labels: tensor<8xi32>, %dloss: tensor<f32>) -> (tensor<f32>, tensor<8x64xf32>, tensor<f32>, tensor<8x64xf32>, tensor<8x64xf32>) {
  %logits = strata.scale %x {factor = 2.0 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %loss = strata.cross_entropy %logits, %labels {classes = 60 : i64} : (tensor<8x64xf32>, tensor<8xi32>) -> tensor<f32>
  %dl = strata.cross_entropy_grad %logits, %labels, %dloss {classes = 60 : i64} : (tensor<8x64xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x64xf32>
  %kept = strata.scale %x {factor = 3.0 : f64} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %loss2 = strata.cross_entropy %kept, %labels : (tensor<8x64xf32>, tensor<8xi32>) -> tensor<f32>
  %dl2 = strata.cross_entropy_grad %kept, %labels, %dloss : (tensor<8x64xf32>, tensor<8xi32>, tensor<f32>) -> tensor<8x64xf32>
  return %loss, %dl, %loss2, %dl2, %kept : tensor<f32>, tensor<8x64xf32>, tensor<f32>, tensor<8x64xf32>, tensor<8x64xf32>
})"));
  auto grads = llvm::to_vector(step.getOps<CrossEntropyGradOp>());
  ASSERT_EQ(grads.size(), 2u);
  // The first logits die at their gradient; the second are returned.
  ASSERT_TRUE(bufferOf(grads[0].getLogits()));
  ASSERT_TRUE(bufferOf(grads[1].getLogits()));
  EXPECT_EQ(bufferOf(grads[0].getResult()), bufferOf(grads[0].getLogits()));
  EXPECT_NE(bufferOf(grads[1].getResult()), bufferOf(grads[1].getLogits()));
  EXPECT_EQ(plan.inPlaceOps, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, MemoryPlanTest,
    ::testing::Values(
        "strata-autodiff,strata-optimizer",
        "strata-autodiff,strata-recompute{"
        "checkpoints=h0,h1},strata-optimizer",
        "strata-autodiff,strata-gemm-epilogue-"
        "fusion,strata-dropout-add-fusion,strata-gradient-merge{"
        "k-steps=2},strata-optimizer",
        // Gradient buckets (pack, all_reduce, unpack).
        "strata-rank-grid{dp=2},strata-autodiff,"
        "strata-data-parallel{bucket-mb=0.02 last-bucket-mb=0.01},"
        "strata-optimizer{type=adamw}",
        // ZeRO-2: reduce-scatter and all-gather buckets.
        "strata-rank-grid{sharding=2},strata-autodiff,"
        "strata-data-parallel,strata-optimizer{type=adamw},"
        "strata-sharding{stage=2 rank=1}",
        // Hybrid ZeRO-3 with small buckets.
        "strata-rank-grid{dp=2 sharding=2},strata-autodiff,"
        "strata-data-parallel{bucket-mb=0.01 last-bucket-mb=0.005},"
        "strata-optimizer{type=adamw},strata-sharding{stage=3 "
        "rank=3 segment-size=1 bucket-mb=0.01}",
        // A pipeline stage of two data-parallel replicas.
        "strata-rank-grid{pp=2 dp=2},strata-stage-split,"
        "strata-autodiff,strata-gradient-merge{k-steps=2},"
        "strata-data-parallel{bucket-mb=0.01 "
        "last-bucket-mb=0.005},strata-optimizer{type=adamw},"
        "strata-pipeline{accumulate-steps=2 "
        "schedule=1F1B rank=2}"));

} // namespace
