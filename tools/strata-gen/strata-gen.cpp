//===- strata-gen.cpp - Prints reference model programs -------------------===//
//
//   strata-gen mlp --sizes 784,1024,1024,10 --batch 256
//   strata-gen gpt --layers L --hidden H --heads A --seq S --vocab V
//                  --batch B [--dropout P] [--attention-dropout P]
//
// prints the forward + loss program of the model, verified.
//
//===----------------------------------------------------------------------===//

#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Tool/Tool.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::SubCommand mlpCommand("mlp", "ReLU MLP classifier or regression");
static cl::SubCommand gptCommand("gpt", "GPT-2 style decoder");
static cl::OptionCategory genCategory("strata-gen options");

static cl::opt<std::string> outputFilename("o",
                                           cl::desc("Output file (default: "
                                                    "standard output)"),
                                           cl::value_desc("file"),
                                           cl::init("-"),
                                           cl::sub(cl::SubCommand::getAll()),
                                           cl::cat(genCategory));
// mlp
static cl::list<int64_t> sizes("sizes",
                               cl::desc("Layer widths, input first (default: "
                                        "784,1024,1024,10)"),
                               cl::CommaSeparated, cl::sub(mlpCommand),
                               cl::cat(genCategory));
static cl::opt<int64_t> mlpBatch("batch", cl::desc("Global batch (default: "
                                                   "256)"),
                                 cl::init(256), cl::sub(mlpCommand),
                                 cl::cat(genCategory));
static cl::opt<strata::MlpLoss> mlpLoss(
    "loss", cl::desc("The loss (default: cross-entropy)"),
    cl::values(clEnumValN(strata::MlpLoss::CrossEntropy, "cross-entropy",
                          "a classifier: (features, labels), mean "
                          "cross-entropy"),
               clEnumValN(strata::MlpLoss::MeanSquared, "mse",
                          "a regression: (features, targets), the mean "
                          "squared error"),
               clEnumValN(strata::MlpLoss::SumSquared, "sse",
                          "a regression: (features, targets), the sum of "
                          "squared errors")),
    cl::init(strata::MlpLoss::CrossEntropy), cl::sub(mlpCommand),
    cl::cat(genCategory));
// gpt
static cl::opt<int64_t> layers("layers",
                               cl::desc("Transformer blocks (default: 2)"),
                               cl::init(2), cl::sub(gptCommand),
                               cl::cat(genCategory));
static cl::opt<int64_t> hidden("hidden", cl::desc("Hidden size (default: 64)"),
                               cl::init(64), cl::sub(gptCommand),
                               cl::cat(genCategory));
static cl::opt<int64_t> heads("heads",
                              cl::desc("Attention heads (default: 4)"),
                              cl::init(4), cl::sub(gptCommand),
                              cl::cat(genCategory));
static cl::opt<int64_t> seqLen("seq",
                               cl::desc("Sequence length (default: 32)"),
                               cl::init(32), cl::sub(gptCommand),
                               cl::cat(genCategory));
static cl::opt<int64_t> vocab("vocab",
                              cl::desc("Vocabulary size (default: 256)"),
                              cl::init(256), cl::sub(gptCommand),
                              cl::cat(genCategory));
static cl::opt<int64_t> gptBatch("batch",
                                 cl::desc("Global batch (default: 8)"),
                                 cl::init(8), cl::sub(gptCommand),
                                 cl::cat(genCategory));
static cl::opt<double> dropout("dropout",
                               cl::desc("Dropout probability (default: 0)"),
                               cl::init(0.0), cl::sub(gptCommand),
                               cl::cat(genCategory));

static cl::opt<double> attentionDropout(
    "attention-dropout",
    cl::desc("Dropout probability of the attention probabilities (GPT-2's "
             "attn_pdrop; default: 0)"),
    cl::init(0.0), cl::sub(gptCommand), cl::cat(genCategory));

static cl::opt<bool>
    ampGuard("amp-guard",
             cl::desc("Mark the transformer blocks as under a mixed-precision "
                      "guard (strata.amp_guard, Paddle's fp16_guard), for "
                      "amp.use_fp16_guard"),
             cl::init(false), cl::sub(gptCommand), cl::cat(genCategory));

static int fail(const Twine &message) {
  WithColor::error(errs(), "strata-gen") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  strata::parseToolCommandLine(argc, argv,
                               "Strata model generator: prints the forward + "
                               "loss program of a reference model\n",
                               {&genCategory});

  mlir::MLIRContext context;
  strata::loadStrataDialects(context);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (mlpCommand) {
    strata::MlpConfig config;
    if (!sizes.empty())
      config.sizes.assign(sizes.begin(), sizes.end());
    config.batch = mlpBatch;
    config.loss = mlpLoss;
    if (Error err = strata::validate(config))
      return fail(toString(std::move(err)));
    module = strata::buildMlp(context, config);
  } else if (gptCommand) {
    strata::GptConfig config{layers,  hidden,   heads,
                             seqLen,  vocab,    gptBatch,
                             dropout, ampGuard, attentionDropout};
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
  output->os().flush();
  if (output->os().has_error()) {
    std::string why = output->os().error().message();
    output->os().clear_error();
    return fail("cannot write " + outputFilename + ": " + why);
  }
  output->keep();
  return 0;
}
