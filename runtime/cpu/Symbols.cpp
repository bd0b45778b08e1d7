//===- Symbols.cpp - The kernels by name, for the JIT ---------------------===//
//
// Three tables: the baseline kernels, and the same names bound to the AVX2 +
// FMA and the AVX-512 builds of Kernels.cpp; the widest one the processor
// supports is chosen once.
//
//===----------------------------------------------------------------------===//

#include "../common/KernelList.h"
#include "Context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

// The vector variants (Kernels.cpp compiled with STRATA_RT_VARIANT=_avx2 and
// _avx512).
#define STRATA_RT_DECLARE_VARIANTS(name)                                       \
  decltype(name) name##_avx2;                                                  \
  decltype(name) name##_avx512;
extern "C" {
STRATA_RT_VECTOR_KERNELS(STRATA_RT_DECLARE_VARIANTS)
}

#define STRATA_RT_SYMBOL(name) {#name, reinterpret_cast<void *>(&name)},
#define STRATA_RT_SYMBOL_AVX2(name)                                           \
  {#name, reinterpret_cast<void *>(&name##_avx2)},
#define STRATA_RT_SYMBOL_AVX512(name)                                          \
  {#name, reinterpret_cast<void *>(&name##_avx512)},

static const StrataRtSymbol kBaseline[] = {
    STRATA_RT_VECTOR_KERNELS(STRATA_RT_SYMBOL)
        STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

static const StrataRtSymbol kAvx2[] = {
    STRATA_RT_VECTOR_KERNELS(STRATA_RT_SYMBOL_AVX2)
        STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

static const StrataRtSymbol kAvx512[] = {STRATA_RT_VECTOR_KERNELS(
    STRATA_RT_SYMBOL_AVX512) STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

static_assert(std::size(kBaseline) == std::size(kAvx2) &&
              std::size(kBaseline) == std::size(kAvx512));

namespace {
struct Variant {
  const StrataRtSymbol *table;
  const char *isa;
};

/// The widest build this processor runs; STRATA_CPU_ISA=avx2 or baseline
/// asks for a narrower one (to compare builds on one machine).
Variant chooseVariant() {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
              __builtin_cpu_supports("f16c");
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("avx512dq");
  const char *cap = std::getenv("STRATA_CPU_ISA");
  if (cap && std::strcmp(cap, "baseline") == 0)
    avx2 = avx512 = false;
  else if (cap && std::strcmp(cap, "avx2") == 0)
    avx512 = false;
  else if (cap && *cap && std::strcmp(cap, "avx512") != 0)
    std::fprintf(stderr,
                 "strata: STRATA_CPU_ISA=%s is none of avx512, avx2, "
                 "baseline; using the widest kernels this processor runs\n",
                 cap);
  if (avx512)
    return {kAvx512, "avx512"};
  if (avx2)
    return {kAvx2, "avx2"};
  return {kBaseline, "baseline"};
}

const Variant &variant() {
  static const Variant chosen = chooseVariant();
  return chosen;
}
} // namespace

void *strata::cpu::dispatchedKernel(const char *name) {
  for (size_t i = 0; i < std::size(kBaseline); ++i)
    if (std::strcmp(variant().table[i].name, name) == 0)
      return variant().table[i].address;
  return nullptr;
}

extern "C" const StrataRtSymbol *strata_rt_symbols(size_t *count) {
  *count = std::size(kBaseline);
  return variant().table;
}

extern "C" const char *strata_rt_isa(void) { return variant().isa; }
