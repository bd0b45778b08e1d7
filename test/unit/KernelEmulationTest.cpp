//===- KernelEmulationTest.cpp - CUDA kernels on the host -----------------===//
//
// Runs CUDA runtime kernels through the same launch sequences the runtime
// uses, on the host under CudaEmulation.h (a block's threads are host
// threads, warp shuffles go through memory, blocks run one after another),
// and compares every output with the CPU runtime's kernel on the same
// inputs, at the GPU check's tolerances (f32 rtol 1e-5, f16 2e-3, bf16
// 1.6e-2):
// - softmax, layer norm and cross-entropy with their gradients
//   (runtime/cuda/RowKernels.cuh), taking both of a row's thread groups: a
//   warp (rows of up to 1024 elements, eight a block, some blocks with idle
//   warps) and a whole block (longer rows); rows shorter than a warp, causal
//   limits, outputs that alias their inputs, bad labels;
// - the dense binary op (runtime/cuda/BinaryKernels.cuh), 16 bytes a load
//   where every operand is aligned, one element at a time otherwise, and
//   the tail past the last whole vector; in place; every element type;
// - the epilogue of a bf16 / f16 GEMM whose activation cuBLASLt cannot
//   apply (runtime/cuda/ActivationKernels.cuh), against the CPU's
//   strata_rt_gemm_aux and strata_rt_gemm.
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

#include "ActivationKernels.cuh"
#include "BinaryKernels.cuh"
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

TEST(KernelEmulation, Softmax) {
  checkSoftmax<float>(13, 7, 0);        // shorter than a warp
  checkSoftmax<float>(20, 24, 0, true); // in place; idle warps
  checkSoftmax<float>(9, 1024, 0);      // the longest row a warp takes
  checkSoftmax<BFloat16>(9, 1025, 0);   // the shortest a block takes
  checkSoftmax<float>(5, 1500, 0);
  checkSoftmax<float>(74, 37, 37); // causal
  checkSoftmax<Half>(40, 40, 40);
  checkSoftmax<float>(3, 1100, 1100, true);
}

/// Layer norm (kCentered) or RMS norm, forward and gradients.
template <bool kCentered, typename T>
void checkNormalization(int64_t rows, int64_t n) {
  SCOPED_TRACE(name<T>(rows, n) + (kCentered ? " layer norm" : " RMS norm"));
  std::mt19937 gen(unsigned(rows * 1000 + n + 7));
  const std::vector<T> x = draw<T>(gen, rows * n, -3, 5);
  const std::vector<T> gamma = draw<T>(gen, n, 0.5, 1.5);
  const std::vector<T> beta = draw<T>(gen, n);
  const std::vector<T> dy = draw<T>(gen, rows * n);
  const double eps = 1e-5;
  CpuContext cpu;
  std::vector<T> yWant(x.size()), yGot(x.size());
  if constexpr (kCentered)
    strata_rt_layer_norm(cpu, 1, yWant.data(), kType<T>, x.data(), kType<T>,
                         gamma.data(), kType<T>, beta.data(), kType<T>, rows, n,
                         eps);
  else
    strata_rt_rms_norm(cpu, 1, yWant.data(), kType<T>, x.data(), kType<T>,
                       gamma.data(), kType<T>, rows, n, eps);
  ASSERT_EQ(cpu.error(), nullptr);
  if (rows > 0) {
    strata::cuda::launchLayerNorm<kCentered>(
        hostLaunch, yGot.data(), x.data(), gamma.data(),
        kCentered ? beta.data() : nullptr, rows, n, eps);
    expectClose(yGot, yWant, "forward", /*sums=*/true);
  }

  std::vector<T> dxWant(x.size()), dgWant(n), dbWant(n);
  if constexpr (kCentered)
    strata_rt_layer_norm_grad(cpu, 2, dxWant.data(), kType<T>, dgWant.data(),
                              kType<T>, dbWant.data(), kType<T>, x.data(),
                              kType<T>, gamma.data(), kType<T>, dy.data(),
                              kType<T>, rows, n, eps);
  else
    strata_rt_rms_norm_grad(cpu, 2, dxWant.data(), kType<T>, dgWant.data(),
                            kType<T>, x.data(), kType<T>, gamma.data(),
                            kType<T>, dy.data(), kType<T>, rows, n, eps);
  ASSERT_EQ(cpu.error(), nullptr);
  const strata::cuda::LayerNormGradPlan plan =
      strata::cuda::layerNormGradPlan(rows, n);
  std::vector<double> scratch((plan.bytes + 7) / 8, NAN);
  std::vector<T> dxGot(x.size()), dgGot(n, narrow<T>(NAN)),
      dbGot(n, narrow<T>(NAN));
  strata::cuda::launchLayerNormGrad<kCentered>(
      hostLaunch, plan, reinterpret_cast<char *>(scratch.data()), dxGot.data(),
      dgGot.data(), kCentered ? dbGot.data() : nullptr, x.data(), gamma.data(),
      dy.data(), rows, n, eps);
  expectClose(dxGot, dxWant, "dx", /*sums=*/true);
  expectClose(dgGot, dgWant, "dgamma", /*sums=*/true);
  if constexpr (kCentered)
    expectClose(dbGot, dbWant, "dbeta", /*sums=*/true);
}

template <bool kCentered> void checkNormalizations() {
  checkNormalization<kCentered, float>(37, 24);
  checkNormalization<kCentered, float>(9, 1025);
  checkNormalization<kCentered, BFloat16>(19, 100);
  checkNormalization<kCentered, Half>(11, 7);
  checkNormalization<kCentered, float>(70, 64); // several chunks for dgamma
  checkNormalization<kCentered, float>(0, 16);  // no rows: dgamma = 0
}

TEST(KernelEmulation, LayerNorm) { checkNormalizations<true>(); }
TEST(KernelEmulation, RmsNorm) { checkNormalizations<false>(); }

/// Cross-entropy over `rows` rows of `width` elements (`vocab` when 0), of
/// which the first `vocab` are the classes: the padding holds NaN, which
/// neither runtime may read, and gets a zero gradient.
template <typename T, typename I>
void checkCrossEntropy(int64_t rows, int64_t vocab, int64_t badRow = -1,
                       int64_t gradOffset = 0, int64_t width = 0) {
  width = width ? width : vocab;
  SCOPED_TRACE(name<T>(rows, vocab) + (sizeof(I) == 8 ? " i64" : " i32") +
               (badRow >= 0 ? " bad label" : "") +
               (gradOffset ? " gradient offset" : "") +
               (width != vocab ? " in rows of " + std::to_string(width) : ""));
  std::mt19937 gen(unsigned(rows * 1000 + vocab + 3));
  std::vector<T> logits = draw<T>(gen, rows * width, -4, 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = vocab; j < width; ++j)
      logits[r * width + j] = narrow<T>(NAN);
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
                          kType<T>, labels.data(), labelType, rows, vocab,
                          width);
  const char *cpuError = cpu.error();
  std::vector<double> perRow(rows, NAN);
  unsigned long long error = strata::cuda::kNoError;
  float lossGot = NAN;
  strata::cuda::launchCrossEntropy(hostLaunch, &lossGot, perRow.data(), &error,
                                   logits.data(), labels.data(), rows, vocab,
                                   width);
  if (badRow >= 0) {
    // The CPU fails the step; the device reports the first bad label.
    ASSERT_NE(cpuError, nullptr);
    EXPECT_EQ(error, strata::cuda::badIdWord(badRow, vocab + 5));
    return;
  }
  ASSERT_EQ(cpuError, nullptr);
  EXPECT_EQ(error, strata::cuda::kNoError);
  EXPECT_FALSE(std::isnan(lossWant));
  expectClose(std::vector<float>{lossGot}, std::vector<float>{lossWant},
              "loss");

  const float dloss = 0.75f;
  // (dlogits `gradOffset` elements into its buffer: aligned unlike the
  // logits; the buffers start as 1s, which the padding's zeros replace.)
  std::vector<T> dWant(logits.size(), narrow<T>(1.0f)),
      dBuffer(logits.size() + gradOffset, narrow<T>(1.0f));
  T *dGot = dBuffer.data() + gradOffset;
  strata_rt_cross_entropy_grad(cpu, 2, dWant.data(), kType<T>, logits.data(),
                               kType<T>, labels.data(), labelType, &dloss,
                               STRATA_RT_F32, rows, vocab, width);
  ASSERT_EQ(cpu.error(), nullptr);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = vocab; j < width; ++j)
      ASSERT_EQ(wide(dWant[r * width + j]), 0.0f);
  strata::cuda::launchCrossEntropyGrad(hostLaunch, dGot, logits.data(),
                                       labels.data(), &dloss, rows, vocab,
                                       width);
  expectClose(std::vector<T>(dGot, dGot + logits.size()), dWant, "dlogits");

  // In place (the memory plan may give the gradient the logits' buffer):
  // the same bits.
  std::vector<T> inPlace = logits;
  strata::cuda::launchCrossEntropyGrad(hostLaunch, inPlace.data(),
                                       inPlace.data(), labels.data(), &dloss,
                                       rows, vocab, width);
  EXPECT_EQ(std::memcmp(inPlace.data(), dGot, logits.size() * sizeof(T)), 0)
      << "in place";
}

TEST(KernelEmulation, CrossEntropy) {
  checkCrossEntropy<float, int32_t>(37, 50);
  checkCrossEntropy<float, int64_t>(5, 1500);
  checkCrossEntropy<BFloat16, int32_t>(9, 300);
  checkCrossEntropy<Half, int64_t>(6, 40);
  checkCrossEntropy<float, int32_t>(8, 20, /*badRow=*/3);
  // An odd vocabulary (rows starting at every even offset of 16 bytes:
  // each block reads a head, 16-byte vectors and a tail), and its gradient
  // aligned unlike the logits (one element at a time).
  checkCrossEntropy<BFloat16, int32_t>(9, 1001);
  checkCrossEntropy<Half, int64_t>(5, 1001, -1, /*gradOffset=*/1);
  // Padded rows (a padded LM head's logits): GPT-2's vocabulary in rows of
  // a multiple of 64, and rows whose padding starts mid-vector.
  checkCrossEntropy<BFloat16, int32_t>(3, 50257, -1, 0, /*width=*/50304);
  checkCrossEntropy<float, int64_t>(4, 333, -1, 0, /*width=*/340);
  checkCrossEntropy<Half, int32_t>(5, 1001, -1, /*gradOffset=*/1,
                                   /*width=*/1008);
  checkCrossEntropy<float, int32_t>(5, 333);
}

/// out = a (op) b on `n` dense elements at element offsets `offset` (0:
/// 16-byte aligned; else the path one element at a time), in place when
/// `inPlace` (out is a).
template <typename T>
void checkBinary(int64_t op, int64_t n, int64_t offset, bool inPlace) {
  SCOPED_TRACE(std::string("op ") + std::to_string(op) + " n " +
               std::to_string(n) + " offset " + std::to_string(offset) +
               (inPlace ? " in place" : ""));
  std::mt19937 gen(unsigned(op * 100000 + n * 10 + offset));
  // Operands away from 0 (a quotient of them is finite).
  std::vector<T> a(n + offset), b(n + offset);
  std::uniform_int_distribution<int> pick(1, 9);
  for (int64_t i = 0; i < n + offset; ++i) {
    if constexpr (std::is_integral_v<T>) {
      a[i] = T(pick(gen) * 7);
      b[i] = T(pick(gen));
    } else {
      a[i] = narrow<T>(float(pick(gen)) * 0.37f);
      b[i] = narrow<T>(float(pick(gen)) * -0.61f);
    }
  }
  const int64_t type = std::is_same_v<T, int32_t>   ? int64_t(STRATA_RT_I32)
                       : std::is_same_v<T, int64_t> ? int64_t(STRATA_RT_I64)
                                                    : kType<T>;
  std::vector<T> want(n + offset);
  const int64_t desc[3] = {n, 1, 1};
  CpuContext cpu;
  strata_rt_binary(cpu, 1, op, want.data() + offset, type, a.data() + offset,
                   type, b.data() + offset, type, 1, desc);
  ASSERT_EQ(cpu.error(), nullptr);
  std::vector<T> got = inPlace ? a : std::vector<T>(n + offset);
  T *out = got.data() + offset;
  strata::cuda::launchBinaryFlat(hostLaunch, op, out,
                                 inPlace ? static_cast<const T *>(out)
                                         : a.data() + offset,
                                 b.data() + offset, n);
  // The same arithmetic on both: every element equal.
  for (int64_t i = 0; i < n; ++i) {
    double g, w;
    if constexpr (std::is_integral_v<T>) {
      g = double(got[offset + i]);
      w = double(want[offset + i]);
    } else {
      g = wide(got[offset + i]);
      w = wide(want[offset + i]);
    }
    ASSERT_EQ(g, w) << "element " << i;
  }
}

TEST(KernelEmulation, DenseBinary) {
  for (int64_t op :
       {STRATA_RT_ADD, STRATA_RT_SUB, STRATA_RT_MUL, STRATA_RT_DIV}) {
    checkBinary<float>(op, 1003, 0, false); // vectors, then a tail of 3
    checkBinary<float>(op, 1003, 1, false); // unaligned: one at a time
    checkBinary<float>(op, 64, 0, true);
  }
  checkBinary<BFloat16>(STRATA_RT_MUL, 77, 0, false); // 8 a vector
  checkBinary<BFloat16>(STRATA_RT_ADD, 77, 3, true);
  checkBinary<Half>(STRATA_RT_DIV, 21, 0, true);
  checkBinary<int32_t>(STRATA_RT_MUL, 18, 0, false);
  checkBinary<int64_t>(STRATA_RT_SUB, 9, 1, false);
  checkBinary<float>(STRATA_RT_ADD, 3, 0, false); // no whole vector
}

/// The epilogue of a bf16 / f16 GEMM with an activation cuBLASLt cannot
/// apply: from the product's f32 sums, aux = sums + bias and out =
/// act(sums + bias), each rounded once, as the CPU's gemm_aux (`aux`) or
/// gemm computes them. The operands are multiples of 1/64 in [-1, 1]
/// (bf16 and f16 values), so the sums are exact in any order and aux is
/// equal to the bit; the pre-activations have more bits than bf16 or f16
/// keeps, so an activation of the rounded aux would differ.
template <typename T>
void checkSumsEpilogue(int64_t m, int64_t n, int64_t act, bool bias, bool aux) {
  SCOPED_TRACE(name<T>(m, n) + " act " + std::to_string(act) +
               (bias ? " bias" : "") + (aux ? " aux" : ""));
  const int64_t k = 29;
  std::mt19937 gen(unsigned(m * 1000 + n * 10 + act));
  std::uniform_int_distribution<int> pick(-64, 64);
  auto draw64ths = [&](int64_t count) {
    std::vector<T> v(count);
    for (T &x : v)
      x = narrow<T>(float(pick(gen)) / 64);
    return v;
  };
  const std::vector<T> a = draw64ths(m * k), b = draw64ths(k * n),
                       biasValues = draw64ths(n);
  std::vector<float> sums(m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        sums[i * n + j] += wide(a[i * k + p]) * wide(b[p * n + j]);

  CpuContext cpu;
  const T *biasData = bias ? biasValues.data() : nullptr;
  std::vector<T> outWant(m * n), auxWant(m * n);
  if (aux)
    strata_rt_gemm_aux(cpu, 1, m, n, k, a.data(), kType<T>, 0, b.data(),
                       kType<T>, 0, outWant.data(), kType<T>, auxWant.data(),
                       kType<T>, biasData, kType<T>, act);
  else
    strata_rt_gemm(cpu, 1, 1, m, n, k, a.data(), kType<T>, 0, 0, b.data(),
                   kType<T>, 0, 0, outWant.data(), kType<T>, biasData, kType<T>,
                   act, 0);
  ASSERT_EQ(cpu.error(), nullptr);

  std::vector<T> outGot(m * n), auxGot(m * n);
  strata::cuda::launchSumsEpilogue(hostLaunch, outGot.data(),
                                   aux ? auxGot.data() : nullptr, sums.data(),
                                   biasData, m, n, act);
  if (aux)
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_EQ(wide(auxGot[i]), wide(auxWant[i])) << "aux element " << i;
  expectClose(outGot, outWant, "activation");
  // The activation's f32 formulas differ in their last bits between the
  // CPU's vector code and the device's, relatively most where GELU is tiny
  // (its negative tail): elsewhere equal to the bit but rarely.
  int64_t large = 0, same = 0;
  for (int64_t i = 0; i < m * n; ++i)
    if (std::fabs(wide(outWant[i])) >= 1.0 / 16) {
      ++large;
      same += wide(outGot[i]) == wide(outWant[i]);
    }
  EXPECT_GE(double(same), 0.99 * double(large));
}

TEST(KernelEmulation, GemmSumsEpilogue) {
  checkSumsEpilogue<BFloat16>(37, 48, STRATA_RT_ACT_GELU_ERF, true, true);
  checkSumsEpilogue<BFloat16>(9, 45, STRATA_RT_ACT_GELU_TANH, true, true);
  checkSumsEpilogue<Half>(11, 300, STRATA_RT_ACT_SILU, false, true);
  checkSumsEpilogue<BFloat16>(13, 64, STRATA_RT_ACT_GELU_ERF, true, false);
  checkSumsEpilogue<Half>(7, 33, STRATA_RT_ACT_GELU_ERF, false, false);
}

} // namespace
