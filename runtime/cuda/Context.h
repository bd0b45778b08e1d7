//===- Context.h - State of the CUDA runtime --------------------*- C++ -*-===//
//
// What the CUDA runtime keeps between calls beyond the host state every
// runtime shares (common/HostContext.h): the device and its streams, the
// cuBLASLt handle and its per-site plans, the NCCL communicators (which the
// host's collectives bootstrap over MPI), device scratch, trace events.
// Private to runtime/cuda; compiled by the host compiler and by nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_CONTEXT_H
#define STRATA_RUNTIME_CUDA_CONTEXT_H

#include "../common/HostContext.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace strata::cuda {
struct GemmCache;
struct Communicators;

/// The tensors of one Adam or AdamW update, a row of the update kernel's
/// table (Optimizer.cu): the f32 parameter (or master) and its new value,
/// the gradient, with a master weight the bf16 / f16 parameter and its new
/// value, the f32 moments; its size and weight decay.
struct AdamTensor {
  const float *param;
  float *newParam;
  const void *grad;
  void *low;
  const void *lowIn;
  const float *m, *v;
  float *newM, *newV;
  int64_t n;
  float weightDecay;
};
} // namespace strata::cuda

struct StrataRtContext : strata::rt::HostContext {
  int device = 0;
  /// The device's compute capability (major) and the shared memory a block
  /// may opt in to, read once with its properties.
  int computeMajor = 0;
  size_t sharedPerBlockOptin = 0;
  /// The PTX version the flash attention kernels were compiled for on this
  /// device (Attention.cu asks on first use; -1: not yet asked).
  int flashPtxVersion = -1;
  /// Seconds strata_rt_step_end waits for collectives (0: no limit).
  int64_t collectiveTimeout = 1800;
  /// Kernels run in program order on `compute`; collectives on `comm`,
  /// ordered after their producers and before their readers by events.
  cudaStream_t compute = nullptr, comm = nullptr;
  /// With tracing: an event pair per traced op, resolved when the trace is
  /// taken (the ops run asynchronously).
  struct OpenEvent {
    int64_t site;
    cudaEvent_t begin, end;
  };
  std::vector<OpenEvent> traceEvents;
  cudaEvent_t epoch = nullptr;
  double epochUs = 0;

  /// The runtime's stream-ordered device memory: scratch and error words
  /// (allocated and freed on `compute`) and the copies of buffered sends
  /// (allocated on `compute`, freed on a link's stream). cudaMalloc and
  /// cudaFree may synchronize the device, which mid-step would wait for
  /// collectives and transfers that wait for a peer; a pool's allocations
  /// and frees are ordered on a stream instead. It keeps what it reserved
  /// (its release threshold is the maximum, so no synchronization returns
  /// memory to the OS) and reuses a block freed on another stream once the
  /// free has completed (opportunistic reuse: a send copy is reused after
  /// its send finished, within the step) or after the host synchronized
  /// with that stream (the step's end), but never by making the allocating
  /// stream wait itself (no internal dependencies), which would make the
  /// compute stream wait for a send, that is for the peer to receive.
  cudaMemPool_t pool = nullptr;
  /// Device scratch of the kernels (reduction partials, descriptors),
  /// grown on demand and kept; its use is ordered on `compute`.
  void *scratch = nullptr;
  size_t scratchSize = 0;
  /// Device error words (deviceErrorWord below) in chunks that never
  /// move; `errorWordUses` the calls that took one this step, in order.
  std::vector<unsigned long long *> errorWordChunks;
  struct ErrorWordUse {
    int64_t site;
    /// "id" or "label", and the end of its range.
    std::string noun;
    int64_t limit;
  };
  std::vector<ErrorWordUse> errorWordUses;
  std::unique_ptr<strata::cuda::GemmCache> gemm;
  std::unique_ptr<strata::cuda::Communicators> comms;

  /// An Adam or AdamW update of the open group of updates, checked when
  /// called and launched with the others at the group's end
  /// (Optimizer.cu): its tensors, and what its launch shares with others
  /// (UpdateBatches.h).
  struct PendingAdam {
    int64_t site;
    strata::cuda::AdamTensor tensor;
    int64_t gradType, lowType;
    const float *lr, *guard;
    const int64_t *step;
    double beta1, beta2;
    float eps;
    bool adam; // Adam (decay added to the gradient), else AdamW
  };
  std::vector<PendingAdam> pendingAdams;

  StrataRtContext();
  ~StrataRtContext();

  /// Records a failed CUDA call of kernel `what`; returns whether `status`
  /// is success.
  bool check(int64_t site, cudaError_t status, const char *what) {
    if (status == cudaSuccess)
      return true;
    fail(site, std::string(what) + ": " + cudaGetErrorString(status));
    return false;
  }
  /// Device scratch of at least `bytes` for the compute stream's next
  /// kernels, or null (the failure recorded). Growing it frees the old
  /// block in stream order, after the kernels issued before that use it.
  void *scratchBytes(int64_t site, size_t bytes);
};

namespace strata::cuda {
/// Where a kernel reports bad data it finds on the device (an id or a label
/// outside [0, limit)) without the host waiting for it: a device word, set
/// to "none" (kNoError) before the kernel runs; the kernel lowers it with
/// atomicMin to badIdWord(position, value) of a bad element, so it ends
/// holding the first one. The context reads every word at the step's end
/// and records, for the first call in program order whose word was set,
/// the failure "<noun> <value> outside [0, <limit>) (position P)" at
/// `site`, as the CPU runtime words it. Returns null (the failure recorded)
/// when it cannot allocate.
constexpr unsigned long long kNoError = 0x7f7f7f7f7f7f7f7fULL;
unsigned long long *deviceErrorWord(StrataRtContext *ctx, int64_t site,
                                    const char *noun, int64_t limit);
/// The 1-based position in the high half (positions from 0x7f7f7f7d on
/// share the last one, below kNoError's), the value saturated to 32 bits in
/// the low half.
__host__ __device__ inline unsigned long long badIdWord(int64_t position,
                                                        int64_t value) {
  int64_t p = position + 1 < 0x7f7f7f7e ? position + 1 : 0x7f7f7f7e;
  int64_t v = value > INT32_MAX   ? INT32_MAX
              : value < INT32_MIN ? INT32_MIN
                                  : value;
  return (static_cast<unsigned long long>(p) << 32) |
         static_cast<uint32_t>(static_cast<int32_t>(v));
}

/// Launches the Adam and AdamW updates of ctx->pendingAdams (Optimizer.cu)
/// and clears them.
void launchPendingAdams(StrataRtContext *ctx);

/// A scratch budget in bytes: the positive count that environment variable
/// `variable` holds (a test knob: the GPU check sets small budgets so that
/// its small cases take the chunked paths), else `fallback`.
inline int64_t budgetBytes(const char *variable, int64_t fallback) {
  const char *set = std::getenv(variable);
  const long long value = set ? std::atoll(set) : 0;
  return value > 0 ? int64_t(value) : fallback;
}

/// The epilogue of a plan's f32Sums (ActivationKernels.cuh), on the compute
/// stream: for `rows` rows of `n` sums, aux = sums + bias (when `aux` is
/// not null) and out = act(sums + bias), each rounded once to `dtype`
/// (Elementwise.cu).
void sumsEpilogue(StrataRtContext *ctx, int64_t site, int64_t dtype, void *out,
                  void *aux, const float *sums, const void *bias, int64_t rows,
                  int64_t n, int64_t act);

/// Divides the `n` elements of `data` (f32, bf16, f16) by `count` in f32,
/// rounding once, on `stream` (Elementwise.cu): the mean of a collective.
bool divideOnStream(StrataRtContext *ctx, int64_t site, void *data, int64_t n,
                    int64_t dtype, int64_t count, cudaStream_t stream,
                    const char *what);
} // namespace strata::cuda

using strata::rt::integerIds;
using strata::rt::lossIsF32;
using strata::rt::onlyF32;
using strata::rt::sameTypes;
using strata::rt::stepCounter;
using strata::rt::unsupportedType;

#endif // STRATA_RUNTIME_CUDA_CONTEXT_H
