//===- FleetSpellings.h - Paddle's other names for strategy keys -*- C++
//-*-===//
//
// Internal to lib/Strategy: how fleet.DistributedStrategy,
// group_sharded_parallel and DataParallel spell the keys of the strategy
// model, and the fleet keys Strata accepts without a counterpart.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_LIB_STRATEGY_FLEETSPELLINGS_H
#define STRATA_LIB_STRATEGY_FLEETSPELLINGS_H

#include "llvm/ADT/StringRef.h"

namespace strata::detail {

/// fleet's `X: true` switches and the `X_configs` dictionaries.
inline const llvm::StringLiteral kFleetSwitches[] = {
    "sharding",       "recompute", "pipeline", "gradient_merge",    "amp",
    "lamb",           "lars",      "localsgd", "adaptive_localsgd", "dgc",
    "fp16_allreduce", "auto"};

struct FleetKey {
  llvm::StringLiteral configs; // e.g. "sharding_configs"
  llvm::StringLiteral key;     // e.g. "sharding_degree"
  llvm::StringLiteral target;  // canonical "section.key", or "" (see below)
};

/// fleet config keys that map onto a canonical key.
inline const FleetKey kFleetKeys[] = {
    {"sharding_configs", "sharding_degree", "sharding.degree"},
    {"sharding_configs", "dp_degree", "hybrid.dp_degree"},
    {"sharding_configs", "mp_degree", "hybrid.mp_degree"},
    {"sharding_configs", "pp_degree", "pipeline.pp_degree"},
    {"sharding_configs", "optimize_offload", "sharding.offload"},
    {"recompute_configs", "checkpoints", "recompute.checkpoints"},
    {"pipeline_configs", "micro_batch_size", "pipeline.micro_batch_size"},
    {"pipeline_configs", "accumulate_steps", "pipeline.accumulate_steps"},
    {"pipeline_configs", "schedule_mode", "pipeline.schedule_mode"},
    // The older fleet docs: "the number of micro-batches in a mini-batch".
    {"pipeline_configs", "micro_batch", "pipeline.accumulate_steps"},
    {"gradient_merge_configs", "k_steps", "gradient_merge.k_steps"},
    {"gradient_merge_configs", "avg", "gradient_merge.avg"},
    {"amp_configs", "init_loss_scaling", "amp.init_loss_scaling"},
    {"amp_configs", "use_dynamic_loss_scaling", "amp.use_dynamic_loss_scaling"},
    {"amp_configs", "incr_every_n_steps", "amp.incr_every_n_steps"},
    {"amp_configs", "decr_every_n_nan_or_inf", "amp.decr_every_n_nan_or_inf"},
    {"amp_configs", "incr_ratio", "amp.incr_ratio"},
    {"amp_configs", "decr_ratio", "amp.decr_ratio"},
    {"amp_configs", "custom_white_list", "amp.custom_white_list"},
    {"amp_configs", "custom_black_list", "amp.custom_black_list"},
    {"amp_configs", "use_fp16_guard", "amp.use_fp16_guard"},
    {"lamb_configs", "lamb_weight_decay", "optimizer.weight_decay"},
    {"lamb_configs", "exclude_from_weight_decay",
     "optimizer.exclude_from_weight_decay"},
    {"lars_configs", "lars_coeff", "optimizer.lars_coeff"},
    {"lars_configs", "lars_weight_decay", "optimizer.weight_decay"},
    {"lars_configs", "epsilon", "optimizer.epsilon"},
    {"lars_configs", "exclude_from_weight_decay",
     "optimizer.exclude_from_weight_decay"},
};

/// fleet config keys Strata reads but has no counterpart for: accepted at
/// Paddle's default value (they change nothing), an error otherwise.
struct InertKey {
  llvm::StringLiteral configs;
  llvm::StringLiteral key;
  llvm::StringLiteral defaultValue; // as YAML text; "[]" for an empty list
  llvm::StringLiteral why;
};
inline const InertKey kInertKeys[] = {
    {"sharding_configs", "sharding_segment_strategy", "segment_broadcast_MB",
     "Strata schedules sharding communication itself"},
    {"sharding_configs", "segment_broadcast_MB", "32.0",
     "Strata schedules sharding communication itself"},
    {"sharding_configs", "segment_anchors", "[]",
     "Strata schedules sharding communication itself"},
    {"sharding_configs", "pp_allreduce_in_optimize", "false",
     "not implemented"},
    {"recompute_configs", "enable_offload", "false",
     "recompute offload is not implemented"},
    {"recompute_configs", "checkpoint_shape", "[]",
     "recompute offload is not implemented"},
};

/// Configs of features Strata does not implement: the keys are checked,
/// enabling the feature is an error, and a value other than Paddle's
/// default (which would change nothing) is refused.
struct UnimplementedConfigKey {
  llvm::StringLiteral configs;
  llvm::StringLiteral key;
  llvm::StringLiteral kind; // "int", "double_list"
  llvm::StringLiteral defaultValue;
};
inline const UnimplementedConfigKey kUnimplementedConfigKeys[] = {
    {"localsgd_configs", "k_steps", "int", "1"},
    {"localsgd_configs", "begin_step", "int", "1"},
    {"adaptive_localsgd_configs", "init_k_steps", "int", "1"},
    {"adaptive_localsgd_configs", "begin_step", "int", "1"},
    {"dgc_configs", "rampup_begin_step", "int", "0"},
    {"dgc_configs", "rampup_step", "int", "1"},
    {"dgc_configs", "sparsity", "double_list", "[0.999]"},
};

/// group_sharded_parallel's arguments, all canonical sharding keys but
/// `level`.
inline const llvm::StringLiteral kGroupShardedKeys[] = {
    "level",           "offload",      "sync_buffers",
    "buffer_max_size", "segment_size", "sync_comm"};

/// DataParallel's and Paddle static-graph spellings inside dp_optimization.
inline const llvm::StringLiteral kDpAliases[][2] = {
    {"fuse_grad_size_in_MB", "comm_buffer_size"}};

} // namespace strata::detail

#endif // STRATA_LIB_STRATEGY_FLEETSPELLINGS_H
