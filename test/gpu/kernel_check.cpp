//===- kernel_check.cpp - Every kernel of a runtime against stored outputs ===//
//
// The kernel half of the GPU check of the CUDA runtime, which implements the
// runtime ABI (strata/Runtime/StrataRuntime.h) with the CPU runtime's
// semantics. The machine that builds Strata has no GPU and the one with a
// GPU has no MLIR, so this program needs only the ABI header and dlopen: it
// runs a fixed table of cases (every kernel but the collectives, send/recv,
// wait and tracing; f32, bf16 and f16; shapes that are no nice multiples)
// on the runtime it is given, and stores or compares their outputs.
//
//   kernel_check write --runtime build/lib/libstrata_runtime_cpu.so
//       --dir DIR [--filter SUBSTR]
// (where MLIR is) writes DIR/<case>.bin, the case's outputs' raw bytes one
// after the other, and DIR/<case>.txt, a line "output dtype count" each.
//
//   kernel_check compare --runtime libstrata_runtime_cuda.so
//       --dir DIR [--filter SUBSTR]
// (where the GPU is) runs the same cases and compares each element with the
// stored one as doubles: equal when |got - want| <= atol + rtol * |want| or
// both are NaN; rtol / atol default per dtype (f32 1e-5 / 1e-6, f16 2e-3 /
// 1e-3, bf16 1.6e-2 / 1e-2), exact for integers, copies, casts, dropout
// and skipped updates, looser for f32 sums whose order may differ. Prints
// "PASS case" or "FAIL case: why" each, then "N passed, M failed".
//
// Both exit 1 when a case fails or its runtime reports an error, or when
// the runtime gives no context (e.g. "no CUDA device"). --filter runs the
// cases whose name contains SUBSTR. A case draws its inputs from a
// generator seeded by its name: every run sees the same bytes. Build (it
// finds runtime/common/LowPrecision.h relative to itself or on -I):
//
//   g++ -std=c++17 -O2 -Iinclude test/gpu/kernel_check.cpp -ldl
//       -o kernel_check
//
//===----------------------------------------------------------------------===//

#include "strata/Runtime/StrataRuntime.h"
// bf16 and f16 on the host. Its OpenMP pragmas draw -Wunknown-pragmas
// without -fopenmp (GCC < 13 ignores this push in C++).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#if __has_include("LowPrecision.h")
#include "LowPrecision.h"
#else
#include "../../runtime/common/LowPrecision.h"
#endif
#pragma GCC diagnostic pop

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using strata::cpu::BFloat16;
using strata::cpu::Half;

constexpr int64_t F32 = STRATA_RT_F32, BF16 = STRATA_RT_BF16,
                  F16 = STRATA_RT_F16, I32 = STRATA_RT_I32, I64 = STRATA_RT_I64;

/// The seed of the context's RNG streams (dropout).
constexpr uint64_t kContextSeed = 20240611;

//===----------------------------------------------------------------------===//
// The runtime
//===----------------------------------------------------------------------===//

// clang-format off
#define KERNEL_CHECK_HOST(X)                                                   \
  X(default_options) X(create) X(destroy) X(error) X(clear_error) X(alloc)     \
  X(free) X(write) X(read) X(step_begin) X(step_end) X(symbols)
#define KERNEL_CHECK_KERNELS(X)                                                \
  X(gemm) X(gemm_aux) X(gemm_dact) X(gemm_bgrad) X(binary) X(unary) X(act_grad) X(cast) X(copy)          \
  X(strided_copy)                                                              \
  X(copy_rows) X(reduce) X(fill) X(dropout) X(softmax) X(softmax_grad)         \
  X(attention) X(attention_grad) X(layer_norm) X(layer_norm_grad)              \
  X(rms_norm) X(rms_norm_grad)                                                 \
  X(embedding) X(embedding_grad) X(cross_entropy) X(cross_entropy_grad)        \
  X(lr_schedule) X(global_norm) X(scale_by) X(clip) X(sgd) X(momentum)        \
  X(adam) X(lars) X(is_finite) X(update_loss_scaling) X(updates_begin)        \
  X(updates_end)
// clang-format on

/// The loaded runtime: its host functions and kernels with the ABI's types,
/// and the context every case runs in.
struct Runtime {
#define KERNEL_CHECK_DECLARE(name) decltype(&strata_rt_##name) name = nullptr;
  KERNEL_CHECK_HOST(KERNEL_CHECK_DECLARE)
  KERNEL_CHECK_KERNELS(KERNEL_CHECK_DECLARE)
#undef KERNEL_CHECK_DECLARE
  void *library = nullptr;
  StrataRtContext *ctx = nullptr;
};
Runtime RT;

/// Loads the runtime at `path` and creates its context; a message on
/// failure.
std::string loadRuntime(const std::string &path) {
  RT.library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!RT.library)
    return "cannot load " + path + ": " + dlerror();
#define KERNEL_CHECK_RESOLVE(name)                                             \
  RT.name = reinterpret_cast<decltype(RT.name)>(                               \
      dlsym(RT.library, "strata_rt_" #name));                                  \
  if (!RT.name)                                                                \
    return path + " lacks strata_rt_" #name;
  KERNEL_CHECK_HOST(KERNEL_CHECK_RESOLVE)
#undef KERNEL_CHECK_RESOLVE
  size_t count = 0;
  const StrataRtSymbol *symbols = RT.symbols(&count);
  auto find = [&](const char *name) -> void * {
    for (size_t i = 0; i < count; ++i)
      if (std::strcmp(symbols[i].name, name) == 0)
        return symbols[i].address;
    return nullptr;
  };
#define KERNEL_CHECK_RESOLVE(name)                                             \
  RT.name = reinterpret_cast<decltype(RT.name)>(find("strata_rt_" #name));     \
  if (!RT.name)                                                                \
    return path + ": strata_rt_symbols() lacks strata_rt_" #name;
  KERNEL_CHECK_KERNELS(KERNEL_CHECK_RESOLVE)
#undef KERNEL_CHECK_RESOLVE
  StrataRtOptions options;
  RT.default_options(&options);
  options.seed = kContextSeed;
  char error[1024] = "";
  RT.ctx = RT.create(&options, error, sizeof(error));
  if (!RT.ctx)
    return "cannot create a context on " + path + ": " + error;
  return "";
}

//===----------------------------------------------------------------------===//
// Elements on the host
//===----------------------------------------------------------------------===//

bool isInteger(int64_t dtype) { return dtype == I32 || dtype == I64; }

/// Element `i` of `bytes` (of `dtype`) set to `v`, rounded to nearest even.
void storeElement(int64_t dtype, char *bytes, int64_t i, double v) {
  char *p = bytes + i * strata_rt_element_bytes(dtype);
  auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (dtype) {
  case F32:
    return put(float(v));
  case BF16:
    return put(BFloat16(float(v)).bits);
  case F16:
    return put(Half(float(v)).bits);
  case I32:
    return put(int32_t(v));
  case I64:
    return put(int64_t(v));
  }
  throw std::runtime_error(std::string("no host conversion to ") +
                           strata_rt_element_name(dtype));
}

/// The bf16 or f16 value of these bits.
template <typename T> float fromBits(uint16_t bits) {
  T h;
  h.bits = bits;
  return float(h);
}

/// Element `i` of `bytes` (of `dtype`) as a double.
double loadElement(int64_t dtype, const char *bytes, int64_t i) {
  const char *p = bytes + i * strata_rt_element_bytes(dtype);
  auto get = [&](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (dtype) {
  case F32:
    return get(float());
  case BF16:
    return fromBits<BFloat16>(get(uint16_t()));
  case F16:
    return fromBits<Half>(get(uint16_t()));
  case I32:
    return get(int32_t());
  case I64:
    return double(get(int64_t()));
  }
  return NAN;
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/// Elements are equal when |got - want| <= atol + rtol * |want|.
struct Tol {
  double rtol, atol;
};
/// The output's dtype's default.
constexpr Tol kDefault{-1, -1};
constexpr Tol kExact{0, 0};
/// f32 results of long sums whose order a backend may choose.
constexpr Tol kSum{1e-4, 1e-5};

Tol defaultTol(int64_t dtype) {
  return dtype == F32    ? Tol{1e-5, 1e-6}
         : dtype == F16  ? Tol{2e-3, 1e-3}
         : dtype == BF16 ? Tol{1.6e-2, 1e-2}
                         : kExact;
}

struct Output {
  std::string name;
  int64_t dtype, count;
  const void *data; ///< in the runtime's memory
  Tol tol;
  int64_t bytes() const { return count * strata_rt_element_bytes(dtype); }
};

/// What a case's body declares its buffers with: inputs drawn from the
/// case's generator and written into the runtime's memory, outputs zeroed.
/// Every buffer is freed with the case.
class Case {
public:
  explicit Case(const std::string &name) {
    for (char c : name) // FNV-1a
      state = (state ^ uint8_t(c)) * 1099511628211ull;
  }
  ~Case() {
    for (void *p : buffers)
      RT.free(RT.ctx, p);
  }

  StrataRtContext *const ctx = RT.ctx;
  std::vector<Output> outputs;

  /// `n` elements uniform in [lo, hi) (integers for integer types).
  void *rand(int64_t dtype, int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double &x : v)
      x = isInteger(dtype) ? lo + double(next() % uint64_t(hi - lo))
                           : lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53;
    return vals(dtype, v);
  }
  /// These elements.
  void *vals(int64_t dtype, const std::vector<double> &v) {
    std::vector<char> bytes(v.size() * strata_rt_element_bytes(dtype));
    for (size_t i = 0; i < v.size(); ++i)
      storeElement(dtype, bytes.data(), int64_t(i), v[i]);
    void *p = alloc(int64_t(bytes.size()));
    RT.write(ctx, p, bytes.data(), int64_t(bytes.size()));
    return p;
  }
  /// An output, zeroed.
  void *out(const std::string &name, int64_t dtype, int64_t n,
            Tol tol = kDefault) {
    return keep(name, alloc(n * strata_rt_element_bytes(dtype)), dtype, n, tol);
  }
  /// A buffer (an input updated in place) read back as an output.
  void *keep(const std::string &name, void *p, int64_t dtype, int64_t n,
             Tol tol = kDefault) {
    outputs.push_back({name, dtype, n, p, tol});
    return p;
  }

private:
  uint64_t next() { // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  void *alloc(int64_t bytes) {
    void *p = RT.alloc(ctx, std::max<int64_t>(bytes, 1));
    if (!p)
      throw std::runtime_error("strata_rt_alloc(" + std::to_string(bytes) +
                               ") failed");
    buffers.push_back(p);
    return p;
  }

  uint64_t state = 14695981039346656037ull;
  std::vector<void *> buffers;
};

struct CaseDef {
  std::string name;
  std::function<void(Case &)> body;
  /// A call the runtimes must refuse: the case compares the error (its
  /// site and message), not outputs.
  bool refused = false;
};

std::vector<CaseDef> makeCases() {
  std::vector<CaseDef> cases;
  auto add = [&](const std::string &name, std::function<void(Case &)> body) {
    cases.push_back({name, std::move(body)});
  };
  auto refusal = [&](const std::string &name,
                     std::function<void(Case &)> body) {
    cases.push_back({"refuses_" + name, std::move(body), true});
  };
  const char *dtypeName[] = {"f32", "i32", "i64", "bf16", "f16"};

  // GEMM: op(A) [m, k] @ op(B) [k, n] for each of `batch` matrices.
  struct GemmCase {
    const char *name;
    int64_t dt, batch, m, n, k, transA, transB, sharedB, bias, act, accumulate;
  };
  const int64_t kRelu = STRATA_RT_ACT_RELU, kTanh = STRATA_RT_ACT_GELU_TANH,
                kErf = STRATA_RT_ACT_GELU_ERF;
  const GemmCase gemms[] = {
      {"f32", F32, 1, 33, 47, 29, 0, 0, 0, 0, 0, 0},
      {"f32_trans_a", F32, 1, 33, 47, 29, 1, 0, 0, 0, 0, 0},
      {"f32_trans_b", F32, 1, 33, 47, 29, 0, 1, 0, 0, 0, 0},
      {"f32_trans_ab", F32, 1, 33, 47, 29, 1, 1, 0, 0, 0, 0},
      {"f32_batch3_shared_b", F32, 3, 33, 47, 29, 0, 0, 1, 0, 0, 0},
      {"f32_batch2_trans_ab", F32, 2, 17, 31, 45, 1, 1, 0, 0, 0, 0},
      {"f32_bias", F32, 1, 33, 47, 29, 0, 0, 0, 1, 0, 0},
      {"f32_bias_relu", F32, 1, 33, 47, 29, 0, 0, 0, 1, kRelu, 0},
      {"f32_bias_gelu_tanh", F32, 1, 33, 47, 29, 0, 1, 0, 1, kTanh, 0},
      {"f32_bias_gelu_erf", F32, 1, 33, 47, 29, 0, 0, 0, 1, kErf, 0},
      {"f32_accumulate", F32, 1, 33, 47, 29, 1, 0, 0, 0, 0, 1},
      {"f32_large", F32, 1, 130, 67, 300, 0, 1, 0, 1, 0, 0},
      {"bf16_bias_gelu_tanh", BF16, 1, 33, 47, 29, 0, 0, 0, 1, kTanh, 0},
      {"bf16_bias_gelu_erf", BF16, 1, 33, 47, 29, 0, 1, 0, 1, kErf, 0},
      {"f16_batch2_gelu_erf", F16, 2, 17, 31, 45, 0, 0, 0, 0, kErf, 0},
      {"bf16_batch3_shared_b_trans_b", BF16, 3, 33, 47, 29, 0, 1, 1, 0, 0, 0},
      {"f16", F16, 1, 33, 47, 29, 0, 0, 0, 0, 0, 0},
      // An empty inner dimension: act(bias) in every row, or C unchanged.
      {"f32_k0_bias_gelu_tanh", F32, 2, 5, 7, 0, 0, 0, 0, 1, kTanh, 0},
      {"bf16_k0", BF16, 1, 5, 7, 0, 0, 1, 0, 0, 0, 0},
      {"f32_k0_accumulate", F32, 1, 5, 7, 0, 1, 0, 0, 0, 0, 1}};
  for (const GemmCase &g : gemms)
    add(std::string("gemm_") + g.name, [g](Case &t) {
      // f32 sums in another order: within kSum, looser for long ones.
      Tol tol = g.dt != F32 ? kDefault : g.k > 100 ? Tol{1e-4, 1e-4} : kSum;
      int64_t count = g.batch * g.m * g.n;
      void *a = t.rand(g.dt, g.batch * g.m * g.k, -1, 1);
      void *b = t.rand(g.dt, (g.sharedB ? 1 : g.batch) * g.k * g.n, -1, 1);
      void *bias = g.bias ? t.rand(g.dt, g.n, -1, 1) : nullptr;
      void *c = g.accumulate
                    ? t.keep("c", t.rand(g.dt, count, -1, 1), g.dt, count, tol)
                    : t.out("c", g.dt, count, tol);
      RT.gemm(t.ctx, 1, g.batch, g.m, g.n, g.k, a, g.dt, g.m * g.k, g.transA, b,
              g.dt, g.sharedB ? 0 : g.k * g.n, g.transB, c, g.dt, bias, g.dt,
              g.act, g.accumulate);
    });

  // The GEMM that keeps its pre-activation: c = act(aux), aux = A B + bias.
  // N a multiple of 8 (the CUDA target's rule for GELU's aux), or not: the
  // activation after the GEMM (bf16 and f16: on its f32 sums).
  struct GemmAuxCase {
    const char *name;
    int64_t dt, m, n, k, transB, bias, act;
  };
  const GemmAuxCase gemmAux[] = {
      {"f32_bias_gelu_tanh", F32, 33, 48, 29, 0, 1, kTanh},
      {"f32_gelu_tanh_trans_b", F32, 33, 48, 29, 1, 0, kTanh},
      {"f32_bias_relu", F32, 33, 48, 29, 0, 1, kRelu},
      {"f32_bias_gelu_erf", F32, 33, 48, 29, 1, 1, kErf},
      {"bf16_bias_gelu_tanh", BF16, 33, 48, 29, 0, 1, kTanh},
      {"bf16_bias_gelu_erf", BF16, 33, 48, 29, 0, 1, kErf},
      {"bf16_bias_gelu_tanh_n_odd", BF16, 33, 45, 29, 1, 1, kTanh},
      {"f16_bias_relu", F16, 33, 48, 29, 0, 1, kRelu}};
  for (const GemmAuxCase &g : gemmAux)
    add(std::string("gemm_aux_") + g.name, [g](Case &t) {
      Tol tol = g.dt != F32 ? kDefault : kSum;
      void *a = t.rand(g.dt, g.m * g.k, -1, 1);
      void *b = t.rand(g.dt, g.k * g.n, -1, 1);
      void *bias = g.bias ? t.rand(g.dt, g.n, -1, 1) : nullptr;
      void *c = t.out("c", g.dt, g.m * g.n, tol);
      void *aux = t.out("aux", g.dt, g.m * g.n, tol);
      RT.gemm_aux(t.ctx, 1, g.m, g.n, g.k, a, g.dt, 0, b, g.dt, g.transB, c,
                  g.dt, aux, g.dt, bias, g.dt, g.act);
    });

  // The backward epilogues. dact: c = (A B) * act'(aux), N a multiple of 8
  // (DGELU's aux rule) or not (the gradient after the GEMM). bgrad: c = A B
  // and the sums of op(A) (operand 0) or op(B) (1) over k, as the weight
  // gradients x^T dz and dz^T x call it.
  struct GemmDactCase {
    const char *name;
    int64_t dt, n, transB, act;
  };
  const GemmDactCase gemmDact[] = {{"f32_gelu_tanh", F32, 48, 1, kTanh},
                                   {"f32_gelu_tanh_n_odd", F32, 45, 1, kTanh},
                                   {"f32_relu", F32, 48, 1, kRelu},
                                   {"f32_gelu_erf", F32, 48, 0, kErf},
                                   {"bf16_gelu_tanh", BF16, 48, 1, kTanh}};
  for (const GemmDactCase &g : gemmDact)
    add(std::string("gemm_dact_") + g.name, [g](Case &t) {
      const int64_t m = 33, k = 29;
      Tol tol = g.dt != F32 ? kDefault : kSum;
      void *a = t.rand(g.dt, m * k, -1, 1);
      void *b = t.rand(g.dt, k * g.n, -1, 1);
      void *aux = t.rand(g.dt, m * g.n, -3, 3);
      void *c = t.out("c", g.dt, m * g.n, tol);
      RT.gemm_dact(t.ctx, 1, m, g.n, k, a, g.dt, 0, b, g.dt, g.transB, c, g.dt,
                   aux, g.dt, g.act);
    });
  struct GemmBgradCase {
    const char *name;
    int64_t dt, transA, transB, operand;
  };
  const GemmBgradCase gemmBgrad[] = {{"f32_xt_dz", F32, 1, 0, 1},
                                     {"f32_dzt_x", F32, 1, 0, 0},
                                     {"f32_a_rows", F32, 0, 0, 0},
                                     {"f32_b_trans", F32, 0, 1, 1},
                                     {"bf16_xt_dz", BF16, 1, 0, 1}};
  for (const GemmBgradCase &g : gemmBgrad)
    add(std::string("gemm_bgrad_") + g.name, [g](Case &t) {
      const int64_t m = 40, n = 24, k = 67;
      Tol tol = g.dt != F32 ? kDefault : kSum;
      void *a = t.rand(g.dt, m * k, -1, 1);
      void *b = t.rand(g.dt, k * n, -1, 1);
      void *c = t.out("c", g.dt, m * n, tol);
      void *bgrad = t.out("bgrad", g.dt, g.operand == 0 ? m : n, tol);
      RT.gemm_bgrad(t.ctx, 1, m, n, k, a, g.dt, g.transA, b, g.dt, g.transB, c,
                    g.dt, bgrad, g.dt, g.operand);
    });
  // The same three with an empty inner dimension: aux the bias and c its
  // activation; zero times the activation's gradient; zero and a bias
  // gradient of no terms.
  add("gemm_aux_k0_bias_relu", [](Case &t) {
    void *a = t.rand(F32, 1, -1, 1), *b = t.rand(F32, 1, -1, 1);
    void *bias = t.rand(F32, 9, -1, 1);
    void *c = t.out("c", F32, 4 * 9), *aux = t.out("aux", F32, 4 * 9);
    RT.gemm_aux(t.ctx, 1, 4, 9, 0, a, F32, 0, b, F32, 0, c, F32, aux, F32, bias,
                F32, kRelu);
  });
  add("gemm_dact_k0_bf16", [](Case &t) {
    void *a = t.rand(BF16, 1, -1, 1), *b = t.rand(BF16, 1, -1, 1);
    void *aux = t.rand(BF16, 4 * 16, -3, 3);
    void *c = t.out("c", BF16, 4 * 16);
    RT.gemm_dact(t.ctx, 1, 4, 16, 0, a, BF16, 0, b, BF16, 1, c, BF16, aux, BF16,
                 kTanh);
  });
  add("gemm_bgrad_k0", [](Case &t) {
    void *a = t.rand(F32, 1, -1, 1), *b = t.rand(F32, 1, -1, 1);
    void *c = t.keep("c", t.rand(F32, 5 * 7, -1, 1), F32, 5 * 7);
    void *bgrad = t.keep("bgrad", t.rand(F32, 7, -1, 1), F32, 7);
    RT.gemm_bgrad(t.ctx, 1, 5, 7, 0, a, F32, 1, b, F32, 0, c, F32, bgrad, F32,
                  1);
  });

  // Binary ops over an output of [5, 37, 41]: a's and b's strides over it.
  auto binary = [&](const std::string &name, int64_t op, int64_t dt,
                    int64_t aCount, std::array<int64_t, 3> sa, int64_t bCount,
                    std::array<int64_t, 3> sb, double bLo, double bHi) {
    add("binary_" + name, [=](Case &t) {
      const int64_t desc[9] = {5,     37,    41,    sa[0], sa[1],
                               sa[2], sb[0], sb[1], sb[2]};
      void *a = isInteger(dt) ? t.rand(dt, aCount, -100, 100)
                              : t.rand(dt, aCount, -1, 1);
      void *b = t.rand(dt, bCount, bLo, bHi);
      void *o = t.out("out", dt, 5 * 37 * 41);
      RT.binary(t.ctx, 1, op, o, dt, a, dt, b, dt, 3, desc);
    });
  };
  const int64_t kFull = 5 * 37 * 41;
  binary("add_f32_row_broadcast", STRATA_RT_ADD, F32, kFull, {1517, 41, 1}, 37,
         {0, 1, 0}, -1, 1);
  binary("sub_f32_transposed", STRATA_RT_SUB, F32, kFull, {1517, 1, 37}, 41,
         {0, 0, 1}, -1, 1);
  binary("mul_f32_flat", STRATA_RT_MUL, F32, kFull, {1517, 41, 1}, kFull,
         {1517, 41, 1}, -1, 1);
  binary("div_f32_broadcast", STRATA_RT_DIV, F32, kFull, {1517, 41, 1}, 185,
         {37, 1, 0}, 0.5, 2);
  binary("add_bf16_broadcast", STRATA_RT_ADD, BF16, 205, {41, 0, 1}, kFull,
         {1517, 41, 1}, -1, 1);
  binary("mul_i32_broadcast", STRATA_RT_MUL, I32, kFull, {1517, 41, 1}, 37,
         {0, 1, 0}, -100, 100);
  // Dense bf16 and f16 (16 bytes a load, an odd count: a tail).
  binary("add_bf16_flat", STRATA_RT_ADD, BF16, kFull, {1517, 41, 1}, kFull,
         {1517, 41, 1}, -1, 1);
  binary("sub_f16_flat", STRATA_RT_SUB, F16, kFull, {1517, 41, 1}, kFull,
         {1517, 41, 1}, -1, 1);
  // Dense, in place (out is a), and with a one element past an aligned
  // start (the loop without 16-byte vectors).
  add("binary_add_f32_flat_in_place", [=](Case &t) {
    const int64_t desc[9] = {5, 37, 41, 1517, 41, 1, 1517, 41, 1};
    void *a = t.keep("out", t.rand(F32, kFull, -1, 1), F32, kFull);
    void *b = t.rand(F32, kFull, -1, 1);
    RT.binary(t.ctx, 1, STRATA_RT_ADD, a, F32, a, F32, b, F32, 3, desc);
  });
  add("binary_mul_bf16_flat_unaligned", [=](Case &t) {
    const int64_t desc[9] = {5, 37, 41, 1517, 41, 1, 1517, 41, 1};
    void *a = static_cast<char *>(t.rand(BF16, kFull + 1, -1, 1)) + 2;
    void *b = t.rand(BF16, kFull, -1, 1);
    void *o = t.out("out", BF16, kFull);
    RT.binary(t.ctx, 1, STRATA_RT_MUL, o, BF16, a, BF16, b, BF16, 3, desc);
  });

  // Unary ops and activation gradients.
  const std::pair<int64_t, const char *> unaryOps[] = {
      {STRATA_RT_ACT_NONE, "none"},
      {STRATA_RT_ACT_RELU, "relu"},
      {STRATA_RT_ACT_GELU_TANH, "gelu_tanh"},
      {STRATA_RT_ACT_GELU_ERF, "gelu_erf"},
      {STRATA_RT_UNARY_SCALE, "scale"},
      {STRATA_RT_ACT_SILU, "silu"},
      {STRATA_RT_UNARY_RSQRT, "rsqrt"},
      {STRATA_RT_UNARY_TANH, "tanh"}};
  auto unary = [&](int64_t op, const char *opName, int64_t dt, int64_t n) {
    add(std::string("unary_") + opName + "_" + dtypeName[dt], [=](Case &t) {
      bool positive = op == STRATA_RT_UNARY_RSQRT;
      void *in = t.rand(dt, n, positive ? 0.05 : -5, 5);
      void *o = t.out("out", dt, n);
      RT.unary(t.ctx, 1, op, o, dt, in, dt, n, 0.75);
    });
  };
  for (auto [op, opName] : unaryOps)
    unary(op, opName, F32, 3001);
  unary(STRATA_RT_ACT_GELU_TANH, "gelu_tanh", BF16, 1025);
  unary(STRATA_RT_ACT_SILU, "silu", F16, 777);
  unary(STRATA_RT_UNARY_SCALE, "scale", F16, 513);
  // The CPU runtime has no gradient of tanh (it refuses the code).
  auto actGrad = [&](int64_t act, const char *actName, int64_t dt, int64_t n) {
    add(std::string("act_grad_") + actName + "_" + dtypeName[dt], [=](Case &t) {
      void *x = t.rand(dt, n, -5, 5), *dy = t.rand(dt, n, -1, 1);
      void *o = t.out("out", dt, n);
      RT.act_grad(t.ctx, 1, act, o, dt, x, dt, dy, dt, n);
    });
  };
  for (auto [op, opName] : unaryOps)
    if (op != STRATA_RT_UNARY_SCALE && op != STRATA_RT_UNARY_RSQRT &&
        op != STRATA_RT_UNARY_TANH)
      actGrad(op, opName, F32, 2049);
  actGrad(STRATA_RT_ACT_GELU_TANH, "gelu_tanh", BF16, 1000);
  actGrad(STRATA_RT_ACT_RELU, "relu", F16, 300);

  // Casts (exact: one rounding to nearest even) and copies.
  auto cast = [&](int64_t from, int64_t to, double range) {
    add(std::string("cast_") + dtypeName[from] + "_to_" + dtypeName[to],
        [=](Case &t) {
          void *in = t.rand(from, 1001, -range, range);
          void *o = t.out("out", to, 1001, kExact);
          RT.cast(t.ctx, 1, o, to, in, from, 1001);
        });
  };
  cast(F32, BF16, 100);
  cast(F32, F16, 1000);
  cast(BF16, F32, 100);
  cast(F16, BF16, 1000);
  cast(BF16, F16, 10);
  for (int64_t dt : {F32, I64, BF16})
    add(std::string("copy_") + dtypeName[dt], [=](Case &t) {
      void *in = t.rand(dt, 1001, -1000, 1000);
      void *o = t.out("out", dt, 1001, kExact);
      RT.copy(t.ctx, 1, o, in, dt, 1001);
    });
  // Strided copies: desc = the output shape, the input strides, the base.
  auto strided = [&](const std::string &name, int64_t dt, int64_t inCount,
                     std::array<int64_t, 7> desc) {
    add("strided_copy_" + name, [=](Case &t) {
      void *in = t.rand(dt, inCount, -1000, 1000);
      void *o = t.out("out", dt, desc[0] * desc[1] * desc[2], kExact);
      RT.strided_copy(t.ctx, 1, o, in, dt, 3, desc.data());
    });
  };
  // [4, 37, 29] -> [29, 4, 37].
  strided("transpose_f32", F32, 4 * 37 * 29, {29, 4, 37, 1, 1073, 29, 0});
  // [1:7:2, 5:25, 1:33:2] of [6, 40, 33].
  strided("slice_step_bf16", BF16, 6 * 40 * 33,
          {3, 20, 16, 2640, 33, 2, 1320 + 5 * 33 + 1});
  // [2:4, 2:9, 3:48] of [4, 10, 50].
  strided("slice_i64", I64, 2000, {2, 7, 45, 1000, 50, 1, 103});
  // [5:40, 4:33] of [40, 37]: rows of contiguous elements a pitch apart
  // (the gemm padding's slice; a 2D copy on the GPU).
  strided("slice_rows_bf16", BF16, 40 * 37, {1, 35, 29, 0, 37, 1, 5 * 37 + 4});
  // [5, 40] broadcast to [3, 5, 40].
  strided("broadcast_f16", F16, 200, {3, 5, 40, 0, 40, 1, 0});
  // Two inputs of 37 rows (13 and 20 wide) concatenated into rows of 33.
  for (int64_t dt : {F32, F16})
    add(std::string("copy_rows_") + dtypeName[dt], [=](Case &t) {
      void *a = t.rand(dt, 37 * 13, -1, 1), *b = t.rand(dt, 37 * 20, -1, 1);
      void *o = t.out("out", dt, 37 * 33, kExact);
      RT.copy_rows(t.ctx, 1, o, a, dt, 37, 13, 33, 0);
      RT.copy_rows(t.ctx, 2, o, b, dt, 37, 20, 33, 13);
    });

  // Reductions: desc = the input shape, then the output strides over it.
  auto reduce = [&](const std::string &name, int64_t dt,
                    std::array<int64_t, 6> desc, int64_t outCount,
                    double scale) {
    add("reduce_" + name, [=](Case &t) {
      void *in = t.rand(dt, desc[0] * desc[1] * desc[2], -1, 1);
      void *o = t.out("out", dt, outCount);
      RT.reduce(t.ctx, 1, o, dt, in, dt, 3, desc.data(), scale);
    });
  };
  reduce("dims02_f32", F32, {7, 33, 45, 0, 1, 0}, 33, 0.5);
  reduce("last_f32", F32, {7, 33, 1030, 33, 1, 0}, 7 * 33, 1.0);
  reduce("dim0_bf16", BF16, {9, 5, 70, 0, 70, 1}, 350, 0.5);
  // Rank 10 with dimensions of size 1 and mergeable ones: at most three
  // remain after collapsing (a kernel parameter holds eight).
  add("strided_copy_rank10_transpose_f32", [](Case &t) {
    // [4, 3, 2] read as [2, 1, 3, 1, 1, 1, 1, 1, 1, 4] (its transpose).
    const std::vector<int64_t> desc = {2, 1, 3, 1, 1, 1, 1, 1, 1, 4, 1,
                                       0, 2, 0, 0, 0, 0, 0, 0, 6, 0};
    void *in = t.rand(F32, 24, -1000, 1000);
    void *o = t.out("out", F32, 24, kExact);
    RT.strided_copy(t.ctx, 1, o, in, F32, 10, desc.data());
  });
  add("reduce_rank10_f32", [](Case &t) {
    // [2, 1, 3, 1, 1, 1, 1, 1, 4, 5] summed over dimensions 0 and 8.
    const std::vector<int64_t> desc = {2, 1,  3, 1, 1, 1, 1, 1, 4, 5,
                                       0, 15, 5, 5, 5, 5, 5, 5, 0, 1};
    void *in = t.rand(F32, 120, -1, 1);
    void *o = t.out("out", F32, 15);
    RT.reduce(t.ctx, 1, o, F32, in, F32, 10, desc.data(), 1.0);
  });

  auto fill = [&](int64_t dt, int64_t n, double value) {
    add(std::string("fill_") + dtypeName[dt], [=](Case &t) {
      RT.fill(t.ctx, 1, t.out("out", dt, n, kExact), dt, n, value);
    });
  };
  fill(F32, 1001, 0.3);
  fill(I64, 77, -5);
  fill(BF16, 100, 1.7);
  fill(I32, 50, 123);

  // Dropout: the masks must match bit for bit.
  auto dropout = [&](const std::string &name, int64_t dt, int64_t n,
                     bool residual, int64_t key, int64_t microBatches,
                     int64_t microBatch) {
    add("dropout_" + name, [=](Case &t) {
      void *in = t.rand(dt, n, -1, 1);
      void *r = residual ? t.rand(dt, n, -1, 1) : nullptr;
      void *o = t.out("out", dt, n, kExact);
      RT.dropout(t.ctx, 1, o, dt, in, dt, r, dt, n, key, microBatches,
                 microBatch, 0.1);
    });
  };
  dropout("f32_residual", F32, 1027, true, 7, 2, 1);
  dropout("bf16", BF16, 4103, false, 11, 1, 0);
  dropout("f32_large", F32, 70001, false, 3, 3, 2);

  // Softmax and its gradient.
  auto softmax = [&](const std::string &name, int64_t dt, int64_t rows,
                     int64_t n, int64_t causalRows) {
    add("softmax_" + name, [=](Case &t) {
      void *in = t.rand(dt, rows * n, -5, 5);
      void *o = t.out("out", dt, rows * n);
      RT.softmax(t.ctx, 1, o, dt, in, dt, rows, n, causalRows);
    });
  };
  softmax("f32", F32, 37, 1500, 0);
  softmax("f32_causal", F32, 74, 37, 37);
  softmax("bf16", BF16, 19, 100, 0);
  softmax("f16_causal", F16, 40, 40, 40);
  // The warp-per-row kernels' edges: rows shorter than a warp and a row
  // count that leaves a block's last warps without a row; the longest
  // row a warp takes and the shortest a block takes.
  softmax("f32_short", F32, 13, 7, 0);
  softmax("f32_1024", F32, 9, 1024, 0);
  softmax("bf16_1025", BF16, 9, 1025, 0);
  auto softmaxGrad = [&](int64_t dt, int64_t rows, int64_t n) {
    add(std::string("softmax_grad_") + dtypeName[dt] + "_" + std::to_string(n),
        [=](Case &t) {
          void *y = t.rand(dt, rows * n, 0, 1),
               *dy = t.rand(dt, rows * n, -1, 1);
          // dx = y (dy - sum(y dy)): a row's sum in the backend's order, then
          // a difference that cancels.
          void *o = t.out("dx", dt, rows * n, dt == F32 ? kSum : kDefault);
          RT.softmax_grad(t.ctx, 1, o, dt, y, dt, dy, dt, rows, n);
        });
  };
  softmaxGrad(F32, 37, 1100);
  softmaxGrad(BF16, 19, 100);
  softmaxGrad(F16, 13, 20);
  softmaxGrad(F32, 9, 1024);

  // Attention (q, k, v and the gradients in `dt`, the log-sum-exp f32;
  // [batch, sequence, heads, head size]); the gradient after the forward
  // pass it needs. `dropout`: the probabilities' dropout, micro-batch 1 of
  // 2 (the same mask on both runtimes). `kvHeads`: the key and value heads
  // (grouped-query attention), 0 for `heads`.
  auto attention = [&](const std::string &name, int64_t dt, int64_t batch,
                       int64_t heads, int64_t s, int64_t t, int64_t d,
                       int64_t dv, bool causal, double dropout = 0,
                       int64_t kvHeads = 0) {
    const double scale = 1 / std::sqrt(double(d));
    if (kvHeads == 0)
      kvHeads = heads;
    const int64_t bh = batch * heads, bkv = batch * kvHeads;
    Tol tol = dt == F32 ? kSum : kDefault;
    for (bool grad : {false, true})
      add((grad ? "attention_grad_" : "attention_") + name, [=](Case &c) {
        void *q = c.rand(dt, bh * s * d, -1, 1);
        void *k = c.rand(dt, bkv * t * d, -1, 1);
        void *v = c.rand(dt, bkv * t * dv, -1, 1);
        void *o = c.out("out", dt, bh * s * dv, tol);
        void *lse = c.out("lse", F32, bh * s, kSum);
        RT.attention(c.ctx, 1, o, dt, lse, F32, q, dt, k, dt, v, dt, batch,
                     heads, kvHeads, s, t, d, dv, scale, causal, dropout, 7, 2,
                     1);
        if (!grad)
          return;
        void *dout = c.rand(dt, bh * s * dv, -1, 1);
        void *dq = c.out("dq", dt, bh * s * d, tol);
        void *dk = c.out("dk", dt, bkv * t * d, tol);
        void *dV = c.out("dv", dt, bkv * t * dv, tol);
        RT.attention_grad(c.ctx, 2, dq, dt, dk, dt, dV, dt, q, dt, k, dt, v, dt,
                          o, dt, lse, F32, dout, dt, batch, heads, kvHeads, s,
                          t, d, dv, scale, causal, dropout, 7, 2, 1);
      });
  };
  attention("f32", F32, 1, 3, 37, 37, 16, 16, false);
  attention("f32_causal", F32, 2, 3, 37, 37, 16, 16, true);
  attention("f32_cross", F32, 3, 2, 29, 45, 16, 24, false);
  attention("f32_causal_long", F32, 2, 1, 130, 130, 32, 32, true);
  attention("bf16_causal", BF16, 2, 3, 37, 37, 16, 16, true);
  attention("f16_cross", F16, 1, 3, 29, 45, 16, 24, false);
  attention("f32_causal_dropout", F32, 2, 3, 37, 37, 16, 16, true, 0.2);
  attention("bf16_cross_dropout", BF16, 1, 3, 29, 45, 16, 24, false, 0.1);
  // GPT-2's head size over several blocks of 64 queries and keys, with a
  // partial last block (the flash kernels' tiles).
  attention("bf16_causal_long_dropout", BF16, 2, 2, 130, 130, 64, 64, true,
            0.1);
  attention("f16_cross_long", F16, 1, 2, 100, 150, 64, 40, false);
  // Causal with key blocks past every query (their dK and dV are zeros),
  // and the largest head size the flash kernels take.
  attention("bf16_causal_more_keys", BF16, 1, 2, 40, 200, 64, 64, true);
  attention("f16_causal_head128", F16, 1, 2, 130, 130, 128, 128, true, 0.1);
  // Grouped-query attention: key and value heads shared by 2 and 4 query
  // heads (their gradients summed over the group), on the chunked products
  // (f32) and the flash kernels.
  attention("f32_causal_grouped", F32, 2, 4, 37, 37, 16, 16, true, 0.2, 2);
  attention("f16_cross_grouped", F16, 1, 6, 29, 45, 16, 24, false, 0, 3);
  attention("bf16_causal_long_grouped", BF16, 2, 4, 130, 130, 64, 64, true, 0.1,
            1);

  // Layer norm and its gradient.
  auto layerNorm = [&](const std::string &name, int64_t dt, int64_t rows,
                       int64_t n) {
    Tol tol = dt == F32 ? kSum : kDefault;
    add("layer_norm_" + name, [=](Case &t) {
      void *x = t.rand(dt, rows * n, -1, 3);
      void *g = t.rand(dt, n, 0.5, 1.5), *b = t.rand(dt, n, -0.5, 0.5);
      void *y = t.out("y", dt, rows * n, tol);
      RT.layer_norm(t.ctx, 1, y, dt, x, dt, g, dt, b, dt, rows, n, 1e-5);
    });
    add("layer_norm_grad_" + name, [=](Case &t) {
      void *x = t.rand(dt, rows * n, -1, 3), *g = t.rand(dt, n, 0.5, 1.5);
      void *dy = t.rand(dt, rows * n, -1, 1);
      void *dx = t.out("dx", dt, rows * n, tol);
      void *dg = t.out("dgamma", dt, n, tol), *db = t.out("dbeta", dt, n, tol);
      RT.layer_norm_grad(t.ctx, 1, dx, dt, dg, dt, db, dt, x, dt, g, dt, dy, dt,
                         rows, n, 1e-5);
    });
    add("rms_norm_" + name, [=](Case &t) {
      void *x = t.rand(dt, rows * n, -1, 3), *g = t.rand(dt, n, 0.5, 1.5);
      void *y = t.out("y", dt, rows * n, tol);
      RT.rms_norm(t.ctx, 1, y, dt, x, dt, g, dt, rows, n, 1e-6);
    });
    add("rms_norm_grad_" + name, [=](Case &t) {
      void *x = t.rand(dt, rows * n, -1, 3), *g = t.rand(dt, n, 0.5, 1.5);
      void *dy = t.rand(dt, rows * n, -1, 1);
      void *dx = t.out("dx", dt, rows * n, tol);
      void *dg = t.out("dgamma", dt, n, tol);
      RT.rms_norm_grad(t.ctx, 1, dx, dt, dg, dt, x, dt, g, dt, dy, dt, rows, n,
                       1e-6);
    });
  };
  layerNorm("f32_wide", F32, 37, 1500);
  layerNorm("f32", F32, 67, 64);
  layerNorm("bf16", BF16, 33, 257);
  layerNorm("f16", F16, 10, 1030);
  layerNorm("bf16_short", BF16, 13, 24);
  layerNorm("f32_1024", F32, 9, 1024);
  // 32 chunks of rows for dgamma and dbeta (4 per warp of the CUDA
  // runtime's sum of them).
  layerNorm("f32_tall", F32, 1000, 300);

  // Embeddings (the forward copies rows: exact; the gradient sums repeated
  // ids).
  auto embedding = [&](int64_t dt, int64_t idType, int64_t vocab, int64_t width,
                       int64_t count) {
    std::string suffix = std::string(dtypeName[dt]) + "_" + dtypeName[idType];
    add("embedding_" + suffix, [=](Case &t) {
      void *table = t.rand(dt, vocab * width, -1, 1);
      void *ids = t.rand(idType, count, 0, vocab);
      void *o = t.out("out", dt, count * width, kExact);
      RT.embedding(t.ctx, 1, o, dt, table, dt, ids, idType, count, vocab,
                   width);
    });
    // The second case leaves out the ids of a padding row.
    for (int64_t padding : {int64_t(-1), int64_t(1)})
      add("embedding_grad_" + suffix + (padding >= 0 ? "_padding" : ""),
          [=](Case &t) {
            void *ids = t.rand(idType, count, 0, vocab / 4 + 1);
            void *dy = t.rand(dt, count * width, -1, 1);
            void *o = t.out("dtable", dt, vocab * width);
            RT.embedding_grad(t.ctx, 1, o, dt, ids, idType, dy, dt, count,
                              vocab, width, padding);
          });
  };
  embedding(F32, I64, 50, 70, 150);
  embedding(BF16, I32, 1000, 33, 77);

  // Cross entropy, its loss and gradient, over rows of `width` elements
  // (the padding past `vocab` never read, its gradient zero); `inPlace`:
  // the gradient written over the logits, as the memory plan lets it.
  auto crossEntropy = [&](int64_t dt, int64_t labelType, int64_t rows,
                          int64_t vocab, int64_t width, bool inPlace = false) {
    add(std::string("cross_entropy_") + dtypeName[dt] + "_" +
            dtypeName[labelType] + "_" + std::to_string(vocab) +
            (width != vocab ? "_of_" + std::to_string(width) : "") +
            (inPlace ? "_in_place" : ""),
        [=](Case &t) {
          void *logits = t.rand(dt, rows * width, -4, 4);
          void *labels = t.rand(labelType, rows, 0, vocab);
          // The loss and its gradient are f32 whatever the logits' type.
          void *dloss = t.vals(F32, {2.5});
          void *loss = t.out("loss", F32, 1);
          // (Drawn: the padding's zeros must be written.)
          void *dlogits =
              inPlace ? t.keep("dlogits", logits, dt, rows * width)
                      : t.keep("dlogits", t.rand(dt, rows * width, -1, 1), dt,
                               rows * width);
          RT.cross_entropy(t.ctx, 1, loss, F32, logits, dt, labels, labelType,
                           rows, vocab, width);
          RT.cross_entropy_grad(t.ctx, 2, dlogits, dt, logits, dt, labels,
                                labelType, dloss, F32, rows, vocab, width);
        });
  };
  crossEntropy(F32, I64, 37, 1000, 1000);
  crossEntropy(F32, I32, 37, 333, 333);
  crossEntropy(BF16, I64, 16, 500, 500);
  // GPT-2's odd vocabulary: many elements a thread, its running maximum
  // and rescaled sum; and in rows padded to a multiple of 64.
  crossEntropy(BF16, I32, 3, 50257, 50257);
  crossEntropy(BF16, I32, 3, 50257, 50304);
  crossEntropy(F16, I32, 5, 777, 777);
  crossEntropy(F32, I64, 7, 333, 400);
  crossEntropy(BF16, I32, 3, 50257, 50304, /*inPlace=*/true);
  crossEntropy(F32, I64, 7, 333, 400, /*inPlace=*/true);
  // Masked logits (-inf, at the start of threads' shares too) and a row
  // with a NaN: the same losses and gradients as the CPU's two passes
  // (finite where only -inf is masked, NaN where a NaN is).
  for (int64_t dt : {F32, BF16})
    add(std::string("cross_entropy_masked_") + dtypeName[dt], [=](Case &t) {
      const int64_t rows = 3, vocab = 2000;
      std::vector<double> v(rows * vocab);
      for (int64_t i = 0; i < rows * vocab; ++i)
        v[i] = i % 7 == 0 || i % vocab < 64 ? -INFINITY
                                            : double(i % 13) * 0.25 - 1.5;
      v[2 * vocab + 500] = NAN;
      void *logits = t.vals(dt, v);
      void *labels = t.vals(I32, {100, 1999, 7});
      void *dloss = t.vals(F32, {1.0});
      void *loss = t.out("loss", F32, 1);
      void *lossFirst = t.out("loss_first_rows", F32, 1);
      void *dlogits = t.out("dlogits", dt, rows * vocab);
      RT.cross_entropy(t.ctx, 1, loss, F32, logits, dt, labels, I32, rows,
                       vocab, vocab);
      RT.cross_entropy(t.ctx, 2, lossFirst, F32, logits, dt, labels, I32,
                       rows - 1, vocab, vocab);
      RT.cross_entropy_grad(t.ctx, 3, dlogits, dt, logits, dt, labels, I32,
                            dloss, F32, rows, vocab, vocab);
    });

  // Calls both runtimes refuse, with the same site and message: arguments
  // outside the ABI's contract, and ids and labels out of range (the first
  // by position; the CUDA runtime finds them on the device and reports them
  // at the step's end).
  refusal("gemm_accumulate_bias", [](Case &t) {
    void *a = t.rand(F32, 6, -1, 1), *b = t.rand(F32, 6, -1, 1);
    void *bias = t.rand(F32, 2, -1, 1), *c = t.rand(F32, 4, -1, 1);
    RT.gemm(t.ctx, 1, 1, 2, 2, 3, a, F32, 0, 0, b, F32, 0, 0, c, F32, bias, F32,
            STRATA_RT_ACT_NONE, 1);
  });
  refusal("gemm_negative_size", [](Case &t) {
    void *a = t.rand(F32, 6, -1, 1), *b = t.rand(F32, 6, -1, 1);
    void *c = t.out("c", F32, 4);
    RT.gemm(t.ctx, 1, 1, 2, -2, 3, a, F32, 0, 0, b, F32, 0, 0, c, F32, nullptr,
            F32, STRATA_RT_ACT_NONE, 0);
  });
  refusal("binary_i32_division", [](Case &t) {
    const int64_t desc[3] = {5, 1, 1};
    void *a = t.rand(I32, 5, 1, 9), *b = t.rand(I32, 5, 1, 9);
    void *o = t.out("out", I32, 5);
    RT.binary(t.ctx, 1, STRATA_RT_DIV, o, I32, a, I32, b, I32, 1, desc);
  });
  refusal("attention_causal_more_queries", [](Case &t) {
    void *q = t.rand(F32, 5 * 8, -1, 1), *k = t.rand(F32, 3 * 8, -1, 1);
    void *v = t.rand(F32, 3 * 8, -1, 1);
    void *o = t.out("out", F32, 5 * 8), *lse = t.out("lse", F32, 5);
    RT.attention(t.ctx, 1, o, F32, lse, F32, q, F32, k, F32, v, F32, 1, 1, 1, 5,
                 3, 8, 8, 0.25, 1, 0.0, 7, 1, 0);
  });
  refusal("attention_kv_heads_not_dividing", [](Case &t) {
    void *q = t.rand(F32, 4 * 3 * 8, -1, 1), *k = t.rand(F32, 4 * 2 * 8, -1, 1);
    void *v = t.rand(F32, 4 * 2 * 8, -1, 1);
    void *o = t.out("out", F32, 4 * 3 * 8), *lse = t.out("lse", F32, 3 * 4);
    RT.attention(t.ctx, 1, o, F32, lse, F32, q, F32, k, F32, v, F32, 1, 3, 2, 4,
                 4, 8, 8, 0.25, 0, 0.0, 7, 1, 0);
  });
  refusal("embedding_bad_id", [](Case &t) {
    void *table = t.rand(F32, 4 * 3, -1, 1);
    void *ids = t.vals(I32, {0, 3, 9, 1, -2});
    void *o = t.out("out", F32, 5 * 3);
    RT.embedding(t.ctx, 1, o, F32, table, F32, ids, I32, 5, 4, 3);
  });
  refusal("cross_entropy_bad_label", [](Case &t) {
    void *logits = t.rand(BF16, 4 * 10, -1, 1);
    void *labels = t.vals(I64, {1, 9, 10, 11});
    void *loss = t.out("loss", F32, 1);
    RT.cross_entropy(t.ctx, 1, loss, F32, logits, BF16, labels, I64, 4, 10, 10);
  });
  refusal("gemm_aux_unknown_activation", [](Case &t) {
    void *a = t.rand(BF16, 4 * 8, -1, 1), *b = t.rand(BF16, 8 * 8, -1, 1);
    void *c = t.out("c", BF16, 4 * 8), *aux = t.out("aux", BF16, 4 * 8);
    RT.gemm_aux(t.ctx, 1, 4, 8, 8, a, BF16, 0, b, BF16, 0, c, BF16, aux, BF16,
                nullptr, BF16, 99);
  });
  refusal("cross_entropy_classes_past_the_row", [](Case &t) {
    void *logits = t.rand(F32, 4 * 10, -1, 1);
    void *labels = t.vals(I64, {1, 2, 3, 4});
    void *dloss = t.vals(F32, {1.0});
    void *dlogits = t.out("dlogits", F32, 4 * 10);
    RT.cross_entropy_grad(t.ctx, 1, dlogits, F32, logits, F32, labels, I64,
                          dloss, F32, 4, 11, 10);
  });

  // Optimizer support.
  add("lr_schedule", [](Case &t) {
    // Constant, linear warmup (10 steps), cosine (10 + 100 steps).
    const int64_t kinds[] = {0, 1, 1, 1, 2, 2, 2, 2, 2};
    const std::vector<double> steps = {5, 3, 10, 20, 0, 5, 10, 60, 200};
    auto *step = static_cast<int64_t *>(t.vals(I64, steps));
    auto *lr = static_cast<float *>(t.out("lr", F32, int64_t(steps.size())));
    for (size_t i = 0; i < steps.size(); ++i)
      RT.lr_schedule(t.ctx, int64_t(i), lr + i, F32, step + i, I64, kinds[i],
                     0.1, 10, 100, 0.001);
  });
  auto globalNorm = [&](const std::string &name, std::array<int64_t, 3> types,
                        std::array<int64_t, 3> sizes) {
    add("global_norm_" + name, [=](Case &t) {
      const void *tensors[3];
      for (int i = 0; i < 3; ++i)
        tensors[i] = t.rand(types[i], sizes[i], -1, 1);
      void *o = t.out("norm", F32, 1);
      RT.global_norm(t.ctx, 1, o, F32, 3, tensors, types.data(), sizes.data());
    });
  };
  globalNorm("f32_bf16", {F32, BF16, F32}, {1000, 37, 20000});
  globalNorm("large", {F32, F16, BF16}, {70001, 333, 9000});
  // Loss scaling's unscale: the inverse of a scale that is no f16 number,
  // on gradients scaled up by it (beyond f16's range once unscaled: none).
  for (int64_t dt : {F32, BF16, F16})
    add(std::string("scale_by_") + dtypeName[dt], [=](Case &t) {
      void *in = t.rand(dt, 1001, -3000, 3000),
           *f = t.vals(F32, {1.0 / 26214.4});
      void *o = t.out("out", dt, 1001);
      RT.scale_by(t.ctx, 1, o, dt, in, dt, 1001, f, F32);
    });
  auto clip = [&](int64_t dt, double norm) {
    add(std::string("clip_") + dtypeName[dt], [=](Case &t) {
      void *in = t.rand(dt, 1001, -1, 1), *nm = t.vals(F32, {norm});
      void *o = t.out("out", dt, 1001);
      RT.clip(t.ctx, 1, o, dt, in, dt, 1001, nm, F32, 1.0);
    });
  };
  clip(F32, 5.0);
  clip(BF16, 0.5);

  const int64_t kN = 1001;
  // SGD of an f32 parameter, and of an f16 one with an f32 master weight.
  for (int64_t low : {F32, F16})
    add(low == F32 ? "sgd_f32" : "sgd_f16_master", [=](Case &t) {
      bool master = low != F32;
      void *p = t.rand(low, kN, -1, 1), *g = t.rand(F32, kN, -1, 1);
      void *mw = master ? t.rand(F32, kN, -1, 1) : nullptr;
      void *lr = t.vals(F32, {0.05}), *np = t.out("param", low, kN);
      void *nmw = master ? t.out("master", F32, kN) : nullptr;
      RT.sgd(t.ctx, 1, np, low, p, low, g, F32, lr, F32, kN, 0.01, nullptr, F32,
             nmw, F32, mw, F32);
    });
  for (int64_t nesterov : {0, 1})
    add(nesterov ? "momentum_nesterov" : "momentum", [=](Case &t) {
      void *p = t.rand(F32, kN, -1, 1), *g = t.rand(F32, kN, -1, 1);
      void *v = t.rand(F32, kN, -0.1, 0.1), *lr = t.vals(F32, {0.05});
      void *np = t.out("param", F32, kN), *nv = t.out("velocity", F32, kN);
      RT.momentum(t.ctx, 1, np, F32, nv, F32, p, F32, g, F32, v, F32, lr, F32,
                  kN, 0.9, 1e-4, nesterov, nullptr, F32, nullptr, F32, nullptr,
                  F32);
    });
  // Adam's family; `guard` < 0: none; `lowType` F32: no master weight.
  auto adam = [&](const std::string &name, int64_t kind, double guard,
                  int64_t lowType) {
    add("adam_" + name, [=](Case &t) {
      bool master = lowType != F32;
      Tol tol = std::isinf(guard) ? kExact : kDefault;
      void *p = t.rand(lowType, kN, -1, 1), *g = t.rand(lowType, kN, -1, 1);
      void *m = t.rand(F32, kN, -0.1, 0.1), *v = t.rand(F32, kN, 0, 0.01);
      void *mw = master ? t.rand(F32, kN, -1, 1) : nullptr;
      void *lr = t.vals(F32, {0.01}), *step = t.vals(I64, {3});
      void *gd = guard >= 0 ? t.vals(F32, {guard}) : nullptr;
      void *np = t.out("param", lowType, kN, tol);
      void *nm = t.out("m", F32, kN, tol), *nv = t.out("v", F32, kN, tol);
      void *nmw = master ? t.out("master", F32, kN, tol) : nullptr;
      RT.adam(t.ctx, 1, kind, np, lowType, nm, F32, nv, F32, p, lowType, g,
              lowType, m, F32, v, F32, lr, F32, step, I64, kN, 0.9, 0.999, 1e-8,
              0.01, gd, F32, nmw, F32, mw, F32);
    });
  };
  adam("adam", STRATA_RT_ADAM, -1, F32);
  adam("adamw", STRATA_RT_ADAMW, -1, F32);
  adam("lamb", STRATA_RT_LAMB, -1, F32);
  adam("guard_inf_skips", STRATA_RT_ADAM, INFINITY, F32);
  adam("guard_finite_adamw", STRATA_RT_ADAMW, 7.5, F32);
  adam("bf16_master_adamw", STRATA_RT_ADAMW, -1, BF16);
  adam("lamb_guard_inf_bf16_master", STRATA_RT_LAMB, INFINITY, BF16);
  // A group of updates, which the CUDA runtime launches together: its Adam
  // and AdamW updates by element type and scalars, 32 tensors per launch of
  // 8192 elements per block; its other updates when called. 72 Adam-family
  // tensors: f32 (37 of them AdamW at one learning rate: two launches) and
  // bf16 with master weights; Adam and AdamW; two learning rates; weight
  // decay or none; 1 to 3 blocks each; an SGD and a LAMB update among
  // them. With `guard`, every update of the group is skipped.
  auto adamGroup = [&](const std::string &name, double guard) {
    add(name, [=](Case &t) {
      Tol tol = std::isinf(guard) ? kExact : kDefault;
      void *lr = t.vals(F32, {0.01}), *lr2 = t.vals(F32, {0.02});
      void *step = t.vals(I64, {3});
      void *gd = guard >= 0 ? t.vals(F32, {guard}) : nullptr;
      RT.updates_begin(t.ctx, 1);
      for (int i = 0; i < 72; ++i) {
        int64_t low = i % 3 == 0 ? BF16 : F32;
        int64_t kind = i % 8 == 1 ? STRATA_RT_ADAM : STRATA_RT_ADAMW;
        int64_t n = i == 5 ? 20000 : i == 17 ? 8193 : 1 + 37 * i;
        bool master = low != F32;
        std::string at = std::to_string(i);
        void *p = t.rand(low, n, -1, 1), *g = t.rand(low, n, -1, 1);
        void *m = t.rand(F32, n, -0.1, 0.1), *v = t.rand(F32, n, 0, 0.01);
        void *mw = master ? t.rand(F32, n, -1, 1) : nullptr;
        void *np = t.out("param" + at, low, n, tol);
        void *nm = t.out("m" + at, F32, n, tol);
        void *nv = t.out("v" + at, F32, n, tol);
        void *nmw = master ? t.out("master" + at, F32, n, tol) : nullptr;
        RT.adam(t.ctx, 1, i == 20 ? int64_t(STRATA_RT_LAMB) : kind, np, low, nm,
                F32, nv, F32, p, low, g, low, m, F32, v, F32,
                i % 7 == 6 ? lr2 : lr, F32, step, I64, n, 0.9, 0.999, 1e-8,
                i % 2 ? 0.01 : 0.0, gd, F32, nmw, F32, mw, F32);
        if (i == 10) {
          void *sp = t.rand(F32, kN, -1, 1), *sg = t.rand(F32, kN, -1, 1);
          void *snp = t.out("sgd_param", F32, kN, tol);
          RT.sgd(t.ctx, 1, snp, F32, sp, F32, sg, F32, lr, F32, kN, 0.01, gd,
                 F32, nullptr, F32, nullptr, F32);
        }
      }
      RT.updates_end(t.ctx, 1);
    });
  };
  adamGroup("adam_group", -1);
  adamGroup("adam_group_guard_inf_skips", INFINITY);
  add("lars", [=](Case &t) {
    void *p = t.rand(F32, kN, -1, 1), *g = t.rand(F32, kN, -1, 1);
    void *v = t.rand(F32, kN, -0.1, 0.1), *lr = t.vals(F32, {0.1});
    void *np = t.out("param", F32, kN), *nv = t.out("velocity", F32, kN);
    RT.lars(t.ctx, 1, np, F32, nv, F32, p, F32, g, F32, v, F32, lr, F32, kN,
            0.9, 1e-4, 0.02, 1e-9, nullptr, F32, nullptr, F32, nullptr, F32);
  });
  add("is_finite", [](Case &t) {
    const std::vector<double> in = {1.5, NAN, INFINITY, -0.0, -INFINITY};
    auto *x = static_cast<float *>(t.vals(F32, in));
    auto *o = static_cast<int64_t *>(t.out("finite", I64, 5));
    for (int64_t i = 0; i < 5; ++i)
      RT.is_finite(t.ctx, i, o + i, I64, x + i, F32);
  });
  // Loss scaling: (norm, scale, good, bad) -> (scale, good, bad), growing
  // every 1000 good steps, shrinking every 2 overflows.
  auto lossScaling = [&](const std::string &name, double norm, double scale,
                         int64_t good, int64_t bad) {
    add("update_loss_scaling_" + name, [=](Case &t) {
      void *nm = t.vals(F32, {norm}), *s = t.vals(F32, {scale});
      void *g = t.vals(I64, {double(good)}), *b = t.vals(I64, {double(bad)});
      void *ns = t.out("scale", F32, 1, kExact);
      void *ng = t.out("good", I64, 1), *nb = t.out("bad", I64, 1);
      RT.update_loss_scaling(t.ctx, 1, ns, F32, ng, I64, nb, I64, nm, F32, s,
                             F32, g, I64, b, I64, 1000, 2, 2.0, 0.5);
    });
  };
  lossScaling("overflow", INFINITY, 1024, 5, 1);
  lossScaling("overflow_first", NAN, 1024, 5, 0);
  lossScaling("good", 3.0, 1024, 999, 0);
  return cases;
}

//===----------------------------------------------------------------------===//
// Running, writing, comparing
//===----------------------------------------------------------------------===//

/// Runs `def` in one step; fills `layout` and `got` (each output's bytes),
/// or returns the failure.
std::string runCase(const CaseDef &def, std::vector<Output> &layout,
                    std::vector<std::vector<char>> &got) {
  std::string error;
  Case t(def.name);
  RT.clear_error(RT.ctx);
  if (RT.step_begin(RT.ctx, STRATA_RT_ABI_VERSION) == 0) {
    try {
      def.body(t);
    } catch (const std::exception &e) {
      error = e.what();
    }
    RT.step_end(RT.ctx);
  }
  for (const Output &o : t.outputs) {
    got.emplace_back(size_t(o.bytes()));
    RT.read(RT.ctx, got.back().data(), o.data, o.bytes());
  }
  int64_t site = -1;
  if (const char *message = RT.error(RT.ctx, &site))
    error = "runtime error at site " + std::to_string(site) + ": " + message;
  RT.clear_error(RT.ctx);
  layout = t.outputs;
  return error;
}

std::string writeCase(const std::string &dir, const std::string &name,
                      const std::vector<Output> &layout,
                      const std::vector<std::vector<char>> &got) {
  std::ofstream text(dir + "/" + name + ".txt");
  std::ofstream bin(dir + "/" + name + ".bin", std::ios::binary);
  for (size_t i = 0; i < layout.size(); ++i) {
    text << layout[i].name << " " << strata_rt_element_name(layout[i].dtype)
         << " " << layout[i].count << "\n";
    bin.write(got[i].data(), std::streamsize(got[i].size()));
  }
  return text && bin ? "" : "cannot write " + dir + "/" + name + ".{txt,bin}";
}

/// The first element of `o` outside its tolerance, or "".
std::string compareOutput(const Output &o, const char *got, const char *want) {
  Tol tol = o.tol.rtol < 0 ? defaultTol(o.dtype) : o.tol;
  double maxErr = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < o.count; ++i) {
    double g = loadElement(o.dtype, got, i), w = loadElement(o.dtype, want, i);
    bool same = (std::isnan(g) && std::isnan(w)) || g == w;
    double err = same ? 0 : std::fabs(g - w);
    if (std::isnan(err))
      err = INFINITY;
    maxErr = std::max(maxErr, err);
    if (!same && !(err <= tol.atol + tol.rtol * std::fabs(w)) && first < 0)
      first = i;
  }
  if (first < 0)
    return "";
  char message[512];
  std::snprintf(message, sizeof(message),
                "output %s element %lld got %.9g want %.9g (max abs err %.3g)",
                o.name.c_str(), (long long)first,
                loadElement(o.dtype, got, first),
                loadElement(o.dtype, want, first), maxErr);
  return message;
}

/// Compares a run's outputs with the stored ones; the first failure or "".
std::string compareCase(const std::string &dir, const std::string &name,
                        const std::vector<Output> &layout,
                        const std::vector<std::vector<char>> &got) {
  std::ifstream text(dir + "/" + name + ".txt");
  std::ifstream bin(dir + "/" + name + ".bin", std::ios::binary);
  if (!text || !bin)
    return "no stored outputs (" + dir + "/" + name + ".{txt,bin})";
  std::vector<std::string> stored;
  for (std::string line; std::getline(text, line);)
    if (!line.empty())
      stored.push_back(line);
  if (stored.size() != layout.size())
    return "stored outputs have another layout: " +
           std::to_string(stored.size()) + " outputs, this run " +
           std::to_string(layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    const Output &o = layout[i];
    std::string expected = o.name + " " + strata_rt_element_name(o.dtype) +
                           " " + std::to_string(o.count);
    if (stored[i] != expected)
      return "stored output " + std::to_string(i) + " is \"" + stored[i] +
             "\", this run's \"" + expected + "\"";
    std::vector<char> want(got[i].size());
    if (!bin.read(want.data(), std::streamsize(want.size())))
      return "stored outputs are truncated at output " + o.name;
    if (std::string failed = compareOutput(o, got[i].data(), want.data());
        !failed.empty())
      return failed;
  }
  if (bin.peek() != std::char_traits<char>::eof())
    return "stored outputs are longer than this run's";
  return "";
}

/// A refusal case's stored error: `name`.refused holds the runtime's
/// "runtime error at site S: MESSAGE" line.
std::string writeRefusal(const std::string &dir, const std::string &name,
                         const std::string &error) {
  std::ofstream text(dir + "/" + name + ".refused");
  text << error << "\n";
  return text ? "" : "cannot write " + dir + "/" + name + ".refused";
}

/// The stored refusal against this run's error; "" when they are the same.
std::string compareRefusal(const std::string &dir, const std::string &name,
                           const std::string &error) {
  std::ifstream text(dir + "/" + name + ".refused");
  std::string want;
  if (!std::getline(text, want))
    return "no stored refusal (" + dir + "/" + name + ".refused)";
  return want == error
             ? ""
             : "refused with \"" + error + "\", the stored \"" + want + "\"";
}

int usage() {
  std::fprintf(stderr, "usage: kernel_check write|compare --runtime LIB.so "
                       "--dir DIR [--filter SUBSTR]\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string mode = argv[1], runtime, dir, filter;
  if (mode != "write" && mode != "compare")
    return usage();
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    std::string *value = arg == "--runtime"  ? &runtime
                         : arg == "--dir"    ? &dir
                         : arg == "--filter" ? &filter
                                             : nullptr;
    if (!value)
      return usage();
    *value = argv[i + 1];
  }
  if (argc % 2 != 0 || runtime.empty() || dir.empty())
    return usage();
  if (std::string failed = loadRuntime(runtime); !failed.empty()) {
    std::printf("kernel_check: %s\n", failed.c_str());
    return 1;
  }
  bool write = mode == "write";
  if (write && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::printf("kernel_check: cannot create %s: %s\n", dir.c_str(),
                std::strerror(errno));
    return 1;
  }
  int passed = 0, failed = 0;
  for (const CaseDef &def : makeCases()) {
    if (def.name.find(filter) == std::string::npos)
      continue;
    std::vector<Output> layout;
    std::vector<std::vector<char>> got;
    std::string error = runCase(def, layout, got);
    if (def.refused)
      error = error.rfind("runtime error at site ", 0) != 0
                  ? (error.empty() ? "the runtime did not refuse it" : error)
              : write ? writeRefusal(dir, def.name, error)
                      : compareRefusal(dir, def.name, error);
    else if (error.empty())
      error = write ? writeCase(dir, def.name, layout, got)
                    : compareCase(dir, def.name, layout, got);
    if (!error.empty()) {
      std::printf("FAIL %s: %s\n", def.name.c_str(), error.c_str());
      ++failed;
    } else {
      if (!write)
        std::printf("PASS %s\n", def.name.c_str());
      ++passed;
    }
    std::fflush(stdout);
  }
  RT.destroy(RT.ctx);
  if (passed + failed == 0) {
    std::printf("kernel_check: no case matches \"%s\"\n", filter.c_str());
    return 1;
  }
  if (write && failed)
    std::printf("wrote %d cases, %d failed\n", passed, failed);
  else if (write)
    std::printf("wrote %d cases\n", passed);
  else
    std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
