//===- Gemm.cpp - GEMMs of the CUDA runtime through cuBLASLt --------------===//
//
// strata_rt_gemm as one cuBLASLt matmul with the bias and the activation in
// its epilogue where cuBLASLt has it, else followed by the runtime's kernels
// (GemmPlan.h says how a call maps onto cuBLASLt). Each call site keeps its
// plans, descriptors and the heuristic's algorithm for the operands'
// alignment, so a step after the first only sets the bias pointer and
// launches.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace strata::cuda {

namespace {
bool sameCall(const GemmCall &x, const GemmCall &y) {
  auto key = [](const GemmCall &c) {
    return std::tie(c.batch, c.m, c.n, c.k, c.aBatchStride, c.bBatchStride,
                    c.transA, c.transB, c.dtype, c.bias, c.act, c.accumulate,
                    c.aux, c.dact, c.bgrad, c.unfused, c.resultType);
  };
  return key(x) == key(y);
}
} // namespace

struct GemmCache::Entry {
  GemmCall call;
  GemmPlan plan;
  GemmDescriptors descriptors;
  /// The heuristic's choice for the operands' alignments (A, B, C, bias,
  /// aux).
  struct Algo {
    uint32_t alignments[5];
    cublasLtMatmulAlgo_t algo;
    /// False: the heuristic had none (asked quietly, for an epilogue with a
    /// fallback), so later calls fall back without asking again.
    bool found;
  };
  std::vector<Algo> algos;
};

GemmCache::GemmCache() = default;

GemmCache::~GemmCache() {
  if (workspace)
    cudaFree(workspace);
  if (handle)
    cublasLtDestroy(handle);
}

std::string GemmCache::init(int major, bool tf32) {
  this->tf32 = tf32;
  if (cublasStatus_t s = cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS)
    return std::string("cublasLtCreate: ") + cublasLtGetStatusString(s);
  workspaceSize = gemmWorkspaceBytes(major);
  if (cudaError_t e = cudaMalloc(&workspace, workspaceSize); e != cudaSuccess)
    return std::string("the cuBLASLt workspace: ") + cudaGetErrorString(e);
  return "";
}

GemmCache::Entry *GemmCache::entry(StrataRtContext *ctx, int64_t site,
                                   const GemmCall &call) {
  std::vector<std::unique_ptr<Entry>> &atSite = entries[site];
  for (auto &e : atSite)
    if (sameCall(e->call, call))
      return e.get();
  auto e = std::make_unique<Entry>();
  e->call = call;
  e->plan = planGemm(call, tf32);
  if (!e->plan.error.empty()) {
    ctx->fail(site, "strata_rt_gemm: " + e->plan.error +
                        " is not implemented by the CUDA runtime");
    return nullptr;
  }
  if (std::string error = createDescriptors(e->plan, e->descriptors);
      !error.empty()) {
    ctx->fail(site, "strata_rt_gemm: " + error);
    return nullptr;
  }
  atSite.push_back(std::move(e));
  return atSite.back().get();
}

const cublasLtMatmulAlgo_t *
GemmCache::algorithm(StrataRtContext *ctx, int64_t site, Entry &e,
                     const void *a, const void *b, const void *c,
                     const void *bias, const void *aux, bool quiet) {
  uint32_t alignments[5] = {
      pointerAlignment(a), pointerAlignment(b), pointerAlignment(c),
      bias ? pointerAlignment(bias) : 256u, pointerAlignment(aux)};
  for (auto &known : e.algos)
    if (std::equal(alignments, alignments + 5, known.alignments))
      return known.found ? &known.algo : nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasStatus_t s = cublasLtMatmulPreferenceCreate(&preference);
  auto setPreference = [&](cublasLtMatmulPreferenceAttributes_t attribute,
                           const auto &value) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value,
                                               sizeof(value));
  };
  setPreference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspaceSize);
  // cuBLASLt's A is the ABI's B (GemmPlan.h).
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments[1]);
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments[0]);
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments[2]);
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments[2]);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(
        handle, e.descriptors.op, e.descriptors.a, e.descriptors.b,
        e.descriptors.c, e.descriptors.c, preference, 1, &result, &found);
  if (preference)
    cublasLtMatmulPreferenceDestroy(preference);
  Entry::Algo chosen;
  std::copy(alignments, alignments + 5, chosen.alignments);
  chosen.algo = result.algo;
  chosen.found = s == CUBLAS_STATUS_SUCCESS && found != 0;
  if (!chosen.found && quiet) {
    e.algos.push_back(chosen);
    return nullptr;
  }
  if (!chosen.found) {
    ctx->fail(site,
              std::string("strata_rt_gemm: cuBLASLt has no algorithm "
                          "for this GEMM") +
                  (s != CUBLAS_STATUS_SUCCESS
                       ? std::string(" (") + cublasLtGetStatusString(s) + ")"
                       : std::string()));
    return nullptr;
  }
  e.algos.push_back(chosen);
  return &e.algos.back().algo;
}

namespace {

/// The pointers of one GEMM call beside A, B and C.
struct GemmExtras {
  /// The pre-activation: written (strata_rt_gemm_aux) or read
  /// (strata_rt_gemm_dact).
  void *aux = nullptr;
  const void *bias = nullptr;
  /// The bias gradient (strata_rt_gemm_bgrad).
  void *bgrad = nullptr;
};

void runGemm(StrataRtContext *ctx, int64_t site, GemmCall call, const void *a,
             const void *b, void *c, const GemmExtras &x);

/// The most bytes of f32 sums a plan's f32Sums keeps at once: 32 MiB, or
/// STRATA_CUDA_GEMM_SUMS_BYTES (the GPU check sets 1, one row a chunk, so
/// that its small cases cover the chunked path).
int64_t sumsBytes() {
  static const int64_t bytes =
      budgetBytes("STRATA_CUDA_GEMM_SUMS_BYTES", int64_t(32) << 20);
  return bytes;
}

/// A plan's f32Sums: the product with an f32 result and no epilogue into
/// the context's scratch, then the bias, aux and activation by
/// sumsEpilogue, one chunk of rows (sumsChunkRows) at a time.
void runWithF32Sums(StrataRtContext *ctx, int64_t site, const GemmCall &call,
                    const void *a, const void *b, void *c,
                    const GemmExtras &x) {
  const int64_t rows = call.batch * call.m, n = call.n;
  const int64_t chunkRows = sumsChunkRows(call, sumsBytes());
  auto *sums = static_cast<float *>(
      ctx->scratchBytes(site, size_t(chunkRows * n) * sizeof(float)));
  if (!sums)
    return;
  GemmCall product = call;
  product.bias = false;
  product.act = STRATA_RT_ACT_NONE;
  product.aux = false;
  product.resultType = STRATA_RT_F32;
  const int64_t size = strata_rt_element_bytes(call.dtype);
  for (int64_t r = 0; r < rows; r += chunkRows) {
    const int64_t count = std::min(chunkRows, rows - r);
    if (chunkRows != rows)
      product.m = count;
    runGemm(ctx, site, product,
            static_cast<const char *>(a) + r * call.k * size, b, sums, {});
    auto at = [&](void *base) {
      return base ? static_cast<char *>(base) + r * n * size : nullptr;
    };
    sumsEpilogue(ctx, site, call.dtype, at(c), at(x.aux), sums, x.bias, count,
                 n, call.act);
  }
}

/// One planned GEMM: its result D (c, or aux when the plan writes only the
/// pre-activation there) with the epilogue, then what the epilogue does not
/// apply: an activation from D into c, an activation gradient in place on
/// c, a bias gradient. A backward epilogue cuBLASLt has no algorithm for
/// falls back to the GEMM and separate kernels.
void runGemm(StrataRtContext *ctx, int64_t site, GemmCall call, const void *a,
             const void *b, void *c, const GemmExtras &x) {
  GemmCache &cache = *ctx->gemm;
  auto *e = cache.entry(ctx, site, call);
  if (!e)
    return;
  if (e->plan.f32Sums)
    return runWithF32Sums(ctx, site, call, a, b, c, x);
  void *d = e->plan.auxOnly ? x.aux : c;
  // The heuristic reads the bias and aux pointers' alignment: set first.
  auto setPointer = [&](cublasLtMatmulDescAttributes_t attribute,
                        const void *pointer, const char *what) {
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(
        e->descriptors.op, attribute, &pointer, sizeof(pointer));
    if (s != CUBLAS_STATUS_SUCCESS)
      ctx->fail(site, std::string("strata_rt_gemm: ") + what + ": " +
                          cublasLtGetStatusString(s));
    return s == CUBLAS_STATUS_SUCCESS;
  };
  bool fusedBgrad = call.bgrad >= 0 && !e->plan.separateBgrad;
  const void *bias = fusedBgrad ? x.bgrad : x.bias;
  if (bias &&
      !setPointer(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "the bias pointer"))
    return;
  if (e->plan.auxLd && !setPointer(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                   x.aux, "the aux pointer"))
    return;
  // (An unfused plan's epilogue is DEFAULT.)
  bool fusedBackward = (call.dact || call.bgrad >= 0) &&
                       e->plan.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  const cublasLtMatmulAlgo_t *algo =
      cache.algorithm(ctx, site, *e, a, b, d, bias, e->plan.auxLd ? x.aux : d,
                      /*quiet=*/fusedBackward);
  if (!algo && fusedBackward) {
    call.unfused = true;
    return runGemm(ctx, site, call, a, b, c, x);
  }
  if (!algo)
    return;
  float alpha = 1, beta = e->plan.beta;
  cublasStatus_t s = cublasLtMatmul(
      cache.handle, e->descriptors.op, &alpha, b, e->descriptors.a, a,
      e->descriptors.b, &beta, d, e->descriptors.c, d, e->descriptors.c, algo,
      cache.workspace, cache.workspaceSize, ctx->compute);
  if (s != CUBLAS_STATUS_SUCCESS && fusedBackward &&
      (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE)) {
    // The heuristic offered an algorithm that refuses the epilogue after
    // all: these alignments take the fallback from now on.
    for (auto &known : e->algos)
      if (&known.algo == algo)
        known.found = false;
    call.unfused = true;
    return runGemm(ctx, site, call, a, b, c, x);
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    ctx->fail(site,
              std::string("strata_rt_gemm: ") + cublasLtGetStatusString(s));
    return;
  }
  int64_t n = call.batch * call.m * call.n;
  if (e->plan.separateAct || e->plan.auxOnly)
    strata_rt_unary(ctx, site, e->plan.separateAct, c, call.dtype, d,
                    call.dtype, n, 0.0);
  if (e->plan.separateActGrad)
    strata_rt_act_grad(ctx, site, e->plan.separateActGrad, c, call.dtype, x.aux,
                       call.dtype, c, call.dtype, n);
  if (e->plan.separateBgrad) {
    int64_t desc[4];
    strata::rt::bgradReduction(call.m, call.n, call.k, call.transA, call.transB,
                               call.bgrad, desc);
    strata_rt_reduce(ctx, site, x.bgrad, call.dtype, call.bgrad == 0 ? a : b,
                     call.dtype, 2, desc, 1.0);
  }
}

} // namespace

void runProduct(StrataRtContext *ctx, int64_t site, const GemmCall &call,
                const void *a, const void *b, void *c) {
  runGemm(ctx, site, call, a, b, c, {});
}

} // namespace strata::cuda

using strata::cuda::GemmCall;

namespace {
/// The call of one (unbatched) M x N product.
GemmCall productCall(int64_t m, int64_t n, int64_t k, int64_t transA,
                     int64_t transB, int64_t dtype) {
  GemmCall call;
  call.m = m;
  call.n = n;
  call.k = k;
  call.transA = transA != 0;
  call.transB = transB != 0;
  call.dtype = dtype;
  return call;
}
} // namespace

extern "C" void
strata_rt_gemm(StrataRtContext *ctx, int64_t site, int64_t batch, int64_t m,
               int64_t n, int64_t k, const void *a, int64_t aType,
               int64_t aBatchStride, int64_t transA, const void *b,
               int64_t bType, int64_t bBatchStride, int64_t transB, void *c,
               int64_t cType, const void *bias, int64_t biasType, int64_t act,
               int64_t accumulate) {
  if (!sameTypes(ctx, site, "gemm", {aType, bType, cType, biasType}) ||
      !gemmArgumentsOk(ctx, site, "gemm", batch, m, n, k, bias != nullptr, act,
                       accumulate))
    return;
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (k == 0) // cuBLASLt takes no empty inner dimension
    return strata::rt::emptyProduct(ctx, site, batch * m, n, c, cType, bias,
                                    act, accumulate);
  GemmCall call = productCall(m, n, k, transA, transB, cType);
  call.batch = batch;
  call.aBatchStride = aBatchStride;
  call.bBatchStride = bBatchStride;
  call.bias = bias != nullptr;
  call.act = act;
  call.accumulate = accumulate != 0;
  strata::cuda::runGemm(ctx, site, call, a, b, c, {nullptr, bias, nullptr});
}

extern "C" void strata_rt_gemm_aux(StrataRtContext *ctx, int64_t site,
                                   int64_t m, int64_t n, int64_t k,
                                   const void *a, int64_t aType, int64_t transA,
                                   const void *b, int64_t bType, int64_t transB,
                                   void *c, int64_t cType, void *aux,
                                   int64_t auxType, const void *bias,
                                   int64_t biasType, int64_t act) {
  if (!sameTypes(ctx, site, "gemm_aux",
                 {aType, bType, cType, auxType, biasType}) ||
      !gemmArgumentsOk(ctx, site, "gemm_aux", 1, m, n, k, bias != nullptr,
                       STRATA_RT_ACT_NONE, 0))
    return;
  if (!strata::rt::knownUnary(act))
    return ctx->fail(site, "unknown unary op code " + std::to_string(act));
  if (m == 0 || n == 0)
    return;
  if (k == 0) { // no product: aux is the bias (or zero), c its activation
    strata::rt::emptyProduct(ctx, site, m, n, aux, auxType, bias,
                             STRATA_RT_ACT_NONE, 0);
    return strata_rt_unary(ctx, site, act, c, cType, aux, auxType, m * n, 0.0);
  }
  GemmCall call = productCall(m, n, k, transA, transB, cType);
  call.bias = bias != nullptr;
  call.act = act;
  call.aux = true;
  strata::cuda::runGemm(ctx, site, call, a, b, c, {aux, bias, nullptr});
}

extern "C" void strata_rt_gemm_dact(StrataRtContext *ctx, int64_t site,
                                    int64_t m, int64_t n, int64_t k,
                                    const void *a, int64_t aType,
                                    int64_t transA, const void *b,
                                    int64_t bType, int64_t transB, void *c,
                                    int64_t cType, const void *aux,
                                    int64_t auxType, int64_t act) {
  if (!sameTypes(ctx, site, "gemm_dact", {aType, bType, cType, auxType}) ||
      !gemmArgumentsOk(ctx, site, "gemm_dact", 1, m, n, k, false,
                       STRATA_RT_ACT_NONE, 0))
    return;
  if (m == 0 || n == 0)
    return;
  if (k == 0) { // no product: zero times the activation's gradient
    strata::rt::emptyProduct(ctx, site, m, n, c, cType, nullptr,
                             STRATA_RT_ACT_NONE, 0);
    return strata_rt_act_grad(ctx, site, act, c, cType, aux, auxType, c, cType,
                              m * n);
  }
  GemmCall call = productCall(m, n, k, transA, transB, cType);
  call.act = act;
  call.dact = true;
  strata::cuda::runGemm(ctx, site, call, a, b, c,
                        {const_cast<void *>(aux), nullptr, nullptr});
}

extern "C" void strata_rt_gemm_bgrad(StrataRtContext *ctx, int64_t site,
                                     int64_t m, int64_t n, int64_t k,
                                     const void *a, int64_t aType,
                                     int64_t transA, const void *b,
                                     int64_t bType, int64_t transB, void *c,
                                     int64_t cType, void *bgrad,
                                     int64_t bgradType, int64_t operand) {
  if (!sameTypes(ctx, site, "gemm_bgrad", {aType, bType, cType, bgradType}) ||
      !gemmArgumentsOk(ctx, site, "gemm_bgrad", 1, m, n, k, false,
                       STRATA_RT_ACT_NONE, 0))
    return;
  if (operand != 0 && operand != 1)
    return ctx->fail(site, "strata_rt_gemm_bgrad: operand " +
                               std::to_string(operand) + " (0 for A, 1 for B)");
  if (m == 0 || n == 0 || k == 0) {
    // No product, or a zero one; the bias gradient is still the other
    // operand's sums over k (of no element when that one is empty too), as
    // the CPU's.
    if (k == 0)
      strata::rt::emptyProduct(ctx, site, m, n, c, cType, nullptr,
                               STRATA_RT_ACT_NONE, 0);
    int64_t desc[4];
    strata::rt::bgradReduction(m, n, k, transA != 0, transB != 0, operand,
                               desc);
    strata_rt_reduce(ctx, site, bgrad, bgradType, operand == 0 ? a : b,
                     operand == 0 ? aType : bType, 2, desc, 1.0);
    return;
  }
  GemmCall call = productCall(m, n, k, transA, transB, cType);
  call.bgrad = operand;
  strata::cuda::runGemm(ctx, site, call, a, b, c, {nullptr, nullptr, bgrad});
}
