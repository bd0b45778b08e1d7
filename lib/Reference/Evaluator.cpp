//===- Evaluator.cpp - Reference semantics of Strata ops ------------------===//
//
// Straightforward loops over row-major double tensors; clarity over speed.
//
//===----------------------------------------------------------------------===//

#include "strata/Reference/Evaluator.h"
#include "strata/Dialect/Program.h"
#include "strata/Dialect/Strata.h"
#include "strata/Support/FileLocation.h"

#include "../../runtime/common/AttentionLayout.h"
#include "../../runtime/common/StrataRandom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace strata;
using namespace strata::reference;
using llvm::StringMap;

Tensor::Tensor(std::vector<int64_t> shape, double fill) : shape(std::move(shape)) {
  data.assign(numElements(), fill);
}

int64_t Tensor::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

namespace {

std::vector<int64_t> shapeOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = int64_t(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Index into `from` (broadcast to `to`, NumPy rules) of flat index `i` of
/// `to`.
int64_t broadcastIndex(int64_t i, const std::vector<int64_t> &to,
                       const std::vector<int64_t> &from) {
  std::vector<int64_t> toStrides = stridesOf(to), fromStrides = stridesOf(from);
  int64_t offset = int64_t(to.size()) - int64_t(from.size());
  int64_t result = 0;
  for (size_t d = 0; d < to.size(); ++d) {
    int64_t coord = (i / toStrides[d]) % to[d];
    int64_t fd = int64_t(d) - offset;
    if (fd >= 0 && from[fd] != 1)
      result += coord * fromStrides[fd];
  }
  return result;
}

Tensor broadcastTo(const Tensor &x, const std::vector<int64_t> &shape) {
  Tensor out(shape);
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.data[i] = x.data[broadcastIndex(i, shape, x.shape)];
  return out;
}

Tensor sumTo(const Tensor &x, const std::vector<int64_t> &shape) {
  Tensor out(shape);
  for (int64_t i = 0; i < x.numElements(); ++i)
    out.data[broadcastIndex(i, x.shape, shape)] += x.data[i];
  return out;
}

template <typename F>
Tensor binary(const Tensor &a, const Tensor &b, const std::vector<int64_t> &shape,
              F f) {
  Tensor out(shape);
  for (int64_t i = 0; i < out.numElements(); ++i)
    out.data[i] = f(a.data[broadcastIndex(i, shape, a.shape)],
                    b.data[broadcastIndex(i, shape, b.shape)]);
  return out;
}

template <typename F> Tensor unary(const Tensor &a, F f) {
  Tensor out = a;
  for (double &v : out.data)
    v = f(v);
  return out;
}

/// Last two dims swapped (a copy).
Tensor swapLast2(const Tensor &x) {
  std::vector<int64_t> shape = x.shape;
  size_t r = shape.size();
  std::swap(shape[r - 1], shape[r - 2]);
  Tensor out(shape);
  int64_t rows = x.shape[r - 2], cols = x.shape[r - 1];
  int64_t batch = x.numElements() / (rows * cols);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out.data[b * rows * cols + j * rows + i] =
            x.data[b * rows * cols + i * cols + j];
  return out;
}

/// Batched a @ b (no transposes), batch dims broadcast.
Tensor matmul(const Tensor &a, const Tensor &b) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2);
  std::vector<int64_t> bb(b.shape.begin(), b.shape.end() - 2);
  auto batchShape = *broadcastShapes(ba, bb);
  std::vector<int64_t> batch(batchShape.begin(), batchShape.end());
  std::vector<int64_t> shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  Tensor out(shape);
  int64_t numBatch = out.numElements() / (m * n);
  for (int64_t bi = 0; bi < numBatch; ++bi) {
    int64_t ia = ba.empty() ? 0 : broadcastIndex(bi, batch, ba);
    int64_t ib = bb.empty() ? 0 : broadcastIndex(bi, batch, bb);
    const double *pa = &a.data[ia * m * k];
    const double *pb = &b.data[ib * k * n];
    double *po = &out.data[bi * m * n];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += pa[i * k + p] * pb[p * n + j];
        po[i * n + j] = s;
      }
  }
  return out;
}

/// max(x, 0), NaN staying NaN (PyTorch's relu).
double relu(double x) { return x > 0 || std::isnan(x) ? x : 0.0; }

double geluTanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

double geluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

double geluGrad(double x, bool tanhApprox) {
  if (tanhApprox) {
    const double c = std::sqrt(2.0 / M_PI);
    double u = c * (x + 0.044715 * x * x * x);
    double t = std::tanh(u);
    double du = c * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
  }
  double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
  double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  return cdf + x * pdf;
}

Tensor activate(Activation act, const Tensor &x) {
  switch (act) {
  case Activation::None:
    return x;
  case Activation::Relu:
    return unary(x, relu);
  case Activation::GeluTanh:
    return unary(x, geluTanh);
  case Activation::GeluErf:
    return unary(x, geluErf);
  }
  llvm_unreachable("unknown activation");
}

double activationGrad(Activation act, double pre) {
  switch (act) {
  case Activation::None:
    return 1.0;
  case Activation::Relu:
    return pre > 0 ? 1.0 : 0.0;
  case Activation::GeluTanh:
    return geluGrad(pre, true);
  case Activation::GeluErf:
    return geluGrad(pre, false);
  }
  llvm_unreachable("unknown activation");
}

/// Fused attention's layout (runtime/common/AttentionLayout.h) for tensors
/// of these shapes, and the number of (batch, head) slices.
std::pair<AttentionLayout, int64_t>
attentionLayout(const std::vector<int64_t> &q, const std::vector<int64_t> &k,
                const std::vector<int64_t> &v) {
  size_t r = q.size();
  AttentionLayout at{q[r - 2], q[r - 3], k[r - 3],
                     q[r - 1], v[r - 1], k[r - 2]};
  int64_t slices = q[r - 2];
  for (size_t i = 0; i + 3 < r; ++i)
    slices *= q[i];
  return {at, slices};
}

/// The mean (0 for RMS norm: `centered` false) and 1 / sqrt(variance +
/// eps) of one row of n.
std::pair<double, double> rowStatistics(const double *xr, int64_t n, double eps,
                                        bool centered) {
  double mean = 0, var = 0;
  if (centered) {
    for (int64_t j = 0; j < n; ++j)
      mean += xr[j];
    mean /= n;
  }
  for (int64_t j = 0; j < n; ++j)
    var += (xr[j] - mean) * (xr[j] - mean);
  var /= n;
  return {mean, 1.0 / std::sqrt(var + eps)};
}

/// Layer norm over the last dimension ((x - mean) * rstd * g + b), or RMS
/// norm without `b` (x * rstd * g).
Tensor normalize(const Tensor &x, const Tensor &g, const Tensor *b,
                 double eps) {
  Tensor y(x.shape);
  int64_t n = x.shape.back(), rows = x.numElements() / n;
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = &x.data[r * n];
    auto [mean, rstd] = rowStatistics(xr, n, eps, b != nullptr);
    for (int64_t j = 0; j < n; ++j)
      y.data[r * n + j] =
          (xr[j] - mean) * rstd * g.data[j] + (b ? b->data[j] : 0.0);
  }
  return y;
}

/// The gradients of normalize: dx returned, dg and (layer norm) db summed
/// into.
Tensor normalizeGrad(const Tensor &x, const Tensor &g, const Tensor &dy,
                     double eps, Tensor &dg, Tensor *db) {
  int64_t n = x.shape.back(), rows = x.numElements() / n;
  Tensor dx(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = &x.data[r * n], *dyr = &dy.data[r * n];
    auto [mean, rstd] = rowStatistics(xr, n, eps, db != nullptr);
    double sumDxhat = 0, sumDxhatXhat = 0;
    for (int64_t j = 0; j < n; ++j) {
      double xhat = (xr[j] - mean) * rstd;
      double dxhat = dyr[j] * g.data[j];
      dg.data[j] += dyr[j] * xhat;
      if (db) {
        db->data[j] += dyr[j];
        sumDxhat += dxhat;
      }
      sumDxhatXhat += dxhat * xhat;
    }
    for (int64_t j = 0; j < n; ++j) {
      double xhat = (xr[j] - mean) * rstd;
      double dxhat = dyr[j] * g.data[j];
      dx.data[r * n + j] =
          rstd * (dxhat - sumDxhat / n - xhat * sumDxhatXhat / n);
    }
  }
  return dx;
}

class Evaluator {
public:
  Evaluator(StringMap<Tensor> &params, const EvalOptions &options)
      : params(params), options(options) {}

  llvm::Expected<std::vector<Tensor>> run(func::FuncOp func,
                                          ArrayRef<Tensor> args);

private:
  llvm::Error fail(Operation *op, const Twine &msg) {
    std::string file = strata::fileLocation(op->getLoc());
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   (file.empty() ? "" : file + ": ") +
                                       op->getName().getStringRef() + ": " +
                                       msg);
  }
  llvm::Error step(Operation *op);
  int64_t indexIn(ArrayRef<int64_t> ranks) const;
  llvm::Error reduce(Operation *op, ReduceKind kind, ArrayRef<int64_t> ranks,
                     Tensor &t);
  llvm::Error checkPeer(Operation *op, int64_t peer, ArrayRef<int64_t> ranks);
  static void copySlice(Tensor &full, Tensor &slice, int64_t dim,
                        int64_t index, bool toSlice);
  /// The ranks of `ref`'s list that holds this rank.
  llvm::Expected<ArrayRef<int64_t>> groupOf(Operation *op,
                                            FlatSymbolRefAttr ref) {
    if (!options.communicator)
      return fail(op, "a collective needs several ranks");
    auto group = SymbolTable::lookupNearestSymbolFrom<CommGroupOp>(op, ref);
    int64_t me = options.communicator->rank();
    for (Attribute a : group.getRanks())
      if (llvm::is_contained(cast<DenseI64ArrayAttr>(a).asArrayRef(), me))
        return cast<DenseI64ArrayAttr>(a).asArrayRef();
    return fail(op, "rank " + Twine(me) + " is in no group of " +
                        ref.getValue());
  }
  const Tensor &get(Value v) { return values.find(v)->second; }
  /// Fused attention's dropout: (slice, i, j) -> 0 or 1 / (1 - p), the
  /// mask of strata.dropout over its [..., heads, s, t] probabilities.
  struct AttentionMask {
    uint64_t seed;
    int64_t key, offset;
    AttentionLayout at;
    double p;
    double operator()(int64_t slice, int64_t i, int64_t j) const {
      if (p == 0)
        return 1.0;
      return rng::dropoutKeep(seed, key, offset + at.probability(slice, i, j),
                              p)
                 ? 1.0 / (1.0 - p)
                 : 0.0;
    }
  };
  template <typename OpTy>
  AttentionMask attentionMask(OpTy o, int64_t microBatch, int64_t slices,
                              const AttentionLayout &at) {
    int64_t n = slices * at.s * at.t;
    return {options.seed, int64_t(o.getDropoutKey()),
            rng::dropoutOffset(shard, microBatches, microBatch, n), at,
            o.getDropout().convertToDouble()};
  }
  /// The forward mask of dropout op `key`, scaled by 1 / (1 - p): dropout
  /// and every gradient or fused form of it share it. Micro-batch m covers
  /// global elements [m * n, (m + 1) * n).
  Tensor dropout(const Tensor &x, int64_t key, int64_t microBatch, double p) {
    Tensor t = x;
    int64_t offset =
        rng::dropoutOffset(shard, microBatches, microBatch, t.numElements());
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.data[i] = rng::dropoutKeep(options.seed, key, offset + i, p)
                      ? t.data[i] / (1.0 - p)
                      : 0.0;
    return t;
  }
  /// Binds `v`; a bf16 or f16 value holds its elements rounded to that
  /// type (round to nearest even), as a runtime stores them.
  void set(Value v, Tensor t) {
    if (auto type = dyn_cast<RankedTensorType>(v.getType()))
      roundToElementType(t, type.getElementType());
    values[v] = std::move(t);
  }

  StringMap<Tensor> &params;
  const EvalOptions &options;
  DenseMap<Value, Tensor> values;
  /// strata.assign values, applied when the step returns.
  StringMap<Tensor> pending;
  /// Where this rank's micro-batches sit in the global batch.
  int64_t shard = 0, microBatches = 1;
};

llvm::Expected<std::vector<Tensor>> Evaluator::run(func::FuncOp func,
                                                   ArrayRef<Tensor> args) {
  Block &body = func.getBody().front();
  if (args.size() != body.getNumArguments())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "expected " +
                                       Twine(body.getNumArguments()) +
                                       " arguments, got " + Twine(args.size()));
  if (auto k = func->getAttrOfType<IntegerAttr>(
          StrataDialect::kMicroBatchesAttrName))
    microBatches = k.getInt();
  if (auto shards =
          func->getAttrOfType<IntegerAttr>(StrataDialect::kShardsAttrName)) {
    if (!options.communicator)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "the program is compiled for " + Twine(shards.getInt()) +
              " data-parallel ranks but runs in a single process");
    shard = options.communicator->rank() % shards.getInt();
  }
  for (auto [arg, value] : llvm::zip(body.getArguments(), args)) {
    if (shapeOf(arg) != value.shape)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "argument " + Twine(arg.getArgNumber()) +
                                         " has the wrong shape");
    set(arg, value);
  }
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      std::vector<Tensor> results;
      for (Value v : ret.getOperands())
        results.push_back(get(v));
      for (auto &entry : pending)
        params[entry.first()] = std::move(entry.second);
      return results;
    }
    if (llvm::Error err = step(&op))
      return std::move(err);
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "function has no return");
}

/// A send's or receive's peer must index `ranks`.
llvm::Error Evaluator::checkPeer(Operation *op, int64_t peer,
                                 ArrayRef<int64_t> ranks) {
  if (peer < 0 || peer >= int64_t(ranks.size()))
    return fail(op, "peer " + Twine(peer) + " outside a group of " +
                        Twine(ranks.size()));
  return llvm::Error::success();
}

/// `t` summed (or averaged) over `ranks`, in place.
llvm::Error Evaluator::reduce(Operation *op, ReduceKind kind,
                              ArrayRef<int64_t> ranks, Tensor &t) {
  if (kind != ReduceKind::Sum && kind != ReduceKind::Mean)
    return fail(op, "only sum and mean reductions are supported");
  if (llvm::Error err = options.communicator->allReduceSum(t.data, ranks))
    return err;
  if (kind == ReduceKind::Mean)
    for (double &v : t.data)
      v /= double(ranks.size());
  return llvm::Error::success();
}

/// This rank's index in `ranks`.
int64_t Evaluator::indexIn(ArrayRef<int64_t> ranks) const {
  int64_t me = options.communicator->rank();
  return std::find(ranks.begin(), ranks.end(), me) - ranks.begin();
}

/// Copies slice `index` of `full` along `dim` (of the slice's size) into
/// `slice`, or back when !toSlice.
void Evaluator::copySlice(Tensor &full, Tensor &slice, int64_t dim,
                          int64_t index, bool toSlice) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= full.shape[d];
  for (size_t d = dim + 1; d < full.shape.size(); ++d)
    inner *= full.shape[d];
  int64_t size = slice.shape[dim], whole = full.shape[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < size * inner; ++i) {
      double &f = full.data[(o * whole + index * size) * inner + i];
      double &s = slice.data[o * size * inner + i];
      if (toSlice)
        s = f;
      else
        f = s;
    }
}

llvm::Error Evaluator::step(Operation *op) {
  int64_t microBatch = getMicroBatch(op).value_or(0);
  auto in = [&](unsigned i) -> const Tensor & { return get(op->getOperand(i)); };
  auto outShape = [&](unsigned i = 0) { return shapeOf(op->getResult(i)); };

  // A guarded update whose guard (the gradients' global norm under loss
  // scaling) is not finite is skipped: parameter and state stay.
  auto update = dyn_cast<OptimizerUpdateOpInterface>(op);
  if (update)
    if (Value guard = update.getGuard();
        guard && !std::isfinite(get(guard).data[0])) {
      for (auto [i, result] : llvm::enumerate(op->getResults()))
        set(result, get(update.getUpdated(i)));
      return llvm::Error::success();
    }
  // An update computes from the parameter, or from its f32 master weight;
  // the new parameter (rounded to its type by set()) and the new master.
  auto updatedParam = [&]() -> const Tensor & {
    Value master = update.getMaster();
    return master ? get(master) : in(0);
  };
  auto setParam = [&](Tensor value) {
    if (update.getMaster())
      set(op->getResults().back(), value);
    set(op->getResult(0), std::move(value));
  };

  return llvm::TypeSwitch<Operation *, llvm::Error>(op)
      .Case([&](InitTokenOp t) -> llvm::Error {
        set(t, Tensor());
        return llvm::Error::success();
      })
      .Case([&](AllReduceOp o) -> llvm::Error {
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        Tensor t = in(0);
        if (llvm::Error err = reduce(op, o.getKind(), *group, t))
          return err;
        set(o.getResult(), std::move(t));
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](ReduceScatterOp o) -> llvm::Error {
        // The reference backend reduces the whole tensor and keeps its
        // slice (simple, exact; the runtimes send each slice once).
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        Tensor t = in(0);
        if (llvm::Error err = reduce(op, o.getKind(), *group, t))
          return err;
        Tensor slice(outShape());
        copySlice(t, slice, o.getDim(), indexIn(*group), /*toSlice=*/true);
        set(o.getResult(), std::move(slice));
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](AllGatherOp o) -> llvm::Error {
        // Each rank's slice in place in zeros, summed over the group (x + 0
        // is exact).
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        Tensor full(outShape());
        Tensor mine = in(0);
        copySlice(full, mine, o.getDim(), indexIn(*group), /*toSlice=*/false);
        if (llvm::Error err =
                options.communicator->allReduceSum(full.data, *group))
          return err;
        set(o.getResult(), std::move(full));
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](SendOp o) -> llvm::Error {
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        if (llvm::Error err = checkPeer(op, int64_t(o.getPeer()), *group))
          return err;
        if (llvm::Error err =
                options.communicator->send(in(0).data, *group, o.getPeer()))
          return err;
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](RecvOp o) -> llvm::Error {
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        if (llvm::Error err = checkPeer(op, int64_t(o.getPeer()), *group))
          return err;
        Tensor t(outShape());
        if (llvm::Error err =
                options.communicator->recv(t.data, *group, o.getPeer()))
          return err;
        set(o.getResult(), std::move(t));
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](BroadcastOp o) -> llvm::Error {
        auto group = groupOf(o, o.getGroupAttr());
        if (!group)
          return group.takeError();
        ArrayRef<int64_t> ranks = *group;
        int64_t root = int64_t(o.getRoot());
        if (root < 0 || root >= int64_t(ranks.size()))
          return fail(op, "root " + Twine(o.getRoot()) + " outside a group of " +
                              Twine(ranks.size()));
        Tensor t = in(0);
        if (llvm::Error err =
                options.communicator->broadcast(t.data, ranks, o.getRoot()))
          return err;
        set(o.getResult(), std::move(t));
        set(o.getOutToken(), Tensor());
        return llvm::Error::success();
      })
      .Case([&](arith::ConstantOp c) -> llvm::Error {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense)
          return fail(op, "only dense tensor constants are supported");
        Tensor t(outShape());
        if (std::optional<double> v = splatValue(dense)) {
          std::fill(t.data.begin(), t.data.end(), *v);
        } else if (isa<FloatType>(dense.getElementType())) {
          int64_t i = 0;
          for (APFloat v : dense.getValues<APFloat>())
            t.data[i++] = v.convertToDouble();
        } else {
          int64_t i = 0;
          for (APInt v : dense.getValues<APInt>())
            t.data[i++] = double(v.getSExtValue());
        }
        set(c, std::move(t));
        return llvm::Error::success();
      })
      .Case([&](GetParamOp g) -> llvm::Error {
        auto it = params.find(g.getName());
        if (it == params.end())
          return fail(op, "no value for parameter '" + g.getName() + "'");
        if (it->second.shape != outShape())
          return fail(op, "parameter '" + g.getName() + "' has the wrong shape");
        set(g, it->second);
        return llvm::Error::success();
      })
      .Case([&](MatmulOp m) -> llvm::Error {
        Tensor a = m.getTransposeLhs() ? swapLast2(in(0)) : in(0);
        Tensor b = m.getTransposeRhs() ? swapLast2(in(1)) : in(1);
        set(m, matmul(a, b));
        return llvm::Error::success();
      })
      // bias_add is a broadcasting add; arith.addi the step counter's.
      .Case<AddOp, BiasAddOp, arith::AddIOp>([&](auto o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(), std::plus<double>()));
        return llvm::Error::success();
      })
      .Case([&](SubOp o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(), std::minus<double>()));
        return llvm::Error::success();
      })
      .Case([&](MulOp o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(), std::multiplies<double>()));
        return llvm::Error::success();
      })
      .Case([&](DivOp o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(), std::divides<double>()));
        return llvm::Error::success();
      })
      .Case([&](ScaleOp o) -> llvm::Error {
        double f = o.getFactor().convertToDouble();
        set(o, unary(in(0), [f](double x) { return x * f; }));
        return llvm::Error::success();
      })
      .Case([&](ScaleByOp o) -> llvm::Error {
        // The runtime's f32 product, then set()'s one rounding.
        float f = float(in(1).data[0]);
        set(o, unary(in(0), [f](double x) { return double(float(x) * f); }));
        return llvm::Error::success();
      })
      .Case([&](ReluOp o) -> llvm::Error {
        set(o, unary(in(0), relu));
        return llvm::Error::success();
      })
      .Case([&](GeluOp o) -> llvm::Error {
        bool t = o.getApproximate() == GeluApproximation::Tanh;
        set(o, unary(in(0), [t](double x) { return t ? geluTanh(x) : geluErf(x); }));
        return llvm::Error::success();
      })
      .Case([&](SiluOp o) -> llvm::Error {
        set(o, unary(in(0), [](double x) { return x / (1 + std::exp(-x)); }));
        return llvm::Error::success();
      })
      .Case([&](TanhOp o) -> llvm::Error {
        set(o, unary(in(0), [](double x) { return std::tanh(x); }));
        return llvm::Error::success();
      })
      .Case([&](RsqrtOp o) -> llvm::Error {
        set(o, unary(in(0), [](double x) { return 1 / std::sqrt(x); }));
        return llvm::Error::success();
      })
      .Case<DropoutOp, DropoutGradOp>([&](auto o) -> llvm::Error {
        set(o, dropout(in(0), o.getKey(), microBatch,
                       o.getProb().convertToDouble()));
        return llvm::Error::success();
      })
      .Case([&](SoftmaxOp o) -> llvm::Error {
        Tensor t = in(0);
        int64_t n = t.shape.back(), rows = t.numElements() / n;
        int64_t sq = t.shape.size() >= 2 ? t.shape[t.shape.size() - 2] : 1;
        for (int64_t r = 0; r < rows; ++r) {
          double *x = &t.data[r * n];
          int64_t limit = o.getCausal() ? (r % sq) + 1 : n;
          double mx = -INFINITY;
          for (int64_t j = 0; j < limit; ++j)
            mx = std::max(mx, x[j]);
          double sum = 0;
          for (int64_t j = 0; j < limit; ++j)
            sum += (x[j] = std::exp(x[j] - mx));
          for (int64_t j = 0; j < n; ++j)
            x[j] = j < limit ? x[j] / sum : 0.0;
        }
        set(o, std::move(t));
        return llvm::Error::success();
      })
      .Case([&](SoftmaxGradOp o) -> llvm::Error {
        const Tensor &y = in(0), &dy = in(1);
        Tensor dx(y.shape);
        int64_t n = y.shape.back(), rows = y.numElements() / n;
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0;
          for (int64_t j = 0; j < n; ++j)
            dot += y.data[r * n + j] * dy.data[r * n + j];
          for (int64_t j = 0; j < n; ++j)
            dx.data[r * n + j] = y.data[r * n + j] * (dy.data[r * n + j] - dot);
        }
        set(o, std::move(dx));
        return llvm::Error::success();
      })
      .Case([&](AttentionOp o) -> llvm::Error {
        // The probabilities of each query row, as strata.softmax would
        // compute them from scale * q k^T, per batch and head.
        const Tensor &q = in(0), &k = in(1), &v = in(2);
        auto [at, slices] = attentionLayout(q.shape, k.shape, v.shape);
        double scale = o.getScale().convertToDouble();
        AttentionMask mask = attentionMask(o, microBatch, slices, at);
        std::vector<int64_t> outShape = q.shape;
        outShape.back() = at.dv;
        std::vector<int64_t> lseShape(q.shape.begin(), q.shape.end() - 3);
        lseShape.insert(lseShape.end(), {at.heads, at.s});
        Tensor out(outShape), lse(lseShape);
        std::vector<double> p(at.t);
        for (int64_t h = 0; h < slices; ++h)
          for (int64_t i = 0; i < at.s; ++i) {
            const double *qi = &q.data[at.query(h, i)];
            int64_t limit = o.getCausal() ? i + 1 : at.t;
            double mx = -INFINITY;
            for (int64_t j = 0; j < limit; ++j) {
              double dot = 0;
              for (int64_t c = 0; c < at.d; ++c)
                dot += qi[c] * k.data[at.key(h, j) + c];
              p[j] = dot * scale;
              mx = std::max(mx, p[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < limit; ++j)
              sum += (p[j] = std::exp(p[j] - mx));
            lse.data[at.lse(h, i)] = mx + std::log(sum);
            for (int64_t j = 0; j < limit; ++j)
              p[j] = mask(h, i, j) * p[j] / sum;
            for (int64_t c = 0; c < at.dv; ++c) {
              double acc = 0;
              for (int64_t j = 0; j < limit; ++j)
                acc += p[j] * v.data[at.value(h, j) + c];
              out.data[at.output(h, i) + c] = acc;
            }
          }
        set(o.getResult(), std::move(out));
        set(o.getLogsumexp(), std::move(lse));
        return llvm::Error::success();
      })
      .Case([&](AttentionGradOp o) -> llvm::Error {
        // P from the log-sum-exp; dV = P^T dO, dP = dO V^T,
        // dS = P (dP - rowsum(dO O)), dQ = scale dS K, dK = scale dS^T Q.
        const Tensor &q = in(0), &k = in(1), &v = in(2), &out = in(3),
                     &lse = in(4), &dout = in(5);
        auto [at, slices] = attentionLayout(q.shape, k.shape, v.shape);
        double scale = o.getScale().convertToDouble();
        AttentionMask mask = attentionMask(o, microBatch, slices, at);
        Tensor dq(q.shape), dk(k.shape), dvt(v.shape);
        for (int64_t h = 0; h < slices; ++h)
          for (int64_t i = 0; i < at.s; ++i) {
            const double *qi = &q.data[at.query(h, i)];
            const double *doi = &dout.data[at.output(h, i)];
            const double *oi = &out.data[at.output(h, i)];
            int64_t limit = o.getCausal() ? i + 1 : at.t;
            double rowDot = 0;
            for (int64_t c = 0; c < at.dv; ++c)
              rowDot += doi[c] * oi[c];
            for (int64_t j = 0; j < limit; ++j) {
              const double *kj = &k.data[at.key(h, j)];
              const double *vj = &v.data[at.value(h, j)];
              double dot = 0;
              for (int64_t c = 0; c < at.d; ++c)
                dot += qi[c] * kj[c];
              double pj = std::exp(dot * scale - lse.data[at.lse(h, i)]);
              double m = mask(h, i, j), dp = 0;
              for (int64_t c = 0; c < at.dv; ++c) {
                dp += doi[c] * vj[c];
                dvt.data[at.value(h, j) + c] += m * pj * doi[c];
              }
              double ds = pj * (m * dp - rowDot) * scale;
              for (int64_t c = 0; c < at.d; ++c) {
                dq.data[at.query(h, i) + c] += ds * kj[c];
                dk.data[at.key(h, j) + c] += ds * qi[c];
              }
            }
          }
        set(o.getQueryGrad(), std::move(dq));
        set(o.getKeyGrad(), std::move(dk));
        set(o.getValueGrad(), std::move(dvt));
        return llvm::Error::success();
      })
      .Case([&](LayerNormOp o) -> llvm::Error {
        Tensor y =
            normalize(in(0), in(1), &in(2), o.getEpsilon().convertToDouble());
        set(o, std::move(y));
        return llvm::Error::success();
      })
      .Case([&](RmsNormOp o) -> llvm::Error {
        Tensor y =
            normalize(in(0), in(1), nullptr, o.getEpsilon().convertToDouble());
        set(o, std::move(y));
        return llvm::Error::success();
      })
      .Case([&](LayerNormGradOp o) -> llvm::Error {
        const Tensor &g = in(1);
        Tensor dg(g.shape), db(g.shape);
        Tensor dx = normalizeGrad(in(0), g, in(2),
                                  o.getEpsilon().convertToDouble(), dg, &db);
        set(o.getInputGrad(), std::move(dx));
        set(o.getGammaGrad(), std::move(dg));
        set(o.getBetaGrad(), std::move(db));
        return llvm::Error::success();
      })
      .Case([&](RmsNormGradOp o) -> llvm::Error {
        const Tensor &g = in(1);
        Tensor dg(g.shape);
        Tensor dx = normalizeGrad(
            in(0), g, in(2), o.getEpsilon().convertToDouble(), dg, nullptr);
        set(o.getInputGrad(), std::move(dx));
        set(o.getGammaGrad(), std::move(dg));
        return llvm::Error::success();
      })
      .Case([&](EmbeddingOp o) -> llvm::Error {
        const Tensor &table = in(0), &ids = in(1);
        int64_t v = table.shape[0], h = table.shape[1];
        Tensor out(outShape());
        for (int64_t i = 0; i < ids.numElements(); ++i) {
          int64_t id = int64_t(ids.data[i]);
          if (id < 0 || id >= v)
            return fail(op, "id " + Twine(id) + " outside [0, " + Twine(v) +
                                ") (position " + Twine(i) + ")");
          for (int64_t j = 0; j < h; ++j)
            out.data[i * h + j] = table.data[id * h + j];
        }
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case([&](EmbeddingGradOp o) -> llvm::Error {
        const Tensor &ids = in(0), &dy = in(1);
        Tensor dt(outShape());
        int64_t h = dt.shape[1];
        for (int64_t i = 0; i < ids.numElements(); ++i) {
          int64_t id = int64_t(ids.data[i]);
          if (id == o.getPaddingIdx())
            continue;
          for (int64_t j = 0; j < h; ++j)
            dt.data[id * h + j] += dy.data[i * h + j];
        }
        set(o, std::move(dt));
        return llvm::Error::success();
      })
      .Case([&](CastOp o) -> llvm::Error {
        set(o, in(0)); // rounded by set()
        return llvm::Error::success();
      })
      .Case([&](ReshapeOp o) -> llvm::Error {
        Tensor t = in(0);
        t.shape = outShape();
        set(o, std::move(t));
        return llvm::Error::success();
      })
      .Case([&](TransposeOp o) -> llvm::Error {
        const Tensor &x = in(0);
        ArrayRef<int64_t> perm = o.getPermutation();
        Tensor out(outShape());
        std::vector<int64_t> xs = stridesOf(x.shape), os = stridesOf(out.shape);
        for (int64_t i = 0; i < out.numElements(); ++i) {
          int64_t src = 0;
          for (size_t d = 0; d < perm.size(); ++d)
            src += ((i / os[d]) % out.shape[d]) * xs[perm[d]];
          out.data[i] = x.data[src];
        }
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto o) -> llvm::Error {
        const Tensor &x = in(0);
        std::vector<int64_t> kept = x.shape;
        int64_t count = 1;
        for (int64_t d : o.getDims()) {
          count *= kept[d];
          kept[d] = 1;
        }
        Tensor s = sumTo(x, kept);
        if (isa<ReduceMeanOp>(op))
          for (double &v : s.data)
            v /= count;
        s.shape = outShape();
        set(o, std::move(s));
        return llvm::Error::success();
      })
      .Case([&](PackOp o) -> llvm::Error {
        Tensor out(outShape()); // zeros past the inputs
        size_t at = 0;
        for (unsigned i = 0; i < o.getInputs().size(); ++i) {
          const Tensor &x = in(i);
          std::copy(x.data.begin(), x.data.end(), out.data.begin() + at);
          at += x.data.size();
        }
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case([&](UnpackOp o) -> llvm::Error {
        const Tensor &x = in(0);
        int64_t at = o.getOffset();
        for (unsigned i = 0; i < o.getNumResults(); ++i) {
          Tensor r(outShape(i));
          std::copy(x.data.begin() + at, x.data.begin() + at + r.numElements(),
                    r.data.begin());
          at += r.numElements();
          set(o.getResult(i), std::move(r));
        }
        return llvm::Error::success();
      })
      .Case([&](SliceOp o) -> llvm::Error {
        const Tensor &x = in(0);
        Tensor out(outShape());
        int64_t dim = o.getDim(), start = o.getStart(), stride = o.getStride();
        int64_t inner = 1;
        for (size_t d = dim + 1; d < x.shape.size(); ++d)
          inner *= x.shape[d];
        int64_t outer = x.numElements() / (x.shape[dim] * inner);
        int64_t size = out.shape[dim];
        for (int64_t a = 0; a < outer; ++a)
          for (int64_t i = 0; i < size; ++i)
            for (int64_t e = 0; e < inner; ++e)
              out.data[(a * size + i) * inner + e] =
                  x.data[(a * x.shape[dim] + start + i * stride) * inner + e];
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case([&](PadOp o) -> llvm::Error {
        const Tensor &x = in(0);
        Tensor out(outShape());
        int64_t dim = o.getDim(), inner = 1;
        for (size_t d = dim + 1; d < x.shape.size(); ++d)
          inner *= x.shape[d];
        int64_t inRow = x.shape[dim] * inner, outRow = out.shape[dim] * inner;
        int64_t rows = x.numElements() / std::max<int64_t>(inRow, 1);
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(x.data.begin() + r * inRow, inRow,
                      out.data.begin() + r * outRow + o.getLow() * inner);
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case([&](ConcatOp o) -> llvm::Error {
        Tensor out(outShape());
        int64_t dim = o.getDim(), rows = 1, at = 0;
        for (int64_t d = 0; d < dim; ++d)
          rows *= out.shape[d];
        int64_t outRow = out.numElements() / std::max<int64_t>(rows, 1);
        for (unsigned i = 0; i < o.getInputs().size(); ++i) {
          const Tensor &x = in(i);
          int64_t inRow = x.numElements() / std::max<int64_t>(rows, 1);
          for (int64_t r = 0; r < rows; ++r)
            std::copy_n(x.data.begin() + r * inRow, inRow,
                        out.data.begin() + r * outRow + at);
          at += inRow;
        }
        set(o, std::move(out));
        return llvm::Error::success();
      })
      .Case([&](ReduceGradOp o) -> llvm::Error {
        // Only the input's shape is read.
        std::vector<int64_t> kept = outShape();
        int64_t count = 1;
        for (int64_t d : o.getDims()) {
          count *= kept[d];
          kept[d] = 1;
        }
        Tensor g = in(0);
        g.shape = kept;
        Tensor dx = broadcastTo(g, outShape());
        if (o.getMean())
          for (double &v : dx.data)
            v /= count;
        set(o, std::move(dx));
        return llvm::Error::success();
      })
      .Case([&](BroadcastToOp o) -> llvm::Error {
        set(o, broadcastTo(in(0), outShape()));
        return llvm::Error::success();
      })
      .Case([&](SumToOp o) -> llvm::Error {
        set(o, sumTo(in(0), outShape()));
        return llvm::Error::success();
      })
      .Case([&](CrossEntropyOp o) -> llvm::Error {
        const Tensor &logits = in(0), &labels = in(1);
        int64_t width = logits.shape.back(), v = o.getNumClasses(),
                rows = labels.numElements();
        double total = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const double *x = &logits.data[r * width];
          int64_t label = int64_t(labels.data[r]);
          if (label < 0 || label >= v)
            return fail(op, "label " + Twine(label) + " outside [0, " +
                                Twine(v) + ") (position " + Twine(r) + ")");
          double mx = *std::max_element(x, x + v), sum = 0;
          for (int64_t j = 0; j < v; ++j)
            sum += std::exp(x[j] - mx);
          total += std::log(sum) + mx - x[label];
        }
        set(o, Tensor({}, total / rows));
        return llvm::Error::success();
      })
      .Case([&](CrossEntropyGradOp o) -> llvm::Error {
        const Tensor &logits = in(0), &labels = in(1), &dl = in(2);
        int64_t width = logits.shape.back(), v = o.getNumClasses(),
                rows = labels.numElements();
        Tensor dx(logits.shape); // (zeros: the padding's gradient)
        double scale = dl.data[0] / rows;
        for (int64_t r = 0; r < rows; ++r) {
          const double *x = &logits.data[r * width];
          double mx = *std::max_element(x, x + v), sum = 0;
          for (int64_t j = 0; j < v; ++j)
            sum += std::exp(x[j] - mx);
          for (int64_t j = 0; j < v; ++j)
            dx.data[r * width + j] = std::exp(x[j] - mx) / sum * scale;
          dx.data[r * width + int64_t(labels.data[r])] -= scale;
        }
        set(o, std::move(dx));
        return llvm::Error::success();
      })
      .Case([&](MatmulGradOp o) -> llvm::Error {
        // y = A @ B with A = op(lhs), B = op(rhs); dA = dy @ B^T,
        // dB = A^T @ dy; transposed operands get the transposed gradient.
        Tensor a = o.getTransposeLhs() ? swapLast2(in(0)) : in(0);
        Tensor b = o.getTransposeRhs() ? swapLast2(in(1)) : in(1);
        const Tensor &dy = in(2);
        Tensor da = matmul(dy, swapLast2(b));
        Tensor db = matmul(swapLast2(a), dy);
        if (o.getTransposeLhs())
          da = swapLast2(da);
        if (o.getTransposeRhs())
          db = swapLast2(db);
        set(o.getLhsGrad(), sumTo(da, in(0).shape));
        set(o.getRhsGrad(), sumTo(db, in(1).shape));
        return llvm::Error::success();
      })
      .Case([&](BiasAddGradOp o) -> llvm::Error {
        set(o, sumTo(in(0), outShape()));
        return llvm::Error::success();
      })
      .Case([&](ReluGradOp o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(),
                      [](double y, double dy) { return y > 0 ? dy : 0.0; }));
        return llvm::Error::success();
      })
      .Case([&](GeluGradOp o) -> llvm::Error {
        bool t = o.getApproximate() == GeluApproximation::Tanh;
        set(o, binary(in(0), in(1), outShape(), [t](double x, double dy) {
              return dy * geluGrad(x, t);
            }));
        return llvm::Error::success();
      })
      .Case([&](SiluGradOp o) -> llvm::Error {
        set(o, binary(in(0), in(1), outShape(), [](double x, double dy) {
              double s = 1 / (1 + std::exp(-x));
              return dy * s * (1 + x * (1 - s));
            }));
        return llvm::Error::success();
      })
      .Case([&](GetStateOp g) -> llvm::Error {
        auto it = params.find(g.getName());
        if (it != params.end()) {
          set(g, it->second);
          return llvm::Error::success();
        }
        auto state = SymbolTable::lookupNearestSymbolFrom<StateOp>(
            g, g.getNameAttr());
        InitAttr init = state.getInit();
        if (init.getKind() == InitKind::Master) {
          // Without a value of its own: its parameter's (already rounded).
          auto param = params.find(state.getOfAttr().getValue());
          if (param == params.end())
            return fail(op, "no value for master weight '" + g.getName() + "'");
          set(g, param->second);
          return llvm::Error::success();
        }
        double value = init.getKind() == InitKind::Ones    ? 1.0
                       : init.getKind() == InitKind::Zeros ? 0.0
                       : init.getKind() == InitKind::Constant
                           ? init.getScale().getValueAsDouble()
                           : NAN;
        if (std::isnan(value))
          return fail(op, "no value for state '" + g.getName() + "'");
        set(g, Tensor(outShape(), value));
        return llvm::Error::success();
      })
      .Case([&](AssignOp a) -> llvm::Error {
        pending[a.getName()] = get(a.getValue());
        return llvm::Error::success();
      })
      .Case([&](LrScheduleOp o) -> llvm::Error {
        double s = in(0).data[0], base = o.getBaseLr().convertToDouble();
        double warmup = double(int64_t(o.getWarmupSteps()));
        double decay = double(int64_t(o.getDecaySteps()));
        double minLr = o.getMinLr().convertToDouble(), lr = base;
        if (o.getKind() != LrScheduleKind::Constant && warmup > 0 &&
            s < warmup)
          lr = base * s / warmup;
        else if (o.getKind() == LrScheduleKind::Cosine) {
          double t = std::min(1.0, std::max(0.0, (s - warmup) / decay));
          lr = minLr + (base - minLr) * 0.5 * (1.0 + std::cos(M_PI * t));
        }
        set(o, Tensor({}, lr));
        return llvm::Error::success();
      })
      .Case([&](GlobalNormOp o) -> llvm::Error {
        double sum = 0;
        for (Value v : o.getInputs())
          for (double x : get(v).data)
            sum += x * x;
        set(o, Tensor({}, std::sqrt(sum)));
        return llvm::Error::success();
      })
      .Case([&](ClipByGlobalNormOp o) -> llvm::Error {
        double norm = get(o.getNorm()).data[0];
        double maxNorm = o.getMaxNorm().convertToDouble();
        double scale = maxNorm / std::max(norm, maxNorm);
        for (auto [in, out] : llvm::zip(o.getInputs(), o.getResults()))
          set(out, unary(get(in), [scale](double x) { return x * scale; }));
        return llvm::Error::success();
      })
      .Case([&](IsFiniteOp o) -> llvm::Error {
        set(o, Tensor({}, std::isfinite(in(0).data[0]) ? 1.0 : 0.0));
        return llvm::Error::success();
      })
      .Case([&](UpdateLossScalingOp o) -> llvm::Error {
        // The runtime's rule, in the scale's f32.
        float scale = float(in(1).data[0]);
        int64_t good = int64_t(in(2).data[0]), bad = int64_t(in(3).data[0]);
        if (!std::isfinite(in(0).data[0])) {
          good = 0;
          if (++bad == int64_t(o.getDecrEveryNNanOrInf())) {
            scale = std::max(scale * float(o.getDecrRatio().convertToDouble()),
                             1.0f);
            bad = 0;
          }
        } else {
          bad = 0;
          if (++good == int64_t(o.getIncrEveryNSteps())) {
            float grown = scale * float(o.getIncrRatio().convertToDouble());
            if (std::isfinite(grown))
              scale = grown;
            good = 0;
          }
        }
        set(o.getNewScale(), Tensor({}, scale));
        set(o.getNewGood(), Tensor({}, double(good)));
        set(o.getNewBad(), Tensor({}, double(bad)));
        return llvm::Error::success();
      })
      .Case([&](SgdUpdateOp o) -> llvm::Error {
        const Tensor &p = updatedParam(), &g = in(1);
        double lr = in(2).data[0], wd = o.getWeightDecay().convertToDouble();
        Tensor out = p;
        for (int64_t i = 0; i < p.numElements(); ++i)
          out.data[i] = p.data[i] - lr * (g.data[i] + wd * p.data[i]);
        setParam(std::move(out));
        return llvm::Error::success();
      })
      .Case([&](MomentumUpdateOp o) -> llvm::Error {
        const Tensor &p = updatedParam(), &g = in(1), &v = in(2);
        double lr = in(3).data[0], mu = o.getMomentum().convertToDouble();
        double wd = o.getWeightDecay().convertToDouble();
        Tensor np = p, nv = v;
        for (int64_t i = 0; i < p.numElements(); ++i) {
          double gi = g.data[i] + wd * p.data[i];
          nv.data[i] = mu * v.data[i] + gi;
          np.data[i] = p.data[i] - lr * (o.getUseNesterov()
                                             ? gi + mu * nv.data[i]
                                             : nv.data[i]);
        }
        setParam(std::move(np));
        set(o.getNewVelocity(), std::move(nv));
        return llvm::Error::success();
      })
      .Case([&](LarsUpdateOp o) -> llvm::Error {
        const Tensor &p = updatedParam(), &g = in(1), &v = in(2);
        double lr = in(3).data[0], mu = o.getMomentum().convertToDouble();
        double wd = o.getWeightDecay().convertToDouble();
        double coeff = o.getLarsCoeff().convertToDouble();
        double eps = o.getEpsilon().convertToDouble();
        double pn = 0, gn = 0;
        for (int64_t i = 0; i < p.numElements(); ++i) {
          pn += p.data[i] * p.data[i];
          gn += g.data[i] * g.data[i];
        }
        pn = std::sqrt(pn);
        gn = std::sqrt(gn);
        double localLr = (pn > 0 && gn > 0)
                             ? lr * coeff * pn / (gn + wd * pn + eps)
                             : lr;
        Tensor np = p, nv = v;
        for (int64_t i = 0; i < p.numElements(); ++i) {
          nv.data[i] = mu * v.data[i] + localLr * (g.data[i] + wd * p.data[i]);
          np.data[i] = p.data[i] - nv.data[i];
        }
        setParam(std::move(np));
        set(o.getNewVelocity(), std::move(nv));
        return llvm::Error::success();
      })
      .Case<AdamUpdateOp, AdamWUpdateOp, LambUpdateOp>(
          [&](auto o) -> llvm::Error {
            const Tensor &p = updatedParam(), &g = in(1), &m = in(2),
                         &v = in(3);
            double lr = in(4).data[0], t = in(5).data[0];
            double b1 = o.getBeta1().convertToDouble();
            double b2 = o.getBeta2().convertToDouble();
            double eps = o.getEpsilon().convertToDouble();
            double wd = o.getWeightDecay().convertToDouble();
            bool adam = isa<AdamUpdateOp>(op), lamb = isa<LambUpdateOp>(op);
            Tensor np = p, nm = m, nv = v, r(p.shape);
            double c1 = 1.0 - std::pow(b1, t), c2 = 1.0 - std::pow(b2, t);
            for (int64_t i = 0; i < p.numElements(); ++i) {
              double gi = g.data[i] + (adam ? wd * p.data[i] : 0.0);
              nm.data[i] = b1 * m.data[i] + (1 - b1) * gi;
              nv.data[i] = b2 * v.data[i] + (1 - b2) * gi * gi;
              r.data[i] = (nm.data[i] / c1) /
                          (std::sqrt(nv.data[i] / c2) + eps);
            }
            if (lamb) {
              double pn = 0, rn = 0;
              for (int64_t i = 0; i < p.numElements(); ++i) {
                r.data[i] += wd * p.data[i];
                pn += p.data[i] * p.data[i];
                rn += r.data[i] * r.data[i];
              }
              double trust =
                  (pn > 0 && rn > 0) ? std::sqrt(pn) / std::sqrt(rn) : 1.0;
              for (int64_t i = 0; i < p.numElements(); ++i)
                np.data[i] = p.data[i] - lr * trust * r.data[i];
            } else {
              double keep = adam ? 1.0 : 1.0 - lr * wd; // AdamW decay
              for (int64_t i = 0; i < p.numElements(); ++i)
                np.data[i] = p.data[i] * keep - lr * r.data[i];
            }
            setParam(std::move(np));
            set(o.getNewMoment1(), std::move(nm));
            set(o.getNewMoment2(), std::move(nv));
            return llvm::Error::success();
          })
      .Case([&](FusedGemmEpilogueOp o) -> llvm::Error {
        Tensor w = o.getTransposeWeight() ? swapLast2(in(1)) : in(1);
        Tensor pre =
            binary(matmul(in(0), w), in(2), outShape(), std::plus<double>());
        set(o.getResult(), activate(o.getActivation(), pre));
        if (o.getAux())
          set(o.getAux(), std::move(pre));
        return llvm::Error::success();
      })
      .Case([&](FusedGemmEpilogueGradOp o) -> llvm::Error {
        Tensor dz = in(2);
        if (o.getActivation() != Activation::None) {
          const Tensor &pre = get(o.getAux());
          for (int64_t i = 0; i < dz.numElements(); ++i)
            dz.data[i] *= activationGrad(o.getActivation(), pre.data[i]);
        }
        bool t = o.getTransposeWeight();
        const Tensor &x = in(0);
        Tensor w = t ? swapLast2(in(1)) : in(1); // [K, N]
        set(o.getInputGrad(), matmul(dz, swapLast2(w)));
        // dW = sum over rows of x^T dz: flatten the leading dims.
        int64_t k = w.shape[0], n = w.shape[1], rows = x.numElements() / k;
        Tensor x2 = x, dz2 = dz;
        x2.shape = {rows, k};
        dz2.shape = {rows, n};
        Tensor dw = matmul(swapLast2(x2), dz2);
        set(o.getWeightGrad(), t ? swapLast2(dw) : std::move(dw));
        set(o.getBiasGrad(), sumTo(dz, {n}));
        return llvm::Error::success();
      })
      .Case([&](FusedDropoutAddOp o) -> llvm::Error {
        Tensor t = dropout(in(0), o.getKey(), microBatch,
                           o.getProb().convertToDouble());
        set(o, binary(t, in(1), outShape(), std::plus<double>()));
        return llvm::Error::success();
      })
      .Case([&](FusedDropoutAddGradOp o) -> llvm::Error {
        set(o.getInputGrad(), dropout(in(0), o.getKey(), microBatch,
                                      o.getProb().convertToDouble()));
        set(o.getResidualGrad(), in(0));
        return llvm::Error::success();
      })
      .Default([&](Operation *) -> llvm::Error {
        return fail(op, "not supported by the reference evaluator");
      });
}

} // namespace

void strata::reference::roundToElementType(Tensor &t, Type element) {
  auto type = dyn_cast<FloatType>(element);
  if (!type || type.getWidth() >= 32)
    return;
  for (double &x : t.data) {
    llvm::APFloat f(x);
    bool lost;
    f.convert(type.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven,
              &lost);
    x = f.convertToDouble();
  }
}

llvm::Expected<std::vector<Tensor>>
strata::reference::evaluate(func::FuncOp func, ArrayRef<Tensor> args,
                            StringMap<Tensor> &params,
                            const EvalOptions &options) {
  Evaluator evaluator(params, options);
  return evaluator.run(func, args);
}
