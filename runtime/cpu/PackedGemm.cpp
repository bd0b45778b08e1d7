//===- PackedGemm.cpp - Strata's own GEMM for AVX2 processors -------------===//
//
// The loops of BLIS's GEMM: for each block of kBlockN columns and kBlockK
// terms, B's block is packed into panels of kNR columns (the threads share
// it); each thread then packs blocks of kBlockM of its own rows of A into
// panels of kMR rows and runs the micro-kernel over every pair of panels.
// The micro-kernel sums a kMR x kNR tile in registers over the block's
// terms; the tile is then added to the output (or to f32 partial sums while
// terms remain). The threads split A's rows in whole panels, so that no two
// write the same tile and the sums do not depend on the thread count.
//
// Every function that runs AVX2 instructions carries the target attribute:
// the file is compiled for baseline x86-64, and the context calls it only
// where the processor runs the AVX2 build of the kernels or a wider one.
//
//===----------------------------------------------------------------------===//

#include "PackedGemm.h"
#include "Transpose.h"

#include <algorithm>
#include <immintrin.h>
#include <omp.h>
#include <type_traits>

#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace strata::cpu {
namespace {

constexpr int64_t kMR = 6;        // rows of a tile
constexpr int64_t kNR = 16;       // columns of a tile: two vectors of 8
constexpr int64_t kBlockK = 512;  // terms of a packed block
constexpr int64_t kBlockM = 96;   // rows of a packed block of A (kMR's)
constexpr int64_t kBlockN = 3072; // columns of a packed block of B (kNR's)
/// Floats after each thread's packed A block, of which its 8-lane stores
/// write up to two.
constexpr int64_t kSlack = 16;

// Eight elements of a storage type as f32 lanes, and back (rounded to
// nearest even): bf16 and f16 by LowPrecision.h's conversions.
STRATA_AVX2 inline __m256 load8(const float *p) { return _mm256_loadu_ps(p); }
template <typename T> STRATA_AVX2 inline __m256 load8(const T *p) {
  return widen8(p);
}
STRATA_AVX2 inline void store8(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
template <typename T> STRATA_AVX2 inline void store8(T *p, __m256 v) {
  narrow8(p, v);
}

/// `rows` rows and `kc` terms of A (element (i, p) at a[i * rs + p * cs])
/// as panels of kMR rows, each kc groups of kMR floats, the last panel
/// zero-padded. `rowsLeft`: A's rows from `a` on (what may be read).
/// Writes up to two floats past the panels (kSlack).
template <typename T>
STRATA_AVX2 void packA(float *dst, const T *a, int64_t rs, int64_t cs,
                       int64_t rows, int64_t rowsLeft, int64_t kc) {
  for (int64_t i = 0; i < rows; i += kMR, dst += kc * kMR) {
    const int64_t mr = std::min(kMR, rows - i);
    const T *src = a + i * rs;
    int64_t p = 0;
    if (mr == kMR && cs == 1) {
      // Rows along the terms: 6 rows x 8 terms transposed at a time; each
      // store writes two floats that the next one overwrites.
      for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int q = 0; q < kMR; ++q)
          r[q] = load8(src + q * rs + p);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int q = 0; q < 8; ++q)
          _mm256_storeu_ps(dst + (p + q) * kMR, r[q]);
      }
    } else if (mr == kMR && rs == 1 && i + 8 <= rowsLeft) {
      // A transposed: a term's rows lie together (eight read, six kept).
      for (; p < kc; ++p)
        _mm256_storeu_ps(dst + p * kMR, load8(src + p * cs));
    }
    for (; p < kc; ++p) {
      for (int64_t q = 0; q < mr; ++q)
        dst[p * kMR + q] = float(src[q * rs + p * cs]);
      for (int64_t q = mr; q < kMR; ++q)
        dst[p * kMR + q] = 0.0f;
    }
  }
}

/// `nr` (at most kNR) columns and `kc` terms of B (element (p, j) at
/// b[p * rs + j * cs]) as one panel: kc groups of kNR floats, zero-padded.
template <typename T>
STRATA_AVX2 void packB(float *dst, const T *b, int64_t rs, int64_t cs,
                       int64_t nr, int64_t kc) {
  int64_t p = 0;
  if (nr == kNR && cs == 1) {
    for (; p < kc; ++p) {
      _mm256_store_ps(dst + p * kNR, load8(b + p * rs));
      _mm256_store_ps(dst + p * kNR + 8, load8(b + p * rs + 8));
    }
  } else if (nr == kNR && rs == 1) {
    // B transposed: a column's terms lie together; 8 x 8 transposes.
    for (; p + 8 <= kc; p += 8)
      for (int h = 0; h < 2; ++h) {
        __m256 r[8];
        for (int q = 0; q < 8; ++q)
          r[q] = load8(b + (h * 8 + q) * cs + p);
        transpose8(r);
        for (int q = 0; q < 8; ++q)
          _mm256_store_ps(dst + (p + q) * kNR + h * 8, r[q]);
      }
  }
  for (; p < kc; ++p) {
    for (int64_t q = 0; q < nr; ++q)
      dst[p * kNR + q] = float(b[p * rs + q * cs]);
    for (int64_t q = nr; q < kNR; ++q)
      dst[p * kNR + q] = 0.0f;
  }
}

/// A tile's sums: row r in v[2 r] (columns 0-7) and v[2 r + 1] (8-15).
struct Tile {
  __m256 v[2 * kMR];
};

/// The sums over kc terms of a packed A panel and a packed B panel. The kMR
/// rows of `bytes` bytes that the tile is then added to (`rows`, `stride` bytes
/// apart) are fetched into the cache meanwhile.
STRATA_AVX2 __attribute__((always_inline)) inline void
microKernel(int64_t kc, const float *a, const float *b, Tile &tile,
            const char *rows, int64_t stride, int64_t bytes) {
  for (int64_t r = 0; r < kMR; ++r) {
    _mm_prefetch(rows + r * stride, _MM_HINT_T0);
    _mm_prefetch(rows + r * stride + bytes - 1, _MM_HINT_T0);
  }
  // Twelve named sums: written as an array (even unrolled), GCC kept them
  // in memory, at a sixth of the rate.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
         c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00,
         c51 = c00;
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char *>(b + 8 * kNR), _MM_HINT_T0);
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += kMR;
    b += kNR;
  }
  tile = {{c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51}};
}

/// Where a tile's sums go: the output (type C, rows ldc apart), the f32
/// partial sums while terms remain (the output itself when it is f32), the
/// bias (type T) and whether the output is accumulated into.
template <typename T, typename C> struct Output {
  C *c;
  float *partial;
  int64_t ldc;
  const T *bias;
  bool accumulate;
};

/// An activation of the finished sums (STRATA_RT_ACT_NONE: none), by the
/// runtime's own kernels of the build the processor runs, so that a
/// product with an activation is the product, then the activation.
struct Activation {
  StrataRtContext *ctx;
  int64_t site, op;

  /// Row `i`'s columns [j, j + count): the activation in place (an f32
  /// output), or of the f32 sums, rounded into the output.
  template <typename T, typename C>
  void apply(const Output<T, C> &out, int64_t i, int64_t j,
             int64_t count) const {
    static const auto unary = reinterpret_cast<decltype(&strata_rt_unary)>(
        dispatchedKernel("strata_rt_unary"));
    static const auto cast = reinterpret_cast<decltype(&strata_rt_cast)>(
        dispatchedKernel("strata_rt_cast"));
    float *sums = out.partial + i * out.ldc + j;
    unary(ctx, site, op, sums, STRATA_RT_F32, sums, STRATA_RT_F32, count, 0.0);
    if constexpr (!std::is_same_v<C, float>)
      cast(ctx, site, out.c + i * out.ldc + j, kTypeCode<C>, sums,
           STRATA_RT_F32, count);
  }
};

/// Adds the mr x nr tile at (i, j) to what the earlier term blocks summed
/// (the first block: to the output when accumulating, plus the bias), and
/// writes the total to the output after the last block, else to the
/// partial sums.
template <typename T, typename C>
STRATA_AVX2 __attribute__((always_inline)) inline void
storeTile(const Output<T, C> &out, const Tile &tile, int64_t i, int64_t j,
          int64_t mr, int64_t nr, bool first, bool last) {
  if (mr == kMR && nr == kNR) {
    for (int64_t r = 0; r < kMR; ++r) {
      const int64_t at = (i + r) * out.ldc + j;
      for (int h = 0; h < 2; ++h) {
        __m256 v = tile.v[2 * r + h];
        if (!first)
          v = _mm256_add_ps(load8(out.partial + at + 8 * h), v);
        else {
          if (out.accumulate)
            v = _mm256_add_ps(load8(out.c + at + 8 * h), v);
          if (out.bias)
            v = _mm256_add_ps(load8(out.bias + j + 8 * h), v);
        }
        if (last)
          store8(out.c + at + 8 * h, v);
        else
          _mm256_storeu_ps(out.partial + at + 8 * h, v);
      }
    }
    return;
  }
  alignas(32) float sums[kMR * kNR];
  for (int q = 0; q < 2 * kMR; ++q)
    _mm256_store_ps(sums + 8 * q, tile.v[q]);
  for (int64_t r = 0; r < mr; ++r) {
    const int64_t at = (i + r) * out.ldc + j;
    for (int64_t q = 0; q < nr; ++q) {
      float v = sums[r * kNR + q];
      if (!first)
        v = out.partial[at + q] + v;
      else {
        if (out.accumulate)
          v = float(out.c[at + q]) + v;
        if (out.bias)
          v = float(out.bias[j + q]) + v;
      }
      if (last)
        out.c[at + q] = C(v);
      else
        out.partial[at + q] = v;
    }
  }
}

/// One m x n product on the calling team of threads (every thread calls
/// it): A's element (i, p) at a[i * ars + p * acs], B's (p, j) at
/// b[p * brs + j * bcs].
template <typename T, typename C>
STRATA_AVX2 void
product(int64_t m, int64_t n, int64_t k, const T *a, int64_t ars, int64_t acs,
        const T *b, int64_t brs, int64_t bcs, const Output<T, C> &out,
        const Activation &act, float *packedB, float *packedA) {
  const int t = omp_get_thread_num(), threads = omp_get_num_threads();
  // This thread's rows: a share of the row panels.
  const int64_t panels = (m + kMR - 1) / kMR;
  const int64_t rowBegin = panels * t / threads * kMR;
  const int64_t rowEnd = std::min(m, panels * (t + 1) / threads * kMR);
  Tile tile;
  for (int64_t jc = 0; jc < n; jc += kBlockN) {
    const int64_t nc = std::min(kBlockN, n - jc);
    for (int64_t pc = 0; pc < k; pc += kBlockK) {
      const int64_t kc = std::min(kBlockK, k - pc);
      const bool first = pc == 0, last = pc + kc == k;
      // With an activation, a bf16 / f16 result's last sums go to the f32
      // partial sums too, which the activation then reads.
      const bool toOutput =
          last && (std::is_same_v<C, float> || act.op == STRATA_RT_ACT_NONE);
#pragma omp for schedule(static)
      for (int64_t q = 0; q < (nc + kNR - 1) / kNR; ++q)
        packB(packedB + q * kNR * kc, b + pc * brs + (jc + q * kNR) * bcs, brs,
              bcs, std::min(kNR, nc - q * kNR), kc);
      for (int64_t ic = rowBegin; ic < rowEnd; ic += kBlockM) {
        const int64_t mc = std::min(kBlockM, rowEnd - ic);
        packA(packedA, a + ic * ars + pc * acs, ars, acs, mc, m - ic, kc);
        for (int64_t jr = 0; jr < nc; jr += kNR)
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            // (The rows the tile is added to: the output's, or the
            // partial sums'.)
            const int64_t at = (ic + ir) * out.ldc + jc + jr;
            const size_t bytes = toOutput ? sizeof(C) : sizeof(float);
            microKernel(kc, packedA + ir * kc, packedB + jr * kc, tile,
                        toOutput
                            ? reinterpret_cast<const char *>(out.c + at)
                            : reinterpret_cast<const char *>(out.partial + at),
                        out.ldc * bytes, kNR * bytes);
            storeTile(out, tile, ic + ir, jc + jr, std::min(kMR, mc - ir),
                      std::min(kNR, nc - jr), first, toOutput);
          }
        // The block's rows are finished (and in the cache).
        if (last && act.op != STRATA_RT_ACT_NONE)
          for (int64_t i = ic; i < ic + mc; ++i)
            act.apply(out, i, jc, nc);
      }
      // B's block is packed again for the next terms.
#pragma omp barrier
    }
  }
}

template <typename T, typename C>
void run(StrataRtContext *ctx, int64_t batch, int64_t m, int64_t n, int64_t k,
         const T *a, int64_t aBatchStride, bool transA, const T *b,
         int64_t bBatchStride, bool transB, C *c, const T *bias,
         bool accumulate, const Activation &act) {
  const int threads = m * n * k >= (int64_t(1) << 16)
                          ? int(std::max<int64_t>(ctx->threads, 1))
                          : 1;
  const int64_t blockK = std::min(kBlockK, k);
  const int64_t blockN = (std::min(kBlockN, n) + kNR - 1) / kNR * kNR;
  const int64_t aFloats = kBlockM * blockK + kSlack;
  Scratch &buffer = ctx->packedBlocks;
  // An output that is not f32, summed in more than one block of terms or
  // then activated, keeps its partial sums in f32.
  const bool partial = !std::is_same_v<C, float> &&
                       (k > kBlockK || act.op != STRATA_RT_ACT_NONE);
  const int64_t need =
      blockK * blockN + threads * aFloats + (partial ? m * n : 0);
  if (int64_t(buffer.size()) < need)
    buffer.resize(need);
  float *packedB = buffer.data();
  float *packedA = packedB + blockK * blockN;
  float *partialSums = packedA + threads * aFloats;
  const int64_t ars = transA ? 1 : k, acs = transA ? m : 1;
  const int64_t brs = transB ? 1 : n, bcs = transB ? k : 1;
  for (int64_t bi = 0; bi < batch; ++bi) {
    Output<T, C> out{c + bi * m * n, nullptr, n, bias, accumulate};
    if constexpr (std::is_same_v<C, float>)
      out.partial = out.c;
    else
      out.partial = partialSums;
    const T *ab = a + (aBatchStride ? bi * m * k : 0);
    const T *bb = b + (bBatchStride ? bi * k * n : 0);
#pragma omp parallel num_threads(threads)
    product(m, n, k, ab, ars, acs, bb, brs, bcs, out, act, packedB,
            packedA + omp_get_thread_num() * aFloats);
  }
}

} // namespace

void packedGemm(StrataRtContext *ctx, int64_t site, int64_t type, int64_t batch,
                int64_t m, int64_t n, int64_t k, const void *a,
                int64_t aBatchStride, bool transA, const void *b,
                int64_t bBatchStride, bool transB, void *c, int64_t cType,
                const void *bias, int64_t act, bool accumulate) {
  auto call = [&](auto tag, auto outTag) {
    using T = decltype(tag);
    using C = decltype(outTag);
    run(ctx, batch, m, n, k, static_cast<const T *>(a), aBatchStride, transA,
        static_cast<const T *>(b), bBatchStride, transB, static_cast<C *>(c),
        static_cast<const T *>(bias), accumulate, Activation{ctx, site, act});
  };
  withFloatType(type, [&](auto tag) {
    using T = decltype(tag);
    if (cType == STRATA_RT_F32)
      call(tag, float());
    else
      call(tag, T());
  });
}

} // namespace strata::cpu
