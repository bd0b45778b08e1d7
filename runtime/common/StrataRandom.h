/*===- StrataRandom.h - The one RNG of Strata ----------------------------===*
 *
 * Counter-based randomness (Philox-4x32-10, Random123) shared by the CPU and
 * CUDA runtimes and the reference evaluator. A draw is a pure function of
 * (run seed, stream key, micro-batch, element index): dropout masks and
 * initial weights do not depend on threads, fusion, recompute or
 * partitioning. Header-only C++ that also compiles under nvcc.
 *
 *===---------------------------------------------------------------------===*/

#ifndef STRATA_RUNTIME_COMMON_STRATARANDOM_H
#define STRATA_RUNTIME_COMMON_STRATARANDOM_H

// Strata builds without exceptions (as LLVM does): keep Random123 off its
// SSE types, which throw, and make its bounds checks abort.
#ifndef R123_USE_SSE
#define R123_USE_SSE 0
#endif
#ifndef R123_THROW
#include <cstdlib>
#define R123_THROW(x) std::abort()
#endif
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata {
namespace rng {

/// Four independent 32-bit words for counter (index, key, microBatch).
STRATA_HOST_DEVICE inline r123::Philox4x32::ctr_type
draw(uint64_t seed, int64_t key, int64_t microBatch, int64_t index) {
  r123::Philox4x32 philox;
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(index),
                                     static_cast<uint32_t>(uint64_t(index) >> 32),
                                     static_cast<uint32_t>(key),
                                     static_cast<uint32_t>(microBatch)}};
  r123::Philox4x32::key_type k = {{static_cast<uint32_t>(seed),
                                   static_cast<uint32_t>(seed >> 32)}};
  return philox(ctr, k);
}

/// Uniform in [0, 1) with 24 bits, exactly representable in float.
STRATA_HOST_DEVICE inline float uniform(uint64_t seed, int64_t key,
                                        int64_t microBatch, int64_t index) {
  return static_cast<float>(draw(seed, key, microBatch, index)[0] >> 8) *
         (1.0f / 16777216.0f);
}

/// Stream of dropout masks: the Philox counter's fourth word.
constexpr int64_t kDropoutStream = 0x44524F50; // "DROP"

/// Whether dropout op `key` with probability `prob` keeps the element at
/// `index` of the *global* batch: a micro-batch m of n elements covers
/// indices [m * n, (m + 1) * n) (the batch dimension leads), so the mask
/// is the same however the batch is split into micro-batches or ranks.
/// One Philox draw serves four consecutive elements (its four words).
STRATA_HOST_DEVICE inline bool dropoutKeepWord(uint32_t word, double prob) {
  float u = static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
  return u >= static_cast<float>(prob);
}
/// The same test as an integer compare, for vector loops:
/// dropoutKeepWord(word, prob) == (word >> 8) >= dropoutKeepThreshold(prob)
/// (word >> 8 is below 2^24, so the float product above is exact).
STRATA_HOST_DEVICE inline uint32_t dropoutKeepThreshold(double prob) {
  return static_cast<uint32_t>(
      ceil(static_cast<double>(static_cast<float>(prob)) * 16777216.0));
}
STRATA_HOST_DEVICE inline r123::Philox4x32::ctr_type
dropoutDraw(uint64_t seed, int64_t key, int64_t index) {
  return draw(seed, key, kDropoutStream, index >> 2);
}
/// Where a dropout op of `n` elements on micro-batch `microBatch` of
/// `microBatches`, on data-parallel shard `shard`, starts in the global
/// stream: the rank's shard comes before its micro-batch.
STRATA_HOST_DEVICE inline int64_t dropoutOffset(int64_t shard,
                                                int64_t microBatches,
                                                int64_t microBatch, int64_t n) {
  return (shard * microBatches + microBatch) * n;
}
STRATA_HOST_DEVICE inline bool dropoutKeep(uint64_t seed, int64_t key,
                                           int64_t index, double prob) {
  return dropoutKeepWord(dropoutDraw(seed, key, index)[index & 3], prob);
}

} // namespace rng
} // namespace strata

#endif // STRATA_RUNTIME_COMMON_STRATARANDOM_H
