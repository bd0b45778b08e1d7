//===- Symbols.cpp - The kernels by name, for the JIT ---------------------===//
//
// Two tables: the baseline kernels, and the same names bound to the AVX2 +
// FMA build of Kernels.cpp, chosen once by what the processor supports.
//
//===----------------------------------------------------------------------===//

#include "../common/KernelList.h"

#include <iterator>

// The AVX2 variants (Kernels.cpp compiled with STRATA_RT_VARIANT=_avx2).
#define STRATA_RT_DECLARE_AVX2(name) decltype(name) name##_avx2;
extern "C" {
STRATA_RT_VECTOR_KERNELS(STRATA_RT_DECLARE_AVX2)
}

#define STRATA_RT_SYMBOL(name) {#name, reinterpret_cast<void *>(&name)},
#define STRATA_RT_SYMBOL_AVX2(name)                                           \
  {#name, reinterpret_cast<void *>(&name##_avx2)},

static const StrataRtSymbol kBaseline[] = {
    STRATA_RT_VECTOR_KERNELS(STRATA_RT_SYMBOL)
        STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

static const StrataRtSymbol kAvx2[] = {
    STRATA_RT_VECTOR_KERNELS(STRATA_RT_SYMBOL_AVX2)
        STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

static_assert(std::size(kBaseline) == std::size(kAvx2));

extern "C" const StrataRtSymbol *strata_rt_symbols(size_t *count) {
  static const bool avx2 = __builtin_cpu_supports("avx2") &&
                           __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("f16c");
  *count = std::size(kBaseline);
  return avx2 ? kAvx2 : kBaseline;
}

extern "C" const char *strata_rt_isa(void) {
  size_t count;
  return strata_rt_symbols(&count) == kAvx2 ? "avx2" : "baseline";
}
