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

def StrataAutodiff : Pass<"strata-autodiff", "mlir::ModuleOp"> {
  let summary = "Appends the backward of the loss (reverse-mode autodiff)";
  let description = [{
    Differentiates every function that returns a single scalar floating-point
    loss and has not been differentiated yet (no result carries
    `strata.grad_of`). Backward ops are appended before the return, in
    reverse order of the forward ops, with `strata.role = backward` and the
    location of the forward op they differentiate; forward ops without a role
    get `strata.role = forward`. Adjoints of values used several times are
    summed, so a parameter read twice (the GPT's tied embedding) gets one
    gradient.

    The function then returns the loss followed by the gradient of every
    trainable (not `frozen`) `strata.param`, in declaration order, each
    result marked `{strata.grad_of = @param}`. A parameter without a path
    to the loss gets a zero gradient. Functions that already return
    gradients (frameworks may hand in their own backward) are left alone.

    Every forward op of the dialect is supported, and the fused forward ops
    (`fused_gemm_epilogue` needs `with_aux` when it has an activation). An
    op on the path to the loss that has no derivative rule (a backward,
    optimizer or communication op) is an error naming the op.

    ```
    strata-gen mlp --sizes 4,3 --batch 2 | strata-opt --strata-autodiff
    ```
  }];
  let dependentDialects = ["::strata::StrataDialect",
                           "::mlir::arith::ArithDialect"];
}

#endif // STRATA_PASSES_TD
