//===- Elementwise.cu - Elementwise, copy and reduction kernels -----------===//
//
// The CUDA runtime's elementwise ops (binary with broadcasting, unary,
// activation gradients, casts, fill, dropout), its copies (flat, strided,
// the rows of a concatenation) and strata_rt_reduce, with the CPU
// runtime's semantics (runtime/cpu/Kernels.cpp): the same argument checks
// and refusals, f32 arithmetic on bf16 / f16 storage rounded once to
// nearest even, the same Philox draws for dropout.
//
// Elementwise kernels are grid-stride loops, one element per thread and
// iteration; an output aliasing an input of its shape is safe since each
// thread reads its element before writing it. Broadcasting and strided
// copies first collapse their shape on the host (dimensions of size 1
// dropped, neighbours merged where every stride set walks them as one) and
// decompose an element's index with 32-bit divisions when the tensor has
// fewer than 2^32 elements. The copies are cudaMemcpyAsync /
// cudaMemcpy2DAsync on the compute stream.
//
// The activations are the CPU's formulas (runtime/common/Activations.h,
// compiled for the device): results agree with the CPU's within f32
// rounding (nvcc may contract a product and a sum into one FMA). Dropout's
// product is rounded before the residual is added (__fmul_rn, no FMA
// contraction), as on the CPU, so dropout matches it bit for bit.
//
// strata_rt_reduce accumulates in double, as the CPU does, and in a fixed
// order that depends on the shape alone (never on timing or the device):
// when the innermost dimension is reduced a block sums each output's
// elements (a tree in a fixed order); otherwise a thread sums each
// output's elements in input order. Few outputs over many elements split
// their sums into chunks whose double partials a second kernel adds in
// chunk order.
//
//===----------------------------------------------------------------------===//

#include "ActivationKernels.cuh"
#include "BinaryKernels.cuh"
#include "Device.cuh"

#include "../common/StrataRandom.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace strata::cuda {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The number of elements of a row-major `shape`.
int64_t elements(int64_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (int64_t d = 0; d < rank; ++d)
    n *= shape[d];
  return n;
}

//===--- Shapes and strides -----------------------------------------------===//

/// A row-major shape and N stride sets over it (in elements).
template <int N> struct Layout {
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t strides[N][kMaxRank];
};

/// `shape` and `strides` (any rank) with the dimensions of size 1 dropped
/// and each dimension merged into the one before it when every stride set
/// walks the pair as one dimension (outer stride = inner stride x inner
/// size): every element keeps its offsets and its position in row-major
/// order, and fewer dimensions mean fewer divisions. False (the failure
/// recorded) when more than kMaxRank dimensions remain, what a kernel
/// parameter holds.
template <int N>
bool collapse(StrataRtContext *ctx, int64_t site, const char *kernel,
              int64_t rank, const int64_t *shape,
              const int64_t *const (&strides)[N], Layout<N> &l) {
  std::vector<int64_t> dims, stride[N];
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] == 1)
      continue;
    bool merge = !dims.empty();
    for (int j = 0; j < N && merge; ++j)
      merge = stride[j].back() == strides[j][d] * shape[d];
    if (merge) {
      dims.back() *= shape[d];
      for (int j = 0; j < N; ++j)
        stride[j].back() = strides[j][d];
      continue;
    }
    dims.push_back(shape[d]);
    for (int j = 0; j < N; ++j)
      stride[j].push_back(strides[j][d]);
  }
  if (dims.size() > size_t(kMaxRank)) {
    ctx->fail(site, std::string("strata_rt_") + kernel + ": a layout of " +
                        std::to_string(dims.size()) +
                        " dimensions that cannot be merged (of rank " +
                        std::to_string(rank) + ") is not implemented by the " +
                        ctx->backendName + " (at most " +
                        std::to_string(kMaxRank) + ")");
    return false;
  }
  l.rank = int(dims.size());
  for (int d = 0; d < l.rank; ++d) {
    l.shape[d] = dims[d];
    for (int j = 0; j < N; ++j)
      l.strides[j][d] = stride[j][d];
  }
  return true;
}

/// The offsets in each stride set of element `i` (row-major over l.shape),
/// dividing in I (uint32_t when the tensor has fewer than 2^32 elements).
/// The loop is unrolled so that `l` stays in the kernel's parameters.
template <typename I, int N>
__device__ __forceinline__ void offsetsOf(I i, const Layout<N> &l,
                                          int64_t (&off)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
    off[j] = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d > 0; --d) {
    if (d >= l.rank)
      continue;
    I size = I(l.shape[d]);
    I c = i % size;
    i /= size;
#pragma unroll
    for (int j = 0; j < N; ++j)
      off[j] += int64_t(c) * l.strides[j][d];
  }
  if (l.rank > 0) {
#pragma unroll
    for (int j = 0; j < N; ++j)
      off[j] += int64_t(i) * l.strides[j][0];
  }
}

//===--- Arithmetic -------------------------------------------------------===//

//===--- Elementwise kernels ----------------------------------------------===//

/// out = a (op) b with broadcasting: out is dense over l.shape, a and b
/// walk their strides (l.strides[0] and [1]).
template <typename I, typename T>
__global__ void binaryKernel(int64_t op, T *out, const T *a, const T *b,
                             int64_t n, Layout<2> l) {
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    int64_t off[2];
    offsetsOf(I(i), l, off);
    out[i] = binaryOp(op, a[off[0]], b[off[1]]);
  }
}

template <typename T>
__global__ void unaryKernel(int64_t op, T *out, const T *in, int64_t n,
                            float alpha) {
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = fromFloat<T>(unaryOp(op, toFloat(in[i]), alpha));
}

template <typename T>
__global__ void actGradKernel(int64_t act, T *out, const T *x, const T *dy,
                              int64_t n) {
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = fromFloat<T>(actGradOp(act, toFloat(x[i]), toFloat(dy[i])));
}

template <typename In, typename Out>
__global__ void castKernel(Out *out, const In *in, int64_t n) {
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = fromFloat<Out>(toFloat(in[i]));
}

/// `value` in storage type T: integers as they are, f32 rounded to T.
template <typename T, typename V>
__device__ __forceinline__ T storageValue(V value) {
  if constexpr (std::is_integral_v<T>)
    return T(value);
  else
    return fromFloat<T>(value);
}

template <typename T, typename V>
__global__ void fillKernel(T *out, int64_t n, V value) {
  const T v = storageValue<T>(value);
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = v;
}

/// out[i] = in[offset of i] for a dense out over l.shape (`in` already
/// points at the base element). E is an unsigned type of the element's
/// width: the copy moves bits.
template <typename I, typename E>
__global__ void stridedCopyKernel(E *out, const E *in, int64_t n, Layout<1> l) {
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    int64_t off[1];
    offsetsOf(I(i), l, off);
    out[i] = in[off[0]];
  }
}

/// Dropout of elements [0, n) at global indices [offset, offset + n). A
/// thread takes one Philox draw, whose four words are the masks of the
/// global indices 4g ... 4g + 3 (rng::dropoutDraw), and the elements of
/// this call among them.
template <typename T>
__global__ void dropoutKernel(T *out, const T *in, const T *residual, int64_t n,
                              int64_t offset, uint64_t seed, int64_t key,
                              double prob, float keepScale) {
  const int64_t firstGroup = offset >> 2;
  const int64_t groups = ((offset + n - 1) >> 2) - firstGroup + 1;
  for (int64_t g = gridStart(); g < groups; g += gridStride()) {
    const int64_t start = (firstGroup + g) * 4;
    r123::Philox4x32::ctr_type words = rng::dropoutDraw(seed, key, start);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = start + k - offset;
      if (i < 0 || i >= n)
        continue;
      // The product rounded on its own (no FMA with the residual's add), as
      // on the CPU.
      float v = rng::dropoutKeepWord(words[k], prob)
                    ? __fmul_rn(toFloat(in[i]), keepScale)
                    : 0.0f;
      out[i] = fromFloat<T>(residual ? v + toFloat(residual[i]) : v);
    }
  }
}

//===--- Reductions -------------------------------------------------------===//

/// strata_rt_reduce's shape after collapse(): the kept dimensions with
/// their input and output strides (outputs are numbered row-major over
/// them), and the reduced ones with their input strides (an output's
/// elements numbered row-major over them, i.e. in input order).
struct ReduceLayout {
  Layout<2> kept;
  Layout<1> reduced;
};

/// The result of output `o` (input offset and output offset in `base`):
/// out = sum * scale rounded to f32 then to T, as the CPU, or the partial
/// sum `u` when the sums are split.
template <typename T>
__device__ __forceinline__ void reduceResult(T *out, double *partials,
                                             int64_t u, const int64_t *base,
                                             double sum, double scale) {
  if (partials)
    partials[u] = sum;
  else
    out[base[1]] = fromFloat<T>(float(sum * scale));
}

/// Work unit u = s * outN + o: chunk s (elements [s * chunk, (s + 1) *
/// chunk) of `count`) of output o. A block per unit, its threads striding
/// over the chunk (coalesced: the innermost dimension is reduced), their
/// double sums added by blockSumDouble.
template <typename T>
__global__ void reduceRowsKernel(T *out, const T *in, ReduceLayout l,
                                 int64_t outN, int64_t count, int64_t splits,
                                 int64_t chunk, double scale,
                                 double *partials) {
  __shared__ double shared[32];
  for (int64_t u = blockIdx.x; u < outN * splits; u += gridDim.x) {
    int64_t o = u % outN, s = u / outN;
    int64_t base[2];
    offsetsOf(uint64_t(o), l.kept, base);
    int64_t end = min(count, (s + 1) * chunk);
    double sum = 0;
    for (int64_t r = s * chunk + threadIdx.x; r < end; r += blockDim.x) {
      int64_t off[1];
      offsetsOf(uint64_t(r), l.reduced, off);
      sum += toFloat(in[base[0] + off[0]]);
    }
    sum = blockSum(sum, shared);
    if (threadIdx.x == 0)
      reduceResult(out, partials, u, base, sum, scale);
  }
}

/// Work units as reduceRowsKernel, a thread per unit summing its chunk in
/// input order (neighbouring threads take neighbouring outputs, which are
/// neighbours in the input when the innermost dimension is kept).
template <typename T>
__global__ void reduceColumnsKernel(T *out, const T *in, ReduceLayout l,
                                    int64_t outN, int64_t count, int64_t splits,
                                    int64_t chunk, double scale,
                                    double *partials) {
  for (int64_t u = gridStart(); u < outN * splits; u += gridStride()) {
    int64_t o = u % outN, s = u / outN;
    int64_t base[2];
    offsetsOf(uint64_t(o), l.kept, base);
    double sum = 0;
    for (int64_t r = s * chunk, end = min(count, r + chunk); r < end; ++r) {
      int64_t off[1];
      offsetsOf(uint64_t(r), l.reduced, off);
      sum += toFloat(in[base[0] + off[0]]);
    }
    reduceResult(out, partials, u, base, sum, scale);
  }
}

/// Each output's partial sums added in chunk order, scaled and rounded.
template <typename T>
__global__ void reducePartialsKernel(T *out, const double *partials,
                                     Layout<2> kept, int64_t outN,
                                     int64_t splits, double scale) {
  for (int64_t o = gridStart(); o < outN; o += gridStride()) {
    double sum = 0;
    for (int64_t s = 0; s < splits; ++s)
      sum += partials[s * outN + o];
    int64_t base[2];
    offsetsOf(uint64_t(o), kept, base);
    out[base[1]] = fromFloat<T>(float(sum * scale));
  }
}

/// How the reduction is cut into work units (constants, so that the sums'
/// order depends on the shape alone): a block sums at least kRowChunk
/// elements of an output and splits stop at kRowUnits blocks; a thread at
/// least kColumnChunk and splits stop at kColumnUnits threads. Outputs of
/// fewer than kMinRow elements are summed by a thread each.
constexpr int64_t kRowChunk = 8192, kRowUnits = 1024;
constexpr int64_t kColumnChunk = 64, kColumnUnits = 1 << 16;
constexpr int64_t kMinRow = 32;
/// The most blocks of reduceRowsKernel (each loops over units beyond).
constexpr int64_t kMaxRowBlocks = 1 << 20;

template <typename T>
void reduce(StrataRtContext *ctx, int64_t site, T *out, const T *in,
            int64_t rank, const int64_t *desc, double scale) {
  const int64_t *shape = desc, *outStrides = desc + rank;
  // Outputs as the CPU counts them; the input is dense.
  int64_t outN = 1;
  std::vector<int64_t> inStrides(rank);
  for (int64_t d = rank - 1, size = 1; d >= 0; size *= shape[d], --d) {
    inStrides[d] = size;
    if (outStrides[d] != 0)
      outN *= shape[d];
  }
  if (outN == 0)
    return;
  const int64_t *const strides[2] = {inStrides.data(), outStrides};
  Layout<2> all;
  if (!collapse(ctx, site, "reduce", rank, shape, strides, all))
    return;
  ReduceLayout l;
  int64_t count = 1; // elements per output (0 when a reduced size is 0)
  for (int d = 0; d < all.rank; ++d) {
    if (all.strides[1][d] != 0) {
      l.kept.shape[l.kept.rank] = all.shape[d];
      l.kept.strides[0][l.kept.rank] = all.strides[0][d];
      l.kept.strides[1][l.kept.rank++] = all.strides[1][d];
    } else {
      l.reduced.shape[l.reduced.rank] = all.shape[d];
      l.reduced.strides[0][l.reduced.rank++] = all.strides[0][d];
      count *= all.shape[d];
    }
  }
  bool rows =
      all.rank > 0 && all.strides[1][all.rank - 1] == 0 && count >= kMinRow;
  int64_t minChunk = rows ? kRowChunk : kColumnChunk;
  int64_t units = rows ? kRowUnits : kColumnUnits;
  int64_t splits = std::max<int64_t>(
      1, std::min(ceilDiv(count, minChunk), ceilDiv(units, outN)));
  int64_t chunk = ceilDiv(count, splits);
  double *partials = nullptr;
  if (splits > 1) {
    partials = static_cast<double *>(
        ctx->scratchBytes(site, size_t(outN * splits) * sizeof(double)));
    if (!partials)
      return;
  }
  if (rows) {
    int threads = int(std::min<int64_t>(kThreads, ceilDiv(chunk, 32) * 32));
    unsigned blocks = unsigned(std::min(outN * splits, kMaxRowBlocks));
    reduceRowsKernel<<<blocks, threads, 0, ctx->compute>>>(
        out, in, l, outN, count, splits, chunk, scale, partials);
  } else {
    reduceColumnsKernel<<<gridFor(outN * splits), kThreads, 0, ctx->compute>>>(
        out, in, l, outN, count, splits, chunk, scale, partials);
  }
  if (!launched(ctx, site, "strata_rt_reduce") || !partials)
    return;
  reducePartialsKernel<<<gridFor(outN), kThreads, 0, ctx->compute>>>(
      out, partials, l.kept, outN, splits, scale);
  launched(ctx, site, "strata_rt_reduce");
}

template <typename T>
__global__ void divideKernel(T *data, int64_t n, float count) {
  for (int64_t i = gridStart(); i < n; i += gridStride())
    data[i] = fromFloat<T>(toFloat(data[i]) / count);
}

/// The largest pitch of a 2D copy on the context's device; 0, with the
/// failure recorded, when the device cannot say.
size_t maxCopyPitch(StrataRtContext *ctx, int64_t site, const char *kernel) {
  int pitch = 0;
  if (!ctx->check(
          site,
          cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, ctx->device),
          kernel))
    return 0;
  return size_t(pitch);
}

} // namespace

bool divideOnStream(StrataRtContext *ctx, int64_t site, void *data, int64_t n,
                    int64_t dtype, int64_t count, cudaStream_t stream,
                    const char *what) {
  if (n == 0)
    return true;
  bool known = withFloatType(dtype, [&](auto tag) {
    using T = decltype(tag);
    divideKernel<<<gridFor(n), kThreads, 0, stream>>>(static_cast<T *>(data), n,
                                                      float(count));
  });
  if (!known) {
    unsupportedType(ctx, site, what, dtype);
    return false;
  }
  return ctx->check(site, cudaGetLastError(), what);
}

void sumsEpilogue(StrataRtContext *ctx, int64_t site, int64_t dtype, void *out,
                  void *aux, const float *sums, const void *bias, int64_t rows,
                  int64_t n, int64_t act) {
  withSameFloatType(ctx, site, "gemm", {dtype}, [&](auto tag) {
    using T = decltype(tag);
    launchSumsEpilogue(onStream(ctx, site, "strata_rt_gemm"),
                       static_cast<T *>(out), static_cast<T *>(aux), sums,
                       static_cast<const T *>(bias), rows, n, act);
  });
}

} // namespace strata::cuda

using namespace strata::cuda;

extern "C" {

void strata_rt_binary(StrataRtContext *ctx, int64_t site, int64_t op, void *out,
                      int64_t outType, const void *a, int64_t aType,
                      const void *b, int64_t bType, int64_t rank,
                      const int64_t *desc) {
  if (!sameTypes(ctx, site, "binary", {outType, aType, bType}) ||
      !binaryOpOk(ctx, site, op, outType))
    return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const int64_t *shape = desc;
    int64_t n = elements(rank, shape);
    if (n <= 0)
      return;
    auto *o = static_cast<T *>(out);
    auto *x = static_cast<const T *>(a);
    auto *y = static_cast<const T *>(b);
    const int64_t *const strides[2] = {desc + rank, desc + 2 * rank};
    Layout<2> l;
    if (!collapse(ctx, site, "binary", rank, shape, strides, l))
      return;
    if (l.rank == 0 ||
        (l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1)) {
      launchBinaryFlat(onStream(ctx, site, "strata_rt_binary"), op, o, x, y, n);
    } else if (n <= int64_t(UINT32_MAX))
      binaryKernel<uint32_t>
          <<<gridFor(n), kThreads, 0, ctx->compute>>>(op, o, x, y, n, l);
    else
      binaryKernel<uint64_t>
          <<<gridFor(n), kThreads, 0, ctx->compute>>>(op, o, x, y, n, l);
    launched(ctx, site, "strata_rt_binary");
  };
  if (outType == STRATA_RT_I32)
    run(int32_t{});
  else if (outType == STRATA_RT_I64)
    run(int64_t{});
  else if (!withFloatType(outType, run))
    unsupportedType(ctx, site, "binary", outType);
}

void strata_rt_unary(StrataRtContext *ctx, int64_t site, int64_t op, void *out,
                     int64_t outType, const void *in, int64_t inType, int64_t n,
                     double alpha) {
  if (!strata::rt::knownUnary(op))
    return ctx->fail(site, "unknown unary op code " + std::to_string(op));
  withSameFloatType(ctx, site, "unary", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    // The identity in place leaves every element as it is.
    if (n <= 0 || (op == STRATA_RT_ACT_NONE && out == in))
      return;
    unaryKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
        op, static_cast<T *>(out), static_cast<const T *>(in), n, float(alpha));
    launched(ctx, site, "strata_rt_unary");
  });
}

void strata_rt_act_grad(StrataRtContext *ctx, int64_t site, int64_t act,
                        void *out, int64_t outType, const void *x,
                        int64_t xType, const void *dy, int64_t dyType,
                        int64_t n) {
  if (!strata::rt::knownActGrad(act))
    return ctx->fail(site, "unknown activation code " + std::to_string(act));
  withSameFloatType(ctx, site, "act_grad", {outType, xType, dyType},
                    [&](auto tag) {
                      using T = decltype(tag);
                      if (n <= 0 || (act == STRATA_RT_ACT_NONE && out == dy))
                        return;
                      actGradKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
                          act, static_cast<T *>(out), static_cast<const T *>(x),
                          static_cast<const T *>(dy), n);
                      launched(ctx, site, "strata_rt_act_grad");
                    });
}

void strata_rt_cast(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, const void *in, int64_t inType,
                    int64_t n) {
  bool known = withFloatType(inType, [&](auto inTag) {
    using In = decltype(inTag);
    if (!withFloatType(outType, [&](auto outTag) {
          using Out = decltype(outTag);
          if (n <= 0)
            return;
          castKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
              static_cast<Out *>(out), static_cast<const In *>(in), n);
          launched(ctx, site, "strata_rt_cast");
        }))
      unsupportedType(ctx, site, "cast", outType);
  });
  if (!known)
    unsupportedType(ctx, site, "cast", inType);
}

void strata_rt_copy(StrataRtContext *ctx, int64_t site, void *out,
                    const void *in, int64_t dtype, int64_t n) {
  int64_t width = strata_rt_element_bytes(dtype);
  if (width == 0)
    return unsupportedType(ctx, site, "copy", dtype);
  if (out == in || n <= 0)
    return;
  size_t bytes = size_t(n) * size_t(width);
  auto to = reinterpret_cast<uintptr_t>(out);
  auto from = reinterpret_cast<uintptr_t>(in);
  if (to < from + bytes && from < to + bytes) {
    // Overlapping buffers (a memmove on the CPU): through scratch, since
    // cudaMemcpy does not promise to handle an overlap.
    void *staged = ctx->scratchBytes(site, bytes);
    if (!staged ||
        !ctx->check(site,
                    cudaMemcpyAsync(staged, in, bytes, cudaMemcpyDeviceToDevice,
                                    ctx->compute),
                    "strata_rt_copy"))
      return;
    in = staged;
  }
  ctx->check(
      site,
      cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, ctx->compute),
      "strata_rt_copy");
}

void strata_rt_strided_copy(StrataRtContext *ctx, int64_t site, void *out,
                            const void *in, int64_t dtype, int64_t rank,
                            const int64_t *desc) {
  int64_t elementBytes = strata_rt_element_bytes(dtype);
  if (elementBytes != 2 && elementBytes != 4 && elementBytes != 8)
    return unsupportedType(ctx, site, "strided_copy", dtype);
  const int64_t *shape = desc;
  int64_t n = elements(rank, shape);
  if (n <= 0)
    return;
  int64_t base = desc[2 * rank];
  const int64_t *const strides[1] = {desc + rank};
  Layout<1> l;
  if (!collapse(ctx, site, "strided_copy", rank, shape, strides, l))
    return;
  // Rows of contiguous elements a fixed pitch apart (a slice of the last
  // dimension, the gemm padding's columns dropped): the copy engine's 2D
  // copy, at bandwidth where the kernel divides for every element's offset.
  if (l.rank == 2 && l.strides[0][1] == 1 && l.strides[0][0] >= l.shape[1]) {
    const size_t width = size_t(l.shape[1] * elementBytes);
    const size_t pitch = size_t(l.strides[0][0] * elementBytes);
    const size_t maxPitch = maxCopyPitch(ctx, site, "strata_rt_strided_copy");
    if (maxPitch == 0)
      return;
    if (pitch <= maxPitch) {
      ctx->check(
          site,
          cudaMemcpy2DAsync(out, width,
                            static_cast<const char *>(in) + base * elementBytes,
                            pitch, width, size_t(l.shape[0]),
                            cudaMemcpyDeviceToDevice, ctx->compute),
          "strata_rt_strided_copy");
      return;
    }
  }
  auto run = [&](auto element) {
    using E = decltype(element);
    auto *o = static_cast<E *>(out);
    const E *x = static_cast<const E *>(in) + base;
    if (n <= int64_t(UINT32_MAX))
      stridedCopyKernel<uint32_t>
          <<<gridFor(n), kThreads, 0, ctx->compute>>>(o, x, n, l);
    else
      stridedCopyKernel<uint64_t>
          <<<gridFor(n), kThreads, 0, ctx->compute>>>(o, x, n, l);
    launched(ctx, site, "strata_rt_strided_copy");
  };
  if (elementBytes == 8)
    run(uint64_t{});
  else if (elementBytes == 4)
    run(uint32_t{});
  else
    run(uint16_t{});
}

void strata_rt_copy_rows(StrataRtContext *ctx, int64_t site, void *out,
                         const void *in, int64_t dtype, int64_t rows,
                         int64_t inRow, int64_t outRow, int64_t offset) {
  int64_t width = strata_rt_element_bytes(dtype);
  if (width <= 0)
    return unsupportedType(ctx, site, "copy_rows", dtype);
  if (rows <= 0 || inRow <= 0)
    return;
  auto *dst = static_cast<char *>(out) + offset * width;
  const auto *src = static_cast<const char *>(in);
  size_t rowBytes = size_t(inRow * width);
  size_t dpitch = size_t(outRow * width), spitch = rowBytes;
  if (rows == 1) {
    ctx->check(site,
               cudaMemcpyAsync(dst, src, rowBytes, cudaMemcpyDeviceToDevice,
                               ctx->compute),
               "strata_rt_copy_rows");
    return;
  }
  const size_t maxPitch = maxCopyPitch(ctx, site, "strata_rt_copy_rows");
  if (maxPitch == 0)
    return;
  if (dpitch <= maxPitch && spitch <= maxPitch) {
    ctx->check(site,
               cudaMemcpy2DAsync(dst, dpitch, src, spitch, rowBytes,
                                 size_t(rows), cudaMemcpyDeviceToDevice,
                                 ctx->compute),
               "strata_rt_copy_rows");
    return;
  }
  // Rows too long for a 2D copy's pitch (over 2 GiB each on current
  // devices, so few of them): a copy per row.
  for (int64_t r = 0; r < rows; ++r)
    if (!ctx->check(site,
                    cudaMemcpyAsync(dst + r * dpitch, src + r * spitch,
                                    rowBytes, cudaMemcpyDeviceToDevice,
                                    ctx->compute),
                    "strata_rt_copy_rows"))
      return;
}

void strata_rt_reduce(StrataRtContext *ctx, int64_t site, void *out,
                      int64_t outType, const void *in, int64_t inType,
                      int64_t rank, const int64_t *desc, double scale) {
  withSameFloatType(ctx, site, "reduce", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    reduce(ctx, site, static_cast<T *>(out), static_cast<const T *>(in), rank,
           desc, scale);
  });
}

void strata_rt_fill(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, int64_t n, double value) {
  auto run = [&](auto *o, auto v) {
    if (n <= 0)
      return;
    fillKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(o, n, v);
    launched(ctx, site, "strata_rt_fill");
  };
  if (outType == STRATA_RT_I32)
    run(static_cast<int32_t *>(out), int32_t(value));
  else if (outType == STRATA_RT_I64)
    run(static_cast<int64_t *>(out), int64_t(value));
  else if (!withFloatType(outType, [&](auto tag) {
             using T = decltype(tag);
             run(static_cast<T *>(out), float(value));
           }))
    unsupportedType(ctx, site, "fill", outType);
}

void strata_rt_dropout(StrataRtContext *ctx, int64_t site, void *out,
                       int64_t outType, const void *in, int64_t inType,
                       const void *residual, int64_t residualType, int64_t n,
                       int64_t key, int64_t microBatches, int64_t microBatch,
                       double prob) {
  withSameFloatType(
      ctx, site, "dropout", {outType, inType, residualType}, [&](auto tag) {
        using T = decltype(tag);
        if (n <= 0)
          return;
        int64_t offset =
            strata::rng::dropoutOffset(ctx->shard, microBatches, microBatch, n);
        float keepScale = 1.0f / float(1.0 - prob);
        int64_t groups = ((offset + n - 1) >> 2) - (offset >> 2) + 1;
        dropoutKernel<<<gridFor(groups), kThreads, 0, ctx->compute>>>(
            static_cast<T *>(out), static_cast<const T *>(in),
            static_cast<const T *>(residual), n, offset, ctx->seed, key, prob,
            keepScale);
        launched(ctx, site, "strata_rt_dropout");
      });
}

} // extern "C"
