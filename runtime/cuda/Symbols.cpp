//===- Symbols.cpp - The CUDA runtime's functions by name -----------------===//

#include "../common/KernelList.h"

#include <iterator>

#define STRATA_RT_SYMBOL(name) {#name, reinterpret_cast<void *>(&name)},

static const StrataRtSymbol kSymbols[] = {STRATA_RT_VECTOR_KERNELS(
    STRATA_RT_SYMBOL) STRATA_RT_COMMON_KERNELS(STRATA_RT_SYMBOL)};

extern "C" const StrataRtSymbol *strata_rt_symbols(size_t *count) {
  *count = std::size(kSymbols);
  return kSymbols;
}

/// The kernels run on the device; the host code is the one build.
extern "C" const char *strata_rt_isa(void) { return "cuda"; }
