//===- strata-opt.cpp - The Strata optimizer driver -----------------------===//
//
// An MlirOptMain tool with the Strata dialect, the upstream dialects a
// program uses, and every Strata pass.
//
//===----------------------------------------------------------------------===//

#include "strata/InitAllDialects.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  strata::registerStrataDialects(registry);
  strata::registerAllStrataPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Strata optimizer driver\n", registry));
}
