//===- RowKernels.cuh - The row-wise CUDA kernels ---------------*- CUDA
//-*-===//
//
// Softmax, layer norm and cross-entropy, with their gradients, and the
// sequences of launches that compute them. The row-wise kernels run a group
// of threads per row (a grid-stride loop over rows): a warp for rows of up
// to kWarpRowMax elements, the whole block for longer ones (RowGroup); each
// thread reduces its strided share of the row, the group combines the
// shares in a fixed order (warp shuffles, then the warps' partials), and a
// last pass writes the row. Every element is read again before it is
// written by the thread that reads it, after the reductions' barriers, so an
// output may alias its input. exp is the CPU runtime's fastExp (the one of
// runtime/common/Activations.h), so that probabilities match the CPU to
// rounding; sums the CPU accumulates in double are accumulated in double
// here too.
//
// Column sums (layer norm's dgamma and dbeta) and the mean of the
// cross-entropy's rows are reduced in two kernels: partials over fixed
// chunks, then the chunks in a fixed order.
//
// Device code and launch sequences only, in a header so that a host test
// runs them under an emulation of blocks and warps (STRATA_CUDA_EMULATION;
// test/unit/KernelEmulationTest.cpp). A sequence launches through
// `launch(kernel, grid, threads, args...)`, which returns whether the
// launch succeeded: Rows.cu's launches on the compute stream, the test's
// runs the blocks on host threads.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_ROWKERNELS_CUH
#define STRATA_RUNTIME_CUDA_ROWKERNELS_CUH

#include "Device.cuh"

#include "../common/Activations.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace strata::cuda {

using strata::act::fastExp;

/// Lowers the error word to bad id `value` at position `i` (the first
/// position wins).
__device__ __forceinline__ void reportBadId(unsigned long long *word, int64_t i,
                                            int64_t value) {
  atomicMin(word, badIdWord(i, value));
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

/// Launches, through `launch(kernel, grid, threads, args...)`, the row
/// kernel `kernelOf(kWarp)` (kWarp a std::bool_constant: the group) on the
/// grid for `rows` rows of `n` elements; whether the launch succeeded.
template <typename Launch, typename KernelOf, typename... Args>
bool launchRows(Launch &&launch, int64_t rows, int64_t n, KernelOf kernelOf,
                Args... args) {
  if (n <= kWarpRowMax)
    return launch(kernelOf(std::true_type()), dim3(gridFor(rows, 8)), 256u,
                  args...);
  return launch(kernelOf(std::false_type()), dim3(gridFor(rows, 1)),
                unsigned(rowThreads(n)), args...);
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

template <typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxBlockThreads)
    softmaxKernel(T *out, const T *in, int64_t rows, int64_t n,
                  int64_t causalRows) {
  STRATA_SHARED float shared[32];
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
__global__ void __launch_bounds__(kMaxBlockThreads)
    softmaxGradKernel(T *dx, const T *y, const T *dy, int64_t rows, int64_t n) {
  STRATA_SHARED double shared[32];
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
// Layer norm and RMS norm
//===----------------------------------------------------------------------===//

// Each kernel below serves both: layer norm (kCentered: (x - mean) * rstd *
// gamma + beta) and RMS norm (x * rstd * gamma, no beta), as the CPU's
// normalizeRows.

/// The mean (0 for RMS norm) and 1 / sqrt(variance + eps) of a row, each
/// sum of the threads' f32 shares added in double (the CPU's
/// rowStatistics).
template <bool kCentered, typename T, bool kWarp>
__device__ __forceinline__ float2 rowStatistics(const T *x, int64_t n,
                                                double eps,
                                                const RowGroup<kWarp> &group) {
  const int first = group.rank(), step = group.size();
  float part = 0.0f;
  float m = 0.0f;
  if constexpr (kCentered) {
    for (int64_t j = first; j < n; j += step)
      part += toFloat(x[j]);
    m = float(group.sum(double(part)) / double(n));
  }
  part = 0.0f;
  for (int64_t j = first; j < n; j += step) {
    float d = toFloat(x[j]) - m;
    part += d * d;
  }
  double var = group.sum(double(part)) / double(n);
  return make_float2(m, float(1.0 / sqrt(var + eps)));
}

template <bool kCentered, typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxBlockThreads)
    layerNormKernel(T *y, const T *x, const T *gamma, const T *beta,
                    int64_t rows, int64_t n, double eps) {
  STRATA_SHARED double shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *xr = x + r * n;
    float2 st = rowStatistics<kCentered>(xr, n, eps, group);
    for (int64_t j = first; j < n; j += step) {
      float v = (toFloat(xr[j]) - st.x) * st.y * toFloat(gamma[j]);
      if constexpr (kCentered)
        v += toFloat(beta[j]);
      y[r * n + j] = fromFloat<T>(v);
    }
  }
}

/// dx of each row, and the row's statistics into `stats` (mean, rstd) for
/// the column sums.
template <bool kCentered, typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxBlockThreads)
    layerNormGradRows(T *dx, float *stats, const T *x, const T *gamma,
                      const T *dy, int64_t rows, int64_t n, double eps) {
  STRATA_SHARED double shared[32];
  const RowGroup<kWarp> group{shared};
  const int first = group.rank(), step = group.size();
  for (int64_t r = group.first(); r < rows; r += group.stride()) {
    const T *xr = x + r * n, *dyr = dy + r * n;
    float2 st = rowStatistics<kCentered>(xr, n, eps, group);
    const float m = st.x, rstd = st.y;
    if (first == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = rstd;
    }
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = first; j < n; j += step) {
      float xhat = (toFloat(xr[j]) - m) * rstd;
      float dxhat = toFloat(dyr[j]) * toFloat(gamma[j]);
      if constexpr (kCentered)
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
/// (rows of n; the second one only for layer norm).
template <bool kCentered, typename T>
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
    if constexpr (kCentered)
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
template <bool kCentered, typename T>
__global__ void layerNormGradFinish(T *dgamma, T *dbeta, const double *partial,
                                    int64_t chunks, int64_t n) {
  STRATA_SHARED double sums[2][kFinishWarps][32];
  const int column = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t j0 = int64_t(blockIdx.x) * 32; j0 < n;
       j0 += int64_t(gridDim.x) * 32) {
    const int64_t j = j0 + column;
    double dg = 0.0, db = 0.0;
    if (j < n)
      for (int64_t c = warp; c < chunks; c += kFinishWarps) {
        dg += partial[2 * c * n + j];
        if constexpr (kCentered)
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
      if constexpr (kCentered)
        dbeta[j] = fromFloat<T>(float(db));
    }
    __syncthreads();
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

// A vocabulary's rows are long (GPT-2's: 50257 elements) and, for an odd
// vocabulary, start at any even address: a block reads the elements before
// the row's first 16-byte boundary one at a time, then 16 bytes a thread
// a load, then the elements past the last whole vector. (Two bytes a load
// left too few bytes in flight to reach the memory's bandwidth.)

/// The elements of row x (n of them) before its first 16-byte boundary.
template <typename T> __device__ int64_t rowHead(const T *x, int64_t n) {
  const auto misaligned = int64_t(reinterpret_cast<uintptr_t>(x) % 16);
  return min(n, misaligned ? (16 - misaligned) / int64_t(sizeof(T)) : 0);
}

/// This thread of the block's share of a row of n elements of T in three
/// parts: element(j) for each of the first `head` one at a time, vector(v)
/// for each whole 16-byte vector after them (elements head + v kVector ..),
/// then element(j) for the rest.
template <typename T, typename Element, typename Vector>
__device__ void forRowParts(int64_t n, int64_t head, Element &&element,
                            Vector &&vector) {
  const int64_t count = (n - head) / kVector<T>;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x)
    element(j);
  for (int64_t v = threadIdx.x; v < count; v += blockDim.x)
    vector(v);
  for (int64_t j = head + count * kVector<T> + threadIdx.x; j < n;
       j += blockDim.x)
    element(j);
}

/// f(j, x[j] as f32) for the elements j of row x that this thread of the
/// block takes.
template <typename T, typename F>
__device__ void forRowElements(const T *x, int64_t n, F &&f) {
  const int64_t head = rowHead(x, n);
  const auto *vectors = reinterpret_cast<const Vector16<T> *>(x + head);
  forRowParts<T>(
      n, head, [&](int64_t j) { f(j, toFloat(x[j])); },
      [&](int64_t v) {
        const Vector16<T> e = vectors[v];
#pragma unroll
        for (int k = 0; k < kVector<T>; ++k)
          f(head + v * kVector<T> + k, toFloat(e.e[k]));
      });
}

/// y[j] = g(j, x[j] as f32) rounded to T over row x, 16 bytes a load and a
/// store where y and x are aligned alike (one at a time otherwise); each
/// element is read by the thread that writes it, so y may alias x.
template <typename T, typename G>
__device__ void mapRow(T *y, const T *x, int64_t n, G &&g) {
  const bool alike =
      (reinterpret_cast<uintptr_t>(y) - reinterpret_cast<uintptr_t>(x)) % 16 ==
      0;
  const int64_t head = alike ? rowHead(x, n) : n;
  const auto *in = reinterpret_cast<const Vector16<T> *>(x + head);
  auto *out = reinterpret_cast<Vector16<T> *>(y + head);
  forRowParts<T>(
      n, head, [&](int64_t j) { y[j] = fromFloat<T>(g(j, toFloat(x[j]))); },
      [&](int64_t v) {
        const Vector16<T> e = in[v];
        Vector16<T> o;
#pragma unroll
        for (int k = 0; k < kVector<T>; ++k)
          o.e[k] = fromFloat<T>(g(head + v * kVector<T> + k, toFloat(e.e[k])));
        out[v] = o;
      });
}

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
  forRowElements(x, n, [&](int64_t, float v) {
    if (v > mx) {
      sum = (mx == -INFINITY ? 0.0f : sum * fastExp(mx - v)) + 1.0f;
      mx = v;
    } else if (v > -INFINITY) {
      sum += fastExp(v - mx);
    } else {
      nan |= v != v;
    }
  });
  const float rowMax = blockMax(mx, shared);
  const float scaled = nan               ? NAN
                       : mx == -INFINITY ? 0.0f
                                         : sum * fastExp(mx - rowMax);
  return {rowMax, blockSum(scaled, shared)};
}

/// Each row's -log softmax(logits)[label] in double (0, and the error word
/// set, for a label outside [0, vocab)); a row is `width` elements apart
/// from the next, of which the first `vocab` are the classes.
template <typename T, typename I>
__global__ void __launch_bounds__(kMaxBlockThreads)
    crossEntropyRows(double *perRow, unsigned long long *error, const T *logits,
                     const I *labels, int64_t rows, int64_t vocab,
                     int64_t width) {
  STRATA_SHARED float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = logits + r * width;
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
__global__ void __launch_bounds__(kMaxBlockThreads)
    crossEntropyMean(float *loss, const double *perRow, int64_t rows) {
  STRATA_SHARED double shared[32];
  double part = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    part += perRow[r];
  double total = blockSum(part, shared);
  if (threadIdx.x == 0)
    loss[0] = float(total / double(rows));
}

/// dlogits = dloss / rows * (softmax(logits) - onehot(label)); a label out
/// of range (reported by the forward) subtracts nothing. Rows as
/// crossEntropyRows'; the padding past `vocab` gets a zero gradient.
template <typename T, typename I>
__global__ void __launch_bounds__(kMaxBlockThreads)
    crossEntropyGradKernel(T *dlogits, const T *logits, const I *labels,
                           const float *dloss, int64_t rows, int64_t vocab,
                           int64_t width) {
  STRATA_SHARED float shared[32];
  const float scale = dloss[0] / float(rows);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = logits + r * width;
    const RowMaxSum row = rowMaxSum(x, vocab, shared);
    const float f = scale / row.sum;
    const int64_t label = labels[r];
    T *y = dlogits + r * width;
    mapRow(y, x, vocab, [&](int64_t j, float v) {
      const float o = fastExp(v - row.max) * f;
      return j == label ? o - scale : o;
    });
    for (int64_t j = vocab + threadIdx.x; j < width; j += blockDim.x)
      y[j] = fromFloat<T>(0.0f);
  }
}

//===----------------------------------------------------------------------===//
// Launch sequences
//===----------------------------------------------------------------------===//

template <typename T, typename Launch>
bool launchSoftmax(Launch &&launch, T *out, const T *in, int64_t rows,
                   int64_t n, int64_t causalRows) {
  return launchRows(
      launch, rows, n,
      [](auto warp) { return softmaxKernel<T, decltype(warp)::value>; }, out,
      in, rows, n, causalRows);
}

template <typename T, typename Launch>
bool launchSoftmaxGrad(Launch &&launch, T *dx, const T *y, const T *dy,
                       int64_t rows, int64_t n) {
  return launchRows(
      launch, rows, n,
      [](auto warp) { return softmaxGradKernel<T, decltype(warp)::value>; }, dx,
      y, dy, rows, n);
}

/// Layer norm (kCentered) or RMS norm (`beta` unused).
template <bool kCentered, typename T, typename Launch>
bool launchLayerNorm(Launch &&launch, T *y, const T *x, const T *gamma,
                     const T *beta, int64_t rows, int64_t n, double eps) {
  return launchRows(
      launch, rows, n,
      [](auto warp) {
        return layerNormKernel<kCentered, T, decltype(warp)::value>;
      },
      y, x, gamma, beta, rows, n, eps);
}

/// The layer norm gradient's scratch: the rows' statistics (2 rows floats),
/// then the column sums' partials (2 n doubles per chunk of rows).
struct LayerNormGradPlan {
  int64_t chunks = 0, chunkRows = 0;
  size_t statsBytes = 0, bytes = 0;
};
inline LayerNormGradPlan layerNormGradPlan(int64_t rows, int64_t n) {
  LayerNormGradPlan plan;
  if (rows <= 0 || n <= 0)
    return plan;
  // Chunks of rows for the column sums: enough of them to fill the
  // device, their partials (2 n doubles each) at most 64 MiB.
  plan.chunks = std::min<int64_t>(
      {(rows + 31) / 32, 512, std::max<int64_t>(1, (int64_t(1) << 22) / n)});
  plan.chunkRows = (rows + plan.chunks - 1) / plan.chunks;
  plan.chunks = (rows + plan.chunkRows - 1) / plan.chunkRows;
  plan.statsBytes = aligned(size_t(2 * rows) * sizeof(float));
  plan.bytes = plan.statsBytes + size_t(2 * plan.chunks * n) * sizeof(double);
  return plan;
}

/// dx, dgamma and (kCentered) dbeta, with `scratch` of plan.bytes (none
/// without rows).
template <bool kCentered, typename T, typename Launch>
bool launchLayerNormGrad(Launch &&launch, const LayerNormGradPlan &plan,
                         char *scratch, T *dx, T *dgamma, T *dbeta, const T *x,
                         const T *gamma, const T *dy, int64_t rows, int64_t n,
                         double eps) {
  double *partial = nullptr;
  if (rows > 0) {
    auto *stats = reinterpret_cast<float *>(scratch);
    partial = reinterpret_cast<double *>(scratch + plan.statsBytes);
    auto rowsKernel = [](auto warp) {
      return layerNormGradRows<kCentered, T, decltype(warp)::value>;
    };
    if (!launchRows(launch, rows, n, rowsKernel, dx, stats, x, gamma, dy, rows,
                    n, eps) ||
        !launch(layerNormGradColumns<kCentered, T>,
                dim3(gridFor(n), unsigned(plan.chunks)), unsigned(kThreads),
                partial, static_cast<const float *>(stats), x, dy, rows, n,
                plan.chunkRows))
      return false;
  }
  // Without rows this writes dgamma = dbeta = 0, as the CPU.
  return launch(layerNormGradFinish<kCentered, T>, dim3(gridFor(n, 32)),
                unsigned(32 * kFinishWarps), dgamma, dbeta,
                static_cast<const double *>(partial), plan.chunks, n);
}

/// The loss, with `perRow` scratch of `rows` doubles (none without rows)
/// and the device error word for bad labels.
template <typename T, typename I, typename Launch>
bool launchCrossEntropy(Launch &&launch, float *loss, double *perRow,
                        unsigned long long *error, const T *logits,
                        const I *labels, int64_t rows, int64_t vocab,
                        int64_t width) {
  if (rows > 0 && !launch(crossEntropyRows<T, I>, dim3(gridFor(rows, 1)),
                          unsigned(rowThreads(vocab)), perRow, error, logits,
                          labels, rows, vocab, width))
    return false;
  // Without rows the loss is 0 / 0, as the CPU's.
  return launch(crossEntropyMean, dim3(1), unsigned(kMaxBlockThreads), loss,
                static_cast<const double *>(perRow), rows);
}

template <typename T, typename I, typename Launch>
bool launchCrossEntropyGrad(Launch &&launch, T *dlogits, const T *logits,
                            const I *labels, const float *dloss, int64_t rows,
                            int64_t vocab, int64_t width) {
  if (rows == 0 || vocab == 0)
    return true;
  return launch(crossEntropyGradKernel<T, I>, dim3(gridFor(rows, 1)),
                unsigned(rowThreads(vocab)), dlogits, logits, labels, dloss,
                rows, vocab, width);
}

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_ROWKERNELS_CUH
