//===- MemoryPlan.cpp - Static memory plan of a step ----------------------===//
//
// Lifetimes come from program order (the step is one block); buffers are
// placed greedily by decreasing size at the lowest offset that no buffer
// with an overlapping lifetime occupies ("greedy by size", as TFLite's
// arena planner), which is close to the liveness lower bound in practice.
// A communication bucket may hold the tensors packed into it or unpacked
// from it; it is placed with them as one shape, each part taking its bytes
// only while it lives.
//
//===----------------------------------------------------------------------===//

#include "strata/Analysis/MemoryPlan.h"
#include "strata/Dialect/Strata.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>

using namespace mlir;
using namespace strata;

namespace {

int64_t alignTo(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Operands an op may overwrite with its result: elementwise ops whose
/// result has the operand's type, element i read before it is written.
SmallVector<Value> inPlaceCandidates(Operation *op) {
  if (op->getNumResults() != 1)
    return {};
  Type result = op->getResult(0).getType();
  SmallVector<Value> candidates;
  auto add = [&](Value v) {
    if (v.getType() == result)
      candidates.push_back(v);
  };
  if (auto inPlace = dyn_cast<InPlaceOpInterface>(op))
    for (unsigned i : inPlace.getInPlaceOperands())
      add(op->getOperand(i));
  return candidates;
}

} // namespace

llvm::DenseSet<Operation *> strata::deferredAssigns(Block &block) {
  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : block)
    index[&op] = n++;
  // The last op of the block that reads each parameter or state's buffer.
  llvm::StringMap<int64_t> lastRead;
  block.walk([&](Operation *inner) {
    if (!isa<GetParamOp, GetStateOp>(inner))
      return;
    StringRef name =
        inner->getAttrOfType<FlatSymbolRefAttr>("name").getValue();
    int64_t last = index[block.findAncestorOpInBlock(*inner)];
    for (Operation *user : inner->getResult(0).getUsers())
      last = std::max(last, index[block.findAncestorOpInBlock(*user)]);
    int64_t &entry = lastRead.try_emplace(name, last).first->second;
    entry = std::max(entry, last);
  });
  llvm::DenseSet<Operation *> deferred;
  for (Operation &op : block)
    if (auto assign = dyn_cast<AssignOp>(op)) {
      auto it = lastRead.find(assign.getName());
      if (it != lastRead.end() && it->second > index[&op])
        deferred.insert(&op);
    }
  return deferred;
}

TrainingMemory strata::trainingMemory(ModuleOp module) {
  TrainingMemory m;
  for (Operation &op : *module.getBody()) {
    if (auto p = dyn_cast<ParamOp>(op))
      m.paramBytes += tensorBytes(p.getType());
    else if (auto s = dyn_cast<StateOp>(op))
      m.stateBytes += tensorBytes(s.getType());
  }
  // The gradients the rank's optimizer phase reads: the updates' (its own
  // parameters' when sharded), or clipping's inputs (every gradient unless
  // stage 2 shards the clipping too). Others die at their all-reduce.
  llvm::SetVector<Value> grads;
  module.walk([&](Operation *op) {
    if (auto update = dyn_cast<OptimizerUpdateOpInterface>(op))
      grads.insert(update.getGradient());
  });
  module.walk([&](ClipByGlobalNormOp clip) {
    for (Value r : clip.getResults())
      grads.remove(r);
    for (Value in : clip.getInputs())
      grads.insert(in);
  });
  for (Value g : grads)
    m.gradBytes += tensorBytes(g.getType());
  return m;
}

Operation *strata::collectiveWaitPoint(Operation *op) {
  Block *block = op->getBlock();
  Operation *first = nullptr;
  for (Operation *user : op->getResult(0).getUsers()) {
    Operation *at = block->findAncestorOpInBlock(*user);
    if (!first || at->isBeforeInBlock(first))
      first = at;
  }
  return first ? first : op->getNextNode();
}

int64_t strata::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return tensor.getNumElements() *
         ((tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

/// The plan, with the tensors of every strata.pack and strata.unpack in
/// place except the first `copied[op]` of each (copied into or out of the
/// bucket).
static MemoryPlan planOnce(func::FuncOp func, int64_t alignment,
                           const DenseMap<Operation *, unsigned> &copied) {
  MemoryPlan plan;
  Block &body = func.getBody().front();
  if (auto module = func->getParentOfType<ModuleOp>())
    for (Operation &op : *module.getBody()) {
      if (auto p = dyn_cast<ParamOp>(op))
        plan.persistentBytes += tensorBytes(p.getType());
      else if (auto s = dyn_cast<StateOp>(op))
        plan.persistentBytes += tensorBytes(s.getType());
    }
  for (BlockArgument arg : body.getArguments())
    plan.inputBytes += tensorBytes(arg.getType());

  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;
  // A deferred assignment reads its value when the step ends.
  int64_t end = n - 1;
  llvm::DenseSet<Operation *> deferred = deferredAssigns(body);
  auto lastUse = [&](Value v) {
    int64_t last = index[v.getDefiningOp()];
    for (Operation *user : v.getUsers()) {
      Operation *ancestor = body.findAncestorOpInBlock(*user);
      last = std::max(last, deferred.contains(ancestor) ? end
                                                        : index[ancestor]);
      // Read by the runtime until the collective completes.
      if (isa<ReduceScatterOp, AllGatherOp>(ancestor))
        last = std::max(last, index[collectiveWaitPoint(ancestor)]);
    }
    return last;
  };

  // Buffers, merging in-place results into their operand's buffer.
  DenseMap<Value, size_t> bufferOf;
  for (Operation &op : body) {
    // Reads of parameters and state are views of persistent storage.
    if (isa<GetParamOp, GetStateOp>(op))
      continue;
    int64_t i = index[&op];
    for (Value result : op.getResults()) {
      int64_t bytes = alignTo(tensorBytes(result.getType()), alignment);
      if (bytes == 0)
        continue;
      std::optional<size_t> reuse;
      for (Value operand : inPlaceCandidates(&op)) {
        auto it = bufferOf.find(operand);
        if (it != bufferOf.end() && lastUse(operand) == i &&
            plan.buffers[it->second].end == i) {
          reuse = it->second;
          break;
        }
      }
      if (reuse) {
        PlannedBuffer &buffer = plan.buffers[*reuse];
        buffer.values.push_back(result);
        buffer.end = std::max(buffer.end, lastUse(result));
        bufferOf[result] = *reuse;
        ++plan.inPlaceOps;
        continue;
      }
      bufferOf[result] = plan.buffers.size();
      plan.buffers.push_back({{result}, bytes, i, lastUse(result), 0});
    }
  }

  // Buckets. A tensor that dies at its strata.pack is planned inside the
  // packed buffer (its producer writes it there: no copy in); the results
  // of a strata.unpack inside the bucket they come from, when the bucket
  // dies there (no copy out). A part stays a part: nothing is nested.
  llvm::DenseSet<size_t> parents;
  auto freeToJoin = [&](size_t i) {
    return !plan.buffers[i].parent && !parents.contains(i);
  };
  // Buffer `part` becomes bytes [at, ...) of buffer `whole`. Each keeps its
  // own life: a packed tensor's bytes are taken from its definition, the
  // rest of the bucket only from the pack on.
  DenseMap<size_t, SmallVector<size_t>> partsOf;
  auto join = [&](size_t part, size_t whole, int64_t at) {
    PlannedBuffer &b = plan.buffers[part];
    b.parent = whole;
    b.inner = at;
    parents.insert(whole);
    partsOf[whole].push_back(part);
    ++plan.packedInPlace;
  };
  for (Operation &op : body) {
    unsigned skip = copied.lookup(&op);
    int64_t i = index[&op];
    if (auto pack = dyn_cast<PackOp>(op)) {
      auto whole = bufferOf.find(pack.getResult());
      if (whole == bufferOf.end() || plan.buffers[whole->second].parent)
        continue;
      llvm::DenseSet<size_t> seen;
      int64_t at = 0;
      for (auto [k, v] : llvm::enumerate(pack.getInputs())) {
        int64_t bytes = tensorBytes(v.getType());
        auto part = bufferOf.find(v);
        if (k >= skip && part != bufferOf.end() &&
            part->second != whole->second &&
            seen.insert(part->second).second && freeToJoin(part->second) &&
            plan.buffers[part->second].end == i && lastUse(v) == i)
          join(part->second, whole->second, at);
        at += bytes;
      }
    } else if (auto unpack = dyn_cast<UnpackOp>(op)) {
      auto whole = bufferOf.find(unpack.getInput());
      if (whole == bufferOf.end() || !unpack.getInput().hasOneUse() ||
          plan.buffers[whole->second].parent ||
          plan.buffers[whole->second].end != i)
        continue;
      int64_t width = tensorBytes(unpack.getInput().getType()) /
                      std::max<int64_t>(1, cast<RankedTensorType>(
                                               unpack.getInput().getType())
                                               .getNumElements());
      int64_t at = unpack.getOffset() * width;
      for (auto [k, r] : llvm::enumerate(unpack.getResults())) {
        auto part = bufferOf.find(r);
        if (k >= skip && part != bufferOf.end() && freeToJoin(part->second))
          join(part->second, whole->second, at);
        at += tensorBytes(r.getType());
      }
    }
  }

  // The most bytes alive at one op: the bound no placement can beat. A
  // part counts where it lives outside its bucket's own life.
  std::vector<int64_t> delta(n + 1, 0);
  auto alive = [&](int64_t start, int64_t end, int64_t bytes) {
    if (start > end)
      return;
    delta[start] += bytes;
    delta[end + 1] -= bytes;
  };
  for (const PlannedBuffer &b : plan.buffers) {
    if (!b.parent) {
      alive(b.start, b.end, b.bytes);
      continue;
    }
    const PlannedBuffer &w = plan.buffers[*b.parent];
    alive(b.start, std::min(b.end, w.start - 1), b.bytes);
    alive(std::max(b.start, w.end + 1), b.end, b.bytes);
  }
  int64_t live = 0;
  for (int64_t d : delta)
    plan.livePeakBytes = std::max(plan.livePeakBytes, live += d);

  // Placement, greedy by size. A buffer is a set of rectangles (bytes x
  // op indices) at fixed offsets from its own: itself, and for a bucket
  // each of its parts over the part's life.
  struct Rect {
    int64_t inner, bytes, start, end;
  };
  auto shapeOf = [&](size_t i) {
    const PlannedBuffer &b = plan.buffers[i];
    SmallVector<Rect> rects = {{0, b.bytes, b.start, b.end}};
    for (size_t p : partsOf.lookup(i)) {
      const PlannedBuffer &part = plan.buffers[p];
      rects.push_back({part.inner, part.bytes, part.start, part.end});
    }
    return rects;
  };
  std::vector<size_t> order(plan.buffers.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plan.buffers[a].bytes > plan.buffers[b].bytes;
  });
  // Placed rectangles: absolute bytes [begin, end) over op indices.
  struct Taken {
    int64_t begin, end, start, last;
  };
  std::vector<Taken> placed;
  // The byte ranges taken during [start, end], sorted and merged.
  auto takenDuring = [&](int64_t start, int64_t end) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const Taken &t : placed)
      if (t.start <= end && start <= t.last)
        taken.push_back({t.begin, t.end});
    std::sort(taken.begin(), taken.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (auto range : taken) {
      if (!merged.empty() && range.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, range.second);
      else
        merged.push_back(range);
    }
    return merged;
  };
  for (size_t i : order) {
    PlannedBuffer &buffer = plan.buffers[i];
    if (buffer.parent)
      continue;
    SmallVector<Rect> rects = shapeOf(i);
    std::vector<std::vector<std::pair<int64_t, int64_t>>> taken;
    for (const Rect &r : rects)
      taken.push_back(takenDuring(r.start, r.end));
    // The lowest offset at which every rectangle lies in a gap: 0, just
    // past some taken range for one of the rectangles, or past all of
    // them (which always fits).
    std::vector<int64_t> candidates = {0};
    int64_t beyond = 0;
    for (auto [r, ranges] : llvm::zip(rects, taken))
      for (auto [begin, end] : ranges) {
        beyond = std::max(beyond, end);
        if (end - r.inner >= 0)
          candidates.push_back(alignTo(end - r.inner, alignment));
      }
    candidates.push_back(alignTo(beyond, alignment));
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()),
                     candidates.end());
    auto fits = [&](int64_t offset) {
      for (auto [r, ranges] : llvm::zip(rects, taken)) {
        int64_t begin = offset + r.inner, end = begin + r.bytes;
        // The first range that ends after `begin`.
        auto it = std::upper_bound(
            ranges.begin(), ranges.end(), begin,
            [](int64_t v, const std::pair<int64_t, int64_t> &range) {
              return v < range.second;
            });
        if (it != ranges.end() && it->first < end)
          return false;
      }
      return true;
    };
    int64_t offset = *llvm::find_if(candidates, fits);
    buffer.offset = offset;
    for (const Rect &r : rects) {
      placed.push_back({offset + r.inner, offset + r.inner + r.bytes, r.start,
                        r.end});
      plan.arenaBytes = std::max(plan.arenaBytes, offset + r.inner + r.bytes);
    }
  }
  for (PlannedBuffer &buffer : plan.buffers)
    if (buffer.parent)
      buffer.offset = plan.buffers[*buffer.parent].offset + buffer.inner;
  return plan;
}

MemoryPlan strata::planMemory(func::FuncOp func, int64_t alignment) {
  // Packing in place saves the copies into and out of a bucket, and costs
  // no bytes by itself (a packed tensor occupies its part of the bucket
  // only from its definition on), but the parts are pinned at fixed
  // offsets from each other, which can leave the greedy placement holes.
  // For each bucket op in program order, a few numbers of leading tensors
  // to copy instead are tried (evenly spaced ones, up to all), keeping what
  // lowers the arena.
  DenseMap<Operation *, unsigned> copied;
  MemoryPlan best = planOnce(func, alignment, copied);
  if (best.packedInPlace == 0)
    return best;
  constexpr unsigned kTries = 8;
  for (Operation &op : func.getBody().front()) {
    unsigned n = 0;
    if (auto pack = dyn_cast<PackOp>(op))
      n = pack.getInputs().size();
    else if (auto unpack = dyn_cast<UnpackOp>(op))
      n = unpack.getNumResults();
    else
      continue;
    unsigned chosen = 0;
    for (unsigned t = 1; t <= kTries; ++t) {
      unsigned skip = (n * t + kTries - 1) / kTries;
      if (skip == 0 || (t > 1 && skip == (n * (t - 1) + kTries - 1) / kTries))
        continue;
      copied[&op] = skip;
      MemoryPlan candidate = planOnce(func, alignment, copied);
      if (candidate.arenaBytes < best.arenaBytes) {
        best = std::move(candidate);
        chosen = skip;
      }
    }
    if (chosen)
      copied[&op] = chosen;
    else
      copied.erase(&op);
  }
  return best;
}
