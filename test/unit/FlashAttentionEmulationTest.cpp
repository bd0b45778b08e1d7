//===- FlashAttentionEmulationTest.cpp - The flash kernels on the host ---===//
//
// Runs the CUDA runtime's flash attention kernels (runtime/cuda/
// FlashAttention.cuh) on the host, without a GPU: each block's 128 threads
// are host threads, __syncthreads and __syncwarp barriers, warp shuffles go
// through memory, and mma.sync m16n8k16 and ldmatrix are emulated as PTX
// defines them: each lane hands its operand registers (or its row address)
// to the warp, and each lane's accumulators (or loaded registers) are
// computed from what the 32 lanes handed over, in PTX's fragment layouts
// (written out here independently of the kernels' own indexing), so a
// kernel that puts an element in the wrong register or lane gets a wrong
// result. Blocks run one after another over one shared-memory array,
// filled with NaNs before each block so that a read of memory the block
// never wrote spoils the result.
// The outputs are compared with a direct double-precision attention on the
// same rounded inputs and the same dropout mask, at the GPU check's bf16
// and f16 tolerances.
//
// What this cannot show: that the hardware's layout is the one written
// here, bank conflicts, alignment faults, speed. The GPU check (test/gpu)
// runs the same kernels on a device.
//
//===----------------------------------------------------------------------===//

#define STRATA_CUDA_EMULATION 1

#include "CudaEmulation.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

/// One half of an operand register as a float: element `half` (0: the low
/// 16 bits) of type T.
template <typename T> float operandElement(uint32_t reg, int half) {
  const uint16_t bits = uint16_t(reg >> (16 * half));
  T x;
  std::memcpy(&x, &bits, sizeof x);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}

/// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d += A B for the warp.
/// PTX's fragments (groupID = lane / 4, threadID_in_group = lane % 4):
/// A (16 x 16, row-major): a lane holds rows groupID and groupID + 8 at
/// columns 2 threadID_in_group + {0, 1} and the same + 8, registers 0..3
/// being (row, col), (row + 8, col), (row, col + 8), (row + 8, col + 8);
/// B (16 x 8, column-major): rows 2 threadID_in_group + {0, 1} (register
/// 0) and + 8 (register 1) of column groupID; C/D (16 x 8): rows groupID
/// and groupID + 8, columns 2 threadID_in_group + {0, 1}. The low half of
/// a register is the lower column (A) or row (B).
template <typename T>
void emulatedMma(float (&d)[4], const uint32_t (&a)[4],
                 const uint32_t (&b)[2]) {
  emulation::Block &blk = *emulation::block;
  const unsigned warp = threadIdx.x / 32 * 32, lane = threadIdx.x % 32;
  blk.a[warp + lane] = {a[0], a[1], a[2], a[3]};
  blk.b[warp + lane] = {b[0], b[1]};
  __syncwarp();
  auto A = [&](int row, int k) {
    const int holder = row % 8 * 4 + k % 8 / 2, reg = row / 8 + 2 * (k / 8);
    return operandElement<T>(blk.a[warp + holder][reg], k % 2);
  };
  auto B = [&](int k, int col) {
    const int holder = col * 4 + k % 8 / 2, reg = k / 8;
    return operandElement<T>(blk.b[warp + holder][reg], k % 2);
  };
  const int group = int(lane) / 4, inGroup = int(lane) % 4;
  float result[4];
  for (int e = 0; e < 4; ++e) {
    const int row = group + 8 * (e / 2), col = 2 * inGroup + e % 2;
    float sum = d[e];
    for (int k = 0; k < 16; ++k)
      sum += A(row, k) * B(k, col);
    result[e] = sum;
  }
  __syncwarp(); // every lane has read the warp's registers
  for (int e = 0; e < 4; ++e)
    d[e] = result[e];
}

namespace strata::cuda {
/// The one block's shared memory (blocks run one at a time).
alignas(128) char shared[192 * 1024];
} // namespace strata::cuda

namespace emulation {
/// Whether cp.async copies land at once instead of at the thread's wait
/// (a copy into a buffer other warps still read then spoils their
/// products).
bool immediateCopies = false;

/// Ends the test binary, loudly, on what the hardware would fault on.
void require(bool ok, const char *what) {
  if (ok)
    return;
  std::fprintf(stderr, "emulation: %s\n", what);
  std::abort();
}
bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
bool inShared(const void *p, size_t bytes) {
  auto *c = static_cast<const char *>(p);
  return c >= strata::cuda::shared &&
         c + bytes <= strata::cuda::shared + sizeof(strata::cuda::shared);
}
} // namespace emulation

namespace emulation {
/// A thread's cp.async copies not yet waited for.
struct AsyncCopy {
  void *to;
  const void *from;
  bool valid;
};
thread_local std::vector<AsyncCopy> pendingCopies;
} // namespace emulation

/// cp.async.wait_all: the thread's copies, in order.
void emulatedAsyncWait() {
  for (const emulation::AsyncCopy &c : emulation::pendingCopies) {
    if (c.valid)
      std::memcpy(c.to, c.from, 16);
    else
      std::memset(c.to, 0, 16);
  }
  emulation::pendingCopies.clear();
}

/// cp.async of 16 bytes, deferred to the thread's next wait: a kernel that
/// reads its destination before waiting (and a block barrier) reads the
/// NaNs the shared memory starts with.
void emulatedAsyncCopy16(void *to, const void *from, bool valid) {
  emulation::require(emulation::aligned16(to) && emulation::aligned16(from),
                     "cp.async with an address not 16-byte aligned");
  emulation::require(emulation::inShared(to, 16),
                     "cp.async to memory outside the block's shared memory");
  emulation::pendingCopies.push_back({to, from, valid});
  if (emulation::immediateCopies)
    emulatedAsyncWait();
}

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for the warp: lanes
/// 8 m .. 8 m + 7 give the addresses of rows 0 .. 7 of matrix m (8 16-bit
/// elements each); lane l receives in register m matrix m's elements (row
/// l / 4, columns 2 (l % 4) and 2 (l % 4) + 1), or with .trans (rows 2 (l %
/// 4) and 2 (l % 4) + 1, column l / 4), the first in the low half.
template <bool trans, typename T>
void emulatedLoadMatrices(uint32_t (&r)[4], const T *row) {
  static_assert(sizeof(T) == 2);
  emulation::Block &blk = *emulation::block;
  const unsigned warp = threadIdx.x / 32 * 32, lane = threadIdx.x % 32;
  emulation::require(emulation::aligned16(row) && emulation::inShared(row, 16),
                     "ldmatrix row address not 16-byte aligned in shared "
                     "memory");
  blk.rows[warp + lane] = reinterpret_cast<const uint16_t *>(row);
  __syncwarp();
  const unsigned g = lane / 4, c = 2 * (lane % 4);
  for (unsigned m = 0; m < 4; ++m) {
    const uint16_t *const *matrix = &blk.rows[warp + 8 * m];
    const uint16_t lo = trans ? matrix[c][g] : matrix[g][c],
                   hi = trans ? matrix[c + 1][g] : matrix[g][c + 1];
    r[m] = uint32_t(lo) | uint32_t(hi) << 16;
  }
  __syncwarp(); // every lane has read the warp's addresses
}

#include "FlashAttention.cuh"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <random>

namespace {
using strata::AttentionLayout;
using strata::cuda::AttentionDropout;

/// Runs `kernel` over (slices, blocks of 64 rows), a block at a time.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), size_t sharedBytes, int64_t slices,
            int64_t rows, Args... args) {
  ASSERT_LE(sharedBytes, sizeof(strata::cuda::shared));
  const unsigned blocks = unsigned((rows + 63) / 64);
  for (unsigned y = 0; y < blocks; ++y)
    for (unsigned x = 0; x < unsigned(slices); ++x) {
      const float nan = NAN;
      for (size_t i = 0; i + sizeof(float) <= sharedBytes; i += sizeof(float))
        std::memcpy(strata::cuda::shared + i, &nan, sizeof(float));
      std::atomic<bool> unfinished{false};
      emulation::runBlock(dim3(unsigned(slices), blocks), {x, y, 0},
                          unsigned(strata::cuda::kFlashThreads), [&] {
                            kernel(args...);
                            // A copy still pending would land in the next
                            // block's memory.
                            if (!emulation::pendingCopies.empty())
                              unfinished = true;
                          });
      ASSERT_FALSE(unfinished) << "a thread ended with cp.async copies "
                                  "it never waited for";
    }
}

float toF(float v) { return v; }
float toF(__nv_bfloat16 v) { return __bfloat162float(v); }
float toF(__half v) { return __half2float(v); }
template <typename T> T fromF(float v);
template <> __nv_bfloat16 fromF(float v) { return __float2bfloat16_rn(v); }
template <> __half fromF(float v) { return __float2half_rn(v); }

struct Case {
  int64_t batch, heads, s, t, d, dv;
  bool causal;
  double dropout;
  int64_t kvHeads = 0; // grouped-query attention; 0: `heads`
};

/// Attention in double on the rounded inputs: the output, log-sum-exp and
/// the three gradients, as the CPU runtime defines them.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};
Reference reference(const Case &c, const AttentionLayout &at,
                    const AttentionDropout &drop, const std::vector<float> &q,
                    const std::vector<float> &k, const std::vector<float> &v,
                    const std::vector<float> &dout, double scale) {
  const int64_t slices = c.batch * c.heads, kvSlices = c.batch * at.kvHeads;
  Reference r;
  r.out.assign(slices * c.s * c.dv, 0);
  r.lse.assign(slices * c.s, 0);
  r.dq.assign(slices * c.s * c.d, 0);
  r.dk.assign(kvSlices * c.t * c.d, 0);
  r.dv.assign(kvSlices * c.t * c.dv, 0);
  for (int64_t bh = 0; bh < slices; ++bh)
    for (int64_t i = 0; i < c.s; ++i) {
      const int64_t seen = c.causal ? std::min(i + 1, c.t) : c.t;
      std::vector<double> x(seen), p(seen), m(seen), dp(seen);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(q[at.query(bh, i) + e]) * k[at.key(bh, j) + e];
        x[j] = scale * dot;
        mx = std::max(mx, x[j]);
      }
      for (int64_t j = 0; j < seen; ++j)
        sum += std::exp(x[j] - mx);
      r.lse[at.lse(bh, i)] = mx + std::log(sum);
      for (int64_t j = 0; j < seen; ++j) {
        p[j] = std::exp(x[j] - mx) / sum;
        m[j] = drop(bh, i, j);
        for (int64_t e = 0; e < c.dv; ++e)
          r.out[at.output(bh, i) + e] += p[j] * m[j] * v[at.value(bh, j) + e];
      }
      double delta = 0;
      for (int64_t e = 0; e < c.dv; ++e)
        delta +=
            double(dout[at.output(bh, i) + e]) * r.out[at.output(bh, i) + e];
      for (int64_t j = 0; j < seen; ++j) {
        dp[j] = 0;
        for (int64_t e = 0; e < c.dv; ++e) {
          dp[j] += double(dout[at.output(bh, i) + e]) * v[at.value(bh, j) + e];
          r.dv[at.value(bh, j) + e] += m[j] * p[j] * dout[at.output(bh, i) + e];
        }
        const double ds = scale * p[j] * (m[j] * dp[j] - delta);
        for (int64_t e = 0; e < c.d; ++e) {
          r.dq[at.query(bh, i) + e] += ds * k[at.key(bh, j) + e];
          r.dk[at.key(bh, j) + e] += ds * q[at.query(bh, i) + e];
        }
      }
    }
  return r;
}

/// The largest |got - want| / (atol + rtol |want|) (at most 1 passes).
template <typename G>
double worst(const std::vector<G> &got, const std::vector<double> &want,
             double rtol, double atol) {
  double w = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = double(toF(got[i]));
    if (std::isnan(g))
      return INFINITY;
    w = std::max(w,
                 std::fabs(g - want[i]) / (atol + rtol * std::fabs(want[i])));
  }
  return w;
}

template <typename T> void check(const Case &c, double rtol, double atol) {
  using namespace strata::cuda;
  const AttentionLayout at{c.heads, c.s,  c.t,
                           c.d,     c.dv, c.kvHeads ? c.kvHeads : c.heads};
  const int64_t slices = c.batch * c.heads, kvSlices = c.batch * at.kvHeads;
  const double scale = 1 / std::sqrt(double(c.d));
  const AttentionDropout drop{
      c.dropout,
      c.dropout > 0 ? float(1 / (1 - c.dropout)) : 1.0f,
      /*seed=*/1234,
      /*key=*/7,
      strata::rng::dropoutOffset(0, 2, 1, slices * c.s * c.t),
      at};
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto draw = [&](int64_t n, std::vector<T> &low, std::vector<float> &wide) {
    low.resize(n);
    wide.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      low[i] = fromF<T>(dist(gen));
      wide[i] = toF(low[i]);
    }
  };
  std::vector<T> q, k, v, dout;
  std::vector<float> qf, kf, vf, doutf;
  draw(slices * c.s * c.d, q, qf);
  draw(kvSlices * c.t * c.d, k, kf);
  draw(kvSlices * c.t * c.dv, v, vf);
  draw(slices * c.s * c.dv, dout, doutf);
  const Reference want = reference(c, at, drop, qf, kf, vf, doutf, scale);

  std::vector<T> out(slices * c.s * c.dv);
  std::vector<float> lse(slices * c.s);
  withFlashWidth(at, [&](auto width) {
    constexpr int D = decltype(width)::value;
    launch(flashForward<T, D>, flashForwardBytes<T>(at), slices, c.s,
           out.data(), lse.data(), static_cast<const T *>(q.data()),
           static_cast<const T *>(k.data()), static_cast<const T *>(v.data()),
           at, float(scale), c.causal, drop);
  });
  EXPECT_LE(worst(out, want.out, rtol, atol), 1.0) << "output";
  EXPECT_LE(worst(lse, want.lse, 1e-5, 1e-5), 1.0) << "log-sum-exp";

  // delta from the kernel's own output, as attentionDelta computes it.
  std::vector<float> delta(slices * c.s);
  for (int64_t bh = 0; bh < slices; ++bh)
    for (int64_t i = 0; i < c.s; ++i) {
      float sum = 0;
      for (int64_t e = 0; e < c.dv; ++e)
        sum += toF(dout[at.output(bh, i) + e]) * toF(out[at.output(bh, i) + e]);
      delta[bh * c.s + i] = sum;
    }
  std::vector<T> dq(q.size()), dk(k.size()), dv(v.size());
  withFlashWidth(at, [&](auto width) {
    constexpr int D = decltype(width)::value;
    launch(flashGradKeys<T, D>, flashGradBytes<T>(at), kvSlices, c.t, dk.data(),
           dv.data(), static_cast<const T *>(q.data()),
           static_cast<const T *>(k.data()), static_cast<const T *>(v.data()),
           static_cast<const T *>(dout.data()),
           static_cast<const float *>(lse.data()),
           static_cast<const float *>(delta.data()), at, float(scale), c.causal,
           drop);
    launch(flashGradQueries<T, D>, flashGradBytes<T>(at), slices, c.s,
           dq.data(), static_cast<const T *>(q.data()),
           static_cast<const T *>(k.data()), static_cast<const T *>(v.data()),
           static_cast<const T *>(dout.data()),
           static_cast<const float *>(lse.data()),
           static_cast<const float *>(delta.data()), at, float(scale), c.causal,
           drop);
  });
  EXPECT_LE(worst(dq, want.dq, rtol, atol), 1.0) << "dq";
  EXPECT_LE(worst(dk, want.dk, rtol, atol), 1.0) << "dk";
  EXPECT_LE(worst(dv, want.dv, rtol, atol), 1.0) << "dv";
}

// The GPU check's tolerances (kernel_check): bf16 1.6e-2 / 1e-2, f16 2e-3
// / 1e-3.
TEST(FlashAttentionEmulation, Bf16CausalDropoutOverSeveralBlocks) {
  // Head size 64 (GPT-2's), three blocks of queries and keys, the last
  // partial; dropout on the probabilities.
  check<__nv_bfloat16>({2, 2, 130, 130, 64, 64, true, 0.1}, 1.6e-2, 1e-2);
}

TEST(FlashAttentionEmulation, Bf16CausalCopiesLandingAtOnce) {
  // cp.async copies that complete as soon as they are issued: a block's
  // copy into a buffer some warp still computes with would spoil it.
  emulation::immediateCopies = true;
  check<__nv_bfloat16>({1, 2, 200, 200, 64, 64, true, 0}, 1.6e-2, 1e-2);
  emulation::immediateCopies = false;
}

TEST(FlashAttentionEmulation, F16CrossWithPaddedHeadSizes) {
  // More keys than queries, head sizes 24 and 40 (padded to 32 and 48).
  check<__half>({1, 2, 70, 150, 24, 40, false, 0}, 2e-3, 1e-3);
}

TEST(FlashAttentionEmulation, F16CrossOverWholeBlocks) {
  // Whole blocks of 64 queries and keys, no mask and no dropout: no block
  // tests its scores one by one.
  check<__half>({1, 2, 128, 192, 64, 64, false, 0}, 2e-3, 1e-3);
}

TEST(FlashAttentionEmulation, F16CausalWithHeadSizesOffTheVectorWidth) {
  // Head sizes 12 and 20: rows are not whole 16-byte vectors, so the tiles
  // load an element at a time.
  check<__half>({1, 2, 70, 90, 12, 20, true, 0.1}, 2e-3, 1e-3);
}

TEST(FlashAttentionEmulation, Bf16CausalWithFewerKeys) {
  // Causal with fewer keys than queries: later queries see every key.
  check<__nv_bfloat16>({1, 3, 90, 40, 16, 16, true, 0.2}, 1.6e-2, 1e-2);
}

TEST(FlashAttentionEmulation, Bf16CausalWithKeysPastTheQueries) {
  // Causal with more keys than queries: the key blocks from 64 on are past
  // every query, and their dK and dV are zeros.
  check<__nv_bfloat16>({1, 2, 40, 200, 64, 64, true, 0}, 1.6e-2, 1e-2);
}

TEST(FlashAttentionEmulation, Bf16CrossWithWideUnequalHeadSizes) {
  // Head sizes 72 and 96: the wide accumulators, partly used, and a value
  // head size other than the query's.
  check<__nv_bfloat16>({1, 2, 70, 100, 72, 96, false, 0.1}, 1.6e-2, 1e-2);
}

TEST(FlashAttentionEmulation, F16CausalHeadSize128) {
  // Head size 128: the largest tiles the flash kernels take, and their
  // wider accumulators.
  check<__half>({1, 2, 130, 130, 128, 128, true, 0.1}, 2e-3, 1e-3);
}

TEST(FlashAttentionEmulation, Bf16CausalGroupedQueryHeads) {
  // Grouped-query attention: two key and value heads, each read by two
  // query heads; their gradients sum over the group (the key blocks' loop
  // runs through each query head's blocks in turn).
  check<__nv_bfloat16>({1, 4, 130, 130, 64, 64, true, 0.1, 2}, 1.6e-2, 1e-2);
}

TEST(FlashAttentionEmulation, F16CrossOneKeyHead) {
  // Every query head reads the one key and value head.
  check<__half>({1, 4, 70, 100, 32, 40, false, 0, 1}, 2e-3, 1e-3);
}
} // namespace
