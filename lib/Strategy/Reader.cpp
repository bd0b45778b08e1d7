//===- Reader.cpp - Reading the keys of a strategy file
//--------------------===//
//
// Canonical keys (`sharding: {degree: 2}`), fleet.DistributedStrategy's
// spellings (`sharding: true` + `sharding_configs`), group_sharded_parallel
// and DataParallel's names, each stored once into the strategy model with
// the place it was set.
//
//===----------------------------------------------------------------------===//

#include "Reader.h"
#include "FleetSpellings.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/YAMLTraits.h"

#include <cmath>

using namespace llvm;

namespace strata::detail {

/// A YAML tag (`!!str 2`, `!custom x`) would change how a value reads in
/// other YAML readers and is ignored by this one: refused.
Error Reader::untagged(yaml::Node *node, StringRef what) {
  if (Error err = notAlias(node, nullptr))
    return err;
  if (!node || node->getRawTag().empty())
    return Error::success();
  return fail(node, "YAML tag '" + node->getRawTag() + "' on '" + what +
                        "' is not supported: write the plain value");
}

/// A YAML alias (`*name`) stands for another value of the file: refused,
/// at `key` when one holds it (LLVM's YAML parser places an alias after its
/// text), rather than read as the wrong kind of value.
Error Reader::notAlias(yaml::Node *node, yaml::Node *key) {
  if (!isa_and_nonnull<yaml::AliasNode>(node))
    return Error::success();
  return fail(key ? key : node, "YAML aliases ('*name') are not supported in "
                                "strategy files: write the value out");
}

Expected<std::string> Reader::scalar(yaml::Node *node, StringRef what) {
  if (Error err = untagged(node, what))
    return std::move(err);
  auto *s = dyn_cast_or_null<yaml::ScalarNode>(node);
  if (!s)
    return fail(node, "expected a single value for '" + what + "'");
  SmallString<32> storage;
  StringRef v = s->getValue(storage);
  // (Quoted, "null" and "~" are strings: --print-strategy quotes them.)
  StringRef raw = s->getRawValue();
  bool quoted = raw.starts_with("\"") || raw.starts_with("'");
  if (v.empty() || (!quoted && (v == "~" || v == "null")))
    return fail(node, "missing value for '" + what + "'");
  // Names and values are printable UTF-8 (what --print-strategy writes
  // reads back the same).
  if (!json::isUTF8(v))
    return fail(node, "'" + what + "' is not valid UTF-8");
  for (char c : v)
    if ((unsigned char)c < 0x20 || c == 0x7f)
      return fail(node,
                  "'" + what + "' contains the control character " +
                      formatv("0x{0:x-2}", unsigned((unsigned char)c)).str());
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
                         "suf_ops} in '" +
                             what + "'");
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

/// Whether `node` is a quoted scalar: a string, in YAML as in JSON.
static bool isQuoted(yaml::Node *node) {
  auto *s = dyn_cast_or_null<yaml::ScalarNode>(node);
  if (!s)
    return false;
  StringRef raw = s->getRawValue();
  return raw.starts_with("\"") || raw.starts_with("'");
}

Expected<Value> Reader::readValue(yaml::Node *node, size_t kind,
                                  StringRef what) {
  // A boolean or a number written as a string ("0.1", 'true') is refused:
  // YAML and JSON readers (Paddle's among them) take it for a string.
  if (kind <= 3 && isQuoted(node)) {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    return fail(node, "expected " +
                          StringRef(kind == 0   ? "true or false"
                                    : kind == 1 ? "an integer"
                                                : "a number") +
                          " for '" + what + "', got the string \"" + *v +
                          "\": drop the quotes");
  }
  // Kinds follow FieldPtr: bool, int, double, optional double, string,
  // string list, int list, pattern list.
  switch (kind) {
  case 0: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    if (std::optional<bool> b = yaml::parseBool(*v))
      return Value(*b);
    return fail(node,
                "expected true or false for '" + what + "', got '" + *v + "'");
  }
  case 1: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    int64_t i;
    if (StringRef(*v).getAsInteger(10, i))
      return fail(node,
                  "expected an integer for '" + what + "', got '" + *v + "'");
    return Value(i);
  }
  case 2:
  case 3: {
    auto v = scalar(node, what);
    if (!v)
      return v.takeError();
    // Decimal, as YAML and JSON write numbers (strtod would also take
    // hexadecimal, which YAML reads as an integer and JSON refuses).
    double d;
    if (StringRef(*v).contains_insensitive('x') || !to_float(*v, d))
      return fail(node,
                  "expected a number for '" + what + "', got '" + *v + "'");
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
    // At the later of the two in the file (a fleet spelling is stored after
    // the sections, wherever it stands).
    SMLoc first = previous->second, second = loc;
    if (second.getPointer() < first.getPointer())
      std::swap(first, second);
    unsigned line = sourceMgr.getLineAndColumn(first).first;
    return fail(second, "'" + path + "' is set twice (first on line " +
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
      return fail(kv.getKey(),
                  "unknown key '" + *key + "' in section '" + section.name +
                      "'" + (hint ? "; did you mean '" + *hint + "'?" : ""));
    }
    if (Error err = notAlias(kv.getValue(), kv.getKey()))
      return err;
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
    // fleet's use_pure_fp16 is amp level o2 (false leaves the level be).
    if (configs == "amp_configs") {
      candidates.push_back("use_pure_fp16");
      if (*key == "use_pure_fp16") {
        auto v = readValue(kv.getValue(), 0, what);
        if (!v)
          return v.takeError();
        if (std::get<bool>(*v))
          if (Error err = store("amp.level", std::string("o2"),
                                kv.getKey()->getSourceRange().Start))
            return err;
        continue;
      }
    }
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
        // A boolean or number default takes a value read as readValue
        // reads one (not a string, not hexadecimal), compared by value,
        // not spelling.
        double number;
        StringRef defaultValue = inert.defaultValue;
        bool isBool = yaml::parseBool(defaultValue).has_value();
        bool isNumber = !isBool && to_float(defaultValue, number);
        auto v = readValue(kv.getValue(), isBool ? 0 : isNumber ? 2 : 4, what);
        if (!v)
          return v.takeError();
        text = isBool     ? (std::get<bool>(*v) ? "true" : "false")
               : isNumber ? formatStrategyNumber(std::get<double>(*v))
                          : std::get<std::string>(*v);
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
      std::string text;
      if (u.kind == StringRef("int")) {
        auto v = readValue(kv.getValue(), 1, what);
        if (!v)
          return v.takeError();
        text = std::to_string(std::get<int64_t>(*v));
      } else {
        auto *seq = dyn_cast<yaml::SequenceNode>(kv.getValue());
        if (!seq)
          return fail(kv.getValue(),
                      "expected a list of numbers for '" + what + "'");
        for (yaml::Node &item : *seq) {
          auto d = readValue(&item, 2, what);
          if (!d)
            return d.takeError();
          text += (text.empty() ? "" : ", ") +
                  formatStrategyNumber(std::get<double>(*d));
        }
        text = "[" + text + "]";
      }
      if (text != u.defaultValue && !inertConfig) {
        StringRef feature = configs.drop_back(strlen("_configs"));
        inertConfig = {kv.getValue(),
                       "'" + what + "' = " + text +
                           " has no effect: " + feature.str() +
                           " is not implemented in Strata (only Paddle's "
                           "default " +
                           u.defaultValue.str() + " is accepted)"};
      }
      break;
    }
    if (handled)
      continue;
    auto hint = closest(*key, candidates);
    return fail(kv.getKey(),
                "unknown key '" + *key + "' in '" + configs + "'" +
                    (hint ? "; did you mean '" + *hint + "'?" : ""));
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
                    "'os_g', 'p_g_os', got '" +
                        *level + "'");
      if (isSet("sharding.stage"))
        return fail(kv.getKey(), "'sharding.stage' is set twice");
      // The level turns sharding on, as 'sharding.enable' would.
      if (isSet("sharding.enable"))
        return fail(kv.getKey(), "'sharding.enable' is set twice");
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
      auto hint =
          closest(*key, SmallVector<StringRef>(std::begin(kGroupShardedKeys),
                                               std::end(kGroupShardedKeys)));
      return fail(kv.getKey(),
                  "unknown key '" + *key + "' in 'group_sharded_parallel'" +
                      (hint ? "; did you mean '" + *hint + "'?" : ""));
    }
    if (Error err =
            setCanonical(("sharding." + *key), kv.getKey(), kv.getValue()))
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
      return reported();
  }
  yaml::Stream stream(text, sourceMgr, /*ShowColors=*/false);
  yaml::document_iterator doc = stream.begin();
  if (doc == stream.end() || !doc->getRoot())
    return Error::success();
  yaml::Node *root = doc->getRoot();
  if (!message.empty())
    return reported();
  if (isa<yaml::NullNode>(root)) {
    // An empty file: all defaults; but not an empty document before the
    // one that holds the strategy.
    if (++doc != stream.end())
      return fail(doc->getRoot(),
                  "a strategy file holds one document (the first one here "
                  "is empty)");
    return Error::success();
  }
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
  for (StringRef s :
       {"sharding_configs", "recompute_configs", "pipeline_configs",
        "gradient_merge_configs", "amp_configs", "lamb_configs", "lars_configs",
        "localsgd_configs", "adaptive_localsgd_configs", "dgc_configs",
        "group_sharded_parallel", "fuse_grad_size_in_MB"})
    topKeys.push_back(s);

  StringMap<SMLoc> seenTop;
  for (yaml::KeyValueNode &kv : *map) {
    if (!message.empty())
      return reported();
    auto key = scalar(kv.getKey(), "a top-level key");
    if (!key)
      return key.takeError();
    if (!seenTop.try_emplace(*key, kv.getKey()->getSourceRange().Start).second)
      return fail(kv.getKey(), "section '" + *key + "' appears twice");
    yaml::Node *value = kv.getValue();
    if (!value)
      return fail(kv.getKey(), "missing value for '" + *key + "'");
    if (Error err = notAlias(value, kv.getKey()))
      return err;
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
    // fleet's gradient bucket size (DistributedStrategy's attribute).
    if (k == "fuse_grad_size_in_MB") {
      if (Error err = setCanonical("dp_optimization.comm_buffer_size",
                                   kv.getKey(), value))
        return err;
      continue;
    }
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
    return fail(kv.getKey(),
                "unknown section '" + k + "'" +
                    (hint ? "; did you mean '" + *hint + "'?" : ""));
  }
  if (!message.empty())
    return reported();
  if (++doc != stream.end())
    return fail(doc->getRoot(), "a strategy file holds one document");

  // fleet switches of features Strata does not implement.
  for (StringRef name : {"localsgd", "adaptive_localsgd", "dgc", "auto"}) {
    auto it = switches.find(name);
    if (it != switches.end() && it->second.first)
      return fail(it->second.second,
                  "'" + name + "' is not implemented in Strata");
  }
  if (inertConfig)
    return fail(inertConfig->first, inertConfig->second);
  // fleet's fp16_allreduce is a setting of data parallelism.
  if (auto it = switches.find("fp16_allreduce");
      it != switches.end() && it->second.first)
    if (Error err =
            store("dp_optimization.fp16_allreduce", true, it->second.second))
      return err;
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
      return fail(it->second.second, "'" + name +
                                         "' contradicts optimizer.type '" +
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

} // namespace strata::detail
