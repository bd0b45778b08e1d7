//===- FuzzProgram.cpp - libFuzzer target: parser, verifier, passes ------===//
//
// Any bytes as a program: parsed and verified; a program that verifies goes
// through the passes of several strategies (every one-rank pass, data
// parallelism, ZeRO 1-3 and a pipeline, on the ranks of a world of 2) and
// the lowering. Each must accept it or refuse it with a diagnostic: never
// crash, and never hand on IR that does not verify (the pass manager
// verifies after every pass).
//
//===----------------------------------------------------------------------===//

#include "strata/InitAllDialects.h"
#include "strata/Passes/Passes.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>

namespace {
const char *const kStrategies[] = {
    "optimizer: {type: adamw, grad_clip_norm: 1.0}\n"
    "fused_passes: {enable: true, gemm_epilogue: true, dropout_add: true}\n"
    "recompute: {enable: true, checkpoints: [h0]}\n",
    "gradient_merge: {enable: true, k_steps: 2}\n",
    "sharding: {enable: true, stage: 1, degree: 2}\n",
    "sharding: {enable: true, stage: 2, degree: 2}\n"
    "optimizer: {grad_clip_norm: 1.0}\n",
    "sharding: {enable: true, stage: 3, degree: 2, segment_size: 1}\n",
    "pipeline: {enable: true, pp_degree: 2, accumulate_steps: 2}\n",
};

mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    strata::registerStrataDialects(registry);
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    c->printOpOnDiagnostic(false);
    return c;
  }();
  return *ctx;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz.mlir"),
      llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> program =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &ctx);
  if (!program)
    return 0;
  for (const char *text : kStrategies) {
    strata::StrategyContext world;
    world.worldSize = 2;
    auto strategy = strata::parseStrategy(text, "strategy.yaml", world);
    if (!strategy) {
      llvm::consumeError(strategy.takeError());
      abort(); // the fixed strategies are valid
    }
    for (int64_t rank = 0; rank < 2; ++rank) {
      mlir::OwningOpRef<mlir::ModuleOp> copy = program->clone();
      mlir::PassManager pm(&ctx);
      if (llvm::Error err = strata::addPlannedPasses(
              pm, strata::planPasses(*strategy, 2, rank), *strategy, 2)) {
        llvm::consumeError(std::move(err));
        abort();
      }
      pm.addPass(strata::createStrataLowerToRuntime());
      (void)pm.run(*copy);
    }
  }
  return 0;
}
