//===- Executable.h - A compiled step a backend runs ------------*- C++ -*-===//
//
// What every backend offers the training library: the resident parameters
// and optimizer state in and out, one step on host tensors, and what a run
// reports (scratch memory, a trace of the ops). The reference evaluator and
// the CPU JIT implement it; a CUDA executable plugs in here.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_EXECUTABLE_H
#define STRATA_EXECUTION_EXECUTABLE_H

#include "strata/Reference/Evaluator.h"
#include "strata/Reference/InitialValues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata {

/// One op of a traced step.
struct TraceEvent {
  /// "file:line:col: op.name" and the op's strata.role ("" if none).
  std::string site, role;
  /// Microseconds since the executable was created.
  double begin = 0, end = 0;
  /// The completion of a collective the op started earlier in the step
  /// (the runtime traces a non-blocking collective's wait under its site).
  bool wait = false;
};

class Executable {
public:
  virtual ~Executable();

  /// Copies the parameters and state given in (each with its shape),
  /// converting to the program's element types. The others take their
  /// seeded initial values from `rest` when it is given (every one must be
  /// there: a new run, or what a checkpoint lacks), and keep theirs
  /// otherwise.
  virtual llvm::Error
  setState(const llvm::StringMap<reference::Tensor> &state,
           const reference::InitialValues *rest = nullptr) = 0;
  /// Copies parameters and state out.
  virtual void getState(llvm::StringMap<reference::Tensor> &state) const = 0;
  /// One parameter or state (a step counter, the loss scale), or nothing
  /// when the program has none of that name.
  virtual std::optional<reference::Tensor>
  readState(llvm::StringRef name) const = 0;

  /// Runs one step on this rank's arguments; errors name the failing op's
  /// location. Returns the step function's results (the loss first).
  virtual llvm::Expected<std::vector<reference::Tensor>>
  step(llvm::ArrayRef<reference::Tensor> args) = 0;

  /// Microseconds since the executable was created (the trace's clock).
  virtual double nowUs() const = 0;
  /// The ops run since the last call (one step's), when tracing was asked
  /// for.
  virtual std::vector<TraceEvent> takeTrace() { return {}; }
  /// The op whose host call (collective, send, receive, wait) is in
  /// progress, as "file:line:col: op", or null. Safe in a signal handler.
  virtual const char *activeHostCall() const { return nullptr; }
  /// Memory the kernels hold beyond the memory plan.
  virtual int64_t scratchBytes() const { return 0; }
  /// The build of the kernels that runs ("avx512", "avx2", "baseline",
  /// "cuda"; strata_rt_isa), or "" for the reference evaluator.
  virtual std::string kernelIsa() const { return ""; }
  /// GEMM autotuning so far (strata_rt_gemm_autotuned).
  struct GemmAutotuned {
    /// Products timed, and of those the ones on sgemm and on the packed
    /// GEMM (the rest on the matmul primitive).
    int64_t timed = 0, onSgemm = 0, onPacked = 0;
  };
  virtual GemmAutotuned gemmAutotuned() const { return {}; }
};

/// Host buffers of the runtime's element types and tensors: whether a buffer
/// of element type `dtype` (a runtime ABI code) converts, which f32, bf16,
/// f16 (rounded from f32 to nearest even), i32 and i64 do; the copies in
/// both directions (of a type that converts); writeHostValues writes
/// `count` values at `data` (elements 0 to count - 1 of a buffer there).
bool isHostBufferType(int64_t dtype);
void writeHostBuffer(const reference::Tensor &t, int64_t dtype, void *data);
void writeHostValues(const double *values, int64_t count, int64_t dtype,
                     void *data);
reference::Tensor readHostBuffer(std::vector<int64_t> shape, int64_t dtype,
                                 const void *data);

/// The reference backend: the double-precision evaluator, the executable
/// specification. `step` must outlive it; `options.communicator` carries
/// its collectives in a multi-rank run.
std::unique_ptr<Executable>
createReferenceExecutable(mlir::func::FuncOp step,
                          const reference::EvalOptions &options);

} // namespace strata

#endif // STRATA_EXECUTION_EXECUTABLE_H
