//===- CpuExecutable.h - A step compiled for the CPU runtime ----*- C++ -*-===//
//
// Lowers a Strata program (strata-lower-to-runtime), compiles it with
// MLIR's ExecutionEngine (LLVM ORC JIT) against the CPU runtime, and owns
// what a run keeps resident: the arena of the memory plan, parameters and
// optimizer state, the runtime context. The same lowered module can be
// written as an object file instead.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_CPUEXECUTABLE_H
#define STRATA_EXECUTION_CPUEXECUTABLE_H

#include "strata/Reference/Evaluator.h"
#include "strata/Runtime/StrataRuntime.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir {
class ExecutionEngine;
} // namespace mlir

namespace strata {

struct CpuOptions {
  /// Run seed of the counter-based RNG.
  uint64_t seed = 0;
  /// World rank; `shard` is computed from the program's strata.shards.
  int64_t rank = 0;
  /// Kernel threads (OpenMP, also oneDNN's).
  int64_t threads = 1;
  /// Collectives: required when the program has any. Without `wait`,
  /// every collective completes where it starts.
  StrataRtCollectiveFn collective = nullptr;
  StrataRtWaitFn wait = nullptr;
  void *collectiveUser = nullptr;
  /// Point to point (pipeline stages).
  StrataRtSendFn send = nullptr;
  StrataRtRecvFn recv = nullptr;
  void *pointToPointUser = nullptr;
  /// LLVM optimisation level of the JIT (0-3).
  unsigned optLevel = 2;
  /// Record every op's begin and end (takeTrace).
  bool trace = false;
};

/// One op of a traced step.
struct TraceEvent {
  /// "file:line:col: op.name" and the op's strata.role ("" if none).
  std::string site, role;
  /// Microseconds since the executable was created.
  double begin = 0, end = 0;
};

class CpuExecutable {
public:
  ~CpuExecutable();

  /// Compiles the step of `module` (left unchanged). Diagnostics of the
  /// lowering go to the context's handler; the error says what failed.
  static llvm::Expected<std::unique_ptr<CpuExecutable>>
  compile(mlir::ModuleOp module, const CpuOptions &options);

  /// Lowers `module` and writes the object file of `strata_step` (to link
  /// against libstrata_runtime_cpu).
  static llvm::Error emitObject(mlir::ModuleOp module, llvm::StringRef path);

  /// Copies parameters and state in (every one must be present with its
  /// shape), converting to the program's element types.
  llvm::Error setState(const llvm::StringMap<reference::Tensor> &state);
  /// Copies parameters and state out.
  void getState(llvm::StringMap<reference::Tensor> &state) const;

  /// Runs one step; errors name the failing op's location.
  llvm::Expected<std::vector<reference::Tensor>>
  step(llvm::ArrayRef<reference::Tensor> args);

  /// The ops run since the last call (with CpuOptions::trace).
  std::vector<TraceEvent> takeTrace();
  /// Microseconds since the executable was created (the trace's clock).
  double nowUs() const;

  /// The op whose host call (collective, send, receive, wait) is in
  /// progress, as "file:line:col: op", or null. Safe in a signal handler.
  const char *activeHostCall() const;

  /// The planned arena of intermediate values.
  int64_t arenaBytes() const { return arenaSize; }
  /// Scratch memory the kernels hold beyond the plan.
  int64_t scratchBytes() const;

private:
  CpuExecutable() = default;

  struct Buffer {
    std::string name;
    std::vector<int64_t> shape;
    int64_t dtype = 0;
    void *data = nullptr;
    int64_t bytes = 0;
  };
  static Buffer makeBuffer(std::string name, mlir::Type type);

  std::unique_ptr<mlir::ExecutionEngine> engine;
  StrataRtStepFn function = nullptr;
  StrataRtContext *context = nullptr;
  void *arena = nullptr;
  int64_t arenaSize = 0;
  std::vector<Buffer> persistent, inputs, outputs;
  std::vector<std::string> sites, siteRoles;
};

} // namespace strata

#endif // STRATA_EXECUTION_CPUEXECUTABLE_H
