//===- JitExecutable.h - A step compiled against a runtime ------*- C++ -*-===//
//
// Lowers a Strata program (strata-lower-to-runtime) for a runtime's target,
// compiles it with MLIR's ExecutionEngine (LLVM ORC JIT) against that
// runtime's kernels, and owns what a run keeps resident in the runtime's
// memory: the arena of the memory plan, parameters and optimizer state,
// the inputs and outputs, the runtime context. One executable for every
// runtime (RuntimeLibrary: the CPU runtime, the CUDA runtime); the same
// lowered module can be written as an object file instead.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_JITEXECUTABLE_H
#define STRATA_EXECUTION_JITEXECUTABLE_H

#include "strata/Execution/Communicator.h"
#include "strata/Execution/Executable.h"
#include "strata/Execution/RuntimeLibrary.h"

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

struct JitOptions {
  /// The runtime the step runs on (RuntimeLibrary::cpu() when null).
  const RuntimeLibrary *runtime = nullptr;
  /// Run seed of the counter-based RNG.
  uint64_t seed = 0;
  /// World rank; `shard` is computed from the program's strata.shards.
  int64_t rank = 0;
  /// Kernel threads (CPU runtime: OpenMP, also oneDNN's).
  int64_t threads = 1;
  /// The runtime's device (-1: its choice; the CUDA runtime takes the
  /// process's local rank among the ranks of its machine).
  int64_t device = -1;
  /// f32 GEMMs may use TF32 (CUDA).
  bool tf32 = false;
  /// Time each distinct f32 GEMM through oneDNN's two paths once and run
  /// the faster (CPU; StrataRtOptions::gemmAutotune).
  bool gemmAutotune = false;
  /// Collectives (required when the program has any) and point to point
  /// (pipeline stages). Without `wait`, every collective completes where it
  /// starts.
  RuntimeCallbacks communication;
  /// LLVM optimisation level of the JIT (0-3).
  unsigned optLevel = 2;
  /// Record every op's begin and end (takeTrace).
  bool trace = false;
};

class JitExecutable : public Executable {
public:
  ~JitExecutable() override;

  /// Compiles the step of `module` (left unchanged). Diagnostics of the
  /// lowering go to the context's handler; the error says what failed.
  static llvm::Expected<std::unique_ptr<JitExecutable>>
  compile(mlir::ModuleOp module, const JitOptions &options);

  /// Lowers `module` for runtime target `target` and writes the object file
  /// of `strata_step` (to link against that runtime's library). With
  /// `trace`, the step calls strata_rt_trace_begin/end around every op (they
  /// record once the host calls strata_rt_enable_trace).
  static llvm::Error emitObject(mlir::ModuleOp module, llvm::StringRef path,
                                llvm::StringRef target = "cpu",
                                bool trace = false);

  llvm::Error setState(const llvm::StringMap<reference::Tensor> &state,
                       const reference::InitialValues *rest = nullptr) override;
  void getState(llvm::StringMap<reference::Tensor> &state) const override;
  std::optional<reference::Tensor>
  readState(llvm::StringRef name) const override;
  llvm::Expected<std::vector<reference::Tensor>>
  step(llvm::ArrayRef<reference::Tensor> args) override;
  /// The ops run since the last call (with JitOptions::trace).
  std::vector<TraceEvent> takeTrace() override;
  double nowUs() const override;
  const char *activeHostCall() const override;

  /// The planned arena of intermediate values.
  int64_t arenaBytes() const { return arenaSize; }
  int64_t scratchBytes() const override;
  std::string kernelIsa() const override;
  GemmAutotuned gemmAutotuned() const override;

private:
  JitExecutable() = default;

  struct Buffer {
    std::string name;
    std::vector<int64_t> shape;
    int64_t dtype = 0;
    /// In the runtime's memory.
    void *data = nullptr;
    int64_t bytes = 0;
  };
  llvm::Expected<Buffer> makeBuffer(std::string name, mlir::Type type);
  /// The runtime's first error, as "location: message", or success.
  llvm::Error runtimeError(llvm::StringRef what) const;
  /// Host tensor <-> runtime buffer.
  llvm::Error write(const Buffer &b, const reference::Tensor &t);
  reference::Tensor read(const Buffer &b) const;

  const RuntimeLibrary *runtime = nullptr;
  std::unique_ptr<mlir::ExecutionEngine> engine;
  StrataRtStepFn function = nullptr;
  StrataRtContext *context = nullptr;
  void *arena = nullptr;
  int64_t arenaSize = 0;
  std::vector<Buffer> persistent, inputs, outputs;
  std::vector<std::string> sites, siteRoles;
};

} // namespace strata

#endif // STRATA_EXECUTION_JITEXECUTABLE_H
