//===- RuntimeTarget.h - What a runtime backend accepts ---------*- C++ -*-===//
//
// The questions whose answers depend on the backend a program is lowered
// for, answered in one place: which element types its kernels compute in,
// which GEMM layouts and epilogues it runs, how collectives split tensors,
// how buffers are aligned. The fusion pass and the lowering to the runtime
// ask a target; neither carries a rule of its own.
//
// Targets: "cpu" (runtime/cpu: oneDNN + OpenMP kernels + MPI) and "cuda"
// (cuBLASLt + own kernels + NCCL; its rules are known, its runtime is the
// next backend). Both implement the same runtime C ABI.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TARGET_RUNTIMETARGET_H
#define STRATA_TARGET_RUNTIMETARGET_H

#include "strata/Dialect/Strata.h"

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"

namespace strata {

/// The runtime ABI's element type code of `element` (STRATA_RT_F32 ...), or
/// -1 for a type the ABI has no code for. The one mapping from MLIR types
/// to the ABI, for the lowering and the executables.
int64_t runtimeElementType(mlir::Type element);

class RuntimeTarget {
public:
  virtual ~RuntimeTarget();

  /// The name users select it by ("cpu", "cuda").
  virtual llvm::StringRef getName() const = 0;
  /// How diagnostics name it ("the CPU runtime").
  virtual llvm::StringRef getDescription() const = 0;

  /// Whether the target's kernels compute in floating-point type `type`.
  virtual bool supportsFloatType(mlir::FloatType type) const = 0;
  /// Checks every tensor operand and result of `op`: floats of a supported
  /// type, integers i32 or i64. Emits an error at `op` otherwise.
  mlir::LogicalResult checkElementTypes(mlir::Operation *op) const;

  /// Whether a batched GEMM whose result has batch dimensions `result` may
  /// read an operand with batch dimensions `operand` (all but the last two
  /// dimensions): equal, or a single matrix shared by every batch.
  virtual bool supportsGemmBatch(llvm::ArrayRef<int64_t> operand,
                                 llvm::ArrayRef<int64_t> result) const;

  /// Whether a GEMM epilogue can apply `act` to N columns while it also
  /// writes the pre-activation (training keeps it for the gradient).
  virtual bool epilogueSupports(Activation act, int64_t n) const = 0;

  /// Whether a reduce_scatter / all_gather may split dimension `dim` of
  /// `shape` (each rank's slice must be what the collective library moves).
  virtual bool supportsCollectiveSplit(llvm::ArrayRef<int64_t> shape,
                                       int64_t dim) const;

  /// The alignment of every buffer of the memory plan, in bytes.
  virtual int64_t getBufferAlignment() const = 0;

  /// The multiple of elements a large GEMM's output columns should be for
  /// the target's fastest kernels (strata-gemm-padding pads the weight to
  /// it), or 1 where any width runs as fast.
  virtual int64_t getGemmColumnMultiple() const { return 1; }

  /// The target named `name`, or null.
  static const RuntimeTarget *lookup(llvm::StringRef name);
  /// The names `lookup` knows, for messages ("cpu, cuda").
  static llvm::StringRef knownNames();
};

} // namespace strata

#endif // STRATA_TARGET_RUNTIMETARGET_H
