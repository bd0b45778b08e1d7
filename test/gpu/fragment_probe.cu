//===- fragment_probe.cu - The tensor-core layouts the flash kernels use
//---===//
//
// Part of the GPU check (run.sh runs it before the attention cases): one
// warp runs the flash kernels' own ldmatrix (plain and transposed) and
// mma.sync m16n8k16 wrappers (runtime/cuda/FlashAttention.cuh) on known
// values, in bf16 and f16, and the host compares every register with the
// layouts that the kernels and their host emulation
// (test/unit/FlashAttentionEmulationTest.cpp) take from PTX's
// documentation. When the attention cases fail on a GPU, this says whether
// the layouts are the cause. Exits non-zero on a mismatch, printing the
// first few.
//
//===----------------------------------------------------------------------===//

#include "FlashAttention.cuh"

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {
using namespace strata::cuda;

/// One warp: four 8 x 8 matrices of `mats` through ldmatrix (lane l gives
/// row l % 8 of matrix l / 8), plain into `plain` and transposed into
/// `trans` (lane-major, four registers a lane); D = A B through mma.sync
/// from A [16, 16] and B [16, 8] (row-major in global memory) taken into
/// fragments as PTX lays them out, into `d` (four floats a lane).
template <typename T>
__global__ void probe(uint32_t *plain, uint32_t *trans, float *d, const T *mats,
                      const T *a, const T *b) {
  __shared__ __align__(128) T tiles[4 * 64];
  const int lane = threadIdx.x;
  for (int i = lane; i < 4 * 64; i += 32)
    tiles[i] = mats[i];
  __syncwarp();
  uint32_t r[4];
  const T *row = tiles + lane / 8 * 64 + lane % 8 * 8;
  loadMatrices<false>(r, row);
  for (int m = 0; m < 4; ++m)
    plain[4 * lane + m] = r[m];
  loadMatrices<true>(r, row);
  for (int m = 0; m < 4; ++m)
    trans[4 * lane + m] = r[m];
  const int g = lane / 4, c = 2 * (lane % 4);
  const uint32_t fa[4] = {
      pairOf(&a[g * 16 + c], &a[g * 16 + c + 1]),
      pairOf(&a[(g + 8) * 16 + c], &a[(g + 8) * 16 + c + 1]),
      pairOf(&a[g * 16 + c + 8], &a[g * 16 + c + 9]),
      pairOf(&a[(g + 8) * 16 + c + 8], &a[(g + 8) * 16 + c + 9])};
  const uint32_t fb[2] = {pairOf(&b[c * 8 + g], &b[(c + 1) * 8 + g]),
                          pairOf(&b[(c + 8) * 8 + g], &b[(c + 9) * 8 + g])};
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma<T>(acc, fa, fb);
  for (int e = 0; e < 4; ++e)
    d[4 * lane + e] = acc[e];
}

uint16_t bitsOf(__nv_bfloat16 x) {
  uint16_t v;
  std::memcpy(&v, &x, sizeof v);
  return v;
}
uint16_t bitsOf(__half x) {
  uint16_t v;
  std::memcpy(&v, &x, sizeof v);
  return v;
}
template <typename T> T lowFrom(float x);
template <> __nv_bfloat16 lowFrom(float x) { return __float2bfloat16_rn(x); }
template <> __half lowFrom(float x) { return __float2half_rn(x); }

bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  std::fprintf(stderr, "fragment_probe: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/// Runs the probe in type T; the mismatches found (-1: CUDA failed).
template <typename T> int check(const char *name) {
  // Distinct values (ldmatrix) and small random integers (mma: exact in
  // bf16, f16 and the f32 sums), so that any misplaced element shows.
  std::vector<float> mats(256), a(256), b(128);
  std::mt19937 gen(1);
  std::uniform_int_distribution<int> small(-4, 4);
  for (int i = 0; i < 256; ++i) {
    mats[i] = float(i);
    a[i] = float(small(gen));
  }
  for (int i = 0; i < 128; ++i)
    b[i] = float(small(gen));
  std::vector<T> matsLow(256), aLow(256), bLow(128);
  for (int i = 0; i < 256; ++i) {
    matsLow[i] = lowFrom<T>(mats[i]);
    aLow[i] = lowFrom<T>(a[i]);
  }
  for (int i = 0; i < 128; ++i)
    bLow[i] = lowFrom<T>(b[i]);
  T *dMats, *dA, *dB;
  uint32_t *dPlain, *dTrans;
  float *dD;
  if (!ok(cudaMalloc(&dMats, 256 * sizeof(T)), "cudaMalloc") ||
      !ok(cudaMalloc(&dA, 256 * sizeof(T)), "cudaMalloc") ||
      !ok(cudaMalloc(&dB, 128 * sizeof(T)), "cudaMalloc") ||
      !ok(cudaMalloc(&dPlain, 128 * sizeof(uint32_t)), "cudaMalloc") ||
      !ok(cudaMalloc(&dTrans, 128 * sizeof(uint32_t)), "cudaMalloc") ||
      !ok(cudaMalloc(&dD, 128 * sizeof(float)), "cudaMalloc") ||
      !ok(cudaMemcpy(dMats, matsLow.data(), 256 * sizeof(T),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy") ||
      !ok(cudaMemcpy(dA, aLow.data(), 256 * sizeof(T), cudaMemcpyHostToDevice),
          "cudaMemcpy") ||
      !ok(cudaMemcpy(dB, bLow.data(), 128 * sizeof(T), cudaMemcpyHostToDevice),
          "cudaMemcpy"))
    return -1;
  probe<T><<<1, 32>>>(dPlain, dTrans, dD, dMats, dA, dB);
  if (!ok(cudaGetLastError(), "launch") ||
      !ok(cudaDeviceSynchronize(), "the probe kernel"))
    return -1;
  std::vector<uint32_t> plain(128), trans(128);
  std::vector<float> d(128);
  if (!ok(cudaMemcpy(plain.data(), dPlain, 128 * sizeof(uint32_t),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy") ||
      !ok(cudaMemcpy(trans.data(), dTrans, 128 * sizeof(uint32_t),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy") ||
      !ok(cudaMemcpy(d.data(), dD, 128 * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy"))
    return -1;
  cudaFree(dMats);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dPlain);
  cudaFree(dTrans);
  cudaFree(dD);

  int bad = 0;
  auto reportBits = [&](const char *what, int lane, int reg, uint32_t got,
                        uint32_t want) {
    if (bad++ < 8)
      std::printf("FAIL: %s %s lane %d register %d: got %08x, want %08x\n",
                  name, what, lane, reg, got, want);
  };
  auto report = [&](const char *what, int lane, int reg, double got,
                    double want) {
    if (bad++ < 8)
      std::printf("FAIL: %s %s lane %d register %d: got %g, want %g\n", name,
                  what, lane, reg, got, want);
  };
  auto pair = [&](int lo, int hi) {
    return uint32_t(bitsOf(matsLow[lo])) | uint32_t(bitsOf(matsLow[hi])) << 16;
  };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = 2 * (lane % 4);
    for (int m = 0; m < 4; ++m) {
      // Matrix m's (g, c..c+1), and transposed its (c, g) and (c + 1, g).
      const uint32_t wantPlain =
          pair(m * 64 + g * 8 + c, m * 64 + g * 8 + c + 1);
      const uint32_t wantTrans =
          pair(m * 64 + c * 8 + g, m * 64 + (c + 1) * 8 + g);
      if (plain[4 * lane + m] != wantPlain)
        reportBits("ldmatrix", lane, m, plain[4 * lane + m], wantPlain);
      if (trans[4 * lane + m] != wantTrans)
        reportBits("ldmatrix.trans", lane, m, trans[4 * lane + m], wantTrans);
    }
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = c + e % 2;
      double want = 0;
      for (int k = 0; k < 16; ++k)
        want += double(a[row * 16 + k]) * b[k * 8 + col];
      if (double(d[4 * lane + e]) != want)
        report("mma.sync", lane, e, d[4 * lane + e], want);
    }
  }
  return bad;
}
} // namespace

int main() {
  int major = 0;
  if (!ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0),
          "cudaDeviceGetAttribute"))
    return 1;
  if (major < 8) {
    std::printf("skipped: compute capability %d (bf16 mma.sync needs 8.0)\n",
                major);
    return 0;
  }
  const int bf16 = check<__nv_bfloat16>("bf16"), f16 = check<__half>("f16");
  if (bf16 < 0 || f16 < 0)
    return 1;
  if (bf16 + f16 > 0) {
    std::printf("FAIL: %d registers differ from the layouts the flash kernels "
                "take\n",
                bf16 + f16);
    return 1;
  }
  std::printf("PASS: ldmatrix (plain, transposed) and mma.sync m16n8k16 in "
              "bf16 and f16 lay out their registers as the flash kernels "
              "take them\n");
  return 0;
}
