//===- Optimizer.cu - CUDA kernels of the optimizer ABI --------*- CUDA -*-===//
//
// The learning-rate schedule, the gradients' global norm and clipping, loss
// scaling's unscale (scale_by), the optimizer updates (SGD, momentum, Adam /
// AdamW / LAMB, LARS) and Paddle's dynamic loss scaling, computing what
// runtime/cpu/Kernels.cpp computes with its argument checks and refusals.
//
// Every scalar the CPU reads on the host (the learning rate, the step
// counter, a norm, the guard, the loss scale and its counters) lives in
// device memory here and is read by the kernels, so no call waits for the
// device. A guard that is not finite makes every kernel of the update copy
// its inputs to its outputs (nothing where they alias) instead of updating.
// Adam and AdamW run as one kernel over a batch of tensors: a group of
// updates (strata_rt_updates_begin / _end) launches its updates of one
// element type together, 32 tensors per launch, and an update outside a
// group a batch of one.
//
// With a master weight the update computes on the f32 master and writes the
// bf16 / f16 parameter as the new master rounded to nearest even; the
// gradient is read in its own type (the parameter's or f32) and widened in
// registers, where the CPU widens it into a buffer first.
//
// Norms accumulate in double as on the CPU and are deterministic: each block
// reduces a fixed slice of the data (fixed by the sizes alone) in a fixed
// order into a partial in device scratch, and one single-block kernel sums
// the partials in order. LAMB and LARS, whose updates need the norms of
// whole tensors, run that pair and then the update, all on the compute
// stream. The global norm passes its tensor table by value as a kernel
// parameter (batches of kNormBatch tensors), so the host arrays are read
// while the call runs and no host memory is copied asynchronously.
//
//===----------------------------------------------------------------------===//

#include "Device.cuh"
#include "UpdateBatches.h"

#include <cmath>
#include <string>
#include <type_traits>

using namespace strata::cuda;

namespace {

/// std::max's and std::min's rule ((a < b) ? b : a), NaNs included, as the
/// CPU's calls to them (fmax / fmin would drop a NaN).
template <typename T> __device__ __forceinline__ T stdMax(T a, T b) {
  return (a < b) ? b : a;
}
template <typename T> __device__ __forceinline__ T stdMin(T a, T b) {
  return (b < a) ? b : a;
}

/// Sum of `count` doubles spaced `stride` apart from `partials`, in a fixed
/// order (each thread its strided share in order, then blockSumDouble).
__device__ double sumPartials(const double *partials, int64_t count,
                              int64_t stride, double *shared) {
  double s = 0;
  for (int64_t b = threadIdx.x; b < count; b += blockDim.x)
    s += partials[b * stride];
  return blockSum(s, shared);
}

/// Whether the update guarded by `guard` (NULL: unguarded) is skipped: the
/// gradients' global norm under loss scaling is not finite.
__device__ __forceinline__ bool skipped(const float *guard) {
  return guard && !isfinite(*guard);
}

/// out[i] = in[i] unless they alias (a skipped update's state).
__device__ __forceinline__ void keep(float *out, const float *in, int64_t i) {
  if (out != in)
    out[i] = in[i];
}

/// Threads of the single-block kernels that sum partials.
constexpr int kFinishThreads = kMaxBlockThreads;
/// At most this many blocks reduce one tensor for LAMB and LARS (enough to
/// fill the device; their partials are summed by one block).
constexpr unsigned kMaxNormBlocks = 1024;

/// The blocks that reduce a tensor of `n` elements (a function of n alone,
/// so that the summation order is too).
unsigned normBlocks(int64_t n) { return std::min(gridFor(n), kMaxNormBlocks); }

//===----------------------------------------------------------------------===//
// Update operands
//===----------------------------------------------------------------------===//

/// What an update reads and writes, as the host binds it (the CPU's
/// UpdateOperands): the f32 parameter or master and its new value, the
/// gradient, and with a master weight the bf16 / f16 parameter (`lowIn`)
/// and its new value (`low`); lowType is f32 without one.
struct UpdateBinding {
  const float *param = nullptr;
  float *newParam = nullptr;
  const void *grad = nullptr;
  int64_t gradType = STRATA_RT_F32;
  void *low = nullptr;
  const void *lowIn = nullptr;
  int64_t lowType = STRATA_RT_F32;
};

/// The binding on the device: P is the stored parameter's type (float
/// without a master weight: nothing is rounded), G the gradient's.
template <typename P, typename G> struct Operands {
  static constexpr bool kMaster = !std::is_same_v<P, float>;
  const float *param;
  float *newParam;
  const G *grad;
  P *low;
  const P *lowIn;

  __device__ float g(int64_t i) const { return toFloat(grad[i]); }
  /// Writes the new parameter (and its rounding with a master weight).
  __device__ void write(int64_t i, float v) const {
    newParam[i] = v;
    if constexpr (kMaster)
      low[i] = fromFloat<P>(v);
  }
  /// A skipped update: the parameter (and master) keep their values.
  __device__ void keepParam(int64_t i) const {
    keep(newParam, param, i);
    if constexpr (kMaster)
      if (low != lowIn)
        low[i] = lowIn[i];
  }
};

/// Checks the parameter, gradient and master types (updateKind, as the CPU
/// runtime) and fills `u`.
bool bindUpdate(StrataRtContext *ctx, int64_t site, const char *kernel,
                void *newParamData, int64_t newParamType, const void *paramData,
                int64_t paramType, const void *gradData, int64_t gradType,
                void *newMaster, int64_t newMasterType, const void *master,
                int64_t masterType, UpdateBinding &u) {
  u.grad = gradData;
  u.gradType = gradType;
  strata::rt::UpdateKind kind = strata::rt::updateKind(
      ctx, site, kernel, newParamType, paramType, gradType, newMaster,
      newMasterType, master, masterType);
  if (kind == strata::rt::UpdateKind::Refused)
    return false;
  if (kind == strata::rt::UpdateKind::Plain) {
    u.param = static_cast<const float *>(paramData);
    u.newParam = static_cast<float *>(newParamData);
    return true;
  }
  u.param = static_cast<const float *>(master);
  u.newParam = static_cast<float *>(newMaster);
  u.low = newParamData;
  u.lowIn = paramData;
  u.lowType = paramType;
  return true;
}

/// Whether the guard (when given) is f32; records the failure otherwise.
bool guardIsF32(StrataRtContext *ctx, int64_t site, const char *kernel,
                const void *guard, int64_t guardType) {
  if (!guard || guardType == STRATA_RT_F32)
    return true;
  unsupportedType(ctx, site, kernel, guardType);
  return false;
}

/// Calls `f(Operands<P, G>)` for a bound update.
template <typename F> void withOperands(const UpdateBinding &u, F &&f) {
  withFloatType(u.lowType, [&](auto type) {
    using P = decltype(type);
    if (u.gradType == STRATA_RT_F32)
      f(Operands<P, float>{
          u.param, u.newParam, static_cast<const float *>(u.grad),
          static_cast<P *>(u.low), static_cast<const P *>(u.lowIn)});
    else
      f(Operands<P, P>{u.param, u.newParam, static_cast<const P *>(u.grad),
                       static_cast<P *>(u.low),
                       static_cast<const P *>(u.lowIn)});
  });
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/// One thread: the CPU's schedule, in double.
__global__ void lrScheduleKernel(float *lr, const int64_t *step, int64_t kind,
                                 double baseLr, int64_t warmupSteps,
                                 int64_t decaySteps, double minLr) {
  double s = double(*step), warmup = double(warmupSteps);
  double value = baseLr;
  if (kind != STRATA_RT_LR_CONSTANT && warmup > 0 && s < warmup)
    value = baseLr * s / warmup;
  else if (kind == STRATA_RT_LR_COSINE) {
    double t = stdMin(1.0, stdMax(0.0, (s - warmup) / double(decaySteps)));
    value = minLr + (baseLr - minLr) * 0.5 * (1.0 + cos(M_PI * t));
  }
  *lr = float(value);
}

/// The tensor of a batch whose blocks hold block b: the last t of `count`
/// with firstChunk[t] <= b (tensor t's blocks start at firstChunk[t]).
__device__ int tensorOfBlock(const int64_t *firstChunk, int count, int64_t b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (firstChunk[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Elements of the global norm reduced by one block.
constexpr int64_t kNormChunk = 1 << 13;
/// Tensors of the global norm per launch.
constexpr int kNormBatch = 128;

/// A batch of the global norm's tensors, passed by value: tensor t covers
/// the batch's blocks [firstChunk[t], firstChunk[t + 1]), one per chunk of
/// kNormChunk elements.
struct NormBatch {
  const void *data[kNormBatch];
  int64_t size[kNormBatch];
  int64_t firstChunk[kNormBatch + 1];
  int8_t type[kNormBatch];
  int count;
};
static_assert(sizeof(NormBatch) + 2 * sizeof(void *) <= 4096,
              "the kernel parameters of globalNormKernel exceed 4 KiB");

template <typename T>
__device__ double sumSquares(const void *data, int64_t begin, int64_t end) {
  const T *x = static_cast<const T *>(data);
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double v = toFloat(x[i]);
    s += v * v;
  }
  return s;
}

/// Block b: the sum of squares of its chunk, in double, to partials[b].
__global__ void globalNormKernel(const __grid_constant__ NormBatch batch,
                                 double *partials) {
  __shared__ double shared[32];
  int64_t b = blockIdx.x;
  int lo = tensorOfBlock(batch.firstChunk, batch.count, b);
  int64_t begin = (b - batch.firstChunk[lo]) * kNormChunk;
  int64_t end = stdMin(batch.size[lo], begin + kNormChunk);
  double s = 0;
  switch (batch.type[lo]) {
  case STRATA_RT_F32:
    s = sumSquares<float>(batch.data[lo], begin, end);
    break;
  case STRATA_RT_BF16:
    s = sumSquares<BFloat16>(batch.data[lo], begin, end);
    break;
  case STRATA_RT_F16:
    s = sumSquares<Half>(batch.data[lo], begin, end);
    break;
  }
  s = blockSum(s, shared);
  if (threadIdx.x == 0)
    partials[b] = s;
}

/// One block: out = sqrt(the sum of the partials, in order).
__global__ void __launch_bounds__(kMaxBlockThreads)
    normFinishKernel(float *out, const double *partials, int64_t count) {
  __shared__ double shared[32];
  double total = sumPartials(partials, count, 1, shared);
  if (threadIdx.x == 0)
    *out = float(sqrt(total));
}

template <typename T>
__global__ void scaleByKernel(T *out, const T *in, int64_t n,
                              const float *factor) {
  const float f = *factor;
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = fromFloat<T>(toFloat(in[i]) * f);
}

template <typename T>
__global__ void clipKernel(T *out, const T *in, int64_t n, const float *norm,
                           double maxNorm) {
  float scale = float(maxNorm / stdMax(double(*norm), maxNorm));
  if (scale == 1.0f && out == in) // in place and within the bound
    return;
  for (int64_t i = gridStart(); i < n; i += gridStride())
    out[i] = fromFloat<T>(toFloat(in[i]) * scale);
}

template <typename P, typename G>
__global__ void sgdKernel(Operands<P, G> u, const float *lr, int64_t n,
                          float wd, const float *guard) {
  bool skip = skipped(guard);
  float l = *lr;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    if (skip) {
      u.keepParam(i);
      continue;
    }
    float p = u.param[i];
    u.write(i, p - l * (u.g(i) + wd * p));
  }
}

template <typename P, typename G>
__global__ void momentumKernel(Operands<P, G> u, float *newVelocity,
                               const float *velocity, const float *lr,
                               int64_t n, float mu, float wd, bool nesterov,
                               const float *guard) {
  bool skip = skipped(guard);
  float l = *lr;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    if (skip) {
      u.keepParam(i);
      keep(newVelocity, velocity, i);
      continue;
    }
    float p = u.param[i], g = u.g(i) + wd * p;
    float v = mu * velocity[i] + g;
    newVelocity[i] = v;
    u.write(i, p - l * (nesterov ? g + mu * v : v));
  }
}

/// The Adam-family constants every block needs: the bias corrections
/// 1 - beta^t of the step counter t, computed once per block into `c`.
__device__ void biasCorrections(const int64_t *step, double beta1, double beta2,
                                float *c) {
  if (threadIdx.x == 0) {
    double t = double(*step);
    c[0] = float(1.0 - pow(beta1, t));
    c[1] = float(1.0 - pow(beta2, t));
  }
  __syncthreads();
}

/// Adam (weight decay added to the gradient) and AdamW (decoupled: the
/// parameter scaled by 1 - lr wd) of up to kAdamBatch tensors of one
/// element type in one launch: tensor t's elements are the blocks
/// [firstChunk[t], firstChunk[t + 1]), kAdamChunk elements each. The batch
/// is passed by value as a kernel parameter (at most 4 KiB), so the host's
/// table is read while the call runs.
constexpr int64_t kAdamChunk = 1 << 13;
struct AdamBatch {
  AdamTensor tensor[kAdamBatch];
  int64_t firstChunk[kAdamBatch + 1];
  int count;
};
// (The kernel's other parameters: three pointers, two doubles, a float and
// a bool.)
static_assert(sizeof(AdamBatch) + 3 * sizeof(void *) + 4 * sizeof(double) <=
                  4096,
              "the kernel parameters of adamKernel exceed 4 KiB");

template <typename P, typename G>
__global__ void adamKernel(const __grid_constant__ AdamBatch batch,
                           const float *lr, const int64_t *step, double beta1,
                           double beta2, float eps, bool adam,
                           const float *guard) {
  int64_t b = blockIdx.x;
  int lo = tensorOfBlock(batch.firstChunk, batch.count, b);
  const AdamTensor &x = batch.tensor[lo];
  Operands<P, G> u{x.param, x.newParam, static_cast<const G *>(x.grad),
                   static_cast<P *>(x.low), static_cast<const P *>(x.lowIn)};
  const float *m = x.m, *v = x.v;
  float *newM = x.newM, *newV = x.newV;
  const int64_t begin = (b - batch.firstChunk[lo]) * kAdamChunk;
  const int64_t end = stdMin(x.n, begin + kAdamChunk);
  if (skipped(guard)) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      u.keepParam(i);
      keep(newM, m, i);
      keep(newV, v, i);
    }
    return;
  }
  __shared__ float c[2];
  biasCorrections(step, beta1, beta2, c);
  // 1 - beta from the doubles (as the CPU runtime and the reference).
  float b1 = float(beta1), b2 = float(beta2), c1 = c[0], c2 = c[1];
  float ob1 = float(1.0 - beta1), ob2 = float(1.0 - beta2);
  float l = *lr, wd = x.weightDecay;
  float keepRatio = adam ? 1.0f : 1.0f - l * wd;
  float l2 = adam ? wd : 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float p = u.param[i], g = u.g(i) + l2 * p;
    float mi = b1 * m[i] + ob1 * g;
    float vi = b2 * v[i] + ob2 * g * g;
    newM[i] = mi;
    newV[i] = vi;
    u.write(i, p * keepRatio - l * ((mi / c1) / (sqrtf(vi / c2) + eps)));
  }
}

/// LAMB, first pass: the moments, the update direction r (to scratch) and
/// this block's partial sums of p^2 and r^2 (partials[2b], partials[2b+1]).
template <typename P, typename G>
__global__ void
lambDirectionKernel(Operands<P, G> u, float *newM, float *newV, const float *m,
                    const float *v, const int64_t *step, int64_t n,
                    double beta1, double beta2, float eps, float wd, float *r,
                    double *partials, const float *guard) {
  if (skipped(guard)) {
    for (int64_t i = gridStart(); i < n; i += gridStride()) {
      keep(newM, m, i);
      keep(newV, v, i);
    }
    return;
  }
  __shared__ float c[2];
  __shared__ double shared[32];
  biasCorrections(step, beta1, beta2, c);
  // 1 - beta from the doubles (as the CPU runtime and the reference).
  float b1 = float(beta1), b2 = float(beta2), c1 = c[0], c2 = c[1];
  float ob1 = float(1.0 - beta1), ob2 = float(1.0 - beta2);
  double pn = 0, rn = 0;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    float p = u.param[i], g = u.g(i);
    float mi = b1 * m[i] + ob1 * g;
    float vi = b2 * v[i] + ob2 * g * g;
    newM[i] = mi;
    newV[i] = vi;
    float ri = (mi / c1) / (sqrtf(vi / c2) + eps) + wd * p;
    r[i] = ri;
    pn += double(p) * p;
    rn += double(ri) * ri;
  }
  pn = blockSum(pn, shared);
  rn = blockSum(rn, shared);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = pn;
    partials[2 * blockIdx.x + 1] = rn;
  }
}

/// LAMB, one block: the trust ratio |p| / |r| of the whole tensor (1 when
/// either norm is not positive).
__global__ void __launch_bounds__(kMaxBlockThreads)
    lambTrustKernel(const double *partials, int64_t blocks, float *trust,
                    const float *guard) {
  if (skipped(guard))
    return;
  __shared__ double shared[32];
  double pn = sumPartials(partials, blocks, 2, shared);
  double rn = sumPartials(partials + 1, blocks, 2, shared);
  if (threadIdx.x == 0)
    *trust = (pn > 0 && rn > 0) ? float(sqrt(pn) / sqrt(rn)) : 1.0f;
}

/// LAMB, last pass: p - lr trust r.
template <typename P, typename G>
__global__ void lambApplyKernel(Operands<P, G> u, const float *r,
                                const float *lr, const float *trust, int64_t n,
                                const float *guard) {
  bool skip = skipped(guard);
  float l = *lr, t = skip ? 0.0f : *trust;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    if (skip)
      u.keepParam(i);
    else
      u.write(i, u.param[i] - l * t * r[i]);
  }
}

/// LARS, first pass: this block's partial sums of p^2 and g^2
/// (partials[2b], partials[2b+1]).
template <typename P, typename G>
__global__ void larsNormsKernel(Operands<P, G> u, int64_t n, double *partials,
                                const float *guard) {
  if (skipped(guard))
    return;
  __shared__ double shared[32];
  double pn = 0, gn = 0;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    double p = u.param[i], g = u.g(i);
    pn += p * p;
    gn += g * g;
  }
  pn = blockSum(pn, shared);
  gn = blockSum(gn, shared);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = pn;
    partials[2 * blockIdx.x + 1] = gn;
  }
}

/// LARS, one block: the local learning rate
/// lr coeff |p| / (|g| + wd |p| + eps), or lr when either norm is 0.
__global__ void __launch_bounds__(kMaxBlockThreads)
    larsRateKernel(const double *partials, int64_t blocks, const float *lr,
                   double larsCoeff, double weightDecay, double eps,
                   float *localLr, const float *guard) {
  if (skipped(guard))
    return;
  __shared__ double shared[32];
  double pn = sqrt(sumPartials(partials, blocks, 2, shared));
  double gn = sqrt(sumPartials(partials + 1, blocks, 2, shared));
  if (threadIdx.x == 0) {
    double l = *lr;
    *localLr = float((pn > 0 && gn > 0)
                         ? l * larsCoeff * pn / (gn + weightDecay * pn + eps)
                         : l);
  }
}

/// LARS, last pass: the velocity and parameter at the local rate.
template <typename P, typename G>
__global__ void larsApplyKernel(Operands<P, G> u, float *newVelocity,
                                const float *velocity, const float *localLr,
                                int64_t n, float mu, float wd,
                                const float *guard) {
  bool skip = skipped(guard);
  float rate = skip ? 0.0f : *localLr;
  for (int64_t i = gridStart(); i < n; i += gridStride()) {
    if (skip) {
      u.keepParam(i);
      keep(newVelocity, velocity, i);
      continue;
    }
    float p = u.param[i];
    float v = mu * velocity[i] + rate * (u.g(i) + wd * p);
    newVelocity[i] = v;
    u.write(i, p - v);
  }
}

__global__ void isFiniteKernel(int64_t *out, const float *in) {
  *out = isfinite(*in) ? 1 : 0;
}

/// One thread: Paddle's rule as the CPU's (an overflow resets the good
/// steps and, every decrEvery bad ones, shrinks the scale to at least 1;
/// every incrEvery good steps grow it, unless that overflows).
__global__ void
updateLossScalingKernel(float *newScale, int64_t *newGood, int64_t *newBad,
                        const float *norm, const float *scaleIn,
                        const int64_t *goodIn, const int64_t *badIn,
                        int64_t incrEveryNSteps, int64_t decrEveryNNanOrInf,
                        float incrRatio, float decrRatio) {
  float scale = *scaleIn;
  int64_t good = *goodIn, bad = *badIn;
  if (!isfinite(*norm)) {
    good = 0;
    if (++bad == decrEveryNNanOrInf) {
      scale = stdMax(scale * decrRatio, 1.0f);
      bad = 0;
    }
  } else {
    bad = 0;
    if (++good == incrEveryNSteps) {
      float grown = scale * incrRatio;
      if (isfinite(grown))
        scale = grown;
      good = 0;
    }
  }
  *newScale = scale;
  *newGood = good;
  *newBad = bad;
}

/// Device scratch for LAMB and LARS: the partials of `blocks` blocks (two
/// doubles each), a float result, then `extraFloats` floats; null (the
/// failure recorded) when it cannot be had.
struct NormScratch {
  double *partials = nullptr;
  float *result = nullptr;
  float *extra = nullptr;
};
bool normScratch(StrataRtContext *ctx, int64_t site, unsigned blocks,
                 int64_t extraFloats, NormScratch &s) {
  size_t partialBytes = size_t(blocks) * 2 * sizeof(double);
  // The result gets 16 bytes so that `extra` stays 16-byte aligned.
  size_t bytes = partialBytes + 16 + size_t(extraFloats) * sizeof(float);
  auto *base = static_cast<char *>(ctx->scratchBytes(site, bytes));
  if (!base)
    return false;
  s.partials = reinterpret_cast<double *>(base);
  s.result = reinterpret_cast<float *>(base + partialBytes);
  s.extra = reinterpret_cast<float *>(base + partialBytes + 16);
  return true;
}

} // namespace

namespace strata::cuda {
void launchPendingAdams(StrataRtContext *ctx) {
  const std::vector<StrataRtContext::PendingAdam> &pending = ctx->pendingAdams;
  for (const std::vector<size_t> &launch : adamLaunches(pending)) {
    const StrataRtContext::PendingAdam &head = pending[launch.front()];
    AdamBatch batch{};
    for (size_t i : launch) {
      const AdamTensor &t = pending[i].tensor;
      batch.tensor[batch.count] = t;
      batch.firstChunk[batch.count + 1] =
          batch.firstChunk[batch.count] + (t.n + kAdamChunk - 1) / kAdamChunk;
      ++batch.count;
    }
    int64_t blocks = batch.firstChunk[batch.count];
    if (blocks > int64_t(INT32_MAX)) {
      ctx->fail(head.site, "strata_rt_adam: " + std::to_string(blocks) +
                               " blocks exceed a launch's grid");
      continue;
    }
    withFloatType(head.lowType, [&](auto type) {
      using P = decltype(type);
      if (head.gradType == STRATA_RT_F32)
        adamKernel<P, float><<<unsigned(blocks), kThreads, 0, ctx->compute>>>(
            batch, head.lr, head.step, head.beta1, head.beta2, head.eps,
            head.adam, head.guard);
      else
        adamKernel<P, P><<<unsigned(blocks), kThreads, 0, ctx->compute>>>(
            batch, head.lr, head.step, head.beta1, head.beta2, head.eps,
            head.adam, head.guard);
    });
    launched(ctx, head.site, "strata_rt_adam");
  }
  ctx->pendingAdams.clear();
}
} // namespace strata::cuda

extern "C" {

void strata_rt_updates_begin(StrataRtContext *ctx, int64_t site) {
  strata::rt::openUpdates(*ctx, site);
}

void strata_rt_updates_end(StrataRtContext *ctx, int64_t site) {
  strata::cuda::launchPendingAdams(ctx);
  strata::rt::closeUpdates(*ctx, site);
}

void strata_rt_lr_schedule(StrataRtContext *ctx, int64_t site, void *lr,
                           int64_t lrType, const void *step, int64_t stepType,
                           int64_t kind, double baseLr, int64_t warmupSteps,
                           int64_t decaySteps, double minLr) {
  if (!onlyF32(ctx, site, "lr_schedule", {lrType}) ||
      !stepCounter(ctx, site, "lr_schedule", stepType))
    return;
  if (kind != STRATA_RT_LR_CONSTANT && kind != STRATA_RT_LR_LINEAR_WARMUP &&
      kind != STRATA_RT_LR_COSINE)
    return ctx->fail(site, "unknown learning-rate schedule code " +
                               std::to_string(kind));
  lrScheduleKernel<<<1, 1, 0, ctx->compute>>>(
      static_cast<float *>(lr), static_cast<const int64_t *>(step), kind,
      baseLr, warmupSteps, decaySteps, minLr);
  launched(ctx, site, "strata_rt_lr_schedule");
}

void strata_rt_global_norm(StrataRtContext *ctx, int64_t site, void *out,
                           int64_t outType, int64_t count,
                           const void *const *tensors, const int64_t *types,
                           const int64_t *sizes) {
  if (!onlyF32(ctx, site, "global_norm", {outType}))
    return;
  int64_t chunks = 0;
  for (int64_t t = 0; t < count; ++t) {
    if (types[t] != STRATA_RT_F32 && types[t] != STRATA_RT_BF16 &&
        types[t] != STRATA_RT_F16)
      return unsupportedType(ctx, site, "global_norm", types[t]);
    chunks += (std::max<int64_t>(sizes[t], 0) + kNormChunk - 1) / kNormChunk;
  }
  double *partials = nullptr;
  if (chunks > 0) {
    partials = static_cast<double *>(
        ctx->scratchBytes(site, size_t(chunks) * sizeof(double)));
    if (!partials)
      return;
  }
  // Batches of tensors by value; each writes the partials of its chunks
  // after those of the batches before it.
  int64_t done = 0;
  for (int64_t first = 0; first < count; first += kNormBatch) {
    NormBatch batch{};
    batch.count = int(std::min<int64_t>(kNormBatch, count - first));
    int64_t blocks = 0;
    for (int t = 0; t < batch.count; ++t) {
      int64_t n = std::max<int64_t>(sizes[first + t], 0);
      batch.data[t] = tensors[first + t];
      batch.size[t] = n;
      batch.type[t] = int8_t(types[first + t]);
      batch.firstChunk[t] = blocks;
      blocks += (n + kNormChunk - 1) / kNormChunk;
    }
    batch.firstChunk[batch.count] = blocks;
    if (blocks == 0)
      continue;
    globalNormKernel<<<unsigned(blocks), kThreads, 0, ctx->compute>>>(
        batch, partials + done);
    if (!launched(ctx, site, "strata_rt_global_norm"))
      return;
    done += blocks;
  }
  normFinishKernel<<<1, kFinishThreads, 0, ctx->compute>>>(
      static_cast<float *>(out), partials, chunks);
  launched(ctx, site, "strata_rt_global_norm");
}

void strata_rt_scale_by(StrataRtContext *ctx, int64_t site, void *out,
                        int64_t outType, const void *in, int64_t inType,
                        int64_t n, const void *factor, int64_t factorType) {
  if (!onlyF32(ctx, site, "scale_by", {factorType}))
    return;
  withSameFloatType(ctx, site, "scale_by", {outType, inType}, [&](auto type) {
    using T = decltype(type);
    if (n == 0)
      return;
    scaleByKernel<T><<<gridFor(n), kThreads, 0, ctx->compute>>>(
        static_cast<T *>(out), static_cast<const T *>(in), n,
        static_cast<const float *>(factor));
    launched(ctx, site, "strata_rt_scale_by");
  });
}

void strata_rt_clip(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t outType, const void *in, int64_t inType, int64_t n,
                    const void *norm, int64_t normType, double maxNorm) {
  if (!onlyF32(ctx, site, "clip", {normType}))
    return;
  withSameFloatType(ctx, site, "clip", {outType, inType}, [&](auto type) {
    using T = decltype(type);
    if (n == 0)
      return;
    clipKernel<T><<<gridFor(n), kThreads, 0, ctx->compute>>>(
        static_cast<T *>(out), static_cast<const T *>(in), n,
        static_cast<const float *>(norm), maxNorm);
    launched(ctx, site, "strata_rt_clip");
  });
}

void strata_rt_sgd(StrataRtContext *ctx, int64_t site, void *newParam,
                   int64_t newParamType, const void *param, int64_t paramType,
                   const void *grad, int64_t gradType, const void *lr,
                   int64_t lrType, int64_t n, double weightDecay,
                   const void *guard, int64_t guardType, void *newMaster,
                   int64_t newMasterType, const void *master,
                   int64_t masterType) {
  UpdateBinding u;
  if (!onlyF32(ctx, site, "sgd", {lrType}) ||
      !bindUpdate(ctx, site, "sgd", newParam, newParamType, param, paramType,
                  grad, gradType, newMaster, newMasterType, master, masterType,
                  u) ||
      !guardIsF32(ctx, site, "sgd", guard, guardType) || n == 0)
    return;
  withOperands(u, [&](auto ops) {
    sgdKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
        ops, static_cast<const float *>(lr), n, float(weightDecay),
        static_cast<const float *>(guard));
  });
  launched(ctx, site, "strata_rt_sgd");
}

void strata_rt_momentum(StrataRtContext *ctx, int64_t site, void *newParam,
                        int64_t newParamType, void *newVelocity,
                        int64_t newVelocityType, const void *param,
                        int64_t paramType, const void *grad, int64_t gradType,
                        const void *velocity, int64_t velocityType,
                        const void *lr, int64_t lrType, int64_t n,
                        double momentum, double weightDecay, int64_t nesterov,
                        const void *guard, int64_t guardType, void *newMaster,
                        int64_t newMasterType, const void *master,
                        int64_t masterType) {
  UpdateBinding u;
  if (!onlyF32(ctx, site, "momentum",
               {newVelocityType, velocityType, lrType}) ||
      !bindUpdate(ctx, site, "momentum", newParam, newParamType, param,
                  paramType, grad, gradType, newMaster, newMasterType, master,
                  masterType, u) ||
      !guardIsF32(ctx, site, "momentum", guard, guardType) || n == 0)
    return;
  withOperands(u, [&](auto ops) {
    momentumKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
        ops, static_cast<float *>(newVelocity),
        static_cast<const float *>(velocity), static_cast<const float *>(lr), n,
        float(momentum), float(weightDecay), nesterov != 0,
        static_cast<const float *>(guard));
  });
  launched(ctx, site, "strata_rt_momentum");
}

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
                    int64_t masterType) {
  UpdateBinding u;
  if (!onlyF32(ctx, site, "adam", {newMType, newVType, mType, vType, lrType}) ||
      !stepCounter(ctx, site, "adam", stepType) ||
      !bindUpdate(ctx, site, "adam", newParam, newParamType, param, paramType,
                  grad, gradType, newMaster, newMasterType, master, masterType,
                  u))
    return;
  if (kind != STRATA_RT_ADAM && kind != STRATA_RT_ADAMW &&
      kind != STRATA_RT_LAMB)
    return ctx->fail(site, "unknown Adam-family optimizer code " +
                               std::to_string(kind));
  if (!guardIsF32(ctx, site, "adam", guard, guardType) || n == 0)
    return;
  auto *newMf = static_cast<float *>(newM);
  auto *newVf = static_cast<float *>(newV);
  auto *mf = static_cast<const float *>(m);
  auto *vf = static_cast<const float *>(v);
  auto *lrf = static_cast<const float *>(lr);
  auto *stepi = static_cast<const int64_t *>(step);
  auto *guardf = static_cast<const float *>(guard);
  float e = float(eps), wd = float(weightDecay);
  if (kind != STRATA_RT_LAMB) {
    // Launched at the group's end, or now outside a group.
    ctx->pendingAdams.push_back({site,
                                 {u.param, u.newParam, u.grad, u.low, u.lowIn,
                                  mf, vf, newMf, newVf, n, wd},
                                 u.gradType,
                                 u.lowType,
                                 lrf,
                                 guardf,
                                 stepi,
                                 beta1,
                                 beta2,
                                 e,
                                 kind == STRATA_RT_ADAM});
    if (ctx->updatesSite < 0)
      strata::cuda::launchPendingAdams(ctx);
    return;
  }
  // LAMB: the direction and the norms' partials, the trust ratio, the
  // update; the direction r lives in scratch between the passes.
  unsigned blocks = normBlocks(n);
  NormScratch s;
  if (!normScratch(ctx, site, blocks, n, s))
    return;
  withOperands(u, [&](auto ops) {
    lambDirectionKernel<<<blocks, kThreads, 0, ctx->compute>>>(
        ops, newMf, newVf, mf, vf, stepi, n, beta1, beta2, e, wd, s.extra,
        s.partials, guardf);
    if (!launched(ctx, site, "strata_rt_adam"))
      return;
    lambTrustKernel<<<1, kFinishThreads, 0, ctx->compute>>>(s.partials, blocks,
                                                            s.result, guardf);
    if (!launched(ctx, site, "strata_rt_adam"))
      return;
    lambApplyKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
        ops, s.extra, lrf, s.result, n, guardf);
    launched(ctx, site, "strata_rt_adam");
  });
}

void strata_rt_lars(StrataRtContext *ctx, int64_t site, void *newParam,
                    int64_t newParamType, void *newVelocity,
                    int64_t newVelocityType, const void *param,
                    int64_t paramType, const void *grad, int64_t gradType,
                    const void *velocity, int64_t velocityType, const void *lr,
                    int64_t lrType, int64_t n, double momentum,
                    double weightDecay, double larsCoeff, double eps,
                    const void *guard, int64_t guardType, void *newMaster,
                    int64_t newMasterType, const void *master,
                    int64_t masterType) {
  UpdateBinding u;
  if (!onlyF32(ctx, site, "lars", {newVelocityType, velocityType, lrType}) ||
      !bindUpdate(ctx, site, "lars", newParam, newParamType, param, paramType,
                  grad, gradType, newMaster, newMasterType, master, masterType,
                  u) ||
      !guardIsF32(ctx, site, "lars", guard, guardType) || n == 0)
    return;
  unsigned blocks = normBlocks(n);
  NormScratch s;
  if (!normScratch(ctx, site, blocks, 0, s))
    return;
  auto *guardf = static_cast<const float *>(guard);
  withOperands(u, [&](auto ops) {
    larsNormsKernel<<<blocks, kThreads, 0, ctx->compute>>>(ops, n, s.partials,
                                                           guardf);
    if (!launched(ctx, site, "strata_rt_lars"))
      return;
    larsRateKernel<<<1, kFinishThreads, 0, ctx->compute>>>(
        s.partials, blocks, static_cast<const float *>(lr), larsCoeff,
        weightDecay, eps, s.result, guardf);
    if (!launched(ctx, site, "strata_rt_lars"))
      return;
    larsApplyKernel<<<gridFor(n), kThreads, 0, ctx->compute>>>(
        ops, static_cast<float *>(newVelocity),
        static_cast<const float *>(velocity), s.result, n, float(momentum),
        float(weightDecay), guardf);
    launched(ctx, site, "strata_rt_lars");
  });
}

void strata_rt_is_finite(StrataRtContext *ctx, int64_t site, void *out,
                         int64_t outType, const void *in, int64_t inType) {
  if (!stepCounter(ctx, site, "is_finite", outType) ||
      !onlyF32(ctx, site, "is_finite", {inType}))
    return;
  isFiniteKernel<<<1, 1, 0, ctx->compute>>>(static_cast<int64_t *>(out),
                                            static_cast<const float *>(in));
  launched(ctx, site, "strata_rt_is_finite");
}

void strata_rt_update_loss_scaling(
    StrataRtContext *ctx, int64_t site, void *newScale, int64_t newScaleType,
    void *newGood, int64_t newGoodType, void *newBad, int64_t newBadType,
    const void *norm, int64_t normType, const void *scale, int64_t scaleType,
    const void *good, int64_t goodType, const void *bad, int64_t badType,
    int64_t incrEveryNSteps, int64_t decrEveryNNanOrInf, double incrRatio,
    double decrRatio) {
  if (!onlyF32(ctx, site, "update_loss_scaling",
               {newScaleType, normType, scaleType}) ||
      !stepCounter(ctx, site, "update_loss_scaling", newGoodType) ||
      !stepCounter(ctx, site, "update_loss_scaling", newBadType) ||
      !stepCounter(ctx, site, "update_loss_scaling", goodType) ||
      !stepCounter(ctx, site, "update_loss_scaling", badType))
    return;
  updateLossScalingKernel<<<1, 1, 0, ctx->compute>>>(
      static_cast<float *>(newScale), static_cast<int64_t *>(newGood),
      static_cast<int64_t *>(newBad), static_cast<const float *>(norm),
      static_cast<const float *>(scale), static_cast<const int64_t *>(good),
      static_cast<const int64_t *>(bad), incrEveryNSteps, decrEveryNNanOrInf,
      float(incrRatio), float(decrRatio));
  launched(ctx, site, "strata_rt_update_loss_scaling");
}

} // extern "C"
