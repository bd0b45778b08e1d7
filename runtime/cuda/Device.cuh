//===- Device.cuh - What the CUDA kernels share -----------------*- CUDA
//-*-===//
//
// Element types on the device (f32, bf16, f16 stored, f32 computed), the
// host-side dispatch on the ABI's type codes, launch shapes, block
// reductions in a fixed order (results do not depend on timing: no float
// atomics anywhere in the runtime), and the launch check.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_DEVICE_CUH
#define STRATA_RUNTIME_CUDA_DEVICE_CUH

#include "Context.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace strata::cuda {

using BFloat16 = __nv_bfloat16;
using Half = __half;

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(BFloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float toFloat(Half x) { return __half2float(x); }

/// f32 to the storage type, rounded to nearest even (as the CPU runtime).
template <typename T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ BFloat16 fromFloat<BFloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ Half fromFloat<Half>(float x) {
  return __float2half_rn(x);
}

/// Elements of T in a 16-byte load.
template <typename T> constexpr int kVector = 16 / sizeof(T);
/// 16 bytes of elements, loaded and stored as one vector (an aggregate of
/// T: reading T's through it is defined, where a uint4 read as T's is not).
template <typename T> struct alignas(16) Vector16 { T e[kVector<T>]; };

/// Calls `f(T{})` with the storage type of a floating-point ABI type code;
/// returns false for other codes.
template <typename F> bool withFloatType(int64_t dtype, F &&f) {
  return strata::rt::withStorageType<BFloat16, Half>(dtype, f);
}

/// withFloatType for a kernel whose tensors all share one type; records the
/// failure otherwise (mixed types, or a type without kernels).
template <typename F>
bool withSameFloatType(StrataRtContext *ctx, int64_t site, const char *kernel,
                       std::initializer_list<int64_t> types, F &&f) {
  return strata::rt::withSameStorageType<BFloat16, Half>(ctx, site, kernel,
                                                         types, f);
}

/// A kernel's static shared memory. The host emulation of the kernels
/// (STRATA_CUDA_EMULATION, test/unit/CudaEmulation.h) runs one block at a
/// time: one array then serves every block.
#if defined(STRATA_CUDA_EMULATION)
#define STRATA_SHARED static
#else
#define STRATA_SHARED __shared__
#endif

/// Threads per block of the elementwise kernels.
constexpr int kThreads = 256;
/// The most threads a block of the runtime's kernels has. A kernel
/// launched with that many is declared __launch_bounds__(kMaxBlockThreads),
/// so that ptxas keeps it within 64 registers a thread (a launch of 1024
/// threads of a kernel that uses more fails).
constexpr int kMaxBlockThreads = 1024;
/// Threads per block of a kernel that reduces rows of `n` elements.
inline int rowThreads(int64_t n) {
  return n <= 256 ? 128 : n < 8192 ? 256 : kMaxBlockThreads;
}
/// `bytes` rounded up to a multiple of 256 (offsets into scratch).
inline size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
/// Blocks of a grid-stride loop over `n` elements.
inline unsigned gridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 16)));
}

/// Whether the launch just issued on the compute stream succeeded (a
/// configuration error); records the failure otherwise. Faults inside a
/// kernel surface at the step's end (strata_rt_step_end synchronises).
inline bool launched(StrataRtContext *ctx, int64_t site, const char *kernel) {
  return ctx->check(site, cudaGetLastError(), kernel);
}

#if defined(__CUDACC__) // (nvcc: launches)
/// The launcher of a launch sequence (RowKernels.cuh, BinaryKernels.cuh):
/// `launch(kernel, grid, threads, args...)` on the compute stream, each
/// launch checked; whether it succeeded.
inline auto onStream(StrataRtContext *ctx, int64_t site, const char *kernel) {
  return [=](auto function, dim3 grid, unsigned threads, auto... args) {
    function<<<grid, threads, 0, ctx->compute>>>(args...);
    return launched(ctx, site, kernel);
  };
}
#endif

/// The first index of this thread in a grid-stride loop, and the stride.
__device__ __forceinline__ int64_t gridStart() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridStride() {
  return int64_t(gridDim.x) * blockDim.x;
}

/// `v` combined by `op` over the warp by shuffles, in a fixed order; every
/// lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warpReduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// `v` combined by `op` over the block, in a fixed order (warp shuffles,
/// then the warps' partials in order); every thread gets the result.
/// `shared` holds at least 32 values; blockDim.x is a multiple of 32;
/// `identity` stands for the warps beyond the block.
template <typename T, typename Op>
__device__ __forceinline__ T blockReduce(T v, T *shared, T identity, Op op) {
  v = warpReduce(v, op);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  int warps = blockDim.x >> 5;
  return warpReduce(lane < warps ? shared[lane] : identity, op);
}

/// Sum of `v` (float or double) over the block.
template <typename T> __device__ __forceinline__ T blockSum(T v, T *shared) {
  return blockReduce(v, shared, T(0), [](T x, T y) { return x + y; });
}

/// Maximum of `v` over the block, as blockSum.
__device__ __forceinline__ float blockMax(float v, float *shared) {
  return blockReduce(v, shared, -INFINITY,
                     [](float x, float y) { return fmaxf(x, y); });
}

/// Shape and strides of strata_rt_binary / strided_copy / reduce passed by
/// value (the ABI's `desc` is host memory).
constexpr int kMaxRank = 8;
struct Desc {
  int64_t v[3 * kMaxRank + 1];
};

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_DEVICE_CUH
