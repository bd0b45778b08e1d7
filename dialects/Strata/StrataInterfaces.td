//===- StrataInterfaces.td - Op interfaces of the Strata dialect -*- tablegen -*-===//
//
// Where passes, the memory plan and the lowering need "every op of a kind",
// they ask the op through an interface instead of listing ops: a new op of
// the kind declares the interface in its definition and every place that
// asks sees it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_INTERFACES
#define STRATA_INTERFACES

include "mlir/IR/OpBase.td"
include "mlir/IR/Traits.td"

def Strata_OptimizerUpdateOpInterface
    : OpInterface<"OptimizerUpdateOpInterface"> {
  let cppNamespace = "::strata";
  let description = [{
    An optimizer's update of one parameter (SGD, Momentum, Adam, AdamW,
    LAMB, LARS): operand 0 is the parameter, operand 1 its gradient, result
    0 the updated parameter; result i > 0 is the update of operand i + 1
    (optimizer state), but for the f32 master weight of a low-precision
    parameter, whose update is the last result. Sharding keeps the updates of a rank's own parameters, the memory
    plan counts the gradients they read, and the lowering updates their
    parameters in place.
  }];
  let methods = [
    InterfaceMethod<"The parameter before the update.", "::mlir::Value",
                    "getParameter", (ins), [{}],
                    [{ return $_op->getOperand(0); }]>,
    InterfaceMethod<"The parameter's gradient.", "::mlir::Value",
                    "getGradient", (ins), [{}],
                    [{ return $_op->getOperand(1); }]>,
    InterfaceMethod<[{The f32 master weight the update computes from
                      (mixed precision level o2), or null. Its new value
                      is the last result.}],
                    "::mlir::Value", "getMaster", (ins), [{}],
                    [{ return $_op.getMaster(); }]>,
    InterfaceMethod<[{The value result `i` replaces: the parameter for
                      result 0, the master for the master's result,
                      operand i + 1 (its state) for the others.}],
                    "::mlir::Value", "getUpdated", (ins "unsigned":$i), [{}],
                    [{
      if (i == 0)
        return $_op->getOperand(0);
      if (::mlir::Value master = $_op.getMaster();
          master && i + 1 == $_op->getNumResults())
        return master;
      return $_op->getOperand(i + 1);
    }]>,
    InterfaceMethod<[{The guard (the gradients' global norm under loss
                      scaling), or null: when it is not finite the update
                      is skipped and each result equals getUpdated().}],
                    "::mlir::Value", "getGuard", (ins), [{}],
                    [{ return $_op.getGuard(); }]>,
  ];
}

def Strata_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::strata";
  let description = [{
    A communication among the ranks of a `strata.comm_group` (all-reduce,
    reduce-scatter, all-gather, broadcast, send, receive). Collectives are
    ordered by a chain of `!strata.token` values: each reads the token of
    the one before it and yields the next. strata-pipeline re-chains the
    collectives of the ops a rank keeps, the memory plan keeps a started
    collective's buffers alive until its wait, and the lowering starts it
    on the group's communicator.
  }];
  let methods = [
    InterfaceMethod<"The communication group (a strata.comm_group).",
                    "::mlir::FlatSymbolRefAttr", "getGroupAttr", (ins), [{}],
                    [{ return $_op.getGroupAttr(); }]>,
    InterfaceMethod<"The operand holding the token this collective waits "
                    "for.", "::mlir::OpOperand &", "getTokenOperand", (ins),
                    [{}], [{ return $_op.getTokenMutable(); }]>,
    InterfaceMethod<"The token later collectives wait for.", "::mlir::Value",
                    "getOutToken", (ins), [{}],
                    [{ return $_op.getOutToken(); }]>,
  ];
}

def Strata_InPlaceOpInterface : OpInterface<"InPlaceOpInterface"> {
  let cppNamespace = "::strata";
  let description = [{
    An op whose results may be written over some of its operands: each
    element of such a result depends only on the elements at the same
    position (in row-major order) of those operands, which are read before
    it is written, or, for a row op (softmax, cross-entropy's gradient), on
    its row of them, which the kernels read whole before writing it. The
    memory plan gives the result such an operand's buffer when they have
    the same element type and number of elements (a reshape keeps the
    element order) and the operand is not read after the op.
    Declared through `Strata_InPlace<"i, j">` (the one result over the
    operands at those indices) or `Strata_InPlaceEach` (result i over
    operand i, for ops that transform each of their inputs alike).
  }];
  let methods = [
    InterfaceMethod<"The indices of the operands result `result` may "
                    "overwrite.",
                    "::llvm::SmallVector<unsigned, 2>", "getInPlaceOperands",
                    (ins "unsigned":$result)>,
  ];
}

// Declares InPlaceOpInterface with the operands at `indices` ("0" or
// "0, 1"): the InPlaceOperands trait implements the method.
class Strata_InPlaceOperands<string indices>
    : ParamNativeOpTrait<"InPlaceOperands", indices> {
  let cppNamespace = "::strata";
}
class Strata_InPlace<string indices>
    : TraitList<[Strata_InPlaceOpInterface, Strata_InPlaceOperands<indices>]>;

// Declares InPlaceOpInterface with result i over operand i.
def Strata_InPlaceEachOperand : NativeOpTrait<"InPlaceEachOperand"> {
  let cppNamespace = "::strata";
}
def Strata_InPlaceEach
    : TraitList<[Strata_InPlaceOpInterface, Strata_InPlaceEachOperand]>;

// Every Strata op: an attribute that is neither one of the op's own nor
// another dialect's (a name with a dialect prefix, which that dialect
// checks) is refused, with the nearest of the op's own names.
def Strata_KnownAttributes : NativeOpTrait<"KnownAttributes"> {
  let cppNamespace = "::strata";
}

#endif // STRATA_INTERFACES
