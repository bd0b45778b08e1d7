//===- PipelineRankProgram.cpp - One rank's program of a pipeline ---------===//
//
// The last step of strata-pipeline: once every op is placed, the stages'
// sequences ordered by the schedule and the messages between stages checked
// for deadlock, the rank's program is cut out of the whole step: its ops in
// order, its sends and receives threaded on one token chain with its
// collectives, every other stage's ops and the declarations it no longer
// reads erased.
//
//===----------------------------------------------------------------------===//

#include "PipelinePlacement.h"
#include "strata/Dialect/Strata.h"
#include "strata/Passes/PipelineSchedule.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace strata;

/// The parameters and state that `func`'s ops read or assign, but for the
/// ops `skip` holds.
static DenseSet<StringAttr>
referencedNames(func::FuncOp func,
                function_ref<bool(Operation *)> skip = nullptr) {
  DenseSet<StringAttr> names;
  func.walk([&](Operation *op) {
    if (skip && skip(op))
      return;
    if (auto get = dyn_cast<GetParamOp>(op))
      names.insert(get.getNameAttr().getAttr());
    else if (auto get = dyn_cast<GetStateOp>(op))
      names.insert(get.getNameAttr().getAttr());
    else if (auto assign = dyn_cast<AssignOp>(op))
      names.insert(assign.getNameAttr().getAttr());
  });
  return names;
}

LogicalResult PipelinePlacement::emitRankProgram(
    ModuleOp module, func::FuncOp func, int64_t me, FlatSymbolRefAttr pp,
    ArrayRef<SmallVector<Operation *>> ops, ArrayRef<DenseSet<Operation *>> on,
    ArrayRef<std::vector<StageEvent>> events, ArrayRef<Attribute> schedule) {
  MLIRContext *ctx = module.getContext();
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ctx);
  // The declarations some live op of the whole step reads or assigns: a
  // parameter that none does (the loss does not reach it, so it has no
  // update either, and a read of it nothing uses is dead on every stage)
  // stays on the first stage, whose checkpoint holds it.
  DenseSet<StringAttr> referencedByStep =
      referencedNames(func, [&](Operation *op) {
        auto it = places.find(op);
        return it != places.end() && it->second.dead;
      });

  // Receives: one per message to this stage, before its item.
  DenseMap<Message *, Value> received;
  SmallVector<Operation *> sequence = ops[me];
  // The job ("F3") an op of a micro-batch belongs to.
  auto setJob = [&](Operation *op, const Place &pl) {
    if (pl.microBatch < 0 || pl.part == Part::Pre || pl.part == Part::Post)
      return;
    Entry e{pl.part == Part::F   ? Step::F
            : pl.part == Part::W ? Step::W
                                 : Step::B,
            pl.microBatch, chunkOf(pl.stage)};
    op->setAttr(StrataDialect::kJobAttrName,
                b.getStringAttr(entryName(e, chunks > 1)));
  };
  // Lay the ops out in order before the return; every op not replicated
  // records its (virtual) stage.
  for (Operation *op : sequence) {
    op->moveBefore(ret);
    const Place &pl = places[op];
    if (pl.replicated)
      continue;
    op->setAttr(StrataDialect::kStageAttrName, b.getI64IntegerAttr(pl.stage));
    setJob(op, pl);
  }
  Value token;
  auto chain = [&](CollectiveOpInterface op) {
    op.getTokenOperand().set(token);
    token = op.getOutToken();
  };
  b.setInsertionPointToStart(&body);
  token = InitTokenOp::create(b, func.getLoc(), TokenType::get(ctx));
  auto attrs = [&](Operation *op, Message *msg) {
    setRole(op, Role::Communication);
    Operation *def = msg->value.getDefiningOp();
    op->setAttr(StrataDialect::kStageAttrName,
                b.getI64IntegerAttr(places[def].stage));
    if (places[def].microBatch >= 0)
      op->setAttr(StrataDialect::kMicroBatchAttrName,
                  b.getI64IntegerAttr(places[def].microBatch));
    // The producer's job: a receive waits for that job of the peer.
    setJob(op, places[def]);
  };
  // Walk the events and the ops together, threading one token chain
  // through every collective in program order.
  size_t next = 0;
  auto emitEventsAt = [&](size_t at, Operation *before) {
    for (; next < events[me].size() && events[me][next].at == at; ++next) {
      const StageEvent &e = events[me][next];
      b.setInsertionPoint(before);
      if (e.send) {
        auto send = SendOp::create(b, e.msg->value.getLoc(), e.msg->value,
                                   token, pp, b.getI64IntegerAttr(e.msg->to));
        attrs(send, e.msg);
        token = send.getOutToken();
      } else {
        auto recv = RecvOp::create(b, e.msg->value.getLoc(),
                                   e.msg->value.getType(), TokenType::get(ctx),
                                   token, pp, b.getI64IntegerAttr(e.msg->from));
        attrs(recv, e.msg);
        token = recv.getOutToken();
        received[e.msg] = recv.getResult();
      }
    }
  };
  for (size_t i = 0; i <= sequence.size(); ++i) {
    Operation *before = i < sequence.size() ? sequence[i] : ret.getOperation();
    emitEventsAt(i, before);
    if (i < sequence.size())
      if (auto collective = dyn_cast<CollectiveOpInterface>(before))
        chain(collective);
  }

  // Uses of received values on this stage read the receive.
  for (auto [msg, value] : received) {
    Value original = msg->value;
    original.replaceUsesWithIf(value, [&](OpOperand &use) {
      Operation *owner = use.getOwner();
      return on[me].contains(owner) || isa<func::ReturnOp>(owner);
    });
  }

  // Erase the ops of other stages (users before producers).
  DenseSet<Operation *> keep(on[me].begin(), on[me].end());
  SmallVector<Operation *> erase;
  for (Operation &op : body.without_terminator())
    if (!keep.contains(&op) && places.count(&op))
      erase.push_back(&op);
  for (Operation *op : llvm::reverse(erase)) {
    if (!op->use_empty()) {
      for (OpOperand &use : op->getUses())
        return use.getOwner()->emitOpError()
               << "on stage " << me << " reads a value of stage "
               << places[op].stage << " that was not sent";
    }
    op->erase();
  }
  // Old init_tokens that nothing reads any more.
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
    if (isa<InitTokenOp>(op) && op.use_empty())
      op.erase();

  // Declarations this stage no longer reads.
  DenseSet<StringAttr> referenced = referencedNames(func);
  for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
    if (isa<ParamOp, StateOp>(op)) {
      StringAttr name = cast<SymbolOpInterface>(op).getNameAttr();
      bool unusedParam = isa<ParamOp>(op) && !referencedByStep.contains(name);
      if (!referenced.contains(name) && !(unusedParam && me == 0))
        op.erase();
    }

  module->setAttr("strata.schedule", b.getArrayAttr(schedule));
  if (failed(verify(module)))
    return mlir::emitError(func.getLoc())
           << "strata-pipeline: the program of stage " << me
           << " does not verify";
  return success();
}
