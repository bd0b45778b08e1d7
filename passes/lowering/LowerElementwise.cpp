//===- LowerElementwise.cpp - Elementwise, data movement, dropout ---------===//
//
// Elementwise: add / sub / mul / div / bias_add / arith.addi (broadcasting
// strata_rt_binary), scale, relu, gelu, silu, rsqrt, tanh (strata_rt_unary) and
// the gradients (strata_rt_act_grad). Data movement: constants (fill, or a
// constant global copied in), reshape (copy), cast (strata_rt_cast), transpose,
// slice and broadcast_to (strided copy), concat and pad (row blocks), pack /
// unpack (copies into and out of a flat buffer, padding zero-filled), and the
// reductions (reduce_sum, reduce_mean, sum_to, bias_add_grad). Dropout: one
// kernel for dropout, its gradient and the fused dropout + residual forms.
//
//===----------------------------------------------------------------------===//

#include "RuntimeLowering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

namespace {

LogicalResult binary(int64_t kind, Value lhs, Value rhs, Value out,
                     RuntimeLowering &l) {
  SmallVector<int64_t> shape = shapeOf(out);
  SmallVector<int64_t> desc(shape);
  desc.append(broadcastStrides(shapeOf(lhs), shape));
  desc.append(broadcastStrides(shapeOf(rhs), shape));
  l.call("strata_rt_binary",
         {l.site(), l.i64(kind), l.tensor(out), l.tensor(lhs), l.tensor(rhs),
          l.i64(shape.size()), l.constantArray(desc)});
  return success();
}

LogicalResult unary(int64_t kind, Value in, Value out, RuntimeLowering &l,
                    double alpha = 0) {
  l.call("strata_rt_unary", {l.site(), l.i64(kind), l.tensor(out), l.tensor(in),
                             l.i64(numel(out)), l.f64(alpha)});
  return success();
}

LogicalResult actGrad(int64_t act, Value out, Value x, Value dy,
                      RuntimeLowering &l) {
  l.call("strata_rt_act_grad", {l.site(), l.i64(act), l.tensor(out),
                                l.tensor(x), l.tensor(dy), l.i64(numel(out))});
  return success();
}

LogicalResult lowerConstant(arith::ConstantOp c, RuntimeLowering &l) {
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense)
    return c.emitOpError("only dense tensor constants are supported");
  if (std::optional<double> v = splatValue(dense)) {
    l.call("strata_rt_fill",
           {l.site(), l.tensor(c), l.i64(numel(c)), l.f64(*v)});
    return success();
  }
  // Non-splat constants: a constant global copied into the buffer.
  l.copy(l.ptr(c), l.constantData(dense), c);
  return success();
}

/// A strided copy: `desc` holds the output shape, the input strides, the
/// base offset.
LogicalResult stridedCopy(Value out, Value in, ArrayRef<int64_t> desc,
                          RuntimeLowering &l) {
  l.call("strata_rt_strided_copy",
         {l.site(), l.ptr(out), l.ptr(in), l.ty(out),
          l.i64(shapeOf(out).size()), l.constantArray(desc)});
  return success();
}

/// Copies `in` into `out` (of the same shape but for dimension `dim`) at
/// element `offset` of each row of the dimensions before `dim`; returns the
/// elements of `in` per row.
int64_t copyRows(Value out, Value in, int64_t dim, int64_t offset,
                 RuntimeLowering &l) {
  SmallVector<int64_t> shape = shapeOf(out);
  int64_t rows = 1;
  for (int64_t d = 0; d < dim; ++d)
    rows *= shape[d];
  int64_t outRow = numel(out) / std::max<int64_t>(rows, 1);
  int64_t inRow = numel(in) / std::max<int64_t>(rows, 1);
  l.call("strata_rt_copy_rows",
         {l.site(), l.ptr(out), l.ptr(in), l.ty(out), l.i64(rows), l.i64(inRow),
          l.i64(outRow), l.i64(offset)});
  return inRow;
}

LogicalResult lowerPack(PackOp o, RuntimeLowering &l) {
  int64_t at = 0;
  for (Value in : o.getInputs()) {
    // The memory plan may have had its producer write it in place.
    if (!l.inArenaAt(in, o.getResult(), at))
      l.copy(l.byteOffset(l.ptr(o), at), l.ptr(in), in);
    at += tensorBytes(in.getType());
  }
  int64_t width = tensorBytes(o.getType()) / numel(o);
  if (int64_t rest = numel(o) - at / width)
    l.call("strata_rt_fill", {l.site(), l.byteOffset(l.ptr(o), at), l.ty(o),
                              l.i64(rest), l.f64(0)});
  return success();
}

LogicalResult lowerUnpack(UnpackOp o, RuntimeLowering &l) {
  int64_t width = tensorBytes(o.getInput().getType()) / numel(o.getInput());
  int64_t at = o.getOffset() * width;
  for (Value r : o.getResults()) {
    if (!l.inArenaAt(r, o.getInput(), at))
      l.copy(l.ptr(r), l.byteOffset(l.ptr(o.getInput()), at), r);
    at += tensorBytes(r.getType());
  }
  return success();
}

/// The strides over `shape` of its reduction over `dims` (the reduced
/// tensor's, 0 along the reduced dimensions), and how many elements each
/// reduced element covers.
SmallVector<int64_t> reducedStrides(ArrayRef<int64_t> shape,
                                    ArrayRef<int64_t> dims, int64_t &count) {
  SmallVector<int64_t> kept(shape);
  count = 1;
  for (int64_t d : dims) {
    count *= kept[d];
    kept[d] = 1;
  }
  SmallVector<int64_t> strides = contiguousStrides(kept);
  for (int64_t d : dims)
    strides[d] = 0;
  return strides;
}

template <typename OpTy> LogicalResult lowerReduce(OpTy o, RuntimeLowering &l) {
  SmallVector<int64_t> in = shapeOf(o.getInput());
  int64_t count;
  SmallVector<int64_t> strides = reducedStrides(in, o.getDims(), count);
  l.reduceTo(l.ptr(o), l.ptr(o.getInput()), in, strides,
             std::is_same_v<OpTy, ReduceMeanOp> ? 1.0 / double(count) : 1.0,
             elementType(o));
  return success();
}

/// The result gradient copied along the reduced dimensions (stride 0),
/// scaled in place for a mean. The input is not read.
LogicalResult lowerReduceGrad(ReduceGradOp o, RuntimeLowering &l) {
  SmallVector<int64_t> desc = shapeOf(o);
  int64_t count;
  desc.append(reducedStrides(shapeOf(o), o.getDims(), count));
  desc.push_back(0);
  if (failed(stridedCopy(o, o.getResultGrad(), desc, l)))
    return failure();
  if (o.getMean())
    return unary(STRATA_RT_UNARY_SCALE, o.getResult(), o, l,
                 1.0 / double(count));
  return success();
}

/// sum_to and bias_add_grad: the input summed to the result's shape.
LogicalResult lowerSumTo(Operation *o, RuntimeLowering &l) {
  Value in = o->getOperand(0), out = o->getResult(0);
  l.reduceTo(l.ptr(out), l.ptr(in), shapeOf(in),
             broadcastStrides(shapeOf(out), shapeOf(in)), 1.0,
             elementType(out));
  return success();
}

} // namespace

void strata::lowering::populateElementwiseLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<AddOp>(patterns, l, [](AddOp o, RuntimeLowering &l) {
    return binary(STRATA_RT_ADD, o.getLhs(), o.getRhs(), o, l);
  });
  addLowering<BiasAddOp>(patterns, l, [](BiasAddOp o, RuntimeLowering &l) {
    return binary(STRATA_RT_ADD, o.getInput(), o.getBias(), o, l);
  });
  addLowering<arith::AddIOp>(
      patterns, l, [](arith::AddIOp o, RuntimeLowering &l) {
        return binary(STRATA_RT_ADD, o.getLhs(), o.getRhs(), o, l);
      });
  addLowering<SubOp>(patterns, l, [](SubOp o, RuntimeLowering &l) {
    return binary(STRATA_RT_SUB, o.getLhs(), o.getRhs(), o, l);
  });
  addLowering<MulOp>(patterns, l, [](MulOp o, RuntimeLowering &l) {
    return binary(STRATA_RT_MUL, o.getLhs(), o.getRhs(), o, l);
  });
  addLowering<DivOp>(patterns, l, [](DivOp o, RuntimeLowering &l) {
    return binary(STRATA_RT_DIV, o.getLhs(), o.getRhs(), o, l);
  });
  addLowering<ScaleOp>(patterns, l, [](ScaleOp o, RuntimeLowering &l) {
    return unary(STRATA_RT_UNARY_SCALE, o.getInput(), o, l,
                 o.getFactor().convertToDouble());
  });
  addLowering<ScaleByOp>(patterns, l, [](ScaleByOp o, RuntimeLowering &l) {
    l.call("strata_rt_scale_by",
           {l.site(), l.tensor(o), l.tensor(o.getInput()),
            l.i64(numel(o.getInput())), l.tensor(o.getFactor())});
    return success();
  });
  addLowering<ReluOp>(patterns, l, [](ReluOp o, RuntimeLowering &l) {
    return unary(STRATA_RT_ACT_RELU, o.getInput(), o, l);
  });
  addLowering<GeluOp>(patterns, l, [](GeluOp o, RuntimeLowering &l) {
    return unary(geluCode(o.getApproximate()), o.getInput(), o, l);
  });
  addLowering<SiluOp>(patterns, l, [](SiluOp o, RuntimeLowering &l) {
    return unary(STRATA_RT_ACT_SILU, o.getInput(), o, l);
  });
  addLowering<RsqrtOp>(patterns, l, [](RsqrtOp o, RuntimeLowering &l) {
    return unary(STRATA_RT_UNARY_RSQRT, o.getInput(), o, l);
  });
  addLowering<TanhOp>(patterns, l, [](TanhOp o, RuntimeLowering &l) {
    return unary(STRATA_RT_UNARY_TANH, o.getInput(), o, l);
  });
  addLowering<SiluGradOp>(patterns, l, [](SiluGradOp o, RuntimeLowering &l) {
    return actGrad(STRATA_RT_ACT_SILU, o, o.getInput(), o.getResultGrad(), l);
  });
  // For ReLU the gradient reads the forward output, for GELU its input.
  addLowering<ReluGradOp>(patterns, l, [](ReluGradOp o, RuntimeLowering &l) {
    return actGrad(STRATA_RT_ACT_RELU, o, o.getOutput(), o.getResultGrad(), l);
  });
  addLowering<GeluGradOp>(patterns, l, [](GeluGradOp o, RuntimeLowering &l) {
    return actGrad(geluCode(o.getApproximate()), o, o.getInput(),
                   o.getResultGrad(), l);
  });
}

void strata::lowering::populateDataMovementLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<arith::ConstantOp>(patterns, l, lowerConstant);
  // A reshape the memory plan put in its input's buffer is free.
  addLowering<ReshapeOp>(patterns, l, [](ReshapeOp o, RuntimeLowering &l) {
    if (!l.inArenaAt(o.getResult(), o.getInput(), 0))
      l.copy(l.ptr(o), l.ptr(o.getInput()), o.getResult());
    return success();
  });
  addLowering<CastOp>(patterns, l, [](CastOp o, RuntimeLowering &l) {
    l.call("strata_rt_cast",
           {l.site(), l.tensor(o), l.tensor(o.getInput()), l.i64(numel(o))});
    return success();
  });
  addLowering<TransposeOp>(patterns, l, [](TransposeOp o, RuntimeLowering &l) {
    SmallVector<int64_t> in = contiguousStrides(shapeOf(o.getInput()));
    SmallVector<int64_t> desc = shapeOf(o);
    for (int64_t p : o.getPermutation())
      desc.push_back(in[p]);
    desc.push_back(0);
    return stridedCopy(o, o.getInput(), desc, l);
  });
  addLowering<SliceOp>(patterns, l, [](SliceOp o, RuntimeLowering &l) {
    SmallVector<int64_t> in = contiguousStrides(shapeOf(o.getInput()));
    int64_t base = o.getStart() * in[o.getDim()];
    in[o.getDim()] *= o.getStride();
    SmallVector<int64_t> desc = shapeOf(o);
    desc.append(in);
    desc.push_back(base);
    return stridedCopy(o, o.getInput(), desc, l);
  });
  addLowering<ConcatOp>(patterns, l, [](ConcatOp o, RuntimeLowering &l) {
    int64_t offset = 0;
    for (Value in : o.getInputs())
      offset += copyRows(o, in, o.getDim(), offset, l);
    return success();
  });
  addLowering<PadOp>(patterns, l, [](PadOp o, RuntimeLowering &l) {
    l.call("strata_rt_fill",
           {l.site(), l.tensor(o), l.i64(numel(o)), l.f64(0)});
    SmallVector<int64_t> shape = shapeOf(o);
    int64_t inner = 1;
    for (size_t d = o.getDim() + 1; d < shape.size(); ++d)
      inner *= shape[d];
    copyRows(o, o.getInput(), o.getDim(), o.getLow() * inner, l);
    return success();
  });
  addLowering<BroadcastToOp>(
      patterns, l, [](BroadcastToOp o, RuntimeLowering &l) {
        SmallVector<int64_t> desc = shapeOf(o);
        desc.append(broadcastStrides(shapeOf(o.getInput()), shapeOf(o)));
        desc.push_back(0);
        return stridedCopy(o, o.getInput(), desc, l);
      });
  addLowering<PackOp>(patterns, l, lowerPack);
  addLowering<UnpackOp>(patterns, l, lowerUnpack);
  addLowering<ReduceSumOp>(patterns, l, lowerReduce<ReduceSumOp>);
  addLowering<ReduceMeanOp>(patterns, l, lowerReduce<ReduceMeanOp>);
  addLowering<ReduceGradOp>(patterns, l, lowerReduceGrad);
  addLowering<SumToOp>(patterns, l, [](SumToOp o, RuntimeLowering &l) {
    return lowerSumTo(o, l);
  });
  addLowering<BiasAddGradOp>(
      patterns, l,
      [](BiasAddGradOp o, RuntimeLowering &l) { return lowerSumTo(o, l); });
}

void strata::lowering::populateDropoutLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<DropoutOp>(patterns, l, [](DropoutOp o, RuntimeLowering &l) {
    l.dropout(o, l.ptr(o), l.ptr(o.getInput()), Value(),
              o.getProb().convertToDouble(), o.getKey(), numel(o),
              elementType(o));
    return success();
  });
  // The gradient applies the same mask (and scale) to the result's gradient.
  addLowering<DropoutGradOp>(patterns, l,
                             [](DropoutGradOp o, RuntimeLowering &l) {
                               l.dropout(o, l.ptr(o), l.ptr(o.getResultGrad()),
                                         Value(), o.getProb().convertToDouble(),
                                         o.getKey(), numel(o), elementType(o));
                               return success();
                             });
  addLowering<FusedDropoutAddOp>(
      patterns, l, [](FusedDropoutAddOp o, RuntimeLowering &l) {
        l.dropout(o, l.ptr(o), l.ptr(o.getInput()), l.ptr(o.getResidual()),
                  o.getProb().convertToDouble(), o.getKey(), numel(o),
                  elementType(o));
        return success();
      });
  addLowering<FusedDropoutAddGradOp>(
      patterns, l, [](FusedDropoutAddGradOp o, RuntimeLowering &l) {
        l.dropout(o, l.ptr(o.getInputGrad()), l.ptr(o.getResultGrad()), Value(),
                  o.getProb().convertToDouble(), o.getKey(),
                  numel(o.getResultGrad()), elementType(o.getResultGrad()));
        l.copy(l.ptr(o.getResidualGrad()), l.ptr(o.getResultGrad()),
               o.getResidualGrad());
        return success();
      });
}
