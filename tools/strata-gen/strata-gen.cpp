//===- strata-gen.cpp - Prints reference model programs -------------------===//
//
//   strata-gen mlp --sizes 784,1024,1024,10 --batch 256
//   strata-gen gpt --layers L --hidden H --heads A --seq S --vocab V
//                  --batch B [--dropout P]
//
// prints the forward + loss program of the model, verified.
//
//===----------------------------------------------------------------------===//

#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::SubCommand mlpCommand("mlp", "ReLU MLP classifier");
static cl::SubCommand gptCommand("gpt", "GPT-2 style decoder");

static cl::opt<std::string> outputFilename("o", cl::desc("Output file"),
                                           cl::value_desc("file"),
                                           cl::init("-"),
                                           cl::sub(cl::SubCommand::getAll()));

static cl::list<int64_t> sizes("sizes",
                               cl::desc("Layer widths, input first"),
                               cl::CommaSeparated, cl::sub(mlpCommand));
static cl::opt<int64_t> mlpBatch("batch", cl::desc("Global batch"),
                                 cl::init(256), cl::sub(mlpCommand));

static cl::opt<int64_t> layers("layers", cl::desc("Transformer blocks"),
                               cl::init(2), cl::sub(gptCommand));
static cl::opt<int64_t> hidden("hidden", cl::desc("Hidden size"),
                               cl::init(64), cl::sub(gptCommand));
static cl::opt<int64_t> heads("heads", cl::desc("Attention heads"),
                              cl::init(4), cl::sub(gptCommand));
static cl::opt<int64_t> seqLen("seq", cl::desc("Sequence length"), cl::init(32),
                            cl::sub(gptCommand));
static cl::opt<int64_t> vocab("vocab", cl::desc("Vocabulary size"),
                              cl::init(256), cl::sub(gptCommand));
static cl::opt<int64_t> gptBatch("batch", cl::desc("Global batch"),
                                 cl::init(8), cl::sub(gptCommand));
static cl::opt<double> dropout("dropout", cl::desc("Dropout probability"),
                               cl::init(0.0), cl::sub(gptCommand));

static int fail(const Twine &message) {
  WithColor::error(errs(), "strata-gen") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv,
                              "Strata model generator: prints the forward + "
                              "loss program of a reference model\n");

  mlir::MLIRContext context;
  strata::loadStrataDialects(context);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (mlpCommand) {
    strata::MlpConfig config;
    if (!sizes.empty())
      config.sizes.assign(sizes.begin(), sizes.end());
    config.batch = mlpBatch;
    if (Error err = strata::validate(config))
      return fail(toString(std::move(err)));
    module = strata::buildMlp(context, config);
  } else if (gptCommand) {
    strata::GptConfig config{layers, hidden, heads, seqLen, vocab, gptBatch,
                             dropout};
    if (Error err = strata::validate(config))
      return fail(toString(std::move(err)));
    module = strata::buildGpt(context, config);
  } else {
    return fail("expected a model: 'strata-gen mlp ...' or 'strata-gen gpt "
                "...' (see --help)");
  }

  if (failed(mlir::verify(*module)))
    return fail("the generated program does not verify (a bug in strata-gen)");

  std::string error;
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output)
    return fail(error);
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}
