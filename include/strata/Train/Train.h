//===- Train.h - Data and checkpoints of a training run ---------*- C++ -*-===//
//
// What strata-run needs around a compiled program: the deterministic data
// stream and safetensors checkpoints (the initial weights are
// reference::InitialValues).
// Tensors are the reference evaluator's (row-major doubles); files store
// each tensor in its program element type.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TRAIN_TRAIN_H
#define STRATA_TRAIN_TRAIN_H

#include "strata/Reference/Evaluator.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata {

using reference::Tensor;

/// A named tensor with its file element type ("F32", "F64", "I32", "I64").
struct NamedTensor {
  std::string name;
  std::string dtype;
  Tensor tensor;
  /// A low-precision parameter's own (rounded) value, written by a rank that
  /// does not hold its f32 master weight (ZeRO): a rank that does writes
  /// the master under the same name, which supersedes it.
  bool rounded = false;
};

/// A safetensors file: tensors and the string metadata of its header.
struct Safetensors {
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes a safetensors file atomically (temporary file + rename).
llvm::Error writeSafetensors(llvm::StringRef path,
                             llvm::ArrayRef<NamedTensor> tensors,
                             const std::map<std::string, std::string> &metadata = {});
/// Reads every tensor of a safetensors file, and its metadata.
llvm::Expected<Safetensors> readSafetensors(llvm::StringRef path);
/// Parses the bytes of a safetensors file; `name` names it in errors.
llvm::Expected<Safetensors> parseSafetensors(llvm::StringRef data,
                                             llvm::StringRef name);

/// The safetensors dtype of an MLIR element type.
llvm::Expected<std::string> dtypeOf(mlir::Type elementType);

/// The most steps a checkpoint records (2^53: exact as a double, as JSON
/// readers hold numbers); --steps is bounded by it too.
constexpr int64_t kMaxStepsDone = int64_t(1) << 53;

/// What a checkpoint's header records of the run that wrote it.
struct CheckpointRun {
  /// Training steps completed: its position in the data stream.
  int64_t stepsDone = 0;
  /// The run's seed (`strata.seed`), which chose its data stream and
  /// dropout masks; absent from files written before it was recorded and
  /// from other tools' files.
  std::optional<uint64_t> seed;
};

/// Puts a checkpoint's values into `state` (what the checkpoint lacks is
/// left to the caller: the initial values, reference::InitialValues).
/// Every parameter must be present with its shape and dtype; states present
/// are taken too.
/// Errors name the tensor and what differs. Returns what the header says
/// of the run that wrote it.
/// `unread`, when given, receives the names of the file's tensors that
/// `module` has no parameter or state for, in file order.
llvm::Expected<CheckpointRun>
loadCheckpoint(mlir::ModuleOp module, llvm::StringRef path,
               llvm::StringMap<Tensor> &state,
               std::vector<std::string> *unread = nullptr);
/// Every parameter and state of `module`, from `state`, in declaration
/// order with their file dtypes (what saveCheckpoint writes).
llvm::Expected<std::vector<NamedTensor>>
checkpointTensors(mlir::ModuleOp module,
                  const llvm::StringMap<Tensor> &state);
/// Writes a checkpoint of `tensors` that records `run` (the steps trained
/// so far and the run's seed), so that a run can resume — under any
/// strategy, since tensors are whole.
llvm::Error writeCheckpoint(llvm::StringRef path,
                            llvm::ArrayRef<NamedTensor> tensors,
                            const CheckpointRun &run);

/// How a data file holds its tokens.
enum class DataFormat {
  /// Text: every byte is a token (a file, or a directory's regular files in
  /// name order, concatenated).
  Text,
  /// Binary token ids, little-endian uint16 (nanoGPT's prepare.py) or
  /// uint32 (vocabularies beyond 65,536).
  Uint16,
  Uint32,
};

/// How the caller spells the data path and its format in errors: strata-run's
/// options (`--data`, `--data-format`) or an embedder's arguments.
struct DataArgumentNames {
  llvm::StringRef path, format;
};

/// The deterministic data stream. Step i is the i-th global batch, whatever
/// the split into ranks and micro-batches.
class DataStream {
public:
  /// Chooses the stream from the step function's arguments (by their
  /// `strata.name`): `tokens`/`targets` read sequences of token ids from
  /// `dataPath` in `format` (empty path: the texts under
  /// /usr/share/common-licenses), every id checked against the program's
  /// vocabulary; `features`/`labels` draw a synthetic classification task
  /// from `seed`. Errors name the path and format as `names` spells them.
  static llvm::Expected<DataStream> create(mlir::func::FuncOp step,
                                           std::string dataPath,
                                           DataFormat format, uint64_t seed,
                                           DataArgumentNames names);
  /// The arguments of step `i`; an error when the data file changed since
  /// the stream was created.
  llvm::Expected<std::vector<Tensor>> batch(int64_t i) const;
  /// Whether the mapped data file changed (its size or modification time)
  /// since the stream was created.
  bool changed() const;
  /// Names of the arguments, in order.
  const std::vector<std::string> &names() const { return argNames; }
  /// A hash of the data the stream reads (the token ids' bytes and width);
  /// 0 for the synthetic task, which the seed and the program decide.
  uint64_t fingerprint() const;

private:
  enum class Kind { Text, Classification, Regression } kind = Kind::Text;
  /// Token id `k` of `data`.
  uint32_t token(uint64_t k) const {
    const auto *p =
        reinterpret_cast<const unsigned char *>(data->getBufferStart()) +
        k * width;
    uint32_t id = 0;
    for (int b = width - 1; b >= 0; --b)
      id = (id << 8) | p[b];
    return id;
  }
  std::vector<std::string> argNames;
  std::vector<std::vector<int64_t>> shapes;
  /// The regression's teacher W [width, outputs], from the seed.
  std::vector<double> teacher;
  /// The token ids, `width` bytes each (little-endian).
  std::shared_ptr<llvm::MemoryBuffer> data;
  int width = 1;
  uint64_t seed = 0;
  int64_t classes = 0;
  /// A mapped data file (as the messages name it) and its size and time
  /// when the stream was created.
  struct Watched {
    std::string named, path;
    uint64_t size;
    llvm::sys::TimePoint<> modified;
  };
  std::optional<Watched> watched;
};

} // namespace strata

#endif // STRATA_TRAIN_TRAIN_H
