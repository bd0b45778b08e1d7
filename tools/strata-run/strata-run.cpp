//===- strata-run.cpp - Compile a program with a strategy and train it ----===//
//
//   strata-run PROGRAM.mlir [--strategy FILE] [--steps N] [--seed N]
//              [--data FILE] [--init FILE.safetensors]
//              [--save FILE.safetensors] [--report FILE.json]
//              [--backend cpu|reference] [--cpu-threads N] [--nproc N]
//              [--emit=obj -o FILE]
//
// prints `step <i> loss <value>` for every step. The CPU backend JIT-compiles
// the lowered step against the CPU runtime (fp32); the reference backend is
// the double-precision evaluator, the executable specification.
//
//===----------------------------------------------------------------------===//

#include "strata/Analysis/MemoryPlan.h"
#include "strata/Dialect/Strata.h"
#include "strata/Execution/CpuExecutable.h"
#include "strata/Passes/Passes.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Strategy/PassPlan.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Tool/Tool.h"
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

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <set>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/wait.h>
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
    "report", cl::desc("Write a JSON report of the run"),
    cl::value_desc("file"), cl::init(""), cl::cat(outputCategory));
static cl::opt<std::string> dumpBatches(
    "dump-batches",
    cl::desc("Write the batches consumed (safetensors, 'step<i>.<name>'), "
             "to feed a reference framework the same data"),
    cl::value_desc("file"), cl::init(""), cl::cat(dataCategory));
static cl::opt<std::string> backend(
    "backend",
    cl::desc("Execution backend: cpu (JIT against the CPU runtime, fp32) or "
             "reference (the double-precision evaluator) (default: cpu)"),
    cl::init("cpu"), cl::cat(launchCategory));
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

/// Reports an error; in a multi-rank run, names the rank and takes every
/// other rank down with it rather than leave them waiting in a collective.
static int fail(const Twine &message) {
  if (mpiRunning) {
    WithColor::error(errs(), "strata-run")
        << "rank " << worldRank << ": " << message << "\n";
    errs().flush();
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  WithColor::error(errs(), "strata-run") << message << "\n";
  return 1;
}

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
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == worldSize)
    return std::nullopt;
  if (worldRank != first) {
    // The failing rank aborts the job; this rank waits to be ended.
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
  MPI_Finalize();
  return 1;
}

namespace {
/// What a rank says when its job stops it: mpirun sends SIGTERM to every
/// rank when one of them fails (and a person may press Ctrl-C). A rank in a
/// collective, a send, a receive or a wait names it and exits; a rank that
/// is computing goes on to its next communication (where it would wait for
/// the failed peer forever) and names that one, or, after two seconds
/// without any, says it was computing. Signal handlers use write(2) only.
namespace stop {
char prefix[64] = "strata-run: error: ";
std::atomic<const strata::CpuExecutable *> executable{nullptr};
/// Host-side communication in progress (not inside a step), or null.
std::atomic<const char *> hostActivity{nullptr};
volatile sig_atomic_t requested = 0;

void put(const char *s) {
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

[[noreturn]] void report(const char *where) {
  put(prefix);
  put(requested == SIGINT ? "interrupted" : "stopped by the job");
  if (where) {
    put(" while in ");
    put(where);
  } else {
    put(" while computing (outside any collective)");
  }
  put(": a peer rank failed or the job was cancelled; mpirun names the "
      "rank that ended first\n");
  _exit(128 + (requested ? int(requested) : SIGTERM));
}

const char *where() {
  if (const strata::CpuExecutable *exe = executable.load())
    if (const char *site = exe->activeHostCall())
      return site;
  return hostActivity.load();
}

/// Called where communication begins: a stopped rank reports it there.
void check() {
  if (requested)
    report(where());
}

void onSignal(int sig) {
  if (requested) // a second signal: report now
    report(where());
  requested = sig;
  if (const char *at = where())
    report(at);
  alarm(2);
}

void onAlarm(int) { report(where()); }

/// Installs the handlers of a rank of an MPI job.
void install(int rank) {
  std::snprintf(prefix, sizeof(prefix), "strata-run: error: rank %d: ", rank);
  struct sigaction action = {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  action.sa_handler = onAlarm;
  sigaction(SIGALRM, &action, nullptr);
}

/// Marks host-side communication (outside a step) for the report.
struct Activity {
  explicit Activity(const char *what) {
    hostActivity.store(what);
    check();
  }
  ~Activity() { hostActivity.store(nullptr); }
};
} // namespace stop

/// Collectives over MPI: in doubles for the reference backend, and as the
/// CPU runtime's collectives (strata_rt_set_collectives). Sub-communicators
/// are created on first use; every rank reaches the collectives of the
/// program in the same order, so they are created in the same order.
class MpiCommunicator : public strata::reference::Communicator {
public:
  int64_t rank() const override { return worldRank; }
  Error allReduceSum(std::vector<double> &data,
                     ArrayRef<int64_t> group) override {
    return allReduce(data.data(), int64_t(data.size()), MPI_DOUBLE, group);
  }

  Error broadcast(std::vector<double> &data, ArrayRef<int64_t> group,
                  int64_t root) override {
    return broadcast(data.data(), int64_t(data.size()), MPI_DOUBLE, group,
                     root);
  }

  Error send(const std::vector<double> &data, ArrayRef<int64_t> group,
             int64_t peer) override {
    return send(data.data(), int64_t(data.size()), MPI_DOUBLE, group, peer);
  }
  Error recv(std::vector<double> &data, ArrayRef<int64_t> group,
             int64_t peer) override {
    return recv(data.data(), int64_t(data.size()), MPI_DOUBLE, group, peer);
  }

  /// Buffered send: the message is copied and sent with MPI_Isend, so that
  /// the sender goes on (a pipeline stage sends its activations and then
  /// waits for a gradient from the same peer); flush() completes them.
  Error send(const void *data, int64_t count, MPI_Datatype type,
             ArrayRef<int64_t> group, int64_t peer) {
    auto comm = communicatorOf(group);
    if (!comm)
      return comm.takeError();
    int size = 0;
    MPI_Type_size(type, &size);
    auto message = std::make_unique<Outgoing>();
    message->bytes.assign(static_cast<const char *>(data),
                          static_cast<const char *>(data) + count * size);
    if (MPI_Isend(message->bytes.data(), int(count), type, int(peer),
                  /*tag=*/0, *comm, &message->request) != MPI_SUCCESS)
      return createStringError(inconvertibleErrorCode(),
                               "MPI_Isend to rank " + Twine(group[peer]) +
                                   " failed");
    outgoing.push_back(std::move(message));
    return Error::success();
  }

  Error recv(void *data, int64_t count, MPI_Datatype type,
             ArrayRef<int64_t> group, int64_t peer) {
    auto comm = communicatorOf(group);
    if (!comm)
      return comm.takeError();
    MPI_Status status;
    auto begin = std::chrono::steady_clock::now();
    int result = MPI_Recv(data, int(count), type, int(peer), /*tag=*/0, *comm,
                          &status);
    recvWaitMs += std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - begin)
                      .count();
    if (result != MPI_SUCCESS)
      return createStringError(inconvertibleErrorCode(),
                               "MPI_Recv from rank " + Twine(group[peer]) +
                                   " failed");
    int received = 0;
    MPI_Get_count(&status, type, &received);
    if (received != count)
      return createStringError(inconvertibleErrorCode(),
                               "received " + Twine(received) +
                                   " elements from rank " + Twine(group[peer]) +
                                   ", expected " + Twine(count));
    return Error::success();
  }

  /// Completes the buffered sends (after each step).
  Error flush() {
    stop::Activity activity("completing the step's sends (MPI_Wait)");
    for (std::unique_ptr<Outgoing> &message : outgoing)
      if (MPI_Wait(&message->request, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return createStringError(inconvertibleErrorCode(),
                                 "MPI_Wait on a send failed");
    outgoing.clear();
    return Error::success();
  }

  /// The CPU runtime's send and recv.
  static int runtimeSend(void *user, const void *data, int64_t count,
                         int64_t dtype, const int64_t *ranks,
                         int64_t numRanks, int64_t peer, char *error,
                         size_t errorSize) {
    auto *self = static_cast<MpiCommunicator *>(user);
    if (Error err = self->send(data, count, mpiType(dtype),
                               ArrayRef<int64_t>(ranks, numRanks), peer)) {
      std::snprintf(error, errorSize, "%s", toString(std::move(err)).c_str());
      return 1;
    }
    return 0;
  }
  static int runtimeRecv(void *user, void *data, int64_t count, int64_t dtype,
                         const int64_t *ranks, int64_t numRanks, int64_t peer,
                         char *error, size_t errorSize) {
    auto *self = static_cast<MpiCommunicator *>(user);
    if (Error err = self->recv(data, count, mpiType(dtype),
                               ArrayRef<int64_t>(ranks, numRanks), peer)) {
      std::snprintf(error, errorSize, "%s", toString(std::move(err)).c_str());
      return 1;
    }
    return 0;
  }

  /// The communicator of the ranks `group` (in that order: group-local
  /// index i is rank group[i]).
  Expected<MPI_Comm> communicatorOf(ArrayRef<int64_t> group) {
    stop::check();
    bool world = int64_t(group.size()) == worldSize;
    for (int64_t i = 0; world && i < worldSize; ++i)
      world = group[i] == i;
    if (world)
      return MPI_COMM_WORLD;
    std::vector<int> ranks(group.begin(), group.end());
    auto it = comms.find(ranks);
    if (it == comms.end()) {
      MPI_Group worldGroup, sub;
      MPI_Comm_group(MPI_COMM_WORLD, &worldGroup);
      MPI_Group_incl(worldGroup, int(ranks.size()), ranks.data(), &sub);
      MPI_Comm created;
      if (MPI_Comm_create_group(MPI_COMM_WORLD, sub, 0, &created) !=
          MPI_SUCCESS)
        return createStringError(inconvertibleErrorCode(),
                                 "cannot create a communicator");
      it = comms.emplace(ranks, created).first;
    }
    return it->second;
  }

  Error allReduce(void *data, int64_t count, MPI_Datatype type,
                  ArrayRef<int64_t> group) {
    auto comm = communicatorOf(group);
    if (!comm)
      return comm.takeError();
    if (MPI_Allreduce(MPI_IN_PLACE, data, int(count), type, MPI_SUM, *comm) !=
        MPI_SUCCESS)
      return createStringError(inconvertibleErrorCode(),
                               "MPI_Allreduce failed");
    return Error::success();
  }

  Error broadcast(void *data, int64_t count, MPI_Datatype type,
                  ArrayRef<int64_t> group, int64_t root) {
    auto comm = communicatorOf(group);
    if (!comm)
      return comm.takeError();
    if (MPI_Bcast(data, int(count), type, int(root), *comm) != MPI_SUCCESS)
      return createStringError(inconvertibleErrorCode(), "MPI_Bcast failed");
    return Error::success();
  }

  static MPI_Datatype mpiType(int64_t dtype) {
    return dtype == STRATA_RT_F32   ? MPI_FLOAT
           : dtype == STRATA_RT_I32 ? MPI_INT32_T
                                    : MPI_INT64_T;
  }

  /// The CPU runtime's collectives: blocking, or started (MPI_I*) with a
  /// heap-allocated MPI_Request that runtimeWait completes.
  static int runtimeCollective(void *user, const StrataRtCollective *c,
                               void **request, char *error,
                               size_t errorSize) {
    auto *self = static_cast<MpiCommunicator *>(user);
    auto comm = self->communicatorOf(ArrayRef<int64_t>(c->ranks, c->numRanks));
    if (!comm) {
      std::snprintf(error, errorSize, "%s",
                    toString(comm.takeError()).c_str());
      return 1;
    }
    MPI_Datatype type = mpiType(c->dtype);
    int count = int(c->count);
    MPI_Request *r = request ? new MPI_Request : nullptr;
    int status = MPI_SUCCESS;
    const char *call = "";
    switch (c->op) {
    case STRATA_RT_ALL_REDUCE:
      call = r ? "MPI_Iallreduce" : "MPI_Allreduce";
      status = r ? MPI_Iallreduce(MPI_IN_PLACE, c->recv, count, type, MPI_SUM,
                                  *comm, r)
                 : MPI_Allreduce(MPI_IN_PLACE, c->recv, count, type, MPI_SUM,
                                 *comm);
      break;
    case STRATA_RT_BROADCAST:
      call = r ? "MPI_Ibcast" : "MPI_Bcast";
      status = r ? MPI_Ibcast(c->recv, count, type, int(c->root), *comm, r)
                 : MPI_Bcast(c->recv, count, type, int(c->root), *comm);
      break;
    case STRATA_RT_REDUCE_SCATTER:
      call = r ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
      status = r ? MPI_Ireduce_scatter_block(c->send, c->recv, count, type,
                                             MPI_SUM, *comm, r)
                 : MPI_Reduce_scatter_block(c->send, c->recv, count, type,
                                            MPI_SUM, *comm);
      break;
    case STRATA_RT_ALL_GATHER:
      call = r ? "MPI_Iallgather" : "MPI_Allgather";
      status = r ? MPI_Iallgather(c->send, count, type, c->recv, count, type,
                                  *comm, r)
                 : MPI_Allgather(c->send, count, type, c->recv, count, type,
                                 *comm);
      break;
    default:
      std::snprintf(error, errorSize, "unknown collective %lld",
                    (long long)c->op);
      delete r;
      return 1;
    }
    if (status != MPI_SUCCESS) {
      delete r;
      std::snprintf(error, errorSize, "%s failed", call);
      return 1;
    }
    if (request)
      *request = r;
    return 0;
  }
  static int runtimeWait(void *, void *request, char *error,
                         size_t errorSize) {
    stop::check();
    auto *r = static_cast<MPI_Request *>(request);
    int status = MPI_Wait(r, MPI_STATUS_IGNORE);
    delete r;
    if (status != MPI_SUCCESS) {
      std::snprintf(error, errorSize, "MPI_Wait failed");
      return 1;
    }
    return 0;
  }

  /// Milliseconds spent blocked in receives (a pipeline stage waiting for
  /// its neighbours: the bubble).
  double recvWaitMs = 0;

private:
  std::map<std::vector<int>, MPI_Comm> comms;
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request request;
  };
  std::vector<std::unique_ptr<Outgoing>> outgoing;
};

/// The mpirun child of `launchRanks`, to which the launcher forwards the
/// signals sent to it alone (a terminal's Ctrl-C reaches both already).
static volatile sig_atomic_t launchedPid = 0;

static void forwardSignal(int sig, siginfo_t *info, void *) {
  if (launchedPid > 0 && info &&
      (info->si_code == SI_USER || info->si_code == SI_QUEUE))
    kill(pid_t(launchedPid), sig);
}

/// Copies mpirun's stderr from `fd` to ours, line by line, leaving out the
/// banner that follows MPI_Abort: a rank that fails has said why, with its
/// rank, already. Other notices of mpirun (which rank died of which signal)
/// pass unchanged.
static void relayStderr(int fd) {
  std::string pending, block;
  bool inBlock = false;
  auto emit = [](StringRef text) {
    errs() << text;
    errs().flush();
  };
  auto line = [&](StringRef text) {
    bool rule = text.starts_with("-----");
    if (!inBlock) {
      if (rule) {
        inBlock = true;
        block = text.str();
      } else {
        emit(text);
      }
      return;
    }
    block += text.str();
    if (rule) {
      inBlock = false;
      if (!StringRef(block).contains("MPI_ABORT was invoked"))
        emit(block);
      block.clear();
    }
  };
  char buffer[4096];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    pending.append(buffer, size_t(n));
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      line(StringRef(pending).take_front(end + 1));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty())
    line(pending);
  if (inBlock)
    emit(block);
}

/// `strata-run --nproc N` outside MPI: run the same command under mpirun and
/// wait for it. Every launch gets its own OpenMPI session directory (a fresh
/// directory under $TMPDIR, removed afterwards): two mpiruns started at the
/// same instant otherwise race to create the shared one and one of them
/// fails in orte_init.
int launchRanks(int argc, char **argv) {
  auto mpirun = sys::findProgramByName("mpirun");
  if (!mpirun)
    return fail("--nproc " + Twine(nproc) +
                " needs mpirun (Debian: openmpi-bin) on the PATH");
  std::string self = sys::fs::getMainExecutable(argv[0], (void *)&fail);
  std::vector<std::string> args = {*mpirun, "-np", std::to_string(nproc),
                                   "--oversubscribe"};
  if (geteuid() == 0)
    args.push_back("--allow-run-as-root");
  args.push_back(self);
  for (int i = 1; i < argc; ++i) {
    StringRef a(argv[i]);
    if (a == "--nproc" || a == "-nproc") {
      ++i;
      continue;
    }
    if (a.starts_with("--nproc=") || a.starts_with("-nproc="))
      continue;
    args.push_back(a.str());
  }
  SmallString<128> sessionDir;
  if (std::error_code ec =
          sys::fs::createUniqueDirectory("strata-mpi", sessionDir)) {
    SmallString<128> base;
    sys::path::system_temp_directory(/*ErasedOnReboot=*/true, base);
    return fail("cannot create a session directory for mpirun in " + base +
                ": " + ec.message());
  }
  // Shared memory between the local ranks; no network probing.
  setenv("OMPI_MCA_pml", "ob1", /*overwrite=*/0);
  setenv("OMPI_MCA_btl", "self,vader", 0);
  setenv("OMPI_MCA_orte_tmpdir_base", sessionDir.c_str(), 1);
  std::vector<char *> cargs;
  for (std::string &a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  outs().flush();
  errs().flush();

  struct sigaction forward = {}, saved[3];
  forward.sa_sigaction = forwardSignal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  const int forwarded[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; ++i)
    sigaction(forwarded[i], &forward, &saved[i]);
  // mpirun's stderr (which carries the ranks') passes through relayStderr.
  int errPipe[2] = {-1, -1};
  if (pipe(errPipe) != 0)
    return fail("cannot create a pipe for mpirun: " +
                Twine(std::strerror(errno)));
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 3; ++i)
      sigaction(forwarded[i], &saved[i], nullptr);
    dup2(errPipe[1], STDERR_FILENO);
    close(errPipe[0]);
    close(errPipe[1]);
    execv(mpirun->c_str(), cargs.data());
    std::fprintf(stderr, "strata-run: error: cannot run %s: %s\n",
                 mpirun->c_str(), std::strerror(errno));
    _exit(127);
  }
  int status = 0, code = 1;
  if (pid < 0) {
    code = fail("cannot start " + *mpirun + ": " + std::strerror(errno));
  } else {
    launchedPid = pid;
    close(errPipe[1]);
    relayStderr(errPipe[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    launchedPid = 0;
    code = WIFEXITED(status)     ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                 : 1;
  }
  close(errPipe[0]);
  if (pid < 0)
    close(errPipe[1]);
  for (int i = 0; i < 3; ++i)
    sigaction(forwarded[i], &saved[i], nullptr);
  sys::fs::remove_directories(sessionDir, /*IgnoreErrors=*/true);
  return code;
}
} // namespace

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
  auto input = mlir::openInputFile(programFile, &error);
  if (!input)
    return fail(error);
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &mlirContext);
  if (!module)
    return 1;
  auto step = module->lookupSymbol<mlir::func::FuncOp>(
      strata::kStepFunctionName);
  if (!step)
    return fail(programFile + " has no @" + strata::kStepFunctionName +
                " function");
  if (Error err = strata::checkBatchSplit(*strategy, step, world)) {
    errs() << toString(std::move(err));
    return 1;
  }
  auto data = strata::DataStream::create(step, dataFile, dataFormat, seed);
  if (!data)
    return fail(toString(data.takeError()));
  return 0;
}

/// Every rank's `mine`, on rank 0, in rank order (empty on other ranks;
/// just `mine` without MPI).
static std::vector<std::string> gatherBytes(const std::string &mine) {
  stop::Activity activity("gathering a trace or checkpoint on rank 0");
  if (!mpiRunning)
    return {mine};
  int size = int(mine.size());
  std::vector<int> sizes(worldSize), offsets(worldSize, 0);
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < worldSize; ++r) {
    offsets[r] = total;
    total += sizes[r];
  }
  std::string joined(worldRank == 0 ? total : 0, '\0');
  MPI_Gatherv(mine.data(), size, MPI_CHAR, joined.data(), sizes.data(),
              offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> all;
  if (worldRank == 0)
    for (int r = 0; r < worldSize; ++r)
      all.push_back(joined.substr(offsets[r], sizes[r]));
  return all;
}

/// Every rank's `value`, on rank 0, in rank order.
static std::vector<int64_t> gatherInt64(int64_t value) {
  stop::Activity activity("gathering the report on rank 0");
  std::vector<int64_t> all(worldSize, value);
  if (mpiRunning)
    MPI_Gather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, 0,
               MPI_COMM_WORLD);
  return all;
}

/// Gathers every rank's named tensors on rank 0 (in rank order; a name
/// already present, such as a replicated parameter, is kept once).
static Error gatherTensors(std::vector<strata::NamedTensor> &tensors) {
  std::string mine;
  auto put = [&](const void *p, size_t n) {
    mine.append(static_cast<const char *>(p), n);
  };
  auto putString = [&](const std::string &v) {
    int64_t n = int64_t(v.size());
    put(&n, sizeof(n));
    put(v.data(), v.size());
  };
  for (const strata::NamedTensor &t : tensors) {
    putString(t.name);
    putString(t.dtype);
    int64_t rank = int64_t(t.tensor.shape.size());
    put(&rank, sizeof(rank));
    put(t.tensor.shape.data(), rank * sizeof(int64_t));
    put(t.tensor.data.data(), t.tensor.data.size() * sizeof(double));
  }
  std::vector<std::string> parts = gatherBytes(mine);
  if (worldRank != 0)
    return Error::success();
  std::set<std::string> seen;
  for (const strata::NamedTensor &t : tensors)
    seen.insert(t.name);
  // The other ranks' tensors (rank 0's are `tensors` already).
  std::string all;
  for (size_t r = 1; r < parts.size(); ++r)
    all += parts[r];
  size_t at = 0;
  auto get = [&](void *p, size_t n) {
    if (n) // (a scalar's shape has no data pointer)
      std::memcpy(p, all.data() + at, n);
    at += n;
  };
  auto getString = [&]() {
    int64_t n;
    get(&n, sizeof(n));
    std::string v(all.data() + at, size_t(n));
    at += size_t(n);
    return v;
  };
  while (at < all.size()) {
    strata::NamedTensor t;
    t.name = getString();
    t.dtype = getString();
    int64_t rank;
    get(&rank, sizeof(rank));
    t.tensor.shape.resize(rank);
    get(t.tensor.shape.data(), rank * sizeof(int64_t));
    t.tensor.data.resize(t.tensor.numElements());
    get(t.tensor.data.data(), t.tensor.data.size() * sizeof(double));
    if (seen.insert(t.name).second)
      tensors.push_back(std::move(t));
  }
  return Error::success();
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
  SmallString<128> dir = sys::path::parent_path(path);
  if (dir.empty())
    dir = ".";
  if (!sys::fs::is_directory(dir))
    return option + " " + path.str() + ": there is no directory '" +
           dir.str().str() + "'";
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

/// The checkpoint of `steps` steps in a --checkpoint-dir.
static std::string checkpointPath(StringRef dir, int64_t steps) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%08lld.safetensors",
                static_cast<long long>(steps));
  SmallString<128> path(dir);
  sys::path::append(path, name);
  return path.str().str();
}

/// The complete checkpoints of a --checkpoint-dir, oldest first, by the
/// steps done in their names (a writer killed mid-save leaves only a
/// `.tmp-` file, which is not one of them).
static std::vector<std::pair<int64_t, std::string>>
listCheckpoints(StringRef dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef name = sys::path::filename(it->path());
    int64_t n;
    if (name.consume_front("step-") && name.consume_back(".safetensors") &&
        !name.getAsInteger(10, n))
      found.push_back({n, it->path()});
  }
  llvm::sort(found);
  return found;
}

static int64_t peakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

/// Tokens (a GPT's token ids) or samples (the MLP's rows) of a global batch.
static double itemsPerBatch(ArrayRef<strata::Tensor> batch, bool samples) {
  return samples ? double(batch[0].shape[0]) : double(batch[0].numElements());
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

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  strata::registerAllStrataPasses();
  strata::parseToolCommandLine(
      argc, argv,
      "Strata runner: compiles a training program with a strategy and "
      "trains it\n",
      {&trainCategory, &dataCategory, &outputCategory, &launchCategory});

  if (backend == "cuda")
    return fail("--backend cuda is not implemented yet (the CUDA runtime is "
                "future work); use --backend cpu");
  if (backend != "cpu" && backend != "reference")
    return fail("unknown --backend '" + backend +
                "' (expected cpu or reference)");
  if (!emit.empty() && emit != "obj" && emit != "mlir")
    return fail("unknown --emit '" + emit + "' (expected obj or mlir)");
  if (!emit.empty() && outputFile.empty())
    return fail("--emit needs -o FILE");
  if (threads.getNumOccurrences() && (threads < 1 || threads > 4096))
    return fail("--cpu-threads " + Twine(threads) +
                " is out of range: give 1 to 4096 threads per rank, or leave "
                "it out to divide the cores among the ranks of this machine");
  if (steps < 0 || steps > (int64_t(1) << 53))
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
  if (!resumeFrom.empty() && !initFile.empty())
    return fail("--resume and --init both give the initial state: use one");
  if (!checkpointDir.empty()) {
    if (std::error_code ec = sys::fs::create_directories(checkpointDir))
      return fail("--checkpoint-dir " + checkpointDir +
                  ": cannot create it (" + ec.message() + ")");
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
  bool underMpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                  std::getenv("PMI_SIZE") != nullptr;
  if (nproc < 1)
    return fail("--nproc must be >= 1");
  if (!underMpi && nproc > 1) {
    if (int code = preflight(nproc))
      return code;
    return launchRanks(argc, argv);
  }
  if (underMpi) {
    MPI_Init(&argc, &argv);
    mpiRunning = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    stop::install(worldRank);
  }
  MpiCommunicator communicator;
  bool rank0 = worldRank == 0;
  if (!traceFile.empty() && backend != "cpu")
    return fail("--trace needs --backend cpu");
  strata::StrategyContext context;
  context.worldSize = worldSize;
  strata::Strategy strategy;
  if (!strategyFile.empty()) {
    auto loaded = strata::loadStrategy(strategyFile, context);
    if (!loaded) {
      std::string message = toString(loaded.takeError());
      if (rank0)
        errs() << message;
      return failEverywhere("invalid strategy");
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
  auto input = mlir::openInputFile(programFile, &error);
  if (!input)
    return failEverywhere(error, /*diagnosticsPrinted=*/false);
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &mlirContext);
  if (!module)
    return failEverywhere("cannot parse " + programFile);

  // The data stream draws global batches from the program as written.
  auto written = module->lookupSymbol<mlir::func::FuncOp>(
      strata::kStepFunctionName);
  if (!written)
    return fail(programFile + " has no @" + strata::kStepFunctionName +
                " function");
  if (Error err = strata::checkBatchSplit(strategy, written, worldSize)) {
    if (rank0)
      errs() << toString(std::move(err));
    return failEverywhere("the batch does not split", /*diagnosticsPrinted=*/true);
  }
  auto data =
      strata::DataStream::create(written, dataFile, dataFormat, seed);
  if (!data)
    return failEverywhere(toString(data.takeError()),
                          /*diagnosticsPrinted=*/false);

  std::vector<strata::PlannedPass> plan =
      strata::planPasses(strategy, context.worldSize, worldRank);
  mlir::PassManager pm(&mlirContext);
  if (Error err = strata::addPlannedPasses(pm, plan, strategy)) {
    if (rank0)
      errs() << toString(std::move(err)) << "\n";
    return failEverywhere("cannot compile the strategy");
  }
  if (auto code = checkEverywhere(mlir::succeeded(pm.run(*module)),
                                  "compilation failed"))
    return *code;

  auto step = module->lookupSymbol<mlir::func::FuncOp>(
      strata::kStepFunctionName);
  if (!step)
    return fail(programFile + " has no @" + strata::kStepFunctionName +
                " function");

  if (!emit.empty()) {
    if (emit == "obj") {
      if (Error err = strata::CpuExecutable::emitObject(*module, outputFile))
        return fail(toString(std::move(err)));
      return 0;
    }
    mlir::PassManager lower(&mlirContext);
    lower.addPass(strata::createStrataLowerToRuntime());
    if (mlir::failed(lower.run(*module)))
      return fail("cannot lower the program to the CPU runtime");
    if (Error err = writeOutputFile(
            outputFile, [&](raw_ostream &os) { module->print(os); }))
      return fail(toString(std::move(err)));
    return 0;
  }

  std::unique_ptr<strata::CpuExecutable> executable;
  int64_t effectiveThreads = 1;
  if (backend == "cpu") {
    strata::CpuOptions cpuOptions;
    cpuOptions.seed = seed;
    cpuOptions.rank = worldRank;
    cpuOptions.threads = threads;
    if (threads == 0) {
      // The machine's cores shared among the ranks that run on it.
      int64_t local = 1;
      if (const char *n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
        local = std::max(1, std::atoi(n));
      cpuOptions.threads = std::max<int64_t>(
          1, int64_t(std::thread::hardware_concurrency()) / local);
    }
    effectiveThreads = cpuOptions.threads;
    cpuOptions.trace = !traceFile.empty();
    if (mpiRunning) {
      cpuOptions.collective = &MpiCommunicator::runtimeCollective;
      if (!blockingCollectives)
        cpuOptions.wait = &MpiCommunicator::runtimeWait;
      cpuOptions.collectiveUser = &communicator;
      cpuOptions.send = &MpiCommunicator::runtimeSend;
      cpuOptions.recv = &MpiCommunicator::runtimeRecv;
      cpuOptions.pointToPointUser = &communicator;
    }
    auto compiled = strata::CpuExecutable::compile(*module, cpuOptions);
    std::string message =
        compiled ? std::string() : toString(compiled.takeError());
    if (auto code = checkEverywhere(bool(compiled), message,
                                    /*diagnosticsPrinted=*/false))
      return *code;
    executable = std::move(*compiled);
    stop::executable.store(executable.get());
  }

  llvm::StringMap<strata::Tensor> state = strata::initialState(*module, seed);
  // A checkpoint resumes the data stream where it stopped.
  int64_t firstStep = 0;
  std::string startFrom = initFile;
  bool scanned = false;
  if (!resumeFrom.empty()) {
    if (sys::fs::is_directory(resumeFrom) ||
        (resumeFrom == checkpointDir && !sys::fs::exists(resumeFrom))) {
      // The newest complete checkpoint that loads (a damaged newer one is
      // reported and passed over).
      scanned = true;
      auto found = listCheckpoints(resumeFrom);
      for (auto it = found.rbegin(); it != found.rend(); ++it) {
        llvm::StringMap<strata::Tensor> loaded = state;
        auto done = strata::loadCheckpoint(*module, it->second, loaded);
        if (done) {
          state = std::move(loaded);
          firstStep = *done;
          startFrom = it->second;
          break;
        }
        if (rank0)
          WithColor::warning(errs(), "strata-run")
              << "passing over " << toString(done.takeError()) << "\n";
      }
      if (startFrom.empty() && rank0 && !quiet)
        errs() << "strata-run: no checkpoint in " << resumeFrom
               << " yet: starting at step 0\n";
    } else {
      startFrom = resumeFrom;
    }
  }
  if (!startFrom.empty() && !scanned) {
    auto done = strata::loadCheckpoint(*module, startFrom, state);
    if (!done)
      return fail(toString(done.takeError()));
    firstStep = *done;
  }
  if (!resumeFrom.empty() && !startFrom.empty() && rank0 && !quiet)
    errs() << "strata-run: resuming from " << startFrom << " after step "
           << firstStep << "\n";
  // Steps to run: --steps more, or up to --steps in all when resuming.
  const int64_t lastStep =
      resumeFrom.empty() ? firstStep + steps
                         : std::max<int64_t>(firstStep, int64_t(steps));
  const int64_t runSteps = lastStep - firstStep;
  if (executable)
    if (Error err = executable->setState(state))
      return fail(toString(std::move(err)));

  // Progress lines on stderr from rank 0 (stdout keeps the `step <i> loss
  // <v>` lines that scripts parse): every `--log-every` steps, and the last.
  int64_t every = logEvery > 0 ? int64_t(logEvery)
                               : std::max<int64_t>(1, (runSteps + 9) / 10);
  bool progress = !quiet && rank0;
  // Tokens (GPT) or samples (MLP) of one global batch.
  bool samples = data->names()[0] == "features";
  StringRef unit = samples ? "samples" : "tokens";
  std::vector<double> losses, stepTimes, recvWaits;
  json::Array traceEvents;
  std::vector<strata::NamedTensor> batches;
  strata::reference::EvalOptions options;
  options.seed = seed;
  if (mpiRunning)
    options.communicator = &communicator;
  // An output that cannot be written (a full disk) is reported, and the
  // others are still written: the run's results are not lost with it.
  int status = 0;
  auto outputFailed = [&](Error err) {
    WithColor::error(errs(), "strata-run") << toString(std::move(err)) << "\n";
    status = 1;
  };
  // Writes the state after `done` steps to `path`: whole tensors (with
  // sharding, each rank holds the optimizer state of the parameters it
  // owns, and a pipeline stage the parameters of its stage, so rank 0
  // gathers everyone's first; every rank takes part). Returns an exit code
  // when the job fails.
  auto writeState = [&](const std::string &path,
                        int64_t done) -> std::optional<int> {
    if (executable)
      executable->getState(state);
    auto tensors = strata::checkpointTensors(*module, state);
    if (!tensors)
      return fail(toString(tensors.takeError()));
    if (mpiRunning && (strategy.sharding.enable || strategy.pipeline.enable))
      if (Error err = gatherTensors(*tensors))
        return fail(toString(std::move(err)));
    if (rank0)
      if (Error err = strata::writeCheckpoint(path, *tensors, done))
        outputFailed(std::move(err));
    return std::nullopt;
  };
  // A --save-every checkpoint, then the oldest beyond --keep-checkpoints go.
  auto checkpoint = [&](int64_t done) -> std::optional<int> {
    std::string path = checkpointPath(checkpointDir, done);
    if (auto code = writeState(path, done))
      return code;
    if (rank0 && keepCheckpoints > 0) {
      auto all = listCheckpoints(checkpointDir);
      for (size_t k = 0; k + size_t(keepCheckpoints) < all.size(); ++k)
        sys::fs::remove(all[k].second);
    }
    return std::nullopt;
  };
  // Temp files that a writer killed mid-save left (`FILE.tmp-XXXXXX`, never
  // loaded): of the checkpoints and of --save.
  auto removeStaleTemps = [](StringRef dir, function_ref<bool(StringRef)> of) {
    std::error_code ec;
    for (sys::fs::directory_iterator it(dir.empty() ? "." : dir, ec), end;
         it != end && !ec; it.increment(ec))
      if (of(sys::path::filename(it->path())))
        sys::fs::remove(it->path());
  };
  if (rank0 && !checkpointDir.empty())
    removeStaleTemps(checkpointDir, [](StringRef name) {
      return name.starts_with("step-") && name.contains(".safetensors.tmp-");
    });
  if (rank0 && !saveFile.empty()) {
    std::string prefix = sys::path::filename(saveFile).str() + ".tmp-";
    removeStaleTemps(sys::path::parent_path(saveFile), [&](StringRef name) {
      return name.starts_with(prefix) && name.size() == prefix.size() + 6;
    });
  }
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = firstStep; i < lastStep; ++i) {
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
    // This rank's rows of the global batch (data parallelism).
    std::vector<strata::Tensor> local = batch;
    for (auto [tensor, arg] : llvm::zip(local, step.getArguments())) {
      int64_t rows =
          cast<mlir::RankedTensorType>(arg.getType()).getDimSize(0);
      if (rows == tensor.shape[0])
        continue;
      int64_t shard = worldRank % (tensor.shape[0] / rows);
      int64_t width = tensor.numElements() / tensor.shape[0];
      strata::Tensor part = tensor;
      part.shape[0] = rows;
      part.data.assign(tensor.data.begin() + shard * rows * width,
                       tensor.data.begin() + (shard + 1) * rows * width);
      tensor = std::move(part);
    }
    double waitBefore = communicator.recvWaitMs;
    double traceBegin = executable ? executable->nowUs() : 0;
    auto t0 = std::chrono::steady_clock::now();
    auto results =
        executable ? executable->step(local)
                   : strata::reference::evaluate(step, local, state, options);
    auto t1 = std::chrono::steady_clock::now();
    if (!results)
      return fail("step " + Twine(i) + ": " + toString(results.takeError()));
    if (mpiRunning)
      if (Error err = communicator.flush())
        return fail("step " + Twine(i) + ": " + toString(std::move(err)));
    if (!traceFile.empty()) {
      double traceEnd = executable->nowUs();
      json::Object stepEvent{{"name", formatv("step {0}", i).str()},
                             {"cat", "step"},
                             {"ph", "X"},
                             {"ts", traceBegin},
                             {"dur", traceEnd - traceBegin},
                             {"pid", worldRank},
                             {"tid", 0}};
      traceEvents.push_back(std::move(stepEvent));
      for (const strata::TraceEvent &e : executable->takeTrace()) {
        StringRef site(e.site), name = site.rsplit(": ").second;
        if (name.empty())
          name = site;
        traceEvents.push_back(json::Object{
            {"name", name.str()}, // (a json::Value keeps a StringRef)
            {"cat", e.role.empty() ? std::string("op") : e.role},
            {"ph", "X"},
            {"ts", e.begin},
            {"dur", e.end - e.begin},
            {"pid", worldRank},
            {"tid", 0},
            {"args", json::Object{{"site", e.site}, {"step", i}}}});
      }
    }
    double loss = (*results)[0].data[0];
    if (!std::isfinite(loss))
      return fail("step " + Twine(i) + ": the loss is " +
                  (std::isnan(loss) ? "NaN" : "infinite"));
    losses.push_back(loss);
    stepTimes.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
    recvWaits.push_back(communicator.recvWaitMs - waitBefore);
    if (rank0) {
      outs() << formatv("step {0} loss {1}\n", i,
                        strata::formatStrategyNumber(loss));
      outs().flush();
    }
    if (saveEvery > 0 && (i + 1) % saveEvery == 0 && i + 1 < lastStep)
      if (auto code = checkpoint(i + 1))
        return *code;
    if (progress && ((i - firstStep + 1) % every == 0 ||
                     i + 1 == lastStep)) {
      double elapsed = std::chrono::duration<double>(t1 - start).count();
      int64_t done = i - firstStep + 1;
      double perStep = elapsed / double(done);
      errs() << formatv("[{0}/{1}] loss {2:F4} | {3:F2} ms/step | {4} {5}/s "
                        "| ETA {6} | peak {7}\n",
                        i + 1, lastStep, loss, stepTimes.back(),
                        formatCount(itemsPerBatch(batch, samples) /
                                    (stepTimes.back() / 1000.0)),
                        unit, formatSeconds(perStep * double(runSteps - done)),
                        formatBytes(peakRssBytes()));
      errs().flush();
    }
  }

  // The last checkpoint and --save.
  if (saveEvery > 0 &&
      !sys::fs::exists(checkpointPath(checkpointDir, lastStep)))
    if (auto code = checkpoint(lastStep))
      return *code;
  if (!saveFile.empty())
    if (auto code = writeState(saveFile, lastStep))
      return *code;
  if (executable)
    executable->getState(state);
  if (!dumpBatches.empty() && rank0)
    if (Error err = strata::writeSafetensors(dumpBatches, batches))
      outputFailed(std::move(err));

  strata::MemoryPlan memoryPlan = strata::planMemory(step);
  int64_t planned = memoryPlan.peakBytes();
  std::vector<int64_t> allActivations = gatherInt64(memoryPlan.livePeakBytes);
  // The measured bubble: the share of the step a rank spends blocked in
  // receives (steps after the first, which also pays for warm-up).
  double waitSum = 0, stepSum = 0;
  for (size_t i = stepTimes.size() > 1 ? 1 : 0; i < stepTimes.size(); ++i) {
    waitSum += recvWaits[i];
    stepSum += stepTimes[i];
  }
  std::vector<int64_t> allBubble =
      gatherInt64(stepSum > 0 ? int64_t(1e6 * waitSum / stepSum) : 0);
  int64_t measured = peakRssBytes();
  strata::TrainingMemory training = strata::trainingMemory(*module);
  std::vector<int64_t> allPlanned = gatherInt64(planned),
                       allMeasured = gatherInt64(measured),
                       allParams = gatherInt64(training.paramBytes),
                       allGrads = gatherInt64(training.gradBytes),
                       allStates = gatherInt64(training.stateBytes);
  if (!traceFile.empty()) {
    traceEvents.push_back(json::Object{
        {"name", "process_name"},
        {"ph", "M"},
        {"pid", worldRank},
        {"args", json::Object{{"name", formatv("rank {0}", worldRank).str()}}}});
    // Every rank's events, as JSON text, gathered on rank 0.
    std::string mine;
    {
      raw_string_ostream os(mine);
      os << json::Value(std::move(traceEvents));
    }
    mine = StringRef(mine).drop_front().drop_back().str(); // "[...]" -> "..."
    std::vector<std::string> all = gatherBytes(mine);
    if (rank0) {
      if (Error err = writeOutputFile(traceFile, [&](raw_ostream &os) {
            os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
            bool first = true;
            for (const std::string &part : all) {
              if (part.empty())
                continue;
              os << (first ? "" : ",") << "\n" << part;
              first = false;
            }
            os << "\n]}\n";
          }))
        outputFailed(std::move(err));
    }
  }
  // The run's figures: wall time, the mean step after the first (which
  // pays for warm-up), throughput at that step time.
  double wallSeconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  double meanStepMs = 0;
  {
    size_t first = stepTimes.size() > 1 ? 1 : 0;
    for (size_t i = first; i < stepTimes.size(); ++i)
      meanStepMs += stepTimes[i];
    if (stepTimes.size() > first)
      meanStepMs /= double(stepTimes.size() - first);
  }
  double throughput =
      meanStepMs > 0 && runSteps > 0
          ? itemsPerBatch(data->batch(firstStep), samples) /
                (meanStepMs / 1000.0)
          : 0.0;
  if (progress) {
    errs() << formatv("summary: {0} steps in {1}", runSteps,
                      formatSeconds(wallSeconds));
    if (runSteps > 0)
      errs() << formatv(" | {0:F1} ms/step (mean{1}) | {2} {3}/s | final "
                        "loss {4:F4}",
                        meanStepMs, runSteps > 1 ? " after the first" : "",
                        formatCount(throughput), unit, losses.back());
    errs() << "\n";
    for (int r = 0; r < worldSize; ++r)
      errs() << formatv("  rank {0}: planned peak {1}, measured peak {2}\n",
                        r, formatBytes(allPlanned[r]),
                        formatBytes(allMeasured[r]));
    errs().flush();
  }
  if (!reportFile.empty() && rank0) {
    auto strategyJson = json::parse(strata::toJson(strategy));
    if (!strategyJson)
      return fail(toString(strategyJson.takeError()));
    json::Array lossArray, timeArray;
    for (double l : losses)
      lossArray.push_back(l);
    for (double t : stepTimes)
      timeArray.push_back(t);
    json::Object report{
        {"world_size", worldSize},
        {"backend", backend.getValue()},
        {"strategy", std::move(*strategyJson)},
        {"losses", std::move(lossArray)},
        {"step_time_ms", std::move(timeArray)},
        {"steps", runSteps},
        {"wall_time_s", wallSeconds},
        // Mean of the steps after the first (which pays for warm-up).
        {"mean_step_time_ms", meanStepMs},
        {samples ? "samples_per_s" : "tokens_per_s", throughput},
        {"final_loss", losses.empty() ? json::Value(nullptr)
                                      : json::Value(losses.back())},
        // The compile-time plan (arena + parameters and state + batch);
        // the CPU backend allocates exactly it (plus kernel scratch, below),
        // the reference backend computes in doubles outside it.
        {"planned_peak_bytes", json::Array(allPlanned)},
        {"arena_bytes", memoryPlan.arenaBytes},
        {"scratch_bytes", executable ? executable->scratchBytes() : 0},
        {"threads", effectiveThreads},
        {"measured_peak_bytes", json::Array(allMeasured)},
        // ZeRO's accounting per rank: parameters, the gradients its
        // optimizer consumes, optimizer state (sharded by strata-sharding).
        {"param_bytes", json::Array(allParams)},
        {"grad_bytes", json::Array(allGrads)},
        {"optimizer_state_bytes", json::Array(allStates)},
        // The memory plan's peak of step buffers (activations and the
        // like) per rank.
        {"activation_peak_bytes", json::Array(allActivations)},
    };
    if (strategy.pipeline.enable) {
      const strata::PipelineSection &p = strategy.pipeline;
      json::Array measured;
      for (int64_t b : allBubble)
        measured.push_back(double(b) / 1e6);
      report["pipeline"] = json::Object{
          {"schedule", p.schedule_mode},
          {"pp_degree", p.pp_degree},
          {"vpp_degree", p.vpp_degree},
          {"micro_batches", p.accumulate_steps},
          {"bubble_formula",
           strata::pipelineBubble(p.schedule_mode, p.pp_degree,
                                  p.accumulate_steps, p.vpp_degree)},
          {"bubble_measured", std::move(measured)},
      };
    }
    if (Error err = writeOutputFile(reportFile, [&](raw_ostream &os) {
          os << formatv("{0:2}", json::Value(std::move(report))) << "\n";
        }))
      outputFailed(std::move(err));
  }
  if (mpiRunning)
    MPI_Finalize();
  return status;
}
