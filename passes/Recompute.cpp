//===- Recompute.cpp - Recompute forward activations in backward ----------===//

#include "PassUtils.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace strata {
#define GEN_PASS_DEF_STRATARECOMPUTE
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;

namespace {

/// One refined_ops_patterns entry.
struct KeepPattern {
  SmallVector<std::string> main, pre, suf;
  int64_t num = -1;
};

/// "matmul" and "strata.matmul" both name strata.matmul.
bool named(Operation *op, ArrayRef<std::string> names) {
  StringRef full = op->getName().getStringRef();
  StringRef shortName = full.split('.').second;
  return llvm::any_of(names, [&](const std::string &n) {
    return n == full || n == shortName;
  });
}

FailureOr<KeepPattern> parsePattern(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, '|');
  if (parts.size() != 4)
    return failure();
  KeepPattern p;
  auto list = [](StringRef s, SmallVector<std::string> &out) {
    SmallVector<StringRef> items;
    s.split(items, '+', -1, /*KeepEmpty=*/false);
    for (StringRef i : items)
      out.push_back(i.str());
  };
  list(parts[0], p.main);
  list(parts[2], p.pre);
  list(parts[3], p.suf);
  if (p.main.empty() || parts[1].getAsInteger(10, p.num) || p.num < -1)
    return failure();
  return p;
}

bool isBackwardUse(Operation *user) {
  std::optional<Role> role = getRole(user);
  return role && *role != Role::Forward;
}

/// A backward read of `value` that a recomputed copy serves: one on the
/// value's own pipeline stage. A backward op of another stage keeps the
/// original (its stage received it in the forward pass); a copy would make
/// that stage's backward wait for this stage's, which waits for its
/// gradients: a cycle, under interleaved (virtual) stages.
bool recomputedRead(OpOperand &use) {
  Value value = use.get();
  Operation *user = use.getOwner();
  if (!isBackwardUse(user) || readsOnlyType(use))
    return false;
  std::optional<int64_t> from = getStage(value.getDefiningOp());
  std::optional<int64_t> to = getStage(user);
  return !from || !to || *from == *to;
}

struct RecomputePass : public strata::impl::StrataRecomputeBase<RecomputePass> {
  using StrataRecomputeBase::StrataRecomputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<KeepPattern> patterns;
    for (const std::string &text : refinedOpsPatterns) {
      auto p = parsePattern(text);
      if (failed(p)) {
        mlir::emitError(module.getLoc()) << "strata-recompute: refined-ops-patterns entry '"
                           << text
                           << "' is not main|num|pre|suf (ops joined by '+', "
                              "num >= -1, main not empty)";
        return signalPassFailure();
      }
      // Every op name names an op (a typo would keep nothing, in silence).
      for (const SmallVector<std::string> *names : {&p->main, &p->pre, &p->suf})
        for (const std::string &n : *names)
          if (!RegisteredOperationName::lookup(n, &getContext()) &&
              !RegisteredOperationName::lookup("strata." + n, &getContext())) {
            mlir::emitError(module.getLoc()) << "strata-recompute: refined_ops_patterns "
                                  "names '"
                               << n << "', which is not an op (e.g. matmul, "
                                       "softmax, dropout, gelu)";
            return signalPassFailure();
          }
      patterns.push_back(*p);
    }
    for (int64_t index : noRecomputeSegments)
      if (index < 0 || index >= int64_t(checkpoints.size())) {
        mlir::emitError(module.getLoc())
            << "strata-recompute: no_recompute_segments index " << index
            << " is out of range: there "
            << (checkpoints.size() == 1 ? "is " : "are ") << checkpoints.size()
            << (checkpoints.size() == 1 ? " checkpoint" : " checkpoints");
        return signalPassFailure();
      }
    if (checkpoints.empty()) {
      mlir::emitError(module.getLoc()) << "strata-recompute: no checkpoints given";
      return signalPassFailure();
    }
    // (Its clones would read one micro-batch's values in another's.)
    if (failed(checkRunsBefore(module, "strata-recompute",
                               {"strata-recompute", "strata-gradient-merge",
                                "strata-data-parallel", "strata-optimizer",
                                "strata-sharding", "strata-pipeline"})))
      return signalPassFailure();
    FailureOr<func::FuncOp> step =
        getDifferentiatedStep(module, "strata-recompute");
    if (failed(step))
      return signalPassFailure();
    SmallVector<int64_t> keptInAll(patterns.size(), 0);
    for (auto [index, name] : llvm::enumerate(checkpoints)) {
      bool skip = llvm::is_contained(noRecomputeSegments, int64_t(index));
      if (failed(recomputeSegment(*step, name, skip, patterns, keptInAll)))
        return signalPassFailure();
    }
    // A pattern that keeps nothing is a typo or a misunderstanding, which
    // would otherwise recompute what the user meant to keep, in silence.
    for (auto [text, kept] : llvm::zip(refinedOpsPatterns, keptInAll))
      if (kept == 0)
        mlir::emitWarning(step->getLoc())
            << "strata-recompute: refined_ops_patterns entry '" << text
            << "' keeps no op: no op of a recomputed segment matches it";
    recordPass(module, "strata-recompute");
  }

  /// Recomputes segment `layer` (unless `skip`); adds to `keptInAll` the
  /// ops each pattern kept.
  LogicalResult recomputeSegment(func::FuncOp func, StringRef layer, bool skip,
                                 ArrayRef<KeepPattern> patterns,
                                 MutableArrayRef<int64_t> keptInAll) {
    Block &body = func.getBody().front();
    SmallVector<Operation *> segment;
    for (Operation &op : body.without_terminator()) {
      StringRef opLayer = getLayer(&op);
      if (getRole(&op) == Role::Forward &&
          (opLayer == layer || opLayer.starts_with((layer + ".").str())))
        segment.push_back(&op);
    }
    if (segment.empty()) {
      // The layers there are ("h0" for "h0.attn" when "h0" is a layer too;
      // "h.0" and "h.1" of an imported ModuleList stay apart).
      llvm::SetVector<StringRef> all;
      for (Operation &op : body.without_terminator())
        if (StringRef l = getLayer(&op); !l.empty())
          all.insert(l);
      SmallVector<StringRef> layers;
      for (StringRef l : all)
        if (llvm::none_of(all, [&](StringRef outer) {
              return l.size() > outer.size() + 1 && l.starts_with(outer) &&
                     l[outer.size()] == '.';
            }))
          layers.push_back(l);
      std::string list = llvm::join(layers, ", ");
      return mlir::emitError(func.getLoc())
             << "strata-recompute: checkpoint '" << layer
             << "' names no layer (no forward op has strata.layer = \""
             << layer << "\"); the program's layers: "
             << (list.empty() ? std::string("none") : list);
    }
    if (skip)
      return success();

    // Ops kept by the refined patterns, and reads, which cost nothing to
    // keep, are not recomputed.
    llvm::SmallPtrSet<Operation *, 16> recomputable;
    SmallVector<int64_t> kept(patterns.size(), 0);
    for (Operation *op : segment) {
      if (!isPure(op) || isa<GetParamOp, GetStateOp, arith::ConstantOp>(op))
        continue;
      bool keep = false;
      for (auto [i, p] : llvm::enumerate(patterns)) {
        if (!named(op, p.main) || (p.num >= 0 && kept[i] >= p.num))
          continue;
        Operation *producer =
            op->getNumOperands() ? op->getOperand(0).getDefiningOp() : nullptr;
        if (!p.pre.empty() && !(producer && named(producer, p.pre)))
          continue;
        if (!p.suf.empty() &&
            llvm::none_of(op->getUsers(),
                          [&](Operation *u) { return named(u, p.suf); }))
          continue;
        ++kept[i];
        keep = true;
        break;
      }
      if (!keep)
        recomputable.insert(op);
    }
    for (auto [i, n] : llvm::enumerate(kept))
      keptInAll[i] += n;

    // Values the backward reads from the segment, and where it first does.
    llvm::SetVector<Value> needed;
    Operation *firstUse = nullptr;
    for (Operation *op : segment) {
      if (!recomputable.contains(op))
        continue;
      for (Value v : op->getResults())
        for (OpOperand &use : v.getUses())
          if (recomputedRead(use)) {
            needed.insert(v);
            if (!firstUse || use.getOwner()->isBeforeInBlock(firstUse))
              firstUse = use.getOwner();
          }
    }
    if (needed.empty())
      return success();

    // The recomputable ops those values depend on, in program order.
    llvm::SmallPtrSet<Operation *, 16> toClone;
    SmallVector<Operation *> worklist;
    for (Value v : needed)
      worklist.push_back(v.getDefiningOp());
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (!toClone.insert(op).second)
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (recomputable.contains(def))
            worklist.push_back(def);
    }

    OpBuilder b(firstUse);
    IRMapping map;
    for (Operation *op : segment)
      if (toClone.contains(op))
        b.clone(*op, map);
    for (Value v : needed) {
      Value clone = map.lookup(v);
      v.replaceUsesWithIf(clone,
                          [&](OpOperand &use) { return recomputedRead(use); });
    }
    return success();
  }
};

} // namespace
