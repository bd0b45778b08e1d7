//===- Rows.cu - Row-wise CUDA kernels of the runtime C ABI ---------------===//
//
// Softmax, layer norm and cross-entropy (RowKernels.cuh launches their
// kernels), and the embedding with its gradient (fused attention is in
// Attention.cu). The embedding's gradient sorts the positions by id (CUB's
// radix sort, which is stable) and sums each id's rows in position order,
// as the CPU does, so its result is the CPU's to the bit. Ids and labels
// outside their range are reported through a device error word (Context.h)
// that holds the position and the value of the first bad one; the host
// reads it at the step's end, never per call.
//
//===----------------------------------------------------------------------===//

#include "Device.cuh"
#include "RowKernels.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <string>

namespace strata::cuda {
namespace {

/// Calls `f(I{})` with the index type of an id type code (i32 or i64,
/// checked by integerIds).
template <typename F> void withIdType(int64_t dtype, F &&f) {
  if (dtype == STRATA_RT_I32)
    f(int32_t{});
  else
    f(int64_t{});
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

/// The sort's input: each position's id (vocab for an id out of range or
/// of the padding row, which sorts last and is skipped) and the position
/// itself.
template <typename I>
__global__ void embeddingGradKeys(uint64_t *keys, int64_t *positions,
                                  const I *ids, int64_t count, int64_t vocab,
                                  int64_t paddingIdx) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t id = ids[i];
    keys[i] = id < 0 || id >= vocab || id == paddingIdx ? uint64_t(vocab)
                                                        : uint64_t(id);
    positions[i] = i;
  }
}

/// One block per run of equal ids in the sorted keys (found at its first
/// element): the row of dtable is the sum of the run's rows of dy in f32,
/// in position order (the sort is stable).
template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
    embeddingGradRows(T *dtable, const T *dy, const uint64_t *keys,
                      const int64_t *positions, int64_t count, int64_t vocab,
                      int64_t width) {
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

/// Layer norm (kCentered) or RMS norm (`beta` unused) of `rows` rows of `n`
/// on the compute stream; `kernel` names it in type errors, `symbol` (the
/// ABI function) in launch errors.
template <bool kCentered>
void normalizeRows(StrataRtContext *ctx, int64_t site, const char *kernel,
                   const char *symbol, std::initializer_list<int64_t> types,
                   void *y, const void *x, const void *gamma, const void *beta,
                   int64_t rows, int64_t n, double eps) {
  withSameFloatType(ctx, site, kernel, types, [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0 || n == 0)
      return;
    launchLayerNorm<kCentered>(onStream(ctx, site, symbol), static_cast<T *>(y),
                               static_cast<const T *>(x),
                               static_cast<const T *>(gamma),
                               static_cast<const T *>(beta), rows, n, eps);
  });
}

/// The gradients of normalizeRows: dx, dgamma and (kCentered) dbeta.
template <bool kCentered>
void normalizeRowsGrad(StrataRtContext *ctx, int64_t site, const char *kernel,
                       const char *symbol, std::initializer_list<int64_t> types,
                       void *dx, void *dgamma, void *dbeta, const void *x,
                       const void *gamma, const void *dy, int64_t rows,
                       int64_t n, double eps) {
  withSameFloatType(ctx, site, kernel, types, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0)
      return;
    const LayerNormGradPlan plan = layerNormGradPlan(rows, n);
    char *scratch = nullptr;
    if (plan.bytes > 0) {
      scratch = static_cast<char *>(ctx->scratchBytes(site, plan.bytes));
      if (!scratch)
        return;
    }
    launchLayerNormGrad<kCentered>(
        onStream(ctx, site, symbol), plan, scratch, static_cast<T *>(dx),
        static_cast<T *>(dgamma), static_cast<T *>(dbeta),
        static_cast<const T *>(x), static_cast<const T *>(gamma),
        static_cast<const T *>(dy), rows, n, eps);
  });
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
    launchSoftmax(onStream(ctx, site, "strata_rt_softmax"),
                  static_cast<T *>(out), static_cast<const T *>(in), rows, n,
                  causalRows);
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
        launchSoftmaxGrad(onStream(ctx, site, "strata_rt_softmax_grad"),
                          static_cast<T *>(dx), static_cast<const T *>(y),
                          static_cast<const T *>(dy), rows, n);
      });
}

void strata_rt_layer_norm(StrataRtContext *ctx, int64_t site, void *y,
                          int64_t yType, const void *x, int64_t xType,
                          const void *gamma, int64_t gammaType,
                          const void *beta, int64_t betaType, int64_t rows,
                          int64_t n, double eps) {
  normalizeRows<true>(ctx, site, "layer_norm", "strata_rt_layer_norm",
                      {yType, xType, gammaType, betaType}, y, x, gamma, beta,
                      rows, n, eps);
}

void strata_rt_layer_norm_grad(StrataRtContext *ctx, int64_t site, void *dx,
                               int64_t dxType, void *dgamma, int64_t dgammaType,
                               void *dbeta, int64_t dbetaType, const void *x,
                               int64_t xType, const void *gamma,
                               int64_t gammaType, const void *dy,
                               int64_t dyType, int64_t rows, int64_t n,
                               double eps) {
  normalizeRowsGrad<true>(
      ctx, site, "layer_norm_grad", "strata_rt_layer_norm_grad",
      {dxType, dgammaType, dbetaType, xType, gammaType, dyType}, dx, dgamma,
      dbeta, x, gamma, dy, rows, n, eps);
}

void strata_rt_rms_norm(StrataRtContext *ctx, int64_t site, void *y,
                        int64_t yType, const void *x, int64_t xType,
                        const void *gamma, int64_t gammaType, int64_t rows,
                        int64_t n, double eps) {
  normalizeRows<false>(ctx, site, "rms_norm", "strata_rt_rms_norm",
                       {yType, xType, gammaType}, y, x, gamma, nullptr, rows, n,
                       eps);
}

void strata_rt_rms_norm_grad(StrataRtContext *ctx, int64_t site, void *dx,
                             int64_t dxType, void *dgamma, int64_t dgammaType,
                             const void *x, int64_t xType, const void *gamma,
                             int64_t gammaType, const void *dy, int64_t dyType,
                             int64_t rows, int64_t n, double eps) {
  normalizeRowsGrad<false>(ctx, site, "rms_norm_grad",
                           "strata_rt_rms_norm_grad",
                           {dxType, dgammaType, xType, gammaType, dyType}, dx,
                           dgamma, nullptr, x, gamma, dy, rows, n, eps);
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
                              int64_t count, int64_t vocab, int64_t width,
                              int64_t paddingIdx) {
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
              keys, positions, static_cast<const I *>(ids), count, vocab,
              paddingIdx);
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
                             int64_t labelsType, int64_t rows, int64_t vocab,
                             int64_t width) {
  if (!integerIds(ctx, site, "cross_entropy", labelsType) ||
      !lossIsF32(ctx, site, "cross_entropy", lossType) ||
      !crossEntropyWidthOk(ctx, site, "cross_entropy", vocab, width))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy", {logitsType}, [&](auto tag) {
        using T = decltype(tag);
        double *perRow = nullptr;
        unsigned long long *error = nullptr;
        if (rows > 0) {
          perRow = static_cast<double *>(
              ctx->scratchBytes(site, size_t(rows) * sizeof(double)));
          error = perRow ? deviceErrorWord(ctx, site, "label", vocab) : nullptr;
          if (!error)
            return;
        }
        withIdType(labelsType, [&](auto idTag) {
          using I = decltype(idTag);
          launchCrossEntropy(onStream(ctx, site, "strata_rt_cross_entropy"),
                             static_cast<float *>(loss), perRow, error,
                             static_cast<const T *>(logits),
                             static_cast<const I *>(labels), rows, vocab,
                             width);
        });
      });
}

void strata_rt_cross_entropy_grad(StrataRtContext *ctx, int64_t site,
                                  void *dlogits, int64_t dlogitsType,
                                  const void *logits, int64_t logitsType,
                                  const void *labels, int64_t labelsType,
                                  const void *dloss, int64_t dlossType,
                                  int64_t rows, int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "cross_entropy_grad", labelsType) ||
      !lossIsF32(ctx, site, "cross_entropy_grad", dlossType) ||
      !crossEntropyWidthOk(ctx, site, "cross_entropy_grad", vocab, width))
    return;
  withSameFloatType(ctx, site, "cross_entropy_grad", {dlogitsType, logitsType},
                    [&](auto tag) {
                      using T = decltype(tag);
                      withIdType(labelsType, [&](auto idTag) {
                        using I = decltype(idTag);
                        launchCrossEntropyGrad(
                            onStream(ctx, site, "strata_rt_cross_entropy_grad"),
                            static_cast<T *>(dlogits),
                            static_cast<const T *>(logits),
                            static_cast<const I *>(labels),
                            static_cast<const float *>(dloss), rows, vocab,
                            width);
                      });
                    });
}

} // extern "C"
