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

/// Operands an op may overwrite with its result `index` (InPlaceOpInterface:
/// elementwise ops, reshapes, and row ops that read a row whole before
/// writing it) where the result has the operand's element type and number
/// of elements.
SmallVector<Value> inPlaceCandidates(Operation *op, unsigned index) {
  auto inPlace = dyn_cast<InPlaceOpInterface>(op);
  auto result = dyn_cast<RankedTensorType>(op->getResult(index).getType());
  if (!inPlace || !result || !result.hasStaticShape())
    return {};
  SmallVector<Value> candidates;
  for (unsigned i : inPlace.getInPlaceOperands(index)) {
    Value v = op->getOperand(i);
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (type && type.getElementType() == result.getElementType() &&
        type.hasStaticShape() &&
        type.getNumElements() == result.getNumElements())
      candidates.push_back(v);
  }
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

LogicalResult strata::checkStepBytes(func::FuncOp func, StringRef pass) {
  // (Each tensor takes at most 2^53 elements of 8 bytes: the sum stays far
  // from overflow while it is compared after every term.)
  int64_t total = 0;
  auto add = [&](Type type) {
    total += tensorBytes(type);
    return total <= kMaxStepBytes;
  };
  bool fits = true;
  if (auto module = func->getParentOfType<ModuleOp>())
    for (Operation &op : *module.getBody()) {
      if (auto p = dyn_cast<ParamOp>(op))
        fits = fits && add(p.getType());
      else if (auto s = dyn_cast<StateOp>(op))
        fits = fits && add(s.getType());
    }
  for (BlockArgument arg : func.getArguments())
    fits = fits && add(arg.getType());
  func.walk([&](Operation *op) {
    // (Reads of parameters and state are views of them.)
    if (isa<GetParamOp, GetStateOp>(op))
      return;
    for (Type type : op->getResultTypes())
      fits = fits && add(type);
  });
  if (fits)
    return success();
  return func.emitError() << pass
                          << ": the step's tensors take more than 2^62 "
                             "bytes (4.6e18: no machine holds them)";
}

int64_t strata::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  return tensor.getNumElements() *
         ((tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8);
}

namespace {

/// What every placement of a step starts from: its buffers, each on its
/// own (in-place chains merged, no bucket parts yet), and the bytes alive
/// at each op with every buffer on its own.
struct Lifetimes {
  MemoryPlan plan;
  DenseMap<Value, size_t> bufferOf;
  DenseMap<Value, int64_t> lastUse;
  DenseMap<Operation *, int64_t> index;
  std::vector<int64_t> live;
};

Lifetimes lifetimes(func::FuncOp func, int64_t alignment) {
  Lifetimes lt;
  MemoryPlan &plan = lt.plan;
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

  int64_t n = 0;
  for (Operation &op : body)
    lt.index[&op] = n++;
  // A deferred assignment reads its value when the step ends.
  int64_t end = n - 1;
  llvm::DenseSet<Operation *> deferred = deferredAssigns(body);
  auto lastUse = [&](Value v) {
    auto [it, inserted] = lt.lastUse.try_emplace(v, 0);
    if (!inserted)
      return it->second;
    Operation *def = v.getDefiningOp();
    int64_t last = lt.index[def];
    // Written by the runtime until the collective completes (where its
    // first user, a type-only one included, waits for it).
    if (isa<AllReduceOp, BroadcastOp, ReduceScatterOp, AllGatherOp>(def) &&
        v == def->getResult(0))
      last = std::max(last, lt.index[collectiveWaitPoint(def)]);
    for (OpOperand &use : v.getUses()) {
      if (readsOnlyType(use))
        continue;
      Operation *ancestor = body.findAncestorOpInBlock(*use.getOwner());
      last = std::max(last,
                      deferred.contains(ancestor) ? end : lt.index[ancestor]);
      // Read by the runtime until the collective completes.
      if (isa<ReduceScatterOp, AllGatherOp>(ancestor))
        last = std::max(last, lt.index[collectiveWaitPoint(ancestor)]);
    }
    return lt.lastUse[v] = last;
  };

  // Buffers, merging in-place results into their operand's buffer.
  for (Operation &op : body) {
    // Reads of parameters and state are views of persistent storage.
    if (isa<GetParamOp, GetStateOp>(op))
      continue;
    int64_t i = lt.index[&op];
    for (OpResult result : op.getResults()) {
      int64_t bytes = alignTo(tensorBytes(result.getType()), alignment);
      if (bytes == 0)
        continue;
      std::optional<size_t> reuse;
      for (Value operand : inPlaceCandidates(&op, result.getResultNumber())) {
        auto it = lt.bufferOf.find(operand);
        if (it != lt.bufferOf.end() && lastUse(operand) == i &&
            plan.buffers[it->second].end == i) {
          reuse = it->second;
          break;
        }
      }
      if (reuse) {
        PlannedBuffer &buffer = plan.buffers[*reuse];
        buffer.values.push_back(result);
        buffer.end = std::max(buffer.end, lastUse(result));
        lt.bufferOf[result] = *reuse;
        ++plan.inPlaceOps;
        continue;
      }
      lt.bufferOf[result] = plan.buffers.size();
      plan.buffers.push_back({{result}, bytes, i, lastUse(result), 0});
    }
  }

  std::vector<int64_t> delta(n + 1, 0);
  for (const PlannedBuffer &b : plan.buffers) {
    delta[b.start] += b.bytes;
    delta[b.end + 1] -= b.bytes;
  }
  lt.live.resize(n);
  int64_t live = 0;
  for (int64_t i = 0; i < n; ++i)
    lt.live[i] = live += delta[i];
  return lt;
}

/// The plan in which every tensor that may live in its communication
/// bucket does, except the first `copied[op]` of each strata.pack and
/// strata.unpack (copied into or out of the bucket): each bucket and its
/// parts are placed as one shape.
MemoryPlan place(func::FuncOp func, const Lifetimes &lt, int64_t alignment,
                 const DenseMap<Operation *, unsigned> &copied) {
  MemoryPlan plan = lt.plan;
  Block &body = func.getBody().front();
  int64_t n = lt.live.size();

  // The tensors that may live in a bucket: those that die at their
  // strata.pack (the producer writes into the packed buffer: no copy in),
  // and the results of a strata.unpack whose bucket dies there (no copy
  // out). A part stays a part: nothing is nested.
  // Buffer `part` becomes bytes [at, ...) of buffer `whole`. Each keeps its
  // own life: a packed tensor's bytes are taken from its definition, the
  // rest of the bucket only from the pack on.
  DenseMap<size_t, SmallVector<size_t>> partsOf;
  auto freeToJoin = [&](size_t i) {
    return !plan.buffers[i].parent && !partsOf.contains(i);
  };
  auto join = [&](size_t part, size_t whole, int64_t at) {
    plan.buffers[part].parent = whole;
    plan.buffers[part].inner = at;
    partsOf[whole].push_back(part);
    ++plan.packedInPlace;
  };
  for (Operation &op : body) {
    int64_t i = lt.index.lookup(&op);
    unsigned skip = copied.lookup(&op);
    if (auto pack = dyn_cast<PackOp>(op)) {
      auto whole = lt.bufferOf.find(pack.getResult());
      if (whole == lt.bufferOf.end() || plan.buffers[whole->second].parent)
        continue;
      llvm::DenseSet<size_t> seen;
      int64_t at = 0;
      for (auto [k, v] : llvm::enumerate(pack.getInputs())) {
        int64_t bytes = tensorBytes(v.getType());
        auto part = lt.bufferOf.find(v);
        if (k >= skip && part != lt.bufferOf.end() &&
            part->second != whole->second && seen.insert(part->second).second &&
            freeToJoin(part->second) && plan.buffers[part->second].end == i &&
            lt.lastUse.lookup(v) == i)
          join(part->second, whole->second, at);
        at += bytes;
      }
    } else if (auto unpack = dyn_cast<UnpackOp>(op)) {
      auto whole = lt.bufferOf.find(unpack.getInput());
      if (whole == lt.bufferOf.end() || !unpack.getInput().hasOneUse() ||
          plan.buffers[whole->second].parent ||
          plan.buffers[whole->second].end != i)
        continue;
      int64_t width = tensorBytes(unpack.getInput().getType()) /
                      std::max<int64_t>(1, cast<RankedTensorType>(
                                               unpack.getInput().getType())
                                               .getNumElements());
      int64_t at = unpack.getOffset() * width;
      for (auto [k, r] : llvm::enumerate(unpack.getResults())) {
        auto part = lt.bufferOf.find(r);
        if (k >= skip && part != lt.bufferOf.end() && freeToJoin(part->second))
          join(part->second, whole->second, at);
        at += tensorBytes(r.getType());
      }
    }
  }

  // Placement, greedy by size. A shape is a set of rectangles (bytes x op
  // indices) at fixed offsets from its own.
  struct Rect {
    int64_t inner, bytes, start, end;
  };
  // Placed rectangles: absolute bytes [begin, end) over op indices.
  struct Taken {
    int64_t begin, end, start, last;
  };
  std::vector<Taken> placed;
  // The rectangles that start in each stretch of kStretch ops, and those
  // alive at a stretch's first op that started before it: a query reads
  // the second list of its first stretch and the first list of each
  // stretch it spans, so it sees each rectangle it meets once, and
  // few others.
  constexpr int64_t kStretch = 32;
  std::vector<SmallVector<uint32_t>> starting(n / kStretch + 1),
      crossing(n / kStretch + 1);
  // The byte ranges taken during [start, end], sorted and merged.
  auto takenDuring = [&](int64_t start, int64_t end) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (uint32_t id : crossing[start / kStretch])
      if (placed[id].last >= start)
        taken.push_back({placed[id].begin, placed[id].end});
    for (int64_t k = start / kStretch; k <= end / kStretch; ++k)
      for (uint32_t id : starting[k]) {
        const Taken &t = placed[id];
        if (t.start <= end && start <= t.last)
          taken.push_back({t.begin, t.end});
      }
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
  // The lowest offset at which every rectangle of a shape lies in a gap:
  // 0, just past some taken range for one of the rectangles, or past all
  // of them (which always fits).
  auto lowestFit = [&](ArrayRef<Rect> rects) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> taken;
    for (const Rect &r : rects)
      taken.push_back(takenDuring(r.start, r.end));
    std::vector<int64_t> offsets = {0};
    int64_t beyond = 0;
    for (auto [r, ranges] : llvm::zip(rects, taken))
      for (auto [begin, end] : ranges) {
        beyond = std::max(beyond, end);
        if (end - r.inner >= 0)
          offsets.push_back(alignTo(end - r.inner, alignment));
      }
    offsets.push_back(alignTo(beyond, alignment));
    llvm::sort(offsets);
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
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
    return *llvm::find_if(offsets, fits);
  };
  auto take = [&](const Rect &r, int64_t offset) {
    starting[r.start / kStretch].push_back(placed.size());
    for (int64_t k = r.start / kStretch + 1; k <= r.end / kStretch; ++k)
      crossing[k].push_back(placed.size());
    placed.push_back(
        {offset + r.inner, offset + r.inner + r.bytes, r.start, r.end});
    plan.arenaBytes = std::max(plan.arenaBytes, offset + r.inner + r.bytes);
  };
  auto rectOf = [&](size_t i, int64_t inner = 0) {
    const PlannedBuffer &b = plan.buffers[i];
    return Rect{inner, b.bytes, b.start, b.end};
  };

  // A buffer is placed with its parts, as one shape, in size order.
  SmallVector<size_t> order;
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (!plan.buffers[i].parent)
      order.push_back(i);
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return plan.buffers[a].bytes > plan.buffers[b].bytes;
  });
  for (size_t i : order) {
    SmallVector<Rect> shape = {rectOf(i)};
    for (size_t part : partsOf.lookup(i))
      shape.push_back(rectOf(part, plan.buffers[part].inner));
    plan.buffers[i].offset = lowestFit(shape);
    for (const Rect &r : shape)
      take(r, plan.buffers[i].offset);
  }
  for (PlannedBuffer &buffer : plan.buffers)
    if (buffer.parent)
      buffer.offset = plan.buffers[*buffer.parent].offset + buffer.inner;

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
  return plan;
}

} // namespace

MemoryPlan strata::planMemory(func::FuncOp func, int64_t alignment) {
  // Packing in place saves the copies into and out of a bucket, and costs
  // no bytes by itself (a packed tensor occupies its part of the bucket
  // only from its definition on), but the parts are pinned at fixed
  // offsets from each other, which near the activation peak can leave the
  // greedy placement holes (a gradient bucket that starts filling during
  // the backward pass's peak). So a search copies the first tensors of
  // one bucket op at a time instead (a few evenly spaced numbers of them,
  // up to all), keeping what lowers the arena. The search is bounded: at
  // most kSearch placements, and at most kBudget placed buffers in all (a
  // placement costs about its buffers times those alive beside each), spent
  // on the bucket ops whose tensors live across the most bytes. A small
  // step searches every bucket op; a large one a number inversely
  // proportional to its size, which keeps planning near linear in it.
  constexpr unsigned kTries = 8, kSearch = 48, kBudget = 96 * 1024;
  Lifetimes lt = lifetimes(func, alignment);
  unsigned search = std::min<size_t>(
      kSearch, kBudget / std::max<size_t>(1, lt.plan.buffers.size()));
  DenseMap<Operation *, unsigned> copied;
  MemoryPlan best = place(func, lt, alignment, copied);
  if (best.packedInPlace == 0)
    return best;

  // The numbers of leading tensors to try copying out of `n`.
  auto splits = [&](unsigned n) {
    SmallVector<unsigned> skips;
    for (unsigned t = 1; t <= kTries; ++t) {
      unsigned skip = (n * t + kTries - 1) / kTries;
      if (skip && (skips.empty() || skip != skips.back()))
        skips.push_back(skip);
    }
    return skips;
  };
  // The bucket ops, each with its splits and the most bytes alive during
  // its tensors' lives outside the bucket.
  struct Site {
    Operation *op;
    SmallVector<unsigned> skips;
    int64_t heat;
  };
  SmallVector<Site> sites;
  for (Operation &op : func.getBody().front()) {
    int64_t i = lt.index.lookup(&op), from = i, to = i;
    unsigned tensors = 0;
    auto span = [&](Value v) {
      auto it = lt.bufferOf.find(v);
      if (it == lt.bufferOf.end())
        return;
      from = std::min(from, lt.plan.buffers[it->second].start);
      to = std::max(to, lt.plan.buffers[it->second].end);
    };
    if (auto pack = dyn_cast<PackOp>(op)) {
      tensors = pack.getInputs().size();
      llvm::for_each(pack.getInputs(), span);
    } else if (auto unpack = dyn_cast<UnpackOp>(op)) {
      tensors = unpack.getNumResults();
      llvm::for_each(unpack.getResults(), span);
    } else {
      continue;
    }
    sites.push_back(
        {&op, splits(tensors),
         *std::max_element(lt.live.begin() + from, lt.live.begin() + to + 1)});
  }
  unsigned work = 0;
  for (const Site &site : sites)
    work += site.skips.size();
  if (work > search) {
    // The hottest sites that fit the budget, searched in program order.
    SmallVector<Site> byHeat = sites;
    llvm::stable_sort(
        byHeat, [](const Site &a, const Site &b) { return a.heat > b.heat; });
    llvm::DenseSet<Operation *> kept;
    unsigned spent = 0;
    for (const Site &site : byHeat) {
      unsigned cost = site.skips.size();
      if (spent + cost > search)
        break;
      spent += cost;
      kept.insert(site.op);
    }
    llvm::erase_if(sites,
                   [&](const Site &site) { return !kept.contains(site.op); });
  }
  for (const Site &site : sites) {
    unsigned chosen = 0;
    for (unsigned skip : site.skips) {
      copied[site.op] = skip;
      MemoryPlan candidate = place(func, lt, alignment, copied);
      if (candidate.arenaBytes < best.arenaBytes) {
        best = std::move(candidate);
        chosen = skip;
      }
    }
    if (chosen)
      copied[site.op] = chosen;
    else
      copied.erase(site.op);
  }
  return best;
}
