//===- Transpose.h - f32 matrix transpose ----------------------*- C++ -*-===//
//
// The transpose of a GEMM operand into scratch (Gemm.cpp), in AVX registers
// where the processor has AVX2, chosen at run time (the runtime is built
// for baseline x86-64); fused attention packs its operands with the same
// 8 x 8 tiles (Kernels.cpp). The functions have internal linkage: the
// vector builds of Kernels.cpp compile them with wider instructions than
// the baseline files that also include them, and one of those copies must
// not stand in for another at link time.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_TRANSPOSE_H
#define STRATA_RUNTIME_CPU_TRANSPOSE_H

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace strata::cpu {

/// The elements of src's rows r0 .. r1 - 1 (of `cols`) into dst's columns
/// r0 .. r1 - 1 (rows of `rows`), one at a time.
static inline void transposeRows(float *dst, const float *src, int64_t rows,
                                 int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[c * rows + r] = src[r * cols + c];
}

/// dst's 8 rows (`ldd` floats apart) of 8 = src's 8 rows (`lds` apart) of
/// 8 transposed, in AVX registers (inlined into its AVX2 callers' loops).
__attribute__((target("avx2,fma"), always_inline)) static inline void
transpose8x8(float *dst, int64_t ldd, const float *src, int64_t lds) {
  __m256 v[8], u[8];
  for (int j = 0; j < 8; ++j)
    v[j] = _mm256_loadu_ps(src + j * lds);
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
    _mm256_storeu_ps(dst + j * ldd,
                     _mm256_permute2f128_ps(v[j], v[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ldd,
                     _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
  }
}

/// dst [cols][rows] = src [rows][cols] transposed, in 8 x 8 tiles of AVX
/// registers: strips of 16 rows of src, each tile pair's stores a whole
/// cache line of a row of dst. On one thread of an AVX2-only AMD EPYC a
/// [1024][1024] source took 1.3 ms, against 3.2 for the scalar transpose in
/// 32 x 32 blocks it replaces ([1024][256]: 0.14 against 0.19; the GPT
/// h256 step's weight gradients transpose about 8 ms instead of 17).
__attribute__((target("avx2,fma"))) static inline void
transposeAvx2(float *dst, const float *src, int64_t rows, int64_t cols) {
  const int64_t strips = rows / 16;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t r0 = 16 * s;
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8)
      for (int64_t half = 0; half < 16; half += 8)
        transpose8x8(dst + c0 * rows + r0 + half, rows,
                     src + (r0 + half) * cols + c0, cols);
    for (int64_t r = r0; r < r0 + 16; ++r)
      for (int64_t c = c0; c < cols; ++c)
        dst[c * rows + r] = src[r * cols + c];
  }
  transposeRows(dst, src, rows, cols, strips * 16, rows);
}

/// dst [cols][rows] = src [rows][cols] transposed.
static inline void transposeInto(float *dst, const float *src, int64_t rows,
                                 int64_t cols) {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2)
    return transposeAvx2(dst, src, rows, cols);
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (int64_t r0 = 0; r0 < rows; r0 += 32)
    transposeRows(dst, src, rows, cols, r0, std::min(rows, r0 + 32));
}

} // namespace strata::cpu

#endif // STRATA_RUNTIME_CPU_TRANSPOSE_H
