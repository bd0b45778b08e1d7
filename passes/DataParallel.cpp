//===- DataParallel.cpp - Batch shards and gradient all-reduce ------------===//

#include "BatchSplit.h"
#include "PassUtils.h"
#include "strata/Analysis/MemoryPlan.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Format.h"

namespace strata {
#define GEN_PASS_DEF_STRATADATAPARALLEL
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

struct DataParallelPass
    : public strata::impl::StrataDataParallelBase<DataParallelPass> {
  using StrataDataParallelBase::StrataDataParallelBase;

  /// Ranks that split the batch (the grid's dp x sharding).
  int64_t degree = 1;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(bucketMb > 0.0) || !(lastBucketMb > 0.0)) {
      std::string sizes;
      llvm::raw_string_ostream(sizes)
          << llvm::format("bucket-mb %g and last-bucket-mb %g",
                          static_cast<double>(bucketMb),
                          static_cast<double>(lastBucketMb));
      mlir::emitError(module.getLoc())
          << "strata-data-parallel: bucket sizes must be positive, got "
          << sizes
          << " (dp_optimization.comm_buffer_size, last_comm_buffer_size)";
      return signalPassFailure();
    }
    FailureOr<RankGridOp> grid = getRankGrid(module, "strata-data-parallel");
    if (failed(grid))
      return signalPassFailure();
    // Every rank of a pipeline stage holds a replica.
    degree =
        grid->getAxisSize(GridAxis::Dp) * grid->getAxisSize(GridAxis::Sharding);
    if (degree == 1)
      return;
    if (failed(checkRunsBefore(module, "strata-data-parallel",
                               {"strata-data-parallel", "strata-optimizer",
                                "strata-sharding", "strata-pipeline"})))
      return signalPassFailure();
    FailureOr<func::FuncOp> step =
        getDifferentiatedStep(module, "strata-data-parallel",
                              ", and this pass before strata-optimizer");
    if (failed(step))
      return signalPassFailure();
    // The group, declared after the parameters and state, before any use.
    FlatSymbolRefAttr groupRef = declareCommGroup(
        module, "dp", *grid, {GridAxis::Dp, GridAxis::Sharding});
    if (failed(shard(*step, groupRef)))
      return signalPassFailure();
    recordPass(module, "strata-data-parallel");
  }

  LogicalResult shard(func::FuncOp func, FlatSymbolRefAttr group) {
    const int64_t n = degree;
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // (The strategy refuses fp16_allreduce at level o2 likewise.)
    if (fp16Allreduce &&
        llvm::none_of(ret.getOperands().drop_front(), [](Value g) {
          return tensorType(g).getElementType().isF32();
        }))
      return mlir::emitError(func.getLoc())
             << "strata-data-parallel: fp16-allreduce changes nothing: no "
                "gradient of the step is f32 (mixed precision at level o2 "
                "makes them 16-bit already)";

    // Each rank's arguments: 1/n of the leading dimension, of a forward
    // pass that computes each row of the batch from that row alone.
    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() < 1 || type.getDimSize(0) % n != 0)
        return mlir::emitError(func.getLoc())
               << "strata-data-parallel: argument " << arg.getArgNumber()
               << " (" << type << ") has no leading batch dimension "
               << "divisible by " << n << " ranks";
    }
    if (failed(prepareBatchSplit(
            body, n,
            "strata-data-parallel gives each of " + std::to_string(n) +
                " ranks a part of the batch's leading dimension")))
      return failure();
    // Whole-batch types, before any is changed.
    DenseMap<Value, Type> oldType;
    for (BlockArgument arg : body.getArguments())
      oldType[arg] = arg.getType();
    for (Operation &op : body)
      for (Value r : op.getResults())
        oldType[r] = r.getType();
    DenseSet<Value> batchValues;
    SmallVector<Type> argTypes;
    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape[0] /= n;
      arg.setType(RankedTensorType::get(shape, type.getElementType()));
      argTypes.push_back(arg.getType());
      batchValues.insert(arg);
    }
    func.setType(FunctionType::get(func.getContext(), argTypes,
                                   func.getResultTypes()));
    for (Operation &op : body.without_terminator()) {
      if (llvm::none_of(op.getOperands(),
                        [&](Value v) { return batchValues.contains(v); }))
        continue;
      if (!isPure(&op))
        return op.emitOpError() << "has side effects and depends on the "
                                   "batch: it cannot run on a shard";
      // Micro-batch slices (gradient merge) shrink with the shard.
      if (auto slice = dyn_cast<SliceOp>(op); slice && slice.getDim() == 0) {
        int64_t start = slice.getStart(), size = slice.getSize();
        // (The batch split refuses any other slice of the batch.)
        if (slice.getStride() != 1)
          return op.emitOpError() << "a strided slice of the batch does not "
                                     "split over ranks";
        if (start % n != 0 || size % n != 0)
          return op.emitOpError() << "micro-batch slice [" << start << ", "
                                  << start + size << ") does not split over "
                                  << n << " ranks";
        OpBuilder attrs(&op);
        slice.setStartAttr(attrs.getI64IntegerAttr(start / n));
        slice.setSizeAttr(attrs.getI64IntegerAttr(size / n));
      }
      Type oldOperand =
          op.getNumOperands() ? oldType[op.getOperand(0)] : Type();
      SmallVector<Type> oldResults(op.getResultTypes());
      auto types = splitResultTypes(&op, oldOperand, oldResults, n);
      if (failed(types))
        return op.emitOpError() << "cannot run on 1/" << n
                                << " of the batch (leading dimension)";
      for (auto [result, type] : llvm::zip(op.getResults(), *types))
        result.setType(type);
      for (Value r : op.getResults())
        batchValues.insert(r);
    }

    // Gradients are bucketed per element type (as Paddle) and per home stage
    // of their parameter (a pipeline keeps each bucket on one stage), each
    // group in the order its gradients become ready.
    Block::iterator start = body.begin();
    auto readyAt = [&](Value v) -> Operation * {
      Operation *def = v.getDefiningOp();
      return def ? def : &*start;
    };
    llvm::StringMap<int64_t> home = homeStages(body);
    SmallVector<std::pair<std::pair<int64_t, Type>, SmallVector<unsigned>>>
        groups;
    for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
      auto param = func.getResultAttrOfType<FlatSymbolRefAttr>(
          i, StrataDialect::kGradOfAttrName);
      std::pair<int64_t, Type> key = {
          param ? home.lookup(param.getValue()) : 0,
          tensorType(ret.getOperand(i)).getElementType()};
      auto *group =
          llvm::find_if(groups, [&](auto &g) { return g.first == key; });
      if (group == groups.end()) {
        groups.push_back({key, {}});
        group = std::prev(groups.end());
      }
      group->second.push_back(i);
    }
    const double mb = 1024.0 * 1024.0;
    SmallVector<SmallVector<unsigned>> buckets; // result indices
    for (auto &[key, order] : groups) {
      llvm::stable_sort(order, [&](unsigned a, unsigned b) {
        Operation *x = readyAt(ret.getOperand(a)),
                  *y = readyAt(ret.getOperand(b));
        return x != y && x->isBeforeInBlock(y);
      });
      // The bucket that closes last is filled first, from the end.
      SmallVector<unsigned> tail;
      double tailBytes = 0;
      while (!order.empty()) {
        double bytes = tensorBytes(ret.getOperand(order.back()).getType());
        if (!tail.empty() && tailBytes + bytes > lastBucketMb * mb)
          break;
        tail.insert(tail.begin(), order.pop_back_val());
        tailBytes += bytes;
      }
      double filled = 0;
      bool open = false;
      for (unsigned i : order) {
        double bytes = tensorBytes(ret.getOperand(i).getType());
        if (!open || (filled + bytes > bucketMb * mb && filled > 0)) {
          buckets.emplace_back();
          filled = 0;
          open = true;
        }
        buckets.back().push_back(i);
        filled += bytes;
      }
      if (!tail.empty())
        buckets.push_back(tail);
    }
    // Positions in the block before anything is inserted (inserting ops
    // invalidates the block's order, and asking it again each bucket would
    // renumber the whole step each time).
    DenseMap<Operation *, int64_t> position;
    for (auto [k, op] : llvm::enumerate(body))
      position[&op] = k;
    // Each bucket with where it is complete (after its last gradient), in
    // that order.
    SmallVector<std::pair<Operation *, SmallVector<unsigned>>> closing;
    for (SmallVector<unsigned> &bucket : buckets) {
      Operation *last = readyAt(ret.getOperand(bucket.front()));
      for (unsigned i : bucket)
        if (Operation *ready = readyAt(ret.getOperand(i));
            position.lookup(last) < position.lookup(ready))
          last = ready;
      closing.push_back({last, std::move(bucket)});
    }
    llvm::stable_sort(closing, [&](const auto &x, const auto &y) {
      return position.lookup(x.first) < position.lookup(y.first);
    });

    // Each bucket is one flat buffer: its gradients are packed as soon as
    // the last of them is ready, all-reduced (mean) while the backward pass
    // goes on, and unpacked where the step's results are read (the runtime
    // completes the all-reduce there). Collectives are chained by tokens in
    // program order, so every rank issues them alike. The memory plan lets
    // producers write into the bucket and the unpacked gradients stay in it.
    MLIRContext *ctx = func.getContext();
    OpBuilder b(&body, body.begin());
    auto token = InitTokenOp::create(b, func.getLoc(), TokenType::get(ctx));
    setRole(token, Role::Communication);
    Value chain = token;
    auto mean = ReduceKindAttr::get(ctx, ReduceKind::Mean);
    SmallVector<Value> results(ret.getOperands());
    // The original op the previous bucket's collective was placed after
    // (-1: the token, before them all).
    int64_t anchor = -1;
    for (auto [index, entry] : llvm::enumerate(closing)) {
      auto &[close, bucket] = entry;
      // After the previous bucket's collective and this bucket's producers.
      Operation *after = chain.getDefiningOp();
      if (int64_t at = position.lookup(close); anchor < at) {
        after = close;
        anchor = at;
      }
      b.setInsertionPointAfter(after);
      SmallVector<Value> grads;
      SmallVector<Type> types;
      int64_t elements = 0;
      for (unsigned i : bucket) {
        grads.push_back(ret.getOperand(i));
        types.push_back(grads.back().getType());
        elements += tensorType(grads.back()).getNumElements();
      }
      auto flat = RankedTensorType::get(
          {elements}, tensorType(grads.front()).getElementType());
      auto pack = PackOp::create(b, ret.getLoc(), flat, grads);
      setRole(pack, Role::Communication);
      // fp16_allreduce: half the bytes on the wire. Each rank's share is
      // divided by the group size before it is narrowed, and the f16 buffer
      // summed, so that the sum cannot overflow where the mean would not.
      Value wire = pack;
      bool narrow = fp16Allreduce && flat.getElementType().isF32();
      if (narrow) {
        auto share = ScaleOp::create(b, ret.getLoc(), pack,
                                     b.getF64FloatAttr(1.0 / double(n)));
        wire =
            CastOp::create(b, ret.getLoc(), flat.clone(b.getF16Type()), share);
        setRole(share, Role::Communication);
        setRole(wire.getDefiningOp(), Role::Communication);
      }
      auto reduce = AllReduceOp::create(
          b, ret.getLoc(), wire.getType(), TokenType::get(ctx), wire, chain,
          group, narrow ? ReduceKindAttr::get(ctx, ReduceKind::Sum) : mean);
      setRole(reduce, Role::Communication);
      reduce->setAttr(StrataDialect::kBucketAttrName,
                      b.getI64IntegerAttr(index));
      chain = reduce.getOutToken();
      b.setInsertionPoint(ret);
      Value reduced = reduce.getResult();
      if (narrow) {
        reduced = CastOp::create(b, ret.getLoc(), flat, reduced);
        setRole(reduced.getDefiningOp(), Role::Communication);
      }
      auto unpack = UnpackOp::create(b, ret.getLoc(), types, reduced,
                                     b.getI64IntegerAttr(0));
      setRole(unpack, Role::Communication);
      for (auto [i, v] : llvm::zip(bucket, unpack.getResults()))
        results[i] = v;
    }
    // The loss, averaged for the report.
    b.setInsertionPoint(ret);
    Value localLoss = ret.getOperand(0);
    auto loss =
        AllReduceOp::create(b, ret.getLoc(), localLoss.getType(),
                            TokenType::get(ctx), localLoss, chain, group, mean);
    setRole(loss, Role::Communication);
    results[0] = loss.getResult();
    ret->setOperands(results);
    func->setAttr(StrataDialect::kShardsAttrName, b.getI64IntegerAttr(n));
    if (failed(verify(func)))
      return mlir::emitError(func.getLoc()) << "strata-data-parallel: the program does not "
                                 "split over "
                              << n << " ranks along dimension 0";
    return success();
  }
};

} // namespace
