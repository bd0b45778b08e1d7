//===- PipelineClipping.cpp - Global-norm clipping across stages ---------===//

#include "PipelinePlacement.h"
#include "strata/Dialect/Strata.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <map>

using namespace mlir;
using namespace strata;

/// Global-norm clipping over gradients of several stages: each stage takes
/// the norm of its own gradients, receives the others' norms, combines them
/// (the norm of the norms) and clips its own gradients, so that no gradient
/// leaves its stage. Under loss scaling the norm also guards the updates
/// and drives the step counter and the loss scale: each stage's updates
/// read their stage's combined norm, and the scalar bookkeeping computed
/// from the norm (strata.is_finite, the step, the learning rate,
/// strata.update_loss_scaling and the assignments of their states) runs on
/// every stage from its own combined norm, the same value everywhere, so
/// that every stage makes the same decision.
LogicalResult PipelinePlacement::splitClipping(Block &body) {
  SmallVector<GlobalNormOp> norms;
  for (Operation &op : body.without_terminator())
    if (auto norm = dyn_cast<GlobalNormOp>(op))
      norms.push_back(norm);
  for (GlobalNormOp norm : norms) {
    auto stageOfValue = [&](Value v) -> int64_t {
      Operation *def = v.getDefiningOp();
      return def ? rankStage(places[def].stage) : -1;
    };
    // A gradient on no stage (a constant, which a program that hands in its
    // own backward may return for a parameter nothing reads) counts on the
    // first stage, where such a parameter and its update live.
    auto stageOfInput = [&](Value v) {
      int64_t stage = stageOfValue(v);
      return stage >= 0 ? stage : int64_t(0);
    };
    std::map<int64_t, SmallVector<Value>> groups;
    for (Value v : norm.getInputs())
      groups[stageOfInput(v)].push_back(v);
    if (groups.size() < 2)
      continue;
    SmallVector<ClipByGlobalNormOp> clips;
    // The scalar ops computed from the norm (in program order) and the
    // updates that read the norm or them.
    llvm::SetVector<Operation *> chain, updates;
    SmallVector<Value> worklist = {norm.getNorm()};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (auto clip = dyn_cast<ClipByGlobalNormOp>(user)) {
          if (v == norm.getNorm() && !llvm::is_contained(clips, clip))
            clips.push_back(clip);
          continue;
        }
        if (isa<OptimizerUpdateOpInterface>(user)) {
          updates.insert(user);
          continue;
        }
        bool scalar = llvm::all_of(user->getResults(), [](Value r) {
          auto t = dyn_cast<RankedTensorType>(r.getType());
          return t && t.getRank() == 0;
        });
        if (!scalar || isa<func::ReturnOp>(user) || user->getBlock() != &body)
          return user->emitOpError()
                 << "reads a global norm over gradients of several pipeline "
                    "stages; only clipping, guarded updates and scalar "
                    "bookkeeping can (each stage computes them from the "
                    "combined norm)";
        if (chain.insert(user))
          for (Value r : user->getResults())
            worklist.push_back(r);
      }
    }
    SmallVector<Operation *> ordered(chain.begin(), chain.end());
    llvm::sort(ordered,
               [&](Operation *a, Operation *b) { return order[a] < order[b]; });
    Place base = places[norm];
    auto placeOn = [&](Operation *op, int64_t stage) {
      Place p = base;
      p.stage = stage;
      places[op] = p;
      order[op] = order[norm];
      op->setAttr(
          StrataDialect::kStageAttrName,
          IntegerAttr::get(IntegerType::get(op->getContext(), 64), stage));
      if (std::optional<Role> role = getRole(norm))
        setRole(op, *role);
    };
    OpBuilder b(norm);
    Type scalar = norm.getNorm().getType();
    SmallVector<Value> partial;
    for (auto &[stage, inputs] : groups) {
      auto op = GlobalNormOp::create(b, norm.getLoc(), scalar, inputs);
      placeOn(op, stage);
      partial.push_back(op);
    }
    DenseMap<int64_t, Value> total;
    for (auto &[stage, inputs] : groups) {
      auto op = GlobalNormOp::create(b, norm.getLoc(), scalar, partial);
      placeOn(op, stage);
      total[stage] = op;
    }
    for (ClipByGlobalNormOp clip : clips) {
      b.setInsertionPoint(clip);
      std::map<int64_t, SmallVector<unsigned>> parts;
      for (auto [i, v] : llvm::enumerate(clip.getInputs()))
        parts[stageOfInput(v)].push_back(i);
      for (auto &[stage, indices] : parts) {
        auto it = total.find(stage);
        if (it == total.end())
          return clip.emitOpError() << "clips a gradient of stage " << stage
                                    << " that its global norm does not include";
        SmallVector<Value> inputs;
        SmallVector<Type> types;
        for (unsigned i : indices) {
          inputs.push_back(clip.getInputs()[i]);
          types.push_back(clip.getInputs()[i].getType());
        }
        auto op = ClipByGlobalNormOp::create(b, clip.getLoc(), types, inputs,
                                             it->second, clip.getMaxNormAttr());
        placeOn(op, stage);
        for (auto [k, i] : llvm::enumerate(indices))
          clip.getResult(i).replaceAllUsesWith(op.getResult(k));
      }
      places.erase(clip);
      clip->erase();
    }
    // The bookkeeping, once per stage; each update reads its parameter's
    // stage's copy.
    DenseMap<int64_t, IRMapping> copies;
    for (auto &[stage, inputs] : groups) {
      IRMapping &map = copies[stage];
      map.map(norm.getNorm(), total[stage]);
      for (Operation *op : ordered) {
        b.setInsertionPoint(op);
        placeOn(b.clone(*op, map), stage);
      }
    }
    for (Operation *update : updates) {
      Operation *param = cast<OptimizerUpdateOpInterface>(update)
                             .getParameter()
                             .getDefiningOp();
      int64_t stage = param ? rankStage(places[param].stage) : -1;
      auto it = copies.find(stage);
      if (it == copies.end())
        return update->emitOpError()
               << "is guarded by a global norm that does not include its "
                  "stage's gradients";
      for (OpOperand &operand : update->getOpOperands())
        if (Value mapped = it->second.lookupOrNull(operand.get()))
          operand.set(mapped);
    }
    for (Operation *op : llvm::reverse(ordered)) {
      if (!op->use_empty())
        return op->emitOpError() << "is read where no stage's copy reaches";
      places.erase(op);
      op->erase();
    }
    places.erase(norm);
    norm->erase();
  }
  return success();
}
