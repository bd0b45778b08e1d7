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
/// Whether `type` is a tensor a program may hold: statically shaped, no
/// dimension 0, at most 2^53 elements (the largest count every size and
/// offset of the runtimes and the evaluator holds exactly).
bool hasTrainableShape(mlir::Type type);

/// Implements InPlaceOpInterface for an op declared `Strata_InPlace<"...">`:
/// its one result may overwrite the operands at `Indices`.
template <unsigned... Indices> struct InPlaceOperands {
  template <typename ConcreteOp>
  class Impl : public mlir::OpTrait::TraitBase<ConcreteOp, Impl> {
  public:
    llvm::SmallVector<unsigned, 2> getInPlaceOperands(unsigned result) {
      if (result != 0)
        return {};
      return {Indices...};
    }
  };
};

/// Refuses an attribute of `op` that is neither one of its own (inherent)
/// nor prefixed by a dialect ("strata.layer", which the dialect checks): a
/// misspelt `{casual}` would otherwise be kept and ignored.
mlir::LogicalResult verifyKnownAttributes(mlir::Operation *op);

/// The trait of every Strata op that calls verifyKnownAttributes.
template <typename ConcreteOp>
class KnownAttributes
    : public mlir::OpTrait::TraitBase<ConcreteOp, KnownAttributes> {
public:
  static mlir::LogicalResult verifyTrait(mlir::Operation *op) {
    return verifyKnownAttributes(op);
  }
};

/// Implements InPlaceOpInterface for an op declared `Strata_InPlaceEach`:
/// result i may overwrite operand i.
template <typename ConcreteOp>
class InPlaceEachOperand
    : public mlir::OpTrait::TraitBase<ConcreteOp, InPlaceEachOperand> {
public:
  llvm::SmallVector<unsigned, 2> getInPlaceOperands(unsigned result) {
    if (result >= this->getOperation()->getNumOperands())
      return {};
    return {result};
  }
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

/// Whether `use` reads only its value's type, not its data (the input of
/// strata.reduce_grad): it keeps no buffer alive and needs no recomputed
/// copy.
bool readsOnlyType(mlir::OpOperand &use);

} // namespace strata

#endif // STRATA_DIALECT_STRATA_H
