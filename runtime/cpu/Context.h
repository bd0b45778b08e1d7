//===- Context.h - State of the CPU runtime ---------------------*- C++ -*-===//
//
// What the CPU kernels keep between calls beyond the host state every
// runtime shares (common/HostContext.h): the thread count, scratch memory,
// cached oneDNN primitives, the collectives in flight. Private to
// runtime/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_CONTEXT_H
#define STRATA_RUNTIME_CPU_CONTEXT_H

#include "../common/HostContext.h"
#include "../common/LowPrecision.h"
#include "strata/Runtime/StrataRuntime.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::cpu {
struct GemmCache;
} // namespace strata::cpu

struct StrataRtContext : strata::rt::HostContext {
  int64_t threads = 1;
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
  double openBegin = 0;

  std::vector<float> scratch, gemmScratch_;
  /// bf16 / f16 GEMM operands widened to f32.
  std::vector<float> gemmWiden;
  /// bf16 / f16 gradients of an optimizer update widened to f32 (kept
  /// across calls: a fresh allocation per update cost its page faults).
  std::vector<float> gradWiden;
  std::unique_ptr<strata::cpu::GemmCache> gemm;

  StrataRtContext();
  ~StrataRtContext();

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

using strata::rt::bgradReduction;
using strata::rt::integerIds;
using strata::rt::onlyF32;
using strata::rt::sameTypes;
using strata::rt::stepCounter;
using strata::rt::unsupportedType;

/// Calls `f(T{})` with the storage type T (float, BFloat16, Half) shared by
/// every tensor of a floating-point kernel that computes in f32; records
/// the failure otherwise (mixed types, or a type without kernels).
template <typename F>
bool withSameFloatType(StrataRtContext *ctx, int64_t site, const char *kernel,
                       std::initializer_list<int64_t> types, F &&f) {
  return strata::rt::withSameStorageType<strata::cpu::BFloat16,
                                         strata::cpu::Half>(ctx, site, kernel,
                                                            types, f);
}

#endif // STRATA_RUNTIME_CPU_CONTEXT_H
