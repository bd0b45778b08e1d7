//===- KernelList.h - Every function a lowered step calls -------*- C++ -*-===//
//
// The runtime ABI's functions that a lowered step calls by name, for each
// runtime's strata_rt_symbols() table (X-macros: X(name) per function).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_COMMON_KERNELLIST_H
#define STRATA_RUNTIME_COMMON_KERNELLIST_H

#include "strata/Runtime/StrataRuntime.h"

// The kernels the CPU runtime builds for several instruction sets
// (runtime/cpu/Kernels.cpp).
#define STRATA_RT_VECTOR_KERNELS(X)                                            \
  X(strata_rt_gemm_aux)                                                        \
  X(strata_rt_gemm_dact)                                                       \
  X(strata_rt_gemm_bgrad)                                                      \
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
  X(strata_rt_rms_norm)                                                        \
  X(strata_rt_rms_norm_grad)                                                   \
  X(strata_rt_embedding)                                                       \
  X(strata_rt_embedding_grad)                                                  \
  X(strata_rt_cross_entropy)                                                   \
  X(strata_rt_cross_entropy_grad)                                              \
  X(strata_rt_lr_schedule)                                                     \
  X(strata_rt_global_norm)                                                     \
  X(strata_rt_scale_by)                                                        \
  X(strata_rt_clip)                                                            \
  X(strata_rt_sgd)                                                             \
  X(strata_rt_momentum)                                                        \
  X(strata_rt_adam)                                                            \
  X(strata_rt_lars)                                                            \
  X(strata_rt_is_finite)                                                       \
  X(strata_rt_update_loss_scaling)

// The rest of the lowered step's calls.
#define STRATA_RT_COMMON_KERNELS(X)                                            \
  X(strata_rt_gemm)                                                            \
  X(strata_rt_collective)                                                      \
  X(strata_rt_wait)                                                            \
  X(strata_rt_connect)                                                         \
  X(strata_rt_send)                                                            \
  X(strata_rt_recv)                                                            \
  X(strata_rt_trace_begin)                                                     \
  X(strata_rt_trace_end)                                                       \
  X(strata_rt_updates_begin)                                                   \
  X(strata_rt_updates_end)                                                     \
  X(strata_rt_step_begin)                                                      \
  X(strata_rt_step_end)

#endif // STRATA_RUNTIME_COMMON_KERNELLIST_H
