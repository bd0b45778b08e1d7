//===- Reader.h - Reading a strategy file ------------------------*- C++
//-*-===//
//
// Internal to lib/Strategy. A strategy file is read with LLVM's YAML parser
// (JSON files are checked by llvm::json first, then walked the same way,
// since JSON is YAML), so every key keeps its line and column for
// diagnostics. Reader.cpp reads the keys (canonical, fleet and
// group_sharded_parallel spellings); Validate.cpp checks the rules across
// keys.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_LIB_STRATEGY_READER_H
#define STRATA_LIB_STRATEGY_READER_H

#include "Fields.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace strata::detail {

using llvm::Error;
using llvm::Expected;
using llvm::SMLoc;
using llvm::SourceMgr;
using llvm::StringMap;
using llvm::StringRef;
using llvm::Twine;
namespace yaml = llvm::yaml;

class Reader {
public:
  Reader(StringRef text, StringRef bufferName, Strategy &strategy)
      : strategy(strategy), bufferName(bufferName.str()) {
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), SMLoc());
    sourceMgr.setDiagHandler(
        [](const llvm::SMDiagnostic &diag, void *context) {
          auto *self = static_cast<Reader *>(context);
          if (self->message.empty()) {
            llvm::raw_string_ostream os(self->message);
            diag.print(nullptr, os, /*ShowColors=*/false);
            self->messageFile = diag.getFilename().str();
            // (Line 0: a diagnostic without a place in the file.)
            self->messageLine = std::max(diag.getLineNo(), 0);
            self->messageColumn = std::max(diag.getColumnNo() + 1, 1);
            self->messageText = diag.getMessage().str();
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
    return reported();
  }
  /// The first diagnostic the source manager printed (the YAML parser's or
  /// fail's) as an error.
  Error reported() const {
    return llvm::make_error<StrategyError>(messageFile, messageLine,
                                           messageColumn, messageText, message);
  }
  Error fail(yaml::Node *node, const Twine &msg) {
    // (A document that does not parse has no root node.)
    if (!node) {
      if (!message.empty())
        return reported();
      return fileError(bufferName, msg);
    }
    return fail(node->getSourceRange().Start, msg);
  }
  /// An error about a key: at its location when the file set it.
  Error failAt(StringRef key, const Twine &msg) {
    auto it = keyLocs.find(key);
    if (it != keyLocs.end())
      return fail(it->second, msg);
    return fileError(bufferName, msg);
  }
  bool isSet(StringRef key) const { return keyLocs.count(key); }

  // Scalars and lists.
  Expected<std::string> scalar(yaml::Node *node, StringRef what);
  Error untagged(yaml::Node *node, StringRef what);
  Error notAlias(yaml::Node *node, yaml::Node *key);
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
  /// The same diagnostic's place and text alone.
  std::string messageFile, messageText;
  unsigned messageLine = 0, messageColumn = 0;
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
  /// The first config of an unimplemented feature set to other than
  /// Paddle's default: refused once the feature's own switch is known to be
  /// off (on, the switch is the error).
  std::optional<std::pair<yaml::Node *, std::string>> inertConfig;

  Error store(StringRef path, Value value, SMLoc loc);
};

} // namespace strata::detail

#endif // STRATA_LIB_STRATEGY_READER_H
