//===- Attention.cu - Fused attention on the GPU --------------------------===//
//
// strata_rt_attention and its gradient as cuBLASLt products and row
// kernels over a chunk of (batch, head) slices at a time. The inputs'
// slices are gathered into contiguous [slices, rows, width] scratch; the
// scores Q K^T are summed and kept in f32 (bf16 and f16 operands on tensor
// cores, f32 ones in true f32 unless the context allows TF32); a row
// kernel takes the causal mask, the softmax (the CPU runtime's exp), the
// log-sum-exp and the dropout's mask, writing the probabilities in the
// operands' type for P V, whose f32 result is scattered into the output's
// rows. The gradient recomputes the probabilities from the log-sum-exp:
// dV = (m P)^T dO, dP = dO V^T, dS = scale P (m dP - delta) with delta_i =
// dO_i . O_i, dQ = dS K, dK = dS^T Q, each product's f32 result scattered
// into its gradient. Nothing is summed by atomics: results do not depend
// on scheduling.
//
// The [s, t] scores and probabilities live only in scratch, a chunk of
// slices at a time (at most chunkBytes(), at least one slice): between the
// forward and the backward pass only the output and the log-sum-exp are
// kept, as on the CPU.
//
//===----------------------------------------------------------------------===//

#include "Device.cuh"
#include "Gemm.h"

#include "../common/Activations.h"
#include "../common/AttentionLayout.h"
#include "../common/StrataRandom.h"

#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

namespace strata::cuda {
namespace {

using strata::act::fastExp;

/// Scratch bytes one chunk of slices may take (one slice may take more):
/// 512 MiB, or STRATA_CUDA_ATTENTION_CHUNK_BYTES (the GPU check sets 1,
/// one slice per chunk, so that its small cases cover the chunked path).
size_t chunkBytes() {
  static const size_t bytes = [] {
    const char *set = std::getenv("STRATA_CUDA_ATTENTION_CHUNK_BYTES");
    long long value = set ? std::atoll(set) : 0;
    return value > 0 ? size_t(value) : size_t(512) << 20;
  }();
  return bytes;
}

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

/// Which tensor's rows (AttentionLayout).
enum class Rows { Query, Key, Value, Output };

__device__ __forceinline__ int64_t rowAt(const AttentionLayout &at, Rows rows,
                                         int64_t slice, int64_t r) {
  switch (rows) {
  case Rows::Query:
    return at.query(slice, r);
  case Rows::Key:
    return at.key(slice, r);
  case Rows::Value:
    return at.value(slice, r);
  default:
    return at.output(slice, r);
  }
}

/// to[sl][r][c] = from's row r of slice first + sl, column c: `slices`
/// slices of `len` rows of `width`, rows from `valid` on zero (padding).
template <typename T>
__global__ void gatherRows(T *to, const T *from, AttentionLayout at, Rows rows,
                           int64_t first, int64_t slices, int64_t len,
                           int64_t valid, int64_t width) {
  const int64_t n = slices * len * width;
  for (int64_t e = gridStart(); e < n; e += gridStride()) {
    const int64_t c = e % width, row = e / width, r = row % len;
    to[e] = r < valid ? from[rowAt(at, rows, first + row / len, r) + c]
                      : fromFloat<T>(0.0f);
  }
}

/// The first `len` rows of each of `slices` slices of `stride` rows of f32
/// `from` into their places in `to` (rounded once to T): gatherRows'
/// inverse.
template <typename T>
__global__ void scatterRows(T *to, const float *from, AttentionLayout at,
                            Rows rows, int64_t first, int64_t slices,
                            int64_t len, int64_t stride, int64_t width) {
  const int64_t n = slices * len * width;
  for (int64_t e = gridStart(); e < n; e += gridStride()) {
    const int64_t c = e % width, row = e / width;
    const int64_t slice = row / len, r = row % len;
    to[rowAt(at, rows, first + slice, r) + c] =
        fromFloat<T>(from[(slice * stride + r) * width + c]);
  }
}

/// Keys padded to a multiple of 8 (zero keys and values, probability 0):
/// the products' leading dimensions are then multiples of 8 elements
/// wherever the head sizes are, as tensor cores want them.
inline int64_t paddedKeys(int64_t t) { return (t + 7) / 8 * 8; }

/// Keys query i of a slice sees.
__device__ __forceinline__ int64_t keysSeen(int64_t i, int64_t t, bool causal) {
  return causal ? min(i + 1, t) : t;
}

/// One block per query row of the chunk (rows of `tp` padded keys): the
/// softmax of scale * scores over the keys the row sees, its log-sum-exp
/// (at the slice's place), and the dropped probabilities in T (zero beyond
/// the row's keys).
template <typename T>
__global__ void attentionSoftmax(T *p, float *lse, const float *scores,
                                 AttentionLayout at, int64_t tp, int64_t first,
                                 int64_t rows, float scale, bool causal,
                                 AttentionDropout drop) {
  __shared__ float shared[32];
  const int64_t s = at.s, t = at.t;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t slice = first + r / s, i = r % s;
    const float *x = scores + r * tp;
    T *y = p + r * tp;
    const int64_t limit = keysSeen(i, t, causal);
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x)
      mx = fmaxf(mx, scale * x[j]);
    mx = blockMax(mx, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x)
      sum += fastExp(scale * x[j] - mx);
    sum = blockSum(sum, shared);
    if (threadIdx.x == 0)
      lse[at.lse(slice, i)] = limit > 0 ? mx + logf(sum) : -INFINITY;
    const float inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < tp; j += blockDim.x)
      y[j] = fromFloat<T>(j < limit ? fastExp(scale * x[j] - mx) * inv *
                                          drop(slice, i, j)
                                    : 0.0f);
  }
}

/// One block per query row of the chunk: delta_i = dO_i . O_i.
template <typename T>
__global__ void attentionDelta(float *delta, const T *out, const T *dout,
                               AttentionLayout at, int64_t first,
                               int64_t rows) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = at.output(first + r / at.s, r % at.s);
    float part = 0.0f;
    for (int64_t c = threadIdx.x; c < at.dv; c += blockDim.x)
      part += toFloat(dout[o + c]) * toFloat(out[o + c]);
    part = blockSum(part, shared);
    if (threadIdx.x == 0)
      delta[r] = part;
  }
}

/// The probability of (query i, key j) of the chunk's element e of
/// [rows, padded keys], recomputed from the scores and the log-sum-exp.
__device__ __forceinline__ float
probability(const float *scores, const float *lse, const AttentionLayout &at,
            int64_t slice, int64_t i, int64_t j, int64_t e, float scale,
            bool causal) {
  return j < keysSeen(i, at.t, causal)
             ? fastExp(scale * scores[e] - lse[at.lse(slice, i)])
             : 0.0f;
}

/// The dropped probabilities m P in T, for dV = (m P)^T dO.
template <typename T>
__global__ void
attentionDroppedProbabilities(T *p, const float *scores, const float *lse,
                              AttentionLayout at, int64_t tp, int64_t first,
                              int64_t rows, float scale, bool causal,
                              AttentionDropout drop) {
  const int64_t n = rows * tp;
  for (int64_t e = gridStart(); e < n; e += gridStride()) {
    const int64_t r = e / tp, j = e % tp;
    const int64_t slice = first + r / at.s, i = r % at.s;
    float pr = probability(scores, lse, at, slice, i, j, e, scale, causal);
    p[e] = fromFloat<T>(pr == 0.0f ? 0.0f : pr * drop(slice, i, j));
  }
}

/// dS = scale P (m dP - delta) in T, for dQ = dS K and dK = dS^T Q.
template <typename T>
__global__ void attentionScoreGrad(T *ds, const float *scores, const float *dp,
                                   const float *lse, const float *delta,
                                   AttentionLayout at, int64_t tp,
                                   int64_t first, int64_t rows, float scale,
                                   bool causal, AttentionDropout drop) {
  const int64_t n = rows * tp;
  for (int64_t e = gridStart(); e < n; e += gridStride()) {
    const int64_t r = e / tp, j = e % tp;
    const int64_t slice = first + r / at.s, i = r % at.s;
    float pr = probability(scores, lse, at, slice, i, j, e, scale, causal);
    ds[e] = fromFloat<T>(
        pr == 0.0f ? 0.0f
                   : scale * pr * (drop(slice, i, j) * dp[e] - delta[r]));
  }
}

/// The dropout of an attention call (this rank's shard and micro-batch
/// before it in the global stream).
AttentionDropout attentionDropout(StrataRtContext *ctx, double prob,
                                  int64_t key, int64_t microBatches,
                                  int64_t microBatch, int64_t slices,
                                  const AttentionLayout &at) {
  return {prob,
          prob > 0 ? 1.0f / float(1.0 - prob) : 1.0f,
          ctx->seed,
          key,
          rng::dropoutOffset(ctx->shard, microBatches, microBatch,
                             slices * at.s * at.t),
          at};
}

/// A batch of row-major products with contiguous operands of type `dtype`:
/// C [m, n] (f32) = op(A) op(B) per slice, A [m, k] (transA: stored [k,
/// m]) and B [k, n] (transB: [n, k]). An empty sum (k = 0) is zeros.
/// Returns whether the step has not failed.
struct Product {
  StrataRtContext *ctx;
  int64_t site, dtype;

  bool operator()(int64_t batch, int64_t m, int64_t n, int64_t k, const void *a,
                  bool transA, const void *b, bool transB, float *c) const {
    if (batch == 0 || m == 0 || n == 0)
      return ctx->error.empty();
    if (k == 0)
      return ctx->check(site,
                        cudaMemsetAsync(c, 0,
                                        size_t(batch * m * n) * sizeof(float),
                                        ctx->compute),
                        "strata_rt_attention") &&
             ctx->error.empty();
    GemmCall call;
    call.batch = batch;
    call.m = m;
    call.n = n;
    call.k = k;
    call.aBatchStride = m * k;
    call.bBatchStride = k * n;
    call.transA = transA;
    call.transB = transB;
    call.dtype = dtype;
    call.resultType = STRATA_RT_F32;
    runProduct(ctx, site, call, a, b, c);
    return ctx->error.empty();
  }
};

/// Slices per chunk when one slice takes `perSlice` bytes of scratch.
int64_t chunkSlices(int64_t slices, size_t perSlice) {
  return std::clamp<int64_t>(
      int64_t(chunkBytes() / std::max<size_t>(perSlice, 1)), 1,
      std::max<int64_t>(slices, 1));
}

/// Carves 256-byte aligned pieces out of one scratch block; without a
/// block it only adds up their bytes (how a chunk's scratch is measured).
struct Carver {
  char *base = nullptr;
  size_t used = 0;
  template <typename T> T *take(int64_t elements) {
    T *p = base ? reinterpret_cast<T *>(base + used) : nullptr;
    used += aligned(size_t(elements) * sizeof(T));
    return p;
  }
};

/// A chunk's slices of q, k and v, contiguous, the keys padded to `tp`.
template <typename T> struct Gathered {
  T *q, *k, *v;

  Gathered(Carver &c, int64_t chunk, const AttentionLayout &at, int64_t tp)
      : q(c.take<T>(chunk * at.s * at.d)), k(c.take<T>(chunk * tp * at.d)),
        v(c.take<T>(chunk * tp * at.dv)) {}

  /// Gathers slices first .. first + n - 1 on the compute stream.
  void gather(StrataRtContext *ctx, const void *query, const void *key,
              const void *value, const AttentionLayout &at, int64_t tp,
              int64_t first, int64_t n) const {
    const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
    gatherRows<T><<<gridFor(n * s * d), kThreads, 0, ctx->compute>>>(
        q, static_cast<const T *>(query), at, Rows::Query, first, n, s, s, d);
    gatherRows<T><<<gridFor(n * tp * d), kThreads, 0, ctx->compute>>>(
        k, static_cast<const T *>(key), at, Rows::Key, first, n, tp, t, d);
    gatherRows<T><<<gridFor(n * tp * dv), kThreads, 0, ctx->compute>>>(
        v, static_cast<const T *>(value), at, Rows::Value, first, n, tp, t, dv);
  }
};

/// Scratch for the buffers `B(carver, chunk, at, tp)` takes, chunk slices
/// at a time: measured by carving one slice from no block, then carved
/// from the context's scratch for `chunk` (set here). Null where the
/// scratch could not be had (the failure recorded).
template <typename B>
std::optional<B> chunkScratch(StrataRtContext *ctx, int64_t site,
                              int64_t slices, const AttentionLayout &at,
                              int64_t tp, int64_t &chunk) {
  Carver measure;
  B(measure, 1, at, tp);
  chunk = chunkSlices(slices, measure.used);
  Carver carve{static_cast<char *>(
      ctx->scratchBytes(site, measure.used * size_t(chunk)))};
  if (!carve.base)
    return std::nullopt;
  return B(carve, chunk, at, tp);
}

/// The forward pass's scratch, in the order it is carved.
template <typename T> struct ForwardScratch {
  Gathered<T> in;
  float *scores;
  T *p;
  float *o;

  ForwardScratch(Carver &c, int64_t chunk, const AttentionLayout &at,
                 int64_t tp)
      : in(c, chunk, at, tp), scores(c.take<float>(chunk * at.s * tp)),
        p(c.take<T>(chunk * at.s * tp)),
        o(c.take<float>(chunk * at.s * at.dv)) {}
};

/// The gradient's scratch, in the order it is carved. `p` holds the
/// dropped probabilities, then dS; `grad` each product's f32 result in
/// turn.
template <typename T> struct BackwardScratch {
  Gathered<T> in;
  T *dout;
  float *delta, *scores, *dp;
  T *p;
  float *grad;

  BackwardScratch(Carver &c, int64_t chunk, const AttentionLayout &at,
                  int64_t tp)
      : in(c, chunk, at, tp), dout(c.take<T>(chunk * at.s * at.dv)),
        delta(c.take<float>(chunk * at.s)),
        scores(c.take<float>(chunk * at.s * tp)),
        dp(c.take<float>(chunk * at.s * tp)), p(c.take<T>(chunk * at.s * tp)),
        grad(c.take<float>(chunk *
                           std::max({at.s * at.d, tp * at.d, tp * at.dv}))) {}
};

//===----------------------------------------------------------------------===//
// Flash kernels (bf16 and f16): one pass over the keys per block of query
// rows, the scores and probabilities only in shared memory, tensor-core
// products through WMMA (f32 accumulation). Selected by
// STRATA_CUDA_ATTENTION=flash where the head sizes fit in shared memory.
//===----------------------------------------------------------------------===//

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
};

/// Rows first .. first + 63 of a tensor into `tile` (columns 0 .. width -
/// 1 of each; zeros past `limit` rows and `width` columns, up to the padded
/// width `cols`). `rowAt(g)` is row g's offset. The whole block takes part.
template <typename T, typename RowAt>
__device__ void loadTile(const Tile<T> &tile, int cols, const T *from,
                         RowAt rowAt, int64_t first, int64_t limit,
                         int64_t width) {
  for (int e = threadIdx.x; e < kFlashRows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    const int64_t g = first + r;
    tile.row(r)[c] =
        g < limit && c < width ? from[rowAt(g) + c] : fromFloat<T>(0.0f);
  }
}

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

namespace wmma = nvcuda::wmma;
template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// The warp's 16 rows r0.. of C [.., n] (f32, shared) = (accumulate ? C :
/// 0) + A B over k: A's rows r0.. of `a` (row-major), B [k, n] row-major
/// in `b`, or, with `bT`, B^T [n, k] row-major (B read column-major). k
/// and n multiples of 16.
template <bool bT, typename T>
__device__ void warpProduct(const Tile<float> &c, int r0, int n, int k,
                            const Tile<T> &a, const Tile<T> &b,
                            bool accumulate) {
  using Layout = std::conditional_t<bT, wmma::col_major, wmma::row_major>;
  for (int cb = 0; cb < n; cb += 16) {
    FragC acc;
    if (accumulate)
      wmma::load_matrix_sync(acc, c.row(r0) + cb, c.ld, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += 16) {
      FragA<T> fa;
      FragB<T, Layout> fb;
      wmma::load_matrix_sync(fa, a.row(r0) + kk, a.ld);
      wmma::load_matrix_sync(fb, bT ? b.row(cb) + kk : b.row(kk) + cb, b.ld);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c.row(r0) + cb, acc, c.ld, wmma::mem_row_major);
  }
}

/// Whether query i sees key j (both in range).
__device__ __forceinline__ bool sees(const AttentionLayout &at, int64_t i,
                                     int64_t j, bool causal) {
  return i < at.s && j < at.t && (!causal || j <= i);
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
  loadTile(
      sh.q, dp, q, [&](int64_t i) { return at.query(bh, i); }, q0, at.s, at.d);
  for (int e = threadIdx.x; e < kFlashRows * dvp; e += blockDim.x)
    sh.out.row(e / dvp)[e % dvp] = 0.0f;
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    sh.max[r] = -INFINITY;
    sh.sum[r] = 0.0f;
  }
  // Causal: the keys of this block's last query at most.
  const int64_t keys = causal ? min(at.t, q0 + kFlashRows) : at.t;
  for (int64_t k0 = 0; k0 < keys; k0 += kFlashRows) {
    __syncthreads(); // the last block's keys and values are read
    loadTile(
        sh.k, dp, k, [&](int64_t j) { return at.key(bh, j); }, k0, at.t, at.d);
    loadTile(
        sh.v, dvp, v, [&](int64_t j) { return at.value(bh, j); }, k0, at.t,
        at.dv);
    __syncthreads();
    warpProduct<true>(sh.scores, r0, kFlashRows, dp, sh.q, sh.k, false);
    __syncwarp();
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr;
      const int64_t i = q0 + r;
      float x[2];
      bool seen[2];
      for (int h = 0; h < 2; ++h) {
        const int c = lane + 32 * h;
        seen[h] = sees(at, i, k0 + c, causal);
        x[h] = seen[h] ? scale * sh.scores.row(r)[c] : -INFINITY;
      }
      const float before = sh.max[r];
      const float now = fmaxf(before, warpMax(fmaxf(x[0], x[1])));
      float part = 0.0f;
      for (int h = 0; h < 2; ++h) {
        const int c = lane + 32 * h;
        const float e = seen[h] ? fastExp(x[h] - now) : 0.0f;
        part += e;
        sh.p.row(r)[c] = fromFloat<T>(seen[h] ? e * drop(bh, i, k0 + c) : 0.0f);
      }
      const float sum = warpSum(part);
      const float factor = before == -INFINITY ? 0.0f : fastExp(before - now);
      __syncwarp();
      if (lane == 0) {
        sh.max[r] = now;
        sh.sum[r] = sh.sum[r] * factor + sum;
        sh.rescale[r] = factor;
      }
    }
    __syncwarp();
    for (int e = lane; e < 16 * dvp; e += 32) {
      const int r = r0 + e / dvp;
      sh.out.row(r)[e % dvp] *= sh.rescale[r];
    }
    __syncwarp();
    warpProduct<false>(sh.out, r0, dvp, kFlashRows, sh.p, sh.v, true);
  }
  __syncwarp();
  for (int e = lane; e < 16 * at.dv; e += 32) {
    const int r = r0 + int(e / at.dv);
    const int64_t i = q0 + r, c = e % at.dv;
    if (i < at.s) {
      const float sum = sh.sum[r];
      out[at.output(bh, i) + c] =
          fromFloat<T>(sum > 0.0f ? sh.out.row(r)[c] / sum : 0.0f);
    }
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
};

/// The rows' log-sum-exp and delta (zero past the queries) into shared
/// memory.
__device__ void loadRowStats(float *lseTo, float *deltaTo, const float *lse,
                             const float *delta, const AttentionLayout &at,
                             int64_t bh, int64_t q0) {
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    const int64_t i = q0 + r;
    lseTo[r] = i < at.s ? lse[at.lse(bh, i)] : 0.0f;
    deltaTo[r] = i < at.s ? delta[bh * at.s + i] : 0.0f;
  }
}

/// `rows` rows of f32 `from` rounded into a tensor's rows (row r at
/// rowAt(first + r), `width` columns, rows past `limit` left out); the
/// warp's rows r0 .. r0 + 15.
template <typename T, typename RowAt>
__device__ void storeRows(T *to, RowAt rowAt, const Tile<float> &from, int r0,
                          int64_t first, int64_t limit, int64_t width) {
  for (int e = threadIdx.x % 32; e < 16 * width; e += 32) {
    const int r = r0 + int(e / width);
    const int64_t g = first + r, c = e % width;
    if (g < limit)
      to[rowAt(g) + c] = fromFloat<T>(from.row(r)[c]);
  }
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
  loadTile(
      sh.own, dp, k, [&](int64_t j) { return at.key(bh, j); }, k0, at.t, at.d);
  loadTile(
      sh.ownV, dvp, v, [&](int64_t j) { return at.value(bh, j); }, k0, at.t,
      at.dv);
  for (int e = threadIdx.x; e < kFlashRows * dp; e += blockDim.x)
    sh.grad.row(e / dp)[e % dp] = 0.0f;
  for (int e = threadIdx.x; e < kFlashRows * dvp; e += blockDim.x)
    sh.gradV.row(e / dvp)[e % dvp] = 0.0f;
  // Causal: queries from this block's first key on.
  for (int64_t q0 = causal ? k0 : 0; q0 < at.s; q0 += kFlashRows) {
    __syncthreads(); // the last block's queries are read
    loadTile(
        sh.other, dp, q, [&](int64_t i) { return at.query(bh, i); }, q0, at.s,
        at.d);
    loadTile(
        sh.otherV, dvp, dout, [&](int64_t i) { return at.output(bh, i); }, q0,
        at.s, at.dv);
    loadRowStats(sh.lse, sh.delta, lse, delta, at, bh, q0);
    __syncthreads();
    warpProduct<true>(sh.scores, r0, kFlashRows, dp, sh.own, sh.other, false);
    warpProduct<true>(sh.scoreGrad, r0, kFlashRows, dvp, sh.ownV, sh.otherV,
                      false);
    __syncwarp();
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      const int64_t j = k0 + r, i = q0 + c;
      float dropped = 0.0f, ds = 0.0f;
      if (sees(at, i, j, causal)) {
        const float p = fastExp(scale * sh.scores.row(r)[c] - sh.lse[c]);
        const float m = drop(bh, i, j);
        dropped = p * m;
        ds = scale * p * (m * sh.scoreGrad.row(r)[c] - sh.delta[c]);
      }
      sh.p.row(r)[c] = fromFloat<T>(dropped);
      sh.scoreGrad.row(r)[c] = ds;
    }
    __syncwarp();
    warpProduct<false>(sh.gradV, r0, dvp, kFlashRows, sh.p, sh.otherV, true);
    __syncwarp();
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      sh.p.row(r)[c] = fromFloat<T>(sh.scoreGrad.row(r)[c]);
    }
    __syncwarp();
    warpProduct<false>(sh.grad, r0, dp, kFlashRows, sh.p, sh.other, true);
  }
  __syncwarp();
  storeRows(
      dk, [&](int64_t j) { return at.key(bh, j); }, sh.grad, r0, k0, at.t,
      at.d);
  storeRows(
      dv, [&](int64_t j) { return at.value(bh, j); }, sh.gradV, r0, k0, at.t,
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
  loadTile(
      sh.own, dp, q, [&](int64_t i) { return at.query(bh, i); }, q0, at.s,
      at.d);
  loadTile(
      sh.ownV, dvp, dout, [&](int64_t i) { return at.output(bh, i); }, q0, at.s,
      at.dv);
  loadRowStats(sh.lse, sh.delta, lse, delta, at, bh, q0);
  for (int e = threadIdx.x; e < kFlashRows * dp; e += blockDim.x)
    sh.grad.row(e / dp)[e % dp] = 0.0f;
  const int64_t keys = causal ? min(at.t, q0 + kFlashRows) : at.t;
  for (int64_t k0 = 0; k0 < keys; k0 += kFlashRows) {
    __syncthreads(); // the last block's keys and values are read
    loadTile(
        sh.other, dp, k, [&](int64_t j) { return at.key(bh, j); }, k0, at.t,
        at.d);
    loadTile(
        sh.otherV, dvp, v, [&](int64_t j) { return at.value(bh, j); }, k0, at.t,
        at.dv);
    __syncthreads();
    warpProduct<true>(sh.scores, r0, kFlashRows, dp, sh.own, sh.other, false);
    warpProduct<true>(sh.scoreGrad, r0, kFlashRows, dvp, sh.ownV, sh.otherV,
                      false);
    __syncwarp();
    for (int e = lane; e < 16 * kFlashRows; e += 32) {
      const int r = r0 + e / kFlashRows, c = e % kFlashRows;
      const int64_t i = q0 + r, j = k0 + c;
      float ds = 0.0f;
      if (sees(at, i, j, causal)) {
        const float p = fastExp(scale * sh.scores.row(r)[c] - sh.lse[r]);
        ds =
            scale * p * (drop(bh, i, j) * sh.scoreGrad.row(r)[c] - sh.delta[r]);
      }
      sh.p.row(r)[c] = fromFloat<T>(ds);
    }
    __syncwarp();
    warpProduct<false>(sh.grad, r0, dp, kFlashRows, sh.p, sh.other, true);
  }
  __syncwarp();
  storeRows(
      dq, [&](int64_t i) { return at.query(bh, i); }, sh.grad, r0, q0, at.s,
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

/// Whether this call runs the flash kernels: STRATA_CUDA_ATTENTION=flash
/// asks for them (unset or "gemm": the chunked products), for bf16 and
/// f16, where the largest kernel's shared memory fits the device's (head
/// sizes up to 128 on Hopper). An unknown setting fails the step.
template <typename T>
bool useFlash(StrataRtContext *ctx, int64_t site, const AttentionLayout &at) {
  const char *set = std::getenv("STRATA_CUDA_ATTENTION");
  const std::string kind = set && *set ? set : "gemm";
  if (kind != "gemm" && kind != "flash") {
    ctx->fail(site,
              "STRATA_CUDA_ATTENTION is 'gemm' or 'flash', not '" + kind + "'");
    return false;
  }
  if (kind != "flash" || std::is_same_v<T, float>)
    return false;
  int limit = 0;
  if (!ctx->check(
          site,
          cudaDeviceGetAttribute(
              &limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device),
          "strata_rt_attention"))
    return false;
  return flashGradBytes<T>(at, true) <= size_t(limit);
}

/// Launches `kernel` on the compute stream with `bytes` of dynamic shared
/// memory over (slices, blocks of 64 rows); whether it was launched.
template <typename... Params, typename... Args>
bool launchFlash(StrataRtContext *ctx, int64_t site, const char *what,
                 void (*kernel)(Params...), size_t bytes, int64_t slices,
                 int64_t rows, Args... args) {
  if (!ctx->check(
          site,
          cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
          what))
    return false;
  const dim3 grid(unsigned(slices),
                  unsigned((rows + kFlashRows - 1) / kFlashRows));
  kernel<<<grid, kFlashThreads, bytes, ctx->compute>>>(args...);
  return launched(ctx, site, what);
}

} // namespace
} // namespace strata::cuda

using namespace strata::cuda;

extern "C" {

void strata_rt_attention(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, void *lse, int64_t lseType,
                         const void *q, int64_t qType, const void *k,
                         int64_t kType, const void *v, int64_t vType,
                         int64_t batch, int64_t heads, int64_t s, int64_t t,
                         int64_t d, int64_t dv, double scale, int64_t causal,
                         double dropout, int64_t dropoutKey,
                         int64_t microBatches, int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention", {lseType}))
    return;
  const strata::AttentionLayout at{heads, s, t, d, dv};
  const int64_t slices = batch * heads;
  const AttentionDropout drop = attentionDropout(
      ctx, dropout, dropoutKey, microBatches, microBatch, slices, at);
  withSameFloatType(
      ctx, site, "attention", {outType, qType, kType, vType}, [&](auto tag) {
        using T = decltype(tag);
        if (slices == 0 || s == 0)
          return;
        if (t == 0) {
          // No key: the CPU's zero output and -inf log-sum-exp.
          strata_rt_fill(ctx, site, out, outType, slices * s * dv, 0.0);
          strata_rt_fill(ctx, site, lse, STRATA_RT_F32, slices * s, -INFINITY);
          return;
        }
        if constexpr (!std::is_same_v<T, float>) {
          const bool flash = useFlash<T>(ctx, site, at);
          if (!ctx->error.empty())
            return;
          if (flash) {
            launchFlash(ctx, site, "strata_rt_attention", flashForward<T>,
                        flashForwardBytes<T>(at), slices, s,
                        static_cast<T *>(out), static_cast<float *>(lse),
                        static_cast<const T *>(q), static_cast<const T *>(k),
                        static_cast<const T *>(v), at, float(scale),
                        causal != 0, drop);
            return;
          }
        }
        const int64_t tp = paddedKeys(t);
        int64_t chunk = 0;
        const std::optional<ForwardScratch<T>> scratch =
            chunkScratch<ForwardScratch<T>>(ctx, site, slices, at, tp, chunk);
        if (!scratch)
          return;
        const Gathered<T> &in = scratch->in;
        float *scores = scratch->scores, *o = scratch->o;
        T *p = scratch->p;
        const Product product{ctx, site, outType};
        for (int64_t first = 0; first < slices; first += chunk) {
          const int64_t n = std::min(chunk, slices - first);
          in.gather(ctx, q, k, v, at, tp, first, n);
          if (!launched(ctx, site, "strata_rt_attention") ||
              !product(n, s, tp, d, in.q, false, in.k, true, scores))
            return;
          attentionSoftmax<T>
              <<<gridFor(n * s, 1), rowThreads(tp), 0, ctx->compute>>>(
                  p, static_cast<float *>(lse), scores, at, tp, first, n * s,
                  float(scale), causal != 0, drop);
          if (!launched(ctx, site, "strata_rt_attention") ||
              !product(n, s, dv, tp, p, false, in.v, false, o))
            return;
          scatterRows<T><<<gridFor(n * s * dv), kThreads, 0, ctx->compute>>>(
              static_cast<T *>(out), o, at, Rows::Output, first, n, s, s, dv);
          if (!launched(ctx, site, "strata_rt_attention"))
            return;
        }
      });
}

void strata_rt_attention_grad(
    StrataRtContext *ctx, int64_t site, void *dq, int64_t dqType, void *dk,
    int64_t dkType, void *dv, int64_t dvType, const void *q, int64_t qType,
    const void *k, int64_t kType, const void *v, int64_t vType, const void *out,
    int64_t outType, const void *lse, int64_t lseType, const void *dout,
    int64_t doutType, int64_t batch, int64_t heads, int64_t s, int64_t t,
    int64_t d, int64_t dvDim, double scale, int64_t causal, double dropout,
    int64_t dropoutKey, int64_t microBatches, int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention_grad", {lseType}))
    return;
  const strata::AttentionLayout at{heads, s, t, d, dvDim};
  const int64_t slices = batch * heads;
  const AttentionDropout drop = attentionDropout(
      ctx, dropout, dropoutKey, microBatches, microBatch, slices, at);
  withSameFloatType(
      ctx, site, "attention_grad",
      {dqType, dkType, dvType, qType, kType, vType, outType, doutType},
      [&](auto tag) {
        using T = decltype(tag);
        if (slices == 0)
          return;
        if (s == 0 || t == 0) {
          // No query sees a key: every gradient is zero.
          strata_rt_fill(ctx, site, dq, dqType, slices * s * d, 0.0);
          strata_rt_fill(ctx, site, dk, dkType, slices * t * d, 0.0);
          strata_rt_fill(ctx, site, dv, dvType, slices * t * dvDim, 0.0);
          return;
        }
        if constexpr (!std::is_same_v<T, float>) {
          const bool flash = useFlash<T>(ctx, site, at);
          if (!ctx->error.empty())
            return;
          if (flash) {
            const char *what = "strata_rt_attention_grad";
            auto *delta = static_cast<float *>(
                ctx->scratchBytes(site, size_t(slices * s) * sizeof(float)));
            if (!delta)
              return;
            attentionDelta<T><<<gridFor(slices * s, 1), rowThreads(dvDim), 0,
                                ctx->compute>>>(
                delta, static_cast<const T *>(out),
                static_cast<const T *>(dout), at, 0, slices * s);
            if (!launched(ctx, site, what) ||
                !launchFlash(
                    ctx, site, what, flashGradKeys<T>,
                    flashGradBytes<T>(at, true), slices, t,
                    static_cast<T *>(dk), static_cast<T *>(dv),
                    static_cast<const T *>(q), static_cast<const T *>(k),
                    static_cast<const T *>(v), static_cast<const T *>(dout),
                    static_cast<const float *>(lse),
                    static_cast<const float *>(delta), at, float(scale),
                    causal != 0, drop))
              return;
            launchFlash(ctx, site, what, flashGradQueries<T>,
                        flashGradBytes<T>(at, false), slices, s,
                        static_cast<T *>(dq), static_cast<const T *>(q),
                        static_cast<const T *>(k), static_cast<const T *>(v),
                        static_cast<const T *>(dout),
                        static_cast<const float *>(lse),
                        static_cast<const float *>(delta), at, float(scale),
                        causal != 0, drop);
            return;
          }
        }
        const int64_t tp = paddedKeys(t);
        int64_t chunk = 0;
        const std::optional<BackwardScratch<T>> scratch =
            chunkScratch<BackwardScratch<T>>(ctx, site, slices, at, tp, chunk);
        if (!scratch)
          return;
        const Gathered<T> &in = scratch->in;
        T *dos = scratch->dout, *p = scratch->p;
        float *delta = scratch->delta, *scores = scratch->scores,
              *dp = scratch->dp, *grad = scratch->grad;
        const Product product{ctx, site, qType};
        auto *lsef = static_cast<const float *>(lse);
        for (int64_t first = 0; first < slices; first += chunk) {
          const int64_t n = std::min(chunk, slices - first);
          in.gather(ctx, q, k, v, at, tp, first, n);
          gatherRows<T><<<gridFor(n * s * dvDim), kThreads, 0, ctx->compute>>>(
              dos, static_cast<const T *>(dout), at, Rows::Output, first, n, s,
              s, dvDim);
          attentionDelta<T>
              <<<gridFor(n * s, 1), rowThreads(dvDim), 0, ctx->compute>>>(
                  delta, static_cast<const T *>(out),
                  static_cast<const T *>(dout), at, first, n * s);
          if (!launched(ctx, site, "strata_rt_attention_grad") ||
              !product(n, s, tp, d, in.q, false, in.k, true, scores))
            return;
          attentionDroppedProbabilities<T>
              <<<gridFor(n * s * tp), kThreads, 0, ctx->compute>>>(
                  p, scores, lsef, at, tp, first, n * s, float(scale),
                  causal != 0, drop);
          // dV = (m P)^T dO (the padded keys' rows are left out).
          if (!launched(ctx, site, "strata_rt_attention_grad") ||
              !product(n, tp, dvDim, s, p, true, dos, false, grad))
            return;
          scatterRows<T><<<gridFor(n * t * dvDim), kThreads, 0, ctx->compute>>>(
              static_cast<T *>(dv), grad, at, Rows::Value, first, n, t, tp,
              dvDim);
          // dP = dO V^T, then dS over the probabilities' buffer.
          if (!launched(ctx, site, "strata_rt_attention_grad") ||
              !product(n, s, tp, dvDim, dos, false, in.v, true, dp))
            return;
          attentionScoreGrad<T>
              <<<gridFor(n * s * tp), kThreads, 0, ctx->compute>>>(
                  p, scores, dp, lsef, delta, at, tp, first, n * s,
                  float(scale), causal != 0, drop);
          // dQ = dS K, dK = dS^T Q.
          if (!launched(ctx, site, "strata_rt_attention_grad") ||
              !product(n, s, d, tp, p, false, in.k, false, grad))
            return;
          scatterRows<T><<<gridFor(n * s * d), kThreads, 0, ctx->compute>>>(
              static_cast<T *>(dq), grad, at, Rows::Query, first, n, s, s, d);
          if (!launched(ctx, site, "strata_rt_attention_grad") ||
              !product(n, tp, d, s, p, true, in.q, false, grad))
            return;
          scatterRows<T><<<gridFor(n * t * d), kThreads, 0, ctx->compute>>>(
              static_cast<T *>(dk), grad, at, Rows::Key, first, n, t, tp, d);
          if (!launched(ctx, site, "strata_rt_attention_grad"))
            return;
        }
      });
}

} // extern "C"
