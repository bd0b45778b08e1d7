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
#include "FlashAttention.cuh"
#include "Gemm.h"

#include "../common/Activations.h"
#include "../common/AttentionLayout.h"
#include "../common/StrataRandom.h"

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
  static const size_t bytes = size_t(
      budgetBytes("STRATA_CUDA_ATTENTION_CHUNK_BYTES", int64_t(512) << 20));
  return bytes;
}

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
/// inverse. Key and value rows of grouped-query attention are summed over
/// the group's slices, which follow one another in `from` (`first` and
/// `slices` whole groups), in order.
template <typename T>
__global__ void scatterRows(T *to, const float *from, AttentionLayout at,
                            Rows rows, int64_t first, int64_t slices,
                            int64_t len, int64_t stride, int64_t width) {
  const int64_t group =
      rows == Rows::Key || rows == Rows::Value ? at.group() : 1;
  const int64_t n = slices / group * len * width;
  for (int64_t e = gridStart(); e < n; e += gridStride()) {
    const int64_t c = e % width, row = e / width;
    const int64_t slice = row / len * group, r = row % len;
    float sum = 0.0f;
    for (int64_t g = 0; g < group; ++g)
      sum += from[((slice + g) * stride + r) * width + c];
    to[rowAt(at, rows, first + slice, r) + c] = fromFloat<T>(sum);
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
__global__ void __launch_bounds__(kMaxBlockThreads)
    attentionSoftmax(T *p, float *lse, const float *scores, AttentionLayout at,
                     int64_t tp, int64_t first, int64_t rows, float scale,
                     bool causal, AttentionDropout drop) {
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
__global__ void __launch_bounds__(kMaxBlockThreads)
    attentionDelta(float *delta, const T *out, const T *dout,
                   AttentionLayout at, int64_t first, int64_t rows) {
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
__global__ void __launch_bounds__(kMaxBlockThreads)
    attentionScoreGrad(T *ds, const float *scores, const float *dp,
                       const float *lse, const float *delta, AttentionLayout at,
                       int64_t tp, int64_t first, int64_t rows, float scale,
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

/// Slices per chunk when one slice takes `perSlice` bytes of scratch: whole
/// groups of `group` slices (grouped-query attention's gradients of keys and
/// values sum over a group).
int64_t chunkSlices(int64_t slices, size_t perSlice, int64_t group) {
  const int64_t fit = int64_t(chunkBytes() / std::max<size_t>(perSlice, 1));
  return std::clamp<int64_t>(fit / group * group, group,
                             std::max<int64_t>(slices, group));
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
/// at a time, whole groups of `group` slices: measured by carving one slice
/// from no block, then carved from the context's scratch for `chunk` (set
/// here). Null where the scratch could not be had (the failure recorded).
template <typename B>
std::optional<B> chunkScratch(StrataRtContext *ctx, int64_t site,
                              int64_t slices, const AttentionLayout &at,
                              int64_t tp, int64_t group, int64_t &chunk) {
  Carver measure;
  B(measure, 1, at, tp);
  chunk = chunkSlices(slices, measure.used, group);
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

/// Whether the flash kernels this device runs were compiled for sm_80 or
/// later: below it their tiles compile to a trap (FlashAttention.cuh), and
/// a build for an older architecture runs on a newer device from its PTX.
/// Asked once per context.
bool flashCompiled(StrataRtContext *ctx) {
  if (ctx->flashPtxVersion < 0) {
    cudaFuncAttributes attributes;
    // (No image for this device is an error that must not stay pending.)
    bool known =
        cudaFuncGetAttributes(&attributes, flashForward<__nv_bfloat16, 64>) ==
        cudaSuccess;
    if (!known)
      cudaGetLastError();
    ctx->flashPtxVersion = known ? attributes.ptxVersion : 0;
  }
  return ctx->flashPtxVersion >= 80;
}

/// Whether this call runs the flash kernels (the default; unless
/// STRATA_CUDA_ATTENTION=gemm asks for the chunked products): for bf16 and
/// f16 on devices of compute capability 8.0 or later with kernels compiled
/// for them, head sizes up to 128 (the sizes the kernels are tested at),
/// sequences of up to 65535 blocks of 64, where the largest kernel's shared
/// memory fits the device's; the chunked products otherwise. An unknown
/// setting fails the step.
template <typename T>
bool useFlash(StrataRtContext *ctx, int64_t site, const AttentionLayout &at) {
  const char *set = std::getenv("STRATA_CUDA_ATTENTION");
  const std::string kind = set && *set ? set : "flash";
  if (kind != "gemm" && kind != "flash") {
    ctx->fail(site,
              "STRATA_CUDA_ATTENTION is 'gemm' or 'flash', not '" + kind + "'");
    return false;
  }
  // (A grid's y has at most 65535 blocks of 64 rows.)
  const int64_t blocksY = (std::max(at.s, at.t) + kFlashRows - 1) / kFlashRows;
  return kind == "flash" && !std::is_same_v<T, float> &&
         ctx->computeMajor >= 8 && pad16(at.d) <= 128 && pad16(at.dv) <= 128 &&
         blocksY <= 65535 &&
         flashGradBytes<T>(at) <= ctx->sharedPerBlockOptin &&
         flashCompiled(ctx);
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
                         int64_t batch, int64_t heads, int64_t kvHeads,
                         int64_t s, int64_t t, int64_t d, int64_t dv,
                         double scale, int64_t causal, double dropout,
                         int64_t dropoutKey, int64_t microBatches,
                         int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention", {lseType}) ||
      !causalShapeOk(ctx, site, "attention", causal, s, t) ||
      !kvHeadsOk(ctx, site, "attention", heads, kvHeads))
    return;
  const strata::AttentionLayout at{heads, s, t, d, dv, kvHeads};
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
            withFlashWidth(at, [&](auto width) {
              launchFlash(ctx, site, "strata_rt_attention",
                          flashForward<T, decltype(width)::value>,
                          flashForwardBytes<T>(at), slices, s,
                          static_cast<T *>(out), static_cast<float *>(lse),
                          static_cast<const T *>(q), static_cast<const T *>(k),
                          static_cast<const T *>(v), at, float(scale),
                          causal != 0, drop);
            });
            return;
          }
        }
        const int64_t tp = paddedKeys(t);
        int64_t chunk = 0;
        const std::optional<ForwardScratch<T>> scratch =
            chunkScratch<ForwardScratch<T>>(ctx, site, slices, at, tp, 1,
                                            chunk);
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
    int64_t doutType, int64_t batch, int64_t heads, int64_t kvHeads, int64_t s,
    int64_t t, int64_t d, int64_t dvDim, double scale, int64_t causal,
    double dropout, int64_t dropoutKey, int64_t microBatches,
    int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention_grad", {lseType}) ||
      !causalShapeOk(ctx, site, "attention_grad", causal, s, t) ||
      !kvHeadsOk(ctx, site, "attention_grad", heads, kvHeads))
    return;
  const strata::AttentionLayout at{heads, s, t, d, dvDim, kvHeads};
  const int64_t kvSlices = batch * kvHeads;
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
          strata_rt_fill(ctx, site, dk, dkType, kvSlices * t * d, 0.0);
          strata_rt_fill(ctx, site, dv, dvType, kvSlices * t * dvDim, 0.0);
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
            if (!launched(ctx, site, what))
              return;
            const size_t bytes = flashGradBytes<T>(at);
            withFlashWidth(at, [&](auto width) {
              if (launchFlash(
                      ctx, site, what, flashGradKeys<T, decltype(width)::value>,
                      bytes, kvSlices, t, static_cast<T *>(dk),
                      static_cast<T *>(dv), static_cast<const T *>(q),
                      static_cast<const T *>(k), static_cast<const T *>(v),
                      static_cast<const T *>(dout),
                      static_cast<const float *>(lse),
                      static_cast<const float *>(delta), at, float(scale),
                      causal != 0, drop))
                launchFlash(
                    ctx, site, what,
                    flashGradQueries<T, decltype(width)::value>, bytes, slices,
                    s, static_cast<T *>(dq), static_cast<const T *>(q),
                    static_cast<const T *>(k), static_cast<const T *>(v),
                    static_cast<const T *>(dout),
                    static_cast<const float *>(lse),
                    static_cast<const float *>(delta), at, float(scale),
                    causal != 0, drop);
            });
            return;
          }
        }
        const int64_t tp = paddedKeys(t);
        int64_t chunk = 0;
        const std::optional<BackwardScratch<T>> scratch =
            chunkScratch<BackwardScratch<T>>(ctx, site, slices, at, tp,
                                             at.group(), chunk);
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
          scatterRows<T><<<gridFor(n / at.group() * t * dvDim), kThreads, 0,
                           ctx->compute>>>(static_cast<T *>(dv), grad, at,
                                           Rows::Value, first, n, t, tp, dvDim);
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
          scatterRows<T>
              <<<gridFor(n / at.group() * t * d), kThreads, 0, ctx->compute>>>(
                  static_cast<T *>(dk), grad, at, Rows::Key, first, n, t, tp,
                  d);
          if (!launched(ctx, site, "strata_rt_attention_grad"))
            return;
        }
      });
}

} // extern "C"
