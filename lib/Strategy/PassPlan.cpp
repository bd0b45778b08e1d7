//===- PassPlan.cpp - The passes a strategy selects -----------------------===//

#include "strata/Strategy/PassPlan.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"


using namespace llvm;
using namespace strata;

namespace {
/// Builds a pass-option string: `key=value` pairs separated by spaces.
class Options {
public:
  Options &add(StringRef key, const std::string &value) {
    items.push_back((key + "=" + value).str());
    return *this;
  }
  Options &add(StringRef key, int64_t value) {
    return add(key, std::to_string(value));
  }
  Options &add(StringRef key, bool value) {
    return add(key, std::string(value ? "true" : "false"));
  }
  Options &add(StringRef key, double value) {
    return add(key, formatStrategyNumber(value));
  }
  /// A list option; omitted when empty (the pass default is empty).
  Options &addList(StringRef key, ArrayRef<std::string> values) {
    if (!values.empty())
      add(key, join(values, ","));
    return *this;
  }
  std::string str() const { return join(items, " "); }

private:
  std::vector<std::string> items;
};
} // namespace

std::vector<PlannedPass> strata::planPasses(const Strategy &s,
                                            std::optional<int64_t> worldSize,
                                            int64_t rank) {
  std::vector<PlannedPass> plan;
  auto add = [&](StringRef name, const Options &options, StringRef reason) {
    plan.push_back({name.str(), options.str(), reason.str()});
  };

  if (s.amp.enable)
    add("strata-amp",
        Options()
            .add("dtype", s.amp.dtype)
            .add("level", s.amp.level)
            .add("init-loss-scaling", s.amp.init_loss_scaling)
            .add("use-dynamic-loss-scaling", s.amp.use_dynamic_loss_scaling)
            .add("incr-every-n-steps", s.amp.incr_every_n_steps)
            .add("decr-every-n-nan-or-inf", s.amp.decr_every_n_nan_or_inf)
            .add("incr-ratio", s.amp.incr_ratio)
            .add("decr-ratio", s.amp.decr_ratio)
            .addList("white-list", s.amp.custom_white_list)
            .addList("black-list", s.amp.custom_black_list),
        "amp.enable");

  if (s.pipeline.enable)
    add("strata-stage-split",
        Options()
            .add("pp-degree", s.pipeline.pp_degree)
            .add("vpp-degree", s.pipeline.vpp_degree),
        "pipeline.enable");

  add("strata-autodiff", Options(), "always");

  if (s.fused_passes.enable && s.fused_passes.gemm_epilogue)
    add("strata-gemm-epilogue-fusion", Options(),
        "fused_passes.gemm_epilogue");
  if (s.fused_passes.enable && s.fused_passes.dropout_add)
    add("strata-dropout-add-fusion", Options(), "fused_passes.dropout_add");

  if (s.recompute.enable) {
    std::vector<std::string> segments, patterns;
    for (int64_t i : s.recompute.no_recompute_segments)
      segments.push_back(std::to_string(i));
    // main_ops|num|pre_ops|suf_ops, ops joined by '+'.
    for (const RefinedOpsPattern &p : s.recompute.refined_ops_patterns)
      patterns.push_back(join(p.main_ops, "+") + "|" + std::to_string(p.num) +
                         "|" + join(p.pre_ops, "+") + "|" +
                         join(p.suf_ops, "+"));
    add("strata-recompute",
        Options()
            .addList("checkpoints", s.recompute.checkpoints)
            .addList("no-recompute-segments", segments)
            .addList("refined-ops-patterns", patterns),
        "recompute.enable");
  }

  if (s.gradient_merge.enable && s.gradient_merge.k_steps > 1)
    add("strata-gradient-merge",
        Options()
            .add("k-steps", s.gradient_merge.k_steps)
            .add("avg", s.gradient_merge.avg),
        s.pipeline.enable ? "pipeline.accumulate_steps"
                          : "gradient_merge.enable");

  if (worldSize) {
    int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
    // Every rank outside the pipeline shards the batch and averages the
    // gradients; sharding then divides the optimizer's work among them.
    int64_t dp = *worldSize / pp;
    if (dp > 1)
      add("strata-data-parallel",
          Options()
              .add("degree", dp)
              .add("bucket-mb", s.dp_optimization.comm_buffer_size)
              .add("last-bucket-mb", s.dp_optimization.last_comm_buffer_size)
              .add("find-unused-parameters",
                   s.dp_optimization.find_unused_parameters),
          "world size");
  }

  const OptimizerSection &o = s.optimizer;
  add("strata-optimizer",
      Options()
          .add("type", o.type)
          .add("learning-rate", o.learning_rate)
          .add("weight-decay", o.weight_decay.value_or(0.0))
          .add("beta1", o.beta1)
          .add("beta2", o.beta2)
          .add("epsilon", o.epsilon.value_or(0.0))
          .add("momentum", o.momentum)
          .add("use-nesterov", o.use_nesterov)
          .add("lars-coeff", o.lars_coeff)
          .addList("exclude-from-weight-decay", o.exclude_from_weight_decay)
          .add("grad-clip-norm", o.grad_clip_norm)
          .add("lr-schedule", o.lr_schedule)
          .add("warmup-steps", o.warmup_steps)
          .add("decay-steps", o.decay_steps)
          .add("min-lr", o.min_lr),
      "always");

  if (s.sharding.enable) {
    Options options;
    options.add("stage", s.sharding.stage).add("degree", s.sharding.degree);
    // The outer data-parallel group of hybrid sharding, when known.
    // With a pipeline, sharding sees one stage's ranks (strata-pipeline
    // repeats its groups on every stage).
    int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
    if (worldSize)
      options.add("dp-degree", dataParallelDegree(s, *worldSize))
          .add("rank", rank % (*worldSize / pp));
    add("strata-sharding",
        options
            .add("partition", s.sharding.partition_algor)
            .add("segment-size", s.sharding.segment_size)
            .add("offload", s.sharding.offload)
            .add("sync-comm", s.sharding.sync_comm)
            .add("bucket-mb", s.sharding.comm_buffer_size_MB),
        "sharding.enable");
  }

  if (s.pipeline.enable)
    add("strata-pipeline",
        Options()
            .add("pp-degree", s.pipeline.pp_degree)
            .add("vpp-degree", s.pipeline.vpp_degree)
            .add("schedule", s.pipeline.schedule_mode)
            .add("micro-batch-size", s.pipeline.micro_batch_size)
            .add("accumulate-steps", s.pipeline.accumulate_steps)
            .add("dp-degree",
                 worldSize ? *worldSize / s.pipeline.pp_degree : int64_t(1))
            .add("rank", rank),
        "pipeline.enable");
  return plan;
}

std::string strata::pipelineText(ArrayRef<PlannedPass> plan) {
  std::string text;
  raw_string_ostream os(text);
  interleave(
      plan, os,
      [&](const PlannedPass &p) {
        os << p.name;
        if (!p.options.empty())
          os << "{" << p.options << "}";
      },
      ",");
  return text;
}

Error strata::addPlannedPasses(mlir::OpPassManager &pm,
                               ArrayRef<PlannedPass> plan,
                               const Strategy &strategy) {
  for (const PlannedPass &p : plan) {
    if (!mlir::PassInfo::lookup(p.name)) {
      std::string where = strategy.where(p.reason);
      return createStringError(
          inconvertibleErrorCode(),
          (where.empty() ? strategy.file : where) + ": error: '" + p.reason +
              "' selects pass '" + p.name +
              "', which is not implemented yet");
    }
  }
  std::string text = pipelineText(plan);
  std::string errors;
  raw_string_ostream os(errors);
  if (failed(mlir::parsePassPipeline(text, pm, os)))
    return createStringError(inconvertibleErrorCode(),
                             "invalid strategy pipeline '" + text +
                                 "': " + errors);
  return Error::success();
}
