//===- LowerToRuntime.cpp - Strata step -> calls of the runtime C ABI -----===//
//
// The step function becomes an LLVM-dialect function
//
//   void strata_step(ctx, arena, persistent, inputs, outputs)
//
// whose body is one or a few calls of include/strata/Runtime/StrataRuntime.h
// per op, emitted by the op family's patterns (lowering/Lower*.cpp) for a
// RuntimeTarget. This file is the driver: the memory plan (every
// intermediate value at its offset of one arena; parameters and state the
// host's resident buffers, reached through `persistent` in the order of the
// module attribute `strata.rt.persistent`), call sites, waits of started
// collectives, tracing, the ABI version check, state updates and the
// layout the host reads. An update whose parameter (or state) is read for
// the last time by the update itself writes its result straight into the
// resident buffer; any other `strata.assign` copies when the step ends.
//
//===----------------------------------------------------------------------===//

#include "lowering/RuntimeLowering.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"
#include "strata/Support/FileLocation.h"

#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Rewrite/PatternApplicator.h"
#include "strata/Dialect/Program.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

#include <optional>
#include <set>
#include <vector>

namespace strata {
#define GEN_PASS_DEF_STRATALOWERTORUNTIME
#include "StrataPasses.h.inc"
} // namespace strata

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

//===----------------------------------------------------------------------===//
// Shared helpers of the patterns
//===----------------------------------------------------------------------===//

SmallVector<int64_t>
strata::lowering::contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

SmallVector<int64_t> strata::lowering::broadcastStrides(ArrayRef<int64_t> from,
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

int64_t strata::lowering::activationCode(Activation act) {
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

int64_t strata::lowering::geluCode(GeluApproximation a) {
  return a == GeluApproximation::Tanh ? STRATA_RT_ACT_GELU_TANH
                                      : STRATA_RT_ACT_GELU_ERF;
}

//===----------------------------------------------------------------------===//
// RuntimeLowering: building blocks
//===----------------------------------------------------------------------===//

RuntimeLowering::RuntimeLowering(ModuleOp module, func::FuncOp step,
                                 const RuntimeTarget &target, int64_t alignment,
                                 bool trace)
    : target(target), module(module), step(step), trace(trace),
      b(module.getContext()), loc(UnknownLoc::get(module.getContext())),
      ptrType(LLVM::LLVMPointerType::get(module.getContext())),
      i64Type(IntegerType::get(module.getContext(), 64)),
      f64Type(Float64Type::get(module.getContext())),
      plan(planMemory(step, alignment)) {}

Value RuntimeLowering::i64(int64_t v) {
  return LLVM::ConstantOp::create(b, loc, i64Type, b.getI64IntegerAttr(v));
}

Value RuntimeLowering::f64(double v) {
  return LLVM::ConstantOp::create(b, loc, f64Type, b.getF64FloatAttr(v));
}

Value RuntimeLowering::null() { return LLVM::ZeroOp::create(b, loc, ptrType); }

Value RuntimeLowering::call(StringRef name, ArrayRef<CallArg> args,
                            Type resultType) {
  // Every function of the runtime ABI takes the context first.
  SmallVector<Value> all = {context};
  for (const CallArg &arg : args) {
    all.push_back(arg.buffer);
    if (arg.typeCode)
      all.push_back(arg.typeCode);
  }
  auto callee = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
  if (!callee) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    SmallVector<Type> types;
    for (Value a : all)
      types.push_back(a.getType());
    callee = LLVM::LLVMFuncOp::create(
        b, module.getLoc(), name,
        LLVM::LLVMFunctionType::get(
            resultType ? resultType : LLVM::LLVMVoidType::get(b.getContext()),
            types));
  }
  auto op = LLVM::CallOp::create(b, loc, callee, all);
  return resultType ? op.getResult() : Value();
}

Value RuntimeLowering::constantArray(ArrayRef<int64_t> values) {
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

Value RuntimeLowering::constantData(DenseElementsAttr data) {
  std::string name = "__strata_const" + std::to_string(currentSite);
  int64_t n = data.getNumElements();
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    auto flat = data.reshape(RankedTensorType::get({n}, data.getElementType()));
    LLVM::GlobalOp::create(
        b, module.getLoc(), LLVM::LLVMArrayType::get(data.getElementType(), n),
        /*isConstant=*/true, LLVM::Linkage::Internal, name, flat);
  }
  return LLVM::AddressOfOp::create(b, loc, ptrType, name);
}

Value RuntimeLowering::loadPointer(Value table, int64_t index) {
  Value slot = LLVM::GEPOp::create(b, loc, ptrType, ptrType, table,
                                   ArrayRef<LLVM::GEPArg>{int32_t(index)});
  return LLVM::LoadOp::create(b, loc, ptrType, slot);
}

Value RuntimeLowering::byteOffset(Value base, int64_t offset) {
  // A GEP's constant index holds 29 bits (LLVM::kGEPConstantBitWidth) and
  // silently wraps beyond: an offset past 256 MiB (any large model's arena
  // has them) is an i64 value.
  LLVM::GEPArg index =
      llvm::isInt<LLVM::kGEPConstantBitWidth>(offset)
          ? LLVM::GEPArg(int32_t(offset))
          : LLVM::GEPArg(LLVM::ConstantOp::create(b, loc, b.getI64Type(),
                                                  b.getI64IntegerAttr(offset))
                             .getResult());
  return LLVM::GEPOp::create(b, loc, ptrType, b.getI8Type(), base,
                             ArrayRef<LLVM::GEPArg>{index});
}

bool RuntimeLowering::inArenaAt(Value part, Value whole, int64_t bytes) const {
  auto p = arenaOffsets.find(part), w = arenaOffsets.find(whole);
  return p != arenaOffsets.end() && w != arenaOffsets.end() &&
         p->second == w->second + bytes;
}

Value RuntimeLowering::ptr(Value v) const {
  auto it = pointers.find(v);
  assert(it != pointers.end() && "value without a buffer");
  return it->second;
}

int64_t RuntimeLowering::typeCode(Type element) {
  int64_t code = runtimeElementType(element);
  assert(code >= 0 && "a type the target did not accept");
  return code;
}

void RuntimeLowering::copy(Value out, Value in, Value like) {
  call("strata_rt_copy", {site(), out, in, ty(like), i64(numel(like))});
}

void RuntimeLowering::gemm(int64_t batch, int64_t m, int64_t n, int64_t k,
                           Value a, int64_t aStride, bool transA, Value bm,
                           int64_t bStride, bool transB, Value c, Value bias,
                           int64_t act, Type element, bool accumulate) {
  Value t = i64(typeCode(element));
  call("strata_rt_gemm",
       {site(), i64(batch), i64(m), i64(n), i64(k), a, t, i64(aStride),
        i64(transA), bm, t, i64(bStride), i64(transB), c, t,
        bias ? bias : null(), t, i64(act), i64(accumulate)});
}

void RuntimeLowering::reduceTo(Value out, Value in, ArrayRef<int64_t> inShape,
                               ArrayRef<int64_t> outStrides, double scale,
                               Type element) {
  SmallVector<int64_t> desc(inShape);
  desc.append(outStrides.begin(), outStrides.end());
  Value t = i64(typeCode(element));
  call("strata_rt_reduce", {site(), out, t, in, t, i64(inShape.size()),
                            constantArray(desc), f64(scale)});
}

void RuntimeLowering::dropout(Operation *op, Value out, Value in,
                              Value residual, double prob, int64_t key,
                              int64_t n, Type element) {
  Value t = i64(typeCode(element));
  call("strata_rt_dropout",
       {site(), out, t, in, t, residual ? residual : null(), t, i64(n),
        i64(key), i64(microBatches), i64(getMicroBatch(op).value_or(0)),
        f64(prob)});
}

SmallVector<int64_t> RuntimeLowering::groupDescriptor(Operation *op,
                                                      FlatSymbolRefAttr ref) {
  auto group = SymbolTable::lookupNearestSymbolFrom<CommGroupOp>(op, ref);
  SmallVector<int64_t> desc = {int64_t(group.getRanks().size())};
  for (Attribute list : group.getRanks()) {
    ArrayRef<int64_t> ranks = cast<DenseI64ArrayAttr>(list).asArrayRef();
    desc.push_back(ranks.size());
    desc.append(ranks.begin(), ranks.end());
  }
  return desc;
}

/// Every collective is started the same way (a non-blocking call, completed
/// by strata_rt_wait before the first reader: collectiveWaitPoint) so that
/// computation overlaps it and all ranks' calls match.
LogicalResult RuntimeLowering::collective(Operation *op, int64_t kind,
                                          Value input, ReduceKind reduce,
                                          int64_t root, FlatSymbolRefAttr group,
                                          int64_t dim) {
  Value result = op->getResult(0);
  if (reduce != ReduceKind::Sum && reduce != ReduceKind::Mean)
    return op->emitOpError("only sum and mean reductions are supported by ")
           << target.getDescription();
  ArrayRef<int64_t> shape = tensorType(input).getShape();
  if (!target.supportsCollectiveSplit(shape, dim)) {
    int64_t before = 1;
    for (int64_t d = 0; d < dim; ++d)
      if (shape[d] != 1)
        before = shape[d];
    return op->emitOpError("splits dimension ")
           << dim << " after a dimension of size " << before << "; "
           << target.getDescription()
           << " needs each rank's slice contiguous (split the leading "
              "dimension)";
  }
  waitsBefore[collectiveWaitPoint(op)].push_back(currentSite);
  call("strata_rt_collective",
       {site(), i64(kind), ptr(result), ptr(input), ty(result),
        i64(numel(result)), i64(reduce == ReduceKind::Mean ? 1 : 0), i64(root),
        constantArray(groupDescriptor(op, group))});
  return success();
}

//===----------------------------------------------------------------------===//
// The driver
//===----------------------------------------------------------------------===//

LogicalResult RuntimeLowering::run() {
  MLIRContext *ctx = module.getContext();
  // The op families' patterns; an op without one cannot be lowered.
  RewritePatternSet patterns(ctx);
  populateGemmLoweringPatterns(patterns, *this);
  populateElementwiseLoweringPatterns(patterns, *this);
  populateDataMovementLoweringPatterns(patterns, *this);
  populateDropoutLoweringPatterns(patterns, *this);
  populateNormalizationLoweringPatterns(patterns, *this);
  populateLossLoweringPatterns(patterns, *this);
  populateEmbeddingLoweringPatterns(patterns, *this);
  populateOptimizerLoweringPatterns(patterns, *this);
  populateCollectiveLoweringPatterns(patterns, *this);
  populatePointToPointLoweringPatterns(patterns, *this);
  llvm::DenseSet<OperationName> loweredOps;
  for (const auto &pattern : patterns.getNativePatterns())
    if (std::optional<OperationName> root = pattern->getRootKind())
      loweredOps.insert(*root);
  FrozenRewritePatternSet frozen(std::move(patterns));
  PatternApplicator applicator(frozen);
  applicator.applyDefaultCostModel();

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
    Value refused =
        call("strata_rt_step_begin", {i64(STRATA_RT_ABI_VERSION)}, i64Type);
    Value ok =
        LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, refused, i64(0));
    Block *run = fn.addBlock(), *exit = fn.addBlock();
    LLVM::CondBrOp::create(b, loc, ok, run, exit);
    b.setInsertionPointToStart(exit);
    LLVM::ReturnOp::create(b, loc, ValueRange());
    b.setInsertionPointToStart(run);
  }

  // The step's communicators, made before its first collective or transfer
  // (strata_rt_connect): per distinct group and peer, the peer's index (-1
  // for a collective) and the group descriptor; the site is the first
  // communication op's.
  {
    std::set<std::vector<int64_t>> entries;
    std::optional<int64_t> firstSite;
    int64_t index = 0;
    for (Operation &op : body) {
      int64_t here = index++;
      auto communication = dyn_cast<CollectiveOpInterface>(op);
      if (!communication)
        continue;
      int64_t peer = -1;
      if (auto send = dyn_cast<SendOp>(op))
        peer = send.getPeer();
      else if (auto recv = dyn_cast<RecvOp>(op))
        peer = recv.getPeer();
      std::vector<int64_t> entry = {peer};
      SmallVector<int64_t> desc =
          groupDescriptor(&op, communication.getGroupAttr());
      entry.insert(entry.end(), desc.begin(), desc.end());
      entries.insert(std::move(entry));
      if (!firstSite)
        firstSite = here;
    }
    if (firstSite) {
      SmallVector<int64_t> plan = {int64_t(entries.size())};
      for (const std::vector<int64_t> &entry : entries)
        plan.append(entry.begin(), entry.end());
      currentSite = *firstSite;
      call("strata_rt_connect", {site(), constantArray(plan)});
      currentSite = 0;
    }
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
    if (!assign || !isa_and_nonnull<OptimizerUpdateOpInterface>(
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
  // Consecutive optimizer updates run as a group (strata_rt_updates_begin
  // and _end, which the CUDA runtime launches together), as long as no
  // update reads or writes what another of the group writes: the memory
  // plan may give a later update's result the bytes of an earlier one's
  // dead gradient, which one launch would then read and write at once.
  // What an update reads and writes: arena byte ranges and resident
  // buffers (by name; step inputs are only read).
  struct Footprint {
    SmallVector<std::pair<int64_t, int64_t>> arenaReads, arenaWrites;
    llvm::StringSet<> residentReads, residentWrites;
    void add(const Footprint &other) {
      arenaReads.append(other.arenaReads);
      arenaWrites.append(other.arenaWrites);
      for (StringRef k : other.residentReads.keys())
        residentReads.insert(k);
      for (StringRef k : other.residentWrites.keys())
        residentWrites.insert(k);
    }
  };
  auto footprintOf = [&](Operation *op) {
    Footprint f;
    auto note = [&](Value v, bool write) {
      StringRef resident;
      if (auto get = v.getDefiningOp<GetParamOp>())
        resident = get.getName();
      else if (auto get = v.getDefiningOp<GetStateOp>())
        resident = get.getName();
      else if (auto it = inPlace.find(v); it != inPlace.end())
        resident = it->second;
      if (!resident.empty()) {
        (write ? f.residentWrites : f.residentReads).insert(resident);
        return;
      }
      if (auto it = arenaOffsets.find(v); it != arenaOffsets.end())
        (write ? f.arenaWrites : f.arenaReads)
            .push_back({it->second, it->second + tensorBytes(v.getType())});
    };
    for (Value v : op->getOperands())
      note(v, false);
    for (Value v : op->getResults())
      note(v, true);
    return f;
  };
  auto overlap = [](ArrayRef<std::pair<int64_t, int64_t>> a,
                    ArrayRef<std::pair<int64_t, int64_t>> b) {
    for (auto [b0, e0] : a)
      for (auto [b1, e1] : b)
        if (b0 < e1 && b1 < e0)
          return true;
    return false;
  };
  auto shares = [](const llvm::StringSet<> &a, const llvm::StringSet<> &b) {
    return llvm::any_of(a.keys(), [&](StringRef k) { return b.contains(k); });
  };
  // Whether `u` may join a group whose updates read and write `group`.
  auto independent = [&](const Footprint &group, const Footprint &u) {
    return !overlap(u.arenaWrites, group.arenaReads) &&
           !overlap(u.arenaWrites, group.arenaWrites) &&
           !overlap(u.arenaReads, group.arenaWrites) &&
           !shares(u.residentWrites, group.residentReads) &&
           !shares(u.residentWrites, group.residentWrites) &&
           !shares(u.residentReads, group.residentWrites);
  };
  std::optional<int64_t> updatesSite; // of the open group
  Footprint groupFootprint;           // of its updates
  // The next update after `op` that joins op's group: when only ops that
  // call nothing lie between (reads of parameters and state, assigns
  // written in place or at the step's end), it waits for no collective and
  // is independent of the group (op's, or op alone when none is open);
  // null otherwise.
  auto nextUpdateInGroup = [&](Operation &op) -> Operation * {
    for (Operation *o = op.getNextNode(); o; o = o->getNextNode()) {
      if (isa<OptimizerUpdateOpInterface>(o)) {
        if (waitsBefore.count(o))
          return nullptr;
        return independent(updatesSite ? groupFootprint : footprintOf(&op),
                           footprintOf(o))
                   ? o
                   : nullptr;
      }
      auto assign = dyn_cast<AssignOp>(o);
      if (!isa<GetParamOp, GetStateOp>(o) &&
          !(assign &&
            (inPlace.count(assign.getValue()) || deferred.contains(assign))))
        return nullptr;
    }
    return nullptr;
  };
  for (Operation &op : body) {
    currentSite = sites.size();
    loc = op.getLoc();
    std::string where;
    llvm::raw_string_ostream os(where);
    if (std::string file = fileLocation(op.getLoc()); !file.empty())
      os << file << ": ";
    os << op.getName().getStringRef();
    // The pipeline job (strata-pipeline): "[F3]"; weight-gradient jobs
    // (ZBH1's W) get a role of their own in traces.
    auto job = op.getAttrOfType<StringAttr>(StrataDialect::kJobAttrName);
    if (job)
      os << " [" << job.getValue() << "]";
    // A gradient bucket's collective (strata-data-parallel places it at the
    // step's return): which one.
    if (auto bucket =
            op.getAttrOfType<IntegerAttr>(StrataDialect::kBucketAttrName))
      os << " (gradient bucket " << bucket.getInt() << ")";
    sites.push_back(StringAttr::get(ctx, where));
    std::optional<Role> role = getRole(&op);
    StringRef roleName = role ? stringifyRole(*role) : StringRef();
    if (job && job.getValue().starts_with("W"))
      roleName = "weight-grad";
    siteRoles.push_back(StringAttr::get(ctx, roleName));

    if (auto it = waitsBefore.find(&op); it != waitsBefore.end())
      for (int64_t started : it->second)
        call("strata_rt_wait", {i64(started)});
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
      auto resident = inPlace.find(result);
      if (resident != inPlace.end()) {
        pointers[result] =
            loadPointer(persistent, persistentIndex[resident->second]);
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
        Value resident =
            loadPointer(persistent, persistentIndex[assign.getName()]);
        copy(resident, ptr(assign.getValue()), assign.getValue());
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
          Value resident =
              loadPointer(persistent, persistentIndex[assign.getName()]);
          copy(resident, ptr(assign.getValue()), assign.getValue());
        }
      loc = ret.getLoc();
      for (auto [i, v] : llvm::enumerate(ret.getOperands()))
        copy(loadPointer(outputs, i), ptr(v), v);
      call("strata_rt_step_end", {});
      LLVM::ReturnOp::create(b, loc, ValueRange());
      break;
    }
    if (failed(target.checkElementTypes(&op)))
      return failure();
    if (!loweredOps.contains(op.getName()))
      return op.emitOpError("cannot be lowered to ")
             << target.getDescription() << " yet";
    // A group begins before its first update's trace event and ends inside
    // its last one's, which then holds the group's work.
    bool update = isa<OptimizerUpdateOpInterface>(op);
    if (update && !updatesSite && nextUpdateInGroup(op)) {
      updatesSite = currentSite;
      groupFootprint = footprintOf(&op);
      call("strata_rt_updates_begin", {site()});
    } else if (update && updatesSite) { // (the last lookahead let it join)
      groupFootprint.add(footprintOf(&op));
    }
    if (trace && !isa<InitTokenOp>(op))
      call("strata_rt_trace_begin", {site()});
    emitBlock = b.getInsertionBlock();
    if (failed(applicator.matchAndRewrite(&op, b)))
      return failure(); // the pattern reported why
    resumeEmission();
    if (update && updatesSite && !nextUpdateInGroup(op)) {
      call("strata_rt_updates_end", {i64(*updatesSite)});
      updatesSite.reset();
    }
    if (trace && !isa<InitTokenOp>(op))
      call("strata_rt_trace_end", {site()});
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

namespace {

struct LowerToRuntimePass
    : public strata::impl::StrataLowerToRuntimeBase<LowerToRuntimePass> {
  using StrataLowerToRuntimeBase::StrataLowerToRuntimeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const RuntimeTarget *runtime = RuntimeTarget::lookup(target);
    if (!runtime) {
      mlir::emitError(module.getLoc(),
                      "strata-lower-to-runtime: unknown target '")
          << target << "' (" << RuntimeTarget::knownNames() << ")";
      return signalPassFailure();
    }
    // (Every buffer offset is a multiple of it, so it must be a multiple
    // of the largest element size, 8 bytes, for every buffer to be aligned
    // to its type.)
    if (alignment != 0 &&
        (alignment < 8 || alignment > 4096 ||
         !llvm::isPowerOf2_64(uint64_t(int64_t(alignment))))) {
      mlir::emitError(module.getLoc())
          << "strata-lower-to-runtime: alignment must be 0 (the target's) or "
             "a power of two from 8 to 4096, got "
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    FailureOr<func::FuncOp> found =
        getStepFunction(module, "strata-lower-to-runtime");
    if (failed(found))
      return signalPassFailure();
    func::FuncOp step = *found;
    if (!step.getBody().hasOneBlock()) {
      mlir::emitError(step.getLoc(), "the step must be a single block");
      return signalPassFailure();
    }
    for (Operation &op : *module.getBody())
      if (auto fn = dyn_cast<func::FuncOp>(op); fn && fn != step) {
        mlir::emitError(fn.getLoc(), "only the step (@")
            << step.getSymName() << ") can be lowered to the runtime";
        return signalPassFailure();
      }
    if (failed(checkStepBytes(step, "strata-lower-to-runtime")))
      return signalPassFailure();
    RuntimeLowering lowering(module, step, *runtime,
                             alignment > 0 ? int64_t(alignment)
                                           : runtime->getBufferAlignment(),
                             trace);
    if (failed(lowering.run()))
      return signalPassFailure();
    // What remains of the Strata program: declarations the host has read.
    for (Operation &op : llvm::make_early_inc_range(*module.getBody()))
      if (isa<RankGridOp, ParamOp, StateOp, CommGroupOp, func::FuncOp>(op))
        op.erase();
    module->removeAttr(StrataDialect::kPassesAttrName);
    module->removeAttr(StrataDialect::kRankAttrName);
  }
};

} // namespace
