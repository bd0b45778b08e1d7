//===- Trainer.h - Compile a program for a rank and train it ----*- C++ -*-===//
//
// The training library under every front end (strata-run, the C API):
//
//   auto trainer = Trainer::create(std::move(program), strategy, options);
//   trainer->compile();            // the strategy's passes for this rank
//   trainer->createExecutable();   // the backend, seeded initial state
//   trainer->loadCheckpoint(path); // or resume from a directory
//   for (i...) trainer->step(globalBatch(i));
//   trainer->saveCheckpoint(path, steps);
//   trainer->summarize();          // per-rank figures, the JSON report
//
// A Trainer is one rank of a job of `worldSize` ranks. Calls marked
// *collective* must be made by every rank, in the same order; they use the
// Communicator (required when worldSize > 1). Front ends keep what is
// theirs: parsing the command line, launching ranks, reading data, printing.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TRAIN_TRAINER_H
#define STRATA_TRAIN_TRAINER_H

#include "strata/Analysis/MemoryPlan.h"
#include "strata/Execution/Communicator.h"
#include "strata/Execution/Executable.h"
#include "strata/Strategy/Strategy.h"
#include "strata/Train/Train.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata {

/// Which executable runs the step.
enum class Backend {
  /// The double-precision evaluator (the executable specification).
  Reference,
  /// The lowered step JIT-compiled against the CPU runtime.
  Cpu,
  /// The lowered step JIT-compiled against the CUDA runtime (loaded when
  /// the executable is created).
  Cuda,
};

/// "cpu" / "cuda" / "reference"; an error names the choices.
llvm::Expected<Backend> parseBackend(llvm::StringRef name);
llvm::StringRef backendName(Backend backend);

/// The most kernel threads a rank may ask for.
constexpr int64_t kMaxThreads = 4096;

struct TrainerOptions {
  int64_t worldSize = 1;
  int64_t rank = 0;
  Backend backend = Backend::Cpu;
  /// Run seed: initial weights, dropout, the synthetic data.
  uint64_t seed = 0;
  /// Kernel threads of this rank (CPU backend).
  int64_t threads = 1;
  /// Record every op of every step (compiled backends; writeTrace).
  bool trace = false;
  /// The CUDA backend's device (-1: by the local rank on the machine) and
  /// whether its f32 GEMMs may use TF32.
  int64_t device = -1;
  bool tf32 = false;
  /// The CPU backend times each distinct f32 GEMM through oneDNN's matmul
  /// primitive and its sgemm once and runs the faster.
  bool gemmAutotune = false;
  /// Complete every collective where it starts (no overlap).
  bool blockingCollectives = false;
  /// The job's ranks; required when worldSize > 1, and its size must be
  /// worldSize. Must outlive the Trainer.
  Communicator *communicator = nullptr;
};

/// The error of a call every rank makes together, on a rank where it did
/// not fail itself: it failed on another rank, which reports its own error
/// (a tool that prints every rank's errors may leave these out).
class PeerFailure : public llvm::ErrorInfo<PeerFailure> {
public:
  static char ID;
  explicit PeerFailure(std::string message) : text(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << text; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string text;
};

/// Every rank's figures, gathered on rank 0 (rank order), after a run.
struct RunSummary {
  std::vector<int64_t> plannedPeakBytes, measuredPeakBytes, paramBytes,
      gradBytes, stateBytes, activationPeakBytes;
  /// Share of the step each rank spent blocked in receives (after the
  /// first step).
  std::vector<double> bubble;
  /// Mean step after the first (which pays for warm-up), and the items
  /// (tokens or samples) per second at that step time.
  double meanStepMs = 0, throughput = 0;
  double wallSeconds = 0;
  /// Under loss scaling: the steps whose update was skipped (non-finite
  /// gradients) and the loss scale after the last step, on rank 0.
  int64_t skippedSteps = 0;
  std::optional<double> lossScale;
};

class Trainer {
public:
  ~Trainer();

  /// Takes the program as written (its step function's arguments are the
  /// global batch) and prepares the strategy's passes for (worldSize,
  /// rank), the first of which checks that the batch splits over the
  /// data-parallel ranks and micro-batches (in compile()). Fails alike on
  /// every rank.
  static llvm::Expected<std::unique_ptr<Trainer>>
  create(mlir::OwningOpRef<mlir::ModuleOp> program, Strategy strategy,
         const TrainerOptions &options);

  /// In a job of several ranks: an error on every rank when one was given
  /// another program, strategy, seed or backend than rank 0 (its
  /// collectives would not match, or it would train other weights), or,
  /// with `data` (DataStream::fingerprint), other training data. Every
  /// rank calls it, after create() succeeded on every rank and before
  /// compile(); fails alike on every rank.
  llvm::Error checkSameJob(std::optional<uint64_t> data = std::nullopt);

  /// Runs the strategy's passes; diagnostics go to the MLIRContext's
  /// handler. May fail on one rank alone (each compiles its own stage or
  /// shard).
  llvm::Error compile();

  /// The compiled program lowered to the runtime ABI, as text.
  llvm::Error emitLowered(llvm::raw_ostream &os);
  /// The compiled program as an object file (link it against the runtime);
  /// with TrainerOptions::trace, its step records every op's time once the
  /// host enables tracing (strata_rt_enable_trace).
  llvm::Error emitObject(llvm::StringRef path);

  /// Creates the backend's executable with the seeded initial weights and
  /// state. May fail on one rank alone.
  llvm::Error createExecutable();

  /// Replaces weights and state by a checkpoint's (whole tensors, any
  /// strategy); nothing changes on error. Returns what the header says of
  /// the run that wrote it (the steps it had done, its seed).
  /// Tensors of the file that are neither a parameter of the program as
  /// written nor state of one (nor the step count or loss scale) are a
  /// warning through the MLIRContext's handler: the file is another
  /// model's.
  llvm::Expected<CheckpointRun> loadCheckpoint(llvm::StringRef path);
  /// The newest checkpoint of `dir` that loads on every rank (one that
  /// fails on any rank is passed over by all: reported to `passedOver` on
  /// rank 0 with the failing ranks' reasons): its steps and path, or
  /// nothing when `dir` has no checkpoint. An error when it has some but
  /// none loads, or when the ranks see different checkpoints there.
  /// Collective in a multi-rank job.
  llvm::Expected<std::optional<std::pair<CheckpointRun, std::string>>>
  resumeFromDirectory(llvm::StringRef dir,
                      llvm::function_ref<void(llvm::Error)> passedOver);

  /// Writes weights and state after `stepsDone` steps to `path`, with the
  /// run's seed (rank 0 writes, atomically). Collective: sharded optimizer
  /// state and pipeline stages are gathered on rank 0 first; every rank
  /// checks `stepsDone` (the same on every rank) and returns whether rank
  /// 0's write succeeded.
  llvm::Error saveCheckpoint(llvm::StringRef path, int64_t stepsDone);
  /// saveCheckpoint into `dir` under the name of `stepsDone`
  /// (checkpointPath), then removes the oldest beyond `keep` (0 keeps all).
  llvm::Error saveToDirectory(llvm::StringRef dir, int64_t stepsDone,
                              int64_t keep);
  /// "DIR/step-00000042.safetensors".
  static std::string checkpointPath(llvm::StringRef dir, int64_t steps);
  /// The complete checkpoints of `dir`, oldest first (a writer killed
  /// mid-save leaves only a `.tmp-` file, which is not one of them).
  static std::vector<std::pair<int64_t, std::string>>
  listCheckpoints(llvm::StringRef dir);

  /// Trains one step on the global batch (the program's arguments as
  /// written): takes this rank's rows, runs the executable, completes the
  /// step's sends. Returns the loss; a NaN or infinite loss is an error.
  /// Collective in a multi-rank job (the program's collectives).
  llvm::Expected<double> step(int64_t index,
                              llvm::ArrayRef<reference::Tensor> globalBatch);

  /// Writes the trace of every rank's ops (Chrome trace JSON) on rank 0.
  /// Collective.
  llvm::Error writeTrace(llvm::StringRef path);
  /// Gathers every rank's figures on rank 0. Collective.
  RunSummary summarize();
  /// The run's JSON report from a summary (rank 0).
  llvm::json::Object report(const RunSummary &summary) const;

  mlir::ModuleOp module() { return *program; }
  /// The step function (the compiled one after compile()).
  mlir::func::FuncOp stepFunction();
  const Strategy &strategy() const { return plan; }
  const TrainerOptions &options() const { return opts; }
  /// Null before createExecutable().
  Executable *executable() { return exe.get(); }
  /// The memory plan of the compiled step.
  const MemoryPlan &memoryPlan();

  /// Losses and step times (ms) of the steps run, and the tokens (a GPT's
  /// token ids) or samples (the MLP's rows) of one global batch.
  const std::vector<double> &losses() const { return lossHistory; }
  const std::vector<double> &stepTimesMs() const { return stepTimes; }
  double itemsPerBatch() const { return items; }
  /// "tokens" or "samples".
  llvm::StringRef itemUnit() const { return samples ? "samples" : "tokens"; }
  /// Under loss scaling, the steps of this run whose update was skipped,
  /// and the loss scale now.
  int64_t skippedSteps() const { return skipped; }
  std::optional<double> lossScale() const;
  /// Whether `skippedNow` skipped steps of `steps` are worth a warning: not
  /// while a dynamic scale finds its level (the scale above 1, and, at the
  /// end of a run, some step trained).
  bool skippedStepsMatter(int64_t skippedNow, int64_t steps,
                          bool runEnded) const;
  /// "float16 gradients overflowed ... the scale is now S" and what to do.
  std::string overflowReason() const;

private:
  Trainer() = default;
  bool multiRank() const { return opts.communicator != nullptr; }

  mlir::OwningOpRef<mlir::ModuleOp> program;
  Strategy plan;
  TrainerOptions opts;
  std::unique_ptr<mlir::PassManager> passes;
  std::unique_ptr<Executable> exe;
  std::optional<MemoryPlan> memory;
  /// The parameters of the program as written (every pipeline stage's):
  /// what a checkpoint of this model may hold beside their state.
  llvm::StringSet<> modelParameters;
  /// `local`, this rank's outcome of a step every rank takes before a
  /// collective; in a job of several ranks, on a rank where it succeeded,
  /// the PeerFailure "rank R<failedElsewhere>" when it failed on rank R
  /// (the first). Every rank calls it.
  llvm::Error everyRank(llvm::Error local, const llvm::Twine &failedElsewhere);
  /// A hash of what every rank of the job must be given alike (checkSameJob).
  uint64_t jobFingerprint = 0;
  std::vector<double> lossHistory, stepTimes, receiveWaits;
  /// The index of the first step trained (of lossHistory's first loss).
  int64_t firstStep = 0;
  /// Recorded ops and steps (--trace), written as Chrome trace JSON at the
  /// end: sites and roles are interned, as they repeat every step.
  struct TraceRecord {
    double begin, end; ///< microseconds of the steady clock
    int64_t step;
    uint32_t site, role; ///< into traceStrings
    bool wait, isStep;
  };
  std::vector<TraceRecord> traceRecords;
  std::vector<std::string> traceStrings;
  llvm::StringMap<uint32_t> traceIndex;
  uint32_t intern(llvm::StringRef text);
  std::optional<std::chrono::steady_clock::time_point> started;
  /// The loss scale's state (empty without loss scaling) and the steps
  /// it skipped (the optimizer's step counter did not advance).
  std::string lossScaleState;
  int64_t skipped = 0;
  /// The step counter after the last step (read under loss scaling).
  std::optional<double> stepCount;
  /// A scalar parameter or state of the executable.
  std::optional<double> scalarState(llvm::StringRef name) const;
  double items = 0;
  bool samples = false;
};

} // namespace strata

#endif // STRATA_TRAIN_TRAINER_H
