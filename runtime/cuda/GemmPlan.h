//===- GemmPlan.h - How a runtime GEMM maps onto cuBLASLt -------*- C++ -*-===//
//
// The host-side decisions of strata_rt_gemm, apart from any device so that
// they are unit-tested on machines without a GPU: the row-major ABI call as
// a column-major cuBLASLt problem (C^T = op(B)^T op(A)^T: cuBLASLt's first
// operand is the ABI's B), the epilogue for the bias and the activation,
// the element and compute types, the workspace, pointer alignment, and the
// cuBLASLt descriptors (whose creation needs no device).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_GEMMPLAN_H
#define STRATA_RUNTIME_CUDA_GEMMPLAN_H

#include <cublasLt.h>

#include <cstdint>
#include <string>

namespace strata::cuda {

/// The arguments of one strata_rt_gemm call that decide its plan.
struct GemmCall {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t aBatchStride = 0, bBatchStride = 0;
  bool transA = false, transB = false;
  /// One ABI element type for A, B, C and the bias (STRATA_RT_F32 ...).
  int64_t dtype = 0;
  bool bias = false;
  int64_t act = 0;
  bool accumulate = false;
  /// The pre-activation is written too (strata_rt_gemm_aux): to an aux
  /// matrix with the result's leading dimension.
  bool aux = false;
  /// The backward epilogues. `dact`: the result is multiplied by the
  /// gradient of activation `act` at the aux matrix (strata_rt_gemm_dact).
  /// `bgrad`: the bias gradient of the ABI's A (0) or B (1) is written too
  /// (strata_rt_gemm_bgrad); -1: none.
  bool dact = false;
  int64_t bgrad = -1;
  /// Without the backward epilogues (their kernels run after the GEMM):
  /// when cuBLASLt has no algorithm for them.
  bool unfused = false;
  /// The result's type where it is not `dtype`: STRATA_RT_F32 for bf16 or
  /// f16 operands whose f32 sums are kept (fused attention's scores and
  /// gradients); no bias, activation or epilogue then. -1: `dtype`.
  int64_t resultType = -1;
};

/// A column-major matrix as cuBLASLt reads it.
struct Layout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batchCount = 1;
  int64_t batchStride = 0;
};

struct GemmPlan {
  /// Why the call cannot run (empty when it can).
  std::string error;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  /// An activation the epilogue cannot apply (GELU with erf; any but GELU
  /// tanh when the pre-activation is kept): run as strata_rt_unary after
  /// the GEMM (0: none); with `auxOnly` the GEMM writes the aux matrix and
  /// the activation (any code, NONE a copy) always runs; with `f32Sums`
  /// the sums' epilogue kernel applies it.
  int64_t separateAct = 0;
  bool auxOnly = false;
  /// bf16 / f16 with a `separateAct` that does not commute with rounding
  /// (any but NONE and ReLU): the GEMM writes its f32 sums into the
  /// runtime's scratch instead (this plan's types and epilogue are then
  /// unused: the product is planned as a call with an f32 result and no
  /// epilogue), and one kernel adds the bias, writes aux and applies the
  /// activation to the unrounded pre-activation, as the CPU runtime does.
  bool f32Sums = false;
  /// A backward epilogue the GEMM does not apply: strata_rt_act_grad of
  /// this activation in place on the result (0: none), and the bias
  /// gradient by strata_rt_reduce.
  int64_t separateActGrad = 0;
  bool separateBgrad = false;
  /// The aux matrix's leading dimension (GELU_AUX and DGELU epilogues),
  /// else 0.
  int64_t auxLd = 0;
  /// cuBLASLt's A is the ABI's B and its B the ABI's A.
  cublasOperation_t opA = CUBLAS_OP_N, opB = CUBLAS_OP_N;
  Layout a, b, c;
  cudaDataType_t dataType = CUDA_R_32F;
  /// C's and D's type: dataType, or CUDA_R_32F (GemmCall::resultType).
  cudaDataType_t resultType = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float beta = 0;
};

/// The plan of `call`; `tf32` lets f32 GEMMs use TF32 tensor cores (off
/// by default: true f32 results, as the CPU runtime's).
GemmPlan planGemm(const GemmCall &call, bool tf32);

/// The rows of each product a plan's f32Sums runs: all of them, or where
/// op(A)'s rows lie one after another (one matrix, A not transposed) as
/// many as keep the f32 sums within `bytes` (at least one row), in chunks
/// of one size but the last.
int64_t sumsChunkRows(const GemmCall &call, int64_t bytes);

/// cuBLASLt's workspace for a device of compute capability `major`: 32 MiB
/// on Hopper and later, 4 MiB before.
size_t gemmWorkspaceBytes(int major);

/// The largest power of two, up to 256, that divides `address` (what the
/// heuristic is told of each operand's alignment).
uint32_t pointerAlignment(const void *address);

/// The descriptors of a plan (created without a device).
struct GemmDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  GemmDescriptors() = default;
  GemmDescriptors(const GemmDescriptors &) = delete;
  GemmDescriptors &operator=(const GemmDescriptors &) = delete;
  ~GemmDescriptors();
};
/// Fills `d` for `plan`; the message of the first cuBLASLt call that fails,
/// or the empty string. The bias pointer is set per call.
std::string createDescriptors(const GemmPlan &plan, GemmDescriptors &d);

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_GEMMPLAN_H
