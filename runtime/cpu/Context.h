//===- Context.h - State of the CPU runtime ---------------------*- C++ -*-===//
//
// What the kernels keep between calls: the RNG seed and this rank's shard,
// the thread count, the first error, scratch memory, cached oneDNN
// primitives and the host's collectives. Private to runtime/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_CONTEXT_H
#define STRATA_RUNTIME_CPU_CONTEXT_H

#include "../common/LowPrecision.h"
#include "strata/Runtime/StrataRuntime.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::cpu {
struct GemmCache;
} // namespace strata::cpu

struct StrataRtContext {
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t shard = 0;
  int64_t threads = 1;
  StrataRtCollectiveFn collective = nullptr;
  StrataRtWaitFn wait = nullptr;
  void *collectiveUser = nullptr;
  StrataRtSendFn send = nullptr;
  StrataRtRecvFn recv = nullptr;
  void *p2pUser = nullptr;
  /// Collectives in flight, by call site.
  struct Pending {
    void *request;
    void *out;
    int64_t n, dtype;
    bool mean;
    int64_t numRanks;
    const char *name;
  };
  std::map<int64_t, Pending> pending;
  /// The site of the host call (collective, send, receive, wait) in
  /// progress, or -1: what a signal handler reports when the job is stopped.
  std::atomic<int64_t> activeSite{-1};

  bool tracing = false;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::vector<StrataRtTraceEvent> trace, taken;
  double openBegin = 0;

  std::string error;
  int64_t errorSite = -1;
  std::vector<float> scratch, gemmScratch_;
  /// bf16 / f16 GEMM operands widened to f32.
  std::vector<float> gemmWiden;
  std::unique_ptr<strata::cpu::GemmCache> gemm;

  StrataRtContext();
  ~StrataRtContext();

  /// Records the first failure of a step.
  void fail(int64_t site, std::string message) {
    if (errorSite < 0 && error.empty()) {
      error = std::move(message);
      errorSite = site;
    }
  }
  /// Scratch of the GEMM (operand transposes).
  float *gemmScratch(int64_t n) {
    if (int64_t(gemmScratch_.size()) < n)
      gemmScratch_.resize(n);
    return gemmScratch_.data();
  }
  /// Scratch of at least `n` floats, kept across calls.
  float *scratchFloats(int64_t n) {
    if (int64_t(scratch.size()) < n)
      scratch.resize(n);
    return scratch.data();
  }
};

/// Records that kernel `kernel` has no implementation for `dtype`.
inline void unsupportedType(StrataRtContext *ctx, int64_t site,
                            const char *kernel, int64_t dtype) {
  const char *name = strata_rt_element_name(dtype);
  ctx->fail(site,
            std::string("strata_rt_") + kernel + ": " +
                (std::string(name) == "unknown"
                     ? "unknown element type code " + std::to_string(dtype)
                     : std::string(name) + " tensors") +
                " are not implemented by the CPU runtime");
}

/// Whether every tensor of a kernel that implements f32 alone (the
/// optimizer updates: master weights and moments are f32) is f32; records
/// the failure otherwise.
inline bool onlyF32(StrataRtContext *ctx, int64_t site, const char *kernel,
                    std::initializer_list<int64_t> types) {
  for (int64_t t : types)
    if (t != STRATA_RT_F32) {
      unsupportedType(ctx, site, kernel, t);
      return false;
    }
  return true;
}

/// Whether all `types` are equal (elementwise kernels do not convert).
inline bool sameTypes(StrataRtContext *ctx, int64_t site, const char *kernel,
                      std::initializer_list<int64_t> types) {
  for (int64_t t : types)
    if (t != *types.begin()) {
      ctx->fail(site, std::string("strata_rt_") + kernel + ": mixes " +
                          strata_rt_element_name(*types.begin()) + " and " +
                          strata_rt_element_name(t) + " tensors");
      return false;
    }
  return true;
}

/// Calls `f(T{})` with the storage type T (float, BFloat16, Half) shared by
/// every tensor of a floating-point kernel that computes in f32; records
/// the failure otherwise (mixed types, or a type without kernels).
template <typename F>
bool withSameFloatType(StrataRtContext *ctx, int64_t site, const char *kernel,
                       std::initializer_list<int64_t> types, F &&f) {
  if (!sameTypes(ctx, site, kernel, types))
    return false;
  if (strata::cpu::withFloatType(*types.begin(), f))
    return true;
  unsupportedType(ctx, site, kernel, *types.begin());
  return false;
}

/// Ids and labels are i32 or i64.
inline bool integerIds(StrataRtContext *ctx, int64_t site, const char *kernel,
                       int64_t dtype) {
  if (dtype == STRATA_RT_I32 || dtype == STRATA_RT_I64)
    return true;
  ctx->fail(site, std::string("strata_rt_") + kernel + ": ids are i32 or " +
                      "i64, not " + strata_rt_element_name(dtype));
  return false;
}

/// The step counter is an i64 scalar.
inline bool stepCounter(StrataRtContext *ctx, int64_t site, const char *kernel,
                        int64_t dtype) {
  if (dtype == STRATA_RT_I64)
    return true;
  ctx->fail(site, std::string("strata_rt_") + kernel +
                      ": the step counter is i64, not " +
                      strata_rt_element_name(dtype));
  return false;
}

#endif // STRATA_RUNTIME_CPU_CONTEXT_H
