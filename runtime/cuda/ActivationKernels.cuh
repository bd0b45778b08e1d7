//===- ActivationKernels.cuh - Activations and the f32 GEMM epilogue *- CUDA
//-*-===//
//
// The activations of strata_rt_unary and strata_rt_act_grad (the CPU
// runtime's formulas, runtime/common/Activations.h), and the epilogue of a
// bf16 / f16 GEMM whose activation cuBLASLt cannot apply: the GEMM keeps
// its f32 sums and this kernel adds the bias and applies the activation to
// them, rounding the pre-activation and the result once each, as the CPU
// runtime and cuBLASLt's own epilogues do (an activation after a bf16 GEMM
// would read the rounded pre-activation). Device code and its launch, in a
// header so that a host test runs them under an emulation of blocks
// (STRATA_CUDA_EMULATION; test/unit/KernelEmulationTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_ACTIVATIONKERNELS_CUH
#define STRATA_RUNTIME_CUDA_ACTIVATIONKERNELS_CUH

#include "Device.cuh"

#include "../common/Activations.h"

#include <cstdint>

namespace strata::cuda {

/// f(x) of strata_rt_unary (a code the host accepted).
__device__ __forceinline__ float unaryOp(int64_t op, float x, float alpha) {
  using namespace strata::act;
  switch (op) {
  case STRATA_RT_UNARY_SCALE:
    return x * alpha;
  case STRATA_RT_ACT_RELU: // NaN stays NaN, as on the CPU
    return x > 0.0f || x != x ? x : 0.0f;
  case STRATA_RT_ACT_GELU_TANH:
    return geluTanh(x);
  case STRATA_RT_ACT_GELU_ERF:
    return geluErf(x);
  case STRATA_RT_ACT_SILU:
    return silu(x);
  case STRATA_RT_UNARY_RSQRT:
    return 1.0f / sqrtf(x);
  case STRATA_RT_UNARY_TANH:
    return preciseTanh(x);
  }
  return x; // STRATA_RT_ACT_NONE
}

/// dy * f'(x) of strata_rt_act_grad (a code the host accepted); for ReLU
/// `x` is the forward output.
__device__ __forceinline__ float actGradOp(int64_t act, float x, float dy) {
  using namespace strata::act;
  switch (act) {
  case STRATA_RT_ACT_RELU:
    return x > 0.0f ? dy : 0.0f;
  case STRATA_RT_ACT_GELU_TANH:
    return dy * geluTanhGrad(x);
  case STRATA_RT_ACT_GELU_ERF:
    return dy * geluErfGrad(x);
  case STRATA_RT_ACT_SILU:
    return siluGrad(x, dy);
  }
  return dy; // STRATA_RT_ACT_NONE
}

/// For `rows` rows of `n` f32 sums: pre = sums + bias (by column; no bias
/// when null), aux = pre (when not null) and out = act(pre), each rounded
/// once to T. A block walks whole rows, its threads the columns.
template <typename T>
__global__ void sumsEpilogueKernel(T *out, T *aux, const float *sums,
                                   const T *bias, int64_t rows, int64_t n,
                                   int64_t act) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t i = r * n + j;
      const float pre = bias ? sums[i] + toFloat(bias[j]) : sums[i];
      if (aux)
        aux[i] = fromFloat<T>(pre);
      out[i] = fromFloat<T>(unaryOp(act, pre, 0.0f));
    }
}

/// Launches sumsEpilogueKernel through `launch(kernel, grid, threads,
/// args...)` (RowKernels.cuh's launchers).
template <typename T, typename Launch>
bool launchSumsEpilogue(Launch &&launch, T *out, T *aux, const float *sums,
                        const T *bias, int64_t rows, int64_t n, int64_t act) {
  return launch(sumsEpilogueKernel<T>, dim3(gridFor(rows, 1)),
                unsigned(kThreads), out, aux, sums, bias, rows, n, act);
}

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_ACTIVATIONKERNELS_CUH
