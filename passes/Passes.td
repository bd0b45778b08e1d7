//===- Passes.td - Strata passes ---------------------------*- tablegen -*-===//

#ifndef STRATA_PASSES_TD
#define STRATA_PASSES_TD

include "mlir/Pass/PassBase.td"

def StrataProgramStats : Pass<"strata-program-stats", "mlir::ModuleOp"> {
  let summary = "Prints parameter, op and FLOP counts of a program";
  let description = [{
    Reports, without changing the module: the number of `strata.param`s and
    their total elements and bytes, the count of every op kind in the module,
    and the floating-point operations of the matrix products (2·M·N·K per
    product, gradients included). The report goes to stderr, or to the file
    named by `output`. Used to check the size of generated models and to
    count the ops a pass rewrites.

    ```
    strata-gen gpt --layers 2 | strata-opt --strata-program-stats -o /dev/null
    ```
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "File to write the report to ('-' for stderr)">
  ];
  let dependentDialects = ["::strata::StrataDialect"];
}

#endif // STRATA_PASSES_TD
