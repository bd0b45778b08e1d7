//===- RuntimeTarget.cpp - The CPU and CUDA targets -----------------------===//

#include "strata/Target/RuntimeTarget.h"
#include "strata/Dialect/Strata.h"
#include "strata/Runtime/StrataRuntime.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace strata;

int64_t strata::runtimeElementType(Type element) {
  if (element.isF32())
    return STRATA_RT_F32;
  if (element.isInteger(32))
    return STRATA_RT_I32;
  if (element.isInteger(64))
    return STRATA_RT_I64;
  if (element.isBF16())
    return STRATA_RT_BF16;
  if (element.isF16())
    return STRATA_RT_F16;
  if (element.isInteger(8))
    return STRATA_RT_I8;
  return -1;
}

RuntimeTarget::~RuntimeTarget() = default;

LogicalResult RuntimeTarget::checkElementTypes(Operation *op) const {
  // The optimizer keeps f32 state: an update computes in f32, from an f32
  // parameter or from the f32 master weight of a low-precision one (whose
  // dialect verifier checks the types).
  auto update = dyn_cast<OptimizerUpdateOpInterface>(op);
  bool f32Only = (update && !update.getMaster()) || isa<LrScheduleOp>(op);
  for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults())) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      continue;
    Type element = t.getElementType();
    if (auto f = dyn_cast<FloatType>(element)) {
      if (f32Only && !f.isF32())
        return op->emitOpError("has a ")
               << t << " value; optimizer updates compute in f32 (a "
               << "low-precision parameter is updated through its f32 "
               << "master weight)";
      if (!supportsFloatType(f))
        return op->emitOpError("has a ") << t << " value; " << getDescription()
                                         << " has no kernels for " << f;
      continue;
    }
    if (!element.isInteger(32) && !element.isInteger(64))
      return op->emitOpError("has a ") << t << " value; " << getDescription()
                                       << " takes integers as i32 or i64";
  }
  return success();
}

bool RuntimeTarget::supportsGemmBatch(ArrayRef<int64_t> operand,
                                      ArrayRef<int64_t> result) const {
  int64_t count = 1;
  for (int64_t d : operand)
    count *= d;
  return count == 1 || operand == result;
}

bool RuntimeTarget::supportsCollectiveSplit(ArrayRef<int64_t> shape,
                                            int64_t dim) const {
  // A rank's slice is one contiguous block: no dimension before `dim` is
  // larger than 1 (MPI and NCCL move contiguous buffers).
  for (int64_t d = 0; d < dim; ++d)
    if (shape[d] != 1)
      return false;
  return true;
}

namespace {

/// runtime/cpu: oneDNN matmul (post-ops apply to any N) and OpenMP kernels
/// that store f32, bf16 and f16 and compute in f32.
class CpuTarget final : public RuntimeTarget {
public:
  StringRef getName() const override { return "cpu"; }
  StringRef getDescription() const override { return "the CPU runtime"; }
  bool supportsFloatType(FloatType type) const override {
    return type.isF32() || type.isBF16() || type.isF16();
  }
  bool epilogueSupports(Activation, int64_t) const override { return true; }
  /// A cache line (and oneDNN's preferred alignment).
  int64_t getBufferAlignment() const override { return 64; }
};

/// runtime/cuda: cuBLASLt epilogues, kernels that store f32, bf16 and f16
/// and compute in f32, NCCL. The aux output of an epilogue that keeps the
/// pre-activation needs N % 8 == 0 for GELU and a bit-mask whose leading
/// dimension is a multiple of 128 for ReLU.
class CudaTarget final : public RuntimeTarget {
public:
  StringRef getName() const override { return "cuda"; }
  StringRef getDescription() const override { return "the CUDA runtime"; }
  bool supportsFloatType(FloatType type) const override {
    return type.isF32() || type.isBF16() || type.isF16();
  }
  bool epilogueSupports(Activation act, int64_t n) const override {
    if (act == Activation::Relu)
      return n % 128 == 0;
    if (act == Activation::GeluTanh || act == Activation::GeluErf)
      return n % 8 == 0;
    return true;
  }
  /// cudaMalloc's alignment, which cuBLASLt's fastest kernels want.
  int64_t getBufferAlignment() const override { return 256; }
  /// cuBLASLt's tensor-core kernels want 16-byte aligned leading
  /// dimensions: 8 bf16 or f16 elements. GPT-2's LM head (50257 columns)
  /// ran at a tenth of the H100's rate.
  int64_t getGemmColumnMultiple() const override { return 8; }
};

} // namespace

const RuntimeTarget *RuntimeTarget::lookup(StringRef name) {
  static const CpuTarget cpu;
  static const CudaTarget cuda;
  if (name == cpu.getName())
    return &cpu;
  if (name == cuda.getName())
    return &cuda;
  return nullptr;
}

StringRef RuntimeTarget::knownNames() { return "cpu, cuda"; }
