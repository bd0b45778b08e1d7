//===- PassUtils.h - Small helpers shared by the Strata passes --*- C++ -*-===//

#ifndef STRATA_PASSES_PASSUTILS_H
#define STRATA_PASSES_PASSUTILS_H

#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace strata {

/// The ranked tensor type of `v` (which must have one).
inline mlir::RankedTensorType tensorType(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

/// Multiply-add FLOPs of a product op (matmul, its gradient, the fused
/// GEMMs); 0 for every other op.
int64_t matmulFlops(mlir::Operation *op);

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

/// Declares `strata.comm_group @name` with `lists` of ranks after the last
/// declaration (renamed on a clash) and returns a reference to it.
inline mlir::FlatSymbolRefAttr
declareCommGroup(mlir::ModuleOp module, llvm::StringRef name,
                 llvm::ArrayRef<llvm::SmallVector<int64_t>> lists) {
  mlir::OpBuilder b(module.getContext());
  if (mlir::Operation *last = lastDeclaration(module))
    b.setInsertionPointAfter(last);
  else
    b.setInsertionPointToStart(module.getBody());
  llvm::SmallVector<mlir::Attribute> attrs;
  for (const llvm::SmallVector<int64_t> &ranks : lists)
    attrs.push_back(b.getDenseI64ArrayAttr(ranks));
  auto group = CommGroupOp::create(b, module.getLoc(), name,
                                   b.getArrayAttr(attrs));
  mlir::SymbolTable(module).insert(group);
  return mlir::FlatSymbolRefAttr::get(group.getSymNameAttr());
}

} // namespace strata

#endif // STRATA_PASSES_PASSUTILS_H
