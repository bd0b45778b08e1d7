//===- Strata.cpp - C API for embedding the Strata compiler ---------------===//

#include "strata-c/Strata.h"

#include "strata/InitAllDialects.h"
#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <mutex>
#include <new>

using namespace mlir;

struct StrataSessionImpl {
  StrataSessionImpl() {
    static std::once_flag passes;
    std::call_once(passes, [] { strata::registerAllStrataPasses(); });
    DialectRegistry registry;
    strata::registerStrataDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    module = ModuleOp::create(UnknownLoc::get(&context));
  }

  /// Runs `fn` with MLIR diagnostics captured into `error`.
  template <typename Fn> int capture(Fn fn) {
    error.clear();
    llvm::raw_string_ostream os(error);
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (auto file = dyn_cast<FileLineColLoc>(diag.getLocation()))
        os << file.getFilename().getValue() << ":" << file.getLine() << ":"
           << file.getColumn();
      else
        os << diag.getLocation();
      os << ": "
         << (diag.getSeverity() == DiagnosticSeverity::Error ? "error: " : "")
         << diag << "\n";
      return success();
    });
    bool ok = fn(os);
    if (!ok && error.empty())
      error = "unknown error";
    return ok ? 0 : 1;
  }

  bool runPassManager(PassManager &pm) {
    return succeeded(pm.run(*module)) && succeeded(verify(*module));
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string error;
};

extern "C" {

StrataSession strataSessionCreate(void) {
  return new (std::nothrow) StrataSessionImpl();
}

void strataSessionDestroy(StrataSession session) { delete session; }

int strataSessionParseProgram(StrataSession session, const char *text,
                              size_t length, const char *bufferName) {
  return session->capture([&](llvm::raw_ostream &) {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text, length),
                                             bufferName ? bufferName : "<c-api>"),
        llvm::SMLoc());
    auto parsed = parseSourceFile<ModuleOp>(sourceMgr, &session->context);
    if (!parsed)
      return false;
    session->module = std::move(parsed);
    return true;
  });
}

int strataSessionGenerateGpt(StrataSession session, int64_t layers,
                             int64_t hidden, int64_t heads, int64_t seq,
                             int64_t vocab, int64_t batch, double dropout) {
  return session->capture([&](llvm::raw_ostream &os) {
    strata::GptConfig config{layers, hidden, heads, seq, vocab, batch, dropout};
    if (llvm::Error err = strata::validate(config)) {
      os << llvm::toString(std::move(err));
      return false;
    }
    session->module = strata::buildGpt(session->context, config);
    return true;
  });
}

int strataSessionRunPipeline(StrataSession session, const char *pipeline) {
  return session->capture([&](llvm::raw_ostream &os) {
    PassManager pm(&session->context);
    // Anchored on the module ("builtin.module(...)", as mlir-opt's
    // --pass-pipeline) or a bare list of passes. Parsing the anchored form
    // into `pm` would nest it under the module and run it on nothing.
    StringRef text = StringRef(pipeline).trim();
    if (text.starts_with("builtin.module(")) {
      FailureOr<OpPassManager> anchored = parsePassPipeline(text, os);
      if (failed(anchored))
        return false;
      static_cast<OpPassManager &>(pm) = *anchored;
    } else if (failed(parsePassPipeline(text, pm, os))) {
      return false;
    }
    return session->runPassManager(pm);
  });
}

int strataSessionApplyStrategy(StrataSession session, const char *path,
                               int64_t worldSize) {
  return session->capture([&](llvm::raw_ostream &os) {
    strata::StrategyContext context;
    if (worldSize > 0)
      context.worldSize = worldSize;
    auto strategy = strata::loadStrategy(path, context);
    if (!strategy) {
      os << llvm::toString(strategy.takeError());
      return false;
    }
    PassManager pm(&session->context);
    if (llvm::Error err = strata::addPlannedPasses(
            pm, strata::planPasses(*strategy, context.worldSize), *strategy)) {
      os << llvm::toString(std::move(err));
      return false;
    }
    return session->runPassManager(pm);
  });
}

int strataSessionPrintProgram(StrataSession session,
                              StrataStringCallback callback, void *userData) {
  std::string text;
  llvm::raw_string_ostream os(text);
  session->module->print(os);
  os.flush();
  callback(text.data(), text.size(), userData);
  session->error.clear();
  return 0;
}

const char *strataSessionLastError(StrataSession session) {
  return session->error.c_str();
}

} // extern "C"
