/*===- AttentionLayout.h - Where fused attention's rows are --------------===*
 *
 * Fused attention's tensors, in every runtime and in the reference
 * backend: query [batch, s, heads, d], key [batch, t, kvHeads, d], value
 * [batch, t, kvHeads, dv], the output and its gradient [batch, s, heads,
 * dv] (a projection's output reshaped: a row holds every head), the
 * log-sum-exp [batch, heads, s]. Slice `bh` is batch bh / heads, head bh %
 * heads; its consecutive rows are `heads` (`kvHeads`) rows of the tensor
 * apart. With fewer key and value heads than query heads (grouped-query
 * attention; kvHeads divides heads), query head h reads key and value head
 * h / group(): the slices of a group share their keys and values, and
 * their gradients sum over the group. Offsets are in elements.
 * Header-only C++ (__host__ __device__ under nvcc).
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
  int64_t heads, s, t, d, dv, kvHeads;

  /// Query heads per key and value head (1 without heads).
  STRATA_LAYOUT_FN int64_t group() const {
    return kvHeads > 0 ? heads / kvHeads : 1;
  }
  /// The key and value slice (batch, key head) that slice bh reads.
  STRATA_LAYOUT_FN int64_t kvSlice(int64_t bh) const {
    return bh / heads * kvHeads + bh % heads / group();
  }
  /// The r-th of the group() slices that read key and value slice kv.
  STRATA_LAYOUT_FN int64_t groupSlice(int64_t kv, int64_t r) const {
    return kv / kvHeads * heads + kv % kvHeads * group() + r;
  }
  /// Query row i of slice bh (and, with dv, the output's: output()).
  STRATA_LAYOUT_FN int64_t query(int64_t bh, int64_t i) const {
    return ((bh / heads * s + i) * heads + bh % heads) * d;
  }
  STRATA_LAYOUT_FN int64_t output(int64_t bh, int64_t i) const {
    return ((bh / heads * s + i) * heads + bh % heads) * dv;
  }
  /// Key (value) row j of the keys (values) slice bh reads.
  STRATA_LAYOUT_FN int64_t key(int64_t bh, int64_t j) const {
    const int64_t kv = kvSlice(bh);
    return ((kv / kvHeads * t + j) * kvHeads + kv % kvHeads) * d;
  }
  STRATA_LAYOUT_FN int64_t value(int64_t bh, int64_t j) const {
    const int64_t kv = kvSlice(bh);
    return ((kv / kvHeads * t + j) * kvHeads + kv % kvHeads) * dv;
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
  /// Elements between a slice's consecutive query, output, key and value
  /// rows.
  STRATA_LAYOUT_FN int64_t rowStride() const { return heads * d; }
  STRATA_LAYOUT_FN int64_t outputRowStride() const { return heads * dv; }
  STRATA_LAYOUT_FN int64_t keyRowStride() const { return kvHeads * d; }
  STRATA_LAYOUT_FN int64_t valueRowStride() const { return kvHeads * dv; }
};

} // namespace strata

#undef STRATA_LAYOUT_FN

#endif // STRATA_RUNTIME_COMMON_ATTENTIONLAYOUT_H
