//===- Strategy.cpp - The public API of strategies
//---------------------------===//
//
// Where the pieces are: Fields.cpp (the sections as tables of fields),
// FleetSpellings.h (Paddle's other names for the keys), Reader.cpp (reading
// a file into the model, with each key's place), Validate.cpp (the rules
// across keys), Writers.cpp (YAML and JSON). This file holds the entry
// points and the figures derived from a strategy.
//
//===----------------------------------------------------------------------===//

#include "strata/Strategy/Strategy.h"
#include "Reader.h"
#include "strata/Support/Nesting.h"

#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;
using namespace strata;
using namespace strata::detail;

char StrategyError::ID = 0;

StrategyError::StrategyError(std::string file, unsigned line, unsigned column,
                             std::string message, std::string rendered)
    : source(std::move(file)), lineNo(line), columnNo(column),
      what(std::move(message)), rendered(std::move(rendered)) {}

std::string StrategyError::location() const {
  if (lineNo == 0)
    return source;
  return formatv("{0}:{1}:{2}", source, lineNo, columnNo).str();
}

void StrategyError::log(raw_ostream &os) const {
  if (!rendered.empty())
    os << rendered;
  else
    os << location() << ": error: " << what << "\n";
}

Error strata::fileError(StringRef file, const Twine &message) {
  return make_error<StrategyError>(file.str(), 0, 0, message.str());
}

bool Strategy::operator==(const Strategy &o) const {
  return sharding == o.sharding && fused_passes == o.fused_passes &&
         gradient_merge == o.gradient_merge && pipeline == o.pipeline &&
         recompute == o.recompute && amp == o.amp &&
         dp_optimization == o.dp_optimization && hybrid == o.hybrid &&
         optimizer == o.optimizer;
}

std::optional<KeyLocation> Strategy::locate(StringRef key) const {
  auto it = locations.find(key);
  if (key.empty() || it == locations.end())
    return std::nullopt;
  return it->second;
}

Error Strategy::errorAt(StringRef key, const Twine &message) const {
  std::optional<KeyLocation> at = locate(key);
  if (!at)
    return fileError(file, message);
  return make_error<StrategyError>(file, at->line, at->column, message.str());
}

std::string Strategy::where(StringRef key) const {
  std::optional<KeyLocation> at = locate(key);
  if (!at)
    return "";
  return formatv("{0}:{1}:{2}", file, at->line, at->column).str();
}

Expected<Strategy> strata::parseStrategy(StringRef text, StringRef bufferName,
                                         const StrategyContext &context) {
  // A strategy is a few sections of scalars and short lists: bound its size
  // and nesting before any parser recurses into it.
  constexpr size_t kMaxBytes = 1 << 20;
  constexpr int64_t kMaxNesting = 16;
  if (text.size() > kMaxBytes)
    return fileError(bufferName, Twine(text.size()) +
                                     " bytes is too large for a strategy "
                                     "file (at most 1 MiB)");
  if (int64_t depth = maxBracketNesting(text, NestingSyntax::Yaml, kMaxNesting);
      depth > kMaxNesting)
    return fileError(bufferName, "brackets nested more than " +
                                     Twine(kMaxNesting) +
                                     " deep: not a strategy file");
  // Text in UTF-8 without NUL (the YAML parser reads other bytes as
  // the end of a scalar and reports an empty one).
  {
    const auto *begin = reinterpret_cast<const UTF8 *>(text.data());
    const UTF8 *at = begin;
    const auto *end = begin + text.size();
    bool legal = isLegalUTF8String(&at, end);
    size_t nul = text.find('\0');
    if (!legal || nul != StringRef::npos) {
      size_t offset = legal ? nul : std::min<size_t>(at - begin, nul);
      StringRef before = text.take_front(offset);
      size_t line = before.count('\n') + 1;
      size_t column = offset - (before.rfind('\n') + 1) + 1;
      return make_error<StrategyError>(
          bufferName.str(), line, column,
          text[offset] == '\0'
              ? std::string("a NUL byte: a strategy file is text")
              : formatv("byte {0:x2} is not UTF-8: a strategy file is "
                        "UTF-8 text",
                        uint8_t(text[offset]))
                    .str());
    }
  }
  // JSON files get llvm::json's stricter syntax check first (YAML would
  // accept, e.g., trailing commas or unquoted keys).
  // (After a UTF-8 byte-order mark, which editors may write.)
  // A file named .json is JSON; one named .yaml or .yml is YAML, where a
  // leading '{' opens a flow mapping; otherwise a leading '{' means JSON.
  StringRef body = text;
  body.consume_front("\xEF\xBB\xBF");
  StringRef extension = sys::path::extension(bufferName);
  bool json =
      extension.equals_insensitive(".json") ||
      (!extension.equals_insensitive(".yaml") &&
       !extension.equals_insensitive(".yml") && body.ltrim().starts_with("{"));
  if (json) {
    Expected<json::Value> parsed = json::parse(body);
    if (!parsed) {
      std::string msg = toString(parsed.takeError());
      return fileError(bufferName, "invalid JSON: " + msg);
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
    return fileError(path, "cannot read the strategy file: not a regular file");
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return fileError(path, "cannot read the strategy file: " +
                               buffer.getError().message());
  return parseStrategy((*buffer)->getBuffer(), path, context);
}

Expected<StrategyContext> strata::jobContext(int64_t worldSize, int64_t rank) {
  if (worldSize < 0 || worldSize > kMaxRanks)
    return createStringError(inconvertibleErrorCode(),
                             "world size " + Twine(worldSize) +
                                 " is not in [0, " + Twine(kMaxRanks) +
                                 "] (0: unknown)");
  int64_t ranks = std::max<int64_t>(worldSize, 1);
  if (rank < 0 || rank >= ranks)
    return createStringError(inconvertibleErrorCode(),
                             "rank " + Twine(rank) +
                                 " is not a rank of a job of " + Twine(ranks) +
                                 (ranks == 1 ? " rank" : " ranks"));
  StrategyContext context;
  if (worldSize > 0)
    context.worldSize = worldSize;
  return context;
}

int64_t strata::dataParallelDegree(const Strategy &strategy,
                                   int64_t worldSize) {
  int64_t pp = strategy.pipeline.enable ? strategy.pipeline.pp_degree : 1;
  int64_t shard = strategy.sharding.enable ? strategy.sharding.degree : 1;
  return worldSize / (pp * shard);
}
