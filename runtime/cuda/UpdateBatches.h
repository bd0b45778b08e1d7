//===- UpdateBatches.h - Which deferred updates share a launch --*- C++ -*-===//
//
// The CUDA runtime launches the Adam and AdamW updates of a group of updates
// (strata_rt_updates_begin / _end) together: one kernel per batch of updates
// with the same element types and scalars. Host code only, unit-tested
// without a device.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_UPDATEBATCHES_H
#define STRATA_RUNTIME_CUDA_UPDATEBATCHES_H

#include "Context.h"

#include <cstring>
#include <vector>

namespace strata::cuda {

/// Tensors of one launch of the Adam kernel (its table is a kernel
/// parameter, at most 4 KiB).
constexpr size_t kAdamBatch = 32;

/// Whether two deferred updates can share a launch: the same element types,
/// learning rate, step counter and guard (device scalars), betas, epsilon
/// and kind (compared by their bits, so that a NaN equals itself); their
/// tensors and weight decays are the batch's table.
inline bool sameAdamLaunch(const StrataRtContext::PendingAdam &a,
                           const StrataRtContext::PendingAdam &b) {
  auto sameBits = [](auto x, auto y) {
    return std::memcmp(&x, &y, sizeof(x)) == 0;
  };
  return a.lowType == b.lowType && a.gradType == b.gradType && a.lr == b.lr &&
         a.guard == b.guard && a.step == b.step && sameBits(a.beta1, b.beta1) &&
         sameBits(a.beta2, b.beta2) && sameBits(a.eps, b.eps) &&
         a.adam == b.adam;
}

/// The launches of `pending`, in order: each the first update not yet
/// launched and the next updates that can share its launch, at most
/// kAdamBatch (indices into `pending`). Every update is in one launch.
inline std::vector<std::vector<size_t>>
adamLaunches(const std::vector<StrataRtContext::PendingAdam> &pending) {
  std::vector<std::vector<size_t>> launches;
  std::vector<bool> taken(pending.size());
  for (size_t first = 0; first < pending.size(); ++first) {
    if (taken[first])
      continue;
    std::vector<size_t> &batch = launches.emplace_back();
    for (size_t i = first; i < pending.size() && batch.size() < kAdamBatch; ++i)
      if (!taken[i] &&
          (i == first || sameAdamLaunch(pending[first], pending[i]))) {
        taken[i] = true;
        batch.push_back(i);
      }
  }
  return launches;
}

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_UPDATEBATCHES_H
