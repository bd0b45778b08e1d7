//===- Strata.h - The Strata dialect ----------------------------*- C++ -*-===//
//
// Public header of the Strata dialect: ops, attributes, types and enums.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECT_STRATA_H
#define STRATA_DIALECT_STRATA_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "Strata/StrataDialect.h.inc"
#include "Strata/StrataEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "Strata/StrataAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "Strata/StrataTypes.h.inc"

#include "Strata/StrataInterfaces.h.inc"

namespace strata {
/// Implements InPlaceOpInterface for an op declared `Strata_InPlace<"...">`:
/// the result may overwrite the operands at `Indices`.
template <unsigned... Indices> struct InPlaceOperands {
  template <typename ConcreteOp>
  class Impl : public mlir::OpTrait::TraitBase<ConcreteOp, Impl> {
  public:
    llvm::ArrayRef<unsigned> getInPlaceOperands() {
      static constexpr unsigned indices[] = {Indices...};
      return indices;
    }
  };
};
} // namespace strata

#define GET_OP_CLASSES
#include "Strata/StrataOps.h.inc"

namespace strata {

/// NumPy broadcast of two static shapes; failure if they are incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> lhs, llvm::ArrayRef<int64_t> rhs);

/// Metadata accessors (the discardable attributes the dialect verifies).
std::optional<Role> getRole(mlir::Operation *op);
void setRole(mlir::Operation *op, Role role);
std::optional<int64_t> getStage(mlir::Operation *op);
std::optional<int64_t> getMicroBatch(mlir::Operation *op);
mlir::FlatSymbolRefAttr getGradOf(mlir::Operation *op);
/// The `strata.layer` of an op, or "" when it has none.
llvm::StringRef getLayer(mlir::Operation *op);

} // namespace strata

#endif // STRATA_DIALECT_STRATA_H
