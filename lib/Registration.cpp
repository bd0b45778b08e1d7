//===- Registration.cpp - Dialects and passes of every tool ---------------===//

#include "strata/Dialect/Strata.h"
#include "strata/InitAllDialects.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Transforms/Passes.h"

void strata::registerStrataDialects(mlir::DialectRegistry &registry) {
  // (LLVM: strata-lower-to-runtime's output reads back in.)
  registry.insert<StrataDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::LLVM::LLVMDialect>();
}

void strata::registerAllStrataPasses() {
  registerStrataPasses();
  mlir::registerTransformsPasses();
}
