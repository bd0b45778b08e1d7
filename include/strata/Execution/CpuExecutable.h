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

#include "strata/Execution/Communicator.h"
#include "strata/Execution/Executable.h"
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
  /// Collectives (required when the program has any) and point to point
  /// (pipeline stages). Without `wait`, every collective completes where it
  /// starts.
  RuntimeCallbacks communication;
  /// LLVM optimisation level of the JIT (0-3).
  unsigned optLevel = 2;
  /// Record every op's begin and end (takeTrace).
  bool trace = false;
};

class CpuExecutable : public Executable {
public:
  ~CpuExecutable() override;

  /// Compiles the step of `module` (left unchanged). Diagnostics of the
  /// lowering go to the context's handler; the error says what failed.
  static llvm::Expected<std::unique_ptr<CpuExecutable>>
  compile(mlir::ModuleOp module, const CpuOptions &options);

  /// Lowers `module` and writes the object file of `strata_step` (to link
  /// against libstrata_runtime_cpu).
  static llvm::Error emitObject(mlir::ModuleOp module, llvm::StringRef path);

  llvm::Error
  setState(const llvm::StringMap<reference::Tensor> &state) override;
  void getState(llvm::StringMap<reference::Tensor> &state) const override;
  llvm::Expected<std::vector<reference::Tensor>>
  step(llvm::ArrayRef<reference::Tensor> args) override;
  /// The ops run since the last call (with CpuOptions::trace).
  std::vector<TraceEvent> takeTrace() override;
  double nowUs() const override;
  const char *activeHostCall() const override;

  /// The planned arena of intermediate values.
  int64_t arenaBytes() const { return arenaSize; }
  int64_t scratchBytes() const override;

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
