//===- RowKernelsEmulationTest.cpp - The row kernels on the host ---------===//
//
// Runs the CUDA runtime's softmax, layer norm and cross-entropy kernels
// (runtime/cuda/RowKernels.cuh), through the same launch sequences the
// runtime uses, on the host under CudaEmulation.h (a block's threads are
// host threads, warp shuffles go through memory, blocks run one after
// another), and compares every output with the CPU runtime's kernel on the
// same inputs, at the GPU check's tolerances (f32 rtol 1e-5, f16 2e-3, bf16
// 1.6e-2). The cases take both of a row's thread groups: a warp (rows of up
// to 1024 elements, eight a block, some blocks with idle warps) and a whole
// block (longer rows), rows shorter than a warp, causal limits, outputs
// that alias their inputs, and bad labels.
//
//===----------------------------------------------------------------------===//

#define STRATA_CUDA_EMULATION 1

#include "CudaEmulation.h"

#include <mutex>

/// atomicMin on the host: the block's threads are host threads.
inline unsigned long long atomicMin(unsigned long long *word,
                                    unsigned long long value) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  unsigned long long old = *word;
  if (value < old)
    *word = value;
  return old;
}

/// The device's min of two int64_t (CUDA's math headers declare it for
/// device code only).
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

#include "RowKernels.cuh"

#include "strata/Runtime/StrataRuntime.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <string>

namespace {

using strata::cuda::BFloat16;
using strata::cuda::Half;

/// The emulated launch of a sequence of RowKernels.cuh.
constexpr auto hostLaunch = [](auto kernel, dim3 grid, unsigned threads,
                               auto... args) {
  EXPECT_EQ(threads % 32, 0u);
  EXPECT_LE(threads, 1024u);
  emulation::runGrid(grid, threads, [&] { kernel(args...); });
  return true;
};

template <typename T> constexpr int64_t kType = STRATA_RT_F32;
template <> constexpr int64_t kType<BFloat16> = STRATA_RT_BF16;
template <> constexpr int64_t kType<Half> = STRATA_RT_F16;

float wide(float v) { return v; }
float wide(BFloat16 v) { return __bfloat162float(v); }
float wide(Half v) { return __half2float(v); }
template <typename T> T narrow(float v);
template <> float narrow(float v) { return v; }
template <> BFloat16 narrow(float v) { return __float2bfloat16_rn(v); }
template <> Half narrow(float v) { return __float2half_rn(v); }

/// `n` values in [lo, hi) of type T, the same for every run of a case.
template <typename T>
std::vector<T> draw(std::mt19937 &gen, int64_t n, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = narrow<T>(dist(gen));
  return v;
}

/// The CPU runtime's context for the reference results.
struct CpuContext {
  StrataRtContext *ctx;
  CpuContext() {
    StrataRtOptions options;
    strata_rt_default_options(&options);
    options.threads = 1;
    ctx = strata_rt_create(&options, nullptr, 0);
  }
  ~CpuContext() { strata_rt_destroy(ctx); }
  operator StrataRtContext *() const { return ctx; }
  /// The first failure of a kernel, or null.
  const char *error() const {
    int64_t site = 0;
    return strata_rt_error(ctx, &site);
  }
};

/// Every element within the GPU check's tolerance of the CPU's (`sums`:
/// f32 sums the two runtimes add in other orders, rtol 1e-4 and atol 1e-5,
/// as the GPU check's layer norm).
template <typename T>
void expectClose(const std::vector<T> &got, const std::vector<T> &want,
                 const std::string &what, bool sums = false) {
  const bool f32 = kType<T> == STRATA_RT_F32;
  const double rtol = f32                         ? (sums ? 1e-4 : 1e-5)
                      : kType<T> == STRATA_RT_F16 ? 2e-3
                                                  : 1.6e-2;
  const double atol = f32                         ? (sums ? 1e-5 : 1e-6)
                      : kType<T> == STRATA_RT_F16 ? 1e-3
                                                  : 1e-2;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = wide(got[i]), w = wide(want[i]);
    if (std::isnan(g) && std::isnan(w))
      continue;
    ASSERT_LE(std::fabs(g - w), atol + rtol * std::fabs(w))
        << what << ": element " << i << " is " << g << ", the CPU's " << w;
  }
}

/// "f32 13x7": the case's name in failures.
template <typename T> std::string name(int64_t rows, int64_t n) {
  const char *type = kType<T> == STRATA_RT_F32   ? "f32"
                     : kType<T> == STRATA_RT_F16 ? "f16"
                                                 : "bf16";
  return std::string(type) + " " + std::to_string(rows) + "x" +
         std::to_string(n);
}

template <typename T>
void checkSoftmax(int64_t rows, int64_t n, int64_t causalRows,
                  bool inPlace = false) {
  SCOPED_TRACE(name<T>(rows, n) + (causalRows ? " causal" : "") +
               (inPlace ? " in place" : ""));
  std::mt19937 gen(unsigned(rows * 1000 + n));
  const std::vector<T> x = draw<T>(gen, rows * n);
  CpuContext cpu;
  std::vector<T> want(x.size());
  strata_rt_softmax(cpu, 1, want.data(), kType<T>, x.data(), kType<T>, rows, n,
                    causalRows);
  ASSERT_EQ(cpu.error(), nullptr);
  std::vector<T> got = inPlace ? x : std::vector<T>(x.size());
  strata::cuda::launchSoftmax(hostLaunch, got.data(),
                              inPlace ? got.data() : x.data(), rows, n,
                              causalRows);
  expectClose(got, want, "softmax");

  // The gradient, from the probabilities and a drawn dy.
  const std::vector<T> dy = draw<T>(gen, rows * n);
  std::vector<T> dxWant(x.size()),
      dxGot = inPlace ? dy : std::vector<T>(x.size());
  strata_rt_softmax_grad(cpu, 2, dxWant.data(), kType<T>, want.data(), kType<T>,
                         dy.data(), kType<T>, rows, n);
  ASSERT_EQ(cpu.error(), nullptr);
  strata::cuda::launchSoftmaxGrad(hostLaunch, dxGot.data(), want.data(),
                                  inPlace ? dxGot.data() : dy.data(), rows, n);
  expectClose(dxGot, dxWant, "softmax gradient");
}

TEST(RowKernelsEmulation, Softmax) {
  checkSoftmax<float>(13, 7, 0);        // shorter than a warp
  checkSoftmax<float>(20, 24, 0, true); // in place; idle warps
  checkSoftmax<float>(9, 1024, 0);      // the longest row a warp takes
  checkSoftmax<BFloat16>(9, 1025, 0);   // the shortest a block takes
  checkSoftmax<float>(5, 1500, 0);
  checkSoftmax<float>(74, 37, 37); // causal
  checkSoftmax<Half>(40, 40, 40);
  checkSoftmax<float>(3, 1100, 1100, true);
}

template <typename T> void checkLayerNorm(int64_t rows, int64_t n) {
  SCOPED_TRACE(name<T>(rows, n));
  std::mt19937 gen(unsigned(rows * 1000 + n + 7));
  const std::vector<T> x = draw<T>(gen, rows * n, -3, 5);
  const std::vector<T> gamma = draw<T>(gen, n, 0.5, 1.5);
  const std::vector<T> beta = draw<T>(gen, n);
  const std::vector<T> dy = draw<T>(gen, rows * n);
  const double eps = 1e-5;
  CpuContext cpu;
  std::vector<T> yWant(x.size()), yGot(x.size());
  strata_rt_layer_norm(cpu, 1, yWant.data(), kType<T>, x.data(), kType<T>,
                       gamma.data(), kType<T>, beta.data(), kType<T>, rows, n,
                       eps);
  ASSERT_EQ(cpu.error(), nullptr);
  if (rows > 0) {
    strata::cuda::launchLayerNorm(hostLaunch, yGot.data(), x.data(),
                                  gamma.data(), beta.data(), rows, n, eps);
    expectClose(yGot, yWant, "layer norm", /*sums=*/true);
  }

  std::vector<T> dxWant(x.size()), dgWant(n), dbWant(n);
  strata_rt_layer_norm_grad(cpu, 2, dxWant.data(), kType<T>, dgWant.data(),
                            kType<T>, dbWant.data(), kType<T>, x.data(),
                            kType<T>, gamma.data(), kType<T>, dy.data(),
                            kType<T>, rows, n, eps);
  ASSERT_EQ(cpu.error(), nullptr);
  const strata::cuda::LayerNormGradPlan plan =
      strata::cuda::layerNormGradPlan(rows, n);
  std::vector<double> scratch((plan.bytes + 7) / 8, NAN);
  std::vector<T> dxGot(x.size()), dgGot(n, narrow<T>(NAN)),
      dbGot(n, narrow<T>(NAN));
  strata::cuda::launchLayerNormGrad(
      hostLaunch, plan, reinterpret_cast<char *>(scratch.data()), dxGot.data(),
      dgGot.data(), dbGot.data(), x.data(), gamma.data(), dy.data(), rows, n,
      eps);
  expectClose(dxGot, dxWant, "dx", /*sums=*/true);
  expectClose(dgGot, dgWant, "dgamma", /*sums=*/true);
  expectClose(dbGot, dbWant, "dbeta", /*sums=*/true);
}

TEST(RowKernelsEmulation, LayerNorm) {
  checkLayerNorm<float>(37, 24);
  checkLayerNorm<float>(9, 1025);
  checkLayerNorm<BFloat16>(19, 100);
  checkLayerNorm<Half>(11, 7);
  checkLayerNorm<float>(70, 64); // several chunks of rows for dgamma
  checkLayerNorm<float>(0, 16);  // no rows: dgamma = dbeta = 0
}

template <typename T, typename I>
void checkCrossEntropy(int64_t rows, int64_t vocab, int64_t badRow = -1) {
  SCOPED_TRACE(name<T>(rows, vocab) + (sizeof(I) == 8 ? " i64" : " i32") +
               (badRow >= 0 ? " bad label" : ""));
  std::mt19937 gen(unsigned(rows * 1000 + vocab + 3));
  const std::vector<T> logits = draw<T>(gen, rows * vocab, -4, 4);
  std::vector<I> labels(rows);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  for (I &l : labels)
    l = I(pick(gen));
  if (badRow >= 0)
    labels[badRow] = I(vocab + 5);
  CpuContext cpu;
  const int64_t labelType = sizeof(I) == 8 ? STRATA_RT_I64 : STRATA_RT_I32;
  float lossWant = NAN;
  strata_rt_cross_entropy(cpu, 1, &lossWant, STRATA_RT_F32, logits.data(),
                          kType<T>, labels.data(), labelType, rows, vocab);
  const char *cpuError = cpu.error();
  std::vector<double> perRow(rows, NAN);
  unsigned long long error = strata::cuda::kNoError;
  float lossGot = NAN;
  strata::cuda::launchCrossEntropy(hostLaunch, &lossGot, perRow.data(), &error,
                                   logits.data(), labels.data(), rows, vocab);
  if (badRow >= 0) {
    // The CPU fails the step; the device reports the first bad label.
    ASSERT_NE(cpuError, nullptr);
    EXPECT_EQ(error, strata::cuda::badIdWord(badRow, vocab + 5));
    return;
  }
  ASSERT_EQ(cpuError, nullptr);
  EXPECT_EQ(error, strata::cuda::kNoError);
  expectClose(std::vector<float>{lossGot}, std::vector<float>{lossWant},
              "loss");

  const float dloss = 0.75f;
  std::vector<T> dWant(logits.size()), dGot(logits.size());
  strata_rt_cross_entropy_grad(cpu, 2, dWant.data(), kType<T>, logits.data(),
                               kType<T>, labels.data(), labelType, &dloss,
                               STRATA_RT_F32, rows, vocab);
  ASSERT_EQ(cpu.error(), nullptr);
  strata::cuda::launchCrossEntropyGrad(hostLaunch, dGot.data(), logits.data(),
                                       labels.data(), &dloss, rows, vocab);
  expectClose(dGot, dWant, "dlogits");
}

TEST(RowKernelsEmulation, CrossEntropy) {
  checkCrossEntropy<float, int32_t>(37, 50);
  checkCrossEntropy<float, int64_t>(5, 1500);
  checkCrossEntropy<BFloat16, int32_t>(9, 300);
  checkCrossEntropy<Half, int64_t>(6, 40);
  checkCrossEntropy<float, int32_t>(8, 20, /*badRow=*/3);
}

} // namespace
