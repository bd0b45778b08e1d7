//===- RankLimit.h - The most ranks a Strata job may have ------*- C++ -*-===//
//
// Shared by the rank grid's verifier and the strategy's validation, without
// MLIR's headers.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECT_RANKLIMIT_H
#define STRATA_DIALECT_RANKLIMIT_H

#include <cstdint>

namespace strata {

/// The most ranks a job may have (every parallel degree, world size and
/// rank grid is at most this): beyond any machine count, and small enough
/// that plans sized by the degree stay in memory.
constexpr int64_t kMaxRanks = int64_t(1) << 20;

} // namespace strata

#endif // STRATA_DIALECT_RANKLIMIT_H
