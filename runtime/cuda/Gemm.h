//===- Gemm.h - The CUDA runtime's cuBLASLt state ---------------*- C++ -*-===//
//
// The cuBLASLt handle, workspace and per-call-site plans a context keeps.
// Private to runtime/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_GEMM_H
#define STRATA_RUNTIME_CUDA_GEMM_H

#include "Context.h"
#include "GemmPlan.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::cuda {

struct GemmCache {
  struct Entry;
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceSize = 0;
  bool tf32 = false;
  /// Plans by call site (a site may issue several GEMMs).
  std::unordered_map<int64_t, std::vector<std::unique_ptr<Entry>>> entries;

  GemmCache();
  GemmCache(const GemmCache &) = delete;
  GemmCache &operator=(const GemmCache &) = delete;
  ~GemmCache();

  /// Creates the handle and the workspace for a device of compute
  /// capability `major`; the failure's message, or the empty string.
  std::string init(int major, bool tf32);
  /// The plan of `call` at `site` (made on first use), or null with the
  /// failure recorded.
  Entry *entry(StrataRtContext *ctx, int64_t site, const GemmCall &call);
  /// The heuristic's algorithm for these operands' alignments (asked once
  /// per alignment; `aux` is the epilogue's aux matrix, or C), or null with
  /// the failure recorded (unless `quiet`).
  const cublasLtMatmulAlgo_t *algorithm(StrataRtContext *ctx, int64_t site,
                                        Entry &e, const void *a, const void *b,
                                        const void *c, const void *bias,
                                        const void *aux, bool quiet);
};

/// Runs the plain (batched) product `call` at `site` on the compute stream,
/// C = op(A) op(B) with the ABI's row-major operands: for the runtime's own
/// compositions (fused attention), planned and cached like strata_rt_gemm.
void runProduct(StrataRtContext *ctx, int64_t site, const GemmCall &call,
                const void *a, const void *b, void *c);

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_GEMM_H
