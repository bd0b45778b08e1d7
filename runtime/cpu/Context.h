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
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace strata::cpu {
struct GemmCache;

/// An allocator of cache-line-aligned memory, for scratch that kernels read
/// with whole-vector loads. (A large std::vector's data is malloc's: 16
/// bytes past a page boundary, so that every 64-byte load of a GEMM spans two
/// cache lines; oneDNN ran the 1024 x 3072 products of the bf16/f16 path,
/// whose operands are widened into scratch, 30% slower for it.)
template <typename T> struct CacheAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheAligned() = default;
  template <typename U> CacheAligned(const CacheAligned<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(::operator new(n * sizeof(T), kAlignment));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, kAlignment); }
  template <typename U> bool operator==(const CacheAligned<U> &) const {
    return true;
  }
  template <typename U> bool operator!=(const CacheAligned<U> &) const {
    return false;
  }
};
/// Scratch floats, kept across calls.
using Scratch = std::vector<float, CacheAligned<float>>;
} // namespace strata::cpu

struct StrataRtContext : strata::rt::HostContext {
  int64_t threads = 1;
  /// Time each distinct f32 GEMM without an activation once through each
  /// path at hand (the matmul primitive, sgemm, the packed GEMM), and run
  /// the fastest (StrataRtOptions).
  bool gemmAutotune = false;
  /// For tests: autotuning's choice made without timing (1: the primitive,
  /// 2: sgemm, 3: the packed GEMM; 0: timed).
  int gemmAutotuneChoice = 0;
  /// Strata's packed GEMM (PackedGemm.cpp) runs every product, where the
  /// widest kernels the processor runs are AVX2 (there oneDNN 2.6's GEMM is
  /// no faster on one thread and on two often slower); elsewhere oneDNN
  /// does (bf16 / f16 operands without native kernels widened into scratch
  /// for its f32 product). Set from strata_rt_isa when the context is
  /// created; tests set it to reach each path.
  bool gemmPacked = false;
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

  strata::cpu::Scratch scratch;
  /// bf16 / f16 GEMM operands widened to f32.
  strata::cpu::Scratch gemmWiden;
  /// The packed blocks of Strata's own GEMM (PackedGemm.cpp) and the f32
  /// partial sums of a bf16 / f16 result.
  strata::cpu::Scratch packedBlocks;
  /// Where GEMM autotuning's timed runs of an accumulating product write.
  strata::cpu::Scratch gemmTiming;
  /// bf16 / f16 gradients of an optimizer update widened to f32 (kept
  /// across calls: a fresh allocation per update cost its page faults).
  strata::cpu::Scratch gradWiden;
  /// oneDNN primitives by problem, with autotuning's choices
  /// (strata_rt_gemm_autotuned counts them).
  std::unique_ptr<strata::cpu::GemmCache> gemm;

  /// The updates of the open group of updates (strata_rt_updates_begin),
  /// run at its end, last first. The ABI lets a runtime run a group's
  /// updates in any order; run backwards, a group whose updates are not
  /// independent (which one launch of the CUDA runtime would race on)
  /// changes the CPU runtime's results, so that its tests find it.
  std::vector<std::function<void()>> groupUpdates;
  bool runningGroup = false;
  /// Keeps `update` for the group's end, or returns false (no group open,
  /// or the group running).
  template <typename F> bool deferToGroup(F &&update) {
    if (updatesSite < 0 || runningGroup)
      return false;
    groupUpdates.emplace_back(std::forward<F>(update));
    return true;
  }
  /// Runs the group's updates, last first.
  void runGroup() {
    runningGroup = true;
    for (auto it = groupUpdates.rbegin(); it != groupUpdates.rend(); ++it)
      (*it)();
    groupUpdates.clear();
    runningGroup = false;
  }

  StrataRtContext();
  ~StrataRtContext();

  /// Scratch of at least `n` floats, kept across calls.
  float *scratchFloats(int64_t n) {
    if (int64_t(scratch.size()) < n)
      scratch.resize(n);
    return scratch.data();
  }
};

using strata::rt::bgradReduction;
using strata::rt::integerIds;
using strata::rt::lossIsF32;
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

namespace strata::cpu {
/// The unrounded pre-activation of a bf16 or f16 GEMM with its bias (A B +
/// bias, f32 accumulation) into `out`: m x n floats, as a GEMM epilogue sees
/// it before it rounds the aux copy and applies the activation (Gemm.cpp).
void preActivation(StrataRtContext *ctx, int64_t site, int64_t m, int64_t n,
                   int64_t k, const void *a, int64_t transA, const void *b,
                   int64_t transB, const void *bias, int64_t dtype, float *out);

/// The kernel `name` of the build the JIT's step calls (strata_rt_symbols():
/// the widest this processor runs, or STRATA_CPU_ISA's), for code of the
/// baseline build that calls a kernel (Gemm.cpp); null for another name.
void *dispatchedKernel(const char *name);
} // namespace strata::cpu

#endif // STRATA_RUNTIME_CPU_CONTEXT_H
