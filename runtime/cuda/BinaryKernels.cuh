//===- BinaryKernels.cuh - Dense binary elementwise kernel ------*- CUDA
//-*-===//
//
// out = a (op) b over dense operands of one shape, 16 bytes a load and a
// store where all three are 16-byte aligned, and the arithmetic of every
// binary kernel (the CPU runtime's: integers in themselves, floating point
// in f32 rounded once to the storage type). Device code and its launch, in
// a header so that a host test runs them under an emulation of blocks
// (STRATA_CUDA_EMULATION; test/unit/KernelEmulationTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_BINARYKERNELS_CUH
#define STRATA_RUNTIME_CUDA_BINARYKERNELS_CUH

#include "Device.cuh"

#include <cstdint>
#include <type_traits>

namespace strata::cuda {

/// x (op) y in the compute type C (float, or the integer type itself).
template <typename C>
__device__ __forceinline__ C applyOp(int64_t op, C x, C y) {
  switch (op) {
  case STRATA_RT_ADD:
    return x + y;
  case STRATA_RT_SUB:
    return x - y;
  case STRATA_RT_MUL:
    return x * y;
  }
  return x / y; // STRATA_RT_DIV of floats (the host refused the rest)
}

/// x (op) y of storage type T: integers in themselves, floating point in
/// f32 rounded once to T.
template <typename T>
__device__ __forceinline__ T binaryOp(int64_t op, T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return T(applyOp(op, x, y));
  else
    return fromFloat<T>(applyOp(op, toFloat(x), toFloat(y)));
}

/// out = a (op) b where a, b and out are dense and of one shape; with
/// `vectors` (all three 16-byte aligned) 16 bytes a load and a store, the
/// elements past the last whole vector one at a time.
template <typename T>
__global__ void binaryFlatKernel(int64_t op, T *out, const T *a, const T *b,
                                 int64_t n, bool vectors) {
  constexpr int kVec = kVector<T>;
  int64_t done = 0;
  if (vectors) {
    const int64_t count = n / kVec;
    for (int64_t v = gridStart(); v < count; v += gridStride()) {
      const Vector16<T> x = reinterpret_cast<const Vector16<T> *>(a)[v],
                        y = reinterpret_cast<const Vector16<T> *>(b)[v];
      Vector16<T> z;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        z.e[e] = binaryOp(op, x.e[e], y.e[e]);
      reinterpret_cast<Vector16<T> *>(out)[v] = z;
    }
    done = count * kVec;
  }
  for (int64_t i = done + gridStart(); i < n; i += gridStride())
    out[i] = binaryOp(op, a[i], b[i]);
}

/// Launches binaryFlatKernel through `launch(kernel, grid, threads,
/// args...)` (RowKernels.cuh's launchers).
template <typename T, typename Launch>
bool launchBinaryFlat(Launch &&launch, int64_t op, T *out, const T *a,
                      const T *b, int64_t n) {
  auto at16 = [](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  const bool vectors = at16(out) && at16(a) && at16(b);
  return launch(binaryFlatKernel<T>,
                dim3(gridFor(vectors ? (n + kVector<T> - 1) / kVector<T> : n)),
                unsigned(kThreads), op, out, a, b, n, vectors);
}

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_BINARYKERNELS_CUH
