//===- PipelineClipping.cpp - Global-norm clipping across stages ---------===//

#include "PipelinePlacement.h"
#include "strata/Dialect/Strata.h"

#include "mlir/IR/Builders.h"

#include <map>

using namespace mlir;
using namespace strata;

/// Global-norm clipping over gradients of several stages: each stage takes
/// the norm of its own gradients, receives the others' norms, combines them
/// (the norm of the norms) and clips its own gradients, so that no gradient
/// leaves its stage.
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
    std::map<int64_t, SmallVector<Value>> groups;
    for (Value v : norm.getInputs())
      groups[stageOfValue(v)].push_back(v);
    if (groups.size() < 2 || groups.count(-1))
      continue;
    SmallVector<ClipByGlobalNormOp> clips;
    for (Operation *user : norm->getUsers()) {
      auto clip = dyn_cast<ClipByGlobalNormOp>(user);
      if (!clip)
        return user->emitOpError()
               << "reads a global norm over gradients of several pipeline "
                  "stages; only strata.clip_by_global_norm can (each stage "
                  "clips its own gradients with the combined norm)";
      clips.push_back(clip);
    }
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
        parts[stageOfValue(v)].push_back(i);
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
    places.erase(norm);
    norm->erase();
  }
  return success();
}
