//===- PassUtils.h - Small helpers shared by the Strata passes --*- C++ -*-===//

#ifndef STRATA_PASSES_PASSUTILS_H
#define STRATA_PASSES_PASSUTILS_H

#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace strata {

/// Whether `func` is a differentiated step: it returns the loss, then
/// gradients marked `strata.grad_of` (strata-autodiff's form).
inline bool returnsGradients(mlir::func::FuncOp func) {
  return func.getNumResults() > 1 &&
         func.getResultAttr(1, StrataDialect::kGradOfAttrName);
}

/// The last module-level declaration (param, state, comm group), after
/// which new declarations go; null when there is none.
inline mlir::Operation *lastDeclaration(mlir::ModuleOp module) {
  mlir::Operation *last = nullptr;
  for (mlir::Operation &op : *module.getBody())
    if (mlir::isa<ParamOp, StateOp, CommGroupOp>(op))
      last = &op;
  return last;
}

} // namespace strata

#endif // STRATA_PASSES_PASSUTILS_H
