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

/// Collectives of a multi-rank run (strata::MpiCommunicator implements it).
class Communicator {
public:
  virtual ~Communicator() = default;
  /// This process's rank in the world.
  virtual int64_t rank() const = 0;
  /// Sums `data` in place over the world ranks `group` (which contains
  /// rank()); every rank of the group calls it in the same order.
  virtual llvm::Error allReduceSum(std::vector<double> &data,
                                   llvm::ArrayRef<int64_t> group) = 0;
  /// Copies `data` from group[root] to every rank of `group`.
  virtual llvm::Error broadcast(std::vector<double> &data,
                                llvm::ArrayRef<int64_t> group,
                                int64_t root) = 0;
  /// Sends `data` to group[peer]; may return before it is received.
  /// Messages between two ranks arrive in the order they were sent.
  virtual llvm::Error send(const std::vector<double> &data,
                           llvm::ArrayRef<int64_t> group, int64_t peer) = 0;
  /// Receives data.size() values from group[peer].
  virtual llvm::Error recv(std::vector<double> &data,
                           llvm::ArrayRef<int64_t> group, int64_t peer) = 0;
};

struct EvalOptions {
  /// Run seed of the counter-based RNG (dropout).
  uint64_t seed = 0;
  /// Collectives; null in a single process (a collective is then an error).
  Communicator *communicator = nullptr;
};

/// Rounds `t`'s elements to `element` where it is a float type narrower
/// than f32 (bf16, f16: to nearest even), as a runtime stores them.
void roundToElementType(Tensor &t, mlir::Type element);

/// Evaluates one step of `func` on `args`. `state` holds the value of every
/// `strata.param` and `strata.state` by symbol name (states missing from it
/// start from their initialiser, zeros or ones); the step's
/// `strata.assign`s update it when the step ends. Returns the function's
/// results.
llvm::Expected<std::vector<Tensor>>
evaluate(mlir::func::FuncOp func, llvm::ArrayRef<Tensor> args,
         llvm::StringMap<Tensor> &state, const EvalOptions &options = {});

} // namespace reference
} // namespace strata

#endif // STRATA_REFERENCE_EVALUATOR_H
