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

def Strata_OptimizerUpdateOpInterface
    : OpInterface<"OptimizerUpdateOpInterface"> {
  let cppNamespace = "::strata";
  let description = [{
    An optimizer's update of one parameter (SGD, Momentum, Adam, AdamW,
    LAMB, LARS): operand 0 is the parameter, operand 1 its gradient, result
    0 the updated parameter; the other results are the updated optimizer
    state. Sharding keeps the updates of a rank's own parameters, the memory
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
  ];
}

#endif // STRATA_INTERFACES
