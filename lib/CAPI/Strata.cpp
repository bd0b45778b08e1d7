//===- Strata.cpp - C API for embedding the Strata compiler ---------------===//

#include "strata-c/Strata.h"

#include "strata/Dialect/Program.h"
#include "strata/Execution/MpiCommunicator.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Runtime/StrataRuntime.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Support/FileLocation.h"
#include "strata/Support/Nesting.h"
#include "strata/Target/RuntimeTarget.h"
#include "strata/Train/Trainer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SaveAndRestore.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <unistd.h>

using namespace mlir;

static_assert(int(STRATA_F32) == int(STRATA_RT_F32) &&
                  int(STRATA_I32) == int(STRATA_RT_I32) &&
                  int(STRATA_I64) == int(STRATA_RT_I64) &&
                  int(STRATA_BF16) == int(STRATA_RT_BF16) &&
                  int(STRATA_F16) == int(STRATA_RT_F16) &&
                  int(STRATA_I8) == int(STRATA_RT_I8) &&
                  int(STRATA_U8) == int(STRATA_RT_U8),
              "the C API's element types are the runtime ABI's codes");

struct StrataSessionImpl {
  StrataSessionImpl() {
    static std::once_flag passes;
    std::call_once(passes, [] { strata::registerAllStrataPasses(); });
    DialectRegistry registry;
    strata::registerStrataDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    // A diagnostic names its place; the operation in generic form after it
    // (a whole step function for an error at the step) is not for users.
    context.printOpOnDiagnostic(false);
    module = ModuleOp::create(UnknownLoc::get(&context));
  }

  /// Runs `fn` with MLIR diagnostics captured into `error` and passed to
  /// the callback; what `fn` writes to its stream is an error without a
  /// location (a strategy file's errors carry theirs in the text).
  template <typename Fn> int capture(Fn fn) {
    error.clear();
    llvm::raw_string_ostream os(error);
    llvm::SaveAndRestore<llvm::raw_ostream *> saved(diagnostics, &os);
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      report(diag, os);
      for (Diagnostic &note : diag.getNotes())
        report(note, os);
      return success();
    });
    std::string direct;
    llvm::raw_string_ostream directOs(direct);
    bool ok = fn(directOs);
    if (!direct.empty()) {
      os << direct;
      if (!StringRef(direct).ends_with("\n"))
        os << "\n";
      if (callback)
        callback(STRATA_DIAGNOSTIC_ERROR, "",
                 StringRef(direct).rtrim().str().c_str(), callbackUser);
    }
    // A call that succeeds leaves no error (its warnings went to the
    // callback).
    if (ok)
      error.clear();
    else if (error.empty())
      error = "unknown error";
    return ok ? 0 : 1;
  }

  /// Reports `err` inside capture: a strategy file's error as a
  /// diagnostic at its place in the file (the callback gets the location
  /// and the message apart), any other error to `direct`, the call's
  /// errors without a location.
  void reportError(llvm::Error err, llvm::raw_ostream &direct) {
    llvm::handleAllErrors(
        std::move(err),
        [&](const strata::StrategyError &strategyError) {
          strategyError.log(*diagnostics);
          if (callback)
            callback(STRATA_DIAGNOSTIC_ERROR, strategyError.location().c_str(),
                     strategyError.text().c_str(), callbackUser);
        },
        [&](const llvm::ErrorInfoBase &other) { direct << other.message(); });
  }

  void report(Diagnostic &diag, llvm::raw_ostream &os) {
    std::string location = strata::fileLocation(diag.getLocation());
    if (location.empty() && !isa<UnknownLoc>(diag.getLocation()))
      llvm::raw_string_ostream(location) << diag.getLocation();
    StrataDiagnosticSeverity severity = STRATA_DIAGNOSTIC_ERROR;
    const char *label = "error: ";
    switch (diag.getSeverity()) {
    case DiagnosticSeverity::Error:
      break;
    case DiagnosticSeverity::Warning:
      severity = STRATA_DIAGNOSTIC_WARNING;
      label = "warning: ";
      break;
    case DiagnosticSeverity::Note:
      severity = STRATA_DIAGNOSTIC_NOTE;
      label = "note: ";
      break;
    case DiagnosticSeverity::Remark:
      severity = STRATA_DIAGNOSTIC_REMARK;
      label = "remark: ";
      break;
    }
    std::string message = diag.str();
    os << (location.empty() ? std::string() : location + ": ") << label
       << message << "\n";
    if (callback)
      callback(severity, location.c_str(), message.c_str(), callbackUser);
  }

  /// Runs `pm` on a copy of the program, which replaces it only when every
  /// pass succeeds and the result verifies: a failed pipeline leaves the
  /// program as it was.
  bool runPassManager(PassManager &pm) {
    OwningOpRef<ModuleOp> copy(module->clone());
    if (failed(pm.run(*copy)) || failed(verify(*copy)))
      return false;
    module = std::move(copy);
    return true;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  /// The session's handle and its executables' (each holds the session):
  /// the session ends when the last of them is destroyed.
  std::atomic<int64_t> references{1};
  void release() {
    if (references.fetch_sub(1) == 1)
      delete this;
  }

  std::string error;
  /// The stream of `error` while capture runs.
  llvm::raw_ostream *diagnostics = nullptr;
  StrataDiagnosticCallback callback = nullptr;
  void *callbackUser = nullptr;
};

/// One rank of a training job: the Trainer over a copy of the session's
/// program, the program as written (the inputs' shapes, the data stream)
/// and the job's communicator.
struct StrataExecutableImpl {
  StrataSessionImpl *session = nullptr;
  OwningOpRef<ModuleOp> written;
  std::unique_ptr<strata::MpiCommunicator> communicator;
  std::unique_ptr<strata::Trainer> trainer;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<StrataElementType> types;
  std::optional<strata::DataStream> data;
  std::string dataPath;
  strata::DataFormat dataFormat = strata::DataFormat::Text;
  int64_t stepsRun = 0;
  /// The step that failed: it may have updated part of the state (an id
  /// out of range or a NaN loss is found at the step's end), so the
  /// executable trains and saves nothing until a checkpoint is loaded.
  /// So does a checkpoint that loaded on some ranks of the job and not on
  /// others: the ranks' states disagree. Why the state is undefined.
  std::optional<std::string> undefinedState;

  /// Whether `ok` holds on every rank of the job (a call's arguments, before
  /// the collectives the call contains); otherwise says in `os` which rank
  /// it failed on, when this one's held. Every rank calls it.
  bool everyRank(bool ok, llvm::raw_ostream &os,
                 llvm::StringRef failed = "failed the call") const {
    if (!communicator || communicator->size() < 2)
      return ok;
    int64_t first = communicator->firstFailure(ok);
    if (ok && first >= 0)
      os << "rank " << first << " " << failed
         << " (its diagnostics are on that rank)";
    return first < 0;
  }

  /// Whether the state can be trained or saved; otherwise says why in `os`.
  bool stateDefined(llvm::raw_ostream &os, llvm::StringRef what) const {
    if (!undefinedState)
      return true;
    os << "cannot " << what << ": " << *undefinedState
       << "; load a checkpoint to go on";
    return false;
  }
};

/// Whether `pointer`, an argument the call needs, is there; otherwise says
/// so in `os`.
static bool given(const void *pointer, const char *what,
                  llvm::raw_ostream &os) {
  if (!pointer)
    os << what << " is NULL";
  return pointer != nullptr;
}

/// Whether `inputs` holds a buffer for each of the step's inputs (as far as
/// NULL pointers show); otherwise says which is missing.
static bool inputsGiven(const StrataExecutableImpl &exe,
                        const void *const *inputs, llvm::raw_ostream &os) {
  if (!given(inputs, "the array of input buffers", os))
    return false;
  for (size_t i = 0; i < exe.names.size(); ++i)
    if (!inputs[i]) {
      os << "the buffer of input '" << exe.names[i] << "' is NULL";
      return false;
    }
  return true;
}

/// The failure of a call on a NULL session or executable (which has nowhere
/// to put a diagnostic; strataSessionLastError(NULL) says why).
static constexpr int kNullHandle = 1;

extern "C" {

StrataSession strataSessionCreate(void) {
  return new (std::nothrow) StrataSessionImpl();
}

void strataSessionDestroy(StrataSession session) {
  if (session)
    session->release();
}

int strataSessionParseProgram(StrataSession session, const char *text,
                              size_t length, const char *bufferName) {
  if (!session)
    return kNullHandle;
  return session->capture([&](llvm::raw_ostream &os) {
    if (length && !given(text, "the program text", os))
      return false;
    if (std::string why = strata::programNestingError(
            llvm::StringRef(text, length), bufferName ? bufferName : "<c-api>");
        !why.empty()) {
      os << why;
      return false;
    }
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
  if (!session)
    return kNullHandle;
  return session->capture([&](llvm::raw_ostream &os) {
    strata::GptConfig config{layers, hidden, heads, seq, vocab, batch, dropout};
    if (llvm::Error err =
            strata::validate(config, strata::ConfigSpelling::Arguments)) {
      os << llvm::toString(std::move(err));
      return false;
    }
    session->module = strata::buildGpt(session->context, config);
    return true;
  });
}

int strataSessionRunPipeline(StrataSession session, const char *pipeline) {
  if (!session)
    return kNullHandle;
  return session->capture([&](llvm::raw_ostream &os) {
    if (!given(pipeline, "the pass pipeline", os))
      return false;
    PassManager pm(&session->context);
    // Anchored on the module ("builtin.module(...)", as mlir-opt's
    // --pass-pipeline) or a bare list of passes. Parsing the anchored form
    // into `pm` would nest it under the module and run it on nothing.
    StringRef text = StringRef(pipeline).trim();
    // LLVM's option parser writes why an option's value is invalid to the
    // process's standard error, not to `os`: say where it went.
    std::string parseError;
    llvm::raw_string_ostream parseOs(parseError);
    auto failedParse = [&] {
      os << StringRef(parseError).trim();
      if (StringRef(parseError).contains("failed to add"))
        os << " (LLVM's option parser wrote why to standard error)";
      return false;
    };
    if (text.starts_with("builtin.module(")) {
      FailureOr<OpPassManager> anchored = parsePassPipeline(text, parseOs);
      if (failed(anchored))
        return failedParse();
      static_cast<OpPassManager &>(pm) = *anchored;
    } else if (failed(parsePassPipeline(text, pm, parseOs))) {
      return failedParse();
    }
    return session->runPassManager(pm);
  });
}

int strataApiVersion(void) { return STRATA_C_API_VERSION; }

int strataSessionApplyStrategy(StrataSession session, const char *path,
                               int64_t worldSize, int64_t rank) {
  if (!session)
    return kNullHandle;
  return session->capture([&](llvm::raw_ostream &os) {
    if (!given(path, "the strategy path", os))
      return false;
    auto context = strata::jobContext(worldSize, rank);
    if (!context) {
      os << llvm::toString(context.takeError());
      return false;
    }
    auto strategy = strata::loadStrategy(path, *context);
    if (!strategy) {
      session->reportError(strategy.takeError(), os);
      return false;
    }
    PassManager pm(&session->context);
    if (llvm::Error err = strata::addPlannedPasses(
            pm, strata::planPasses(*strategy, context->worldSize, rank),
            *strategy, context->worldSize)) {
      session->reportError(std::move(err), os);
      return false;
    }
    return session->runPassManager(pm);
  });
}

int strataSessionPrintProgram(StrataSession session,
                              StrataStringCallback callback, void *userData) {
  if (!session)
    return kNullHandle;
  if (!callback)
    return session->capture([&](llvm::raw_ostream &os) {
      os << "the callback is NULL";
      return false;
    });
  std::string text;
  llvm::raw_string_ostream os(text);
  session->module->print(os);
  os.flush();
  callback(text.data(), text.size(), userData);
  session->error.clear();
  return 0;
}

const char *strataSessionLastError(StrataSession session) {
  if (!session)
    return "the session is NULL";
  return session->error.c_str();
}

void strataSessionSetDiagnosticCallback(StrataSession session,
                                        StrataDiagnosticCallback callback,
                                        void *userData) {
  if (!session)
    return;
  session->callback = callback;
  session->callbackUser = userData;
}

void strataExecutableOptionsInit(StrataExecutableOptions *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->size = sizeof(*options);
  options->worldSize = 1;
  options->backend = "cpu";
  options->threads = 1;
  options->collectiveTimeout = 1800;
}

namespace {
/// The call in progress that may wait for peer ranks (strataExecutableStep,
/// ...) and its executable, whose op the collective timeout's report names;
/// null: none.
std::atomic<const char *> activeCall{nullptr};
std::atomic<const strata::Executable *> activeExecutable{nullptr};

/// Marks call `name` of `exe` in progress for as long as it lives.
class ActiveCall {
public:
  ActiveCall(const char *name, StrataExecutableImpl &exe) {
    activeExecutable.store(exe.trainer ? exe.trainer->executable() : nullptr);
    activeCall.store(name);
  }
  ~ActiveCall() {
    activeCall.store(nullptr);
    activeExecutable.store(nullptr);
  }
};

/// Ends the process when this rank has waited for its peers in one MPI call
/// longer than the executable's StrataExecutableOptions::collectiveTimeout
/// (its communicator's wait limit).
void watchCollectives(int64_t rank) {
  strata::MpiCommunicator::watchBlockedCalls([rank](double waited) {
    std::string line = "strata: error: rank " + std::to_string(rank) +
                       ": waited " + std::to_string(int64_t(waited)) +
                       " s for a peer rank";
    const strata::Executable *exe = activeExecutable.load();
    if (const char *site = exe ? exe->activeHostCall() : nullptr)
      line += std::string(" in ") + site;
    else if (const char *call = activeCall.load())
      line += std::string(" in ") + call;
    line += " (collectiveTimeout): a peer rank stopped or hangs; ending the "
            "process\n";
    ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  });
}
} // namespace

/// Creates the trainer of `options` over a copy of the session's program
/// (not compiled yet); every failure is local to this rank.
static bool createTrainer(StrataExecutableImpl &exe,
                          const StrataExecutableOptions &options,
                          llvm::raw_ostream &os) {
  StrataSessionImpl &session = *exe.session;
  if (!strata::MpiCommunicator::validWaitLimit(options.collectiveTimeout)) {
    os << "collectiveTimeout is "
       << strata::formatStrategyNumber(options.collectiveTimeout)
       << ": give the seconds (up to 1e9) a rank may wait for its peers in "
          "one MPI call, or 0 to wait for ever";
    return false;
  }
  auto backend =
      strata::parseBackend(options.backend ? options.backend : "cpu");
  if (!backend) {
    os << llvm::toString(backend.takeError());
    return false;
  }
  auto context = strata::jobContext(options.worldSize, options.rank);
  if (!context) {
    os << llvm::toString(context.takeError());
    return false;
  }
  auto strategy =
      options.strategyPath
          ? strata::loadStrategy(options.strategyPath, *context)
          : strata::parseStrategy("", "<default strategy>", *context);
  if (!strategy) {
    session.reportError(strategy.takeError(), os);
    return false;
  }
  llvm::Expected<func::FuncOp> found =
      strata::findStepFunction(*session.module);
  if (!found) {
    os << "the session's program: " << llvm::toString(found.takeError());
    return false;
  }
  // An executable compiles the program as written (forward and loss);
  // strataSessionApplyStrategy and RunPipeline's passes are for reading
  // what a strategy makes of it.
  if (strata::isCompiledStep(*found)) {
    os << "the session's program is already compiled (its step returns "
          "gradients or updates state, after strataSessionApplyStrategy or a "
          "pipeline with strata-autodiff): create executables from the "
          "program as written";
    return false;
  }
  func::FuncOp step = *found;
  exe.written = OwningOpRef<ModuleOp>(session.module->clone());
  for (BlockArgument arg : step.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    auto name = step.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), strata::StrataDialect::kInputNameAttrName);
    int64_t code =
        type ? strata::runtimeElementType(type.getElementType()) : -1;
    if (!type || !type.hasStaticShape() || code < 0) {
      os << "input " << arg.getArgNumber() << " of @" << step.getSymName()
         << " is not a tensor of static shape and a known element type";
      return false;
    }
    exe.names.push_back(name ? name.getValue().str()
                             : "arg" + std::to_string(arg.getArgNumber()));
    exe.shapes.emplace_back(type.getShape().begin(), type.getShape().end());
    exe.types.push_back(StrataElementType(code));
  }
  strata::TrainerOptions trainerOptions;
  trainerOptions.worldSize = options.worldSize;
  trainerOptions.rank = options.rank;
  trainerOptions.backend = *backend;
  trainerOptions.seed = options.seed;
  trainerOptions.threads = options.threads;
  trainerOptions.blockingCollectives = options.blockingCollectives != 0;
  trainerOptions.gemmAutotune = options.gemmAutotune != 0;
  trainerOptions.communicator = exe.communicator.get();
  auto trainer =
      strata::Trainer::create(OwningOpRef<ModuleOp>(session.module->clone()),
                              std::move(*strategy), trainerOptions);
  if (!trainer) {
    session.reportError(trainer.takeError(), os);
    return false;
  }
  exe.trainer = std::move(*trainer);
  return true;
}

int strataExecutableCreate(StrataSession session,
                           const StrataExecutableOptions *options,
                           StrataExecutable *executable) {
  if (executable)
    *executable = nullptr;
  if (!session)
    return kNullHandle;
  auto exe = std::make_unique<StrataExecutableImpl>();
  exe->session = session;
  return session->capture([&](llvm::raw_ostream &os) {
    // (Without options this rank has no communicator to tell the others.)
    if (!given(options, "the options pointer", os))
      return false;
    if (options->size < sizeof(StrataExecutableOptions)) {
      os << "the options are older than this library's (size " << options->size
         << ", expected " << sizeof(StrataExecutableOptions)
         << "): fill them with strataExecutableOptionsInit";
      return false;
    }
    if (options->worldSize > 1) {
      int initialised = 0, finalised = 0;
      MPI_Initialized(&initialised);
      MPI_Finalized(&finalised);
      if (!options->mpiComm || !initialised || finalised) {
        os << "a job of " << options->worldSize
           << " ranks needs MPI initialised (and not finalised) and the "
              "address of its MPI_Comm in mpiComm";
        return false;
      }
      // (An MPI call on MPI_COMM_NULL ends the process under MPI's default
      // error handler.)
      if (*static_cast<const MPI_Comm *>(options->mpiComm) == MPI_COMM_NULL) {
        os << "mpiComm points at MPI_COMM_NULL, not at the job's "
              "communicator";
        return false;
      }
      exe->communicator = std::make_unique<strata::MpiCommunicator>(
          *static_cast<const MPI_Comm *>(options->mpiComm));
      // (A bad value fails in createTrainer, on every rank.)
      if (options->collectiveTimeout > 0 &&
          strata::MpiCommunicator::validWaitLimit(options->collectiveTimeout)) {
        exe->communicator->setWaitLimit(options->collectiveTimeout);
        watchCollectives(options->rank);
      }
    }
    ActiveCall active("strataExecutableCreate", *exe);
    // After each phase every rank learns whether one failed, so that none
    // goes on to wait for it in a collective (creating the executable sets
    // up the program's communication groups together).
    auto everyRank = [&](bool ok) {
      return exe->everyRank(ok, os,
                            "of the job failed to create its executable");
    };
    if (!everyRank(given(executable, "the executable's address", os) &&
                   createTrainer(*exe, *options, os)))
      return false;
    // (The same answer on every rank.)
    if (llvm::Error err = exe->trainer->checkSameJob()) {
      os << llvm::toString(std::move(err));
      return false;
    }
    // (The passes' diagnostics go to the session's handler.)
    auto succeeded = [&](llvm::Error err) {
      if (!err)
        return true;
      session->reportError(std::move(err), os);
      return false;
    };
    if (!everyRank(succeeded(exe->trainer->compile())))
      return false;
    if (!everyRank(succeeded(exe->trainer->createExecutable())))
      return false;
    ++session->references;
    *executable = exe.release();
    return true;
  });
}

void strataExecutableDestroy(StrataExecutable executable) {
  if (!executable)
    return;
  StrataSessionImpl *session = executable->session;
  delete executable;
  session->release();
}

int64_t strataExecutableNumInputs(StrataExecutable executable) {
  if (!executable)
    return -1;
  return int64_t(executable->names.size());
}

int strataExecutableInputInfo(StrataExecutable executable, int64_t index,
                              StrataTensorInfo *info) {
  if (!executable)
    return kNullHandle;
  return executable->session->capture([&](llvm::raw_ostream &os) {
    if (!given(info, "the tensor info's address", os))
      return false;
    if (index < 0 || index >= int64_t(executable->names.size())) {
      os << "input " << index << " does not exist (the step has "
         << executable->names.size() << ")";
      return false;
    }
    info->name = executable->names[index].c_str();
    info->elementType = executable->types[index];
    info->rank = int64_t(executable->shapes[index].size());
    info->shape = executable->shapes[index].data();
    return true;
  });
}

int strataExecutableReadBatch(StrataExecutable executable, const char *dataPath,
                              int format, int64_t step, void *const *inputs) {
  if (!executable)
    return kNullHandle;
  StrataExecutableImpl &exe = *executable;
  return exe.session->capture([&](llvm::raw_ostream &os) {
    if (!inputsGiven(exe, inputs, os))
      return false;
    if (dataPath && !*dataPath) {
      os << "the data path is empty (NULL reads the default texts)";
      return false;
    }
    std::optional<strata::DataFormat> dataFormat;
    switch (format) {
    case STRATA_DATA_TEXT:
      dataFormat = strata::DataFormat::Text;
      break;
    case STRATA_DATA_UINT16:
      dataFormat = strata::DataFormat::Uint16;
      break;
    case STRATA_DATA_UINT32:
      dataFormat = strata::DataFormat::Uint32;
      break;
    }
    if (!dataFormat) {
      os << "data format " << format
         << " is none of STRATA_DATA_TEXT, STRATA_DATA_UINT16, "
            "STRATA_DATA_UINT32";
      return false;
    }
    if (step < 0) {
      os << "batch " << step << " is negative";
      return false;
    }
    std::string path = dataPath ? dataPath : "";
    // (A file that changed since it was read is read and checked again.)
    if (!exe.data || exe.dataPath != path || exe.dataFormat != *dataFormat ||
        exe.data->changed()) {
      auto stream = strata::DataStream::create(
          llvm::cantFail(strata::findStepFunction(*exe.written)), path,
          *dataFormat, exe.trainer->options().seed,
          {"data path", "the data format"});
      if (!stream) {
        os << llvm::toString(stream.takeError());
        return false;
      }
      exe.data = std::move(*stream);
      exe.dataPath = path;
      exe.dataFormat = *dataFormat;
    }
    llvm::Expected<std::vector<strata::Tensor>> read = exe.data->batch(step);
    if (!read) {
      os << llvm::toString(read.takeError());
      return false;
    }
    std::vector<strata::Tensor> batch = std::move(*read);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!strata::isHostBufferType(exe.types[i])) {
        os << "input '" << exe.names[i] << "' is "
           << strata_rt_element_name(exe.types[i])
           << ": the data stream writes f32, bf16, f16, i32 and i64";
        return false;
      }
      strata::writeHostBuffer(batch[i], exe.types[i], inputs[i]);
    }
    return true;
  });
}

int strataExecutableStep(StrataExecutable executable, const void *const *inputs,
                         double *loss) {
  if (!executable)
    return kNullHandle;
  StrataExecutableImpl &exe = *executable;
  return exe.session->capture([&](llvm::raw_ostream &os) {
    ActiveCall active("strataExecutableStep", exe);
    if (!exe.everyRank(inputsGiven(exe, inputs, os) &&
                           given(loss, "the loss's address", os),
                       os))
      return false;
    std::vector<strata::Tensor> batch;
    for (size_t i = 0; i < exe.names.size(); ++i) {
      if (!strata::isHostBufferType(exe.types[i])) {
        os << "input '" << exe.names[i] << "' is "
           << strata_rt_element_name(exe.types[i])
           << ": host batches are f32, bf16, f16, i32 or i64";
        return false;
      }
      batch.push_back(
          strata::readHostBuffer(exe.shapes[i], exe.types[i], inputs[i]));
    }
    if (!exe.stateDefined(os, "train"))
      return false;
    int64_t skippedBefore = exe.trainer->skippedSteps();
    auto result = exe.trainer->step(exe.stepsRun, batch);
    bool ok = bool(result);
    std::string why = ok ? "" : llvm::toString(result.takeError());
    // Every rank learns whether one failed (an id out of range is found in
    // one rank's rows), so that all refuse to go on alike: a rank that
    // saved or stepped on alone would wait for the others in a collective.
    int64_t first = -1;
    if (exe.communicator && exe.communicator->size() > 1)
      first = exe.communicator->firstFailure(ok);
    if (!ok || first >= 0) {
      exe.undefinedState =
          "step " + std::to_string(exe.stepsRun) +
          " failed, and its updates may have changed part of the weights and "
          "optimizer state";
      os << "step " << exe.stepsRun << ": "
         << (ok ? "rank " + std::to_string(first) +
                      " failed it (its diagnostics are on that rank)"
                : why);
      return false;
    }
    if (exe.trainer->skippedSteps() > skippedBefore &&
        exe.trainer->skippedStepsMatter(1, 1, /*runEnded=*/false))
      mlir::emitWarning(UnknownLoc::get(&exe.session->context))
          << "step " << exe.stepsRun << " changed no parameter: its "
          << exe.trainer->overflowReason();
    ++exe.stepsRun;
    *loss = *result;
    return true;
  });
}

int strataExecutableLoadCheckpoint(StrataExecutable executable,
                                   const char *path, int64_t *stepsDone) {
  if (!executable)
    return kNullHandle;
  StrataExecutableImpl &exe = *executable;
  return exe.session->capture([&](llvm::raw_ostream &os) {
    ActiveCall active("strataExecutableLoadCheckpoint", exe);
    std::optional<int64_t> done;
    std::string why;
    if (given(path, "the checkpoint path", os)) {
      auto loaded = exe.trainer->loadCheckpoint(path);
      if (loaded)
        done = loaded->stepsDone;
      else
        why = llvm::toString(loaded.takeError());
    }
    // Every rank learns whether one failed, and whether one loaded: a job
    // whose ranks went on from different states would train neither's
    // model. (A rank that fails keeps its state.)
    int64_t firstFailed = -1, firstLoaded = -1;
    if (exe.communicator && exe.communicator->size() > 1) {
      firstFailed = exe.communicator->firstFailure(done.has_value());
      firstLoaded = exe.communicator->firstFailure(!done.has_value());
    }
    if (firstFailed >= 0 && firstLoaded >= 0)
      exe.undefinedState = "rank " + std::to_string(firstFailed) +
                           " failed to load a checkpoint that rank " +
                           std::to_string(firstLoaded) +
                           " loaded, so the ranks' states differ";
    if (!done) {
      os << why;
      return false;
    }
    if (firstFailed >= 0) {
      os << "rank " << firstFailed
         << " failed to load the checkpoint (its diagnostics are on that "
            "rank)";
      return false;
    }
    if (stepsDone)
      *stepsDone = *done;
    exe.stepsRun = *done;
    exe.undefinedState.reset();
    return true;
  });
}

int strataExecutableSaveCheckpoint(StrataExecutable executable,
                                   const char *path, int64_t stepsDone) {
  if (!executable)
    return kNullHandle;
  return executable->session->capture([&](llvm::raw_ostream &os) {
    ActiveCall active("strataExecutableSaveCheckpoint", *executable);
    if (!executable->everyRank(given(path, "the checkpoint path", os), os))
      return false;
    if (!executable->stateDefined(os, "save a checkpoint"))
      return false;
    if (llvm::Error err =
            executable->trainer->saveCheckpoint(path, stepsDone)) {
      os << llvm::toString(std::move(err));
      return false;
    }
    return true;
  });
}

int strataExecutableMemoryPlan(StrataExecutable executable,
                               StrataMemoryPlan *plan) {
  if (!executable)
    return kNullHandle;
  if (!plan)
    return executable->session->capture([&](llvm::raw_ostream &os) {
      return given(plan, "the memory plan's address", os);
    });
  strata::Trainer &trainer = *executable->trainer;
  const strata::MemoryPlan &memory = trainer.memoryPlan();
  strata::TrainingMemory training = strata::trainingMemory(trainer.module());
  plan->peak = memory.peakBytes();
  plan->arena = memory.arenaBytes;
  plan->persistent = memory.persistentBytes;
  plan->inputs = memory.inputBytes;
  plan->activations = memory.livePeakBytes;
  plan->parameters = training.paramBytes;
  plan->gradients = training.gradBytes;
  plan->optimizerState = training.stateBytes;
  plan->scratch =
      trainer.executable() ? trainer.executable()->scratchBytes() : 0;
  executable->session->error.clear();
  return 0;
}

} // extern "C"
