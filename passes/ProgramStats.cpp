//===- ProgramStats.cpp - Parameter, op and FLOP counts -------------------===//

#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/Support/FileUtilities.h"

#include <map>

namespace strata {
#define GEN_PASS_DEF_STRATAPROGRAMSTATS
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

/// 2·M·N·K times the batch of `lhs @ rhs`, from the product's shape.
static int64_t productFlops(RankedTensorType lhs, RankedTensorType rhs,
                            RankedTensorType product, bool transposeLhs) {
  int64_t k = lhs.getDimSize(lhs.getRank() - (transposeLhs ? 2 : 1));
  return 2 * product.getNumElements() * k;
}

static int64_t matmulFlops(Operation *op) {
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  if (auto mm = dyn_cast<MatmulOp>(op))
    return productFlops(type(mm.getLhs()), type(mm.getRhs()),
                        type(mm.getResult()), mm.getTransposeLhs());
  // The two gradient products cost the forward product each.
  if (auto grad = dyn_cast<MatmulGradOp>(op))
    return 2 * productFlops(type(grad.getLhs()), type(grad.getRhs()),
                            type(grad.getResultGrad()),
                            grad.getTransposeLhs());
  if (auto gemm = dyn_cast<FusedGemmEpilogueOp>(op))
    return productFlops(type(gemm.getInput()), type(gemm.getWeight()),
                        type(gemm.getResult()), false);
  if (auto grad = dyn_cast<FusedGemmEpilogueGradOp>(op))
    return 2 * productFlops(type(grad.getInput()), type(grad.getWeight()),
                            type(grad.getResultGrad()), false);
  return 0;
}

static int64_t byteSize(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return tensor.getNumElements() *
         ((tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

/// Peak bytes of the step's intermediate values when each is freed after
/// its last use (parameter and state reads, and the batch, are counted as
/// persistent instead): the lower bound a static memory plan can reach
/// without in-place reuse.
static int64_t activationPeakBytes(func::FuncOp func) {
  Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;
  // delta[i]: bytes allocated at op i (positive) or freed after it.
  std::vector<int64_t> alloc(n + 1, 0), release(n + 1, 0);
  for (Operation &op : body) {
    if (isa<GetParamOp, GetStateOp>(op))
      continue;
    for (Value v : op.getResults()) {
      int64_t last = index[&op];
      for (Operation *user : v.getUsers())
        last = std::max(last, index[body.findAncestorOpInBlock(*user)]);
      alloc[index[&op]] += byteSize(v.getType());
      release[last] += byteSize(v.getType());
    }
  }
  int64_t live = 0, peak = 0;
  for (int64_t i = 0; i < n; ++i) {
    live += alloc[i];
    peak = std::max(peak, live);
    live -= release[i];
  }
  return peak;
}

namespace {
struct ProgramStatsPass
    : public strata::impl::StrataProgramStatsBase<ProgramStatsPass> {
  using StrataProgramStatsBase::StrataProgramStatsBase;

  void runOnOperation() override {
    int64_t numParams = 0, paramElements = 0, paramBytes = 0, flops = 0;
    int64_t stateBytes = 0, peakBytes = 0;
    std::map<StringRef, int64_t> opCounts; // sorted by name
    getOperation()->walk([&](Operation *op) {
      if (op == getOperation())
        return;
      ++opCounts[op->getName().getStringRef()];
      if (auto param = dyn_cast<ParamOp>(op)) {
        RankedTensorType type = param.getTensorType();
        ++numParams;
        paramElements += type.getNumElements();
        paramBytes += type.getNumElements() *
                      type.getElementType().getIntOrFloatBitWidth() / 8;
      }
      if (auto state = dyn_cast<StateOp>(op))
        stateBytes += byteSize(state.getType());
      flops += matmulFlops(op);
    });
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal())
        peakBytes = std::max(peakBytes, activationPeakBytes(func));

    std::unique_ptr<llvm::ToolOutputFile> file;
    if (output != "-") {
      std::string error;
      file = openOutputFile(output, &error);
      if (!file) {
        getOperation().emitError()
            << "cannot open '" << output << "': " << error;
        return signalPassFailure();
      }
    }
    llvm::raw_ostream &os = file ? file->os() : llvm::errs();
    os << "params: " << numParams << "\n";
    os << "param-elements: " << paramElements << "\n";
    os << "param-bytes: " << paramBytes << "\n";
    os << "state-bytes: " << stateBytes << "\n";
    os << "activation-peak-bytes: " << peakBytes << "\n";
    os << "matmul-flops: " << flops << "\n";
    for (auto &[name, count] : opCounts)
      os << "op " << name << ": " << count << "\n";
    if (file)
      file->keep();
    markAllAnalysesPreserved();
  }
};
} // namespace
