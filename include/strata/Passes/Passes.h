//===- Passes.h - Strata passes ---------------------------------*- C++ -*-===//

#ifndef STRATA_PASSES_PASSES_H
#define STRATA_PASSES_PASSES_H

#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace strata {

#define GEN_PASS_DECL
#include "StrataPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "StrataPasses.h.inc"

} // namespace strata

#endif // STRATA_PASSES_PASSES_H
