//===- Trainer.cpp - Compile a program for a rank and train it ------------===//

#include "strata/Train/Trainer.h"
#include "strata/Support/ReplaceFile.h"

#include "strata/Dialect/Program.h"
#include "strata/Execution/JitExecutable.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"
#include "strata/Passes/PipelineSchedule.h"
#include "strata/Reference/InitialValues.h"
#include "strata/Strategy/PassPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sys/resource.h>
#include <sys/sysinfo.h>

using namespace llvm;

namespace strata {

static Error trainerError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

Expected<Backend> parseBackend(StringRef name) {
  if (name == "cpu")
    return Backend::Cpu;
  if (name == "reference")
    return Backend::Reference;
  if (name == "cuda")
    return Backend::Cuda;
  return trainerError("unknown backend '" + name +
                      "' (expected cpu, cuda or reference)");
}

StringRef backendName(Backend backend) {
  switch (backend) {
  case Backend::Cpu:
    return "cpu";
  case Backend::Cuda:
    return "cuda";
  case Backend::Reference:
    break;
  }
  return "reference";
}

static int64_t peakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

Trainer::~Trainer() = default;

Expected<std::unique_ptr<Trainer>>
Trainer::create(mlir::OwningOpRef<mlir::ModuleOp> program, Strategy strategy,
                const TrainerOptions &options) {
  if (options.worldSize < 1)
    return trainerError("world size " + Twine(options.worldSize) +
                        ": a job has at least one rank");
  if (Expected<StrategyContext> job =
          jobContext(options.worldSize, options.rank);
      !job)
    return job.takeError();
  if (options.threads < 1 || options.threads > kMaxThreads)
    return trainerError("give 1 to " + Twine(kMaxThreads) + " threads (" +
                        Twine(options.threads) + " asked for)");
  if (options.gemmAutotune && options.backend != Backend::Cpu)
    return trainerError("GEMM autotuning is for the cpu backend (it chooses "
                        "between oneDNN's GEMM paths), not " +
                        backendName(options.backend));
  if (options.tf32 && options.backend != Backend::Cuda)
    return trainerError("TF32 is for the cuda backend, not " +
                        backendName(options.backend));
  if (options.worldSize > 1 && !options.communicator)
    return trainerError("a job of " + Twine(options.worldSize) +
                        " ranks needs a communicator");
  if (options.communicator &&
      (options.communicator->size() != options.worldSize ||
       options.communicator->rank() != options.rank))
    return trainerError("the options give rank " + Twine(options.rank) +
                        " of a world of " + Twine(options.worldSize) +
                        ", but the MPI communicator is rank " +
                        Twine(options.communicator->rank()) + " of " +
                        Twine(options.communicator->size()) +
                        ": give the communicator's rank and size");
  std::unique_ptr<Trainer> trainer(new Trainer());
  trainer->program = std::move(program);
  trainer->plan = std::move(strategy);
  trainer->opts = options;
  Expected<mlir::func::FuncOp> written = findStepFunction(*trainer->program);
  if (!written)
    return written.takeError();
  if (isCompiledStep(*written))
    return trainerError(
        "the program is already compiled (its step returns gradients or "
        "updates parameters, as strata-opt --strategy writes it): give the "
        "program as written, whose step returns its loss; the strategy "
        "compiles it");
  for (ParamOp param : trainer->program->getOps<ParamOp>())
    trainer->modelParameters.insert(param.getSymName());
  // The MLP's batch counts samples (rows of `features`); a GPT's, tokens.
  auto first = written->getNumArguments()
                   ? written->getArgAttrOfType<mlir::StringAttr>(
                         0, strata::StrataDialect::kInputNameAttrName)
                   : mlir::StringAttr();
  trainer->samples = first && first.getValue() == "features";
  if (options.communicator) {
    // The program as written (without locations: ranks may read it from
    // different paths), the strategy as it was understood, the seed and
    // the backend.
    std::string job;
    llvm::raw_string_ostream os(job);
    trainer->program->print(os, mlir::OpPrintingFlags().enableDebugInfo(false));
    os << '\0' << toJson(trainer->plan) << '\0' << options.seed << '\0'
       << backendName(options.backend);
    trainer->jobFingerprint = llvm::xxh3_64bits(job);
  }
  trainer->passes =
      std::make_unique<mlir::PassManager>(trainer->program->getContext());
  if (Error err = addPlannedPasses(
          *trainer->passes,
          planPasses(trainer->plan, options.worldSize, options.rank,
                     options.backend == Backend::Cuda ? "cuda" : "cpu"),
          trainer->plan, options.worldSize))
    return std::move(err);
  return std::move(trainer);
}

char PeerFailure::ID = 0;

Error Trainer::everyRank(Error local, const Twine &failedElsewhere) {
  if (!multiRank())
    return local;
  bool failed = bool(local);
  int64_t first = opts.communicator->firstFailure(!failed);
  if (first >= 0 && !failed)
    return make_error<PeerFailure>(
        ("rank " + Twine(first) + failedElsewhere).str());
  return local;
}

Error Trainer::checkSameJob(std::optional<uint64_t> data) {
  if (!multiRank())
    return Error::success();
  int64_t other = opts.communicator->firstDifferent(jobFingerprint);
  if (other >= 0)
    return trainerError(
        "rank " + Twine(other) +
        " was given another program, strategy, seed or backend than rank 0: "
        "every rank of a job trains the same program with the same "
        "strategy, seed and backend");
  if (data && (other = opts.communicator->firstDifferent(*data)) >= 0)
    return trainerError(
        "rank " + Twine(other) +
        " reads other training data than rank 0 (its data file or directory "
        "holds other bytes): every rank draws its rows of each global batch "
        "from the same data (the same file, or a copy of it on each "
        "machine)");
  return Error::success();
}

mlir::func::FuncOp Trainer::stepFunction() {
  Expected<mlir::func::FuncOp> step = findStepFunction(*program);
  if (!step) {
    consumeError(step.takeError());
    return {};
  }
  return *step;
}

Error Trainer::compile() {
  if (mlir::failed(passes->run(*program)))
    return trainerError("compilation failed");
  if (Expected<mlir::func::FuncOp> step = findStepFunction(*program); !step)
    return trainerError("the compiled program: " + toString(step.takeError()));
  memory.reset();
  return Error::success();
}

Error Trainer::emitLowered(raw_ostream &os) {
  mlir::PassManager lower(program->getContext());
  StrataLowerToRuntimeOptions options;
  options.target = opts.backend == Backend::Cuda ? "cuda" : "cpu";
  options.trace = opts.trace;
  lower.addPass(createStrataLowerToRuntime(options));
  if (mlir::failed(lower.run(*program)))
    return trainerError("cannot lower the program to the " + options.target +
                        " runtime");
  program->print(os);
  return Error::success();
}

Error Trainer::emitObject(StringRef path) {
  return JitExecutable::emitObject(
      *program, path, opts.backend == Backend::Cuda ? "cuda" : "cpu",
      opts.trace);
}

/// This machine's memory in bytes, when the kernel says.
static std::optional<double> machineMemory() {
  struct sysinfo info;
  if (sysinfo(&info) != 0)
    return std::nullopt;
  return double(info.totalram) * double(info.mem_unit);
}

/// The bytes of `module`'s parameters and state, an element of type T taking
/// elementBytes(T): in all, and of the largest tensor.
static std::pair<double, double>
stateBytes(mlir::ModuleOp module,
           function_ref<double(mlir::Type element)> elementBytes) {
  double total = 0, largest = 0;
  for (mlir::Operation &op : *module.getBody()) {
    mlir::RankedTensorType type;
    if (auto p = dyn_cast<ParamOp>(op))
      type = p.getTensorType();
    else if (auto st = dyn_cast<StateOp>(op))
      type = st.getTensorType();
    if (!type)
      continue;
    double bytes =
        elementBytes(type.getElementType()) * double(type.getNumElements());
    total += bytes;
    largest = std::max(largest, bytes);
  }
  return {total, largest};
}

/// Refuses a program whose parameters and optimizer state do not fit in this
/// machine's memory, which would end in an allocation failure (an abort)
/// instead of an error: the reference backend holds them as doubles (8 bytes
/// an element), the CPU runtime in their element types; the CUDA runtime
/// holds them on the device and stages one tensor at a time on the host.
static Error checkStateFits(mlir::ModuleOp module, Backend backend) {
  auto [total, largest] = stateBytes(module, [&](mlir::Type element) {
    return backend == Backend::Reference || !element.isIntOrFloat()
               ? 8.0
               : double((element.getIntOrFloatBitWidth() + 7) / 8);
  });
  std::optional<double> memory = machineMemory();
  double needed = backend == Backend::Cuda ? largest : total;
  if (!memory || needed <= *memory)
    return Error::success();
  const char *what =
      backend == Backend::Reference
          ? "the parameters and optimizer state take {0:F1} GB as the "
            "doubles the reference backend holds them in"
      : backend == Backend::Cuda
          ? "the largest parameter or state takes {0:F1} GB on the host on "
            "its way to the device"
          : "the parameters and optimizer state take {0:F1} GB";
  return trainerError(
      formatv(what, needed / 1e9).str() +
      formatv(", more than this machine's {0:F1} GB of memory", *memory / 1e9)
          .str());
}

/// A checkpoint holds this rank's parameters and optimizer state as doubles
/// while it is saved or loaded: refuses to `what` when they do not fit in
/// this machine's memory (an allocation failure would abort).
static Error checkCheckpointFits(mlir::ModuleOp module, StringRef what) {
  double bytes = stateBytes(module, [](mlir::Type) { return 8.0; }).first;
  std::optional<double> memory = machineMemory();
  if (!memory || bytes <= *memory)
    return Error::success();
  return trainerError(formatv("cannot {0}: a checkpoint holds the parameters "
                              "and optimizer state as doubles, {1:F1} GB, "
                              "more than this machine's {2:F1} GB of memory",
                              what, bytes / 1e9, *memory / 1e9));
}

/// The groups (rank lists) `rank` communicates in: for each communication op
/// of the compiled program, the list of its strata.comm_group that holds the
/// rank; sorted, without repeats, so that every rank sets them up in one
/// order.
static std::vector<std::vector<int64_t>> groupsOf(mlir::ModuleOp module,
                                                  int64_t rank) {
  std::set<std::vector<int64_t>> groups;
  module.walk([&](mlir::Operation *op) {
    auto ref = op->getAttrOfType<mlir::FlatSymbolRefAttr>("group");
    if (!ref)
      return;
    auto group =
        mlir::SymbolTable::lookupNearestSymbolFrom<CommGroupOp>(op, ref);
    if (!group)
      return;
    for (mlir::Attribute list : group.getRanks()) {
      llvm::ArrayRef<int64_t> ranks =
          mlir::cast<mlir::DenseI64ArrayAttr>(list).asArrayRef();
      if (llvm::is_contained(ranks, rank))
        groups.insert(std::vector<int64_t>(ranks.begin(), ranks.end()));
    }
  });
  return {groups.begin(), groups.end()};
}

Error Trainer::createExecutable() {
  // (Every rank learns whether one's state does not fit, before the ranks
  // set up their groups together.)
  if (Error err = everyRank(checkStateFits(*program, opts.backend),
                            "'s parameters and optimizer state do not fit in "
                            "its machine's memory"))
    return err;
  // The loss scale, and the optimizer's step counter beside it (an i64
  // scalar state).
  if (StateOp scale = findLossScaleState(*program))
    lossScaleState = scale.getSymName().str();
  auto counter = mlir::SymbolTable::lookupNearestSymbolFrom<StateOp>(
      *program,
      mlir::StringAttr::get(program->getContext(), kStepCountStateName));
  if (!counter || counter.getTensorType().getRank() != 0 ||
      !counter.getTensorType().getElementType().isInteger(64))
    lossScaleState.clear();
  if (multiRank())
    if (Error err =
            opts.communicator->prepareGroups(groupsOf(*program, opts.rank)))
      return err;
  if (opts.backend == Backend::Cpu || opts.backend == Backend::Cuda) {
    JitOptions jit;
    if (opts.backend == Backend::Cuda) {
      auto cuda = RuntimeLibrary::cuda();
      if (!cuda)
        return cuda.takeError();
      jit.runtime = *cuda;
    }
    jit.seed = opts.seed;
    jit.rank = opts.rank;
    jit.threads = opts.threads;
    jit.device = opts.device;
    jit.tf32 = opts.tf32;
    jit.gemmAutotune = opts.gemmAutotune;
    jit.trace = opts.trace;
    if (opts.communicator)
      jit.communication =
          opts.communicator->runtimeCallbacks(!opts.blockingCollectives);
    auto compiled = JitExecutable::compile(*program, jit);
    if (!compiled)
      return compiled.takeError();
    exe = std::move(*compiled);
  } else {
    if (opts.trace)
      return trainerError("tracing needs a compiled backend (cpu or cuda)");
    reference::EvalOptions eval;
    eval.seed = opts.seed;
    eval.communicator = opts.communicator;
    exe = createReferenceExecutable(stepFunction(), eval);
  }
  // The seeded values, drawn into the executable's own storage.
  reference::InitialValues initial(*program, opts.seed);
  return exe->setState({}, &initial);
}

Expected<CheckpointRun> Trainer::loadCheckpoint(StringRef path) {
  if (!exe)
    return trainerError("a checkpoint is loaded into the executable: create "
                        "it first");
  if (Error err = checkCheckpointFits(*program, "load a checkpoint"))
    return std::move(err);
  StringMap<reference::Tensor> loaded;
  std::vector<std::string> unread;
  auto done = strata::loadCheckpoint(*program, path, loaded, &unread);
  if (!done)
    return done.takeError();
  // What the checkpoint lacks (a state of another optimizer, say) starts as
  // in a fresh run.
  reference::InitialValues initial(*program, opts.seed);
  if (Error err = exe->setState(loaded, &initial))
    return std::move(err);
  stepCount.reset(); // (the checkpoint's, read at the next step)
  // Said once the checkpoint is loaded (nothing changes on an error). What
  // another strategy's run leaves unread is no news: the parameters of
  // other pipeline stages, the step count, mixed precision's loss scale and
  // the state of each ("NAME.SUFFIX": another optimizer's moments, the loss
  // scale's counters).
  auto ofThisModel = [&](StringRef name) {
    auto known = [&](StringRef symbol) {
      return modelParameters.contains(symbol) ||
             symbol == kStepCountStateName || symbol == kLossScaleStateName;
    };
    if (known(name))
      return true;
    for (size_t dot = name.find('.'); dot != StringRef::npos;
         dot = name.find('.', dot + 1))
      if (known(name.take_front(dot)))
        return true;
    return false;
  };
  std::vector<std::string> foreign;
  for (const std::string &name : unread)
    if (!ofThisModel(name))
      foreign.push_back(name);
  if (!foreign.empty()) {
    llvm::sort(foreign);
    constexpr size_t kNamed = 4;
    std::string names;
    for (size_t i = 0; i < std::min(foreign.size(), kNamed); ++i)
      names += (i ? ", '" : "'") + foreign[i] + "'";
    if (foreign.size() > kNamed)
      names += " and " + std::to_string(foreign.size() - kNamed) + " more";
    mlir::emitWarning(program->getLoc())
        << "checkpoint '" << path << "' holds " << foreign.size()
        << (foreign.size() == 1 ? " tensor" : " tensors")
        << " that this program has no parameter for (" << names
        << "), left unused: is it a checkpoint of another model?";
  }
  return *done;
}

Expected<std::optional<std::pair<CheckpointRun, std::string>>>
Trainer::resumeFromDirectory(StringRef dir,
                             function_ref<void(Error)> passedOver) {
  auto found = listCheckpoints(dir);
  // Every rank must pick the same checkpoint: a pipeline stage or a shard
  // loads only its own tensors, so one may load where another cannot.
  Communicator *comm = multiRank() ? opts.communicator : nullptr;
  if (comm) {
    std::string names;
    for (const auto &[steps, path] : found)
      names += path + "\n";
    std::vector<std::string> all =
        comm->gatherBytes(names, "listing the checkpoints to resume from");
    bool same = llvm::all_of(
        all, [&](const std::string &s) { return s == all.front(); });
    if (comm->firstFailure(opts.rank != 0 || same) >= 0)
      return trainerError("the ranks see different checkpoints in '" + dir +
                          "': resuming needs a directory every rank reads "
                          "alike (a shared file system)");
  }
  std::string newest;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    auto done = loadCheckpoint(it->second);
    // A checkpoint whose name says another step than it holds (renamed or
    // copied by hand) would be taken for the newest, and pruning would
    // delete the real ones: passed over like one that does not load.
    if (done && done->stepsDone != it->first)
      done = trainerError(
          it->second + " holds the state after step " + Twine(done->stepsDone) +
          ", but its name says step " + Twine(it->first) + " (rename it to " +
          sys::path::filename(checkpointPath(dir, done->stepsDone)) +
          " or remove it)");
    std::string why = done ? std::string() : toString(done.takeError());
    if (!comm) {
      if (done)
        return std::make_optional(std::make_pair(*done, it->second));
    } else {
      std::vector<std::string> reasons =
          comm->gatherBytes(why, "agreeing on the checkpoint to resume from");
      if (comm->firstFailure(bool(done)) < 0)
        return std::make_optional(std::make_pair(*done, it->second));
      why.clear();
      for (auto [rank, reason] : llvm::enumerate(reasons))
        if (!reason.empty())
          why += (why.empty() ? "" : "; ") + std::string("rank ") +
                 std::to_string(rank) + ": " + reason;
    }
    if (newest.empty())
      newest = why;
    if (opts.rank == 0)
      passedOver(trainerError(why));
  }
  if (found.empty())
    return std::nullopt;
  return trainerError("none of the " + Twine(found.size()) +
                      " checkpoints in '" + dir +
                      "' loads into this program (the newest: " + newest + ")");
}

std::string Trainer::checkpointPath(StringRef dir, int64_t steps) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%08lld.safetensors",
                static_cast<long long>(steps));
  SmallString<128> path(dir);
  sys::path::append(path, name);
  return path.str().str();
}

std::vector<std::pair<int64_t, std::string>>
Trainer::listCheckpoints(StringRef dir) {
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

/// Gathers every rank's named tensors on rank 0 (in rank order; a name
/// already present, such as a replicated parameter, is kept once, but a
/// low-precision parameter's rounded value gives way to its master weight
/// from the rank that holds it).
static void gatherTensors(Communicator &communicator,
                          std::vector<NamedTensor> &tensors) {
  std::string mine;
  auto put = [&](const void *p, size_t n) {
    mine.append(static_cast<const char *>(p), n);
  };
  auto putString = [&](const std::string &v) {
    int64_t n = int64_t(v.size());
    put(&n, sizeof(n));
    put(v.data(), v.size());
  };
  for (const NamedTensor &t : tensors) {
    putString(t.name);
    putString(t.dtype);
    put(&t.rounded, sizeof(t.rounded));
    int64_t rank = int64_t(t.tensor.shape.size());
    put(&rank, sizeof(rank));
    put(t.tensor.shape.data(), rank * sizeof(int64_t));
    put(t.tensor.data.data(), t.tensor.data.size() * sizeof(double));
  }
  std::vector<std::string> parts = communicator.gatherBytes(
      mine, "gathering a trace or checkpoint on rank 0");
  if (communicator.rank() != 0)
    return;
  std::map<std::string, size_t> seen;
  for (auto [i, t] : llvm::enumerate(tensors))
    seen.emplace(t.name, i);
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
    NamedTensor t;
    t.name = getString();
    t.dtype = getString();
    get(&t.rounded, sizeof(t.rounded));
    int64_t rank;
    get(&rank, sizeof(rank));
    t.tensor.shape.resize(rank);
    get(t.tensor.shape.data(), rank * sizeof(int64_t));
    t.tensor.data.resize(t.tensor.numElements());
    get(t.tensor.data.data(), t.tensor.data.size() * sizeof(double));
    auto [it, inserted] = seen.emplace(t.name, tensors.size());
    if (inserted)
      tensors.push_back(std::move(t));
    else if (tensors[it->second].rounded && !t.rounded)
      tensors[it->second] = std::move(t);
  }
}

Error Trainer::saveCheckpoint(StringRef path, int64_t stepsDone) {
  if (!exe)
    return trainerError("a checkpoint is saved from the executable: create it "
                        "first");
  // Every rank checks the step count (rank 0 writes it) and learns whether
  // one cannot save, before the gather.
  Error local = stepsDone < 0 || stepsDone > kMaxStepsDone
                    ? trainerError("cannot save '" + path + "': steps done " +
                                   Twine(stepsDone) + " is not in [0, 2^53]")
                    : checkCheckpointFits(*program, "save a checkpoint");
  if (Error err = everyRank(std::move(local),
                            " cannot save the checkpoint (its diagnostics "
                            "are on that rank)"))
    return err;
  if (multiRank()) {
    int64_t other = opts.communicator->firstDifferent(uint64_t(stepsDone));
    if (other >= 0)
      return trainerError("cannot save '" + path + "': rank " + Twine(other) +
                          " gave another step count than rank 0 (this "
                          "rank's: " +
                          Twine(stepsDone) + ")");
  }
  StringMap<reference::Tensor> state;
  exe->getState(state);
  auto tensors = checkpointTensors(*program, state);
  if (Error err = everyRank(tensors ? Error::success() : tensors.takeError(),
                            " could not collect the checkpoint's tensors"))
    return err;
  // With sharding each rank holds the optimizer state of the parameters it
  // owns, and a pipeline stage the parameters of its stage.
  if (multiRank() && (plan.sharding.enable || plan.pipeline.enable))
    gatherTensors(*opts.communicator, *tensors);
  // Rank 0 writes; every rank returns whether it could.
  return everyRank(
      opts.rank == 0
          ? writeCheckpoint(path, *tensors, CheckpointRun{stepsDone, opts.seed})
          : Error::success(),
      " (which writes the checkpoint) could not write it");
}

Error Trainer::saveToDirectory(StringRef dir, int64_t stepsDone, int64_t keep) {
  if (Error err = saveCheckpoint(checkpointPath(dir, stepsDone), stepsDone))
    return err;
  if (opts.rank == 0 && keep > 0) {
    // The newest `keep` up to this step; a file named for a later step (a
    // copy renamed by hand, which resuming passes over) neither counts nor
    // is removed, so it cannot push out the checkpoints just written.
    auto all = listCheckpoints(dir);
    llvm::erase_if(all, [&](const auto &c) { return c.first > stepsDone; });
    for (size_t k = 0; k + size_t(keep) < all.size(); ++k)
      sys::fs::remove(all[k].second);
  }
  return Error::success();
}

Expected<double> Trainer::step(int64_t index,
                               ArrayRef<reference::Tensor> globalBatch) {
  if (!exe)
    return trainerError("createExecutable() must come before step()");
  mlir::func::FuncOp function = stepFunction();
  if (globalBatch.size() != function.getNumArguments())
    return trainerError("the step takes " + Twine(function.getNumArguments()) +
                        " arguments, " + Twine(globalBatch.size()) +
                        " were given");
  // This rank's rows of the global batch (data parallelism).
  std::vector<reference::Tensor> local(globalBatch.begin(), globalBatch.end());
  for (auto [tensor, arg] : llvm::zip(local, function.getArguments())) {
    auto type = cast<mlir::RankedTensorType>(arg.getType());
    if (type.getRank() == 0 || int64_t(tensor.shape.size()) != type.getRank())
      continue;
    int64_t rows = type.getDimSize(0);
    if (rows == tensor.shape[0])
      continue;
    if (rows <= 0 || tensor.shape[0] % rows != 0)
      return trainerError("a batch of " + Twine(tensor.shape[0]) +
                          " rows does not split into this rank's " +
                          Twine(rows));
    int64_t shard = opts.rank % (tensor.shape[0] / rows);
    int64_t width = tensor.numElements() / tensor.shape[0];
    reference::Tensor part = tensor;
    part.shape[0] = rows;
    part.data.assign(tensor.data.begin() + shard * rows * width,
                     tensor.data.begin() + (shard + 1) * rows * width);
    tensor = std::move(part);
  }
  if (!globalBatch.empty() && !globalBatch[0].shape.empty())
    items = samples ? double(globalBatch[0].shape[0])
                    : double(globalBatch[0].numElements());
  double waitBefore = multiRank() ? opts.communicator->receiveWaitMs() : 0;
  // Under loss scaling, a step whose gradients are not finite leaves the
  // optimizer's step counter where it was (read outside the step's time).
  if (!lossScaleState.empty() && !stepCount)
    stepCount = scalarState(kStepCountStateName);
  double traceBegin = exe->nowUs();
  auto t0 = std::chrono::steady_clock::now();
  if (!started)
    started = t0;
  auto results = exe->step(local);
  auto t1 = std::chrono::steady_clock::now();
  if (!results)
    return results.takeError();
  if (multiRank())
    if (Error err = opts.communicator->flush())
      return std::move(err);
  if (opts.trace) {
    double traceEnd = exe->nowUs();
    // The executable's clock starts at its creation, another moment on
    // each rank: the steady clock's time (one clock on a machine) lines
    // the ranks' tracks up.
    double origin = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count() -
                    exe->nowUs();
    traceRecords.push_back({origin + traceBegin, origin + traceEnd, index,
                            intern("step"), intern("step"), false, true});
    for (const TraceEvent &e : exe->takeTrace())
      traceRecords.push_back(
          {origin + e.begin, origin + e.end, index, intern(e.site),
           intern(e.role.empty() ? "op" : e.role), e.wait, false});
  }
  double loss = (*results)[0].data[0];
  if (!std::isfinite(loss))
    return trainerError(
        Twine("the loss is ") + (std::isnan(loss) ? "NaN" : "infinite") +
        (index == 0
             // (Nothing was updated yet.)
             ? ": the program computes it from the initial weights and this "
               "batch (a log or a division of 0, an input out of range)"
             : ": the training diverged (a lower optimizer.learning_rate, or "
               "clipping with optimizer.grad_clip_norm), or the program "
               "computes it from this batch") +
        (index > 0 && plan.dp_optimization.fp16_allreduce &&
                 strata::dataParallelDegree(plan, opts.worldSize) > 1
             ? "; with dp_optimization.fp16_allreduce, gradients beyond "
               "float16's 65504 overflow on the wire"
             : ""));
  if (stepCount) {
    std::optional<double> now = scalarState(kStepCountStateName);
    if (now == stepCount)
      ++skipped;
    stepCount = now;
  }
  if (lossHistory.empty())
    firstStep = index;
  lossHistory.push_back(loss);
  stepTimes.push_back(
      std::chrono::duration<double, std::milli>(t1 - t0).count());
  receiveWaits.push_back(
      multiRank() ? opts.communicator->receiveWaitMs() - waitBefore : 0);
  return loss;
}

uint32_t Trainer::intern(StringRef text) {
  auto [it, inserted] = traceIndex.try_emplace(text, traceStrings.size());
  if (inserted)
    traceStrings.push_back(text.str());
  return it->second;
}

Error Trainer::writeTrace(StringRef path) {
  // This rank's events as JSON text, one a line; every rank's gathered on
  // rank 0.
  std::string mine;
  {
    raw_string_ostream os(mine);
    json::OStream meta(os);
    meta.object([&] {
      json::OStream &json = meta;
      json.attribute("name", "process_name");
      json.attribute("ph", "M");
      json.attribute("pid", opts.rank);
      json.attributeObject("args", [&] {
        json.attribute("name", formatv("rank {0}", opts.rank).str());
      });
    });
    for (const TraceRecord &r : traceRecords) {
      os << ",\n";
      json::OStream json(os); // (one value each)
      json.object([&] {
        StringRef site = traceStrings[r.site];
        if (r.isStep) {
          json.attribute("name", formatv("step {0}", r.step).str());
        } else {
          // The op and its pipeline job; a note in parentheses (a
          // collective's gradient bucket) stays in the site.
          StringRef name = site.rsplit(": ").second;
          if (name.empty())
            name = site;
          name = name.split(" (").first;
          json.attribute("name", (name + (r.wait ? " wait" : "")).str());
        }
        json.attribute("cat", traceStrings[r.role]);
        json.attribute("ph", "X");
        json.attribute("ts", r.begin);
        json.attribute("dur", r.end - r.begin);
        json.attribute("pid", opts.rank);
        json.attribute("tid", 0);
        if (!r.isStep)
          json.attributeObject("args", [&] {
            json.attribute("site", site);
            json.attribute("step", r.step);
          });
      });
    }
  }
  traceRecords.clear();
  std::vector<std::string> all =
      multiRank() ? opts.communicator->gatherBytes(
                        mine, "gathering a trace or checkpoint on rank 0")
                  : std::vector<std::string>{mine};
  if (opts.rank != 0)
    return Error::success();
  // Whole or not at all: a run stopped while writing leaves the file as it
  // was.
  return replaceFile(path, [&](raw_ostream &os) {
    os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
    bool first = true;
    for (const std::string &part : all) {
      if (part.empty())
        continue;
      os << (first ? "" : ",") << "\n" << part;
      first = false;
    }
    os << "\n]}\n";
  });
}

const MemoryPlan &Trainer::memoryPlan() {
  if (!memory)
    memory = planMemory(stepFunction());
  return *memory;
}

RunSummary Trainer::summarize() {
  RunSummary s;
  // Every rank's `value`, on rank 0, in rank order.
  auto gather = [&](int64_t value) {
    if (!multiRank())
      return std::vector<int64_t>{value};
    std::string bytes(reinterpret_cast<const char *>(&value), sizeof(value));
    std::vector<int64_t> all;
    for (const std::string &part : opts.communicator->gatherBytes(
             bytes, "gathering the report on rank 0")) {
      int64_t v = 0;
      std::memcpy(&v, part.data(), std::min(part.size(), sizeof(v)));
      all.push_back(v);
    }
    return all;
  };
  const MemoryPlan &plan = memoryPlan();
  s.activationPeakBytes = gather(plan.livePeakBytes);
  // The measured bubble: the share of the step a rank spends blocked in
  // receives (steps after the first, which also pays for warm-up).
  double waitSum = 0, stepSum = 0;
  for (size_t i = stepTimes.size() > 1 ? 1 : 0; i < stepTimes.size(); ++i) {
    waitSum += receiveWaits[i];
    stepSum += stepTimes[i];
  }
  for (int64_t b : gather(stepSum > 0 ? int64_t(1e6 * waitSum / stepSum) : 0))
    s.bubble.push_back(double(b) / 1e6);
  TrainingMemory training = trainingMemory(*program);
  s.plannedPeakBytes = gather(plan.peakBytes());
  s.measuredPeakBytes = gather(peakRssBytes());
  s.paramBytes = gather(training.paramBytes);
  s.gradBytes = gather(training.gradBytes);
  s.stateBytes = gather(training.stateBytes);
  if (started)
    s.wallSeconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - *started)
                        .count();
  size_t first = stepTimes.size() > 1 ? 1 : 0;
  for (size_t i = first; i < stepTimes.size(); ++i)
    s.meanStepMs += stepTimes[i];
  if (stepTimes.size() > first)
    s.meanStepMs /= double(stepTimes.size() - first);
  if (s.meanStepMs > 0)
    s.throughput = items / (s.meanStepMs / 1000.0);
  s.skippedSteps = skipped;
  s.lossScale = lossScale();
  return s;
}

std::optional<double> Trainer::scalarState(StringRef name) const {
  if (!exe)
    return std::nullopt;
  std::optional<reference::Tensor> value = exe->readState(name);
  if (!value || value->data.size() != 1)
    return std::nullopt;
  return value->data[0];
}

std::optional<double> Trainer::lossScale() const {
  if (lossScaleState.empty())
    return std::nullopt;
  return scalarState(lossScaleState);
}

bool Trainer::skippedStepsMatter(int64_t skippedNow, int64_t steps,
                                 bool runEnded) const {
  std::optional<double> scale = lossScale();
  if (skippedNow == 0 || !scale)
    return false;
  // A dynamic scale skips steps while it finds its level: worth a word only
  // when even a scale of 1 overflows, or when the run trained nothing.
  return !plan.amp.use_dynamic_loss_scaling || *scale <= 1 ||
         (runEnded && skippedNow == steps);
}

std::string Trainer::overflowReason() const {
  double scale = lossScale().value_or(0);
  return formatv("float16 gradients overflowed (not finite) at the loss "
                 "scale; the scale is now {0}{1}",
                 format("%g", scale),
                 !plan.amp.use_dynamic_loss_scaling
                     ? " (static: lower amp.init_loss_scaling, or set "
                       "amp.use_dynamic_loss_scaling: true)"
                 : scale <= 1 ? " (not finite without scaling: the "
                                "training diverged)"
                              : "")
      .str();
}

json::Object Trainer::report(const RunSummary &s) const {
  json::Array lossArray, timeArray;
  for (double l : lossHistory)
    lossArray.push_back(l);
  for (double t : stepTimes)
    timeArray.push_back(t);
  auto strategyJson = json::parse(toJson(plan));
  json::Object report{
      {"world_size", opts.worldSize},
      {"backend", backendName(opts.backend).str()},
      {"strategy", strategyJson
                       ? std::move(*strategyJson)
                       : json::Value(toString(strategyJson.takeError()))},
      {"losses", std::move(lossArray)},
      {"step_time_ms", std::move(timeArray)},
      {"steps", int64_t(lossHistory.size())},
      // The index of losses[0]: a run from a checkpoint goes on from its
      // step.
      {"first_step", firstStep},
      {"wall_time_s", s.wallSeconds},
      // Mean of the steps after the first (which pays for warm-up).
      {"mean_step_time_ms", s.meanStepMs},
      {samples ? "samples_per_s" : "tokens_per_s", s.throughput},
      {"final_loss", lossHistory.empty() ? json::Value(nullptr)
                                         : json::Value(lossHistory.back())},
      // The compile-time plan (arena + parameters and state + batch); the
      // CPU backend allocates exactly it (plus kernel scratch, below), the
      // reference backend computes in doubles outside it.
      {"planned_peak_bytes", json::Array(s.plannedPeakBytes)},
      {"arena_bytes", memory ? memory->arenaBytes : 0},
      {"scratch_bytes", exe ? exe->scratchBytes() : 0},
      {"kernels", exe ? exe->kernelIsa() : std::string()},
      {"threads", opts.backend == Backend::Cpu ? opts.threads : 1},
      {"measured_peak_bytes", json::Array(s.measuredPeakBytes)},
      // ZeRO's accounting per rank: parameters, the gradients its optimizer
      // consumes, optimizer state (sharded by strata-sharding).
      {"param_bytes", json::Array(s.paramBytes)},
      {"grad_bytes", json::Array(s.gradBytes)},
      {"optimizer_state_bytes", json::Array(s.stateBytes)},
      // The memory plan's peak of step buffers (activations and the like)
      // per rank.
      {"activation_peak_bytes", json::Array(s.activationPeakBytes)},
  };
  if (s.lossScale) {
    report["skipped_steps"] = s.skippedSteps;
    report["loss_scale"] = *s.lossScale;
  }
  if (opts.gemmAutotune && exe) {
    Executable::GemmAutotuned tuned = exe->gemmAutotuned();
    report["gemm_autotune"] = json::Object{{"timed", tuned.timed},
                                           {"sgemm", tuned.onSgemm},
                                           {"packed", tuned.onPacked}};
  }
  if (plan.pipeline.enable) {
    const PipelineSection &p = plan.pipeline;
    json::Array measured;
    for (double b : s.bubble)
      measured.push_back(b);
    report["pipeline"] = json::Object{
        {"schedule", p.schedule_mode},
        {"pp_degree", p.pp_degree},
        {"vpp_degree", p.vpp_degree},
        {"micro_batches", p.accumulate_steps},
        {"bubble_formula", pipelineBubble(p.schedule_mode, p.pp_degree,
                                          p.accumulate_steps, p.vpp_degree)},
        {"bubble_measured", std::move(measured)},
    };
  }
  return report;
}

} // namespace strata
