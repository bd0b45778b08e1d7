//===- StrataOps.cpp - Shape inference and verifiers of Strata ops --------===//

#include "strata/Dialect/RankLimit.h"
#include "strata/Dialect/Strata.h"

#include "llvm/Support/MathExtras.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace strata;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {
/// Reports a shape-inference error prefixed with the op name, like
/// Operation::emitOpError does, when a location is available.
template <typename OpTy>
LogicalResult inferError(std::optional<Location> loc, const Twine &message) {
  return emitOptionalError(loc, "'", OpTy::getOperationName(), "' op ",
                           message);
}

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

RankedTensorType withShape(RankedTensorType type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, type.getElementType());
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string result = "[";
  llvm::raw_string_ostream os(result);
  llvm::interleaveComma(shape, os);
  os << "]";
  return result;
}
} // namespace

FailureOr<SmallVector<int64_t>>
strata::broadcastShapes(ArrayRef<int64_t> lhs, ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < lhs.size() ? lhs[lhs.size() - 1 - i] : 1;
    int64_t r = i < rhs.size() ? rhs[rhs.size() - 1 - i] : 1;
    if (l != r && l != 1 && r != 1)
      return failure();
    result[rank - 1 - i] = l == 1 ? r : l;
  }
  return result;
}

template <typename OpTy>
static LogicalResult inferBroadcast(std::optional<Location> loc, Value lhs,
                                    Value rhs, SmallVectorImpl<Type> &types) {
  RankedTensorType l = tensorType(lhs), r = tensorType(rhs);
  auto shape = broadcastShapes(l.getShape(), r.getShape());
  if (failed(shape))
    return inferError<OpTy>(loc, "shapes " + shapeStr(l.getShape()) + " and " +
                                     shapeStr(r.getShape()) +
                                     " do not broadcast");
  types.push_back(withShape(l, *shape));
  return success();
}

template <typename OpTy>
static LogicalResult checkProb(std::optional<Location> loc, double prob) {
  if (!(prob >= 0.0 && prob < 1.0))
    return inferError<OpTy>(loc, "prob must be in [0, 1), got " +
                                     llvm::formatv("{0}", prob).str());
  return success();
}

/// Checks that a rank-1 vector matches the last dimension of `input`.
template <typename OpTy>
static LogicalResult checkLastDimVector(std::optional<Location> loc,
                                        StringRef what, RankedTensorType input,
                                        RankedTensorType vector) {
  if (input.getRank() < 1)
    return inferError<OpTy>(loc, "input must have rank >= 1");
  if (vector.getRank() != 1 || vector.getDimSize(0) != input.getShape().back())
    return inferError<OpTy>(loc, what + " must have shape [" +
                                     Twine(input.getShape().back()) +
                                     "], got " + shapeStr(vector.getShape()));
  return success();
}

//===----------------------------------------------------------------------===//
// Program structure
//===----------------------------------------------------------------------===//

LogicalResult
GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getNameAttr());
  if (!param)
    return emitOpError() << "'" << getName()
                         << "' does not name a strata.param";
  if (param.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " differs from the type of parameter '"
                         << getName() << "': " << param.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Rank grid
//===----------------------------------------------------------------------===//

static constexpr GridAxis kGridAxes[] = {GridAxis::Pp, GridAxis::Dp,
                                         GridAxis::Sharding, GridAxis::Mp};

LogicalResult RankGridOp::verify() {
  for (RankGridOp other :
       (*this)->getParentOfType<ModuleOp>().getOps<RankGridOp>())
    if (other != *this && other->isBeforeInBlock(*this))
      return emitOpError() << "is a second rank grid; a program has one";
  // (Sizes at most kMaxRanks each: their product cannot overflow.)
  int64_t world = 1;
  for (GridAxis axis : kGridAxes) {
    if (getAxisSize(axis) < 1)
      return emitOpError() << "axis " << stringifyGridAxis(axis) << " has size "
                           << getAxisSize(axis)
                           << "; every axis needs at least 1 rank";
    if (getAxisSize(axis) > kMaxRanks ||
        (world *= getAxisSize(axis)) > kMaxRanks)
      return emitOpError() << "has more than " << kMaxRanks
                           << " ranks (2^20, the most a job may have)";
  }
  return success();
}

int64_t RankGridOp::getAxisSize(GridAxis axis) {
  switch (axis) {
  case GridAxis::Pp:
    return getPp();
  case GridAxis::Dp:
    return getDp();
  case GridAxis::Sharding:
    return getSharding();
  case GridAxis::Mp:
    return getMp();
  }
  llvm_unreachable("unknown grid axis");
}

int64_t RankGridOp::getWorldSize() {
  int64_t size = 1;
  for (GridAxis axis : kGridAxes)
    size *= getAxisSize(axis);
  return size;
}

int64_t RankGridOp::getCoordinate(int64_t rank, GridAxis axis) {
  // The stride of an axis is the product of the sizes inside it.
  int64_t stride = 1;
  for (GridAxis inner : llvm::reverse(kGridAxes)) {
    if (inner == axis)
      break;
    stride *= getAxisSize(inner);
  }
  return rank / stride % getAxisSize(axis);
}

SmallVector<SmallVector<int64_t>>
RankGridOp::getGroups(ArrayRef<GridAxis> axes) {
  // Coordinates are enumerated in row-major order twice: the axes outside
  // the group pick a list, the axes of the group a rank within it.
  SmallVector<int64_t> strides(std::size(kGridAxes), 1);
  for (int i = std::size(kGridAxes) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * getAxisSize(kGridAxes[i + 1]);
  SmallVector<unsigned> inside, outside;
  for (unsigned i = 0; i < std::size(kGridAxes); ++i)
    (llvm::is_contained(axes, kGridAxes[i]) ? inside : outside).push_back(i);
  auto offsets = [&](ArrayRef<unsigned> dims) {
    SmallVector<int64_t> result = {0};
    for (unsigned d : dims) {
      SmallVector<int64_t> next;
      for (int64_t base : result)
        for (int64_t c = 0; c < getAxisSize(kGridAxes[d]); ++c)
          next.push_back(base + c * strides[d]);
      result = std::move(next);
    }
    return result;
  };
  SmallVector<int64_t> within = offsets(inside);
  SmallVector<SmallVector<int64_t>> groups;
  for (int64_t base : offsets(outside)) {
    SmallVector<int64_t> &ranks = groups.emplace_back();
    for (int64_t offset : within)
      ranks.push_back(base + offset);
  }
  return groups;
}

LogicalResult CommGroupOp::verify() {
  if (getRanks().empty())
    return emitOpError() << "needs at least one group";
  llvm::SmallSet<int64_t, 16> seen;
  int64_t size = -1;
  for (Attribute attr : getRanks()) {
    ArrayRef<int64_t> group = cast<DenseI64ArrayAttr>(attr).asArrayRef();
    if (group.empty())
      return emitOpError() << "has an empty group";
    if (size >= 0 && static_cast<int64_t>(group.size()) != size)
      return emitOpError() << "groups must have equal sizes, got " << size
                           << " and " << group.size();
    size = group.size();
    for (int64_t rank : group) {
      if (rank < 0)
        return emitOpError() << "rank " << rank << " is negative";
      if (!seen.insert(rank).second)
        return emitOpError() << "rank " << rank
                             << " appears in more than one group";
    }
  }
  return success();
}

bool strata::hasTrainableShape(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return false;
  constexpr int64_t kLimit = int64_t(1) << 53;
  int64_t count = 1;
  for (int64_t dim : tensor.getShape()) {
    if (dim <= 0 || dim > kLimit / count)
      return false;
    count *= dim;
  }
  return true;
}

LogicalResult StateOp::verify() {
  RankedTensorType type = getTensorType();
  if (!isa<FloatType>(type.getElementType()) &&
      getInit().getKind() != InitKind::Zeros &&
      getInit().getKind() != InitKind::Ones)
    return emitOpError() << "integer state may only start as zeros or ones";
  if (getInit().getKind() == InitKind::Master &&
      (!type.getElementType().isF32() || !getOfAttr()))
    return emitOpError() << "a master weight (init <master>) is f32 and "
                            "names its parameter with 'of'";
  return success();
}

LogicalResult ParamOp::verify() {
  if (getInit().getKind() == InitKind::Master)
    return emitOpError() << "init <master> is for the f32 state that holds "
                            "a low-precision parameter's master weight";
  return success();
}

LogicalResult StateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!getOfAttr())
    return success();
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getOfAttr());
  if (!param)
    return emitOpError() << "'of' names " << getOfAttr()
                         << ", which is not a strata.param";
  if (getInit().getKind() == InitKind::Master &&
      (param.getTensorType().getElementType().isF32() ||
       param.getTensorType().getShape() != getTensorType().getShape()))
    return emitOpError() << "the master weight of " << getOfAttr()
                         << " must have its shape, and the parameter a "
                            "low-precision type (it is "
                         << param.getType() << ")";
  return success();
}

LogicalResult
GetStateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto state = symbolTable.lookupNearestSymbolFrom<StateOp>(*this, getNameAttr());
  if (!state)
    return emitOpError() << "'" << getName()
                         << "' does not name a strata.state";
  if (state.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " differs from the type of state '" << getName()
                         << "': " << state.getType();
  return success();
}

LogicalResult AssignOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  Operation *target =
      symbolTable.lookupNearestSymbolFrom(*this, getNameAttr());
  Type type;
  if (auto param = dyn_cast_or_null<ParamOp>(target))
    type = param.getType();
  else if (auto state = dyn_cast_or_null<StateOp>(target))
    type = state.getType();
  else
    return emitOpError() << "'" << getName()
                         << "' does not name a strata.param or strata.state";
  if (type != getValue().getType())
    return emitOpError() << "value type " << getValue().getType()
                         << " differs from the type of '" << getName()
                         << "': " << type;
  // One assignment per name and step, checked once per block by its first
  // assignment (an earlier assignment, found walking back, means this is
  // not the first) and reported on the second assignment of a name.
  for (Operation *prev = (*this)->getPrevNode(); prev;
       prev = prev->getPrevNode())
    if (isa<AssignOp>(prev))
      return success();
  llvm::DenseSet<Attribute> assigned;
  for (auto assign : (*this)->getBlock()->getOps<AssignOp>())
    if (!assigned.insert(assign.getNameAttr()).second)
      return assign.emitOpError() << "'" << assign.getName()
                                  << "' is assigned more than once in a step";
  return success();
}

LogicalResult LrScheduleOp::inferReturnTypes(MLIRContext *context,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  if (!(adaptor.getBaseLr().convertToDouble() > 0.0))
    return inferError<LrScheduleOp>(loc, "base_lr must be positive");
  if (int64_t(adaptor.getWarmupSteps()) < 0 ||
      int64_t(adaptor.getDecaySteps()) < 0)
    return inferError<LrScheduleOp>(loc, "step counts must be >= 0");
  if (adaptor.getKind() == LrScheduleKind::Cosine &&
      int64_t(adaptor.getDecaySteps()) < 1)
    return inferError<LrScheduleOp>(loc, "cosine needs decay_steps >= 1");
  if (adaptor.getKind() == LrScheduleKind::LinearWarmup &&
      int64_t(adaptor.getWarmupSteps()) < 1)
    return inferError<LrScheduleOp>(loc,
                                    "linear_warmup needs warmup_steps >= 1");
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

//===----------------------------------------------------------------------===//
// Forward computation
//===----------------------------------------------------------------------===//

/// Shape of `lhs @ rhs` with optional transposes of the last two dims.
template <typename OpTy>
static FailureOr<SmallVector<int64_t>>
inferMatmulShape(std::optional<Location> loc, RankedTensorType lhs,
                 RankedTensorType rhs, bool transposeLhs, bool transposeRhs) {
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return inferError<OpTy>(loc, "operands must have rank >= 2, got " +
                                     Twine(lhs.getRank()) + " and " +
                                     Twine(rhs.getRank()));
  ArrayRef<int64_t> l = lhs.getShape(), r = rhs.getShape();
  int64_t m = l[l.size() - (transposeLhs ? 1 : 2)];
  int64_t kl = l[l.size() - (transposeLhs ? 2 : 1)];
  int64_t kr = r[r.size() - (transposeRhs ? 1 : 2)];
  int64_t n = r[r.size() - (transposeRhs ? 2 : 1)];
  if (kl != kr)
    return inferError<OpTy>(loc, "contracting dimensions differ: " +
                                     Twine(kl) + " vs " + Twine(kr));
  auto batch = broadcastShapes(l.drop_back(2), r.drop_back(2));
  if (failed(batch))
    return inferError<OpTy>(loc, "batch dimensions " +
                                     shapeStr(l.drop_back(2)) + " and " +
                                     shapeStr(r.drop_back(2)) +
                                     " do not broadcast");
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  return shape;
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  RankedTensorType lhs = tensorType(adaptor.getLhs());
  auto shape = inferMatmulShape<MatmulOp>(loc, lhs, tensorType(adaptor.getRhs()),
                                          adaptor.getTransposeLhs(),
                                          adaptor.getTransposeRhs());
  if (failed(shape))
    return failure();
  types.push_back(withShape(lhs, *shape));
  return success();
}

#define STRATA_BROADCAST_INFER(OP)                                             \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> loc,              \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    return inferBroadcast<OP>(loc, adaptor.getLhs(), adaptor.getRhs(), types); \
  }
STRATA_BROADCAST_INFER(AddOp)
STRATA_BROADCAST_INFER(SubOp)
STRATA_BROADCAST_INFER(MulOp)
STRATA_BROADCAST_INFER(DivOp)
#undef STRATA_BROADCAST_INFER

/// Ops whose single result has the type of their first operand.
#define STRATA_SAME_TYPE_INFER(OP, FIRST)                                      \
  LogicalResult OP::inferReturnTypes(MLIRContext *,                            \
                                     std::optional<Location> loc,              \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    types.push_back(adaptor.FIRST().getType());                                \
    return success();                                                          \
  }
STRATA_SAME_TYPE_INFER(ScaleOp, getInput)
STRATA_SAME_TYPE_INFER(ScaleByOp, getInput)
STRATA_SAME_TYPE_INFER(ReluOp, getInput)
STRATA_SAME_TYPE_INFER(GeluOp, getInput)
STRATA_SAME_TYPE_INFER(SiluOp, getInput)
STRATA_SAME_TYPE_INFER(RsqrtOp, getInput)
STRATA_SAME_TYPE_INFER(TanhOp, getInput)
STRATA_SAME_TYPE_INFER(ReluGradOp, getResultGrad)
STRATA_SAME_TYPE_INFER(GeluGradOp, getResultGrad)
STRATA_SAME_TYPE_INFER(SiluGradOp, getResultGrad)
STRATA_SAME_TYPE_INFER(SoftmaxGradOp, getResultGrad)
#undef STRATA_SAME_TYPE_INFER

LogicalResult BiasAddOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  if (failed(checkLastDimVector<BiasAddOp>(loc, "bias", input,
                                           tensorType(adaptor.getBias()))))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  if (failed(checkProb<DropoutOp>(loc, adaptor.getProb().convertToDouble())))
    return failure();
  types.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  if (input.getRank() < 1)
    return inferError<SoftmaxOp>(loc, "input must have rank >= 1");
  if (adaptor.getCausal()) {
    ArrayRef<int64_t> s = input.getShape();
    if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2])
      return inferError<SoftmaxOp>(
          loc, "causal softmax needs square trailing dimensions, got " +
                   shapeStr(s));
  }
  types.push_back(input);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  if (failed(checkLastDimVector<LayerNormOp>(loc, "gamma", input,
                                             tensorType(adaptor.getGamma()))) ||
      failed(checkLastDimVector<LayerNormOp>(loc, "beta", input,
                                             tensorType(adaptor.getBeta()))))
    return failure();
  if (!(adaptor.getEpsilon().convertToDouble() > 0.0))
    return inferError<LayerNormOp>(loc, "epsilon must be positive");
  types.push_back(input);
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  if (failed(checkLastDimVector<RmsNormOp>(loc, "gamma", input,
                                           tensorType(adaptor.getGamma()))))
    return failure();
  if (!(adaptor.getEpsilon().convertToDouble() > 0.0))
    return inferError<RmsNormOp>(loc, "epsilon must be positive");
  types.push_back(input);
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType table = tensorType(adaptor.getTable());
  if (table.getRank() != 2)
    return inferError<EmbeddingOp>(loc, "table must have rank 2, got " +
                                            Twine(table.getRank()));
  if (std::optional<int64_t> pad = adaptor.getPaddingIdx();
      pad && (*pad < 0 || *pad >= table.getDimSize(0)))
    return inferError<EmbeddingOp>(loc, "padding_idx " + Twine(*pad) +
                                            " is not a row of the table [0, " +
                                            Twine(table.getDimSize(0)) + ")");
  SmallVector<int64_t> shape(tensorType(adaptor.getIds()).getShape());
  shape.push_back(table.getDimSize(1));
  types.push_back(withShape(table, shape));
  return success();
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "changes the number of elements: "
                         << in.getNumElements() << " vs "
                         << out.getNumElements();
  return success();
}

LogicalResult PackOp::verify() {
  auto out = cast<RankedTensorType>(getResult().getType());
  int64_t total = 0;
  for (Value in : getInputs()) {
    auto t = cast<RankedTensorType>(in.getType());
    if (t.getElementType() != out.getElementType())
      return emitOpError() << "packs a " << t << " into a " << out;
    total += t.getNumElements();
  }
  if (total > out.getNumElements())
    return emitOpError() << "packs " << total << " elements into "
                         << out.getNumElements();
  return success();
}

LogicalResult UnpackOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  // (An I64Attr reads back as uint64_t: compare its signed value.)
  int64_t offset = static_cast<int64_t>(getOffset());
  if (offset < 0)
    return emitOpError() << "offset " << offset << " is negative";
  int64_t end = offset;
  for (Value r : getResults()) {
    auto t = cast<RankedTensorType>(r.getType());
    if (t.getElementType() != in.getElementType())
      return emitOpError() << "unpacks a " << t << " from a " << in;
    end += t.getNumElements();
  }
  if (end > in.getNumElements())
    return emitOpError() << "unpacks elements up to " << end
                         << " from a buffer of " << in.getNumElements();
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return inferError<TransposeOp>(loc, "permutation has " +
                                            Twine(perm.size()) +
                                            " entries for rank " +
                                            Twine(input.getRank()));
  SmallVector<bool> used(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= input.getRank() || used[p])
      return inferError<TransposeOp>(loc, "permutation " + shapeStr(perm) +
                                              " is not a permutation");
    used[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  types.push_back(withShape(input, shape));
  return success();
}

/// Which dimensions of `input` `dims` reduces; an error unless they are
/// distinct and in range.
template <typename OpTy>
static FailureOr<SmallVector<bool>>
reducedDimensions(std::optional<Location> loc, RankedTensorType input,
                  ArrayRef<int64_t> dims) {
  SmallVector<bool> reduced(input.getRank(), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= input.getRank() || reduced[d])
      return inferError<OpTy>(loc, "dims " + shapeStr(dims) +
                                       " must be distinct and in [0, " +
                                       Twine(input.getRank()) + ")");
    reduced[d] = true;
  }
  return reduced;
}

template <typename OpTy>
static LogicalResult inferReduce(std::optional<Location> loc,
                                 typename OpTy::Adaptor adaptor,
                                 SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  FailureOr<SmallVector<bool>> reduced =
      reducedDimensions<OpTy>(loc, input, adaptor.getDims());
  if (failed(reduced))
    return failure();
  SmallVector<int64_t> shape;
  for (auto [i, size] : llvm::enumerate(input.getShape())) {
    if (!(*reduced)[i])
      shape.push_back(size);
    else if (adaptor.getKeepDims())
      shape.push_back(1);
  }
  types.push_back(withShape(input, shape));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferReduce<ReduceSumOp>(loc, adaptor, types);
}

LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferReduce<ReduceMeanOp>(loc, adaptor, types);
}

LogicalResult ReduceGradOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  RankedTensorType grad = tensorType(adaptor.getResultGrad());
  RankedTensorType input = tensorType(adaptor.getInput());
  FailureOr<SmallVector<bool>> reduced =
      reducedDimensions<ReduceGradOp>(loc, input, adaptor.getDims());
  if (failed(reduced))
    return failure();
  SmallVector<int64_t> kept, removed;
  for (auto [i, size] : llvm::enumerate(input.getShape())) {
    kept.push_back((*reduced)[i] ? 1 : size);
    if (!(*reduced)[i])
      removed.push_back(size);
  }
  if (grad.getShape() != ArrayRef(kept) && grad.getShape() != ArrayRef(removed))
    return inferError<ReduceGradOp>(
        loc, "result_grad's shape " + shapeStr(grad.getShape()) +
                 " is not the input's reduced over dims " +
                 shapeStr(adaptor.getDims()) + " (" + shapeStr(removed) +
                 ", or " + shapeStr(kept) + " with the dimensions kept)");
  types.push_back(input);
  return success();
}

/// `small` broadcasts to `large` (NumPy rules, one direction).
static bool broadcastsTo(ArrayRef<int64_t> small, ArrayRef<int64_t> large) {
  auto shape = broadcastShapes(small, large);
  return succeeded(shape) && ArrayRef<int64_t>(*shape) == large;
}

LogicalResult CastOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getShape() != out.getShape())
    return emitOpError() << "changes the shape: " << in << " vs " << out;
  return success();
}

/// Whether every value of type `from` is a value of type `to` (a widening
/// that loses nothing: bf16 or f16 to f32, any of them to f64).
static bool isExactConversion(Type from, Type to) {
  auto f = dyn_cast<FloatType>(from), t = dyn_cast<FloatType>(to);
  if (!f || !t)
    return false;
  return f == t || (t.getFPMantissaWidth() >= f.getFPMantissaWidth() &&
                    t.getWidth() > f.getWidth() && (t.isF32() || t.isF64()));
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  Value input = getInput();
  if (input.getType() == getType())
    return input;
  // A round trip through a wider type: x -> wide -> x's type.
  if (auto inner = input.getDefiningOp<CastOp>())
    if (inner.getInput().getType() == getType() &&
        isExactConversion(
            getType().getElementType(),
            cast<RankedTensorType>(input.getType()).getElementType()))
      return inner.getInput();
  return {};
}

LogicalResult BroadcastToOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type";
  if (!broadcastsTo(in.getShape(), out.getShape()))
    return emitOpError() << "input shape " << shapeStr(in.getShape())
                         << " does not broadcast to "
                         << shapeStr(out.getShape());
  return success();
}

LogicalResult SumToOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "changes the element type";
  if (!broadcastsTo(out.getShape(), in.getShape()))
    return emitOpError() << "result shape " << shapeStr(out.getShape())
                         << " does not broadcast to the input shape "
                         << shapeStr(in.getShape());
  return success();
}

/// The error of a `dim` attribute outside the rank of `type`, if it is.
template <typename OpTy>
static LogicalResult checkDim(std::optional<Location> loc,
                              RankedTensorType type, int64_t dim) {
  if (dim < 0 || dim >= type.getRank())
    return inferError<OpTy>(loc, "dim " + Twine(dim) +
                                     " is out of range for rank " +
                                     Twine(type.getRank()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  // (A builder given no stride infers the type before the default is set.)
  int64_t dim = adaptor.getDim(), start = adaptor.getStart(),
          size = adaptor.getSize(),
          stride = adaptor.getStrideAttr() ? adaptor.getStride() : 1;
  if (failed(checkDim<SliceOp>(loc, input, dim)))
    return failure();
  if (stride < 1)
    return inferError<SliceOp>(loc, "stride must be at least 1, got " +
                                        Twine(stride));
  // The last element taken is start + (size - 1) * stride; compared as a
  // count against what is left after start, so that nothing overflows.
  int64_t extent = input.getDimSize(dim);
  if (start < 0 || size < 1 || start >= extent ||
      size - 1 > (extent - 1 - start) / stride) {
    int64_t end;
    std::string range =
        stride != 1 ? "of " + std::to_string(size) + " elements " +
                          std::to_string(stride) + " apart from " +
                          std::to_string(start)
        : llvm::AddOverflow(start, size, end)
            ? "starting at " + std::to_string(start) + " of size " +
                  std::to_string(size)
            : "[" + std::to_string(start) + ", " + std::to_string(end) + ")";
    return inferError<SliceOp>(loc, "range " + range +
                                        " is outside dimension " + Twine(dim) +
                                        " of size " + Twine(extent));
  }
  SmallVector<int64_t> shape(input.getShape());
  shape[dim] = size;
  types.push_back(withShape(input, shape));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  int64_t dim = adaptor.getDim(), low = adaptor.getLow(),
          high = adaptor.getHigh();
  if (failed(checkDim<PadOp>(loc, input, dim)))
    return failure();
  if (low < 0 || high < 0)
    return inferError<PadOp>(loc, "low and high must not be negative, got " +
                                      Twine(low) + " and " + Twine(high));
  SmallVector<int64_t> shape(input.getShape());
  int64_t added;
  if (llvm::AddOverflow(low, high, added) ||
      llvm::AddOverflow(shape[dim], added, shape[dim]))
    return inferError<PadOp>(loc, "padding dimension " + Twine(dim) + " by " +
                                      Twine(low) + " and " + Twine(high) +
                                      " overflows its size");
  types.push_back(withShape(input, shape));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return inferError<ConcatOp>(loc, "needs at least one input");
  RankedTensorType first = tensorType(adaptor.getInputs().front());
  int64_t dim = adaptor.getDim();
  if (failed(checkDim<ConcatOp>(loc, first, dim)))
    return failure();
  // Every input's shape with `dim` blanked out must be the first's.
  auto outside = [&](RankedTensorType t) {
    SmallVector<int64_t> shape(t.getShape());
    shape[dim] = 0;
    return shape;
  };
  SmallVector<int64_t> shape = outside(first);
  for (Value in : adaptor.getInputs()) {
    RankedTensorType t = tensorType(in);
    if (t.getRank() != first.getRank() || outside(t) != outside(first))
      return inferError<ConcatOp>(
          loc, "input of shape " + shapeStr(t.getShape()) + " does not match " +
                   shapeStr(first.getShape()) + " outside dimension " +
                   Twine(dim));
    if (llvm::AddOverflow(shape[dim], t.getDimSize(dim), shape[dim]))
      return inferError<ConcatOp>(loc, "the inputs' sizes along dimension " +
                                           Twine(dim) + " overflow");
  }
  types.push_back(withShape(first, shape));
  return success();
}

template <typename OpTy>
static LogicalResult
checkLabels(std::optional<Location> loc, RankedTensorType logits,
            RankedTensorType labels, std::optional<int64_t> classes) {
  if (logits.getRank() < 2)
    return inferError<OpTy>(loc, "logits must have rank >= 2");
  if (labels.getShape() != logits.getShape().drop_back())
    return inferError<OpTy>(loc, "labels must have shape " +
                                     shapeStr(logits.getShape().drop_back()) +
                                     ", got " + shapeStr(labels.getShape()));
  const int64_t width = logits.getShape().back();
  if (classes && !ShapedType::isDynamic(width) &&
      (*classes < 1 || *classes > width))
    return inferError<OpTy>(loc, "classes must be in [1, " + Twine(width) +
                                     "] (the logits' last dimension), got " +
                                     Twine(*classes));
  return success();
}

/// The loss of cross-entropy over `logits` (and its gradient): f32 for
/// bf16 and f16 logits, whose kernels compute in f32, else the logits'
/// type.
static RankedTensorType crossEntropyLossType(RankedTensorType logits) {
  Type element = logits.getElementType();
  if (element.isBF16() || element.isF16())
    element = Float32Type::get(logits.getContext());
  return RankedTensorType::get({}, element);
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  RankedTensorType logits = tensorType(adaptor.getLogits());
  if (failed(checkLabels<CrossEntropyOp>(
          loc, logits, tensorType(adaptor.getLabels()), adaptor.getClasses())))
    return failure();
  types.push_back(crossEntropyLossType(logits));
  return success();
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

LogicalResult MatmulGradOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  RankedTensorType lhs = tensorType(adaptor.getLhs());
  RankedTensorType rhs = tensorType(adaptor.getRhs());
  auto shape = inferMatmulShape<MatmulGradOp>(
      loc, lhs, rhs, adaptor.getTransposeLhs(), adaptor.getTransposeRhs());
  if (failed(shape))
    return failure();
  ArrayRef<int64_t> gradShape = tensorType(adaptor.getResultGrad()).getShape();
  if (gradShape != ArrayRef<int64_t>(*shape))
    return inferError<MatmulGradOp>(loc, "result_grad has shape " +
                                             shapeStr(gradShape) +
                                             ", the product has " +
                                             shapeStr(*shape));
  types.push_back(lhs);
  types.push_back(rhs);
  return success();
}

LogicalResult BiasAddGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  RankedTensorType grad = tensorType(adaptor.getResultGrad());
  if (grad.getRank() < 1)
    return inferError<BiasAddGradOp>(loc, "result_grad must have rank >= 1");
  types.push_back(withShape(grad, grad.getShape().back()));
  return success();
}

LogicalResult DropoutGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  if (failed(checkProb<DropoutGradOp>(loc,
                                      adaptor.getProb().convertToDouble())))
    return failure();
  types.push_back(adaptor.getResultGrad().getType());
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  RankedTensorType gamma = tensorType(adaptor.getGamma());
  if (failed(checkLastDimVector<LayerNormGradOp>(loc, "gamma", input, gamma)))
    return failure();
  if (tensorType(adaptor.getResultGrad()) != input)
    return inferError<LayerNormGradOp>(loc,
                                       "result_grad must have the input type");
  types.append({input, gamma, gamma});
  return success();
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  RankedTensorType gamma = tensorType(adaptor.getGamma());
  if (failed(checkLastDimVector<RmsNormGradOp>(loc, "gamma", input, gamma)))
    return failure();
  if (tensorType(adaptor.getResultGrad()) != input)
    return inferError<RmsNormGradOp>(loc,
                                     "result_grad must have the input type");
  types.append({input, gamma});
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  RankedTensorType table = getTableGrad().getType();
  RankedTensorType grad = getResultGrad().getType();
  if (table.getRank() != 2)
    return emitOpError() << "result must have rank 2";
  if (std::optional<int64_t> pad = getPaddingIdx();
      pad && (*pad < 0 || *pad >= table.getDimSize(0)))
    return emitOpError() << "padding_idx " << *pad
                         << " is not a row of the table [0, "
                         << table.getDimSize(0) << ")";
  if (table.getElementType() != grad.getElementType())
    return emitOpError() << "result and result_grad element types differ";
  SmallVector<int64_t> expected(getIds().getType().getShape());
  expected.push_back(table.getDimSize(1));
  if (grad.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "result_grad must have shape "
                         << shapeStr(expected) << ", got "
                         << shapeStr(grad.getShape());
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  RankedTensorType logits = tensorType(adaptor.getLogits());
  if (failed(checkLabels<CrossEntropyGradOp>(
          loc, logits, tensorType(adaptor.getLabels()), adaptor.getClasses())))
    return failure();
  RankedTensorType loss = crossEntropyLossType(logits);
  if (tensorType(adaptor.getLossGrad()) != loss) {
    std::string want;
    llvm::raw_string_ostream(want) << loss;
    return inferError<CrossEntropyGradOp>(
        loc, "loss_grad must have the loss's type, " + want);
  }
  types.push_back(logits);
  return success();
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// Without a master: the gradient and every state operand have the
/// parameter's type, and so do the `numResults` results. With a master (an
/// f32 tensor of the parameter's shape, the parameter bf16 or f16): state
/// has the master's type, the gradient the parameter's or the master's;
/// the results are the parameter's type, then the master's for the state,
/// then the new master.
template <typename OpTy>
static LogicalResult inferUpdate(std::optional<Location> loc, Value param,
                                 Value grad, ValueRange states, Value master,
                                 unsigned numResults,
                                 SmallVectorImpl<Type> &types) {
  if (!master) {
    for (Value v : llvm::concat<Value>(ValueRange(grad), states))
      if (v.getType() != param.getType())
        return inferError<OpTy>(loc, "gradient and optimizer state must have "
                                     "the parameter's type");
    types.append(numResults, param.getType());
    return success();
  }
  auto p = cast<RankedTensorType>(param.getType());
  auto m = cast<RankedTensorType>(master.getType());
  if (!m.getElementType().isF32() || m.getShape() != p.getShape())
    return inferError<OpTy>(loc, "a master weight is an f32 tensor of the "
                                 "parameter's shape");
  if (p.getElementType().isF32())
    return inferError<OpTy>(loc, "an f32 parameter is its own master weight");
  if (grad.getType() != p && grad.getType() != m)
    return inferError<OpTy>(loc, "the gradient must have the parameter's or "
                                 "the master weight's type");
  for (Value v : states)
    if (v.getType() != m)
      return inferError<OpTy>(loc, "optimizer state must have the master "
                                   "weight's type");
  types.push_back(p);
  types.append(numResults - 1, m);
  types.push_back(m);
  return success();
}

LogicalResult SgdUpdateOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  return inferUpdate<SgdUpdateOp>(loc, adaptor.getParam(), adaptor.getGrad(),
                                  {}, adaptor.getMaster(), 1, types);
}

LogicalResult MomentumUpdateOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  return inferUpdate<MomentumUpdateOp>(
      loc, adaptor.getParam(), adaptor.getGrad(), {adaptor.getVelocity()},
      adaptor.getMaster(), 2, types);
}

LogicalResult LarsUpdateOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  return inferUpdate<LarsUpdateOp>(loc, adaptor.getParam(), adaptor.getGrad(),
                                   {adaptor.getVelocity()}, adaptor.getMaster(),
                                   2, types);
}

#define STRATA_ADAM_INFER(OP)                                                  \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &types) {                                          \
    return inferUpdate<OP>(loc, adaptor.getParam(), adaptor.getGrad(),         \
                           {adaptor.getMoment1(), adaptor.getMoment2()},       \
                           adaptor.getMaster(), 3, types);                     \
  }
STRATA_ADAM_INFER(AdamUpdateOp)
STRATA_ADAM_INFER(AdamWUpdateOp)
STRATA_ADAM_INFER(LambUpdateOp)
#undef STRATA_ADAM_INFER

LogicalResult IsFiniteOp::inferReturnTypes(MLIRContext *context,
                                           std::optional<Location>, Adaptor,
                                           SmallVectorImpl<Type> &types) {
  types.push_back(RankedTensorType::get({}, IntegerType::get(context, 64)));
  return success();
}

LogicalResult UpdateLossScalingOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (adaptor.getIncrEveryNSteps() < 1 || adaptor.getDecrEveryNNanOrInf() < 1)
    return inferError<UpdateLossScalingOp>(
        loc, "incr_every_n_steps and decr_every_n_nan_or_inf must be >= 1");
  if (!(adaptor.getIncrRatio().convertToDouble() > 1.0) ||
      !(adaptor.getDecrRatio().convertToDouble() > 0.0 &&
        adaptor.getDecrRatio().convertToDouble() < 1.0))
    return inferError<UpdateLossScalingOp>(
        loc, "incr_ratio must be > 1 and decr_ratio in (0, 1)");
  types.push_back(adaptor.getScale().getType());
  types.push_back(adaptor.getGood().getType());
  types.push_back(adaptor.getBad().getType());
  return success();
}

LogicalResult GlobalNormOp::inferReturnTypes(MLIRContext *context,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return inferError<GlobalNormOp>(loc, "needs at least one input");
  types.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult ClipByGlobalNormOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (!(adaptor.getMaxNorm().convertToDouble() > 0.0))
    return inferError<ClipByGlobalNormOp>(loc, "max_norm must be positive");
  for (Value input : adaptor.getInputs())
    types.push_back(input.getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Resolves the group of a collective, or reports why it cannot.
static FailureOr<CommGroupOp> lookupGroup(Operation *op,
                                          FlatSymbolRefAttr group,
                                          SymbolTableCollection &symbolTable) {
  auto groupOp = symbolTable.lookupNearestSymbolFrom<CommGroupOp>(op, group);
  if (!groupOp)
    return op->emitOpError() << "group " << group
                             << " does not name a strata.comm_group";
  return groupOp;
}

/// Checks that `rank` is a valid index within the group.
static LogicalResult checkGroupRank(Operation *op, StringRef what,
                                    int64_t rank, CommGroupOp group) {
  if (rank < 0 || rank >= group.getGroupSize())
    return op->emitOpError() << what << " " << rank
                             << " is outside the group of size "
                             << group.getGroupSize();
  return success();
}

LogicalResult
AllReduceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the input type";
  return lookupGroup(*this, getGroupAttr(), symbolTable);
}

LogicalResult
BroadcastOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto group = lookupGroup(*this, getGroupAttr(), symbolTable);
  if (failed(group))
    return failure();
  return checkGroupRank(*this, "root", getRoot(), *group);
}

LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto group = lookupGroup(*this, getGroupAttr(), symbolTable);
  if (failed(group))
    return failure();
  return checkGroupRank(*this, "peer", getPeer(), *group);
}

LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto group = lookupGroup(*this, getGroupAttr(), symbolTable);
  if (failed(group))
    return failure();
  return checkGroupRank(*this, "peer", getPeer(), *group);
}

/// `sliced` equals `full` except along `dim`, where full = sliced * factor
/// (the factor is checked against the group in verifySymbolUses).
static LogicalResult verifySliceShapes(Operation *op, int64_t dim,
                                       RankedTensorType full,
                                       RankedTensorType sliced) {
  if (full.getElementType() != sliced.getElementType() ||
      full.getRank() != sliced.getRank())
    return op->emitOpError()
           << "input and result must have the same rank and element type";
  if (dim < 0 || dim >= full.getRank())
    return op->emitOpError() << "dim " << dim << " is out of range";
  for (int64_t i = 0; i < full.getRank(); ++i) {
    if (i == dim)
      continue;
    if (full.getDimSize(i) != sliced.getDimSize(i))
      return op->emitOpError()
             << "input and result may differ only in dimension " << dim;
  }
  return success();
}

static LogicalResult checkSliceFactor(Operation *op, int64_t dim,
                                      RankedTensorType full,
                                      RankedTensorType sliced,
                                      CommGroupOp group) {
  if (full.getDimSize(dim) != sliced.getDimSize(dim) * group.getGroupSize())
    return op->emitOpError()
           << "dimension " << dim << " must be " << sliced.getDimSize(dim)
           << " x group size " << group.getGroupSize() << " = "
           << sliced.getDimSize(dim) * group.getGroupSize() << ", got "
           << full.getDimSize(dim);
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  return verifySliceShapes(*this, getDim(), getInput().getType(),
                           getResult().getType());
}

LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto group = lookupGroup(*this, getGroupAttr(), symbolTable);
  if (failed(group))
    return failure();
  return checkSliceFactor(*this, getDim(), getInput().getType(),
                          getResult().getType(), *group);
}

LogicalResult AllGatherOp::verify() {
  return verifySliceShapes(*this, getDim(), getResult().getType(),
                           getInput().getType());
}

LogicalResult
AllGatherOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto group = lookupGroup(*this, getGroupAttr(), symbolTable);
  if (failed(group))
    return failure();
  return checkSliceFactor(*this, getDim(), getResult().getType(),
                          getInput().getType(), *group);
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

/// Shared guard of the fused GEMM ops: input [..., K], weight [K, N] (or
/// [N, K] transposed), returns the output shape [..., N].
template <typename OpTy>
static FailureOr<SmallVector<int64_t>>
inferGemmShape(std::optional<Location> loc, RankedTensorType input,
               RankedTensorType weight, bool transposed) {
  if (weight.getRank() != 2)
    return inferError<OpTy>(loc, "weight must have rank 2");
  if (input.getRank() < 2)
    return inferError<OpTy>(loc, "input must have rank >= 2");
  int64_t k = weight.getDimSize(transposed ? 1 : 0),
          n = weight.getDimSize(transposed ? 0 : 1);
  if (input.getShape().back() != k)
    return inferError<OpTy>(loc, "contracting dimensions differ: " +
                                     Twine(input.getShape().back()) + " vs " +
                                     Twine(k));
  SmallVector<int64_t> shape(input.getShape().drop_back());
  shape.push_back(n);
  return shape;
}

LogicalResult FusedGemmEpilogueOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  RankedTensorType weight = tensorType(adaptor.getWeight());
  auto shape = inferGemmShape<FusedGemmEpilogueOp>(
      loc, input, weight, adaptor.getTransposeWeight());
  if (failed(shape))
    return failure();
  RankedTensorType out = withShape(input, *shape);
  if (failed(checkLastDimVector<FusedGemmEpilogueOp>(
          loc, "bias", out, tensorType(adaptor.getBias()))))
    return failure();
  types.push_back(out);
  if (adaptor.getWithAux()) {
    if (adaptor.getActivation() == Activation::None)
      return inferError<FusedGemmEpilogueOp>(
          loc, "with_aux needs an activation");
    types.push_back(out);
  }
  return success();
}

LogicalResult FusedGemmEpilogueGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  RankedTensorType input = tensorType(adaptor.getInput());
  RankedTensorType weight = tensorType(adaptor.getWeight());
  auto shape = inferGemmShape<FusedGemmEpilogueGradOp>(
      loc, input, weight, adaptor.getTransposeWeight());
  if (failed(shape))
    return failure();
  RankedTensorType out = withShape(input, *shape);
  if (tensorType(adaptor.getResultGrad()) != out)
    return inferError<FusedGemmEpilogueGradOp>(
        loc, "result_grad must have shape " + shapeStr(*shape));
  bool hasActivation = adaptor.getActivation() != Activation::None;
  Value aux = adaptor.getAux();
  if (hasActivation && !aux)
    return inferError<FusedGemmEpilogueGradOp>(
        loc, "an activation gradient needs the forward pre-activation (aux)");
  if (!hasActivation && aux)
    return inferError<FusedGemmEpilogueGradOp>(
        loc, "aux is only used with an activation");
  if (aux && tensorType(aux) != out)
    return inferError<FusedGemmEpilogueGradOp>(
        loc, "aux must have the result_grad type");
  types.append({input, weight, withShape(input, shape->back())});
  return success();
}

LogicalResult FusedDropoutAddOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (failed(checkProb<FusedDropoutAddOp>(
          loc, adaptor.getProb().convertToDouble())))
    return failure();
  types.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult FusedDropoutAddGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  if (failed(checkProb<FusedDropoutAddGradOp>(
          loc, adaptor.getProb().convertToDouble())))
    return failure();
  types.append(2, adaptor.getResultGrad().getType());
  return success();
}

/// The shapes of attention's operands: query [..., S, H, D], key [..., T,
/// Hkv, D], value [..., T, Hkv, Dv], the leading (batch) dimensions equal
/// and Hkv a divisor of H (grouped-query attention; H for multi-head
/// attention). Returns the result type [..., S, H, Dv] and the log-sum-exp type
/// [..., H, S] (f32; f64 for f64).
template <typename OpTy>
static FailureOr<std::pair<RankedTensorType, RankedTensorType>>
inferAttention(std::optional<Location> loc, Type queryType, Type keyType,
               Type valueType, bool causal, double dropout) {
  if (!(dropout >= 0.0 && dropout < 1.0))
    return inferError<OpTy>(loc, "dropout must be in [0, 1), got " +
                                     llvm::formatv("{0}", dropout).str());
  auto q = cast<RankedTensorType>(queryType),
       k = cast<RankedTensorType>(keyType),
       v = cast<RankedTensorType>(valueType);
  if (q.getRank() < 3 || k.getRank() != q.getRank() ||
      v.getRank() != q.getRank())
    return inferError<OpTy>(loc, "query, key and value must have the same "
                                 "rank, at least 3 ([..., sequence, heads, "
                                 "head size])");
  int64_t r = q.getRank();
  if (q.getShape().drop_back(3) != k.getShape().drop_back(3) ||
      q.getShape().drop_back(3) != v.getShape().drop_back(3) ||
      v.getDimSize(r - 2) != k.getDimSize(r - 2))
    return inferError<OpTy>(loc, "query, key and value must have the same "
                                 "batch dimensions, and key and value the "
                                 "same heads, got " +
                                     shapeStr(q.getShape()) + ", " +
                                     shapeStr(k.getShape()) + " and " +
                                     shapeStr(v.getShape()));
  int64_t heads = q.getDimSize(r - 2), kvHeads = k.getDimSize(r - 2);
  if (kvHeads < 1 || kvHeads > heads || heads % kvHeads != 0)
    return inferError<OpTy>(loc, "key and value heads (" + Twine(kvHeads) +
                                     ") must divide the query heads (" +
                                     Twine(heads) + ")");
  if (k.getDimSize(r - 1) != q.getDimSize(r - 1))
    return inferError<OpTy>(loc, "key must have the query's head size " +
                                     Twine(q.getDimSize(r - 1)) + ", got " +
                                     Twine(k.getDimSize(r - 1)));
  if (v.getDimSize(r - 3) != k.getDimSize(r - 3))
    return inferError<OpTy>(loc, "value must have as many positions as key (" +
                                     Twine(k.getDimSize(r - 3)) + "), got " +
                                     Twine(v.getDimSize(r - 3)));
  if (causal && q.getDimSize(r - 3) != k.getDimSize(r - 3))
    return inferError<OpTy>(loc, "causal attention needs as many queries as "
                                 "keys, got " +
                                     Twine(q.getDimSize(r - 3)) + " and " +
                                     Twine(k.getDimSize(r - 3)));
  SmallVector<int64_t> out(q.getShape());
  out.back() = v.getDimSize(r - 1);
  SmallVector<int64_t> lse(q.getShape().drop_back(3));
  lse.append({q.getDimSize(r - 2), q.getDimSize(r - 3)});
  Type lseElement = q.getElementType().isF64()
                        ? q.getElementType()
                        : Float32Type::get(q.getContext());
  return std::make_pair(RankedTensorType::get(out, q.getElementType()),
                        RankedTensorType::get(lse, lseElement));
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto inferred = inferAttention<AttentionOp>(
      loc, adaptor.getQuery().getType(), adaptor.getKey().getType(),
      adaptor.getValue().getType(), adaptor.getCausal(),
      adaptor.getDropout().convertToDouble());
  if (failed(inferred))
    return failure();
  types.append({inferred->first, inferred->second});
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto inferred = inferAttention<AttentionGradOp>(
      loc, adaptor.getQuery().getType(), adaptor.getKey().getType(),
      adaptor.getValue().getType(), adaptor.getCausal(),
      adaptor.getDropout().convertToDouble());
  if (failed(inferred))
    return failure();
  if (adaptor.getResult().getType() != inferred->first ||
      adaptor.getResultGrad().getType() != inferred->first)
    return inferError<AttentionGradOp>(
        loc, "result and result_grad must have type " +
                 llvm::formatv("{0}", inferred->first).str());
  if (adaptor.getLogsumexp().getType() != inferred->second)
    return inferError<AttentionGradOp>(
        loc, "logsumexp must have type " +
                 llvm::formatv("{0}", inferred->second).str());
  Type element = tensorType(adaptor.getQuery()).getElementType();
  if (tensorType(adaptor.getKey()).getElementType() != element ||
      tensorType(adaptor.getValue()).getElementType() != element)
    return inferError<AttentionGradOp>(
        loc, "query, key and value must have the same element type");
  types.append({adaptor.getQuery().getType(), adaptor.getKey().getType(),
                adaptor.getValue().getType()});
  return success();
}

#include "Strata/StrataInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "Strata/StrataOps.cpp.inc"
