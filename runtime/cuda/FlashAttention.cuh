//===- FlashAttention.cuh - Tiled fused attention kernels ----*- CUDA -*-===//
//
// The flash kernels of strata_rt_attention and its gradient for bf16 and
// f16 (Attention.cu launches them where they apply, unless
// STRATA_CUDA_ATTENTION=gemm asks for the chunked products): a block of 4 warps
// takes 64 query rows (or, for dK and dV, 64 keys), 16 a warp, and walks the
// other side in blocks of 64 that the block loads into shared memory. The
// products run on tensor cores as mma.sync m16n8k16 (bf16 or f16 operands, f32
// sums), and everything a warp computes stays in its registers: scores,
// probabilities and their gradients are accumulator fragments, rounded to T in
// place as the A operand of the next product (an accumulator's layout is the A
// operand's, two columns a register), and the output and gradient sums are
// accumulators for the whole loop. The forward pass takes the softmax
// online (a running maximum and sum per row, the four lanes of a row
// reduced by shuffles). The gradient is two kernels, dK and dV per key
// block and dQ per query block: nothing is summed by atomics.
//
// Device code only, in a header so that a host test can run it under an
// emulation of blocks, warps and mma.sync (STRATA_CUDA_EMULATION: the
// test supplies the thread indices, the intrinsics and emulatedMma, which
// multiplies the warp's fragments as PTX lays them out).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH
#define STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH

#include "Device.cuh"

#include "../common/AttentionLayout.h"
#include "../common/StrataRandom.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace strata::cuda {

/// Fused attention's dropout: the factor (0 or 1 / (1 - prob)) of the
/// probability of (slice, query i, key j), strata_rt_dropout's mask of
/// `key` over the [batch, heads, s, t] probabilities at `offset` in the
/// global stream; 1 with prob 0.
struct AttentionDropout {
  double prob;
  float keepScale;
  uint64_t seed;
  int64_t key, offset;
  AttentionLayout at;

  __device__ float operator()(int64_t slice, int64_t i, int64_t j) const {
    if (prob <= 0)
      return 1.0f;
    return rng::dropoutKeep(seed, key, offset + at.probability(slice, i, j),
                            prob)
               ? keepScale
               : 0.0f;
  }
};

/// Query and key rows a block of the flash kernels takes, its warps (16
/// rows each) and threads.
constexpr int kFlashRows = 64;
constexpr int kFlashWarps = kFlashRows / 16;
constexpr int kFlashThreads = 32 * kFlashWarps;

/// Blocks of the forward and of each gradient kernel that an SM should
/// hold at once, for nvcc's register budget (65536 registers over 128
/// threads a block: 4 blocks leave 128 a thread, 3 blocks 170). Left to
/// itself nvcc gave the gradient kernels 216-224 registers, so an SM ran
/// two blocks; at head size 64 these bounds took GPT-2 124M's attention
/// at batch 16 on an H200 from 5.55 to 4.66 ms forward and 21.0 to 17.4
/// gradient (12 layers). At 128, where the accumulators double, they would
/// spill kilobytes a thread: nvcc chooses. Only for Hopper (sm_90), where
/// they were measured: on GPUs with less shared memory per SM (an A100's
/// 164 KB, 100 KB on sm_86/89 and sm_120) the tiles allow fewer blocks
/// anyway, and the register cap would only spill.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 900 || __CUDA_ARCH__ >= 1000)
constexpr bool kFlashHopper = false;
#else
constexpr bool kFlashHopper = true;
#endif
template <int D>
constexpr int kFlashForwardBlocks = (kFlashHopper && D <= 64) ? 4 : 1;
template <int D>
constexpr int kFlashGradBlocks = (kFlashHopper && D <= 64) ? 3 : 1;

/// `n` rounded up to a multiple of 16 (an m16n8k16 product's k).
__host__ __device__ inline int pad16(int64_t n) {
  return int((n + 15) / 16 * 16);
}

/// Carves 128-byte aligned arrays out of a block's dynamic shared memory;
/// on the host, from address 0, it only adds up their bytes.
struct SharedCarver {
  uintptr_t base = 0;
  size_t used = 0;
  template <typename U> __host__ __device__ U *take(int64_t elements) {
    U *p = reinterpret_cast<U *>(base + used);
    used += (size_t(elements) * sizeof(U) + 127) / 128 * 128;
    return p;
  }
};

/// A [64, cols] tile of T in shared memory, `ld` elements a row: 8 past
/// the padded width, so that the eight rows a fragment load reads start in
/// eight different groups of four banks (no bank conflicts), and rows stay
/// 16-byte aligned.
template <typename T> struct Tile {
  static_assert(sizeof(T) == 2, "the flash kernels take bf16 and f16");
  T *at;
  int ld;
  __host__ __device__ Tile(SharedCarver &c, int cols) : ld(cols + 8) {
    at = c.take<T>(int64_t(kFlashRows) * ld);
  }
  __device__ T *row(int r) const { return at + r * ld; }
};

/// cp.async.cg of 16 bytes from global to shared memory, zeros where
/// `valid` is false (nothing is read then); complete after asyncWait.
__device__ __forceinline__ void asyncCopy16(void *to, const void *from,
                                            bool valid) {
#if defined(STRATA_CUDA_EMULATION)
  emulatedAsyncCopy16(to, from, valid);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(at),
               "l"(from), "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4 *>(to) =
      valid ? *static_cast<const uint4 *>(from) : uint4{0, 0, 0, 0};
#endif
}

/// Waits for this thread's cp.async copies (a block barrier after it makes
/// every thread's visible to the block).
__device__ __forceinline__ void asyncWait() {
#if defined(STRATA_CUDA_EMULATION)
  emulatedAsyncWait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/// Rows 0 .. 63 of a tensor into `tile`: row r starts at from + r * stride
/// (elements); columns 0 .. width - 1 of each, zeros past `rows` rows and
/// `width` columns up to the padded width `cols`. Sixteen bytes a copy
/// where the rows allow it (the layout's offsets are taken once a tile,
/// not once an element), issued as cp.async: complete after asyncWait and
/// a block barrier; an element at a time otherwise. The whole block takes
/// part.
template <typename T>
__device__ void loadTile(const Tile<T> &tile, int cols, const T *from,
                         int64_t stride, int64_t rows, int64_t width) {
  constexpr int vec = 16 / sizeof(T);
  if (width % vec == 0 && stride % vec == 0 &&
      reinterpret_cast<uintptr_t>(from) % 16 == 0) {
    const int chunks = cols / vec; // cols is a multiple of 16
    for (int e = threadIdx.x; e < kFlashRows * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks * vec;
      const bool valid = r < rows && c < width;
      asyncCopy16(tile.row(r) + c, valid ? from + r * stride + c : from, valid);
    }
    return;
  }
  for (int e = threadIdx.x; e < kFlashRows * cols; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    tile.row(r)[c] =
        r < rows && c < width ? from[r * stride + c] : fromFloat<T>(0.0f);
  }
}

/// Two of a kind, for double buffering in shared memory: the block fills
/// one while it computes with the other.
template <typename U> struct Twice {
  U first, second;
  // (By value: a reference would keep the pair in local memory.)
  __device__ U operator[](int64_t i) const { return i % 2 ? second : first; }
};

// Loops unrolled by nvcc (fragment arrays indexed by constants stay in
// registers); the host emulation runs them as they are.
#if defined(__CUDACC__)
#define STRATA_FLASH_UNROLL _Pragma("unroll")
#else
#define STRATA_FLASH_UNROLL
#endif

/// Two elements as one operand register: the first in the low half (what
/// fragment_probe.cu, the GPU check's probe of the register layouts,
/// builds its operands with).
template <typename T>
__device__ __forceinline__ uint32_t pairOf(const T *lo, const T *hi) {
  uint16_t l, h;
  std::memcpy(&l, lo, sizeof l);
  std::memcpy(&h, hi, sizeof h);
  return uint32_t(l) | uint32_t(h) << 16;
}

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8 x 8 matrices
/// of a shared tile into four registers of each lane. Lanes 8 m .. 8 m + 7
/// give the addresses of rows 0 .. 7 of matrix m (16-byte aligned, 8
/// elements each); lane l, g = l / 4 and c = 2 (l % 4), receives in r[m]
/// matrix m's (g, c..c+1), or with `trans` its (c, g) and (c + 1, g): an
/// A operand's or a column-major B operand's registers (see mma) where the
/// matrix holds A, or B^T, row-major, and a B operand's with `trans` where
/// it holds B row-major.
template <bool trans, typename T>
__device__ __forceinline__ void loadMatrices(uint32_t (&r)[4], const T *row) {
#if defined(STRATA_CUDA_EMULATION)
  emulatedLoadMatrices<trans>(r, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // (As mma: the kernels are never launched below sm_80.)
  __trap();
#elif defined(__CUDA_ARCH__)
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#endif
}

/// Two f32 values rounded to T (to nearest even) as one operand register
/// (one cvt.rn.bf16x2.f32 or cvt.rn.f16x2.f32).
template <typename T>
__device__ __forceinline__ uint32_t packPair(float lo, float hi) {
  std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>
      pair;
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    pair = __floats2bfloat162_rn(lo, hi);
  else
    pair = __floats2half2_rn(lo, hi);
  uint32_t bits;
  std::memcpy(&bits, &pair, sizeof bits);
  return bits;
}

/// d += a b on tensor cores: A [16, 16] row-major and B [16, 8] column-major
/// in T, D [16, 8] in f32, each spread over the warp's lanes as PTX's
/// mma.m16n8k16 lays them out. Lane l, g = l / 4 and c = 2 (l % 4), holds
/// A's (g, c..c+1) in a[0], (g + 8, c..) in a[1], (g, c+8..) in a[2] and
/// (g + 8, c+8..) in a[3]; B's (c..c+1, g) in b[0] and (c+8.., g) in b[1];
/// D's (g, c), (g, c+1), (g + 8, c), (g + 8, c+1) in d[0..3].
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                    const uint32_t (&b)[2]) {
#if defined(STRATA_CUDA_EMULATION)
  emulatedMma<T>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 products start with sm_80: a build for an older architecture
  // compiles the kernels to a trap, and the host never launches them on
  // such a device (useFlash).
  __trap();
#elif defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
#endif
}

/// A lane's place in its warp's fragments: g = lane / 4 and c = 2 (lane %
/// 4) (see mma), and the first of the warp's 16 rows in the block's 64.
struct FragLane {
  int g, c, r0;
  __device__ FragLane()
      : g(threadIdx.x % 32 / 4), c(2 * (threadIdx.x % 4)),
        r0(threadIdx.x / 32 * 16) {}
  /// The block row (0 .. 63) of accumulator element e (0 .. 3).
  __device__ int row(int e) const { return r0 + g + 8 * (e / 2); }
  /// The column of element e of the accumulator of columns n0 .. n0 + 7.
  __device__ int col(int n0, int e) const { return n0 + c + e % 2; }
};

/// The pairs of column blocks of 8 (of a block's 64 columns) whose
/// product a warp computes: those from `first` (inclusive) to `last`
/// (exclusive), in blocks of 8; a causal mask hides the others from the
/// warp's 16 rows.
struct LiveColumns {
  int first = 0, last = 64;
  __device__ bool pair(int n) const {
    return 8 * n + 16 > first && 8 * n < last;
  }
  /// The columns (keys k0 ..) that rows (queries) i0 .. i0 + 15 see, or
  /// with `transposed` the columns (queries q0 ..) that see rows (keys)
  /// j0 .. j0 + 15; all without a causal mask.
  __device__ static LiveColumns seen(bool causal, bool transposed,
                                     int64_t rows0, int64_t cols0) {
    LiveColumns live;
    if (!causal)
      return live;
    if (transposed)
      live.first =
          int(std::max<int64_t>(0, std::min<int64_t>(64, rows0 - cols0)));
    else
      live.last =
          int(std::max<int64_t>(0, std::min<int64_t>(64, rows0 + 16 - cols0)));
    return live;
  }
};

/// The warp's scores for 64 columns: acc = A B^T over k (a multiple of
/// 16), A the warp's 16 rows of `a`, B^T the 64 rows of `b` (both tiles
/// row-major). Lane l gives the row address of matrix l / 8, row l % 8:
/// A's four matrices are rows 0-7 and 8-15 at columns kk and kk + 8; a
/// load of B^T takes two column blocks of 8, at columns kk and kk + 8.
/// Only the pairs of column blocks of 8 that `live` holds are computed
/// (the others, which a causal mask hides, stay zeros).
template <typename T>
__device__ void productNT(float (&acc)[8][4], const Tile<T> &a,
                          const Tile<T> &b, int k, const FragLane &ln,
                          const LiveColumns &live) {
  STRATA_FLASH_UNROLL
  for (int n = 0; n < 8; ++n)
    STRATA_FLASH_UNROLL
  for (int e = 0; e < 4; ++e)
    acc[n][e] = 0.0f;
  const int lane = threadIdx.x % 32, m = lane / 8, rr = lane % 8;
  const T *aRow = a.row(ln.r0 + m % 2 * 8 + rr) + m / 2 * 8;
  const T *bRow = b.row(m / 2 * 8 + rr) + m % 2 * 8;
  for (int kk = 0; kk < k; kk += 16) {
    uint32_t fa[4];
    loadMatrices<false>(fa, aRow + kk);
    STRATA_FLASH_UNROLL
    for (int n = 0; n < 8; n += 2) {
      if (!live.pair(n))
        continue;
      uint32_t fb[4];
      loadMatrices<false>(fb, bRow + 8 * n * b.ld + kk);
      const uint32_t first[2] = {fb[0], fb[1]}, second[2] = {fb[2], fb[3]};
      mma<T>(acc[n], fa, first);
      mma<T>(acc[n + 1], fa, second);
    }
  }
}

/// acc [16, 8 N] += P B over 64: P the warp's [16, 64] accumulators
/// rounded to T (an accumulator pair is an A operand register), B the 64
/// rows of `b` (row-major [64, n], read transposed), columns up to n (a
/// multiple of 16, at most 8 N). A load takes rows 0-7 and 8-15 of a
/// block of 16 at two column blocks of 8. P's columns outside `live` are
/// zeros, and their rows of B are left out.
template <typename T, int N>
__device__ void productPN(float (&acc)[N][4], const float (&p)[8][4],
                          const Tile<T> &b, int n, const FragLane &ln,
                          const LiveColumns &live) {
  const int lane = threadIdx.x % 32, m = lane / 8, rr = lane % 8;
  const T *bRow = b.row(m % 2 * 8 + rr) + m / 2 * 8;
  STRATA_FLASH_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    if (!live.pair(2 * kk))
      continue;
    const float *left = p[2 * kk], *right = p[2 * kk + 1];
    const uint32_t fa[4] = {
        packPair<T>(left[0], left[1]), packPair<T>(left[2], left[3]),
        packPair<T>(right[0], right[1]), packPair<T>(right[2], right[3])};
    STRATA_FLASH_UNROLL
    for (int j = 0; j < N; j += 2)
      if (8 * j < n) {
        uint32_t fb[4];
        loadMatrices<true>(fb, bRow + 16 * kk * b.ld + 8 * j);
        const uint32_t first[2] = {fb[0], fb[1]}, second[2] = {fb[2], fb[3]};
        mma<T>(acc[j], fa, first);
        mma<T>(acc[j + 1], fa, second);
      }
  }
}

/// Rounds the warp's [16, 8 N] f32 accumulators into a tensor's rows
/// (block row r at to + r * stride), columns below `width` and block rows
/// below `rows`; the lane's rows g and g + 8 are multiplied by `top` and
/// `bottom`.
template <typename T, int N>
__device__ void storeFragments(T *to, int64_t stride, const float (&acc)[N][4],
                               const FragLane &ln, int64_t rows, int64_t width,
                               float top = 1.0f, float bottom = 1.0f) {
  STRATA_FLASH_UNROLL
  for (int j = 0; j < N; ++j)
    STRATA_FLASH_UNROLL
  for (int e = 0; e < 4; ++e) {
    const int r = ln.row(e), c = ln.col(8 * j, e);
    if (r < rows && c < width)
      to[r * stride + c] = fromFloat<T>(acc[j][e] * (e < 2 ? top : bottom));
  }
}

/// The sum of a value over the four lanes that hold one row's fragments.
__device__ __forceinline__ float rowLanesSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float rowLanesMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/// Whether query i sees key j (both in range).
__device__ __forceinline__ bool sees(const AttentionLayout &at, int64_t i,
                                     int64_t j, bool causal) {
  return i < at.s && j < at.t && (!causal || j <= i);
}

/// Whether a warp's block of scores, queries i0 .. i0 + rows - 1 against
/// keys j0 .. j0 + cols - 1, holds one that `sees` hides (a causal mask,
/// or queries or keys past the ends). Most blocks hold none and skip the
/// test of each score.
__device__ __forceinline__ bool warpMasked(const AttentionLayout &at,
                                           int64_t i0, int rows, int64_t j0,
                                           int cols, bool causal) {
  return i0 + rows > at.s || j0 + cols > at.t || (causal && j0 + cols - 1 > i0);
}

/// The kernels take exponentials base 2: a score s becomes s scale log2(e),
/// whose 2^x is one ex2 instruction, and a log-sum-exp L becomes L log2(e).
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// 2^x, 0 at -inf: ex2.approx (relative error about 2^-22, results below
/// 2^-126 flushed to zero; the probabilities are rounded to T for the
/// products).
__device__ __forceinline__ float exp2Approx(float x) {
#if defined(__CUDA_ARCH__) && !defined(STRATA_CUDA_EMULATION)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

/// The block of 64 queries this block of the grid takes: with a causal
/// mask the last first, as they see the most keys (the blocks that start
/// last then have the least work, which shortens the grid's tail).
__device__ __forceinline__ int64_t queryBlock(bool causal) {
  return causal ? int64_t(gridDim.y) - 1 - blockIdx.y : int64_t(blockIdx.y);
}

/// Keys a block of 64 queries from q0 on sees: all, or with a causal mask
/// up to its last query's.
__device__ __forceinline__ int64_t blockKeys(const AttentionLayout &at,
                                             int64_t q0, bool causal) {
  return causal && q0 + kFlashRows < at.t ? q0 + kFlashRows : at.t;
}

/// One (query, key)'s probability, recomputed from its score and the
/// query's log-sum-exp (base 2, see kLog2e), and dS = scale P (m dP -
/// delta) (m the dropout's factor).
struct ScoreGrad {
  float p, ds;
};
__device__ __forceinline__ ScoreGrad scoreGrad(float score, float lse2,
                                               float dp, float delta, float m,
                                               float scale) {
  const float p = exp2Approx(score * (scale * kLog2e) - lse2);
  return {p, scale * p * (m * dp - delta)};
}

/// The forward kernel's shared memory: the block's queries, and two
/// blocks of keys and values (the next one loads while the block computes
/// with the other).
template <typename T> struct FlashForwardShared {
  Tile<T> q;
  Twice<Tile<T>> k, v;

  __host__ __device__ FlashForwardShared(SharedCarver &c, int dp, int dvp)
      : q(c, dp), k{Tile<T>(c, dp), Tile<T>(c, dp)}, v{Tile<T>(c, dvp),
                                                       Tile<T>(c, dvp)} {}
};

/// Block (slice x, query block y): the output rows and log-sum-exp of 64
/// queries, the softmax taken online over blocks of 64 keys (the running
/// maximum and sum per row, the output rescaled when the maximum grows).
/// The dropped, unnormalised probabilities are rounded to T for P V; the
/// log-sum-exp is taken before the dropout, as on the CPU. D: the padded
/// value head size's bound (64 or 128), which sizes the accumulators.
template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads, kFlashForwardBlocks<D>)
    flashForward(T *out, float *lse, const T *q, const T *k, const T *v,
                 AttentionLayout at, float scale, bool causal,
                 AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashForwardShared<T> sh(carver, dp, dvp);
  const int64_t bh = blockIdx.x, q0 = queryBlock(causal) * kFlashRows;
  const FragLane ln;
  loadTile(sh.q, dp, q + at.query(bh, q0), at.rowStride(), at.s - q0, at.d);
  float o[D / 8][4];
  STRATA_FLASH_UNROLL
  for (int j = 0; j < D / 8; ++j)
    STRATA_FLASH_UNROLL
  for (int e = 0; e < 4; ++e)
    o[j][e] = 0.0f;
  // The running maximum (of scaled scores, base 2) and sum of rows g and
  // g + 8.
  float rowMax[2] = {-INFINITY, -INFINITY}, rowSum[2] = {0.0f, 0.0f};
  const float scaleLog2 = scale * kLog2e;
  const bool dropping = drop.prob > 0;
  const int64_t keys = blockKeys(at, q0, causal);
  auto loadKeys = [&](int64_t b) {
    const int64_t k0 = b * kFlashRows;
    loadTile(sh.k[b], dp, k + at.key(bh, k0), at.keyRowStride(), at.t - k0,
             at.d);
    loadTile(sh.v[b], dvp, v + at.value(bh, k0), at.valueRowStride(), at.t - k0,
             at.dv);
  };
  loadKeys(0);
  for (int64_t b = 0, k0 = 0; k0 < keys; ++b, k0 += kFlashRows) {
    asyncWait();
    // Block b's keys and values (and the queries) are in, and every warp
    // is done with block b - 1, whose buffers block b + 1 fills meanwhile.
    __syncthreads();
    if (k0 + kFlashRows < keys)
      loadKeys(b + 1);
    float s[8][4];
    const LiveColumns live = LiveColumns::seen(causal, false, q0 + ln.r0, k0);
    productNT(s, sh.q, sh.k[b], dp, ln, live);
    // The scores scaled (base 2), -inf where hidden; their row maximum.
    const bool masked = warpMasked(at, q0 + ln.r0, 16, k0, 64, causal);
    float now[2] = {-INFINITY, -INFINITY};
    STRATA_FLASH_UNROLL
    for (int n = 0; n < 8; ++n)
      STRATA_FLASH_UNROLL
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e] * scaleLog2;
      if (masked && !sees(at, q0 + ln.row(e), k0 + ln.col(8 * n, e), causal))
        x = -INFINITY;
      s[n][e] = x;
      now[e / 2] = fmaxf(now[e / 2], x);
    }
    // (A row that sees no key yet subtracts 0: its 2^-inf are zeros.)
    float factor[2], base[2], part[2] = {0.0f, 0.0f};
    STRATA_FLASH_UNROLL
    for (int h = 0; h < 2; ++h) {
      now[h] = fmaxf(rowMax[h], rowLanesMax(now[h]));
      factor[h] =
          rowMax[h] == -INFINITY ? 0.0f : exp2Approx(rowMax[h] - now[h]);
      base[h] = now[h] == -INFINITY ? 0.0f : now[h];
      rowMax[h] = now[h];
    }
    STRATA_FLASH_UNROLL
    for (int n = 0; n < 8; ++n)
      STRATA_FLASH_UNROLL
    for (int e = 0; e < 4; ++e) {
      float p = exp2Approx(s[n][e] - base[e / 2]);
      part[e / 2] += p;
      if (dropping)
        p *= drop(bh, q0 + ln.row(e), k0 + ln.col(8 * n, e));
      s[n][e] = p;
    }
    STRATA_FLASH_UNROLL
    for (int h = 0; h < 2; ++h)
      rowSum[h] = rowSum[h] * factor[h] + rowLanesSum(part[h]);
    STRATA_FLASH_UNROLL
    for (int j = 0; j < D / 8; ++j)
      STRATA_FLASH_UNROLL
    for (int e = 0; e < 4; ++e)
      o[j][e] *= factor[e / 2];
    productPN<T, D / 8>(o, s, sh.v[b], dvp, ln, live);
  }
  asyncWait(); // (copies the loop did not wait for: none, or the own rows)
  storeFragments(out + at.output(bh, q0), at.outputRowStride(), o, ln,
                 at.s - q0, at.dv, rowSum[0] > 0.0f ? 1.0f / rowSum[0] : 0.0f,
                 rowSum[1] > 0.0f ? 1.0f / rowSum[1] : 0.0f);
  if (ln.c == 0) {
    STRATA_FLASH_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int64_t i = q0 + ln.row(2 * h);
      if (i < at.s)
        lse[at.lse(bh, i)] =
            rowSum[h] > 0.0f ? rowMax[h] * kLn2 + logf(rowSum[h]) : -INFINITY;
    }
  }
}

/// The shared memory of the gradient kernels: the block's own rows (keys
/// and values, or queries and output gradients), and two blocks of the
/// other side's (the next one loads while the block computes with the
/// other) with the log-sum-exp and delta of the queries among them (for
/// dQ, those of the own rows, in the first of the pair).
template <typename T> struct FlashBackwardShared {
  Tile<T> own, ownV;
  Twice<Tile<T>> other, otherV;
  Twice<float *> lse, delta;

  __host__ __device__ FlashBackwardShared(SharedCarver &c, int dp, int dvp)
      : own(c, dp), ownV(c, dvp), other{Tile<T>(c, dp), Tile<T>(c, dp)},
        otherV{Tile<T>(c, dvp), Tile<T>(c, dvp)}, lse{c.take<float>(kFlashRows),
                                                      c.take<float>(
                                                          kFlashRows)},
        delta{c.take<float>(kFlashRows), c.take<float>(kFlashRows)} {}

  /// The warp's rows of both kernels' products with the other side's block
  /// b, in accumulators: scores = own other^T (S^T = K Q^T, or S = Q K^T)
  /// and grad = ownV otherV^T (dP^T = V dO^T, or dP = dO V^T).
  __device__ void products(float (&scores)[8][4], float (&grad)[8][4],
                           int64_t b, int dp, int dvp, const FragLane &ln,
                           const LiveColumns &live) const {
    productNT(scores, own, other[b], dp, ln, live);
    productNT(grad, ownV, otherV[b], dvp, ln, live);
  }
};

/// The rows' log-sum-exp (base 2, see kLog2e) and delta (zero past the
/// queries) into shared memory.
__device__ inline void loadRowStats(float *lseTo, float *deltaTo,
                                    const float *lse, const float *delta,
                                    const AttentionLayout &at, int64_t bh,
                                    int64_t q0) {
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    const int64_t i = q0 + r;
    lseTo[r] = i < at.s ? lse[at.lse(bh, i)] * kLog2e : 0.0f;
    deltaTo[r] = i < at.s ? delta[bh * at.s + i] : 0.0f;
  }
}

/// Zeroed accumulators.
template <int N> __device__ void zero(float (&acc)[N][4]) {
  STRATA_FLASH_UNROLL
  for (int j = 0; j < N; ++j)
    STRATA_FLASH_UNROLL
  for (int e = 0; e < 4; ++e)
    acc[j][e] = 0.0f;
}

/// Block (key and value slice x, key block y): dK and dV of 64 keys over
/// the queries that see them, in each query slice of its group in turn
/// (one slice without grouped-query attention). Per block of 64 queries:
/// S^T = K Q^T, P^T from the log-sum-exp, dV += (m P)^T dO, dP^T = V dO^T,
/// dS^T = scale P^T (m dP^T - delta), dK += dS^T Q; the warps own key rows,
/// so the products need no block barrier. D: the padded head sizes' bound
/// (64 or 128).
template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads, kFlashGradBlocks<D>)
    flashGradKeys(T *dk, T *dv, const T *q, const T *k, const T *v,
                  const T *dout, const float *lse, const float *delta,
                  AttentionLayout at, float scale, bool causal,
                  AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashBackwardShared<T> sh(carver, dp, dvp);
  const int64_t own = at.groupSlice(blockIdx.x, 0);
  const int64_t k0 = int64_t(blockIdx.y) * kFlashRows;
  const bool dropping = drop.prob > 0;
  const FragLane ln;
  loadTile(sh.own, dp, k + at.key(own, k0), at.keyRowStride(), at.t - k0, at.d);
  loadTile(sh.ownV, dvp, v + at.value(own, k0), at.valueRowStride(), at.t - k0,
           at.dv);
  float gradK[D / 8][4], gradV[D / 8][4];
  zero(gradK);
  zero(gradV);
  // Causal: queries from this block's first key on (a block of keys past
  // the last query skips the loop and stores zeros). Step b is block b %
  // perSlice of the group's query slice b / perSlice.
  const int64_t first = causal ? k0 : 0;
  const int64_t perSlice =
      first < at.s ? (at.s - first + kFlashRows - 1) / kFlashRows : 0;
  const int64_t steps = perSlice * at.group();
  auto sliceOf = [&](int64_t b) {
    return at.groupSlice(blockIdx.x, b / perSlice);
  };
  auto queriesOf = [&](int64_t b) { return first + b % perSlice * kFlashRows; };
  auto loadQueries = [&](int64_t b) {
    const int64_t bh = sliceOf(b), q0 = queriesOf(b);
    loadTile(sh.other[b], dp, q + at.query(bh, q0), at.rowStride(), at.s - q0,
             at.d);
    loadTile(sh.otherV[b], dvp, dout + at.output(bh, q0), at.outputRowStride(),
             at.s - q0, at.dv);
    loadRowStats(sh.lse[b], sh.delta[b], lse, delta, at, bh, q0);
  };
  if (steps > 0)
    loadQueries(0);
  for (int64_t b = 0; b < steps; ++b) {
    const int64_t bh = sliceOf(b), q0 = queriesOf(b);
    asyncWait();
    // Block b's queries (and the own rows) are in, and every warp is done
    // with block b - 1, whose buffers block b + 1 fills meanwhile.
    __syncthreads();
    if (b + 1 < steps)
      loadQueries(b + 1);
    // P^T (dropped) into s, dS^T into g: rows are keys, columns queries.
    float s[8][4], g[8][4];
    const LiveColumns live = LiveColumns::seen(causal, true, k0 + ln.r0, q0);
    sh.products(s, g, b, dp, dvp, ln, live);
    const bool masked = warpMasked(at, q0, 64, k0 + ln.r0, 16, causal);
    STRATA_FLASH_UNROLL
    for (int n = 0; n < 8; ++n)
      STRATA_FLASH_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int c = ln.col(8 * n, e);
      const int64_t j = k0 + ln.row(e), i = q0 + c;
      float dropped = 0.0f, ds = 0.0f;
      if (!masked || sees(at, i, j, causal)) {
        const float m = dropping ? drop(bh, i, j) : 1.0f;
        const ScoreGrad sg =
            scoreGrad(s[n][e], sh.lse[b][c], g[n][e], sh.delta[b][c], m, scale);
        dropped = sg.p * m;
        ds = sg.ds;
      }
      s[n][e] = dropped;
      g[n][e] = ds;
    }
    productPN<T, D / 8>(gradV, s, sh.otherV[b], dvp, ln, live);
    productPN<T, D / 8>(gradK, g, sh.other[b], dp, ln, live);
  }
  asyncWait(); // (copies the loop did not wait for: none, or the own rows)
  storeFragments(dk + at.key(own, k0), at.keyRowStride(), gradK, ln, at.t - k0,
                 at.d);
  storeFragments(dv + at.value(own, k0), at.valueRowStride(), gradV, ln,
                 at.t - k0, at.dv);
}

/// Block (slice x, query block y): dQ of 64 queries over the keys they
/// see. Per block of 64 keys: S = Q K^T, P from the log-sum-exp, dP = dO
/// V^T, dS = scale P (m dP - delta), dQ += dS K. D: the padded head sizes'
/// bound (64 or 128).
template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads, kFlashGradBlocks<D>)
    flashGradQueries(T *dq, const T *q, const T *k, const T *v, const T *dout,
                     const float *lse, const float *delta, AttentionLayout at,
                     float scale, bool causal, AttentionDropout drop) {
  extern __shared__ __align__(128) char shared[];
  const int dp = pad16(at.d), dvp = pad16(at.dv);
  SharedCarver carver{reinterpret_cast<uintptr_t>(shared)};
  const FlashBackwardShared<T> sh(carver, dp, dvp);
  const int64_t bh = blockIdx.x, q0 = queryBlock(causal) * kFlashRows;
  const bool dropping = drop.prob > 0;
  const FragLane ln;
  loadTile(sh.own, dp, q + at.query(bh, q0), at.rowStride(), at.s - q0, at.d);
  loadTile(sh.ownV, dvp, dout + at.output(bh, q0), at.outputRowStride(),
           at.s - q0, at.dv);
  loadRowStats(sh.lse[0], sh.delta[0], lse, delta, at, bh, q0);
  float gradQ[D / 8][4];
  zero(gradQ);
  const int64_t keys = blockKeys(at, q0, causal);
  auto loadKeys = [&](int64_t b) {
    const int64_t k0 = b * kFlashRows;
    loadTile(sh.other[b], dp, k + at.key(bh, k0), at.keyRowStride(), at.t - k0,
             at.d);
    loadTile(sh.otherV[b], dvp, v + at.value(bh, k0), at.valueRowStride(),
             at.t - k0, at.dv);
  };
  loadKeys(0);
  for (int64_t b = 0, k0 = 0; k0 < keys; ++b, k0 += kFlashRows) {
    asyncWait();
    // Block b's keys and values (and the own rows) are in, and every warp
    // is done with block b - 1, whose buffers block b + 1 fills meanwhile.
    __syncthreads();
    if (k0 + kFlashRows < keys)
      loadKeys(b + 1);
    float s[8][4], g[8][4];
    const LiveColumns live = LiveColumns::seen(causal, false, q0 + ln.r0, k0);
    sh.products(s, g, b, dp, dvp, ln, live);
    const bool masked = warpMasked(at, q0 + ln.r0, 16, k0, 64, causal);
    STRATA_FLASH_UNROLL
    for (int n = 0; n < 8; ++n)
      STRATA_FLASH_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int r = ln.row(e);
      const int64_t i = q0 + r, j = k0 + ln.col(8 * n, e);
      float ds = 0.0f;
      if (!masked || sees(at, i, j, causal))
        ds = scoreGrad(s[n][e], sh.lse[0][r], g[n][e], sh.delta[0][r],
                       dropping ? drop(bh, i, j) : 1.0f, scale)
                 .ds;
      g[n][e] = ds;
    }
    productPN<T, D / 8>(gradQ, g, sh.other[b], dp, ln, live);
  }
  asyncWait(); // (copies the loop did not wait for: none, or the own rows)
  storeFragments(dq + at.query(bh, q0), at.rowStride(), gradQ, ln, at.s - q0,
                 at.d);
}

/// The flash kernels' dynamic shared memory (bytes).
template <typename T> size_t flashForwardBytes(const AttentionLayout &at) {
  SharedCarver c;
  FlashForwardShared<T>(c, pad16(at.d), pad16(at.dv));
  return c.used;
}
template <typename T> size_t flashGradBytes(const AttentionLayout &at) {
  SharedCarver c;
  FlashBackwardShared<T>(c, pad16(at.d), pad16(at.dv));
  return c.used;
}

/// Calls f(std::integral_constant<int, D>) with the accumulators' bound D
/// (64 or 128) for the padded head sizes (at most 128).
template <typename F> void withFlashWidth(const AttentionLayout &at, F &&f) {
  if (pad16(at.d) <= 64 && pad16(at.dv) <= 64)
    f(std::integral_constant<int, 64>());
  else
    f(std::integral_constant<int, 128>());
}

} // namespace strata::cuda

#undef STRATA_FLASH_UNROLL

#endif // STRATA_RUNTIME_CUDA_FLASHATTENTION_CUH
