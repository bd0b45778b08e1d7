//===- ReferenceExecutable.cpp - The evaluator as a backend ---------------===//

#include "strata/Execution/Executable.h"

#include <chrono>

namespace strata {

Executable::~Executable() = default;

namespace {
/// Runs the step with the double-precision evaluator; parameters and state
/// live in a map of whole tensors by symbol name.
class ReferenceExecutable : public Executable {
public:
  ReferenceExecutable(mlir::func::FuncOp step,
                      const reference::EvalOptions &options)
      : function(step), options(options),
        created(std::chrono::steady_clock::now()) {}

  llvm::Error
  setState(const llvm::StringMap<reference::Tensor> &values) override {
    state = values;
    return llvm::Error::success();
  }
  void getState(llvm::StringMap<reference::Tensor> &values) const override {
    for (const auto &entry : state)
      values[entry.getKey()] = entry.getValue();
  }
  std::optional<reference::Tensor>
  readState(llvm::StringRef name) const override {
    auto it = state.find(name);
    if (it == state.end())
      return std::nullopt;
    return it->getValue();
  }
  llvm::Expected<std::vector<reference::Tensor>>
  step(llvm::ArrayRef<reference::Tensor> args) override {
    return reference::evaluate(function, args, state, options);
  }
  double nowUs() const override {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - created)
        .count();
  }

private:
  mlir::func::FuncOp function;
  reference::EvalOptions options;
  llvm::StringMap<reference::Tensor> state;
  std::chrono::steady_clock::time_point created;
};
} // namespace

std::unique_ptr<Executable>
createReferenceExecutable(mlir::func::FuncOp step,
                          const reference::EvalOptions &options) {
  return std::make_unique<ReferenceExecutable>(step, options);
}

} // namespace strata
