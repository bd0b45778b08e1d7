//===- RuntimeTest.cpp - Kernels of the CPU runtime -----------------------===//
//
// Each kernel against a direct loop: the GEMM in every transpose, batch and
// epilogue form, broadcasting, reductions, strided copies, dropout against
// the RNG's mask, and the failures a kernel records instead of aborting.
//
//===----------------------------------------------------------------------===//

#include "strata/Runtime/StrataRuntime.h"

#include "../../runtime/common/AttentionLayout.h"
#include "../../runtime/common/HostContext.h"
#include "../../runtime/common/StrataRandom.h"
#include "../../runtime/cpu/Context.h"
#include "../../runtime/cpu/PackedGemm.h"
#include "../../runtime/cpu/Transpose.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t F32 = STRATA_RT_F32;

struct Context {
  StrataRtContext *ctx;
  explicit Context(int64_t threads = 1, int64_t shard = 0)
      : ctx(create(threads, shard)) {}
  static StrataRtContext *create(int64_t threads, int64_t shard) {
    StrataRtOptions options;
    strata_rt_default_options(&options);
    options.seed = 7;
    options.shard = shard;
    options.threads = threads;
    return strata_rt_create(&options, nullptr, 0);
  }
  ~Context() { strata_rt_destroy(ctx); }
  operator StrataRtContext *() { return ctx; }
};

std::vector<float> iota(int64_t n, float scale = 0.01f, float offset = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = offset + scale * float((i * 37) % 101 - 50);
  return v;
}

/// C = op(A) @ op(B) by the definition, batch b of A at b*m*k (or 0).
std::vector<float> naiveGemm(int64_t batch, int64_t m, int64_t n, int64_t k,
                             const std::vector<float> &a, bool aBatched,
                             bool transA, const std::vector<float> &b,
                             bool bBatched, bool transB) {
  std::vector<float> c(batch * m * n);
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float *pa = a.data() + (aBatched ? bi * m * k : 0);
    const float *pb = b.data() + (bBatched ? bi * k * n : 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += double(transA ? pa[p * m + i] : pa[i * k + p]) *
               double(transB ? pb[j * k + p] : pb[p * n + j]);
        c[bi * m * n + i * n + j] = float(s);
      }
  }
  return c;
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want,
                float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
}

/// Every layout and batching gives the product, through the matmul
/// primitive, through sgemm and (where the processor runs it) through
/// Strata's packed GEMM.
TEST(RuntimeTest, GemmTransposesAndBatches) {
  const int64_t m = 5, n = 7;
  const bool packed = std::strcmp(strata_rt_isa(), "baseline") != 0;
  for (int64_t k : {3, 256})
    for (int path : {1, 2, 3}) {
      if (path == 3 && !packed)
        continue;
      Context ctx;
      ctx.ctx->gemmPacked = path == 3;
      ctx.ctx->gemmAutotune = true;
      ctx.ctx->gemmAutotuneChoice = path;
      for (int64_t batch : {1, 3})
        for (bool aBatched : {false, true})
          for (bool bBatched : {false, true})
            for (bool transA : {false, true})
              for (bool transB : {false, true}) {
                if (batch == 1 && (aBatched || bBatched))
                  continue; // (the same as unbatched)
                auto a = iota((aBatched ? batch : 1) * m * k);
                auto b = iota((bBatched ? batch : 1) * k * n, 0.02f, 0.1f);
                std::vector<float> c(batch * m * n, -1.0f);
                strata_rt_gemm(ctx, 0, batch, m, n, k, a.data(), F32,
                               aBatched ? m * k : 0, transA, b.data(), F32,
                               bBatched ? k * n : 0, transB, c.data(), F32,
                               nullptr, F32, STRATA_RT_ACT_NONE, 0);
                SCOPED_TRACE(::testing::Message()
                             << (path == 1   ? "primitive"
                                 : path == 2 ? "sgemm"
                                             : "packed")
                             << " k " << k << " batch " << batch << " aBatched "
                             << aBatched << " bBatched " << bBatched
                             << " transA " << transA << " transB " << transB);
                expectNear(c,
                           naiveGemm(batch, m, n, k, a, aBatched, transA, b,
                                     bBatched, transB),
                           1e-5f);
              }
      EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
    }
}

/// With gemmAutotune, each distinct f32 problem without an activation is
/// timed once (through the matmul primitive and sgemm) and then runs
/// through the faster: every layout, batching, the bias and accumulation
/// give the product on either path (forced, then timed). Problems with an
/// activation, and contexts without the option (or whose caller's options
/// end before it), time nothing.
TEST(RuntimeTest, GemmAutotuneTimesEachProblemOnceAndComputesIt) {
  auto create = [](int64_t autotune, int64_t size) {
    StrataRtOptions options;
    strata_rt_default_options(&options);
    options.gemmAutotune = autotune;
    options.size = size;
    return strata_rt_create(&options, nullptr, 0);
  };
  // Products timed, and of those the ones through sgemm and through the
  // packed GEMM.
  struct Counts {
    int64_t timed = -1, onSgemm = -1, onPacked = -1;
  };
  auto autotuned = [](StrataRtContext *ctx) {
    Counts counts;
    strata_rt_gemm_autotuned(ctx, &counts.timed, &counts.onSgemm,
                             &counts.onPacked);
    return counts;
  };
  const bool packed = std::strcmp(strata_rt_isa(), "baseline") != 0;
  const int64_t m = 37, n = 70, k = 45;
  for (int choice : {1, 2, 3, 0}) {
    if (choice == 3 && !packed)
      continue;
    SCOPED_TRACE(choice == 1   ? "primitive"
                 : choice == 2 ? "sgemm"
                 : choice == 3 ? "packed"
                               : "timed");
    StrataRtContext *ctx = create(1, sizeof(StrataRtOptions));
    ASSERT_NE(ctx, nullptr);
    // f32 products on the matmul primitive unless autotuning chooses
    // another path (the packed GEMM one where the processor has AVX2).
    ctx->gemmPacked = false;
    ctx->gemmAutotuneChoice = choice;
    int64_t problems = 0;
    for (int64_t batch : {1, 3})
      for (bool transA : {false, true})
        for (bool transB : {false, true})
          for (bool bias : {false, true})
            for (int64_t accumulate : {0, 1}) {
              if (bias && accumulate)
                continue; // (refused: GemmArgumentsAreChecked)
              SCOPED_TRACE(::testing::Message()
                           << "batch " << batch << " transA " << transA
                           << " transB " << transB << " bias " << bias
                           << " accumulate " << accumulate);
              auto a = iota(batch * m * k), b = iota(k * n, 0.02f, 0.1f),
                   biasRow = iota(n, 0.3f);
              auto want =
                  naiveGemm(batch, m, n, k, a, true, transA, b, false, transB);
              for (int64_t i = 0; i < batch * m * n; ++i)
                want[i] +=
                    (bias ? biasRow[i % n] : 0.0f) + (accumulate ? 2.0f : 0.0f);
              ++problems;
              const int64_t before = autotuned(ctx).timed;
              int64_t afterFirst = -1;
              for (int call = 0; call < 2; ++call) { // decided, then reused
                std::vector<float> c(batch * m * n, accumulate ? 2.0f : -1.0f);
                strata_rt_gemm(ctx, 0, batch, m, n, k, a.data(), F32, m * k,
                               transA, b.data(), F32, 0, transB, c.data(), F32,
                               bias ? biasRow.data() : nullptr, F32,
                               STRATA_RT_ACT_NONE, accumulate);
                expectNear(c, want, 1e-5f);
                // Timed on the first call, never again.
                const int64_t timed = autotuned(ctx).timed;
                EXPECT_EQ(timed, call == 1 ? afterFirst : before + 1);
                afterFirst = timed;
              }
            }
    const Counts counts = autotuned(ctx);
    EXPECT_EQ(counts.timed, problems);
    if (choice) { // every problem on the forced path
      EXPECT_EQ(counts.onSgemm, choice == 2 ? problems : 0);
      EXPECT_EQ(counts.onPacked, choice == 3 ? problems : 0);
    } else { // each on the path its timing chose
      EXPECT_LE(counts.onSgemm + counts.onPacked, problems);
    }
    // A product with a GELU post-op is one oneDNN primitive, not timed (a
    // ReLU runs after a plain product, which is).
    auto a = iota(m * k), b = iota(k * n);
    std::vector<float> c(m * n);
    strata_rt_gemm(ctx, 0, 1, m, n, k, a.data(), F32, 0, 0, b.data(), F32, 0, 0,
                   c.data(), F32, nullptr, F32, STRATA_RT_ACT_GELU_TANH, 0);
    EXPECT_EQ(autotuned(ctx).timed, problems);
    EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
    strata_rt_destroy(ctx);
  }
  auto a = iota(m * k), b = iota(k * n);
  std::vector<float> c(m * n);
  for (StrataRtContext *off :
       {create(0, sizeof(StrataRtOptions)),
        create(1, offsetof(StrataRtOptions, gemmAutotune))}) {
    ASSERT_NE(off, nullptr);
    off->gemmPacked = false;
    strata_rt_gemm(off, 0, 1, m, n, k, a.data(), F32, 0, 0, b.data(), F32, 0, 0,
                   c.data(), F32, nullptr, F32, STRATA_RT_ACT_NONE, 0);
    EXPECT_EQ(autotuned(off).timed, 0);
    strata_rt_destroy(off);
  }
}

/// (transpose8x8 inlines into AVX2 callers only.)
__attribute__((target("avx2,fma"))) void
transposeTile(float *dst, int64_t ldd, const float *src, int64_t lds) {
  strata::cpu::transpose8x8(dst, ldd, src, lds);
}

/// The 8 x 8 transpose in AVX registers (the packed GEMM's and fused
/// attention's packing): every element lands where it belongs, rows apart
/// by other than 8.
TEST(RuntimeTest, TransposeMovesEveryElement) {
  if (std::strcmp(strata_rt_isa(), "baseline") == 0)
    GTEST_SKIP() << "no AVX2";
  const int64_t lds = 11, ldd = 13;
  std::vector<float> src(8 * lds), dst(8 * ldd, -1.0f);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = float(i);
  transposeTile(dst.data(), ldd, src.data(), lds);
  // dst's row j holds src's column j; its elements past 8 are untouched.
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t i = 0; i < ldd; ++i)
      ASSERT_EQ(dst[j * ldd + i], i < 8 ? src[i * lds + j] : -1.0f)
          << "row " << j << " column " << i;
}

TEST(RuntimeTest, ReluKeepsNaN) {
  // A NaN input reaches the loss (PyTorch's relu), where it is reported.
  Context ctx;
  std::vector<float> in = {-1.0f, 2.0f, std::nanf(""), -0.0f}, out(4);
  strata_rt_unary(ctx, 0, STRATA_RT_ACT_RELU, out.data(), F32, in.data(), F32,
                  4, 0.0);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_FALSE(std::signbit(out[3]));
  // The GEMM's ReLU epilogue too (1 x 2 times 2 x 2, a NaN in one column).
  std::vector<float> a = {1.0f, 1.0f}, b = {std::nanf(""), -1.0f, 0.0f, -1.0f},
                     c(2);
  strata_rt_gemm(ctx, 0, 1, 1, 2, 2, a.data(), F32, 0, 0, b.data(), F32, 0, 0,
                 c.data(), F32, nullptr, F32, STRATA_RT_ACT_RELU, 0);
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], 0.0f);
}

TEST(RuntimeTest, GemmEpilogues) {
  Context ctx;
  const int64_t m = 4, n = 6, k = 5;
  auto a = iota(m * k), b = iota(k * n, 0.03f), bias = iota(n, 0.1f);
  auto plain = naiveGemm(1, m, n, k, a, false, false, b, false, false);
  for (int64_t act : {STRATA_RT_ACT_NONE, STRATA_RT_ACT_RELU,
                      STRATA_RT_ACT_GELU_TANH, STRATA_RT_ACT_GELU_ERF}) {
    std::vector<float> c(m * n), want(m * n), pre(m * n);
    for (int64_t i = 0; i < m * n; ++i)
      pre[i] = plain[i] + bias[i % n];
    // The epilogue equals the unary kernel applied to matmul + bias.
    strata_rt_unary(ctx, 0, act, want.data(), F32, pre.data(), F32, m * n,
                    0.0);
    strata_rt_gemm(ctx, 0, 1, m, n, k, a.data(), F32, 0, 0, b.data(), F32, 0,
                   0, c.data(), F32, bias.data(), F32, act, 0);
    SCOPED_TRACE(act);
    expectNear(c, want, 1e-5f);
  }
  // Accumulation adds the product to the output.
  std::vector<float> c(m * n, 1.0f);
  strata_rt_gemm(ctx, 0, 1, m, n, k, a.data(), F32, 0, 0, b.data(), F32, 0, 0,
                 c.data(), F32, nullptr, F32, STRATA_RT_ACT_NONE, 1);
  for (int64_t i = 0; i < m * n; ++i)
    EXPECT_NEAR(c[i], plain[i] + 1.0f, 1e-5f);
}

TEST(RuntimeTest, GemmBackwardEpilogues) {
  Context ctx;
  const int64_t m = 5, n = 7, k = 6;
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "transA " << transA << " transB " << transB);
      auto a = iota(m * k), b = iota(k * n, 0.02f, 0.1f), aux = iota(m * n);
      auto plain = naiveGemm(1, m, n, k, a, false, transA, b, false, transB);
      // dact: the product times the activation's gradient at aux (ReLU's
      // step; GELU-tanh's derivative by its definition, in double).
      for (int64_t act : {STRATA_RT_ACT_RELU, STRATA_RT_ACT_GELU_TANH}) {
        std::vector<float> c(m * n), want(m * n);
        for (int64_t i = 0; i < m * n; ++i) {
          double x = aux[i], d;
          if (act == STRATA_RT_ACT_RELU) {
            d = x > 0 ? 1.0 : 0.0;
          } else {
            const double s = std::sqrt(2.0 / M_PI);
            double t = std::tanh(s * (x + 0.044715 * x * x * x));
            d = 0.5 * (1 + t) +
                0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x);
          }
          want[i] = float(plain[i] * d);
        }
        strata_rt_gemm_dact(ctx, 0, m, n, k, a.data(), F32, transA, b.data(),
                            F32, transB, c.data(), F32, aux.data(), F32, act);
        expectNear(c, want, 1e-5f);
      }
      // bgrad: the product, and op(A)'s row sums or op(B)'s column sums.
      for (int64_t operand : {0, 1}) {
        std::vector<float> c(m * n), bgrad(operand == 0 ? m : n, -1.0f);
        std::vector<float> want(bgrad.size(), 0.0f);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p) {
              if (operand == 0 && j == 0)
                want[i] += transA ? a[p * m + i] : a[i * k + p];
              if (operand == 1 && i == 0)
                want[j] += transB ? b[j * k + p] : b[p * n + j];
            }
        strata_rt_gemm_bgrad(ctx, 0, m, n, k, a.data(), F32, transA, b.data(),
                             F32, transB, c.data(), F32, bgrad.data(), F32,
                             operand);
        expectNear(c, plain, 1e-5f);
        expectNear(bgrad, want, 1e-5f);
      }
    }
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  float x = 0;
  strata_rt_gemm_bgrad(ctx, 3, 1, 1, 1, &x, F32, 0, &x, F32, 0, &x, F32, &x,
                       F32, 2);
  ASSERT_NE(strata_rt_error(ctx, nullptr), nullptr);
  EXPECT_NE(std::string(strata_rt_error(ctx, nullptr)).find("operand 2"),
            std::string::npos);
}

/// The variant of kernel `name` that strata_rt_symbols() hands the JIT on
/// this processor (the widest build it runs: AVX-512 or AVX2); the tests
/// call the baseline build by name.
template <typename Fn> Fn dispatchedKernel(const char *name) {
  size_t count = 0;
  const StrataRtSymbol *symbols = strata_rt_symbols(&count);
  for (size_t i = 0; i < count; ++i)
    if (std::string(symbols[i].name) == name)
      return reinterpret_cast<Fn>(symbols[i].address);
  return nullptr;
}

TEST(RuntimeTest, BinaryBroadcasts) {
  Context ctx;
  // [2,3,4] - [3,1]: strides of b over the output are {0, 1, 0}.
  auto a = iota(24), b = iota(3, 0.5f);
  std::vector<float> out(24);
  int64_t desc[] = {2, 3, 4, 12, 4, 1, 0, 1, 0};
  strata_rt_binary(ctx, 0, STRATA_RT_SUB, out.data(), F32, a.data(), F32,
                   b.data(), F32, 3, desc);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t l = 0; l < 4; ++l)
        EXPECT_EQ(out[i * 12 + j * 4 + l], a[i * 12 + j * 4 + l] - b[j]);
  // The other way round, [3,1] - [2,3,4] (one value of A per row), in the
  // baseline build and the one the JIT calls.
  int64_t swapped[] = {2, 3, 4, 0, 1, 0, 12, 4, 1};
  auto dispatched =
      dispatchedKernel<decltype(&strata_rt_binary)>("strata_rt_binary");
  ASSERT_TRUE(dispatched);
  for (auto binary : {&strata_rt_binary, dispatched}) {
    binary(ctx, 0, STRATA_RT_SUB, out.data(), F32, b.data(), F32, a.data(), F32,
           3, swapped);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t l = 0; l < 4; ++l)
          EXPECT_EQ(out[i * 12 + j * 4 + l], b[j] - a[i * 12 + j * 4 + l]);
  }
  // int64 step counters add.
  int64_t x = 41, one = 1, r = 0;
  int64_t scalar[] = {0};
  strata_rt_binary(ctx, 0, STRATA_RT_ADD, &r, STRATA_RT_I64, &x, STRATA_RT_I64,
                   &one, STRATA_RT_I64, 0, scalar);
  EXPECT_EQ(r, 42);
}

TEST(RuntimeTest, ReduceAndStridedCopy) {
  Context ctx;
  auto x = iota(24);
  // Sum [2,3,4] over dims 0 and 2 -> [3], scaled (a mean).
  std::vector<float> out(3);
  int64_t desc[] = {2, 3, 4, 0, 1, 0};
  strata_rt_reduce(ctx, 0, out.data(), F32, x.data(), F32, 3, desc, 1.0 / 8);
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t l = 0; l < 4; ++l)
        s += x[i * 12 + j * 4 + l];
    EXPECT_NEAR(out[j], s / 8, 1e-6);
  }
  // Transpose [2,3,4] by (2,0,1): output [4,2,3], input strides {1,12,4}.
  std::vector<float> t(24);
  int64_t tdesc[] = {4, 2, 3, 1, 12, 4, 0};
  strata_rt_strided_copy(ctx, 0, t.data(), x.data(), F32, 3, tdesc);
  for (int64_t l = 0; l < 4; ++l)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(t[l * 6 + i * 3 + j], x[i * 12 + j * 4 + l]);
  // Slice rows 1..2 of [3,4] (base offset 4).
  std::vector<float> s(8);
  int64_t sdesc[] = {2, 4, 4, 1, 4};
  strata_rt_strided_copy(ctx, 0, s.data(), x.data(), F32, 2, sdesc);
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(s[i], x[4 + i]);
  // Broadcast [3] along a new last dimension of 5 (stride 0; a reduction's
  // gradient), from offset 2, in both builds.
  auto copy = dispatchedKernel<decltype(&strata_rt_strided_copy)>(
      "strata_rt_strided_copy");
  ASSERT_TRUE(copy);
  for (auto stridedCopy : {&strata_rt_strided_copy, copy}) {
    std::vector<float> b(15);
    int64_t bdesc[] = {3, 5, 1, 0, 2};
    stridedCopy(ctx, 0, b.data(), x.data(), F32, 2, bdesc);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j)
        EXPECT_EQ(b[i * 5 + j], x[2 + i]);
  }
}

TEST(RuntimeTest, CopyRowsConcatenates) {
  Context ctx;
  // [2,3] and [2,2] side by side -> [2,5]: rows of 3 at 0, rows of 2 at 3.
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10}, out(10);
  strata_rt_copy_rows(ctx, 0, out.data(), a.data(), F32, 2, 3, 5, 0);
  strata_rt_copy_rows(ctx, 0, out.data(), b.data(), F32, 2, 2, 5, 3);
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 7, 8, 4, 5, 6, 9, 10}));
}

TEST(RuntimeTest, SiluRsqrtTanh) {
  Context ctx;
  std::vector<float> x = {-3.0f, -0.5f, 0.25f, 2.0f}, y(4), dy = {1, 2, 3, 4},
                     dx(4);
  strata_rt_unary(ctx, 0, STRATA_RT_ACT_SILU, y.data(), F32, x.data(), F32, 4,
                  0.0);
  strata_rt_act_grad(ctx, 0, STRATA_RT_ACT_SILU, dx.data(), F32, x.data(), F32,
                     dy.data(), F32, 4);
  for (int i = 0; i < 4; ++i) {
    double s = 1 / (1 + std::exp(-double(x[i])));
    EXPECT_NEAR(y[i], x[i] * s, 1e-6);
    EXPECT_NEAR(dx[i], dy[i] * s * (1 + x[i] * (1 - s)), 1e-5);
  }
  strata_rt_unary(ctx, 0, STRATA_RT_UNARY_TANH, y.data(), F32, x.data(), F32, 4,
                  0.0);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y[i], std::tanh(double(x[i])), 1e-6);
  std::vector<float> p = {0.25f, 4.0f, 1e-6f, 9.0f};
  strata_rt_unary(ctx, 0, STRATA_RT_UNARY_RSQRT, y.data(), F32, p.data(), F32,
                  4, 0.0);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y[i], 1 / std::sqrt(double(p[i])), 1e-6 / std::sqrt(p[i]));
}

/// The activations and their gradients against their definitions in double
/// over [-12, 12], in the baseline build and in the one the JIT calls
/// (vector loops): GELU with erf keeps its relative precision on the left
/// tail (where 1 + erf(x) would lose it all; it loses some to the rounding
/// of x^2 there), tanh near 0; at f32's ends SiLU and the GELU's gradient
/// are 0 (not what a clamped exp would give).
TEST(RuntimeTest, ActivationsFollowTheirDefinitionsEverywhere) {
  Context ctx;
  const int64_t n = 1 << 16;
  std::vector<float> x(n), dy(n, 1.0f), y(n), dx(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = -12.0f + 24.0f * float(i) / float(n);
  auto unary = dispatchedKernel<decltype(&strata_rt_unary)>("strata_rt_unary");
  auto actGrad =
      dispatchedKernel<decltype(&strata_rt_act_grad)>("strata_rt_act_grad");
  ASSERT_TRUE(unary && actGrad);
  auto phi = [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); };
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  struct Case {
    int64_t op;
    std::function<double(double)> f, df;
    // Relative error bounds of f (where it is a normal float) and of f'
    // left of -3 (none: 0).
    double relative, gradRelative;
  } cases[] = {
      {STRATA_RT_ACT_GELU_ERF, [&](double v) { return v * phi(v); },
       [&](double v) {
         return phi(v) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
       },
       1.5e-5, 1e-5},
      {STRATA_RT_ACT_SILU, [&](double v) { return v * sigmoid(v); },
       [&](double v) { return sigmoid(v) * (1 + v * (1 - sigmoid(v))); }, 5e-7,
       0},
      {STRATA_RT_UNARY_TANH, [](double v) { return std::tanh(v); }, nullptr,
       5e-7, 0},
  };
  for (bool vector : {false, true})
    for (const Case &c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << "op " << c.op << (vector ? " dispatched" : " baseline"));
      (vector ? unary : strata_rt_unary)(ctx, 0, c.op, y.data(), F32, x.data(),
                                         F32, n, 0.0);
      if (c.df)
        (vector ? actGrad : strata_rt_act_grad)(
            ctx, 0, c.op, dx.data(), F32, x.data(), F32, dy.data(), F32, n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = c.f(x[i]),
                     scale = std::max(1.0, double(std::abs(x[i])));
        if (std::abs(want) > 1e-37)
          ASSERT_LE(std::abs(y[i] - want), c.relative * std::abs(want)) << x[i];
        // Absolute error at the float rounding of values near 1 (a few
        // units in the last place of |x| for GELU and SiLU on the right).
        ASSERT_LE(std::abs(y[i] - want), 3e-7 * scale) << x[i];
        if (!c.df)
          continue;
        const double dwant = c.df(x[i]);
        ASSERT_NEAR(dx[i], dwant, 5e-7 * scale) << x[i];
        if (c.gradRelative && x[i] < -3.0f && std::abs(dwant) > 1e-37)
          ASSERT_LE(std::abs(dx[i] - dwant), c.gradRelative * std::abs(dwant))
              << x[i];
      }
    }
  // Past f32's range.
  std::vector<float> ends = {-3e38f, -1e38f, 1e38f, 3e38f}, out(4), grad(4);
  std::vector<float> ones(4, 1.0f);
  for (bool vector : {false, true}) {
    (vector ? unary : strata_rt_unary)(ctx, 0, STRATA_RT_ACT_SILU, out.data(),
                                       F32, ends.data(), F32, 4, 0.0);
    (vector ? actGrad : strata_rt_act_grad)(ctx, 0, STRATA_RT_ACT_GELU_ERF,
                                            grad.data(), F32, ends.data(), F32,
                                            ones.data(), F32, 4);
    EXPECT_EQ(out, (std::vector<float>{-0.0f, -0.0f, 1e38f, 3e38f}));
    EXPECT_EQ(grad, (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f}));
  }
}

// The CPU runtime's scratch (widened bf16/f16 GEMM operands and gradients,
// attention blocks) starts on a cache line: a large std::vector's data sits
// 16 bytes past a page boundary, where oneDNN ran products 30% slower.
TEST(RuntimeTest, ScratchIsCacheLineAligned) {
  for (size_t n : {size_t(1), size_t(1000), size_t(1) << 22}) {
    strata::cpu::Scratch scratch(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(scratch.data()) % 64, 0u) << n;
    scratch.resize(3 * n + 5);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(scratch.data()) % 64, 0u) << n;
  }
}

TEST(RuntimeTest, IsaNamesTheDispatchedBuild) {
  std::string isa = strata_rt_isa();
  const char *asked = std::getenv("STRATA_CPU_ISA");
  if (asked && std::string(asked) == "baseline")
    EXPECT_EQ(isa, "baseline");
  else if (asked && std::string(asked) == "avx2" &&
           __builtin_cpu_supports("avx2"))
    EXPECT_EQ(isa, "avx2");
  else
    EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "baseline") << isa;
}

/// The integer form of the dropout test (vector loops) agrees with the
/// float one on every word near each probability's threshold, and on
/// words spread over the whole range.
TEST(RuntimeTest, DropoutThresholdIsTheFloatTest) {
  for (double prob :
       {0.0, 1e-9, 0.1, 0.2, 0.25, 1.0 / 3.0, 0.5, 0.9, 0.999, 0.99999999}) {
    SCOPED_TRACE(prob);
    uint32_t t = strata::rng::dropoutKeepThreshold(prob);
    auto check = [&](uint32_t word) {
      ASSERT_EQ(strata::rng::dropoutKeepWord(word, prob), (word >> 8) >= t)
          << word;
    };
    for (int64_t top = int64_t(t) - 3; top <= int64_t(t) + 3; ++top)
      if (top >= 0 && top < (1 << 24))
        for (uint32_t low : {0u, 1u, 255u})
          check(uint32_t(top) << 8 | low);
    for (uint32_t word = 0; word < 0xffffff00u; word += 0x01000193u)
      check(word);
    check(0xffffffffu);
  }
}

TEST(RuntimeTest, DropoutUsesTheGlobalMask) {
  // Both kernel variants: the baseline one linked here by name, and the one
  // strata_rt_symbols() hands the JIT on this processor (the vector builds
  // draw eight Philox counters per AVX2 vector). Shard 1 of 2, micro-batch 1 of
  // 2: elements start at (1*2+1)*n, which is not a multiple of 4 for odd n; the
  // longest n spans several of the kernel's parallel chunks.
  using DropoutFn = decltype(&strata_rt_dropout);
  DropoutFn dispatched = dispatchedKernel<DropoutFn>("strata_rt_dropout");
  ASSERT_NE(dispatched, nullptr);
  for (DropoutFn dropout : {&strata_rt_dropout, dispatched}) {
    for (int64_t n : {1, 7, 1000, 1001, 20003}) {
      Context ctx(/*threads=*/2, /*shard=*/1);
      auto x = iota(n, 0.01f, 1.0f);
      std::vector<float> y(n), r(n, 0.5f), yr(n);
      dropout(ctx, 0, y.data(), F32, x.data(), F32, nullptr, F32, n,
              /*key=*/9, 2, 1, 0.25);
      dropout(ctx, 0, yr.data(), F32, x.data(), F32, r.data(), F32, n, 9, 2, 1,
              0.25);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        bool keep = strata::rng::dropoutKeep(7, 9, 3 * n + i, 0.25);
        kept += keep;
        ASSERT_EQ(y[i], keep ? x[i] * (1.0f / 0.75f) : 0.0f)
            << "n " << n << " element " << i;
        ASSERT_EQ(yr[i], y[i] + 0.5f);
      }
      if (n >= 1000) {
        EXPECT_NEAR(double(kept) / n, 0.75, 0.05);
      }
    }
  }
}

// RMS norm and its gradients against their definitions in double, in the
// baseline and the dispatched builds, on rows that are no multiple of a
// vector.
TEST(RuntimeTest, RmsNormFollowsItsDefinition) {
  const int64_t rows = 37, n = 300;
  const double eps = 1e-6;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> x(rows * n), g(n), dy(rows * n);
  for (float *v : {x.data(), dy.data()})
    for (int64_t i = 0; i < rows * n; ++i)
      v[i] = uniform(gen);
  for (float &v : g)
    v = 1.0f + 0.2f * uniform(gen);
  std::vector<double> yRef(rows * n), dxRef(rows * n), dgRef(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = &x[r * n], *dyr = &dy[r * n];
    double squares = 0.0, dot = 0.0;
    for (int64_t j = 0; j < n; ++j)
      squares += double(xr[j]) * xr[j];
    const double rstd = 1.0 / std::sqrt(squares / n + eps);
    for (int64_t j = 0; j < n; ++j)
      dot += double(dyr[j]) * g[j] * xr[j] * rstd;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = xr[j] * rstd;
      yRef[r * n + j] = xhat * g[j];
      dxRef[r * n + j] = rstd * (double(dyr[j]) * g[j] - xhat * dot / n);
      dgRef[j] += double(dyr[j]) * xhat;
    }
  }
  auto expectNear = [](const std::vector<float> &got,
                       const std::vector<double> &want, double tolerance,
                       const char *what) {
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i])))
          << what << " element " << i;
  };
  using Forward = decltype(&strata_rt_rms_norm);
  using Backward = decltype(&strata_rt_rms_norm_grad);
  const std::pair<Forward, Backward> builds[] = {
      {&strata_rt_rms_norm, &strata_rt_rms_norm_grad},
      {dispatchedKernel<Forward>("strata_rt_rms_norm"),
       dispatchedKernel<Backward>("strata_rt_rms_norm_grad")}};
  for (auto [forward, backward] : builds) {
    ASSERT_NE(forward, nullptr);
    ASSERT_NE(backward, nullptr);
    Context ctx(/*threads=*/2);
    std::vector<float> y(rows * n), dx(rows * n), dg(n);
    forward(ctx, 0, y.data(), F32, x.data(), F32, g.data(), F32, rows, n, eps);
    backward(ctx, 1, dx.data(), F32, dg.data(), F32, x.data(), F32, g.data(),
             F32, dy.data(), F32, rows, n, eps);
    ASSERT_EQ(strata_rt_error(ctx, nullptr), nullptr);
    expectNear(y, yRef, 1e-6, "y");
    expectNear(dx, dxRef, 1e-5, "dx");
    expectNear(dg, dgRef, 1e-5, "dgamma");
  }
}

TEST(RuntimeTest, ResultsDoNotDependOnThreads) {
  const int64_t rows = 300, n = 256;
  auto x = iota(rows * n), g = iota(n, 0.1f, 1.0f), dy = iota(rows * n, 0.3f);
  std::vector<float> out[2];
  for (int threads : {1, 2}) {
    Context ctx(threads);
    std::vector<float> dx(rows * n), dg(n), db(n), norm(1);
    strata_rt_layer_norm_grad(ctx, 0, dx.data(), F32, dg.data(), F32,
                              db.data(), F32, x.data(), F32, g.data(), F32,
                              dy.data(), F32, rows, n, 1e-5);
    const void *tensors[] = {dx.data(), dg.data()};
    int64_t types[] = {F32, F32}, sizes[] = {rows * n, n};
    strata_rt_global_norm(ctx, 0, norm.data(), F32, 2, tensors, types, sizes);
    out[threads - 1] = dx;
    out[threads - 1].insert(out[threads - 1].end(), dg.begin(), dg.end());
    out[threads - 1].push_back(norm[0]);
  }
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(),
                        out[0].size() * sizeof(float)),
            0);
}

TEST(RuntimeTest, FailuresAreRecordedWithTheirSite) {
  Context ctx;
  float table[4 * 2] = {0}, out[3 * 2];
  int32_t ids[] = {0, 7, 1};
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  strata_rt_embedding(ctx, /*site=*/12, out, F32, table, F32, ids,
                      STRATA_RT_I32, 3, 4, 2);
  int64_t site = -1;
  const char *message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(std::string(message), "id 7 outside [0, 4) (position 1)");
  EXPECT_EQ(site, 12);
  strata_rt_clear_error(ctx);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  // A collective without the host's collectives.
  float data[2] = {1, 2};
  int64_t group[] = {1, 2, 0, 1};
  strata_rt_collective(ctx, 3, STRATA_RT_ALL_REDUCE, data, data, F32,
                       2, 0, 0, group);
  message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 3);
  EXPECT_EQ(std::string(message), "all_reduce needs several ranks");
}

TEST(RuntimeTest, GroupsOfUpdatesPairAndDoNotNest) {
  Context ctx;
  auto expectError = [&](int64_t wantSite, const std::string &want) {
    int64_t site = -1;
    const char *message = strata_rt_error(ctx, &site);
    ASSERT_NE(message, nullptr) << want;
    EXPECT_EQ(std::string(message), want);
    EXPECT_EQ(site, wantSite);
    strata_rt_clear_error(ctx);
  };
  // A group's updates run at its end, last first. Here the second reads
  // what the first writes (which the lowering never groups), so the order
  // shows: the second reads q before the first writes it.
  float p[2] = {1, 2}, q[2] = {0, 0}, r[2] = {0, 0}, g[2] = {1, 1};
  float lr = 0.5f;
  strata_rt_updates_begin(ctx, 4);
  strata_rt_sgd(ctx, 4, q, F32, p, F32, g, F32, &lr, F32, 2, 0.0, nullptr, F32,
                nullptr, F32, nullptr, F32);
  strata_rt_sgd(ctx, 5, r, F32, q, F32, g, F32, &lr, F32, 2, 0.0, nullptr, F32,
                nullptr, F32, nullptr, F32);
  EXPECT_EQ(q[0], 0.0f); // not run yet
  strata_rt_updates_end(ctx, 4);
  EXPECT_EQ(q[0], 0.5f);
  EXPECT_EQ(q[1], 1.5f);
  EXPECT_EQ(r[0], -0.5f);
  EXPECT_EQ(r[1], -0.5f);
  strata_rt_step_end(ctx);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  // A group left open at the step's end still runs.
  strata_rt_updates_begin(ctx, 4);
  strata_rt_sgd(ctx, 4, q, F32, p, F32, g, F32, &lr, F32, 2, 0.0, nullptr, F32,
                nullptr, F32, nullptr, F32);
  q[0] = 7.0f;
  strata_rt_step_end(ctx);
  EXPECT_EQ(q[0], 0.5f);
  expectError(4, "the group of updates begun here was never ended "
                 "(strata_rt_updates_end)");
  // Groups do not nest, and end with their first update's site.
  strata_rt_updates_begin(ctx, 4);
  strata_rt_updates_begin(ctx, 6);
  expectError(6, "strata_rt_updates_begin: the group of updates begun at "
                 "site 4 is still open (groups do not nest)");
  strata_rt_updates_end(ctx, 6);
  expectError(6, "strata_rt_updates_end: the open group of updates was "
                 "begun at site 4");
  strata_rt_updates_end(ctx, 4);
  expectError(4, "strata_rt_updates_end: no group of updates is open");
  // A step ends with no group open.
  strata_rt_updates_begin(ctx, 9);
  strata_rt_step_end(ctx);
  expectError(9, "the group of updates begun here was never ended "
                 "(strata_rt_updates_end)");
  strata_rt_updates_begin(ctx, 9); // (closed by the step's end)
  strata_rt_updates_end(ctx, 9);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

TEST(RuntimeTest, UnknownCodesFailAtTheirSite) {
  Context ctx;
  float a[2] = {1, 2}, b[2] = {3, 4}, out[2] = {5, 6};
  int64_t desc[] = {2, 1, 1, 1};
  auto expectFailure = [&](int64_t site, const std::string &want) {
    int64_t at = -1;
    const char *message = strata_rt_error(ctx, &at);
    ASSERT_NE(message, nullptr);
    EXPECT_EQ(std::string(message), want);
    EXPECT_EQ(at, site);
    // Nothing was written.
    EXPECT_EQ(out[0], 5.0f);
    EXPECT_EQ(out[1], 6.0f);
    strata_rt_clear_error(ctx);
  };
  strata_rt_binary(ctx, 1, /*op=*/9, out, F32, a, F32, b, F32, 1, desc);
  expectFailure(1, "unknown binary op code 9");
  strata_rt_binary(ctx, 2, STRATA_RT_ADD, out, 7, a, 7, b, 7, 1, desc);
  expectFailure(2, "strata_rt_binary: unknown element type code 7 are not "
                   "implemented by the CPU runtime");
  strata_rt_unary(ctx, 3, /*op=*/10, out, F32, a, F32, 2, 0.0);
  expectFailure(3, "unknown unary op code 10");
  strata_rt_act_grad(ctx, 4, /*act=*/11, out, F32, a, F32, b, F32, 2);
  expectFailure(4, "unknown activation code 11");
  strata_rt_gemm(ctx, 5, 1, 1, 2, 1, a, F32, 0, 0, b, F32, 0, 0, out, F32,
                 nullptr, F32, /*act=*/12, 0);
  expectFailure(5, "unknown GEMM epilogue activation code 12");
  // Typed tensors: a type the CPU kernels do not implement, and mixed
  // types where a kernel does not convert.
  strata_rt_gemm(ctx, 6, 1, 1, 2, 1, a, STRATA_RT_BF16, 0, 0, b, F32, 0, 0,
                 out, F32, nullptr, F32, STRATA_RT_ACT_NONE, 0);
  expectFailure(6, "strata_rt_gemm: mixes bf16 and f32 tensors");
  strata_rt_unary(ctx, 7, STRATA_RT_ACT_RELU, out, STRATA_RT_I8, a,
                  STRATA_RT_I8, 2, 0.0);
  expectFailure(7, "strata_rt_unary: i8 tensors are not implemented by the "
                   "CPU runtime");
  strata_rt_sgd(ctx, 11, out, STRATA_RT_BF16, a, STRATA_RT_BF16, b,
                STRATA_RT_BF16, a, F32, 2, 0.0, nullptr, F32, nullptr, F32,
                nullptr, F32);
  expectFailure(11, "strata_rt_sgd: bf16 tensors are not implemented by the "
                    "CPU runtime");
  strata_rt_binary(ctx, 8, STRATA_RT_ADD, out, F32, a, STRATA_RT_I32, b, F32,
                   1, desc);
  expectFailure(8, "strata_rt_binary: mixes f32 and i32 tensors");
  int64_t step = 1;
  strata_rt_lr_schedule(ctx, 9, out, F32, &step, STRATA_RT_I32,
                        STRATA_RT_LR_CONSTANT, 0.1, 0, 0, 0);
  expectFailure(9, "strata_rt_lr_schedule: the step counter is i64, not i32");
  int32_t ids[1] = {0};
  strata_rt_embedding(ctx, 10, out, F32, a, F32, ids, F32, 1, 1, 2);
  expectFailure(10, "strata_rt_embedding: ids are i32 or i64, not f32");
  int32_t label[1] = {1};
  strata_rt_cross_entropy(ctx, 12, out, STRATA_RT_BF16, a, STRATA_RT_BF16,
                          label, STRATA_RT_I32, 1, 2, 2);
  expectFailure(12, "strata_rt_cross_entropy: the loss and its gradient are "
                    "f32, not bf16");
  strata_rt_cross_entropy(ctx, 13, out, F32, a, F32, label, STRATA_RT_I32, 1, 3,
                          2);
  expectFailure(13, "strata_rt_cross_entropy: 3 classes in rows of 2 elements "
                    "(1 <= classes <= width)");
}

/// A cross-entropy's loss and the bytes of its gradient, over rows of
/// `width` elements of `type` holding `vocab` classes, one row a label
/// (i32). The gradient's buffer starts as 0x7f bytes, so that an element
/// the kernel does not write shows.
struct CrossEntropyRun {
  float loss = 0;
  std::vector<char> grad;
};
CrossEntropyRun crossEntropy(StrataRtContext *ctx, const void *logits,
                             int64_t type, const std::vector<int32_t> &labels,
                             int64_t vocab, int64_t width, float dloss) {
  const auto rows = int64_t(labels.size());
  CrossEntropyRun run;
  run.grad.assign(rows * width * strata_rt_element_bytes(type), char(0x7f));
  strata_rt_cross_entropy(ctx, 1, &run.loss, F32, logits, type, labels.data(),
                          STRATA_RT_I32, rows, vocab, width);
  strata_rt_cross_entropy_grad(ctx, 2, run.grad.data(), type, logits, type,
                               labels.data(), STRATA_RT_I32, &dloss, F32, rows,
                               vocab, width);
  return run;
}

TEST(RuntimeTest, CrossEntropyOfLowLogitsIsTheF32KernelOnTheirValues) {
  // bf16 and f16 logits give the loss of the f32 kernel on their widened
  // values, and the gradient it gives rounded: a cast of the logits to f32
  // before the kernel (what mixed precision would insert) changes nothing.
  // Rows of 1001 elements start at every alignment.
  Context ctx;
  const int64_t rows = 7, vocab = 1001;
  std::vector<int32_t> labels = {0, 1000, 17, 500, 3, 999, 250};
  for (int64_t low : {int64_t(STRATA_RT_BF16), int64_t(STRATA_RT_F16)}) {
    SCOPED_TRACE(strata_rt_element_name(low));
    std::vector<float> wide = iota(rows * vocab, 0.013f, -3.0f);
    std::vector<uint16_t> logits(wide.size());
    strata_rt_cast(ctx, 0, logits.data(), low, wide.data(), F32, wide.size());
    strata_rt_cast(ctx, 0, wide.data(), F32, logits.data(), low, wide.size());
    const CrossEntropyRun lowRun =
        crossEntropy(ctx, logits.data(), low, labels, vocab, vocab, 3.0f);
    const CrossEntropyRun wideRun =
        crossEntropy(ctx, wide.data(), F32, labels, vocab, vocab, 3.0f);
    EXPECT_EQ(lowRun.loss, wideRun.loss);
    std::vector<char> want(lowRun.grad.size());
    strata_rt_cast(ctx, 0, want.data(), low, wideRun.grad.data(), F32,
                   wide.size());
    EXPECT_EQ(lowRun.grad, want);
    EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  }
}

TEST(RuntimeTest, CrossEntropyOverPaddedRowsIsTheUnpaddedOne) {
  // Rows of 1008 elements holding 1001 classes (a padded LM head's logits):
  // the padding, NaN here, is never read; the loss and the classes'
  // gradient equal the unpadded rows' to the bit, the padding's gradient
  // is zero. Written over the logits (the memory plan may give the
  // gradient their buffer), the gradient has the same bits.
  Context ctx;
  const int64_t rows = 5, vocab = 1001, width = 1008;
  std::vector<int32_t> labels = {0, 1000, 17, 500, 3};
  const std::vector<float> dense = iota(rows * vocab, 0.011f, -4.0f);
  for (int64_t type : {int64_t(F32), int64_t(STRATA_RT_BF16)}) {
    SCOPED_TRACE(strata_rt_element_name(type));
    const size_t size = strata_rt_element_bytes(type);
    std::vector<char> logits(rows * vocab * size), padded(rows * width * size);
    strata_rt_cast(ctx, 0, logits.data(), type, dense.data(), F32,
                   dense.size());
    const std::vector<float> nan(width - vocab, NAN);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&padded[r * width * size], &logits[r * vocab * size],
                  vocab * size);
      strata_rt_cast(ctx, 0, &padded[(r * width + vocab) * size], type,
                     nan.data(), F32, width - vocab);
    }
    const CrossEntropyRun unpadded =
        crossEntropy(ctx, logits.data(), type, labels, vocab, vocab, 2.0f);
    const CrossEntropyRun run =
        crossEntropy(ctx, padded.data(), type, labels, vocab, width, 2.0f);
    EXPECT_EQ(unpadded.loss, run.loss);
    EXPECT_TRUE(std::isfinite(run.loss));
    const std::vector<char> zeros((width - vocab) * size, 0);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(std::memcmp(&run.grad[r * width * size],
                            &unpadded.grad[r * vocab * size], vocab * size),
                0)
          << "row " << r;
      EXPECT_EQ(std::memcmp(&run.grad[(r * width + vocab) * size], zeros.data(),
                            zeros.size()),
                0)
          << "row " << r << "'s padding";
    }
    const float dloss = 2.0f;
    strata_rt_cross_entropy_grad(ctx, 2, padded.data(), type, padded.data(),
                                 type, labels.data(), STRATA_RT_I32, &dloss,
                                 F32, rows, vocab, width);
    EXPECT_EQ(padded, run.grad) << "in place";
    EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  }
}

TEST(RuntimeTest, OptionsAndAbiVersion) {
  StrataRtOptions options;
  strata_rt_default_options(&options);
  EXPECT_EQ(options.abiVersion, STRATA_RT_ABI_VERSION);
  EXPECT_EQ(strata_rt_abi_version(), STRATA_RT_ABI_VERSION);
  char message[256];
  auto refused = [&](StrataRtOptions o) {
    message[0] = 0;
    EXPECT_EQ(strata_rt_create(&o, message, sizeof(message)), nullptr);
    return std::string(message);
  };
  StrataRtOptions old = options;
  old.abiVersion = 1;
  EXPECT_EQ(refused(old), "the caller was built for runtime ABI 1; this "
                          "runtime implements ABI " +
                              std::to_string(STRATA_RT_ABI_VERSION));
  StrataRtOptions device = options;
  device.device = 3;
  EXPECT_EQ(refused(device),
            "the CPU runtime has one device (0); device 3 was asked for");
  StrataRtOptions shortStruct = options;
  shortStruct.size = 16;
  EXPECT_NE(refused(shortStruct).find("too short"), std::string::npos);
  EXPECT_EQ(strata_rt_create(nullptr, nullptr, 0), nullptr);

  // A step lowered for another ABI does not run.
  Context ctx;
  EXPECT_EQ(strata_rt_step_begin(ctx, STRATA_RT_ABI_VERSION), 0);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  EXPECT_NE(strata_rt_step_begin(ctx, 1), 0);
  const char *error = strata_rt_error(ctx, nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("lowered for runtime ABI 1"),
            std::string::npos);
}

// A host of two ranks whose peer holds the same data as this rank (rank 0),
// and broadcasts 42s from rank 1. With `async`, the work happens at the wait.
struct FakeHost {
  bool async = false;
  std::vector<StrataRtCollective> calls;
  std::vector<bool> blocking;
};
void runFake(const StrataRtCollective &c) {
  const float *send = static_cast<const float *>(c.send);
  float *recv = static_cast<float *>(c.recv);
  switch (c.op) {
  case STRATA_RT_ALL_REDUCE:
    for (int64_t i = 0; i < c.count; ++i)
      recv[i] = 2 * send[i];
    break;
  case STRATA_RT_BROADCAST:
    if (c.root == 1)
      std::fill(recv, recv + c.count, 42.0f);
    break;
  case STRATA_RT_REDUCE_SCATTER: // this rank's slice is the first
    for (int64_t i = 0; i < c.count; ++i)
      recv[i] = 2 * send[i];
    break;
  case STRATA_RT_ALL_GATHER:
    for (int64_t r = 0; r < c.numRanks; ++r)
      std::copy(send, send + c.count, recv + r * c.count);
    break;
  }
}
int fakeCollective(void *user, const StrataRtCollective *c, void **request,
                   char *error, size_t errorSize) {
  auto *host = static_cast<FakeHost *>(user);
  host->calls.push_back(*c);
  host->blocking.push_back(request == nullptr);
  if (request)
    *request = new StrataRtCollective(*c);
  else
    runFake(*c);
  return 0;
}
int fakeWait(void *user, void *request, char *error, size_t errorSize) {
  auto *c = static_cast<StrataRtCollective *>(request);
  runFake(*c);
  delete c;
  return 0;
}

TEST(RuntimeTest, CollectivesStartAndCompleteAtTheWait) {
  Context ctx;
  FakeHost host;
  strata_rt_set_collectives(ctx, fakeCollective, fakeWait, &host);
  int64_t group[] = {1, 2, 0, 1};
  float in[4] = {1, 3, 5, 7}, out[4] = {0, 0, 0, 0};
  // all_reduce: in place on the output, completed at the wait.
  strata_rt_collective(ctx, /*site=*/5, STRATA_RT_ALL_REDUCE, out, in,
                       F32, 2, /*sum=*/0, 0, group);
  ASSERT_EQ(host.calls.size(), 1u);
  EXPECT_FALSE(host.blocking[0]);
  EXPECT_EQ(host.calls[0].send, host.calls[0].recv);
  EXPECT_EQ(out[0], 1.0f); // the input, not reduced yet
  strata_rt_wait(ctx, 5);
  EXPECT_EQ(out[0], 2.0f); // summed over the two ranks
  EXPECT_EQ(out[1], 6.0f);
  strata_rt_wait(ctx, 5); // nothing in flight: no effect
  EXPECT_EQ(out[1], 6.0f);
  // A step that ends with a collective in flight never waited for it.
  strata_rt_collective(ctx, 12, STRATA_RT_ALL_REDUCE, out, in, F32, 2, 0, 0,
                       group);
  strata_rt_step_end(ctx);
  int64_t unfinished = -1;
  const char *error = strata_rt_error(ctx, &unfinished);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "all_reduce was started but never waited for");
  EXPECT_EQ(unfinished, 12);
  strata_rt_wait(ctx, 12);
  strata_rt_clear_error(ctx);
  host.calls.clear();
  host.blocking.clear();
  // A mean divides the sum by the group's size when it completes.
  strata_rt_collective(ctx, 6, STRATA_RT_ALL_REDUCE, out, in, F32, 2,
                       /*mean=*/1, 0, group);
  strata_rt_wait(ctx, 6);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.0f);
  // reduce_scatter: 4 elements in, this rank's 2 out, averaged.
  float slice[2] = {0, 0};
  strata_rt_collective(ctx, 7, STRATA_RT_REDUCE_SCATTER, slice, in,
                       F32, 2, /*mean=*/1, 0, group);
  EXPECT_EQ(host.calls.back().count, 2);
  EXPECT_EQ(host.calls.back().send, in);
  strata_rt_wait(ctx, 7);
  EXPECT_EQ(slice[0], 1.0f);
  EXPECT_EQ(slice[1], 3.0f);
  // all_gather: 2 elements from each of the 2 ranks.
  float gathered[4] = {0, 0, 0, 0};
  strata_rt_collective(ctx, 8, STRATA_RT_ALL_GATHER, gathered, slice,
                       F32, 4, 0, 0, group);
  EXPECT_EQ(host.calls.back().count, 2);
  strata_rt_wait(ctx, 8);
  EXPECT_EQ(gathered[2], 1.0f);
  EXPECT_EQ(gathered[3], 3.0f);
  // broadcast from rank 1 of the list.
  strata_rt_collective(ctx, 9, STRATA_RT_BROADCAST, out, in, F32, 2,
                       0, /*root=*/1, group);
  strata_rt_wait(ctx, 9);
  EXPECT_EQ(out[0], 42.0f);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  // A root outside the list and a gather that does not divide: errors at
  // their sites, the host not called.
  size_t calls = host.calls.size();
  strata_rt_collective(ctx, 10, STRATA_RT_BROADCAST, out, in, F32, 2,
                       0, /*root=*/2, group);
  int64_t site = -1;
  const char *message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 10);
  EXPECT_EQ(std::string(message), "broadcast root 2 outside a group of 2");
  strata_rt_clear_error(ctx);
  strata_rt_collective(ctx, 11, STRATA_RT_ALL_GATHER, gathered, slice,
                       F32, 3, 0, 0, group);
  message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 11);
  EXPECT_EQ(host.calls.size(), calls);
}

TEST(RuntimeTest, CollectivesBlockWithoutTheHostsWait) {
  Context ctx;
  FakeHost host;
  strata_rt_set_collectives(ctx, fakeCollective, /*wait=*/nullptr, &host);
  int64_t group[] = {1, 2, 0, 1};
  float in[2] = {1, 3}, out[2] = {0, 0};
  strata_rt_collective(ctx, 5, STRATA_RT_ALL_REDUCE, out, in, F32, 2,
                       /*mean=*/1, 0, group);
  ASSERT_EQ(host.blocking.size(), 1u);
  EXPECT_TRUE(host.blocking[0]);
  EXPECT_EQ(out[0], 1.0f); // complete (and averaged) on return
  EXPECT_EQ(out[1], 3.0f);
  strata_rt_wait(ctx, 5); // nothing in flight
  EXPECT_EQ(out[1], 3.0f);
}

// A host whose wire is a queue: sends append, receives take the oldest
// message, as MPI's non-overtaking order between two ranks.
struct Wire {
  std::vector<std::vector<float>> messages;
  std::vector<int64_t> peers;
  /// strata_rt_active_site while the host's send ran.
  StrataRtContext *ctx = nullptr;
  std::vector<int64_t> activeSites;
};
int fakeSend(void *user, const void *data, int64_t count, int64_t dtype,
             const int64_t *ranks, int64_t numRanks, int64_t peer,
             char *error, size_t errorSize) {
  auto *wire = static_cast<Wire *>(user);
  const float *f = static_cast<const float *>(data);
  wire->messages.emplace_back(f, f + count);
  wire->peers.push_back(ranks[peer]);
  if (wire->ctx)
    wire->activeSites.push_back(strata_rt_active_site(wire->ctx));
  return 0;
}
int fakeRecv(void *user, void *data, int64_t count, int64_t dtype,
             const int64_t *ranks, int64_t numRanks, int64_t peer, char *error,
             size_t errorSize) {
  auto *wire = static_cast<Wire *>(user);
  if (wire->messages.empty() ||
      int64_t(wire->messages.front().size()) != count) {
    std::snprintf(error, errorSize, "no message of %lld elements",
                  (long long)count);
    return 1;
  }
  std::copy(wire->messages.front().begin(), wire->messages.front().end(),
            static_cast<float *>(data));
  wire->messages.erase(wire->messages.begin());
  return 0;
}

/// The rank lists of the host broadcasts strata_rt_connect makes.
int recordList(void *user, const StrataRtCollective *c, void **request,
               char *error, size_t errorSize) {
  EXPECT_EQ(c->op, STRATA_RT_BROADCAST);
  EXPECT_EQ(c->count, 1);
  EXPECT_EQ(request, nullptr); // completed where it starts
  static_cast<std::vector<std::vector<int64_t>> *>(user)->emplace_back(
      c->ranks, c->ranks + c->numRanks);
  return 0;
}
int noSend(void *, const void *, int64_t, int64_t, const int64_t *, int64_t,
           int64_t, char *, size_t) {
  ADD_FAILURE() << "strata_rt_connect sent a message";
  return 1;
}
int noRecv(void *, void *, int64_t, int64_t, const int64_t *, int64_t, int64_t,
           char *, size_t) {
  ADD_FAILURE() << "strata_rt_connect received a message";
  return 1;
}

TEST(RuntimeTest, ConnectMakesTheCommunicatorsInOneSortedOrder) {
  StrataRtOptions options;
  strata_rt_default_options(&options);
  options.rank = 1;
  StrataRtContext *ctx = strata_rt_create(&options, nullptr, 0);
  ASSERT_NE(ctx, nullptr);
  std::vector<std::vector<int64_t>> made;
  strata_rt_set_collectives(ctx, recordList, fakeWait, &made);
  strata_rt_set_point_to_point(ctx, noSend, noRecv, nullptr);
  // A collective over [[0, 2], [1, 3]], a send to peer 0 of [[3, 1, 0]]
  // and a collective over the world: rank 1's lists [1, 3], [3, 1, 0] and
  // [0, 1, 2, 3], made in sorted order whatever the plan's order.
  int64_t plan[] = {3,  -1, 2, 2, 0, 2, 2, 1, 3, // collective
                    0,  1,  3, 3, 1, 0,          // send to peer 0
                    -1, 1,  4, 0, 1, 2, 3};      // collective
  strata_rt_connect(ctx, 7, plan);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  std::vector<std::vector<int64_t>> sorted = {{0, 1, 2, 3}, {1, 3}, {3, 1, 0}};
  EXPECT_EQ(made, sorted);
  // Made once: the next step's call makes nothing.
  strata_rt_connect(ctx, 7, plan);
  EXPECT_EQ(made.size(), 3u);
  // A group without this rank, a peer that is this rank: refused at the site.
  int64_t missing[] = {1, -1, 1, 2, 0, 2};
  strata_rt_connect(ctx, 9, missing);
  int64_t site = -1;
  const char *error = strata_rt_error(ctx, &site);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error),
            "rank 1 is in no list of the collective's group");
  EXPECT_EQ(site, 9);
  strata_rt_clear_error(ctx);
  int64_t self[] = {1, 1, 1, 2, 0, 1};
  strata_rt_connect(ctx, 4, self);
  error = strata_rt_error(ctx, &site);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(std::string(error), "peer 1 is not another rank of a group of 2");
  EXPECT_EQ(made.size(), 3u);
  strata_rt_destroy(ctx);
}

TEST(RuntimeTest, LinksAreMadeInPairOrderOverTheSmallestList) {
  // Rank 2's transfers: to rank 0 through a 4-rank list and a 2-rank one,
  // from rank 3, and to rank 1 (the pipeline's list [1, 2]).
  using strata::rt::Connection;
  std::vector<Connection> connections = {{{0, 1, 2, 3}, 0, 0, 2},
                                         {{3, 2}, 0, 2, 3},
                                         {{0, 2}, 0, 0, 2},
                                         {{1, 2}, 0, 1, 2},
                                         {{5, 6}, -1}};
  std::vector<const Connection *> links = strata::rt::linksOf(connections);
  ASSERT_EQ(links.size(), 3u);
  // Pairs (0, 2), (1, 2), (2, 3) in order; (0, 2) over [0, 1, 2, 3], the
  // first of its two lists in sorted order, whichever came first.
  EXPECT_EQ(links[0]->ranks, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(links[1]->ranks, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(links[2]->ranks, (std::vector<int64_t>{3, 2}));
  std::swap(connections[0], connections[2]);
  EXPECT_EQ(strata::rt::linksOf(connections)[0]->ranks,
            (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(RuntimeTest, SendAndRecvGoThroughTheHost) {
  Context ctx;
  int64_t group[] = {2, 2, 0, 2, 2, 1, 3}; // lists [0, 2] and [1, 3]
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  // Without the host's functions: an error at the call site.
  strata_rt_send(ctx, /*site=*/4, a, F32, 2, /*peer=*/1, group);
  int64_t site = -1;
  const char *message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 4);
  EXPECT_NE(std::string(message).find("several ranks"), std::string::npos);
  strata_rt_clear_error(ctx);

  Wire wire;
  wire.ctx = ctx;
  strata_rt_set_point_to_point(ctx, fakeSend, fakeRecv, &wire);
  EXPECT_EQ(strata_rt_active_site(ctx), -1);
  strata_rt_send(ctx, 1, a, F32, 2, 1, group);
  strata_rt_send(ctx, 2, b, F32, 3, 1, group);
  // The host call in progress is known (for a stopped rank's report).
  EXPECT_EQ(wire.activeSites, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(strata_rt_active_site(ctx), -1);
  ASSERT_EQ(wire.peers.size(), 2u);
  EXPECT_EQ(wire.peers[0], 2); // peer 1 of rank 0's list [0, 2]
  float out2[2] = {0, 0}, out3[3] = {0, 0, 0};
  strata_rt_recv(ctx, 3, out2, F32, 2, 1, group);
  strata_rt_recv(ctx, 4, out3, F32, 3, 1, group);
  EXPECT_EQ(out2[1], 2.0f);
  EXPECT_EQ(out3[2], 5.0f);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  // The host's failure, and a peer that is this rank, name their site.
  strata_rt_recv(ctx, 8, out2, F32, 2, 1, group);
  message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 8);
  EXPECT_EQ(std::string(message), "no message of 2 elements");
  strata_rt_clear_error(ctx);
  strata_rt_send(ctx, 9, a, F32, 2, /*peer=*/0, group);
  message = strata_rt_error(ctx, &site);
  ASSERT_NE(message, nullptr);
  EXPECT_EQ(site, 9);
}

uint16_t bits16(float f, int64_t dtype, StrataRtContext *ctx) {
  uint16_t out;
  strata_rt_cast(ctx, 0, &out, dtype, &f, F32, 1);
  return out;
}

TEST(RuntimeTest, CastRoundsToNearestEven) {
  Context ctx;
  constexpr int64_t BF16 = STRATA_RT_BF16, F16 = STRATA_RT_F16;
  // bf16 keeps the upper 16 bits of an f32: 1 + 2^-8 lies halfway between
  // 1 and 1 + 2^-7 and rounds to the even 1; 1 + 3 * 2^-8 rounds up.
  EXPECT_EQ(bits16(1.0f, BF16, ctx), 0x3f80);
  EXPECT_EQ(bits16(1.0f + 0x1p-8f, BF16, ctx), 0x3f80);
  EXPECT_EQ(bits16(1.0f + 3 * 0x1p-8f, BF16, ctx), 0x3f82);
  EXPECT_EQ(bits16(-2.0f, BF16, ctx), 0xc000);
  EXPECT_EQ(bits16(INFINITY, BF16, ctx), 0x7f80);
  EXPECT_EQ(bits16(NAN, BF16, ctx) & 0x7f80, 0x7f80);
  EXPECT_NE(bits16(NAN, BF16, ctx) & 0x007f, 0);
  // The largest finite f32 rounds to infinity in bf16.
  EXPECT_EQ(bits16(3.4028235e38f, BF16, ctx), 0x7f80);
  // f16: 1, 1 + 2^-11 (a tie, to even), 65504 (the largest), 65520 and
  // beyond overflow, 2^-24 (the smallest subnormal).
  EXPECT_EQ(bits16(1.0f, F16, ctx), 0x3c00);
  EXPECT_EQ(bits16(1.0f + 0x1p-11f, F16, ctx), 0x3c00);
  EXPECT_EQ(bits16(65504.0f, F16, ctx), 0x7bff);
  EXPECT_EQ(bits16(65520.0f, F16, ctx), 0x7c00);
  EXPECT_EQ(bits16(0x1p-24f, F16, ctx), 0x0001);
  // Back to f32 exactly, and bf16 <-> f16 through f32.
  uint16_t h = 0x3c01; // 1 + 2^-10
  float f = 0;
  strata_rt_cast(ctx, 0, &f, F32, &h, F16, 1);
  EXPECT_EQ(f, 1.0f + 0x1p-10f);
  uint16_t b = 0;
  strata_rt_cast(ctx, 0, &b, BF16, &h, F16, 1);
  EXPECT_EQ(b, 0x3f80); // 1 + 2^-10 is not a bf16: rounds to 1
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

/// The vectorised bf16 rounding of the dispatched kernels (16 elements at a
/// time) rounds every value as the scalar one does: ties, NaNs (made
/// quiet), infinities, overflow, subnormals, signed zeros.
TEST(RuntimeTest, VectorisedCastsRoundAsTheScalarOnes) {
  Context ctx;
  auto cast = dispatchedKernel<decltype(&strata_rt_cast)>("strata_rt_cast");
  ASSERT_NE(cast, nullptr);
  std::vector<float> specials = {
      1.0f,     1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -1.0f - 0x1p-8f, -2.0f,
      0.0f,     -0.0f,          INFINITY,           -INFINITY,       NAN,
      -NAN,     3.4028235e38f,  0x1p-140f,          -0x1p-133f,      65520.0f,
      0x1p-24f, 0.1f,           -123.456f};
  // Three copies and a tail: whole vectors and the scalar remainder.
  std::vector<float> in;
  for (int copy = 0; copy < 3; ++copy)
    in.insert(in.end(), specials.begin(), specials.end());
  for (int64_t type : {STRATA_RT_BF16, STRATA_RT_F16}) {
    std::vector<uint16_t> vec(in.size()), one(in.size());
    cast(ctx, 0, vec.data(), type, in.data(), F32, int64_t(in.size()));
    for (size_t i = 0; i < in.size(); ++i)
      strata_rt_cast(ctx, 0, &one[i], type, &in[i], F32, 1);
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_EQ(vec[i], one[i]) << "type " << type << " value " << in[i];
  }
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

/// Each low-precision kernel computes in f32: its result is the f32
/// kernel's result on the same (rounded) inputs, rounded once.
TEST(RuntimeTest, LowPrecisionKernelsRoundTheF32Result) {
  Context ctx;
  for (int64_t low : {int64_t(STRATA_RT_BF16), int64_t(STRATA_RT_F16)}) {
    SCOPED_TRACE(strata_rt_element_name(low));
    const int64_t m = 6, n = 10, k = 8;
    std::vector<float> x = iota(m * k, 0.05f), w = iota(k * n, 0.03f, 0.1f),
                       bias = iota(n, 0.2f), y = iota(m * n, 0.07f, -0.2f);
    // Inputs rounded to the low type, and their exact f32 values.
    auto lower = [&](std::vector<float> &v) {
      std::vector<uint16_t> l(v.size());
      strata_rt_cast(ctx, 0, l.data(), low, v.data(), F32, v.size());
      strata_rt_cast(ctx, 0, v.data(), F32, l.data(), low, v.size());
      return l;
    };
    std::vector<uint16_t> lx = lower(x), lw = lower(w), lb = lower(bias),
                          ly = lower(y);
    std::vector<float> f(m * n);
    std::vector<uint16_t> l(m * n), want(m * n);
    auto expectRounded = [&](const char *what) {
      strata_rt_cast(ctx, 0, want.data(), low, f.data(), F32, f.size());
      EXPECT_EQ(l, want) << what;
      EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr) << what;
    };
    // GEMM + bias + GELU. Without bf16 dot products a bf16 or f16 product
    // is the f32 product of the widened values rounded (both on the packed
    // GEMM, or both on oneDNN's f32 primitive); oneDNN's own bf16 kernels
    // (with AVX512-BF16) sum in another order: within one bf16 step (2^-8).
    strata_rt_gemm(ctx, 1, 1, m, n, k, x.data(), F32, 0, 0, w.data(), F32, 0, 0,
                   f.data(), F32, bias.data(), F32, STRATA_RT_ACT_GELU_TANH, 0);
    strata_rt_gemm(ctx, 1, 1, m, n, k, lx.data(), low, 0, 0, lw.data(), low, 0,
                   0, l.data(), low, lb.data(), low, STRATA_RT_ACT_GELU_TANH,
                   0);
    if (low == STRATA_RT_F16) {
      expectRounded("gemm");
    } else {
      std::vector<float> got(m * n);
      strata_rt_cast(ctx, 0, got.data(), F32, l.data(), low, got.size());
      for (int64_t i = 0; i < m * n; ++i)
        EXPECT_NEAR(got[i], f[i], 0x1p-8f * std::fabs(f[i]) + 1e-6f)
            << "gemm " << i;
    }
    // GEMM + bias + GELU keeping the pre-activation: the activation reads
    // the unrounded f32 sum, aux gets it rounded (each rounded once, as the
    // reference and cuBLASLt's GELU_AUX epilogue; GELU of the rounded aux
    // differs in the last place for some of these elements).
    {
      std::vector<float> pre(m * n);
      std::vector<uint16_t> aux(m * n), wantAux(m * n);
      strata_rt_gemm_aux(ctx, 5, m, n, k, x.data(), F32, 0, w.data(), F32, 0,
                         f.data(), F32, pre.data(), F32, bias.data(), F32,
                         STRATA_RT_ACT_GELU_TANH);
      strata_rt_gemm_aux(ctx, 5, m, n, k, lx.data(), low, 0, lw.data(), low, 0,
                         l.data(), low, aux.data(), low, lb.data(), low,
                         STRATA_RT_ACT_GELU_TANH);
      strata_rt_cast(ctx, 0, wantAux.data(), low, pre.data(), F32, pre.size());
      if (low == STRATA_RT_F16) {
        expectRounded("gemm_aux");
        EXPECT_EQ(aux, wantAux) << "gemm_aux's aux";
        std::vector<uint16_t> twice(m * n);
        strata_rt_unary(ctx, 5, STRATA_RT_ACT_GELU_TANH, twice.data(), low,
                        aux.data(), low, m * n, 0);
        EXPECT_NE(l, twice) << "GELU of the rounded pre-activation";
      } else {
        std::vector<float> got(m * n), gotAux(m * n);
        strata_rt_cast(ctx, 0, got.data(), F32, l.data(), low, got.size());
        strata_rt_cast(ctx, 0, gotAux.data(), F32, aux.data(), low, m * n);
        for (int64_t i = 0; i < m * n; ++i) {
          EXPECT_NEAR(got[i], f[i], 0x1p-8f * std::fabs(f[i]) + 1e-6f)
              << "gemm_aux " << i;
          EXPECT_NEAR(gotAux[i], pre[i], 0x1p-8f * std::fabs(pre[i]) + 1e-6f)
              << "gemm_aux's aux " << i;
        }
      }
    }
    // Elementwise: add with a broadcast bias row, GELU, its gradient.
    int64_t desc[] = {m, n, n, 1, 0, 1};
    strata_rt_binary(ctx, 2, STRATA_RT_ADD, f.data(), F32, y.data(), F32,
                     bias.data(), F32, 2, desc);
    strata_rt_binary(ctx, 2, STRATA_RT_ADD, l.data(), low, ly.data(), low,
                     lb.data(), low, 2, desc);
    expectRounded("binary");
    strata_rt_unary(ctx, 3, STRATA_RT_ACT_GELU_TANH, f.data(), F32, y.data(),
                    F32, m * n, 0);
    strata_rt_unary(ctx, 3, STRATA_RT_ACT_GELU_TANH, l.data(), low, ly.data(),
                    low, m * n, 0);
    expectRounded("unary");
    strata_rt_act_grad(ctx, 4, STRATA_RT_ACT_GELU_TANH, f.data(), F32, y.data(),
                       F32, y.data(), F32, m * n);
    strata_rt_act_grad(ctx, 4, STRATA_RT_ACT_GELU_TANH, l.data(), low,
                       ly.data(), low, ly.data(), low, m * n);
    expectRounded("act_grad");
    // Row softmax (causal), dropout with a residual, layer norm.
    strata_rt_softmax(ctx, 5, f.data(), F32, y.data(), F32, m, n, 0);
    strata_rt_softmax(ctx, 5, l.data(), low, ly.data(), low, m, n, 0);
    expectRounded("softmax");
    strata_rt_dropout(ctx, 6, f.data(), F32, y.data(), F32, y.data(), F32,
                      m * n, 3, 1, 0, 0.25);
    strata_rt_dropout(ctx, 6, l.data(), low, ly.data(), low, ly.data(), low,
                      m * n, 3, 1, 0, 0.25);
    expectRounded("dropout");
    std::vector<float> gamma = iota(n, 0.1f, 1.0f);
    std::vector<uint16_t> lg = lower(gamma);
    strata_rt_layer_norm(ctx, 7, f.data(), F32, y.data(), F32, gamma.data(),
                         F32, bias.data(), F32, m, n, 1e-5);
    strata_rt_layer_norm(ctx, 7, l.data(), low, ly.data(), low, lg.data(), low,
                         lb.data(), low, m, n, 1e-5);
    expectRounded("layer_norm");
    strata_rt_rms_norm(ctx, 7, f.data(), F32, y.data(), F32, gamma.data(), F32,
                       m, n, 1e-6);
    strata_rt_rms_norm(ctx, 7, l.data(), low, ly.data(), low, lg.data(), low, m,
                       n, 1e-6);
    expectRounded("rms_norm");
    // A column sum (the bias gradient).
    int64_t rdesc[] = {m, n, 0, 1};
    std::fill(f.begin(), f.end(), 0.0f);
    std::fill(l.begin(), l.end(), 0);
    strata_rt_reduce(ctx, 8, f.data(), F32, y.data(), F32, 2, rdesc, 0.5);
    strata_rt_reduce(ctx, 8, l.data(), low, ly.data(), low, 2, rdesc, 0.5);
    expectRounded("reduce");
    // Loss scaling's unscale: the f32 product with an f32 factor that is no
    // bf16 or f16 number, rounded once; in place too.
    const float inverse = 1.0f / 26214.4f;
    for (int64_t i = 0; i < m * n; ++i)
      f[i] = y[i] * inverse;
    strata_rt_scale_by(ctx, 9, l.data(), low, ly.data(), low, m * n, &inverse,
                       F32);
    expectRounded("scale_by");
    l = ly;
    strata_rt_scale_by(ctx, 9, l.data(), low, l.data(), low, m * n, &inverse,
                       F32);
    expectRounded("scale_by in place");
    // The factor is f32.
    const uint16_t lowInverse = 1;
    strata_rt_scale_by(ctx, 10, l.data(), low, ly.data(), low, m * n,
                       &lowInverse, low);
    int64_t site = -1;
    const char *message = strata_rt_error(ctx, &site);
    ASSERT_NE(message, nullptr);
    EXPECT_EQ(site, 10);
    EXPECT_NE(std::string(message).find("scale_by"), std::string::npos)
        << message;
    strata_rt_clear_error(ctx);
  }
}

/// A long low-precision GEMM (K = 2048, a weight gradient's reduction over
/// tokens) accumulates in f32 and rounds once, on whichever path the CPU
/// takes (oneDNN's bf16 kernels or the widened f32 GEMM): its result is the
/// exact sum rounded to the low type, but where the f32 sum's own error
/// crosses a rounding boundary (rare).
TEST(RuntimeTest, LowPrecisionGemmRoundsTheSumOnce) {
  Context ctx;
  const int64_t m = 32, n = 48, k = 2048;
  for (int64_t low : {int64_t(STRATA_RT_BF16), int64_t(STRATA_RT_F16)}) {
    SCOPED_TRACE(strata_rt_element_name(low));
    std::vector<float> a(m * k), b(k * n);
    for (int64_t i = 0; i < m * k; ++i)
      a[i] = std::sin(0.37f * float(i)) * ((i % 7) ? 1.0f : 1e-3f);
    for (int64_t i = 0; i < k * n; ++i)
      b[i] = std::cos(0.11f * float(i));
    std::vector<uint16_t> la(a.size()), lb(b.size()), c(m * n), want(m * n);
    strata_rt_cast(ctx, 0, la.data(), low, a.data(), F32, a.size());
    strata_rt_cast(ctx, 0, a.data(), F32, la.data(), low, a.size());
    strata_rt_cast(ctx, 0, lb.data(), low, b.data(), F32, b.size());
    strata_rt_cast(ctx, 0, b.data(), F32, lb.data(), low, b.size());
    // A transposed (as in X^T dY).
    std::vector<uint16_t> lat(a.size());
    std::vector<float> at(a.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        lat[p * m + i] = la[i * k + p];
        at[p * m + i] = a[i * k + p];
      }
    strata_rt_gemm(ctx, 1, 1, m, n, k, lat.data(), low, 0, 1, lb.data(), low, 0,
                   0, c.data(), low, nullptr, low, STRATA_RT_ACT_NONE, 0);
    std::vector<float> exact(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += double(at[p * m + i]) * double(b[p * n + j]);
        exact[i * n + j] = float(sum);
      }
    strata_rt_cast(ctx, 2, want.data(), low, exact.data(), F32, exact.size());
    int64_t differ = 0;
    for (int64_t i = 0; i < m * n; ++i)
      differ += c[i] != want[i];
    EXPECT_LE(differ, m * n / 100) << differ << " of " << m * n;
  }
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

/// Strata's packed GEMM against sums in double of the same (exactly
/// widened) values, for every storage type, both output types, both layouts
/// of each operand, a bias, an accumulation, an activation, one or several
/// products, and
/// shapes with partial tiles and several blocks of rows, columns and terms
/// (whose partial sums a bf16 / f16 result keeps in f32). A result is within
/// f32's rounding of the sum, and a bf16 / f16 one is the f32 result rounded
/// once. Its sums do not depend on the thread count.
TEST(RuntimeTest, PackedGemmIsTheProductInEveryLayoutAndType) {
  if (std::strcmp(strata_rt_isa(), "baseline") == 0)
    GTEST_SKIP() << "no AVX2";
  Context one(1), two(2);
  struct Shape {
    int64_t batch, m, n, k;
  };
  for (Shape shape : {Shape{1, 1, 1, 1}, Shape{2, 7, 17, 9}, Shape{1, 6, 16, 8},
                      Shape{2, 13, 40, 600}, Shape{1, 200, 3100, 20},
                      Shape{1, 97, 33, 1030}}) {
    const auto [batch, m, n, k] = shape;
    for (int64_t type : {F32, int64_t(STRATA_RT_BF16), int64_t(STRATA_RT_F16)})
      for (int transA : {0, 1})
        for (int transB : {0, 1})
          for (bool aShared : {false, true}) {
            if (aShared && batch == 1)
              continue;
            SCOPED_TRACE(::testing::Message()
                         << strata_rt_element_name(type) << " " << batch << "x"
                         << m << "x" << n << "x" << k << " transA " << transA
                         << " transB " << transB << " aShared " << aShared);
            // Operands of the type (one A per product and B shared, or the
            // other way round), their f32 values, and the products by the
            // definition.
            const size_t size = strata_rt_element_bytes(type);
            auto make = [&](int64_t count, float scale, float offset,
                            std::vector<float> &values) {
              values = iota(count, scale, offset);
              std::vector<uint8_t> stored(count * size);
              strata_rt_cast(one, 0, stored.data(), type, values.data(), F32,
                             count);
              strata_rt_cast(one, 0, values.data(), F32, stored.data(), type,
                             count);
              return stored;
            };
            std::vector<float> a, b, bias, c0;
            std::vector<uint8_t> la = make((aShared ? 1 : batch) * m * k, 0.02f,
                                           0.1f, a),
                                 lb = make((aShared ? batch : 1) * k * n, 0.03f,
                                           -0.05f, b),
                                 lbias = make(n, 0.5f, 0.0f, bias),
                                 lc0 = make(batch * m * n, 0.7f, 0.2f, c0);
            const std::vector<float> product = naiveGemm(
                batch, m, n, k, a, !aShared, transA, b, aShared, transB);
            // f32 sums err by a few units of f32 rounding of the sum of the
            // terms' magnitudes.
            auto magnitudes = [](std::vector<float> v) {
              for (float &x : v)
                x = std::fabs(x);
              return v;
            };
            const std::vector<float> terms =
                naiveGemm(batch, m, n, k, magnitudes(a), !aShared, transA,
                          magnitudes(b), aShared, transB);
            // The f32 results by mode: a bf16 / f16 result is each rounded.
            std::vector<float> f32Results[4];
            for (int64_t outType : {F32, type}) {
              const size_t outSize = strata_rt_element_bytes(outType);
              const float step = outType == STRATA_RT_BF16  ? 0x1p-8f
                                 : outType == STRATA_RT_F16 ? 0x1p-10f
                                                            : 0.0f;
              // Plain, bias, accumulate, an activation (of the f32 sums, as
              // strata_rt_unary: its f32 result is the reference's).
              for (int mode : {0, 1, 2, 3}) {
                std::vector<float> want = product;
                for (int64_t i = 0; i < batch * m * n; ++i)
                  want[i] += mode == 1 ? bias[i % n] : mode == 2 ? c0[i] : 0.0f;
                if (mode == 3)
                  strata_rt_unary(one, 0, STRATA_RT_ACT_GELU_TANH, want.data(),
                                  F32, want.data(), F32, want.size(), 0);
                std::vector<std::vector<uint8_t>> got;
                for (Context *ctx : {&one, &two}) {
                  std::vector<uint8_t> c(batch * m * n * outSize);
                  if (mode == 2)
                    strata_rt_cast(one, 0, c.data(), outType, c0.data(), F32,
                                   c0.size());
                  strata::cpu::packedGemm(
                      *ctx, 0, type, batch, m, n, k, la.data(), !aShared,
                      transA, lb.data(), aShared, transB, c.data(), outType,
                      mode == 1 ? lbias.data() : nullptr,
                      mode == 3 ? STRATA_RT_ACT_GELU_TANH : STRATA_RT_ACT_NONE,
                      mode == 2);
                  got.push_back(std::move(c));
                }
                EXPECT_EQ(got[0], got[1]) << "mode " << mode;
                std::vector<float> values(batch * m * n);
                strata_rt_cast(one, 0, values.data(), F32, got[0].data(),
                               outType, values.size());
                if (outType == F32) {
                  f32Results[mode] = values;
                } else {
                  std::vector<uint8_t> rounded(got[0].size());
                  strata_rt_cast(one, 0, rounded.data(), outType,
                                 f32Results[mode].data(), F32, values.size());
                  EXPECT_EQ(got[0], rounded)
                      << "mode " << mode << ": not the f32 result rounded once";
                }
                for (size_t i = 0; i < values.size(); ++i)
                  ASSERT_NEAR(values[i], want[i],
                              step * std::fabs(want[i]) +
                                  1e-6f * (terms[i] + std::fabs(want[i])) +
                                  1e-7f)
                      << "output " << strata_rt_element_name(outType)
                      << " mode " << mode << " at " << i;
              }
            }
          }
  }
  EXPECT_EQ(strata_rt_error(one, nullptr), nullptr);
}

/// The fused attention kernels of the build this processor runs.
std::pair<decltype(&strata_rt_attention), decltype(&strata_rt_attention_grad)>
attentionKernels() {
  return {
      dispatchedKernel<decltype(&strata_rt_attention)>("strata_rt_attention"),
      dispatchedKernel<decltype(&strata_rt_attention_grad)>(
          "strata_rt_attention_grad")};
}

/// Fused attention in a low-precision type B against the f32 kernel on the
/// same values: with `exact`, the f32 kernel's results rounded once to B
/// (and its log-sum-exp to the bit); otherwise the outputs and gradients
/// within B's precision, the log-sum-exp closer. Shapes with odd head sizes
/// and key counts, fewer rows than a tile, causal and not, several blocks
/// of queries (whose products read the head's keys and values prepared
/// once); results the same on 1 and 2 threads.
static void lowAttentionMatchesF32(int64_t B, bool exact) {
  auto [attention, attentionGrad] = attentionKernels();
  ASSERT_NE(attention, nullptr);
  ASSERT_NE(attentionGrad, nullptr);
  struct Shape {
    int64_t batch, heads, s, t, d, dv;
    bool causal;
    int64_t kvHeads = 0; // grouped-query attention; 0: `heads`
  };
  for (Shape sh :
       {Shape{3, 1, 150, 150, 64, 64, true}, Shape{2, 2, 5, 9, 7, 5, false},
        Shape{2, 2, 70, 70, 32, 48, true}, Shape{1, 2, 40, 67, 18, 33, false},
        // (Through the ABI only: causal with fewer queries than keys, its
        // last block an odd number of keys short of the packed ones.)
        Shape{1, 2, 67, 80, 16, 16, true},
        // Grouped-query attention: two query heads per key and value head.
        Shape{2, 4, 70, 70, 32, 48, true, 2}}) {
    SCOPED_TRACE(testing::Message()
                 << "batch " << sh.batch << " heads " << sh.heads << " s "
                 << sh.s << " t " << sh.t << " d " << sh.d << " dv " << sh.dv
                 << (sh.causal ? " causal" : ""));
    const int64_t kvHeads = sh.kvHeads ? sh.kvHeads : sh.heads;
    const int64_t bh = sh.batch * sh.heads, bkv = sh.batch * kvHeads;
    const int64_t nq = bh * sh.s * sh.d, nk = bkv * sh.t * sh.d,
                  nv = bkv * sh.t * sh.dv, no = bh * sh.s * sh.dv,
                  nl = bh * sh.s;
    const double scale = 1.0 / std::sqrt(double(sh.d));
    auto random = [](int64_t n, float seed) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i)
        v[i] = 2.0f * std::sin(seed * float(i + 1) + 0.5f * float(i % 13));
      return v;
    };
    std::vector<float> q = random(nq, 0.71f), k = random(nk, 1.37f),
                       v = random(nv, 0.53f), dout = random(no, 0.29f);
    // The low-precision inputs, and their exact f32 values for the f32
    // kernel.
    std::vector<uint16_t> lq(nq), lk(nk), lv(nv), ldout(no);
    {
      Context ctx;
      for (auto [f, l] : {std::pair{&q, &lq}, std::pair{&k, &lk},
                          std::pair{&v, &lv}, std::pair{&dout, &ldout}}) {
        strata_rt_cast(ctx, 0, l->data(), B, f->data(), F32, f->size());
        strata_rt_cast(ctx, 0, f->data(), F32, l->data(), B, f->size());
      }
    }
    Context ctx;
    std::vector<float> out(no), lse(nl), dq(nq), dk(nk), dv(nv);
    attention(ctx, 1, out.data(), F32, lse.data(), F32, q.data(), F32, k.data(),
              F32, v.data(), F32, sh.batch, sh.heads, kvHeads, sh.s, sh.t, sh.d,
              sh.dv, scale, sh.causal, 0.0, 0, 1, 0);
    // The gradient reads the forward's output as the low-precision run
    // stores it: rounded to B.
    std::vector<float> outB(no);
    {
      std::vector<uint16_t> l(no);
      strata_rt_cast(ctx, 0, l.data(), B, out.data(), F32, no);
      strata_rt_cast(ctx, 0, outB.data(), F32, l.data(), B, no);
    }
    attentionGrad(ctx, 2, dq.data(), F32, dk.data(), F32, dv.data(), F32,
                  q.data(), F32, k.data(), F32, v.data(), F32, outB.data(), F32,
                  lse.data(), F32, dout.data(), F32, sh.batch, sh.heads,
                  kvHeads, sh.s, sh.t, sh.d, sh.dv, scale, sh.causal, 0.0, 0, 1,
                  0);
    std::vector<uint16_t> runs[2];
    for (int threads : {1, 2}) {
      Context low(threads);
      std::vector<uint16_t> lout(no), ldq(nq), ldk(nk), ldv(nv);
      std::vector<float> llse(nl);
      attention(low, 1, lout.data(), B, llse.data(), F32, lq.data(), B,
                lk.data(), B, lv.data(), B, sh.batch, sh.heads, kvHeads, sh.s,
                sh.t, sh.d, sh.dv, scale, sh.causal, 0.0, 0, 1, 0);
      attentionGrad(low, 2, ldq.data(), B, ldk.data(), B, ldv.data(), B,
                    lq.data(), B, lk.data(), B, lv.data(), B, lout.data(), B,
                    llse.data(), F32, ldout.data(), B, sh.batch, sh.heads,
                    kvHeads, sh.s, sh.t, sh.d, sh.dv, scale, sh.causal, 0.0, 0,
                    1, 0);
      ASSERT_EQ(strata_rt_error(low, nullptr), nullptr);
      // Norm-wise relative error, and no element off by more than a few
      // bf16 steps of the tensor's largest magnitude.
      auto expectClose = [&](const char *what, const std::vector<uint16_t> &l,
                             const std::vector<float> &want, double tol) {
        std::vector<float> got(l.size());
        strata_rt_cast(low, 0, got.data(), F32, l.data(), B, l.size());
        double diff = 0, norm = 0, largest = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
          norm += double(want[i]) * want[i];
          largest = std::max(largest, std::fabs(double(want[i])));
        }
        EXPECT_LE(std::sqrt(diff / norm), tol) << what;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 4 * tol * largest) << what << " " << i;
      };
      // The f32 result rounded to B, bit for bit.
      auto expectRounded = [&](const char *what, const std::vector<uint16_t> &l,
                               const std::vector<float> &want) {
        std::vector<uint16_t> rounded(want.size());
        strata_rt_cast(low, 0, rounded.data(), B, want.data(), F32,
                       want.size());
        EXPECT_EQ(l, rounded) << what;
      };
      if (exact) {
        expectRounded("out", lout, out);
        expectRounded("dq", ldq, dq);
        expectRounded("dk", ldk, dk);
        expectRounded("dv", ldv, dv);
        EXPECT_EQ(llse, lse);
      } else {
        expectClose("out", lout, out, 1e-2);
        expectClose("dq", ldq, dq, 1e-2);
        expectClose("dk", ldk, dk, 1e-2);
        expectClose("dv", ldv, dv, 1e-2);
        for (int64_t i = 0; i < nl; ++i)
          ASSERT_NEAR(llse[i], lse[i], 1e-3 * (1 + std::fabs(lse[i]))) << i;
      }
      runs[threads - 1] = lout;
      runs[threads - 1].insert(runs[threads - 1].end(), ldq.begin(), ldq.end());
      runs[threads - 1].insert(runs[threads - 1].end(), ldk.begin(), ldk.end());
      runs[threads - 1].insert(runs[threads - 1].end(), ldv.begin(), ldv.end());
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

/// Whether this processor has AVX512-BF16's dot products (and AVX-512 F and
/// BW), which the AVX-512 build's bf16 attention uses.
static bool cpuHasBf16Dot() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
}

/// bf16: on CPUs with AVX512-BF16 (in the AVX-512 build) the products are
/// bf16 dot products with f32 sums and the probabilities rounded to bf16;
/// elsewhere the f32 kernel on operands widened as the blocks read them.
TEST(RuntimeTest, Bf16AttentionMatchesF32) {
  const std::string isa = strata_rt_isa();
  lowAttentionMatchesF32(STRATA_RT_BF16,
                         /*exact=*/isa != "avx512" || !cpuHasBf16Dot());
}

/// f16 (no CPU's f16 arithmetic is used): the f32 kernel on operands
/// widened as the blocks read them, so exactly the f32 results rounded.
TEST(RuntimeTest, F16AttentionIsF32Rounded) {
  lowAttentionMatchesF32(STRATA_RT_F16, /*exact=*/true);
}

/// Fused attention's layout: q, k, v, the output and the gradients are
/// [batch, sequence, heads, head size] (heads side by side in a row), the
/// log-sum-exp [batch, heads, sequence]. Each (batch, head) slice of a
/// batched call equals a call on that slice alone (copied out contiguous),
/// in f32 and in bf16 (on CPUs with AVX512-BF16 its own dot products, which
/// repack the strided rows).
// A GEMM of no rows still gives the bias gradient of B: its sums over k
// (the CUDA runtime computes it likewise without a product).
TEST(RuntimeTest, BiasGradientOfAnEmptyProduct) {
  Context ctx;
  const int64_t m = 0, n = 3, k = 2;
  std::vector<float> a(1), b = {1, 2, 3, 10, 20, 30}, c(1), bgrad(n, -1.0f);
  strata_rt_gemm_bgrad(ctx, 1, m, n, k, a.data(), F32, 0, b.data(), F32, 0,
                       c.data(), F32, bgrad.data(), F32, 1);
  ASSERT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  EXPECT_EQ(bgrad, (std::vector<float>{11, 22, 33}));
}

// Integer division is refused: a zero divisor traps on the CPU (the CUDA
// runtime refuses it alike); the dialect divides floating-point tensors.
TEST(RuntimeTest, IntegerDivisionIsRefused) {
  for (int64_t type : {int64_t(STRATA_RT_I32), int64_t(STRATA_RT_I64)}) {
    Context ctx;
    int64_t a[2] = {6, 7}, b[2] = {0, 1}, out[2] = {0, 0};
    const int64_t desc[3] = {type == STRATA_RT_I32 ? 4 : 2, 1, 1};
    strata_rt_binary(ctx, 3, STRATA_RT_DIV, out, type, a, type, b, type, 1,
                     desc);
    const char *error = strata_rt_error(ctx, nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_STREQ(error, "strata_rt_binary: integer division is not "
                        "implemented (the division of floating-point tensors "
                        "is)");
    Context other;
    strata_rt_binary(other, 3, STRATA_RT_MUL, out, type, a, type, b, type, 1,
                     desc);
    EXPECT_EQ(strata_rt_error(other, nullptr), nullptr);
  }
}

// Key and value heads that do not divide the query heads are refused by
// both kernels; no heads at all is an empty call.
TEST(RuntimeTest, AttentionKeyHeadsMustDivideTheQueryHeads) {
  auto [attention, attentionGrad] = attentionKernels();
  ASSERT_NE(attention, nullptr);
  const int64_t s = 4, d = 8;
  std::vector<float> x(4 * s * d, 0.5f), lse(4 * s), g(x.size());
  for (auto [heads, kvHeads] : {std::pair<int64_t, int64_t>{4, 3}, {0, 0}})
    for (bool grad : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << heads << " query heads, " << kvHeads << " key heads"
                   << (grad ? ", grad" : ""));
      Context ctx;
      if (grad)
        attentionGrad(ctx, 2, g.data(), F32, g.data(), F32, g.data(), F32,
                      x.data(), F32, x.data(), F32, x.data(), F32, x.data(),
                      F32, lse.data(), F32, x.data(), F32, 1, heads, kvHeads, s,
                      s, d, d, 0.5, false, 0.0, 0, 1, 0);
      else
        attention(ctx, 1, g.data(), F32, lse.data(), F32, x.data(), F32,
                  x.data(), F32, x.data(), F32, 1, heads, kvHeads, s, s, d, d,
                  0.5, false, 0.0, 0, 1, 0);
      const char *error = strata_rt_error(ctx, nullptr);
      if (heads == 0) {
        EXPECT_EQ(error, nullptr);
        continue;
      }
      ASSERT_NE(error, nullptr);
      EXPECT_EQ(std::string(error),
                std::string(grad ? "strata_rt_attention_grad"
                                 : "strata_rt_attention") +
                    ": 3 key and value heads do not divide the 4 query heads");
    }
}

// Causal attention sees keys 0 .. i: more queries than keys would read
// past the keys (the dialect's causal attention has as many of each).
TEST(RuntimeTest, CausalAttentionWithMoreQueriesIsRefused) {
  auto [attention, attentionGrad] = attentionKernels();
  ASSERT_NE(attention, nullptr);
  const int64_t s = 5, t = 3, d = 4;
  std::vector<float> q(s * d, 0.5f), k(t * d, 0.25f), v(t * d, 1.0f),
      out(s * d), lse(s), dout(s * d, 1.0f), dq(q.size()), dk(k.size()),
      dv(v.size());
  for (bool grad : {false, true}) {
    Context ctx;
    if (grad)
      attentionGrad(ctx, 2, dq.data(), F32, dk.data(), F32, dv.data(), F32,
                    q.data(), F32, k.data(), F32, v.data(), F32, out.data(),
                    F32, lse.data(), F32, dout.data(), F32, 1, 1, 1, s, t, d, d,
                    0.5, true, 0.0, 0, 1, 0);
    else
      attention(ctx, 1, out.data(), F32, lse.data(), F32, q.data(), F32,
                k.data(), F32, v.data(), F32, 1, 1, 1, s, t, d, d, 0.5, true,
                0.0, 0, 1, 0);
    const char *error = strata_rt_error(ctx, nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(
        std::string(error),
        std::string(grad ? "strata_rt_attention_grad" : "strata_rt_attention") +
            ": causal attention with more queries than keys (s = 5, t "
            "= 3)");
  }
}

TEST(RuntimeTest, AttentionReadsHeadsSideBySide) {
  auto [attention, attentionGrad] = attentionKernels();
  ASSERT_NE(attention, nullptr);
  ASSERT_NE(attentionGrad, nullptr);
  const int64_t batch = 2, heads = 3, s = 70, t = 70, d = 16, dv = 24;
  const int64_t bh = batch * heads;
  const double scale = 0.25;
  auto check = [&](auto zero, int64_t type) {
    using T = decltype(zero);
    SCOPED_TRACE(type == F32 ? "f32" : "bf16");
    Context ctx;
    auto random = [&](int64_t n, float seed) {
      std::vector<float> f(n);
      for (int64_t i = 0; i < n; ++i)
        f[i] = std::sin(seed * float(i + 1));
      std::vector<T> x(n);
      strata_rt_cast(ctx, 0, x.data(), type, f.data(), F32, n);
      return x;
    };
    std::vector<T> q = random(bh * s * d, 0.7f), k = random(bh * t * d, 1.3f),
                   v = random(bh * t * dv, 0.5f),
                   dout = random(bh * s * dv, 0.3f);
    std::vector<T> out(bh * s * dv), dq(q.size()), dk(k.size()), dV(v.size());
    std::vector<float> lse(bh * s);
    attention(ctx, 1, out.data(), type, lse.data(), F32, q.data(), type,
              k.data(), type, v.data(), type, batch, heads, heads, s, t, d, dv,
              scale, true, 0.0, 0, 1, 0);
    attentionGrad(ctx, 2, dq.data(), type, dk.data(), type, dV.data(), type,
                  q.data(), type, k.data(), type, v.data(), type, out.data(),
                  type, lse.data(), F32, dout.data(), type, batch, heads, heads,
                  s, t, d, dv, scale, true, 0.0, 0, 1, 0);
    ASSERT_EQ(strata_rt_error(ctx, nullptr), nullptr);
    // Rows `rows` x `width` of slice (b, h) of a [batch, rows, heads, width]
    // tensor, contiguous.
    auto slice = [&](const std::vector<T> &x, int64_t b, int64_t h,
                     int64_t rows, int64_t width) {
      std::vector<T> y(rows * width);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c)
          y[r * width + c] = x[((b * rows + r) * heads + h) * width + c];
      return y;
    };
    auto expectNear = [&](const auto &got, const auto &want, const char *what) {
      ASSERT_EQ(got.size(), want.size());
      std::vector<float> g(got.size()), w(want.size());
      int64_t gt = sizeof(got[0]) == 4 ? F32 : type;
      strata_rt_cast(ctx, 0, g.data(), F32, got.data(), gt, g.size());
      strata_rt_cast(ctx, 0, w.data(), F32, want.data(), gt, w.size());
      for (size_t i = 0; i < g.size(); ++i)
        ASSERT_NEAR(g[i], w[i], 1e-5 * (1 + std::fabs(w[i])))
            << what << " " << i;
    };
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        SCOPED_TRACE(testing::Message() << "batch " << b << " head " << h);
        std::vector<T> q1 = slice(q, b, h, s, d), k1 = slice(k, b, h, t, d),
                       v1 = slice(v, b, h, t, dv),
                       do1 = slice(dout, b, h, s, dv);
        std::vector<T> o1(s * dv), dq1(s * d), dk1(t * d), dv1(t * dv);
        std::vector<float> l1(s);
        attention(ctx, 1, o1.data(), type, l1.data(), F32, q1.data(), type,
                  k1.data(), type, v1.data(), type, 1, 1, 1, s, t, d, dv, scale,
                  true, 0.0, 0, 1, 0);
        attentionGrad(ctx, 2, dq1.data(), type, dk1.data(), type, dv1.data(),
                      type, q1.data(), type, k1.data(), type, v1.data(), type,
                      o1.data(), type, l1.data(), F32, do1.data(), type, 1, 1,
                      1, s, t, d, dv, scale, true, 0.0, 0, 1, 0);
        expectNear(o1, slice(out, b, h, s, dv), "out");
        expectNear(l1,
                   std::vector<float>(lse.begin() + (b * heads + h) * s,
                                      lse.begin() + (b * heads + h + 1) * s),
                   "lse");
        expectNear(dq1, slice(dq, b, h, s, d), "dq");
        expectNear(dk1, slice(dk, b, h, t, d), "dk");
        expectNear(dv1, slice(dV, b, h, t, dv), "dv");
      }
  };
  check(float(), F32);
  check(uint16_t(), STRATA_RT_BF16);
}

/// Fused attention with dropout on its probabilities equals the unfused
/// chain of the runtime's own kernels: scores, strata_rt_softmax, then
/// strata_rt_dropout of the [batch, heads, s, t] probabilities with the
/// same key and micro-batch (on a rank other than the first), times v; and
/// its gradients equal that chain's (strata_rt_dropout of dP,
/// strata_rt_softmax_grad). Causal and not, on 1 and 2 threads, with as
/// many key and value heads as query heads and with one shared by all
/// (grouped-query attention: its gradients sum over the query heads).
TEST(RuntimeTest, AttentionDropoutIsTheUnfusedDropout) {
  auto [attention, attentionGrad] = attentionKernels();
  ASSERT_NE(attention, nullptr);
  ASSERT_NE(attentionGrad, nullptr);
  const int64_t batch = 2, heads = 3, s = 70, d = 16, dv = 8;
  const int64_t bh = batch * heads, key = 5, microBatches = 2, mb = 1;
  const double prob = 0.25, scale = 0.25;
  for (int64_t kvHeads : {heads, int64_t(1)})
    for (bool causal : {true, false})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(testing::Message()
                     << (causal ? "causal " : "") << threads << " threads, "
                     << kvHeads << " key heads");
        const int64_t t = causal ? s : 45, bkv = batch * kvHeads;
        Context ctx(threads, /*shard=*/1);
        auto random = [](int64_t n, float seed) {
          std::vector<float> f(n);
          for (int64_t i = 0; i < n; ++i)
            f[i] = std::sin(seed * float(i + 1));
          return f;
        };
        std::vector<float> q = random(bh * s * d, 0.7f),
                           k = random(bkv * t * d, 1.3f),
                           v = random(bkv * t * dv, 0.5f),
                           dout = random(bh * s * dv, 0.3f);
        strata::AttentionLayout at{heads, s, t, d, dv, kvHeads};
        // The unfused chain, per slice in [batch, heads, s, t].
        std::vector<float> scores(bh * s * t), p(scores.size()),
            pd(scores.size());
        for (int64_t h = 0; h < bh; ++h)
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < t; ++j) {
              double dot = 0;
              for (int64_t c = 0; c < d; ++c)
                dot += double(q[at.query(h, i) + c]) * k[at.key(h, j) + c];
              scores[(h * s + i) * t + j] = float(scale * dot);
            }
        strata_rt_softmax(ctx, 1, p.data(), F32, scores.data(), F32, bh * s, t,
                          causal ? s : 0);
        strata_rt_dropout(ctx, 2, pd.data(), F32, p.data(), F32, nullptr, F32,
                          bh * s * t, key, microBatches, mb, prob);
        std::vector<float> want(bh * s * dv), dpd(scores.size()),
            dp(scores.size()), ds(scores.size());
        for (int64_t h = 0; h < bh; ++h)
          for (int64_t i = 0; i < s; ++i)
            for (int64_t c = 0; c < dv; ++c) {
              double acc = 0;
              for (int64_t j = 0; j < t; ++j)
                acc += double(pd[(h * s + i) * t + j]) * v[at.value(h, j) + c];
              want[at.output(h, i) + c] = float(acc);
            }
        for (int64_t h = 0; h < bh; ++h)
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < t; ++j) {
              double dot = 0;
              for (int64_t c = 0; c < dv; ++c)
                dot +=
                    double(dout[at.output(h, i) + c]) * v[at.value(h, j) + c];
              dpd[(h * s + i) * t + j] = float(dot);
            }
        strata_rt_dropout(ctx, 3, dp.data(), F32, dpd.data(), F32, nullptr, F32,
                          bh * s * t, key, microBatches, mb, prob);
        strata_rt_softmax_grad(ctx, 4, ds.data(), F32, p.data(), F32, dp.data(),
                               F32, bh * s, t);
        std::vector<double> wdq(q.size()), wdk(k.size()), wdv(v.size());
        for (int64_t h = 0; h < bh; ++h)
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < t; ++j) {
              double g = scale * ds[(h * s + i) * t + j];
              double w = pd[(h * s + i) * t + j];
              for (int64_t c = 0; c < d; ++c) {
                wdq[at.query(h, i) + c] += g * k[at.key(h, j) + c];
                wdk[at.key(h, j) + c] += g * q[at.query(h, i) + c];
              }
              for (int64_t c = 0; c < dv; ++c)
                wdv[at.value(h, j) + c] += w * dout[at.output(h, i) + c];
            }
        ASSERT_EQ(strata_rt_error(ctx, nullptr), nullptr);

        std::vector<float> out(want.size()), lse(bh * s), dq(q.size()),
            dk(k.size()), dV(v.size());
        attention(ctx, 5, out.data(), F32, lse.data(), F32, q.data(), F32,
                  k.data(), F32, v.data(), F32, batch, heads, kvHeads, s, t, d,
                  dv, scale, causal, prob, key, microBatches, mb);
        attentionGrad(ctx, 6, dq.data(), F32, dk.data(), F32, dV.data(), F32,
                      q.data(), F32, k.data(), F32, v.data(), F32, out.data(),
                      F32, lse.data(), F32, dout.data(), F32, batch, heads,
                      kvHeads, s, t, d, dv, scale, causal, prob, key,
                      microBatches, mb);
        ASSERT_EQ(strata_rt_error(ctx, nullptr), nullptr);
        auto expectNear = [](const auto &got, const auto &want,
                             const char *what) {
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
                << what << " " << i;
        };
        expectNear(out, want, "out");
        expectNear(dq, wdq, "dq");
        expectNear(dk, wdk, "dk");
        expectNear(dV, wdv, "dv");
        // The mask matters: without dropout the output is another.
        std::vector<float> plain(out.size());
        attention(ctx, 5, plain.data(), F32, lse.data(), F32, q.data(), F32,
                  k.data(), F32, v.data(), F32, batch, heads, kvHeads, s, t, d,
                  dv, scale, causal, 0.0, key, microBatches, mb);
        double moved = 0;
        for (size_t i = 0; i < out.size(); ++i)
          moved = std::max(moved, double(std::fabs(plain[i] - out[i])));
        EXPECT_GT(moved, 1e-2);
      }
}

/// A guarded update with a non-finite guard leaves parameters and state
/// as they were; a finite guard changes nothing about the update.
TEST(RuntimeTest, GuardedUpdatesSkipOverflowedSteps) {
  Context ctx;
  std::vector<float> p = iota(8, 0.1f), g = iota(8, 0.05f, 0.01f),
                     m = iota(8, 0.01f), v(8, 0.02f);
  float lr = 0.1f;
  int64_t step = 3;
  for (float norm : {INFINITY, NAN, 2.0f}) {
    SCOPED_TRACE(norm);
    std::vector<float> np(8), nm(8), nv(8), wp(8), wm(8), wv(8);
    strata_rt_adam(ctx, 1, STRATA_RT_ADAMW, np.data(), F32, nm.data(), F32,
                   nv.data(), F32, p.data(), F32, g.data(), F32, m.data(), F32,
                   v.data(), F32, &lr, F32, &step, STRATA_RT_I64, 8, 0.9, 0.999,
                   1e-8, 0.01, &norm, F32, nullptr, F32, nullptr, F32);
    strata_rt_adam(ctx, 1, STRATA_RT_ADAMW, wp.data(), F32, wm.data(), F32,
                   wv.data(), F32, p.data(), F32, g.data(), F32, m.data(), F32,
                   v.data(), F32, &lr, F32, &step, STRATA_RT_I64, 8, 0.9, 0.999,
                   1e-8, 0.01, nullptr, F32, nullptr, F32, nullptr, F32);
    if (std::isfinite(norm)) {
      EXPECT_EQ(np, wp);
      EXPECT_EQ(nm, wm);
      EXPECT_EQ(nv, wv);
    } else {
      EXPECT_EQ(np, p);
      EXPECT_EQ(nm, m);
      EXPECT_EQ(nv, v);
    }
    // In place: nothing is written.
    std::vector<float> q = p;
    strata_rt_sgd(ctx, 2, q.data(), F32, q.data(), F32, g.data(), F32, &lr, F32,
                  8, 0.0, &norm, F32, nullptr, F32, nullptr, F32);
    if (!std::isfinite(norm))
      EXPECT_EQ(q, p);
    else
      EXPECT_NE(q, p);
    int64_t ok = -1;
    strata_rt_is_finite(ctx, 3, &ok, STRATA_RT_I64, &norm, F32);
    EXPECT_EQ(ok, std::isfinite(norm) ? 1 : 0);
  }
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

/// Level o2: an update through an f32 master weight computes exactly the
/// f32 update of the master (from the gradient widened) and writes the
/// parameter as the new master rounded; a skipped step keeps both.
TEST(RuntimeTest, MasterWeightUpdatesRoundTheMasterIntoTheParameter) {
  Context ctx;
  const int64_t n = 37;
  std::vector<float> master = iota(n, 0.3f, -0.017f), m = iota(n, 0.01f),
                     v(n, 0.02f), gradF32 = iota(n, 0.05f, 0.013f);
  for (int64_t low : {STRATA_RT_BF16, STRATA_RT_F16}) {
    SCOPED_TRACE(strata_rt_element_name(low));
    // The low-precision gradient and parameter, and the gradient widened.
    std::vector<uint16_t> g(n), p(n), np(n);
    std::vector<float> gw(n);
    strata_rt_cast(ctx, 1, g.data(), low, gradF32.data(), F32, n);
    strata_rt_cast(ctx, 1, gw.data(), F32, g.data(), low, n);
    strata_rt_cast(ctx, 1, p.data(), low, master.data(), F32, n);
    float lr = 0.1f;
    int64_t step = 2;
    std::vector<float> wantMaster(n), wantM(n), wantV(n), nm(n), nmm(n), nv(n);
    strata_rt_adam(ctx, 2, STRATA_RT_ADAMW, wantMaster.data(), F32,
                   wantM.data(), F32, wantV.data(), F32, master.data(), F32,
                   gw.data(), F32, m.data(), F32, v.data(), F32, &lr, F32,
                   &step, STRATA_RT_I64, n, 0.9, 0.999, 1e-8, 0.01, nullptr,
                   F32, nullptr, F32, nullptr, F32);
    strata_rt_adam(ctx, 3, STRATA_RT_ADAMW, np.data(), low, nm.data(), F32,
                   nv.data(), F32, p.data(), low, g.data(), low, m.data(), F32,
                   v.data(), F32, &lr, F32, &step, STRATA_RT_I64, n, 0.9, 0.999,
                   1e-8, 0.01, nullptr, F32, nmm.data(), F32, master.data(),
                   F32);
    EXPECT_EQ(nmm, wantMaster);
    EXPECT_EQ(nm, wantM);
    EXPECT_EQ(nv, wantV);
    std::vector<uint16_t> rounded(n);
    strata_rt_cast(ctx, 4, rounded.data(), low, wantMaster.data(), F32, n);
    EXPECT_EQ(np, rounded);
    // SGD in place with an f32 gradient (master gradients).
    std::vector<float> mp = master, wantSgd(n);
    std::vector<uint16_t> pp = p;
    strata_rt_sgd(ctx, 5, wantSgd.data(), F32, master.data(), F32,
                  gradF32.data(), F32, &lr, F32, n, 0.0, nullptr, F32, nullptr,
                  F32, nullptr, F32);
    strata_rt_sgd(ctx, 6, pp.data(), low, pp.data(), low, gradF32.data(), F32,
                  &lr, F32, n, 0.0, nullptr, F32, mp.data(), F32, mp.data(),
                  F32);
    EXPECT_EQ(mp, wantSgd);
    strata_rt_cast(ctx, 7, rounded.data(), low, wantSgd.data(), F32, n);
    EXPECT_EQ(pp, rounded);
    // An overflowed step keeps parameter and master, in place or not.
    float inf = INFINITY;
    std::vector<uint16_t> kept(n, 0);
    std::vector<float> keptMaster(n, 0.0f);
    strata_rt_sgd(ctx, 8, kept.data(), low, p.data(), low, g.data(), low, &lr,
                  F32, n, 0.0, &inf, F32, keptMaster.data(), F32, master.data(),
                  F32);
    EXPECT_EQ(kept, p);
    EXPECT_EQ(keptMaster, master);
  }
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
  // A master weight for an f32 parameter, or a gradient of a third type.
  std::vector<float> out(4), a(4, 1.0f), mm(4, 1.0f);
  std::vector<uint16_t> lp(4), lg(4);
  float lr = 0.1f;
  strata_rt_sgd(ctx, 9, out.data(), F32, a.data(), F32, a.data(), F32, &lr, F32,
                4, 0.0, nullptr, F32, mm.data(), F32, mm.data(), F32);
  const char *message = strata_rt_error(ctx, nullptr);
  ASSERT_NE(message, nullptr);
  EXPECT_NE(std::string(message).find(
                "a master weight updates a bf16 or f16 parameter"),
            std::string::npos)
      << message;
}

/// Paddle's update_loss_scaling, step by step.
TEST(RuntimeTest, DynamicLossScalingFollowsPaddlesRule) {
  Context ctx;
  float scale = 1024.0f;
  int64_t good = 0, bad = 0;
  auto step = [&](float norm) {
    strata_rt_update_loss_scaling(ctx, 1, &scale, F32, &good, STRATA_RT_I64,
                                  &bad, STRATA_RT_I64, &norm, F32, &scale, F32,
                                  &good, STRATA_RT_I64, &bad, STRATA_RT_I64,
                                  /*incr every*/ 3, /*decr every*/ 2, 2.0, 0.5);
  };
  step(INFINITY); // bad 1
  EXPECT_EQ(scale, 1024.0f);
  EXPECT_EQ(bad, 1);
  step(NAN); // bad 2: halve, reset
  EXPECT_EQ(scale, 512.0f);
  EXPECT_EQ(bad, 0);
  step(1.0f);
  step(1.0f);
  EXPECT_EQ(good, 2);
  step(INFINITY); // an overflow resets the good count
  EXPECT_EQ(good, 0);
  EXPECT_EQ(bad, 1);
  step(1.0f); // and a good step the bad count
  EXPECT_EQ(bad, 0);
  step(1.0f);
  step(1.0f); // third good step in a row: double
  EXPECT_EQ(scale, 1024.0f);
  EXPECT_EQ(good, 0);
  // Never below 1; never to infinity.
  scale = 1.5f;
  step(INFINITY);
  step(INFINITY);
  EXPECT_EQ(scale, 1.0f);
  scale = 3e38f;
  good = 2;
  step(1.0f);
  EXPECT_EQ(scale, 3e38f);
  EXPECT_EQ(good, 0);
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

TEST(RuntimeTest, SymbolsNameEveryKernel) {
  size_t count = 0;
  const StrataRtSymbol *symbols = strata_rt_symbols(&count);
  EXPECT_EQ(count, 47u);
  bool gemm = false, gemmAux = false;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_NE(symbols[i].address, nullptr);
    gemm |= std::string(symbols[i].name) == "strata_rt_gemm";
    gemmAux |= std::string(symbols[i].name) == "strata_rt_gemm_aux";
  }
  EXPECT_TRUE(gemm);
  EXPECT_TRUE(gemmAux);
}

} // namespace

/// A product of an empty inner dimension (k = 0) is zero: C is act(bias) in
/// every row, zero without a bias, unchanged when accumulating; through
/// strata_rt_gemm and the GEMMs that keep or take an activation's input.
TEST(RuntimeTest, GemmOfNoInnerDimension) {
  Context ctx;
  std::vector<float> none(1), bias = {1.0f, -2.0f, 3.0f};
  auto gemm = [&](std::vector<float> &c, const float *withBias, int64_t act,
                  int64_t accumulate) {
    strata_rt_gemm(ctx, 0, 2, 1, 3, 0, none.data(), F32, 0, 0, none.data(), F32,
                   0, 0, c.data(), F32, withBias, F32, act, accumulate);
  };
  std::vector<float> c(6, 7.0f);
  gemm(c, bias.data(), STRATA_RT_ACT_RELU, 0);
  EXPECT_EQ(c, (std::vector<float>{1, 0, 3, 1, 0, 3}));
  gemm(c, nullptr, STRATA_RT_ACT_GELU_TANH, 0);
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));
  std::fill(c.begin(), c.end(), 7.0f);
  gemm(c, nullptr, STRATA_RT_ACT_NONE, 1);
  EXPECT_EQ(c, std::vector<float>(6, 7.0f));
  // gemm_aux: aux the bias, c its activation; gemm_dact: zero (times the
  // gradient at aux); gemm_bgrad: zero, and a bias gradient of no terms.
  std::vector<float> aux(3), out(3);
  strata_rt_gemm_aux(ctx, 0, 1, 3, 0, none.data(), F32, 0, none.data(), F32, 0,
                     out.data(), F32, aux.data(), F32, bias.data(), F32,
                     STRATA_RT_ACT_RELU);
  EXPECT_EQ(aux, bias);
  EXPECT_EQ(out, (std::vector<float>{1, 0, 3}));
  strata_rt_gemm_dact(ctx, 0, 1, 3, 0, none.data(), F32, 0, none.data(), F32, 0,
                      out.data(), F32, aux.data(), F32,
                      STRATA_RT_ACT_GELU_TANH);
  EXPECT_EQ(out, std::vector<float>(3, 0.0f));
  std::vector<float> bgrad(3, 7.0f);
  std::fill(out.begin(), out.end(), 7.0f);
  strata_rt_gemm_bgrad(ctx, 0, 1, 3, 0, none.data(), F32, 0, none.data(), F32,
                       0, out.data(), F32, bgrad.data(), F32, 1);
  EXPECT_EQ(out, std::vector<float>(3, 0.0f));
  EXPECT_EQ(bgrad, std::vector<float>(3, 0.0f));
  EXPECT_EQ(strata_rt_error(ctx, nullptr), nullptr);
}

/// Negative sizes, and an accumulating product with a bias or an
/// activation (the ABI's C += op(A) op(B) takes neither), fail at their
/// site and leave C as it was.
TEST(RuntimeTest, GemmArgumentsAreChecked) {
  auto a = iota(6), b = iota(6);
  auto fails = [&](int64_t m, int64_t k, const float *bias, int64_t act,
                   int64_t accumulate, const std::string &what) {
    Context ctx;
    std::vector<float> c(4, 7.0f);
    strata_rt_gemm(ctx, 3, 1, m, 2, k, a.data(), F32, 0, 0, b.data(), F32, 0, 0,
                   c.data(), F32, bias, F32, act, accumulate);
    int64_t site = -1;
    const char *error = strata_rt_error(ctx, &site);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(std::string(error), what);
    EXPECT_EQ(site, 3);
    EXPECT_EQ(c, std::vector<float>(4, 7.0f));
  };
  fails(-2, 3, nullptr, STRATA_RT_ACT_NONE, 0,
        "strata_rt_gemm: negative sizes (batch, m, n, k = 1, -2, 2, 3)");
  const char *accumulating =
      "strata_rt_gemm: an accumulating GEMM takes no bias or activation";
  fails(2, 3, b.data(), STRATA_RT_ACT_NONE, 1, accumulating);
  fails(2, 3, nullptr, STRATA_RT_ACT_RELU, 1, accumulating);
  fails(2, 3, nullptr, STRATA_RT_ACT_GELU_TANH, 1, accumulating);
  // An activation that is no epilogue, also where there is no product.
  fails(2, 3, nullptr, STRATA_RT_UNARY_RSQRT, 0,
        "unknown GEMM epilogue activation code 6");
  fails(2, 0, b.data(), STRATA_RT_UNARY_RSQRT, 0,
        "unknown GEMM epilogue activation code 6");
  // The GEMMs with an activation's input or a bias gradient check their
  // sizes under their own names, before they write anything.
  Context ctx;
  std::vector<float> c(4, 7.0f), aux(4, 7.0f), bgrad(4, 7.0f);
  auto refused = [&](const std::string &what) {
    const char *error = strata_rt_error(ctx, nullptr);
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(std::string(error), what);
    EXPECT_EQ(c, std::vector<float>(4, 7.0f));
    EXPECT_EQ(aux, std::vector<float>(4, 7.0f));
    EXPECT_EQ(bgrad, std::vector<float>(4, 7.0f));
    strata_rt_clear_error(ctx);
  };
  strata_rt_gemm_aux(ctx, 0, -2, -2, 3, a.data(), F32, 0, b.data(), F32, 0,
                     c.data(), F32, aux.data(), F32, nullptr, F32,
                     STRATA_RT_ACT_RELU);
  refused("strata_rt_gemm_aux: negative sizes (batch, m, n, k = 1, -2, -2, 3)");
  strata_rt_gemm_dact(ctx, 0, 2, -2, 3, a.data(), F32, 0, b.data(), F32, 0,
                      c.data(), F32, aux.data(), F32, STRATA_RT_ACT_RELU);
  refused("strata_rt_gemm_dact: negative sizes (batch, m, n, k = 1, 2, -2, 3)");
  strata_rt_gemm_bgrad(ctx, 0, -2, 2, 3, a.data(), F32, 0, b.data(), F32, 0,
                       c.data(), F32, bgrad.data(), F32, 1);
  refused(
      "strata_rt_gemm_bgrad: negative sizes (batch, m, n, k = 1, -2, 2, 3)");
}
