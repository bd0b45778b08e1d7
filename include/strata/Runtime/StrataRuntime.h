/*===- StrataRuntime.h - The runtime C ABI ------------------------*- C -*-===*\
|*                                                                            *|
|* The functions a lowered Strata program calls (strata-lower-to-runtime).    *|
|* Every backend implements the whole ABI with the same semantics (RNG,       *|
|* layouts): the CPU runtime (runtime/cpu) today, a CUDA runtime next.        *|
|*                                                                            *|
|* Conventions:                                                               *|
|*  - every kernel takes the context first and its call site (an index the    *|
|*    lowering gives each op, to cache primitives and name failing ops);      *|
|*  - tensors are dense, row-major, and every tensor argument is followed by  *|
|*    its element type (STRATA_RT_F32 ...); a kernel given a type it has no   *|
|*    implementation for records an error naming the kernel and the type;    *|
|*    floating-point kernels take f32, bf16 or f16 tensors (one type per      *|
|*    call but for strata_rt_cast) and compute in f32; the optimizer updates *|
|*    keep f32 state and compute from an f32 parameter or from the f32      *|
|*    master weight of a bf16/f16 one;                                      *|
|*  - integers are int64_t and attributes double, so that the lowering needs  *|
|*    one calling convention;                                                 *|
|*  - an output may alias an input of the same shape where the memory plan    *|
|*    says so (elementwise ops): kernels read element i before writing it.    *|
|*  - kernels never abort: a failure (an id out of range, a collective that   *|
|*    failed) is recorded in the context, the first one wins, and the host    *|
|*    checks strata_rt_error() after the step.                                *|
|*                                                                            *|
|* Ordering (what a backend with queues, e.g. a GPU, must preserve):          *|
|*  - a step is bracketed by strata_rt_step_begin and strata_rt_step_end;     *|
|*  - kernels are issued in program order on one compute queue: each reads    *|
|*    what the calls before it wrote; a call may return before its work is    *|
|*    done (the CPU runtime finishes it before returning);                    *|
|*  - strata_rt_collective starts a collective after every earlier call's     *|
|*    writes of its input; strata_rt_wait(site) orders every later call       *|
|*    after its completion (the lowering places the wait before the first     *|
|*    reader of the result, and `in` is not written before it);               *|
|*  - send and recv are ordered like collectives that complete where they    *|
|*    are called;                                                             *|
|*  - host-visible results (the step's outputs, e.g. the loss, and the error  *|
|*    state) are valid once strata_rt_step_end has returned; resident         *|
|*    buffers (parameters, state) may be read by the host then too.          *|
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

/* The version of this ABI. A lowered step calls
   strata_rt_step_begin(ctx, STRATA_RT_ABI_VERSION of its compiler), which
   refuses to run it against a runtime of another version; hosts pass theirs
   in StrataRtOptions. Version 1 was the untyped (fp32-only) ABI; version 2
   typed it; version 3 guards the optimizer updates (loss scaling); version
   4 gives them master weights (mixed precision level o2); version 5 adds
   fused attention (strata_rt_attention and its gradient); version 6 the
   GEMM that keeps its pre-activation (strata_rt_gemm_aux); version 7 the
   backward pass's GEMM epilogues (strata_rt_gemm_dact, strata_rt_gemm_bgrad);
   version 8 makes the step's communicators at its start (strata_rt_connect);
   version 9 lays fused attention's tensors out as [batch, sequence, heads,
   head size]; version 10 adds dropout on fused attention's probabilities;
   version 11 groups consecutive optimizer updates (strata_rt_updates_begin
   and strata_rt_updates_end); version 12 makes the cross-entropy's loss
   (and its gradient) f32 whatever its logits' type; version 13 gives the
   cross-entropy rows wider than its classes (padded logits); version 14
   gives fused attention fewer key and value heads than query heads
   (grouped-query attention); version 15 counts the products that GEMM
   autotuning put on the CPU runtime's packed GEMM.
 */
#define STRATA_RT_ABI_VERSION 15

/* Element types of tensor arguments. */
enum {
  STRATA_RT_F32 = 0,
  STRATA_RT_I32 = 1,
  STRATA_RT_I64 = 2,
  STRATA_RT_BF16 = 3,
  STRATA_RT_F16 = 4,
  STRATA_RT_I8 = 5,
  STRATA_RT_U8 = 6
};
/* Bytes per element of `dtype`, or 0 for an unknown code. */
static inline int64_t strata_rt_element_bytes(int64_t dtype) {
  switch (dtype) {
  case STRATA_RT_F32:
  case STRATA_RT_I32:
    return 4;
  case STRATA_RT_I64:
    return 8;
  case STRATA_RT_BF16:
  case STRATA_RT_F16:
    return 2;
  case STRATA_RT_I8:
  case STRATA_RT_U8:
    return 1;
  }
  return 0;
}
/* The name of `dtype` ("f32", "bf16", ...), or "unknown". */
static inline const char *strata_rt_element_name(int64_t dtype) {
  switch (dtype) {
  case STRATA_RT_F32:
    return "f32";
  case STRATA_RT_I32:
    return "i32";
  case STRATA_RT_I64:
    return "i64";
  case STRATA_RT_BF16:
    return "bf16";
  case STRATA_RT_F16:
    return "f16";
  case STRATA_RT_I8:
    return "i8";
  case STRATA_RT_U8:
    return "u8";
  }
  return "unknown";
}
/* Activations (epilogues, unary ops, their gradients). */
enum {
  STRATA_RT_ACT_NONE = 0,
  STRATA_RT_ACT_RELU = 1,
  STRATA_RT_ACT_GELU_TANH = 2,
  STRATA_RT_ACT_GELU_ERF = 3,
  STRATA_RT_UNARY_SCALE = 4,
  STRATA_RT_ACT_SILU = 5,
  STRATA_RT_UNARY_RSQRT = 6,
  STRATA_RT_UNARY_TANH = 7
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

/* What a context is created with. Fill it with strata_rt_default_options
   and set what differs: fields are only ever appended (`size` tells the
   runtime how much of the struct the caller knows). */
typedef struct {
  int64_t abiVersion; /* STRATA_RT_ABI_VERSION of the caller's header */
  int64_t size;       /* sizeof(StrataRtOptions) of the caller's header */
  uint64_t seed;      /* of the RNG streams (dropout) */
  int64_t rank;       /* this process's world rank */
  int64_t shard;      /* its index among the data-parallel shards (it places
                         its rows in the global batch for the RNG) */
  int64_t threads;    /* worker threads of the kernels (>= 1) */
  int64_t device;     /* the device to run on; -1: the backend's choice (the
                         CPU runtime has one device, 0) */
  int64_t tf32;       /* nonzero: f32 GEMMs may round their operands to
                         TF32 (CUDA tensor cores; off by default for true
                         f32 results; the CPU runtime has no TF32) */
  int64_t collectiveTimeout; /* seconds a step's end may wait for its
                         collectives and transfers before it fails and
                         aborts them (a rank that hangs); 0: no limit;
                         default 1800. The CUDA runtime's (the CPU runtime's
                         MPI calls block until the launcher ends a job
                         whose rank died) */
  int64_t gemmAutotune;      /* nonzero: the CPU runtime times each distinct f32
                              GEMM without an activation epilogue once, through
                              oneDNN's matmul primitive, its sgemm and (with
                              AVX2) Strata's packed GEMM, and runs the fastest
                              from then on (results may then differ at rounding
                              level between runs and thread counts); 0 (the
                              default): the packed GEMM where the processor's
                              widest kernels are AVX2, the matmul primitive
                              elsewhere. The CUDA runtime ignores it (cuBLASLt's
                              heuristics choose) */
} StrataRtOptions;
void strata_rt_default_options(StrataRtOptions *options);
/* The ABI version this runtime implements. */
int64_t strata_rt_abi_version(void);
/* A context, or NULL with a message in `error` (an ABI version this runtime
   does not implement, a device it does not have). */
StrataRtContext *strata_rt_create(const StrataRtOptions *options, char *error,
                                  size_t errorSize);
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

/* The lowered step calls these first and last. strata_rt_step_begin
   returns 0 when the step may run, else records why in the error state
   (a step lowered for another ABI version) and the step returns at once.
   strata_rt_step_end completes the step's work: after it the outputs and
   the error state are valid on the host (see "Ordering" above). */
int64_t strata_rt_step_begin(StrataRtContext *ctx, int64_t abiVersion);
void strata_rt_step_end(StrataRtContext *ctx);

/* The backend's memory, where a step's buffers live (its arena, the
   persistent buffers, inputs and outputs): host memory for the CPU runtime,
   device memory for CUDA. strata_rt_alloc returns `bytes` zeroed bytes
   aligned to 256, or NULL with the failure in the error state;
   strata_rt_write copies host memory in and strata_rt_read copies out, each
   after every call issued before it has completed. These host functions
   came with version 5 and change nothing for lowered steps, which never
   call them. */
void *strata_rt_alloc(StrataRtContext *ctx, int64_t bytes);
void strata_rt_free(StrataRtContext *ctx, void *memory);
void strata_rt_write(StrataRtContext *ctx, void *to, const void *from,
                     int64_t bytes);
void strata_rt_read(StrataRtContext *ctx, void *to, const void *from,
                    int64_t bytes);

/* Bytes of scratch memory the kernels hold beyond the planned arena. */
int64_t strata_rt_scratch_bytes(StrataRtContext *ctx);
/* GEMM autotuning (StrataRtOptions::gemmAutotune) so far: the distinct
   products timed, and of those the ones that run through oneDNN's sgemm
   and through Strata's packed GEMM (the rest run through oneDNN's matmul
   primitive; all 0 without it, and on the CUDA runtime). */
void strata_rt_gemm_autotuned(StrataRtContext *ctx, int64_t *timed,
                              int64_t *onSgemm, int64_t *onPacked);

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
/* Which build of the kernels strata_rt_symbols() returns: "avx512" (AVX-512
   F/BW/VL/DQ), "avx2" (AVX2 + FMA + F16C) or "baseline" (x86-64), the widest
   the processor has; the environment variable STRATA_CPU_ISA=avx2 or
   baseline asks for a narrower one. The CUDA runtime's is "cuda". */
const char *strata_rt_isa(void);

/*===--- Kernels ----------------------------------------------------------===*/

/* Tensor arguments come in pairs: the buffer, then its element type. */

/* C[b] = act(op(A[b]) @ op(B[b]) + bias) for b < batch, A[b] at
   a + b * aBatchStride elements (m * k, or 0: the same matrix for every b;
   likewise B with k * n or 0), op() the
   transpose when trans* is set; bias (N elements) may be NULL. With
   `accumulate`, C += op(A) @ op(B) instead (no bias or activation: one is
   refused). With k = 0 the product is zero: C = act(bias) in every row (0
   without a bias), unchanged when accumulating. */
void strata_rt_gemm(StrataRtContext *ctx, int64_t site, int64_t batch,
                    int64_t m, int64_t n, int64_t k, const void *a,
                    int64_t aType, int64_t aBatchStride, int64_t transA,
                    const void *b, int64_t bType, int64_t bBatchStride,
                    int64_t transB, void *c, int64_t cType, const void *bias,
                    int64_t biasType, int64_t act, int64_t accumulate);

/* The epilogue that keeps its pre-activation for the gradient (training's
   fused GEMM + bias + activation): aux = op(A) @ op(B) + bias (bias of N
   elements, or NULL) and c = act(aux), for one M x N product; c and aux
   have the same type and do not alias. In bf16 and f16 the activation
   reads the unrounded f32 pre-activation, and aux and c are each rounded
   once. (cuBLASLt's GELU_AUX_BIAS.) */
void strata_rt_gemm_aux(StrataRtContext *ctx, int64_t site, int64_t m,
                        int64_t n, int64_t k, const void *a, int64_t aType,
                        int64_t transA, const void *b, int64_t bType,
                        int64_t transB, void *c, int64_t cType, void *aux,
                        int64_t auxType, const void *bias, int64_t biasType,
                        int64_t act);

/* The backward pass's epilogue of an activation: c = (op(A) @ op(B)) *
   act'(aux), for one M x N product, `aux` (M x N) the activation's input as
   strata_rt_act_grad takes it. (cuBLASLt's DGELU.) */
void strata_rt_gemm_dact(StrataRtContext *ctx, int64_t site, int64_t m,
                         int64_t n, int64_t k, const void *a, int64_t aType,
                         int64_t transA, const void *b, int64_t bType,
                         int64_t transB, void *c, int64_t cType,
                         const void *aux, int64_t auxType, int64_t act);
/* The backward pass's bias-gradient epilogue: c = op(A) @ op(B) for one
   M x N product and `bgrad` = the sums of op(A) over k (M elements;
   `operand` 0) or of op(B) over k (N elements; 1), as strata_rt_reduce sums
   them. (cuBLASLt's BGRADB / BGRADA.) */
void strata_rt_gemm_bgrad(StrataRtContext *ctx, int64_t site, int64_t m,
                          int64_t n, int64_t k, const void *a, int64_t aType,
                          int64_t transA, const void *b, int64_t bType,
                          int64_t transB, void *c, int64_t cType, void *bgrad,
                          int64_t bgradType, int64_t operand);

/* out = a (op) b with broadcasting: `desc` holds the output shape, then the
   element strides of a and b over it (0 on broadcast dimensions). f32,
   bf16, f16, i32 and i64; integer division is refused. */
void strata_rt_binary(StrataRtContext *ctx, int64_t site, int64_t op,
                      void *out, int64_t outType, const void *a, int64_t aType,
                      const void *b, int64_t bType, int64_t rank,
                      const int64_t *desc);
/* out = f(in): an activation, `alpha * in` for STRATA_RT_UNARY_SCALE,
   1 / sqrt(in) for STRATA_RT_UNARY_RSQRT, tanh(in) for STRATA_RT_UNARY_TANH. */
void strata_rt_unary(StrataRtContext *ctx, int64_t site, int64_t op,
                     void *out, int64_t outType, const void *in,
                     int64_t inType, int64_t n, double alpha);
/* out = dy * f'(x); for ReLU `x` is the forward output. */
void strata_rt_act_grad(StrataRtContext *ctx, int64_t site, int64_t act,
                        void *out, int64_t outType, const void *x,
                        int64_t xType, const void *dy, int64_t dyType,
                        int64_t n);
/* out = in converted to out's element type (f32, bf16, f16; rounded to
   nearest even). */
void strata_rt_cast(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, const void *in, int64_t inType, int64_t n);
/* Copies `n` elements (no conversion: both have `dtype`). */
void strata_rt_copy(StrataRtContext *ctx, int64_t site, void *out,
                    const void *in, int64_t dtype, int64_t n);
/* out[i] = in[base + sum_d idx_d(i) * stride_d]: transposes, slices,
   broadcasts of elements of `dtype`. `desc` holds the output shape, the
   input strides, the base. */
void strata_rt_strided_copy(StrataRtContext *ctx, int64_t site, void *out,
                            const void *in, int64_t dtype, int64_t rank,
                            const int64_t *desc);
/* One input of a concatenation: row r of `in` (`inRow` elements of
   `dtype`) goes to out[r * outRow + offset], for r < rows. */
void strata_rt_copy_rows(StrataRtContext *ctx, int64_t site, void *out,
                         const void *in, int64_t dtype, int64_t rows,
                         int64_t inRow, int64_t outRow, int64_t offset);
/* out = scale * sum of in over the dimensions whose output stride is 0:
   `desc` holds the input shape, then the output strides over it. */
void strata_rt_reduce(StrataRtContext *ctx, int64_t site, void *out,
                      int64_t outType, const void *in, int64_t inType,
                      int64_t rank, const int64_t *desc, double scale);
void strata_rt_fill(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, int64_t n, double value);

/* out = dropout(in) [+ residual], the mask of (seed, key, global element):
   this call covers micro-batch `microBatch` of `microBatches` of the rank's
   shard. `residual` may be NULL. */
void strata_rt_dropout(StrataRtContext *ctx, int64_t site, void *out,
                       int64_t outType, const void *in, int64_t inType,
                       const void *residual, int64_t residualType, int64_t n,
                       int64_t key, int64_t microBatches, int64_t microBatch,
                       double prob);
/* Row softmax over the last dimension; `causalRows` > 0 masks column j > i
   of row i (rows taken modulo causalRows). */
void strata_rt_softmax(StrataRtContext *ctx, int64_t site, void *out,
                       int64_t outType, const void *in, int64_t inType,
                       int64_t rows, int64_t n, int64_t causalRows);
void strata_rt_softmax_grad(StrataRtContext *ctx, int64_t site, void *dx,
                            int64_t dxType, const void *y, int64_t yType,
                            const void *dy, int64_t dyType, int64_t rows,
                            int64_t n);
/* Scaled dot-product attention of `batch` x `heads` independent slices:
   q [batch, s, heads, d], k [batch, t, kvHeads, d], v [batch, t, kvHeads,
   dv] (a projection's output, heads side by side in each row); out =
   softmax(scale * q k^T) v per batch and head, [batch, s, heads, dv], and
   lse, the log-sum-exp of each query's scaled scores, [batch, heads, s].
   kvHeads divides heads: query head h reads key and value head h /
   (heads / kvHeads) (grouped-query attention; kvHeads = heads for
   multi-head attention).
   With `causal` (s <= t; more queries than keys are refused) key j is
   masked for query i when j > i. With
   `dropout` > 0 the probabilities go through strata_rt_dropout's mask of
   `dropoutKey` for the [batch, heads, s, t] tensor of probabilities
   (micro-batch `microBatch` of `microBatches`) before their product with
   v; lse is that of the probabilities before it. */
void strata_rt_attention(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, void *lse, int64_t lseType,
                         const void *q, int64_t qType, const void *k,
                         int64_t kType, const void *v, int64_t vType,
                         int64_t batch, int64_t heads, int64_t kvHeads,
                         int64_t s, int64_t t, int64_t d, int64_t dv,
                         double scale, int64_t causal, double dropout,
                         int64_t dropoutKey, int64_t microBatches,
                         int64_t microBatch);
/* dq, dk, dv of strata_rt_attention from its inputs, out, lse and dout (each
   gradient in its operand's layout; a key or value head's gradient sums
   over the query heads that read it); the other arguments as the forward
   call's. */
void strata_rt_attention_grad(
    StrataRtContext *ctx, int64_t site, void *dq, int64_t dqType, void *dk,
    int64_t dkType, void *dv, int64_t dvType, const void *q, int64_t qType,
    const void *k, int64_t kType, const void *v, int64_t vType, const void *out,
    int64_t outType, const void *lse, int64_t lseType, const void *dout,
    int64_t doutType, int64_t batch, int64_t heads, int64_t kvHeads, int64_t s,
    int64_t t, int64_t d, int64_t dvDim, double scale, int64_t causal,
    double dropout, int64_t dropoutKey, int64_t microBatches,
    int64_t microBatch);
void strata_rt_layer_norm(StrataRtContext *ctx, int64_t site, void *y,
                          int64_t yType, const void *x, int64_t xType,
                          const void *gamma, int64_t gammaType,
                          const void *beta, int64_t betaType, int64_t rows,
                          int64_t n, double eps);
void strata_rt_layer_norm_grad(StrataRtContext *ctx, int64_t site, void *dx,
                               int64_t dxType, void *dgamma,
                               int64_t dgammaType, void *dbeta,
                               int64_t dbetaType, const void *x, int64_t xType,
                               const void *gamma, int64_t gammaType,
                               const void *dy, int64_t dyType, int64_t rows,
                               int64_t n, double eps);
/* RMS norm over the last dimension of `rows` rows of `n`: y = x /
   sqrt(mean(x^2) + eps) * gamma; its gradient dx, dgamma. */
void strata_rt_rms_norm(StrataRtContext *ctx, int64_t site, void *y,
                        int64_t yType, const void *x, int64_t xType,
                        const void *gamma, int64_t gammaType, int64_t rows,
                        int64_t n, double eps);
void strata_rt_rms_norm_grad(StrataRtContext *ctx, int64_t site, void *dx,
                             int64_t dxType, void *dgamma, int64_t dgammaType,
                             const void *x, int64_t xType, const void *gamma,
                             int64_t gammaType, const void *dy, int64_t dyType,
                             int64_t rows, int64_t n, double eps);
void strata_rt_embedding(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, const void *table,
                         int64_t tableType, const void *ids, int64_t idsType,
                         int64_t count, int64_t vocab, int64_t width);
/* dtable = the rows of dy summed by id; ids equal to paddingIdx (-1 for
   none) are left out, as ids outside [0, vocab). */
void strata_rt_embedding_grad(StrataRtContext *ctx, int64_t site, void *dtable,
                              int64_t dtableType, const void *ids,
                              int64_t idsType, const void *dy, int64_t dyType,
                              int64_t count, int64_t vocab, int64_t width,
                              int64_t paddingIdx);
/* Mean over rows of -log softmax(logits)[label], computed in f32 for
   every logits type (f32, bf16, f16): the loss and its gradient `dloss`
   are f32, `dlogits` has the logits' type. A row holds `width` elements,
   of which the first `vocab` (1 <= vocab <= width) are the classes; the
   rest is padding, never read, whose gradient is written as zero. */
void strata_rt_cross_entropy(StrataRtContext *ctx, int64_t site, void *loss,
                             int64_t lossType, const void *logits,
                             int64_t logitsType, const void *labels,
                             int64_t labelsType, int64_t rows, int64_t vocab,
                             int64_t width);
void strata_rt_cross_entropy_grad(StrataRtContext *ctx, int64_t site,
                                  void *dlogits, int64_t dlogitsType,
                                  const void *logits, int64_t logitsType,
                                  const void *labels, int64_t labelsType,
                                  const void *dloss, int64_t dlossType,
                                  int64_t rows, int64_t vocab, int64_t width);

/* Optimizer support. `step` is the step counter (a scalar tensor). Every
   update takes a `guard` (NULL: none): the gradients' global norm under
   loss scaling; when it is not finite the update is skipped, its outputs
   equal to its inputs (nothing is written when they alias). Then
   `newMaster` and `master` (NULL: none): with them the parameter is bf16
   or f16, the update computes from the f32 master weight (state f32, the
   gradient the parameter's type or f32), writes the new master and the
   parameter as the new master rounded to nearest even. Without them
   every tensor is f32. The global norm and clipping take f32, bf16 or f16
   gradients (the norm accumulates in double). */
void strata_rt_lr_schedule(StrataRtContext *ctx, int64_t site, void *lr,
                           int64_t lrType, const void *step, int64_t stepType,
                           int64_t kind, double baseLr, int64_t warmupSteps,
                           int64_t decaySteps, double minLr);
/* out = sqrt(sum of squares of `count` tensors), tensor i of types[i]. */
void strata_rt_global_norm(StrataRtContext *ctx, int64_t site, void *out,
                           int64_t outType, int64_t count,
                           const void *const *tensors, const int64_t *types,
                           const int64_t *sizes);
/* out = in * factor (an f32 scalar), computed in f32 and rounded once to
   the tensors' type (loss scaling's unscale of a gradient); out may be
   in. */
void strata_rt_scale_by(StrataRtContext *ctx, int64_t site, void *out,
                        int64_t outType, const void *in, int64_t inType,
                        int64_t n, const void *factor, int64_t factorType);
void strata_rt_clip(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, const void *in, int64_t inType, int64_t n,
                    const void *norm, int64_t normType, double maxNorm);
void strata_rt_sgd(StrataRtContext *ctx, int64_t site, void *newParam,
                   int64_t newParamType, const void *param, int64_t paramType,
                   const void *grad, int64_t gradType, const void *lr,
                   int64_t lrType, int64_t n, double weightDecay,
                   const void *guard, int64_t guardType, void *newMaster,
                   int64_t newMasterType, const void *master,
                   int64_t masterType);
void strata_rt_momentum(StrataRtContext *ctx, int64_t site, void *newParam,
                        int64_t newParamType, void *newVelocity,
                        int64_t newVelocityType, const void *param,
                        int64_t paramType, const void *grad, int64_t gradType,
                        const void *velocity, int64_t velocityType,
                        const void *lr, int64_t lrType, int64_t n,
                        double momentum, double weightDecay, int64_t nesterov,
                        const void *guard, int64_t guardType, void *newMaster,
                        int64_t newMasterType, const void *master,
                        int64_t masterType);
void strata_rt_adam(StrataRtContext *ctx, int64_t site, int64_t kind,
                    void *newParam, int64_t newParamType, void *newM,
                    int64_t newMType, void *newV, int64_t newVType,
                    const void *param, int64_t paramType, const void *grad,
                    int64_t gradType, const void *m, int64_t mType,
                    const void *v, int64_t vType, const void *lr,
                    int64_t lrType, const void *step, int64_t stepType,
                    int64_t n, double beta1, double beta2, double eps,
                    double weightDecay, const void *guard, int64_t guardType,
                    void *newMaster, int64_t newMasterType, const void *master,
                    int64_t masterType);
void strata_rt_lars(StrataRtContext *ctx, int64_t site, void *newParam,
                    int64_t newParamType, void *newVelocity,
                    int64_t newVelocityType, const void *param,
                    int64_t paramType, const void *grad, int64_t gradType,
                    const void *velocity, int64_t velocityType, const void *lr,
                    int64_t lrType, int64_t n, double momentum,
                    double weightDecay, double larsCoeff, double eps,
                    const void *guard, int64_t guardType, void *newMaster,
                    int64_t newMasterType, const void *master,
                    int64_t masterType);
/* A group of updates: the calls between strata_rt_updates_begin and
   strata_rt_updates_end (the same `site`, the group's first update) are
   optimizer updates (strata_rt_sgd, _momentum, _adam, _lars), none reading
   or writing memory that another writes, and tracing calls. A
   runtime may run them together, in any order, until the group's end:
   the CUDA runtime launches a group's Adam and AdamW updates as one kernel
   per element type (batches of 32 tensors), where it launched one per
   tensor; the CPU runtime runs a group's updates at its end, last first
   (so that updates which are not independent change its results). Groups
   do not nest, and a step ends with none open. */
void strata_rt_updates_begin(StrataRtContext *ctx, int64_t site);
void strata_rt_updates_end(StrataRtContext *ctx, int64_t site);
/* out (i64) = 1 when the f32 scalar `in` is finite, else 0. */
void strata_rt_is_finite(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, const void *in, int64_t inType);
/* Paddle's dynamic loss-scaling rule (strata.update_loss_scaling): from
   the gradients' global norm (not finite: an overflow), the f32 scale and
   the i64 counters of good and bad steps, their new values. */
void strata_rt_update_loss_scaling(
    StrataRtContext *ctx, int64_t site, void *newScale, int64_t newScaleType,
    void *newGood, int64_t newGoodType, void *newBad, int64_t newBadType,
    const void *norm, int64_t normType, const void *scale, int64_t scaleType,
    const void *good, int64_t goodType, const void *bad, int64_t badType,
    int64_t incrEveryNSteps, int64_t decrEveryNNanOrInf, double incrRatio,
    double decrRatio);

/* Collectives. `group` holds the group's rank lists: their number, then for
   each its length and ranks; the list that holds this rank is used.
   strata_rt_collective starts collective `op` (STRATA_RT_ALL_REDUCE ...) at
   call site `site` and strata_rt_wait(site) completes it, before `out` is
   read; `in` must stay unchanged until then (reduce_scatter and all_gather
   read it while in flight; all_reduce and broadcast copy it into `out`
   first). Both have element type `dtype`. `n` counts the elements of `out`;
   reduce_scatter reads n x the group size from `in`, all_gather n / the
   group size. `kind` 0 sums, 1 averages (all_reduce, reduce_scatter);
   `root` is the broadcast's index in the list. Without the host's wait
   function the collective completes before strata_rt_collective returns. */
void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          void *out, const void *in, int64_t dtype, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group);
void strata_rt_wait(StrataRtContext *ctx, int64_t site);
/* Makes the communicators of the step's collectives and point-to-point
   transfers before any of them runs, in one order every rank agrees on, so
   that ranks whose first collectives or messages come in different orders
   cannot wait on each other while making them (MPI and NCCL make a
   communicator collectively, blocking until every member arrives). `plan`:
   the number of entries, then per entry the peer's index for a send or
   receive (-1 for a collective) and its group as strata_rt_collective takes
   it. The host's communicators first (a one-byte broadcast over each of
   this rank's lists, in sorted order), then the CUDA runtime's NCCL
   communicators (sorted lists) and links (sorted rank pairs). Lists already
   made are skipped, so the lowered step calls it at every step's start;
   without the host's collectives it does nothing. */
void strata_rt_connect(StrataRtContext *ctx, int64_t site, const int64_t *plan);
/* Sends `n` elements of `in` to rank `peer` of this rank's list (an index
   into it); strata_rt_recv receives them there into `out`. */
void strata_rt_send(StrataRtContext *ctx, int64_t site, const void *in,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group);
void strata_rt_recv(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_RUNTIME_STRATARUNTIME_H */
