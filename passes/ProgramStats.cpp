//===- ProgramStats.cpp - Parameter, op and FLOP counts -------------------===//

#include "strata/Passes/Passes.h"
#include "strata/Analysis/MemoryPlan.h"
#include "PassUtils.h"

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

int64_t strata::matmulFlops(Operation *op) {
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
  // Attention counts the products of the unfused ops it replaces, q k^T
  // and p v (its kernel skips the keys causal attention masks, and its
  // gradient recomputes the scores).
  auto attention = [&](Value q, Value k, Value v) {
    RankedTensorType qt = type(q), kt = type(k), vt = type(v);
    int64_t r = qt.getRank();
    return 2 * (qt.getNumElements() / qt.getDimSize(r - 1)) *
           kt.getDimSize(r - 3) * (qt.getDimSize(r - 1) + vt.getDimSize(r - 1));
  };
  if (auto a = dyn_cast<AttentionOp>(op))
    return attention(a.getQuery(), a.getKey(), a.getValue());
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return 2 * attention(grad.getQuery(), grad.getKey(), grad.getValue());
  return 0;
}

namespace {
struct ProgramStatsPass
    : public strata::impl::StrataProgramStatsBase<ProgramStatsPass> {
  using StrataProgramStatsBase::StrataProgramStatsBase;

  void runOnOperation() override {
    // (Within the bound every sum below stays an int64.)
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() &&
          failed(checkStepBytes(func, "strata-program-stats")))
        return signalPassFailure();
    int64_t numParams = 0, paramElements = 0, paramBytes = 0, flops = 0;
    int64_t stateBytes = 0;
    std::map<StringRef, int64_t> opCounts; // sorted by name
    getOperation()->walk([&](Operation *op) {
      if (op == getOperation())
        return;
      ++opCounts[op->getName().getStringRef()];
      if (auto param = dyn_cast<ParamOp>(op)) {
        RankedTensorType type = param.getTensorType();
        ++numParams;
        paramElements += type.getNumElements();
        paramBytes += tensorBytes(type);
      }
      if (auto state = dyn_cast<StateOp>(op))
        stateBytes += tensorBytes(state.getType());
      flops += matmulFlops(op);
    });
    // The memory plan of the largest function (the step).
    MemoryPlan plan;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal()) {
        MemoryPlan candidate = planMemory(func);
        if (candidate.peakBytes() > plan.peakBytes())
          plan = std::move(candidate);
      }

    std::unique_ptr<llvm::ToolOutputFile> file;
    if (output != "-") {
      std::string error;
      file = openOutputFile(output, &error);
      if (!file) {
        mlir::emitError(getOperation().getLoc())
            << "cannot open '" << output << "': " << error;
        return signalPassFailure();
      }
    }
    llvm::raw_ostream &os = file ? file->os() : llvm::errs();
    os << "params: " << numParams << "\n";
    os << "param-elements: " << paramElements << "\n";
    os << "param-bytes: " << paramBytes << "\n";
    os << "state-bytes: " << stateBytes << "\n";
    os << "input-bytes: " << plan.inputBytes << "\n";
    os << "activation-peak-bytes: " << plan.livePeakBytes << "\n";
    os << "planned-arena-bytes: " << plan.arenaBytes << "\n";
    os << "planned-peak-bytes: " << plan.peakBytes() << "\n";
    os << "in-place-ops: " << plan.inPlaceOps << "\n";
    os << "packed-in-place: " << plan.packedInPlace << "\n";
    os << "matmul-flops: " << flops << "\n";
    for (auto &[name, count] : opCounts)
      os << "op " << name << ": " << count << "\n";
    if (file) {
      // (A write error, such as a full disk, would otherwise end the process
      // when the stream closes.)
      file->os().flush();
      if (std::error_code ec = file->os().error()) {
        file->os().clear_error();
        mlir::emitError(getOperation().getLoc())
            << "cannot write '" << output << "': " << ec.message();
        return signalPassFailure();
      }
      file->keep();
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
