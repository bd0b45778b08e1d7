//===- DotBf16.cpp - Small bf16 GEMMs with AVX512-BF16 --------------------===//
//
// Both operands are repacked as pairs of bf16 along the inner dimension
// (one 32-bit word per pair, as VDPBF16PS reads them): A in rows of MR, B in
// panels of NR columns, zero-padded, so that the micro-kernel always runs
// whole MR x NR tiles: MR rows x two 16-lane vectors of f32 sums, one
// broadcast pair of A and two vectors of B per step.
//
//===----------------------------------------------------------------------===//

#include "DotBf16.h"

#include "../common/LowPrecision.h"

#include <algorithm>
#include <cstring>
#include <immintrin.h>

namespace strata::cpu {
namespace {

constexpr int64_t kMR = 8;  // rows of a tile
constexpr int64_t kNR = 32; // columns of a tile: two vectors of 16 floats

int64_t roundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

uint32_t bitsOf(uint16_t x) { return x; }
uint32_t bitsOf(float x) { return BFloat16::round(x); }

/// n (even) elements of a row as n / 2 pair words: bf16 copied, f32
/// rounded to nearest even by VCVTNE2PS2BF16 (which, like VDPBF16PS
/// reading them, takes denormals as zero).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void
rowPairs(uint32_t *dst, const uint16_t *src, int64_t n) {
  std::memcpy(dst, src, n * sizeof(uint16_t));
}
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void
rowPairs(uint32_t *dst, const float *src, int64_t n) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    _mm512_storeu_si512(
        dst + j / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + j + 16),
                                                  _mm512_loadu_ps(src + j)));
  for (; j < n; j += 2)
    dst[j / 2] = bitsOf(src[j]) | bitsOf(src[j + 1]) << 16;
}

/// 16 words at base[index[l]] (the masked form: GCC warns that the plain
/// one's pass-through operand is uninitialised).
__attribute__((target("avx512f"))) __m512i gather16(const void *base,
                                                    __m512i index) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xffff),
                                     index, base, 4);
}

/// r[i] (16 words each) transposed in place: word j of r[i] becomes word i
/// of r[j]. Unpacks within 128-bit lanes, then lane shuffles.
__attribute__((target("avx512f"))) void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);
    r[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xDD);
  }
}

/// dst[c * ldd + r] = src[r * lds + c] for a 16 x 16 block of words.
__attribute__((target("avx512f"))) void
transposeBlock(uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_loadu_si512(src + i * lds);
  transpose16(r);
  for (int i = 0; i < 16; ++i)
    _mm512_storeu_si512(dst + i * ldd, r[i]);
}

/// 16-bit halves of a pair word from two rows, 32 columns at a time: bf16
/// as they are, f32 rounded.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) __m512i
halves(const uint16_t *src) {
  return _mm512_loadu_si512(src);
}
__attribute__((target("avx512f,avx512bw,avx512bf16"))) __m512i
halves(const float *src) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16),
                                      _mm512_loadu_ps(src));
}

/// Words (lo[j], hi[j]) for j < n, lo and hi two rows of bf16 or f32.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void
interleave(uint32_t *dst, const T *lo, const T *hi, int64_t n) {
  // unpacklo/hi_epi16 interleave within 128-bit lanes; the permutes put
  // the words back in column order.
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512i l = halves(lo + j), h = halves(hi + j);
    __m512i a = _mm512_unpacklo_epi16(l, h), b = _mm512_unpackhi_epi16(l, h);
    _mm512_storeu_si512(dst + j, _mm512_permutex2var_epi64(a, first, b));
    _mm512_storeu_si512(dst + j + 16, _mm512_permutex2var_epi64(a, second, b));
  }
  for (; j < n; ++j)
    dst[j] = bitsOf(lo[j]) | bitsOf(hi[j]) << 16;
}

/// A as [roundUp(m, kMR)][k2] words: (i, q) holds A(i, 2q) in its low half
/// and A(i, 2q + 1) in its high half; zero outside m x k.
template <typename TA>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void
packA(uint32_t *dst, const TA *a, int64_t ars, int64_t acs, int64_t m,
      int64_t k) {
  int64_t k2 = (k + 1) / 2, mp = roundUp(m, kMR);
  std::fill(dst + m * k2, dst + mp * k2, 0u);
  if (acs == 1) { // rows of pairs
    for (int64_t i = 0; i < m; ++i) {
      rowPairs(dst + i * k2, a + i * ars, k - k % 2);
      if (k % 2)
        dst[i * k2 + k2 - 1] = bitsOf(a[i * ars + k - 1]);
    }
    return;
  }
  if (ars == 1 && m >= 16) {
    // A transposed: a pair is two source rows; their columns interleave
    // into words, which a gather then transposes, 16 at a time.
    uint32_t *t = dst + mp * k2; // k2 x m words (dotBf16WorkFloats)
    for (int64_t q = 0; q < k / 2; ++q)
      interleave(t + q * m, a + 2 * q * acs, a + (2 * q + 1) * acs, m);
    if (k % 2)
      for (int64_t i = 0; i < m; ++i)
        t[(k2 - 1) * m + i] = bitsOf(a[(k - 1) * acs + i]);
    const __m512i stride = _mm512_mullo_epi32(
        _mm512_set1_epi32(int(m)),
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) {
      int64_t q = 0;
      for (; q + 16 <= k2; q += 16)
        transposeBlock(dst + i * k2 + q, k2, t + q * m + i, m);
      for (int64_t c = i; c < i + 16; ++c)
        for (int64_t r = q; r < k2; ++r)
          dst[c * k2 + r] = t[r * m + c];
    }
    for (; i < m; ++i) {
      int64_t q = 0;
      for (; q + 16 <= k2; q += 16)
        _mm512_storeu_si512(dst + i * k2 + q, gather16(t + q * m + i, stride));
      for (; q < k2; ++q)
        dst[i * k2 + q] = t[q * m + i];
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    uint32_t *row = dst + i * k2;
    const TA *ai = a + i * ars;
    for (int64_t q = 0; q < k / 2; ++q)
      row[q] = bitsOf(ai[2 * q * acs]) | bitsOf(ai[(2 * q + 1) * acs]) << 16;
    if (k % 2)
      row[k2 - 1] = bitsOf(ai[(k - 1) * acs]);
  }
}

/// B as panels of kNR columns, [roundUp(n, kNR) / kNR][k2][kNR] words: (q, j)
/// of a panel holds B(2q, j) low and B(2q + 1, j) high; zero outside k x n.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void
packB(uint32_t *dst, const uint16_t *b, int64_t brs, int64_t bcs, int64_t k,
      int64_t n) {
  int64_t k2 = (k + 1) / 2;
  // B transposed with its pairs adjacent (k even, 4-byte aligned rows): a
  // gather of 16 words per row of a panel.
  bool gather = brs == 1 && k % 2 == 0 && bcs % 2 == 0 &&
                reinterpret_cast<uintptr_t>(b) % 4 == 0;
  const auto *words = reinterpret_cast<const int *>(b);
  const __m512i stride = _mm512_mullo_epi32(
      _mm512_set1_epi32(int(bcs / 2)),
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  for (int64_t j0 = 0; j0 < n; j0 += kNR) {
    uint32_t *panel = dst + j0 * k2;
    int64_t w = std::min(kNR, n - j0);
    // Whole 16 x 16 blocks of pair words (16 columns, 16 pairs) by
    // transposes; the rest below (gathers of the later pairs, the columns
    // past the last 16 one at a time).
    int64_t q0 = 0;
    if (gather)
      for (; q0 + 16 <= k2; q0 += 16)
        for (int64_t j = 0; j + 16 <= w; j += 16)
          transposeBlock(panel + q0 * kNR + j, kNR,
                         reinterpret_cast<const uint32_t *>(words) +
                             (j0 + j) * (bcs / 2) + q0,
                         bcs / 2);
    for (int64_t q = 0; q < k2; ++q) {
      uint32_t *out = panel + q * kNR;
      const uint16_t *lo = b + 2 * q * brs + j0 * bcs;
      int64_t j = q < q0 ? w / 16 * 16 : 0;
      if (gather) {
        for (; j + 16 <= w; j += 16)
          _mm512_storeu_si512(
              out + j, gather16(words + (j0 + j) * (bcs / 2) + q, stride));
      } else if (bcs == 1 && 2 * q + 1 < k) {
        interleave(out, lo, lo + brs, w);
        j = w;
      }
      if (2 * q + 1 < k) {
        const uint16_t *hi = lo + brs;
        for (; j < w; ++j)
          out[j] = uint32_t(lo[j * bcs]) | uint32_t(hi[j * bcs]) << 16;
      } else {
        for (; j < w; ++j)
          out[j] = lo[j * bcs];
      }
      std::fill(out + w, out + kNR, 0u);
    }
  }
}

/// One kMR x kNR tile of C: alpha * (A tile . B panel) (+ C), over the
/// pairs [q0, q1). `ap`: kMR rows of k2 words; `bp`: a panel of kNR words
/// per pair; `rows` x `cols` of the tile are stored.
__attribute__((target("avx512f,avx512bf16"))) void
tile(int64_t k2, int64_t q0, int64_t q1, const uint32_t *ap, const uint32_t *bp,
     float *c, int64_t ldc, int64_t rows, int64_t cols, float alpha,
     bool accumulate) {
  __m512 sum[kMR][2];
  for (int i = 0; i < kMR; ++i)
    sum[i][0] = sum[i][1] = _mm512_setzero_ps();
  for (int64_t q = q0; q < q1; ++q) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * kNR);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * kNR + 16);
    for (int i = 0; i < kMR; ++i) {
      __m512bh av = (__m512bh)_mm512_set1_epi32(int(ap[i * k2 + q]));
      sum[i][0] = _mm512_dpbf16_ps(sum[i][0], av, b0);
      sum[i][1] = _mm512_dpbf16_ps(sum[i][1], av, b1);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < rows; ++i)
    for (int h = 0; h < 2; ++h) {
      int64_t left = std::min<int64_t>(16, cols - 16 * h);
      if (left <= 0)
        break;
      __mmask16 mask = __mmask16((1u << left) - 1);
      float *ci = c + i * ldc + 16 * h;
      __m512 r = _mm512_mul_ps(scale, sum[i][h]);
      if (accumulate)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, ci));
      _mm512_mask_storeu_ps(ci, mask, r);
    }
}

/// The tiles of C over A packed by packA and B packed by packB for `pk`
/// rows (pk2 pairs a panel), of which the first k are read.
/// With `causal`, the tiles and pairs it makes known to be zero or
/// unneeded are skipped.
void tiles(int64_t m, int64_t n, int64_t k, int64_t pk, float alpha,
           const uint32_t *ap, const uint32_t *bp, float *c, int64_t ldc,
           bool accumulate, Causal causal) {
  int64_t k2 = (k + 1) / 2, pk2 = (pk + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += kNR)
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      int64_t rows = std::min(kMR, m - i0), cols = std::min(kNR, n - j0);
      // The pairs that hold the terms to sum.
      auto [first, last] = causal.terms(i0, rows, j0, k);
      int64_t q0 = std::min(first / 2, k2), q1 = (last + 1) / 2;
      float *ct = c + i0 * ldc + j0;
      if (q0 >= q1) {
        if (!accumulate)
          for (int64_t i = 0; i < rows; ++i)
            std::fill_n(ct + i * ldc, cols, 0.0f);
        continue;
      }
      tile(k2, q0, q1, ap + i0 * k2, bp + j0 * pk2, ct, ldc, rows, cols, alpha,
           accumulate);
    }
}

/// C over A packed here and B packed by packB for `packedK` rows.
template <typename TA>
void dotPacked(int64_t m, int64_t n, int64_t k, float alpha, const TA *a,
               int64_t ars, int64_t acs, const float *packedB, int64_t packedK,
               float *c, int64_t ldc, bool accumulate, float *work,
               Causal causal) {
  auto *ap = reinterpret_cast<uint32_t *>(work);
  packA(ap, a, ars, acs, m, k);
  tiles(m, n, k, packedK, alpha, ap,
        reinterpret_cast<const uint32_t *>(packedB), c, ldc, accumulate,
        causal);
}

/// B packed after A's room in `work`, then dotPacked.
template <typename TA>
void dot(int64_t m, int64_t n, int64_t k, float alpha, const TA *a, int64_t ars,
         int64_t acs, const uint16_t *b, int64_t brs, int64_t bcs, float *c,
         int64_t ldc, bool accumulate, float *work, Causal causal) {
  uint32_t *bp = reinterpret_cast<uint32_t *>(work) +
                 roundUp((roundUp(m, kMR) + m) * ((k + 1) / 2), 16);
  packB(bp, b, brs, bcs, k, n);
  dotPacked(m, n, k, alpha, a, ars, acs, reinterpret_cast<const float *>(bp), k,
            c, ldc, accumulate, work, causal);
}

} // namespace

bool hasBf16DotProducts() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

int64_t dotBf16WorkFloats(int64_t m, int64_t n, int64_t k) {
  // Packed A (with room after it for packA's transpose), packed B.
  int64_t k2 = (k + 1) / 2;
  return roundUp((roundUp(m, kMR) + m) * k2, 16) + roundUp(n, kNR) * k2;
}

int64_t packedBf16BFloats(int64_t k, int64_t n) {
  return roundUp(n, kNR) * ((k + 1) / 2);
}

void packBf16B(float *dst, const uint16_t *b, int64_t brs, int64_t bcs,
               int64_t k, int64_t n) {
  packB(reinterpret_cast<uint32_t *>(dst), b, brs, bcs, k, n);
}

void dotBf16Packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t ars, int64_t acs, const float *packedB,
                   int64_t packedK, float *c, int64_t ldc, bool accumulate,
                   float *work, Causal causal) {
  dotPacked(m, n, k, alpha, a, ars, acs, packedB, packedK, c, ldc, accumulate,
            work, causal);
}

void dotBf16Packed(int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t *a, int64_t ars, int64_t acs,
                   const float *packedB, int64_t packedK, float *c, int64_t ldc,
                   bool accumulate, float *work, Causal causal) {
  dotPacked(m, n, k, alpha, a, ars, acs, packedB, packedK, c, ldc, accumulate,
            work, causal);
}

void dotBf16(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t ars, int64_t acs, const uint16_t *b, int64_t brs,
             int64_t bcs, float *c, int64_t ldc, bool accumulate, float *work,
             Causal causal) {
  dot(m, n, k, alpha, a, ars, acs, b, brs, bcs, c, ldc, accumulate, work,
      causal);
}

void dotBf16(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
             int64_t ars, int64_t acs, const uint16_t *b, int64_t brs,
             int64_t bcs, float *c, int64_t ldc, bool accumulate, float *work,
             Causal causal) {
  dot(m, n, k, alpha, a, ars, acs, b, brs, bcs, c, ldc, accumulate, work,
      causal);
}

} // namespace strata::cpu
