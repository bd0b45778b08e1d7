//===- Fusion.cpp - GEMM epilogue, GELU, RMS norm, dropout-add, attention -===//

#include "PassUtils.h"
#include "strata/Dialect/Program.h"
#include "strata/Passes/Passes.h"
#include "strata/Target/RuntimeTarget.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace strata {
#define GEN_PASS_DEF_STRATAGEMMEPILOGUEFUSION
#define GEN_PASS_DEF_STRATADROPOUTADDFUSION
#define GEN_PASS_DEF_STRATAGELURECOGNITION
#define GEN_PASS_DEF_STRATARMSNORMRECOGNITION
#define GEN_PASS_DEF_STRATAATTENTIONFUSION
#define GEN_PASS_DEF_STRATAGEMMPADDING
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

Activation activationKind(Operation *op) {
  if (isa<ReluOp>(op))
    return Activation::Relu;
  return cast<GeluOp>(op).getApproximate() == GeluApproximation::Tanh
             ? Activation::GeluTanh
             : Activation::GeluErf;
}

struct GemmEpilogueFusionPass
    : public strata::impl::StrataGemmEpilogueFusionBase<
          GemmEpilogueFusionPass> {
  using StrataGemmEpilogueFusionBase::StrataGemmEpilogueFusionBase;

  void runOnOperation() override {
    runtime = RuntimeTarget::lookup(target);
    if (!runtime) {
      mlir::emitError(getOperation().getLoc())
          << "strata-gemm-epilogue-fusion: unknown target '" << target << "' ("
          << RuntimeTarget::knownNames() << ")";
      return signalPassFailure();
    }
    // Collected first: fusing erases the ops around each bias_add.
    SmallVector<BiasAddOp> biases;
    getOperation().walk([&](BiasAddOp bias) { biases.push_back(bias); });
    SmallVector<FusedGemmEpilogueOp> fused;
    for (BiasAddOp bias : biases)
      if (auto f = fuseForward(bias))
        fused.push_back(f);
    for (FusedGemmEpilogueOp f : fused)
      fuseBackward(f);
  }

  /// The target whose epilogue rules apply (the `target` option).
  const RuntimeTarget *runtime = nullptr;

  FusedGemmEpilogueOp fuseForward(BiasAddOp bias) {
    auto mm = bias.getInput().getDefiningOp<MatmulOp>();
    if (!mm || mm.getTransposeLhs())
      return nullptr;
    bool transposed = mm.getTransposeRhs();
    auto x = mm.getLhs().getType(), w = mm.getRhs().getType();
    if (w.getRank() != 2 || x.getRank() < 2 ||
        x.getElementType().isF64() || !mm.getResult().hasOneUse())
      return nullptr;

    // The activation joins when it is the only one on the bias_add result
    // and nothing but its gradient (gelu_grad reads the pre-activation,
    // which the fused op returns as aux) uses that result too.
    Value pre = bias.getResult();
    SmallVector<Operation *> activations;
    bool otherUses = false;
    for (Operation *user : pre.getUsers()) {
      if (isa<ReluOp, GeluOp>(user))
        activations.push_back(user);
      else if (!isa<GeluGradOp>(user))
        otherUses = true;
    }
    Operation *actOp =
        activations.size() == 1 && !otherUses ? activations[0] : nullptr;
    Activation act = actOp ? activationKind(actOp) : Activation::None;
    if (actOp &&
        !runtime->epilogueSupports(act, w.getDimSize(transposed ? 0 : 1))) {
      actOp = nullptr;
      act = Activation::None;
    }

    OpBuilder b(actOp ? actOp : bias.getOperation());
    auto f = FusedGemmEpilogueOp::create(
        b, mm.getLoc(), mm.getLhs(), mm.getRhs(), bias.getBias(), act,
        /*with_aux=*/actOp != nullptr, transposed);
    copyMetadata(mm, f);
    if (actOp) {
      actOp->getResult(0).replaceAllUsesWith(f.getResult());
      pre.replaceAllUsesWith(f.getAux());
      actOp->erase();
    } else {
      pre.replaceAllUsesWith(f.getResult());
    }
    bias.erase();
    mm.erase();
    return f;
  }

  /// Fuses the gradient ops of `f`: matmul_grad + bias_add_grad
  /// [+ activation grad].
  void fuseBackward(FusedGemmEpilogueOp f) {
    Value x = f.getInput(), w = f.getWeight();
    MatmulGradOp mg;
    for (Operation *user : w.getUsers())
      if (auto candidate = dyn_cast<MatmulGradOp>(user))
        if (candidate.getLhs() == x && candidate.getRhs() == w &&
            !candidate.getTransposeLhs() &&
            candidate.getTransposeRhs() == f.getTransposeWeight())
          mg = candidate;
    if (!mg)
      return;
    Value dz = mg.getResultGrad();
    BiasAddGradOp bg;
    for (Operation *user : dz.getUsers())
      if (auto candidate = dyn_cast<BiasAddGradOp>(user))
        bg = candidate;
    if (!bg)
      return;

    // Without an activation dz may have other readers (the gradient of a
    // residual stream, which the next layer's gradient reads too). With a
    // fused activation, dz must be its gradient of dy and read by nothing
    // else, or the activation's gradient would be computed twice.
    Value dy = dz;
    Operation *actGrad = nullptr;
    if (f.getActivation() != Activation::None) {
      if (!llvm::all_of(dz.getUsers(),
                        [&](Operation *u) { return u == mg || u == bg; }))
        return;
      actGrad = dz.getDefiningOp();
      if (auto relu = dyn_cast_or_null<ReluGradOp>(actGrad)) {
        if (f.getActivation() != Activation::Relu ||
            relu.getOutput() != f.getResult())
          return;
        dy = relu.getResultGrad();
      } else if (auto gelu = dyn_cast_or_null<GeluGradOp>(actGrad)) {
        bool tanh = gelu.getApproximate() == GeluApproximation::Tanh;
        if (gelu.getInput() != f.getAux() ||
            f.getActivation() !=
                (tanh ? Activation::GeluTanh : Activation::GeluErf))
          return;
        dy = gelu.getResultGrad();
      } else {
        return;
      }
    }

    Operation *first = mg->isBeforeInBlock(bg) ? mg.getOperation()
                                               : bg.getOperation();
    OpBuilder b(first);
    auto grad = FusedGemmEpilogueGradOp::create(b, mg.getLoc(), x, w, dy,
                                                f.getAux(), f.getActivation(),
                                                f.getTransposeWeight());
    copyMetadata(mg, grad);
    mg.getLhsGrad().replaceAllUsesWith(grad.getInputGrad());
    mg.getRhsGrad().replaceAllUsesWith(grad.getWeightGrad());
    bg.getResult().replaceAllUsesWith(grad.getBiasGrad());
    mg.erase();
    bg.erase();
    if (actGrad) // (its result dz was read by mg and bg alone)
      actGrad->erase();
  }
};

/// Pads the output columns of large GEMMs with a weight operand to the
/// target's multiple: matmul(x, pad(w)) then a slice of the real columns,
/// or, where only cross-entropy reads the product, the loss over the
/// padded rows with the real columns as its classes.
struct GemmPaddingPass
    : public strata::impl::StrataGemmPaddingBase<GemmPaddingPass> {
  using StrataGemmPaddingBase::StrataGemmPaddingBase;

  /// Products smaller than this (or summing fewer terms) are not worth the
  /// copies of the weight and the result.
  static constexpr int64_t kMinSummed = 256, kMinMacs = int64_t(1) << 24;

  void runOnOperation() override {
    const RuntimeTarget *runtime = RuntimeTarget::lookup(target);
    if (!runtime) {
      mlir::emitError(getOperation().getLoc())
          << "strata-gemm-padding: unknown target '" << target << "' ("
          << RuntimeTarget::knownNames() << ")";
      return signalPassFailure();
    }
    const int64_t multiple = runtime->getGemmColumnMultiple();
    if (multiple <= 1)
      return;
    SmallVector<MatmulOp> matmuls;
    getOperation().walk([&](MatmulOp m) { matmuls.push_back(m); });
    for (MatmulOp m : matmuls)
      pad(m, multiple);
  }

  /// Whether only cross-entropy ops without `classes` read `logits` (of
  /// `n` columns), directly or through reshapes that keep its last
  /// dimension; `readers` gets them, each reshape before its readers.
  static bool onlyLossReads(Value logits, int64_t n,
                            SmallVectorImpl<Operation *> &readers) {
    for (Operation *user : logits.getUsers()) {
      if (auto ce = dyn_cast<CrossEntropyOp>(user);
          ce && !ce.getClasses() && ce.getLogits() == logits) {
        readers.push_back(ce);
        continue;
      }
      auto reshape = dyn_cast<ReshapeOp>(user);
      if (!reshape || reshape.getType().getRank() < 2 ||
          reshape.getType().getShape().back() != n)
        return false;
      readers.push_back(reshape);
      if (!onlyLossReads(reshape.getResult(), n, readers))
        return false;
    }
    return true;
  }

  void pad(MatmulOp m, int64_t multiple) {
    auto lhs = cast<RankedTensorType>(m.getLhs().getType());
    auto rhs = cast<RankedTensorType>(m.getRhs().getType());
    auto result = cast<RankedTensorType>(m.getResult().getType());
    if (m.getTransposeLhs() || rhs.getRank() != 2 || lhs.getRank() < 2 ||
        !lhs.hasStaticShape() || !rhs.hasStaticShape())
      return;
    const int64_t columnDim = m.getTransposeRhs() ? 0 : 1;
    const int64_t n = rhs.getDimSize(columnDim),
                  k = rhs.getDimSize(1 - columnDim);
    const int64_t rows = lhs.getNumElements() / lhs.getShape().back();
    if (n % multiple == 0 || k < kMinSummed || rows * n * k < kMinMacs)
      return;
    if (llvm::any_of(m->getUsers(),
                     [](Operation *user) { return isa<BiasAddOp>(user); }))
      return;
    const int64_t padded = llvm::alignTo(n, multiple);
    OpBuilder b(m);
    Location loc = m.getLoc();
    auto w =
        PadOp::create(b, loc, m.getRhs(), b.getI64IntegerAttr(columnDim),
                      b.getI64IntegerAttr(0), b.getI64IntegerAttr(padded - n));
    copyMetadata(m, w);
    Operation *product = b.clone(*m);
    product->setOperand(1, w);
    SmallVector<int64_t> shape(result.getShape());
    shape.back() = padded;
    product->getResult(0).setType(result.clone(shape));
    // An LM head whose logits only cross-entropy reads, directly or through
    // reshapes that keep rows whole (an imported model's logits.view(-1,
    // V)): the loss reads the padded rows, its classes the real columns
    // (no slice, and no pad of the slice's gradient).
    SmallVector<Operation *> readers;
    if (onlyLossReads(m.getResult(), n, readers)) {
      m.getResult().replaceAllUsesWith(product->getResult(0));
      for (Operation *reader : readers) {
        if (auto ce = dyn_cast<CrossEntropyOp>(reader)) {
          ce.setClasses(n);
          continue;
        }
        auto reshape = cast<ReshapeOp>(reader);
        SmallVector<int64_t> rows(reshape.getType().getShape());
        rows.back() = padded;
        reshape.getResult().setType(reshape.getType().clone(rows));
      }
      m.erase();
      return;
    }
    auto columns =
        SliceOp::create(b, loc, product->getResult(0),
                        b.getI64IntegerAttr(result.getRank() - 1),
                        b.getI64IntegerAttr(0), b.getI64IntegerAttr(n));
    copyMetadata(m, columns);
    m.getResult().replaceAllUsesWith(columns.getResult());
    m.erase();
  }
};

/// Whether a constant of a program is `want` (within 1e-6 relative, which
/// takes an f32 rounding of it).
bool near(double value, double want) {
  return std::abs(value - want) <= 1e-6 * std::abs(want);
}

/// Whether `v` is a constant whose elements all are `want` (near).
bool isConstant(Value v, double want) {
  auto constant = v.getDefiningOp<arith::ConstantOp>();
  auto data = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                       : DenseElementsAttr();
  std::optional<double> value = data ? splatValue(data) : std::nullopt;
  return value && near(*value, want);
}

/// Replaces `root`, the last op of a formula written out, with `fused` (one
/// op of the same result), and erases the formula's other ops (`chain`,
/// each read only inside it; noted in `erased`, since the caller's list of
/// candidate roots may hold them) and the `constants` it read that nothing
/// else reads.
void replaceWrittenOut(Operation *root, Operation *fused,
                       ArrayRef<Operation *> chain,
                       ArrayRef<Operation *> constants,
                       llvm::SmallPtrSetImpl<Operation *> &erased) {
  copyMetadata(root, fused);
  root->getResult(0).replaceAllUsesWith(fused->getResult(0));
  root->erase();
  for (Operation *op : chain)
    op->dropAllReferences();
  for (Operation *op : chain) {
    erased.insert(op);
    op->erase();
  }
  for (Operation *constant : llvm::SmallPtrSet<Operation *, 4>(
           constants.begin(), constants.end()))
    if (constant->use_empty())
      constant->erase();
}

/// GELU written out in its tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x +
/// 0.044715 x^3))), as Hugging Face's GPT-2 has it (the pass description
/// lists the forms matched). `chain` collects the ops before the root, each
/// read only by a later one.
struct WrittenOutGelu {
  SmallVector<Operation *> chain;
  /// The constants it reads (erased with it when nothing else does).
  SmallVector<Operation *> constants;

  bool isConstantOf(Value v, double want) {
    if (!isConstant(v, want))
      return false;
    constants.push_back(v.getDefiningOp());
    return true;
  }

  /// `v` = factor * rest (a scale, or a mul by a constant, either side),
  /// `v` read once: rest, else null.
  Value timesConstant(Value v, double factor) {
    Operation *op = v.getDefiningOp();
    if (!op || !v.hasOneUse())
      return {};
    if (auto scale = dyn_cast<ScaleOp>(op)) {
      if (!near(scale.getFactor().convertToDouble(), factor))
        return {};
      chain.push_back(op);
      return scale.getInput();
    }
    if (auto mul = dyn_cast<MulOp>(op))
      for (int i = 0; i < 2; ++i)
        if (isConstantOf(mul->getOperand(i), factor)) {
          chain.push_back(op);
          return mul->getOperand(1 - i);
        }
    return {};
  }

  /// `v` = x * x * x (either grouping), read once, for the given x.
  bool isCube(Value v, Value x) {
    auto mul = v.getDefiningOp<MulOp>();
    if (!mul || !v.hasOneUse())
      return false;
    for (int i = 0; i < 2; ++i) {
      auto square = mul->getOperand(i).getDefiningOp<MulOp>();
      if (mul->getOperand(1 - i) == x && square &&
          square->getResult(0).hasOneUse() && square.getLhs() == x &&
          square.getRhs() == x) {
        chain.append({mul, square});
        return true;
      }
    }
    return false;
  }

  /// `s` = 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)), read once: x, else
  /// null.
  Value onePlusTanh(Value s) {
    auto add = s.getDefiningOp<AddOp>();
    if (!add || !s.hasOneUse())
      return {};
    for (int i = 0; i < 2; ++i) {
      auto tanh = add->getOperand(i).getDefiningOp<TanhOp>();
      if (!tanh || !isConstantOf(add->getOperand(1 - i), 1.0) ||
          !tanh->hasOneUse() || add.getType() != tanh.getType())
        continue;
      Value inner = timesConstant(tanh.getInput(), 0.7978845608028654);
      auto sum = inner ? inner.getDefiningOp<AddOp>() : AddOp();
      if (!sum || !inner.hasOneUse())
        return {};
      for (int j = 0; j < 2; ++j) {
        size_t mark = chain.size();
        Value x = sum->getOperand(j);
        Value cube = timesConstant(sum->getOperand(1 - j), 0.044715);
        if (cube && isCube(cube, x)) {
          chain.append({add, tanh, sum});
          return x;
        }
        chain.resize(mark);
      }
      return {};
    }
    return {};
  }

  /// The GELU's input if `root` ends a written-out GELU of it.
  Value match(Operation *root) {
    // The three factors x, 0.5 and s = 1 + tanh(...), grouped either way:
    // (x s) 0.5, or (0.5 x) s and x (0.5 s) in either operand order.
    auto xTimesS = [&](Value p, Value q) -> Value {
      for (auto [x, s] : {std::pair(p, q), std::pair(q, p)}) {
        size_t mark = chain.size();
        if (Value in = onePlusTanh(s); in && in == x)
          return x;
        chain.resize(mark);
      }
      return {};
    };
    // 0.5 on the product: the root a scale, or a mul by a constant.
    Value product;
    if (auto scale = dyn_cast<ScaleOp>(root)) {
      if (near(scale.getFactor().convertToDouble(), 0.5))
        product = scale.getInput();
    } else {
      for (int i = 0; i < 2; ++i)
        if (isConstantOf(root->getOperand(i), 0.5))
          product = root->getOperand(1 - i);
    }
    if (auto mul = product ? product.getDefiningOp<MulOp>() : MulOp();
        mul && mul->hasOneUse()) {
      chain.push_back(mul);
      if (Value x = xTimesS(mul.getLhs(), mul.getRhs()))
        return x;
      chain.clear();
    }
    if (isa<ScaleOp>(root))
      return {};
    for (int i = 0; i < 2; ++i) {
      size_t mark = chain.size();
      if (Value rest = timesConstant(root->getOperand(i), 0.5))
        if (Value x = xTimesS(rest, root->getOperand(1 - i)))
          return x;
      chain.resize(mark);
    }
    return {};
  }
};

struct GeluRecognitionPass
    : public strata::impl::StrataGeluRecognitionBase<GeluRecognitionPass> {
  void runOnOperation() override {
    // On the forward program: autodiff then differentiates the gelu op.
    if (failed(checkRunsBefore(getOperation(), "strata-gelu-recognition",
                               {"strata-autodiff"})))
      return signalPassFailure();
    SmallVector<Operation *> roots;
    getOperation().walk([&](Operation *op) {
      if (isa<MulOp, ScaleOp>(op))
        roots.push_back(op);
    });
    llvm::SmallPtrSet<Operation *, 16> erased;
    for (Operation *root : roots) {
      if (erased.contains(root))
        continue;
      WrittenOutGelu gelu;
      Value x = gelu.match(root);
      if (!x || root->getResult(0).getType() != x.getType() ||
          llvm::any_of(gelu.chain, [&](Operation *op) {
            return op->getResult(0).getType() != x.getType() ||
                   op->getBlock() != root->getBlock();
          }))
        continue;
      OpBuilder b(root);
      auto fused =
          GeluOp::create(b, root->getLoc(), x, GeluApproximation::Tanh);
      replaceWrittenOut(root, fused, gelu.chain, gelu.constants, erased);
    }
  }
};

/// RMS norm written out: w * (x * rsqrt(mean(x * x) + eps)), as the pass
/// description lists it. `chain` collects the ops before the root.
struct WrittenOutRmsNorm {
  SmallVector<Operation *> chain;
  Value x, gamma;
  double epsilon = 0.0;
  Operation *epsConstant = nullptr;

  /// Op of type OpTy defining `v`, which only the chain reads.
  template <typename OpTy> OpTy single(Value v) {
    auto op = v ? v.getDefiningOp<OpTy>() : OpTy();
    if (!op || !v.hasOneUse())
      return {};
    chain.push_back(op);
    return op;
  }

  /// Whether `r` = rsqrt(mean(x * x over the last dim) + eps) for this x.
  bool isInverseRms(Value r) {
    auto rsqrt = single<RsqrtOp>(r);
    auto add = rsqrt ? single<AddOp>(rsqrt.getInput()) : AddOp();
    if (!add)
      return false;
    for (int i = 0; i < 2; ++i) {
      auto constant = add->getOperand(1 - i).getDefiningOp<arith::ConstantOp>();
      auto data = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                           : DenseElementsAttr();
      std::optional<double> eps = data ? splatValue(data) : std::nullopt;
      auto mean = eps && *eps > 0.0
                      ? add->getOperand(i).getDefiningOp<ReduceMeanOp>()
                      : ReduceMeanOp();
      if (!mean || !mean->hasOneUse() || add.getType() != mean.getType())
        continue;
      int64_t rank = tensorType(mean.getInput()).getRank();
      auto square = mean.getInput().getDefiningOp<MulOp>();
      if (!mean.getKeepDims() || mean.getDims().size() != 1 ||
          mean.getDims()[0] != rank - 1 || !square || !square->hasOneUse() ||
          square.getLhs() != x || square.getRhs() != x)
        return false;
      chain.append({mean, square});
      epsilon = *eps;
      epsConstant = constant;
      return true;
    }
    return false;
  }

  /// Whether `root` (a mul) ends a written-out RMS norm; sets x, gamma and
  /// epsilon.
  bool match(MulOp root) {
    for (int i = 0; i < 2; ++i) {
      chain.clear();
      gamma = root->getOperand(i);
      auto normed = single<MulOp>(root->getOperand(1 - i));
      if (!normed || tensorType(gamma).getRank() != 1)
        continue;
      for (int j = 0; j < 2; ++j) {
        size_t mark = chain.size();
        x = normed->getOperand(j);
        if (isInverseRms(normed->getOperand(1 - j)))
          return true;
        chain.resize(mark);
      }
    }
    return false;
  }
};

struct RmsNormRecognitionPass
    : public strata::impl::StrataRmsNormRecognitionBase<
          RmsNormRecognitionPass> {
  void runOnOperation() override {
    // On the forward program: autodiff then differentiates the rms_norm
    // op, and mixed precision lists it.
    if (failed(checkRunsBefore(getOperation(), "strata-rms-norm-recognition",
                               {"strata-autodiff", "strata-amp"})))
      return signalPassFailure();
    SmallVector<MulOp> roots;
    getOperation().walk([&](MulOp op) { roots.push_back(op); });
    llvm::SmallPtrSet<Operation *, 16> erased;
    for (MulOp root : roots) {
      if (erased.contains(root))
        continue;
      WrittenOutRmsNorm norm;
      if (!norm.match(root))
        continue;
      RankedTensorType type = tensorType(norm.x);
      Type elem = type.getElementType();
      if (root.getType() != type ||
          tensorType(norm.gamma).getShape() !=
              ArrayRef<int64_t>(type.getShape().back()) ||
          tensorType(norm.gamma).getElementType() != elem ||
          llvm::any_of(norm.chain, [&](Operation *op) {
            return tensorType(op->getResult(0)).getElementType() != elem ||
                   op->getBlock() != root->getBlock();
          }))
        continue;
      OpBuilder b(root);
      auto fused = RmsNormOp::create(b, root.getLoc(), norm.x, norm.gamma,
                                     b.getF64FloatAttr(norm.epsilon));
      replaceWrittenOut(root, fused, norm.chain, {norm.epsConstant}, erased);
    }
  }
};

struct DropoutAddFusionPass
    : public strata::impl::StrataDropoutAddFusionBase<DropoutAddFusionPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp add) { adds.push_back(add); });
    for (AddOp add : adds) {
      for (unsigned i = 0; i < 2; ++i) {
        auto dropout = add->getOperand(i).getDefiningOp<DropoutOp>();
        Value residual = add->getOperand(1 - i);
        if (!dropout || !dropout->hasOneUse() ||
            residual.getType() != dropout.getType() ||
            add.getType() != dropout.getType())
          continue;
        OpBuilder b(add);
        auto fused = FusedDropoutAddOp::create(
            b, dropout.getLoc(), dropout.getInput(), residual,
            dropout.getProbAttr(), dropout.getKeyAttr());
        copyMetadata(dropout, fused);
        add.getResult().replaceAllUsesWith(fused.getResult());
        add.erase();
        dropout.erase();
        break;
      }
    }
  }
};

/// An operand of an attention in [..., H, S, D] computed from a value in
/// [..., S, H, D] by the transpose that swaps S and H (a projection's heads
/// split off), directly or through ops on each element or along a
/// dimension (LLaMA's rotary embedding: products and sums with constant
/// tables, the halves sliced, negated and joined) and the repeat of
/// grouped-query attention's keys and values for the query heads sharing them:
/// the same value in
/// [..., S, H, D], those ops written again in that layout (and the
/// constants' S and H swapped), so that the fused op reads it without a
/// transpose.
class HeadsSplit {
public:
  explicit HeadsSplit(int64_t rank)
      : swap(llvm::to_vector(llvm::seq<int64_t>(0, rank))) {
    if (rank >= 3)
      std::swap(swap[rank - 3], swap[rank - 2]);
  }

  /// The permutation that swaps S and H (its own inverse).
  ArrayRef<int64_t> permutation() const { return swap; }

  /// Whether `x` can be read in [..., S, H, D] (nothing is built).
  bool reads(Value x, int depth = 0) {
    if (swap.size() < 3 || depth > kMaxDepth)
      return false;
    if (auto c = x.getDefiningOp<arith::ConstantOp>())
      return isa<DenseElementsAttr>(c.getValue()) && constantType(x);
    if (tensorType(x).getRank() != int64_t(swap.size()))
      return false;
    if (auto t = x.getDefiningOp<TransposeOp>())
      return t.getPermutation() == permutation();
    if (Repeat repeat = repeatOf(x))
      return reads(repeat.heads(), depth + 1);
    Operation *op = x.getDefiningOp();
    if (!isa_and_present<AddOp, SubOp, MulOp, DivOp, ScaleOp, SliceOp,
                         ConcatOp>(op))
      return false;
    return llvm::all_of(op->getOperands(),
                        [&](Value in) { return reads(in, depth + 1); });
  }

  /// `x` in [..., S, H, D], after reads(x).
  Value build(Value x) {
    if (Value done = built.lookup(x))
      return done;
    Operation *op = x.getDefiningOp();
    OpBuilder b(op);
    Value result;
    if (auto t = dyn_cast<TransposeOp>(op)) {
      result = t.getInput();
    } else if (Repeat repeat = repeatOf(x)) {
      // [..., S, Hkv, D] -> [..., S, Hkv, 1, D] -> [..., S, Hkv, R, D] ->
      // [..., S, Hkv R, D]: query head h reads key head h / R, as before.
      Value in = build(repeat.heads());
      auto reshape = [&](Value v, ArrayRef<int64_t> shape, Operation *like) {
        auto type =
            RankedTensorType::get(shape, tensorType(v).getElementType());
        auto copy = ReshapeOp::create(b, like->getLoc(), type, v);
        copyMetadata(like, copy);
        return copy.getResult();
      };
      SmallVector<int64_t> shape(tensorType(in).getShape());
      int64_t r = shape.size();
      shape.insert(shape.begin() + r - 1, 1);
      Value unitHeads = reshape(in, shape, repeat.unit);
      shape[r - 1] = repeat.times();
      auto copies = BroadcastToOp::create(
          b, repeat.spread.getLoc(),
          RankedTensorType::get(shape, tensorType(in).getElementType()),
          unitHeads);
      copyMetadata(repeat.spread, copies);
      result = reshape(copies, permuted(tensorType(x).getShape()), op);
      visited.append({repeat.unit, repeat.spread});
    } else if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      // S or H is 1 here (constantType): the elements keep their order.
      auto attr = cast<DenseElementsAttr>(c.getValue());
      auto copy = arith::ConstantOp::create(b, c.getLoc(),
                                            attr.reshape(constantType(x)));
      copyMetadata(c, copy);
      result = copy;
    } else {
      IRMapping map;
      for (Value in : op->getOperands())
        map.map(in, build(in));
      Operation *clone = b.clone(*op, map);
      RankedTensorType type = tensorType(x);
      clone->getResult(0).setType(RankedTensorType::get(
          permuted(type.getShape()), type.getElementType()));
      if (auto dim = clone->getAttrOfType<IntegerAttr>("dim"))
        clone->setAttr("dim", b.getI64IntegerAttr(swap[dim.getInt()]));
      result = clone->getResult(0);
    }
    visited.push_back(op);
    built[x] = result;
    return result;
  }

  /// Grouped-query attention's keys or values `x` (repeatOf) without the
  /// repeat, in [..., S, Hkv, D], after reads(x): the fused op shares each
  /// key and value head among its group of query heads itself.
  Value buildUnrepeated(Value x) {
    // (The keys may be the values: their repeat is listed once.)
    if (Value done = unrepeated.lookup(x))
      return done;
    Repeat repeat = repeatOf(x);
    Value result = build(repeat.heads());
    visited.append({repeat.unit, repeat.spread, repeat.merge});
    unrepeated[x] = result;
    return result;
  }

  /// Erases the ops of the old layout that nothing reads any more.
  void eraseDead() {
    for (Operation *op : llvm::reverse(visited))
      if (op->use_empty())
        op->erase();
    visited.clear();
  }

  /// The ops that make grouped-query attention's keys or values [..., Hkv
  /// R, S, D] from [..., Hkv, S, D] by repeating each head R times (Hugging
  /// Face's repeat_kv): a reshape to [..., Hkv, 1, S, D] (`unit`),
  /// broadcast_to [..., Hkv, R, S, D] (`spread`), a reshape back (`merge`).
  struct Repeat {
    ReshapeOp unit;
    BroadcastToOp spread;
    ReshapeOp merge;
    explicit operator bool() const { return bool(merge); }
    /// The heads repeated, [..., Hkv, S, D].
    Value heads() { return unit.getInput(); }
    /// R.
    int64_t times() {
      return tensorType(spread).getDimSize(tensorType(spread).getRank() - 3);
    }
  };

  /// The repeat that makes `x`, else an empty one.
  Repeat repeatOf(Value x) const {
    auto merge = x.getDefiningOp<ReshapeOp>();
    auto spread =
        merge ? merge.getInput().getDefiningOp<BroadcastToOp>() : nullptr;
    auto unit = spread ? spread.getInput().getDefiningOp<ReshapeOp>() : nullptr;
    if (!unit || !spread->hasOneUse() || !unit->hasOneUse())
      return {};
    Value kv = unit.getInput();
    int64_t r = swap.size();
    ArrayRef<int64_t> heads = tensorType(kv).getShape();
    if (int64_t(heads.size()) != r)
      return {};
    SmallVector<int64_t> shape(heads);
    shape.insert(shape.begin() + r - 2, 1);
    if (tensorType(unit).getShape() != ArrayRef(shape))
      return {};
    Repeat repeat{unit, spread, merge};
    shape[r - 2] = repeat.times();
    if (tensorType(spread).getShape() != ArrayRef(shape))
      return {};
    shape.erase(shape.begin() + r - 2);
    shape[r - 3] *= repeat.times();
    if (tensorType(x).getShape() != ArrayRef(shape))
      return {};
    return repeat;
  }

private:
  /// Rotary embeddings are a few ops deep.
  static constexpr int kMaxDepth = 16;

  SmallVector<int64_t> permuted(ArrayRef<int64_t> shape) const {
    return llvm::map_to_vector(swap, [&](int64_t d) { return shape[d]; });
  }

  /// The type of constant `x` (a table broadcast against [..., H, S, D])
  /// in [..., S, H, D], its rank made the attention's; null unless S or H
  /// is 1 there (a reshape then swaps them).
  RankedTensorType constantType(Value x) const {
    RankedTensorType type = tensorType(x);
    int64_t rank = swap.size();
    if (type.getRank() > rank)
      return {};
    SmallVector<int64_t> shape(rank - type.getRank(), 1);
    llvm::append_range(shape, type.getShape());
    if (shape[rank - 3] != 1 && shape[rank - 2] != 1)
      return {};
    return RankedTensorType::get(permuted(shape), type.getElementType());
  }

  SmallVector<int64_t> swap;
  DenseMap<Value, Value> built, unrepeated;
  /// The ops of the old layout, operands before their users.
  SmallVector<Operation *> visited;
};

struct AttentionFusionPass
    : public strata::impl::StrataAttentionFusionBase<AttentionFusionPass> {
  void runOnOperation() override {
    // On the forward program: autodiff then differentiates the fused op
    // (after it, the softmax has the backward's readers and never fuses).
    if (failed(checkRunsBefore(getOperation(), "strata-attention-fusion",
                               {"strata-autodiff"})))
      return signalPassFailure();
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp s) { softmaxes.push_back(s); });
    // A softmax left unfused is said once (the first, with the reason and
    // how many): the strategy asked for fused attention and the user
    // should know where the program does not have it.
    std::optional<std::pair<Location, std::string>> first;
    int64_t unfused = 0;
    for (SoftmaxOp softmax : softmaxes) {
      Location loc = softmax.getLoc();
      if (std::string why = fuse(softmax); !why.empty()) {
        if (!first)
          first.emplace(loc, std::move(why));
        ++unfused;
      }
    }
    if (first)
      emitWarning(first->first)
          << "strata-attention-fusion left " << unfused << " of "
          << softmaxes.size()
          << " softmax ops unfused; this one: " << first->second;
  }

  /// Fuses the attention around `softmax`; the reason it cannot otherwise.
  std::string fuse(SoftmaxOp softmax) {
    // The probabilities feed one product with the values, through a
    // dropout or not.
    Value probs = softmax.getResult();
    if (!probs.hasOneUse())
      return "the probabilities have other readers (or none)";
    auto dropout = dyn_cast<DropoutOp>(*probs.getUsers().begin());
    if (dropout) {
      probs = dropout.getResult();
      if (!probs.hasOneUse())
        return "the dropped probabilities have other readers (or none)";
      if (getMicroBatch(dropout) != getMicroBatch(softmax))
        return "the dropout is of another micro-batch than the softmax";
    }
    auto pv = dyn_cast<MatmulOp>(*probs.getUsers().begin());
    if (!pv || pv.getLhs() != probs || pv.getTransposeLhs() ||
        pv.getTransposeRhs())
      return "the probabilities are not the left operand of a strata.matmul "
             "with the values (a reshape or a transposed operand between)";
    // The (optionally scaled) scores come from q k^T.
    Value scores = softmax.getInput();
    double factor = 1.0;
    ScaleOp scale = scores.getDefiningOp<ScaleOp>();
    if (scale) {
      if (!scores.hasOneUse())
        return "the scaled scores have other readers";
      factor = scale.getFactor().convertToDouble();
      scores = scale.getInput();
    }
    auto qk = scores.getDefiningOp<MatmulOp>();
    if (!qk || !scores.hasOneUse() || qk.getTransposeLhs() ||
        !qk.getTransposeRhs())
      return "the scores are not one strata.matmul of q and k "
             "{transpose_rhs} read only here (a cast, a reshape or an "
             "explicit transpose of k between)";
    Value q = qk.getLhs(), k = qk.getRhs(), v = pv.getRhs();
    auto qt = cast<RankedTensorType>(q.getType());
    auto kt = cast<RankedTensorType>(k.getType());
    auto vt = cast<RankedTensorType>(v.getType());
    Type element = qt.getElementType();
    if (!(element.isF32() || element.isBF16() || element.isF16()))
      return "its element type is not f32, bf16 or f16";
    if (qt.getRank() < 2 || kt.getRank() != qt.getRank() ||
        vt.getRank() != qt.getRank())
      return "q, k and v do not have one rank";
    // Multi-query attention (Falcon's): one key and value head, which the
    // products broadcast over q's heads, [..., 1, T, D] against [..., H,
    // S, D]; the fused op reads it as one key head shared by every query
    // head.
    auto sharedHead = [&](RankedTensorType t) {
      int64_t r = qt.getRank();
      if (r < 3 || t.getDimSize(r - 3) != 1)
        return false;
      SmallVector<int64_t> shape(t.getShape().drop_back(2));
      shape[r - 3] = qt.getDimSize(r - 3);
      return ArrayRef<int64_t>(shape) == qt.getShape().drop_back(2);
    };
    bool multiQuery = qt.getShape().drop_back(2) != kt.getShape().drop_back(2);
    if (multiQuery ? !sharedHead(kt) || !sharedHead(vt)
                   : qt.getShape().drop_back(2) != vt.getShape().drop_back(2))
      return "q, k and v do not share their leading (batch, head) "
             "dimensions, nor are k and v one head that every head of q "
             "reads";

    // The fused op reads [..., S, H, D]. Heads split off by a transpose of
    // the sequence and head dimensions (a projection's output [..., S, H,
    // D] made [..., H, S, D]) are read where they are (HeadsSplit: a rotary
    // embedding between is computed in that layout), the transposes left
    // to die; otherwise the leading dimensions stay the batch and H is 1
    // (a reshape, no copy).
    HeadsSplit split(qt.getRank());
    ArrayRef<int64_t> swap = split.permutation();
    bool inPlace =
        split.reads(q) && (multiQuery || (split.reads(k) && split.reads(v)));
    // (Heads as batch dimensions would not match the shared head's.)
    if (multiQuery && !inPlace)
      return "k and v are one head that every head of q reads, but q's "
             "heads are not split off from the projection's layout";
    OpBuilder b(pv);
    Location loc = pv.getLoc();
    // `x` reshaped (no copy) to the shape `change` makes of its own.
    auto reshaped = [&](Value x,
                        function_ref<void(SmallVector<int64_t> &)> change) {
      auto type = cast<RankedTensorType>(x.getType());
      SmallVector<int64_t> shape(type.getShape());
      change(shape);
      auto reshape = ReshapeOp::create(b, loc, type.clone(shape), x);
      copyMetadata(pv, reshape);
      return reshape.getResult();
    };
    // [..., S, D] as [..., S, 1, D]: the leading dimensions the batch.
    auto withUnitHeads = [&](Value x) {
      return reshaped(
          x, [](SmallVector<int64_t> &shape) { shape.insert(shape.end() - 1, 1); });
    };
    Value fq = inPlace ? split.build(q) : withUnitHeads(q);
    // Keys and values repeated alike for grouped-query attention are read
    // with their own heads, not repeated.
    HeadsSplit::Repeat kvK = inPlace ? split.repeatOf(k) : HeadsSplit::Repeat();
    HeadsSplit::Repeat kvV = inPlace ? split.repeatOf(v) : HeadsSplit::Repeat();
    bool grouped = kvK && kvV && kvK.times() == kvV.times();
    // The shared head [..., 1, T, D] as [..., T, 1, D]: moving a unit
    // dimension is a reshape.
    auto sharedKeyHead = [&](Value x) {
      return reshaped(x, [](SmallVector<int64_t> &shape) {
        std::swap(shape[shape.size() - 3], shape[shape.size() - 2]);
      });
    };
    // Keys and values are read alike.
    auto keysOrValues = [&](Value x) -> Value {
      return multiQuery ? sharedKeyHead(x)
             : grouped  ? split.buildUnrepeated(x)
             : inPlace  ? split.build(x)
                        : withUnitHeads(x);
    };
    Value fk = keysOrValues(k), fv = keysOrValues(v);
    auto fused = AttentionOp::create(
        b, loc, fq, fk, fv, b.getF64FloatAttr(factor), softmax.getCausalAttr(),
        dropout ? dropout.getProbAttr() : b.getF64FloatAttr(0.0),
        dropout ? dropout.getKeyAttr() : b.getI64IntegerAttr(0));
    copyMetadata(pv, fused);
    // Back to the product's [..., H, S, Dv]: a transpose that turned it
    // into [..., S, H, Dv] reads the fused result instead; any other reader
    // gets it transposed back (or reshaped, for one head).
    Value result = fused.getResult();
    Value product = pv.getResult();
    SmallVector<TransposeOp> merged;
    if (inPlace)
      for (Operation *user : product.getUsers())
        if (auto t = dyn_cast<TransposeOp>(user);
            t && t.getPermutation() == swap)
          merged.push_back(t);
    for (TransposeOp t : merged) {
      t.getResult().replaceAllUsesWith(result);
      t.erase();
    }
    if (!product.use_empty()) {
      Operation *back =
          inPlace ? TransposeOp::create(b, loc, result,
                                        b.getDenseI64ArrayAttr(swap))
                        .getOperation()
                  : ReshapeOp::create(b, loc, product.getType(), result)
                        .getOperation();
      copyMetadata(pv, back);
      product.replaceAllUsesWith(back->getResult(0));
    }
    pv.erase();
    if (dropout)
      dropout.erase();
    softmax.erase();
    if (scale)
      scale.erase();
    qk.erase();
    split.eraseDead();
    return "";
  }
};

} // namespace
