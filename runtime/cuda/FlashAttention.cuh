//===- FlashAttention.cuh - Tiled fused attention kernels ----*- CUDA -*-===//
//
// The flash kernels of strata_rt_attention and its gradient for bf16 and
// f16 (Attention.cu launches them; STRATA_CUDA_ATTENTION=flash selects
// them): a block of 4 warps takes 64 query rows (or, for dK and dV, 64
// keys) and walks the other side in blocks of 64; scores, probabilities
// and their gradients stay in shared memory, the products run on tensor
// cores through WMMA (16x16x16 tiles, f32 accumulation), the forward pass
// takes the softmax online (a running maximum and sum per row). The
// gradient is two kernels, dK and dV per key block and dQ per query block:
// nothing is summed by atomics.
//
// Device code only, in a header so that a host test can run it under an
// emulation of blocks, warps and WMMA (STRATA_FLASH_EMULATION: the test
// supplies nvcuda::wmma, the thread indices and the intrinsics).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH
#define STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH

#include "Device.cuh"

#include "../common/Activations.h"
#include "../common/AttentionLayout.h"
#include "../common/StrataRandom.h"

#if !defined(STRATA_FLASH_EMULATION)
#include <mma.h>
#endif

#include <cassert>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace strata::cuda {

/// Fused attention's dropout: the factor (0 or 1 / (1 - prob)) of the
/// probability of (slice, query i, key j), strata_rt_dropout's mask of
/// `key` over the [batch, heads, s, t] probabilities at `offset` in the
/// global stream; 1 with prob 0.
struct AttentionDropout {
  double prob;
  float keepScale;
  uint64_t seed;
  int64_t key, offset;
  AttentionLayout at;

  __device__ float operator()(int64_t slice, int64_t i, int64_t j) const {
    if (prob <= 0)
      return 1.0f;
    return rng::dropoutKeep(seed, key, offset + at.probability(slice, i, j),
                            prob)
               ? keepScale
               : 0.0f;
  }
};

/// Query and key rows a block of the flash kernels takes, its warps (16
/// rows each) and threads.
constexpr int kFlashRows = 64;
constexpr int kFlashWarps = kFlashRows / 16;
constexpr int kFlashThreads = 32 * kFlashWarps;

/// `n` rounded up to a multiple of 16 (a WMMA tile's side).
__host__ __device__ inline int pad16(int64_t n) {
  return int((n + 15) / 16 * 16);
}

/// Carves 128-byte aligned arrays out of a block's dynamic shared memory;
/// on the host, from address 0, it only adds up their bytes.
struct SharedCarver {
  uintptr_t base = 0;
  size_t used = 0;
  template <typename U> __host__ __device__ U *take(int64_t elements) {
    U *p = reinterpret_cast<U *>(base + used);
    used += (size_t(elements) * sizeof(U) + 127) / 128 * 128;
    return p;
  }
};

/// A [64, cols] tile of T in shared memory, `ld` elements a row (a multiple
/// of 8 past the padded width: WMMA's leading dimensions and 32-byte
/// aligned 16-row steps), and its f32 twin (ld a multiple of 4).
template <typename U> struct Tile {
  U *at;
  int ld;
  __host__ __device__ Tile(SharedCarver &c, int cols)
      : ld(cols + (sizeof(U) == 4 ? 4 : 8)) {
    at = c.take<U>(int64_t(kFlashRows) * ld);
  }
  __device__ U *row(int r) const { return at + r * ld; }
  /// Columns 0 .. cols - 1 of every row set to 0 (an f32 tile); the whole
  /// block takes part.
  __device__ void zero(int cols) const {
    for (int e = threadIdx.x; e < kFlashRows * cols; e += blockDim.x)
      row(e / cols)[e % cols] = 0.0f;
  }
};

/// Rows 0 .. 63 of a tensor into `tile`: row r starts at from + r * stride
/// (elements); columns 0 .. width - 1 of each, zeros past `rows` rows and
/// `width` columns up to the padded width `cols`. Sixteen bytes a load
/// where the rows allow it (the layout's offsets are taken once a tile,
/// not once an element). The whole block takes part.
template <typename T>
__device__ void loadTile(const Tile<T> &tile, int cols, const T *from,
                         int64_t stride, int64_t rows, int64_t width) {
  constexpr int vec = 16 / sizeof(T);
  if (width % vec == 0 && stride % vec == 0 &&
      reinterpret_cast<uintptr_t>(from) % 16 == 0) {
    const int chunks = cols / vec; // cols is a multiple of 16
    for (int e = threadIdx.x; e < kFlashRows * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks * vec;
      uint4 value = {0, 0, 0, 0}; // +0.0 in bf16, f16 and f32
      if (r < rows && c < width)
        value = *reinterpret_cast<const uint4 *>(from + r * stride + c);
      *reinterpret_cast<uint4 *>(tile.row(r) + c) = value;
    }
    return;
  }
  for (int e = threadIdx.x; e < kFlashRows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    tile.row(r)[c] =
        r < rows && c < width ? from[r * stride + c] : fromFloat<T>(0.0f);
  }
}

// Loops unrolled by nvcc (fragment arrays indexed by constants stay in
// registers); the host emulation runs them as they are.
#if defined(__CUDACC__)
#define STRATA_FLASH_UNROLL _Pragma("unroll")
#else
#define STRATA_FLASH_UNROLL
#endif

namespace wmma = nvcuda::wmma;
template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// The warp's 16 rows r0.. of C [.., n] (f32, shared) = (accumulate ? C :
/// 0) + A B over k: A's rows r0.. of `a` (row-major), B [k, n] row-major
/// in `b`, or, with `bT`, B^T [n, k] row-major (B read column-major). k
/// and n multiples of 16, k at most 128. With `hoistA` the warp loads its
/// A fragments once for every column block, unrolled so that they stay in
/// registers: the forward kernel's products ran faster so on an H200,
/// the gradient kernels' slower (they keep loading A per column block).
template <bool bT, bool hoistA, typename T>
__device__ void warpProduct(const Tile<float> &c, int r0, int n, int k,
                            const Tile<T> &a, const Tile<T> &b,
                            bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 WMMA tiles start with sm_80: a build for an older architecture
  // compiles the kernels empty, and the host never launches them on such a
  // device (useFlash).
  __trap();
#else
  using Layout = std::conditional_t<bT, wmma::col_major, wmma::row_major>;
  constexpr int kMaxSteps = 8;
  FragA<T> hoisted[hoistA ? kMaxSteps : 1];
  if constexpr (hoistA) {
    // Steps past the fragments held would be left out: never silently.
#if defined(__CUDA_ARCH__)
    if (k > 16 * kMaxSteps)
      __trap();
#else
    assert(k <= 16 * kMaxSteps);
#endif
    STRATA_FLASH_UNROLL
    for (int s = 0; s < kMaxSteps; ++s)
      if (16 * s < k)
        wmma::load_matrix_sync(hoisted[s], a.row(r0) + 16 * s, a.ld);
  }
  for (int cb = 0; cb < n; cb += 16) {
    FragC acc;
    if (accumulate)
      wmma::load_matrix_sync(acc, c.row(r0) + cb, c.ld, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
    if constexpr (hoistA) {
      STRATA_FLASH_UNROLL
      for (int s = 0; s < kMaxSteps; ++s)
        if (16 * s < k) {
          FragB<T, Layout> fb;
          wmma::load_matrix_sync(
              fb, bT ? b.row(cb) + 16 * s : b.row(16 * s) + cb, b.ld);
          wmma::mma_sync(acc, hoisted[s], fb, acc);
        }
    } else {
      for (int kk = 0; kk < k; kk += 16) {
        FragA<T> fa;
        FragB<T, Layout> fb;
        wmma::load_matrix_sync(fa, a.row(r0) + kk, a.ld);
        wmma::load_matrix_sync(fb, bT ? b.row(cb) + kk : b.row(kk) + cb, b.ld);
        wmma::mma_sync(acc, fa, fb, acc);
      }
    }
    wmma::store_matrix_sync(c.row(r0) + cb, acc, c.ld, wmma::mem_row_major);
  }
#endif
}

/// Whether query i sees key j (both in range).
__device__ __forceinline__ bool sees(const AttentionLayout &at, int64_t i,
                                     int64_t j, bool causal) {
  return i < at.s && j < at.t && (!causal || j <= i);
}

/// Keys a block of 64 queries from q0 on sees: all, or with a causal mask
/// up to its last query's.
__device__ __forceinline__ int64_t blockKeys(const AttentionLayout &at,
                                             int64_t q0, bool causal) {
  return causal && q0 + kFlashRows < at.t ? q0 + kFlashRows : at.t;
}

/// One (query, key)'s probability, recomputed from its score and the
/// query's log-sum-exp, and dS = scale P (m dP - delta) (m the dropout's
/// factor).
struct ScoreGrad {
  float p, ds;
};
__device__ __forceinline__ ScoreGrad scoreGrad(float score, float lse,
                                               float dp, float delta, float m,
                                               float scale) {
  const float p = act::fastExp(scale * score - lse);
  return {p, scale * p * (m * dp - delta)};
}

/// The forward kernel's shared memory.
template <typename T> struct FlashForwardShared {
  Tile<T> q, k, v, p;
  Tile<float> scores, out;
  float *max, *sum, *rescale;

  __host__ __device__ FlashForwardShared(SharedCarver &c, int dp, int dvp)
      : q(c, dp), k(c, dp), v(c, dvp), p(c, kFlashRows), scores(c, kFlashRows),
        out(c, dvp), max(c.take<float>(kFlashRows)),
        sum(c.take<float>(kFlashRows)), rescale(c.take<float>(kFlashRows)) {}
};

/// Block (slice x, query block y): the output rows and log-sum-exp of 64
/// queries, the softmax taken online over blocks of 64 keys (the running
/// maximum and sum per row, the output rescaled when the maximum grows).
/// The dropped, unnormalised probabilities are rounded to T for P V; the
/// log-sum-exp is taken before the dropout, as on the CPU.
template <typename T>
__global__ void __launch_bounds__(kFlashThreads)
    flashForward(T *out, float *lse, const T *q, const T *k, const T *v,
                 AttentionLayout at, float scale, bool causal,
                 AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashForwardShared<T> sh(carver, dp, dvp);
  const int64_t bh = blockIdx.x, q0 = int64_t(blockIdx.y) * kFlashRows;
  const int lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16;
  loadTile(sh.q, dp, q + at.query(bh, q0), at.rowStride(), at.s - q0, at.d);
  sh.out.zero(dvp);
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    sh.max[r] = -INFINITY;
    sh.sum[r] = 0.0f;
  }
  const int64_t keys = blockKeys(at, q0, causal);
  for (int64_t k0 = 0; k0 < keys; k0 += kFlashRows) {
    __syncthreads(); // the last block's keys and values are read
    loadTile(sh.k, dp, k + at.key(bh, k0), at.rowStride(), at.t - k0, at.d);
    loadTile(sh.v, dvp, v + at.value(bh, k0), at.valueRowStride(), at.t - k0,
             at.dv);
    __syncthreads();
    warpProduct<true, true>(sh.scores, r0, kFlashRows, dp, sh.q, sh.k, false);
    __syncwarp();
    // Two lanes a row, 32 of its keys each (lane l: row r0 + l / 2, keys
    // 32 (l % 2) on), all rows at once where one row at a time chained
    // sixteen warp-wide reductions. The lanes start at staggered keys, so
    // that the 32 lanes read 32 banks (scores rows are 68 floats apart).
    {
      const int r = r0 + lane / 2, first = 32 * (lane % 2);
      const int64_t i = q0 + r;
      const float *scores = sh.scores.row(r) + first;
      float mx = -INFINITY;
      for (int t = 0; t < 32; ++t) {
        const int c = (t + lane) % 32;
        if (sees(at, i, k0 + first + c, causal))
          mx = fmaxf(mx, scale * scores[c]);
      }
      const float before = sh.max[r];
      const float now =
          fmaxf(before, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
      float part = 0.0f;
      T *p = sh.p.row(r) + first;
      for (int t = 0; t < 32; ++t) {
        const int c = (t + lane) % 32;
        const int64_t j = k0 + first + c;
        float e = 0.0f, kept = 0.0f;
        if (sees(at, i, j, causal)) {
          e = act::fastExp(scale * scores[c] - now);
          kept = e * drop(bh, i, j);
        }
        part += e;
        p[c] = fromFloat<T>(kept);
      }
      const float sum = part + __shfl_xor_sync(0xffffffffu, part, 1);
      const float factor =
          before == -INFINITY ? 0.0f : act::fastExp(before - now);
      __syncwarp();
      if (lane % 2 == 0) {
        sh.max[r] = now;
        sh.sum[r] = sh.sum[r] * factor + sum;
        sh.rescale[r] = factor;
      }
    }
    __syncwarp();
    for (int r = r0; r < r0 + 16; ++r)
      for (int c = lane; c < dvp; c += 32)
        sh.out.row(r)[c] *= sh.rescale[r];
    __syncwarp();
    warpProduct<false, true>(sh.out, r0, dvp, kFlashRows, sh.p, sh.v, true);
  }
  __syncwarp();
  T *const outRows = out + at.output(bh, q0);
  for (int r = r0; r < r0 + 16 && q0 + r < at.s; ++r) {
    const float sum = sh.sum[r];
    for (int c = lane; c < at.dv; c += 32)
      outRows[r * at.valueRowStride() + c] =
          fromFloat<T>(sum > 0.0f ? sh.out.row(r)[c] / sum : 0.0f);
  }
  if (lane < 16 && q0 + r0 + lane < at.s) {
    const int r = r0 + lane;
    lse[at.lse(bh, q0 + r)] =
        sh.sum[r] > 0.0f ? sh.max[r] + logf(sh.sum[r]) : -INFINITY;
  }
}

/// The shared memory of the gradient kernels: the block's own rows (keys
/// and values, or queries and output gradients) and the other side's,
/// scores and their gradients in f32, a T tile for products, and the
/// block's f32 gradients.
template <typename T> struct FlashBackwardShared {
  Tile<T> own, ownV, other, otherV, p;
  Tile<float> scores, scoreGrad, grad, gradV;
  float *lse, *delta;

  __host__ __device__ FlashBackwardShared(SharedCarver &c, int dp, int dvp,
                                          bool keys)
      : own(c, dp), ownV(c, dvp), other(c, dp), otherV(c, dvp),
        p(c, kFlashRows), scores(c, kFlashRows), scoreGrad(c, kFlashRows),
        grad(c, dp), gradV(c, keys ? dvp : 0), lse(c.take<float>(kFlashRows)),
        delta(c.take<float>(kFlashRows)) {}

  /// The warp's rows r0.. of both kernels' products: scores = own other^T
  /// (S^T = K Q^T, or S = Q K^T) and scoreGrad = ownV otherV^T (dP^T = V
  /// dO^T, or dP = dO V^T); visible to the warp's lanes on return.
  __device__ void products(int r0, int dp, int dvp) const {
    warpProduct<true, false>(scores, r0, kFlashRows, dp, own, other, false);
    warpProduct<true, false>(scoreGrad, r0, kFlashRows, dvp, ownV, otherV,
                             false);
    __syncwarp();
  }
};

/// The rows' log-sum-exp and delta (zero past the queries) into shared
/// memory.
__device__ inline void loadRowStats(float *lseTo, float *deltaTo,
                                    const float *lse, const float *delta,
                                    const AttentionLayout &at, int64_t bh,
                                    int64_t q0) {
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    const int64_t i = q0 + r;
    lseTo[r] = i < at.s ? lse[at.lse(bh, i)] : 0.0f;
    deltaTo[r] = i < at.s ? delta[bh * at.s + i] : 0.0f;
  }
}

/// The warp's rows r0 .. r0 + 15 of f32 `from` rounded into a tensor's
/// rows (row r at to + r * stride, `width` columns; rows from `rows` on
/// left out).
template <typename T>
__device__ void storeRows(T *to, int64_t stride, const Tile<float> &from,
                          int r0, int64_t rows, int64_t width) {
  const int lane = threadIdx.x % 32;
  for (int r = r0; r < r0 + 16 && r < rows; ++r)
    for (int c = lane; c < width; c += 32)
      to[r * stride + c] = fromFloat<T>(from.row(r)[c]);
}

/// Block (slice x, key block y): dK and dV of 64 keys over the queries
/// that see them. Per block of 64 queries: S^T = K Q^T, P^T from the
/// log-sum-exp, dV += (m P)^T dO, dP^T = V dO^T, dS^T = scale P^T (m dP^T
/// - delta), dK += dS^T Q; the warps own key rows, so the products need no
/// block barrier.
template <typename T>
__global__ void __launch_bounds__(kFlashThreads)
    flashGradKeys(T *dk, T *dv, const T *q, const T *k, const T *v,
                  const T *dout, const float *lse, const float *delta,
                  AttentionLayout at, float scale, bool causal,
                  AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashBackwardShared<T> sh(carver, dp, dvp, true);
  const int64_t bh = blockIdx.x, k0 = int64_t(blockIdx.y) * kFlashRows;
  const int lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16;
  loadTile(sh.own, dp, k + at.key(bh, k0), at.rowStride(), at.t - k0, at.d);
  loadTile(sh.ownV, dvp, v + at.value(bh, k0), at.valueRowStride(), at.t - k0,
           at.dv);
  sh.grad.zero(dp);
  sh.gradV.zero(dvp);
  // The warps zeroed each other's rows, and with a causal mask a block of
  // keys past the last query skips the loop (and its barriers) and stores
  // the zeros at once.
  __syncthreads();
  // Causal: queries from this block's first key on.
  for (int64_t q0 = causal ? k0 : 0; q0 < at.s; q0 += kFlashRows) {
    __syncthreads(); // the last block's queries are read
    loadTile(sh.other, dp, q + at.query(bh, q0), at.rowStride(), at.s - q0,
             at.d);
    loadTile(sh.otherV, dvp, dout + at.output(bh, q0), at.valueRowStride(),
             at.s - q0, at.dv);
    loadRowStats(sh.lse, sh.delta, lse, delta, at, bh, q0);
    __syncthreads();
    sh.products(r0, dp, dvp);
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      const int64_t j = k0 + r, i = q0 + c;
      float dropped = 0.0f, ds = 0.0f;
      if (sees(at, i, j, causal)) {
        const float m = drop(bh, i, j);
        const ScoreGrad g = scoreGrad(sh.scores.row(r)[c], sh.lse[c],
                                      sh.scoreGrad.row(r)[c], sh.delta[c], m,
                                      scale);
        dropped = g.p * m;
        ds = g.ds;
      }
      sh.p.row(r)[c] = fromFloat<T>(dropped);
      sh.scoreGrad.row(r)[c] = ds;
    }
    __syncwarp();
    warpProduct<false, false>(sh.gradV, r0, dvp, kFlashRows, sh.p, sh.otherV,
                              true);
    __syncwarp();
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      sh.p.row(r)[c] = fromFloat<T>(sh.scoreGrad.row(r)[c]);
    }
    __syncwarp();
    warpProduct<false, false>(sh.grad, r0, dp, kFlashRows, sh.p, sh.other,
                              true);
  }
  __syncwarp();
  storeRows(dk + at.key(bh, k0), at.rowStride(), sh.grad, r0, at.t - k0, at.d);
  storeRows(dv + at.value(bh, k0), at.valueRowStride(), sh.gradV, r0, at.t - k0,
            at.dv);
}

/// Block (slice x, query block y): dQ of 64 queries over the keys they
/// see. Per block of 64 keys: S = Q K^T, P from the log-sum-exp, dP = dO
/// V^T, dS = scale P (m dP - delta), dQ += dS K.
template <typename T>
__global__ void __launch_bounds__(kFlashThreads)
    flashGradQueries(T *dq, const T *q, const T *k, const T *v, const T *dout,
                     const float *lse, const float *delta, AttentionLayout at,
                     float scale, bool causal, AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashBackwardShared<T> sh(carver, dp, dvp, false);
  const int64_t bh = blockIdx.x, q0 = int64_t(blockIdx.y) * kFlashRows;
  const int lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16;
  loadTile(sh.own, dp, q + at.query(bh, q0), at.rowStride(), at.s - q0, at.d);
  loadTile(sh.ownV, dvp, dout + at.output(bh, q0), at.valueRowStride(),
           at.s - q0, at.dv);
  loadRowStats(sh.lse, sh.delta, lse, delta, at, bh, q0);
  sh.grad.zero(dp);
  const int64_t keys = blockKeys(at, q0, causal);
  for (int64_t k0 = 0; k0 < keys; k0 += kFlashRows) {
    __syncthreads(); // the last block's keys and values are read
    loadTile(sh.other, dp, k + at.key(bh, k0), at.rowStride(), at.t - k0, at.d);
    loadTile(sh.otherV, dvp, v + at.value(bh, k0), at.valueRowStride(),
             at.t - k0, at.dv);
    __syncthreads();
    sh.products(r0, dp, dvp);
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      const int64_t i = q0 + r, j = k0 + c;
      float ds = 0.0f;
      if (sees(at, i, j, causal))
        ds = scoreGrad(sh.scores.row(r)[c], sh.lse[r], sh.scoreGrad.row(r)[c],
                       sh.delta[r], drop(bh, i, j), scale)
                 .ds;
      sh.p.row(r)[c] = fromFloat<T>(ds);
    }
    __syncwarp();
    warpProduct<false, false>(sh.grad, r0, dp, kFlashRows, sh.p, sh.other,
                              true);
  }
  __syncwarp();
  storeRows(dq + at.query(bh, q0), at.rowStride(), sh.grad, r0, at.s - q0,
            at.d);
}

/// The flash kernels' dynamic shared memory (bytes).
template <typename T> size_t flashForwardBytes(const AttentionLayout &at) {
  SharedCarver c;
  FlashForwardShared<T>(c, pad16(at.d), pad16(at.dv));
  return c.used;
}
template <typename T>
size_t flashGradBytes(const AttentionLayout &at, bool keys) {
  SharedCarver c;
  FlashBackwardShared<T>(c, pad16(at.d), pad16(at.dv), keys);
  return c.used;
}

} // namespace strata::cuda

#undef STRATA_FLASH_UNROLL

#endif // STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH
