//===- Rows.cu - Row-wise CUDA kernels of the runtime C ABI ---------------===//
//
// Softmax, layer norm, embedding, cross-entropy and fused attention, with
// their gradients. The row-wise kernels run one block per row (a grid-
// stride loop over rows): each thread reduces its strided share of the
// row, blockMax / blockSum combine the shares in a fixed order, and a
// last pass writes the row. Every element is read again before it is
// written by the thread that reads it, after the reductions' barriers, so
// an output may alias its input. exp is the CPU runtime's fastExp (the
// one of runtime/common/Activations.h), so that probabilities match the CPU
// to rounding; sums the CPU accumulates in double are accumulated in
// double here too.
//
// Column sums (layer norm's dgamma and dbeta) and the mean of the
// cross-entropy's rows are reduced in two kernels: partials over fixed
// chunks, then the chunks in order. The embedding's gradient sorts the
// positions by id (CUB's radix sort, which is stable) and sums each id's
// rows in position order, as the CPU does, so its result is the CPU's to
// the bit. Ids and labels outside their range are reported through a
// device error word (Context.h) that holds the position and the value of
// the first bad one; the host reads it at the step's end, never per call.
//
// Attention is a direct kernel, not yet a tiled flash kernel: one block
// per (head, query) streams the keys in tiles of kAttentionTile with an
// online softmax (shared memory O(d + dv), whatever t), a warp per score.
// Its gradient recomputes the probabilities from the log-sum-exp: one
// block per (head, query) for dq, then one per (head, key) for dk and dv,
// each looping over the other side, so nothing is summed by atomics. Work
// is O(heads * s * t * (d + dv)) per pass (three passes in all), and each
// block reads its head's K and V (or Q and dO) through L2. Its tensors are
// f32, bf16 or f16 (one type), loaded to f32 and computed in f32 (shared
// memory holds f32), the outputs rounded once; the log-sum-exp is f32.
//
//===----------------------------------------------------------------------===//

#include "Device.cuh"

#include "../common/Activations.h"
#include "../common/AttentionLayout.h"
#include "../common/StrataRandom.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::cuda {
namespace {

using strata::act::fastExp;

/// Sum of `v` over the warp in a fixed order; every lane gets it.
__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Lowers the error word to bad id `value` at position `i` (the first
/// position wins).
__device__ __forceinline__ void reportBadId(unsigned long long *word, int64_t i,
                                            int64_t value) {
  atomicMin(word, badIdWord(i, value));
}

/// Threads per block of a kernel that reduces rows of `n` elements.
inline int rowThreads(int64_t n) {
  return n <= 256 ? 128 : n < 8192 ? 256 : 1024;
}

/// Calls `f(I{})` with the index type of an id type code (i32 or i64,
/// checked by integerIds).
template <typename F> void withIdType(int64_t dtype, F &&f) {
  if (dtype == STRATA_RT_I32)
    f(int32_t{});
  else
    f(int64_t{});
}

/// `bytes` rounded up to a multiple of 256 (offsets into scratch).
inline size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void softmaxKernel(T *out, const T *in, int64_t rows, int64_t n,
                              int64_t causalRows) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = in + r * n;
    T *y = out + r * n;
    int64_t limit = causalRows > 0 ? min(n, r % causalRows + 1) : n;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x)
      mx = fmaxf(mx, toFloat(x[j]));
    mx = blockMax(mx, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < limit; j += blockDim.x)
      sum += fastExp(toFloat(x[j]) - mx);
    float inv = 1.0f / blockSum(sum, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      y[j] = fromFloat<T>(j < limit ? fastExp(toFloat(x[j]) - mx) * inv : 0.0f);
  }
}

template <typename T>
__global__ void softmaxGradKernel(T *dx, const T *y, const T *dy, int64_t rows,
                                  int64_t n) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *yr = y + r * n, *dyr = dy + r * n;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot += toFloat(yr[j]) * toFloat(dyr[j]);
    dot = blockSum(dot, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float yj = toFloat(yr[j]), dyj = toFloat(dyr[j]);
      dx[r * n + j] = fromFloat<T>(yj * (dyj - dot));
    }
  }
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

/// The mean and 1 / sqrt(variance + eps) of a row, each sum of the
/// threads' f32 shares added in double (the CPU's rowStatistics).
template <typename T>
__device__ __forceinline__ float2 rowStatistics(const T *x, int64_t n,
                                                double eps, double *shared) {
  float part = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    part += toFloat(x[j]);
  const float m = float(blockSum(double(part), shared) / double(n));
  part = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float d = toFloat(x[j]) - m;
    part += d * d;
  }
  double var = blockSum(double(part), shared) / double(n);
  return make_float2(m, float(1.0 / sqrt(var + eps)));
}

template <typename T>
__global__ void layerNormKernel(T *y, const T *x, const T *gamma, const T *beta,
                                int64_t rows, int64_t n, double eps) {
  __shared__ double shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    float2 st = rowStatistics(xr, n, eps, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      y[r * n + j] =
          fromFloat<T>((toFloat(xr[j]) - st.x) * st.y * toFloat(gamma[j]) +
                       toFloat(beta[j]));
  }
}

/// dx of each row, and the row's statistics into `stats` (mean, rstd) for
/// the column sums.
template <typename T>
__global__ void layerNormGradRows(T *dx, float *stats, const T *x,
                                  const T *gamma, const T *dy, int64_t rows,
                                  int64_t n, double eps) {
  __shared__ double shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n, *dyr = dy + r * n;
    float2 st = rowStatistics(xr, n, eps, shared);
    const float m = st.x, rstd = st.y;
    if (threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rstd;
    }
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float xhat = (toFloat(xr[j]) - m) * rstd;
      float dxhat = toFloat(dyr[j]) * toFloat(gamma[j]);
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    const float a = float(blockSum(double(s1), shared) / double(n));
    const float b = float(blockSum(double(s2), shared) / double(n));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float xhat = (toFloat(xr[j]) - m) * rstd;
      dx[r * n + j] = fromFloat<T>(
          rstd * (toFloat(dyr[j]) * toFloat(gamma[j]) - a - xhat * b));
    }
  }
}

/// Column sums of dy * xhat and dy over the rows of chunk blockIdx.y, in
/// row order and in double: partial[2 * chunk] and partial[2 * chunk + 1]
/// (rows of n).
template <typename T>
__global__ void layerNormGradColumns(double *partial, const float *stats,
                                     const T *x, const T *dy, int64_t rows,
                                     int64_t n, int64_t chunkRows) {
  int64_t chunk = blockIdx.y;
  int64_t r0 = chunk * chunkRows, r1 = min(rows, r0 + chunkRows);
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    double dg = 0.0, db = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      float m = stats[2 * r], rstd = stats[2 * r + 1];
      float g = toFloat(dy[r * n + j]);
      float xhat = (toFloat(x[r * n + j]) - m) * rstd;
      dg += g * xhat;
      db += g;
    }
    partial[2 * chunk * n + j] = dg;
    partial[(2 * chunk + 1) * n + j] = db;
  }
}

/// dgamma and dbeta: the chunks' partial sums added in chunk order.
template <typename T>
__global__ void layerNormGradFinish(T *dgamma, T *dbeta, const double *partial,
                                    int64_t chunks, int64_t n) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    double dg = 0.0, db = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      dg += partial[2 * c * n + j];
      db += partial[(2 * c + 1) * n + j];
    }
    dgamma[j] = fromFloat<T>(float(dg));
    dbeta[j] = fromFloat<T>(float(db));
  }
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// out[i] = table[ids[i]], zeros (and the error word set) for an id outside
/// [0, vocab).
template <typename T, typename I>
__global__ void embeddingKernel(T *out, const T *table, const I *ids,
                                unsigned long long *error, int64_t count,
                                int64_t vocab, int64_t width) {
  int64_t total = count * width;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = e / width, j = e - i * width;
    int64_t id = ids[i];
    if (id < 0 || id >= vocab) {
      out[e] = fromFloat<T>(0.0f);
      if (j == 0)
        reportBadId(error, i, id);
      continue;
    }
    out[e] = table[id * width + j];
  }
}

/// The sort's input: each position's id (vocab for an id out of range,
/// which sorts last and is skipped) and the position itself.
template <typename I>
__global__ void embeddingGradKeys(uint64_t *keys, int64_t *positions,
                                  const I *ids, int64_t count, int64_t vocab) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t id = ids[i];
    keys[i] = id < 0 || id >= vocab ? uint64_t(vocab) : uint64_t(id);
    positions[i] = i;
  }
}

/// One block per run of equal ids in the sorted keys (found at its first
/// element): the row of dtable is the sum of the run's rows of dy in f32,
/// in position order (the sort is stable).
template <typename T>
__global__ void embeddingGradRows(T *dtable, const T *dy, const uint64_t *keys,
                                  const int64_t *positions, int64_t count,
                                  int64_t vocab, int64_t width) {
  for (int64_t p = blockIdx.x; p < count; p += gridDim.x) {
    uint64_t id = keys[p];
    if (id >= uint64_t(vocab) || (p > 0 && keys[p - 1] == id))
      continue;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      float sum = 0.0f;
      for (int64_t q = p; q < count && keys[q] == id; ++q)
        sum += toFloat(dy[positions[q] * width + j]);
      dtable[int64_t(id) * width + j] = fromFloat<T>(sum);
    }
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

/// Each row's -log softmax(logits)[label] in double (0, and the error word
/// set, for a label outside [0, vocab)).
template <typename T, typename I>
__global__ void crossEntropyRows(double *perRow, unsigned long long *error,
                                 const T *logits, const I *labels, int64_t rows,
                                 int64_t vocab) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = logits + r * vocab;
    int64_t label = labels[r];
    if (label < 0 || label >= vocab) {
      if (threadIdx.x == 0) {
        perRow[r] = 0.0;
        reportBadId(error, r, label);
      }
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      mx = fmaxf(mx, toFloat(x[j]));
    mx = blockMax(mx, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      sum += fastExp(toFloat(x[j]) - mx);
    sum = blockSum(sum, shared);
    if (threadIdx.x == 0)
      perRow[r] = log(double(sum)) + double(mx) - double(toFloat(x[label]));
  }
}

/// loss = the mean of the rows' losses, summed in double in a fixed order
/// (one block).
template <typename T>
__global__ void crossEntropyMean(T *loss, const double *perRow, int64_t rows) {
  __shared__ double shared[32];
  double part = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    part += perRow[r];
  double total = blockSum(part, shared);
  if (threadIdx.x == 0)
    loss[0] = fromFloat<T>(float(total / double(rows)));
}

/// dlogits = dloss / rows * (softmax(logits) - onehot(label)); a label out
/// of range (reported by the forward) subtracts nothing.
template <typename T, typename I>
__global__ void crossEntropyGradKernel(T *dlogits, const T *logits,
                                       const I *labels, const T *dloss,
                                       int64_t rows, int64_t vocab) {
  __shared__ float shared[32];
  const float scale = toFloat(dloss[0]) / float(rows);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = logits + r * vocab;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      mx = fmaxf(mx, toFloat(x[j]));
    mx = blockMax(mx, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      sum += fastExp(toFloat(x[j]) - mx);
    const float f = scale / blockSum(sum, shared);
    const int64_t label = labels[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float o = fastExp(toFloat(x[j]) - mx) * f;
      if (j == label)
        o -= scale;
      dlogits[r * vocab + j] = fromFloat<T>(o);
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Threads of the attention kernels, and keys (or queries) per tile: one
/// tile entry per thread.
constexpr int kAttentionThreads = 128;
constexpr int kAttentionTile = kAttentionThreads;

/// Bytes of `floats` floats of dynamic shared memory.
inline size_t sharedFloats(int64_t floats) {
  return size_t(floats) * sizeof(float);
}

/// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default
/// 48 KiB for very wide heads); false, the failure recorded, if it cannot.
template <typename K>
bool allowShared(StrataRtContext *ctx, int64_t site, K kernel, size_t bytes,
                 const char *name) {
  if (bytes <= 48 * 1024)
    return true;
  return ctx->check(
      site,
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(bytes)),
      name);
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

/// One block per (batch and head, query i), in AttentionLayout: the scores
/// of a tile of keys (a warp per score), the online softmax's running
/// maximum m and sum, and the running output acc (one column per thread)
/// rescaled by exp(m_old - m_new); then out = acc / sum and lse = m +
/// log(sum). Dropout scales the probabilities in acc, not in sum.
template <typename T>
__global__ void attentionKernel(T *out, float *lse, const T *q, const T *k,
                                const T *v, AttentionLayout at, int64_t slices,
                                float scale, bool causal,
                                AttentionDropout drop) {
  const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
  const int64_t ldk = at.rowStride(), ldv = at.valueRowStride();
  extern __shared__ float smem[];
  float *reduce = smem, *qi = reduce + 32, *acc = qi + d,
        *e = acc + dv; // e: kAttentionTile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  for (int64_t row = blockIdx.x; row < slices * s; row += gridDim.x) {
    const int64_t h = row / s, i = row - h * s;
    const T *kh = k + at.key(h, 0), *vh = v + at.value(h, 0);
    __syncthreads(); // the previous row is done with shared memory
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      qi[c] = toFloat(q[at.query(h, i) + c]);
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x)
      acc[c] = 0.0f;
    __syncthreads();
    const int64_t limit = causal ? min(i + 1, t) : t;
    float m = -INFINITY, sum = 0.0f;
    for (int64_t j0 = 0; j0 < limit; j0 += kAttentionTile) {
      const int n = int(min(int64_t(kAttentionTile), limit - j0));
      for (int jj = warp; jj < n; jj += warps) {
        const T *kj = kh + (j0 + jj) * ldk;
        float dot = 0.0f;
        for (int64_t c = lane; c < d; c += 32)
          dot += qi[c] * toFloat(kj[c]);
        dot = warpSum(dot);
        if (lane == 0)
          e[jj] = scale * dot;
      }
      __syncthreads();
      const float x = threadIdx.x < n ? e[threadIdx.x] : -INFINITY;
      const float mNew = fmaxf(m, blockMax(x, reduce));
      const float alpha = m == -INFINITY ? 0.0f : fastExp(m - mNew);
      const float p = threadIdx.x < n ? fastExp(x - mNew) : 0.0f;
      e[threadIdx.x] = threadIdx.x < n ? p * drop(h, i, j0 + threadIdx.x) : p;
      sum = sum * alpha + blockSum(p, reduce); // its barriers publish e
      for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) {
        float a = acc[c] * alpha;
        for (int jj = 0; jj < n; ++jj)
          a += e[jj] * toFloat(vh[(j0 + jj) * ldv + c]);
        acc[c] = a;
      }
      m = mNew;
      __syncthreads(); // before the next tile's scores overwrite e
    }
    if (threadIdx.x == 0)
      lse[at.lse(h, i)] = m + logf(sum);
    const float inv = 1.0f / sum;
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x)
      out[at.output(h, i) + c] = fromFloat<T>(limit > 0 ? acc[c] * inv : 0.0f);
  }
}

/// The attention gradient's two dot products of a (query i, key j) pair,
/// q_i . k_j over `d` and dO_i . v_j over `dv`, each summed by the warp in a
/// fixed order (every lane gets both); each operand is in shared memory
/// (float) or global memory (the storage type).
template <typename Q, typename K, typename G, typename V>
__device__ __forceinline__ void scoreDots(const Q *qi, const K *kj, int64_t d,
                                          const G *doi, const V *vj, int64_t dv,
                                          int lane, float &x, float &dp) {
  x = 0.0f;
  dp = 0.0f;
  for (int64_t c = lane; c < d; c += 32)
    x += toFloat(qi[c]) * toFloat(kj[c]);
  for (int64_t c = lane; c < dv; c += 32)
    dp += toFloat(doi[c]) * toFloat(vj[c]);
  x = warpSum(x);
  dp = warpSum(dp);
}

/// One block per (batch and head, query i): delta_i = dO_i . O_i (kept for
/// the key pass, [slices, s]), then over the keys j the query sees: P_ij =
/// exp(scale q_i . k_j - lse_i), dS_ij = P_ij (dO_i . v_j - delta_i), dq_i =
/// scale sum_j dS_ij k_j; with dropout (factor m_ij), dS_ij = P_ij (m_ij
/// dO_i . v_j - delta_i).
template <typename T>
__global__ void
attentionGradQueries(T *dq, float *delta, const T *q, const T *k, const T *v,
                     const T *out, const float *lse, const T *dout,
                     AttentionLayout at, int64_t slices, float scale,
                     bool causal, AttentionDropout drop) {
  const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
  const int64_t ldk = at.rowStride(), ldv = at.valueRowStride();
  extern __shared__ float smem[];
  float *reduce = smem, *qi = reduce + 32, *doi = qi + d, *acc = doi + dv,
        *ds = acc + d; // ds: kAttentionTile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  for (int64_t row = blockIdx.x; row < slices * s; row += gridDim.x) {
    const int64_t h = row / s, i = row - h * s;
    const T *kh = k + at.key(h, 0), *vh = v + at.value(h, 0);
    __syncthreads(); // the previous row is done with shared memory
    float part = 0.0f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      qi[c] = toFloat(q[at.query(h, i) + c]);
      acc[c] = 0.0f;
    }
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) {
      float g = toFloat(dout[at.output(h, i) + c]);
      doi[c] = g;
      part += g * toFloat(out[at.output(h, i) + c]);
    }
    const float di = blockSum(part, reduce); // its barriers publish qi, doi
    if (threadIdx.x == 0)
      delta[at.lse(h, i)] = di;
    const float li = lse[at.lse(h, i)];
    const int64_t limit = causal ? min(i + 1, t) : t;
    for (int64_t j0 = 0; j0 < limit; j0 += kAttentionTile) {
      const int n = int(min(int64_t(kAttentionTile), limit - j0));
      for (int jj = warp; jj < n; jj += warps) {
        const T *kj = kh + (j0 + jj) * ldk, *vj = vh + (j0 + jj) * ldv;
        float x, dp;
        scoreDots(qi, kj, d, doi, vj, dv, lane, x, dp);
        if (lane == 0) {
          float p = fastExp(scale * x - li);
          ds[jj] = p * (drop(h, i, j0 + jj) * dp - di);
        }
      }
      __syncthreads();
      for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float a = acc[c];
        for (int jj = 0; jj < n; ++jj)
          a += ds[jj] * toFloat(kh[(j0 + jj) * ldk + c]);
        acc[c] = a;
      }
      __syncthreads(); // before the next tile overwrites ds
    }
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      dq[at.query(h, i) + c] = fromFloat<T>(scale * acc[c]);
  }
}

/// One block per (batch and head, key j), over the queries i that see it:
/// dv_j = sum_i P_ij dO_i and dk_j = scale sum_i dS_ij q_i, with delta from
/// attentionGradQueries (dropout: m_ij P_ij in dv_j, dS_ij as there).
template <typename T>
__global__ void
attentionGradKeys(T *dk, T *dvOut, const T *q, const T *k, const T *v,
                  const float *lse, const float *delta, const T *dout,
                  AttentionLayout at, int64_t slices, float scale, bool causal,
                  AttentionDropout drop) {
  const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
  const int64_t ldq = at.rowStride(), ldo = at.valueRowStride();
  extern __shared__ float smem[];
  float *kj = smem, *vj = kj + d, *accK = vj + dv, *accV = accK + d,
        *pt = accV + dv, *ds = pt + kAttentionTile; // pt, ds: kAttentionTile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  for (int64_t row = blockIdx.x; row < slices * t; row += gridDim.x) {
    const int64_t h = row / t, j = row - h * t;
    const T *qh = q + at.query(h, 0), *doh = dout + at.output(h, 0);
    const float *lseh = lse + at.lse(h, 0), *deltah = delta + at.lse(h, 0);
    __syncthreads(); // the previous row is done with shared memory
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      kj[c] = toFloat(k[at.key(h, j) + c]);
      accK[c] = 0.0f;
    }
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) {
      vj[c] = toFloat(v[at.value(h, j) + c]);
      accV[c] = 0.0f;
    }
    __syncthreads();
    for (int64_t i0 = causal ? j : 0; i0 < s; i0 += kAttentionTile) {
      const int n = int(min(int64_t(kAttentionTile), s - i0));
      for (int ii = warp; ii < n; ii += warps) {
        const int64_t i = i0 + ii;
        const T *qi = qh + i * ldq, *doi = doh + i * ldo;
        float x, dp;
        scoreDots(qi, kj, d, doi, vj, dv, lane, x, dp);
        if (lane == 0) {
          float p = fastExp(scale * x - lseh[i]);
          float m = drop(h, i, j);
          pt[ii] = p * m;
          ds[ii] = p * (m * dp - deltah[i]);
        }
      }
      __syncthreads();
      for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) {
        float a = accV[c];
        for (int ii = 0; ii < n; ++ii)
          a += pt[ii] * toFloat(doh[(i0 + ii) * ldo + c]);
        accV[c] = a;
      }
      for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float a = accK[c];
        for (int ii = 0; ii < n; ++ii)
          a += ds[ii] * toFloat(qh[(i0 + ii) * ldq + c]);
        accK[c] = a;
      }
      __syncthreads(); // before the next tile overwrites pt and ds
    }
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      dk[at.key(h, j) + c] = fromFloat<T>(scale * accK[c]);
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x)
      dvOut[at.value(h, j) + c] = fromFloat<T>(accV[c]);
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

} // namespace
} // namespace strata::cuda

using namespace strata::cuda;

extern "C" {

void strata_rt_softmax(StrataRtContext *ctx, int64_t site, void *out,
                       int64_t outType, const void *in, int64_t inType,
                       int64_t rows, int64_t n, int64_t causalRows) {
  withSameFloatType(ctx, site, "softmax", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0 || n == 0)
      return;
    softmaxKernel<T><<<gridFor(rows, 1), rowThreads(n), 0, ctx->compute>>>(
        static_cast<T *>(out), static_cast<const T *>(in), rows, n, causalRows);
    launched(ctx, site, "strata_rt_softmax");
  });
}

void strata_rt_softmax_grad(StrataRtContext *ctx, int64_t site, void *dx,
                            int64_t dxType, const void *y, int64_t yType,
                            const void *dy, int64_t dyType, int64_t rows,
                            int64_t n) {
  withSameFloatType(
      ctx, site, "softmax_grad", {dxType, yType, dyType}, [&](auto tag) {
        using T = decltype(tag);
        if (rows == 0 || n == 0)
          return;
        softmaxGradKernel<T>
            <<<gridFor(rows, 1), rowThreads(n), 0, ctx->compute>>>(
                static_cast<T *>(dx), static_cast<const T *>(y),
                static_cast<const T *>(dy), rows, n);
        launched(ctx, site, "strata_rt_softmax_grad");
      });
}

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
        size_t shared = sharedFloats(32 + d + dv + kAttentionTile);
        if (!allowShared(ctx, site, attentionKernel<T>, shared, "attention"))
          return;
        attentionKernel<T><<<gridFor(slices * s, 1), kAttentionThreads, shared,
                             ctx->compute>>>(
            static_cast<T *>(out), static_cast<float *>(lse),
            static_cast<const T *>(q), static_cast<const T *>(k),
            static_cast<const T *>(v), at, slices, float(scale), causal != 0,
            drop);
        launched(ctx, site, "strata_rt_attention");
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
        auto *qT = static_cast<const T *>(q);
        auto *kT = static_cast<const T *>(k);
        auto *vT = static_cast<const T *>(v);
        auto *doutT = static_cast<const T *>(dout);
        auto *lsef = static_cast<const float *>(lse);
        float *delta = nullptr;
        if (s > 0) {
          delta = static_cast<float *>(
              ctx->scratchBytes(site, size_t(slices * s) * sizeof(float)));
          if (!delta)
            return;
          size_t shared = sharedFloats(32 + 2 * d + dvDim + kAttentionTile);
          if (!allowShared(ctx, site, attentionGradQueries<T>, shared,
                           "attention_grad"))
            return;
          attentionGradQueries<T>
              <<<gridFor(slices * s, 1), kAttentionThreads, shared,
                 ctx->compute>>>(static_cast<T *>(dq), delta, qT, kT, vT,
                                 static_cast<const T *>(out), lsef, doutT, at,
                                 slices, float(scale), causal != 0, drop);
          if (!launched(ctx, site, "strata_rt_attention_grad"))
            return;
        }
        // With s == 0 this writes dk = dv = 0, as the CPU.
        if (t == 0)
          return;
        size_t shared = sharedFloats(2 * (d + dvDim + kAttentionTile));
        if (!allowShared(ctx, site, attentionGradKeys<T>, shared,
                         "attention_grad"))
          return;
        attentionGradKeys<T><<<gridFor(slices * t, 1), kAttentionThreads,
                               shared, ctx->compute>>>(
            static_cast<T *>(dk), static_cast<T *>(dv), qT, kT, vT, lsef, delta,
            doutT, at, slices, float(scale), causal != 0, drop);
        launched(ctx, site, "strata_rt_attention_grad");
      });
}

void strata_rt_layer_norm(StrataRtContext *ctx, int64_t site, void *y,
                          int64_t yType, const void *x, int64_t xType,
                          const void *gamma, int64_t gammaType,
                          const void *beta, int64_t betaType, int64_t rows,
                          int64_t n, double eps) {
  withSameFloatType(
      ctx, site, "layer_norm", {yType, xType, gammaType, betaType},
      [&](auto tag) {
        using T = decltype(tag);
        if (rows == 0 || n == 0)
          return;
        layerNormKernel<T>
            <<<gridFor(rows, 1), rowThreads(n), 0, ctx->compute>>>(
                static_cast<T *>(y), static_cast<const T *>(x),
                static_cast<const T *>(gamma), static_cast<const T *>(beta),
                rows, n, eps);
        launched(ctx, site, "strata_rt_layer_norm");
      });
}

void strata_rt_layer_norm_grad(StrataRtContext *ctx, int64_t site, void *dx,
                               int64_t dxType, void *dgamma, int64_t dgammaType,
                               void *dbeta, int64_t dbetaType, const void *x,
                               int64_t xType, const void *gamma,
                               int64_t gammaType, const void *dy,
                               int64_t dyType, int64_t rows, int64_t n,
                               double eps) {
  withSameFloatType(
      ctx, site, "layer_norm_grad",
      {dxType, dgammaType, dbetaType, xType, gammaType, dyType}, [&](auto tag) {
        using T = decltype(tag);
        if (n == 0)
          return;
        double *partial = nullptr;
        int64_t chunks = 0;
        if (rows > 0) {
          // Chunks of rows for the column sums: enough of them to fill the
          // device, their partials (2 n doubles each) at most 64 MiB.
          chunks =
              std::min<int64_t>({(rows + 31) / 32, 512,
                                 std::max<int64_t>(1, (int64_t(1) << 22) / n)});
          int64_t chunkRows = (rows + chunks - 1) / chunks;
          chunks = (rows + chunkRows - 1) / chunkRows;
          size_t statsBytes = aligned(size_t(2 * rows) * sizeof(float));
          char *scratch = static_cast<char *>(ctx->scratchBytes(
              site, statsBytes + size_t(2 * chunks * n) * sizeof(double)));
          if (!scratch)
            return;
          auto *stats = reinterpret_cast<float *>(scratch);
          partial = reinterpret_cast<double *>(scratch + statsBytes);
          auto *xt = static_cast<const T *>(x);
          auto *dyt = static_cast<const T *>(dy);
          layerNormGradRows<T>
              <<<gridFor(rows, 1), rowThreads(n), 0, ctx->compute>>>(
                  static_cast<T *>(dx), stats, xt,
                  static_cast<const T *>(gamma), dyt, rows, n, eps);
          if (!launched(ctx, site, "strata_rt_layer_norm_grad"))
            return;
          dim3 grid(gridFor(n), unsigned(chunks));
          layerNormGradColumns<T><<<grid, kThreads, 0, ctx->compute>>>(
              partial, stats, xt, dyt, rows, n, chunkRows);
          if (!launched(ctx, site, "strata_rt_layer_norm_grad"))
            return;
        }
        // Without rows this writes dgamma = dbeta = 0, as the CPU.
        layerNormGradFinish<T><<<gridFor(n), kThreads, 0, ctx->compute>>>(
            static_cast<T *>(dgamma), static_cast<T *>(dbeta), partial, chunks,
            n);
        launched(ctx, site, "strata_rt_layer_norm_grad");
      });
}

void strata_rt_embedding(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, const void *table, int64_t tableType,
                         const void *ids, int64_t idsType, int64_t count,
                         int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "embedding", idsType))
    return;
  withSameFloatType(
      ctx, site, "embedding", {outType, tableType}, [&](auto tag) {
        using T = decltype(tag);
        if (count == 0 || width == 0)
          return;
        unsigned long long *error = deviceErrorWord(ctx, site, "id", vocab);
        if (!error)
          return;
        withIdType(idsType, [&](auto idTag) {
          using I = decltype(idTag);
          embeddingKernel<T, I>
              <<<gridFor(count * width), kThreads, 0, ctx->compute>>>(
                  static_cast<T *>(out), static_cast<const T *>(table),
                  static_cast<const I *>(ids), error, count, vocab, width);
        });
        launched(ctx, site, "strata_rt_embedding");
      });
}

void strata_rt_embedding_grad(StrataRtContext *ctx, int64_t site, void *dtable,
                              int64_t dtableType, const void *ids,
                              int64_t idsType, const void *dy, int64_t dyType,
                              int64_t count, int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "embedding_grad", idsType))
    return;
  withSameFloatType(
      ctx, site, "embedding_grad", {dtableType, dyType}, [&](auto tag) {
        using T = decltype(tag);
        if (vocab <= 0 || width == 0)
          return;
        // Rows no id refers to are zero.
        if (!ctx->check(site,
                        cudaMemsetAsync(dtable, 0,
                                        size_t(vocab * width) * sizeof(T),
                                        ctx->compute),
                        "embedding_grad") ||
            count == 0)
          return;
        // Key bits to sort: enough for vocab (ids out of range).
        int bits = 1;
        while (bits < 64 && (uint64_t(vocab) >> bits) != 0)
          ++bits;
        size_t sortBytes = 0;
        if (!ctx->check(site,
                        cub::DeviceRadixSort::SortPairs(
                            nullptr, sortBytes, (const uint64_t *)nullptr,
                            (uint64_t *)nullptr, (const int64_t *)nullptr,
                            (int64_t *)nullptr, count, 0, bits, ctx->compute),
                        "embedding_grad"))
          return;
        size_t array = aligned(size_t(count) * sizeof(uint64_t));
        char *scratch =
            static_cast<char *>(ctx->scratchBytes(site, 4 * array + sortBytes));
        if (!scratch)
          return;
        auto *keys = reinterpret_cast<uint64_t *>(scratch);
        auto *sortedKeys = reinterpret_cast<uint64_t *>(scratch + array);
        auto *positions = reinterpret_cast<int64_t *>(scratch + 2 * array);
        auto *sortedPositions =
            reinterpret_cast<int64_t *>(scratch + 3 * array);
        withIdType(idsType, [&](auto idTag) {
          using I = decltype(idTag);
          embeddingGradKeys<I><<<gridFor(count), kThreads, 0, ctx->compute>>>(
              keys, positions, static_cast<const I *>(ids), count, vocab);
        });
        if (!launched(ctx, site, "strata_rt_embedding_grad") ||
            !ctx->check(site,
                        cub::DeviceRadixSort::SortPairs(
                            scratch + 4 * array, sortBytes, keys, sortedKeys,
                            positions, sortedPositions, count, 0, bits,
                            ctx->compute),
                        "embedding_grad"))
          return;
        embeddingGradRows<T>
            <<<gridFor(count, 1), rowThreads(width), 0, ctx->compute>>>(
                static_cast<T *>(dtable), static_cast<const T *>(dy),
                sortedKeys, sortedPositions, count, vocab, width);
        launched(ctx, site, "strata_rt_embedding_grad");
      });
}

void strata_rt_cross_entropy(StrataRtContext *ctx, int64_t site, void *loss,
                             int64_t lossType, const void *logits,
                             int64_t logitsType, const void *labels,
                             int64_t labelsType, int64_t rows, int64_t vocab) {
  if (!integerIds(ctx, site, "cross_entropy", labelsType))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy", {lossType, logitsType}, [&](auto tag) {
        using T = decltype(tag);
        double *perRow = nullptr;
        if (rows > 0) {
          perRow = static_cast<double *>(
              ctx->scratchBytes(site, size_t(rows) * sizeof(double)));
          unsigned long long *error =
              perRow ? deviceErrorWord(ctx, site, "label", vocab) : nullptr;
          if (!error)
            return;
          withIdType(labelsType, [&](auto idTag) {
            using I = decltype(idTag);
            crossEntropyRows<T, I>
                <<<gridFor(rows, 1), rowThreads(vocab), 0, ctx->compute>>>(
                    perRow, error, static_cast<const T *>(logits),
                    static_cast<const I *>(labels), rows, vocab);
          });
          if (!launched(ctx, site, "strata_rt_cross_entropy"))
            return;
        }
        // Without rows the loss is 0 / 0, as the CPU's.
        crossEntropyMean<T><<<1, 1024, 0, ctx->compute>>>(
            static_cast<T *>(loss), perRow, rows);
        launched(ctx, site, "strata_rt_cross_entropy");
      });
}

void strata_rt_cross_entropy_grad(StrataRtContext *ctx, int64_t site,
                                  void *dlogits, int64_t dlogitsType,
                                  const void *logits, int64_t logitsType,
                                  const void *labels, int64_t labelsType,
                                  const void *dloss, int64_t dlossType,
                                  int64_t rows, int64_t vocab) {
  if (!integerIds(ctx, site, "cross_entropy_grad", labelsType))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy_grad", {dlogitsType, logitsType, dlossType},
      [&](auto tag) {
        using T = decltype(tag);
        if (rows == 0 || vocab == 0)
          return;
        withIdType(labelsType, [&](auto idTag) {
          using I = decltype(idTag);
          crossEntropyGradKernel<T, I>
              <<<gridFor(rows, 1), rowThreads(vocab), 0, ctx->compute>>>(
                  static_cast<T *>(dlogits), static_cast<const T *>(logits),
                  static_cast<const I *>(labels), static_cast<const T *>(dloss),
                  rows, vocab);
        });
        launched(ctx, site, "strata_rt_cross_entropy_grad");
      });
}

} // extern "C"
