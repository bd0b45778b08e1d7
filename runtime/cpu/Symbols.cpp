//===- Symbols.cpp - The kernels by name, for the JIT ---------------------===//
//
// Two tables: the baseline kernels, and the same names bound to the AVX2 +
// FMA build of Kernels.cpp, chosen once by what the processor supports.
//
//===----------------------------------------------------------------------===//

#include "strata/Runtime/StrataRuntime.h"

#include <iterator>

// The kernels of Kernels.cpp, built twice.
#define STRATA_RT_VECTOR_KERNELS(X)                                            \
  X(strata_rt_binary)                                                          \
  X(strata_rt_unary)                                                           \
  X(strata_rt_act_grad)                                                        \
  X(strata_rt_cast)                                                            \
  X(strata_rt_copy)                                                            \
  X(strata_rt_strided_copy)                                                    \
  X(strata_rt_copy_rows)                                                       \
  X(strata_rt_reduce)                                                          \
  X(strata_rt_fill)                                                            \
  X(strata_rt_dropout)                                                         \
  X(strata_rt_softmax)                                                         \
  X(strata_rt_softmax_grad)                                                    \
  X(strata_rt_attention)                                                       \
  X(strata_rt_attention_grad)                                                  \
  X(strata_rt_layer_norm)                                                      \
  X(strata_rt_layer_norm_grad)                                                 \
  X(strata_rt_embedding)                                                       \
  X(strata_rt_embedding_grad)                                                  \
  X(strata_rt_cross_entropy)                                                   \
  X(strata_rt_cross_entropy_grad)                                              \
  X(strata_rt_lr_schedule)                                                     \
  X(strata_rt_global_norm)                                                     \
  X(strata_rt_clip)                                                            \
  X(strata_rt_sgd)                                                             \
  X(strata_rt_momentum)                                                        \
  X(strata_rt_adam)                                                            \
  X(strata_rt_lars)                                                            \
  X(strata_rt_is_finite)                                                       \
  X(strata_rt_update_loss_scaling)

// The rest: one build.
#define STRATA_RT_COMMON_KERNELS(X)                                           \
  X(strata_rt_gemm)                                                           \
  X(strata_rt_collective)                                                     \
  X(strata_rt_wait)                                                           \
  X(strata_rt_send)                                                           \
  X(strata_rt_recv)                                                           \
  X(strata_rt_trace_begin)                                                    \
  X(strata_rt_trace_end)                                                      \
  X(strata_rt_step_begin)                                                     \
  X(strata_rt_step_end)

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
