//===- Strategy.cpp - Reading, validating and writing strategies ----------===//
//
// A strategy file is read with LLVM's YAML parser (JSON files are checked
// by llvm::json first, then walked the same way, since JSON is YAML), so
// every key keeps its line and column for diagnostics. Each section is
// described once by a table of fields (name + member pointer); reading,
// writing and suggestions all come from those tables.
//
//===----------------------------------------------------------------------===//

#include "strata/Strategy/Strategy.h"
#include "strata/Support/Nesting.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/YAMLTraits.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <variant>

using namespace llvm;
using namespace strata;

//===----------------------------------------------------------------------===//
// Field tables
//===----------------------------------------------------------------------===//

namespace {

using StringList = std::vector<std::string>;
using IntList = std::vector<int64_t>;
using PatternList = std::vector<RefinedOpsPattern>;

template <typename S>
using FieldPtr =
    std::variant<bool S::*, int64_t S::*, double S::*, std::optional<double> S::*,
                 std::string S::*, StringList S::*, IntList S::*,
                 PatternList S::*>;

template <typename S> struct Field {
  StringLiteral name;
  FieldPtr<S> ptr;
};

/// A typed value read from the file, before it is stored in a field.
using Value = std::variant<bool, int64_t, double, std::string, StringList,
                           IntList, PatternList>;

/// A section of the strategy, with its fields, erased to what the reader
/// and writers need.
struct SectionInfo {
  StringRef name;
  std::vector<StringRef> keys;
  /// Kind of value a key holds (an index into FieldPtr's alternatives).
  std::function<size_t(Strategy &, StringRef)> kindOf;
  std::function<void(Strategy &, StringRef, Value)> set;
  /// Writes `key: value` pairs through the callback.
  std::function<void(const Strategy &,
                     function_ref<void(StringRef, const Value &)>)>
      forEach;
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
  info.forEach = [fields, section](
                     const Strategy &s,
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

#define STRATA_FIELD(S, name) Field<S>{#name, &S::name}

/// Paddle's defaults that depend on the optimizer type.
void fillOptimizerDefaults(OptimizerSection &o) {
  if (!o.weight_decay)
    o.weight_decay = o.type == "adamw" || o.type == "lamb" ? 0.01
                     : o.type == "lars"                    ? 0.0005
                                                           : 0.0;
  if (!o.epsilon)
    o.epsilon = o.type == "lamb" ? 1e-6 : o.type == "lars" ? 0.0 : 1e-8;
}

const std::vector<SectionInfo> &sections();

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
    v.push_back(makeSection<F>("fused_passes", &Strategy::fused_passes,
                               {STRATA_FIELD(F, enable),
                                STRATA_FIELD(F, gemm_epilogue),
                                STRATA_FIELD(F, dropout_add)}));
    using G = GradientMergeSection;
    v.push_back(makeSection<G>(
        "gradient_merge", &Strategy::gradient_merge,
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
         STRATA_FIELD(A, decr_every_n_nan_or_inf),
         STRATA_FIELD(A, incr_ratio), STRATA_FIELD(A, decr_ratio),
         STRATA_FIELD(A, use_dynamic_loss_scaling),
         STRATA_FIELD(A, custom_white_list),
         STRATA_FIELD(A, custom_black_list),
         STRATA_FIELD(A, use_master_grad)}));
    using D = DpOptimizationSection;
    v.push_back(makeSection<D>(
        "dp_optimization", &Strategy::dp_optimization,
        {STRATA_FIELD(D, fuse_all_reduce_ops),
         STRATA_FIELD(D, comm_buffer_size),
         STRATA_FIELD(D, last_comm_buffer_size),
         STRATA_FIELD(D, overlap_comm_cacl),
         STRATA_FIELD(D, gradient_sync_after_accumulate),
         STRATA_FIELD(D, find_unused_parameters)}));
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

//===----------------------------------------------------------------------===//
// fleet.DistributedStrategy, group_sharded_parallel and DataParallel names
//===----------------------------------------------------------------------===//

/// fleet's `X: true` switches and the `X_configs` dictionaries.
const StringLiteral kFleetSwitches[] = {
    "sharding", "recompute", "pipeline", "gradient_merge", "amp",
    "lamb",     "lars",      "localsgd", "adaptive_localsgd", "dgc",
    "fp16_allreduce", "auto"};

struct FleetKey {
  StringLiteral configs; // e.g. "sharding_configs"
  StringLiteral key;     // e.g. "sharding_degree"
  StringLiteral target;  // canonical "section.key", or "" (see below)
};

/// fleet config keys that map onto a canonical key.
const FleetKey kFleetKeys[] = {
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
  StringLiteral configs;
  StringLiteral key;
  StringLiteral defaultValue; // as YAML text; "[]" for an empty list
  StringLiteral why;
};
const InertKey kInertKeys[] = {
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
    {"amp_configs", "use_pure_fp16", "false",
     "use amp.level: o2 (pure low-precision training is not implemented)"},
};

/// Configs of features Strata does not implement: the keys are checked,
/// enabling the feature is an error.
struct UnimplementedConfigKey {
  StringLiteral configs;
  StringLiteral key;
  StringLiteral kind; // "int", "double_list"
};
const UnimplementedConfigKey kUnimplementedConfigKeys[] = {
    {"localsgd_configs", "k_steps", "int"},
    {"localsgd_configs", "begin_step", "int"},
    {"adaptive_localsgd_configs", "init_k_steps", "int"},
    {"adaptive_localsgd_configs", "begin_step", "int"},
    {"dgc_configs", "rampup_begin_step", "int"},
    {"dgc_configs", "rampup_step", "int"},
    {"dgc_configs", "sparsity", "double_list"},
};

/// group_sharded_parallel's arguments, all canonical sharding keys but
/// `level`.
const StringLiteral kGroupShardedKeys[] = {
    "level",        "offload",   "sync_buffers", "buffer_max_size",
    "segment_size", "sync_comm"};

/// DataParallel's and Paddle static-graph spellings inside dp_optimization.
const StringLiteral kDpAliases[][2] = {
    {"fuse_grad_size_in_MB", "comm_buffer_size"}};

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

class Reader {
public:
  Reader(StringRef text, StringRef bufferName, Strategy &strategy)
      : strategy(strategy), bufferName(bufferName.str()) {
    sourceMgr.AddNewSourceBuffer(
        MemoryBuffer::getMemBufferCopy(text, bufferName), SMLoc());
    sourceMgr.setDiagHandler(
        [](const SMDiagnostic &diag, void *context) {
          auto *self = static_cast<Reader *>(context);
          if (self->message.empty()) {
            raw_string_ostream os(self->message);
            diag.print(nullptr, os, /*ShowColors=*/false);
          }
        },
        this);
  }

  Error read();
  /// Cross-key rules; runs after read().
  Error validate(const StrategyContext &context);

private:
  // Diagnostics.
  Error fail(SMLoc loc, const Twine &msg) {
    sourceMgr.PrintMessage(loc, SourceMgr::DK_Error, msg);
    return createStringError(inconvertibleErrorCode(), message);
  }
  Error fail(yaml::Node *node, const Twine &msg) {
    // (A document that does not parse has no root node.)
    if (!node) {
      if (!message.empty())
        return createStringError(inconvertibleErrorCode(), message);
      return createStringError(inconvertibleErrorCode(),
                               bufferName + ": error: " + msg.str() + "\n");
    }
    return fail(node->getSourceRange().Start, msg);
  }
  /// An error about a key: at its location when the file set it.
  Error failAt(StringRef key, const Twine &msg) {
    auto it = keyLocs.find(key);
    if (it != keyLocs.end())
      return fail(it->second, msg);
    return createStringError(inconvertibleErrorCode(),
                             bufferName + ": error: " + msg.str() + "\n");
  }
  bool isSet(StringRef key) const { return keyLocs.count(key); }

  // Scalars and lists.
  Expected<std::string> scalar(yaml::Node *node, StringRef what);
  Error untagged(yaml::Node *node, StringRef what);
  Expected<Value> readValue(yaml::Node *node, size_t kind, StringRef what);
  Expected<PatternList> readPatterns(yaml::Node *node, StringRef what);
  Expected<StringList> readStringList(yaml::Node *node, StringRef what);

  /// Stores `node` into canonical key `path` ("section.key"), recording
  /// where it was set; setting a key twice is an error.
  Error setCanonical(StringRef path, yaml::Node *keyNode, yaml::Node *value);

  Error readSection(const SectionInfo &section, yaml::MappingNode *map);
  Error readFleetConfigs(StringRef configs, yaml::MappingNode *map);
  Error readGroupSharded(yaml::MappingNode *map);

  Strategy &strategy;
  std::string bufferName;
  SourceMgr sourceMgr;
  std::string message;
  StringMap<SMLoc> keyLocs;
  /// group_sharded_parallel shards over the whole group: its degree is the
  /// world (less pipeline stages) unless set.
  bool groupSharded = false;
  /// fleet switches (`lamb: true`) and their locations.
  StringMap<std::pair<bool, SMLoc>> switches;
  /// A canonical key read but not yet stored.
  struct Pending {
    std::string path;
    Value value;
    SMLoc loc;
  };
  /// While set, setCanonical collects here instead of storing: the YAML
  /// stream cannot be walked twice, and lamb_configs / lars_configs apply
  /// only when their optimizer is enabled, which may be said later.
  std::vector<Pending> *pendingSink = nullptr;
  StringMap<std::vector<Pending>> deferredConfigs;

  Error store(StringRef path, Value value, SMLoc loc);
};

/// A YAML tag (`!!str 2`, `!custom x`) would change how a value reads in
/// other YAML readers and is ignored by this one: refused.
Error Reader::untagged(yaml::Node *node, StringRef what) {
  if (!node || node->getRawTag().empty())
    return Error::success();
  return fail(node, "YAML tag '" + node->getRawTag() + "' on '" + what +
                        "' is not supported: write the plain value");
}

Expected<std::string> Reader::scalar(yaml::Node *node, StringRef what) {
  if (Error err = untagged(node, what))
    return std::move(err);
  auto *s = dyn_cast_or_null<yaml::ScalarNode>(node);
  if (!s)
    return fail(node, "expected a single value for '" + what + "'");
  SmallString<32> storage;
  StringRef v = s->getValue(storage);
  if (v.empty() || v == "~" || v == "null")
    return fail(node, "missing value for '" + what + "'");
  // Names and values are printable UTF-8 (what --print-strategy writes
  // reads back the same).
  if (!json::isUTF8(v))
    return fail(node, "'" + what + "' is not valid UTF-8");
  for (char c : v)
    if ((unsigned char)c < 0x20 || c == 0x7f)
      return fail(node, "'" + what + "' contains the control character " +
                            formatv("0x{0:x-2}", unsigned((unsigned char)c))
                                .str());
  return v.str();
}

Expected<StringList> Reader::readStringList(yaml::Node *node, StringRef what) {
  if (Error err = untagged(node, what))
    return std::move(err);
  auto *seq = dyn_cast_or_null<yaml::SequenceNode>(node);
  if (!seq)
    return fail(node, "expected a list of strings for '" + what + "'");
  StringList result;
  for (yaml::Node &item : *seq) {
    auto v = scalar(&item, what);
    if (!v)
      return v.takeError();
    result.push_back(*v);
  }
  return result;
}

Expected<PatternList> Reader::readPatterns(yaml::Node *node, StringRef what) {
  if (Error err = untagged(node, what))
    return std::move(err);
  auto *seq = dyn_cast_or_null<yaml::SequenceNode>(node);
  if (!seq)
    return fail(node, "expected a list of patterns for '" + what + "'");
  PatternList result;
  static const StringRef keys[] = {"main_ops", "num", "pre_ops", "suf_ops"};
  for (yaml::Node &item : *seq) {
    if (Error err = untagged(&item, what))
      return std::move(err);
    auto *map = dyn_cast<yaml::MappingNode>(&item);
    if (!map)
      return fail(&item, "expected a mapping {main_ops, num, pre_ops, "
                         "suf_ops} in '" + what + "'");
    RefinedOpsPattern pattern;
    bool hasMain = false;
    for (yaml::KeyValueNode &kv : *map) {
      auto key = scalar(kv.getKey(), what);
      if (!key)
        return key.takeError();
      std::string sub = (what + "." + *key).str();
      if (*key == "num") {
        auto v = readValue(kv.getValue(), 1, sub);
        if (!v)
          return v.takeError();
        pattern.num = std::get<int64_t>(*v);
        if (pattern.num < -1)
          return fail(kv.getValue(), "'" + sub + "' must be -1 (all) or >= 0");
        continue;
      }
      StringList *target = *key == "main_ops"  ? &pattern.main_ops
                           : *key == "pre_ops" ? &pattern.pre_ops
                           : *key == "suf_ops" ? &pattern.suf_ops
                                               : nullptr;
      if (!target) {
        auto hint = closest(*key, keys);
        return fail(kv.getKey(),
                    "unknown key '" + *key + "' in '" + what + "'" +
                        (hint ? "; did you mean '" + *hint + "'?" : ""));
      }
      auto list = readStringList(kv.getValue(), sub);
      if (!list)
        return list.takeError();
      *target = std::move(*list);
      hasMain |= *key == "main_ops";
    }
    if (!hasMain || pattern.main_ops.empty())
      return fail(&item, "a pattern in '" + what + "' needs main_ops");
    result.push_back(std::move(pattern));
  }
  return result;
}

Expected<Value> Reader::readValue(yaml::Node *node, size_t kind,
                                  StringRef what) {
  // Kinds follow FieldPtr: bool, int, double, optional double, string,
  // string list, int list, pattern list.
  switch (kind) {
  case 0: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    if (std::optional<bool> b = yaml::parseBool(*v))
      return Value(*b);
    return fail(node, "expected true or false for '" + what + "', got '" +
                          *v + "'");
  }
  case 1: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    int64_t i;
    if (StringRef(*v).getAsInteger(10, i))
      return fail(node, "expected an integer for '" + what + "', got '" +
                            *v + "'");
    return Value(i);
  }
  case 2:
  case 3: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    double d;
    if (!to_float(*v, d))
      return fail(node, "expected a number for '" + what + "', got '" + *v +
                            "'");
    if (!std::isfinite(d))
      return fail(node, "expected a finite number for '" + what + "', got '" +
                            *v + "'");
    return Value(d);
  }
  case 4: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    return Value(*v);
  }
  case 5: {
    auto v = readStringList(node, what);
    if (!v)
      return v.takeError();
    return Value(std::move(*v));
  }
  case 6: {
    if (Error err = untagged(node, what))
      return std::move(err);
    auto *seq = dyn_cast_or_null<yaml::SequenceNode>(node);
    if (!seq)
      return fail(node, "expected a list of integers for '" + what + "'");
    IntList result;
    for (yaml::Node &item : *seq) {
      auto v = readValue(&item, 1, what);
      if (!v)
        return v.takeError();
      result.push_back(std::get<int64_t>(*v));
    }
    return Value(std::move(result));
  }
  case 7: {
    auto v = readPatterns(node, what);
    if (!v)
      return v.takeError();
    return Value(std::move(*v));
  }
  }
  llvm_unreachable("unknown field kind");
}

Error Reader::setCanonical(StringRef path, yaml::Node *keyNode,
                           yaml::Node *value) {
  auto [sectionName, key] = path.split('.');
  const SectionInfo *section = findSection(sectionName);
  assert(section && "unknown canonical section");
  if (!value || isa<yaml::NullNode>(value))
    return fail(keyNode, "missing value for '" + path + "'");
  auto v = readValue(value, section->kindOf(strategy, key), path);
  if (!v)
    return v.takeError();
  SMLoc loc = keyNode->getSourceRange().Start;
  if (pendingSink) {
    pendingSink->push_back({path.str(), std::move(*v), loc});
    return Error::success();
  }
  return store(path, std::move(*v), loc);
}

Error Reader::store(StringRef path, Value value, SMLoc loc) {
  auto [sectionName, key] = path.split('.');
  const SectionInfo *section = findSection(sectionName);
  auto previous = keyLocs.find(path);
  if (previous != keyLocs.end()) {
    unsigned line = sourceMgr.getLineAndColumn(previous->second).first;
    return fail(loc, "'" + path + "' is set twice (first on line " +
                         Twine(line) + ")");
  }
  section->set(strategy, key, std::move(value));
  keyLocs[path] = loc;
  auto [line, column] = sourceMgr.getLineAndColumn(loc);
  strategy.locations[path] = KeyLocation{line, column};
  return Error::success();
}

Error Reader::readSection(const SectionInfo &section, yaml::MappingNode *map) {
  for (yaml::KeyValueNode &kv : *map) {
    auto key = scalar(kv.getKey(), section.name);
    if (!key)
      return key.takeError();
    std::string canonical = *key;
    if (section.name == "dp_optimization")
      for (auto &alias : kDpAliases)
        if (*key == alias[0])
          canonical = alias[1].str();
    if (!is_contained(section.keys, StringRef(canonical))) {
      SmallVector<StringRef> candidates(section.keys.begin(),
                                        section.keys.end());
      if (section.name == "dp_optimization")
        for (auto &alias : kDpAliases)
          candidates.push_back(alias[0]);
      auto hint = closest(*key, candidates);
      return fail(kv.getKey(), "unknown key '" + *key + "' in section '" +
                                   section.name + "'" +
                                   (hint ? "; did you mean '" + *hint + "'?"
                                         : ""));
    }
    if (Error err = setCanonical((section.name + "." + canonical).str(),
                                 kv.getKey(), kv.getValue()))
      return err;
  }
  return Error::success();
}

Error Reader::readFleetConfigs(StringRef configs, yaml::MappingNode *map) {
  for (yaml::KeyValueNode &kv : *map) {
    auto key = scalar(kv.getKey(), configs);
    if (!key)
      return key.takeError();
    std::string what = (configs + "." + *key).str();
    SmallVector<StringRef> candidates;
    bool handled = false;
    for (const FleetKey &f : kFleetKeys) {
      if (f.configs != configs)
        continue;
      candidates.push_back(f.key);
      if (f.key == *key) {
        if (Error err = setCanonical(f.target, kv.getKey(), kv.getValue()))
          return err;
        handled = true;
        break;
      }
    }
    if (handled)
      continue;
    // fleet's gradient_merge_acc_step: accumulation steps, 1 = off.
    if (configs == "sharding_configs") {
      candidates.push_back("gradient_merge_acc_step");
      if (*key == "gradient_merge_acc_step") {
        if (Error err = setCanonical("gradient_merge.k_steps", kv.getKey(),
                                     kv.getValue()))
          return err;
        if (strategy.gradient_merge.k_steps > 1) {
          // Recorded as set here, so that a contradicting
          // gradient_merge.enable is reported as set twice.
          if (Error err = store("gradient_merge.enable", true,
                                kv.getKey()->getSourceRange().Start))
            return err;
        }
        continue;
      }
    }
    for (const InertKey &inert : kInertKeys) {
      if (inert.configs != configs)
        continue;
      candidates.push_back(inert.key);
      if (inert.key != *key)
        continue;
      handled = true;
      std::string text;
      if (auto *seq = dyn_cast<yaml::SequenceNode>(kv.getValue())) {
        text = seq->begin() == seq->end() ? "[]" : "non-empty";
      } else {
        auto v = scalar(kv.getValue(), what);
        if (!v)
          return v.takeError();
        text = *v;
        // Compare booleans and numbers by value, not spelling.
        if (auto b = yaml::parseBool(text))
          text = *b ? "true" : "false";
        double d;
        if (to_float(text, d))
          text = formatStrategyNumber(d);
      }
      if (text != inert.defaultValue)
        return fail(kv.getValue(), "'" + what + "' = " + text +
                                       " is not supported: " + inert.why +
                                       " (only the default " +
                                       inert.defaultValue + " is accepted)");
      break;
    }
    if (handled)
      continue;
    for (const UnimplementedConfigKey &u : kUnimplementedConfigKeys) {
      if (u.configs != configs)
        continue;
      candidates.push_back(u.key);
      if (u.key != *key)
        continue;
      handled = true;
      if (u.kind == StringRef("int")) {
        if (auto v = readValue(kv.getValue(), 1, what); !v)
          return v.takeError();
      } else {
        auto *seq = dyn_cast<yaml::SequenceNode>(kv.getValue());
        if (!seq)
          return fail(kv.getValue(), "expected a list of numbers for '" +
                                         what + "'");
        for (yaml::Node &item : *seq)
          if (auto d = readValue(&item, 2, what); !d)
            return d.takeError();
      }
      break;
    }
    if (handled)
      continue;
    auto hint = closest(*key, candidates);
    return fail(kv.getKey(), "unknown key '" + *key + "' in '" + configs +
                                 "'" +
                                 (hint ? "; did you mean '" + *hint + "'?"
                                       : ""));
  }
  return Error::success();
}

Error Reader::readGroupSharded(yaml::MappingNode *map) {
  for (yaml::KeyValueNode &kv : *map) {
    auto key = scalar(kv.getKey(), "group_sharded_parallel");
    if (!key)
      return key.takeError();
    if (*key == "level") {
      auto level = scalar(kv.getValue(), "group_sharded_parallel.level");
      if (!level)
        return level.takeError();
      int64_t stage = StringSwitch<int64_t>(*level)
                          .Case("os", 1)
                          .Case("os_g", 2)
                          .Case("p_g_os", 3)
                          .Default(0);
      if (!stage)
        return fail(kv.getValue(),
                    "group_sharded_parallel.level must be one of 'os', "
                    "'os_g', 'p_g_os', got '" + *level + "'");
      if (isSet("sharding.stage"))
        return fail(kv.getKey(), "'sharding.stage' is set twice");
      strategy.sharding.enable = true;
      strategy.sharding.stage = stage;
      groupSharded = true;
      SMLoc loc = kv.getKey()->getSourceRange().Start;
      keyLocs["sharding.stage"] = keyLocs["sharding.enable"] = loc;
      auto [line, column] = sourceMgr.getLineAndColumn(loc);
      strategy.locations["sharding.stage"] =
          strategy.locations["sharding.enable"] = KeyLocation{line, column};
      continue;
    }
    if (!is_contained(kGroupShardedKeys, *key)) {
      auto hint = closest(*key, SmallVector<StringRef>(
                                    std::begin(kGroupShardedKeys),
                                    std::end(kGroupShardedKeys)));
      return fail(kv.getKey(),
                  "unknown key '" + *key + "' in 'group_sharded_parallel'" +
                      (hint ? "; did you mean '" + *hint + "'?" : ""));
    }
    if (Error err = setCanonical(("sharding." + *key), kv.getKey(),
                                 kv.getValue()))
      return err;
  }
  if (!isSet("sharding.stage"))
    return fail(map, "group_sharded_parallel needs a level ('os', 'os_g' or "
                     "'p_g_os')");
  return Error::success();
}

Error Reader::read() {
  StringRef text = sourceMgr.getMemoryBuffer(1)->getBuffer();
  // Report syntax errors before any error about the content.
  {
    yaml::Stream check(text, sourceMgr, /*ShowColors=*/false);
    if (!check.validate() || !message.empty())
      return createStringError(inconvertibleErrorCode(), message);
  }
  yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
  yaml::document_iterator doc = stream.begin();
  if (doc == stream.end() || !doc->getRoot())
    return Error::success();
  yaml::Node *root = doc->getRoot();
  if (!message.empty())
    return createStringError(inconvertibleErrorCode(), message);
  if (isa<yaml::NullNode>(root))
    return Error::success(); // an empty file: all defaults
  if (Error err = untagged(root, "the strategy"))
    return err;
  auto *map = dyn_cast<yaml::MappingNode>(root);
  if (!map)
    return fail(root, "a strategy must be a mapping of sections");

  SmallVector<StringRef> topKeys;
  for (const SectionInfo &s : sections())
    topKeys.push_back(s.name);
  for (StringRef s : kFleetSwitches)
    topKeys.push_back(s);
  for (StringRef s : {"sharding_configs", "recompute_configs",
                      "pipeline_configs", "gradient_merge_configs",
                      "amp_configs", "lamb_configs", "lars_configs",
                      "localsgd_configs", "adaptive_localsgd_configs",
                      "dgc_configs", "group_sharded_parallel"})
    topKeys.push_back(s);

  StringMap<SMLoc> seenTop;
  for (yaml::KeyValueNode &kv : *map) {
    if (!message.empty())
      return createStringError(inconvertibleErrorCode(), message);
    auto key = scalar(kv.getKey(), "a top-level key");
    if (!key)
      return key.takeError();
    if (!seenTop.try_emplace(*key, kv.getKey()->getSourceRange().Start).second)
      return fail(kv.getKey(), "section '" + *key + "' appears twice");
    yaml::Node *value = kv.getValue();
    if (!value)
      return fail(kv.getKey(), "missing value for '" + *key + "'");
    if (Error err = untagged(value, *key))
      return err;

    // A canonical section (a mapping), or fleet's switch of the same name.
    if (const SectionInfo *section = findSection(*key)) {
      if (auto *sectionMap = dyn_cast<yaml::MappingNode>(value)) {
        if (Error err = readSection(*section, sectionMap))
          return err;
        continue;
      }
      if (!is_contained(kFleetSwitches, *key))
        return fail(value, "section '" + *key + "' must be a mapping");
    }
    if (is_contained(kFleetSwitches, *key)) {
      auto v = readValue(value, 0, *key);
      if (!v)
        return v.takeError();
      bool on = std::get<bool>(*v);
      switches[*key] = {on, kv.getKey()->getSourceRange().Start};
      // The switches of canonical sections set `enable`.
      if (findSection(*key)) {
        if (Error err = setCanonical((*key + ".enable"), kv.getKey(), value))
          return err;
      }
      continue;
    }
    StringRef k(*key);
    if (k == "group_sharded_parallel") {
      auto *m = dyn_cast<yaml::MappingNode>(value);
      if (!m)
        return fail(value, "'group_sharded_parallel' must be a mapping");
      if (Error err = readGroupSharded(m))
        return err;
      continue;
    }
    if (k.ends_with("_configs") && is_contained(topKeys, k)) {
      auto *m = dyn_cast<yaml::MappingNode>(value);
      if (!m)
        return fail(value, "'" + k + "' must be a mapping");
      if (k == "lamb_configs" || k == "lars_configs") {
        std::vector<Pending> pending;
        pendingSink = &pending;
        Error err = readFleetConfigs(k, m);
        pendingSink = nullptr;
        if (err)
          return err;
        deferredConfigs[k] = std::move(pending);
        continue;
      }
      if (Error err = readFleetConfigs(k, m))
        return err;
      continue;
    }
    auto hint = closest(k, topKeys);
    return fail(kv.getKey(), "unknown section '" + k + "'" +
                                 (hint ? "; did you mean '" + *hint + "'?"
                                       : ""));
  }
  if (!message.empty())
    return createStringError(inconvertibleErrorCode(), message);
  if (++doc != stream.end())
    return fail(doc->getRoot(), "a strategy file holds one document");

  // fleet switches of features Strata does not implement.
  for (StringRef name : {"localsgd", "adaptive_localsgd", "dgc",
                         "fp16_allreduce", "auto"}) {
    auto it = switches.find(name);
    if (it != switches.end() && it->second.first)
      return fail(it->second.second,
                  "'" + name + "' is not implemented in Strata");
  }
  // lamb / lars choose the optimizer; their configs apply only then.
  bool lamb = switches.lookup("lamb").first;
  bool lars = switches.lookup("lars").first;
  if (lamb && lars)
    return fail(switches["lars"].second,
                "'lamb' and 'lars' cannot both be enabled");
  for (StringRef name : {"lamb", "lars"}) {
    auto it = switches.find(name);
    if (it == switches.end() || !it->second.first)
      continue;
    if (isSet("optimizer.type") && strategy.optimizer.type != name)
      return fail(it->second.second,
                  "'" + name + "' contradicts optimizer.type '" +
                      strategy.optimizer.type + "'");
    strategy.optimizer.type = name.str();
    keyLocs["optimizer.type"] = it->second.second;
  }
  // lamb_configs / lars_configs apply when their optimizer is enabled;
  // otherwise they would change nothing, and are refused (Paddle drops them
  // in silence).
  for (auto &entry : deferredConfigs) {
    StringRef feature = entry.first().drop_back(strlen("_configs"));
    if (!switches.lookup(feature).first) {
      if (!entry.second.empty())
        return fail(entry.second.front().loc,
                    "'" + entry.first() + "' has no effect: " + feature +
                        " is not enabled (set " + feature +
                        ": true, or remove it)");
      continue;
    }
    for (Pending &p : entry.second)
      if (Error err = store(p.path, std::move(p.value), p.loc))
        return err;
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

Error Reader::validate(const StrategyContext &context) {
  Strategy &s = strategy;
  auto range = [&](StringRef key, int64_t value, int64_t lo,
                   int64_t hi = INT64_MAX) -> Error {
    if (value >= lo && value <= hi)
      return Error::success();
    std::string bound = hi == INT64_MAX ? ">= " + std::to_string(lo)
                                        : "in [" + std::to_string(lo) + ", " +
                                              std::to_string(hi) + "]";
    return failAt(key, "'" + key + "' must be " + bound + ", got " +
                           Twine(value));
  };
  auto positive = [&](StringRef key, double value) -> Error {
    if (value > 0.0)
      return Error::success();
    return failAt(key, "'" + key + "' must be positive, got " +
                           formatv("{0}", value).str());
  };
  auto oneOf = [&](StringRef key, StringRef value,
                   ArrayRef<StringRef> allowed) -> Error {
    if (is_contained(allowed, value))
      return Error::success();
    auto hint = closest(value, allowed);
    return failAt(key, "'" + key + "' must be one of " +
                           join(allowed, ", ") + ", got '" + value + "'" +
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
  CHECK(range("sharding.degree", s.sharding.degree, 1));
  CHECK(oneOf("sharding.partition_algor", s.sharding.partition_algor,
              {"greedy_even", "use_order"}));
  CHECK(positive("sharding.comm_buffer_size_MB",
                 s.sharding.comm_buffer_size_MB));
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
  CHECK(onlyDefault("sharding.release_gradients",
                    !s.sharding.release_gradients,
                    "the static memory plan already frees gradients after "
                    "their last use"));
  CHECK(onlyDefault("sharding.sync_buffers", !s.sharding.sync_buffers,
                    "Strata programs have no non-parameter buffers"));
  CHECK(onlyDefault("sharding.offload", !s.sharding.offload,
                    "offload moves optimizer state from device to host "
                    "memory; the CPU runtime keeps it in host memory already "
                    "and the CUDA runtime is not built yet"));
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
  CHECK(range("pipeline.pp_degree", s.pipeline.pp_degree, 1));
  CHECK(range("pipeline.vpp_degree", s.pipeline.vpp_degree, 1));
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
                              mode + " needs a micro-batch per stage; set "
                              "accumulate_steps >= " + Twine(p));
    if (vpp && m % p != 0)
      return failAt(mKey, "pipeline.accumulate_steps " + Twine(m) +
                              " is not a multiple of pp_degree " + Twine(p) +
                              ", as schedule VPP needs");
    if (!vpp && s.pipeline.vpp_degree > 1)
      return failAt("pipeline.vpp_degree",
                    "'pipeline.vpp_degree' > 1 needs schedule_mode VPP, got "
                    "'" + s.pipeline.schedule_mode + "'");
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
    s.gradient_merge.enable = s.pipeline.accumulate_steps > 1 ||
                              s.gradient_merge.enable;
    s.gradient_merge.k_steps = s.pipeline.accumulate_steps;
    s.gradient_merge.avg = true;
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
  CHECK(positive("amp.init_loss_scaling", s.amp.init_loss_scaling));
  CHECK(range("amp.incr_every_n_steps", s.amp.incr_every_n_steps, 1));
  CHECK(range("amp.decr_every_n_nan_or_inf", s.amp.decr_every_n_nan_or_inf,
              1));
  if (!(s.amp.incr_ratio > 1.0))
    return failAt("amp.incr_ratio", "'amp.incr_ratio' must be > 1, got " +
                                        formatv("{0}", s.amp.incr_ratio).str());
  if (!(s.amp.decr_ratio > 0.0 && s.amp.decr_ratio < 1.0))
    return failAt("amp.decr_ratio",
                  "'amp.decr_ratio' must be in (0, 1), got " +
                      formatv("{0}", s.amp.decr_ratio).str());
  CHECK(onlyDefault("amp.use_master_grad", !s.amp.use_master_grad,
                    "master gradients are not implemented"));

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
  CHECK(range("hybrid.dp_degree", s.hybrid.dp_degree, 0));
  CHECK(range("hybrid.mp_degree", s.hybrid.mp_degree, 1));
  CHECK(onlyDefault("hybrid.mp_degree", s.hybrid.mp_degree == 1,
                    "tensor (model) parallelism is not implemented"));

  // optimizer
  OptimizerSection &o = s.optimizer;
  CHECK(oneOf("optimizer.type", o.type,
              {"sgd", "momentum", "adam", "adamw", "lamb", "lars"}));
  CHECK(positive("optimizer.learning_rate", o.learning_rate));
  fillOptimizerDefaults(o);
  if (*o.weight_decay < 0.0)
    return failAt("optimizer.weight_decay",
                  "'optimizer.weight_decay' must be >= 0");
  if (*o.epsilon < 0.0)
    return failAt("optimizer.epsilon", "'optimizer.epsilon' must be >= 0");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0))
    return failAt("optimizer.beta1", "'optimizer.beta1' must be in [0, 1)");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return failAt("optimizer.beta2", "'optimizer.beta2' must be in [0, 1)");
  if (!(o.momentum >= 0.0 && o.momentum < 1.0))
    return failAt("optimizer.momentum",
                  "'optimizer.momentum' must be in [0, 1)");
  CHECK(positive("optimizer.lars_coeff", o.lars_coeff));
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
          {it->second, "'" + key.str() + "' has no effect: " + why.str()});
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
           "the program, and synchronises zeros for them");
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
    if (world < 1)
      return createStringError(inconvertibleErrorCode(),
                               "the world size must be >= 1, got " +
                                   Twine(world));
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
      return failAt("sharding.degree",
                    "'sharding.degree' (" + Twine(shard) +
                        ") does not divide the " + Twine(world / pp) +
                        " ranks left by pipeline.pp_degree (" + Twine(pp) +
                        ") on a world of " + Twine(world) +
                        (isSet("sharding.degree")
                             ? ""
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

//===----------------------------------------------------------------------===//
// Writers
//===----------------------------------------------------------------------===//

} // namespace

std::string strata::formatStrategyNumber(double d) {
  // The shortest text that reads back as the same double.
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    double back;
    if (to_float(buffer, back) && back == d)
      break;
  }
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";
  return text;
}

namespace {

std::string yamlString(StringRef s) {
  // Plain only when unambiguous in block and flow context alike, and not
  // readable as a boolean, a number or null.
  bool plain = !s.empty() && all_of(s, [](char c) {
    return isAlnum(c) || c == '_' || c == '.' || c == '/' || c == '-';
  });
  double d;
  if (plain && !yaml::parseBool(s) && s != "null" && !to_float(s, d))
    return s.str();
  return "\"" + yaml::escape(s) + "\"";
}

void writeYamlValue(raw_ostream &os, const Value &value, unsigned indent);

void writeYamlStringList(raw_ostream &os, const StringList &list) {
  os << "[";
  interleaveComma(list, os, [&](const std::string &s) { os << yamlString(s); });
  os << "]";
}

void writeYamlValue(raw_ostream &os, const Value &value, unsigned indent) {
  std::visit(
      [&](const auto &v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>)
          os << (v ? "true" : "false");
        else if constexpr (std::is_same_v<T, int64_t>)
          os << v;
        else if constexpr (std::is_same_v<T, double>)
          os << formatStrategyNumber(v);
        else if constexpr (std::is_same_v<T, std::string>)
          os << yamlString(v);
        else if constexpr (std::is_same_v<T, StringList>)
          writeYamlStringList(os, v);
        else if constexpr (std::is_same_v<T, IntList>) {
          os << "[";
          interleaveComma(v, os);
          os << "]";
        } else {
          if (v.empty()) {
            os << "[]";
            return;
          }
          for (const RefinedOpsPattern &p : v) {
            os << "\n";
            os.indent(indent) << "- main_ops: ";
            writeYamlStringList(os, p.main_ops);
            os << "\n";
            os.indent(indent + 2) << "num: " << p.num << "\n";
            os.indent(indent + 2) << "pre_ops: ";
            writeYamlStringList(os, p.pre_ops);
            os << "\n";
            os.indent(indent + 2) << "suf_ops: ";
            writeYamlStringList(os, p.suf_ops);
          }
        }
      },
      value);
}

json::Value toJsonValue(const Value &value) {
  return std::visit(
      [](const auto &v) -> json::Value {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, StringList> ||
                      std::is_same_v<T, IntList>) {
          json::Array a;
          for (const auto &item : v)
            a.push_back(item);
          return a;
        } else if constexpr (std::is_same_v<T, PatternList>) {
          json::Array a;
          for (const RefinedOpsPattern &p : v)
            a.push_back(json::Object{{"main_ops", p.main_ops},
                                     {"num", p.num},
                                     {"pre_ops", p.pre_ops},
                                     {"suf_ops", p.suf_ops}});
          return a;
        } else {
          return v;
        }
      },
      value);
}

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

bool Strategy::operator==(const Strategy &o) const {
  return sharding == o.sharding && fused_passes == o.fused_passes &&
         gradient_merge == o.gradient_merge && pipeline == o.pipeline &&
         recompute == o.recompute && amp == o.amp &&
         dp_optimization == o.dp_optimization && hybrid == o.hybrid &&
         optimizer == o.optimizer;
}

std::string Strategy::where(StringRef key) const {
  auto it = locations.find(key);
  if (it == locations.end())
    return "";
  return formatv("{0}:{1}:{2}", file, it->second.line, it->second.column)
      .str();
}

Expected<Strategy> strata::parseStrategy(StringRef text, StringRef bufferName,
                                         const StrategyContext &context) {
  // A strategy is a few sections of scalars and short lists: bound its size
  // and nesting before any parser recurses into it.
  constexpr size_t kMaxBytes = 1 << 20;
  constexpr int64_t kMaxNesting = 16;
  if (text.size() > kMaxBytes)
    return createStringError(inconvertibleErrorCode(),
                             bufferName + ": error: " + Twine(text.size()) +
                                 " bytes is too large for a strategy file "
                                 "(at most 1 MiB)\n");
  if (int64_t depth = maxBracketNesting(text, /*yaml=*/true, kMaxNesting);
      depth > kMaxNesting)
    return createStringError(inconvertibleErrorCode(),
                             bufferName +
                                 ": error: brackets nested more than " +
                                 Twine(kMaxNesting) +
                                 " deep: not a strategy file\n");
  // JSON files get llvm::json's stricter syntax check first (YAML would
  // accept, e.g., trailing commas or unquoted keys).
  if (text.ltrim().starts_with("{")) {
    Expected<json::Value> parsed = json::parse(text);
    if (!parsed) {
      std::string msg = toString(parsed.takeError());
      return createStringError(inconvertibleErrorCode(),
                               bufferName + ": error: invalid JSON: " + msg +
                                   "\n");
    }
  }
  Strategy strategy;
  strategy.file = bufferName.str();
  Reader reader(text, bufferName, strategy);
  if (Error err = reader.read())
    return std::move(err);
  if (Error err = reader.validate(context))
    return std::move(err);
  return strategy;
}

Expected<Strategy> strata::loadStrategy(StringRef path,
                                        const StrategyContext &context) {
  // Not a device or FIFO, which would be read without end.
  if (sys::fs::exists(path) && !sys::fs::is_regular_file(path))
    return createStringError(inconvertibleErrorCode(),
                             path + ": error: cannot read the strategy "
                                    "file: not a regular file\n");
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return createStringError(buffer.getError(),
                             path + ": error: cannot read the strategy "
                                    "file: " +
                                 buffer.getError().message() + "\n");
  return parseStrategy((*buffer)->getBuffer(), path, context);
}

std::string strata::toYaml(const Strategy &strategy) {
  std::string out;
  raw_string_ostream os(out);
  for (const SectionInfo &section : sections()) {
    os << section.name << ":\n";
    section.forEach(strategy, [&](StringRef key, const Value &value) {
      auto *patterns = std::get_if<PatternList>(&value);
      os << "  " << key << ((patterns && !patterns->empty()) ? ":" : ": ");
      writeYamlValue(os, value, 4);
      os << "\n";
    });
  }
  return out;
}

std::string strata::toJson(const Strategy &strategy) {
  std::string out;
  raw_string_ostream os(out);
  // Streamed rather than built as a json::Object, which would not keep the
  // model's order of sections and keys.
  json::OStream j(os, 2);
  j.object([&] {
    for (const SectionInfo &section : sections()) {
      j.attributeObject(section.name, [&] {
        section.forEach(strategy, [&](StringRef key, const Value &value) {
          j.attribute(key, toJsonValue(value));
        });
      });
    }
  });
  os << "\n";
  return out;
}

Error strata::saveStrategy(const Strategy &strategy, StringRef path) {
  std::string text = path.ends_with(".json") ? toJson(strategy)
                                             : toYaml(strategy);
  SmallString<128> temp;
  int fd;
  if (std::error_code ec = sys::fs::createUniqueFile(path + ".tmp-%%%%%%",
                                                     fd, temp))
    return createStringError(ec, "cannot write '" + path + "': " +
                                     ec.message());
  {
    raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << text;
    os.close();
    if (os.has_error()) {
      sys::fs::remove(temp);
      return createStringError(os.error(), "cannot write '" + path + "': " +
                                               os.error().message());
    }
  }
  if (std::error_code ec = sys::fs::rename(temp, path)) {
    sys::fs::remove(temp);
    return createStringError(ec, "cannot write '" + path + "': " +
                                     ec.message());
  }
  return Error::success();
}

int64_t strata::dataParallelDegree(const Strategy &strategy,
                                   int64_t worldSize) {
  int64_t pp = strategy.pipeline.enable ? strategy.pipeline.pp_degree : 1;
  int64_t shard = strategy.sharding.enable ? strategy.sharding.degree : 1;
  return worldSize / (pp * shard);
}

double strata::pipelineBubble(StringRef schedule, int64_t pp, int64_t m,
                              int64_t v) {
  double bubble = double(pp - 1);
  if (schedule == "VPP")
    bubble /= double(std::max<int64_t>(v, 1));
  else if (schedule == "ZBH1")
    bubble /= 3.0;
  return bubble / (double(m) + bubble);
}
