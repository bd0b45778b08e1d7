//===- strata-run.cpp - Compile a program with a strategy and train it ----===//
//
//   strata-run PROGRAM.mlir [--strategy FILE] [--steps N] [--seed N]
//              [--data FILE] [--init FILE.safetensors]
//              [--save FILE.safetensors] [--report FILE.json]
//              [--backend cpu|cuda|reference] [--cpu-threads N] [--tf32]
//              [--gemm-autotune]
//              [--nproc N]
//              [--emit=obj -o FILE]
//
// prints `step <i> loss <value>` for every step. A thin command line over
// the training library (strata::Trainer): this file parses the options,
// launches the ranks, reads the data and prints progress; the Trainer
// compiles, runs, checkpoints and reports.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "strata/Execution/MpiCommunicator.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"
#include "strata/Reference/Evaluator.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Support/ReplaceFile.h"
#include "strata/Tool/Tool.h"
#include "strata/Train/Trainer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Parallel.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/xxhash.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

using namespace llvm;

static cl::OptionCategory trainCategory("Training");
static cl::OptionCategory dataCategory("Data and checkpoints");
static cl::OptionCategory outputCategory("Reports and output");
static cl::OptionCategory launchCategory("Backend and launch");

static cl::opt<std::string> programFile(cl::Positional, cl::Required,
                                        cl::desc("<program.mlir>"),
                                        cl::cat(trainCategory));
static cl::opt<std::string> strategyFile(
    "strategy",
    cl::desc("Strategy file, YAML or JSON (default: none, one rank's "
             "plain training)"),
    cl::value_desc("file"), cl::init(""), cl::cat(trainCategory));
static cl::opt<int64_t> steps("steps",
                              cl::desc("Training steps (default: 10)"),
                              cl::init(10), cl::cat(trainCategory));
static cl::opt<uint64_t> seed("seed",
                              cl::desc("Seed of initial weights, data and "
                                       "dropout (default: 0)"),
                              cl::init(0), cl::cat(trainCategory));
static cl::opt<std::string> dataFile(
    "data",
    cl::desc("Training data of token programs (GPT): a text file, a "
             "directory of text files, or a file of token ids (see "
             "--data-format) (default: the directory "
             "/usr/share/common-licenses)"),
    cl::value_desc("path"), cl::init(""), cl::cat(dataCategory));
static cl::opt<strata::DataFormat> dataFormat(
    "data-format", cl::desc("How --data holds its tokens (default: text)"),
    cl::values(clEnumValN(strata::DataFormat::Text, "text",
                          "every byte is a token"),
               clEnumValN(strata::DataFormat::Uint16, "uint16",
                          "little-endian uint16 token ids (nanoGPT's .bin)"),
               clEnumValN(strata::DataFormat::Uint32, "uint32",
                          "little-endian uint32 token ids")),
    cl::init(strata::DataFormat::Text), cl::cat(dataCategory));
/// How the data stream's errors name the two options above.
static const strata::DataArgumentNames kDataOptions{"--data", "--data-format"};
static cl::opt<std::string> initFile(
    "init", cl::desc("Initial weights and state (safetensors)"),
    cl::value_desc("file"), cl::init(""), cl::cat(dataCategory));
static cl::opt<std::string> saveFile(
    "save",
    cl::desc("Write parameters and optimizer state after the last step "
             "(safetensors)"),
    cl::value_desc("file"), cl::init(""), cl::cat(dataCategory));
static cl::opt<int64_t> saveEvery(
    "save-every",
    cl::desc("Write a checkpoint into --checkpoint-dir every N steps and "
             "after the last step (default: 0, none)"),
    cl::init(0), cl::cat(dataCategory));
static cl::opt<std::string> checkpointDir(
    "checkpoint-dir",
    cl::desc("Directory of the --save-every checkpoints "
             "(step-<steps done>.safetensors)"),
    cl::value_desc("dir"), cl::init(""), cl::cat(dataCategory));
static cl::opt<int64_t> keepCheckpoints(
    "keep-checkpoints",
    cl::desc("Newest --save-every checkpoints to keep (default: 3; 0: all)"),
    cl::init(3), cl::cat(dataCategory));
static cl::opt<std::string> resumeFrom(
    "resume",
    cl::desc("Continue from a checkpoint: a file, or a directory's newest "
             "complete one (none yet: start at step 0). --steps is then the "
             "run's total, so the same command can be run again after a "
             "failure"),
    cl::value_desc("file-or-dir"), cl::init(""), cl::cat(dataCategory));
static cl::opt<std::string> reportFile(
    "report",
    cl::desc("Write a JSON report of the run ('-': standard output, "
             "which then holds the report alone, without the step lines)"),
    cl::value_desc("file"), cl::init(""), cl::cat(outputCategory));
static cl::opt<std::string> dumpBatches(
    "dump-batches",
    cl::desc("Write the batches consumed (safetensors, 'step<i>.<name>'; "
             "bf16 and f16 inputs as f32), to feed a reference framework the "
             "same data"),
    cl::value_desc("file"), cl::init(""), cl::cat(dataCategory));
static cl::opt<std::string> backend(
    "backend",
    cl::desc("Execution backend: cpu (JIT against the CPU runtime), cuda "
             "(JIT against the CUDA runtime, one GPU per rank, chosen by "
             "the rank's place on its machine) or reference (the "
             "double-precision evaluator) (default: cpu)"),
    cl::init("cpu"), cl::cat(launchCategory));
static cl::opt<bool>
    tf32("tf32",
         cl::desc("Let f32 GEMMs of the cuda backend round their operands to "
                  "TF32 on tensor cores (faster, not true f32; default: off)"),
         cl::init(false), cl::cat(launchCategory));
static cl::opt<bool> gemmAutotune(
    "gemm-autotune",
    cl::desc("Time each distinct f32 GEMM of the cpu backend once through "
             "oneDNN's matmul primitive, its sgemm and (with AVX2) Strata's "
             "packed GEMM, and run the fastest (results then move at rounding "
             "level between runs and thread counts; default: off)"),
    cl::init(false), cl::cat(launchCategory));
// (LLVM owns a --threads option.)
static cl::opt<int64_t> threads(
    "cpu-threads",
    cl::desc("Kernel threads per rank (default: the cores divided among the "
             "ranks of this machine)"),
    cl::init(0), cl::cat(launchCategory));
static cl::opt<std::string> emit(
    "emit",
    cl::desc("Instead of training, write the lowered step: 'obj' (an object "
             "file to link with libstrata_runtime_cpu) or 'mlir' (the "
             "LLVM-dialect module)"),
    cl::init(""), cl::cat(outputCategory));
static cl::opt<bool> emitTracing(
    "emit-tracing",
    cl::desc("With --emit: the step calls strata_rt_trace_begin/end around "
             "every op, recording each op's time once the host calls "
             "strata_rt_enable_trace (a profile of a linked step)"),
    cl::init(false), cl::cat(outputCategory));
static cl::opt<std::string> outputFile("o", cl::desc("Output file of --emit"),
                                       cl::value_desc("file"), cl::init(""),
                                       cl::cat(outputCategory));
static cl::opt<int64_t> nproc("nproc",
                              cl::desc("Ranks to launch on this machine "
                                       "through mpirun (default: 1)"),
                              cl::init(1), cl::cat(launchCategory));
static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("Write a Chrome trace (Perfetto, chrome://tracing): one track "
             "per rank, an event per step and per op"),
    cl::value_desc("file"), cl::init(""), cl::cat(outputCategory));
static cl::opt<bool> blockingCollectives(
    "blocking-collectives",
    cl::desc("Complete every collective where it is issued instead of "
             "overlapping it with the ops that follow (for measurements and "
             "debugging)"),
    cl::init(false), cl::cat(launchCategory));
static cl::opt<double> collectiveTimeout(
    "collective-timeout",
    cl::desc("In a job of several ranks, end the job when a rank has waited "
             "this many seconds in one collective, send, receive or wait for "
             "its peers (one that stopped or hangs); 0: wait for ever "
             "(default: 1800, half an hour)"),
    cl::value_desc("seconds"), cl::init(1800), cl::cat(launchCategory));
static cl::opt<bool> quiet("quiet",
                           cl::desc("No progress lines or summary on stderr"),
                           cl::init(false), cl::cat(outputCategory));
static cl::opt<int64_t> logEvery(
    "log-every",
    cl::desc("A progress line on stderr every N steps (step, loss, step "
             "time, throughput, ETA, peak memory) (default: 0, about ten "
             "lines per run)"),
    cl::init(0), cl::cat(outputCategory));

static bool mpiRunning = false;
static int worldRank = 0, worldSize = 1;
/// The job's communicator (multi-rank runs), released before MPI ends.
static std::unique_ptr<strata::MpiCommunicator> communicator;

/// This process's rank in a job of several ranks that mpirun or a PMI
/// launcher (Slurm) started, from their environment; nothing otherwise.
static std::optional<int> launcherRank() {
  for (auto [rankVariable, sizeVariable] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char *rank = std::getenv(rankVariable);
    const char *size = std::getenv(sizeVariable);
    int r, n;
    if (rank && size && !StringRef(rank).getAsInteger(10, r) &&
        !StringRef(size).getAsInteger(10, n) && n > 1)
      return r;
  }
  return std::nullopt;
}

/// Writes `line` to stderr in one write: the ranks of a job share mpirun's
/// stderr, which relays each rank's writes as they come, so a line written
/// in pieces (llvm::errs() is unbuffered) can be cut by another rank's
/// output.
static void writeLine(StringRef line) {
  errs().flush();
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

/// Reports an error; in a multi-rank run, names the rank and takes every
/// other rank down with it rather than leave them waiting in a collective.
static int fail(const Twine &message) {
  if (mpiRunning) {
    std::string line;
    raw_string_ostream os(line);
    WithColor::error(os, "strata-run")
        << "rank " << worldRank << ": " << message << "\n";
    writeLine(line);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // (Before MPI starts, a rank of a job under mpirun or Slurm knows its
  // rank from the launcher: an error about one machine's files names it.)
  std::optional<int> rank = launcherRank();
  WithColor::error(errs(), "strata-run")
      << (rank ? "rank " + std::to_string(*rank) + ": " : std::string())
      << message << "\n";
  return 1;
}

/// A hash of the options every rank of a job must be started with alike
/// (beyond the program, strategy, seed, backend and data that
/// Trainer::checkSameJob compares): those that decide which collectives a
/// rank takes (blocking or overlapped ones never meet), which outputs rank
/// 0 writes, and from which state.
static uint64_t runFingerprint() {
  std::string text;
  raw_string_ostream os(text);
  os << "steps " << steps << "\ninit " << !initFile.empty() << "\nresume "
     << !resumeFrom.empty() << "\nsave " << !saveFile.empty() << "\nsave-every "
     << saveEvery << "\ncheckpoint-dir " << !checkpointDir.empty()
     << "\nkeep-checkpoints " << keepCheckpoints << "\nreport "
     << !reportFile.empty() << "\ntrace " << !traceFile.empty()
     << "\ndump-batches " << !dumpBatches.empty() << "\nblocking-collectives "
     << blockingCollectives << "\n";
  return xxh3_64bits(text);
}

/// A hash of a checkpoint's bytes, which every rank must start from alike
/// (the path may differ between machines); nothing when it cannot be read.
static std::optional<uint64_t> contentFingerprint(StringRef path) {
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/false,
                                      /*RequiresNullTerminator=*/false);
  if (!buffer)
    return std::nullopt;
  return xxh3_64bits((*buffer)->getBuffer());
}

/// Whether every rank's checkpoint `path` (named by `option`) holds rank
/// 0's bytes; every rank calls it. A rank that cannot read its file is left
/// to the load, which names it and why.
static Error checkSameCheckpoint(StringRef option, StringRef path,
                                 std::optional<uint64_t> hash) {
  if (communicator->firstDifferent(hash.has_value()) >= 0)
    return Error::success();
  int64_t other = communicator->firstDifferent(hash.value_or(0));
  if (other < 0)
    return Error::success();
  return createStringError(
      inconvertibleErrorCode(),
      "rank " + Twine(other) + "'s " + option +
          " checkpoint holds other bytes than rank 0's (" + path +
          "): every rank of a job starts from the same checkpoint (" +
          (option == "--init" ? "a copy of rank 0's file"
                              : "a copy of rank 0's file, or a directory "
                                "every rank sees alike") +
          ")");
}

/// An MPI call of the start's own checks, named for a rank the job stops
/// during it and watched by --collective-timeout like the step's.
class StartupCheck {
  strata::MpiCommunicator::Waiting waiting{
      communicator ? communicator->getWaitLimit() : 0.0};

public:
  explicit StartupCheck(
      const char *what = "the start's check that every rank can go on") {
    strata_run::communicationBegins(what);
  }
  ~StartupCheck() { strata_run::communicationEnds(); }
};

/// Names the long work of the start for a rank the job stops during it.
class StartupPhase {
public:
  explicit StartupPhase(const char *what) { strata_run::startupPhase(what); }
  ~StartupPhase() { strata_run::startupPhase(nullptr); }
};

/// What other ranks than 0 would have printed (their diagnostics): each
/// compiles its own program (sharding, pipeline stages), which may fail on
/// that rank alone.
static std::string capturedDiagnostics;

/// A step that may fail on some ranks only: every rank learns whether one
/// failed. The lowest failing rank reports (with its diagnostics, which
/// rank 0 has printed already) and ends the job; the others wait for that.
/// Returns the exit code when the job fails, nothing when every rank went on.
static std::optional<int> checkEverywhere(bool ok, const Twine &message,
                                          bool diagnosticsPrinted = true) {
  if (!mpiRunning) {
    if (ok)
      return std::nullopt;
    return diagnosticsPrinted ? 1 : fail(message);
  }
  int mine = ok ? worldSize : worldRank, first = worldSize;
  {
    StartupCheck check;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  if (first == worldSize)
    return std::nullopt;
  if (worldRank != first) {
    // The failing rank aborts the job; this rank waits to be ended.
    StartupCheck check;
    MPI_Barrier(MPI_COMM_WORLD);
    return 1;
  }
  if (worldRank != 0)
    errs() << capturedDiagnostics;
  return fail(message);
}

/// A failure every rank meets alike (parsing or compiling the same program
/// with the same strategy): rank 0 has printed the diagnostics and reports,
/// and every rank leaves MPI in order (no abort, whose noise would follow
/// the message).
static int failEverywhere(const Twine &message,
                          bool diagnosticsPrinted = true) {
  if (!mpiRunning)
    return diagnosticsPrinted ? 1 : fail(message);
  if (worldRank == 0) {
    WithColor::error(errs(), "strata-run")
        << "every rank: " << message << "\n";
    errs().flush();
  }
  // (Once a rank has left with status 1, mpirun ends the others, which may
  // still be leaving MPI: no "stopped by the job" report from them.)
  strata_run::leaving();
  communicator.reset();
  MPI_Finalize();
  return 1;
}

/// A step of the start that every rank makes and that usually fails on all
/// ranks alike (the same program, strategy and files) but may fail on some
/// only (a file missing on one machine, ranks launched with different
/// arguments): every rank learns how many failed. Failed everywhere, rank 0
/// reports once and every rank leaves MPI in order (failEverywhere); on some
/// ranks only, the lowest of them reports and ends the job
/// (checkEverywhere). Returns the exit code when the job fails, nothing
/// when every rank went on.
static std::optional<int> agree(bool ok, const Twine &message,
                                bool diagnosticsPrinted = true) {
  if (!mpiRunning)
    return checkEverywhere(ok, message, diagnosticsPrinted);
  int failed = !ok, total = 0;
  {
    StartupCheck check;
    MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
  if (total == 0)
    return std::nullopt;
  if (total == worldSize)
    return failEverywhere(message, diagnosticsPrinted);
  return checkEverywhere(ok, message, diagnosticsPrinted);
}

/// Diagnostics of a start-up step (agree): printed on rank 0, kept on the
/// other ranks, which print them if they fail alone.
static void report(const std::string &diagnostics) {
  if (worldRank == 0)
    errs() << diagnostics;
  else
    capturedDiagnostics += diagnostics;
}

/// What can be checked before ranks are launched, in the launching process:
/// the strategy against the world size, the program, and the batch against
/// the data-parallel ranks and micro-batches. Returns the exit code (0 when
/// everything holds), having printed the errors.
static int preflight(int64_t world) {
  strata::StrategyContext context;
  context.worldSize = world;
  auto strategy = strategyFile.empty()
                      ? strata::parseStrategy("", "<default strategy>", context)
                      : strata::loadStrategy(strategyFile, context);
  if (!strategy) {
    errs() << toString(strategy.takeError());
    return 1;
  }
  mlir::DialectRegistry registry;
  strata::registerStrataDialects(registry);
  mlir::MLIRContext mlirContext(registry);
  mlirContext.loadAllAvailableDialects();
  mlirContext.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &mlirContext);
  std::string error;
  auto input = strata::openProgramInput("strata-run", programFile, error);
  if (!input)
    return fail(error);
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &mlirContext);
  strata::endProgramInput();
  if (!module)
    return 1;
  Expected<mlir::func::FuncOp> step = strata::findStepFunction(*module);
  if (!step)
    return fail(programFile + ": " + toString(step.takeError()));
  if (Error err = strata::checkBatchSplit(*strategy, *step, world)) {
    errs() << toString(std::move(err));
    return 1;
  }
  auto data = strata::DataStream::create(*step, dataFile, dataFormat, seed,
                                         kDataOptions);
  if (!data)
    return fail(toString(data.takeError()));
  return 0;
}

/// Why `path`, given to `--flag`, cannot be written, checked before any
/// training: it must be a regular file (not a device, FIFO or directory) or
/// a new file in a writable directory.
static std::optional<std::string> unwritable(StringRef flag, StringRef path) {
  if (path.empty() || path == "-")
    return std::nullopt;
  std::string option = (flag.size() == 1 ? "-" : "--") + flag.str();
  sys::fs::file_status status;
  if (!sys::fs::status(path, status)) {
    if (status.type() != sys::fs::file_type::regular_file)
      return option + " " + path.str() +
             ": not a regular file (give a file name to write)";
    if (access(path.str().c_str(), W_OK) != 0)
      return option + " " + path.str() + ": cannot be written (" +
             std::strerror(errno) + ")";
    return std::nullopt;
  }
  // (The file it would write, whose directory is checked below, is the
  // link's target: it names none.)
  if (sys::fs::is_symlink_file(path))
    return option + " " + path.str() +
           ": a symbolic link to a missing file (give a file name to write)";
  SmallString<128> dir = sys::path::parent_path(path);
  if (dir.empty())
    dir = ".";
  if (!sys::fs::is_directory(dir)) {
    // The nearest part of the path that exists says why: a file where a
    // directory should be, or no such directory.
    StringRef existing = dir;
    while (!existing.empty() && !sys::fs::exists(existing))
      existing = sys::path::parent_path(existing);
    if (!existing.empty() && !sys::fs::is_directory(existing))
      return option + " " + path.str() + ": '" + existing.str() +
             "' is not a directory";
    return option + " " + path.str() + ": there is no directory '" +
           dir.str().str() + "'";
  }
  if (access(dir.c_str(), W_OK) != 0)
    return option + " " + path.str() + ": cannot create files in '" +
           dir.str().str() + "' (" + std::strerror(errno) + ")";
  return std::nullopt;
}

/// Writes `path` through `write`, reporting a failed write (a full disk)
/// as an error instead of aborting.
static Error writeOutputFile(StringRef path,
                             function_ref<void(raw_ostream &)> write) {
  std::string error;
  auto out = mlir::openOutputFile(path, &error);
  if (!out)
    return createStringError(inconvertibleErrorCode(), error);
  write(out->os());
  out->os().flush();
  if (std::error_code ec = out->os().error()) {
    out->os().clear_error();
    return createStringError(inconvertibleErrorCode(),
                             "cannot write '" + path + "': " + ec.message());
  }
  out->keep();
  return Error::success();
}

static int64_t peakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

/// 1234567 -> "1.23M".
static std::string formatCount(double n) {
  if (n >= 1e9)
    return formatv("{0:F2}G", n / 1e9).str();
  if (n >= 1e6)
    return formatv("{0:F2}M", n / 1e6).str();
  if (n >= 1e3)
    return formatv("{0:F1}k", n / 1e3).str();
  return formatv("{0:F0}", n).str();
}

/// 3725 -> "1h02m05s".
static std::string formatSeconds(double seconds) {
  int64_t s = int64_t(seconds + 0.5);
  if (s >= 3600)
    return formatv("{0}h{1:2}m{2:2}s", s / 3600, (s / 60) % 60, s % 60).str();
  if (s >= 60)
    return formatv("{0}m{1:2}s", s / 60, s % 60).str();
  return formatv("{0:F1}s", seconds).str();
}

static std::string formatBytes(int64_t bytes) {
  double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    return formatv("{0:F2} GiB", b / (1024.0 * 1024 * 1024)).str();
  if (b >= 1024.0 * 1024)
    return formatv("{0:F1} MiB", b / (1024.0 * 1024)).str();
  return formatv("{0:F1} KiB", b / 1024.0).str();
}

/// The argument checks that need no program, before anything runs.
static int checkArguments() {
  if (auto chosen = strata::parseBackend(backend); !chosen) {
    consumeError(chosen.takeError());
    return fail("unknown --backend '" + backend +
                "' (expected cpu, cuda or reference)");
  }
  if (tf32 && backend != "cuda")
    return fail("--tf32 needs --backend cuda (the CPU has no TF32)");
  if (gemmAutotune && backend != "cpu")
    return fail("--gemm-autotune needs --backend cpu (it chooses between "
                "the CPU runtime's GEMM paths; cuBLASLt's heuristics choose "
                "on cuda)");
  if (!emit.empty() && emit != "obj" && emit != "mlir")
    return fail("unknown --emit '" + emit + "' (expected obj or mlir)");
  if (emitTracing && emit.empty())
    return fail("--emit-tracing needs --emit");
  if (!emit.empty() && !traceFile.empty())
    return fail("--trace records a run, and --emit does not run the step: "
                "use --emit-tracing for a step that records its ops");
  if (!emit.empty() && outputFile.empty())
    return fail("--emit needs -o FILE");
  if (threads.getNumOccurrences() &&
      (threads < 1 || threads > strata::kMaxThreads))
    return fail("--cpu-threads " + Twine(threads) +
                " is out of range: give 1 to " + Twine(strata::kMaxThreads) +
                " threads per rank, or leave "
                "it out to divide the cores among the ranks of this machine");
  if (!strata::MpiCommunicator::validWaitLimit(collectiveTimeout))
    return fail("--collective-timeout " +
                strata::formatStrategyNumber(collectiveTimeout) +
                " is not a number of seconds from 0 (wait for ever) to 1e9");
  if (steps < 0 || steps > strata::kMaxStepsDone)
    return fail("--steps " + Twine(steps) +
                (steps < 0 ? " is negative" : " is beyond 2^53"));
  if (sys::fs::exists(programFile) && !sys::fs::is_regular_file(programFile))
    return fail(programFile + ": not a regular file (give a program file)");
  if (saveEvery < 0)
    return fail("--save-every " + Twine(saveEvery) + " is negative");
  if (logEvery < 0)
    return fail("--log-every " + Twine(logEvery) + " is negative");
  if (saveEvery > 0 && checkpointDir.empty())
    return fail("--save-every needs --checkpoint-dir DIR to write into");
  if (!checkpointDir.empty() && saveEvery == 0)
    return fail("--checkpoint-dir is only written with --save-every N");
  if (keepCheckpoints < 0)
    return fail("--keep-checkpoints " + Twine(keepCheckpoints) +
                " is negative (0 keeps all)");
  // An option given an empty value (an unset shell variable) is not the
  // option left out.
  for (auto [flag, option] :
       {std::pair<StringRef, cl::opt<std::string> *>{"strategy", &strategyFile},
        {"data", &dataFile},
        {"init", &initFile},
        {"save", &saveFile},
        {"checkpoint-dir", &checkpointDir},
        {"resume", &resumeFrom},
        {"report", &reportFile},
        {"dump-batches", &dumpBatches},
        {"o", &outputFile},
        {"trace", &traceFile}})
    if (option->getNumOccurrences() && option->empty())
      return fail("--" + flag + " was given an empty value");
  // (--report - and -o - write to standard output; these are files.)
  for (auto [flag, path] : {std::pair<StringRef, StringRef>{"save", saveFile},
                            {"dump-batches", dumpBatches},
                            {"trace", traceFile},
                            {"checkpoint-dir", checkpointDir}})
    if (path == "-")
      return fail("--" + flag + " - : give a file name (" + flag +
                  " is not written to standard output)");
  if (outputFile == "-" && emit == "obj")
    return fail("-o - : give a file name (an object file is not written to "
                "standard output; --emit=mlir -o - is)");
  if (!outputFile.empty() && emit.empty())
    return fail("-o names the output of --emit (a checkpoint after training "
                "is --save FILE)");
  if (!emit.empty()) {
    for (auto [flag, path] : {std::pair<StringRef, StringRef>{"save", saveFile},
                              {"report", reportFile},
                              {"checkpoint-dir", checkpointDir},
                              {"dump-batches", dumpBatches}})
      if (!path.empty())
        return fail("--emit writes the lowered program and trains nothing: "
                    "--" +
                    flag + " would not be written");
    for (auto [flag, path] : {std::pair<StringRef, StringRef>{"init", initFile},
                              {"resume", resumeFrom},
                              {"data", dataFile}})
      if (!path.empty())
        return fail("--emit writes the lowered program and trains nothing: "
                    "--" +
                    flag + " would not be read");
    // (Options of training, which the emitted step does not hold: its
    // host chooses how many steps and threads.)
    for (auto [flag, given] :
         {std::pair<StringRef, bool>{"steps", steps.getNumOccurrences() > 0},
          {"log-every", logEvery.getNumOccurrences() > 0},
          {"gemm-autotune", bool(gemmAutotune)},
          {"cpu-threads", threads.getNumOccurrences() > 0}})
      if (given)
        return fail("--emit writes the lowered program and trains nothing: "
                    "--" +
                    flag +
                    " would not be used (the host that links the "
                    "step chooses it)");
    if (backend == "reference")
      return fail("--emit lowers the program for a runtime (--backend cpu "
                  "or cuda); the reference backend evaluates it and has "
                  "nothing to emit");
  }
  {
    // Two outputs in one file: the second would overwrite the first. (A
    // file that exists is compared through its links too.)
    std::map<std::string, StringRef> written;
    std::vector<std::pair<StringRef, StringRef>> existing;
    auto option = [](StringRef flag) {
      return (flag == "o" ? "-" : "--") + flag.str();
    };
    for (auto [flag, path] : {std::pair<StringRef, StringRef>{"save", saveFile},
                              {"report", reportFile},
                              {"trace", traceFile},
                              {"dump-batches", dumpBatches},
                              {"o", outputFile}}) {
      if (path.empty())
        continue;
      SmallString<256> real(path);
      sys::fs::make_absolute(real);
      sys::path::remove_dots(real, /*remove_dot_dot=*/true);
      SmallString<256> resolved;
      if (!sys::fs::real_path(path, resolved))
        real = resolved;
      auto [it, fresh] = written.emplace(real.str().str(), flag);
      if (!fresh)
        return fail(option(it->second) + " and " + option(flag) +
                    " both write " + path);
      for (auto [otherFlag, otherPath] : existing)
        if (sys::fs::equivalent(otherPath, path))
          return fail(option(otherFlag) + " and " + option(flag) +
                      " both write one file (" + otherPath + ", " + path + ")");
      if (sys::fs::exists(path))
        existing.push_back({flag, path});
      // An output over an input: the run would read what it then destroys.
      for (auto [input, read] :
           {std::pair<StringRef, StringRef>{"the program", programFile},
            {"--strategy", strategyFile},
            {"--data", dataFile},
            {"--init", initFile},
            {"--resume", resumeFrom}}) {
        // (A checkpoint read at the start may be saved over at the end:
        // training on in place, written atomically.)
        if (read.empty() || read == "-" ||
            (flag == "save" && (input == "--init" || input == "--resume")))
          continue;
        SmallString<256> readReal(read);
        sys::fs::make_absolute(readReal);
        sys::path::remove_dots(readReal, /*remove_dot_dot=*/true);
        if (readReal == real || sys::fs::equivalent(read, path))
          return fail(option(flag) + " " + path + " would overwrite " + input +
                      " " + read + ", which the run reads");
      }
    }
  }
  if (!resumeFrom.empty() && !initFile.empty())
    return fail("--resume and --init both give the initial state: use one");
  // (Without --data the generated batches have no format to read.)
  if (dataFormat.getNumOccurrences() && dataFile.empty())
    return fail("--data-format says how --data holds its tokens: give --data "
                "FILE too");
  // (Before ranks are launched: a missing file is every rank's error.)
  if (!initFile.empty() && !sys::fs::exists(initFile))
    return fail("--init " + initFile + ": no such file");
  if (!resumeFrom.empty() && resumeFrom != checkpointDir &&
      !sys::fs::exists(resumeFrom))
    return fail("--resume " + resumeFrom +
                ": no such file or directory (to resume a job from its own "
                "checkpoints whether or not it has written any yet, give "
                "--resume the --checkpoint-dir)");
  if (!checkpointDir.empty()) {
    if (std::error_code ec = sys::fs::create_directories(checkpointDir))
      return fail("--checkpoint-dir " + checkpointDir +
                  ": cannot create it (" + ec.message() + ")");
    if (!sys::fs::is_directory(checkpointDir))
      return fail("--checkpoint-dir " + checkpointDir + ": not a directory");
    if (access(checkpointDir.c_str(), W_OK) != 0)
      return fail("--checkpoint-dir " + checkpointDir + ": cannot be written (" +
                  std::strerror(errno) + ")");
  }
  for (auto [flag, path] :
       {std::pair<StringRef, StringRef>{"save", saveFile},
        {"report", reportFile},
        {"trace", traceFile},
        {"dump-batches", dumpBatches},
        {"o", outputFile}})
    if (std::optional<std::string> why = unwritable(flag, path))
      return fail(*why);
  if (!emit.empty() && nproc > 1)
    return fail("--emit writes the program of one rank: run it without "
                "--nproc (for a rank of a larger world, use strata-opt "
                "--world-size N --rank R, then strata-opt "
                "--strata-lower-to-runtime)");
  if (nproc < 1)
    return fail("--nproc must be >= 1");
  return 0;
}

/// Kernel threads of this rank: --cpu-threads, or the machine's cores
/// shared among the ranks that run on it.
static int64_t threadsPerRank() {
  if (threads > 0)
    return threads;
  int64_t local = 1;
  if (const char *n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local = std::max(1, std::atoi(n));
  return std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) /
                                  local);
}

/// Temp files that a writer killed mid-save left (`FILE.tmp-XXXXXX`, never
/// loaded) in `dir`, for which `of` holds.
static void removeStaleTemps(StringRef dir, function_ref<bool(StringRef)> of) {
  std::error_code ec;
  for (sys::fs::directory_iterator it(dir.empty() ? "." : dir, ec), end;
       it != end && !ec; it.increment(ec))
    if (of(sys::path::filename(it->path())))
      sys::fs::remove(it->path());
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  strata::registerAllStrataPasses();
  strata::parseToolCommandLine(
      argc, argv,
      "Strata runner: compiles a training program with a strategy and "
      "trains it\n",
      {&trainCategory, &dataCategory, &outputCategory, &launchCategory});
  // (Out of memory before MPI starts names the rank too.)
  if (std::optional<int> rank = launcherRank())
    strata::setToolRank(*rank);
  if (int code = checkArguments())
    return code;
  bool underMpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                  std::getenv("PMI_SIZE") != nullptr;
  if (!underMpi && nproc > 1) {
    if (int code = preflight(nproc))
      return code;
    return strata_run::launchRanks(argc, argv, nproc);
  }
  if (underMpi) {
    MPI_Init(&argc, &argv);
    mpiRunning = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    if (worldSize > 1)
      strata::setToolRank(worldRank);
    strata_run::installStopHandlers(worldRank);
    communicator = std::make_unique<strata::MpiCommunicator>(MPI_COMM_WORLD);
    if (collectiveTimeout > 0) {
      communicator->setWaitLimit(collectiveTimeout);
      strata_run::watchCollectives();
    }
    communicator->onBegin = strata_run::communicationBegins;
    communicator->onEnd = strata_run::communicationEnds;
    // (strata-run --nproc N launches its ranks without --nproc: one here
    // is the user's, and mpirun chose the ranks.)
    bool sameRanks = !nproc.getNumOccurrences() || nproc == worldSize;
    if (auto code =
            agree(sameRanks,
                  "--nproc " + Twine(int64_t(nproc)) +
                      " under mpirun, which "
                      "started " +
                      Twine(worldSize) + (worldSize == 1 ? " rank" : " ranks") +
                      ": drop --nproc (mpirun's -np gives the ranks) or make "
                      "them equal",
                  /*diagnosticsPrinted=*/false))
      return *code;
  }
  bool rank0 = worldRank == 0;
  if (!traceFile.empty() && backend == "reference")
    return fail("--trace needs a compiled backend (--backend cpu or cuda)");
  strata::StrategyContext context;
  context.worldSize = worldSize;
  auto strategy = strategyFile.empty()
                      ? strata::parseStrategy("", "<default strategy>", context)
                      : strata::loadStrategy(strategyFile, context);
  if (!strategy) {
    std::string message = toString(strategy.takeError());
    if (strategyFile.empty())
      return fail(message);
    report(message);
  }
  if (auto code = agree(bool(strategy), "invalid strategy"))
    return *code;

  mlir::DialectRegistry registry;
  strata::registerStrataDialects(registry);
  mlir::MLIRContext mlirContext(registry);
  mlirContext.loadAllAvailableDialects();
  // Errors name the op's location, without dumping the op; in a multi-rank
  // run rank 0 prints them, the other ranks keep theirs in case they fail
  // alone (checkEverywhere).
  mlirContext.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  llvm::raw_string_ostream captured(capturedDiagnostics);
  mlir::SourceMgrDiagnosticHandler diagnostics(
      sourceMgr, &mlirContext,
      rank0 ? static_cast<llvm::raw_ostream &>(llvm::errs()) : captured);
  std::string error;
  auto input = strata::openProgramInput("strata-run", programFile, error);
  if (auto code = agree(bool(input), error, /*diagnosticsPrinted=*/false))
    return *code;
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &mlirContext);
  strata::endProgramInput();
  if (auto code = agree(bool(module), "cannot parse " + programFile))
    return *code;

  // The data stream draws global batches from the program as written
  // (--emit trains nothing and reads no data).
  Expected<mlir::func::FuncOp> written = strata::findStepFunction(*module);
  if (!written)
    return fail(programFile + ": " + toString(written.takeError()));
  std::optional<strata::DataStream> data;
  std::string dataError;
  if (emit.empty()) {
    auto stream = strata::DataStream::create(*written, dataFile, dataFormat,
                                             seed, kDataOptions);
    if (stream)
      data.emplace(std::move(*stream));
    else
      dataError = toString(stream.takeError());
  }

  strata::TrainerOptions options;
  options.worldSize = worldSize;
  options.rank = worldRank;
  options.backend = *strata::parseBackend(backend);
  options.seed = seed;
  options.threads = threadsPerRank();
  // Work LLVM's thread pool does for the run (drawing the initial weights)
  // takes this rank's threads, not every core of a machine it may share.
  llvm::parallel::strategy = llvm::hardware_concurrency(options.threads);
  options.trace = !traceFile.empty() || emitTracing;
  options.tf32 = tf32;
  options.gemmAutotune = gemmAutotune;
  options.blockingCollectives = blockingCollectives;
  options.communicator = communicator.get();
  // The strategy's passes (the first checks the batch split when they
  // run): every rank fails alike.
  // (Until the executable is made.)
  std::optional<StartupPhase> compiling(std::in_place, "compiling the program");
  auto created = strata::Trainer::create(std::move(module), *strategy, options);
  if (!created) {
    // (The trainer's own errors are plain sentences about the program.)
    std::string line;
    raw_string_ostream os(line);
    WithColor::error(os, "strata-run")
        << programFile << ": " << toString(created.takeError()) << "\n";
    report(line);
  }
  if (auto code = agree(bool(created), "cannot compile the strategy"))
    return *code;
  if (auto code = agree(dataError.empty(), dataError,
                        /*diagnosticsPrinted=*/false))
    return *code;
  strata::Trainer &trainer = **created;
  // (The same answer on every rank.)
  if (Error err = [&]() -> Error {
        // (The hashes read whole files: only where ranks compare them, and
        // before the check's watch starts, so that reading a large file is
        // not taken for waiting on a peer.)
        std::optional<uint64_t> dataHash, runHash, startHash;
        StringRef startFile =
            !initFile.empty() ? StringRef(initFile) : StringRef(resumeFrom);
        StringRef startOption = !initFile.empty() ? "--init" : "--resume";
        // (A --resume directory's checkpoint is compared once chosen.)
        bool startIsFile =
            !startFile.empty() && !sys::fs::is_directory(startFile);
        if (worldSize > 1) {
          dataHash = data ? data->fingerprint() : 0;
          runHash = runFingerprint();
          startHash = startIsFile ? contentFingerprint(startFile) : 0;
        }
        StartupCheck check("the start's check that every rank runs one job");
        if (Error err = trainer.checkSameJob(dataHash))
          return err;
        if (!runHash)
          return Error::success();
        // Ranks started with other steps or checkpoints would wait in
        // collectives the others never enter.
        int64_t other = communicator->firstDifferent(*runHash);
        if (other >= 0)
          return createStringError(
              inconvertibleErrorCode(),
              "rank " + Twine(other) +
                  " was started with other run options than rank 0 "
                  "(--steps, --init, --resume, --save, --save-every, "
                  "--checkpoint-dir, --keep-checkpoints, --report, --trace, "
                  "--dump-batches, --blocking-collectives): every rank of a "
                  "job takes the same ones");
        // (rank 0's view of a --resume directory decides below.)
        if (communicator->firstDifferent(startIsFile) >= 0 || startFile.empty())
          return Error::success();
        return checkSameCheckpoint(startOption, startFile, startHash);
      }())
    return failEverywhere(toString(std::move(err)),
                          /*diagnosticsPrinted=*/false);
  {
    Error err = trainer.compile();
    bool ok = !err;
    consumeError(std::move(err));
    if (auto code = agree(ok, "compilation failed"))
      return *code;
  }

  if (!emit.empty()) {
    if (emit == "obj") {
      if (Error err = trainer.emitObject(outputFile))
        return fail(toString(std::move(err)));
      return 0;
    }
    std::string lowered;
    raw_string_ostream os(lowered);
    if (Error err = trainer.emitLowered(os))
      return fail(toString(std::move(err)));
    if (Error err = writeOutputFile(outputFile,
                                    [&](raw_ostream &out) { out << lowered; }))
      return fail(toString(std::move(err)));
    return 0;
  }

  {
    Error err = trainer.createExecutable();
    std::string message = err ? toString(std::move(err)) : std::string();
    if (auto code = checkEverywhere(message.empty(), message,
                                    /*diagnosticsPrinted=*/false))
      return *code;
    strata_run::watchExecutable(trainer.executable());
  }
  compiling.reset();

  // A checkpoint resumes the data stream where it stopped.
  int64_t firstStep = 0;
  std::string startFrom = initFile;
  std::optional<strata::CheckpointRun> from;
  if (!resumeFrom.empty()) {
    // A directory of checkpoints or one file: rank 0's view decides for
    // every rank (the two take different collectives).
    int fromDirectory =
        sys::fs::is_directory(resumeFrom) ||
        (resumeFrom == checkpointDir && !sys::fs::exists(resumeFrom));
    if (mpiRunning) {
      StartupCheck check("the start's broadcast of what --resume names");
      MPI_Bcast(&fromDirectory, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    if (fromDirectory) {
      // The newest complete checkpoint that loads (a damaged newer one is
      // reported and passed over).
      // Every rank takes the same one (Trainer::resumeFromDirectory), so
      // its error is every rank's.
      StartupPhase loading("loading a checkpoint");
      auto found = trainer.resumeFromDirectory(resumeFrom, [&](Error err) {
        WithColor::warning(errs(), "strata-run")
            << "passing over a checkpoint that does not load: "
            << toString(std::move(err)) << "\n";
      });
      std::string foundError = found ? "" : toString(found.takeError());
      if (auto code = agree(foundError.empty(), foundError,
                            /*diagnosticsPrinted=*/false))
        return *code;
      if (*found && worldSize > 1) {
        // The same name on every rank (a directory each machine has its
        // own copy of): the same bytes too, or the replicas would train
        // from other weights, silently.
        std::optional<uint64_t> hash = contentFingerprint((*found)->second);
        Error err = [&] {
          StartupCheck check("the start's check that every rank resumes "
                             "from the same checkpoint");
          return checkSameCheckpoint("--resume", (*found)->second, hash);
        }();
        if (err)
          return failEverywhere(toString(std::move(err)),
                                /*diagnosticsPrinted=*/false);
      }
      if (*found) {
        from = (*found)->first;
        startFrom = (*found)->second;
      } else if (rank0 && !quiet) {
        errs() << "strata-run: no checkpoint in " << resumeFrom
               << " yet: starting at step 0\n";
      }
    } else {
      startFrom = resumeFrom;
    }
  }
  if (!startFrom.empty() && !from) {
    auto done = [&] {
      StartupPhase loading("loading a checkpoint");
      return trainer.loadCheckpoint(startFrom);
    }();
    std::string message = done ? std::string() : toString(done.takeError());
    if (auto code = agree(message.empty(), message,
                          /*diagnosticsPrinted=*/false))
      return *code;
    from = *done;
  }
  if (from) {
    firstStep = from->stepsDone;
    // The run goes on with the checkpoint's data stream and dropout masks,
    // which its seed chose: another seed would train other batches from
    // here, silently. (After step 0 nothing of the stream is behind.)
    // --resume continues the run: refused. --init starts a run from the
    // checkpoint's weights (fine-tuning on other data, say): a warning.
    bool otherSeed = from->seed && *from->seed != seed && firstStep > 0;
    std::string message =
        otherSeed ? startFrom + " continues a run of --seed " +
                        std::to_string(*from->seed) + " after step " +
                        std::to_string(firstStep) +
                        ", whose batches and dropout masks follow that seed"
                  : "";
    if (!resumeFrom.empty()) {
      // (Every rank takes part: their files may differ.)
      if (auto code = agree(
              !otherSeed,
              message + ": give --seed " +
                  (from->seed ? std::to_string(*from->seed) : std::string()) +
                  " (this run has --seed " + std::to_string(seed) + ")",
              /*diagnosticsPrinted=*/false))
        return *code;
    } else if (otherSeed && rank0) {
      WithColor::warning(errs(), "strata-run")
          << message << "; this run goes on from step " << firstStep
          << " with the batches and dropout masks of --seed " << seed << "\n";
    }
  }
  if (!resumeFrom.empty() && !startFrom.empty() && rank0 && !quiet)
    errs() << "strata-run: resuming from " << startFrom << " after step "
           << firstStep << "\n";
  // Checkpoints of another run ahead of this one's first step would be
  // taken for this run's (pruned by age, resumed from). A directory this
  // run resumed from keeps only those it passed over as damaged, which
  // this run replaces as it reaches their steps.
  if (!checkpointDir.empty()) {
    bool resumedHere =
        !resumeFrom.empty() && (resumeFrom == checkpointDir ||
                                sys::fs::equivalent(resumeFrom, checkpointDir));
    auto existing = strata::Trainer::listCheckpoints(checkpointDir);
    int ahead =
        !resumedHere && !existing.empty() && existing.back().first > firstStep;
    if (mpiRunning) { // rank 0 writes the checkpoints: its view decides
      StartupCheck check("the start's broadcast of --checkpoint-dir's state");
      MPI_Bcast(&ahead, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    if (ahead)
      return failEverywhere(
          "--checkpoint-dir " + checkpointDir +
              " holds checkpoints up to step " +
              Twine(existing.empty() ? 0 : existing.back().first) +
              " of another run, and this one starts at step " +
              Twine(firstStep) + ": resume from them (--resume " +
              checkpointDir + ") or write into another directory",
          /*diagnosticsPrinted=*/false);
  }
  // Steps to run: --steps more, or up to --steps in all when resuming.
  const int64_t lastStep =
      resumeFrom.empty() ? firstStep + steps
                         : std::max<int64_t>(firstStep, int64_t(steps));
  const int64_t runSteps = lastStep - firstStep;
  // (With --resume, --steps is the run's total, which a checkpoint may have
  // passed: the run is done, and says so.)
  if (!resumeFrom.empty() && firstStep > int64_t(steps) && rank0)
    WithColor::warning(errs(), "strata-run")
        << "the checkpoint is after step " << firstStep << ", past --steps "
        << steps << " (with --resume, the run's total): no step to train\n";

  // Progress lines on stderr from rank 0 (stdout keeps the `step <i> loss
  // <v>` lines that scripts parse): every `--log-every` steps, and the last.
  int64_t every = logEvery > 0 ? int64_t(logEvery)
                               : std::max<int64_t>(1, (runSteps + 9) / 10);
  bool progress = !quiet && rank0;
  std::vector<strata::NamedTensor> batches;
  // An output that cannot be written (a full disk) is reported, and the
  // others are still written: the run's results are not lost with it.
  int status = 0;
  // (Every rank fails a save together; rank 0 names a rank that failed
  // for its own reason, which that rank prints.)
  auto outputFailed = [&](Error err) {
    status = 1;
    if (!rank0 && err.isA<strata::PeerFailure>()) {
      consumeError(std::move(err));
      return;
    }
    WithColor::error(errs(), "strata-run") << toString(std::move(err)) << "\n";
  };
  if (rank0 && !checkpointDir.empty())
    removeStaleTemps(checkpointDir, [](StringRef name) {
      std::optional<StringRef> of = strata::replacedByTemp(name);
      return of && of->starts_with("step-") && of->ends_with(".safetensors");
    });
  // (Likewise for the other outputs written whole or not at all.)
  for (const std::string &output :
       {std::string(saveFile), std::string(dumpBatches),
        std::string(traceFile)}) {
    if (!rank0 || output.empty())
      continue;
    if (Expected<std::string> target = strata::replacedFile(output)) {
      std::string file = sys::path::filename(*target).str();
      removeStaleTemps(sys::path::parent_path(*target), [&](StringRef name) {
        return strata::replacedByTemp(name) == StringRef(file);
      });
    } else {
      // (Reported when the file is written.)
      consumeError(target.takeError());
    }
  }
  // (The passes rewrote the program in place: `written` is gone; the
  // compiled step's arguments have the batch's element types.)
  mlir::func::FuncOp compiled = trainer.stepFunction();
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = firstStep; i < lastStep; ++i) {
    Expected<std::vector<strata::Tensor>> read = data->batch(i);
    if (!read)
      return fail("step " + Twine(i) + ": " + toString(read.takeError()));
    std::vector<strata::Tensor> batch = std::move(*read);
    if (!dumpBatches.empty())
      for (auto [name, tensor, arg] :
           llvm::zip(data->names(), batch, compiled.getArguments())) {
        // bf16 and f16 inputs as f32, holding the values the step reads.
        mlir::Type element =
            cast<mlir::RankedTensorType>(arg.getType()).getElementType();
        strata::Tensor consumed = tensor;
        if (auto f = dyn_cast<mlir::FloatType>(element);
            f && f.getWidth() < 32) {
          strata::reference::roundToElementType(consumed, element);
          element = mlir::Float32Type::get(element.getContext());
        }
        auto dtype = strata::dtypeOf(element);
        if (!dtype)
          return fail(toString(dtype.takeError()));
        batches.push_back({formatv("step{0}.{1}", i, name).str(), *dtype,
                           std::move(consumed)});
      }
    auto loss = trainer.step(i, batch);
    if (!loss)
      return fail("step " + Twine(i) + ": " + toString(loss.takeError()));
    // (With --report -, standard output is the report alone, which holds
    // the losses: a reader such as jq gets one JSON document.)
    if (rank0 && reportFile != "-") {
      outs() << formatv("step {0} loss {1}\n", i,
                        strata::formatStrategyNumber(*loss));
      outs().flush();
    }
    if (saveEvery > 0 && (i + 1) % saveEvery == 0 && i + 1 < lastStep)
      if (Error err =
              trainer.saveToDirectory(checkpointDir, i + 1, keepCheckpoints))
        outputFailed(std::move(err));
    if (progress && ((i - firstStep + 1) % every == 0 ||
                     i + 1 == lastStep)) {
      double elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      int64_t done = i - firstStep + 1;
      double perStep = elapsed / double(done);
      double stepMs = trainer.stepTimesMs().back();
      std::string line;
      raw_string_ostream os(line);
      os << formatv("[{0}/{1}] loss {2:F4} | {3:F2} ms/step | {4} {5}/s "
                    "| ETA {6} | peak {7}",
                    i + 1, lastStep, *loss, stepMs,
                    formatCount(trainer.itemsPerBatch() / (stepMs / 1000.0)),
                    trainer.itemUnit(),
                    formatSeconds(perStep * double(runSteps - done)),
                    formatBytes(peakRssBytes()));
      // Under float16 loss scaling: the steps an overflow skipped so far.
      if (trainer.skippedSteps() > 0)
        os << formatv(" | {0} skipped (loss scale {1})", trainer.skippedSteps(),
                      format("%g", trainer.lossScale().value_or(0)));
      os << "\n";
      writeLine(line);
    }
  }

  // The last checkpoint and --save.
  // (Written again when this run trained: a file of that name from before
  // is a damaged one this run passed over.)
  if (saveEvery > 0 &&
      (runSteps > 0 || !sys::fs::exists(strata::Trainer::checkpointPath(
                           checkpointDir, lastStep))))
    if (Error err =
            trainer.saveToDirectory(checkpointDir, lastStep, keepCheckpoints))
      outputFailed(std::move(err));
  if (!saveFile.empty())
    if (Error err = trainer.saveCheckpoint(saveFile, lastStep))
      outputFailed(std::move(err));
  if (!dumpBatches.empty() && rank0)
    if (Error err = strata::writeSafetensors(dumpBatches, batches))
      outputFailed(std::move(err));

  strata::RunSummary summary = trainer.summarize();
  // Steps that trained nothing are said even in --quiet runs.
  if (rank0 && trainer.skippedStepsMatter(summary.skippedSteps, runSteps,
                                          /*runEnded=*/true))
    WithColor::warning(errs(), "strata-run")
        << formatv("{0} of {1} steps changed no parameter: their ",
                   summary.skippedSteps, runSteps)
        << trainer.overflowReason() << "\n";
  if (!traceFile.empty())
    if (Error err = trainer.writeTrace(traceFile))
      outputFailed(std::move(err));
  if (progress) {
    errs() << formatv("summary: {0} steps in {1}", runSteps,
                      formatSeconds(summary.wallSeconds));
    if (runSteps > 0)
      errs() << formatv(" | {0:F2} ms/step (mean{1}) | {2} {3}/s | final "
                        "loss {4:F4}",
                        summary.meanStepMs,
                        runSteps > 1 ? " after the first" : "",
                        formatCount(summary.throughput), trainer.itemUnit(),
                        trainer.losses().back());
    errs() << "\n";
    for (int r = 0; r < worldSize; ++r)
      errs() << formatv("  rank {0}: planned peak {1}, measured peak {2}\n", r,
                        formatBytes(summary.plannedPeakBytes[r]),
                        formatBytes(summary.measuredPeakBytes[r]));
    if (gemmAutotune && trainer.executable()) {
      auto tuned = trainer.executable()->gemmAutotuned();
      errs() << formatv("  gemm autotune{0}: {1} products timed, {2} through "
                        "sgemm, {3} through the packed GEMM, the rest through "
                        "the matmul primitive\n",
                        worldSize > 1 ? " (rank 0)" : "", tuned.timed,
                        tuned.onSgemm, tuned.onPacked);
    }
    errs().flush();
  }
  if (!reportFile.empty() && rank0)
    if (Error err = writeOutputFile(reportFile, [&](raw_ostream &os) {
          os << formatv("{0:2}", json::Value(trainer.report(summary))) << "\n";
        }))
      outputFailed(std::move(err));
  communicator.reset();
  if (mpiRunning)
    MPI_Finalize();
  return status;
}
