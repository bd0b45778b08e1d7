//===- PassUtils.h - Small helpers shared by the Strata passes --*- C++ -*-===//

#ifndef STRATA_PASSES_PASSUTILS_H
#define STRATA_PASSES_PASSUTILS_H

#include "strata/Dialect/Program.h"
#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

namespace strata {

/// The ranked tensor type of `v` (which must have one).
inline mlir::RankedTensorType tensorType(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

/// Carries the distributed metadata (role, stage, micro-batch, grad_of) of
/// an op to one that replaces or joins it: losing it once made Paddle skip
/// gradient synchronisation.
inline void copyMetadata(mlir::Operation *from, mlir::Operation *to) {
  for (mlir::NamedAttribute attr : from->getDiscardableAttrs())
    if (attr.getName().getValue().starts_with("strata."))
      to->setAttr(attr.getName(), attr.getValue());
}

/// Multiply-add FLOPs of a product op (matmul, its gradient, the fused
/// GEMMs); 0 for every other op.
int64_t matmulFlops(mlir::Operation *op);

/// The last module-level declaration (grid, param, state, comm group), after
/// which new declarations go; null when there is none.
inline mlir::Operation *lastDeclaration(mlir::ModuleOp module) {
  mlir::Operation *last = nullptr;
  for (mlir::Operation &op : *module.getBody())
    if (mlir::isa<RankGridOp, ParamOp, StateOp, CommGroupOp>(op))
      last = &op;
  return last;
}

/// Declares `strata.comm_group @name` with the groups of `grid` along
/// `axes` after the last declaration (renamed on a clash) and returns a
/// reference to it.
inline mlir::FlatSymbolRefAttr declareCommGroup(mlir::ModuleOp module,
                                                llvm::StringRef name,
                                                RankGridOp grid,
                                                llvm::ArrayRef<GridAxis> axes) {
  mlir::OpBuilder b(module.getContext());
  if (mlir::Operation *last = lastDeclaration(module))
    b.setInsertionPointAfter(last);
  else
    b.setInsertionPointToStart(module.getBody());
  llvm::SmallVector<mlir::Attribute> attrs;
  for (const llvm::SmallVector<int64_t> &ranks : grid.getGroups(axes))
    attrs.push_back(b.getDenseI64ArrayAttr(ranks));
  auto group = CommGroupOp::create(b, module.getLoc(), name,
                                   b.getArrayAttr(attrs));
  mlir::SymbolTable(module).insert(group);
  return mlir::FlatSymbolRefAttr::get(group.getSymNameAttr());
}

/// The stage of each parameter's first reader (strata.stage, set by
/// strata-stage-split for a pipeline); parameters no staged op reads are
/// absent (stage 0 for `lookup`).
inline llvm::StringMap<int64_t> homeStages(mlir::Block &body) {
  llvm::StringMap<int64_t> home;
  for (mlir::Operation &op : body)
    if (auto get = mlir::dyn_cast<GetParamOp>(op))
      for (mlir::Operation *user : get->getUsers())
        if (auto stage = user->getAttrOfType<mlir::IntegerAttr>(
                StrataDialect::kStageAttrName)) {
          auto [it, inserted] =
              home.try_emplace(get.getName(), stage.getInt());
          if (!inserted)
            it->second = std::min(it->second, stage.getInt());
        }
  return home;
}

} // namespace strata

#endif // STRATA_PASSES_PASSUTILS_H
