//===- strata-run.cpp - Compile a program with a strategy and train it ----===//
//
//   strata-run PROGRAM.mlir [--strategy FILE] [--steps N] [--seed N]
//              [--data FILE] [--init FILE.safetensors]
//              [--save FILE.safetensors] [--report FILE.json]
//              [--backend reference]
//
// prints `step <i> loss <value>` for every step. This version executes on
// the reference backend (the double-precision evaluator, single process);
// the CPU and CUDA runtimes and multi-rank runs are not implemented yet.
//
//===----------------------------------------------------------------------===//

#include "strata/Analysis/MemoryPlan.h"
#include "strata/Dialect/Strata.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Train/Train.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>
#include <cmath>
#include <sys/resource.h>

using namespace llvm;

static cl::opt<std::string> programFile(cl::Positional, cl::Required,
                                        cl::desc("<program.mlir>"));
static cl::opt<std::string> strategyFile("strategy",
                                         cl::desc("Strategy file (YAML/JSON)"),
                                         cl::value_desc("file"), cl::init(""));
static cl::opt<int64_t> steps("steps", cl::desc("Training steps"),
                              cl::init(10));
static cl::opt<uint64_t> seed("seed",
                              cl::desc("Seed of initial weights, data and "
                                       "dropout"),
                              cl::init(0));
static cl::opt<std::string> dataFile(
    "data",
    cl::desc("Text file for GPT programs (default: "
             "/usr/share/common-licenses)"),
    cl::value_desc("file"), cl::init(""));
static cl::opt<std::string> initFile("init",
                                     cl::desc("Initial weights (safetensors)"),
                                     cl::value_desc("file"), cl::init(""));
static cl::opt<std::string> saveFile(
    "save", cl::desc("Write parameters and optimizer state (safetensors)"),
    cl::value_desc("file"), cl::init(""));
static cl::opt<std::string> reportFile("report",
                                       cl::desc("Write a JSON report"),
                                       cl::value_desc("file"), cl::init(""));
static cl::opt<std::string> dumpBatches(
    "dump-batches",
    cl::desc("Write the batches consumed (safetensors, 'step<i>.<name>'), "
             "to feed a reference framework the same data"),
    cl::value_desc("file"), cl::init(""));
static cl::opt<std::string> backend(
    "backend", cl::desc("Execution backend: reference (cpu and cuda are not "
                        "implemented yet)"),
    cl::init("reference"));
static cl::opt<int64_t> nproc("nproc", cl::desc("Ranks to launch"),
                              cl::init(1));
static cl::opt<std::string> traceFile("trace",
                                      cl::desc("Chrome trace (not implemented "
                                               "yet)"),
                                      cl::value_desc("file"), cl::init(""));
static cl::opt<bool> quiet("quiet", cl::desc("No progress on stderr"),
                           cl::init(false));

static int fail(const Twine &message) {
  WithColor::error(errs(), "strata-run") << message << "\n";
  return 1;
}

static int64_t peakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  strata::registerAllStrataPasses();
  cl::ParseCommandLineOptions(argc, argv,
                              "Strata runner: compiles a training program "
                              "with a strategy and trains it\n");

  if (backend != "reference")
    return fail("--backend " + backend +
                " is not implemented yet; this version runs the reference "
                "backend only");
  if (nproc != 1)
    return fail("--nproc " + Twine(nproc) +
                ": multi-rank runs are not implemented yet");
  if (!traceFile.empty())
    return fail("--trace is not implemented yet");
  if (steps < 0)
    return fail("--steps must be >= 0");

  strata::StrategyContext context;
  context.worldSize = nproc;
  strata::Strategy strategy;
  if (!strategyFile.empty()) {
    auto loaded = strata::loadStrategy(strategyFile, context);
    if (!loaded) {
      errs() << toString(loaded.takeError());
      return 1;
    }
    strategy = std::move(*loaded);
  } else {
    auto defaults = strata::parseStrategy("", "<default strategy>", context);
    if (!defaults)
      return fail(toString(defaults.takeError()));
    strategy = std::move(*defaults);
  }

  mlir::DialectRegistry registry;
  strata::registerStrataDialects(registry);
  mlir::MLIRContext mlirContext(registry);
  mlirContext.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &mlirContext);
  std::string error;
  auto input = mlir::openInputFile(programFile, &error);
  if (!input)
    return fail(error);
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &mlirContext);
  if (!module)
    return 1; // the diagnostic names the file and line

  std::vector<strata::PlannedPass> plan =
      strata::planPasses(strategy, context.worldSize);
  mlir::PassManager pm(&mlirContext);
  if (Error err = strata::addPlannedPasses(pm, plan, strategy)) {
    errs() << toString(std::move(err)) << "\n";
    return 1;
  }
  if (mlir::failed(pm.run(*module)))
    return 1;

  auto step = module->lookupSymbol<mlir::func::FuncOp>(
      strata::kStepFunctionName);
  if (!step)
    return fail(programFile + " has no @" + strata::kStepFunctionName +
                " function");

  llvm::StringMap<strata::Tensor> state = strata::initialState(*module, seed);
  if (!initFile.empty())
    if (Error err = strata::loadCheckpoint(*module, initFile, state))
      return fail(toString(std::move(err)));
  auto data = strata::DataStream::create(step, dataFile, seed);
  if (!data)
    return fail(toString(data.takeError()));

  // A live progress line when the step lines go elsewhere (a file, a
  // pipe) and a person watches stderr.
  bool progress = !quiet && sys::Process::StandardErrIsDisplayed() &&
                  !sys::Process::StandardOutIsDisplayed();
  std::vector<double> losses, stepTimes;
  std::vector<strata::NamedTensor> batches;
  strata::reference::EvalOptions options;
  options.seed = seed;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<strata::Tensor> batch = data->batch(i);
    if (!dumpBatches.empty())
      for (auto [name, tensor, arg] :
           llvm::zip(data->names(), batch, step.getArguments())) {
        auto dtype = strata::dtypeOf(
            cast<mlir::RankedTensorType>(arg.getType()).getElementType());
        if (!dtype)
          return fail(toString(dtype.takeError()));
        batches.push_back({formatv("step{0}.{1}", i, name).str(), *dtype,
                           tensor});
      }
    auto t0 = std::chrono::steady_clock::now();
    auto results = strata::reference::evaluate(step, batch, state, options);
    auto t1 = std::chrono::steady_clock::now();
    if (!results)
      return fail("step " + Twine(i) + ": " + toString(results.takeError()));
    double loss = (*results)[0].data[0];
    if (!std::isfinite(loss))
      return fail("step " + Twine(i) + ": the loss is " +
                  (std::isnan(loss) ? "NaN" : "infinite"));
    losses.push_back(loss);
    stepTimes.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
    outs() << formatv("step {0} loss {1}\n", i, strata::formatStrategyNumber(loss));
    outs().flush();
    if (progress) {
      double elapsed =
          std::chrono::duration<double>(t1 - start).count();
      // Tokens (GPT) or samples (MLP) of the global batch per second.
      double items = double(batch[0].numElements());
      if (data->names()[0] == "features")
        items = double(batch[0].shape[0]);
      errs() << formatv("\r[{0}/{1}] loss {2:F4}  {3:F1} s elapsed  {4:F0} "
                        "{5}/s   ",
                        i + 1, steps, loss, elapsed,
                        items / (stepTimes.back() / 1000.0),
                        data->names()[0] == "features" ? "samples" : "tokens");
      if (i + 1 == steps)
        errs() << "\n";
    }
  }

  if (!saveFile.empty())
    if (Error err = strata::saveCheckpoint(*module, saveFile, state))
      return fail(toString(std::move(err)));
  if (!dumpBatches.empty())
    if (Error err = strata::writeSafetensors(dumpBatches, batches))
      return fail(toString(std::move(err)));

  if (!reportFile.empty()) {
    auto strategyJson = json::parse(strata::toJson(strategy));
    if (!strategyJson)
      return fail(toString(strategyJson.takeError()));
    json::Array lossArray, timeArray;
    for (double l : losses)
      lossArray.push_back(l);
    for (double t : stepTimes)
      timeArray.push_back(t);
    json::Object report{
        {"world_size", nproc.getValue()},
        {"backend", backend.getValue()},
        {"strategy", std::move(*strategyJson)},
        {"losses", std::move(lossArray)},
        {"step_time_ms", std::move(timeArray)},
        // The compile-time plan (arena + parameters and state + batch);
        // the reference backend computes in doubles outside it.
        {"planned_peak_bytes", json::Array{strata::planMemory(step).peakBytes()}},
        {"measured_peak_bytes", json::Array{peakRssBytes()}},
    };
    auto out = mlir::openOutputFile(reportFile, &error);
    if (!out)
      return fail(error);
    out->os() << formatv("{0:2}", json::Value(std::move(report))) << "\n";
    out->keep();
  }
  return 0;
}
