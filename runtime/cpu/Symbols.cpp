//===- Symbols.cpp - The kernels by name, for the JIT ---------------------===//

#include "strata/Runtime/StrataRuntime.h"

#include <iterator>

#define STRATA_RT_SYMBOL(name) {#name, reinterpret_cast<void *>(&name)}

static const StrataRtSymbol kSymbols[] = {
    STRATA_RT_SYMBOL(strata_rt_gemm),
    STRATA_RT_SYMBOL(strata_rt_binary),
    STRATA_RT_SYMBOL(strata_rt_unary),
    STRATA_RT_SYMBOL(strata_rt_act_grad),
    STRATA_RT_SYMBOL(strata_rt_copy),
    STRATA_RT_SYMBOL(strata_rt_strided_copy),
    STRATA_RT_SYMBOL(strata_rt_reduce),
    STRATA_RT_SYMBOL(strata_rt_fill),
    STRATA_RT_SYMBOL(strata_rt_dropout),
    STRATA_RT_SYMBOL(strata_rt_softmax),
    STRATA_RT_SYMBOL(strata_rt_softmax_grad),
    STRATA_RT_SYMBOL(strata_rt_layer_norm),
    STRATA_RT_SYMBOL(strata_rt_layer_norm_grad),
    STRATA_RT_SYMBOL(strata_rt_embedding),
    STRATA_RT_SYMBOL(strata_rt_embedding_grad),
    STRATA_RT_SYMBOL(strata_rt_cross_entropy),
    STRATA_RT_SYMBOL(strata_rt_cross_entropy_grad),
    STRATA_RT_SYMBOL(strata_rt_lr_schedule),
    STRATA_RT_SYMBOL(strata_rt_global_norm),
    STRATA_RT_SYMBOL(strata_rt_clip),
    STRATA_RT_SYMBOL(strata_rt_sgd),
    STRATA_RT_SYMBOL(strata_rt_momentum),
    STRATA_RT_SYMBOL(strata_rt_adam),
    STRATA_RT_SYMBOL(strata_rt_lars),
    STRATA_RT_SYMBOL(strata_rt_all_reduce),
    STRATA_RT_SYMBOL(strata_rt_broadcast),
    STRATA_RT_SYMBOL(strata_rt_trace_begin),
    STRATA_RT_SYMBOL(strata_rt_trace_end),
};

extern "C" const StrataRtSymbol *strata_rt_symbols(size_t *count) {
  *count = std::size(kSymbols);
  return kSymbols;
}
