//===- Gemm.cpp - GEMM with epilogues through oneDNN ----------------------===//
//
// strata_rt_gemm is one oneDNN matmul primitive: transposes are strides,
// the bias and the activation are post-ops (the CPU twin of cuBLASLt's
// epilogues), accumulation is a sum post-op. Primitives are created once
// per distinct problem and reused across steps. With autotuning
// (StrataRtOptions::gemmAutotune), an f32 problem without an activation is
// timed once through the primitive and through oneDNN's sgemm, and runs
// through the faster from then on. Where oneDNN's kernel for the processor
// is slow on an operand's layout, the operand is first copied into one it
// runs well (a transposed first operand, a second operand whose rows lie a
// multiple of 1 KiB apart); the sums are the same.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "PackedGemm.h"
#include "Transpose.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

using dnnl::memory;

namespace strata::cpu {

struct GemmCache {
  using Key =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                 int64_t, int64_t, bool, int64_t, int64_t, int, int>;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
    /// oneDNN offers only its reference implementation (slow loops).
    bool reference;
    /// oneDNN runs it with its brgemm kernels.
    bool brgemm;
    /// Autotuning timed it, and sgemm was the faster.
    bool timed = false, sgemm = false;
  };
  std::map<Key, Entry> primitives;
};

} // namespace strata::cpu

StrataRtContext::StrataRtContext() : HostContext("CPU runtime") {}
StrataRtContext::~StrataRtContext() = default;

extern "C" void strata_rt_gemm_autotuned(StrataRtContext *ctx, int64_t *timed,
                                         int64_t *onSgemm) {
  *timed = *onSgemm = 0;
  if (ctx->gemm)
    for (const auto &[key, entry] : ctx->gemm->primitives) {
      *timed += entry.timed;
      *onSgemm += entry.sgemm;
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
  /// The second operand's row stride (elements) as stored: k rows of n,
  /// or n rows of k when transposed; 0: its rows are dense (n or k).
  int64_t ldb = 0;
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
                                  p.ldb,
                                  p.bias,
                                  p.act,
                                  p.accumulate,
                                  int(p.dt),
                                  int(p.dstDt)};
  auto it = cache.primitives.find(key);
  if (it != cache.primitives.end())
    return it->second;
  int64_t m = p.m, n = p.n, k = p.k;
  int64_t ldb = p.ldb ? p.ldb : p.transB ? k : n;
  int64_t ba = p.aBatchStride ? batch : 1, bb = p.bBatchStride ? batch : 1;
  memory::desc aMd({ba, m, k}, p.dt,
                   p.transA ? memory::dims{m * k, 1, m}
                            : memory::dims{m * k, k, 1});
  memory::desc bMd({bb, k, n}, p.dt,
                   p.transB ? memory::dims{n * ldb, 1, ldb}
                            : memory::dims{k * ldb, ldb, 1});
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
      .emplace(key, strata::cpu::GemmCache::Entry{
                        pd, dnnl::matmul(pd), std::strncmp(impl, "ref", 3) == 0,
                        std::strncmp(impl, "brg", 3) == 0})
      .first->second;
}

/// One oneDNN matmul primitive of element type `dt` (operands and bias)
/// with a result of type `dstDt` (undef: `dt`), created once per problem
/// and reused; `ldb`: B's row stride as stored (0: dense). With
/// `fastOnly`, returns false without running when oneDNN has only its
/// reference implementation for it, or none (the caller then takes another
/// path).
static bool matmul(StrataRtContext *ctx, int64_t site, memory::data_type dt,
                   int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, int64_t aBatchStride, int64_t transA,
                   const void *b, int64_t bBatchStride, int64_t transB, void *c,
                   const void *bias, int64_t act, int64_t accumulate,
                   bool fastOnly,
                   memory::data_type dstDt = memory::data_type::undef,
                   int64_t ldb = 0) {
  if (dstDt == memory::data_type::undef)
    dstDt = dt;
  // The same product for every batch (oneDNN broadcasts one side only).
  if (batch > 1 && aBatchStride == 0 && bBatchStride == 0) {
    int64_t bytes = m * n * (dstDt == memory::data_type::f32 ? 4 : 2);
    for (int64_t bi = 0; bi < batch; ++bi)
      if (!matmul(ctx, site, dt, 1, m, n, k, a, 0, transA, b, 0, transB,
                  static_cast<char *>(c) + bi * bytes, bias, act, accumulate,
                  fastOnly, dstDt, ldb))
        return false;
    return true;
  }
  try {
    strata::cpu::GemmCache::Entry &entry = primitiveFor(
        ctx, {dt, dstDt, batch, m, n, k, aBatchStride, transA, bBatchStride,
              transB, bias != nullptr, act, accumulate, ldb});
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

/// Whether oneDNN reads the transposed first operand of this f32 problem at
/// the speed of a plain one: its brgemm kernels (AVX-512, AMX) do, and
/// compute the same sums either way; its older gemm:jit kernels (oneDNN
/// 2.6's AVX2 path) run some transposed shapes at half speed (1024 x 256 x
/// 1024: 43 against 71 GFLOP/s with the transpose into scratch). Decided
/// once per problem, when its primitive is created, from the kernel oneDNN
/// picks on this processor.
static bool readsTransposedAFast(StrataRtContext *ctx, int64_t batch,
                                 int64_t m, int64_t n, int64_t k,
                                 int64_t aBatchStride, int64_t bBatchStride,
                                 int64_t transB, bool bias, int64_t act) {
  const strata::cpu::GemmCache::Entry *entry = entryFor(
      ctx, {memory::data_type::f32, memory::data_type::f32, batch, m, n, k,
            aBatchStride, 1, bBatchStride, transB, bias, act, 0});
  return entry && entry->brgemm;
}

/// Floats added to each row of a padded second operand (one cache line).
constexpr int64_t kRowPad = 16;

/// Whether oneDNN runs this f32 product faster when B's rows as stored (k
/// rows of n, or n rows of k when transposed) are kRowPad floats further
/// apart. Its gemm:jit kernels (oneDNN 2.6's AVX2 path) take their no-copy
/// kernel, which reads B in place, for products of few rows (where 1/m +
/// 1/n >= 0.0038, oneDNN's threshold; the AVX-512 path has a rule against
/// it, the AVX2 path none). With B's rows a multiple of 1 KiB apart, its
/// reads fall into few cache sets: on one thread of an AVX2-only AMD EPYC,
/// dnnl_sgemm ran 256 x 1024 x 1024 at 42 GFLOP/s, and at 94 with B's rows
/// 1040 floats apart (72 against 109 on two threads); through
/// strata_rt_gemm, the copy included, 42 became 85. A transposed B gains
/// less: 60 against 78 GFLOP/s on the same product, 66 against 72-87 on
/// 1024 x 256 x 1024 (129-133 against 136-146 on two threads). The kernel
/// and its sums are the same. Below 64 rows the copy of B would cost as
/// much as the product saves. Decided by the padded problem's primitive,
/// the one that then runs.
static bool padsSecondOperand(StrataRtContext *ctx, int64_t batch, int64_t m,
                              int64_t n, int64_t k, int64_t aBatchStride,
                              int64_t transA, int64_t bBatchStride,
                              int64_t transB, bool bias, int64_t act,
                              int64_t accumulate) {
  const int64_t row = transB ? k : n;
  if (row % 256 != 0 || m < 64 || 1.0 / double(m) + 1.0 / double(n) < 0.0038)
    return false;
  const strata::cpu::GemmCache::Entry *entry =
      entryFor(ctx, {memory::data_type::f32, memory::data_type::f32, batch, m,
                     n, k, aBatchStride, transA, bBatchStride, transB, bias,
                     act, accumulate, row + kRowPad});
  return entry && !entry->brgemm && !entry->reference;
}

/// The product through oneDNN's sgemm, one call per batch: the bias as C's
/// initial rows, then C = A B + C (an accumulating product has no bias).
/// `ldb` as matmul's. False if sgemm refused it.
static bool sgemmProduct(int64_t batch, int64_t m, int64_t n, int64_t k,
                         const float *a, int64_t aBatchStride, int64_t transA,
                         const float *b, int64_t bBatchStride, int64_t transB,
                         int64_t ldb, float *c, const float *bias,
                         bool accumulate) {
  ldb = ldb ? ldb : transB ? k : n;
  // (A transposed B is n rows of ldb, a plain one k rows.)
  const int64_t bMatrix = (transB ? n : k) * ldb;
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *ab = a + (aBatchStride ? bi * m * k : 0);
    const float *bb = b + (bBatchStride ? bi * bMatrix : 0);
    float *cb = c + bi * m * n;
    if (bias)
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(cb + i * n, bias, n * sizeof(float));
    if (dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, 1.0f, ab,
                   transA ? m : k, bb, ldb, bias || accumulate ? 1.0f : 0.0f,
                   cb, n) != dnnl_success)
      return false;
  }
  return true;
}

/// Autotuning of an f32 product without an activation: the first call of
/// each distinct problem runs it three times through the matmul primitive
/// and through sgemm, alternating, and keeps sgemm if its faster time (of
/// the last two) beats the primitive's by 3%; calls through sgemm run it
/// here and return true, the others return false (the caller runs the
/// primitive). The timed runs write the output itself (the call then
/// writes it again), or, when the call accumulates into it, scratch: at
/// most kMaxTimingFloats, beyond which the product keeps the primitive
/// untimed. oneDNN's two paths sum in different orders: results move at
/// rounding level with the choice.
constexpr int64_t kMaxTimingFloats = int64_t(1) << 24; // 64 MiB

static bool autotunedSgemm(StrataRtContext *ctx, int64_t site, int64_t batch,
                           int64_t m, int64_t n, int64_t k, const float *a,
                           int64_t aBatchStride, int64_t transA, const float *b,
                           int64_t bBatchStride, int64_t transB, int64_t ldb,
                           float *c, const float *bias, int64_t accumulate) {
  strata::cpu::GemmCache::Entry *entry =
      entryFor(ctx, {memory::data_type::f32, memory::data_type::f32, batch, m,
                     n, k, aBatchStride, transA, bBatchStride, transB,
                     bias != nullptr, STRATA_RT_ACT_NONE, accumulate, ldb});
  if (!entry)
    return false; // the primitive reports it
  if (!entry->timed && ctx->gemmAutotuneChoice) {
    entry->timed = true;
    entry->sgemm = ctx->gemmAutotuneChoice == 2;
  }
  if (!entry->timed && accumulate && batch * m * n > kMaxTimingFloats)
    entry->timed = true; // (and runs the primitive)
  if (!entry->timed) {
    entry->timed = true;
    float *out = c;
    if (accumulate) {
      strata::cpu::Scratch &scratch = ctx->gemmTiming;
      if (int64_t(scratch.size()) < batch * m * n)
        scratch.resize(batch * m * n);
      out = scratch.data();
    }
    using Clock = std::chrono::steady_clock;
    double primitive = 1e300, sgemm = 1e300;
    for (int round = 0; round < 3; ++round) {
      Clock::time_point t0 = Clock::now();
      matmul(ctx, site, memory::data_type::f32, batch, m, n, k, a, aBatchStride,
             transA, b, bBatchStride, transB, out, bias, STRATA_RT_ACT_NONE, 0,
             /*fastOnly=*/false, memory::data_type::undef, ldb);
      Clock::time_point t1 = Clock::now();
      bool ran = sgemmProduct(batch, m, n, k, a, aBatchStride, transA, b,
                              bBatchStride, transB, ldb, out, bias, false);
      Clock::time_point t2 = Clock::now();
      if (!ran)
        return false;
      if (round > 0) { // the first round warms both up
        primitive =
            std::min(primitive, std::chrono::duration<double>(t1 - t0).count());
        sgemm = std::min(sgemm, std::chrono::duration<double>(t2 - t1).count());
      }
    }
    entry->sgemm = sgemm < 0.97 * primitive;
  }
  if (!entry->sgemm)
    return false;
  if (!sgemmProduct(batch, m, n, k, a, aBatchStride, transA, b, bBatchStride,
                    transB, ldb, c, bias, accumulate != 0))
    ctx->fail(site, "oneDNN's sgemm refused a product");
  return true;
}

static void gemmF32(StrataRtContext *ctx, int64_t site, int64_t batch,
                    int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t aBatchStride, int64_t transA, const float *b,
                    int64_t bBatchStride, int64_t transB, float *c,
                    const float *bias, int64_t act, int64_t accumulate) {
  // Where oneDNN's kernel is slow with a transposed first operand (the
  // weight-gradient products X^T dY), a blocked transpose into scratch
  // followed by the plain product.
  if (transA && !accumulate &&
      !readsTransposedAFast(ctx, batch, m, n, k, aBatchStride, bBatchStride,
                            transB, bias != nullptr, act)) {
    int64_t count = aBatchStride ? batch : 1;
    float *t = ctx->gemmScratch(count * m * k);
    for (int64_t bi = 0; bi < count; ++bi)
      strata::cpu::transposeInto(t + bi * m * k, a + bi * m * k, k, m);
    a = t;
    transA = 0;
  }
  // Where it is slow with B's rows a multiple of 1 KiB apart, a copy of B
  // with its rows 64 bytes further apart.
  int64_t ldb = 0;
  if (ctx->gemmPadChoice
          ? ctx->gemmPadChoice == 2
          : padsSecondOperand(ctx, batch, m, n, k, aBatchStride, transA,
                              bBatchStride, transB, bias != nullptr, act,
                              accumulate)) {
    const int64_t rows = transB ? n : k, row = transB ? k : n;
    ldb = row + kRowPad;
    int64_t count = bBatchStride ? batch : 1;
    strata::cpu::Scratch &padded = ctx->gemmPadded;
    if (int64_t(padded.size()) < count * rows * ldb)
      padded.resize(count * rows * ldb);
    float *to = padded.data();
#pragma omp parallel for schedule(static) if (count * k * n >= (1 << 16))
    for (int64_t r = 0; r < count * rows; ++r)
      std::memcpy(to + r * ldb, b + r * row, row * sizeof(float));
    b = to;
  }
  if (ctx->gemmAutotune && act == STRATA_RT_ACT_NONE &&
      autotunedSgemm(ctx, site, batch, m, n, k, a, aBatchStride, transA, b,
                     bBatchStride, transB, ldb, c, bias, accumulate))
    return;
  matmul(ctx, site, memory::data_type::f32, batch, m, n, k, a, aBatchStride,
         transA, b, bBatchStride, transB, c, bias, act, accumulate,
         /*fastOnly=*/false, memory::data_type::undef, ldb);
}

/// The type code of bf16 or f16 storage type T.
template <typename T>
constexpr int64_t kLowType =
    std::is_same_v<T, strata::cpu::BFloat16> ? STRATA_RT_BF16 : STRATA_RT_F16;

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
  convert(ctx, site, wa, STRATA_RT_F32, a, kLowType<T>, aCount);
  convert(ctx, site, wb, STRATA_RT_F32, b, kLowType<T>, bCount);
  if (bias)
    convert(ctx, site, wbias, STRATA_RT_F32, bias, kLowType<T>, biasCount);
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
  int64_t cCount = batch * m * n;
  if (strata::cpu::packedGemmSupported()) {
    if (act == STRATA_RT_ACT_NONE) {
      strata::cpu::packedGemm(ctx, kLowType<T>, batch, m, n, k, a, aBatchStride,
                              transA, b, bBatchStride, transB, c, kLowType<T>,
                              bias, accumulate);
      return;
    }
    // The activation of the f32 sums, then one rounding (an activation's
    // product does not accumulate).
    float *wc = ctx->scratchFloats(cCount);
    strata::cpu::packedGemm(ctx, kLowType<T>, batch, m, n, k, a, aBatchStride,
                            transA, b, bBatchStride, transB, wc, STRATA_RT_F32,
                            bias, false);
    static const auto unary = reinterpret_cast<decltype(&strata_rt_unary)>(
        strata::cpu::dispatchedKernel("strata_rt_unary"));
    unary(ctx, site, act, wc, STRATA_RT_F32, wc, STRATA_RT_F32, cCount, 0.0);
    convert(ctx, site, c, kLowType<T>, wc, STRATA_RT_F32, cCount);
    return;
  }
  float *wc = ctx->scratchFloats(cCount);
  if (accumulate)
    convert(ctx, site, wc, STRATA_RT_F32, c, kLowType<T>, cCount);
  widenedProduct(ctx, site, batch, m, n, k, a, aBatchStride, transA, b,
                 bBatchStride, transB, wc, bias, act, accumulate);
  convert(ctx, site, c, kLowType<T>, wc, STRATA_RT_F32, cCount);
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
  if (strata::cpu::packedGemmSupported()) {
    strata::cpu::packedGemm(ctx, dtype, 1, m, n, k, a, 0, transA, b, 0, transB,
                            out, STRATA_RT_F32, bias, false);
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
