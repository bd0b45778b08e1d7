//===- Program.h - The shape of a Strata training program ------*- C++ -*-===//
//
// A Strata program is a module of declarations (`strata.param`,
// `strata.state`, `strata.comm_group`, `strata.rank_grid`) and one training
// step, a `func.func`. Every pass, the executables and the C API find the
// step here, by one rule.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_DIALECT_PROGRAM_H
#define STRATA_DIALECT_PROGRAM_H

#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace strata {

/// The name the program generators give the training step.
inline constexpr llvm::StringLiteral kStepFunctionName = "train_step";

/// Symbols of the state that the optimizer and mixed precision declare and
/// checkpoints carry (whose loading checks them by these names): the step
/// count, the loss scale (with its counters "loss_scale.good" and
/// "loss_scale.bad"), and each parameter P's second moment "P.moment2".
inline constexpr llvm::StringLiteral kStepCountStateName = "step";
inline constexpr llvm::StringLiteral kLossScaleStateName = "loss_scale";
inline constexpr llvm::StringLiteral kSecondMomentSuffix = "moment2";

/// The program's training step: the function named @train_step, or else the
/// module's only function with a body. An error saying why when there is
/// none or when several functions have a body and none is @train_step.
llvm::Expected<mlir::func::FuncOp> findStepFunction(mlir::ModuleOp module);

/// findStepFunction for a pass: the reason is reported at the module,
/// prefixed by `pass` ("strata-sharding: ..."); also refused (at the
/// function or its last op) when the step is not one block that ends in
/// func.return.
mlir::FailureOr<mlir::func::FuncOp> getStepFunction(mlir::ModuleOp module,
                                                    llvm::StringRef pass);

/// getStepFunction for a pass that rewrites gradients: also reported when
/// the step returns none ("the step returns no gradients (run strata-autodiff
/// first<order>)", with `order` such as ", and this pass before
/// strata-optimizer").
mlir::FailureOr<mlir::func::FuncOp>
getDifferentiatedStep(mlir::ModuleOp module, llvm::StringRef pass,
                      llvm::StringRef order = "");

/// The program's rank grid (its `strata.rank_grid`); null when it has none.
RankGridOp findRankGrid(mlir::ModuleOp module);

/// findRankGrid for a pass that distributes the program: reported at the
/// module, prefixed by `pass`, when the program declares no grid.
mlir::FailureOr<RankGridOp> getRankGrid(mlir::ModuleOp module,
                                        llvm::StringRef pass);

/// The loss scale of mixed precision: the `strata.state` that carries
/// `strata.loss_scaling` (declared by strata-amp for float16); null when the
/// program scales no loss. strata-autodiff seeds the backward with it and
/// divides it out of the gradients; strata-optimizer skips updates whose
/// gradients are not finite and moves it by Paddle's dynamic rule.
StateOp findLossScaleState(mlir::ModuleOp module);

/// The passes that rewrite a program's structure record themselves, in the
/// order they ran, in the module's `strata.passes` attribute (an array of
/// pass names; the lowering drops it), and those that make the program of
/// one rank record that rank in `strata.rank` (StrataDialect's
/// kPassesAttrName and kRankAttrName). A pass then refuses a
/// program that has been through itself or through a pass it must precede,
/// naming the order to use, where it would otherwise rewrite it wrongly.
/// Programs written by hand carry no record; the passes' checks of the
/// step's form (getDifferentiatedStep) still apply to them.

/// Appends `pass` to the module's `strata.passes`.
void recordPass(mlir::ModuleOp module, llvm::StringRef pass);

/// The value of every element of a splat constant (a float, or an integer
/// as a double); none for a constant whose elements differ.
std::optional<double> splatValue(mlir::DenseElementsAttr dense);

/// Reported at the module, prefixed by `pass`, when the program has been
/// through any of `later`: the passes that `pass` must run before (`pass`
/// itself among them when it runs once).
mlir::LogicalResult checkRunsBefore(mlir::ModuleOp module, llvm::StringRef pass,
                                    llvm::ArrayRef<llvm::StringRef> later);

/// Records that the program is rank `rank`'s, or reports at the module,
/// prefixed by `pass`, when an earlier pass made it for another rank.
mlir::LogicalResult recordRank(mlir::ModuleOp module, llvm::StringRef pass,
                               int64_t rank);

/// For a pass that makes one rank's program (and removes the parameters and
/// state other ranks hold): reported at the other function, prefixed by
/// `pass`, when a function other than `step` reads parameters or state.
mlir::LogicalResult checkOnlyStepReadsSymbols(mlir::ModuleOp module,
                                              mlir::func::FuncOp step,
                                              llvm::StringRef pass);

/// Whether `func` is a compiled step rather than one as written: it returns
/// gradients or assigns parameters and state (after strata-autodiff or
/// strata-optimizer). Executables compile the program as written.
bool isCompiledStep(mlir::func::FuncOp func);

/// Whether `func` is a differentiated step: it returns the loss, then
/// gradients marked `strata.grad_of` (strata-autodiff's form).
bool returnsGradients(mlir::func::FuncOp func);

} // namespace strata

#endif // STRATA_DIALECT_PROGRAM_H
