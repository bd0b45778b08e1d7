//===- InitAllDialects.h - Registration shared by every tool ----*- C++ -*-===//
//
// One place that lists the dialects and passes of Strata, so that
// strata-opt, strata-run and the C API agree on what a program may contain.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_INITALLDIALECTS_H
#define STRATA_INITALLDIALECTS_H

#include "mlir/IR/DialectRegistry.h"

namespace strata {

/// Adds the Strata dialect and the upstream dialects a program may use.
void registerStrataDialects(mlir::DialectRegistry &registry);

/// Registers every Strata pass (flag prefix `strata-`) and the upstream
/// passes pipelines use (canonicalize, cse, ...).
void registerAllStrataPasses();

} // namespace strata

#endif // STRATA_INITALLDIALECTS_H
