//===- strata-opt.cpp - The Strata optimizer driver -----------------------===//
//
// An MlirOptMain tool with the Strata dialect, the upstream dialects a
// program uses, and every Strata pass. `--strategy=FILE` appends the passes
// the strategy selects after those given on the command line.
//
//===----------------------------------------------------------------------===//

#include "strata/InitAllDialects.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Tool/Tool.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::OptionCategory strategyCategory("Strategy options");

static cl::opt<std::string> strategyFile(
    "strategy",
    cl::desc("Append the passes selected by this strategy file (YAML or "
             "JSON, Paddle's keys)"),
    cl::value_desc("file"), cl::init(""), cl::cat(strategyCategory));

static cl::opt<int64_t> worldSize(
    "world-size",
    cl::desc("Number of ranks the program is compiled for: checks the "
             "strategy's parallel degrees against it and selects data "
             "parallelism (0: unknown)"),
    cl::init(0), cl::cat(strategyCategory));

static cl::opt<int64_t> rankOption(
    "rank",
    cl::desc("The rank whose program to make, where a strategy makes one "
             "per rank (sharding)"),
    cl::init(0), cl::cat(strategyCategory));

static cl::opt<std::string> printStrategy(
    "print-strategy",
    cl::desc("Print the effective strategy (every key, defaults filled in) "
             "as 'yaml' or 'json' and exit"),
    cl::value_desc("format"), cl::init(""), cl::cat(strategyCategory));

static cl::opt<bool> printStrategyPlan(
    "print-strategy-plan",
    cl::desc("Print the passes the strategy selects, in order, with the key "
             "that selects each, and exit"),
    cl::init(false), cl::cat(strategyCategory));

static int fail(const Twine &message) {
  WithColor::error(errs(), "strata-opt") << message << "\n";
  return 1;
}

/// Opens `name` ("-": the standard output), lets `write` fill it, and
/// keeps it when `write` returns 0. A write that failed (a full disk,
/// /dev/full) is an error naming the file, where the stream would end the
/// process with LLVM's bare "IO failure on output stream"; when `write`
/// fails (its diagnostics are out) a failed write is dropped with the file.
static int writeOutput(StringRef name,
                       llvm::function_ref<int(raw_ostream &)> write) {
  std::string error;
  auto output = mlir::openOutputFile(name, &error);
  if (!output)
    return fail(error);
  int code = write(output->os());
  // (What the stream buffers is written now, so that the error is known
  // and cannot end the process when the stream is destroyed.)
  output->os().flush();
  std::error_code ec = output->os().error();
  output->os().clear_error();
  if (code)
    return code;
  if (ec)
    return fail(
        "cannot write " +
        (name == "-" ? std::string("the standard output") : name.str()) + ": " +
        ec.message());
  output->keep();
  return 0;
}

/// MLIR's driver over `inputFilename` into `outputFilename` with `config`,
/// after the input's depth check.
static int runDriver(StringRef inputFilename, StringRef outputFilename,
                     mlir::DialectRegistry &registry,
                     mlir::MlirOptMainConfig &config) {
  std::string error;
  auto input = strata::openProgramInput("strata-opt", inputFilename, error);
  if (!input)
    return fail(error);
  return writeOutput(outputFilename, [&](raw_ostream &os) {
    return mlir::failed(
               mlir::MlirOptMain(os, std::move(input), registry, config))
               ? 1
               : 0;
  });
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  strata::handleToolFailures("strata-opt");
  mlir::DialectRegistry registry;
  strata::registerStrataDialects(registry);
  strata::registerAllStrataPasses();
  // --help shows the strategy options and those MLIR's driver registers
  // from here on (passes, pipelines, diagnostics), not the hundreds that
  // LLVM's code generators register when the library loads.
  cl::HideUnrelatedOptions({&strategyCategory});
  cl::SetVersionPrinter([](raw_ostream &os) { os << strata::versionText(); });
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "Strata optimizer driver\n", registry);
  // An error at a function does not print the whole function after it in
  // generic form (thousands of lines for a large step), as strata-run;
  // --mlir-print-op-on-diagnostic asks for it.
  if (auto *printOp = static_cast<cl::opt<bool> *>(
          cl::getRegisteredOptions().lookup("mlir-print-op-on-diagnostic"));
      printOp && !printOp->getNumOccurrences())
    printOp->setValue(false);

  if (strategyFile.getNumOccurrences() && strategyFile.empty())
    return fail("--strategy needs a file (--strategy=FILE)");
  if (strategyFile.empty()) {
    if (!printStrategy.empty() || printStrategyPlan)
      return fail("--print-strategy and --print-strategy-plan need "
                  "--strategy=FILE");
    if (worldSize.getNumOccurrences() || rankOption.getNumOccurrences())
      return fail("--world-size and --rank say which rank's program "
                  "--strategy=FILE compiles: give a strategy");
    mlir::MlirOptMainConfig config =
        mlir::MlirOptMainConfig::createFromCLOptions();
    if (config.shouldShowDialects() || config.shouldListPasses())
      return mlir::asMainReturnCode(mlir::MlirOptMain(
          argc, argv, inputFilename, outputFilename, registry));
    // (A program nested too deeply for MLIR's parser, its stack, is refused
    // first.)
    return runDriver(inputFilename, outputFilename, registry, config);
  }

  Expected<strata::StrategyContext> job =
      strata::jobContext(worldSize, rankOption);
  if (!job)
    return fail("--world-size, --rank: " + toString(job.takeError()));
  strata::StrategyContext context = *job;
  Expected<strata::Strategy> strategy =
      strata::loadStrategy(strategyFile, context);
  if (!strategy) {
    // Diagnostics from the reader already carry "file:line:col: error:".
    errs() << toString(strategy.takeError());
    return 1;
  }

  // The printed strategy or plan goes where -o says, as a program would.
  auto printed = [&](auto &&print) {
    return writeOutput(outputFilename, [&](raw_ostream &os) {
      print(os);
      return 0;
    });
  };
  if (!printStrategy.empty()) {
    if (printStrategy != "yaml" && printStrategy != "json")
      return fail("--print-strategy takes 'yaml' or 'json', got '" +
                  printStrategy + "'");
    return printed([&](raw_ostream &os) {
      os << (printStrategy == "yaml" ? strata::toYaml(*strategy)
                                     : strata::toJson(*strategy));
    });
  }

  std::vector<strata::PlannedPass> plan =
      strata::planPasses(*strategy, context.worldSize, rankOption);
  if (printStrategyPlan)
    return printed([&](raw_ostream &os) {
      for (const strata::PlannedPass &p : plan) {
        os << p.name;
        std::string options = p.options();
        if (!options.empty())
          os << "{" << options << "}";
        os << "  # " << p.reason;
        std::string where = strategy->where(p.reason);
        if (!where.empty())
          os << " (" << where << ")";
        if (!p.create)
          os << " [not implemented yet]";
        if (!p.note.empty())
          os << "; " << p.note;
        os << "\n";
      }
    });

  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(
        argc, argv, inputFilename, outputFilename, registry));

  // Check that every selected pass exists before reading any input.
  if (Error err = strata::checkPlanImplemented(plan, *strategy)) {
    errs() << toString(std::move(err)) << "\n";
    return 1;
  }
  // --dump-pass-pipeline is honoured inside MLIR's command-line pipeline
  // set-up, which reads the option's storage directly and runs before the
  // strategy's passes exist: clear the option and dump once they are added.
  bool dump = config.shouldDumpPassPipeline();
  if (dump) {
    auto *option = static_cast<cl::opt<bool, /*ExternalStorage=*/true> *>(
        cl::getRegisteredOptions().lookup("dump-pass-pipeline"));
    option->setValue(false);
    config.dumpPassPipeline(false);
  }
  mlir::MlirOptMainConfig cliConfig = config;
  config.setPassPipelineSetupFn(
      [cliConfig, plan, dump, strategy = *strategy, world = context.worldSize](
          mlir::PassManager &pm) -> mlir::LogicalResult {
        if (mlir::failed(cliConfig.setupPassPipeline(pm)))
          return mlir::failure();
        if (Error err = strata::addPlannedPasses(pm, plan, strategy, world)) {
          errs() << toString(std::move(err)) << "\n";
          return mlir::failure();
        }
        if (dump)
          pm.dump();
        return mlir::success();
      });

  return runDriver(inputFilename, outputFilename, registry, config);
}
