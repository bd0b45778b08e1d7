/*===- StrataRuntime.h - The runtime C ABI ------------------------*- C -*-===*\
|*                                                                            *|
|* The functions a lowered Strata program calls (strata-lower-to-runtime).    *|
|* The CPU runtime (runtime/cpu) implements them; the CUDA runtime will       *|
|* implement the same ABI with the same semantics (RNG, layouts).             *|
|*                                                                            *|
|* Conventions:                                                               *|
|*  - every kernel takes the context first and its call site (an index the    *|
|*    lowering gives each op, to cache primitives and name failing ops);      *|
|*  - tensors are dense, row-major; floats are fp32; `dtype` codes select     *|
|*    integer element types where several are legal;                          *|
|*  - integers are int64_t and attributes double, so that the lowering needs  *|
|*    one calling convention;                                                 *|
|*  - an output may alias an input of the same shape where the memory plan    *|
|*    says so (elementwise ops): kernels read element i before writing it.    *|
|*  - kernels never abort: a failure (an id out of range, a collective that   *|
|*    failed) is recorded in the context, the first one wins, and the host    *|
|*    checks strata_rt_error() after the step.                                *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef STRATA_RUNTIME_STRATARUNTIME_H
#define STRATA_RUNTIME_STRATARUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct StrataRtContext StrataRtContext;

/* Element types. */
enum { STRATA_RT_F32 = 0, STRATA_RT_I32 = 1, STRATA_RT_I64 = 2 };
/* Activations (epilogues, unary ops, their gradients). */
enum {
  STRATA_RT_ACT_NONE = 0,
  STRATA_RT_ACT_RELU = 1,
  STRATA_RT_ACT_GELU_TANH = 2,
  STRATA_RT_ACT_GELU_ERF = 3,
  STRATA_RT_UNARY_SCALE = 4
};
/* Binary ops. */
enum { STRATA_RT_ADD = 0, STRATA_RT_SUB = 1, STRATA_RT_MUL = 2, STRATA_RT_DIV = 3 };
/* Optimizers of strata_rt_adam. */
enum { STRATA_RT_ADAM = 0, STRATA_RT_ADAMW = 1, STRATA_RT_LAMB = 2 };
/* Learning-rate schedules. */
enum { STRATA_RT_LR_CONSTANT = 0, STRATA_RT_LR_LINEAR_WARMUP = 1, STRATA_RT_LR_COSINE = 2 };

/* Collectives that the host runs (MPI, NCCL) for strata_rt_collective. */
enum {
  /* recv[i] = the sum over the ranks of their recv[i] (in place) */
  STRATA_RT_ALL_REDUCE = 0,
  /* recv = the recv of rank ranks[root] (in place) */
  STRATA_RT_BROADCAST = 1,
  /* send holds numRanks slices of `count` elements; recv = the sum over the
     ranks of their slice number (this rank's index in ranks) */
  STRATA_RT_REDUCE_SCATTER = 2,
  /* recv holds numRanks slices of `count` elements: slice i = the send of
     rank ranks[i] */
  STRATA_RT_ALL_GATHER = 3
};
typedef struct {
  int64_t op;        /* STRATA_RT_ALL_REDUCE ... */
  const void *send;  /* equal to recv for all_reduce and broadcast */
  void *recv;
  int64_t count;     /* elements per rank, as above */
  int64_t dtype;
  const int64_t *ranks; /* the group, which holds this rank, in order */
  int64_t numRanks;
  int64_t root;      /* broadcast: an index into ranks */
} StrataRtCollective;

/* Runs `c` when `request` is NULL; otherwise starts it, stores a request that
   the wait function completes, and returns (send and recv stay in use until
   then). Returns 0 on success, else writes a message into `error`. */
typedef int (*StrataRtCollectiveFn)(void *user, const StrataRtCollective *c,
                                    void **request, char *error,
                                    size_t errorSize);
typedef int (*StrataRtWaitFn)(void *user, void *request, char *error,
                              size_t errorSize);

/* Point to point within the ranks `ranks` (which contain this rank); `peer`
   is an index into them. `send` returns once `data` may be reused: it may
   return before the peer receives (the host buffers the message and
   completes it later). Messages between two ranks arrive in the order they
   were sent. Both return 0 on success. */
typedef int (*StrataRtSendFn)(void *user, const void *data, int64_t count,
                              int64_t dtype, const int64_t *ranks,
                              int64_t numRanks, int64_t peer, char *error,
                              size_t errorSize);
typedef int (*StrataRtRecvFn)(void *user, void *data, int64_t count,
                              int64_t dtype, const int64_t *ranks,
                              int64_t numRanks, int64_t peer, char *error,
                              size_t errorSize);

/*===--- Host side --------------------------------------------------------===*/

/* `rank` is this process's world rank, `shard` its index among the
   data-parallel shards (it places its rows in the global batch for the RNG),
   `threads` the worker threads of the kernels (>= 1). */
StrataRtContext *strata_rt_create(uint64_t seed, int64_t rank, int64_t shard,
                                  int64_t threads);
void strata_rt_destroy(StrataRtContext *ctx);
/* The host's collectives; without `wait` every collective completes where
   it starts (computation does not overlap it). */
void strata_rt_set_collectives(StrataRtContext *ctx, StrataRtCollectiveFn run,
                               StrataRtWaitFn wait, void *user);
void strata_rt_set_point_to_point(StrataRtContext *ctx, StrataRtSendFn send,
                                  StrataRtRecvFn recv, void *user);
/* The first failure since the last strata_rt_clear_error, or NULL; `site` is
   the call site that failed. */
const char *strata_rt_error(StrataRtContext *ctx, int64_t *site);
void strata_rt_clear_error(StrataRtContext *ctx);
/* The call site of the host collective, send, receive or wait that this
   context is in, or -1 outside them. One atomic load: a signal handler may
   call it (to say where a rank was when its job was stopped). */
int64_t strata_rt_active_site(const StrataRtContext *ctx);
/* Tracing: when enabled, strata_rt_trace_begin/end (which a step lowered
   with trace=true calls around every op) record each op's site and its
   begin and end times in microseconds since the context was created. */
typedef struct {
  int64_t site;
  double begin;
  double end;
} StrataRtTraceEvent;
void strata_rt_enable_trace(StrataRtContext *ctx, int64_t enable);
void strata_rt_trace_begin(StrataRtContext *ctx, int64_t site);
void strata_rt_trace_end(StrataRtContext *ctx, int64_t site);
/* The events recorded since the last call (the buffer stays valid until the
   next call), and microseconds since the context was created. */
const StrataRtTraceEvent *strata_rt_take_trace(StrataRtContext *ctx,
                                               size_t *count);
double strata_rt_now_us(StrataRtContext *ctx);

/* Bytes of scratch memory the kernels hold beyond the planned arena. */
int64_t strata_rt_scratch_bytes(StrataRtContext *ctx);

/* The signature of a lowered step: `persistent` holds one pointer per
   parameter and state (in the order of the lowered module's
   strata.rt.persistent attribute), `inputs` one per step argument and
   `outputs` one per result. */
typedef void (*StrataRtStepFn)(StrataRtContext *ctx, void *arena,
                               void **persistent, void **inputs,
                               void **outputs);

/* A lowered module (and its object file) also defines its layout:
     const int64_t strata_step_layout[4];   // arena bytes, then the number
                                            // of persistent, input, output
                                            // buffers
     const int64_t strata_step_persistent_bytes[];  // each buffer's size,
     const int64_t strata_step_input_bytes[];       // in the order of
     const int64_t strata_step_output_bytes[];      // strata_step's tables
   The persistent buffers' names, in order, are the module attribute
   strata.rt.persistent (strata-run --emit=mlir); checkpoints hold their
   values by name. */

/* Every kernel by name, for a JIT to resolve the lowered module's calls. */
typedef struct {
  const char *name;
  void *address;
} StrataRtSymbol;
const StrataRtSymbol *strata_rt_symbols(size_t *count);
/* Which build of the kernels strata_rt_symbols() returns: "avx2" (AVX2 +
   FMA, when the processor has them) or "baseline" (x86-64). */
const char *strata_rt_isa(void);

/*===--- Kernels ----------------------------------------------------------===*/

/* C[b] = act(op(A[b]) @ op(B[b]) + bias) for b < batch, A[b] at
   a + b * aBatchStride elements (m * k, or 0: the same matrix for every b;
   likewise B with k * n or 0), op() the
   transpose when trans* is set; bias (N elements) may be NULL. With
   `accumulate`, C += op(A) @ op(B) instead (no bias or activation). */
void strata_rt_gemm(StrataRtContext *ctx, int64_t site, int64_t batch,
                    int64_t m, int64_t n, int64_t k, const float *a,
                    int64_t aBatchStride, int64_t transA, const float *b,
                    int64_t bBatchStride, int64_t transB, float *c,
                    const float *bias, int64_t act, int64_t accumulate);

/* out = a (op) b with broadcasting: `desc` holds the output shape, then the
   element strides of a and b over it (0 on broadcast dimensions). */
void strata_rt_binary(StrataRtContext *ctx, int64_t site, int64_t op,
                      int64_t dtype, void *out, const void *a, const void *b,
                      int64_t rank, const int64_t *desc);
/* out = f(in): an activation, or `alpha * in` for STRATA_RT_UNARY_SCALE. */
void strata_rt_unary(StrataRtContext *ctx, int64_t site, int64_t op,
                     float *out, const float *in, int64_t n, double alpha);
/* out = dy * f'(x); for ReLU `x` is the forward output. */
void strata_rt_act_grad(StrataRtContext *ctx, int64_t site, int64_t act,
                        float *out, const float *x, const float *dy,
                        int64_t n);
void strata_rt_copy(StrataRtContext *ctx, int64_t site, void *out,
                    const void *in, int64_t bytes);
/* out[i] = in[base + sum_d idx_d(i) * stride_d]: transposes, slices,
   broadcasts. `desc` holds the output shape, the input strides, the base. */
void strata_rt_strided_copy(StrataRtContext *ctx, int64_t site,
                            int64_t elementBytes, void *out, const void *in,
                            int64_t rank, const int64_t *desc);
/* out = scale * sum of in over the dimensions whose output stride is 0:
   `desc` holds the input shape, then the output strides over it. */
void strata_rt_reduce(StrataRtContext *ctx, int64_t site, float *out,
                      const float *in, int64_t rank, const int64_t *desc,
                      double scale);
void strata_rt_fill(StrataRtContext *ctx, int64_t site, int64_t dtype,
                    void *out, int64_t n, double value);

/* out = dropout(in) [+ residual], the mask of (seed, key, global element):
   this call covers micro-batch `microBatch` of `microBatches` of the rank's
   shard. */
void strata_rt_dropout(StrataRtContext *ctx, int64_t site, float *out,
                       const float *in, const float *residual, int64_t n,
                       int64_t key, int64_t microBatches, int64_t microBatch,
                       double prob);
/* Row softmax over the last dimension; `causalRows` > 0 masks column j > i
   of row i (rows taken modulo causalRows). */
void strata_rt_softmax(StrataRtContext *ctx, int64_t site, float *out,
                       const float *in, int64_t rows, int64_t n,
                       int64_t causalRows);
void strata_rt_softmax_grad(StrataRtContext *ctx, int64_t site, float *dx,
                            const float *y, const float *dy, int64_t rows,
                            int64_t n);
void strata_rt_layer_norm(StrataRtContext *ctx, int64_t site, float *y,
                          const float *x, const float *gamma,
                          const float *beta, int64_t rows, int64_t n,
                          double eps);
void strata_rt_layer_norm_grad(StrataRtContext *ctx, int64_t site, float *dx,
                               float *dgamma, float *dbeta, const float *x,
                               const float *gamma, const float *dy,
                               int64_t rows, int64_t n, double eps);
void strata_rt_embedding(StrataRtContext *ctx, int64_t site, float *out,
                         const float *table, const void *ids, int64_t idType,
                         int64_t count, int64_t vocab, int64_t width);
void strata_rt_embedding_grad(StrataRtContext *ctx, int64_t site,
                              float *dtable, const void *ids, int64_t idType,
                              const float *dy, int64_t count, int64_t vocab,
                              int64_t width);
/* Mean over rows of -log softmax(logits)[label]. */
void strata_rt_cross_entropy(StrataRtContext *ctx, int64_t site, float *loss,
                             const float *logits, const void *labels,
                             int64_t labelType, int64_t rows, int64_t vocab);
void strata_rt_cross_entropy_grad(StrataRtContext *ctx, int64_t site,
                                  float *dlogits, const float *logits,
                                  const void *labels, int64_t labelType,
                                  const float *dloss, int64_t rows,
                                  int64_t vocab);

/* Optimizer support. `step` points at the int64 step counter. */
void strata_rt_lr_schedule(StrataRtContext *ctx, int64_t site, float *lr,
                           const int64_t *step, int64_t kind, double baseLr,
                           int64_t warmupSteps, int64_t decaySteps,
                           double minLr);
/* out = sqrt(sum of squares of `count` tensors). */
void strata_rt_global_norm(StrataRtContext *ctx, int64_t site, float *out,
                           int64_t count, const float *const *tensors,
                           const int64_t *sizes);
void strata_rt_clip(StrataRtContext *ctx, int64_t site, float *out,
                    const float *in, int64_t n, const float *norm,
                    double maxNorm);
void strata_rt_sgd(StrataRtContext *ctx, int64_t site, float *newParam,
                   const float *param, const float *grad, const float *lr,
                   int64_t n, double weightDecay);
void strata_rt_momentum(StrataRtContext *ctx, int64_t site, float *newParam,
                        float *newVelocity, const float *param,
                        const float *grad, const float *velocity,
                        const float *lr, int64_t n, double momentum,
                        double weightDecay, int64_t nesterov);
void strata_rt_adam(StrataRtContext *ctx, int64_t site, int64_t kind,
                    float *newParam, float *newM, float *newV,
                    const float *param, const float *grad, const float *m,
                    const float *v, const float *lr, const int64_t *step,
                    int64_t n, double beta1, double beta2, double eps,
                    double weightDecay);
void strata_rt_lars(StrataRtContext *ctx, int64_t site, float *newParam,
                    float *newVelocity, const float *param, const float *grad,
                    const float *velocity, const float *lr, int64_t n,
                    double momentum, double weightDecay, double larsCoeff,
                    double eps);

/* Collectives. `group` holds the group's rank lists: their number, then for
   each its length and ranks; the list that holds this rank is used.
   strata_rt_collective starts collective `op` (STRATA_RT_ALL_REDUCE ...) at
   call site `site` and strata_rt_wait(site) completes it, before `out` is
   read; `in` must stay unchanged until then (reduce_scatter and all_gather
   read it while in flight; all_reduce and broadcast copy it into `out`
   first). `n` counts the elements of `out`; reduce_scatter reads n x the
   group size from `in`, all_gather n / the group size. `kind` 0 sums, 1
   averages (all_reduce, reduce_scatter); `root` is the broadcast's index in
   the list. Without the host's wait function the collective completes
   before strata_rt_collective returns. */
void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          int64_t dtype, void *out, const void *in, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group);
void strata_rt_wait(StrataRtContext *ctx, int64_t site);
/* Sends `n` elements of `in` to rank `peer` of this rank's list (an index
   into it); strata_rt_recv receives them there into `out`. */
void strata_rt_send(StrataRtContext *ctx, int64_t site, int64_t dtype,
                    const void *in, int64_t n, int64_t peer,
                    const int64_t *group);
void strata_rt_recv(StrataRtContext *ctx, int64_t site, int64_t dtype,
                    void *out, int64_t n, int64_t peer, const int64_t *group);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_RUNTIME_STRATARUNTIME_H */
