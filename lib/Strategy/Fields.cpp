//===- Fields.cpp - The tables of a strategy's sections and keys ----------===//

#include "Fields.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;

namespace strata::detail {

template <typename S>
using FieldPtr = std::variant<bool S::*, int64_t S::*, double S::*,
                              std::optional<double> S::*, std::string S::*,
                              StringList S::*, IntList S::*, PatternList S::*>;

template <typename S> struct Field {
  StringLiteral name;
  FieldPtr<S> ptr;
};

template <typename S>
SectionInfo makeSection(StringLiteral name, S Strategy::*section,
                        std::vector<Field<S>> fields) {
  SectionInfo info;
  info.name = name;
  for (const Field<S> &f : fields)
    info.keys.push_back(f.name);
  auto find = [fields](StringRef key) -> const Field<S> * {
    for (const Field<S> &f : fields)
      if (f.name == key)
        return &f;
    return nullptr;
  };
  info.kindOf = [find](Strategy &, StringRef key) {
    return find(key)->ptr.index();
  };
  info.set = [find, section](Strategy &s, StringRef key, Value value) {
    S &sec = s.*section;
    std::visit(
        [&](auto ptr) {
          using T = std::remove_reference_t<decltype(sec.*ptr)>;
          if constexpr (std::is_same_v<T, std::optional<double>>)
            sec.*ptr = std::get<double>(value);
          else
            sec.*ptr = std::get<T>(std::move(value));
        },
        find(key)->ptr);
  };
  info.forEach = [fields,
                  section](const Strategy &s,
                           function_ref<void(StringRef, const Value &)> fn) {
    const S &sec = s.*section;
    for (const Field<S> &f : fields)
      std::visit(
          [&](auto ptr) {
            using T = std::remove_cvref_t<decltype(sec.*ptr)>;
            if constexpr (std::is_same_v<T, std::optional<double>>)
              fn(f.name, Value((sec.*ptr).value_or(0.0)));
            else
              fn(f.name, Value(sec.*ptr));
          },
          f.ptr);
  };
  return info;
}

#define STRATA_FIELD(S, name)                                                  \
  Field<S> { #name, &S::name }

/// Paddle's defaults that depend on the optimizer type.
void fillOptimizerDefaults(OptimizerSection &o) {
  if (!o.weight_decay)
    o.weight_decay = o.type == "adamw" || o.type == "lamb" ? 0.01
                     : o.type == "lars"                    ? 0.0005
                                                           : 0.0;
  if (!o.epsilon)
    o.epsilon = o.type == "lamb" ? 1e-6 : o.type == "lars" ? 0.0 : 1e-8;
}

/// The value of canonical key `path` ("section.key") in `s`.
std::optional<Value> valueOf(const Strategy &s, StringRef path) {
  auto [section, key] = path.split('.');
  std::optional<Value> found;
  for (const SectionInfo &info : sections())
    if (info.name == section)
      info.forEach(s, [&](StringRef k, const Value &v) {
        if (k == key)
          found = v;
      });
  return found;
}

const std::vector<SectionInfo> &sections() {
  static const std::vector<SectionInfo> all = [] {
    std::vector<SectionInfo> v;
    using Sh = ShardingSection;
    v.push_back(makeSection<Sh>(
        "sharding", &Strategy::sharding,
        {STRATA_FIELD(Sh, enable), STRATA_FIELD(Sh, stage),
         STRATA_FIELD(Sh, degree), STRATA_FIELD(Sh, enable_overlap),
         STRATA_FIELD(Sh, param_comm_stream_num),
         STRATA_FIELD(Sh, grad_comm_stream_num),
         STRATA_FIELD(Sh, param_bucket_size_numel),
         STRATA_FIELD(Sh, grad_bucket_size_numel),
         STRATA_FIELD(Sh, partition_algor),
         STRATA_FIELD(Sh, comm_buffer_size_MB),
         STRATA_FIELD(Sh, enable_tensor_fusion),
         STRATA_FIELD(Sh, release_gradients), STRATA_FIELD(Sh, offload),
         STRATA_FIELD(Sh, sync_buffers), STRATA_FIELD(Sh, buffer_max_size),
         STRATA_FIELD(Sh, segment_size), STRATA_FIELD(Sh, sync_comm)}));
    using F = FusedPassesSection;
    v.push_back(makeSection<F>(
        "fused_passes", &Strategy::fused_passes,
        {STRATA_FIELD(F, enable), STRATA_FIELD(F, gemm_epilogue),
         STRATA_FIELD(F, dropout_add), STRATA_FIELD(F, flash_attention),
         STRATA_FIELD(F, rms_norm)}));
    using G = GradientMergeSection;
    v.push_back(
        makeSection<G>("gradient_merge", &Strategy::gradient_merge,
                       {STRATA_FIELD(G, enable), STRATA_FIELD(G, k_steps),
                        STRATA_FIELD(G, avg)}));
    using P = PipelineSection;
    v.push_back(makeSection<P>(
        "pipeline", &Strategy::pipeline,
        {STRATA_FIELD(P, enable), STRATA_FIELD(P, schedule_mode),
         STRATA_FIELD(P, pp_degree), STRATA_FIELD(P, vpp_degree),
         STRATA_FIELD(P, micro_batch_size), STRATA_FIELD(P, accumulate_steps),
         STRATA_FIELD(P, enable_send_recv_overlap),
         STRATA_FIELD(P, split_backward)}));
    using R = RecomputeSection;
    v.push_back(makeSection<R>(
        "recompute", &Strategy::recompute,
        {STRATA_FIELD(R, enable), STRATA_FIELD(R, checkpoints),
         STRATA_FIELD(R, no_recompute_segments), STRATA_FIELD(R, sr),
         STRATA_FIELD(R, refined_ops_patterns)}));
    using A = AmpSection;
    v.push_back(makeSection<A>(
        "amp", &Strategy::amp,
        {STRATA_FIELD(A, enable), STRATA_FIELD(A, dtype),
         STRATA_FIELD(A, level), STRATA_FIELD(A, init_loss_scaling),
         STRATA_FIELD(A, incr_every_n_steps),
         STRATA_FIELD(A, decr_every_n_nan_or_inf), STRATA_FIELD(A, incr_ratio),
         STRATA_FIELD(A, decr_ratio), STRATA_FIELD(A, use_dynamic_loss_scaling),
         STRATA_FIELD(A, custom_white_list), STRATA_FIELD(A, custom_black_list),
         STRATA_FIELD(A, use_master_grad), STRATA_FIELD(A, use_fp16_guard)}));
    using D = DpOptimizationSection;
    v.push_back(makeSection<D>("dp_optimization", &Strategy::dp_optimization,
                               {STRATA_FIELD(D, fuse_all_reduce_ops),
                                STRATA_FIELD(D, comm_buffer_size),
                                STRATA_FIELD(D, last_comm_buffer_size),
                                STRATA_FIELD(D, overlap_comm_cacl),
                                STRATA_FIELD(D, gradient_sync_after_accumulate),
                                STRATA_FIELD(D, find_unused_parameters),
                                STRATA_FIELD(D, fp16_allreduce)}));
    using H = HybridSection;
    v.push_back(makeSection<H>(
        "hybrid", &Strategy::hybrid,
        {STRATA_FIELD(H, dp_degree), STRATA_FIELD(H, mp_degree)}));
    using O = OptimizerSection;
    v.push_back(makeSection<O>(
        "optimizer", &Strategy::optimizer,
        {STRATA_FIELD(O, type), STRATA_FIELD(O, learning_rate),
         STRATA_FIELD(O, weight_decay), STRATA_FIELD(O, beta1),
         STRATA_FIELD(O, beta2), STRATA_FIELD(O, epsilon),
         STRATA_FIELD(O, momentum), STRATA_FIELD(O, use_nesterov),
         STRATA_FIELD(O, lars_coeff),
         STRATA_FIELD(O, exclude_from_weight_decay),
         STRATA_FIELD(O, grad_clip_norm), STRATA_FIELD(O, lr_schedule),
         STRATA_FIELD(O, warmup_steps), STRATA_FIELD(O, decay_steps),
         STRATA_FIELD(O, min_lr)}));
    return v;
  }();
  return all;
}
#undef STRATA_FIELD

const SectionInfo *findSection(StringRef name) {
  for (const SectionInfo &s : sections())
    if (s.name == name)
      return &s;
  return nullptr;
}

/// The candidate closest to `word`, if it is close enough to be a typo.
std::optional<std::string> closest(StringRef word,
                                   ArrayRef<StringRef> candidates) {
  unsigned best = ~0u;
  StringRef bestWord;
  for (StringRef c : candidates) {
    unsigned d = word.edit_distance(c, /*AllowReplacements=*/true);
    if (d < best) {
      best = d;
      bestWord = c;
    }
  }
  if (bestWord.empty() || best > std::max<size_t>(2, word.size() / 3))
    return std::nullopt;
  return bestWord.str();
}

} // namespace strata::detail
