//===- LowerGemm.cpp - GEMM family -> strata_rt_gemm ----------------------===//
//
// matmul, matmul_grad (two GEMMs, the transposes as flags; a 2-D weight
// under a batched activation is one GEMM over all rows, which also sums its
// gradient over the batch; a gradient nobody reads is not computed), and
// the fused GEMM epilogue and its gradient.
//
//===----------------------------------------------------------------------===//

#include "RuntimeLowering.h"

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

namespace {

/// A (batched) product `lhs` x `rhs` -> `out` as GEMMs: `batch` products of
/// M x K by K x N; `batchA` / `batchB` distinct left / right operands.
struct ProductShape {
  int64_t m, n, k, batch, batchA, batchB;
};
ProductShape productShape(Value lhs, Value rhs, Value out, bool transA) {
  ArrayRef<int64_t> a = tensorType(lhs).getShape(),
                    c = tensorType(out).getShape();
  int64_t m = c[c.size() - 2], n = c.back();
  int64_t k = transA ? a[a.size() - 2] : a.back();
  return {m,
          n,
          k,
          numel(out) / (m * n),
          numel(lhs) / (m * k),
          numel(rhs) / (k * n)};
}

/// Products a broadcast beyond the runtimes' batched GEMMs is unrolled into
/// at most (one GEMM call each).
constexpr int64_t kMaxUnrolledGemms = 4096;

/// For each batch of the result (row-major over `result`'s batch
/// dimensions), the batch of an operand whose batch dimensions `operand`
/// broadcast to it NumPy's way (aligned at the right, size 1 repeated).
SmallVector<int64_t> broadcastBatches(ArrayRef<int64_t> operand,
                                      ArrayRef<int64_t> result) {
  int64_t count = 1;
  for (int64_t d : result)
    count *= d;
  SmallVector<int64_t> batches(count);
  size_t lead = result.size() - operand.size();
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = j, index = 0, stride = 1;
    for (size_t d = result.size(); d-- > 0;) {
      int64_t coord = rest % result[d];
      rest /= result[d];
      if (d >= lead) {
        int64_t size = operand[d - lead];
        index += (size == 1 ? 0 : coord) * stride;
        stride *= size;
      }
    }
    batches[j] = index;
  }
  return batches;
}

/// Bytes of one element of `v`'s type.
int64_t elementBytes(Value v) {
  return int64_t(tensorType(v).getElementTypeBitWidth()) / 8;
}

LogicalResult lowerMatmul(Operation *op, Value lhs, Value rhs, Value out,
                          bool transA, bool transB, RuntimeLowering &l) {
  SmallVector<int64_t> a = shapeOf(lhs), bs = shapeOf(rhs), c = shapeOf(out);
  auto [m, n, k, batch, batchA, batchB] = productShape(lhs, rhs, out, transA);
  Type elem = elementType(out);
  size_t rb = bs.size();
  // A 2-D weight under a batched activation: one GEMM over all rows.
  if (rb == 2 && !transA) {
    l.gemm(1, batchA * m, n, k, l.ptr(lhs), 0, false, l.ptr(rhs), 0, transB,
           l.ptr(out), Value(), STRATA_RT_ACT_NONE, elem);
    return success();
  }
  ArrayRef<int64_t> batchDims = ArrayRef(c).drop_back(2);
  if (!l.target.supportsGemmBatch(ArrayRef(a).drop_back(2), batchDims) ||
      !l.target.supportsGemmBatch(ArrayRef(bs).drop_back(2), batchDims) ||
      (batchA != 1 && batchA != batch) || (batchB != 1 && batchB != batch)) {
    // Any other NumPy broadcast ([2, 1, 4, 5] x [1, 3, 5, 6]): one GEMM
    // per batch of the result, each reading its operands' batches.
    if (batch > kMaxUnrolledGemms)
      return op->emitOpError("broadcasts batch dimensions into ")
             << batch << " products, which the runtime runs one by one; at "
             << "most " << kMaxUnrolledGemms << " are supported";
    SmallVector<int64_t> ia = broadcastBatches(ArrayRef(a).drop_back(2),
                                               batchDims),
                         ib = broadcastBatches(ArrayRef(bs).drop_back(2),
                                               batchDims);
    int64_t bytes = elementBytes(out);
    for (int64_t j = 0; j < batch; ++j)
      l.gemm(1, m, n, k, l.byteOffset(l.ptr(lhs), ia[j] * m * k * bytes), 0,
             transA, l.byteOffset(l.ptr(rhs), ib[j] * k * n * bytes), 0, transB,
             l.byteOffset(l.ptr(out), j * m * n * bytes), Value(),
             STRATA_RT_ACT_NONE, elem);
    return success();
  }
  l.gemm(batch, m, n, k, l.ptr(lhs), batchA == 1 ? 0 : m * k, transA,
         l.ptr(rhs), batchB == 1 ? 0 : k * n, transB, l.ptr(out), Value(),
         STRATA_RT_ACT_NONE, elem);
  return success();
}

LogicalResult lowerMatmulGrad(MatmulGradOp op, RuntimeLowering &l) {
  bool transA = op.getTransposeLhs(), transB = op.getTransposeRhs();
  Value A = op.getLhs(), B = op.getRhs(), dy = op.getResultGrad();
  SmallVector<int64_t> a = shapeOf(A), bs = shapeOf(B), c = shapeOf(dy);
  auto [m, n, k, batch, batchA, batchB] = productShape(A, B, dy, transA);
  Type elem = elementType(dy);
  size_t ra = a.size(), rb = bs.size();
  // A gradient nobody reads (e.g. of the input batch) is not computed.
  bool needA = !op.getLhsGrad().use_empty(),
       needB = !op.getRhsGrad().use_empty();
  Value dA = needA ? l.ptr(op.getLhsGrad()) : Value();
  Value dB = needB ? l.ptr(op.getRhsGrad()) : Value();
  if (rb == 2 && !transA) {
    // Rows of every batch together: dA = dy @ op(B)^T, dB = A^T @ dy summed
    // over the batch by the GEMM itself.
    int64_t rows = batchA * m;
    if (needA)
      l.gemm(1, rows, k, n, l.ptr(dy), 0, false, l.ptr(B), 0, !transB, dA,
             Value(), STRATA_RT_ACT_NONE, elem);
    if (needB && !transB)
      l.gemm(1, k, n, rows, l.ptr(A), 0, true, l.ptr(dy), 0, false, dB, Value(),
             STRATA_RT_ACT_NONE, elem);
    else if (needB)
      l.gemm(1, n, k, rows, l.ptr(dy), 0, true, l.ptr(A), 0, false, dB, Value(),
             STRATA_RT_ACT_NONE, elem);
    return success();
  }
  if (batchA != batch || batchB != batch ||
      (ra > 2 && ArrayRef(a).drop_back(2) != ArrayRef(c).drop_back(2)) ||
      (rb > 2 && ArrayRef(bs).drop_back(2) != ArrayRef(c).drop_back(2))) {
    // A broadcast operand: its gradient sums the products of every batch
    // of the result that read it, one GEMM per batch, each after the first
    // accumulating into the operand's batch.
    if (batch > kMaxUnrolledGemms)
      return op->emitOpError("sums a gradient over ")
             << batch << " broadcast products, which the runtime runs one by "
             << "one; at most " << kMaxUnrolledGemms << " are supported";
    ArrayRef<int64_t> batchDims = ArrayRef(c).drop_back(2);
    SmallVector<int64_t> ia = broadcastBatches(ArrayRef(a).drop_back(2),
                                               batchDims),
                         ib = broadcastBatches(ArrayRef(bs).drop_back(2),
                                               batchDims);
    int64_t bytes = elementBytes(dy);
    llvm::DenseSet<int64_t> startedA, startedB;
    for (int64_t j = 0; j < batch; ++j) {
      Value Aj = l.byteOffset(l.ptr(A), ia[j] * m * k * bytes),
            Bj = l.byteOffset(l.ptr(B), ib[j] * k * n * bytes),
            dyj = l.byteOffset(l.ptr(dy), j * m * n * bytes);
      if (needA) {
        Value dAj = l.byteOffset(dA, ia[j] * m * k * bytes);
        bool more = !startedA.insert(ia[j]).second;
        if (!transA)
          l.gemm(1, m, k, n, dyj, 0, false, Bj, 0, !transB, dAj, Value(),
                 STRATA_RT_ACT_NONE, elem, more);
        else
          l.gemm(1, k, m, n, Bj, 0, transB, dyj, 0, true, dAj, Value(),
                 STRATA_RT_ACT_NONE, elem, more);
      }
      if (needB) {
        Value dBj = l.byteOffset(dB, ib[j] * k * n * bytes);
        bool more = !startedB.insert(ib[j]).second;
        if (!transB)
          l.gemm(1, k, n, m, Aj, 0, !transA, dyj, 0, false, dBj, Value(),
                 STRATA_RT_ACT_NONE, elem, more);
        else
          l.gemm(1, n, k, m, dyj, 0, true, Aj, 0, transA, dBj, Value(),
                 STRATA_RT_ACT_NONE, elem, more);
      }
    }
    return success();
  }
  int64_t sa = batch == 1 ? 0 : m * k, sb = batch == 1 ? 0 : k * n,
          sy = batch == 1 ? 0 : m * n;
  if (needA && !transA)
    l.gemm(batch, m, k, n, l.ptr(dy), sy, false, l.ptr(B), sb, !transB, dA,
           Value(), STRATA_RT_ACT_NONE, elem);
  else if (needA)
    l.gemm(batch, k, m, n, l.ptr(B), sb, transB, l.ptr(dy), sy, true, dA,
           Value(), STRATA_RT_ACT_NONE, elem);
  if (needB && !transB)
    l.gemm(batch, k, n, m, l.ptr(A), sa, !transA, l.ptr(dy), sy, false, dB,
           Value(), STRATA_RT_ACT_NONE, elem);
  else if (needB)
    l.gemm(batch, n, k, m, l.ptr(dy), sy, true, l.ptr(A), sa, transA, dB,
           Value(), STRATA_RT_ACT_NONE, elem);
  return success();
}

LogicalResult lowerFusedGemm(FusedGemmEpilogueOp o, RuntimeLowering &l) {
  Value x = o.getInput(), w = o.getWeight();
  bool t = o.getTransposeWeight();
  SmallVector<int64_t> ws = shapeOf(w);
  int64_t k = ws[t ? 1 : 0], n = ws[t ? 0 : 1], rows = numel(x) / k;
  int64_t act = activationCode(o.getActivation());
  Type elem = elementType(o.getResult());
  if (o.getAux()) {
    // The pre-activation is an output too: one epilogue writes both.
    if (act != STRATA_RT_ACT_NONE) {
      Value code = l.i64(RuntimeLowering::typeCode(elem));
      l.call("strata_rt_gemm_aux",
             {l.site(), l.i64(rows), l.i64(n), l.i64(k), l.ptr(x), code,
              l.i64(0), l.ptr(w), code, l.i64(t), l.tensor(o.getResult()),
              l.tensor(o.getAux()), l.ptr(o.getBias()), code, l.i64(act)});
      return success();
    }
    l.gemm(1, rows, n, k, l.ptr(x), 0, false, l.ptr(w), 0, t, l.ptr(o.getAux()),
           l.ptr(o.getBias()), STRATA_RT_ACT_NONE, elem);
    l.copy(l.ptr(o.getResult()), l.ptr(o.getAux()), o.getResult());
    return success();
  }
  l.gemm(1, rows, n, k, l.ptr(x), 0, false, l.ptr(w), 0, t,
         l.ptr(o.getResult()), l.ptr(o.getBias()), act, elem);
  return success();
}

/// The fused gradient whose activation gradient `producer`'s input-gradient
/// GEMM applies in its epilogue (cuBLASLt's DGELU), or null: the one reader
/// of that gradient, with an activation whose pre-activation is computed
/// before `producer` (a recomputed one may come later).
FusedGemmEpilogueGradOp activationFusedInto(FusedGemmEpilogueGradOp producer,
                                            const RuntimeLowering &l) {
  Value dx = producer.getInputGrad();
  if (!dx.hasOneUse())
    return {};
  auto consumer = dyn_cast<FusedGemmEpilogueGradOp>(*dx.getUsers().begin());
  if (!consumer || consumer.getResultGrad() != dx ||
      consumer.getActivation() == Activation::None || !consumer.getAux())
    return {};
  Value aux = consumer.getAux();
  if (!l.hasBuffer(aux) || aux.getParentBlock() != producer->getBlock())
    return {};
  if (Operation *def = aux.getDefiningOp();
      def && !def->isBeforeInBlock(producer))
    return {};
  return consumer;
}

LogicalResult lowerFusedGemmGrad(FusedGemmEpilogueGradOp o,
                                 RuntimeLowering &l) {
  Value x = o.getInput(), w = o.getWeight(), dz = o.getResultGrad();
  bool t = o.getTransposeWeight();
  SmallVector<int64_t> ws = shapeOf(w);
  int64_t k = ws[t ? 1 : 0], n = ws[t ? 0 : 1], rows = numel(x) / k;
  Value dzPtr = l.ptr(dz);
  Type elem = elementType(dz);
  Value code = l.i64(RuntimeLowering::typeCode(elem));
  auto producer = dz.getDefiningOp<FusedGemmEpilogueGradOp>();
  bool appliedByProducer = producer && activationFusedInto(producer, l) == o;
  if (o.getActivation() != Activation::None && !appliedByProducer) {
    // The activation's gradient overwrites the pre-activation, which this
    // op reads last.
    Value aux = o.getAux();
    for (Operation *user : aux.getUsers())
      if (user != o && o->isBeforeInBlock(user))
        return o.emitOpError("needs the pre-activation after its gradient; ")
               << l.target.getDescription()
               << " computes the activation gradient in its place";
    if (!l.hasBuffer(aux) || isa<BlockArgument>(aux) ||
        isa_and_nonnull<GetParamOp, GetStateOp>(aux.getDefiningOp()))
      return o.emitOpError("needs an intermediate pre-activation");
    l.call("strata_rt_act_grad",
           {l.site(), l.i64(activationCode(o.getActivation())), l.tensor(aux),
            l.tensor(aux), l.tensor(dz), l.i64(numel(dz))});
    dzPtr = l.ptr(aux);
  }
  // dx = dz W^T; when its one reader is the gradient of an activation, the
  // GEMM's epilogue applies that gradient (and the reader skips it).
  if (auto consumer = activationFusedInto(o, l))
    l.call("strata_rt_gemm_dact",
           {l.site(), l.i64(rows), l.i64(k), l.i64(n), dzPtr, code, l.i64(0),
            l.ptr(w), code, l.i64(!t), l.tensor(o.getInputGrad()),
            l.tensor(consumer.getAux()),
            l.i64(activationCode(consumer.getActivation()))});
  else if (!o.getInputGrad().use_empty())
    l.gemm(1, rows, k, n, dzPtr, 0, false, l.ptr(w), 0, !t,
           l.ptr(o.getInputGrad()), Value(), STRATA_RT_ACT_NONE, elem);
  // dW = x^T dz [K, N] (dz the B operand), or dz^T x [N, K] for a
  // transposed weight (dz the A operand), with the bias gradient (dz's
  // column sums) in the epilogue.
  Value xPtr = l.ptr(x);
  l.call("strata_rt_gemm_bgrad", {l.site(),
                                  l.i64(t ? n : k),
                                  l.i64(t ? k : n),
                                  l.i64(rows),
                                  t ? dzPtr : xPtr,
                                  code,
                                  l.i64(1),
                                  t ? xPtr : dzPtr,
                                  code,
                                  l.i64(0),
                                  {l.ptr(o.getWeightGrad()), code},
                                  l.tensor(o.getBiasGrad()),
                                  l.i64(t ? 0 : 1)});
  return success();
}

/// Fused attention's dimensions: query [..., S, H, D], key [..., T, Hkv, D],
/// value [..., T, Hkv, Dv], `batch` the leading dimensions' product.
struct AttentionShape {
  int64_t batch, heads, kvHeads, s, t, d, dv;
};
AttentionShape attentionShape(Value q, Value k, Value v) {
  SmallVector<int64_t> qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  size_t r = qs.size();
  int64_t s = qs[r - 3], heads = qs[r - 2], d = qs[r - 1];
  return {numel(q) / std::max<int64_t>(s * heads * d, 1),
          heads,
          ks[r - 2],
          s,
          ks[r - 3],
          d,
          vs[r - 1]};
}

/// The trailing arguments of strata_rt_attention(_grad): the shape (of the
/// forward operands), scale, causal and the dropout with its micro-batch.
template <typename OpTy>
SmallVector<RuntimeLowering::CallArg> attentionArgs(OpTy o,
                                                    RuntimeLowering &l) {
  AttentionShape a = attentionShape(o.getQuery(), o.getKey(), o.getValue());
  return {l.i64(a.batch),
          l.i64(a.heads),
          l.i64(a.kvHeads),
          l.i64(a.s),
          l.i64(a.t),
          l.i64(a.d),
          l.i64(a.dv),
          l.f64(o.getScale().convertToDouble()),
          l.i64(o.getCausal()),
          l.f64(o.getDropout().convertToDouble()),
          l.i64(o.getDropoutKey()),
          l.i64(l.microBatches),
          l.i64(getMicroBatch(o).value_or(0))};
}

LogicalResult lowerAttention(AttentionOp o, RuntimeLowering &l) {
  SmallVector<RuntimeLowering::CallArg> args = {l.site(),
                                                l.tensor(o.getResult()),
                                                l.tensor(o.getLogsumexp()),
                                                l.tensor(o.getQuery()),
                                                l.tensor(o.getKey()),
                                                l.tensor(o.getValue())};
  args.append(attentionArgs(o, l));
  l.call("strata_rt_attention", args);
  return success();
}

LogicalResult lowerAttentionGrad(AttentionGradOp o, RuntimeLowering &l) {
  SmallVector<RuntimeLowering::CallArg> args = {l.site(),
                                                l.tensor(o.getQueryGrad()),
                                                l.tensor(o.getKeyGrad()),
                                                l.tensor(o.getValueGrad()),
                                                l.tensor(o.getQuery()),
                                                l.tensor(o.getKey()),
                                                l.tensor(o.getValue()),
                                                l.tensor(o.getResult()),
                                                l.tensor(o.getLogsumexp()),
                                                l.tensor(o.getResultGrad())};
  args.append(attentionArgs(o, l));
  l.call("strata_rt_attention_grad", args);
  return success();
}

} // namespace

void strata::lowering::populateGemmLoweringPatterns(RewritePatternSet &patterns,
                                                    RuntimeLowering &l) {
  addLowering<MatmulOp>(patterns, l, [](MatmulOp o, RuntimeLowering &l) {
    return lowerMatmul(o, o.getLhs(), o.getRhs(), o.getResult(),
                       o.getTransposeLhs(), o.getTransposeRhs(), l);
  });
  addLowering<MatmulGradOp>(patterns, l, lowerMatmulGrad);
  addLowering<FusedGemmEpilogueOp>(patterns, l, lowerFusedGemm);
  addLowering<FusedGemmEpilogueGradOp>(patterns, l, lowerFusedGemmGrad);
  addLowering<AttentionOp>(patterns, l, lowerAttention);
  addLowering<AttentionGradOp>(patterns, l, lowerAttentionGrad);
}
