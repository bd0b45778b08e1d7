//===- GemmPlan.cpp - How a runtime GEMM maps onto cuBLASLt ---------------===//

#include "GemmPlan.h"

#include "strata/Runtime/StrataRuntime.h"

#include <algorithm>
#include <limits>

namespace strata::cuda {

GemmPlan planGemm(const GemmCall &call, bool tf32) {
  GemmPlan p;
  if (call.batch < 1 || call.m < 1 || call.n < 1 || call.k < 1) {
    p.error = "a GEMM of batch " + std::to_string(call.batch) +
              " and m, n, "
              "k = " +
              std::to_string(call.m) + ", " + std::to_string(call.n) + ", " +
              std::to_string(call.k) + " (each must be at least 1)";
    return p;
  }
  if (call.batch > std::numeric_limits<int32_t>::max()) {
    p.error = "a batch of " + std::to_string(call.batch) + " GEMMs";
    return p;
  }
  switch (call.dtype) {
  case STRATA_RT_F32:
    p.dataType = CUDA_R_32F;
    p.compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    break;
  case STRATA_RT_BF16:
    p.dataType = CUDA_R_16BF;
    break;
  case STRATA_RT_F16:
    p.dataType = CUDA_R_16F;
    break;
  default:
    p.error = std::string(strata_rt_element_name(call.dtype)) + " GEMMs";
    return p;
  }
  p.resultType = p.dataType;
  if (call.resultType != -1 && call.resultType != call.dtype) {
    if (call.resultType != STRATA_RT_F32 || call.bias ||
        call.act != STRATA_RT_ACT_NONE || call.aux || call.dact ||
        call.bgrad >= 0) {
      p.error = std::string("a GEMM of ") + strata_rt_element_name(call.dtype) +
                " operands with a " + strata_rt_element_name(call.resultType) +
                " result" +
                (call.resultType == STRATA_RT_F32 ? " and an epilogue" : "");
      return p;
    }
    p.resultType = CUDA_R_32F;
  }
  if (call.accumulate) // (no bias or activation: gemmArgumentsOk)
    p.beta = 1;
  if (call.dact || call.bgrad >= 0) {
    if (call.batch != 1 || call.bias || call.accumulate || call.aux ||
        (call.dact && call.bgrad >= 0) || call.bgrad > 1) {
      p.error = "a backward GEMM epilogue with this combination of "
                "arguments";
      return p;
    }
    if (call.dact) {
      // DGELU reads the GELU input with the result's leading dimension (a
      // multiple of 8) and is the tanh form's gradient; any other
      // activation's gradient runs after the GEMM.
      if (!call.unfused && call.act == STRATA_RT_ACT_GELU_TANH &&
          call.n % 8 == 0) {
        p.epilogue = CUBLASLT_EPILOGUE_DGELU;
        p.auxLd = call.n;
      } else {
        p.separateActGrad = call.act;
      }
    } else if (call.unfused) {
      p.separateBgrad = true;
    } else {
      // The ABI's A is cuBLASLt's B (the columns of column-major D are the
      // ABI's rows), the ABI's B cuBLASLt's A.
      p.epilogue =
          call.bgrad == 0 ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
    }
  } else if (call.aux) {
    if (call.batch != 1) {
      p.error = "a batch of GEMMs that keep their pre-activation";
      return p;
    }
    if (call.act == STRATA_RT_ACT_GELU_TANH && call.n % 8 == 0) {
      // GELU_AUX(_BIAS) writes the pre-activation (bias added), of the
      // result's type, beside the result with the result's leading
      // dimension, which cuBLASLt wants a multiple of 8.
      p.epilogue = call.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : CUBLASLT_EPILOGUE_GELU_AUX;
      p.auxLd = call.n;
    } else {
      // The GEMM writes the pre-activation into aux; the activation (any
      // strata_rt_unary code, NONE a copy) reads it into the result.
      p.epilogue =
          call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      p.separateAct = call.act;
      p.auxOnly = true;
    }
  } else {
    switch (call.act) {
    case STRATA_RT_ACT_NONE:
      p.epilogue =
          call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case STRATA_RT_ACT_RELU:
      // cuBLASLt's ReLU is a max, which turns NaN into 0; the runtime's
      // keeps NaN (PyTorch's relu), so it runs after the GEMM.
      p.epilogue =
          call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      p.separateAct = STRATA_RT_ACT_RELU;
      break;
    case STRATA_RT_ACT_GELU_TANH:
      // cuBLASLt's GELU is the tanh approximation.
      p.epilogue =
          call.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      break;
    case STRATA_RT_ACT_GELU_ERF:
      p.epilogue =
          call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      p.separateAct = STRATA_RT_ACT_GELU_ERF;
      break;
    default:
      p.error =
          "unknown GEMM epilogue activation code " + std::to_string(call.act);
      return p;
    }
  }

  // An activation after a bf16 / f16 GEMM would read the rounded
  // pre-activation; ReLU alone gives the same values either way.
  if (call.dtype != STRATA_RT_F32 && p.separateAct != STRATA_RT_ACT_NONE &&
      p.separateAct != STRATA_RT_ACT_RELU) {
    p.f32Sums = true;
    p.auxOnly = false;
    p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    p.resultType = CUDA_R_32F;
  }

  // Row-major C [m, n] is column-major C^T [n, m] = op(B)^T op(A)^T.
  auto batched = [&](Layout l, int64_t stride) {
    l.batchCount = int32_t(call.batch);
    l.batchStride = stride;
    return l;
  };
  // cuBLASLt's A: the ABI's B, stored [k, n] (or [n, k] transposed).
  p.opA = call.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.a = call.transB ? Layout{uint64_t(call.k), uint64_t(call.n), call.k}
                    : Layout{uint64_t(call.n), uint64_t(call.k), call.n};
  p.a = batched(p.a, call.bBatchStride);
  // cuBLASLt's B: the ABI's A, stored [m, k] (or [k, m] transposed).
  p.opB = call.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.b = call.transA ? Layout{uint64_t(call.m), uint64_t(call.k), call.m}
                    : Layout{uint64_t(call.k), uint64_t(call.m), call.k};
  p.b = batched(p.b, call.aBatchStride);
  p.c = batched(Layout{uint64_t(call.n), uint64_t(call.m), call.n},
                call.m * call.n);
  return p;
}

int64_t sumsChunkRows(const GemmCall &call, int64_t bytes) {
  const int64_t rows = call.batch * call.m;
  if (call.batch != 1 || call.transA)
    return rows;
  const int64_t fit =
      std::max<int64_t>(1, bytes / (call.n * int64_t(sizeof(float))));
  const int64_t chunks = (rows + fit - 1) / fit;
  return (rows + chunks - 1) / chunks;
}

size_t gemmWorkspaceBytes(int major) {
  return major >= 9 ? size_t(32) << 20 : size_t(4) << 20;
}

uint32_t pointerAlignment(const void *address) {
  auto bits = reinterpret_cast<uintptr_t>(address);
  uint32_t alignment = 256;
  while (alignment > 1 && bits % alignment != 0)
    alignment /= 2;
  return alignment;
}

GemmDescriptors::~GemmDescriptors() {
  if (op)
    cublasLtMatmulDescDestroy(op);
  for (cublasLtMatrixLayout_t l : {a, b, c})
    if (l)
      cublasLtMatrixLayoutDestroy(l);
}

std::string createDescriptors(const GemmPlan &plan, GemmDescriptors &d) {
  auto failed = [](cublasStatus_t status, const char *what) {
    return std::string(what) + ": " + cublasLtGetStatusString(status);
  };
  cublasStatus_t s = cublasLtMatmulDescCreate(&d.op, plan.compute, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS)
    return failed(s, "cublasLtMatmulDescCreate");
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto &value,
                 const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulDescSetAttribute(d.op, attribute, &value,
                                         sizeof(value));
    return s == CUBLAS_STATUS_SUCCESS ? std::string() : failed(s, what);
  };
  std::string error =
      set(CUBLASLT_MATMUL_DESC_TRANSA, plan.opA, "the transpose of A");
  if (error.empty())
    error = set(CUBLASLT_MATMUL_DESC_TRANSB, plan.opB, "the transpose of B");
  if (error.empty())
    error = set(CUBLASLT_MATMUL_DESC_EPILOGUE, plan.epilogue, "the epilogue");
  if (error.empty() && plan.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      plan.epilogue != CUBLASLT_EPILOGUE_RELU &&
      plan.epilogue != CUBLASLT_EPILOGUE_GELU &&
      plan.epilogue != CUBLASLT_EPILOGUE_GELU_AUX &&
      plan.epilogue != CUBLASLT_EPILOGUE_DGELU)
    error = set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, plan.dataType,
                "the bias type");
  if (error.empty() && plan.auxLd)
    error = set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, plan.auxLd,
                "the aux leading dimension");
  if (!error.empty())
    return error;
  auto layout = [&](cublasLtMatrixLayout_t &l, const Layout &shape,
                    cudaDataType_t type) {
    cublasStatus_t ls =
        cublasLtMatrixLayoutCreate(&l, type, shape.rows, shape.cols, shape.ld);
    if (ls == CUBLAS_STATUS_SUCCESS && shape.batchCount > 1) {
      ls = cublasLtMatrixLayoutSetAttribute(
          l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &shape.batchCount,
          sizeof(shape.batchCount));
      if (ls == CUBLAS_STATUS_SUCCESS)
        ls = cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &shape.batchStride,
            sizeof(shape.batchStride));
    }
    return ls == CUBLAS_STATUS_SUCCESS ? std::string()
                                       : failed(ls, "a matrix layout");
  };
  if (error = layout(d.a, plan.a, plan.dataType); !error.empty())
    return error;
  if (error = layout(d.b, plan.b, plan.dataType); !error.empty())
    return error;
  if (error = layout(d.c, plan.c, plan.resultType); !error.empty())
    return error;
  return "";
}

} // namespace strata::cuda
