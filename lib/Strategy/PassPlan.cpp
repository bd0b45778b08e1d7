//===- PassPlan.cpp - The passes a strategy selects -----------------------===//

#include "strata/Strategy/PassPlan.h"

#include "strata/Dialect/Program.h"
#include "strata/Dialect/Strata.h"
#include "strata/Passes/Amp.h"
#include "strata/Passes/Passes.h"
#include "strata/Target/RuntimeTarget.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace strata;

namespace {
template <typename T>
SmallVector<T> toList(const std::vector<T> &values) {
  return SmallVector<T>(values.begin(), values.end());
}
} // namespace

std::string strata::PlannedPass::options() const {
  if (!create)
    return "";
  std::string text;
  raw_string_ostream os(text);
  create()->printAsTextualPipeline(os);
  // "name{options}" -> "options"
  StringRef all(text);
  size_t open = all.find('{');
  if (open == StringRef::npos)
    return "";
  // (An empty list option prints as nothing between two spaces.)
  SmallVector<StringRef> words;
  all.slice(open + 1, all.size() - 1)
      .split(words, ' ', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  return join(words, " ");
}

std::vector<PlannedPass> strata::planPasses(const Strategy &s,
                                            std::optional<int64_t> worldSize,
                                            int64_t rank, StringRef target) {
  std::vector<PlannedPass> plan;
  // Each pass is made from its typed options (never from option text, where
  // a value with a space or a comma would be cut apart).
  auto add = [&](StringRef name, StringRef reason,
                 std::function<std::unique_ptr<mlir::Pass>()> create) {
    plan.push_back({name.str(), reason.str(), std::move(create)});
  };

  // On the forward program as written (before mixed precision's casts,
  // which then treat the fused op as one white-list op): autodiff
  // differentiates the fused op.
  if (s.fused_passes.enable && s.fused_passes.flash_attention) {
    add("strata-attention-fusion", "fused_passes.flash_attention",
        [] { return createStrataAttentionFusion(); });
    plan.back().rewrites =
        "attention (softmax of q k^T, times v) that the pass can fuse";
  }

  // An RMS norm written out (as programs imported from PyTorch have
  // LLaMA's) as the rms_norm op, before autodiff, which differentiates it,
  // and before mixed precision, which then keeps it in f32 at level o1.
  if (s.fused_passes.enable && s.fused_passes.rms_norm) {
    add("strata-rms-norm-recognition", "fused_passes.rms_norm",
        [] { return createStrataRmsNormRecognition(); });
    plan.back().rewrites = "RMS normalisation written out (x * rsqrt(mean(x "
                           "* x) + eps) * weight) that the pass can fuse";
  }

  // A GELU written out (as programs imported from PyTorch have GPT-2's) as
  // the gelu op, which the epilogue fusion then takes into the GEMM: before
  // autodiff, which differentiates the op.
  if (s.fused_passes.enable && s.fused_passes.gemm_epilogue)
    add("strata-gelu-recognition", "fused_passes.gemm_epilogue",
        [] { return createStrataGeluRecognition(); });

  // Before mixed precision and autodiff, so that the casts and gradients
  // are of the padded product.
  if (const RuntimeTarget *runtime = RuntimeTarget::lookup(target);
      runtime && runtime->getGemmColumnMultiple() > 1)
    add("strata-gemm-padding", ("target " + target).str(),
        [o = StrataGemmPaddingOptions{target.str()}] {
          return createStrataGemmPadding(o);
        });

  if (s.amp.enable) {
    StrataAmpOptions o;
    o.dtype = s.amp.dtype;
    o.level = s.amp.level;
    o.customWhiteList = toList(s.amp.custom_white_list);
    o.customBlackList = toList(s.amp.custom_black_list);
    o.fp16Guard = s.amp.level == "o2" && s.amp.use_fp16_guard;
    o.useDynamicLossScaling = s.amp.use_dynamic_loss_scaling;
    o.initLossScaling = s.amp.init_loss_scaling;
    o.incrEveryNSteps = s.amp.incr_every_n_steps;
    o.decrEveryNNanOrInf = s.amp.decr_every_n_nan_or_inf;
    o.incrRatio = s.amp.incr_ratio;
    o.decrRatio = s.amp.decr_ratio;
    add("strata-amp", "amp.enable", [o] { return createStrataAmp(o); });
    plan.back().rewrites = "op that the lists let compute in " + s.amp.dtype;
    plan.back().note =
        s.amp.dtype == "bfloat16"
            ? "bfloat16 has f32's exponent range: no loss scaling, the "
              "loss-scaling keys are unused"
        : s.amp.use_dynamic_loss_scaling ? "float16 with dynamic loss scaling"
        : s.amp.init_loss_scaling == 1.0
            ? "float16 without loss scaling (a static scale of 1)"
            : "float16 with a static loss scale";
    if (s.amp.level == "o2")
      plan.back().note +=
          s.amp.use_master_grad
              ? "; level o2: low-precision parameters with f32 master "
                "weights, gradients cast to f32 for clipping and the update "
                "(use_master_grad)"
              : "; level o2: low-precision parameters and gradients, f32 "
                "master weights";
    if (s.amp.level == "o2" && s.amp.use_fp16_guard)
      plan.back().note += "; only ops under strata.amp_guard (use_fp16_guard)";
  }

  // The rank grid, for the passes that distribute the program: pipeline
  // stages outermost, then data-parallel replicas, then sharding groups.
  const int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
  const int64_t dataParallel = worldSize ? *worldSize / pp : 1;
  if (s.pipeline.enable || s.sharding.enable || dataParallel > 1) {
    StrataRankGridOptions o;
    o.pp = pp;
    o.sharding = s.sharding.enable ? s.sharding.degree : 1;
    o.dp = worldSize ? dataParallelDegree(s, *worldSize) : 1;
    add("strata-rank-grid",
        s.pipeline.enable   ? "pipeline.enable"
        : s.sharding.enable ? "sharding.enable"
                            : "world size",
        [o] { return createStrataRankGrid(o); });
  }

  if (s.pipeline.enable) {
    StrataStageSplitOptions o;
    o.vppDegree = s.pipeline.vpp_degree;
    add("strata-stage-split", "pipeline.enable",
        [o] { return createStrataStageSplit(o); });
  }

  add("strata-autodiff", "always", [] { return createStrataAutodiff(); });

  if (s.fused_passes.enable && s.fused_passes.gemm_epilogue) {
    add("strata-gemm-epilogue-fusion", "fused_passes.gemm_epilogue",
        [o = StrataGemmEpilogueFusionOptions{target.str()}] {
          return createStrataGemmEpilogueFusion(o);
        });
    plan.back().rewrites = "matmul followed by bias_add that the pass can fuse";
  }
  if (s.fused_passes.enable && s.fused_passes.dropout_add) {
    add("strata-dropout-add-fusion", "fused_passes.dropout_add",
        [] { return createStrataDropoutAddFusion(); });
    plan.back().rewrites = "dropout feeding an add that the pass can fuse";
  }

  // (After the fusions, which match the backward's operands against the
  // forward's.)
  if (s.amp.enable) {
    StrataRecomputeCastsOptions o;
    o.residentParams = !(s.sharding.enable && s.sharding.stage == 3);
    add("strata-recompute-casts", "amp.enable",
        [o] { return createStrataRecomputeCasts(o); });
  }

  if (s.recompute.enable) {
    StrataRecomputeOptions o;
    o.checkpoints = toList(s.recompute.checkpoints);
    o.noRecomputeSegments = toList(s.recompute.no_recompute_segments);
    // main_ops|num|pre_ops|suf_ops, ops joined by '+'.
    for (const RefinedOpsPattern &p : s.recompute.refined_ops_patterns)
      o.refinedOpsPatterns.push_back(join(p.main_ops, "+") + "|" +
                                     std::to_string(p.num) + "|" +
                                     join(p.pre_ops, "+") + "|" +
                                     join(p.suf_ops, "+"));
    add("strata-recompute", "recompute.enable",
        [o] { return createStrataRecompute(o); });
  }

  if (s.gradient_merge.enable && s.gradient_merge.k_steps > 1) {
    StrataGradientMergeOptions o;
    o.kSteps = s.gradient_merge.k_steps;
    o.avg = s.gradient_merge.avg;
    add("strata-gradient-merge",
        s.pipeline.enable ? "pipeline.accumulate_steps"
                          : "gradient_merge.enable",
        [o] { return createStrataGradientMerge(o); });
  }

  // Every rank of a pipeline stage shards the batch and averages the
  // gradients; sharding then divides the optimizer's work among them.
  if (dataParallel > 1) {
    StrataDataParallelOptions o;
    o.bucketMb = s.dp_optimization.comm_buffer_size;
    o.lastBucketMb = s.dp_optimization.last_comm_buffer_size;
    o.findUnusedParameters = s.dp_optimization.find_unused_parameters;
    o.fp16Allreduce = s.dp_optimization.fp16_allreduce;
    add("strata-data-parallel", "world size",
        [o] { return createStrataDataParallel(o); });
  }

  {
    const OptimizerSection &opt = s.optimizer;
    StrataOptimizerOptions o;
    o.type = opt.type;
    o.learningRate = opt.learning_rate;
    o.weightDecay = opt.weight_decay.value_or(0.0);
    o.beta1 = opt.beta1;
    o.beta2 = opt.beta2;
    o.epsilon = opt.epsilon.value_or(0.0);
    o.momentum = opt.momentum;
    o.useNesterov = opt.use_nesterov;
    o.larsCoeff = opt.lars_coeff;
    o.excludeFromWeightDecay = toList(opt.exclude_from_weight_decay);
    o.gradClipNorm = opt.grad_clip_norm;
    o.lrSchedule = opt.lr_schedule;
    o.warmupSteps = opt.warmup_steps;
    o.decaySteps = opt.decay_steps;
    o.minLr = opt.min_lr;
    o.masterGrad = s.amp.enable && s.amp.use_master_grad;
    add("strata-optimizer", "always",
        [o] { return createStrataOptimizer(o); });
  }

  if (s.sharding.enable) {
    StrataShardingOptions o;
    o.stage = s.sharding.stage;
    o.rank = rank;
    o.partition = s.sharding.partition_algor;
    o.segmentSize = s.sharding.segment_size;
    o.offload = s.sharding.offload;
    o.syncComm = s.sharding.sync_comm;
    o.bucketMb = s.sharding.comm_buffer_size_MB;
    add("strata-sharding", "sharding.enable",
        [o] { return createStrataSharding(o); });
  }

  if (s.pipeline.enable) {
    StrataPipelineOptions o;
    o.vppDegree = s.pipeline.vpp_degree;
    o.schedule = s.pipeline.schedule_mode;
    o.microBatchSize = s.pipeline.micro_batch_size;
    o.accumulateSteps = s.pipeline.accumulate_steps;
    o.rank = rank;
    add("strata-pipeline", "pipeline.enable",
        [o] { return createStrataPipeline(o); });
  }
  return plan;
}

namespace {
/// Why the step's batch does not split as the strategy asks: `key` is the
/// strategy key to change, or empty when the world size is at fault.
struct BatchSplitProblem {
  std::string key;
  std::string message;
};
} // namespace

static std::optional<BatchSplitProblem>
batchSplitProblem(const Strategy &s, mlir::func::FuncOp step,
                  int64_t worldSize) {
  int64_t pp = s.pipeline.enable ? s.pipeline.pp_degree : 1;
  int64_t ranks = std::max<int64_t>(1, worldSize / pp);
  int64_t micro = s.gradient_merge.enable ? s.gradient_merge.k_steps : 1;
  StringRef key = s.pipeline.enable ? "pipeline.accumulate_steps"
                                    : "gradient_merge.k_steps";
  StringRef keyName = s.pipeline.enable ? "accumulate_steps" : "k_steps";
  for (mlir::BlockArgument arg : step.getArguments()) {
    auto type = dyn_cast<mlir::RankedTensorType>(arg.getType());
    if (!type || type.getRank() == 0 || type.isDynamicDim(0))
      continue;
    int64_t batch = type.getDimSize(0);
    std::string name = ("argument " + Twine(arg.getArgNumber())).str();
    if (auto attr = step.getArgAttrOfType<mlir::StringAttr>(
            arg.getArgNumber(), strata::StrataDialect::kInputNameAttrName))
      name = ("'" + attr.getValue() + "'").str();
    if (batch % ranks != 0)
      return BatchSplitProblem{
          "",
          ("the batch of " + Twine(batch) +
           (batch == 1 ? " row (" : " rows (") + name +
           ") does not split over " + Twine(ranks) + " data-parallel ranks" +
           (pp > 1 ? " (" + Twine(worldSize) + " ranks / " + Twine(pp) +
                         " pipeline stages)"
                   : Twine("")) +
           ": run on a number of ranks that divides it")
              .str()};
    int64_t perRank = batch / ranks;
    if (perRank % micro != 0) {
      // The largest count that splits each rank's rows: a divisor of them,
      // found among the divisors up to their square root (the rows
      // themselves past the count; not searched for absurd batches).
      int64_t lower = micro >= perRank ? perRank : 1;
      if (micro < perRank && perRank <= (int64_t(1) << 40))
        for (int64_t d = 1; d * d <= perRank; ++d)
          if (perRank % d == 0) {
            if (d <= micro)
              lower = std::max(lower, d);
            if (perRank / d <= micro)
              lower = std::max(lower, perRank / d);
          }
      // The smallest batch that splits into `micro` per rank (none where
      // ranks x micro overflows).
      int64_t unit = 0, raise = 0;
      bool overflows =
          llvm::MulOverflow(ranks, micro, unit) ||
          llvm::MulOverflow(unit, batch / unit + (batch % unit != 0), raise);
      // Lowering is offered where any count of 2 or more is accepted:
      // gradient merge (a pipeline's schedules have rules of their own).
      bool offerLower = !s.pipeline.enable && lower >= 2;
      std::string advice;
      if (offerLower)
        advice = ("lower " + keyName + " to " + Twine(lower)).str();
      if (!overflows)
        advice += (advice.empty() ? "" : " or ") +
                  ("raise the batch to " + Twine(raise)).str();
      else if (advice.empty())
        advice = ("lower " + keyName).str();
      std::string count = overflows ? "" : (" = " + Twine(unit)).str();
      return BatchSplitProblem{
          key.str(),
          ("batch " + Twine(batch) + " (" + name + ") splits into " +
           Twine(ranks) + (ranks == 1 ? " rank" : " ranks") + " x " + keyName +
           " " + Twine(micro) + count + " micro-batches: " + advice)
              .str()};
    }
    // The pipeline's micro-batch rows follow from the program; a size
    // given must agree (the first argument's rows, as Paddle counts them).
    // (1, the default, means "follows": --print-strategy writes it, and
    // its output reads back as the same strategy.)
    int64_t rows = batch / ranks / micro;
    if (s.pipeline.enable && s.pipeline.micro_batch_size != 1 &&
        arg.getArgNumber() == 0 && rows != s.pipeline.micro_batch_size)
      return BatchSplitProblem{
          "pipeline.micro_batch_size",
          ("'pipeline.micro_batch_size' is " +
           Twine(s.pipeline.micro_batch_size) + ", but batch " + Twine(batch) +
           " (" + name + ") over " + Twine(ranks) +
           (ranks == 1 ? " data-parallel rank" : " data-parallel ranks") +
           " x accumulate_steps " + Twine(micro) + " gives micro-batches of " +
           Twine(rows) + (rows == 1 ? " row" : " rows") + ": set it to " +
           Twine(rows) + " (or leave it out)")
              .str()};
  }
  return std::nullopt;
}

/// Where the strategy file set `key`, as an MLIR location (diagnostics
/// there show the file's line), or nothing when it took its default.
static std::optional<mlir::Location> keyLocation(mlir::MLIRContext *context,
                                                 const Strategy &strategy,
                                                 StringRef key) {
  std::optional<KeyLocation> at = strategy.locate(key);
  if (!at)
    return std::nullopt;
  return mlir::FileLineColLoc::get(context, strategy.file, at->line,
                                   at->column);
}

namespace strata {
#define GEN_PASS_DEF_STRATASTRATEGYCHECK
#include "StrataPasses.h.inc"
} // namespace strata

namespace {
/// First pass of a strategy's pipeline: the batch split of checkBatchSplit,
/// reported as a diagnostic at the strategy key (or the step function).
/// Built with the loaded strategy by strategyPipeline; from its options
/// (the strategy file and world size) when a printed pipeline runs again.
class StrategyCheckPass
    : public strata::impl::StrataStrategyCheckBase<StrategyCheckPass> {
public:
  using StrataStrategyCheckBase::StrataStrategyCheckBase;
  StrategyCheckPass(const Strategy &given, int64_t world) : strategy(given) {
    strategyFile = given.file;
    worldSize = world;
  }

  mlir::LogicalResult initialize(mlir::MLIRContext *mlirContext) override {
    if (strategy)
      return mlir::success();
    // (Diagnostics of the context, which the C API's callers receive.)
    auto failure = [&](const Twine &why) {
      mlir::emitError(mlir::UnknownLoc::get(mlirContext),
                      "strata-strategy-check: " + why);
      return mlir::failure();
    };
    if (strategyFile.empty())
      return failure("no strategy file given (strategy=FILE)");
    // (0 is unknown, as strata-opt's --world-size: the degrees are not
    // checked against it.)
    Expected<StrategyContext> context = jobContext(worldSize, 0);
    if (!context)
      return failure("world-size: " + toString(context.takeError()));
    Expected<Strategy> loaded = loadStrategy(strategyFile, *context);
    if (!loaded) {
      // A place in the file is the diagnostic's location ("file:line:col"
      // for the C API's callback); an error about the whole file names it.
      std::string other;
      handleAllErrors(
          loaded.takeError(),
          [&](const StrategyError &e) {
            if (e.line() != 0)
              mlir::emitError(mlir::FileLineColLoc::get(mlirContext, e.file(),
                                                        e.line(), e.column()),
                              "strata-strategy-check: " + e.text());
            else
              other = StringRef(e.message()).rtrim().str();
          },
          [&](const ErrorInfoBase &e) { other = e.message(); });
      if (!other.empty())
        return failure(other);
      return mlir::failure();
    }
    strategy = std::move(*loaded);
    return mlir::success();
  }

  void runOnOperation() override {
    Expected<mlir::func::FuncOp> step = findStepFunction(getOperation());
    if (!step) {
      // The passes that need the step report it.
      consumeError(step.takeError());
      return;
    }
    std::optional<BatchSplitProblem> problem =
        batchSplitProblem(*strategy, *step, std::max<int64_t>(worldSize, 1));
    if (!problem)
      return;
    mlir::emitError(keyLocation(&getContext(), *strategy, problem->key)
                        .value_or(step->getLoc()),
                    problem->message);
    signalPassFailure();
  }

private:
  std::optional<Strategy> strategy;
};
} // namespace

Error strata::checkPlanImplemented(ArrayRef<PlannedPass> plan,
                                   const Strategy &strategy) {
  for (const PlannedPass &p : plan) {
    if (!p.create) {
      return strategy.errorAt(p.reason, "'" + p.reason + "' selects pass '" +
                                            p.name +
                                            "', which is not implemented yet");
    }
  }
  return Error::success();
}

namespace {
/// The strategy's diagnostics on the program its passes are given: before
/// the first pass, `before` (checks of the program as written); after each
/// pass of `watched`, a warning when the pass left the module as it found it
/// (compared by fingerprint: ops, attributes and operands changed, added or
/// removed); after a pass of `selectedBy` fails, a note naming the strategy
/// key that selected it. Passes are told apart by identity, so the same
/// pass given on strata-opt's command line is not taken for the strategy's.
class StrategyDiagnostics : public mlir::PassInstrumentation {
public:
  /// Each returns the warnings for the program as written.
  std::vector<std::function<std::vector<std::string>(mlir::ModuleOp)>> before;
  /// The warning's text.
  DenseMap<const mlir::Pass *, std::string> watched;
  /// The note for its failure: what selected it, where.
  DenseMap<const mlir::Pass *,
           std::pair<std::string, std::optional<mlir::Location>>>
      selectedBy;

  void runBeforePass(mlir::Pass *pass, mlir::Operation *op) override {
    if (!checkedProgram) {
      checkedProgram = true;
      if (auto module = dyn_cast<mlir::ModuleOp>(op))
        for (auto &check : before)
          for (const std::string &text : check(module))
            mlir::emitWarning(op->getLoc(), text);
    }
    if (watched.contains(pass))
      fingerprint.emplace(op);
  }
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override {
    auto it = watched.find(pass);
    if (it == watched.end() || !fingerprint)
      return;
    if (*fingerprint == mlir::OperationFingerPrint(op))
      mlir::emitWarning(op->getLoc(), it->second);
    fingerprint.reset();
  }
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *op) override {
    if (watched.contains(pass))
      fingerprint.reset();
    // The pass's errors use its own option names: say which strategy key
    // chose the pass and these options.
    auto it = selectedBy.find(pass);
    if (it == selectedBy.end())
      return;
    op->getContext()->getDiagEngine().emit(
        it->second.second.value_or(op->getLoc()),
        mlir::DiagnosticSeverity::Note)
        << it->second.first;
  }
  /// A pass manager may run again (on another module): check that one too.
  void runAfterPipeline(std::optional<mlir::OperationName>,
                        const PipelineParentInfo &parent) override {
    if (!parent.parentPass)
      checkedProgram = false;
  }

private:
  bool checkedProgram = false;
  std::optional<mlir::OperationFingerPrint> fingerprint;
};
} // namespace

Error strata::addPlannedPasses(mlir::PassManager &pm,
                               ArrayRef<PlannedPass> plan,
                               const Strategy &strategy,
                               std::optional<int64_t> worldSize) {
  if (Error err = checkPlanImplemented(plan, strategy))
    return err;
  pm.addPass(
      std::make_unique<StrategyCheckPass>(strategy, worldSize.value_or(0)));
  auto diagnostics = std::make_unique<StrategyDiagnostics>();
  // "'key' (file:line:col)".
  auto quoted = [&strategy](StringRef key) {
    std::string where = strategy.where(key);
    return ("'" + key + "'" + (where.empty() ? "" : " (" + where + ")")).str();
  };
  bool dataParallel = false;
  for (const PlannedPass &p : plan) {
    std::unique_ptr<mlir::Pass> pass = p.create();
    const mlir::Pass *added = pass.get();
    pm.addPass(std::move(pass));
    dataParallel |= p.name == "strata-data-parallel";
    // Strategy keys (not "always", "world size" or "target cpu").
    if (StringRef(p.reason).contains('.')) {
      std::string options = p.options();
      diagnostics->selectedBy[added] = {
          "'" + p.reason + "' selected " + p.name +
              (options.empty() ? "" : "{" + options + "}"),
          keyLocation(pm.getContext(), strategy, p.reason)};
    }
    if (!p.rewrites.empty())
      diagnostics->watched[added] = quoted(p.reason) +
                                    " changes nothing: the program has no " +
                                    p.rewrites;
  }

  // The data-parallel settings of a job with one data-parallel rank (when
  // the world size is known: without, the program is one rank's anyway).
  const Strategy defaults;
  const DpOptimizationSection &dp = strategy.dp_optimization;
  std::vector<std::string> inert;
  for (auto [key, changed] :
       {std::pair<StringRef, bool>{"dp_optimization.fp16_allreduce",
                                   dp.fp16_allreduce},
        {"dp_optimization.comm_buffer_size",
         dp.comm_buffer_size != defaults.dp_optimization.comm_buffer_size},
        {"dp_optimization.last_comm_buffer_size",
         dp.last_comm_buffer_size !=
             defaults.dp_optimization.last_comm_buffer_size}})
    if (worldSize && !dataParallel && changed && strategy.locate(key))
      inert.push_back(quoted(key) + " changes nothing: the job of " +
                      std::to_string(*worldSize) +
                      (*worldSize == 1 ? " rank" : " ranks") +
                      " has one data-parallel rank, which exchanges no "
                      "gradients");
  // Settings that change nothing whatever the program.
  auto given = [&](StringRef key) { return strategy.locate(key).has_value(); };
  if (strategy.sharding.enable && strategy.sharding.degree == 1)
    inert.push_back(
        quoted("sharding.enable") + " changes nothing: " +
        (given("sharding.degree") ? std::string("'sharding.degree' is 1")
                                  : "each sharding group is a single rank") +
        ", so each rank keeps the whole optimizer state (and gradients and "
        "parameters) itself");
  const RecomputeSection &recompute = strategy.recompute;
  if (recompute.enable && !recompute.checkpoints.empty() &&
      llvm::all_of(
          llvm::seq<int64_t>(0, recompute.checkpoints.size()), [&](int64_t i) {
            return llvm::is_contained(recompute.no_recompute_segments, i);
          }))
    inert.push_back(quoted("recompute.enable") +
                    " changes nothing: 'recompute.no_recompute_segments' "
                    "leaves out the segment of every checkpoint");
  const FusedPassesSection &fused = strategy.fused_passes;
  if (fused.enable && !fused.gemm_epilogue && !fused.dropout_add &&
      !fused.flash_attention && !fused.rms_norm)
    inert.push_back(quoted("fused_passes.enable") +
                    " changes nothing: it selects none of gemm_epilogue, "
                    "dropout_add, flash_attention and rms_norm");
  // Master gradients are the f32 copies the clipping norm sums; the
  // update of these optimizers reads a bf16 or f16 gradient exactly as
  // its f32 copy.
  if (strategy.amp.enable && strategy.amp.use_master_grad &&
      given("amp.use_master_grad") && strategy.optimizer.grad_clip_norm == 0 &&
      llvm::is_contained({"sgd", "momentum", "adam", "adamw"},
                         strategy.optimizer.type))
    inert.push_back(quoted("amp.use_master_grad") +
                    " changes no result without 'optimizer.grad_clip_norm': " +
                    strategy.optimizer.type +
                    "'s update reads each low-precision gradient exactly as "
                    "its f32 copy");
  // A pipeline of one stage runs its micro-batches one after another,
  // whatever the schedule.
  if (strategy.pipeline.enable && strategy.pipeline.pp_degree == 1 &&
      given("pipeline.schedule_mode"))
    inert.push_back(quoted("pipeline.schedule_mode") +
                    " changes nothing: with one stage ('pipeline.pp_degree' "
                    "1) the micro-batches run one after another, as gradient "
                    "merge's");
  // Custom amp list entries that repeat what the default lists decide.
  if (strategy.amp.enable) {
    const AmpSection &amp = strategy.amp;
    const bool o2 = amp.level == "o2";
    auto onDefaultBlack = [&](StringRef op) {
      return llvm::is_contained(amp::defaultBlackList(o2), op);
    };
    for (const std::string &op : amp.custom_white_list)
      // (At o2 every op the lists decide computes in the low type unless
      // the black list keeps it in f32.)
      if (o2 ? !onDefaultBlack(op)
             : llvm::is_contained(amp::defaultWhiteList(), op))
        inert.push_back("'" + op + "' of " + quoted("amp.custom_white_list") +
                        " changes nothing: at level " + amp.level + " " + op +
                        " computes in " + amp.dtype + " by default");
    for (const std::string &op : amp.custom_black_list)
      if (onDefaultBlack(op))
        inert.push_back("'" + op + "' of " + quoted("amp.custom_black_list") +
                        " changes nothing: at level " + amp.level + " " + op +
                        " computes in f32 by default");
  }
  // bfloat16 scales no loss (f32's exponent range).
  if (strategy.amp.enable && strategy.amp.dtype == "bfloat16")
    for (StringRef key :
         {"amp.init_loss_scaling", "amp.use_dynamic_loss_scaling",
          "amp.incr_every_n_steps", "amp.decr_every_n_nan_or_inf",
          "amp.incr_ratio", "amp.decr_ratio"})
      if (given(key))
        inert.push_back(
            quoted(key) +
            " changes nothing: bfloat16 has f32's exponent range "
            "and trains without loss scaling, which applies to float16 only");
  if (!inert.empty())
    diagnostics->before.push_back([inert](mlir::ModuleOp) { return inert; });

  // Weight-decay exclusions that name no parameter of the program.
  if (!strategy.optimizer.exclude_from_weight_decay.empty())
    diagnostics->before.push_back(
        [names = strategy.optimizer.exclude_from_weight_decay,
         key = quoted("optimizer.exclude_from_weight_decay")](
            mlir::ModuleOp module) {
          std::vector<std::string> found;
          for (const std::string &name : names) {
            bool any = false;
            for (ParamOp param : module.getOps<ParamOp>())
              any |= param.getSymName().contains(name);
            if (!any)
              found.push_back("'" + name + "' of " + key +
                              " changes nothing: no parameter name of the "
                              "program contains it");
          }
          return found;
        });

  pm.addInstrumentation(std::move(diagnostics));
  return Error::success();
}

Error strata::checkBatchSplit(const Strategy &s, mlir::func::FuncOp step,
                              int64_t worldSize) {
  std::optional<BatchSplitProblem> problem =
      batchSplitProblem(s, step, worldSize);
  if (!problem)
    return Error::success();
  if (!problem->key.empty())
    return s.errorAt(problem->key, problem->message);
  // About the program: at its step function.
  if (auto loc = step.getLoc()->findInstanceOf<mlir::FileLineColLoc>())
    return make_error<StrategyError>(loc.getFilename().str(), loc.getLine(),
                                     loc.getColumn(), problem->message);
  return fileError("the program", problem->message);
}
