//===- Evaluator.h - Reference semantics of Strata ops ----------*- C++ -*-===//
//
// A slow, obviously-correct evaluator of Strata programs in double
// precision: the executable specification the runtimes are tested against
// and the oracle of the finite-difference gradient checks. Not a runtime.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_REFERENCE_EVALUATOR_H
#define STRATA_REFERENCE_EVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace strata {
namespace reference {

/// A dense row-major tensor; integer tensors hold exact integral values.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  Tensor(std::vector<int64_t> shape, double fill = 0.0);
  int64_t numElements() const;
};

struct EvalOptions {
  /// Run seed of the counter-based RNG (dropout).
  uint64_t seed = 0;
};

/// Evaluates `func` on `args`, reading `strata.get_param` values from
/// `params` (by symbol name). Returns the function's results.
llvm::Expected<std::vector<Tensor>>
evaluate(mlir::func::FuncOp func, llvm::ArrayRef<Tensor> args,
         const llvm::StringMap<Tensor> &params, const EvalOptions &options = {});

} // namespace reference
} // namespace strata

#endif // STRATA_REFERENCE_EVALUATOR_H
