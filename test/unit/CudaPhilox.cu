//===- CudaPhilox.cu - The RNG as nvcc compiles it ------------------------===//
//
// runtime/common/StrataRandom.h compiled by nvcc: the __host__ __device__
// functions the CUDA kernels call, evaluated on the host for
// CudaRuntimeTest to compare with the host compiler's build, and a kernel
// that draws a dropout mask (built for the device, run where one exists).
//
//===----------------------------------------------------------------------===//

#include "../../runtime/common/StrataRandom.h"

#include <cstdint>

__global__ void strataDropoutMaskKernel(uint64_t seed, int64_t key, double prob,
                                        int64_t n, uint8_t *keep) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    keep[i] = strata::rng::dropoutKeep(seed, key, i, prob);
}

extern "C" void strataPhiloxFromNvcc(uint64_t seed, int64_t key,
                                     int64_t microBatch, int64_t index,
                                     uint32_t out[4]) {
  auto r = strata::rng::draw(seed, key, microBatch, index);
  for (int i = 0; i < 4; ++i)
    out[i] = r[i];
}

extern "C" int strataDropoutKeepFromNvcc(uint64_t seed, int64_t key,
                                         int64_t index, double prob) {
  return strata::rng::dropoutKeep(seed, key, index, prob);
}
