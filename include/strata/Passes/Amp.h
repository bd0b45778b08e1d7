//===- Amp.h - The op lists of mixed precision ------------------*- C++ -*-===//
//
// What strata-amp decides per op, for the strategy's validation and the
// plan's explanation: the ops a custom list may name and the default white
// (low precision) and black (f32) lists. Names are op names without the
// `strata.` prefix, as a strategy spells them.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_AMP_H
#define STRATA_PASSES_AMP_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace strata::amp {

/// The forward ops whose compute type strata-amp decides.
llvm::ArrayRef<llvm::StringLiteral> listableOps();
/// Computed in the low type by default.
llvm::ArrayRef<llvm::StringLiteral> defaultWhiteList();
/// Kept in f32 by default at level o1, or at level o2 (which computes
/// layer norm in the low type).
llvm::ArrayRef<llvm::StringLiteral> defaultBlackList(bool o2 = false);

} // namespace strata::amp

#endif // STRATA_PASSES_AMP_H
