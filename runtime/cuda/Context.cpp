//===- Context.cpp - Host side of the CUDA runtime ------------------------===//
//
// The context's life cycle on its device (streams, cuBLASLt, NCCL), the
// step's end (where asynchronous failures surface: faults of kernels,
// collectives' errors, bad ids the kernels found), tracing by CUDA events,
// and device scratch.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "Collectives.h"
#include "Gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

StrataRtContext::StrataRtContext() : HostContext("CUDA runtime") {}

StrataRtContext::~StrataRtContext() {
  cudaSetDevice(device);
  // Every stream this context owns is idle before what it used is freed.
  if (comms) {
    // Without an earlier failure, wait as a step's end does, so a peer
    // that stopped (or the timeout) aborts the communicators instead of
    // hanging here. After one, operations may wait for peers that are gone:
    // abort them first, which ends them. Either way the links' streams are
    // waited for and destroyed with their communicators.
    if (error.empty())
      strata::cuda::finishStreams(this);
    comms->release(/*abort=*/!error.empty());
  }
  if (compute)
    cudaStreamSynchronize(compute);
  if (comm)
    cudaStreamSynchronize(comm);
  comms.reset(); // before the streams its collectives ran on
  gemm.reset();
  for (auto &e : traceEvents) {
    cudaEventDestroy(e.begin);
    cudaEventDestroy(e.end);
  }
  if (epoch)
    cudaEventDestroy(epoch);
  if (compute) {
    for (unsigned long long *chunk : errorWordChunks)
      cudaFreeAsync(chunk, compute);
    if (scratch)
      cudaFreeAsync(scratch, compute);
    cudaStreamSynchronize(compute);
  }
  if (pool)
    cudaMemPoolDestroy(pool);
  if (compute)
    cudaStreamDestroy(compute);
  if (comm)
    cudaStreamDestroy(comm);
}

namespace {
/// Error words per chunk.
constexpr size_t kErrorWordsPerChunk = 1024;
} // namespace

void *StrataRtContext::scratchBytes(int64_t site, size_t bytes) {
  if (bytes <= scratchSize)
    return scratch;
  // Stream-ordered: the old block is freed once the compute stream's
  // kernels issued before have run (they may still read it), the new one
  // allocated behind them; the host waits for neither, so collectives and
  // transfers in flight on other streams cannot hold it up.
  // Geometric growth: few blocks left behind in the pool.
  size_t grown = std::max({bytes, 2 * scratchSize, size_t(1) << 20});
  if (scratch)
    check(site, cudaFreeAsync(scratch, compute), "device scratch");
  scratch = nullptr;
  scratchSize = 0;
  void *memory = nullptr;
  if (!check(site, cudaMallocFromPoolAsync(&memory, grown, pool, compute),
             "device scratch"))
    return nullptr;
  scratch = memory;
  scratchSize = grown;
  return scratch;
}

namespace strata::cuda {

unsigned long long *deviceErrorWord(StrataRtContext *ctx, int64_t site,
                                    const char *noun, int64_t limit) {
  size_t index = ctx->errorWordUses.size();
  if (index / kErrorWordsPerChunk == ctx->errorWordChunks.size()) {
    // From the pool, on the compute stream: a chunk may be added mid-step,
    // where cudaMalloc could synchronize the device.
    void *memory = nullptr;
    if (!ctx->check(site,
                    cudaMallocFromPoolAsync(&memory,
                                            kErrorWordsPerChunk *
                                                sizeof(unsigned long long),
                                            ctx->pool, ctx->compute),
                    "an error word"))
      return nullptr;
    auto *chunk = static_cast<unsigned long long *>(memory);
    ctx->errorWordChunks.push_back(chunk);
    if (!ctx->check(
            site,
            cudaMemsetAsync(chunk, 0x7f,
                            kErrorWordsPerChunk * sizeof(unsigned long long),
                            ctx->compute),
            "an error word"))
      return nullptr;
  }
  ctx->errorWordUses.push_back({site, noun, limit});
  return ctx->errorWordChunks[index / kErrorWordsPerChunk] +
         index % kErrorWordsPerChunk;
}

} // namespace strata::cuda

/// Reads the error words the step's kernels used, records the first that
/// was set, and sets them back to "none".
static void collectErrorWords(StrataRtContext *ctx) {
  size_t used = ctx->errorWordUses.size();
  for (size_t c = 0; c * kErrorWordsPerChunk < used; ++c) {
    size_t count =
        std::min(kErrorWordsPerChunk, used - c * kErrorWordsPerChunk);
    std::vector<unsigned long long> words(count);
    if (!ctx->check(-1,
                    cudaMemcpy(words.data(), ctx->errorWordChunks[c],
                               count * sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost),
                    "reading the kernels' error words"))
      break;
    for (size_t i = 0; i < count; ++i)
      if (words[i] != strata::cuda::kNoError) {
        const auto &use = ctx->errorWordUses[c * kErrorWordsPerChunk + i];
        int64_t position = int64_t(words[i] >> 32) - 1;
        int32_t value = int32_t(uint32_t(words[i]));
        std::string shown = value == INT32_MAX   ? ">= 2147483647"
                            : value == INT32_MIN ? "<= -2147483648"
                                                 : std::to_string(value);
        ctx->fail(use.site, use.noun + " " + shown + " outside [0, " +
                                std::to_string(use.limit) + ") (position " +
                                std::to_string(position) + ")");
        break;
      }
    // On the compute stream, which does not wait for the legacy stream.
    ctx->check(-1,
               cudaMemsetAsync(ctx->errorWordChunks[c], 0x7f,
                               count * sizeof(unsigned long long),
                               ctx->compute),
               "resetting the kernels' error words");
  }
  ctx->errorWordUses.clear();
}

/// The context's pool on `device` (see StrataRtContext::pool).
static cudaError_t makePool(int device, cudaMemPool_t &pool) {
  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof(props));
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  if (cudaError_t e = cudaMemPoolCreate(&pool, &props); e != cudaSuccess) {
    pool = nullptr;
    return e;
  }
  uint64_t keepAll = UINT64_MAX; // the attribute is a cuuint64_t
  int yes = 1, no = 0;
  cudaError_t e =
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keepAll);
  if (e == cudaSuccess)
    e = cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &yes);
  if (e == cudaSuccess)
    e = cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies,
                                &no);
  return e;
}

/// The device of a process that asked for none: its rank among the ranks of
/// its machine, as the MPI launchers and Slurm tell it, modulo the devices.
static int localDevice(int devices) {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::max(0, std::atoi(value)) % devices;
  return 0;
}

extern "C" {

StrataRtContext *strata_rt_create(const StrataRtOptions *options, char *error,
                                  size_t errorSize) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess)
    return strata::rt::refuse(std::string("no CUDA device: ") +
                                  cudaGetErrorString(e),
                              error, errorSize);
  std::string refused =
      strata::rt::checkOptions(options, "CUDA runtime", devices);
  if (!refused.empty())
    return strata::rt::refuse(refused, error, errorSize);
  auto ctx = std::make_unique<StrataRtContext>();
  ctx->seed = options->seed;
  ctx->rank = options->rank;
  ctx->shard = options->shard;
  ctx->device =
      options->device < 0 ? localDevice(devices) : int(options->device);
  bool tf32 = STRATA_RT_OPTION_GIVEN(options, tf32) && options->tf32 != 0;
  if (STRATA_RT_OPTION_GIVEN(options, collectiveTimeout))
    ctx->collectiveTimeout = std::max<int64_t>(options->collectiveTimeout, 0);
  auto cudaFailed = [&](cudaError_t e, const char *what) {
    return strata::rt::refuse(std::string(what) + " on device " +
                                  std::to_string(ctx->device) + ": " +
                                  cudaGetErrorString(e),
                              error, errorSize);
  };
  if (cudaError_t e = cudaSetDevice(ctx->device); e != cudaSuccess)
    return cudaFailed(e, "selecting the device");
  cudaDeviceProp props;
  if (cudaError_t e = cudaGetDeviceProperties(&props, ctx->device);
      e != cudaSuccess)
    return cudaFailed(e, "reading the device's properties");
  ctx->computeMajor = props.major;
  ctx->sharedPerBlockOptin = props.sharedMemPerBlockOptin;
  for (cudaStream_t *s : {&ctx->compute, &ctx->comm})
    if (cudaError_t e = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
        e != cudaSuccess)
      return cudaFailed(e, "creating a stream");
  int pools = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(
          &pools, cudaDevAttrMemoryPoolsSupported, ctx->device);
      e != cudaSuccess || !pools)
    return cudaFailed(e != cudaSuccess ? e : cudaErrorNotSupported,
                      "stream-ordered memory pools");
  if (cudaError_t e = makePool(ctx->device, ctx->pool); e != cudaSuccess)
    return cudaFailed(e, "creating a memory pool");
  if (cudaError_t e = cudaEventCreate(&ctx->epoch); e != cudaSuccess)
    return cudaFailed(e, "creating an event");
  ctx->gemm = std::make_unique<strata::cuda::GemmCache>();
  if (std::string failed = ctx->gemm->init(props.major, tf32); !failed.empty())
    return strata::rt::refuse(failed, error, errorSize);
  ctx->comms = std::make_unique<strata::cuda::Communicators>();
  return ctx.release();
}

void strata_rt_destroy(StrataRtContext *ctx) { delete ctx; }

void strata_rt_step_end(StrataRtContext *ctx) {
  cudaSetDevice(ctx->device);
  // (A group left open still runs its updates.)
  strata::cuda::launchPendingAdams(ctx);
  strata::rt::checkNoUpdatesOpen(*ctx);
  auto &pending = ctx->comms->pending;
  if (!pending.empty()) {
    ctx->fail(pending.begin()->first,
              std::string(pending.begin()->second.name) +
                  " was started but never waited for");
    for (auto &[site, p] : pending)
      ctx->comms->freeEvents.push_back(p.done);
    pending.clear();
  }
  // Every call of the step has been issued; wait for the device, watching
  // the collectives for failures of other ranks.
  strata::cuda::finishStreams(ctx);
  if (ctx->error.empty())
    ctx->check(-1, cudaGetLastError(), "the step's kernels");
  collectErrorWords(ctx);
}

void strata_rt_trace_begin(StrataRtContext *ctx, int64_t site) {
  if (!ctx->tracing)
    return;
  // The first op since the trace was last taken sets the epoch that its
  // events are measured from.
  if (ctx->traceEvents.empty()) {
    ctx->check(site, cudaEventRecord(ctx->epoch, ctx->compute), "tracing");
    ctx->epochUs = ctx->nowUs();
  }
  StrataRtContext::OpenEvent e{site, nullptr, nullptr};
  if (ctx->check(site, cudaEventCreate(&e.begin), "tracing") &&
      ctx->check(site, cudaEventCreate(&e.end), "tracing")) {
    cudaEventRecord(e.begin, ctx->compute);
    ctx->traceEvents.push_back(e);
  }
}

void strata_rt_trace_end(StrataRtContext *ctx, int64_t site) {
  if (ctx->tracing && !ctx->traceEvents.empty() &&
      ctx->traceEvents.back().site == site)
    cudaEventRecord(ctx->traceEvents.back().end, ctx->compute);
}

const StrataRtTraceEvent *strata_rt_take_trace(StrataRtContext *ctx,
                                               size_t *count) {
  // Device times relative to the first traced op of the batch, placed on
  // the host clock where that op was issued.
  ctx->taken.clear();
  if (!ctx->traceEvents.empty())
    cudaEventSynchronize(ctx->traceEvents.back().end);
  for (auto &e : ctx->traceEvents) {
    float begin = 0, end = 0;
    cudaEventElapsedTime(&begin, ctx->epoch, e.begin);
    cudaEventElapsedTime(&end, ctx->epoch, e.end);
    ctx->taken.push_back(
        {e.site, ctx->epochUs + 1000.0 * begin, ctx->epochUs + 1000.0 * end});
    cudaEventDestroy(e.begin);
    cudaEventDestroy(e.end);
  }
  ctx->traceEvents.clear();
  *count = ctx->taken.size();
  return ctx->taken.data();
}

// The host functions below select the context's device first: a host may
// call them from another thread than the one that made the context.

void *strata_rt_alloc(StrataRtContext *ctx, int64_t bytes) {
  cudaSetDevice(ctx->device);
  // cudaMalloc aligns to 256 bytes at least.
  void *memory = nullptr;
  size_t size = size_t(std::max<int64_t>(bytes, 1));
  if (!ctx->check(-1, cudaMalloc(&memory, size),
                  ("allocating " + std::to_string(bytes) +
                   " bytes of device "
                   "memory")
                      .c_str()))
    return nullptr;
  // Zeroed before any later call of the compute stream reads it.
  if (!ctx->check(-1, cudaMemsetAsync(memory, 0, size, ctx->compute),
                  "clearing device memory")) {
    cudaFree(memory);
    return nullptr;
  }
  return memory;
}

void strata_rt_free(StrataRtContext *ctx, void *memory) {
  if (memory) {
    cudaSetDevice(ctx->device);
    cudaStreamSynchronize(ctx->compute);
    cudaFree(memory);
  }
}

// Copies on the compute stream (which does not synchronise with the legacy
// default stream), after every call issued before; both return once the
// copy is complete.
static void copyOnCompute(StrataRtContext *ctx, void *to, const void *from,
                          int64_t bytes, cudaMemcpyKind kind,
                          const char *what) {
  cudaSetDevice(ctx->device);
  if (ctx->check(-1,
                 cudaMemcpyAsync(to, from, size_t(bytes), kind, ctx->compute),
                 what))
    ctx->check(-1, cudaStreamSynchronize(ctx->compute), what);
}

void strata_rt_write(StrataRtContext *ctx, void *to, const void *from,
                     int64_t bytes) {
  copyOnCompute(ctx, to, from, bytes, cudaMemcpyHostToDevice,
                "copying to the device");
}

void strata_rt_read(StrataRtContext *ctx, void *to, const void *from,
                    int64_t bytes) {
  copyOnCompute(ctx, to, from, bytes, cudaMemcpyDeviceToHost,
                "copying from the device");
}

void strata_rt_gemm_autotuned(StrataRtContext *, int64_t *timed,
                              int64_t *onSgemm, int64_t *onPacked) {
  *timed = *onSgemm = *onPacked = 0; // cuBLASLt's heuristics choose
}

int64_t strata_rt_scratch_bytes(StrataRtContext *ctx) {
  return int64_t(ctx->scratchSize + (ctx->gemm ? ctx->gemm->workspaceSize : 0) +
                 ctx->errorWordChunks.size() * kErrorWordsPerChunk *
                     sizeof(unsigned long long));
}

} // extern "C"
