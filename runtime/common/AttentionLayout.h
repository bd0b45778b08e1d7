/*===- AttentionLayout.h - Where fused attention's rows are --------------===*
 *
 * Fused attention's tensors, in every runtime and in the reference
 * backend: query [batch, s, heads, d], key [batch, t, heads, d], value
 * [batch, t, heads, dv], the output and its gradient [batch, s, heads, dv]
 * (a projection's output reshaped: a row holds every head), the log-sum-exp
 * [batch, heads, s]. Slice `bh` is batch bh / heads, head bh % heads; its
 * consecutive rows are `heads` rows of the tensor apart. Offsets are in
 * elements. Header-only C++ (__host__ __device__ under nvcc).
 *
 *===---------------------------------------------------------------------===*/

#ifndef STRATA_RUNTIME_COMMON_ATTENTIONLAYOUT_H
#define STRATA_RUNTIME_COMMON_ATTENTIONLAYOUT_H

#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_LAYOUT_FN __host__ __device__
#else
#define STRATA_LAYOUT_FN
#endif

namespace strata {

struct AttentionLayout {
  int64_t heads, s, t, d, dv;

  /// Query row i of slice bh (and, with dv, the output's: output()).
  STRATA_LAYOUT_FN int64_t query(int64_t bh, int64_t i) const {
    return ((bh / heads * s + i) * heads + bh % heads) * d;
  }
  STRATA_LAYOUT_FN int64_t output(int64_t bh, int64_t i) const {
    return ((bh / heads * s + i) * heads + bh % heads) * dv;
  }
  /// Key (value) row j of slice bh.
  STRATA_LAYOUT_FN int64_t key(int64_t bh, int64_t j) const {
    return ((bh / heads * t + j) * heads + bh % heads) * d;
  }
  STRATA_LAYOUT_FN int64_t value(int64_t bh, int64_t j) const {
    return ((bh / heads * t + j) * heads + bh % heads) * dv;
  }
  /// The log-sum-exp of query i of slice bh.
  STRATA_LAYOUT_FN int64_t lse(int64_t bh, int64_t i) const {
    return bh * s + i;
  }
  /// The probability of query i and key j of slice bh in the [batch,
  /// heads, s, t] tensor the unfused program has (never stored; its index
  /// keys the dropout mask).
  STRATA_LAYOUT_FN int64_t probability(int64_t bh, int64_t i, int64_t j) const {
    return (bh * s + i) * t + j;
  }
  /// Elements between a slice's consecutive query or key rows, and value
  /// or output rows.
  STRATA_LAYOUT_FN int64_t rowStride() const { return heads * d; }
  STRATA_LAYOUT_FN int64_t valueRowStride() const { return heads * dv; }
};

} // namespace strata

#undef STRATA_LAYOUT_FN

#endif // STRATA_RUNTIME_COMMON_ATTENTIONLAYOUT_H
