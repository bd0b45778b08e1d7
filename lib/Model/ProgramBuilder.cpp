//===- ProgramBuilder.cpp - C++ API to construct training programs -------===//

#include "strata/Model/ProgramBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace strata;

void strata::loadStrataDialects(MLIRContext &context) {
  context.loadDialect<StrataDialect, func::FuncDialect, arith::ArithDialect>();
}

ProgramBuilder::ProgramBuilder(MLIRContext *context)
    : builder(context), module(ModuleOp::create(UnknownLoc::get(context))) {}

Location ProgramBuilder::loc(StringRef name) {
  std::string full = scope.empty() ? name.str() : scope + "." + name.str();
  return NameLoc::get(builder.getStringAttr(full));
}

Value ProgramBuilder::tag(Value value) {
  if (!scope.empty())
    value.getDefiningOp()->setAttr(StrataDialect::kLayerAttrName,
                                   builder.getStringAttr(scope));
  if (ampGuard)
    value.getDefiningOp()->setAttr(StrataDialect::kAmpGuardAttrName,
                                   builder.getUnitAttr());
  return value;
}

RankedTensorType ProgramBuilder::tensor(ArrayRef<int64_t> shape,
                                        Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

ValueRange ProgramBuilder::beginStep(ArrayRef<Type> inputTypes,
                                     ArrayRef<StringRef> inputNames) {
  assert(!step && "beginStep called twice");
  assert(inputTypes.size() == inputNames.size());
  builder.setInsertionPointToEnd(module->getBody());
  auto type = builder.getFunctionType(inputTypes, {});
  step = func::FuncOp::create(builder, loc(kStepFunctionName),
                              kStepFunctionName, type);
  Block *entry = step.addEntryBlock();
  for (auto [arg, name] : llvm::zip(entry->getArguments(), inputNames))
    step.setArgAttr(arg.getArgNumber(),
                    strata::StrataDialect::kInputNameAttrName,
                    builder.getStringAttr(name));
  builder.setInsertionPointToStart(entry);
  return entry->getArguments();
}

OwningOpRef<ModuleOp> ProgramBuilder::finish(Value loss) {
  assert(step && "beginStep not called");
  func::ReturnOp::create(builder, loc("return"), loss);
  step.setFunctionType(
      builder.getFunctionType(step.getArgumentTypes(), {loss.getType()}));
  return std::move(module);
}

Value ProgramBuilder::param(StringRef name, ArrayRef<int64_t> shape,
                            InitKind init, double scale) {
  std::string full = scope.empty() ? name.str() : scope + "." + name.str();
  auto type = tensor(shape, f32());
  {
    OpBuilder::InsertionGuard guard(builder);
    // Parameters precede the step function, in declaration order.
    builder.setInsertionPoint(step);
    ParamOp::create(builder, loc(name), full, type,
                    InitAttr::get(builder.getContext(), init,
                                  scale == 0.0 ? FloatAttr()
                                               : builder.getF64FloatAttr(scale)),
                    /*frozen=*/false);
  }
  return tag(GetParamOp::create(builder, loc(name), type,
                            FlatSymbolRefAttr::get(builder.getContext(), full)));
}

Value ProgramBuilder::matmul(Value lhs, Value rhs, bool transposeLhs,
                             bool transposeRhs) {
  return tag(MatmulOp::create(builder, loc("matmul"), lhs, rhs, transposeLhs,
                          transposeRhs));
}

Value ProgramBuilder::add(Value lhs, Value rhs) {
  return tag(AddOp::create(builder, loc("add"), lhs, rhs));
}

Value ProgramBuilder::sub(Value lhs, Value rhs) {
  return tag(SubOp::create(builder, loc("sub"), lhs, rhs));
}

Value ProgramBuilder::mul(Value lhs, Value rhs) {
  return tag(MulOp::create(builder, loc("mul"), lhs, rhs));
}

Value ProgramBuilder::reduceAll(Value input, bool mean) {
  SmallVector<int64_t> dims;
  for (int64_t d = 0, e = cast<RankedTensorType>(input.getType()).getRank();
       d < e; ++d)
    dims.push_back(d);
  if (mean)
    return tag(ReduceMeanOp::create(builder, loc("reduce_mean"), input, dims));
  return tag(ReduceSumOp::create(builder, loc("reduce_sum"), input, dims));
}

Value ProgramBuilder::scale(Value input, double factor) {
  return tag(ScaleOp::create(builder, loc("scale"), input,
                         builder.getF64FloatAttr(factor)));
}

Value ProgramBuilder::biasAdd(Value input, Value bias) {
  return tag(BiasAddOp::create(builder, loc("bias_add"), input, bias));
}

Value ProgramBuilder::relu(Value input) {
  return tag(ReluOp::create(builder, loc("relu"), input));
}

Value ProgramBuilder::gelu(Value input, GeluApproximation approximate) {
  return tag(GeluOp::create(builder, loc("gelu"), input, approximate));
}

Value ProgramBuilder::dropout(Value input, double prob) {
  if (prob == 0.0)
    return input;
  return tag(DropoutOp::create(builder, loc("dropout"), input,
                           builder.getF64FloatAttr(prob),
                           builder.getI64IntegerAttr(nextDropoutKey++)));
}

Value ProgramBuilder::softmax(Value input, bool causal) {
  return tag(SoftmaxOp::create(builder, loc("softmax"), input, causal));
}

Value ProgramBuilder::layerNorm(Value input, Value gamma, Value beta,
                                double epsilon) {
  return tag(LayerNormOp::create(builder, loc("layer_norm"), input, gamma, beta,
                             builder.getF64FloatAttr(epsilon)));
}

Value ProgramBuilder::embedding(Value table, Value ids) {
  return tag(EmbeddingOp::create(builder, loc("embedding"), table, ids,
                                 /*padding_idx=*/IntegerAttr()));
}

Value ProgramBuilder::reshape(Value input, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(input.getType());
  return tag(ReshapeOp::create(builder, loc("reshape"),
                           tensor(shape, type.getElementType()), input));
}

Value ProgramBuilder::transpose(Value input, ArrayRef<int64_t> perm) {
  return tag(TransposeOp::create(builder, loc("transpose"), input,
                             builder.getDenseI64ArrayAttr(perm)));
}

Value ProgramBuilder::crossEntropy(Value logits, Value labels) {
  return tag(CrossEntropyOp::create(builder, loc("cross_entropy"), logits,
                                    labels, /*classes=*/nullptr));
}
