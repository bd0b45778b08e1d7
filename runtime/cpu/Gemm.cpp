//===- Gemm.cpp - GEMM with epilogues -------------------------------------===//
//
// strata_rt_gemm runs through one of two implementations, chosen by the
// processor (StrataRtContext::gemmPacked):
// - Strata's packed GEMM (PackedGemm.cpp), where the widest kernels the
//   processor runs are AVX2;
// - one oneDNN matmul primitive elsewhere (bf16 and f16 operands that it
//   has no native kernels for widened into scratch for its f32 product):
//   transposes are strides, the bias and the
//   activation are post-ops (the CPU twin of cuBLASLt's epilogues),
//   accumulation is a sum post-op. Primitives are created once per distinct
//   problem and reused across steps.
// With autotuning (StrataRtOptions::gemmAutotune), an f32 problem without
// an activation is timed once through the primitive, oneDNN's sgemm and
// (with AVX2) the packed GEMM, and runs through the fastest from then on.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "PackedGemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

using dnnl::memory;

namespace strata::cpu {

/// The implementations of an f32 product.
enum class F32Path { Primitive, Sgemm, Packed };

struct GemmCache {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, bool, int64_t, int64_t, int, int>;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
    /// oneDNN offers only its reference implementation (slow loops).
    bool reference;
    /// Autotuning timed it, and the path it chose.
    bool timed = false;
    F32Path path = F32Path::Primitive;
  };
  std::map<Key, Entry> primitives;
};

} // namespace strata::cpu

StrataRtContext::StrataRtContext() : HostContext("CPU runtime") {}
StrataRtContext::~StrataRtContext() = default;

extern "C" void strata_rt_gemm_autotuned(StrataRtContext *ctx, int64_t *timed,
                                         int64_t *onSgemm, int64_t *onPacked) {
  using strata::cpu::F32Path;
  *timed = *onSgemm = *onPacked = 0;
  if (ctx->gemm)
    for (const auto &[key, entry] : ctx->gemm->primitives)
      if (entry.timed) {
        ++*timed;
        *onSgemm += entry.path == F32Path::Sgemm;
        *onPacked += entry.path == F32Path::Packed;
      }
}

namespace {
/// The problem of one GEMM call.
struct Problem {
  /// Operands' and bias's type; the result's.
  memory::data_type dt, dstDt;
  int64_t batch, m, n, k, aBatchStride, transA, bBatchStride, transB;
  bool bias;
  int64_t act, accumulate;
};
} // namespace

/// The oneDNN matmul primitive of a problem, created once and reused. A
/// batch whose products all read the same two matrices runs as that many
/// products of one (oneDNN broadcasts one side only): its primitive is the
/// single product's.
static strata::cpu::GemmCache::Entry &primitiveFor(StrataRtContext *ctx,
                                                   const Problem &p) {
  if (!ctx->gemm)
    ctx->gemm = std::make_unique<strata::cpu::GemmCache>();
  strata::cpu::GemmCache &cache = *ctx->gemm;
  int64_t batch = p.aBatchStride || p.bBatchStride ? p.batch : 1;
  strata::cpu::GemmCache::Key key{batch,
                                  p.m,
                                  p.n,
                                  p.k,
                                  p.aBatchStride != 0,
                                  p.transA,
                                  p.bBatchStride != 0,
                                  p.transB,
                                  p.bias,
                                  p.act,
                                  p.accumulate,
                                  int(p.dt),
                                  int(p.dstDt)};
  auto it = cache.primitives.find(key);
  if (it != cache.primitives.end())
    return it->second;
  int64_t m = p.m, n = p.n, k = p.k;
  int64_t ba = p.aBatchStride ? batch : 1, bb = p.bBatchStride ? batch : 1;
  memory::desc aMd({ba, m, k}, p.dt,
                   p.transA ? memory::dims{m * k, 1, m}
                            : memory::dims{m * k, k, 1});
  memory::desc bMd({bb, k, n}, p.dt,
                   p.transB ? memory::dims{n * k, 1, k}
                            : memory::dims{k * n, n, 1});
  memory::desc cMd({batch, m, n}, p.dstDt, memory::dims{m * n, n, 1});
  dnnl::post_ops ops;
  if (p.accumulate)
    ops.append_sum(1.0f);
  dnnl::algorithm alg = dnnl::algorithm::undef;
  if (p.act == STRATA_RT_ACT_GELU_TANH)
    alg = dnnl::algorithm::eltwise_gelu_tanh;
  else if (p.act == STRATA_RT_ACT_GELU_ERF)
    alg = dnnl::algorithm::eltwise_gelu_erf;
  if (alg != dnnl::algorithm::undef)
    ops.append_eltwise(1.0f, alg, 0.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  dnnl::matmul::desc desc =
      p.bias ? dnnl::matmul::desc(
                   aMd, bMd,
                   memory::desc({1, 1, n}, p.dt, memory::dims{n, n, 1}), cMd)
             : dnnl::matmul::desc(aMd, bMd, cMd);
  dnnl::matmul::primitive_desc pd(desc, attr, cache.engine);
  const char *impl = pd.impl_info_str();
  return cache.primitives
      .emplace(key,
               strata::cpu::GemmCache::Entry{pd, dnnl::matmul(pd),
                                             std::strncmp(impl, "ref", 3) == 0})
      .first->second;
}

/// One oneDNN matmul primitive of element type `dt` (operands and bias)
/// with a result of type `dstDt` (undef: `dt`), created once per problem
/// and reused. With
/// `fastOnly`, returns false without running when oneDNN has only its
/// reference implementation for it, or none (the caller then takes another
/// path).
static bool matmul(StrataRtContext *ctx, int64_t site, memory::data_type dt,
                   int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, int64_t aBatchStride, int64_t transA,
                   const void *b, int64_t bBatchStride, int64_t transB, void *c,
                   const void *bias, int64_t act, int64_t accumulate,
                   bool fastOnly,
                   memory::data_type dstDt = memory::data_type::undef) {
  if (dstDt == memory::data_type::undef)
    dstDt = dt;
  // The same product for every batch (oneDNN broadcasts one side only).
  if (batch > 1 && aBatchStride == 0 && bBatchStride == 0) {
    int64_t bytes = m * n * (dstDt == memory::data_type::f32 ? 4 : 2);
    for (int64_t bi = 0; bi < batch; ++bi)
      if (!matmul(ctx, site, dt, 1, m, n, k, a, 0, transA, b, 0, transB,
                  static_cast<char *>(c) + bi * bytes, bias, act, accumulate,
                  fastOnly, dstDt))
        return false;
    return true;
  }
  try {
    strata::cpu::GemmCache::Entry &entry = primitiveFor(
        ctx, {dt, dstDt, batch, m, n, k, aBatchStride, transA, bBatchStride,
              transB, bias != nullptr, act, accumulate});
    if (fastOnly && entry.reference)
      return false;
    strata::cpu::GemmCache &cache = *ctx->gemm;
    const dnnl::matmul::primitive_desc &pd = entry.pd;
    memory aMem(pd.src_desc(), cache.engine, const_cast<void *>(a));
    memory bMem(pd.weights_desc(), cache.engine, const_cast<void *>(b));
    memory cMem(pd.dst_desc(), cache.engine, c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, aMem},
                                         {DNNL_ARG_WEIGHTS, bMem},
                                         {DNNL_ARG_DST, cMem}};
    if (bias)
      args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), cache.engine,
                                         const_cast<void *>(bias)));
    entry.primitive.execute(cache.stream, args);
    cache.stream.wait();
  } catch (const dnnl::error &e) {
    if (fastOnly)
      return false; // a problem oneDNN has no kernel for: the caller widens
    ctx->fail(site, std::string("oneDNN matmul failed: ") + e.what());
  }
  return true;
}

/// The cached primitive of a problem, or null where oneDNN has none (the
/// product's own call then reports it).
static strata::cpu::GemmCache::Entry *entryFor(StrataRtContext *ctx,
                                               const Problem &p) {
  try {
    return &primitiveFor(ctx, p);
  } catch (const dnnl::error &) {
    return nullptr;
  }
}

/// The product through oneDNN's sgemm, one call per batch: the bias as C's
/// initial rows, then C = A B + C (an accumulating product has no bias).
/// False if sgemm refused it.
static bool sgemmProduct(int64_t batch, int64_t m, int64_t n, int64_t k,
                         const float *a, int64_t aBatchStride, int64_t transA,
                         const float *b, int64_t bBatchStride, int64_t transB,
                         float *c, const float *bias, bool accumulate) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *ab = a + (aBatchStride ? bi * m * k : 0);
    const float *bb = b + (bBatchStride ? bi * k * n : 0);
    float *cb = c + bi * m * n;
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(cb + i * n, bias, n * sizeof(float));
    if (dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, 1.0f, ab,
                   transA ? m : k, bb, transB ? k : n,
                   bias || accumulate ? 1.0f : 0.0f, cb, n) != dnnl_success)
      return false;
  }
  return true;
}

/// An f32 product through `path`.
static void runF32(strata::cpu::F32Path path, StrataRtContext *ctx,
                   int64_t site, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const float *a, int64_t aBatchStride, int64_t transA,
                   const float *b, int64_t bBatchStride, int64_t transB,
                   float *c, const float *bias, int64_t act,
                   int64_t accumulate) {
  using strata::cpu::F32Path;
  if (path == F32Path::Packed)
    strata::cpu::packedGemm(ctx, site, STRATA_RT_F32, batch, m, n, k, a,
                            aBatchStride, transA, b, bBatchStride, transB, c,
                            STRATA_RT_F32, bias, act, accumulate);
  else if (path == F32Path::Sgemm) {
    if (!sgemmProduct(batch, m, n, k, a, aBatchStride, transA, b, bBatchStride,
                      transB, c, bias, accumulate != 0))
      ctx->fail(site, "oneDNN's sgemm refused a product");
  } else
    matmul(ctx, site, memory::data_type::f32, batch, m, n, k, a, aBatchStride,
           transA, b, bBatchStride, transB, c, bias, act, accumulate,
           /*fastOnly=*/false);
}

/// Autotuning of an f32 product without an activation: the first call of
/// each distinct problem runs it three times through each path at hand
/// (oneDNN's matmul primitive, its sgemm, and Strata's packed GEMM where the
/// processor has AVX2), in turn, and keeps the fastest (by the better of its
/// last two times) if it beats the processor's default path by 3%, else the
/// default. The timed runs write the output itself (the call then writes it
/// again), or, when the call accumulates into it, scratch: at most
/// kMaxTimingFloats, beyond which the product keeps the default untimed.
/// The paths sum in different orders: results move at rounding level with
/// the choice.
constexpr int64_t kMaxTimingFloats = int64_t(1) << 24; // 64 MiB

static strata::cpu::F32Path
autotunedPath(StrataRtContext *ctx, int64_t site, strata::cpu::F32Path fallback,
              int64_t batch, int64_t m, int64_t n, int64_t k, const float *a,
              int64_t aBatchStride, int64_t transA, const float *b,
              int64_t bBatchStride, int64_t transB, float *c, const float *bias,
              int64_t accumulate) {
  using strata::cpu::F32Path;
  strata::cpu::GemmCache::Entry *entry =
      entryFor(ctx, {memory::data_type::f32, memory::data_type::f32, batch, m,
                     n, k, aBatchStride, transA, bBatchStride, transB,
                     bias != nullptr, STRATA_RT_ACT_NONE, accumulate});
  if (!entry)
    return fallback; // (the primitive reports it)
  if (entry->timed)
    return entry->path;
  entry->timed = true;
  entry->path = fallback;
  if (ctx->gemmAutotuneChoice) {
    entry->path = F32Path(ctx->gemmAutotuneChoice - 1);
    return entry->path;
  }
  if (accumulate && batch * m * n > kMaxTimingFloats)
    return entry->path;
  float *out = c;
  if (accumulate) {
    strata::cpu::Scratch &scratch = ctx->gemmTiming;
    if (int64_t(scratch.size()) < batch * m * n)
      scratch.resize(batch * m * n);
    out = scratch.data();
  }
  std::vector<F32Path> paths{F32Path::Primitive, F32Path::Sgemm};
  static const bool avx2 = std::strcmp(strata_rt_isa(), "baseline") != 0;
  if (avx2)
    paths.push_back(F32Path::Packed);
  std::map<F32Path, double> best;
  for (int round = 0; round < 3; ++round)
    for (F32Path path : paths) {
      if (best.count(path) && std::isinf(best[path]))
        continue; // (refused)
      auto start = std::chrono::steady_clock::now();
      // A product sgemm refuses (an empty one) is not a candidate.
      bool ran = true;
      if (path == F32Path::Sgemm)
        ran = sgemmProduct(batch, m, n, k, a, aBatchStride, transA, b,
                           bBatchStride, transB, out, bias, false);
      else
        runF32(path, ctx, site, batch, m, n, k, a, aBatchStride, transA, b,
               bBatchStride, transB, out, bias, STRATA_RT_ACT_NONE, 0);
      std::chrono::duration<double> time =
          std::chrono::steady_clock::now() - start;
      if (!ran)
        best[path] = std::numeric_limits<double>::infinity();
      else if (round > 0) // the first round warms every path up
        best[path] =
            round == 1 ? time.count() : std::min(best[path], time.count());
    }
  for (F32Path path : paths)
    if (best[path] < 0.97 * best[fallback] && best[path] < best[entry->path])
      entry->path = path;
  return entry->path;
}

static void gemmF32(StrataRtContext *ctx, int64_t site, int64_t batch,
                    int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t aBatchStride, int64_t transA, const float *b,
                    int64_t bBatchStride, int64_t transB, float *c,
                    const float *bias, int64_t act, int64_t accumulate) {
  using strata::cpu::F32Path;
  F32Path path = ctx->gemmPacked ? F32Path::Packed : F32Path::Primitive;
  if (ctx->gemmAutotune && act == STRATA_RT_ACT_NONE)
    path = autotunedPath(ctx, site, path, batch, m, n, k, a, aBatchStride,
                         transA, b, bBatchStride, transB, c, bias, accumulate);
  runF32(path, ctx, site, batch, m, n, k, a, aBatchStride, transA, b,
         bBatchStride, transB, c, bias, act, accumulate);
}

/// Converts the GEMM's operands and result between f32 and bf16 or f16
/// with strata_rt_cast of the build the step runs: this file is compiled
/// for baseline x86-64, whose loops convert f16 an element at a time.
static void convert(StrataRtContext *ctx, int64_t site, void *to,
                    int64_t toType, const void *from, int64_t fromType,
                    int64_t count) {
  static const auto cast = reinterpret_cast<decltype(&strata_rt_cast)>(
      strata::cpu::dispatchedKernel("strata_rt_cast"));
  cast(ctx, site, to, toType, from, fromType, count);
}

/// The f32 product of bf16 or f16 operands, widened (exactly): `out` =
/// act(A B + bias), or out + A B when accumulating (f32 accumulation, as
/// oneDNN's and cuBLASLt's bf16 GEMMs).
template <typename T>
static void widenedProduct(StrataRtContext *ctx, int64_t site, int64_t batch,
                           int64_t m, int64_t n, int64_t k, const T *a,
                           int64_t aBatchStride, int64_t transA, const T *b,
                           int64_t bBatchStride, int64_t transB, float *out,
                           const T *bias, int64_t act, int64_t accumulate) {
  int64_t aCount = (aBatchStride ? batch : 1) * m * k;
  int64_t bCount = (bBatchStride ? batch : 1) * k * n;
  int64_t biasCount = bias ? n : 0;
  strata::cpu::Scratch &buffer = ctx->gemmWiden;
  if (int64_t(buffer.size()) < aCount + bCount + biasCount)
    buffer.resize(aCount + bCount + biasCount);
  float *wa = buffer.data(), *wb = wa + aCount, *wbias = wb + bCount;
  convert(ctx, site, wa, STRATA_RT_F32, a, strata::cpu::kTypeCode<T>, aCount);
  convert(ctx, site, wb, STRATA_RT_F32, b, strata::cpu::kTypeCode<T>, bCount);
  if (bias)
    convert(ctx, site, wbias, STRATA_RT_F32, bias, strata::cpu::kTypeCode<T>,
            biasCount);
  gemmF32(ctx, site, batch, m, n, k, wa, aBatchStride, transA, wb, bBatchStride,
          transB, out, bias ? wbias : nullptr, act, accumulate);
}

/// A bf16 or f16 GEMM where the processor has no native kernels for it: an
/// f32 product of the exactly widened values, the result rounded once.
/// Strata's packed GEMM widens the operands as it packs them and rounds
/// the result as it writes it; on processors without AVX2 the operands are
/// widened into scratch for oneDNN's f32 product.
template <typename T>
static void gemmLow(StrataRtContext *ctx, int64_t site, int64_t batch,
                    int64_t m, int64_t n, int64_t k, const T *a,
                    int64_t aBatchStride, int64_t transA, const T *b,
                    int64_t bBatchStride, int64_t transB, T *c, const T *bias,
                    int64_t act, int64_t accumulate) {
  if (ctx->gemmPacked) {
    strata::cpu::packedGemm(ctx, site, strata::cpu::kTypeCode<T>, batch, m, n,
                            k, a, aBatchStride, transA, b, bBatchStride, transB,
                            c, strata::cpu::kTypeCode<T>, bias, act,
                            accumulate);
    return;
  }
  int64_t cCount = batch * m * n;
  float *wc = ctx->scratchFloats(cCount);
  if (accumulate)
    convert(ctx, site, wc, STRATA_RT_F32, c, strata::cpu::kTypeCode<T>, cCount);
  widenedProduct(ctx, site, batch, m, n, k, a, aBatchStride, transA, b,
                 bBatchStride, transB, wc, bias, act, accumulate);
  convert(ctx, site, c, strata::cpu::kTypeCode<T>, wc, STRATA_RT_F32, cCount);
}

void strata::cpu::preActivation(StrataRtContext *ctx, int64_t site, int64_t m,
                                int64_t n, int64_t k, const void *a,
                                int64_t transA, const void *b, int64_t transB,
                                const void *bias, int64_t dtype, float *out) {
  if (dtype == STRATA_RT_BF16 &&
      matmul(ctx, site, memory::data_type::bf16, 1, m, n, k, a, 0, transA, b, 0,
             transB, out, bias, STRATA_RT_ACT_NONE, 0, /*fastOnly=*/true,
             memory::data_type::f32))
    return;
  if (ctx->gemmPacked) {
    strata::cpu::packedGemm(ctx, site, dtype, 1, m, n, k, a, 0, transA, b, 0,
                            transB, out, STRATA_RT_F32, bias,
                            STRATA_RT_ACT_NONE, false);
    return;
  }
  withFloatType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>)
      widenedProduct(ctx, site, 1, m, n, k, static_cast<const T *>(a), 0,
                     transA, static_cast<const T *>(b), 0, transB, out,
                     static_cast<const T *>(bias), STRATA_RT_ACT_NONE, 0);
  });
}

extern "C" void
strata_rt_gemm(StrataRtContext *ctx, int64_t site, int64_t batch, int64_t m,
               int64_t n, int64_t k, const void *a, int64_t aType,
               int64_t aBatchStride, int64_t transA, const void *b,
               int64_t bType, int64_t bBatchStride, int64_t transB, void *c,
               int64_t cType, const void *bias, int64_t biasType, int64_t act,
               int64_t accumulate) {
  if (!gemmArgumentsOk(ctx, site, "gemm", batch, m, n, k, bias != nullptr, act,
                       accumulate))
    return;
  // ReLU runs after the product: oneDNN's post-op is a max, which turns
  // NaN into 0, where the runtime's ReLU keeps NaN (PyTorch's relu).
  if (act == STRATA_RT_ACT_RELU) {
    strata_rt_gemm(ctx, site, batch, m, n, k, a, aType, aBatchStride, transA, b,
                   bType, bBatchStride, transB, c, cType, bias, biasType,
                   STRATA_RT_ACT_NONE, accumulate);
    strata_rt_unary(ctx, site, STRATA_RT_ACT_RELU, c, cType, c, cType,
                    batch * m * n, 0.0);
    return;
  }
  withSameFloatType(
      ctx, site, "gemm", {aType, bType, cType, biasType}, [&](auto tag) {
        using T = decltype(tag);
        if (k == 0) {
          strata::rt::emptyProduct(ctx, site, batch * m, n, c, cType, bias, act,
                                   accumulate);
        } else if constexpr (std::is_same_v<T, float>) {
          gemmF32(ctx, site, batch, m, n, k, static_cast<const float *>(a),
                  aBatchStride, transA, static_cast<const float *>(b),
                  bBatchStride, transB, static_cast<float *>(c),
                  static_cast<const float *>(bias), act, accumulate);
        } else {
          // bf16: oneDNN's own kernels where the processor has bf16 dot
          // products (AVX512-BF16, AMX: f32 accumulation, the result
          // rounded once, as the widened path up to summation order).
          if constexpr (std::is_same_v<T, strata::cpu::BFloat16>)
            if (matmul(ctx, site, memory::data_type::bf16, batch, m, n, k, a,
                       aBatchStride, transA, b, bBatchStride, transB, c, bias,
                       act, accumulate, /*fastOnly=*/true))
              return;
          gemmLow(ctx, site, batch, m, n, k, static_cast<const T *>(a),
                  aBatchStride, transA, static_cast<const T *>(b), bBatchStride,
                  transB, static_cast<T *>(c), static_cast<const T *>(bias),
                  act, accumulate);
        }
      });
}
