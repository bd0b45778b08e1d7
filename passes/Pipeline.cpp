//===- Pipeline.cpp - Per-stage programs with micro-batch schedules -------===//
//
// Every op of the step gets a (virtual) stage and a job: the forward F(m) or
// backward B(m) of micro-batch m, the weight-gradient part W(m) (ZBH1), the
// reads before (`pre`) or the optimizer after (`post`). A schedule orders the
// jobs of each stage; values crossing stages become strata.send right after
// they are computed and strata.recv right before their first use. The
// sends and receives of all stages are simulated before anything is
// rewritten, so a schedule that would hang is refused at compile time.
//
// This file places the ops, orders each stage's sequence and checks the
// messages; the schedules are a library of their own (PipelineSchedule.cpp),
// ZBH1's weight-gradient split and per-stage clipping rewrite the placed step
// (PipelineWeightGradients.cpp, PipelineClipping.cpp), and the rank's
// program is cut out in PipelineRankProgram.cpp.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "PipelinePlacement.h"
#include "strata/Passes/Passes.h"
#include "strata/Passes/PipelineSchedule.h"
#include "strata/Support/FileLocation.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <deque>
#include <map>

namespace strata {
#define GEN_PASS_DEF_STRATAPIPELINE
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

//===----------------------------------------------------------------------===//
//===----------------------------------------------------------------------===//
// Placement
//===----------------------------------------------------------------------===//

bool isCollective(Operation *op) { return isa<CollectiveOpInterface>(op); }

bool isTokenValue(Value v) { return isa<TokenType>(v.getType()); }

bool isScalar(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && type.getRank() == 0;
}

struct PipelinePass : public strata::impl::StrataPipelineBase<PipelinePass>,
                      public PipelinePlacement {
  using StrataPipelineBase::StrataPipelineBase;

  /// The rank grid.
  RankGridOp grid;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (vppDegree < 1) {
      mlir::emitError(module.getLoc())
          << "strata-pipeline: vpp-degree must be >= 1";
      return signalPassFailure();
    }
    FailureOr<RankGridOp> found = getRankGrid(module, "strata-pipeline");
    if (failed(found))
      return signalPassFailure();
    grid = *found;
    ppDegree = grid.getAxisSize(GridAxis::Pp);
    chunks = vppDegree;
    if (rank < 0 || rank >= grid.getWorldSize()) {
      mlir::emitError(module.getLoc())
          << "strata-pipeline: rank " << static_cast<int64_t>(rank)
          << " is outside the rank grid of " << grid.getWorldSize() << " ranks";
      return signalPassFailure();
    }
    if (failed(
            checkRunsBefore(module, "strata-pipeline", {"strata-pipeline"})) ||
        failed(recordRank(module, "strata-pipeline", rank)))
      return signalPassFailure();
    FailureOr<func::FuncOp> step = getStepFunction(module, "strata-pipeline");
    if (failed(step) ||
        failed(checkOnlyStepReadsSymbols(module, *step, "strata-pipeline")) ||
        failed(run(module, *step)))
      return signalPassFailure();
    recordPass(module, "strata-pipeline");
  }

  LogicalResult run(ModuleOp module, func::FuncOp func);
  LogicalResult place(func::FuncOp func, bool final);
};

LogicalResult PipelinePass::place(func::FuncOp func, bool final) {
  Block &body = func.getBody().front();
  places.clear();
  order.clear();
  bool anyStage = false;
  int64_t lastStage = -1;
  size_t index = 0;
  for (Operation &op : body.without_terminator()) {
    order[&op] = index++;
    Place p;
    if (std::optional<int64_t> s = getStage(&op)) {
      if (*s < 0 || *s >= stages())
        return op.emitOpError()
               << "is on stage " << *s << ", but the pipeline has " << stages()
               << " (the rank grid's pp " << ppDegree << " x vpp-degree "
               << static_cast<int64_t>(vppDegree) << ")";
      p.stage = *s;
      anyStage = true;
      lastStage = std::max(lastStage, *s);
    }
    places[&op] = p;
  }
  if (!anyStage)
    return mlir::emitError(func.getLoc())
           << "strata-pipeline: no op carries strata.stage (run "
              "strata-stage-split before strata-autodiff)";
  // A larger vpp-degree than the split's would leave the last virtual
  // stages empty and give the ranks other chunks than the split meant.
  if (!final && lastStage + 1 != stages())
    return mlir::emitError(func.getLoc())
           << "strata-pipeline: the ops are on stages 0 to " << lastStage
           << ", but pp " << ppDegree << " x vpp-degree "
           << static_cast<int64_t>(vppDegree) << " makes " << stages()
           << " stages; give strata-pipeline the vpp-degree that "
              "strata-stage-split was given (and put an op on every stage)";

  // Scalar bookkeeping runs on every stage that needs it.
  auto replicatedState = [&](FlatSymbolRefAttr name) {
    auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(func, name);
    return state && state.getTensorType().getRank() == 0;
  };
  for (Operation &op : body.without_terminator()) {
    Place &p = places[&op];
    if (p.stage >= 0)
      continue;
    bool replicable = false;
    if (isa<arith::ConstantOp, InitTokenOp>(op))
      replicable = true;
    else if (auto get = dyn_cast<GetStateOp>(op))
      replicable = replicatedState(get.getNameAttr());
    else if (auto assign = dyn_cast<AssignOp>(op))
      replicable = replicatedState(assign.getNameAttr()) &&
                   places[assign.getValue().getDefiningOp()].replicated;
    else if (!isCollective(&op) && !isa<GetParamOp, GetStateOp>(op) &&
             !getMicroBatch(&op) && op.getNumOperands() > 0)
      replicable = llvm::all_of(op.getOperands(),
                                [&](Value v) {
                                  Operation *def = v.getDefiningOp();
                                  return def && places[def].replicated;
                                }) &&
                   llvm::all_of(op.getResults(), isScalar);
    p.replicated = replicable;
  }

  // Unplaced ops follow their operands (the latest stage), then their users
  // (the earliest); reads of parameters and state go to their first user.
  auto stageOf = [&](Value v) -> int64_t {
    Operation *def = v.getDefiningOp();
    if (!def)
      return -1;
    const Place &p = places[def];
    return p.replicated ? -1 : p.stage;
  };
  // A parameter (or non-scalar state) lives on the first stage that reads
  // it; every read moves there, other stages receive the value, and its
  // assignments run there.
  DenseMap<StringAttr, int64_t> home;
  auto nameRead = [](Operation &op) -> FlatSymbolRefAttr {
    if (auto get = dyn_cast<GetParamOp>(op))
      return get.getNameAttr();
    if (auto get = dyn_cast<GetStateOp>(op))
      return get.getNameAttr();
    return {};
  };
  // Targets that some op reads: their assignments wait for the home stage
  // (placing them by their operands first could fix the wrong stage).
  llvm::DenseSet<StringAttr> readNames;
  for (Operation &op : body.without_terminator())
    if (FlatSymbolRefAttr name = nameRead(op))
      readNames.insert(name.getAttr());
  auto propagate = [&] {
    for (bool changed = true; changed;) {
      changed = false;
      auto setStage = [&](Place &p, int64_t stage) {
        if (stage >= 0 && p.stage != stage) {
          p.stage = stage;
          changed = true;
        }
      };
      for (Operation &op : body.without_terminator()) {
        Place &p = places[&op];
        if (p.stage >= 0 || p.replicated || isa<GetParamOp, GetStateOp>(op))
          continue;
        if (auto assign = dyn_cast<AssignOp>(op)) {
          auto it = home.find(assign.getNameAttr().getAttr());
          if (it != home.end()) {
            setStage(p, it->second);
            continue;
          }
          // (A scalar state's reads are replicated and give it no home: its
          // assignment follows its value, e.g. the step counter under loss
          // scaling, which the combined gradient norm decides.)
          if (readNames.contains(assign.getNameAttr().getAttr()) &&
              !replicatedState(assign.getNameAttr()))
            continue;
        }
        // An optimizer update runs where its parameter lives (with its
        // state), whatever stage its gradient comes from: a constant
        // gradient (of a program that hands in its own backward) is of no
        // stage.
        if (auto update = dyn_cast<OptimizerUpdateOpInterface>(op))
          if (auto get = update.getParameter().getDefiningOp<GetParamOp>()) {
            auto it = home.find(get.getNameAttr().getAttr());
            if (it != home.end())
              setStage(p, it->second);
            continue;
          }
        int64_t stage = -1;
        for (Value v : op.getOperands())
          if (!isTokenValue(v))
            stage = std::max(stage, stageOf(v));
        setStage(p, stage);
      }
      for (Operation &op : llvm::reverse(body.without_terminator())) {
        Place &p = places[&op];
        if (p.stage >= 0 || p.replicated)
          continue;
        int64_t best = -1;
        for (OpOperand &use : op.getUses()) {
          Operation *user = use.getOwner();
          if (isa<func::ReturnOp>(user) || isTokenValue(use.get()))
            continue;
          const Place &u = places[user];
          if (!u.replicated && u.stage >= 0 && (best < 0 || u.stage < best))
            best = u.stage;
        }
        setStage(p, best);
      }
      for (Operation &op : body.without_terminator()) {
        FlatSymbolRefAttr name = nameRead(op);
        if (!name || places[&op].replicated || places[&op].stage < 0)
          continue;
        auto [it, inserted] =
            home.try_emplace(name.getAttr(), places[&op].stage);
        if (!inserted && places[&op].stage < it->second) {
          it->second = places[&op].stage;
          changed = true;
        }
        if (inserted)
          changed = true;
      }
    }
  };
  propagate();
  // Reads nothing uses are dead. What else neither reads nor feeds a staged
  // value (the update of a parameter that nothing reads, from a constant
  // gradient that a hand-written backward returns) goes to the first stage,
  // then what it feeds and reads follows it.
  for (Operation &op : body.without_terminator()) {
    Place &p = places[&op];
    if (p.replicated || p.stage >= 0)
      continue;
    if (isa<GetParamOp, GetStateOp, arith::ConstantOp>(op) && op.use_empty()) {
      p.dead = true;
      continue;
    }
    p.stage = 0;
    if (FlatSymbolRefAttr name = nameRead(op))
      home.try_emplace(name.getAttr(), 0);
    propagate();
  }
  for (Operation &op : body.without_terminator())
    if (FlatSymbolRefAttr name = nameRead(op))
      if (!places[&op].replicated && !places[&op].dead)
        places[&op].stage = home[name.getAttr()];
  if (!final)
    return success();
  // An assignment runs where its target lives.
  for (Operation &op : body.without_terminator())
    if (auto assign = dyn_cast<AssignOp>(op)) {
      Place &p = places[&op];
      if (p.replicated)
        continue;
      auto it = home.find(assign.getNameAttr().getAttr());
      if (it != home.end() && rankStage(it->second) != rankStage(p.stage))
        return op.emitOpError()
               << "updates " << assign.getNameAttr() << " on stage " << p.stage
               << ", but it lives on stage " << it->second;
    }

  // Jobs. A forward op after the first backward op of its micro-batch was
  // cloned there by strata-recompute: it runs in the backward job.
  DenseMap<int64_t, size_t> firstBackward;
  for (Operation &op : body.without_terminator())
    if (std::optional<int64_t> mb = getMicroBatch(&op))
      if (getRole(&op) == Role::Backward)
        firstBackward.try_emplace(*mb, order[&op]);
  // The optimizer phase starts at its first (staged) op in program order;
  // a collective after that point belongs to it on every rank, whatever
  // this rank contributes (a ZeRO all-gather of a rank that owns none of
  // the stage's parameters reads no update, but must run where the owners'
  // does).
  bool optimizerPhase = false;
  for (Operation &op : body.without_terminator()) {
    Place &p = places[&op];
    bool optimizerOp = isa<AssignOp>(op) || getRole(&op) == Role::Optimizer;
    if (optimizerOp && !p.replicated)
      optimizerPhase = true;
    if (std::optional<int64_t> mb = getMicroBatch(&op)) {
      p.microBatch = *mb;
      auto first = firstBackward.find(*mb);
      bool backward =
          getRole(&op) == Role::Backward ||
          (first != firstBackward.end() && order[&op] > first->second);
      p.part = backward ? Part::B : Part::F;
    } else if (optimizerOp || (optimizerPhase && isCollective(&op))) {
      p.part = Part::Post;
    } else {
      p.part = Part::Pre; // refined per stage once the schedule is known
    }
  }
  return success();
}

LogicalResult PipelinePass::run(ModuleOp module, func::FuncOp func) {
  MLIRContext *ctx = module.getContext();
  Block &body = func.getBody().front();
  const int64_t p = ppDegree;
  int64_t m = 1;
  if (auto attr = func->getAttrOfType<IntegerAttr>(
          StrataDialect::kMicroBatchesAttrName))
    m = attr.getInt();
  if (m != accumulateSteps)
    return mlir::emitError(func.getLoc())
           << "strata-pipeline: the step has " << m
           << " micro-batches, accumulate-steps is "
           << static_cast<int64_t>(accumulateSteps)
           << " (run strata-gradient-merge with k-steps = accumulate-steps "
              "before strata-optimizer)";
  if (microBatchSize != 1 && func.getNumArguments() > 0) {
    int64_t rows = tensorType(func.getArgument(0)).getDimSize(0) / m;
    if (rows != microBatchSize)
      return mlir::emitError(func.getLoc())
             << "strata-pipeline: micro-batch-size is "
             << static_cast<int64_t>(microBatchSize)
             << ", but the step's batch of "
             << tensorType(func.getArgument(0)).getDimSize(0)
             << " rows per rank in " << m << " micro-batches gives " << rows;
  }
  auto jobs = makeSchedule(schedule, p, m, vppDegree);
  if (!jobs)
    return mlir::emitError(func.getLoc())
           << "strata-pipeline: " << llvm::toString(jobs.takeError());

  // One stage: nothing to split once the settings are checked.
  if (p == 1)
    return success();
  bool zeroBubble = schedule == "ZBH1";
  if (zeroBubble)
    splitWeightGradients(body);
  // Placing twice: clipping is split by the stages of the first placement;
  // the optimizer then follows the per-stage clipped gradients.
  if (failed(place(func, /*final=*/false)) || failed(splitClipping(body)) ||
      failed(place(func, /*final=*/true)))
    return failure();
  if (zeroBubble && failed(classifyWeightParts(body)))
    return failure();

  // Segments of each stage: a schedule entry F or I is one segment, W one,
  // B two (its input part, then its weight part).
  struct SegmentKey {
    Part part;
    int64_t microBatch, chunk;
    bool operator<(const SegmentKey &o) const {
      return std::tie(part, microBatch, chunk) <
             std::tie(o.part, o.microBatch, o.chunk);
    }
  };
  std::vector<std::map<SegmentKey, size_t>> segment(p);
  std::vector<size_t> postSegment(p);
  for (int64_t s = 0; s < p; ++s) {
    size_t next = 1; // 0: pre
    for (const Entry &e : (*jobs)[s]) {
      SegmentKey f{Part::F, e.microBatch, e.chunk};
      SegmentKey b{Part::B, e.microBatch, e.chunk};
      SegmentKey w{Part::W, e.microBatch, e.chunk};
      switch (e.step) {
      case Step::F:
        segment[s][f] = next++;
        break;
      case Step::B:
        segment[s][b] = next++;
        segment[s][w] = next++;
        break;
      case Step::I:
        segment[s][b] = next++;
        break;
      case Step::W:
        segment[s][w] = next++;
        break;
      }
    }
    postSegment[s] = next;
  }

  // Each op's segment on its stage; ops without a micro-batch follow their
  // latest operand on the same stage, and a collective also follows the
  // stage's previous collective: every rank of a stage issues its
  // collectives in program order, whatever it contributes (a rank with an
  // empty share of a ZeRO all-gather would otherwise issue it first).
  DenseMap<Operation *, size_t> seg;
  std::vector<size_t> lastCollective(p, 0);
  for (Operation &op : body.without_terminator()) {
    const Place &pl = places[&op];
    if (pl.dead || pl.replicated) {
      seg[&op] = isa<AssignOp>(op) ? SIZE_MAX : 0;
      continue;
    }
    int64_t s = rankStage(pl.stage);
    if (pl.part == Part::Post) {
      seg[&op] = postSegment[s];
      if (isCollective(&op))
        lastCollective[s] = postSegment[s];
      continue;
    }
    if (pl.microBatch >= 0) {
      auto it = segment[s].find({pl.part, pl.microBatch, chunkOf(pl.stage)});
      if (it == segment[s].end())
        return op.emitOpError()
               << "belongs to micro-batch " << pl.microBatch
               << ", which the schedule does not run on stage " << s;
      seg[&op] = it->second;
      continue;
    }
    size_t latest = isCollective(&op) ? lastCollective[s] : 0;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp(); def && !isTokenValue(v)) {
        const Place &d = places[def];
        if (!d.replicated && !d.dead && rankStage(d.stage) == s)
          latest = std::max(latest, seg[def]);
      }
    seg[&op] = latest;
    if (isCollective(&op))
      lastCollective[s] = latest;
  }

  // The ops of each rank stage in order; replicated ops where needed.
  std::vector<SmallVector<Operation *>> ops(p);
  std::vector<DenseSet<Operation *>> on(p);
  for (Operation &op : body.without_terminator()) {
    const Place &pl = places[&op];
    if (!pl.dead && !pl.replicated)
      on[rankStage(pl.stage)].insert(&op);
  }
  for (int64_t s = 0; s < p; ++s) {
    // Replicated ops used on s (users come later: walk backwards), and the
    // assignments of the replicated states read on s.
    DenseSet<StringAttr> stateRead;
    for (Operation &op : llvm::reverse(body.without_terminator())) {
      if (!places[&op].replicated || isa<AssignOp>(op))
        continue;
      // (Every stage returns the step's results.)
      bool needed = llvm::any_of(op.getUsers(), [&](Operation *u) {
        return on[s].contains(u) || isa<func::ReturnOp>(u);
      });
      if (needed) {
        on[s].insert(&op);
        if (auto get = dyn_cast<GetStateOp>(op))
          stateRead.insert(get.getNameAttr().getAttr());
      }
    }
    for (Operation &op : body.without_terminator())
      if (auto assign = dyn_cast<AssignOp>(op))
        if (places[&op].replicated &&
            stateRead.contains(assign.getNameAttr().getAttr())) {
          on[s].insert(&op);
          // Its value's ops are replicated too.
          SmallVector<Operation *> worklist = {
              assign.getValue().getDefiningOp()};
          while (!worklist.empty()) {
            Operation *def = worklist.pop_back_val();
            if (!def || !on[s].insert(def).second)
              continue;
            for (Value v : def->getOperands())
              worklist.push_back(v.getDefiningOp());
          }
        }
    for (Operation &op : body.without_terminator())
      if (on[s].contains(&op))
        ops[s].push_back(&op);
    llvm::stable_sort(
        ops[s], [&](Operation *a, Operation *b) { return seg[a] < seg[b]; });
  }

  // Messages: a value used on another rank stage (tokens only order
  // collectives: every rank stage rebuilds its own chain).
  std::vector<DenseMap<Operation *, size_t>> position(p);
  for (int64_t s = 0; s < p; ++s)
    for (auto [i, op] : llvm::enumerate(ops[s]))
      position[s][op] = i;
  std::vector<Message> messages;
  for (int64_t a = 0; a < p; ++a)
    for (Operation *op : ops[a]) {
      if (places[op].replicated)
        continue;
      for (Value r : op->getResults()) {
        if (isTokenValue(r))
          continue;
        // The first use on each other stage, in that stage's order.
        std::map<int64_t, size_t> firstUse;
        for (OpOperand &use : r.getUses()) {
          Operation *user = use.getOwner();
          if (isa<func::ReturnOp>(user)) {
            for (int64_t b = 0; b < p; ++b)
              if (b != a)
                firstUse.try_emplace(b, ops[b].size());
            continue;
          }
          for (int64_t b = 0; b < p; ++b)
            if (b != a && on[b].contains(user)) {
              size_t at = position[b][user];
              auto [it, inserted] = firstUse.try_emplace(b, at);
              if (!inserted)
                it->second = std::min(it->second, at);
            }
        }
        for (auto [b, at] : firstUse)
          messages.push_back({r, a, b, position[a][op] + 1, at});
      }
    }
  // The receives of a channel keep the order of its sends: a receive moves
  // up to the next one of its channel when that is needed earlier.
  std::map<std::pair<int64_t, int64_t>, SmallVector<Message *>> channels;
  for (Message &msg : messages)
    channels[{msg.from, msg.to}].push_back(&msg);
  for (auto &[key, list] : channels) {
    llvm::stable_sort(list, [](Message *x, Message *y) {
      return x->sendAfter < y->sendAfter;
    });
    for (size_t k = list.size() - 1; k-- > 0;)
      list[k]->recvBefore =
          std::min(list[k]->recvBefore, list[k + 1]->recvBefore);
  }

  // Each stage's sequence of sends and receives.
  std::vector<std::vector<StageEvent>> events(p);
  for (auto &[key, list] : channels)
    for (auto [k, msg] : llvm::enumerate(list)) {
      events[msg->from].push_back({true, msg, msg->sendAfter, 0});
      events[msg->to].push_back({false, msg, msg->recvBefore, k});
    }
  for (int64_t s = 0; s < p; ++s)
    llvm::stable_sort(events[s], [](const StageEvent &x, const StageEvent &y) {
      // At one position: sends (after the op before) come before receives
      // (before the op after); receives of a channel in order.
      if (x.at != y.at)
        return x.at < y.at;
      if (x.send != y.send)
        return x.send;
      return x.tiebreak < y.tiebreak;
    });

  // Names for diagnostics.
  auto describe = [&](Message *msg) {
    Operation *def = msg->value.getDefiningOp();
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "the " << def->getName() << " result";
    int64_t mb = places[def].microBatch;
    if (mb >= 0)
      os << " of micro-batch " << mb;
    if (std::string file = fileLocation(def->getLoc()); !file.empty())
      os << " (" << file << ")";
    return text;
  };
  auto jobAt = [&](int64_t s, size_t at) -> std::string {
    if (at >= ops[s].size())
      return "the optimizer";
    Operation *op = ops[s][at];
    const Place &pl = places[op];
    if (pl.microBatch < 0)
      return pl.part == Part::Post ? "the optimizer" : "the step's start";
    const char *kind = pl.part == Part::F   ? "F"
                       : pl.part == Part::W ? "W"
                                            : "B";
    std::string job = (Twine(kind) + Twine(pl.microBatch)).str();
    if (vppDegree > 1)
      job += (" of virtual stage " + Twine(pl.stage)).str();
    return job;
  };

  // Simulate: sends are buffered, a receive waits for its channel's next
  // message, which must be the one it expects.
  {
    std::vector<size_t> pc(p, 0);
    std::map<std::pair<int64_t, int64_t>, std::deque<Message *>> inFlight;
    bool progress = true;
    while (progress) {
      progress = false;
      for (int64_t s = 0; s < p; ++s)
        while (pc[s] < events[s].size()) {
          const StageEvent &e = events[s][pc[s]];
          if (e.send) {
            inFlight[{s, e.msg->to}].push_back(e.msg);
          } else {
            auto &queue = inFlight[{e.msg->from, s}];
            if (queue.empty())
              break;
            if (queue.front() != e.msg)
              return mlir::emitError(func.getLoc())
                     << "strata-pipeline: stage " << s << " would receive "
                     << describe(queue.front()) << " from stage " << e.msg->from
                     << " where it expects " << describe(e.msg);
            queue.pop_front();
          }
          ++pc[s];
          progress = true;
        }
    }
    std::string waits;
    for (int64_t s = 0; s < p; ++s)
      if (pc[s] < events[s].size()) {
        const StageEvent &e = events[s][pc[s]];
        waits +=
            llvm::formatv("; stage {0} waits in {1} for {2} from stage {3}", s,
                          jobAt(s, e.at), describe(e.msg), e.msg->from)
                .str();
      }
    if (!waits.empty())
      return mlir::emitError(func.getLoc()) << "strata-pipeline: schedule "
                              << std::string(schedule) << " deadlocks" << waits;
  }

  // Record the schedule of every stage.
  SmallVector<Attribute> scheduleAttr;
  for (int64_t s = 0; s < p; ++s) {
    SmallVector<std::string> names;
    for (const Entry &e : (*jobs)[s])
      names.push_back(entryName(e, vppDegree > 1));
    scheduleAttr.push_back(StringAttr::get(ctx, llvm::join(names, " ")));
  }

  // This rank's program.
  const int64_t me = grid.getCoordinate(rank, GridAxis::Pp);
  // @pp: the ranks that differ only in their stage.
  FlatSymbolRefAttr pp = declareCommGroup(module, "pp", grid, {GridAxis::Pp});
  return emitRankProgram(module, func, me, pp, ops, on, events, scheduleAttr);
}

} // namespace
