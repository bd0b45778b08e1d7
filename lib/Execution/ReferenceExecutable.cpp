//===- ReferenceExecutable.cpp - The evaluator as a backend ---------------===//

#include "strata/Dialect/Strata.h"
#include "strata/Execution/Executable.h"

#include "mlir/IR/SymbolTable.h"

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

  llvm::Error setState(const llvm::StringMap<reference::Tensor> &values,
                       const reference::InitialValues *rest) override {
    for (const auto &entry : values)
      state[entry.getKey()] = entry.getValue();
    if (rest)
      for (const std::string &name : rest->names())
        if (!values.contains(name))
          state[name] = rest->tensor(name);
    return llvm::Error::success();
  }
  /// A bf16 or f16 parameter or state as the runtimes store (and save) it:
  /// rounded to its type. (The map keeps a parameter's initial value as
  /// given, from which its f32 master weight starts.)
  void getState(llvm::StringMap<reference::Tensor> &values) const override {
    // (An op handle's methods are not const.)
    mlir::func::FuncOp step = function;
    mlir::SymbolTable symbols(step->getParentOfType<mlir::ModuleOp>());
    for (const auto &entry : state) {
      reference::Tensor value = entry.getValue();
      mlir::Operation *symbol = symbols.lookup(entry.getKey());
      if (auto param = llvm::dyn_cast_or_null<ParamOp>(symbol))
        reference::roundToElementType(value,
                                      param.getTensorType().getElementType());
      else if (auto st = llvm::dyn_cast_or_null<StateOp>(symbol))
        reference::roundToElementType(value,
                                      st.getTensorType().getElementType());
      values[entry.getKey()] = std::move(value);
    }
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
