//===- LowerNormalization.cpp - Softmax, layer norm, loss, embedding ------===//
//
// Row kernels over the last dimension: softmax (optionally causal) and
// layer norm with their gradients; the cross-entropy loss (mean over rows)
// and its gradient; the embedding lookup and its gradient (ids i32 or i64).
//
//===----------------------------------------------------------------------===//

#include "RuntimeLowering.h"

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

namespace {

/// Rows of a tensor: all dimensions but the last.
int64_t rowsOf(Value v) {
  return numel(v) / std::max<int64_t>(shapeOf(v).back(), 1);
}

LogicalResult lowerSoftmax(SoftmaxOp o, RuntimeLowering &l) {
  SmallVector<int64_t> shape = shapeOf(o);
  // Causal: row i of each [.., s, s] block keeps columns j <= i.
  int64_t causal =
      o.getCausal() ? (shape.size() >= 2 ? shape[shape.size() - 2] : 1) : 0;
  l.call("strata_rt_softmax",
         {l.site(), l.tensor(o), l.tensor(o.getInput()), l.i64(rowsOf(o)),
          l.i64(shape.back()), l.i64(causal)});
  return success();
}

LogicalResult lowerSoftmaxGrad(SoftmaxGradOp o, RuntimeLowering &l) {
  l.call("strata_rt_softmax_grad",
         {l.site(), l.tensor(o), l.tensor(o.getOutput()),
          l.tensor(o.getResultGrad()), l.i64(rowsOf(o)),
          l.i64(shapeOf(o).back())});
  return success();
}

LogicalResult lowerLayerNorm(LayerNormOp o, RuntimeLowering &l) {
  l.call("strata_rt_layer_norm",
         {l.site(), l.tensor(o), l.tensor(o.getInput()), l.tensor(o.getGamma()),
          l.tensor(o.getBeta()), l.i64(rowsOf(o)), l.i64(shapeOf(o).back()),
          l.f64(o.getEpsilon().convertToDouble())});
  return success();
}

LogicalResult lowerLayerNormGrad(LayerNormGradOp o, RuntimeLowering &l) {
  Value x = o.getInput();
  l.call("strata_rt_layer_norm_grad",
         {l.site(), l.tensor(o.getInputGrad()), l.tensor(o.getGammaGrad()),
          l.tensor(o.getBetaGrad()), l.tensor(x), l.tensor(o.getGamma()),
          l.tensor(o.getResultGrad()), l.i64(rowsOf(x)),
          l.i64(shapeOf(x).back()), l.f64(o.getEpsilon().convertToDouble())});
  return success();
}

LogicalResult lowerRmsNorm(RmsNormOp o, RuntimeLowering &l) {
  l.call("strata_rt_rms_norm",
         {l.site(), l.tensor(o), l.tensor(o.getInput()), l.tensor(o.getGamma()),
          l.i64(rowsOf(o)), l.i64(shapeOf(o).back()),
          l.f64(o.getEpsilon().convertToDouble())});
  return success();
}

LogicalResult lowerRmsNormGrad(RmsNormGradOp o, RuntimeLowering &l) {
  Value x = o.getInput();
  l.call("strata_rt_rms_norm_grad",
         {l.site(), l.tensor(o.getInputGrad()), l.tensor(o.getGammaGrad()),
          l.tensor(x), l.tensor(o.getGamma()), l.tensor(o.getResultGrad()),
          l.i64(rowsOf(x)), l.i64(shapeOf(x).back()),
          l.f64(o.getEpsilon().convertToDouble())});
  return success();
}

LogicalResult lowerCrossEntropy(CrossEntropyOp o, RuntimeLowering &l) {
  l.call("strata_rt_cross_entropy",
         {l.site(), l.tensor(o), l.tensor(o.getLogits()),
          l.tensor(o.getLabels()), l.i64(numel(o.getLabels())),
          l.i64(o.getNumClasses()), l.i64(shapeOf(o.getLogits()).back())});
  return success();
}

LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp o, RuntimeLowering &l) {
  l.call("strata_rt_cross_entropy_grad",
         {l.site(), l.tensor(o), l.tensor(o.getLogits()),
          l.tensor(o.getLabels()), l.tensor(o.getLossGrad()),
          l.i64(numel(o.getLabels())), l.i64(o.getNumClasses()),
          l.i64(shapeOf(o.getLogits()).back())});
  return success();
}

LogicalResult lowerEmbedding(EmbeddingOp o, RuntimeLowering &l) {
  SmallVector<int64_t> table = shapeOf(o.getTable());
  l.call("strata_rt_embedding",
         {l.site(), l.tensor(o), l.tensor(o.getTable()), l.tensor(o.getIds()),
          l.i64(numel(o.getIds())), l.i64(table[0]), l.i64(table[1])});
  return success();
}

LogicalResult lowerEmbeddingGrad(EmbeddingGradOp o, RuntimeLowering &l) {
  SmallVector<int64_t> table = shapeOf(o);
  l.call("strata_rt_embedding_grad",
         {l.site(), l.tensor(o), l.tensor(o.getIds()),
          l.tensor(o.getResultGrad()), l.i64(numel(o.getIds())),
          l.i64(table[0]), l.i64(table[1]),
          l.i64(o.getPaddingIdx().value_or(-1))});
  return success();
}

} // namespace

void strata::lowering::populateNormalizationLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<SoftmaxOp>(patterns, l, lowerSoftmax);
  addLowering<SoftmaxGradOp>(patterns, l, lowerSoftmaxGrad);
  addLowering<LayerNormOp>(patterns, l, lowerLayerNorm);
  addLowering<LayerNormGradOp>(patterns, l, lowerLayerNormGrad);
  addLowering<RmsNormOp>(patterns, l, lowerRmsNorm);
  addLowering<RmsNormGradOp>(patterns, l, lowerRmsNormGrad);
}

void strata::lowering::populateLossLoweringPatterns(RewritePatternSet &patterns,
                                                    RuntimeLowering &l) {
  addLowering<CrossEntropyOp>(patterns, l, lowerCrossEntropy);
  addLowering<CrossEntropyGradOp>(patterns, l, lowerCrossEntropyGrad);
}

void strata::lowering::populateEmbeddingLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<EmbeddingOp>(patterns, l, lowerEmbedding);
  addLowering<EmbeddingGradOp>(patterns, l, lowerEmbeddingGrad);
}
