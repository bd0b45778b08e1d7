//===- ProgramBuilder.h - C++ API to construct training programs -*- C++ -*-===//
//
// The builder that frameworks and strata-gen use to write a training
// program: parameters, one step function with the forward computation and a
// scalar loss. Autodiff and optimizer passes add the rest.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_MODEL_PROGRAMBUILDER_H
#define STRATA_MODEL_PROGRAMBUILDER_H

#include "strata/Dialect/Strata.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "strata/Dialect/Program.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace strata {

class ProgramBuilder {
public:
  /// Starts an empty module. The context must have the Strata and func
  /// dialects loaded (see registerStrataDialects).
  explicit ProgramBuilder(mlir::MLIRContext *context);

  /// Opens the step function with the given argument types and names;
  /// returns its arguments.
  mlir::ValueRange beginStep(llvm::ArrayRef<mlir::Type> inputTypes,
                             llvm::ArrayRef<llvm::StringRef> inputNames);
  /// Returns `loss` from the step function and hands over the module.
  mlir::OwningOpRef<mlir::ModuleOp> finish(mlir::Value loss);

  /// Puts the ops built from now on into layer `scope` (their
  /// `strata.layer` attribute, and `scope.name` locations) so that passes
  /// and diagnostics can refer to layers. "" leaves the layer.
  void setScope(llvm::StringRef scope) { this->scope = scope.str(); }
  /// Marks the ops built from now on as under a mixed-precision guard
  /// (`strata.amp_guard`, Paddle's fp16_guard region), or stops.
  void setAmpGuard(bool guard) { ampGuard = guard; }

  /// Declares parameter `scope.name` and reads it in the step function.
  mlir::Value param(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                    InitKind init, double scale = 0.0);

  mlir::Value matmul(mlir::Value lhs, mlir::Value rhs,
                     bool transposeLhs = false, bool transposeRhs = false);
  mlir::Value add(mlir::Value lhs, mlir::Value rhs);
  mlir::Value sub(mlir::Value lhs, mlir::Value rhs);
  mlir::Value mul(mlir::Value lhs, mlir::Value rhs);
  /// The mean or sum of every element.
  mlir::Value reduceAll(mlir::Value input, bool mean);
  mlir::Value scale(mlir::Value input, double factor);
  mlir::Value biasAdd(mlir::Value input, mlir::Value bias);
  mlir::Value relu(mlir::Value input);
  mlir::Value gelu(mlir::Value input, GeluApproximation approximate);
  /// Dropout with a fresh RNG key; returns `input` itself when prob is 0.
  mlir::Value dropout(mlir::Value input, double prob);
  mlir::Value softmax(mlir::Value input, bool causal);
  mlir::Value layerNorm(mlir::Value input, mlir::Value gamma,
                        mlir::Value beta, double epsilon = 1e-5);
  mlir::Value embedding(mlir::Value table, mlir::Value ids);
  mlir::Value reshape(mlir::Value input, llvm::ArrayRef<int64_t> shape);
  mlir::Value transpose(mlir::Value input, llvm::ArrayRef<int64_t> perm);
  mlir::Value crossEntropy(mlir::Value logits, mlir::Value labels);

  mlir::Type f32() { return builder.getF32Type(); }
  mlir::Type i32() { return builder.getI32Type(); }
  mlir::RankedTensorType tensor(llvm::ArrayRef<int64_t> shape,
                                mlir::Type elementType);

private:
  mlir::Location loc(llvm::StringRef name);
  /// Tags `value`'s op with the current layer and guard; returns `value`.
  mlir::Value tag(mlir::Value value);

  mlir::OpBuilder builder;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp step;
  std::string scope;
  bool ampGuard = false;
  int64_t nextDropoutKey = 0;
};

/// Loads the dialects a Strata program uses into `context`.
void loadStrataDialects(mlir::MLIRContext &context);

} // namespace strata

#endif // STRATA_MODEL_PROGRAMBUILDER_H
