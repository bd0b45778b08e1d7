//===- Sharding.cpp - ZeRO stages 1-3 as per-rank programs ----------------===//
//
// Runs after strata-data-parallel (batch shards, averaged gradients in
// buckets) and strata-optimizer, and makes the program of one rank: every
// parameter gets an owner among the ranks of its sharding group
// (greedy_even or use_order); this rank keeps the optimizer state and the
// update of the parameters it owns only.
//  - Stage 1: gradients are all-reduced as in data parallelism; when the
//    step ends, each rank packs its updated parameters into a flat buffer
//    and one all_gather per bucket gives every rank all of them.
//  - Stage 2: each gradient bucket becomes one reduce_scatter: every rank's
//    share (the gradients of the parameters it owns) is packed into a
//    segment of the bucket, so that each rank receives only its own,
//    averaged; global-norm clipping sums per-rank partial norms.
//  - Stage 3: parameters of at least `segment-size` elements live on their
//    owner only and are broadcast into step buffers before the forward and
//    the backward reads, each prefetched one gather ahead.
// The groups are the rank grid's sharding axis (consecutive ranks); with a dp
// axis (hybrid data parallelism) the reduce_scatter is followed by an
// all_reduce of the segment over the ranks that hold the same share.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "strata/Analysis/MemoryPlan.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <map>

namespace strata {
#define GEN_PASS_DEF_STRATASHARDING
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

bool isUpdate(Operation *op) { return isa<OptimizerUpdateOpInterface>(op); }

/// The ordering token last produced before `op`, or a new strata.init_token
/// right before it.
Value tokenBefore(Operation *op) {
  for (Operation *prev = op->getPrevNode(); prev; prev = prev->getPrevNode())
    for (Value r : llvm::reverse(prev->getResults()))
      if (isa<TokenType>(r.getType()))
        return r;
  OpBuilder b(op);
  auto init =
      InitTokenOp::create(b, op->getLoc(), TokenType::get(op->getContext()));
  setRole(init, Role::Communication);
  return init;
}

StringRef nameOf(Operation *get) {
  return get->getAttrOfType<FlatSymbolRefAttr>("name").getValue();
}

struct ShardingPass : public strata::impl::StrataShardingBase<ShardingPass> {
  using StrataShardingBase::StrataShardingBase;

  /// The rank grid's sharding and (outer) data-parallel axes.
  int64_t degree = 1, dpDegree = 1;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      mlir::emitError(module.getLoc()) << "strata-sharding: " << message;
      signalPassFailure();
    };
    if (stage < 1 || stage > 3)
      return fail("stage must be 1, 2 or 3");
    if (segmentSize < 0)
      return fail("segment-size must be >= 0");
    if (!(bucketMb > 0.0))
      return fail("bucket-mb must be positive (sharding.comm_buffer_size_MB)");
    if (partition != "greedy_even" && partition != "use_order")
      return fail("unknown partition '" + partition +
                  "' (greedy_even or use_order)");
    FailureOr<func::FuncOp> found = getStepFunction(module, "strata-sharding");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp step = *found;
    FailureOr<RankGridOp> grid = getRankGrid(module, "strata-sharding");
    if (failed(grid))
      return signalPassFailure();
    if (rank < 0 || rank >= grid->getWorldSize())
      return fail("rank " + Twine(rank) + " is outside the rank grid of " +
                  Twine(grid->getWorldSize()) + " ranks");
    degree = grid->getAxisSize(GridAxis::Sharding);
    dpDegree = grid->getAxisSize(GridAxis::Dp);
    if (degree == 1)
      return;
    if (failed(checkRunsBefore(module, "strata-sharding",
                               {"strata-sharding", "strata-pipeline"})) ||
        failed(checkOnlyStepReadsSymbols(module, step, "strata-sharding")) ||
        failed(recordRank(module, "strata-sharding", rank)))
      return signalPassFailure();

    // Owners, by parameter order in the module.
    std::vector<std::pair<std::string, int64_t>> params;
    for (auto p : module.getOps<ParamOp>())
      params.push_back({p.getSymName().str(),
                        cast<RankedTensorType>(p.getType()).getNumElements()});
    int64_t total = 0;
    for (auto &[name, n] : params)
      total += n;
    std::vector<int64_t> load(degree, 0);
    llvm::StringMap<int64_t> owner;
    if (partition == "greedy_even") {
      // Largest first, each to the least loaded rank (the LPT rule; Paddle
      // goes in parameter order, which leaves shards 13% apart on the
      // benchmark GPT at 4 ranks).
      std::vector<size_t> order(params.size());
      for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return params[a].second > params[b].second;
      });
      for (size_t i : order) {
        int64_t o = std::min_element(load.begin(), load.end()) - load.begin();
        load[o] += params[i].second;
        owner[params[i].first] = o;
      }
    } else {
      // Contiguous runs of about total / degree elements, in order.
      int64_t before = 0;
      for (auto &[name, n] : params) {
        owner[name] = std::min<int64_t>(degree - 1, before * degree /
                                                        std::max<int64_t>(total, 1));
        before += n;
      }
    }
    const int64_t me = grid->getCoordinate(rank, GridAxis::Sharding);

    // The group: the grid's sharding axis (consecutive ranks).
    FlatSymbolRefAttr groupRef =
        declareCommGroup(module, "sharding", *grid, {GridAxis::Sharding});
    OpBuilder b(module.getContext());
    SymbolTable symbols(module);

    Block &body = step.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // Before any change (so that every rank decides alike): which
    // parameter's gradient each bucket of data parallelism carries.
    SmallVector<BucketedGradient> gradients = bucketedGradients(body);
    // Each parameter's home stage (a pipeline keeps each bucket on one
    // stage; it sums a tied parameter's gradient parts there), and that of
    // each clipped gradient.
    llvm::StringMap<int64_t> home = homeStages(body);
    DenseMap<Value, int64_t> clippedStage;
    for (Operation &op : body)
      if (isUpdate(&op))
        if (auto clip = op.getOperand(1).getDefiningOp<ClipByGlobalNormOp>())
          if (auto get = op.getOperand(0).getDefiningOp<GetParamOp>())
            clippedStage[clip.getInputs()[cast<OpResult>(op.getOperand(1))
                                              .getResultNumber()]] =
                home.lookup(get.getName());
    // The new value of each updated parameter (null where another rank
    // owns it), in module order.
    llvm::StringMap<Value> updated;
    llvm::StringSet<> droppedState;
    SmallVector<Operation *> updates;
    for (Operation &op : body)
      if (isUpdate(&op))
        updates.push_back(&op);
    if (updates.empty())
      return fail("the step updates no parameter: sharding divides the "
                  "optimizer's updates and state among the ranks, so run "
                  "strata-optimizer first");
    for (Operation *op : updates) {
      Operation *get = op->getOperand(0).getDefiningOp();
      if (!isa_and_nonnull<GetParamOp>(get)) {
        op->emitOpError("updates a value that is not a strata.get_param; "
                        "strata-sharding cannot assign it an owner");
        return signalPassFailure();
      }
      std::string name = nameOf(get).str();
      // The new parameter is the update's first result.
      Value newParam = op->getResult(0);
      SmallVector<AssignOp> assigns;
      for (Value result : op->getResults())
        for (Operation *user : result.getUsers()) {
          auto assign = dyn_cast<AssignOp>(user);
          if (!assign) {
            user->emitOpError("uses an optimizer update's result; "
                              "strata-sharding moves updates to their owner");
            return signalPassFailure();
          }
          assigns.push_back(assign);
        }
      if (owner[name] == me) {
        // The parameter's own assign moves to the broadcast below.
        for (AssignOp a : assigns)
          if (a.getName() == name)
            a.erase();
        updated[name] = newParam;
        continue;
      }
      // Another rank's parameter: no update, no state.
      for (AssignOp a : assigns) {
        if (a.getName() != name)
          droppedState.insert(a.getName());
        a.erase();
      }
      // (Once each: a state value may feed the update twice.)
      llvm::SetVector<Value> inputs(op->operand_begin(), op->operand_end());
      op->erase();
      for (Value v : inputs)
        if (Operation *def = v.getDefiningOp())
          if (isa<GetStateOp>(def) && def->use_empty()) {
            droppedState.insert(nameOf(def));
            def->erase();
          }
      updated[name] = Value();
    }
    // Only the updates' own state (moments, velocities) goes: what the
    // step still reads or assigns stays.
    llvm::StringSet<> stillUsed;
    step.walk([&](Operation *op) {
      if (auto g = dyn_cast<GetStateOp>(op))
        stillUsed.insert(g.getName());
      else if (auto a = dyn_cast<AssignOp>(op))
        stillUsed.insert(a.getName());
    });
    for (auto &entry : droppedState)
      if (Operation *state = symbols.lookup(entry.getKey()))
        if (!stillUsed.contains(entry.getKey()))
          state->erase();

    if (stage >= 2 && failed(shardClipping(step, groupRef, me, clippedStage)))
      return signalPassFailure();
    // Hybrid: the ranks that hold the same share in each sharding group.
    FlatSymbolRefAttr outerRef;
    if (dpDegree > 1)
      outerRef = declareCommGroup(module, "sharding_dp", *grid, {GridAxis::Dp});
    if (stage >= 2 && failed(reduceScatterGradients(gradients, owner, me,
                                                    groupRef, outerRef)))
      return signalPassFailure();

    // Stage 3: parameters of at least `segment-size` elements live on their
    // owner only (smaller ones stay replicated, as Paddle's segment_size).
    llvm::StringSet<> sharded;
    if (stage == 3) {
      for (auto &[name, n] : params)
        if (n >= segmentSize && updated.count(name))
          sharded.insert(name);
      if (sharded.empty())
        mlir::emitWarning(step.getLoc())
            << "strata-sharding: stage 3 keeps no parameter on its owner "
               "alone: no updated parameter has segment-size ("
            << int64_t(segmentSize)
            << ") elements or more (the strategy's sharding.segment_size), "
               "so every rank holds every parameter, as at stage 2";
    }
    if (!sharded.empty() &&
        failed(gatherBeforeUse(module, step, groupRef, owner, me, sharded)))
      return signalPassFailure();

    // When the step ends, every updated parameter comes from its owner:
    // packed per owner and all-gathered, in buckets.
    b.setInsertionPoint(ret);
    Value token = tokenBefore(ret);
    // Per home stage, element type and owner, the replicated parameters in
    // module order (a bucket is one flat buffer of one element type).
    using OwnerLists =
        SmallVector<SmallVector<std::pair<std::string, int64_t>>>;
    std::map<int64_t, llvm::MapVector<Type, OwnerLists>> byStage;
    for (auto &[name, n] : params) {
      auto it = updated.find(name);
      if (it == updated.end())
        continue; // frozen: never updated
      if (sharded.contains(name)) {
        // Stage 3: only the owner holds it; no gather.
        if (it->second) {
          auto assign = AssignOp::create(
              b, ret.getLoc(), FlatSymbolRefAttr::get(b.getContext(), name),
              it->second);
          setRole(assign, Role::Optimizer);
        }
        continue;
      }
      Type element = cast<RankedTensorType>(paramType(name)).getElementType();
      auto &lists = byStage[home.lookup(name)][element];
      lists.resize(degree);
      lists[owner[name]].push_back({name, n});
    }
    // A bucket holds up to bucket-mb of each rank's parameters.
    for (auto &[stageIndex, byType] : byStage)
      for (auto &[element, lists] : byType) {
        const int64_t capacity = std::max<int64_t>(
            1, int64_t(bucketMb * 1024 * 1024 /
                       std::max(1u, element.getIntOrFloatBitWidth() / 8)));
        SmallVector<OwnerLists> buckets; // [bucket][rank] -> parameters
        for (int64_t r = 0; r < degree; ++r) {
          size_t bucket = 0;
          int64_t filled = 0;
          for (auto &entry : lists[r]) {
            if (filled > 0 && filled + entry.second > capacity) {
              ++bucket;
              filled = 0;
            }
            if (buckets.size() <= bucket)
              buckets.resize(bucket + 1, OwnerLists(degree));
            buckets[bucket][r].push_back(entry);
            filled += entry.second;
          }
        }
        for (auto &bucket : buckets)
          token = gatherBucket(bucket, element, updated, me, groupRef, token,
                               ret);
      }
    recordPass(module, "strata-sharding");
  }

  /// One all_gather of a bucket: rank r's segment holds its updated
  /// parameters `bucket[r]` (all of type `element`), packed (and padded to
  /// the largest segment); every parameter is assigned its owner's value.
  /// Returns the new token.
  Value gatherBucket(
      ArrayRef<SmallVector<std::pair<std::string, int64_t>>> bucket,
      Type element, const llvm::StringMap<Value> &updated, int64_t me,
      FlatSymbolRefAttr group, Value token, func::ReturnOp ret) {
    OpBuilder b(ret);
    MLIRContext *ctx = b.getContext();
    Location loc = ret.getLoc();
    int64_t segment = 0;
    for (auto &list : bucket) {
      int64_t size = 0;
      for (auto &entry : list)
        size += entry.second;
      segment = std::max(segment, size);
    }
    if (segment == 0)
      return token;
    SmallVector<Value> mine;
    for (auto &entry : bucket[me])
      mine.push_back(updated.lookup(entry.first));
    auto pack = PackOp::create(b, loc, RankedTensorType::get({segment}, element),
                               mine);
    setRole(pack, Role::Communication);
    auto gather = AllGatherOp::create(
        b, loc, RankedTensorType::get({segment * degree}, element),
        TokenType::get(ctx), pack, token, group, b.getI64IntegerAttr(0));
    setRole(gather, Role::Communication);
    for (int64_t r = 0; r < degree; ++r) {
      SmallVector<Value> values;
      if (r == me) {
        // This rank's own values, as they were packed.
        values = mine;
      } else if (!bucket[r].empty()) {
        // Another rank's parameters, in their declared types.
        SmallVector<Type> types;
        for (auto &entry : bucket[r])
          types.push_back(paramType(entry.first));
        auto unpack = UnpackOp::create(b, loc, types, gather.getResult(),
                                       b.getI64IntegerAttr(r * segment));
        setRole(unpack, Role::Communication);
        values.append(unpack.getResults().begin(), unpack.getResults().end());
      }
      for (auto [entry, value] : llvm::zip(bucket[r], values)) {
        auto assign = AssignOp::create(
            b, loc, FlatSymbolRefAttr::get(ctx, entry.first), value);
        setRole(assign, Role::Optimizer);
      }
    }
    return gather.getOutToken();
  }

  Type paramType(StringRef name) {
    return cast<ParamOp>(SymbolTable::lookupSymbolIn(getOperation(), name))
        .getType();
  }

  /// One parameter's gradient in a bucket of strata-data-parallel (pack ->
  /// all_reduce {strata.bucket} -> unpack).
  struct BucketedGradient {
    std::string param;
    Value local;      ///< this rank's gradient (packed)
    Value averaged;   ///< the unpacked mean, read by the update
    AllReduceOp reduce;
    unsigned position; ///< in the bucket
  };

  /// The bucket's packed gradients and, for fp16_allreduce (pack -> scale
  /// by 1/ranks -> cast to f16 -> all_reduce sum -> cast back), the scale
  /// and the cast; null when `reduce` is not a bucket of
  /// strata-data-parallel.
  struct Bucket {
    PackOp pack;
    ScaleOp share; ///< fp16_allreduce: each rank's share
    CastOp narrow; ///< fp16_allreduce: the share on the wire
  };
  static Bucket bucketOf(AllReduceOp reduce) {
    if (!reduce->hasAttr(StrataDialect::kBucketAttrName))
      return {};
    if (reduce.getKind() == ReduceKind::Mean)
      return {reduce.getInput().getDefiningOp<PackOp>(), {}, {}};
    auto narrow = reduce.getInput().getDefiningOp<CastOp>();
    auto share =
        narrow ? narrow.getInput().getDefiningOp<ScaleOp>() : ScaleOp();
    auto pack = share ? share.getInput().getDefiningOp<PackOp>() : PackOp();
    if (reduce.getKind() != ReduceKind::Sum || !pack)
      return {};
    return {pack, share, narrow};
  }
  /// The all-reduced bucket as the unpack reads it (through the cast back
  /// to f32 under fp16_allreduce).
  static AllReduceOp reduceOf(UnpackOp unpack) {
    Value in = unpack.getInput();
    if (auto widen = in.getDefiningOp<CastOp>())
      in = widen.getInput();
    return in.getDefiningOp<AllReduceOp>();
  }

  /// The bucketed gradients whose mean is read by one parameter's update,
  /// directly or through global-norm clipping, and by nothing else; in
  /// program order.
  static SmallVector<BucketedGradient> bucketedGradients(Block &body) {
    SmallVector<BucketedGradient> result;
    for (Operation &op : body) {
      if (!isUpdate(&op))
        continue;
      auto get = op.getOperand(0).getDefiningOp<GetParamOp>();
      if (!get)
        continue;
      Value grad = op.getOperand(1);
      Operation *clip = nullptr;
      if (auto c = grad.getDefiningOp<ClipByGlobalNormOp>()) {
        clip = c;
        unsigned index = cast<OpResult>(grad).getResultNumber();
        if (!grad.hasOneUse())
          continue;
        grad = c.getInputs()[index];
      }
      // Master gradients (amp.use_master_grad): the update and clipping
      // read the f32 copy of the unpacked low-precision mean.
      Value read = grad;
      if (auto master = grad.getDefiningOp<CastOp>()) {
        grad = master.getInput();
        if (!grad.hasOneUse())
          continue;
      }
      auto unpack = grad.getDefiningOp<UnpackOp>();
      if (!unpack || unpack.getOffset() != 0)
        continue;
      auto reduce = reduceOf(unpack);
      if (!reduce)
        continue;
      PackOp pack = bucketOf(reduce).pack;
      if (!pack || pack.getInputs().size() != unpack.getNumResults())
        continue;
      bool only = llvm::all_of(read.getUsers(), [&](Operation *u) {
        return u == &op || u == clip || isa<GlobalNormOp>(u);
      });
      unsigned position = cast<OpResult>(grad).getResultNumber();
      if (only)
        result.push_back({get.getName().str(), pack.getInputs()[position],
                          grad, reduce, position});
    }
    llvm::stable_sort(result, [](const BucketedGradient &a,
                                 const BucketedGradient &b) {
      if (a.reduce != b.reduce)
        return a.reduce->isBeforeInBlock(b.reduce);
      return a.position < b.position;
    });
    return result;
  }

  /// Stage 2: each gradient bucket (per pipeline stage) becomes one
  /// reduce_scatter of a flat buffer in which rank r's segment packs the
  /// gradients of the parameters r owns; this rank unpacks its own. The
  /// other gradients must be dead by now (their updates and their part in
  /// clipping are gone).
  LogicalResult reduceScatterGradients(
      ArrayRef<BucketedGradient> gradients,
      const llvm::StringMap<int64_t> &owner, int64_t me,
      FlatSymbolRefAttr group, FlatSymbolRefAttr outer) {
    // Per bucket; a bucket that also carries a gradient read elsewhere
    // stays an all-reduce (as in stage 1).
    llvm::MapVector<Operation *, SmallVector<const BucketedGradient *>> buckets;
    for (const BucketedGradient &g : gradients)
      buckets[g.reduce].push_back(&g);
    MLIRContext *ctx = &getContext();
    for (auto &[op, members] : buckets) {
      auto reduce = cast<AllReduceOp>(op);
      Bucket bucket = bucketOf(reduce);
      PackOp pack = bucket.pack;
      if (members.size() != pack.getInputs().size())
        continue;
      SmallVector<SmallVector<const BucketedGradient *>> byOwner(degree);
      for (const BucketedGradient *g : members)
        byOwner[owner.lookup(g->param)].push_back(g);
      int64_t segment = 0;
      for (auto &list : byOwner) {
        int64_t size = 0;
        for (const BucketedGradient *g : list)
          size += tensorType(g->local).getNumElements();
        segment = std::max(segment, size);
      }
      OpBuilder b(reduce);
      Location loc = reduce.getLoc();
      Type element = tensorType(pack).getElementType();
      SmallVector<Value> inputs;
      for (auto &list : byOwner) {
        int64_t size = 0;
        for (const BucketedGradient *g : list) {
          inputs.push_back(g->local);
          size += tensorType(g->local).getNumElements();
        }
        if (&list != &byOwner.back() && size < segment) {
          auto pad = RankedTensorType::get({segment - size}, element);
          auto zeros = arith::ConstantOp::create(
              b, loc, DenseElementsAttr::get(pad, b.getZeroAttr(element)));
          setRole(zeros, Role::Communication);
          inputs.push_back(zeros);
        }
      }
      // fp16_allreduce: the shares (each divided by the number of ranks)
      // go on the wire in f16 and are summed, as strata-data-parallel's
      // all-reduce did.
      auto kind = ReduceKindAttr::get(ctx, bucket.narrow ? ReduceKind::Sum
                                                         : ReduceKind::Mean);
      Value byRank = PackOp::create(
          b, loc, RankedTensorType::get({segment * degree}, element), inputs);
      setRole(byRank.getDefiningOp(), Role::Communication);
      if (bucket.narrow) {
        byRank = ScaleOp::create(b, loc, byRank, bucket.share.getFactorAttr());
        setRole(byRank.getDefiningOp(), Role::Communication);
        byRank = CastOp::create(b, loc,
                                tensorType(byRank).clone(
                                    tensorType(bucket.narrow).getElementType()),
                                byRank);
        setRole(byRank.getDefiningOp(), Role::Communication);
      }
      Type wire = tensorType(byRank).getElementType();
      auto scatter = ReduceScatterOp::create(
          b, loc, RankedTensorType::get({segment}, wire), TokenType::get(ctx),
          byRank, reduce.getToken(), group, kind, b.getI64IntegerAttr(0));
      setRole(scatter, Role::Communication);
      Value mine = scatter.getResult(), token = scatter.getOutToken();
      if (outer) {
        auto across =
            AllReduceOp::create(b, loc, mine.getType(), TokenType::get(ctx),
                                mine, token, outer, kind);
        setRole(across, Role::Communication);
        mine = across.getResult();
        token = across.getOutToken();
      }
      if (bucket.narrow) {
        mine = CastOp::create(b, loc, RankedTensorType::get({segment}, element),
                              mine);
        setRole(mine.getDefiningOp(), Role::Communication);
      }
      if (!byOwner[me].empty()) {
        SmallVector<Type> types;
        for (const BucketedGradient *g : byOwner[me])
          types.push_back(g->averaged.getType());
        // Unpacked where the first of them is read, so that the backward
        // pass goes on while the reduce-scatter runs (the runtime completes
        // it right before the unpack).
        Operation *firstUse = nullptr;
        Block *block = reduce->getBlock();
        for (const BucketedGradient *g : byOwner[me])
          for (Operation *user : g->averaged.getUsers()) {
            Operation *at = block->findAncestorOpInBlock(*user);
            if (!firstUse || at->isBeforeInBlock(firstUse))
              firstUse = at;
          }
        OpBuilder::InsertionGuard guard(b);
        if (firstUse && mine.getDefiningOp()->isBeforeInBlock(firstUse))
          b.setInsertionPoint(firstUse);
        auto unpack = UnpackOp::create(b, loc, types, mine,
                                       b.getI64IntegerAttr(0));
        setRole(unpack, Role::Communication);
        for (auto [g, v] : llvm::zip(byOwner[me], unpack.getResults()))
          Value(g->averaged).replaceAllUsesWith(v);
      }
      // The bucket's all-reduce goes, with its pack and unpack (and the
      // master-gradient casts of gradients another rank owns, dead now).
      for (const BucketedGradient *g : members)
        for (Operation *user :
             llvm::make_early_inc_range(g->averaged.getUsers()))
          if (isa<CastOp>(user) && user->use_empty())
            user->erase();
      for (const BucketedGradient *g : members)
        if (!g->averaged.use_empty())
          return g->averaged.getDefiningOp()->emitOpError(
                     "reads the gradient of '")
                 << g->param << "', which another rank owns under ZeRO stage 2";
      // (Under fp16_allreduce: the unpack reads the cast back to f32.)
      SmallVector<Operation *> readers(reduce.getResult().getUsers());
      for (Operation *user : readers) {
        if (isa<CastOp>(user) && bucket.narrow)
          for (Operation *unpackOp :
               llvm::make_early_inc_range(user->getUsers())) {
            if (!unpackOp->use_empty())
              return unpackOp->emitOpError("reads a gradient bucket that "
                                           "ZeRO stage 2 reduce-scatters");
            unpackOp->erase();
          }
        if (!user->use_empty())
          return user->emitOpError("reads a gradient bucket that ZeRO "
                                   "stage 2 reduce-scatters");
        user->erase();
      }
      reduce.getOutToken().replaceAllUsesWith(token);
      reduce.erase();
      for (Operation *input :
           {bucket.narrow.getOperation(), bucket.share.getOperation(),
            pack.getOperation()})
        if (input && input->use_empty())
          input->erase();
    }
    return success();
  }

  /// Stage 3: every read of a sharded parameter by the forward or backward
  /// pass becomes a broadcast from its owner into a buffer of the step (the
  /// memory plan frees it after its last use); the owner's optimizer reads
  /// its resident copy; other ranks drop the parameter's declaration. The
  /// decisions depend only on the program, not on the rank, so every rank
  /// issues the same broadcasts in the same order.
  LogicalResult gatherBeforeUse(ModuleOp module, func::FuncOp step,
                                FlatSymbolRefAttr group,
                                const llvm::StringMap<int64_t> &owner,
                                int64_t me, const llvm::StringSet<> &sharded) {
    MLIRContext *ctx = module.getContext();
    Block &body = step.getBody().front();
    OpBuilder b(ctx);
    b.setInsertionPointToStart(&body);
    auto init = InitTokenOp::create(b, step.getLoc(), TokenType::get(ctx));
    setRole(init, Role::Communication);
    Value token = init;
    SmallVector<GetParamOp> reads;
    for (Operation &op : body)
      if (auto get = dyn_cast<GetParamOp>(op);
          get && sharded.contains(get.getName()))
        reads.push_back(get);
    // One gather for the forward reads of each read op and one, placed
    // right before the first of them, for its backward reads: the gathered
    // copy dies after the forward pass and is gathered again for the
    // backward one (as ZeRO-3 releases and re-gathers).
    struct Gather {
      Operation *before;
      GetParamOp get;
      SmallVector<OpOperand *> uses;
    };
    SmallVector<Gather> gathers;
    for (GetParamOp get : reads) {
      StringRef name = get.getName();
      if (getRole(get) == Role::Optimizer) {
        // The optimizer's read: the owner's own copy; elsewhere unused
        // (the update of another rank's parameter was removed).
        if (owner.lookup(name) != me) {
          if (!get->use_empty())
            return mlir::emitError(get.getLoc())
                   << "strata-sharding: this read of @" << name
                   << " has strata.role optimizer but feeds "
                   << (*get->getUsers().begin())->getName()
                   << ", which rank " << me
                   << " keeps: the program's roles are inconsistent";
          get.erase();
        }
        continue;
      }
      // A read nothing uses names a parameter that other ranks no longer
      // declare: dropped.
      if (get->use_empty()) {
        get.erase();
        continue;
      }
      Gather forward{nullptr, get, {}}, backward{nullptr, get, {}};
      SmallVector<OpOperand *> typeOnly;
      for (OpOperand &use : get->getUses()) {
        // A use that reads only the type (strata.reduce_grad's input)
        // takes the forward's copy and gathers nothing of its own.
        if (readsOnlyType(use)) {
          typeOnly.push_back(&use);
          continue;
        }
        Operation *at = body.findAncestorOpInBlock(*use.getOwner());
        Gather &g = getRole(at) == Role::Backward ? backward : forward;
        if (!g.before || at->isBeforeInBlock(g.before))
          g.before = at;
        g.uses.push_back(&use);
      }
      Gather &typed = forward.uses.empty() ? backward : forward;
      if (!typed.uses.empty())
        typed.uses.append(typeOnly);
      if (!forward.uses.empty())
        gathers.push_back(forward);
      if (!backward.uses.empty())
        gathers.push_back(backward);
    }
    llvm::stable_sort(gathers, [](const Gather &a, const Gather &b) {
      return a.before->isBeforeInBlock(b.before);
    });
    llvm::SetVector<Operation *> replaced;
    for (auto [k, g] : llvm::enumerate(gathers)) {
      StringRef name = g.get.getName();
      bool mine = owner.lookup(name) == me;
      // Prefetched: started where the previous gather's parameter is first
      // used, so that it arrives while that use computes (the runtime
      // completes it right before its own first use).
      b.setInsertionPoint(k == 0 ? g.before : gathers[k - 1].before);
      auto type = cast<RankedTensorType>(g.get.getType());
      Value input;
      if (mine) {
        // The owner's resident copy, read where the gather starts.
        auto read = GetParamOp::create(b, g.get.getLoc(), type,
                                       g.get.getNameAttr());
        setRole(read, Role::Communication);
        input = read;
      } else {
        // Any tensor of the type: the owner's replaces it.
        auto zeros = arith::ConstantOp::create(
            b, g.get.getLoc(),
            DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())));
        setRole(zeros, Role::Communication);
        input = zeros;
      }
      auto gathered = BroadcastOp::create(
          b, g.get.getLoc(), type, TokenType::get(ctx), input, token, group,
          b.getI64IntegerAttr(owner.lookup(name)));
      setRole(gathered, Role::Communication);
      token = gathered.getOutToken();
      for (OpOperand *use : g.uses)
        use->set(gathered.getResult());
      replaced.insert(g.get);
    }
    for (Operation *get : replaced)
      if (get->use_empty())
        get->erase();
    // Parameters this rank neither owns nor reads any more.
    SymbolTable symbols(module);
    for (auto &entry : sharded)
      if (owner.lookup(entry.getKey()) != me)
        if (Operation *param = symbols.lookup(entry.getKey()))
          param->erase();
    return success();
  }

  /// Stage 2: a rank keeps only its parameters' gradients. Global-norm
  /// clipping then reads the owned gradients only: each rank's partial norm
  /// goes to its slot of a vector that the sharding group sums, and the
  /// norm of that vector is the global norm. The other gradients' buffers
  /// die at their all-reduce. With pipeline stages (`stageOf`: the home
  /// stage of each clipped gradient), each stage sums its own partial norms
  /// over its sharding group, and the global norm combines the stages'
  /// norms (strata-pipeline exchanges them between stages). The stages and
  /// collectives depend on the program only, never on what this rank owns.
  LogicalResult shardClipping(func::FuncOp step, FlatSymbolRefAttr group,
                              int64_t me,
                              const DenseMap<Value, int64_t> &stageOf) {
    SmallVector<ClipByGlobalNormOp> clips;
    step.walk([&](ClipByGlobalNormOp c) { clips.push_back(c); });
    for (ClipByGlobalNormOp clip : clips) {
      // Per stage (in order), the owned gradients and their clip results.
      std::map<int64_t, std::pair<SmallVector<Value>, SmallVector<Value>>>
          byStage;
      for (auto [in, out] : llvm::zip(clip.getInputs(), clip.getResults())) {
        auto &[inputs, results] = byStage[stageOf.lookup(in)];
        if (!out.use_empty()) {
          inputs.push_back(in);
          results.push_back(out);
        }
      }
      bool staged = byStage.size() > 1;
      OpBuilder b(clip);
      Location loc = clip.getLoc();
      MLIRContext *ctx = b.getContext();
      auto scalar = RankedTensorType::get({}, b.getF32Type());
      auto one = RankedTensorType::get({1}, b.getF32Type());
      auto slots = RankedTensorType::get({degree}, b.getF32Type());
      Value token = tokenBefore(clip);
      SmallVector<float> hot(degree, 0.0f);
      hot[me] = 1.0f;
      SmallVector<Value> stageNorms;
      for (auto &[stageIndex, entry] : byStage) {
        auto &inputs = entry.first;
        auto tag = [&, stageIndex = stageIndex](Operation *op, Role role) {
          setRole(op, role);
          if (staged)
            op->setAttr(StrataDialect::kStageAttrName,
                        b.getI64IntegerAttr(stageIndex));
          return op->getResult(0);
        };
        // This rank's partial norm (0 when it owns none of the stage's
        // gradients), in its slot; the group's sum; its norm.
        Value local =
            inputs.empty()
                ? tag(arith::ConstantOp::create(
                          b, loc, DenseElementsAttr::get(scalar, 0.0f)),
                      Role::Optimizer)
                : tag(GlobalNormOp::create(b, loc, scalar, inputs),
                      Role::Optimizer);
        Value flat =
            tag(ReshapeOp::create(b, loc, one, local), Role::Optimizer);
        Value spread =
            tag(BroadcastToOp::create(b, loc, slots, flat), Role::Optimizer);
        Value mask = tag(arith::ConstantOp::create(
                             b, loc, DenseElementsAttr::get(slots, ArrayRef(hot))),
                         Role::Optimizer);
        Value mine =
            tag(MulOp::create(b, loc, slots, spread, mask), Role::Optimizer);
        auto sum = AllReduceOp::create(
            b, loc, slots, TokenType::get(ctx), mine, token, group,
            ReduceKindAttr::get(ctx, ReduceKind::Sum));
        tag(sum, Role::Communication);
        token = sum.getOutToken();
        SmallVector<Value> gathered = {sum.getResult()};
        stageNorms.push_back(
            tag(GlobalNormOp::create(b, loc, scalar, gathered),
                Role::Optimizer));
      }
      Value norm = stageNorms.front();
      if (staged) {
        auto total = GlobalNormOp::create(b, loc, scalar, stageNorms);
        setRole(total, Role::Optimizer);
        norm = total;
      }
      SmallVector<Value> inputs, results;
      SmallVector<Type> types;
      for (auto &[stageIndex, entry] : byStage)
        for (auto [in, out] : llvm::zip(entry.first, entry.second)) {
          inputs.push_back(in);
          results.push_back(out);
          types.push_back(out.getType());
        }
      if (!inputs.empty()) {
        auto owned = ClipByGlobalNormOp::create(b, loc, types, inputs, norm,
                                                clip.getMaxNormAttr());
        setRole(owned, Role::Optimizer);
        for (auto [old, now] : llvm::zip(results, owned.getResults()))
          old.replaceAllUsesWith(now);
      }
      // The other readers of the norm (the updates' guard and the loss
      // scaling under mixed precision) take the global one, so that every
      // rank decides alike.
      Value oldNormValue = clip.getNorm();
      oldNormValue.replaceUsesWithIf(norm, [&](OpOperand &use) {
        return use.getOwner() != clip.getOperation();
      });
      Operation *oldNorm = oldNormValue.getDefiningOp();
      clip.erase();
      if (oldNorm && oldNorm->use_empty())
        oldNorm->erase();
    }
    return success();
  }
};

} // namespace
