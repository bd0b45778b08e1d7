//===- Registration.cpp - Dialects and passes of every tool ---------------===//

#include "strata/Dialect/Strata.h"
#include "strata/InitAllDialects.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"

void strata::registerStrataDialects(mlir::DialectRegistry &registry) {
  registry.insert<StrataDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
}

void strata::registerAllStrataPasses() {
  registerStrataPasses();
  mlir::registerTransformsPasses();
}
