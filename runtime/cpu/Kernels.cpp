//===- Kernels.cpp - CPU kernels of the runtime C ABI ---------------------===//
//
// Loops the compiler vectorises, parallel over independent rows or
// elements (OpenMP, static schedule). Every reduction runs in a fixed order
// (or over fixed-size chunks summed in order), so results do not depend on
// the thread count. Long sums accumulate in double.
//
// This file is compiled three times: for baseline x86-64 under the ABI's
// names, and with AVX2 + FMA and with AVX-512 under the same names suffixed
// `_avx2` and `_avx512` (STRATA_RT_VARIANT); strata_rt_symbols() hands the
// JIT the widest set the processor has. An object file linked by name gets
// the baseline. Code written with AVX2 intrinsics (#ifdef __AVX2__) serves
// both vector builds.
//
//===----------------------------------------------------------------------===//

#include "Context.h"

#define STRATA_RT_CONCAT_(a, b) a##b
#define STRATA_RT_CONCAT(a, b) STRATA_RT_CONCAT_(a, b)
#ifndef STRATA_RT_VARIANT
#define STRATA_RT_VARIANT
#endif
#define STRATA_RT_KERNEL(name) STRATA_RT_CONCAT(name, STRATA_RT_VARIANT)

#include "../common/Activations.h"
#include "../common/AttentionLayout.h"
#include "../common/LowPrecision.h"
#include "../common/StrataRandom.h"
#include "DotBf16.h"
#include "Transpose.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <memory>
#include <omp.h>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using strata::cpu::BFloat16;
using strata::cpu::ComputeType;
using strata::cpu::Half;
using strata::cpu::narrow;
using strata::cpu::widen;
using strata::cpu::withFloatType;

namespace {

/// Parallelise loops of at least this many elements.
constexpr int64_t kParallelGrain = 1 << 14;

using namespace strata::act;

int64_t readInt(const void *p, int64_t dtype, int64_t i) {
  if (dtype == STRATA_RT_I32)
    return static_cast<const int32_t *>(p)[i];
  return static_cast<const int64_t *>(p)[i];
}

/// Offsets of the first element of row `row` (all dimensions but the last)
/// for up to three stride sets over `shape`.
template <int N>
void rowOffsets(int64_t row, int64_t rank, const int64_t *shape,
                const int64_t *const (&strides)[N], int64_t (&offsets)[N]) {
  for (int j = 0; j < N; ++j)
    offsets[j] = 0;
  for (int64_t d = rank - 2; d >= 0; --d) {
    int64_t coord = row % shape[d];
    row /= shape[d];
    for (int j = 0; j < N; ++j)
      offsets[j] += coord * strides[j][d];
  }
}

/// Low-precision elementwise kernels run their f32 loop on blocks widened
/// into f32 buffers on the stack, so that the loop vectorises as for f32.
constexpr int64_t kBlock = 512;

/// x (op) y in the compute type of T (f32 for bf16 and f16), rounded to T.
template <int Op, typename T> inline T applyOp(T tx, T ty) {
  using C = ComputeType<T>;
  C x = C(tx), y = C(ty);
  if constexpr (Op == STRATA_RT_ADD)
    return T(x + y);
  else if constexpr (Op == STRATA_RT_SUB)
    return T(x - y);
  else if constexpr (Op == STRATA_RT_MUL)
    return T(x * y);
  else
    return T(x / y);
}

/// out = a (op) b on `n` contiguous elements of a low-precision type T, `a`
/// or `b` (stride 0) possibly one element: widened in blocks, computed in
/// f32, rounded once.
template <int Op, typename T>
void binaryBlocks(T *out, const T *a, int64_t ia, const T *b, int64_t ib,
                  int64_t n) {
  float x[kBlock], y[kBlock], z[kBlock];
  for (int64_t s = 0; s < n; s += kBlock) {
    int64_t m = std::min(kBlock, n - s);
    if (ia)
      widen(x, a + s, m);
    else
      std::fill(x, x + m, float(a[0]));
    if (ib)
      widen(y, b + s, m);
    else
      std::fill(y, y + m, float(b[0]));
#pragma omp simd
    for (int64_t j = 0; j < m; ++j)
      z[j] = applyOp<Op>(x[j], y[j]);
    narrow(out + s, z, m);
  }
}

/// One op, known at compile time, so that the inner loops vectorise.
template <int Op, typename T>
void binaryLoop(T *out, const T *a, const T *b, int64_t rank,
                const int64_t *desc) {
  constexpr bool kLow = !std::is_same_v<ComputeType<T>, T>;
  const int64_t *shape = desc, *sa = desc + rank, *sb = desc + 2 * rank;
  int64_t n = 1;
  for (int64_t d = 0; d < rank; ++d)
    n *= shape[d];
  // Contiguous operands: one flat loop.
  bool flatA = true, flatB = true;
  for (int64_t d = rank - 1, s = 1; d >= 0; s *= shape[d], --d) {
    flatA &= sa[d] == s || shape[d] == 1;
    flatB &= sb[d] == s || shape[d] == 1;
  }
  if (rank == 0 || (flatA && flatB)) {
    if constexpr (kLow) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
      for (int64_t s = 0; s < n; s += kBlock)
        binaryBlocks<Op>(out + s, a + s, 1, b + s, 1, std::min(kBlock, n - s));
      return;
    }
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyOp<Op>(a[i], b[i]);
    return;
  }
  int64_t inner = shape[rank - 1], rows = n / std::max<int64_t>(inner, 1);
  int64_t ia = sa[rank - 1], ib = sb[rank - 1];
  const int64_t *const strides[2] = {sa, sb};
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off[2];
    rowOffsets<2>(r, rank, shape, strides, off);
    T *o = out + r * inner;
    const T *pa = a + off[0], *pb = b + off[1];
    if constexpr (kLow) {
      if ((ia == 0 || ia == 1) && (ib == 0 || ib == 1)) {
        binaryBlocks<Op>(o, pa, ia, pb, ib, inner);
        continue;
      }
    }
    if (ia == 1 && ib == 1) {
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j)
        o[j] = applyOp<Op>(pa[j], pb[j]);
    } else if (ia == 1 && ib == 0) {
      T y = pb[0];
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j)
        o[j] = applyOp<Op>(pa[j], y);
    } else if (ia == 0 && ib == 1) { // (a row's one value of A: x * rms)
      T x = pa[0];
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j)
        o[j] = applyOp<Op>(x, pb[j]);
    } else {
      for (int64_t j = 0; j < inner; ++j)
        o[j] = applyOp<Op>(pa[j * ia], pb[j * ib]);
    }
  }
}

template <typename T>
void binaryLoop(StrataRtContext *ctx, int64_t site, int64_t op, T *out,
                const T *a, const T *b, int64_t rank, const int64_t *desc) {
  switch (op) {
  case STRATA_RT_ADD:
    return binaryLoop<STRATA_RT_ADD>(out, a, b, rank, desc);
  case STRATA_RT_SUB:
    return binaryLoop<STRATA_RT_SUB>(out, a, b, rank, desc);
  case STRATA_RT_MUL:
    return binaryLoop<STRATA_RT_MUL>(out, a, b, rank, desc);
  case STRATA_RT_DIV:
    // (Of floating-point tensors: binaryOpOk refused integers.)
    if constexpr (!std::is_integral_v<T>)
      return binaryLoop<STRATA_RT_DIV>(out, a, b, rank, desc);
  }
  // (binaryOpOk refused other codes.)
}

/// Whether an update guarded by `guard` (the gradients' global norm under
/// loss scaling; NULL when unguarded) does not run: its gradients overflowed
/// (each output then keeps its input: `kept` lists the outputs with their
/// inputs and sizes in bytes; nothing is copied where they alias), or the
/// guard has another type than f32 (recorded as a failure).
bool skipUpdate(
    StrataRtContext *ctx, int64_t site, const char *kernel, const void *guard,
    int64_t guardType,
    std::initializer_list<std::tuple<void *, const void *, size_t>> kept) {
  if (!guard)
    return false;
  if (guardType != STRATA_RT_F32) {
    unsupportedType(ctx, site, kernel, guardType);
    return true;
  }
  if (std::isfinite(*static_cast<const float *>(guard)))
    return false;
  for (auto [out, in, bytes] : kept)
    if (out != in)
      std::memcpy(out, in, bytes);
  return true;
}

/// The bytes of `n` elements of `dtype`.
size_t bytesOf(int64_t n, int64_t dtype) {
  return size_t(n) * size_t(strata_rt_element_bytes(dtype));
}

/// The arrays an optimizer update computes on. Without a master weight: the
/// parameter, its new value and the gradient, all f32. With one (a bf16 or
/// f16 parameter): the f32 master and its new value, a gradient of any float
/// type, and the low-precision parameter that receives the new master
/// rounded. bind() is false, a failure recorded, for other types.
///
/// Element-wise updates run through blocks(): a block of the gradient is
/// widened on the stack, updated, and the block's new master rounded into the
/// parameter at once, so a low-precision step reads and writes each array
/// once. Updates that need the whole tensor first (LAMB's and LARS's norms)
/// take wholeGrad() and call finish() after.
struct UpdateOperands {
  const float *param = nullptr;
  float *newParam = nullptr;
  const void *gradData = nullptr;
  int64_t gradType = STRATA_RT_F32;
  void *low = nullptr; ///< the low-precision parameter's new value
  int64_t lowType = STRATA_RT_F32, n = 0;

  bool bind(StrataRtContext *ctx, int64_t site, const char *kernel, int64_t n,
            void *newParamData, int64_t newParamType, const void *paramData,
            int64_t paramType, const void *gradData, int64_t gradType,
            void *newMaster, int64_t newMasterType, const void *master,
            int64_t masterType) {
    this->n = n;
    this->gradData = gradData;
    this->gradType = gradType;
    strata::rt::UpdateKind kind = strata::rt::updateKind(
        ctx, site, kernel, newParamType, paramType, gradType, newMaster,
        newMasterType, master, masterType);
    if (kind == strata::rt::UpdateKind::Refused)
      return false;
    if (kind == strata::rt::UpdateKind::Plain) {
      param = static_cast<const float *>(paramData);
      newParam = static_cast<float *>(newParamData);
      return true;
    }
    param = static_cast<const float *>(master);
    newParam = static_cast<float *>(newMaster);
    low = newParamData;
    lowType = paramType;
    return true;
  }

  /// Runs body(begin, count, grad) over blocks of the tensor in parallel,
  /// `grad` the block's gradient in f32, then rounds the block's new master
  /// into the low-precision parameter (with a master weight).
  template <typename Body> void blocks(Body body) const {
    withFloatType(gradType, [&](auto gradTag) {
      using G = decltype(gradTag);
      const G *g = static_cast<const G *>(gradData);
      auto run = [&](auto lowTag) {
        using L = decltype(lowTag);
        L *out = static_cast<L *>(low);
        const int64_t count = n;
#pragma omp parallel for schedule(static) if (count >= kParallelGrain)
        for (int64_t s = 0; s < count; s += kBlock) {
          int64_t m = std::min(kBlock, count - s);
          if constexpr (std::is_same_v<G, float>) {
            body(s, m, g + s);
          } else {
            float w[kBlock];
            widen(w, g + s, m);
            body(s, m, static_cast<const float *>(w));
          }
          if constexpr (!std::is_same_v<L, float>)
            narrow(out + s, newParam + s, m);
        }
      };
      if (low)
        withFloatType(lowType, run);
      else
        run(float());
    });
  }

  /// The whole gradient in f32: the gradient itself, or widened into the
  /// context's scratch.
  const float *wholeGrad(StrataRtContext *ctx) const {
    if (gradType == STRATA_RT_F32)
      return static_cast<const float *>(gradData);
    if (int64_t(ctx->gradWiden.size()) < n)
      ctx->gradWiden.resize(n);
    float *w = ctx->gradWiden.data();
    withFloatType(gradType, [&](auto type) {
      using T = decltype(type);
      const T *g = static_cast<const T *>(gradData);
      const int64_t count = n;
#pragma omp parallel for schedule(static) if (count >= kParallelGrain)
      for (int64_t s = 0; s < count; s += kBlock)
        widen(w + s, g + s, std::min(kBlock, count - s));
    });
    return w;
  }

  /// The parameter as the new master rounded (with a master weight), after
  /// an update that did not run through blocks().
  void finish() const {
    if (!low)
      return;
    withFloatType(lowType, [&](auto type) {
      using T = decltype(type);
      T *out = static_cast<T *>(low);
      const float *m = newParam;
      const int64_t count = n;
#pragma omp parallel for schedule(static) if (count >= kParallelGrain)
      for (int64_t s = 0; s < count; s += kBlock)
        narrow(out + s, m + s, std::min(kBlock, count - s));
    });
  }
};

/// out = scale * the sum of `in` over the dimensions whose output stride is
/// 0 (strata_rt_reduce's `desc`), accumulated in double. Low-precision rows
/// are widened into f32 a block at a time, on the stack.
template <typename T>
void reduceLoop(T *out, const T *in, int64_t rank, const int64_t *desc,
                double scale) {
  const int64_t *shape = desc, *ostrides = desc + rank;
  int64_t n = 1, outN = 1;
  for (int64_t d = 0; d < rank; ++d) {
    n *= shape[d];
    if (ostrides[d] != 0)
      outN *= shape[d];
  }
  // Rows of the last dimension, summed in input order (deterministic).
  std::vector<double> acc(outN, 0.0);
  if (rank == 0) {
    out[0] = T(float(double(float(in[0])) * scale));
    return;
  }
  int64_t inner = shape[rank - 1], rows = n / std::max<int64_t>(inner, 1);
  int64_t step = ostrides[rank - 1];
  const int64_t *const s[1] = {ostrides};
  // f(j0, x, m): the row's elements [j0, j0 + m) as f32, m <= kBlock.
  auto forBlocks = [&](const T *row, auto f) {
    for (int64_t j0 = 0; j0 < inner; j0 += kBlock) {
      int64_t m = std::min(kBlock, inner - j0);
      if constexpr (std::is_same_v<T, float>) {
        f(j0, row + j0, m);
      } else {
        float x[kBlock];
        widen(x, row + j0, m);
        f(j0, static_cast<const float *>(x), m);
      }
    }
  };
  if (step == 0) {
    // Reducing the last dimension: each row's sum in four double lanes
    // (element j in lane j % 4, the lanes added pairwise), in parallel when
    // every output takes one row, in row order when several rows share one.
    bool unique = rows == outN;
#pragma omp parallel for schedule(static) if (unique && n >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off[1];
      rowOffsets<1>(r, rank, shape, s, off);
      double lane[4] = {};
      // Blocks start at multiples of kBlock, so x[j] is element j0 + j of
      // lane j % 4.
      forBlocks(in + r * inner, [&](int64_t, const float *x, int64_t m) {
        int64_t j = 0;
        for (; j + 4 <= m; j += 4)
          for (int k = 0; k < 4; ++k)
            lane[k] += x[j + k];
        for (; j < m; ++j)
          lane[j & 3] += x[j];
      });
      acc[off[0]] += (lane[0] + lane[1]) + (lane[2] + lane[3]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off[1];
      rowOffsets<1>(r, rank, shape, s, off);
      double *o = acc.data() + off[0];
      forBlocks(in + r * inner, [&](int64_t j0, const float *x, int64_t m) {
        if (step == 1) {
#pragma omp simd
          for (int64_t j = 0; j < m; ++j)
            o[j0 + j] += x[j];
        } else {
          for (int64_t j = 0; j < m; ++j)
            o[(j0 + j) * step] += x[j];
        }
      });
    }
  }
  for (int64_t i = 0; i < outN; ++i)
    out[i] = T(float(acc[i] * scale));
}

/// Draws per block of the dropout kernel: 16 Philox draws, 64 elements.
constexpr int kDraws = 16;

/// The dropout stream's words for the 16 consecutive draws from `g`, in
/// element order: words[4 j + w] == rng::dropoutDraw(seed, key, 4 (g + j))[w].
/// The vector variants run the ten Philox-4x32-10 rounds of
/// `strata::rng::draw` on sixteen (AVX-512) or eight (AVX2) draws per
/// vector (32 x 32 -> 64-bit products of the even and odd lanes); the
/// baseline calls it per draw.
void dropoutWords(uint64_t seed, int64_t key, int64_t g,
                  uint32_t (&words)[4 * kDraws]) {
#if defined(__AVX512F__)
  static_assert(kDraws == 16, "one vector of draws");
  const __m512i m0 = _mm512_set1_epi32(int(PHILOX_M4x32_0));
  const __m512i m1 = _mm512_set1_epi32(int(PHILOX_M4x32_1));
  // Low and high halves of the 32 x 32-bit products of x's lanes with m's.
  auto mulhilo = [](__m512i x, __m512i m, __m512i &hi) {
    __m512i even = _mm512_mul_epu32(x, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    hi = _mm512_mask_blend_epi32(__mmask16(0xAAAA), _mm512_srli_epi64(even, 32),
                                 odd);
    return _mm512_mask_blend_epi32(__mmask16(0xAAAA), even,
                                   _mm512_slli_epi64(odd, 32));
  };
  alignas(64) uint32_t lo32[16], hi32[16];
  for (int j = 0; j < 16; ++j) {
    uint64_t index = uint64_t(g) + uint64_t(j);
    lo32[j] = uint32_t(index);
    hi32[j] = uint32_t(index >> 32);
  }
  __m512i c0 = _mm512_load_si512(lo32), c1 = _mm512_load_si512(hi32);
  __m512i c2 = _mm512_set1_epi32(int(uint32_t(key)));
  __m512i c3 = _mm512_set1_epi32(int(uint32_t(strata::rng::kDropoutStream)));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += PHILOX_W32_0;
      k1 += PHILOX_W32_1;
    }
    __m512i hi0, hi1;
    __m512i lo0 = mulhilo(c0, m0, hi0);
    __m512i lo1 = mulhilo(c2, m1, hi1);
    c0 =
        _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(int(k0)));
    c1 = lo1;
    c2 =
        _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(int(k1)));
    c3 = lo0;
  }
  // Interleave the four words of each draw into element order: within
  // 128-bit lanes first (lane l of dN holds draw 4 l + N), then a 4 x 4
  // transpose of the lanes.
  __m512i a = _mm512_unpacklo_epi32(c0, c1), b = _mm512_unpackhi_epi32(c0, c1);
  __m512i c = _mm512_unpacklo_epi32(c2, c3), d = _mm512_unpackhi_epi32(c2, c3);
  __m512i d0 = _mm512_unpacklo_epi64(a, c), d1 = _mm512_unpackhi_epi64(a, c);
  __m512i d2 = _mm512_unpacklo_epi64(b, d), d3 = _mm512_unpackhi_epi64(b, d);
  __m512i t0 = _mm512_shuffle_i32x4(d0, d1, 0x44);
  __m512i t1 = _mm512_shuffle_i32x4(d2, d3, 0x44);
  __m512i t2 = _mm512_shuffle_i32x4(d0, d1, 0xEE);
  __m512i t3 = _mm512_shuffle_i32x4(d2, d3, 0xEE);
  _mm512_storeu_si512(words, _mm512_shuffle_i32x4(t0, t1, 0x88));
  _mm512_storeu_si512(words + 16, _mm512_shuffle_i32x4(t0, t1, 0xDD));
  _mm512_storeu_si512(words + 32, _mm512_shuffle_i32x4(t2, t3, 0x88));
  _mm512_storeu_si512(words + 48, _mm512_shuffle_i32x4(t2, t3, 0xDD));
#elif defined(__AVX2__)
  const __m256i m0 = _mm256_set1_epi32(int(PHILOX_M4x32_0));
  const __m256i m1 = _mm256_set1_epi32(int(PHILOX_M4x32_1));
  // Low and high halves of the 32 x 32-bit products of x's lanes with m's.
  auto mulhilo = [](__m256i x, __m256i m, __m256i &hi) {
    __m256i even = _mm256_mul_epu32(x, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    return _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  };
  for (int half = 0; half < kDraws / 8; ++half) {
    alignas(32) uint32_t lo32[8], hi32[8];
    for (int j = 0; j < 8; ++j) {
      uint64_t index = uint64_t(g) + uint64_t(8 * half + j);
      lo32[j] = uint32_t(index);
      hi32[j] = uint32_t(index >> 32);
    }
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i *>(lo32));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i *>(hi32));
    __m256i c2 = _mm256_set1_epi32(int(uint32_t(key)));
    __m256i c3 = _mm256_set1_epi32(int(uint32_t(strata::rng::kDropoutStream)));
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        k0 += PHILOX_W32_0;
        k1 += PHILOX_W32_1;
      }
      __m256i hi0, hi1;
      __m256i lo0 = mulhilo(c0, m0, hi0);
      __m256i lo1 = mulhilo(c2, m1, hi1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1),
                            _mm256_set1_epi32(int(k0)));
      c1 = lo1;
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3),
                            _mm256_set1_epi32(int(k1)));
      c3 = lo0;
    }
    // Interleave the four words of each draw into element order.
    __m256i a = _mm256_unpacklo_epi32(c0, c1); // w0 w1 of draws 0 1 | 4 5
    __m256i b = _mm256_unpackhi_epi32(c0, c1); // draws 2 3 | 6 7
    __m256i c = _mm256_unpacklo_epi32(c2, c3);
    __m256i d = _mm256_unpackhi_epi32(c2, c3);
    __m256i d0 = _mm256_unpacklo_epi64(a, c); // draws 0 | 4
    __m256i d1 = _mm256_unpackhi_epi64(a, c); // draws 1 | 5
    __m256i d2 = _mm256_unpacklo_epi64(b, d); // draws 2 | 6
    __m256i d3 = _mm256_unpackhi_epi64(b, d); // draws 3 | 7
    auto *out = reinterpret_cast<__m256i *>(words + 32 * half);
    _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(d0, d1, 0x20));
    _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(d2, d3, 0x20));
    _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(d0, d1, 0x31));
    _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(d2, d3, 0x31));
  }
#else
  for (int j = 0; j < kDraws; ++j) {
    auto draw = strata::rng::dropoutDraw(seed, key, 4 * (g + j));
    for (int w = 0; w < 4; ++w)
      words[4 * j + w] = draw[w];
  }
#endif
}

} // namespace

extern "C" {

void STRATA_RT_KERNEL(strata_rt_binary)(StrataRtContext *ctx, int64_t site,
                                        int64_t op, void *out, int64_t outType,
                                        const void *a, int64_t aType,
                                        const void *b, int64_t bType,
                                        int64_t rank, const int64_t *desc) {
  if (!sameTypes(ctx, site, "binary", {outType, aType, bType}) ||
      !binaryOpOk(ctx, site, op, outType))
    return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    binaryLoop(ctx, site, op, static_cast<T *>(out), static_cast<const T *>(a),
               static_cast<const T *>(b), rank, desc);
  };
  if (outType == STRATA_RT_I32)
    run(int32_t{});
  else if (outType == STRATA_RT_I64)
    run(int64_t{});
  else if (!withFloatType(outType, run))
    unsupportedType(ctx, site, "binary", outType);
}

} // extern "C"

namespace {

/// The K sums of term(j, v) (which sets v[0 .. K)) over j < n, each in f32
/// vector lanes (a lane sums n / 16 terms or fewer) whose partial sums are
/// added in double: the loop over whole lane blocks vectorises without
/// masks, and the result does not depend on threads.
template <int K, typename Term>
void laneSums(int64_t n, Term term, double (&sums)[K]) {
  constexpr int kLanes = 16;
  float lane[K][kLanes] = {};
  int64_t j0 = 0;
  for (; j0 + kLanes <= n; j0 += kLanes)
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      float v[K];
      term(j0 + k, v);
      for (int s = 0; s < K; ++s)
        lane[s][k] += v[s];
    }
  for (int k = 0; j0 + k < n; ++k) {
    float v[K];
    term(j0 + k, v);
    for (int s = 0; s < K; ++s)
      lane[s][k] += v[s];
  }
  for (int s = 0; s < K; ++s) {
    sums[s] = 0;
    for (float v : lane[s])
      sums[s] += v;
  }
}

/// One laneSums sum.
template <typename Term> double laneSum(int64_t n, Term term) {
  double sum[1];
  laneSums<1>(
      n, [&](int64_t j, float(&v)[1]) { v[0] = term(j); }, sum);
  return sum[0];
}

/// The largest of x[0 .. n) as f32 (-inf for none; NaNs are passed over, as
/// by std::max), in vector lanes.
template <typename T> float rowMax(const T *x, int64_t n) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill_n(lane, kLanes, -INFINITY);
  int64_t j0 = 0;
  for (; j0 + kLanes <= n; j0 += kLanes)
#pragma omp simd
    for (int k = 0; k < kLanes; ++k)
      lane[k] = std::max(lane[k], float(x[j0 + k]));
  for (int k = 0; j0 + k < n; ++k)
    lane[k] = std::max(lane[k], float(x[j0 + k]));
  float mx = -INFINITY;
  for (float v : lane)
    mx = std::max(mx, v);
  return mx;
}

/// A normalisation's statistics of one row: layer norm's (`Centered`) the
/// mean and 1 / sqrt(variance + eps); RMS norm's 0 and 1 / sqrt(mean(x^2) +
/// eps); each sum a laneSum.
template <bool Centered, typename T>
std::pair<float, float> rowStatistics(const T *x, int64_t n, double eps) {
  const float m =
      Centered ? float(laneSum(n, [&](int64_t j) { return float(x[j]); }) /
                       double(n))
               : 0.0f;
  double var = laneSum(n, [&](int64_t j) {
                 float d = float(x[j]) - m;
                 return d * d;
               }) /
               double(n);
  return {m, float(1.0 / std::sqrt(var + eps))};
}

/// Layer norm (`Centered`: (x - mean) * rstd * gamma + beta) or RMS norm
/// (x * rstd * gamma; `betaData` unused) of `rows` rows of `n`.
template <bool Centered>
void normalizeRows(StrataRtContext *ctx, int64_t site, const char *name,
                   std::initializer_list<int64_t> types, void *yData,
                   const void *xData, const void *gammaData,
                   const void *betaData, int64_t rows, int64_t n, double eps) {
  withSameFloatType(ctx, site, name, types, [&](auto tag) {
    using T = decltype(tag);
    auto *y = static_cast<T *>(yData);
    auto *x = static_cast<const T *>(xData);
    auto *gamma = static_cast<const T *>(gammaData);
    auto *beta = static_cast<const T *>(betaData);
    // One row, for f32 or low-precision pointers alike.
    auto normalize = [&](const auto *xr, const auto *g, const auto *b,
                         auto *yr) {
      using Out = std::remove_pointer_t<decltype(yr)>;
      auto [m, rstd] = rowStatistics<Centered>(xr, n, eps);
      if constexpr (Centered) {
        for (int64_t j = 0; j < n; ++j)
          yr[j] = Out((float(xr[j]) - m) * rstd * float(g[j]) + float(b[j]));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j)
          yr[j] = Out(float(xr[j]) * rstd * float(g[j]));
      }
    };
    if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
      for (int64_t r = 0; r < rows; ++r)
        normalize(x + r * n, gamma, beta, y + r * n);
    } else {
      // Low precision: rows widened into f32 once and the result
      // rounded once, in vectorised passes; the arithmetic (and so
      // every bit of the result) is the per-element path's.
      std::vector<float> g(n), b(Centered ? n : 0);
      widen(g.data(), gamma, n);
      if constexpr (Centered)
        widen(b.data(), beta, n);
#pragma omp parallel if (rows * n >= kParallelGrain)
      {
        std::vector<float> xs(n), ys(n);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          widen(xs.data(), x + r * n, n);
          normalize(xs.data(), g.data(), b.data(), ys.data());
          narrow(y + r * n, ys.data(), n);
        }
      }
    }
  });
}

/// The gradients of normalizeRows: dx, dgamma and (`Centered`) dbeta.
template <bool Centered>
void normalizeRowsGrad(StrataRtContext *ctx, int64_t site, const char *name,
                       std::initializer_list<int64_t> types, void *dxData,
                       void *dgammaData, void *dbetaData, const void *xData,
                       const void *gammaData, const void *dyData, int64_t rows,
                       int64_t n, double eps) {
  withSameFloatType(ctx, site, name, types, [&](auto tag) {
    using T = decltype(tag);
    auto *dx = static_cast<T *>(dxData);
    auto *dgamma = static_cast<T *>(dgammaData);
    auto *dbeta = static_cast<T *>(dbetaData);
    auto *x = static_cast<const T *>(xData);
    auto *gamma = static_cast<const T *>(gammaData);
    auto *dy = static_cast<const T *>(dyData);
    // Blocks of kRowBlock rows in parallel: per row its statistics and
    // dx; per block the dgamma/dbeta column sums of its rows in f32,
    // and the blocks' sums added in double in block order afterwards
    // (the result does not depend on threads). Low-precision rows are
    // widened into f32 once and dx rounded once, in vectorised passes; the
    // arithmetic is the same for both.
    constexpr bool kLow = !std::is_same_v<T, float>;
    constexpr int64_t kRowBlock = 64;
    int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    std::vector<double> partial(blocks * 2 * n, 0.0);
    std::vector<float> gammaWide(kLow ? n : 0);
    if constexpr (kLow)
      widen(gammaWide.data(), gamma, n);
    auto rowGrad = [&](const auto *xr, const auto *dyr, const auto *g, auto *o,
                       float *dg, float *db) {
      using Out = std::remove_pointer_t<decltype(o)>;
      auto [m, rstd] = rowStatistics<Centered>(xr, n, eps);
      // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
      // without the mean of dxhat for RMS norm; the sums in f32 lanes,
      // added in double (as the statistics).
      double sums[2];
      laneSums<2>(
          n,
          [&](int64_t j, float(&v)[2]) {
            float xhat = (float(xr[j]) - m) * rstd;
            float dxhat = float(dyr[j]) * float(g[j]);
            v[0] = Centered ? dxhat : 0.0f;
            v[1] = dxhat * xhat;
          },
          sums);
      float a = float(sums[0] / double(n)), b = float(sums[1] / double(n));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        float xhat = (float(xr[j]) - m) * rstd;
        float dyj = float(dyr[j]);
        o[j] = Out(rstd * (dyj * float(g[j]) - a - xhat * b));
        dg[j] += dyj * xhat;
        if constexpr (Centered)
          db[j] += dyj;
      }
    };
#pragma omp parallel if (rows * n >= kParallelGrain)
    {
      std::vector<float> xs(kLow ? n : 0), dys(kLow ? n : 0), o(kLow ? n : 0),
          sums(2 * n);
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        float *dg = sums.data(), *db = dg + n;
        std::fill(sums.begin(), sums.end(), 0.0f);
        for (int64_t r = blk * kRowBlock, e = std::min(rows, r + kRowBlock);
             r < e; ++r) {
          if constexpr (!kLow) {
            rowGrad(x + r * n, dy + r * n, gamma, dx + r * n, dg, db);
          } else {
            widen(xs.data(), x + r * n, n);
            widen(dys.data(), dy + r * n, n);
            rowGrad(xs.data(), dys.data(), gammaWide.data(), o.data(), dg, db);
            narrow(dx + r * n, o.data(), n);
          }
        }
        std::copy(sums.begin(), sums.end(), partial.data() + blk * 2 * n);
      }
    }
    std::vector<double> dg(n, 0.0), db(n, 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t j = 0; j < n; ++j) {
        dg[j] += partial[blk * 2 * n + j];
        db[j] += partial[blk * 2 * n + n + j];
      }
    for (int64_t j = 0; j < n; ++j) {
      dgamma[j] = T(float(dg[j]));
      if constexpr (Centered)
        dbeta[j] = T(float(db[j]));
    }
  });
}

/// out = f(in) on f32 arrays (a known `op`); one thread's block.
void unaryF32(int64_t op, float *out, const float *in, int64_t n, float f) {
  switch (op) {
  case STRATA_RT_UNARY_SCALE:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] * f;
    break;
  case STRATA_RT_ACT_RELU:
    // A NaN stays NaN (PyTorch's relu), so that a NaN input reaches the
    // loss instead of vanishing here.
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = in[i] > 0.0f || in[i] != in[i] ? in[i] : 0.0f;
    break;
  case STRATA_RT_ACT_GELU_TANH:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = geluTanh(in[i]);
    break;
  case STRATA_RT_ACT_GELU_ERF:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = geluErf(in[i]);
    break;
  case STRATA_RT_ACT_SILU:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = silu(in[i]);
    break;
  case STRATA_RT_UNARY_RSQRT:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = 1.0f / std::sqrt(in[i]);
    break;
  case STRATA_RT_UNARY_TANH:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = preciseTanh(in[i]);
    break;
  case STRATA_RT_ACT_NONE:
    if (out != in)
      std::memmove(out, in, n * sizeof(float));
    break;
  }
}

/// out = dy * f'(x) on f32 arrays (a known `act`); one thread's block.
void actGradF32(int64_t act, float *out, const float *x, const float *dy,
                int64_t n) {
  switch (act) {
  case STRATA_RT_ACT_RELU:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    break;
  case STRATA_RT_ACT_GELU_TANH:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = dy[i] * geluTanhGrad(x[i]);
    break;
  case STRATA_RT_ACT_GELU_ERF:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = dy[i] * geluErfGrad(x[i]);
    break;
  case STRATA_RT_ACT_SILU:
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      out[i] = siluGrad(x[i], dy[i]);
    break;
  case STRATA_RT_ACT_NONE:
    if (out != dy)
      std::memmove(out, dy, n * sizeof(float));
    break;
  }
}

} // namespace

extern "C" {

void STRATA_RT_KERNEL(strata_rt_unary)(StrataRtContext *ctx, int64_t site,
                                       int64_t op, void *outData,
                                       int64_t outType, const void *inData,
                                       int64_t inType, int64_t n,
                                       double alpha) {
  if (!strata::rt::knownUnary(op))
    return ctx->fail(site, "unknown unary op code " + std::to_string(op));
  withSameFloatType(ctx, site, "unary", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    auto *out = static_cast<T *>(outData);
    auto *in = static_cast<const T *>(inData);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t m = std::min(kBlock, n - b);
      if constexpr (std::is_same_v<T, float>) {
        unaryF32(op, out + b, in + b, m, float(alpha));
      } else {
        float x[kBlock], y[kBlock];
        widen(x, in + b, m);
        unaryF32(op, y, x, m, float(alpha));
        narrow(out + b, y, m);
      }
    }
  });
}

/// f32: oneDNN writes the GEMM with its bias into aux, then the activation
/// reads it once (one pass, as the unfused lowering). bf16 and f16: the
/// activation reads the unrounded f32 pre-activation, which aux gets
/// rounded (as the reference and cuBLASLt's GELU_AUX epilogue).
void STRATA_RT_KERNEL(strata_rt_gemm_aux)(
    StrataRtContext *ctx, int64_t site, int64_t m, int64_t n, int64_t k,
    const void *a, int64_t aType, int64_t transA, const void *b, int64_t bType,
    int64_t transB, void *c, int64_t cType, void *aux, int64_t auxType,
    const void *bias, int64_t biasType, int64_t act) {
  if (!sameTypes(ctx, site, "gemm_aux", {cType, auxType}) ||
      !gemmArgumentsOk(ctx, site, "gemm_aux", 1, m, n, k, bias != nullptr,
                       STRATA_RT_ACT_NONE, 0))
    return;
  if (!strata::rt::knownUnary(act))
    return ctx->fail(site, "unknown unary op code " + std::to_string(act));
  if (cType != STRATA_RT_F32 && k > 0 && m > 0 && n > 0) {
    withSameFloatType(
        ctx, site, "gemm_aux", {aType, bType, cType, biasType}, [&](auto tag) {
          using T = decltype(tag);
          if constexpr (!std::is_same_v<T, float>) {
            float *pre = ctx->scratchFloats(m * n);
            strata::cpu::preActivation(ctx, site, m, n, k, a, transA, b, transB,
                                       bias, cType, pre);
            auto *out = static_cast<T *>(c);
            auto *kept = static_cast<T *>(aux);
#pragma omp parallel for schedule(static) if (m * n >= kParallelGrain)
            for (int64_t s = 0; s < m * n; s += kBlock) {
              int64_t count = std::min(kBlock, m * n - s);
              float y[kBlock];
              narrow(kept + s, pre + s, count);
              unaryF32(act, y, pre + s, count, 0.0f);
              narrow(out + s, y, count);
            }
          }
        });
    return;
  }
  // The activation runs whatever the step's earlier errors (the first one
  // is the step's), as the unfused GEMM + unary would.
  strata_rt_gemm(ctx, site, 1, m, n, k, a, aType, 0, transA, b, bType, 0,
                 transB, aux, auxType, bias, biasType, STRATA_RT_ACT_NONE, 0);
  STRATA_RT_KERNEL(strata_rt_unary)
  (ctx, site, act, c, cType, aux, auxType, m * n, 0.0);
}

void STRATA_RT_KERNEL(strata_rt_act_grad)(StrataRtContext *ctx, int64_t site,
                                          int64_t act, void *outData,
                                          int64_t outType, const void *xData,
                                          int64_t xType, const void *dyData,
                                          int64_t dyType, int64_t n) {
  if (!strata::rt::knownActGrad(act))
    return ctx->fail(site, "unknown activation code " + std::to_string(act));
  withSameFloatType(ctx, site, "act_grad", {outType, xType, dyType},
                    [&](auto tag) {
                      using T = decltype(tag);
                      auto *out = static_cast<T *>(outData);
                      auto *x = static_cast<const T *>(xData);
                      auto *dy = static_cast<const T *>(dyData);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
                      for (int64_t b = 0; b < n; b += kBlock) {
                        int64_t m = std::min(kBlock, n - b);
                        if constexpr (std::is_same_v<T, float>) {
                          actGradF32(act, out + b, x + b, dy + b, m);
                        } else {
                          float xs[kBlock], dys[kBlock], o[kBlock];
                          widen(xs, x + b, m);
                          widen(dys, dy + b, m);
                          actGradF32(act, o, xs, dys, m);
                          narrow(out + b, o, m);
                        }
                      }
                    });
}

/// out = in converted between f32, bf16 and f16 (rounded to nearest even).
void STRATA_RT_KERNEL(strata_rt_cast)(StrataRtContext *ctx, int64_t site,
                                      void *outData, int64_t outType,
                                      const void *inData, int64_t inType,
                                      int64_t n) {
  bool known = withFloatType(inType, [&](auto inTag) {
    using In = decltype(inTag);
    auto *in = static_cast<const In *>(inData);
    if (!withFloatType(outType, [&](auto outTag) {
          using Out = decltype(outTag);
          auto *out = static_cast<Out *>(outData);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
          for (int64_t s = 0; s < n; s += kBlock) {
            int64_t m = std::min(kBlock, n - s);
            if constexpr (std::is_same_v<In, float>) {
              narrow(out + s, in + s, m);
            } else if constexpr (std::is_same_v<Out, float>) {
              widen(out + s, in + s, m);
            } else {
              float wide[kBlock];
              widen(wide, in + s, m);
              narrow(out + s, wide, m);
            }
          }
        }))
      unsupportedType(ctx, site, "cast", outType);
  });
  if (!known)
    unsupportedType(ctx, site, "cast", inType);
}

void STRATA_RT_KERNEL(strata_rt_copy)(StrataRtContext *ctx, int64_t site,
                                      void *out, const void *in, int64_t dtype,
                                      int64_t n) {
  int64_t width = strata_rt_element_bytes(dtype);
  if (width == 0)
    return unsupportedType(ctx, site, "copy", dtype);
  if (out != in)
    std::memmove(out, in, size_t(n * width));
}

void STRATA_RT_KERNEL(strata_rt_strided_copy)(StrataRtContext *ctx,
                                              int64_t site, void *out,
                                              const void *in, int64_t dtype,
                                              int64_t rank,
                                              const int64_t *desc) {
  int64_t elementBytes = strata_rt_element_bytes(dtype);
  if (elementBytes != 2 && elementBytes != 4 && elementBytes != 8)
    return unsupportedType(ctx, site, "strided_copy", dtype);
  const int64_t *shape = desc, *strides = desc + rank;
  int64_t base = desc[2 * rank];
  int64_t n = 1;
  for (int64_t d = 0; d < rank; ++d)
    n *= shape[d];
  if (rank == 0) {
    std::memcpy(out, static_cast<const char *>(in) + base * elementBytes,
                elementBytes);
    return;
  }
  int64_t inner = shape[rank - 1], rows = n / std::max<int64_t>(inner, 1);
  int64_t step = strides[rank - 1];
  const int64_t *const s[1] = {strides};
  auto run = [&](auto *o, const auto *x) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off[1];
      rowOffsets<1>(r, rank, shape, s, off);
      auto *dst = o + r * inner;
      const auto *src = x + base + off[0];
      if (step == 1)
        std::memcpy(dst, src, inner * sizeof(*dst));
      else if (step == 0) // a broadcast (a reduction's gradient)
        std::fill_n(dst, inner, *src);
      else
        for (int64_t j = 0; j < inner; ++j)
          dst[j] = src[j * step];
    }
  };
  if (elementBytes == 8)
    run(static_cast<int64_t *>(out), static_cast<const int64_t *>(in));
  else if (elementBytes == 4)
    run(static_cast<int32_t *>(out), static_cast<const int32_t *>(in));
  else
    run(static_cast<uint16_t *>(out), static_cast<const uint16_t *>(in));
}

void STRATA_RT_KERNEL(strata_rt_copy_rows)(StrataRtContext *ctx, int64_t site,
                                           void *out, const void *in,
                                           int64_t dtype, int64_t rows,
                                           int64_t inRow, int64_t outRow,
                                           int64_t offset) {
  int64_t width = strata_rt_element_bytes(dtype);
  if (width <= 0)
    return unsupportedType(ctx, site, "copy_rows", dtype);
  auto *dst = static_cast<char *>(out) + offset * width;
  const auto *src = static_cast<const char *>(in);
#pragma omp parallel for schedule(static) if (rows * inRow >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * outRow * width, src + r * inRow * width,
                inRow * width);
}

void STRATA_RT_KERNEL(strata_rt_reduce)(StrataRtContext *ctx, int64_t site,
                                        void *outData, int64_t outType,
                                        const void *inData, int64_t inType,
                                        int64_t rank, const int64_t *desc,
                                        double scale) {
  withSameFloatType(ctx, site, "reduce", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    reduceLoop(static_cast<T *>(outData), static_cast<const T *>(inData), rank,
               desc, scale);
  });
}

/// The GEMM, then the activation gradient in place on its result (the
/// kernels the unfused lowering calls, so the same values).
void STRATA_RT_KERNEL(strata_rt_gemm_dact)(
    StrataRtContext *ctx, int64_t site, int64_t m, int64_t n, int64_t k,
    const void *a, int64_t aType, int64_t transA, const void *b, int64_t bType,
    int64_t transB, void *c, int64_t cType, const void *aux, int64_t auxType,
    int64_t act) {
  if (!sameTypes(ctx, site, "gemm_dact", {cType, auxType}) ||
      !gemmArgumentsOk(ctx, site, "gemm_dact", 1, m, n, k, false,
                       STRATA_RT_ACT_NONE, 0))
    return;
  strata_rt_gemm(ctx, site, 1, m, n, k, a, aType, 0, transA, b, bType, 0,
                 transB, c, cType, nullptr, cType, STRATA_RT_ACT_NONE, 0);
  STRATA_RT_KERNEL(strata_rt_act_grad)
  (ctx, site, act, c, cType, aux, auxType, c, cType, m * n);
}

/// The GEMM, then the bias gradient as strata_rt_reduce sums it.
void STRATA_RT_KERNEL(strata_rt_gemm_bgrad)(
    StrataRtContext *ctx, int64_t site, int64_t m, int64_t n, int64_t k,
    const void *a, int64_t aType, int64_t transA, const void *b, int64_t bType,
    int64_t transB, void *c, int64_t cType, void *bgrad, int64_t bgradType,
    int64_t operand) {
  if (!gemmArgumentsOk(ctx, site, "gemm_bgrad", 1, m, n, k, false,
                       STRATA_RT_ACT_NONE, 0))
    return;
  if (operand != 0 && operand != 1)
    return ctx->fail(site, "strata_rt_gemm_bgrad: operand " +
                               std::to_string(operand) + " (0 for A, 1 for B)");
  strata_rt_gemm(ctx, site, 1, m, n, k, a, aType, 0, transA, b, bType, 0,
                 transB, c, cType, nullptr, cType, STRATA_RT_ACT_NONE, 0);
  int64_t desc[4];
  bgradReduction(m, n, k, transA != 0, transB != 0, operand, desc);
  STRATA_RT_KERNEL(strata_rt_reduce)
  (ctx, site, bgrad, bgradType, operand == 0 ? a : b,
   operand == 0 ? aType : bType, 2, desc, 1.0);
}

void STRATA_RT_KERNEL(strata_rt_fill)(StrataRtContext *ctx, int64_t site,
                                      void *out, int64_t outType, int64_t n,
                                      double value) {
  if (outType == STRATA_RT_I32)
    std::fill_n(static_cast<int32_t *>(out), n, int32_t(value));
  else if (outType == STRATA_RT_I64)
    std::fill_n(static_cast<int64_t *>(out), n, int64_t(value));
  else if (!withFloatType(outType, [&](auto tag) {
             using T = decltype(tag);
             std::fill_n(static_cast<T *>(out), n, T(float(value)));
           }))
    unsupportedType(ctx, site, "fill", outType);
}

void STRATA_RT_KERNEL(strata_rt_dropout)(StrataRtContext *ctx, int64_t site,
                                         void *outData, int64_t outType,
                                         const void *inData, int64_t inType,
                                         const void *residualData,
                                         int64_t residualType, int64_t n,
                                         int64_t key, int64_t microBatches,
                                         int64_t microBatch, double prob) {
  withSameFloatType(
      ctx, site, "dropout", {outType, inType, residualType}, [&](auto tag) {
        using T = decltype(tag);
        auto *out = static_cast<T *>(outData);
        auto *in = static_cast<const T *>(inData);
        auto *residual = static_cast<const T *>(residualData);
        int64_t offset =
            strata::rng::dropoutOffset(ctx->shard, microBatches, microBatch, n);
        float keepScale = 1.0f / float(1.0 - prob);
        uint64_t seed = ctx->seed;
        // Chunks of elements in parallel; in each, blocks of kDraws Philox
        // draws (4 elements each; dropoutWords). A draw that straddles two
        // chunks is computed by both.
        constexpr int64_t kChunk = 1 << 12;
        int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain / 4)
        for (int64_t c = 0; c < chunks; ++c) {
          int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
          for (int64_t g = (offset + begin) >> 2; 4 * g < offset + end;
               g += kDraws) {
            uint32_t flat[4 * kDraws];
            dropoutWords(seed, key, g, flat);
            // Elements [lo, hi) of this call take flat[offset + i - 4g].
            int64_t lo = std::max(begin, 4 * g - offset);
            int64_t hi = std::min(end, 4 * (g + kDraws) - offset);
            int64_t shift = offset - 4 * g;
#pragma omp simd
            for (int64_t i = lo; i < hi; ++i) {
              float v = strata::rng::dropoutKeepWord(flat[shift + i], prob)
                            ? float(in[i]) * keepScale
                            : 0.0f;
              out[i] = T(residual ? v + float(residual[i]) : v);
            }
          }
        }
      });
}

void STRATA_RT_KERNEL(strata_rt_softmax)(StrataRtContext *ctx, int64_t site,
                                         void *outData, int64_t outType,
                                         const void *inData, int64_t inType,
                                         int64_t rows, int64_t n,
                                         int64_t causalRows) {
  withSameFloatType(ctx, site, "softmax", {outType, inType}, [&](auto tag) {
    using T = decltype(tag);
    auto *out = static_cast<T *>(outData);
    auto *in = static_cast<const T *>(inData);
    // Low-precision rows are computed in an f32 row of scratch per thread.
    constexpr bool kF32 = std::is_same_v<T, float>;
    float *scratch =
        kF32 ? nullptr : ctx->scratchFloats(omp_get_max_threads() * n);
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      const T *x = in + r * n;
      float *y = kF32 ? reinterpret_cast<float *>(out + r * n)
                      : scratch + omp_get_thread_num() * n;
      int64_t limit = causalRows > 0 ? std::min(n, (r % causalRows) + 1) : n;
      float mx = rowMax(x, limit);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < limit; ++j)
        sum += (y[j] = fastExp(float(x[j]) - mx));
      float inv = 1.0f / sum;
      for (int64_t j = 0; j < limit; ++j)
        y[j] *= inv;
      for (int64_t j = limit; j < n; ++j)
        y[j] = 0.0f;
      if constexpr (!kF32)
        for (int64_t j = 0; j < n; ++j)
          out[r * n + j] = T(y[j]);
    }
  });
}

void STRATA_RT_KERNEL(strata_rt_softmax_grad)(StrataRtContext *ctx,
                                              int64_t site, void *dxData,
                                              int64_t dxType, const void *yData,
                                              int64_t yType, const void *dyData,
                                              int64_t dyType, int64_t rows,
                                              int64_t n) {
  withSameFloatType(ctx, site, "softmax_grad", {dxType, yType, dyType},
                    [&](auto tag) {
                      using T = decltype(tag);
                      auto *dx = static_cast<T *>(dxData);
                      auto *y = static_cast<const T *>(yData);
                      auto *dy = static_cast<const T *>(dyData);
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
                      for (int64_t r = 0; r < rows; ++r) {
                        const T *yr = y + r * n, *dyr = dy + r * n;
                        float dot = float(laneSum(n, [&](int64_t j) {
                          return float(yr[j]) * float(dyr[j]);
                        }));
                        T *o = dx + r * n;
                        for (int64_t j = 0; j < n; ++j)
                          o[j] = T(float(yr[j]) * (float(dyr[j]) - dot));
                      }
                    });
}

namespace {

/// Query rows per block of strata_rt_attention(_grad).
constexpr int64_t kAttentionBlock = 64;

/// A row of a block of scores, in place: exp(x - shift) over its first
/// `limit` of `keys` columns, 0 beyond; returns their sum. The forward pass
/// shifts by the row's maximum (the softmax's numerators), the gradient by
/// the forward's log-sum-exp (the probabilities themselves).
static inline float attentionRow(float *x, int64_t limit, int64_t keys,
                                 float shift) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < limit; ++j)
    sum += (x[j] = fastExp(x[j] - shift));
  for (int64_t j = limit; j < keys; ++j)
    x[j] = 0.0f;
  return sum;
}

// (C++ linkage: the kernels around are extern "C".)
extern "C++" {
/// Fused attention's dropout on its probabilities: the mask
/// strata_rt_dropout draws for key `key` over the [batch, heads, s, t]
/// tensor of probabilities, whose element `index` is element `offset` +
/// `index` of the global stream (this rank's shard and micro-batch before
/// it). `prob` 0: none.
struct AttentionDropout {
  double prob;
  float keepScale;
  uint32_t threshold; // kept: (word >> 8) >= threshold
  uint64_t seed;
  int64_t key, offset;

  AttentionDropout(StrataRtContext *ctx, double prob, int64_t key,
                   int64_t microBatches, int64_t microBatch, int64_t slices,
                   int64_t s, int64_t t)
      : prob(prob), keepScale(1.0f / float(1.0 - prob)),
        threshold(strata::rng::dropoutKeepThreshold(prob)), seed(ctx->seed),
        key(key), offset(strata::rng::dropoutOffset(
                      ctx->shard, microBatches, microBatch, slices * s * t)) {}

  explicit operator bool() const { return prob > 0; }

  /// Calls f(j, w) for each block of draws of elements `index` + j, j <
  /// n, of the probabilities: j in [lo, hi), element j's word w[j].
  template <typename F> void blocks(int64_t n, int64_t index, F &&f) const {
    int64_t first = offset + index;
    for (int64_t g = first >> 2; 4 * g < first + n; g += kDraws) {
      uint32_t words[4 * kDraws];
      dropoutWords(seed, key, g, words);
      f(std::max<int64_t>(0, 4 * g - first),
        std::min(n, 4 * (g + kDraws) - first),
        static_cast<const uint32_t *>(words) + (first - 4 * g));
    }
  }
  /// to[j] = from[j] dropped (0) or scaled by 1 / (1 - prob), for j < n:
  /// elements `index` + j of the probabilities (to may be from).
  void apply(float *to, const float *from, int64_t n, int64_t index) const {
    const uint32_t t = threshold;
    const float c = keepScale;
    blocks(n, index, [=](int64_t lo, int64_t hi, const uint32_t *w) {
#pragma omp simd
      for (int64_t j = lo; j < hi; ++j)
        to[j] = (w[j] >> 8) >= t ? from[j] * c : 0.0f;
    });
  }
  /// The mask of those elements, 1 where kept, for apply(to, from, mask, n)
  /// (drawn once, used twice).
  void mask(uint8_t *m, int64_t n, int64_t index) const {
    const uint32_t t = threshold;
    blocks(n, index, [=](int64_t lo, int64_t hi, const uint32_t *w) {
#pragma omp simd
      for (int64_t j = lo; j < hi; ++j)
        m[j] = (w[j] >> 8) >= t;
    });
  }
  void apply(float *to, const float *from, const uint8_t *m, int64_t n) const {
    const float c = keepScale;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      to[j] = m[j] ? from[j] * c : 0.0f;
  }
};

using strata::cpu::Causal;

#if defined(__AVX512F__)
/// The products of attention (as F32Products below) with bf16 B (and bf16
/// or f32 A, rounded to bf16) through AVX512-BF16's dot products: f32 sums
/// at twice the f32 FMAs' rate.
struct DotBf16Products {
  static const uint16_t *bits(const BFloat16 *x) {
    return reinterpret_cast<const uint16_t *>(x);
  }
  static const float *bits(const float *x) { return x; }
  template <typename TA>
  void operator()(char ta, char tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const TA *a, int64_t lda, const BFloat16 *b,
                  int64_t ldb, float beta, float *c, int64_t ldc, float *work,
                  Causal causal = {}) const {
    strata::cpu::dotBf16(m, n, k, alpha, bits(a), ta == 'N' ? lda : 1,
                         ta == 'N' ? 1 : lda, bits(b), tb == 'N' ? ldb : 1,
                         tb == 'N' ? 1 : ldb, c, ldc, beta != 0.0f, work,
                         causal);
  }
  /// The operand packed in bf16 pairs once (k x n of op(B)).
  struct Operand {
    char trans;
    const BFloat16 *b;
    int64_t ldb;
    const float *packed;
    int64_t k;
  };
  static int64_t operandFloats(int64_t k, int64_t n) {
    return strata::cpu::packedBf16BFloats(k, n);
  }
  Operand operand(char tb, int64_t k, int64_t n, const BFloat16 *b, int64_t ldb,
                  float *space) const {
    strata::cpu::packBf16B(space, bits(b), tb == 'N' ? ldb : 1,
                           tb == 'N' ? 1 : ldb, k, n);
    return {tb, b, ldb, space, k};
  }
  template <typename TA>
  void operator()(char ta, int64_t m, int64_t n, int64_t k, float alpha,
                  const TA *a, int64_t lda, const Operand &b, float beta,
                  float *c, int64_t ldc, float *work,
                  Causal causal = {}) const {
    // An odd part of the rows: the packed pair past it holds the next row,
    // where dotBf16 pads with zero.
    if (k % 2 && k != b.k)
      return (*this)(ta, b.trans, m, n, k, alpha, a, lda, b.b, b.ldb, beta, c,
                     ldc, work, causal);
    strata::cpu::dotBf16Packed(m, n, k, alpha, bits(a), ta == 'N' ? lda : 1,
                               ta == 'N' ? 1 : lda, b.packed, b.k, c, ldc,
                               beta != 0.0f, work, causal);
  }
  static int64_t workFloats(int64_t m, int64_t n, int64_t k) {
    return strata::cpu::dotBf16WorkFloats(m, n, k);
  }
};
#endif

/// n floats rounded up to whole cache lines (of 16 floats).
int64_t threadFloats(int64_t n) { return (n + 15) / 16 * 16; }

/// Per-thread scratch of attentionBlocks: the block's probabilities, the
/// output rows in f32 (when T is not f32) and the products' work memory.
template <typename T, typename Products>
int64_t attentionScratch(int64_t t, int64_t d, int64_t dv) {
  const int64_t block = kAttentionBlock;
  // (Each part starts on a cache line, where the products' work must.)
  int64_t staged = std::is_same_v<T, float> ? 0 : threadFloats(block * dv);
  // The head's keys and values as the products' B operands.
  int64_t operands = threadFloats(Products::operandFloats(d, t)) +
                     threadFloats(Products::operandFloats(t, dv));
  return threadFloats(threadFloats(block * t) + staged + operands +
                      std::max(Products::workFloats(block, t, d),
                               Products::workFloats(block, dv, t)));
}

/// How many rows ahead the attention kernels ask for the lines of rows
/// `stride` apart.
constexpr int64_t kPrefetchRows = 4;

/// Asks for the cache lines of the n elements at `row` (to write: in the
/// exclusive state).
template <bool Write, typename T> void prefetchRow(const T *row, int64_t n) {
  const char *p = reinterpret_cast<const char *>(row);
  for (int64_t b = 0; b < int64_t(n * sizeof(T)); b += 64)
    __builtin_prefetch(p + b, Write ? 1 : 0, 3);
}

/// `rows` rows of n elements `stride` apart, widened to contiguous rows of
/// n floats.
template <typename T>
void widenRows(float *to, const T *from, int64_t stride, int64_t rows,
               int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kPrefetchRows < rows)
      prefetchRow<false>(from + (r + kPrefetchRows) * stride, n);
    widen(to + r * n, from + r * stride, n);
  }
}

// The f32 products of attention's blocks, in register tiles of kF32MR rows
// by kF32NR columns (two of this build's widest vectors; one FMA a term in
// the vector builds, a product and a sum in the baseline one), over B
// packed in panels of kF32NR columns: A is read in place, and a head's keys
// and values are packed once for all its blocks.
#if defined(__AVX512F__)
constexpr int kF32Lanes = 16, kF32MR = 8;
#elif defined(__AVX2__)
constexpr int kF32Lanes = 8, kF32MR = 6;
#else
constexpr int kF32Lanes = 4, kF32MR = 6;
#endif
constexpr int64_t kF32NR = 2 * kF32Lanes;
typedef float F32Vec __attribute__((vector_size(4 * kF32Lanes)));

inline F32Vec loadF32Vec(const float *p) {
  F32Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeF32Vec(float *p, F32Vec v) { std::memcpy(p, &v, sizeof v); }

/// Floats of k x n of B packed by packF32B.
int64_t packedF32BFloats(int64_t k, int64_t n) {
  return k * ((n + kF32NR - 1) / kF32NR * kF32NR);
}

/// B(p, j) = b[p * brs + j * bcs] (k x n, in T) as panels of kF32NR
/// columns, [n / kF32NR][k][kF32NR] floats, zero past column n.
template <typename T>
void packF32B(float *dst, const T *b, int64_t brs, int64_t bcs, int64_t k,
              int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += kF32NR) {
    float *panel = dst + j0 * k;
    const int64_t w = std::min(kF32NR, n - j0);
    if (bcs == 1) { // rows of B into rows of the panel
      for (int64_t p = 0; p < k; ++p) {
        float *to = panel + p * kF32NR;
        widen(to, b + p * brs + j0, w);
        std::fill(to + w, to + kF32NR, 0.0f);
      }
      continue;
    }
    // B transposed: its columns are the source's rows, 8 x 8 blocks of
    // them transposed in registers (f32, rows of B adjacent).
    int64_t jt = 0, pt = 0;
#if defined(__AVX2__)
    if constexpr (std::is_same_v<T, float>)
      if (brs == 1) {
        jt = w / 8 * 8, pt = k / 8 * 8;
        for (int64_t j = 0; j < jt; j += 8)
          for (int64_t p = 0; p < pt; p += 8)
            strata::cpu::transpose8x8(panel + p * kF32NR + j, kF32NR,
                                      b + (j0 + j) * bcs + p, bcs);
      }
#endif
    for (int64_t j = 0; j < w; ++j) {
      const T *column = b + (j0 + j) * bcs;
      for (int64_t p = j < jt ? pt : 0; p < k; ++p)
        panel[p * kF32NR + j] = float(column[p * brs]);
    }
    for (int64_t p = 0; p < k; ++p)
      std::fill(panel + p * kF32NR + w, panel + (p + 1) * kF32NR, 0.0f);
  }
}

/// One tile of C, R rows x `cols` (at most kF32NR): alpha * A(rows, p0 ..
/// p1) B(p0 .. p1, panel) (+ C), A(i, p) = a[i * ars + p * acs], `bp` a
/// panel of packF32B. The sums run over p in order.
template <int R>
void f32Tile(int64_t p0, int64_t p1, const float *a, int64_t ars, int64_t acs,
             const float *bp, float *c, int64_t ldc, int64_t cols, float alpha,
             bool accumulate) {
  // (Unrolled, so that the sums stay in registers.)
  F32Vec sum[R][2];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
    sum[i][0] = sum[i][1] = F32Vec{};
  for (int64_t p = p0; p < p1; ++p) {
    const F32Vec b0 = loadF32Vec(bp + p * kF32NR);
    const F32Vec b1 = loadF32Vec(bp + p * kF32NR + kF32Lanes);
    const float *ap = a + p * acs;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const float x = ap[i * ars];
      sum[i][0] += x * b0;
      sum[i][1] += x * b1;
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    float *ci = c + i * ldc;
    F32Vec r0 = alpha * sum[i][0], r1 = alpha * sum[i][1];
    if (cols == kF32NR) {
      if (accumulate) {
        r0 += loadF32Vec(ci);
        r1 += loadF32Vec(ci + kF32Lanes);
      }
      storeF32Vec(ci, r0);
      storeF32Vec(ci + kF32Lanes, r1);
      continue;
    }
    float row[kF32NR];
    storeF32Vec(row, r0);
    storeF32Vec(row + kF32Lanes, r1);
    for (int64_t j = 0; j < cols; ++j)
      ci[j] = accumulate ? ci[j] + row[j] : row[j];
  }
}

/// f32Tile<rows>, for rows in 1 .. sizeof...(R).
template <int... R>
void f32TileOf(std::integer_sequence<int, R...>, int64_t rows, int64_t p0,
               int64_t p1, const float *a, int64_t ars, int64_t acs,
               const float *bp, float *c, int64_t ldc, int64_t cols,
               float alpha, bool accumulate) {
  ((rows == R + 1 ? f32Tile<R + 1>(p0, p1, a, ars, acs, bp, c, ldc, cols, alpha,
                                   accumulate)
                  : void()),
   ...);
}

/// C[m x n] (rows ldc apart) = alpha A B (+ C) over B packed by packF32B
/// for `pk` rows, of which the first k are read. With `causal`, the tiles
/// and terms it makes known to be zero or unneeded are skipped (as
/// DotBf16.h describes).
void f32Tiles(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t ars, int64_t acs, const float *bp, int64_t pk, float *c,
              int64_t ldc, bool accumulate, Causal causal) {
  for (int64_t j0 = 0; j0 < n; j0 += kF32NR)
    for (int64_t i0 = 0; i0 < m; i0 += kF32MR) {
      const int64_t rows = std::min<int64_t>(kF32MR, m - i0);
      const int64_t cols = std::min(kF32NR, n - j0);
      auto [first, p1] = causal.terms(i0, rows, j0, k);
      const int64_t p0 = std::min(first, k);
      float *ct = c + i0 * ldc + j0;
      if (p0 >= p1) {
        if (!accumulate)
          for (int64_t i = 0; i < rows; ++i)
            std::fill_n(ct + i * ldc, cols, 0.0f);
        continue;
      }
      f32TileOf(std::make_integer_sequence<int, kF32MR>(), rows, p0, p1,
                a + i0 * ars, ars, acs, bp + j0 * pk, ct, ldc, cols, alpha,
                accumulate);
    }
}

/// The products of attention on tensors of type T where no dot-product
/// tiles of T serve, C = alpha op(A) op(B) + beta C with BLAS's conventions
/// (beta 0 or 1): f32 tiles (f32Tiles) on operands widened exactly as they
/// are used unless T is f32, a head's keys and values when they are packed
/// (`operand`), a block's A rows into `work`; no tensor is widened whole.
/// The products run single-threaded inside attention's parallel loops.
template <typename T> struct F32Products {
  /// op(B) packed, of which products read the first rows.
  struct Operand {
    const float *packed;
    int64_t k; // rows packed
  };
  static int64_t operandFloats(int64_t k, int64_t n) {
    return packedF32BFloats(k, n);
  }
  /// op(B) of k x n, stored as k rows of n ('N') or n rows of k ('T'),
  /// `ldb` elements apart, packed at `space`.
  template <typename TB>
  Operand operand(char tb, int64_t k, int64_t n, const TB *b, int64_t ldb,
                  float *space) const {
    packF32B(space, b, tb == 'N' ? ldb : 1, tb == 'N' ? 1 : ldb, k, n);
    return {space, k};
  }
  template <typename TA, typename TB>
  void operator()(char ta, char tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const TA *a, int64_t lda, const TB *b,
                  int64_t ldb, float beta, float *c, int64_t ldc, float *work,
                  Causal causal = {}) const {
    const Operand packed = operand(tb, k, n, b, ldb, work);
    (*this)(ta, m, n, k, alpha, a, lda, packed, beta, c, ldc,
            work + threadFloats(operandFloats(k, n)), causal);
  }
  template <typename TA>
  void operator()(char ta, int64_t m, int64_t n, int64_t k, float alpha,
                  const TA *a, int64_t lda, const Operand &b, float beta,
                  float *c, int64_t ldc, float *work,
                  Causal causal = {}) const {
    const float *wa;
    if constexpr (std::is_same_v<TA, float>) {
      wa = a;
    } else { // A's rows as stored, widened into contiguous rows
      int64_t rows = ta == 'N' ? m : k, cols = ta == 'N' ? k : m;
      widenRows(work, a, lda, rows, cols);
      wa = work, lda = cols;
    }
    f32Tiles(m, n, k, alpha, wa, ta == 'N' ? lda : 1, ta == 'N' ? 1 : lda,
             b.packed, b.k, c, ldc, beta != 0.0f, causal);
  }
  static int64_t workFloats(int64_t m, int64_t n, int64_t k) {
    return threadFloats(operandFloats(k, n)) + threadFloats(m * k);
  }
};

/// `rows` rows of n floats (contiguous) to rows `stride` elements apart.
template <typename T>
void narrowRows(T *to, int64_t stride, const float *from, int64_t rows,
                int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    // The rows are apart (heads interleave), which the hardware prefetcher
    // follows poorly: ask for a later row's lines while this one converts.
    if (r + kPrefetchRows < rows)
      prefetchRow<true>(to + (r + kPrefetchRows) * stride, n);
    narrow(to + r * stride, from + r * n, n);
  }
}

/// FlashAttention's schedule with whole rows of keys per block: for each
/// batch, head and block of kAttentionBlock query rows, the scores against
/// the keys the block sees (with `causal`, keys up to its last row), their
/// softmax and log-sum-exp, and the product with the values; the operands
/// read in place, in the layout of AttentionLayout. The probabilities exist
/// one block at a time, in `scratch` (attentionScratch floats per thread);
/// the products run single-threaded inside the parallel loop, so results do
/// not depend on the thread count. With `drop`, the probabilities are
/// dropped after the log-sum-exp is taken.
template <typename T, typename Products>
void attentionBlocks(T *out, float *lse, const T *q, const T *k, const T *v,
                     int64_t slices, const strata::AttentionLayout &at,
                     float scale, bool causal, const AttentionDropout &drop,
                     float *scratch, Products product) {
  const int64_t block = kAttentionBlock;
  const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
  const int64_t perThread = attentionScratch<T, Products>(t, d, dv);
  const int64_t ldq = at.rowStride(), ldk = at.keyRowStride();
  const int64_t ldv = at.valueRowStride(), ldo = at.outputRowStride();
  int64_t blocks = (s + block - 1) / block;
  // A thread's blocks are consecutive (static schedule), mostly of one
  // head: it prepares the head's keys and values when they change (not
  // between the query heads of a group).
  std::vector<int64_t> threadHead(omp_get_max_threads(), -1);
  using Operand = typename Products::Operand;
  std::vector<Operand> keysT(threadHead.size()), values(threadHead.size());
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t h = 0; h < slices; ++h)
    for (int64_t b = 0; b < blocks; ++b) {
      int thread = omp_get_thread_num();
      float *p = scratch + thread * perThread;
      float *staged = p + threadFloats(block * t);
      float *operands =
          staged + (std::is_same_v<T, float> ? 0 : threadFloats(block * dv));
      float *work = operands + threadFloats(Products::operandFloats(d, t)) +
                    threadFloats(Products::operandFloats(t, dv));
      if (threadHead[thread] != at.kvSlice(h)) {
        threadHead[thread] = at.kvSlice(h);
        keysT[thread] =
            product.operand('T', d, t, k + at.key(h, 0), ldk, operands);
        values[thread] = product.operand(
            'N', t, dv, v + at.value(h, 0), ldv,
            operands + threadFloats(Products::operandFloats(d, t)));
      }
      int64_t i0 = b * block, rows = std::min(block, s - i0);
      int64_t keys = causal ? i0 + rows : t;
      // (The masked scores and probabilities are not computed.)
      auto masked = [&](Causal::Kind kind) {
        return causal ? Causal{kind, i0} : Causal{};
      };
      product('N', rows, keys, d, scale, q + at.query(h, i0), ldq,
              keysT[thread], 0.0f, p, keys, work, masked(Causal::Output));
      for (int64_t r = 0; r < rows; ++r) {
        float *x = p + r * keys;
        int64_t limit = causal ? i0 + r + 1 : keys;
        float mx = rowMax(x, limit);
        float sum = attentionRow(x, limit, keys, mx);
        lse[at.lse(h, i0 + r)] = mx + std::log(sum);
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < limit; ++j)
          x[j] *= inv;
        if (drop)
          drop.apply(x, x, limit, at.probability(h, i0 + r, 0));
      }
      // f32 rows go straight to the output, others through `staged`.
      T *o = out + at.output(h, i0);
      float *rowsOut;
      int64_t ldOut;
      if constexpr (std::is_same_v<T, float>)
        rowsOut = o, ldOut = ldo;
      else
        rowsOut = staged, ldOut = dv;
      product('N', rows, dv, keys, 1.0f, p, keys, values[thread], 0.0f, rowsOut,
              ldOut, work, masked(Causal::Rows));
      if constexpr (!std::is_same_v<T, float>)
        narrowRows(o, ldo, staged, rows, dv);
    }
}

/// Per-thread scratch of attentionGradBlocks: the block's probabilities and
/// their gradient; when T is not f32, the block's dq rows and the head's dk
/// and dv in f32; the products' work memory.
template <typename T, typename Products>
int64_t attentionGradScratch(int64_t t, int64_t d, int64_t dv) {
  const int64_t block = kAttentionBlock;
  // (Each part starts on a cache line, where the products' work must.)
  int64_t staged = std::is_same_v<T, float>
                       ? 0
                       : threadFloats(block * d) + threadFloats(t * d) +
                             threadFloats(t * dv);
  int64_t work = std::max(
      {Products::workFloats(block, t, d), Products::workFloats(t, dv, block),
       Products::workFloats(block, t, dv), Products::workFloats(block, d, t),
       Products::workFloats(t, d, block)});
  // The head's keys (as K^T and K) and values (as V^T).
  int64_t operands = threadFloats(Products::operandFloats(d, t)) +
                     threadFloats(Products::operandFloats(dv, t)) +
                     threadFloats(Products::operandFloats(t, d));
  // Last, the block's dropout mask: a byte per probability.
  return threadFloats(2 * threadFloats(block * t) + staged + operands + work +
                      threadFloats((block * t + 3) / 4));
}

/// Floats of attentionGradBlocks' partial key and value gradients: with
/// grouped-query attention, one [t, d] and one [t, dv] per query slice
/// (summed over each group after); none otherwise.
int64_t attentionGradPartials(const strata::AttentionLayout &at,
                              int64_t slices) {
  return at.group() > 1 ? slices * at.t * (at.d + at.dv) : 0;
}

/// The gradients of attentionBlocks, per batch and head (dk and dv sum over
/// the head's query blocks; with grouped-query attention each query head's
/// sums go to `partials` (attentionGradPartials floats), which are then
/// added up over each group in the order of its heads, so that results do
/// not depend on the thread count): the probabilities P of each block
/// recomputed from the log-sum-exp, dV += P^T dO, dP = dO V^T, dS = P (dP -
/// rowsum(dO O)), dQ = scale dS K, dK += scale dS^T Q. With `drop` (mask M,
/// keep scale c): dV += (c M P)^T dO and dP = c M (dO V^T); rowsum(dO O) is
/// still the row's sum of the dropped probabilities times dP. `scratch`:
/// attentionGradScratch floats per thread.
template <typename T, typename Products>
void attentionGradBlocks(T *dq, T *dk, T *dV, const T *q, const T *k,
                         const T *v, const T *out, const float *lse,
                         const T *dout, int64_t slices,
                         const strata::AttentionLayout &at, float scale,
                         bool causal, const AttentionDropout &drop,
                         float *scratch, float *partials, Products product) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const int64_t block = kAttentionBlock;
  const int64_t s = at.s, t = at.t, d = at.d, dv = at.dv;
  const int64_t perThread = attentionGradScratch<T, Products>(t, d, dv);
  const int64_t ldq = at.rowStride(), ldk = at.keyRowStride();
  const int64_t ldv = at.valueRowStride(), ldo = at.outputRowStride();
#pragma omp parallel for schedule(dynamic)
  for (int64_t h = 0; h < slices; ++h) {
    float *p = scratch + omp_get_thread_num() * perThread;
    float *dp = p + threadFloats(block * t);
    // The head's dk and dv, summed over its blocks: its partials (grouped
    // heads), in place for f32 (rows ldk and ldv apart), in f32 beside the
    // block's dq rows otherwise.
    float *dqRows = dp + threadFloats(block * t);
    float *stagedK = dqRows + threadFloats(block * d);
    float *stagedV = stagedK + threadFloats(t * d);
    float *operands = f32 ? dqRows : stagedV + threadFloats(t * dv);
    float *dkh = stagedK, *dvh = stagedV;
    int64_t lddk = d, lddv = dv;
    if (partials) {
      dkh = partials + h * t * (d + dv);
      dvh = dkh + t * d;
    } else if constexpr (f32) {
      dkh = dk + at.key(h, 0);
      dvh = dV + at.value(h, 0);
      lddk = ldk;
      lddv = ldv;
    }
    float *work = operands + threadFloats(Products::operandFloats(d, t)) +
                  threadFloats(Products::operandFloats(dv, t)) +
                  threadFloats(Products::operandFloats(t, d));
    auto *keep = reinterpret_cast<uint8_t *>(p + perThread -
                                             threadFloats((block * t + 3) / 4));
    for (int64_t j = 0; j < t; ++j) {
      std::fill_n(dkh + j * lddk, d, 0.0f);
      std::fill_n(dvh + j * lddv, dv, 0.0f);
    }
    const T *kh = k + at.key(h, 0), *vh = v + at.value(h, 0);
    const auto keysT = product.operand('T', d, t, kh, ldk, operands);
    float *next = operands + threadFloats(Products::operandFloats(d, t));
    const auto valuesT = product.operand('T', dv, t, vh, ldv, next);
    next += threadFloats(Products::operandFloats(dv, t));
    const auto keysN = product.operand('N', t, d, kh, ldk, next);
    for (int64_t i0 = 0; i0 < s; i0 += block) {
      int64_t rows = std::min(block, s - i0);
      int64_t keys = causal ? i0 + rows : t;
      const T *qb = q + at.query(h, i0);
      const T *dob = dout + at.output(h, i0);
      const T *ob = out + at.output(h, i0);
      auto masked = [&](Causal::Kind kind) {
        return causal ? Causal{kind, i0} : Causal{};
      };
      product('N', rows, keys, d, scale, qb, ldq, keysT, 0.0f, p, keys, work,
              masked(Causal::Output));
      for (int64_t r = 0; r < rows; ++r)
        attentionRow(p + r * keys, causal ? i0 + r + 1 : keys, keys,
                     lse[at.lse(h, i0 + r)]);
      // dV from the dropped probabilities (in dp until dO V^T takes it).
      const float *pv = p;
      if (drop) {
        for (int64_t r = 0; r < rows; ++r) {
          drop.mask(keep + r * keys, keys, at.probability(h, i0 + r, 0));
          drop.apply(dp + r * keys, p + r * keys, keep + r * keys, keys);
        }
        pv = dp;
      }
      product('T', 'N', keys, dv, rows, 1.0f, pv, keys, dob, ldo, 1.0f, dvh,
              lddv, work, masked(Causal::Columns));
      product('N', rows, keys, dv, 1.0f, dob, ldo, valuesT, 0.0f, dp, keys,
              work, masked(Causal::Output));
      for (int64_t r = 0; r < rows; ++r) {
        if (drop)
          drop.apply(dp + r * keys, dp + r * keys, keep + r * keys, keys);
        const T *dor = dob + r * ldo, *o = ob + r * ldo;
        if (r + kPrefetchRows < rows)
          prefetchRow<false>(ob + (r + kPrefetchRows) * ldo, dv);
        float dot = float(laneSum(
            dv, [&](int64_t c) { return float(dor[c]) * float(o[c]); }));
        float *pr = p + r * keys, *dpr = dp + r * keys;
#pragma omp simd
        for (int64_t j = 0; j < keys; ++j)
          dpr[j] = pr[j] * (dpr[j] - dot);
      }
      // f32 rows go straight to dq, others through `dqRows`.
      T *dqb = dq + at.query(h, i0);
      float *dqOut;
      int64_t ldDq;
      if constexpr (f32)
        dqOut = dqb, ldDq = ldq;
      else
        dqOut = dqRows, ldDq = d;
      product('N', rows, d, keys, scale, dp, keys, keysN, 0.0f, dqOut, ldDq,
              work, masked(Causal::Rows));
      if constexpr (!f32)
        narrowRows(dqb, ldq, dqRows, rows, d);
      product('T', 'N', keys, d, rows, scale, dp, keys, qb, ldq, 1.0f, dkh,
              lddk, work, masked(Causal::Columns));
    }
    if (!f32 && !partials) {
      narrowRows(dk + at.key(h, 0), ldk, dkh, t, d);
      narrowRows(dV + at.value(h, 0), ldv, dvh, t, dv);
    }
  }
  if (!partials)
    return;
  // Each key and value head's gradients: its group's partials added up in
  // the order of the heads (into the first head's), rounded once.
  const int64_t group = at.group(), width = t * (d + dv);
#pragma omp parallel for schedule(static)
  for (int64_t first = 0; first < slices; first += group) {
    float *sum = partials + first * width;
    for (int64_t r = 1; r < group; ++r) {
      const float *part = partials + (first + r) * width;
#pragma omp simd
      for (int64_t e = 0; e < width; ++e)
        sum[e] += part[e];
    }
    narrowRows(dk + at.key(first, 0), ldk, sum, t, d);
    narrowRows(dV + at.value(first, 0), ldv, sum + t * d, t, dv);
  }
}
}

} // namespace

/// The attention of f32 tensors, of bf16 ones with bf16 products (f32
/// sums; the scores, softmax and log-sum-exp in f32, the probabilities
/// rounded to bf16 for their product with the values) where the processor
/// has bf16 dot products (AVX512-BF16, in the AVX-512 build), or else (and
/// for f16) with f32 products of operands widened as the blocks read them
/// (F32Products). The log-sum-exp is f32 either way.
void STRATA_RT_KERNEL(strata_rt_attention)(
    StrataRtContext *ctx, int64_t site, void *outData, int64_t outType,
    void *lseData, int64_t lseType, const void *qData, int64_t qType,
    const void *kData, int64_t kType, const void *vData, int64_t vType,
    int64_t batch, int64_t heads, int64_t kvHeads, int64_t s, int64_t t,
    int64_t d, int64_t dv, double scale, int64_t causal, double dropout,
    int64_t dropoutKey, int64_t microBatches, int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention", {lseType}) ||
      !causalShapeOk(ctx, site, "attention", causal, s, t) ||
      !kvHeadsOk(ctx, site, "attention", heads, kvHeads))
    return;
  auto *lse = static_cast<float *>(lseData);
  const int threads = omp_get_max_threads();
  const strata::AttentionLayout at{heads, s, t, d, dv, kvHeads};
  const int64_t slices = batch * heads;
  const AttentionDropout drop(ctx, dropout, dropoutKey, microBatches,
                              microBatch, slices, s, t);
  withSameFloatType(
      ctx, site, "attention", {outType, qType, kType, vType}, [&](auto tag) {
        using T = decltype(tag);
        auto *out = static_cast<T *>(outData);
        auto *q = static_cast<const T *>(qData);
        auto *k = static_cast<const T *>(kData);
        auto *v = static_cast<const T *>(vData);
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<T, BFloat16>)
          if (strata::cpu::hasBf16DotProducts()) {
            attentionBlocks(
                out, lse, q, k, v, slices, at, float(scale), causal != 0, drop,
                ctx->scratchFloats(
                    threads * attentionScratch<T, DotBf16Products>(t, d, dv)),
                DotBf16Products{});
            return;
          }
#endif
        using Products = F32Products<T>;
        attentionBlocks(out, lse, q, k, v, slices, at, float(scale),
                        causal != 0, drop,
                        ctx->scratchFloats(
                            threads * attentionScratch<T, Products>(t, d, dv)),
                        Products{});
      });
}

/// The gradients of strata_rt_attention (attentionGradBlocks), in the
/// tensors' type, with the forward's choice of products.
void STRATA_RT_KERNEL(strata_rt_attention_grad)(
    StrataRtContext *ctx, int64_t site, void *dqData, int64_t dqType,
    void *dkData, int64_t dkType, void *dvData, int64_t dvType,
    const void *qData, int64_t qType, const void *kData, int64_t kType,
    const void *vData, int64_t vType, const void *outData, int64_t outType,
    const void *lseData, int64_t lseType, const void *doutData,
    int64_t doutType, int64_t batch, int64_t heads, int64_t kvHeads, int64_t s,
    int64_t t, int64_t d, int64_t dv, double scale, int64_t causal,
    double dropout, int64_t dropoutKey, int64_t microBatches,
    int64_t microBatch) {
  if (!onlyF32(ctx, site, "attention_grad", {lseType}) ||
      !causalShapeOk(ctx, site, "attention_grad", causal, s, t) ||
      !kvHeadsOk(ctx, site, "attention_grad", heads, kvHeads))
    return;
  auto *lse = static_cast<const float *>(lseData);
  const int threads = omp_get_max_threads();
  const strata::AttentionLayout at{heads, s, t, d, dv, kvHeads};
  const int64_t slices = batch * heads;
  const AttentionDropout drop(ctx, dropout, dropoutKey, microBatches,
                              microBatch, slices, s, t);
  withSameFloatType(
      ctx, site, "attention_grad",
      {dqType, dkType, dvType, qType, kType, vType, outType, doutType},
      [&](auto tag) {
        using T = decltype(tag);
        auto *dq = static_cast<T *>(dqData);
        auto *dk = static_cast<T *>(dkData);
        auto *dV = static_cast<T *>(dvData);
        auto *q = static_cast<const T *>(qData);
        auto *k = static_cast<const T *>(kData);
        auto *v = static_cast<const T *>(vData);
        auto *out = static_cast<const T *>(outData);
        auto *dout = static_cast<const T *>(doutData);
        // Per-thread scratch, then the partials of grouped heads.
        const int64_t partials = attentionGradPartials(at, slices);
        auto run = [&](auto product) {
          const int64_t perThread =
              attentionGradScratch<T, decltype(product)>(t, d, dv);
          float *scratch = ctx->scratchFloats(threads * perThread + partials);
          attentionGradBlocks(
              dq, dk, dV, q, k, v, out, lse, dout, slices, at, float(scale),
              causal != 0, drop, scratch,
              partials ? scratch + threads * perThread : nullptr, product);
        };
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<T, BFloat16>)
          if (strata::cpu::hasBf16DotProducts())
            return run(DotBf16Products{});
#endif
        run(F32Products<T>{});
      });
}

void STRATA_RT_KERNEL(strata_rt_layer_norm)(
    StrataRtContext *ctx, int64_t site, void *yData, int64_t yType,
    const void *xData, int64_t xType, const void *gammaData, int64_t gammaType,
    const void *betaData, int64_t betaType, int64_t rows, int64_t n,
    double eps) {
  normalizeRows<true>(ctx, site, "layer_norm",
                      {yType, xType, gammaType, betaType}, yData, xData,
                      gammaData, betaData, rows, n, eps);
}

void STRATA_RT_KERNEL(strata_rt_layer_norm_grad)(
    StrataRtContext *ctx, int64_t site, void *dxData, int64_t dxType,
    void *dgammaData, int64_t dgammaType, void *dbetaData, int64_t dbetaType,
    const void *xData, int64_t xType, const void *gammaData, int64_t gammaType,
    const void *dyData, int64_t dyType, int64_t rows, int64_t n, double eps) {
  normalizeRowsGrad<true>(
      ctx, site, "layer_norm_grad",
      {dxType, dgammaType, dbetaType, xType, gammaType, dyType}, dxData,
      dgammaData, dbetaData, xData, gammaData, dyData, rows, n, eps);
}

void STRATA_RT_KERNEL(strata_rt_rms_norm)(StrataRtContext *ctx, int64_t site,
                                          void *yData, int64_t yType,
                                          const void *xData, int64_t xType,
                                          const void *gammaData,
                                          int64_t gammaType, int64_t rows,
                                          int64_t n, double eps) {
  normalizeRows<false>(ctx, site, "rms_norm", {yType, xType, gammaType}, yData,
                       xData, gammaData, nullptr, rows, n, eps);
}

void STRATA_RT_KERNEL(strata_rt_rms_norm_grad)(
    StrataRtContext *ctx, int64_t site, void *dxData, int64_t dxType,
    void *dgammaData, int64_t dgammaType, const void *xData, int64_t xType,
    const void *gammaData, int64_t gammaType, const void *dyData,
    int64_t dyType, int64_t rows, int64_t n, double eps) {
  normalizeRowsGrad<false>(ctx, site, "rms_norm_grad",
                           {dxType, dgammaType, xType, gammaType, dyType},
                           dxData, dgammaData, nullptr, xData, gammaData,
                           dyData, rows, n, eps);
}

void STRATA_RT_KERNEL(strata_rt_embedding)(StrataRtContext *ctx, int64_t site,
                                           void *outData, int64_t outType,
                                           const void *tableData,
                                           int64_t tableType, const void *ids,
                                           int64_t idType, int64_t count,
                                           int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "embedding", idType))
    return;
  withSameFloatType(
      ctx, site, "embedding", {outType, tableType}, [&](auto tag) {
        using T = decltype(tag);
        auto *out = static_cast<T *>(outData);
        auto *table = static_cast<const T *>(tableData);
        for (int64_t i = 0; i < count; ++i) {
          int64_t id = readInt(ids, idType, i);
          if (id < 0 || id >= vocab) {
            ctx->fail(site, "id " + std::to_string(id) + " outside [0, " +
                                std::to_string(vocab) + ") (position " +
                                std::to_string(i) + ")");
            std::fill_n(out + i * width, width, T(0.0f));
            continue;
          }
          std::memcpy(out + i * width, table + id * width, width * sizeof(T));
        }
      });
}

void STRATA_RT_KERNEL(strata_rt_embedding_grad)(
    StrataRtContext *ctx, int64_t site, void *dtableData, int64_t dtableType,
    const void *ids, int64_t idType, const void *dyData, int64_t dyType,
    int64_t count, int64_t vocab, int64_t width, int64_t paddingIdx) {
  if (!integerIds(ctx, site, "embedding_grad", idType))
    return;
  withSameFloatType(ctx, site, "embedding_grad", {dtableType, dyType},
                    [&](auto tag) {
                      using T = decltype(tag);
                      auto *dtable = static_cast<T *>(dtableData);
                      auto *dy = static_cast<const T *>(dyData);
                      // Sums in f32 (for low-precision tables in scratch), in
                      // id order (deterministic).
                      constexpr bool kF32 = std::is_same_v<T, float>;
                      float *sum = kF32 ? reinterpret_cast<float *>(dtable)
                                        : ctx->scratchFloats(vocab * width);
                      std::fill_n(sum, vocab * width, 0.0f);
                      for (int64_t i = 0; i < count; ++i) {
                        int64_t id = readInt(ids, idType, i);
                        if (id < 0 || id >= vocab || id == paddingIdx)
                          continue; // (the first reported by the forward)
                        float *row = sum + id * width;
                        const T *g = dy + i * width;
                        if constexpr (kF32) {
#pragma omp simd
                          for (int64_t j = 0; j < width; ++j)
                            row[j] += g[j];
                        } else {
                          // Widened a block at a time (F16C for f16).
                          float w[kBlock];
                          for (int64_t j0 = 0; j0 < width; j0 += kBlock) {
                            int64_t m = std::min(kBlock, width - j0);
                            widen(w, g + j0, m);
#pragma omp simd
                            for (int64_t j = 0; j < m; ++j)
                              row[j0 + j] += w[j];
                          }
                        }
                      }
                      if constexpr (!kF32)
                        narrow(dtable, sum, vocab * width);
                    });
}

} // extern "C"

namespace {
// The cross-entropy's rows, over f32 values: bf16 and f16 rows are widened
// (exactly) into scratch first, so that a row's sums are those of the f32
// kernel on the same values and a cast of the logits to f32 before the
// kernel changes nothing. Out of line, so that every type runs one copy.

/// The sum of exp(x[j] - mx) over a row.
__attribute__((noinline)) float crossEntropySum(const float *x, int64_t n,
                                                float mx) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j)
    sum += fastExp(x[j] - mx);
  return sum;
}

/// o = scale * (softmax(x) - onehot(label)) over a row (`o` may be `x`:
/// an element is read before it is written).
__attribute__((noinline)) void crossEntropyGradRow(float *o, const float *x,
                                                   int64_t n, int64_t label,
                                                   float scale) {
  float mx = rowMax(x, n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j)
    sum += (o[j] = fastExp(x[j] - mx));
  float f = scale / sum;
  for (int64_t j = 0; j < n; ++j)
    o[j] *= f;
  if (label >= 0 && label < n)
    o[label] -= scale;
}
} // namespace

extern "C" {

void STRATA_RT_KERNEL(strata_rt_cross_entropy)(
    StrataRtContext *ctx, int64_t site, void *lossData, int64_t lossType,
    const void *logitsData, int64_t logitsType, const void *labels,
    int64_t labelType, int64_t rows, int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "cross_entropy", labelType) ||
      !lossIsF32(ctx, site, "cross_entropy", lossType) ||
      !crossEntropyWidthOk(ctx, site, "cross_entropy", vocab, width))
    return;
  withSameFloatType(ctx, site, "cross_entropy", {logitsType}, [&](auto tag) {
    using T = decltype(tag);
    auto *loss = static_cast<float *>(lossData);
    auto *logits = static_cast<const T *>(logitsData);
    constexpr bool kF32 = std::is_same_v<T, float>;
    float *scratch =
        kF32 ? nullptr : ctx->scratchFloats(omp_get_max_threads() * vocab);
    std::vector<double> perRow(rows);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(|| : bad) if (rows * vocab >= kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t label = readInt(labels, labelType, r);
      if (label < 0 || label >= vocab) {
        bad = 1;
        perRow[r] = 0;
        continue;
      }
      const float *x;
      if constexpr (kF32) {
        x = logits + r * width;
      } else {
        float *row = scratch + omp_get_thread_num() * vocab;
        widen(row, logits + r * width, vocab);
        x = row;
      }
      float mx = rowMax(x, vocab);
      float sum = crossEntropySum(x, vocab, mx);
      perRow[r] = std::log(double(sum)) + mx - x[label];
    }
    if (bad)
      for (int64_t r = 0; r < rows; ++r) {
        int64_t label = readInt(labels, labelType, r);
        if (label < 0 || label >= vocab) {
          ctx->fail(site, "label " + std::to_string(label) + " outside [0, " +
                              std::to_string(vocab) + ") (position " +
                              std::to_string(r) + ")");
          break;
        }
      }
    double total = 0;
    for (double v : perRow)
      total += v;
    loss[0] = float(total / double(rows));
  });
}

void STRATA_RT_KERNEL(strata_rt_cross_entropy_grad)(
    StrataRtContext *ctx, int64_t site, void *dlogitsData, int64_t dlogitsType,
    const void *logitsData, int64_t logitsType, const void *labels,
    int64_t labelType, const void *dlossData, int64_t dlossType, int64_t rows,
    int64_t vocab, int64_t width) {
  if (!integerIds(ctx, site, "cross_entropy_grad", labelType) ||
      !lossIsF32(ctx, site, "cross_entropy_grad", dlossType) ||
      !crossEntropyWidthOk(ctx, site, "cross_entropy_grad", vocab, width))
    return;
  withSameFloatType(
      ctx, site, "cross_entropy_grad", {dlogitsType, logitsType},
      [&](auto tag) {
        using T = decltype(tag);
        auto *dlogits = static_cast<T *>(dlogitsData);
        auto *logits = static_cast<const T *>(logitsData);
        float scale = *static_cast<const float *>(dlossData) / float(rows);
        constexpr bool kF32 = std::is_same_v<T, float>;
        // Two rows a thread: the widened logits and the gradient.
        float *scratch =
            kF32 ? nullptr
                 : ctx->scratchFloats(omp_get_max_threads() * 2 * vocab);
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelGrain)
        for (int64_t r = 0; r < rows; ++r) {
          int64_t label = readInt(labels, labelType, r);
          T *out = dlogits + r * width;
          if constexpr (kF32) {
            crossEntropyGradRow(out, logits + r * width, vocab, label, scale);
          } else {
            float *x = scratch + omp_get_thread_num() * 2 * vocab;
            float *o = x + vocab;
            widen(x, logits + r * width, vocab);
            crossEntropyGradRow(o, x, vocab, label, scale);
            narrow(out, o, vocab);
          }
          std::fill(out + vocab, out + width, T(0.0f));
        }
      });
}

void STRATA_RT_KERNEL(strata_rt_lr_schedule)(StrataRtContext *ctx, int64_t site,
                                             void *lrData, int64_t lrType,
                                             const void *stepData,
                                             int64_t stepType, int64_t kind,
                                             double baseLr, int64_t warmupSteps,
                                             int64_t decaySteps, double minLr) {
  if (!onlyF32(ctx, site, "lr_schedule", {lrType}) ||
      !stepCounter(ctx, site, "lr_schedule", stepType))
    return;
  auto *step = static_cast<const int64_t *>(stepData);
  auto *lr = static_cast<float *>(lrData);
  if (kind != STRATA_RT_LR_CONSTANT && kind != STRATA_RT_LR_LINEAR_WARMUP &&
      kind != STRATA_RT_LR_COSINE)
    return ctx->fail(site, "unknown learning-rate schedule code " +
                               std::to_string(kind));
  double s = double(*step), warmup = double(warmupSteps);
  double value = baseLr;
  if (kind != STRATA_RT_LR_CONSTANT && warmup > 0 && s < warmup)
    value = baseLr * s / warmup;
  else if (kind == STRATA_RT_LR_COSINE) {
    double t = std::min(1.0, std::max(0.0, (s - warmup) / double(decaySteps)));
    value = minLr + (baseLr - minLr) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  *lr = float(value);
}

void STRATA_RT_KERNEL(strata_rt_global_norm)(StrataRtContext *ctx, int64_t site,
                                             void *outData, int64_t outType,
                                             int64_t count,
                                             const void *const *tensors,
                                             const int64_t *types,
                                             const int64_t *sizes) {
  if (!onlyF32(ctx, site, "global_norm", {outType}))
    return;
  // Fixed chunks summed in order: the same result on any thread count.
  constexpr int64_t kChunk = 1 << 13;
  double total = 0;
  for (int64_t t = 0; t < count; ++t) {
    int64_t n = sizes[t], chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks, 0.0);
    bool known = withFloatType(types[t], [&](auto type) {
      using T = decltype(type);
      const T *x = static_cast<const T *>(tensors[t]);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
      for (int64_t c = 0; c < chunks; ++c) {
        // Eight double lanes (element i in lane i % 8; chunks and blocks
        // start at multiples of 8), added in order: the loop vectorises.
        constexpr int kLanes = 8;
        double lane[kLanes] = {};
        auto add = [&](const float *v, int64_t m) {
          int64_t i = 0;
          for (; i + kLanes <= m; i += kLanes)
#pragma omp simd
            for (int k = 0; k < kLanes; ++k)
              lane[k] += double(v[i + k]) * v[i + k];
          for (; i < m; ++i)
            lane[i % kLanes] += double(v[i]) * v[i];
        };
        int64_t e = std::min(n, (c + 1) * kChunk);
        if constexpr (std::is_same_v<T, float>) {
          add(x + c * kChunk, e - c * kChunk);
        } else {
          float wide[kBlock];
          for (int64_t b = c * kChunk; b < e; b += kBlock) {
            int64_t m = std::min(kBlock, e - b);
            widen(wide, x + b, m);
            add(wide, m);
          }
        }
        double sum = 0;
        for (double v : lane)
          sum += v;
        partial[c] = sum;
      }
    });
    if (!known)
      return unsupportedType(ctx, site, "global_norm", types[t]);
    for (double p : partial)
      total += p;
  }
  *static_cast<float *>(outData) = float(std::sqrt(total));
}

void STRATA_RT_KERNEL(strata_rt_scale_by)(StrataRtContext *ctx, int64_t site,
                                          void *outData, int64_t outType,
                                          const void *inData, int64_t inType,
                                          int64_t n, const void *factorData,
                                          int64_t factorType) {
  if (!onlyF32(ctx, site, "scale_by", {factorType}) ||
      !sameTypes(ctx, site, "scale_by", {outType, inType}))
    return;
  // The scale kernel: float(in) * factor rounded to the type, in widened
  // blocks for bf16 and f16.
  STRATA_RT_KERNEL(strata_rt_unary)
  (ctx, site, STRATA_RT_UNARY_SCALE, outData, outType, inData, inType, n,
   double(*static_cast<const float *>(factorData)));
}

void STRATA_RT_KERNEL(strata_rt_clip)(StrataRtContext *ctx, int64_t site,
                                      void *outData, int64_t outType,
                                      const void *inData, int64_t inType,
                                      int64_t n, const void *normData,
                                      int64_t normType, double maxNorm) {
  if (!onlyF32(ctx, site, "clip", {normType}) ||
      !sameTypes(ctx, site, "clip", {outType, inType}))
    return;
  auto *norm = static_cast<const float *>(normData);
  float scale = float(maxNorm / std::max(double(*norm), maxNorm));
  // Gradients within the bound, in place (as the memory plan puts a
  // gradient that dies here), stay as they are: nothing to write.
  if (scale == 1.0f && outData == inData)
    return;
  // The scale kernel: float(in) * scale rounded to the type, in widened
  // blocks for bf16 and f16.
  STRATA_RT_KERNEL(strata_rt_unary)
  (ctx, site, STRATA_RT_UNARY_SCALE, outData, outType, inData, inType, n,
   double(scale));
}

void STRATA_RT_KERNEL(strata_rt_sgd)(StrataRtContext *ctx, int64_t site,
                                     void *newParamData, int64_t newParamType,
                                     const void *paramData, int64_t paramType,
                                     const void *gradData, int64_t gradType,
                                     const void *lrData, int64_t lrType,
                                     int64_t n, double weightDecay,
                                     const void *guard, int64_t guardType,
                                     void *newMaster, int64_t newMasterType,
                                     const void *master, int64_t masterType) {
  // In a group of updates: run at its end (Context.h).
  if (ctx->deferToGroup([=] {
        STRATA_RT_KERNEL(strata_rt_sgd)
        (ctx, site, newParamData, newParamType, paramData, paramType, gradData,
         gradType, lrData, lrType, n, weightDecay, guard, guardType, newMaster,
         newMasterType, master, masterType);
      }))
    return;
  UpdateOperands u;
  if (!onlyF32(ctx, site, "sgd", {lrType}) ||
      !u.bind(ctx, site, "sgd", n, newParamData, newParamType, paramData,
              paramType, gradData, gradType, newMaster, newMasterType, master,
              masterType))
    return;
  if (skipUpdate(ctx, site, "sgd", guard, guardType,
                 {{newParamData, paramData, bytesOf(n, paramType)},
                  {newMaster, master, bytesOf(n, STRATA_RT_F32)}}))
    return;
  float l = *static_cast<const float *>(lrData), wd = float(weightDecay);
  u.blocks([&](int64_t s, int64_t m, const float *grad) {
    const float *param = u.param + s;
    float *newParam = u.newParam + s;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i)
      newParam[i] = param[i] - l * (grad[i] + wd * param[i]);
  });
}

void STRATA_RT_KERNEL(strata_rt_momentum)(
    StrataRtContext *ctx, int64_t site, void *newParamData,
    int64_t newParamType, void *newVelocityData, int64_t newVelocityType,
    const void *paramData, int64_t paramType, const void *gradData,
    int64_t gradType, const void *velocityData, int64_t velocityType,
    const void *lrData, int64_t lrType, int64_t n, double momentum,
    double weightDecay, int64_t nesterov, const void *guard, int64_t guardType,
    void *newMaster, int64_t newMasterType, const void *master,
    int64_t masterType) {
  // In a group of updates: run at its end (Context.h).
  if (ctx->deferToGroup([=] {
        STRATA_RT_KERNEL(strata_rt_momentum)
        (ctx, site, newParamData, newParamType, newVelocityData,
         newVelocityType, paramData, paramType, gradData, gradType,
         velocityData, velocityType, lrData, lrType, n, momentum, weightDecay,
         nesterov, guard, guardType, newMaster, newMasterType, master,
         masterType);
      }))
    return;
  UpdateOperands u;
  if (!onlyF32(ctx, site, "momentum",
               {newVelocityType, velocityType, lrType}) ||
      !u.bind(ctx, site, "momentum", n, newParamData, newParamType, paramData,
              paramType, gradData, gradType, newMaster, newMasterType, master,
              masterType))
    return;
  if (skipUpdate(ctx, site, "momentum", guard, guardType,
                 {{newParamData, paramData, bytesOf(n, paramType)},
                  {newMaster, master, bytesOf(n, STRATA_RT_F32)},
                  {newVelocityData, velocityData, bytesOf(n, STRATA_RT_F32)}}))
    return;
  float l = *static_cast<const float *>(lrData), mu = float(momentum),
        wd = float(weightDecay);
  u.blocks([&](int64_t s, int64_t m, const float *grad) {
    const float *param = u.param + s;
    float *newParam = u.newParam + s;
    auto *newVelocity = static_cast<float *>(newVelocityData) + s;
    auto *velocity = static_cast<const float *>(velocityData) + s;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      float p = param[i], g = grad[i] + wd * p;
      float v = mu * velocity[i] + g;
      newVelocity[i] = v;
      newParam[i] = p - l * (nesterov ? g + mu * v : v);
    }
  });
}

void STRATA_RT_KERNEL(strata_rt_adam)(
    StrataRtContext *ctx, int64_t site, int64_t kind, void *newParamData,
    int64_t newParamType, void *newMData, int64_t newMType, void *newVData,
    int64_t newVType, const void *paramData, int64_t paramType,
    const void *gradData, int64_t gradType, const void *mData, int64_t mType,
    const void *vData, int64_t vType, const void *lrData, int64_t lrType,
    const void *stepData, int64_t stepType, int64_t n, double beta1,
    double beta2, double eps, double weightDecay, const void *guard,
    int64_t guardType, void *newMaster, int64_t newMasterType,
    const void *master, int64_t masterType) {
  // In a group of updates: run at its end (Context.h).
  if (ctx->deferToGroup([=] {
        STRATA_RT_KERNEL(strata_rt_adam)
        (ctx, site, kind, newParamData, newParamType, newMData, newMType,
         newVData, newVType, paramData, paramType, gradData, gradType, mData,
         mType, vData, vType, lrData, lrType, stepData, stepType, n, beta1,
         beta2, eps, weightDecay, guard, guardType, newMaster, newMasterType,
         master, masterType);
      }))
    return;
  UpdateOperands u;
  if (!onlyF32(ctx, site, "adam", {newMType, newVType, mType, vType, lrType}) ||
      !stepCounter(ctx, site, "adam", stepType) ||
      !u.bind(ctx, site, "adam", n, newParamData, newParamType, paramData,
              paramType, gradData, gradType, newMaster, newMasterType, master,
              masterType))
    return;
  if (kind != STRATA_RT_ADAM && kind != STRATA_RT_ADAMW &&
      kind != STRATA_RT_LAMB)
    return ctx->fail(site, "unknown Adam-family optimizer code " +
                               std::to_string(kind));
  if (skipUpdate(ctx, site, "adam", guard, guardType,
                 {{newParamData, paramData, bytesOf(n, paramType)},
                  {newMaster, master, bytesOf(n, STRATA_RT_F32)},
                  {newMData, mData, bytesOf(n, STRATA_RT_F32)},
                  {newVData, vData, bytesOf(n, STRATA_RT_F32)}}))
    return;
  auto *step = static_cast<const int64_t *>(stepData);
  auto *newM = static_cast<float *>(newMData);
  auto *newV = static_cast<float *>(newVData);
  auto *m = static_cast<const float *>(mData);
  auto *v = static_cast<const float *>(vData);
  double t = double(*step);
  // 1 - beta from the doubles, as the bias corrections: 1 - float(0.999) is
  // 1.3e-5 below 0.001, which biased every update (the reference, PyTorch
  // and Paddle take it in double).
  float b1 = float(beta1), b2 = float(beta2), e = float(eps);
  float ob1 = float(1.0 - beta1), ob2 = float(1.0 - beta2);
  float c1 = float(1.0 - std::pow(beta1, t)), c2 = float(1.0 - std::pow(beta2, t));
  float l = *static_cast<const float *>(lrData), wd = float(weightDecay);
  bool adam = kind == STRATA_RT_ADAM;
  if (kind != STRATA_RT_LAMB) {
    float keep = adam ? 1.0f : 1.0f - l * wd;
    float l2 = adam ? wd : 0.0f;
    u.blocks([&](int64_t s, int64_t count, const float *grad) {
      const float *param = u.param + s, *ms = m + s, *vs = v + s;
      float *newParam = u.newParam + s, *newMs = newM + s, *newVs = newV + s;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) {
        float p = param[i], g = grad[i] + l2 * p;
        float mi = b1 * ms[i] + ob1 * g;
        float vi = b2 * vs[i] + ob2 * g * g;
        newMs[i] = mi;
        newVs[i] = vi;
        newParam[i] = p * keep - l * ((mi / c1) / (std::sqrt(vi / c2) + e));
      }
    });
    return;
  }
  // LAMB: the update direction, then the trust ratio of the whole tensor.
  const float *param = u.param, *grad = u.wholeGrad(ctx);
  float *newParam = u.newParam;
  float *r = ctx->scratchFloats(n);
  double pn = 0, rn = 0;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i], g = grad[i];
    float mi = b1 * m[i] + ob1 * g;
    float vi = b2 * v[i] + ob2 * g * g;
    newM[i] = mi;
    newV[i] = vi;
    r[i] = (mi / c1) / (std::sqrt(vi / c2) + e) + wd * p;
    pn += double(p) * p;
    rn += double(r[i]) * r[i];
  }
  float trust = (pn > 0 && rn > 0) ? float(std::sqrt(pn) / std::sqrt(rn)) : 1.0f;
  for (int64_t i = 0; i < n; ++i)
    newParam[i] = param[i] - l * trust * r[i];
  u.finish();
}

void STRATA_RT_KERNEL(strata_rt_lars)(
    StrataRtContext *ctx, int64_t site, void *newParamData,
    int64_t newParamType, void *newVelocityData, int64_t newVelocityType,
    const void *paramData, int64_t paramType, const void *gradData,
    int64_t gradType, const void *velocityData, int64_t velocityType,
    const void *lrData, int64_t lrType, int64_t n, double momentum,
    double weightDecay, double larsCoeff, double eps, const void *guard,
    int64_t guardType, void *newMaster, int64_t newMasterType,
    const void *master, int64_t masterType) {
  // In a group of updates: run at its end (Context.h).
  if (ctx->deferToGroup([=] {
        STRATA_RT_KERNEL(strata_rt_lars)
        (ctx, site, newParamData, newParamType, newVelocityData,
         newVelocityType, paramData, paramType, gradData, gradType,
         velocityData, velocityType, lrData, lrType, n, momentum, weightDecay,
         larsCoeff, eps, guard, guardType, newMaster, newMasterType, master,
         masterType);
      }))
    return;
  UpdateOperands u;
  if (!onlyF32(ctx, site, "lars", {newVelocityType, velocityType, lrType}) ||
      !u.bind(ctx, site, "lars", n, newParamData, newParamType, paramData,
              paramType, gradData, gradType, newMaster, newMasterType, master,
              masterType))
    return;
  if (skipUpdate(ctx, site, "lars", guard, guardType,
                 {{newParamData, paramData, bytesOf(n, paramType)},
                  {newMaster, master, bytesOf(n, STRATA_RT_F32)},
                  {newVelocityData, velocityData, bytesOf(n, STRATA_RT_F32)}}))
    return;
  const float *param = u.param, *grad = u.wholeGrad(ctx);
  float *newParam = u.newParam;
  auto *newVelocity = static_cast<float *>(newVelocityData);
  auto *velocity = static_cast<const float *>(velocityData);
  double pn = 0, gn = 0;
  for (int64_t i = 0; i < n; ++i) {
    pn += double(param[i]) * param[i];
    gn += double(grad[i]) * grad[i];
  }
  pn = std::sqrt(pn);
  gn = std::sqrt(gn);
  double l = *static_cast<const float *>(lrData);
  float localLr = float((pn > 0 && gn > 0)
                            ? l * larsCoeff * pn / (gn + weightDecay * pn + eps)
                            : l);
  float mu = float(momentum), wd = float(weightDecay);
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float v = mu * velocity[i] + localLr * (grad[i] + wd * p);
    newVelocity[i] = v;
    newParam[i] = p - v;
  }
  u.finish();
}

void STRATA_RT_KERNEL(strata_rt_is_finite)(StrataRtContext *ctx, int64_t site,
                                           void *out, int64_t outType,
                                           const void *in, int64_t inType) {
  if (!stepCounter(ctx, site, "is_finite", outType) ||
      !onlyF32(ctx, site, "is_finite", {inType}))
    return;
  *static_cast<int64_t *>(out) =
      std::isfinite(*static_cast<const float *>(in)) ? 1 : 0;
}

void STRATA_RT_KERNEL(strata_rt_update_loss_scaling)(
    StrataRtContext *ctx, int64_t site, void *newScaleData,
    int64_t newScaleType, void *newGoodData, int64_t newGoodType,
    void *newBadData, int64_t newBadType, const void *normData,
    int64_t normType, const void *scaleData, int64_t scaleType,
    const void *goodData, int64_t goodType, const void *badData,
    int64_t badType, int64_t incrEveryNSteps, int64_t decrEveryNNanOrInf,
    double incrRatio, double decrRatio) {
  if (!onlyF32(ctx, site, "update_loss_scaling",
               {newScaleType, normType, scaleType}) ||
      !stepCounter(ctx, site, "update_loss_scaling", newGoodType) ||
      !stepCounter(ctx, site, "update_loss_scaling", newBadType) ||
      !stepCounter(ctx, site, "update_loss_scaling", goodType) ||
      !stepCounter(ctx, site, "update_loss_scaling", badType))
    return;
  float scale = *static_cast<const float *>(scaleData);
  int64_t good = *static_cast<const int64_t *>(goodData);
  int64_t bad = *static_cast<const int64_t *>(badData);
  if (!std::isfinite(*static_cast<const float *>(normData))) {
    good = 0;
    if (++bad == decrEveryNNanOrInf) {
      scale = std::max(scale * float(decrRatio), 1.0f);
      bad = 0;
    }
  } else {
    bad = 0;
    if (++good == incrEveryNSteps) {
      float grown = scale * float(incrRatio);
      if (std::isfinite(grown))
        scale = grown;
      good = 0;
    }
  }
  *static_cast<float *>(newScaleData) = scale;
  *static_cast<int64_t *>(newGoodData) = good;
  *static_cast<int64_t *>(newBadData) = bad;
}

} // extern "C"
