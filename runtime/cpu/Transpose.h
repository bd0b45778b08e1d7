//===- Transpose.h - 8 x 8 transposes in AVX registers ---------*- C++ -*-===//
//
// The packed GEMM (PackedGemm.cpp) transposes a transposed operand's panels
// with these as it packs them; fused attention packs its operands with
// them too (Kernels.cpp). The functions have internal linkage: the vector
// builds of Kernels.cpp compile them with wider instructions than the
// baseline files that also include them, and one of those copies must not
// stand in for another at link time.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_TRANSPOSE_H
#define STRATA_RUNTIME_CPU_TRANSPOSE_H

#include <immintrin.h>

#include <cstdint>

namespace strata::cpu {

/// v[i] (8 lanes each) transposed in place: lane j of v[i] becomes lane i
/// of v[j].
__attribute__((target("avx2,fma"), always_inline)) static inline void
transpose8(__m256 v[8]) {
  __m256 u[8];
  for (int j = 0; j < 8; j += 2) {
    u[j] = _mm256_unpacklo_ps(v[j], v[j + 1]);
    u[j + 1] = _mm256_unpackhi_ps(v[j], v[j + 1]);
  }
  // (rows j, j+1 interleaved; then pairs of pairs)
  for (int j = 0; j < 8; j += 4) {
    v[j] = _mm256_shuffle_ps(u[j], u[j + 2], 0x44);
    v[j + 1] = _mm256_shuffle_ps(u[j], u[j + 2], 0xEE);
    v[j + 2] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0x44);
    v[j + 3] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0xEE);
  }
  // v[0..3]: columns 0, 1, 2, 3 (and 4..7 in the high lanes) of rows 0..3;
  // v[4..7] those of rows 4..7.
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x20);
    u[j + 4] = _mm256_permute2f128_ps(v[j], v[j + 4], 0x31);
  }
  for (int j = 0; j < 8; ++j)
    v[j] = u[j];
}

/// dst's 8 rows (`ldd` floats apart) of 8 = src's 8 rows (`lds` apart) of
/// 8 transposed, in AVX registers (inlined into its AVX2 callers' loops).
__attribute__((target("avx2,fma"), always_inline)) static inline void
transpose8x8(float *dst, int64_t ldd, const float *src, int64_t lds) {
  __m256 v[8];
  for (int j = 0; j < 8; ++j)
    v[j] = _mm256_loadu_ps(src + j * lds);
  transpose8(v);
  for (int j = 0; j < 8; ++j)
    _mm256_storeu_ps(dst + j * ldd, v[j]);
}

} // namespace strata::cpu

#endif // STRATA_RUNTIME_CPU_TRANSPOSE_H
