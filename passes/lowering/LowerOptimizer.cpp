//===- LowerOptimizer.cpp - Learning rate, clipping, updates --------------===//
//
// lr_schedule, global_norm, clip_by_global_norm, the six optimizer
// updates (SGD, Momentum, Adam, AdamW, LAMB, LARS) with their guard and
// master weight, and
// loss scaling (is_finite, update_loss_scaling). An update whose result
// the driver sends straight to the resident buffer writes it there (its
// result's buffer is that buffer).
//
//===----------------------------------------------------------------------===//

#include "RuntimeLowering.h"

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

namespace {

/// An update's optional tensor (its guard, its master weight and the
/// master's new value): the tensor, or NULL (an f32 code either way).
RuntimeLowering::CallArg optional(Value v, RuntimeLowering &l) {
  if (v)
    return l.tensor(v);
  return RuntimeLowering::CallArg(l.null(), l.i64(STRATA_RT_F32));
}

LogicalResult lowerLrSchedule(LrScheduleOp o, RuntimeLowering &l) {
  int64_t kind = o.getKind() == LrScheduleKind::Constant ? STRATA_RT_LR_CONSTANT
                 : o.getKind() == LrScheduleKind::LinearWarmup
                     ? STRATA_RT_LR_LINEAR_WARMUP
                     : STRATA_RT_LR_COSINE;
  l.call("strata_rt_lr_schedule",
         {l.site(), l.tensor(o), l.tensor(o.getStep()), l.i64(kind),
          l.f64(o.getBaseLr().convertToDouble()),
          l.i64(int64_t(o.getWarmupSteps())), l.i64(int64_t(o.getDecaySteps())),
          l.f64(o.getMinLr().convertToDouble())});
  return success();
}

LogicalResult lowerGlobalNorm(GlobalNormOp o, RuntimeLowering &l) {
  OpBuilder &b = l.builder();
  Location loc = l.getLoc();
  auto ptrType = LLVM::LLVMPointerType::get(l.getContext());
  int64_t count = o.getInputs().size();
  Value table = LLVM::AllocaOp::create(b, loc, ptrType, ptrType,
                                       l.i64(std::max<int64_t>(count, 1)));
  SmallVector<int64_t> sizes, types;
  for (auto [i, v] : llvm::enumerate(o.getInputs())) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrType, ptrType, table,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    LLVM::StoreOp::create(b, loc, l.ptr(v), slot);
    sizes.push_back(numel(v));
    types.push_back(RuntimeLowering::typeCode(tensorType(v).getElementType()));
  }
  l.call("strata_rt_global_norm",
         {l.site(), l.tensor(o), l.i64(count), table, l.constantArray(types),
          l.constantArray(sizes)});
  return success();
}

LogicalResult lowerClip(ClipByGlobalNormOp o, RuntimeLowering &l) {
  for (auto [in, out] : llvm::zip(o.getInputs(), o.getResults()))
    l.call("strata_rt_clip",
           {l.site(), l.tensor(out), l.tensor(in), l.i64(numel(in)),
            l.tensor(o.getNorm()), l.f64(o.getMaxNorm().convertToDouble())});
  return success();
}

LogicalResult lowerSgd(SgdUpdateOp o, RuntimeLowering &l) {
  l.call(
      "strata_rt_sgd",
      {l.site(), l.tensor(o.getNewParam()), l.tensor(o.getParam()),
       l.tensor(o.getGrad()), l.tensor(o.getLr()), l.i64(numel(o.getParam())),
       l.f64(o.getWeightDecay().convertToDouble()), optional(o.getGuard(), l),
       optional(o.getNewMaster(), l), optional(o.getMaster(), l)});
  return success();
}

LogicalResult lowerMomentum(MomentumUpdateOp o, RuntimeLowering &l) {
  l.call("strata_rt_momentum",
         {l.site(), l.tensor(o.getNewParam()), l.tensor(o.getNewVelocity()),
          l.tensor(o.getParam()), l.tensor(o.getGrad()),
          l.tensor(o.getVelocity()), l.tensor(o.getLr()),
          l.i64(numel(o.getParam())), l.f64(o.getMomentum().convertToDouble()),
          l.f64(o.getWeightDecay().convertToDouble()),
          l.i64(o.getUseNesterov()), optional(o.getGuard(), l),
          optional(o.getNewMaster(), l), optional(o.getMaster(), l)});
  return success();
}

template <typename OpTy, int64_t Kind>
LogicalResult lowerAdam(OpTy o, RuntimeLowering &l) {
  l.call(
      "strata_rt_adam",
      {l.site(), l.i64(Kind), l.tensor(o.getNewParam()),
       l.tensor(o.getNewMoment1()), l.tensor(o.getNewMoment2()),
       l.tensor(o.getParam()), l.tensor(o.getGrad()), l.tensor(o.getMoment1()),
       l.tensor(o.getMoment2()), l.tensor(o.getLr()), l.tensor(o.getStep()),
       l.i64(numel(o.getParam())), l.f64(o.getBeta1().convertToDouble()),
       l.f64(o.getBeta2().convertToDouble()),
       l.f64(o.getEpsilon().convertToDouble()),
       l.f64(o.getWeightDecay().convertToDouble()), optional(o.getGuard(), l),
       optional(o.getNewMaster(), l), optional(o.getMaster(), l)});
  return success();
}

LogicalResult lowerLars(LarsUpdateOp o, RuntimeLowering &l) {
  l.call("strata_rt_lars",
         {l.site(), l.tensor(o.getNewParam()), l.tensor(o.getNewVelocity()),
          l.tensor(o.getParam()), l.tensor(o.getGrad()),
          l.tensor(o.getVelocity()), l.tensor(o.getLr()),
          l.i64(numel(o.getParam())), l.f64(o.getMomentum().convertToDouble()),
          l.f64(o.getWeightDecay().convertToDouble()),
          l.f64(o.getLarsCoeff().convertToDouble()),
          l.f64(o.getEpsilon().convertToDouble()), optional(o.getGuard(), l),
          optional(o.getNewMaster(), l), optional(o.getMaster(), l)});
  return success();
}

LogicalResult lowerIsFinite(IsFiniteOp o, RuntimeLowering &l) {
  l.call("strata_rt_is_finite",
         {l.site(), l.tensor(o), l.tensor(o.getInput())});
  return success();
}

LogicalResult lowerUpdateLossScaling(UpdateLossScalingOp o,
                                     RuntimeLowering &l) {
  l.call("strata_rt_update_loss_scaling",
         {l.site(), l.tensor(o.getNewScale()), l.tensor(o.getNewGood()),
          l.tensor(o.getNewBad()), l.tensor(o.getNorm()),
          l.tensor(o.getScale()), l.tensor(o.getGood()), l.tensor(o.getBad()),
          l.i64(int64_t(o.getIncrEveryNSteps())),
          l.i64(int64_t(o.getDecrEveryNNanOrInf())),
          l.f64(o.getIncrRatio().convertToDouble()),
          l.f64(o.getDecrRatio().convertToDouble())});
  return success();
}

} // namespace

void strata::lowering::populateOptimizerLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<LrScheduleOp>(patterns, l, lowerLrSchedule);
  addLowering<GlobalNormOp>(patterns, l, lowerGlobalNorm);
  addLowering<ClipByGlobalNormOp>(patterns, l, lowerClip);
  addLowering<SgdUpdateOp>(patterns, l, lowerSgd);
  addLowering<MomentumUpdateOp>(patterns, l, lowerMomentum);
  addLowering<AdamUpdateOp>(patterns, l,
                            lowerAdam<AdamUpdateOp, STRATA_RT_ADAM>);
  addLowering<AdamWUpdateOp>(patterns, l,
                             lowerAdam<AdamWUpdateOp, STRATA_RT_ADAMW>);
  addLowering<LambUpdateOp>(patterns, l,
                            lowerAdam<LambUpdateOp, STRATA_RT_LAMB>);
  addLowering<LarsUpdateOp>(patterns, l, lowerLars);
  addLowering<IsFiniteOp>(patterns, l, lowerIsFinite);
  addLowering<UpdateLossScalingOp>(patterns, l, lowerUpdateLossScaling);
}
