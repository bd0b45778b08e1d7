//===- Rows.cu - Row-wise CUDA kernels of the runtime C ABI ---------------===//
//
// Softmax, layer norm, embedding and cross-entropy, with their gradients
// (fused attention is in Attention.cu). The row-wise kernels run a group of
// threads per row (a grid-stride loop over rows): a warp for rows of up to
// kWarpRowMax elements, the whole block for longer ones (RowGroup); each
// thread reduces its strided share of the row, the group combines the
// shares in a fixed order (warp shuffles, then the warps' partials), and a
// last pass writes the row. Every element is read again before it is written by
// the thread that reads it, after the reductions' barriers, so an output may
// alias its input. exp is the CPU runtime's fastExp (the one of
// runtime/common/Activations.h), so that probabilities match the CPU to
// rounding; sums the CPU accumulates in double are accumulated in double here
// too.
//
// Column sums (layer norm's dgamma and dbeta) and the mean of the
// cross-entropy's rows are reduced in two kernels: partials over fixed
// chunks, then the chunks in a fixed order. The embedding's gradient sorts the
// positions by id (CUB's radix sort, which is stable) and sums each id's
// rows in position order, as the CPU does, so its result is the CPU's to
// the bit. Ids and labels outside their range are reported through a
// device error word (Context.h) that holds the position and the value of
// the first bad one; the host reads it at the step's end, never per call.
//
//===----------------------------------------------------------------------===//

#include "Device.cuh"

#include "../common/Activations.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::cuda {
namespace {

using strata::act::fastExp;

/// Lowers the error word to bad id `value` at position `i` (the first
/// position wins).
__device__ __forceinline__ void reportBadId(unsigned long long *word, int64_t i,
                                            int64_t value) {
  atomicMin(word, badIdWord(i, value));
}

/// Calls `f(I{})` with the index type of an id type code (i32 or i64,
/// checked by integerIds).
template <typename F> void withIdType(int64_t dtype, F &&f) {
  if (dtype == STRATA_RT_I32)
    f(int32_t{});
  else
    f(int64_t{});
}

/// Rows up to this long take a warp each (eight rows a block), longer
/// ones a block each: a block's barriers cost more than a short row's work.
constexpr int64_t kWarpRowMax = 1024;

/// The threads that take one row: a warp (kWarp) or the whole block. The
/// group's threads see the same rows in the same order, so its sums need
/// no other barrier.
template <bool kWarp> struct RowGroup {
  /// The block's: 32 values, of the type summed, for its warps' partials.
  void *shared;

  /// This thread's place in the group, and the group's size.
  __device__ int rank() const { return kWarp ? threadIdx.x % 32 : threadIdx.x; }
  __device__ int size() const { return kWarp ? 32 : blockDim.x; }
  /// The group's first row and the stride between its rows.
  __device__ int64_t first() const {
    return kWarp ? int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32
                 : blockIdx.x;
  }
  __device__ int64_t stride() const {
    return kWarp ? int64_t(gridDim.x) * (blockDim.x / 32) : gridDim.x;
  }
  /// `v` combined by `op` over the group in a fixed order (`identity` for
  /// the block's missing warps); every thread of the group gets it.
  template <typename V, typename Op>
  __device__ V reduce(V v, V identity, Op op) const {
    if constexpr (kWarp)
      return warpReduce(v, op);
    else
      return blockReduce(v, static_cast<V *>(shared), identity, op);
  }
  /// The group's sum (float or double) and maximum.
  template <typename V> __device__ V sum(V v) const {
    return reduce(v, V(0), [](V x, V y) { return x + y; });
  }
  __device__ float max(float v) const {
    return reduce(v, -INFINITY, [](float x, float y) { return fmaxf(x, y); });
  }
};

/// Calls `launch(kWarp, blocks, threads)` (kWarp a std::bool_constant) with
/// the group and the grid for `rows` rows of `n` elements.
template <typename Launch>
void launchRows(int64_t rows, int64_t n, Launch &&launch) {
  if (n <= kWarpRowMax)
    launch(std::true_type(), gridFor(rows, 8), 256);
  else
    launch(std::false_type(), gridFor(rows, 1), rowThreads(n));
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

template <typename T, bool kWarp>
__global__ void softmaxKernel(T *out, const T *in, int64_t rows, int64_t n,
                              int64_t causalRows) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *x = in + r * n;
    T *y = out + r * n;
    int64_t limit = causalRows > 0 ? min(n, r % causalRows + 1) : n;
    float mx = -INFINITY;
    for (int64_t j = first; j < limit; j += step)
      mx = fmaxf(mx, toFloat(x[j]));
    mx = group.max(mx);
    float sum = 0.0f;
    for (int64_t j = first; j < limit; j += step)
      sum += fastExp(toFloat(x[j]) - mx);
    float inv = 1.0f / group.sum(sum);
    for (int64_t j = first; j < n; j += step)
      y[j] = fromFloat<T>(j < limit ? fastExp(toFloat(x[j]) - mx) * inv : 0.0f);
  }
}

template <typename T, bool kWarp>
__global__ void softmaxGradKernel(T *dx, const T *y, const T *dy, int64_t rows,
                                  int64_t n) {
  __shared__ double shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *yr = y + r * n, *dyr = dy + r * n;
    float dot = 0.0f;
    for (int64_t j = first; j < n; j += step)
      dot += toFloat(yr[j]) * toFloat(dyr[j]);
    // (The threads' f32 shares added in double, as the CPU's laneSum.)
    dot = float(group.sum(double(dot)));
    for (int64_t j = first; j < n; j += step) {
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
template <typename T, bool kWarp>
__device__ __forceinline__ float2 rowStatistics(const T *x, int64_t n,
                                                double eps,
                                                const RowGroup<kWarp> &group) {
  const int first = group.rank(), step = group.size();
  float part = 0.0f;
  for (int64_t j = first; j < n; j += step)
    part += toFloat(x[j]);
  const float m = float(group.sum(double(part)) / double(n));
  part = 0.0f;
  for (int64_t j = first; j < n; j += step) {
    float d = toFloat(x[j]) - m;
    part += d * d;
  }
  double var = group.sum(double(part)) / double(n);
  return make_float2(m, float(1.0 / sqrt(var + eps)));
}

template <typename T, bool kWarp>
__global__ void layerNormKernel(T *y, const T *x, const T *gamma, const T *beta,
                                int64_t rows, int64_t n, double eps) {
  __shared__ double shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *xr = x + r * n;
    float2 st = rowStatistics(xr, n, eps, group);
    for (int64_t j = first; j < n; j += step)
      y[r * n + j] =
          fromFloat<T>((toFloat(xr[j]) - st.x) * st.y * toFloat(gamma[j]) +
                       toFloat(beta[j]));
  }
}

/// dx of each row, and the row's statistics into `stats` (mean, rstd) for
/// the column sums.
template <typename T, bool kWarp>
__global__ void layerNormGradRows(T *dx, float *stats, const T *x,
                                  const T *gamma, const T *dy, int64_t rows,
                                  int64_t n, double eps) {
  __shared__ double shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *xr = x + r * n, *dyr = dy + r * n;
    float2 st = rowStatistics(xr, n, eps, group);
    const float m = st.x, rstd = st.y;
    if (first == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rstd;
    }
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = first; j < n; j += step) {
      float xhat = (toFloat(xr[j]) - m) * rstd;
      float dxhat = toFloat(dyr[j]) * toFloat(gamma[j]);
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    const float a = float(group.sum(double(s1)) / double(n));
    const float b = float(group.sum(double(s2)) / double(n));
    for (int64_t j = first; j < n; j += step) {
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

/// Warps of a block of layerNormGradFinish, each a lane of the chunks.
constexpr int kFinishWarps = 8;

/// dgamma and dbeta: the chunks' partial sums in a fixed order. A block
/// takes 32 columns at a time, a column per thread of each warp; warp w
/// sums the chunks w, w + kFinishWarps, ... in order, and the first warp
/// adds the warps' sums in order (so that a column's chunks are read by
/// eight warps at once, where a thread reading them all one after another
/// left the device waiting on each load). blockDim.x = 32 kFinishWarps.
template <typename T>
__global__ void layerNormGradFinish(T *dgamma, T *dbeta, const double *partial,
                                    int64_t chunks, int64_t n) {
  __shared__ double sums[2][kFinishWarps][32];
  const int column = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t j0 = int64_t(blockIdx.x) * 32; j0 < n;
       j0 += int64_t(gridDim.x) * 32) {
    const int64_t j = j0 + column;
    double dg = 0.0, db = 0.0;
    if (j < n)
      for (int64_t c = warp; c < chunks; c += kFinishWarps) {
        dg += partial[2 * c * n + j];
        db += partial[(2 * c + 1) * n + j];
      }
    sums[0][warp][column] = dg;
    sums[1][warp][column] = db;
    __syncthreads();
    if (warp == 0 && j < n) {
      dg = 0.0;
      db = 0.0;
      for (int w = 0; w < kFinishWarps; ++w) {
        dg += sums[0][w][column];
        db += sums[1][w][column];
      }
      dgamma[j] = fromFloat<T>(float(dg));
      dbeta[j] = fromFloat<T>(float(db));
    }
    __syncthreads();
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

/// The maximum of row x's `n` elements and the sum of exp(x - maximum), in
/// one pass: each thread keeps a running maximum and a sum rescaled when
/// its maximum grows, and the block combines them in a fixed order (the
/// block's maximum, then each thread's sum rescaled to it). One read of the
/// row where a pass for the maximum and one for the sum took two. As the
/// two passes: the maximum passes over NaNs and a NaN makes the sum NaN; a
/// -inf adds nothing (exp(-inf - maximum)); +inf makes the sum NaN.
struct RowMaxSum {
  float max, sum;
};
template <typename T>
__device__ RowMaxSum rowMaxSum(const T *x, int64_t n, float *shared) {
  float mx = -INFINITY, sum = 0.0f;
  bool nan = false;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = toFloat(x[j]);
    if (v > mx) {
      sum = (mx == -INFINITY ? 0.0f : sum * fastExp(mx - v)) + 1.0f;
      mx = v;
    } else if (v > -INFINITY) {
      sum += fastExp(v - mx);
    } else {
      nan |= v != v;
    }
  }
  const float rowMax = blockMax(mx, shared);
  const float scaled = nan               ? NAN
                       : mx == -INFINITY ? 0.0f
                                         : sum * fastExp(mx - rowMax);
  return {rowMax, blockSum(scaled, shared)};
}

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
    const RowMaxSum row = rowMaxSum(x, vocab, shared);
    if (threadIdx.x == 0)
      perRow[r] =
          log(double(row.sum)) + double(row.max) - double(toFloat(x[label]));
  }
}

/// loss = the mean of the rows' losses, summed in double in a fixed order
/// (one block).
__global__ void crossEntropyMean(float *loss, const double *perRow,
                                 int64_t rows) {
  __shared__ double shared[32];
  double part = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    part += perRow[r];
  double total = blockSum(part, shared);
  if (threadIdx.x == 0)
    loss[0] = float(total / double(rows));
}

/// dlogits = dloss / rows * (softmax(logits) - onehot(label)); a label out
/// of range (reported by the forward) subtracts nothing.
template <typename T, typename I>
__global__ void crossEntropyGradKernel(T *dlogits, const T *logits,
                                       const I *labels, const float *dloss,
                                       int64_t rows, int64_t vocab) {
  __shared__ float shared[32];
  const float scale = dloss[0] / float(rows);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = logits + r * vocab;
    const RowMaxSum row = rowMaxSum(x, vocab, shared);
    const float f = scale / row.sum;
    const int64_t label = labels[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float o = fastExp(toFloat(x[j]) - row.max) * f;
      if (j == label)
        o -= scale;
      dlogits[r * vocab + j] = fromFloat<T>(o);
    }
  }
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
    launchRows(rows, n, [&](auto warp, unsigned blocks, int threads) {
      softmaxKernel<T, decltype(warp)::value>
          <<<blocks, threads, 0, ctx->compute>>>(static_cast<T *>(out),
                                                 static_cast<const T *>(in),
                                                 rows, n, causalRows);
    });
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
        launchRows(rows, n, [&](auto warp, unsigned blocks, int threads) {
          softmaxGradKernel<T, decltype(warp)::value>
              <<<blocks, threads, 0, ctx->compute>>>(
                  static_cast<T *>(dx), static_cast<const T *>(y),
                  static_cast<const T *>(dy), rows, n);
        });
        launched(ctx, site, "strata_rt_softmax_grad");
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
        launchRows(rows, n, [&](auto warp, unsigned blocks, int threads) {
          layerNormKernel<T, decltype(warp)::value>
              <<<blocks, threads, 0, ctx->compute>>>(
                  static_cast<T *>(y), static_cast<const T *>(x),
                  static_cast<const T *>(gamma), static_cast<const T *>(beta),
                  rows, n, eps);
        });
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
          launchRows(
              rows, n, [&](auto warp, unsigned blocks, int threads) {
                layerNormGradRows<T, decltype(warp)::value>
                    <<<blocks, threads, 0, ctx->compute>>>(
                        static_cast<T *>(dx), stats, xt,
                        static_cast<const T *>(gamma), dyt, rows, n, eps);
              });
          if (!launched(ctx, site, "strata_rt_layer_norm_grad"))
            return;
          dim3 grid(gridFor(n), unsigned(chunks));
          layerNormGradColumns<T><<<grid, kThreads, 0, ctx->compute>>>(
              partial, stats, xt, dyt, rows, n, chunkRows);
          if (!launched(ctx, site, "strata_rt_layer_norm_grad"))
            return;
        }
        // Without rows this writes dgamma = dbeta = 0, as the CPU.
        layerNormGradFinish<T>
            <<<gridFor(n, 32), 32 * kFinishWarps, 0, ctx->compute>>>(
                static_cast<T *>(dgamma), static_cast<T *>(dbeta), partial,
                chunks, n);
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
  if (!integerIds(ctx, site, "cross_entropy", labelsType) ||
      !lossIsF32(ctx, site, "cross_entropy", lossType))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy", {logitsType}, [&](auto tag) {
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
        crossEntropyMean<<<1, 1024, 0, ctx->compute>>>(
            static_cast<float *>(loss), perRow, rows);
        launched(ctx, site, "strata_rt_cross_entropy");
      });
}

void strata_rt_cross_entropy_grad(StrataRtContext *ctx, int64_t site,
                                  void *dlogits, int64_t dlogitsType,
                                  const void *logits, int64_t logitsType,
                                  const void *labels, int64_t labelsType,
                                  const void *dloss, int64_t dlossType,
                                  int64_t rows, int64_t vocab) {
  if (!integerIds(ctx, site, "cross_entropy_grad", labelsType) ||
      !lossIsF32(ctx, site, "cross_entropy_grad", dlossType))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy_grad", {dlogitsType, logitsType},
      [&](auto tag) {
        using T = decltype(tag);
        if (rows == 0 || vocab == 0)
          return;
        withIdType(labelsType, [&](auto idTag) {
          using I = decltype(idTag);
          crossEntropyGradKernel<T, I>
              <<<gridFor(rows, 1), rowThreads(vocab), 0, ctx->compute>>>(
                  static_cast<T *>(dlogits), static_cast<const T *>(logits),
                  static_cast<const I *>(labels),
                  static_cast<const float *>(dloss), rows, vocab);
        });
        launched(ctx, site, "strata_rt_cross_entropy_grad");
      });
}

} // extern "C"
