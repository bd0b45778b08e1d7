//===- InitialValues.cpp - Seeded initial parameters and state ------------===//

#include "strata/Reference/InitialValues.h"
#include "strata/Dialect/Strata.h"

#include "../../runtime/common/StrataRandom.h"

#include "llvm/Support/Parallel.h"

#include <algorithm>
#include <cmath>

using namespace strata;
using namespace strata::reference;

namespace {

/// The RNG stream of initial values.
constexpr int64_t kInitStream = 0x494E4954; // "INIT"

/// Elements a chunk of generate() holds.
constexpr int64_t kChunk = 4096;

/// FNV-1a of a symbol name: the per-tensor RNG key.
int64_t nameKey(llvm::StringRef name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return int64_t(h & 0x7fffffff);
}

double uniformSym(uint64_t seed, int64_t key, int64_t stream, int64_t index) {
  auto r = rng::draw(seed, key, stream, index);
  return 2.0 * (double(r[0]) / 4294967296.0) - 1.0;
}

} // namespace

double reference::standardNormal(uint64_t seed, int64_t key, int64_t stream,
                                 int64_t index) {
  auto r = rng::draw(seed, key, stream, index);
  double u1 = (double(r[0]) + 1.0) / 4294967296.0; // (0, 1]
  double u2 = double(r[1]) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

InitialValues::InitialValues(mlir::ModuleOp module, uint64_t seed)
    : seed(seed) {
  auto add = [&](llvm::StringRef name, mlir::RankedTensorType type,
                 InitAttr init, llvm::StringRef drawnAs) {
    Spec spec;
    spec.shape.assign(type.getShape().begin(), type.getShape().end());
    spec.count = type.getNumElements();
    spec.kind = int(init.getKind());
    spec.scale = init.getScale() ? init.getScale().getValueAsDouble() : 0.0;
    spec.key = nameKey(drawnAs);
    auto f = llvm::dyn_cast<mlir::FloatType>(type.getElementType());
    spec.toF32 = f && f.getWidth() <= 32;
    specs[name] = std::move(spec);
    order.push_back(name.str());
  };
  for (mlir::Operation &op : *module.getBody()) {
    if (auto p = llvm::dyn_cast<ParamOp>(op)) {
      add(p.getSymName(), p.getTensorType(), p.getInit(), p.getSymName());
    } else if (auto s = llvm::dyn_cast<StateOp>(op)) {
      // A master weight is drawn as its parameter (which the verifier
      // makes sure exists), in f32: the parameter's values are f32 values.
      if (s.getInit().getKind() == InitKind::Master) {
        auto param = module.lookupSymbol<ParamOp>(s.getOfAttr());
        add(s.getSymName(), s.getTensorType(), param.getInit(),
            param.getSymName());
      } else {
        add(s.getSymName(), s.getTensorType(), s.getInit(), s.getSymName());
      }
    }
  }
}

const std::vector<int64_t> &InitialValues::shape(llvm::StringRef name) const {
  auto it = specs.find(name);
  assert(it != specs.end() && "not a parameter or state of the program");
  return it->second.shape;
}

void InitialValues::fill(const Spec &spec, int64_t begin, int64_t count,
                         double *out) const {
  switch (InitKind(spec.kind)) {
  case InitKind::Zeros:
    std::fill_n(out, count, 0.0);
    break;
  case InitKind::Ones:
    std::fill_n(out, count, 1.0);
    break;
  case InitKind::Constant:
    std::fill_n(out, count, spec.scale);
    break;
  case InitKind::Normal:
    for (int64_t i = 0; i < count; ++i)
      out[i] =
          spec.scale * standardNormal(seed, spec.key, kInitStream, begin + i);
    break;
  case InitKind::Uniform:
    for (int64_t i = 0; i < count; ++i)
      out[i] = spec.scale * uniformSym(seed, spec.key, kInitStream, begin + i);
    break;
  case InitKind::Master:
    llvm_unreachable("a master weight is drawn as its parameter");
  }
  if (spec.toF32)
    for (int64_t i = 0; i < count; ++i)
      out[i] = double(float(out[i]));
}

void InitialValues::generate(
    llvm::StringRef name,
    llvm::function_ref<void(int64_t, const double *, int64_t)> sink) const {
  auto it = specs.find(name);
  assert(it != specs.end() && "not a parameter or state of the program");
  const Spec &spec = it->second;
  auto chunk = [&](size_t c) {
    double values[kChunk];
    int64_t begin = int64_t(c) * kChunk;
    int64_t count = std::min(kChunk, spec.count - begin);
    fill(spec, begin, count, values);
    sink(begin, values, count);
  };
  size_t chunks = size_t((spec.count + kChunk - 1) / kChunk);
  if (chunks <= 1) {
    if (chunks)
      chunk(0);
    return;
  }
  llvm::parallelFor(0, chunks, chunk);
}

Tensor InitialValues::tensor(llvm::StringRef name) const {
  Tensor t(shape(name));
  generate(name, [&](int64_t begin, const double *values, int64_t count) {
    std::copy_n(values, count, t.data.data() + begin);
  });
  return t;
}
