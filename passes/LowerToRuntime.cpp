//===- LowerToRuntime.cpp - Strata step -> calls of the runtime C ABI -----===//
//
// The step function becomes an LLVM-dialect function
//
//   void strata_step(ctx, arena, persistent, inputs, outputs)
//
// whose body is one call of include/strata/Runtime/StrataRuntime.h per op.
// Every intermediate value lives at its offset of the static memory plan
// (one arena); parameters and state are the host's resident buffers,
// reached through `persistent` in the order of the module attribute
// `strata.rt.persistent`. Shapes and strides are compile-time constants
// (call arguments, or constant i64 arrays for variable-rank descriptors).
// An update whose parameter (or state) is read for the last time by the
// update itself writes its result straight into the resident buffer; any
// other `strata.assign` copies when the step ends.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "strata/Passes/Passes.h"
#include "strata/Analysis/MemoryPlan.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Runtime/StrataRuntime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>

namespace strata {
#define GEN_PASS_DEF_STRATALOWERTORUNTIME
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

SmallVector<int64_t> shapeOf(Value v) {
  return SmallVector<int64_t>(tensorType(v).getShape());
}
int64_t numel(Value v) { return tensorType(v).getNumElements(); }

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// Strides of `from` (NumPy-broadcast to `to`) over the dimensions of `to`.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> from,
                                      ArrayRef<int64_t> to) {
  SmallVector<int64_t> fromStrides = contiguousStrides(from);
  SmallVector<int64_t> strides(to.size(), 0);
  int64_t offset = int64_t(to.size()) - int64_t(from.size());
  for (int64_t d = 0; d < int64_t(to.size()); ++d) {
    int64_t fd = d - offset;
    if (fd >= 0 && from[fd] != 1)
      strides[d] = fromStrides[fd];
  }
  return strides;
}

int64_t activationCode(Activation act) {
  switch (act) {
  case Activation::None:
    return STRATA_RT_ACT_NONE;
  case Activation::Relu:
    return STRATA_RT_ACT_RELU;
  case Activation::GeluTanh:
    return STRATA_RT_ACT_GELU_TANH;
  case Activation::GeluErf:
    return STRATA_RT_ACT_GELU_ERF;
  }
  llvm_unreachable("unknown activation");
}

int64_t geluCode(GeluApproximation a) {
  return a == GeluApproximation::Tanh ? STRATA_RT_ACT_GELU_TANH
                                      : STRATA_RT_ACT_GELU_ERF;
}

class Lowering {
public:
  Lowering(ModuleOp module, func::FuncOp step, int64_t alignment, bool trace)
      : module(module), step(step), trace(trace), b(module.getContext()),
        ptrType(LLVM::LLVMPointerType::get(module.getContext())),
        i64Type(IntegerType::get(module.getContext(), 64)),
        f64Type(Float64Type::get(module.getContext())),
        plan(planMemory(step, alignment)) {}

  LogicalResult run();

private:
  // --- Building blocks ----------------------------------------------------
  Value i64(int64_t v) {
    return LLVM::ConstantOp::create(b, loc, i64Type, b.getI64IntegerAttr(v));
  }
  Value f64(double v) {
    return LLVM::ConstantOp::create(b, loc, f64Type, b.getF64FloatAttr(v));
  }
  Value null() { return LLVM::ZeroOp::create(b, loc, ptrType); }
  Value site() { return i64(currentSite); }
  /// Calls `name`, declaring it (result `resultType` or void, argument
  /// types of `args`) first.
  Value call(StringRef name, ArrayRef<Value> args, Type resultType = {}) {
    auto callee = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
    if (!callee) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      SmallVector<Type> types;
      for (Value a : args)
        types.push_back(a.getType());
      callee = LLVM::LLVMFuncOp::create(
          b, module.getLoc(), name,
          LLVM::LLVMFunctionType::get(
              resultType ? resultType : LLVM::LLVMVoidType::get(b.getContext()),
              types));
    }
    SmallVector<Value> all(args);
    auto op = LLVM::CallOp::create(b, loc, callee, all);
    return resultType ? op.getResult() : Value();
  }
  /// The address of a constant global holding `values`.
  Value constantArray(ArrayRef<int64_t> values) {
    std::vector<int64_t> key(values.begin(), values.end());
    auto it = descriptors.find(key);
    if (it == descriptors.end()) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(module.getBody());
      std::string name = "__strata_desc" + std::to_string(descriptors.size());
      SmallVector<int64_t> data(values);
      if (data.empty())
        data.push_back(0);
      auto type = LLVM::LLVMArrayType::get(i64Type, data.size());
      auto attr = DenseElementsAttr::get(
          RankedTensorType::get({int64_t(data.size())}, i64Type),
          ArrayRef<int64_t>(data));
      LLVM::GlobalOp::create(b, module.getLoc(), type, /*isConstant=*/true,
                             LLVM::Linkage::Internal, name, attr);
      it = descriptors.emplace(key, name).first;
    }
    return LLVM::AddressOfOp::create(b, loc, ptrType, it->second);
  }
  /// Pointer `base[index]` loaded from a table of pointers.
  Value loadPointer(Value table, int64_t index) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrType, ptrType, table,
                                     ArrayRef<LLVM::GEPArg>{int32_t(index)});
    return LLVM::LoadOp::create(b, loc, ptrType, slot);
  }
  Value arenaAt(int64_t offset) { return byteOffset(arena, offset); }
  /// Whether `part` lives `bytes` into `whole`'s arena buffer (the memory
  /// plan put a packed or unpacked tensor in place).
  bool inArenaAt(Value part, Value whole, int64_t bytes) const {
    auto p = arenaOffsets.find(part), w = arenaOffsets.find(whole);
    return p != arenaOffsets.end() && w != arenaOffsets.end() &&
           p->second == w->second + bytes;
  }
  Value byteOffset(Value base, int64_t offset) {
    return LLVM::GEPOp::create(b, loc, ptrType, b.getI8Type(), base,
                               ArrayRef<LLVM::GEPArg>{int32_t(offset)});
  }

  // --- Values -------------------------------------------------------------
  /// The buffer of a tensor value.
  Value ptr(Value v) {
    auto it = pointers.find(v);
    assert(it != pointers.end() && "value without a buffer");
    return it->second;
  }
  FailureOr<int64_t> dtype(Operation *op, Value v) {
    Type element = tensorType(v).getElementType();
    if (element.isF32())
      return int64_t(STRATA_RT_F32);
    if (element.isInteger(32))
      return int64_t(STRATA_RT_I32);
    if (element.isInteger(64))
      return int64_t(STRATA_RT_I64);
    return op->emitOpError("has a ")
           << element << " tensor; the CPU runtime computes in f32 (integers: "
           << "i32, i64)";
  }
  /// The element type code of a tensor value (checked by requireF32 and
  /// dtype before any call is built).
  Value ty(Value v) {
    Type element = tensorType(v).getElementType();
    return i64(element.isInteger(32)   ? STRATA_RT_I32
               : element.isInteger(64) ? STRATA_RT_I64
                                       : STRATA_RT_F32);
  }
  LogicalResult requireF32(Operation *op) {
    for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults()))
      if (auto t = dyn_cast<RankedTensorType>(v.getType()))
        if (isa<FloatType>(t.getElementType()) && !t.getElementType().isF32())
          return op->emitOpError("has a ")
                 << t << " value; the CPU runtime computes in f32";
    return success();
  }

  /// A collective's group: the number of rank lists, then each list's
  /// length and ranks.
  SmallVector<int64_t> groupDescriptor(Operation *op, FlatSymbolRefAttr ref) {
    auto group = SymbolTable::lookupNearestSymbolFrom<CommGroupOp>(op, ref);
    SmallVector<int64_t> desc = {int64_t(group.getRanks().size())};
    for (Attribute list : group.getRanks()) {
      ArrayRef<int64_t> ranks = cast<DenseI64ArrayAttr>(list).asArrayRef();
      desc.push_back(ranks.size());
      desc.append(ranks.begin(), ranks.end());
    }
    return desc;
  }

  // --- Ops ----------------------------------------------------------------
  LogicalResult lower(Operation *op);
  LogicalResult collective(Operation *op, int64_t kind, Value input,
                           ReduceKind reduce, int64_t root,
                           FlatSymbolRefAttr group, int64_t dim = 0);
  LogicalResult lowerMatmul(Operation *op, Value lhs, Value rhs, Value out,
                            bool transA, bool transB);
  LogicalResult lowerMatmulGrad(MatmulGradOp op);
  void gemm(int64_t batch, int64_t m, int64_t n, int64_t k, Value a,
            int64_t aStride, bool transA, Value bm, int64_t bStride,
            bool transB, Value c, Value bias, int64_t act) {
    Value f32 = i64(STRATA_RT_F32);
    call("strata_rt_gemm",
         {context, site(), i64(batch), i64(m), i64(n), i64(k), a, f32,
          i64(aStride), i64(transA), bm, f32, i64(bStride), i64(transB), c, f32,
          bias ? bias : null(), f32, i64(act), i64(0)});
  }
  /// Copies `bytes` bytes of elements of type `element`.
  void copy(Value out, Value in, int64_t bytes, Type element) {
    int64_t code = element.isInteger(32)   ? STRATA_RT_I32
                   : element.isInteger(64) ? STRATA_RT_I64
                                           : STRATA_RT_F32;
    call("strata_rt_copy", {context, site(), out, in, i64(code),
                            i64(bytes / strata_rt_element_bytes(code))});
  }
  void copy(Value out, Value in, Value like) {
    copy(out, in, tensorBytes(like.getType()), tensorType(like).getElementType());
  }
  void reduceTo(Value out, Value in, ArrayRef<int64_t> inShape,
                ArrayRef<int64_t> outStrides, double scale) {
    SmallVector<int64_t> desc(inShape);
    desc.append(outStrides.begin(), outStrides.end());
    Value f32 = i64(STRATA_RT_F32);
    call("strata_rt_reduce", {context, site(), out, f32, in, f32,
                              i64(inShape.size()), constantArray(desc),
                              f64(scale)});
  }
  void dropout(Operation *op, Value out, Value in, Value residual, double prob,
               int64_t key, int64_t n) {
    Value f32 = i64(STRATA_RT_F32);
    call("strata_rt_dropout",
         {context, site(), out, f32, in, f32, residual ? residual : null(), f32,
          i64(n), i64(key), i64(microBatches),
          i64(getMicroBatch(op).value_or(0)), f64(prob)});
  }

  ModuleOp module;
  func::FuncOp step;
  bool trace;
  OpBuilder b;
  Location loc = UnknownLoc::get(module.getContext());
  Type ptrType, i64Type, f64Type;
  MemoryPlan plan;
  Value context, arena, persistent, inputs, outputs;
  DenseMap<Value, Value> pointers;
  std::map<std::vector<int64_t>, std::string> descriptors;
  llvm::StringMap<int64_t> persistentIndex;
  SmallVector<Attribute> persistentNames;
  SmallVector<Attribute> sites, siteRoles;
  /// Non-blocking all-reduces (their sites) to complete before an op.
  DenseMap<Operation *, SmallVector<int64_t>> waitsBefore;
  /// The arena offset of each value stored in the arena (from the memory
  /// plan, less the results written straight to a resident buffer).
  DenseMap<Value, int64_t> arenaOffsets;
  int64_t currentSite = 0;
  int64_t microBatches = 1;
};

LogicalResult Lowering::lowerMatmul(Operation *op, Value lhs, Value rhs,
                                    Value out, bool transA, bool transB) {
  SmallVector<int64_t> a = shapeOf(lhs), bs = shapeOf(rhs), c = shapeOf(out);
  int64_t ra = a.size(), rb = bs.size(), rc = c.size();
  int64_t m = c[rc - 2], n = c[rc - 1];
  int64_t k = transA ? a[ra - 2] : a[ra - 1];
  int64_t batch = numel(out) / (m * n);
  int64_t batchA = numel(lhs) / (m * k), batchB = numel(rhs) / (k * n);
  // A 2-D weight under a batched activation: one GEMM over all rows.
  if (rb == 2 && !transA) {
    gemm(1, batchA * m, n, k, ptr(lhs), 0, false, ptr(rhs), 0, transB,
         ptr(out), Value(), STRATA_RT_ACT_NONE);
    return success();
  }
  bool aOk = batchA == batch && (ra == 2 || ArrayRef(a).drop_back(2) ==
                                                ArrayRef(c).drop_back(2));
  bool bOk = batchB == batch && (rb == 2 || ArrayRef(bs).drop_back(2) ==
                                                ArrayRef(c).drop_back(2));
  if ((batchA != 1 && !aOk) || (batchB != 1 && !bOk))
    return op->emitOpError("broadcasts batch dimensions in a way the CPU "
                           "runtime does not support");
  gemm(batch, m, n, k, ptr(lhs), batchA == 1 ? 0 : m * k, transA, ptr(rhs),
       batchB == 1 ? 0 : k * n, transB, ptr(out), Value(), STRATA_RT_ACT_NONE);
  return success();
}

LogicalResult Lowering::lowerMatmulGrad(MatmulGradOp op) {
  bool transA = op.getTransposeLhs(), transB = op.getTransposeRhs();
  Value A = op.getLhs(), B = op.getRhs(), dy = op.getResultGrad();
  SmallVector<int64_t> a = shapeOf(A), bs = shapeOf(B), c = shapeOf(dy);
  int64_t ra = a.size(), rb = bs.size(), rc = c.size();
  int64_t m = c[rc - 2], n = c[rc - 1];
  int64_t k = transA ? a[ra - 2] : a[ra - 1];
  int64_t batch = numel(dy) / (m * n);
  int64_t batchA = numel(A) / (m * k), batchB = numel(B) / (k * n);
  // A gradient nobody reads (e.g. of the input batch) is not computed.
  bool needA = !op.getLhsGrad().use_empty(), needB = !op.getRhsGrad().use_empty();
  Value dA = needA ? ptr(op.getLhsGrad()) : Value();
  Value dB = needB ? ptr(op.getRhsGrad()) : Value();
  if (rb == 2 && !transA) {
    // Rows of every batch together: dA = dy @ op(B)^T, dB = A^T @ dy summed
    // over the batch by the GEMM itself.
    int64_t rows = batchA * m;
    if (needA)
      gemm(1, rows, k, n, ptr(dy), 0, false, ptr(B), 0, !transB, dA, Value(),
           STRATA_RT_ACT_NONE);
    if (needB && !transB)
      gemm(1, k, n, rows, ptr(A), 0, true, ptr(dy), 0, false, dB, Value(),
           STRATA_RT_ACT_NONE);
    else if (needB)
      gemm(1, n, k, rows, ptr(dy), 0, true, ptr(A), 0, false, dB, Value(),
           STRATA_RT_ACT_NONE);
    return success();
  }
  if (batchA != batch || batchB != batch ||
      (ra > 2 && ArrayRef(a).drop_back(2) != ArrayRef(c).drop_back(2)) ||
      (rb > 2 && ArrayRef(bs).drop_back(2) != ArrayRef(c).drop_back(2)))
    return op->emitOpError("sums a gradient over broadcast batch dimensions, "
                           "which the CPU runtime does not support");
  int64_t sa = batch == 1 ? 0 : m * k, sb = batch == 1 ? 0 : k * n,
          sy = batch == 1 ? 0 : m * n;
  if (needA && !transA)
    gemm(batch, m, k, n, ptr(dy), sy, false, ptr(B), sb, !transB, dA, Value(),
         STRATA_RT_ACT_NONE);
  else if (needA)
    gemm(batch, k, m, n, ptr(B), sb, transB, ptr(dy), sy, true, dA, Value(),
         STRATA_RT_ACT_NONE);
  if (needB && !transB)
    gemm(batch, k, n, m, ptr(A), sa, !transA, ptr(dy), sy, false, dB, Value(),
         STRATA_RT_ACT_NONE);
  else if (needB)
    gemm(batch, n, k, m, ptr(dy), sy, true, ptr(A), sa, transA, dB, Value(),
         STRATA_RT_ACT_NONE);
  return success();
}

LogicalResult Lowering::lower(Operation *op) {
  if (failed(requireF32(op)))
    return failure();
  auto binary = [&](int64_t kind, Value lhs, Value rhs,
                    Value out) -> LogicalResult {
    auto type = dtype(op, out);
    if (failed(type))
      return failure();
    SmallVector<int64_t> shape = shapeOf(out);
    SmallVector<int64_t> desc(shape);
    desc.append(broadcastStrides(shapeOf(lhs), shape));
    desc.append(broadcastStrides(shapeOf(rhs), shape));
    call("strata_rt_binary",
         {context, site(), i64(kind), ptr(out), i64(*type), ptr(lhs), ty(lhs),
          ptr(rhs), ty(rhs), i64(shape.size()), constantArray(desc)});
    return success();
  };
  auto unary = [&](int64_t kind, Value in, Value out, double alpha = 0) {
    call("strata_rt_unary", {context, site(), i64(kind), ptr(out), ty(out),
                             ptr(in), ty(in), i64(numel(out)), f64(alpha)});
    return success();
  };
  auto rowsOf = [](Value v) {
    return numel(v) / std::max<int64_t>(shapeOf(v).back(), 1);
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<InitTokenOp>([](auto) { return success(); })
      .Case([&](arith::ConstantOp c) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        auto type = dtype(op, c);
        if (!dense || failed(type))
          return failed(type) ? failure()
                              : op->emitOpError("only dense tensor constants "
                                                "are supported");
        if (dense.isSplat()) {
          double v = isa<FloatType>(dense.getElementType())
                         ? dense.getSplatValue<APFloat>().convertToDouble()
                         : double(dense.getSplatValue<APInt>().getSExtValue());
          call("strata_rt_fill",
               {context, site(), ptr(c), i64(*type), i64(numel(c)), f64(v)});
          return success();
        }
        // Non-splat constants: a constant global copied into the buffer.
        std::string name = "__strata_const" + std::to_string(currentSite);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(module.getBody());
          auto flat = dense.reshape(RankedTensorType::get(
              {numel(c)}, dense.getElementType()));
          LLVM::GlobalOp::create(
              b, module.getLoc(),
              LLVM::LLVMArrayType::get(dense.getElementType(), numel(c)),
              /*isConstant=*/true, LLVM::Linkage::Internal, name, flat);
        }
        Value address = LLVM::AddressOfOp::create(b, loc, ptrType, name);
        copy(ptr(c), address, c);
        return success();
      })
      .Case([&](MatmulOp o) {
        return lowerMatmul(op, o.getLhs(), o.getRhs(), o.getResult(),
                           o.getTransposeLhs(), o.getTransposeRhs());
      })
      .Case([&](MatmulGradOp o) { return lowerMatmulGrad(o); })
      .Case([&](AddOp o) {
        return binary(STRATA_RT_ADD, o.getLhs(), o.getRhs(), o);
      })
      .Case([&](BiasAddOp o) {
        return binary(STRATA_RT_ADD, o.getInput(), o.getBias(), o);
      })
      .Case([&](arith::AddIOp o) {
        return binary(STRATA_RT_ADD, o.getLhs(), o.getRhs(), o);
      })
      .Case([&](SubOp o) {
        return binary(STRATA_RT_SUB, o.getLhs(), o.getRhs(), o);
      })
      .Case([&](MulOp o) {
        return binary(STRATA_RT_MUL, o.getLhs(), o.getRhs(), o);
      })
      .Case([&](DivOp o) {
        return binary(STRATA_RT_DIV, o.getLhs(), o.getRhs(), o);
      })
      .Case([&](ScaleOp o) {
        return unary(STRATA_RT_UNARY_SCALE, o.getInput(), o,
                     o.getFactor().convertToDouble());
      })
      .Case([&](ReluOp o) {
        return unary(STRATA_RT_ACT_RELU, o.getInput(), o);
      })
      .Case([&](GeluOp o) {
        return unary(geluCode(o.getApproximate()), o.getInput(), o);
      })
      .Case([&](ReluGradOp o) {
        call("strata_rt_act_grad",
             {context, site(), i64(STRATA_RT_ACT_RELU), ptr(o), ty(o),
              ptr(o.getOutput()), ty(o.getOutput()), ptr(o.getResultGrad()),
              ty(o.getResultGrad()), i64(numel(o))});
        return success();
      })
      .Case([&](GeluGradOp o) {
        call("strata_rt_act_grad",
             {context, site(), i64(geluCode(o.getApproximate())), ptr(o),
              ty(o), ptr(o.getInput()), ty(o.getInput()),
              ptr(o.getResultGrad()), ty(o.getResultGrad()), i64(numel(o))});
        return success();
      })
      .Case([&](DropoutOp o) {
        dropout(op, ptr(o), ptr(o.getInput()), Value(),
                o.getProb().convertToDouble(), o.getKey(), numel(o));
        return success();
      })
      .Case([&](DropoutGradOp o) {
        dropout(op, ptr(o), ptr(o.getResultGrad()), Value(),
                o.getProb().convertToDouble(), o.getKey(), numel(o));
        return success();
      })
      .Case([&](FusedDropoutAddOp o) {
        dropout(op, ptr(o), ptr(o.getInput()), ptr(o.getResidual()),
                o.getProb().convertToDouble(), o.getKey(), numel(o));
        return success();
      })
      .Case([&](FusedDropoutAddGradOp o) {
        dropout(op, ptr(o.getInputGrad()), ptr(o.getResultGrad()), Value(),
                o.getProb().convertToDouble(), o.getKey(),
                numel(o.getResultGrad()));
        copy(ptr(o.getResidualGrad()), ptr(o.getResultGrad()),
             o.getResidualGrad());
        return success();
      })
      .Case([&](SoftmaxOp o) {
        SmallVector<int64_t> shape = shapeOf(o);
        int64_t causal =
            o.getCausal() ? (shape.size() >= 2 ? shape[shape.size() - 2] : 1)
                          : 0;
        call("strata_rt_softmax",
             {context, site(), ptr(o), ty(o), ptr(o.getInput()),
              ty(o.getInput()), i64(rowsOf(o)), i64(shape.back()),
              i64(causal)});
        return success();
      })
      .Case([&](SoftmaxGradOp o) {
        call("strata_rt_softmax_grad",
             {context, site(), ptr(o), ty(o), ptr(o.getOutput()),
              ty(o.getOutput()), ptr(o.getResultGrad()), ty(o.getResultGrad()),
              i64(rowsOf(o)), i64(shapeOf(o).back())});
        return success();
      })
      .Case([&](LayerNormOp o) {
        call("strata_rt_layer_norm",
             {context, site(), ptr(o), ty(o), ptr(o.getInput()),
              ty(o.getInput()), ptr(o.getGamma()), ty(o.getGamma()),
              ptr(o.getBeta()), ty(o.getBeta()), i64(rowsOf(o)),
              i64(shapeOf(o).back()), f64(o.getEpsilon().convertToDouble())});
        return success();
      })
      .Case([&](LayerNormGradOp o) {
        Value x = o.getInput();
        call("strata_rt_layer_norm_grad",
             {context, site(), ptr(o.getInputGrad()), ty(o.getInputGrad()),
              ptr(o.getGammaGrad()), ty(o.getGammaGrad()),
              ptr(o.getBetaGrad()), ty(o.getBetaGrad()), ptr(x), ty(x),
              ptr(o.getGamma()), ty(o.getGamma()), ptr(o.getResultGrad()),
              ty(o.getResultGrad()), i64(rowsOf(x)), i64(shapeOf(x).back()),
              f64(o.getEpsilon().convertToDouble())});
        return success();
      })
      .Case([&](EmbeddingOp o) -> LogicalResult {
        auto idType = dtype(op, o.getIds());
        if (failed(idType))
          return failure();
        SmallVector<int64_t> table = shapeOf(o.getTable());
        call("strata_rt_embedding",
             {context, site(), ptr(o), ty(o), ptr(o.getTable()),
              ty(o.getTable()), ptr(o.getIds()), i64(*idType),
              i64(numel(o.getIds())), i64(table[0]), i64(table[1])});
        return success();
      })
      .Case([&](EmbeddingGradOp o) -> LogicalResult {
        auto idType = dtype(op, o.getIds());
        if (failed(idType))
          return failure();
        SmallVector<int64_t> table = shapeOf(o);
        call("strata_rt_embedding_grad",
             {context, site(), ptr(o), ty(o), ptr(o.getIds()), i64(*idType),
              ptr(o.getResultGrad()), ty(o.getResultGrad()),
              i64(numel(o.getIds())), i64(table[0]), i64(table[1])});
        return success();
      })
      .Case([&](CrossEntropyOp o) -> LogicalResult {
        auto labelType = dtype(op, o.getLabels());
        if (failed(labelType))
          return failure();
        call("strata_rt_cross_entropy",
             {context, site(), ptr(o), ty(o), ptr(o.getLogits()),
              ty(o.getLogits()), ptr(o.getLabels()), i64(*labelType),
              i64(numel(o.getLabels())), i64(shapeOf(o.getLogits()).back())});
        return success();
      })
      .Case([&](CrossEntropyGradOp o) -> LogicalResult {
        auto labelType = dtype(op, o.getLabels());
        if (failed(labelType))
          return failure();
        call("strata_rt_cross_entropy_grad",
             {context, site(), ptr(o), ty(o), ptr(o.getLogits()),
              ty(o.getLogits()), ptr(o.getLabels()), i64(*labelType),
              ptr(o.getLossGrad()), ty(o.getLossGrad()),
              i64(numel(o.getLabels())), i64(shapeOf(o.getLogits()).back())});
        return success();
      })
      .Case([&](ReshapeOp o) {
        copy(ptr(o), ptr(o.getInput()), o.getResult());
        return success();
      })
      .Case([&](PackOp o) -> LogicalResult {
        auto type = dtype(op, o.getResult());
        if (failed(type))
          return failure();
        int64_t at = 0;
        for (Value in : o.getInputs()) {
          // The memory plan may have had its producer write it in place.
          if (!inArenaAt(in, o.getResult(), at))
            copy(byteOffset(ptr(o), at), ptr(in), in);
          at += tensorBytes(in.getType());
        }
        int64_t width = tensorBytes(o.getType()) / numel(o);
        if (int64_t rest = numel(o) - at / width)
          call("strata_rt_fill", {context, site(), byteOffset(ptr(o), at),
                                  i64(*type), i64(rest), f64(0)});
        return success();
      })
      .Case([&](UnpackOp o) {
        int64_t width = tensorBytes(o.getInput().getType()) /
                        numel(o.getInput());
        int64_t at = o.getOffset() * width;
        for (Value r : o.getResults()) {
          if (!inArenaAt(r, o.getInput(), at))
            copy(ptr(r), byteOffset(ptr(o.getInput()), at), r);
          at += tensorBytes(r.getType());
        }
        return success();
      })
      .Case([&](TransposeOp o) -> LogicalResult {
        auto type = dtype(op, o);
        if (failed(type))
          return failure();
        SmallVector<int64_t> in = contiguousStrides(shapeOf(o.getInput()));
        SmallVector<int64_t> desc = shapeOf(o);
        for (int64_t p : o.getPermutation())
          desc.push_back(in[p]);
        desc.push_back(0);
        call("strata_rt_strided_copy",
             {context, site(), ptr(o), ptr(o.getInput()), i64(*type),
              i64(shapeOf(o).size()), constantArray(desc)});
        return success();
      })
      .Case([&](SliceOp o) -> LogicalResult {
        auto type = dtype(op, o);
        if (failed(type))
          return failure();
        SmallVector<int64_t> in = contiguousStrides(shapeOf(o.getInput()));
        SmallVector<int64_t> desc = shapeOf(o);
        desc.append(in);
        desc.push_back(o.getStart() * in[o.getDim()]);
        call("strata_rt_strided_copy",
             {context, site(), ptr(o), ptr(o.getInput()), i64(*type),
              i64(shapeOf(o).size()), constantArray(desc)});
        return success();
      })
      .Case([&](BroadcastToOp o) {
        SmallVector<int64_t> desc = shapeOf(o);
        desc.append(broadcastStrides(shapeOf(o.getInput()), shapeOf(o)));
        desc.push_back(0);
        call("strata_rt_strided_copy",
             {context, site(), ptr(o), ptr(o.getInput()), ty(o),
              i64(shapeOf(o).size()), constantArray(desc)});
        return success();
      })
      .Case<SumToOp, BiasAddGradOp>([&](auto o) {
        Value in = op->getOperand(0);
        reduceTo(ptr(o), ptr(in), shapeOf(in),
                 broadcastStrides(shapeOf(o), shapeOf(in)), 1.0);
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto o) {
        SmallVector<int64_t> in = shapeOf(o.getInput()), kept = in;
        int64_t count = 1;
        for (int64_t d : o.getDims()) {
          count *= kept[d];
          kept[d] = 1;
        }
        SmallVector<int64_t> strides = contiguousStrides(kept);
        for (int64_t d : o.getDims())
          strides[d] = 0;
        reduceTo(ptr(o), ptr(o.getInput()), in, strides,
                 isa<ReduceMeanOp>(op) ? 1.0 / double(count) : 1.0);
        return success();
      })
      .Case([&](LrScheduleOp o) {
        int64_t kind = o.getKind() == LrScheduleKind::Constant
                           ? STRATA_RT_LR_CONSTANT
                       : o.getKind() == LrScheduleKind::LinearWarmup
                           ? STRATA_RT_LR_LINEAR_WARMUP
                           : STRATA_RT_LR_COSINE;
        call("strata_rt_lr_schedule",
             {context, site(), ptr(o), ty(o), ptr(o.getStep()),
              ty(o.getStep()), i64(kind),
              f64(o.getBaseLr().convertToDouble()),
              i64(int64_t(o.getWarmupSteps())),
              i64(int64_t(o.getDecaySteps())),
              f64(o.getMinLr().convertToDouble())});
        return success();
      })
      .Case([&](GlobalNormOp o) {
        int64_t count = o.getInputs().size();
        Value table = LLVM::AllocaOp::create(b, loc, ptrType, ptrType,
                                             i64(std::max<int64_t>(count, 1)));
        SmallVector<int64_t> sizes, types;
        for (auto [i, v] : llvm::enumerate(o.getInputs())) {
          Value slot = LLVM::GEPOp::create(b, loc, ptrType, ptrType, table,
                                           ArrayRef<LLVM::GEPArg>{int32_t(i)});
          LLVM::StoreOp::create(b, loc, ptr(v), slot);
          sizes.push_back(numel(v));
          types.push_back(STRATA_RT_F32);
        }
        call("strata_rt_global_norm",
             {context, site(), ptr(o), ty(o), i64(count), table,
              constantArray(types), constantArray(sizes)});
        return success();
      })
      .Case([&](ClipByGlobalNormOp o) {
        for (auto [in, out] : llvm::zip(o.getInputs(), o.getResults()))
          call("strata_rt_clip",
               {context, site(), ptr(out), ty(out), ptr(in), ty(in),
                i64(numel(in)), ptr(o.getNorm()), ty(o.getNorm()),
                f64(o.getMaxNorm().convertToDouble())});
        return success();
      })
      .Case([&](SgdUpdateOp o) {
        call("strata_rt_sgd",
             {context, site(), ptr(o), ty(o), ptr(o.getParam()),
              ty(o.getParam()), ptr(o.getGrad()), ty(o.getGrad()),
              ptr(o.getLr()), ty(o.getLr()), i64(numel(o)),
              f64(o.getWeightDecay().convertToDouble())});
        return success();
      })
      .Case([&](MomentumUpdateOp o) {
        call("strata_rt_momentum",
             {context, site(), ptr(o.getNewParam()), ty(o.getNewParam()),
              ptr(o.getNewVelocity()), ty(o.getNewVelocity()),
              ptr(o.getParam()), ty(o.getParam()), ptr(o.getGrad()),
              ty(o.getGrad()), ptr(o.getVelocity()), ty(o.getVelocity()),
              ptr(o.getLr()), ty(o.getLr()), i64(numel(o.getParam())),
              f64(o.getMomentum().convertToDouble()),
              f64(o.getWeightDecay().convertToDouble()),
              i64(o.getUseNesterov())});
        return success();
      })
      .Case<AdamUpdateOp, AdamWUpdateOp, LambUpdateOp>([&](auto o) {
        int64_t kind = isa<AdamUpdateOp>(op)    ? STRATA_RT_ADAM
                       : isa<AdamWUpdateOp>(op) ? STRATA_RT_ADAMW
                                                : STRATA_RT_LAMB;
        call("strata_rt_adam",
             {context, site(), i64(kind), ptr(o.getNewParam()),
              ty(o.getNewParam()), ptr(o.getNewMoment1()),
              ty(o.getNewMoment1()), ptr(o.getNewMoment2()),
              ty(o.getNewMoment2()), ptr(o.getParam()), ty(o.getParam()),
              ptr(o.getGrad()), ty(o.getGrad()), ptr(o.getMoment1()),
              ty(o.getMoment1()), ptr(o.getMoment2()), ty(o.getMoment2()),
              ptr(o.getLr()), ty(o.getLr()), ptr(o.getStep()),
              ty(o.getStep()), i64(numel(o.getParam())), f64(o.getBeta1().convertToDouble()),
              f64(o.getBeta2().convertToDouble()),
              f64(o.getEpsilon().convertToDouble()),
              f64(o.getWeightDecay().convertToDouble())});
        return success();
      })
      .Case([&](LarsUpdateOp o) {
        call("strata_rt_lars",
             {context, site(), ptr(o.getNewParam()), ty(o.getNewParam()),
              ptr(o.getNewVelocity()), ty(o.getNewVelocity()),
              ptr(o.getParam()), ty(o.getParam()), ptr(o.getGrad()),
              ty(o.getGrad()), ptr(o.getVelocity()), ty(o.getVelocity()),
              ptr(o.getLr()), ty(o.getLr()), i64(numel(o.getParam())),
              f64(o.getMomentum().convertToDouble()),
              f64(o.getWeightDecay().convertToDouble()),
              f64(o.getLarsCoeff().convertToDouble()),
              f64(o.getEpsilon().convertToDouble())});
        return success();
      })
      .Case([&](FusedGemmEpilogueOp o) -> LogicalResult {
        Value x = o.getInput(), w = o.getWeight();
        SmallVector<int64_t> ws = shapeOf(w);
        int64_t k = ws[0], n = ws[1], rows = numel(x) / k;
        int64_t act = activationCode(o.getActivation());
        if (o.getAux()) {
          // The pre-activation is an output: GEMM + bias into it, then the
          // activation.
          gemm(1, rows, n, k, ptr(x), 0, false, ptr(w), 0, false,
               ptr(o.getAux()), ptr(o.getBias()), STRATA_RT_ACT_NONE);
          if (act != STRATA_RT_ACT_NONE)
            return unary(act, o.getAux(), o.getResult());
          copy(ptr(o.getResult()), ptr(o.getAux()), o.getResult());
          return success();
        }
        gemm(1, rows, n, k, ptr(x), 0, false, ptr(w), 0, false,
             ptr(o.getResult()), ptr(o.getBias()), act);
        return success();
      })
      .Case([&](FusedGemmEpilogueGradOp o) -> LogicalResult {
        Value x = o.getInput(), w = o.getWeight(), dz = o.getResultGrad();
        SmallVector<int64_t> ws = shapeOf(w);
        int64_t k = ws[0], n = ws[1], rows = numel(x) / k;
        Value dzPtr = ptr(dz);
        if (o.getActivation() != Activation::None) {
          // The activation's gradient overwrites the pre-activation, which
          // this op reads last.
          Value aux = o.getAux();
          for (Operation *user : aux.getUsers())
            if (user != op && op->isBeforeInBlock(user))
              return op->emitOpError("needs the pre-activation after its "
                                     "gradient; the CPU runtime computes the "
                                     "activation gradient in its place");
          if (!pointers.count(aux) || isa<BlockArgument>(aux) ||
              isa_and_nonnull<GetParamOp, GetStateOp>(aux.getDefiningOp()))
            return op->emitOpError("needs an intermediate pre-activation");
          call("strata_rt_act_grad",
               {context, site(), i64(activationCode(o.getActivation())),
                ptr(aux), ty(aux), ptr(aux), ty(aux), ptr(dz), ty(dz),
                i64(numel(dz))});
          dzPtr = ptr(aux);
        }
        if (!o.getInputGrad().use_empty())
          gemm(1, rows, k, n, dzPtr, 0, false, ptr(w), 0, true,
               ptr(o.getInputGrad()), Value(), STRATA_RT_ACT_NONE);
        gemm(1, k, n, rows, ptr(x), 0, true, dzPtr, 0, false,
             ptr(o.getWeightGrad()), Value(), STRATA_RT_ACT_NONE);
        reduceTo(ptr(o.getBiasGrad()), dzPtr, {rows, n}, {0, 1}, 1.0);
        return success();
      })
      .Case([&](AllReduceOp o) {
        return collective(o, STRATA_RT_ALL_REDUCE, o.getInput(), o.getKind(),
                          0, o.getGroupAttr());
      })
      .Case([&](BroadcastOp o) {
        return collective(o, STRATA_RT_BROADCAST, o.getInput(),
                          ReduceKind::Sum, o.getRoot(), o.getGroupAttr());
      })
      .Case([&](ReduceScatterOp o) {
        return collective(o, STRATA_RT_REDUCE_SCATTER, o.getInput(),
                          o.getKind(), 0, o.getGroupAttr(), o.getDim());
      })
      .Case([&](AllGatherOp o) {
        return collective(o, STRATA_RT_ALL_GATHER, o.getInput(),
                          ReduceKind::Sum, 0, o.getGroupAttr(), o.getDim());
      })
      .Case([&](SendOp o) -> LogicalResult {
        auto type = dtype(op, o.getInput());
        if (failed(type))
          return failure();
        call("strata_rt_send",
             {context, site(), ptr(o.getInput()), i64(*type),
              i64(numel(o.getInput())), i64(o.getPeer()),
              constantArray(groupDescriptor(o, o.getGroupAttr()))});
        return success();
      })
      .Case([&](RecvOp o) -> LogicalResult {
        auto type = dtype(op, o.getResult());
        if (failed(type))
          return failure();
        call("strata_rt_recv",
             {context, site(), ptr(o.getResult()), i64(*type),
              i64(numel(o.getResult())), i64(o.getPeer()),
              constantArray(groupDescriptor(o, o.getGroupAttr()))});
        return success();
      })
      .Default([&](Operation *) {
        return op->emitOpError("cannot be lowered to the CPU runtime yet");
      });
}

/// Starts a collective where `op` stands; it completes right before the
/// first op that reads its result (collectiveWaitPoint), so that computation
/// overlaps it. Every collective is started the same way (a non-blocking
/// call, completed by strata_rt_wait) so that all ranks' calls match.
LogicalResult Lowering::collective(Operation *op, int64_t kind, Value input,
                                   ReduceKind reduce, int64_t root,
                                   FlatSymbolRefAttr group, int64_t dim) {
  Value result = op->getResult(0);
  auto type = dtype(op, result);
  if (failed(type))
    return failure();
  if (reduce != ReduceKind::Sum && reduce != ReduceKind::Mean)
    return op->emitOpError("only sum and mean reductions are supported by "
                           "the CPU runtime");
  // Rank r's slice must be one contiguous block: no dimension before `dim`
  // larger than 1.
  ArrayRef<int64_t> shape = tensorType(input).getShape();
  for (int64_t d = 0; d < dim; ++d)
    if (shape[d] != 1)
      return op->emitOpError("splits dimension ")
             << dim << " after a dimension of size " << shape[d]
             << "; the CPU runtime needs each rank's slice contiguous (split "
                "the leading dimension)";
  waitsBefore[collectiveWaitPoint(op)].push_back(currentSite);
  call("strata_rt_collective",
       {context, site(), i64(kind), ptr(result), ptr(input), i64(*type),
        i64(numel(result)), i64(reduce == ReduceKind::Mean ? 1 : 0), i64(root),
        constantArray(groupDescriptor(op, group))});
  return success();
}

LogicalResult Lowering::run() {
  MLIRContext *ctx = module.getContext();
  if (auto k = step->getAttrOfType<IntegerAttr>(
          StrataDialect::kMicroBatchesAttrName))
    microBatches = k.getInt();
  for (Operation &op : *module.getBody())
    if (auto symbol = dyn_cast<SymbolOpInterface>(op);
        symbol && isa<ParamOp, StateOp>(op)) {
      persistentIndex[symbol.getName()] = persistentNames.size();
      persistentNames.push_back(StringAttr::get(ctx, symbol.getName()));
    }

  Block &body = step.getBody().front();
  b.setInsertionPoint(step);
  auto fnType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(ctx),
      {ptrType, ptrType, ptrType, ptrType, ptrType});
  auto fn = LLVM::LLVMFuncOp::create(b, step.getLoc(), "strata_step", fnType);
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  loc = step.getLoc();
  context = entry->getArgument(0);
  arena = entry->getArgument(1);
  persistent = entry->getArgument(2);
  inputs = entry->getArgument(3);
  outputs = entry->getArgument(4);
  // The runtime checks the ABI version the step was lowered for; a step it
  // refuses returns at once (the host reads why from the error state).
  {
    Value refused = call("strata_rt_step_begin",
                         {context, i64(STRATA_RT_ABI_VERSION)}, i64Type);
    Value ok = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, refused,
                                    i64(0));
    Block *run = fn.addBlock(), *exit = fn.addBlock();
    LLVM::CondBrOp::create(b, loc, ok, run, exit);
    b.setInsertionPointToStart(exit);
    LLVM::ReturnOp::create(b, loc, ValueRange());
    b.setInsertionPointToStart(run);
  }

  for (Value v : body.getTerminator()->getOperands())
    if (!isa<RankedTensorType>(v.getType()))
      return mlir::emitError(step.getLoc(), "returns a ")
             << v.getType()
             << " value; a step lowered to the runtime returns tensors";
  for (BlockArgument arg : body.getArguments())
    pointers[arg] = loadPointer(inputs, arg.getArgNumber());
  for (const PlannedBuffer &buffer : plan.buffers)
    for (Value v : buffer.values)
      arenaOffsets[v] = buffer.offset;

  // Updates that may write straight into the resident buffer: the assigned
  // value's defining op reads the old value last.
  DenseMap<Value, StringRef> inPlace;
  DenseMap<Operation *, int64_t> order;
  int64_t index = 0;
  for (Operation &op : body)
    order[&op] = index++;
  // Per parameter or state: how often it is assigned, and the last op that
  // uses a read of it (one pass, not one per assign).
  llvm::StringMap<int64_t> assignCount, lastUseOfRead;
  for (Operation &op : body) {
    if (auto assign = dyn_cast<AssignOp>(op))
      ++assignCount[assign.getName()];
    if (!isa<GetParamOp, GetStateOp>(op))
      continue;
    int64_t &last = lastUseOfRead[op.getAttrOfType<FlatSymbolRefAttr>("name")
                                      .getValue()];
    for (Operation *user : op.getResult(0).getUsers())
      last = std::max(last, order[body.findAncestorOpInBlock(*user)]);
  }
  for (Operation &op : body) {
    auto assign = dyn_cast<AssignOp>(op);
    if (!assign || !isa_and_nonnull<SgdUpdateOp, MomentumUpdateOp,
                                    AdamUpdateOp, AdamWUpdateOp, LambUpdateOp,
                                    LarsUpdateOp>(
                       assign.getValue().getDefiningOp()))
      continue;
    Operation *def = assign.getValue().getDefiningOp();
    bool legal = assignCount[assign.getName()] == 1 &&
                 lastUseOfRead.lookup(assign.getName()) <= order[def];
    // The result itself must not be read after another update of the same
    // buffer: it is read only by its assign (and the return, at the end).
    for (Operation *user : assign.getValue().getUsers())
      if (!isa<AssignOp, func::ReturnOp>(user))
        legal = false;
    if (legal)
      inPlace[assign.getValue()] = assign.getName();
  }

  llvm::DenseSet<Operation *> deferred = deferredAssigns(body);
  for (Operation &op : body) {
    currentSite = sites.size();
    loc = op.getLoc();
    std::string where;
    llvm::raw_string_ostream os(where);
    if (auto file = dyn_cast<FileLineColLoc>(op.getLoc()))
      os << file.getFilename().getValue() << ":" << file.getLine() << ":"
         << file.getColumn() << ": ";
    os << op.getName().getStringRef();
    // The pipeline job (strata-pipeline): "[F3]"; weight-gradient jobs
    // (ZBH1's W) get a role of their own in traces.
    auto job = op.getAttrOfType<StringAttr>(StrataDialect::kJobAttrName);
    if (job)
      os << " [" << job.getValue() << "]";
    sites.push_back(StringAttr::get(ctx, where));
    std::optional<Role> role = getRole(&op);
    StringRef roleName = role ? stringifyRole(*role) : StringRef();
    if (job && job.getValue().starts_with("W"))
      roleName = "weight-grad";
    siteRoles.push_back(StringAttr::get(ctx, roleName));

    if (auto it = waitsBefore.find(&op); it != waitsBefore.end())
      for (int64_t started : it->second)
        call("strata_rt_wait", {context, i64(started)});
    if (auto get = dyn_cast<GetParamOp>(op)) {
      pointers[get] = loadPointer(persistent, persistentIndex[get.getName()]);
      continue;
    }
    if (auto get = dyn_cast<GetStateOp>(op)) {
      pointers[get] = loadPointer(persistent, persistentIndex[get.getName()]);
      continue;
    }
    for (Value result : op.getResults()) {
      if (tensorBytes(result.getType()) == 0)
        continue;
      auto target = inPlace.find(result);
      if (target != inPlace.end()) {
        pointers[result] =
            loadPointer(persistent, persistentIndex[target->second]);
        arenaOffsets.erase(result); // written to its resident buffer
        continue;
      }
      auto it = arenaOffsets.find(result);
      if (it == arenaOffsets.end())
        return op.emitOpError("has a result without a planned buffer");
      pointers[result] = arenaAt(it->second);
    }
    if (auto assign = dyn_cast<AssignOp>(op)) {
      // Where it stands, unless its target is read later in the step (the
      // memory plan keeps the value alive until the end then).
      if (!inPlace.count(assign.getValue()) && !deferred.contains(assign)) {
        Value target =
            loadPointer(persistent, persistentIndex[assign.getName()]);
        copy(target, ptr(assign.getValue()), assign.getValue());
      }
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      // State updates take effect when the step ends (strata.assign).
      for (Operation &other : body)
        if (auto assign = dyn_cast<AssignOp>(other)) {
          if (inPlace.count(assign.getValue()) || !deferred.contains(assign))
            continue;
          loc = assign.getLoc();
          Value target =
              loadPointer(persistent, persistentIndex[assign.getName()]);
          copy(target, ptr(assign.getValue()), assign.getValue());
        }
      loc = ret.getLoc();
      for (auto [i, v] : llvm::enumerate(ret.getOperands()))
        copy(loadPointer(outputs, i), ptr(v), v);
      call("strata_rt_step_end", {context});
      LLVM::ReturnOp::create(b, loc, ValueRange());
      break;
    }
    if (trace && !isa<InitTokenOp>(op))
      call("strata_rt_trace_begin", {context, site()});
    if (failed(lower(&op)))
      return failure();
    if (trace && !isa<InitTokenOp>(op))
      call("strata_rt_trace_end", {context, site()});
  }

  // The layout, also as data of the lowered module, for a framework that
  // links the object file: sizes in bytes, in the ABI's orders.
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto global = [&](StringRef name, ArrayRef<int64_t> values) {
      SmallVector<int64_t> data(values);
      if (data.empty())
        data.push_back(0);
      LLVM::GlobalOp::create(
          b, module.getLoc(), LLVM::LLVMArrayType::get(i64Type, data.size()),
          /*isConstant=*/true, LLVM::Linkage::External, name,
          DenseElementsAttr::get(
              RankedTensorType::get({int64_t(data.size())}, i64Type),
              ArrayRef<int64_t>(data)));
    };
    SmallVector<int64_t> persistentBytes, inputBytes, outputBytes;
    for (Attribute name : persistentNames) {
      Operation *symbol = module.lookupSymbol(cast<StringAttr>(name));
      Type type = isa<ParamOp>(symbol) ? cast<ParamOp>(symbol).getType()
                                       : cast<StateOp>(symbol).getType();
      persistentBytes.push_back(tensorBytes(type));
    }
    for (Type type : step.getArgumentTypes())
      inputBytes.push_back(tensorBytes(type));
    for (Type type : step.getResultTypes())
      outputBytes.push_back(tensorBytes(type));
    global("strata_step_abi_version", {STRATA_RT_ABI_VERSION});
    global("strata_step_layout",
           {plan.arenaBytes, int64_t(persistentBytes.size()),
            int64_t(inputBytes.size()), int64_t(outputBytes.size())});
    global("strata_step_persistent_bytes", persistentBytes);
    global("strata_step_input_bytes", inputBytes);
    global("strata_step_output_bytes", outputBytes);
  }

  // The host reads the layout from these attributes.
  module->setAttr("strata.rt.abi_version",
                  b.getI64IntegerAttr(STRATA_RT_ABI_VERSION));
  module->setAttr("strata.rt.persistent", ArrayAttr::get(ctx, persistentNames));
  module->setAttr("strata.rt.arena_bytes", b.getI64IntegerAttr(plan.arenaBytes));
  module->setAttr("strata.rt.sites", ArrayAttr::get(ctx, sites));
  module->setAttr("strata.rt.site_roles", ArrayAttr::get(ctx, siteRoles));
  if (auto shards =
          step->getAttrOfType<IntegerAttr>(StrataDialect::kShardsAttrName))
    module->setAttr("strata.rt.shards", shards);
  return success();
}

struct LowerToRuntimePass
    : public strata::impl::StrataLowerToRuntimeBase<LowerToRuntimePass> {
  using StrataLowerToRuntimeBase::StrataLowerToRuntimeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>(kStepFunctionName);
    if (!step) {
      mlir::emitError(module.getLoc(), "no @") << kStepFunctionName << " function to lower";
      return signalPassFailure();
    }
    if (!step.getBody().hasOneBlock()) {
      mlir::emitError(step.getLoc(), "the step must be a single block");
      return signalPassFailure();
    }
    for (Operation &op : *module.getBody())
      if (auto fn = dyn_cast<func::FuncOp>(op); fn && fn != step) {
        mlir::emitError(fn.getLoc(), "only @") << kStepFunctionName
                               << " can be lowered to the runtime";
        return signalPassFailure();
      }
    Lowering lowering(module, step, alignment, trace);
    if (failed(lowering.run()))
      return signalPassFailure();
    // What remains of the Strata program: declarations the host has read.
    for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
      if (isa<ParamOp, StateOp, CommGroupOp, func::FuncOp>(op))
        op.erase();
  }
};

} // namespace
