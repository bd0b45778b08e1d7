//===- RuntimeLowering.h - Lowering a step to runtime calls -----*- C++ -*-===//
//
// What the patterns of strata-lower-to-runtime share: the memory plan's
// buffer of every value, the call site of the op being lowered, and the
// building blocks of calls into the runtime C ABI (constants, descriptors,
// typed tensor arguments). Private to passes/.
//
// Each op family has its patterns in a file of its own (Lower*.cpp) and a
// populate function below; a pattern is an mlir::OpRewritePattern whose
// rewrite emits the op's runtime calls at the lowering's insertion point in
// the lowered step (the step's ops are erased when it is complete). Adding
// an op means adding its pattern to its family; what depends on the
// backend is asked of the RuntimeTarget.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_PASSES_LOWERING_RUNTIMELOWERING_H
#define STRATA_PASSES_LOWERING_RUNTIMELOWERING_H

#include "../PassUtils.h"
#include "strata/Analysis/MemoryPlan.h"
#include "strata/Dialect/Strata.h"
#include "strata/Runtime/StrataRuntime.h"
#include "strata/Target/RuntimeTarget.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"

#include <map>

namespace strata::lowering {

using mlir::Value;

class RuntimeLowering {
public:
  RuntimeLowering(mlir::ModuleOp module, mlir::func::FuncOp step,
                  const RuntimeTarget &target, int64_t alignment, bool trace);

  /// Lowers the step into `strata_step`; false after an error (emitted).
  mlir::LogicalResult run();

  // --- For the patterns ---------------------------------------------------
  const RuntimeTarget &target;
  mlir::PatternRewriter &builder() { return b; }
  mlir::MLIRContext *getContext() { return module.getContext(); }
  mlir::Location getLoc() const { return loc; }
  /// Points the builder back at the end of the lowered step.
  void resumeEmission() { b.setInsertionPointToEnd(emitBlock); }

  Value i64(int64_t v);
  Value f64(double v);
  Value null();
  /// The call site of the op being lowered.
  Value site() { return i64(currentSite); }
  /// One argument of a call: a scalar, or a tensor (`tensor(v)`), which the
  /// ABI takes as two: its buffer and its element type code.
  struct CallArg {
    CallArg(Value scalar) : buffer(scalar) {}
    CallArg(Value buffer, Value typeCode)
        : buffer(buffer), typeCode(typeCode) {}
    Value buffer, typeCode;
  };
  /// Calls `name`, declaring it (result `resultType` or void, argument
  /// types of `args`) first.
  Value call(llvm::StringRef name, llvm::ArrayRef<CallArg> args,
             mlir::Type resultType = {});
  /// The address of a constant global holding `values`.
  Value constantArray(llvm::ArrayRef<int64_t> values);
  Value byteOffset(Value base, int64_t offset);
  /// The address of a new constant global holding `data`.
  Value constantData(mlir::DenseElementsAttr data);

  /// The buffer of a tensor value, and whether it has one.
  Value ptr(Value v) const;
  bool hasBuffer(Value v) const { return pointers.count(v); }
  /// Whether `part` lives `bytes` into `whole`'s arena buffer (the memory
  /// plan put a packed or unpacked tensor in place).
  bool inArenaAt(Value part, Value whole, int64_t bytes) const;
  /// The runtime's element type code of a tensor value (the target checked
  /// every type before the op is lowered), and the code as a call argument.
  static int64_t typeCode(mlir::Type element);
  Value ty(Value v) { return i64(typeCode(tensorType(v).getElementType())); }
  /// A tensor argument of a call: its buffer, then its type code.
  CallArg tensor(Value v) {
    Value buffer = ptr(v);
    return CallArg(buffer, ty(v));
  }

  /// Copies a tensor of `like`'s type from `in` to `out`.
  void copy(Value out, Value in, Value like);
  void gemm(int64_t batch, int64_t m, int64_t n, int64_t k, Value a,
            int64_t aStride, bool transA, Value bm, int64_t bStride,
            bool transB, Value c, Value bias, int64_t act, mlir::Type element,
            bool accumulate = false);
  /// out = scale * sum of in over the dimensions whose output stride is 0;
  /// both of type `element`.
  void reduceTo(Value out, Value in, llvm::ArrayRef<int64_t> inShape,
                llvm::ArrayRef<int64_t> outStrides, double scale,
                mlir::Type element);
  void dropout(mlir::Operation *op, Value out, Value in, Value residual,
               double prob, int64_t key, int64_t n, mlir::Type element);
  /// Starts a collective where `op` stands; it is completed right before
  /// the first op that reads its result.
  mlir::LogicalResult collective(mlir::Operation *op, int64_t kind, Value input,
                                 ReduceKind reduce, int64_t root,
                                 mlir::FlatSymbolRefAttr group,
                                 int64_t dim = 0);
  /// A collective's group: the number of rank lists, then each list's
  /// length and ranks.
  llvm::SmallVector<int64_t> groupDescriptor(mlir::Operation *op,
                                             mlir::FlatSymbolRefAttr ref);

private:
  Value loadPointer(Value table, int64_t index);
  Value arenaAt(int64_t offset) { return byteOffset(arena, offset); }

  mlir::ModuleOp module;
  mlir::func::FuncOp step;
  bool trace;
  mlir::PatternRewriter b;
  mlir::Location loc;
  mlir::Type ptrType, i64Type, f64Type;
  MemoryPlan plan;
  Value context, arena, persistent, inputs, outputs;
  llvm::DenseMap<Value, Value> pointers;
  std::map<std::vector<int64_t>, std::string> descriptors;
  llvm::StringMap<int64_t> persistentIndex;
  llvm::SmallVector<mlir::Attribute> persistentNames;
  llvm::SmallVector<mlir::Attribute> sites, siteRoles;
  /// Non-blocking collectives (their sites) to complete before an op.
  llvm::DenseMap<mlir::Operation *, llvm::SmallVector<int64_t>> waitsBefore;
  /// The arena offset of each value stored in the arena (from the memory
  /// plan, less the results written straight to a resident buffer).
  llvm::DenseMap<Value, int64_t> arenaOffsets;
  int64_t currentSite = 0;
  /// The block of the lowered step that calls are appended to.
  mlir::Block *emitBlock = nullptr;

public:
  /// Micro-batches of the step (strata.micro_batches), for dropout's RNG.
  int64_t microBatches = 1;
};

/// A pattern that lowers one op: `lower` emits its calls through the
/// RuntimeLowering (and reports errors at the op).
template <typename OpTy>
class RuntimeCallPattern : public mlir::OpRewritePattern<OpTy> {
public:
  using LowerFn = mlir::LogicalResult (*)(OpTy, RuntimeLowering &);
  RuntimeCallPattern(RuntimeLowering &lowering, LowerFn lower)
      : mlir::OpRewritePattern<OpTy>(lowering.getContext()), lowering(lowering),
        lower(lower) {}
  mlir::LogicalResult matchAndRewrite(OpTy op,
                                      mlir::PatternRewriter &) const override {
    // The calls go to the end of the lowered step, not next to the op
    // (where the pattern applicator points the rewriter).
    lowering.resumeEmission();
    return lower(op, lowering);
  }

private:
  RuntimeLowering &lowering;
  LowerFn lower;
};

/// Adds the pattern lowering `OpTy` by `lower`.
template <typename OpTy>
void addLowering(mlir::RewritePatternSet &patterns, RuntimeLowering &lowering,
                 typename RuntimeCallPattern<OpTy>::LowerFn lower) {
  patterns.add<RuntimeCallPattern<OpTy>>(lowering, lower);
}

// The op families.
void populateGemmLoweringPatterns(mlir::RewritePatternSet &patterns,
                                  RuntimeLowering &lowering);
void populateElementwiseLoweringPatterns(mlir::RewritePatternSet &patterns,
                                         RuntimeLowering &lowering);
void populateDataMovementLoweringPatterns(mlir::RewritePatternSet &patterns,
                                          RuntimeLowering &lowering);
void populateDropoutLoweringPatterns(mlir::RewritePatternSet &patterns,
                                     RuntimeLowering &lowering);
void populateNormalizationLoweringPatterns(mlir::RewritePatternSet &patterns,
                                           RuntimeLowering &lowering);
void populateLossLoweringPatterns(mlir::RewritePatternSet &patterns,
                                  RuntimeLowering &lowering);
void populateEmbeddingLoweringPatterns(mlir::RewritePatternSet &patterns,
                                       RuntimeLowering &lowering);
void populateOptimizerLoweringPatterns(mlir::RewritePatternSet &patterns,
                                       RuntimeLowering &lowering);
void populateCollectiveLoweringPatterns(mlir::RewritePatternSet &patterns,
                                        RuntimeLowering &lowering);
void populatePointToPointLoweringPatterns(mlir::RewritePatternSet &patterns,
                                          RuntimeLowering &lowering);

/// Shape helpers of the patterns.
inline llvm::SmallVector<int64_t> shapeOf(Value v) {
  return llvm::SmallVector<int64_t>(tensorType(v).getShape());
}
inline int64_t numel(Value v) { return tensorType(v).getNumElements(); }
inline mlir::Type elementType(Value v) {
  return tensorType(v).getElementType();
}
llvm::SmallVector<int64_t> contiguousStrides(llvm::ArrayRef<int64_t> shape);
/// Strides of `from` (NumPy-broadcast to `to`) over the dimensions of `to`.
llvm::SmallVector<int64_t> broadcastStrides(llvm::ArrayRef<int64_t> from,
                                            llvm::ArrayRef<int64_t> to);
int64_t activationCode(Activation act);
int64_t geluCode(GeluApproximation a);

} // namespace strata::lowering

#endif // STRATA_PASSES_LOWERING_RUNTIMELOWERING_H
