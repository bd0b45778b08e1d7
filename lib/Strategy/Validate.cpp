//===- Validate.cpp - The rules across the keys of a strategy
//---------------===//
//
// Runs after the reader: ranges, choices, the rules that tie keys together
// (pipeline and gradient merge, sharding and the world size, optimizer
// defaults), each error at the key's place in the file.
//
//===----------------------------------------------------------------------===//

#include "Reader.h"

#include "strata/Passes/Amp.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace llvm;

namespace strata::detail {

Error Reader::validate(const StrategyContext &context) {
  Strategy &s = strategy;
  auto range = [&](StringRef key, int64_t value, int64_t lo,
                   int64_t hi = INT64_MAX) -> Error {
    if (value >= lo && value <= hi)
      return Error::success();
    std::string bound = hi == INT64_MAX ? ">= " + std::to_string(lo)
                                        : "in [" + std::to_string(lo) + ", " +
                                              std::to_string(hi) + "]";
    return failAt(key,
                  "'" + key + "' must be " + bound + ", got " + Twine(value));
  };
  auto positive = [&](StringRef key, double value) -> Error {
    if (value > 0.0)
      return Error::success();
    return failAt(key, "'" + key + "' must be positive, got " +
                           formatStrategyNumber(value));
  };
  // A positive value the step computes with in f32 (a learning rate, the
  // loss scale): one that rounds to 0 or overflows there would train
  // nothing, or nothing but NaN.
  auto positiveF32 = [&](StringRef key, double value) -> Error {
    if (Error err = positive(key, value))
      return err;
    float rounded = float(value);
    if (rounded > 0.0f && std::isfinite(rounded))
      return Error::success();
    return failAt(key, "'" + key + "' is " + formatStrategyNumber(value) +
                           ", which rounds to " +
                           (rounded > 0.0f ? "infinity" : "0") +
                           " in f32, the step's arithmetic (f32 holds 1.4e-45 "
                           "to 3.4e38)");
  };
  auto oneOf = [&](StringRef key, StringRef value,
                   ArrayRef<StringRef> allowed) -> Error {
    if (is_contained(allowed, value))
      return Error::success();
    auto hint = closest(value, allowed);
    return failAt(key, "'" + key + "' must be one of " + join(allowed, ", ") +
                           ", got '" + value + "'" +
                           (hint ? "; did you mean '" + *hint + "'?" : ""));
  };
  /// Bucket sizes in MB: at most 1 TiB (their byte counts fit any counter).
  auto atMostTiB = [&](StringRef key, double mb) -> Error {
    if (mb <= 1024.0 * 1024.0)
      return Error::success();
    return failAt(key, "'" + key + "' must be at most 1048576 (MB), got " +
                           formatStrategyNumber(mb));
  };
  /// Knobs whose non-default values Strata does not implement.
  auto onlyDefault = [&](StringRef key, bool isDefault,
                         StringRef why) -> Error {
    if (isDefault)
      return Error::success();
    return failAt(key, "'" + key + "' is not implemented in Strata: " + why);
  };

#define CHECK(expr)                                                            \
  if (Error err = (expr))                                                      \
    return err;

  // sharding
  CHECK(range("sharding.stage", s.sharding.stage, 1, 3));
  CHECK(range("sharding.degree", s.sharding.degree, 1, kMaxRanks));
  CHECK(oneOf("sharding.partition_algor", s.sharding.partition_algor,
              {"greedy_even", "use_order"}));
  CHECK(
      positive("sharding.comm_buffer_size_MB", s.sharding.comm_buffer_size_MB));
  CHECK(atMostTiB("sharding.comm_buffer_size_MB",
                  s.sharding.comm_buffer_size_MB));
  CHECK(range("sharding.buffer_max_size", s.sharding.buffer_max_size, 1));
  CHECK(range("sharding.segment_size", s.sharding.segment_size, 1));
  CHECK(onlyDefault("sharding.enable_overlap", !s.sharding.enable_overlap,
                    "stage 3 always prefetches parameters; there is no "
                    "separate overlap mode"));
  CHECK(onlyDefault("sharding.param_comm_stream_num",
                    s.sharding.param_comm_stream_num == 1,
                    "one communication stream per rank"));
  CHECK(onlyDefault("sharding.grad_comm_stream_num",
                    s.sharding.grad_comm_stream_num == 1,
                    "one communication stream per rank"));
  CHECK(onlyDefault("sharding.param_bucket_size_numel",
                    s.sharding.param_bucket_size_numel == 1,
                    "parameter buckets are not implemented"));
  CHECK(onlyDefault("sharding.grad_bucket_size_numel",
                    s.sharding.grad_bucket_size_numel == 1,
                    "use dp_optimization.comm_buffer_size for gradient "
                    "buckets"));
  CHECK(onlyDefault("sharding.enable_tensor_fusion",
                    !s.sharding.enable_tensor_fusion,
                    "tensor fusion is not implemented"));
  CHECK(onlyDefault("sharding.release_gradients", !s.sharding.release_gradients,
                    "the static memory plan already frees gradients after "
                    "their last use"));
  CHECK(onlyDefault("sharding.sync_buffers", !s.sharding.sync_buffers,
                    "Strata programs have no non-parameter buffers"));
  CHECK(onlyDefault("sharding.offload", !s.sharding.offload,
                    "offload moves optimizer state from device to host "
                    "memory; the CPU runtime keeps it in host memory already, "
                    "and the CUDA runtime keeps it on the device (offload is "
                    "not implemented there)"));
  CHECK(onlyDefault("sharding.buffer_max_size",
                    s.sharding.buffer_max_size == 8388608,
                    "use comm_buffer_size_MB for the size of gather "
                    "buckets"));

  // gradient merge
  CHECK(range("gradient_merge.k_steps", s.gradient_merge.k_steps, 1));

  // pipeline
  CHECK(oneOf("pipeline.schedule_mode", s.pipeline.schedule_mode,
              {"FThenB", "1F1B", "Eager1F1B", "VPP", "ZBH1", "ZBVPP"}));
  CHECK(onlyDefault("pipeline.schedule_mode",
                    s.pipeline.schedule_mode != "ZBVPP",
                    "the ZBVPP schedule is not implemented"));
  CHECK(range("pipeline.pp_degree", s.pipeline.pp_degree, 1, kMaxRanks));
  CHECK(range("pipeline.vpp_degree", s.pipeline.vpp_degree, 1, kMaxRanks));
  CHECK(range("pipeline.micro_batch_size", s.pipeline.micro_batch_size, 1));
  CHECK(range("pipeline.accumulate_steps", s.pipeline.accumulate_steps, 1));
  CHECK(onlyDefault("pipeline.enable_send_recv_overlap",
                    !s.pipeline.enable_send_recv_overlap,
                    "send/recv overlap is not implemented"));
  CHECK(onlyDefault("pipeline.split_backward", !s.pipeline.split_backward,
                    "use schedule_mode: ZBH1, which splits the backward"));
  if (s.pipeline.enable) {
    bool vpp = s.pipeline.schedule_mode == "VPP";
    if (vpp && s.pipeline.vpp_degree < 2)
      return failAt(isSet("pipeline.vpp_degree") ? "pipeline.vpp_degree"
                                                 : "pipeline.schedule_mode",
                    "schedule_mode VPP needs pipeline.vpp_degree >= 2");
    // The schedules need a micro-batch per stage (VPP: a multiple).
    StringRef mode = s.pipeline.schedule_mode;
    int64_t m = s.pipeline.accumulate_steps, p = s.pipeline.pp_degree;
    StringRef mKey = isSet("pipeline.accumulate_steps")
                         ? "pipeline.accumulate_steps"
                         : "pipeline.pp_degree";
    if ((mode == "1F1B" || mode == "Eager1F1B" || mode == "ZBH1") && m < p)
      return failAt(mKey, "pipeline.accumulate_steps " + Twine(m) +
                              " < pp_degree " + Twine(p) + ": schedule " +
                              mode +
                              " needs a micro-batch per stage; set "
                              "accumulate_steps >= " +
                              Twine(p));
    if (vpp && m % p != 0)
      return failAt(mKey, "pipeline.accumulate_steps " + Twine(m) +
                              " is not a multiple of pp_degree " + Twine(p) +
                              ", as schedule VPP needs");
    if (!vpp && s.pipeline.vpp_degree > 1)
      return failAt("pipeline.vpp_degree",
                    "'pipeline.vpp_degree' > 1 needs schedule_mode VPP, got "
                    "'" +
                        s.pipeline.schedule_mode + "'");
    // As in Paddle, pipeline accumulates accumulate_steps micro-batches per
    // optimizer step through gradient merge.
    if (isSet("gradient_merge.k_steps") &&
        s.gradient_merge.k_steps != s.pipeline.accumulate_steps)
      return failAt("gradient_merge.k_steps",
                    "'gradient_merge.k_steps' (" +
                        Twine(s.gradient_merge.k_steps) +
                        ") contradicts pipeline.accumulate_steps (" +
                        Twine(s.pipeline.accumulate_steps) +
                        "): an enabled pipeline sets k_steps = "
                        "accumulate_steps");
    if (isSet("gradient_merge.avg") && !s.gradient_merge.avg)
      return failAt("gradient_merge.avg",
                    "'gradient_merge.avg' must be true with an enabled "
                    "pipeline (the loss is the mean over micro-batches)");
    if (isSet("gradient_merge.enable") && !s.gradient_merge.enable &&
        s.pipeline.accumulate_steps > 1)
      return failAt("gradient_merge.enable",
                    "'gradient_merge.enable' is false but an enabled "
                    "pipeline with accumulate_steps > 1 uses gradient merge");
    s.gradient_merge.enable =
        s.pipeline.accumulate_steps > 1 || s.gradient_merge.enable;
    s.gradient_merge.k_steps = s.pipeline.accumulate_steps;
    s.gradient_merge.avg = true;
  } else if (s.gradient_merge.enable && s.gradient_merge.k_steps == 1) {
    // One micro-batch per step: nothing to merge, and `avg` means nothing.
    return failAt(isSet("gradient_merge.k_steps") ? "gradient_merge.k_steps"
                                                  : "gradient_merge.enable",
                  "gradient merge with k_steps 1 merges nothing: set "
                  "'gradient_merge.k_steps' to the micro-batches of a step "
                  "(>= 2), or leave gradient merge off");
  }

  // recompute
  CHECK(onlyDefault("recompute.sr", s.recompute.sr == 0,
                    "use refined_ops_patterns for selective recompute"));
  for (int64_t segment : s.recompute.no_recompute_segments)
    CHECK(range("recompute.no_recompute_segments", segment, 0));
  {
    llvm::StringSet<> seen;
    for (const std::string &c : s.recompute.checkpoints)
      if (!seen.insert(c).second)
        return failAt("recompute.checkpoints",
                      "'recompute.checkpoints' names '" + c + "' twice");
  }
  if (s.recompute.enable && s.recompute.checkpoints.empty())
    return failAt(isSet("recompute.enable") ? "recompute.enable"
                                            : "recompute.checkpoints",
                  "recompute is enabled but 'recompute.checkpoints' is "
                  "empty: name the values or layers to keep (e.g. "
                  "[h0, h1] for the GPT blocks)");

  // amp
  CHECK(oneOf("amp.dtype", s.amp.dtype, {"float16", "bfloat16"}));
  CHECK(oneOf("amp.level", s.amp.level, {"o1", "o2"}));
  CHECK(positiveF32("amp.init_loss_scaling", s.amp.init_loss_scaling));
  if (s.amp.init_loss_scaling < 1.0)
    return failAt("amp.init_loss_scaling",
                  "'amp.init_loss_scaling' is " +
                      formatStrategyNumber(s.amp.init_loss_scaling) +
                      ": a loss scale below 1 pushes float16 gradients "
                      "toward underflow (the dynamic rule keeps the scale at "
                      "1 or more); 1 is no scaling");
  CHECK(range("amp.incr_every_n_steps", s.amp.incr_every_n_steps, 1));
  CHECK(range("amp.decr_every_n_nan_or_inf", s.amp.decr_every_n_nan_or_inf, 1));
  if (!(s.amp.incr_ratio > 1.0))
    return failAt("amp.incr_ratio", "'amp.incr_ratio' must be > 1, got " +
                                        formatStrategyNumber(s.amp.incr_ratio));
  if (!(s.amp.decr_ratio > 0.0 && s.amp.decr_ratio < 1.0))
    return failAt("amp.decr_ratio", "'amp.decr_ratio' must be in (0, 1), got " +
                                        formatStrategyNumber(s.amp.decr_ratio));
  for (auto [key, list, other] :
       {std::tuple("amp.custom_white_list", &s.amp.custom_white_list,
                   &s.amp.custom_black_list),
        std::tuple("amp.custom_black_list", &s.amp.custom_black_list,
                   &s.amp.custom_white_list)}) {
    SmallVector<StringRef> ops(amp::listableOps().begin(),
                               amp::listableOps().end());
    for (const std::string &name : *list) {
      if (!is_contained(ops, name)) {
        auto hint = closest(name, ops);
        return failAt(key, "'" + Twine(key) + "' names '" + name +
                               "', which is not an op mixed precision "
                               "decides (" +
                               join(ops, ", ") + ")" +
                               (hint ? "; did you mean '" + *hint + "'?" : ""));
      }
      if (is_contained(*other, name))
        return failAt(key, "'" + name +
                               "' is in both amp.custom_white_list and "
                               "amp.custom_black_list");
    }
  }

  // data parallel
  CHECK(positive("dp_optimization.comm_buffer_size",
                 s.dp_optimization.comm_buffer_size));
  CHECK(positive("dp_optimization.last_comm_buffer_size",
                 s.dp_optimization.last_comm_buffer_size));
  CHECK(atMostTiB("dp_optimization.comm_buffer_size",
                  s.dp_optimization.comm_buffer_size));
  CHECK(atMostTiB("dp_optimization.last_comm_buffer_size",
                  s.dp_optimization.last_comm_buffer_size));
  CHECK(onlyDefault("dp_optimization.fuse_all_reduce_ops",
                    s.dp_optimization.fuse_all_reduce_ops,
                    "gradients are always synchronised in buckets"));
  CHECK(onlyDefault("dp_optimization.overlap_comm_cacl",
                    s.dp_optimization.overlap_comm_cacl,
                    "bucket all-reduces always overlap the backward"));
  CHECK(onlyDefault("dp_optimization.gradient_sync_after_accumulate",
                    s.dp_optimization.gradient_sync_after_accumulate,
                    "accumulated gradients are synchronised once per "
                    "optimizer step"));

  // hybrid
  CHECK(range("hybrid.dp_degree", s.hybrid.dp_degree, 0, kMaxRanks));
  CHECK(range("hybrid.mp_degree", s.hybrid.mp_degree, 1, kMaxRanks));
  CHECK(onlyDefault("hybrid.mp_degree", s.hybrid.mp_degree == 1,
                    "tensor (model) parallelism is not implemented"));

  // optimizer
  OptimizerSection &o = s.optimizer;
  CHECK(oneOf("optimizer.type", o.type,
              {"sgd", "momentum", "adam", "adamw", "lamb", "lars"}));
  CHECK(positiveF32("optimizer.learning_rate", o.learning_rate));
  fillOptimizerDefaults(o);
  if (*o.weight_decay < 0.0)
    return failAt("optimizer.weight_decay",
                  "'optimizer.weight_decay' must be >= 0");
  if (*o.epsilon < 0.0)
    return failAt("optimizer.epsilon", "'optimizer.epsilon' must be >= 0");
  if ((o.type == "adam" || o.type == "adamw" || o.type == "lamb") &&
      !(float(*o.epsilon) > 0.0f))
    return failAt("optimizer.epsilon",
                  "'optimizer.epsilon' of " + o.type +
                      " must be a positive f32 (at least 1.4e-45), got " +
                      formatStrategyNumber(*o.epsilon) +
                      ": the update divides by sqrt(v) + epsilon, 0 / 0 for "
                      "an element whose gradients have all been 0");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0))
    return failAt("optimizer.beta1", "'optimizer.beta1' must be in [0, 1)");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return failAt("optimizer.beta2", "'optimizer.beta2' must be in [0, 1)");
  if (!(o.momentum >= 0.0 && o.momentum < 1.0))
    return failAt("optimizer.momentum",
                  "'optimizer.momentum' must be in [0, 1)");
  CHECK(positiveF32("optimizer.lars_coeff", o.lars_coeff));
  if (o.grad_clip_norm < 0.0)
    return failAt("optimizer.grad_clip_norm",
                  "'optimizer.grad_clip_norm' must be >= 0 (0 disables "
                  "clipping)");
  CHECK(oneOf("optimizer.lr_schedule", o.lr_schedule,
              {"constant", "linear_warmup", "cosine"}));
  CHECK(range("optimizer.warmup_steps", o.warmup_steps, 0));
  CHECK(range("optimizer.decay_steps", o.decay_steps, 0));
  if (o.lr_schedule == "cosine" && o.decay_steps < 1)
    return failAt(isSet("optimizer.decay_steps") ? "optimizer.decay_steps"
                                                 : "optimizer.lr_schedule",
                  "the cosine schedule needs optimizer.decay_steps >= 1");
  if (o.lr_schedule == "linear_warmup" && o.warmup_steps < 1)
    return failAt(isSet("optimizer.warmup_steps") ? "optimizer.warmup_steps"
                                                  : "optimizer.lr_schedule",
                  "the linear_warmup schedule needs optimizer.warmup_steps "
                  ">= 1");
  if (o.min_lr < 0.0 || o.min_lr > o.learning_rate)
    return failAt("optimizer.min_lr",
                  "'optimizer.min_lr' must be in [0, learning_rate]");

  // No key is accepted in silence: a key set to a value other than its
  // default where the rest of the strategy makes it irrelevant is refused
  // with the reason, first in file order. (Defaults are accepted anywhere:
  // they ask for nothing, and --print-strategy writes every key.)
  Strategy defaults;
  defaults.optimizer.type = o.type;
  fillOptimizerDefaults(defaults.optimizer);
  SmallVector<std::pair<SMLoc, std::string>> unused;
  auto unusedIf = [&](StringRef key, bool irrelevant, const Twine &why) {
    auto it = keyLocs.find(key);
    if (irrelevant && it != keyLocs.end() &&
        valueOf(s, key) != valueOf(defaults, key))
      unused.push_back(
          {it->second, ("'" + key + "' has no effect: " + why).str()});
  };
  const std::pair<StringRef, bool> sections[] = {
      {"sharding", s.sharding.enable},
      {"fused_passes", s.fused_passes.enable},
      // An enabled pipeline merges its micro-batches' gradients.
      {"gradient_merge", s.gradient_merge.enable || s.pipeline.enable},
      {"pipeline", s.pipeline.enable},
      {"recompute", s.recompute.enable},
      {"amp", s.amp.enable}};
  for (const auto &entry : keyLocs) {
    auto [section, key] = entry.getKey().split('.');
    for (auto [name, enabled] : sections)
      if (section == name && key != "enable")
        unusedIf(entry.getKey(), !enabled,
                 name + " is not enabled (set " + name +
                     ".enable: true, or remove the key)");
  }
  StringRef type = o.type;
  bool adamFamily = type == "adam" || type == "adamw" || type == "lamb";
  unusedIf("optimizer.beta1", !adamFamily,
           "optimizer.type " + type + " has no beta1 (adam, adamw, lamb do)");
  unusedIf("optimizer.beta2", !adamFamily,
           "optimizer.type " + type + " has no beta2 (adam, adamw, lamb do)");
  unusedIf("optimizer.epsilon", !adamFamily && type != "lars",
           "optimizer.type " + type +
               " has no epsilon (adam, adamw, lamb, lars do)");
  unusedIf("optimizer.momentum", type != "momentum" && type != "lars",
           "optimizer.type " + type +
               " has no momentum: use type: momentum (or lars)");
  unusedIf("optimizer.use_nesterov", type != "momentum",
           "only optimizer.type momentum has Nesterov momentum, not " + type);
  unusedIf("optimizer.lars_coeff", type != "lars",
           "only optimizer.type lars has a trust coefficient, not " + type);
  unusedIf("optimizer.exclude_from_weight_decay", *o.weight_decay == 0.0,
           "optimizer.weight_decay is 0");
  unusedIf("optimizer.warmup_steps", o.lr_schedule == "constant",
           "the constant schedule has no warm-up (use lr_schedule: "
           "linear_warmup or cosine)");
  unusedIf("optimizer.decay_steps", o.lr_schedule != "cosine",
           "only the cosine schedule decays, not " + o.lr_schedule);
  unusedIf("optimizer.min_lr", o.lr_schedule != "cosine",
           "only the cosine schedule decays to min_lr, not " + o.lr_schedule);
  unusedIf("sharding.sync_comm", s.sharding.sync_comm,
           "collectives always overlap computation (strata-run "
           "--blocking-collectives completes each where it is issued, to "
           "measure)");
  unusedIf("dp_optimization.find_unused_parameters",
           s.dp_optimization.find_unused_parameters,
           "Strata sees which parameters have no gradient when it compiles "
           "the program, and updates them on no rank");
  unusedIf("amp.use_fp16_guard", s.amp.enable && s.amp.level == "o1",
           "the guard limits level o2's low-precision parameters and ops to "
           "the guarded ops (level o1 decides per op by the lists)");
  unusedIf("amp.use_master_grad", s.amp.enable && s.amp.level == "o1",
           "at level o1 parameter gradients are f32 already (master "
           "gradients are for level o2)");
  // (Set true: false is the default.)
  unusedIf("amp.use_master_grad",
           s.amp.enable && s.amp.level == "o2" && s.amp.use_master_grad &&
               ((s.gradient_merge.enable && s.gradient_merge.k_steps > 1) ||
                (s.pipeline.enable && s.pipeline.accumulate_steps > 1)),
           "gradient merge (and a pipeline's micro-batches) accumulates "
           "every parameter gradient in f32 already");
  for (StringRef key :
       {"amp.incr_ratio", "amp.decr_ratio", "amp.incr_every_n_steps",
        "amp.decr_every_n_nan_or_inf"})
    unusedIf(key,
             s.amp.enable && s.amp.dtype == "float16" &&
                 !s.amp.use_dynamic_loss_scaling,
             "the loss scale is static (amp.use_dynamic_loss_scaling: "
             "false): it never grows or shrinks");
  unusedIf("dp_optimization.fp16_allreduce",
           s.amp.enable && s.amp.level == "o2",
           "at amp level o2 the gradients are 16-bit on the wire already");
  unusedIf("sharding.segment_size", s.sharding.enable && s.sharding.stage < 3,
           "only stage 3 shards parameters (segment_size is the smallest "
           "sharded one)");
  if (!unused.empty()) {
    auto first = llvm::min_element(unused, [](auto &a, auto &b) {
      return a.first.getPointer() < b.first.getPointer();
    });
    return fail(first->first, first->second);
  }

  if (groupSharded && !isSet("sharding.degree") && context.worldSize &&
      *context.worldSize >= 1)
    s.sharding.degree = std::max<int64_t>(
        1, *context.worldSize /
               (s.pipeline.enable ? s.pipeline.pp_degree : int64_t(1)));
  // Parallel degrees against the world.
  if (context.worldSize) {
    int64_t world = *context.worldSize;
    if (world < 1 || world > kMaxRanks)
      return createStringError(inconvertibleErrorCode(),
                               "the world size must be in [1, " +
                                   Twine(kMaxRanks) + "], got " + Twine(world));
    int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
    int64_t shard = s.sharding.enable ? s.sharding.degree : 1;
    std::string ppKey = "pipeline.pp_degree";
    if (world % pp != 0)
      return failAt(ppKey, "'pipeline.pp_degree' (" + Twine(pp) +
                               ") does not divide the world size (" +
                               Twine(world) + ")");
    if (shard > world / pp)
      return failAt("sharding.degree",
                    "'sharding.degree' " + Twine(shard) + " needs at least " +
                        Twine(shard * pp) + " ranks" +
                        (pp > 1 ? " (x pipeline.pp_degree " + Twine(pp) + ")"
                                : Twine("")) +
                        "; the job has " + Twine(world) +
                        (isSet("sharding.degree")
                             ? ""
                             : " (the default degree is 8: set "
                               "sharding.degree)"));
    if ((world / pp) % shard != 0)
      return failAt(
          "sharding.degree",
          "'sharding.degree' (" + Twine(shard) + ") does not divide the " +
              Twine(world / pp) + " ranks left by pipeline.pp_degree (" +
              Twine(pp) + ") on a world of " + Twine(world) +
              (isSet("sharding.degree") ? ""
                                        : "; the default degree is 8, set it"));
    int64_t dp = world / (pp * shard);
    if (s.hybrid.dp_degree != 0 && s.hybrid.dp_degree != dp)
      return failAt("hybrid.dp_degree",
                    "'hybrid.dp_degree' (" + Twine(s.hybrid.dp_degree) +
                        ") does not match the world: " + Twine(world) +
                        " ranks = pp " + Twine(pp) + " x sharding " +
                        Twine(shard) + " x dp " + Twine(dp));
  }
#undef CHECK
  return Error::success();
}

} // namespace strata::detail
