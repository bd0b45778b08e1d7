//===- Train.cpp - Weights, data and checkpoints of a training run --------===//

#include "strata/Train/Train.h"
#include "strata/Dialect/Program.h"
#include "strata/Dialect/Strata.h"
#include "strata/Reference/InitialValues.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Support/Nesting.h"
#include "strata/Support/ReplaceFile.h"

#include "../../runtime/common/StrataRandom.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace mlir;
using namespace strata;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace {

Error makeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

// Stream keys of the RNG, one per use, so that draws never overlap.
constexpr int64_t kDataStream = 0x44415441;  // "DATA"
constexpr int64_t kCenterStream = 0x43454E54; // "CENT"
constexpr int64_t kNoiseStream = 0x4E4F4953;  // "NOIS"
constexpr int64_t kTeacherStream = 0x54454143; // "TEAC"
constexpr int64_t kTargetStream = 0x54415247;  // "TARG"

std::vector<int64_t> shapeOf(RankedTensorType t) {
  return std::vector<int64_t>(t.getShape().begin(), t.getShape().end());
}

size_t dtypeSize(StringRef dtype) {
  return dtype == "F64" || dtype == "I64" ? 8 : 4;
}

bool isMaster(Operation *op) {
  auto state = dyn_cast<StateOp>(op);
  return state && state.getInit().getKind() == InitKind::Master;
}

/// One tensor of a checkpoint: a strata.param or strata.state by name, its
/// type in the file (bf16 and f16 widened to f32) and the symbol whose value
/// it holds: a low-precision parameter with a master weight is stored as
/// its master (which has no entry of its own), so that checkpoints do not
/// depend on the precision a run trained in.
struct Entry {
  std::string name;
  RankedTensorType type;
  std::string source;
};

std::vector<Entry> checkpointEntries(ModuleOp module) {
  llvm::StringMap<std::string> masterOf;
  for (StateOp s : module.getOps<StateOp>())
    if (isMaster(s))
      masterOf[s.getOfAttr().getValue()] = s.getSymName().str();
  std::vector<Entry> result;
  for (Operation &op : *module.getBody()) {
    if (!isa<ParamOp, StateOp>(op) || isMaster(&op))
      continue;
    std::string name =
        op.getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()).str();
    auto type =
        cast<RankedTensorType>(cast<TypeAttr>(op.getAttr("type")).getValue());
    if (auto f = dyn_cast<FloatType>(type.getElementType());
        f && f.getWidth() < 32)
      type = type.clone(Float32Type::get(module.getContext()));
    std::string source = masterOf.lookup(name);
    result.push_back({name, type, source.empty() ? name : source});
  }
  return result;
}

} // namespace

Expected<std::string> strata::dtypeOf(Type elementType) {
  if (elementType.isF32())
    return std::string("F32");
  if (elementType.isF64())
    return std::string("F64");
  if (elementType.isInteger(64))
    return std::string("I64");
  if (elementType.isInteger(32))
    return std::string("I32");
  std::string s;
  llvm::raw_string_ostream os(s);
  os << elementType;
  return makeError("element type " + s + " has no checkpoint format yet");
}

//===----------------------------------------------------------------------===//
// safetensors
//===----------------------------------------------------------------------===//

Error strata::writeSafetensors(StringRef path, ArrayRef<NamedTensor> tensors,
                               const std::map<std::string, std::string> &metadata) {
  llvm::json::Object header;
  uint64_t offset = 0;
  for (const NamedTensor &t : tensors) {
    uint64_t bytes = t.tensor.numElements() * dtypeSize(t.dtype);
    llvm::json::Array shape;
    for (int64_t d : t.tensor.shape)
      shape.push_back(d);
    header[t.name] = llvm::json::Object{
        {"dtype", t.dtype},
        {"shape", std::move(shape)},
        {"data_offsets", llvm::json::Array{offset, offset + bytes}}};
    offset += bytes;
  }
  llvm::json::Object meta{{"format", "pt"}, {"producer", "strata"}};
  for (auto &[key, value] : metadata)
    meta[key] = value;
  header["__metadata__"] = std::move(meta);
  std::string json;
  llvm::raw_string_ostream(json) << llvm::json::Value(std::move(header));
  while (json.size() % 8)
    json += ' ';

  return replaceFile(path, [&](llvm::raw_ostream &os) {
    char size[8];
    llvm::support::endian::write64le(size, json.size());
    os.write(size, 8);
    os << json;
    for (const NamedTensor &t : tensors) {
      for (double v : t.tensor.data) {
        char buf[8];
        if (t.dtype == "F32") {
          float f = float(v);
          std::memcpy(buf, &f, 4);
        } else if (t.dtype == "F64") {
          std::memcpy(buf, &v, 8);
        } else if (t.dtype == "I32") {
          int32_t i = int32_t(v);
          std::memcpy(buf, &i, 4);
        } else {
          int64_t i = int64_t(v);
          std::memcpy(buf, &i, 8);
        }
        os.write(buf, dtypeSize(t.dtype));
      }
    }
  });
}

Expected<Safetensors> strata::readSafetensors(StringRef path) {
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path))
    return makeError("cannot read '" + path + "': not a regular file");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buffer)
    return makeError("cannot read '" + path + "': " +
                   buffer.getError().message());
  return parseSafetensors((*buffer)->getBuffer(), path);
}

/// The first key that appears twice in one object of the JSON text `text`
/// (as written, escapes and all), or "": llvm::json keeps the last of
/// them, where a safetensors header naming a tensor or a field twice is
/// damaged.
static std::string duplicateJsonKey(StringRef text) {
  std::vector<llvm::StringSet<>> objects; // one per open '{'
  std::vector<char> open;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t start = ++i;
      while (i < text.size() && text[i] != '"')
        i += text[i] == '\\' ? 2 : 1;
      StringRef string = text.slice(start, std::min(i, text.size()));
      size_t next = i + 1;
      while (next < text.size() && std::isspace(uint8_t(text[next])))
        ++next;
      // (A key: directly in an object, followed by ':'.)
      if (!open.empty() && open.back() == '{' && next < text.size() &&
          text[next] == ':' && !objects.back().insert(string).second)
        return string.str();
      continue;
    }
    if (c == '{' || c == '[') {
      open.push_back(c);
      if (c == '{')
        objects.emplace_back();
    } else if ((c == '}' || c == ']') && !open.empty()) {
      if (open.back() == '{')
        objects.pop_back();
      open.pop_back();
    }
  }
  return "";
}

Expected<Safetensors> strata::parseSafetensors(StringRef data,
                                               StringRef path) {
  auto bad = [&](const llvm::Twine &why) {
    return makeError("'" + path + "' is not a valid safetensors file: " + why);
  };
  if (data.size() < 8)
    return bad("shorter than its 8-byte header size");
  uint64_t headerSize = llvm::support::endian::read64le(data.data());
  if (headerSize > data.size() - 8)
    return bad("header size " + llvm::Twine(headerSize) + " exceeds the file");
  // The safetensors format caps the header at 100 MB; a header is an object
  // of tensor entries, two levels deep (bounded before json::parse recurses).
  if (headerSize > 100'000'000)
    return bad("header size " + llvm::Twine(headerSize) +
               " exceeds the format's 100 MB");
  if (strata::maxBracketNesting(data.substr(8, headerSize), NestingSyntax::Json,
                                8) > 8)
    return bad("header nested more than 8 levels deep");
  auto header = llvm::json::parse(data.substr(8, headerSize));
  if (!header)
    return bad("header: " + llvm::toString(header.takeError()));
  if (std::string key = duplicateJsonKey(data.substr(8, headerSize));
      !key.empty())
    return bad("header: the key \"" + key + "\" appears twice in one object");
  auto *object = header->getAsObject();
  if (!object)
    return bad("header is not a JSON object");
  StringRef payload = data.substr(8 + headerSize);
  // Byte ranges of the entries, to refuse overlapping ones.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  Safetensors file;
  std::vector<NamedTensor> &result = file.tensors;
  for (auto &entry : *object) {
    StringRef name = entry.first;
    if (name == "__metadata__") {
      // The format's metadata map strings to strings.
      auto *meta = entry.second.getAsObject();
      if (!meta)
        return bad("__metadata__ is not an object");
      for (auto &m : *meta) {
        auto value = m.second.getAsString();
        if (!value)
          return bad("metadata '" + m.first.str() + "' is not a string");
        file.metadata[m.first.str()] = value->str();
      }
      continue;
    }
    auto *info = entry.second.getAsObject();
    if (!info)
      return bad("entry '" + name + "' is not an object");
    auto dtype = info->getString("dtype");
    auto *shape = info->getArray("shape");
    auto *offsets = info->getArray("data_offsets");
    if (!dtype || !shape || !offsets || offsets->size() != 2)
      return bad("entry '" + name + "' lacks dtype, shape or data_offsets");
    if (*dtype != "F32" && *dtype != "F64" && *dtype != "I32" &&
        *dtype != "I64")
      return bad("entry '" + name + "' has unsupported dtype " + *dtype);
    NamedTensor t{name.str(), dtype->str(), Tensor()};
    size_t elem = dtypeSize(*dtype);
    // The element count, bounded by the payload (no overflow on the way).
    uint64_t count = 1;
    for (const llvm::json::Value &d : *shape) {
      auto v = d.getAsInteger();
      if (!v || *v < 0)
        return bad("entry '" + name + "' has an invalid shape");
      t.tensor.shape.push_back(*v);
      if (*v != 0 && count > payload.size() / elem / uint64_t(*v))
        return bad("entry '" + name + "' has a shape larger than the file");
      count *= uint64_t(*v);
    }
    auto begin = (*offsets)[0].getAsUINT64(), end = (*offsets)[1].getAsUINT64();
    // (The offsets agree with the shape, the data lies past the file's
    // end: the file was cut short.)
    if (begin && end && *end >= *begin && *end - *begin == count * elem &&
        *end > payload.size())
      return bad("the file is cut short: entry '" + name + "' ends at byte " +
                 Twine(*end) + " of the data, which has " +
                 Twine(payload.size()));
    if (!begin || !end || *end < *begin || *end > payload.size() ||
        *end - *begin != count * elem)
      return bad("entry '" + name + "' has data offsets that do not match "
                 "its shape");
    if (count > 0)
      ranges.push_back({*begin, *end});
    t.tensor.data.resize(count);
    const char *p = payload.data() + *begin;
    for (uint64_t i = 0; i < count; ++i, p += elem) {
      if (*dtype == "F32") {
        float f;
        std::memcpy(&f, p, 4);
        t.tensor.data[i] = f;
      } else if (*dtype == "F64") {
        std::memcpy(&t.tensor.data[i], p, 8);
      } else if (*dtype == "I32") {
        int32_t v;
        std::memcpy(&v, p, 4);
        t.tensor.data[i] = v;
      } else {
        int64_t v;
        std::memcpy(&v, p, 8);
        t.tensor.data[i] = double(v);
      }
    }
    result.push_back(std::move(t));
  }
  llvm::sort(ranges);
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return bad("entries overlap at bytes [" + llvm::Twine(ranges[i].first) +
                 ", " + llvm::Twine(ranges[i - 1].second) +
                 ") of the data");
  return file;
}

//===----------------------------------------------------------------------===//
// Initial values and checkpoints
//===----------------------------------------------------------------------===//

Expected<CheckpointRun>
strata::loadCheckpoint(ModuleOp module, StringRef path,
                       llvm::StringMap<Tensor> &state,
                       std::vector<std::string> *unread) {
  auto file = readSafetensors(path);
  if (!file)
    return file.takeError();
  llvm::StringMap<const NamedTensor *> byName;
  for (const NamedTensor &t : file->tensors)
    byName[t.name] = &t;
  int64_t stepsDone = 0;
  auto steps = file->metadata.find("strata.steps_done");
  if (steps != file->metadata.end() &&
      (StringRef(steps->second).getAsInteger(10, stepsDone) || stepsDone < 0 ||
       stepsDone > kMaxStepsDone))
    return makeError("checkpoint '" + path + "' has an invalid "
                     "strata.steps_done '" + steps->second + "'");
  CheckpointRun run{stepsDone, std::nullopt};
  auto seed = file->metadata.find("strata.seed");
  if (seed != file->metadata.end()) {
    uint64_t value;
    if (StringRef(seed->second).getAsInteger(10, value))
      return makeError("checkpoint '" + path +
                       "' has an invalid "
                       "strata.seed '" +
                       seed->second + "'");
    run.seed = value;
  }
  for (auto &[name, type, source] : checkpointEntries(module)) {
    bool isParam = isa_and_nonnull<ParamOp>(
        SymbolTable::lookupSymbolIn(module, name));
    const NamedTensor *t = byName.lookup(name);
    if (!t) {
      if (isParam)
        return makeError("checkpoint '" + path + "' has no tensor '" + name +
                       "'");
      continue; // optimizer state starts fresh when absent
    }
    auto dtype = dtypeOf(type.getElementType());
    if (!dtype)
      return dtype.takeError();
    if (t->tensor.shape != shapeOf(type)) {
      std::string want, got;
      llvm::raw_string_ostream w(want), g(got);
      llvm::interleave(shapeOf(type), w, "x");
      llvm::interleave(t->tensor.shape, g, "x");
      return makeError("checkpoint '" + path + "': tensor '" + name +
                     "' has shape [" + got + "], the program needs [" + want +
                     "]");
    }
    if (t->dtype != *dtype)
      return makeError("checkpoint '" + path + "': tensor '" + name + "' is " +
                     t->dtype + ", the program needs " + *dtype);
    // A NaN or infinite weight would train NaN losses from the first step.
    for (size_t i = 0; i < t->tensor.data.size(); ++i)
      if (!std::isfinite(t->tensor.data[i]))
        return makeError("checkpoint '" + path + "': tensor '" + name +
                         "' holds " +
                         (std::isnan(t->tensor.data[i]) ? "NaN" : "infinity") +
                         " at element " + llvm::Twine(i));
    // Optimizer state the update takes as valid: the step count (Adam's
    // bias correction) and second moments (a square root) are never
    // negative.
    auto stateOp =
        dyn_cast_or_null<StateOp>(SymbolTable::lookupSymbolIn(module, name));
    bool counter = stateOp && name == kStepCountStateName;
    bool squares =
        stateOp && stateOp.getOfAttr() &&
        StringRef(name).ends_with((Twine(".") + kSecondMomentSuffix).str());
    // A step count past 2^53 is no longer exact (as f64, or counted on).
    if (counter)
      for (size_t i = 0; i < t->tensor.data.size(); ++i)
        if (t->tensor.data[i] > double(kMaxStepsDone))
          return makeError(
              "checkpoint '" + path + "': tensor '" + name + "' holds " +
              strata::formatStrategyNumber(t->tensor.data[i]) + " at element " +
              llvm::Twine(i) + ": a step count is at most 2^53");
    if (counter || squares)
      for (size_t i = 0; i < t->tensor.data.size(); ++i)
        if (t->tensor.data[i] < 0)
          return makeError("checkpoint '" + path + "': tensor '" + name +
                           "' holds " +
                           strata::formatStrategyNumber(t->tensor.data[i]) +
                           " at element " + llvm::Twine(i) + ": " +
                           (counter ? "a step count" : "a second moment") +
                           " is never negative");
    // A low-precision parameter is its master rounded (by the runtime).
    state[name] = t->tensor;
    if (source != name)
      state[source] = t->tensor;
    byName.erase(name);
  }
  if (unread)
    for (const NamedTensor &t : file->tensors)
      if (byName.contains(t.name))
        unread->push_back(t.name);
  return run;
}

Expected<std::vector<NamedTensor>>
strata::checkpointTensors(ModuleOp module,
                          const llvm::StringMap<Tensor> &state) {
  std::vector<NamedTensor> tensors;
  for (auto &[name, type, source] : checkpointEntries(module)) {
    auto dtype = dtypeOf(type.getElementType());
    if (!dtype)
      return dtype.takeError();
    auto it = state.find(source);
    if (it == state.end())
      return makeError("no value for '" + source + "'");
    auto param = module.lookupSymbol<ParamOp>(name);
    bool rounded = source == name && param &&
                   !param.getTensorType().getElementType().isF32() &&
                   !param.getFrozen();
    tensors.push_back({name, *dtype, it->second, rounded});
  }
  return tensors;
}

Error strata::writeCheckpoint(StringRef path, ArrayRef<NamedTensor> tensors,
                              const CheckpointRun &run) {
  // (What a reader refuses is not written.)
  if (run.stepsDone < 0 || run.stepsDone > kMaxStepsDone)
    return makeError("cannot write '" + path + "': steps done " +
                     Twine(run.stepsDone) + " is not in [0, 2^53]");
  std::map<std::string, std::string> metadata = {
      {"strata.steps_done", std::to_string(run.stepsDone)}};
  if (run.seed)
    metadata["strata.seed"] = std::to_string(*run.seed);
  return writeSafetensors(path, tensors, metadata);
}

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

Expected<DataStream> DataStream::create(func::FuncOp step, std::string dataPath,
                                        DataFormat format, uint64_t seed,
                                        DataArgumentNames names) {
  DataStream d;
  d.seed = seed;
  for (BlockArgument arg : step.getArguments()) {
    auto name = step.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), strata::StrataDialect::kInputNameAttrName);
    if (!name)
      return makeError("argument " + llvm::Twine(arg.getArgNumber()) +
                     " of @" + step.getName() +
                     " has no strata.name: the data stream cannot feed it");
    d.argNames.push_back(name.str());
    d.shapes.push_back(shapeOf(cast<RankedTensorType>(arg.getType())));
  }
  auto is = [&](std::vector<std::string> names) { return d.argNames == names; };
  // A data path as the caller spells it ("--data FILE", "data path FILE").
  auto named = [&](llvm::StringRef path) {
    return (names.path + " " + path).str();
  };
  // The shapes it fills: [rows, seq] token ids and their targets, or [rows,
  // width] features and [rows] labels.
  auto shapeError = [&](llvm::StringRef want) {
    std::string shapes;
    for (size_t i = 0; i < d.shapes.size(); ++i)
      shapes += (i ? ", " : "") + d.argNames[i] + " [" +
                llvm::join(llvm::map_range(
                               d.shapes[i],
                               [](int64_t n) { return std::to_string(n); }),
                           ", ") +
                "]";
    return makeError("@" + step.getName() + " takes " + shapes +
                     "; the data stream feeds " + want);
  };
  if (is({"tokens", "targets"}) &&
      (d.shapes[0].size() != 2 || d.shapes[1] != d.shapes[0]))
    return shapeError("tokens and targets of one shape [rows, sequence]");
  if (is({"features", "labels"}) &&
      (d.shapes[0].size() != 2 || d.shapes[1].size() != 1 ||
       d.shapes[1][0] != d.shapes[0][0]))
    return shapeError("features [rows, width] and labels [rows]");
  if (is({"features", "targets"})) {
    if (d.shapes[0].size() != 2 || d.shapes[1].empty() ||
        d.shapes[1][0] != d.shapes[0][0])
      return shapeError("features [rows, width] and targets [rows, ...]");
    for (BlockArgument arg : step.getArguments())
      if (!isa<FloatType>(
              cast<RankedTensorType>(arg.getType()).getElementType()))
        return makeError("@" + step.getName() + " takes " +
                         d.argNames[arg.getArgNumber()] +
                         " of integers; the data stream feeds features and "
                         "targets of a floating-point type (a regression)");
  }
  if (is({"tokens", "targets"})) {
    d.kind = Kind::Text;
    d.width = format == DataFormat::Uint16   ? 2
              : format == DataFormat::Uint32 ? 4
                                             : 1;
    std::string source = dataPath;
    if (dataPath.empty() || llvm::sys::fs::is_directory(dataPath)) {
      // A directory of texts (not descended into), concatenated.
      std::string dir =
          dataPath.empty() ? "/usr/share/common-licenses" : dataPath;
      if (format != DataFormat::Text)
        return makeError(named(dir) +
                         " is a directory: token files are read one at a "
                         "time");
      std::vector<std::string> files;
      std::error_code ec;
      for (llvm::sys::fs::directory_iterator it(dir, ec), end;
           it != end && !ec; it.increment(ec))
        if (llvm::sys::fs::is_regular_file(it->path()))
          files.push_back(it->path());
      if (ec)
        return makeError("cannot list " + named(dir) + ": " + ec.message());
      std::sort(files.begin(), files.end());
      if (files.empty())
        return makeError(named(dir) + " is a directory without regular files");
      std::string text;
      for (const std::string &f : files) {
        auto buffer = llvm::MemoryBuffer::getFile(f);
        if (!buffer)
          return makeError("cannot read data file '" + f +
                           "': " + buffer.getError().message());
        text += (*buffer)->getBuffer().str();
      }
      d.data = llvm::MemoryBuffer::getMemBufferCopy(text, dir);
      source = dir;
    } else {
      if (!llvm::sys::fs::is_regular_file(dataPath))
        return makeError(named(dataPath) +
                         (llvm::sys::fs::exists(dataPath)
                              ? " is not a regular file or a directory"
                              : " does not exist"));
      if (format == DataFormat::Text &&
          llvm::sys::path::extension(dataPath) == ".bin")
        return makeError(named(dataPath) +
                         " looks like a file of token ids: give " +
                         names.format + " uint16 or uint32");
      auto buffer = llvm::MemoryBuffer::getFile(dataPath, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/
                                                false);
      if (!buffer)
        return makeError("cannot read data file '" + dataPath +
                         "': " + buffer.getError().message());
      d.data = std::move(*buffer);
      // Mapped, not copied (a token file may be larger than memory): its
      // size and time are checked before each batch is read.
      llvm::sys::fs::file_status status;
      if (!llvm::sys::fs::status(dataPath, status)) {
        d.watched = {named(dataPath), dataPath, status.getSize(),
                     status.getLastModificationTime()};
      }
    }
    size_t bytes = d.data->getBufferSize();
    if (bytes % d.width != 0)
      return makeError(named(source) + ": " + llvm::Twine(bytes) +
                       " bytes is not a whole number of " +
                       llvm::Twine(d.width) + "-byte token ids");
    int64_t count = int64_t(bytes / d.width);
    int64_t seq = d.shapes[0].back();
    if (count < seq + 1)
      return makeError(named(source) + " has " + llvm::Twine(count) +
                       " tokens; the program's sequences of " +
                       llvm::Twine(seq) +
                       " (and their next-token targets) "
                       "need at least " +
                       llvm::Twine(seq + 1));
    // Every id within the program's vocabulary (the loss's classes).
    int64_t vocab = 0;
    step.walk([&](CrossEntropyOp ce) { vocab = ce.getNumClasses(); });
    if (vocab > 0)
      for (int64_t k = 0; k < count; ++k)
        if (int64_t id = d.token(uint64_t(k)); id >= vocab)
          return makeError(
              named(source) + ": token id " + llvm::Twine(id) + " at token " +
              llvm::Twine(k) + " (byte offset " + llvm::Twine(k * d.width) +
              ") is outside the program's vocabulary of " + llvm::Twine(vocab) +
              (format == DataFormat::Text
                   ? " (text is read as bytes, ids 0-255)"
                   : ""));
    return d;
  }
  if ((is({"features", "labels"}) || is({"features", "targets"})) &&
      !dataPath.empty())
    return makeError(named(dataPath) + ": @" + step.getName() +
                     " takes (features, " + d.argNames[1] +
                     "), which are drawn at random; " + names.path +
                     " feeds programs that take (tokens, targets)");
  if (is({"features", "labels"})) {
    d.kind = Kind::Classification;
    // The number of classes: the loss's (the labels may reach the loss
    // through micro-batch slices).
    step.walk([&](CrossEntropyOp ce) { d.classes = ce.getNumClasses(); });
    if (d.classes < 1)
      return makeError("@" + step.getName() +
                     ": the labels feed no strata.cross_entropy");
    return d;
  }
  if (is({"features", "targets"})) {
    d.kind = Kind::Regression;
    // The teacher W [width, outputs], drawn once.
    int64_t width = d.shapes[0][1], outputs = 1;
    for (size_t i = 1; i < d.shapes[1].size(); ++i)
      outputs *= d.shapes[1][i];
    d.teacher.resize(size_t(width * outputs));
    for (int64_t j = 0; j < width * outputs; ++j)
      d.teacher[j] = reference::standardNormal(seed, kTeacherStream, 0, j);
    return d;
  }
  return makeError("@" + step.getName() + " takes (" +
                   llvm::join(d.argNames, ", ") +
                   "); the data stream feeds (tokens, targets), (features, "
                   "labels) or (features, targets)");
}

uint64_t DataStream::fingerprint() const {
  if (kind != Kind::Text)
    return 0;
  return llvm::xxh3_64bits(data->getBuffer()) ^ uint64_t(width);
}

bool DataStream::changed() const {
  if (!watched)
    return false;
  llvm::sys::fs::file_status status;
  return llvm::sys::fs::status(watched->path, status) ||
         status.getSize() != watched->size ||
         status.getLastModificationTime() != watched->modified;
}

Expected<std::vector<Tensor>> DataStream::batch(int64_t i) const {
  // A file truncated under the mapping would end the process (SIGBUS);
  // one rewritten would train on other data than the start checked.
  if (changed())
    return makeError(watched->named +
                     " changed during the run (its size or modification "
                     "time): the run reads the data it checked at its "
                     "start, give it a file that stays as it is");
  if (kind == Kind::Text) {
    Tensor tokens(shapes[0]), targets(shapes[1]);
    int64_t rows = shapes[0][0], seq = shapes[0].back();
    uint64_t span = data->getBufferSize() / width - seq - 1;
    for (int64_t b = 0; b < rows; ++b) {
      auto r = rng::draw(seed, kDataStream, i, b);
      uint64_t offset = ((uint64_t(r[1]) << 32) | r[0]) % (span + 1);
      for (int64_t s = 0; s < seq; ++s) {
        tokens.data[b * seq + s] = double(token(offset + s));
        targets.data[b * seq + s] = double(token(offset + s + 1));
      }
    }
    return std::vector<Tensor>{tokens, targets};
  }
  int64_t rows = shapes[0][0], width = shapes[0][1];
  if (kind == Kind::Regression) {
    // targets = features W / sqrt(width) + noise / 10.
    Tensor features(shapes[0]), targets(shapes[1]);
    int64_t outputs = targets.numElements() / rows;
    for (int64_t j = 0; j < rows * width; ++j)
      features.data[j] =
          double(float(reference::standardNormal(seed, kNoiseStream, i, j)));
    double norm = 1.0 / std::sqrt(double(width));
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t o = 0; o < outputs; ++o) {
        double sum = 0;
        for (int64_t f = 0; f < width; ++f)
          sum += features.data[b * width + f] * teacher[f * outputs + o];
        targets.data[b * outputs + o] = double(float(
            sum * norm + 0.1 * reference::standardNormal(seed, kTargetStream, i,
                                                         b * outputs + o)));
      }
    return std::vector<Tensor>{features, targets};
  }
  Tensor features(shapes[0]), labels(shapes[1]);
  for (int64_t b = 0; b < rows; ++b) {
    int64_t label = rng::draw(seed, kDataStream, i, b)[0] % classes;
    labels.data[b] = double(label);
    for (int64_t f = 0; f < width; ++f)
      features.data[b * width + f] = double(float(
          reference::standardNormal(seed, kCenterStream, 0, label * width + f) +
          reference::standardNormal(seed, kNoiseStream, i, b * width + f)));
  }
  return std::vector<Tensor>{features, labels};
}
