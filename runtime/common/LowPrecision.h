//===- LowPrecision.h - bf16 and f16 storage types ------------------------===//
//
// The CPU kernels store bf16 and f16 tensors and compute in f32: an element
// is widened when it is read and rounded (to nearest, ties to even) when it
// is written. BFloat16 and Half wrap the 16 bits with those two conversions
// so that a kernel written for a storage type T reads `float(x[i])` and
// writes `out[i] = T(v)`; for T = float both are no-ops. The MPI
// communicator sums bf16 and f16 buffers with them too.
//
// Everything here has internal linkage: runtime/cpu/Kernels.cpp is compiled
// three times (baseline, AVX2 + F16C, AVX-512), and the linker must never
// hand a baseline caller a vector build's copy of an inline function.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_COMMON_LOWPRECISION_H
#define STRATA_RUNTIME_COMMON_LOWPRECISION_H

#include "HostContext.h"
#include "strata/Runtime/StrataRuntime.h"

#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::cpu {
namespace {

/// bfloat16: the upper half of an f32 (8 exponent bits, 7 mantissa bits).
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  BFloat16(float f) : bits(round(f)) {}
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  /// Round to nearest even on the 16 dropped bits; NaNs stay (quiet) NaNs.
  /// Branch-free, so that loops of it vectorise.
  static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quietNan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quietNan : rounded);
  }
};
static_assert(sizeof(BFloat16) == 2);

/// IEEE binary16: F16C's conversion instructions where the build targets
/// them (the AVX2 kernels), the compiler's _Float16 (a library call per
/// element) elsewhere. Both round to nearest even.
struct Half {
  uint16_t bits;
  Half() = default;
#if defined(__F16C__)
  Half(float f) : bits(uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))) {}
  operator float() const { return _cvtsh_ss(bits); }
#else
  Half(float f) {
    _Float16 h = static_cast<_Float16>(f);
    std::memcpy(&bits, &h, sizeof(bits));
  }
  operator float() const {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof(h));
    return static_cast<float>(h);
  }
#endif
};
static_assert(sizeof(Half) == 2);

#if defined(__x86_64__)
/// Eight bf16 or f16 values as f32 lanes (exactly), and eight f32 lanes
/// rounded to them (to nearest even; bf16 as BFloat16::round, NaNs made
/// quiet), in AVX2 + F16C instructions: for the builds that target them
/// and for functions of baseline files that carry the same target (the
/// packed GEMM), whose callers check the processor first.
#define STRATA_AVX2_F16C __attribute__((target("avx2,fma,f16c"), always_inline))
STRATA_AVX2_F16C inline __m256 widen8(const Half *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
STRATA_AVX2_F16C inline __m256 widen8(const BFloat16 *p) {
  __m256i wide = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
/// BFloat16::round of eight lanes, each result in the low half of its lane.
STRATA_AVX2_F16C inline __m256i bf16Bits(__m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i odd =
      _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd),
      16);
  __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                         _mm256_set1_epi32(0x7f800000));
  __m256i quietNan =
      _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quietNan, nan);
}
STRATA_AVX2_F16C inline void narrow8(Half *p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
STRATA_AVX2_F16C inline void narrow8(BFloat16 *p, __m256 v) {
  __m256i bits = bf16Bits(v);
  // packus works within 128-bit lanes: the eight words in order.
  __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                   _mm256_castsi256_si128(packed));
}
#endif

#if defined(__AVX2__) && defined(__F16C__)
/// The conversions of `widen` and `narrow` below eight or sixteen elements
/// at a time, in the builds that target AVX2 + F16C. Each converts the
/// longest prefix of `n` that is a multiple of its width and returns its
/// length; the caller converts the rest one at a time.
template <typename T> int64_t widenVector(float *to, const T *from, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(to + i, widen8(from + i));
  return i;
}
inline int64_t narrowVector(Half *to, const float *from, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    narrow8(to + i, _mm256_loadu_ps(from + i));
  return i;
}
/// Sixteen at a time: one pack of two vectors' bits.
inline int64_t narrowVector(BFloat16 *to, const float *from, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i packed = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(bf16Bits(_mm256_loadu_ps(from + i)),
                            bf16Bits(_mm256_loadu_ps(from + i + 8))),
        0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(to + i), packed);
  }
  return i;
}
#endif

template <typename T>
constexpr bool kSixteenBit =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// `n` elements of storage type T as f32, and back (rounded): in vector
/// lanes where the build targets AVX2, else loops that vectorise for f32
/// and bf16 (f16 a conversion per element).
template <typename T> void widen(float *to, const T *from, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (kSixteenBit<T>)
    i = widenVector(to, from, n);
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j)
    to[j] = float(from[j]);
}
template <typename T> void narrow(T *to, const float *from, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (kSixteenBit<T>)
    i = narrowVector(to, from, n);
#endif
  if constexpr (std::is_same_v<T, BFloat16>) {
    // The bits directly: a loop that constructs T does not vectorise.
    auto *bits = reinterpret_cast<uint16_t *>(to);
#pragma omp simd
    for (int64_t j = i; j < n; ++j)
      bits[j] = BFloat16::round(from[j]);
    return;
  }
#pragma omp simd
  for (int64_t j = i; j < n; ++j)
    to[j] = T(from[j]);
}

/// Floating-point storage types compute in float, integers in themselves.
template <typename T>
using ComputeType = std::conditional_t<std::is_integral_v<T>, T, float>;

/// The ABI type code of storage type T (float, BFloat16 or Half).
template <typename T>
constexpr int64_t kTypeCode = std::is_same_v<T, float>      ? STRATA_RT_F32
                              : std::is_same_v<T, BFloat16> ? STRATA_RT_BF16
                                                            : STRATA_RT_F16;

/// Calls `f(T{})` with the storage type of `dtype` (f32, bf16 or f16);
/// false for another type.
template <typename F> bool withFloatType(int64_t dtype, F &&f) {
  return strata::rt::withStorageType<BFloat16, Half>(dtype, f);
}

} // namespace
} // namespace strata::cpu

#endif // STRATA_RUNTIME_COMMON_LOWPRECISION_H
