//===- PassPlan.cpp - The passes a strategy selects -----------------------===//

#include "strata/Strategy/PassPlan.h"

#include "strata/Passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"


using namespace llvm;
using namespace strata;

namespace {
template <typename T>
SmallVector<T> toList(const std::vector<T> &values) {
  return SmallVector<T>(values.begin(), values.end());
}
} // namespace

std::string strata::PlannedPass::options() const {
  if (!create)
    return "";
  std::string text;
  raw_string_ostream os(text);
  create()->printAsTextualPipeline(os);
  // "name{options}" -> "options"
  StringRef all(text);
  size_t open = all.find('{');
  if (open == StringRef::npos)
    return "";
  return all.slice(open + 1, all.size() - 1).trim().str();
}

std::vector<PlannedPass> strata::planPasses(const Strategy &s,
                                            std::optional<int64_t> worldSize,
                                            int64_t rank) {
  std::vector<PlannedPass> plan;
  // Each pass is made from its typed options (never from option text, where
  // a value with a space or a comma would be cut apart).
  auto add = [&](StringRef name, StringRef reason,
                 std::function<std::unique_ptr<mlir::Pass>()> create) {
    plan.push_back({name.str(), reason.str(), std::move(create)});
  };

  // Not implemented yet: selected, then refused by addPlannedPasses.
  if (s.amp.enable)
    add("strata-amp", "amp.enable", nullptr);

  if (s.pipeline.enable) {
    StrataStageSplitOptions o;
    o.ppDegree = s.pipeline.pp_degree;
    o.vppDegree = s.pipeline.vpp_degree;
    add("strata-stage-split", "pipeline.enable",
        [o] { return createStrataStageSplit(o); });
  }

  add("strata-autodiff", "always", [] { return createStrataAutodiff(); });

  if (s.fused_passes.enable && s.fused_passes.gemm_epilogue)
    add("strata-gemm-epilogue-fusion", "fused_passes.gemm_epilogue",
        [] { return createStrataGemmEpilogueFusion(); });
  if (s.fused_passes.enable && s.fused_passes.dropout_add)
    add("strata-dropout-add-fusion", "fused_passes.dropout_add",
        [] { return createStrataDropoutAddFusion(); });

  if (s.recompute.enable) {
    StrataRecomputeOptions o;
    o.checkpoints = toList(s.recompute.checkpoints);
    o.noRecomputeSegments = toList(s.recompute.no_recompute_segments);
    // main_ops|num|pre_ops|suf_ops, ops joined by '+'.
    for (const RefinedOpsPattern &p : s.recompute.refined_ops_patterns)
      o.refinedOpsPatterns.push_back(join(p.main_ops, "+") + "|" +
                                     std::to_string(p.num) + "|" +
                                     join(p.pre_ops, "+") + "|" +
                                     join(p.suf_ops, "+"));
    add("strata-recompute", "recompute.enable",
        [o] { return createStrataRecompute(o); });
  }

  if (s.gradient_merge.enable && s.gradient_merge.k_steps > 1) {
    StrataGradientMergeOptions o;
    o.kSteps = s.gradient_merge.k_steps;
    o.avg = s.gradient_merge.avg;
    add("strata-gradient-merge",
        s.pipeline.enable ? "pipeline.accumulate_steps"
                          : "gradient_merge.enable",
        [o] { return createStrataGradientMerge(o); });
  }

  if (worldSize) {
    int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
    // Every rank outside the pipeline shards the batch and averages the
    // gradients; sharding then divides the optimizer's work among them.
    int64_t dp = *worldSize / pp;
    if (dp > 1) {
      StrataDataParallelOptions o;
      o.degree = dp;
      o.bucketMb = s.dp_optimization.comm_buffer_size;
      o.lastBucketMb = s.dp_optimization.last_comm_buffer_size;
      o.findUnusedParameters = s.dp_optimization.find_unused_parameters;
      add("strata-data-parallel", "world size",
          [o] { return createStrataDataParallel(o); });
    }
  }

  {
    const OptimizerSection &opt = s.optimizer;
    StrataOptimizerOptions o;
    o.type = opt.type;
    o.learningRate = opt.learning_rate;
    o.weightDecay = opt.weight_decay.value_or(0.0);
    o.beta1 = opt.beta1;
    o.beta2 = opt.beta2;
    o.epsilon = opt.epsilon.value_or(0.0);
    o.momentum = opt.momentum;
    o.useNesterov = opt.use_nesterov;
    o.larsCoeff = opt.lars_coeff;
    o.excludeFromWeightDecay = toList(opt.exclude_from_weight_decay);
    o.gradClipNorm = opt.grad_clip_norm;
    o.lrSchedule = opt.lr_schedule;
    o.warmupSteps = opt.warmup_steps;
    o.decaySteps = opt.decay_steps;
    o.minLr = opt.min_lr;
    add("strata-optimizer", "always",
        [o] { return createStrataOptimizer(o); });
  }

  if (s.sharding.enable) {
    StrataShardingOptions o;
    o.stage = s.sharding.stage;
    o.degree = s.sharding.degree;
    // The outer data-parallel group of hybrid sharding, when known.
    // With a pipeline, sharding sees one stage's ranks (strata-pipeline
    // repeats its groups on every stage).
    int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
    if (worldSize) {
      o.dpDegree = dataParallelDegree(s, *worldSize);
      o.rank = rank % (*worldSize / pp);
    }
    o.partition = s.sharding.partition_algor;
    o.segmentSize = s.sharding.segment_size;
    o.offload = s.sharding.offload;
    o.syncComm = s.sharding.sync_comm;
    o.bucketMb = s.sharding.comm_buffer_size_MB;
    add("strata-sharding", "sharding.enable",
        [o] { return createStrataSharding(o); });
  }

  if (s.pipeline.enable) {
    StrataPipelineOptions o;
    o.ppDegree = s.pipeline.pp_degree;
    o.vppDegree = s.pipeline.vpp_degree;
    o.schedule = s.pipeline.schedule_mode;
    o.microBatchSize = s.pipeline.micro_batch_size;
    o.accumulateSteps = s.pipeline.accumulate_steps;
    o.dpDegree = worldSize ? *worldSize / s.pipeline.pp_degree : int64_t(1);
    o.rank = rank;
    add("strata-pipeline", "pipeline.enable",
        [o] { return createStrataPipeline(o); });
  }
  return plan;
}

Error strata::addPlannedPasses(mlir::OpPassManager &pm,
                               ArrayRef<PlannedPass> plan,
                               const Strategy &strategy) {
  for (const PlannedPass &p : plan) {
    if (!p.create) {
      std::string where = strategy.where(p.reason);
      return createStringError(
          inconvertibleErrorCode(),
          (where.empty() ? strategy.file : where) + ": error: '" + p.reason +
              "' selects pass '" + p.name +
              "', which is not implemented yet");
    }
  }
  for (const PlannedPass &p : plan)
    pm.addPass(p.create());
  return Error::success();
}
