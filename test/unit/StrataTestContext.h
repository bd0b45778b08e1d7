//===- StrataTestContext.h - An MLIR context ready for Strata tests -------===//

#ifndef STRATA_TEST_UNIT_STRATATESTCONTEXT_H
#define STRATA_TEST_UNIT_STRATATESTCONTEXT_H

#include "strata/InitAllDialects.h"

#include "mlir/IR/MLIRContext.h"

namespace strata {

/// A context with Strata's dialects loaded and its passes registered
/// (registration happens once per process).
class StrataTestContext {
protected:
  StrataTestContext() {
    static bool registered = [] {
      registerAllStrataPasses();
      return true;
    }();
    (void)registered;
    mlir::DialectRegistry registry;
    registerStrataDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }
  mlir::MLIRContext context;
};

} // namespace strata

#endif // STRATA_TEST_UNIT_STRATATESTCONTEXT_H
