//===- Symbols.cpp - The kernels by name, for the JIT ---------------------===//
//
// Two tables: the baseline kernels, and the same names bound to the AVX2 +
// FMA build of Kernels.cpp, chosen once by what the processor supports.
//
//===----------------------------------------------------------------------===//

#include "strata/Runtime/StrataRuntime.h"

#include <iterator>

// The AVX2 variants (Kernels.cpp compiled with STRATA_RT_VARIANT=_avx2).
extern "C" {
void strata_rt_binary_avx2(StrataRtContext *ctx, int64_t site, int64_t op,
                      int64_t dtype, void *out, const void *a, const void *b,
                      int64_t rank, const int64_t *desc);
void strata_rt_unary_avx2(StrataRtContext *ctx, int64_t site, int64_t op,
                     float *out, const float *in, int64_t n, double alpha);
void strata_rt_act_grad_avx2(StrataRtContext *ctx, int64_t site, int64_t act,
                        float *out, const float *x, const float *dy,
                        int64_t n);
void strata_rt_copy_avx2(StrataRtContext *ctx, int64_t site, void *out,
                    const void *in, int64_t bytes);
void strata_rt_strided_copy_avx2(StrataRtContext *ctx, int64_t site,
                            int64_t elementBytes, void *out, const void *in,
                            int64_t rank, const int64_t *desc);
void strata_rt_reduce_avx2(StrataRtContext *ctx, int64_t site, float *out,
                      const float *in, int64_t rank, const int64_t *desc,
                      double scale);
void strata_rt_fill_avx2(StrataRtContext *ctx, int64_t site, int64_t dtype,
                    void *out, int64_t n, double value);
void strata_rt_dropout_avx2(StrataRtContext *ctx, int64_t site, float *out,
                       const float *in, const float *residual, int64_t n,
                       int64_t key, int64_t microBatches, int64_t microBatch,
                       double prob);
void strata_rt_softmax_avx2(StrataRtContext *ctx, int64_t site, float *out,
                       const float *in, int64_t rows, int64_t n,
                       int64_t causalRows);
void strata_rt_softmax_grad_avx2(StrataRtContext *ctx, int64_t site, float *dx,
                            const float *y, const float *dy, int64_t rows,
                            int64_t n);
void strata_rt_layer_norm_avx2(StrataRtContext *ctx, int64_t site, float *y,
                          const float *x, const float *gamma,
                          const float *beta, int64_t rows, int64_t n,
                          double eps);
void strata_rt_layer_norm_grad_avx2(StrataRtContext *ctx, int64_t site, float *dx,
                               float *dgamma, float *dbeta, const float *x,
                               const float *gamma, const float *dy,
                               int64_t rows, int64_t n, double eps);
void strata_rt_embedding_avx2(StrataRtContext *ctx, int64_t site, float *out,
                         const float *table, const void *ids, int64_t idType,
                         int64_t count, int64_t vocab, int64_t width);
void strata_rt_embedding_grad_avx2(StrataRtContext *ctx, int64_t site,
                              float *dtable, const void *ids, int64_t idType,
                              const float *dy, int64_t count, int64_t vocab,
                              int64_t width);
void strata_rt_cross_entropy_avx2(StrataRtContext *ctx, int64_t site, float *loss,
                             const float *logits, const void *labels,
                             int64_t labelType, int64_t rows, int64_t vocab);
void strata_rt_cross_entropy_grad_avx2(StrataRtContext *ctx, int64_t site,
                                  float *dlogits, const float *logits,
                                  const void *labels, int64_t labelType,
                                  const float *dloss, int64_t rows,
                                  int64_t vocab);
void strata_rt_lr_schedule_avx2(StrataRtContext *ctx, int64_t site, float *lr,
                           const int64_t *step, int64_t kind, double baseLr,
                           int64_t warmupSteps, int64_t decaySteps,
                           double minLr);
void strata_rt_global_norm_avx2(StrataRtContext *ctx, int64_t site, float *out,
                           int64_t count, const float *const *tensors,
                           const int64_t *sizes);
void strata_rt_clip_avx2(StrataRtContext *ctx, int64_t site, float *out,
                    const float *in, int64_t n, const float *norm,
                    double maxNorm);
void strata_rt_sgd_avx2(StrataRtContext *ctx, int64_t site, float *newParam,
                   const float *param, const float *grad, const float *lr,
                   int64_t n, double weightDecay);
void strata_rt_momentum_avx2(StrataRtContext *ctx, int64_t site, float *newParam,
                        float *newVelocity, const float *param,
                        const float *grad, const float *velocity,
                        const float *lr, int64_t n, double momentum,
                        double weightDecay, int64_t nesterov);
void strata_rt_adam_avx2(StrataRtContext *ctx, int64_t site, int64_t kind,
                    float *newParam, float *newM, float *newV,
                    const float *param, const float *grad, const float *m,
                    const float *v, const float *lr, const int64_t *step,
                    int64_t n, double beta1, double beta2, double eps,
                    double weightDecay);
void strata_rt_lars_avx2(StrataRtContext *ctx, int64_t site, float *newParam,
                    float *newVelocity, const float *param, const float *grad,
                    const float *velocity, const float *lr, int64_t n,
                    double momentum, double weightDecay, double larsCoeff,
                    double eps);
}

#define STRATA_RT_SYMBOL(name) {#name, reinterpret_cast<void *>(&name)}
#define STRATA_RT_SYMBOL_AS(name, fn) {#name, reinterpret_cast<void *>(&fn)}

static const StrataRtSymbol kBaseline[] = {
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
    STRATA_RT_SYMBOL(strata_rt_gemm),
    STRATA_RT_SYMBOL(strata_rt_all_reduce),
    STRATA_RT_SYMBOL(strata_rt_all_reduce_start),
    STRATA_RT_SYMBOL(strata_rt_wait),
    STRATA_RT_SYMBOL(strata_rt_broadcast),
    STRATA_RT_SYMBOL(strata_rt_trace_begin),
    STRATA_RT_SYMBOL(strata_rt_trace_end),
};

static const StrataRtSymbol kAvx2[] = {
    STRATA_RT_SYMBOL_AS(strata_rt_binary, strata_rt_binary_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_unary, strata_rt_unary_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_act_grad, strata_rt_act_grad_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_copy, strata_rt_copy_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_strided_copy, strata_rt_strided_copy_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_reduce, strata_rt_reduce_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_fill, strata_rt_fill_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_dropout, strata_rt_dropout_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_softmax, strata_rt_softmax_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_softmax_grad, strata_rt_softmax_grad_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_layer_norm, strata_rt_layer_norm_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_layer_norm_grad, strata_rt_layer_norm_grad_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_embedding, strata_rt_embedding_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_embedding_grad, strata_rt_embedding_grad_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_cross_entropy, strata_rt_cross_entropy_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_cross_entropy_grad, strata_rt_cross_entropy_grad_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_lr_schedule, strata_rt_lr_schedule_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_global_norm, strata_rt_global_norm_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_clip, strata_rt_clip_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_sgd, strata_rt_sgd_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_momentum, strata_rt_momentum_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_adam, strata_rt_adam_avx2),
    STRATA_RT_SYMBOL_AS(strata_rt_lars, strata_rt_lars_avx2),
    STRATA_RT_SYMBOL(strata_rt_gemm),
    STRATA_RT_SYMBOL(strata_rt_all_reduce),
    STRATA_RT_SYMBOL(strata_rt_all_reduce_start),
    STRATA_RT_SYMBOL(strata_rt_wait),
    STRATA_RT_SYMBOL(strata_rt_broadcast),
    STRATA_RT_SYMBOL(strata_rt_trace_begin),
    STRATA_RT_SYMBOL(strata_rt_trace_end),
};

static_assert(std::size(kBaseline) == std::size(kAvx2));

extern "C" const StrataRtSymbol *strata_rt_symbols(size_t *count) {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  *count = std::size(kBaseline);
  return avx2 ? kAvx2 : kBaseline;
}

extern "C" const char *strata_rt_isa(void) {
  size_t count;
  return strata_rt_symbols(&count) == kAvx2 ? "avx2" : "baseline";
}
