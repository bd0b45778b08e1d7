//===- Strategy.h - The distributed-training strategy model -----*- C++ -*-===//
//
// One model of a strategy, shared by strata-opt, strata-run and the C/C++
// API. Section and key names and defaults are those of PaddlePaddle's
// `paddle.distributed.Strategy`; the `fleet.DistributedStrategy`,
// `group_sharded_parallel` and `DataParallel` spellings map onto it when a
// file is read. Strata adds two sections: `optimizer` (the update rule and
// its hyper-parameters) and `hybrid` (parallel degrees Paddle takes from
// the launcher). docs/strategy.md documents every key.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_STRATEGY_STRATEGY_H
#define STRATA_STRATEGY_STRATEGY_H

#include "strata/Dialect/RankLimit.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct ShardingSection {
  bool enable = false;
  int64_t stage = 1;
  int64_t degree = 8;
  bool enable_overlap = false;
  int64_t param_comm_stream_num = 1;
  int64_t grad_comm_stream_num = 1;
  int64_t param_bucket_size_numel = 1;
  int64_t grad_bucket_size_numel = 1;
  std::string partition_algor = "greedy_even";
  double comm_buffer_size_MB = 256;
  bool enable_tensor_fusion = false;
  bool release_gradients = false;
  // group_sharded_parallel's arguments.
  bool offload = false;
  bool sync_buffers = false;
  int64_t buffer_max_size = int64_t(1) << 23;
  int64_t segment_size = int64_t(1) << 20;
  bool sync_comm = false;
  bool operator==(const ShardingSection &) const = default;
};

struct FusedPassesSection {
  bool enable = false;
  bool gemm_epilogue = false;
  bool dropout_add = false;
  /// Strata's: scaled dot-product attention as one strata.attention.
  bool flash_attention = false;
  /// Strata's: RMS normalisation written out as one strata.rms_norm.
  bool rms_norm = false;
  bool operator==(const FusedPassesSection &) const = default;
};

struct GradientMergeSection {
  bool enable = false;
  int64_t k_steps = 1;
  bool avg = true;
  bool operator==(const GradientMergeSection &) const = default;
};

struct PipelineSection {
  bool enable = false;
  std::string schedule_mode = "1F1B";
  int64_t pp_degree = 1;
  int64_t vpp_degree = 1;
  int64_t micro_batch_size = 1;
  int64_t accumulate_steps = 1;
  bool enable_send_recv_overlap = false;
  bool split_backward = false;
  bool operator==(const PipelineSection &) const = default;
};

/// One selective-recompute rule: ops matching `main_ops` (preceded by
/// `pre_ops`, followed by `suf_ops`) are kept, not recomputed; `num` is how
/// many matches to keep (-1: all).
struct RefinedOpsPattern {
  std::vector<std::string> main_ops;
  int64_t num = -1;
  std::vector<std::string> pre_ops;
  std::vector<std::string> suf_ops;
  bool operator==(const RefinedOpsPattern &) const = default;
};

struct RecomputeSection {
  bool enable = false;
  std::vector<std::string> checkpoints;
  std::vector<int64_t> no_recompute_segments;
  int64_t sr = 0;
  std::vector<RefinedOpsPattern> refined_ops_patterns;
  bool operator==(const RecomputeSection &) const = default;
};

struct AmpSection {
  bool enable = false;
  std::string dtype = "float16";
  std::string level = "o1";
  double init_loss_scaling = 32768.0;
  int64_t incr_every_n_steps = 1000;
  int64_t decr_every_n_nan_or_inf = 2;
  double incr_ratio = 2.0;
  double decr_ratio = 0.8;
  bool use_dynamic_loss_scaling = true;
  std::vector<std::string> custom_white_list;
  std::vector<std::string> custom_black_list;
  bool use_master_grad = false;
  /// Level o2 only for ops under a guard (strata.amp_guard), as Paddle's
  /// fp16_guard; the rest compute in f32.
  bool use_fp16_guard = false;
  bool operator==(const AmpSection &) const = default;
};

struct DpOptimizationSection {
  bool fuse_all_reduce_ops = true;
  /// Gradient bucket size in MB (DataParallel's comm_buffer_size; Paddle's
  /// static-graph fuse_grad_size_in_MB is read as the same setting).
  double comm_buffer_size = 25.0;
  /// Cap of the first bucket closed in backward, in MB.
  double last_comm_buffer_size = 1.0;
  bool overlap_comm_cacl = true;
  /// Strata synchronises accumulated gradients once per optimizer step.
  bool gradient_sync_after_accumulate = true;
  bool find_unused_parameters = false;
  /// fleet's fp16_allreduce: gradients cross the wire in float16.
  bool fp16_allreduce = false;
  bool operator==(const DpOptimizationSection &) const = default;
};

struct HybridSection {
  /// 0: whatever the world size leaves after the other degrees.
  int64_t dp_degree = 0;
  int64_t mp_degree = 1;
  bool operator==(const HybridSection &) const = default;
};

struct OptimizerSection {
  std::string type = "adamw";
  double learning_rate = 0.001;
  /// Filled from the type when not given: adamw and lamb 0.01, lars
  /// 0.0005, the others 0.
  std::optional<double> weight_decay;
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Filled from the type when not given: lamb 1e-6, lars 0, the others
  /// 1e-8.
  std::optional<double> epsilon;
  double momentum = 0.9;
  bool use_nesterov = false;
  double lars_coeff = 0.001;
  std::vector<std::string> exclude_from_weight_decay;
  /// Global-norm gradient clipping; 0 disables it.
  double grad_clip_norm = 0.0;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  double min_lr = 0.0;
  bool operator==(const OptimizerSection &) const = default;
};

/// Where a key was written: 1-based line and column in `Strategy::file`.
struct KeyLocation {
  unsigned line = 0;
  unsigned column = 0;
};

struct Strategy {
  ShardingSection sharding;
  FusedPassesSection fused_passes;
  GradientMergeSection gradient_merge;
  PipelineSection pipeline;
  RecomputeSection recompute;
  AmpSection amp;
  DpOptimizationSection dp_optimization;
  HybridSection hybrid;
  OptimizerSection optimizer;

  /// The file the strategy was read from (empty for defaults).
  std::string file;
  /// Location of every key the file set, by canonical name
  /// ("sharding.stage"). Keys set through a fleet spelling are recorded
  /// under the canonical name they map to.
  llvm::StringMap<KeyLocation> locations;

  /// Equality of the settings (not of where they came from).
  bool operator==(const Strategy &other) const;
  bool operator!=(const Strategy &other) const { return !(*this == other); }

  /// Where the file set `key`, or nothing when it took its default.
  std::optional<KeyLocation> locate(llvm::StringRef key) const;
  /// "FILE:LINE:COL" of a key the file set, or "" when it took its default.
  std::string where(llvm::StringRef key) const;
  /// A StrategyError at `key` when the file set it, else about the file.
  llvm::Error errorAt(llvm::StringRef key, const llvm::Twine &message) const;
};

/// An error in a strategy file: at `line` and `column` of `file` (both
/// 1-based), or about the whole file when `line` is 0; `text` is the
/// message alone. It prints as the compiler's diagnostics do
/// ("file:line:col: error: message", then the line and a caret), so
/// llvm::toString gives what a tool shows, while an embedder (the C API's
/// diagnostic callback, the strategy check's MLIR diagnostic) takes the
/// place and the message apart.
class StrategyError : public llvm::ErrorInfo<StrategyError> {
public:
  static char ID;
  /// `rendered`: the whole diagnostic as printed (when empty, "location:
  /// error: message").
  StrategyError(std::string file, unsigned line, unsigned column,
                std::string message, std::string rendered = "");
  const std::string &file() const { return source; }
  /// 0 when the error is about the whole file.
  unsigned line() const { return lineNo; }
  unsigned column() const { return columnNo; }
  /// "file:line:col", or the file's name for the whole file.
  std::string location() const;
  const std::string &text() const { return what; }
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string source;
  unsigned lineNo, columnNo;
  std::string what, rendered;
};

/// A StrategyError about the whole of `file`.
llvm::Error fileError(llvm::StringRef file, const llvm::Twine &message);

/// Options of loading that do not come from the file.
struct StrategyContext {
  /// Number of ranks the program will run on, when known: enables the
  /// checks of the parallel degrees against it.
  std::optional<int64_t> worldSize;
};

/// Reads a YAML or JSON strategy (JSON when the text starts with '{'),
/// maps the fleet spellings, fills defaults and validates. Errors name the
/// file, line and column and suggest the closest valid key.
llvm::Expected<Strategy> parseStrategy(llvm::StringRef text,
                                       llvm::StringRef bufferName,
                                       const StrategyContext &context = {});
llvm::Expected<Strategy> loadStrategy(llvm::StringRef path,
                                      const StrategyContext &context = {});

/// The context of one rank's compile: a job of `worldSize` ranks (0:
/// unknown, the program of one rank whatever the world) and its `rank`.
/// Refuses a world size outside [0, kMaxRanks] and a rank outside [0, world
/// size) (0 when the world size is unknown).
llvm::Expected<StrategyContext> jobContext(int64_t worldSize, int64_t rank);

/// The effective strategy, every key with its value, in canonical spelling.
std::string toYaml(const Strategy &strategy);
std::string toJson(const Strategy &strategy);
/// Writes YAML or JSON by the extension of `path` (.json for JSON),
/// atomically (temporary file + rename).
llvm::Error saveStrategy(const Strategy &strategy, llvm::StringRef path);

/// The shortest decimal text that reads back as `value` ("0.9", "1e-08",
/// "256.0"), as strategy files and pass options write numbers.
std::string formatStrategyNumber(double value);

/// Data-parallel degree the world leaves after the other degrees.
int64_t dataParallelDegree(const Strategy &strategy, int64_t worldSize);

} // namespace strata

#endif // STRATA_STRATEGY_STRATEGY_H
