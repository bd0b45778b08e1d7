//===- CudaRuntimeTest.cpp - The CUDA runtime's host side -----------------===//
//
// What can be checked without a GPU: how every strata_rt_gemm call maps
// onto cuBLASLt (the plan's column-major problem evaluated on the host
// equals the row-major product, for every transpose, batch stride and
// epilogue), the cuBLASLt descriptors (created without a device), the RNG
// as nvcc builds it, the library's symbol table, and a context that
// refuses to start without a device (or starts with one), and which of a
// group's deferred Adam updates share a launch.
//
//===----------------------------------------------------------------------===//

#include "Context.h"
#include "GemmPlan.h"
#include "UpdateBatches.h"

#include "strata/Runtime/StrataRuntime.h"

#include "../../runtime/common/HostContext.h"
#include "../../runtime/common/StrataRandom.h"

#include "gtest/gtest.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

extern "C" void strataPhiloxFromNvcc(uint64_t seed, int64_t key,
                                     int64_t microBatch, int64_t index,
                                     uint32_t out[4]);
extern "C" int strataDropoutKeepFromNvcc(uint64_t seed, int64_t key,
                                         int64_t index, double prob);

using namespace strata::cuda;

namespace {

std::vector<float> values(int64_t n, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = float((i * 37 + salt * 11) % 29 - 14) / 8.0f;
  return v;
}

/// op(M) of a column-major matrix `layout` at `data` (batch `b`).
float element(const float *data, const Layout &layout, cublasOperation_t op,
              int64_t b, int64_t i, int64_t j) {
  const float *base = data + b * layout.batchStride;
  return op == CUBLAS_OP_N ? base[i + j * layout.ld] : base[j + i * layout.ld];
}

/// D = epilogue(alpha op(A) op(B) + beta C) as cuBLASLt defines it, on the
/// host, with the plan's operands: cuBLASLt's A is the ABI's B.
std::vector<float> runPlan(const GemmPlan &p, const std::vector<float> &abiA,
                           const std::vector<float> &abiB, std::vector<float> c,
                           const std::vector<float> &bias) {
  uint64_t rows = p.c.rows, cols = p.c.cols;
  uint64_t inner = p.opA == CUBLAS_OP_N ? p.a.cols : p.a.rows;
  for (int64_t b = 0; b < p.c.batchCount; ++b)
    for (uint64_t i = 0; i < rows; ++i)
      for (uint64_t j = 0; j < cols; ++j) {
        double s = 0;
        for (uint64_t q = 0; q < inner; ++q)
          s += double(element(abiB.data(), p.a, p.opA, b, i, q)) *
               element(abiA.data(), p.b, p.opB, b, q, j);
        float &d = c[b * p.c.batchStride + i + j * p.c.ld];
        float v = float(s) + p.beta * d;
        bool withBias = p.epilogue == CUBLASLT_EPILOGUE_BIAS ||
                        p.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                        p.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
        if (withBias)
          v += bias[i]; // one per row of D: a column of the ABI's C
        // (The runtime applies an activation the plan leaves out, such as
        // ReLU, after the GEMM.)
        if (p.separateAct == STRATA_RT_ACT_RELU)
          v = std::max(v, 0.0f);
        d = v;
      }
  return c;
}

/// The ABI's definition: C[b] (row-major m x n) = op(A[b]) op(B[b]) + bias.
std::vector<float> rowMajor(const GemmCall &g, const std::vector<float> &a,
                            const std::vector<float> &b, std::vector<float> c,
                            const std::vector<float> &bias) {
  for (int64_t bi = 0; bi < g.batch; ++bi)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < g.k; ++q) {
          const float *pa = a.data() + bi * g.aBatchStride;
          const float *pb = b.data() + bi * g.bBatchStride;
          float x = g.transA ? pa[q * g.m + i] : pa[i * g.k + q];
          float y = g.transB ? pb[j * g.k + q] : pb[q * g.n + j];
          s += double(x) * y;
        }
        float &out = c[bi * g.m * g.n + i * g.n + j];
        float v = float(s) + (g.accumulate ? out : 0.0f);
        if (g.bias)
          v += bias[j];
        if (g.act == STRATA_RT_ACT_RELU)
          v = std::max(v, 0.0f);
        out = v;
      }
  return c;
}

TEST(CudaGemmPlan, ColumnMajorProblemEqualsTheRowMajorProduct) {
  for (int64_t batch : {1, 3})
    for (bool sharedA : {false, true})
      for (bool transA : {false, true})
        for (bool transB : {false, true})
          for (int variant = 0; variant < 4; ++variant) {
            GemmCall g;
            g.batch = batch;
            g.m = 5;
            g.n = 7;
            g.k = 3;
            g.transA = transA;
            g.transB = transB;
            g.aBatchStride = sharedA ? 0 : g.m * g.k;
            g.bBatchStride = g.k * g.n;
            g.dtype = STRATA_RT_F32;
            g.bias = variant == 1 || variant == 2;
            g.act = variant == 2 ? STRATA_RT_ACT_RELU : STRATA_RT_ACT_NONE;
            g.accumulate = variant == 3;
            GemmPlan p = planGemm(g, /*tf32=*/false);
            ASSERT_TRUE(p.error.empty()) << p.error;
            auto a = values((sharedA ? 1 : batch) * g.m * g.k, 1);
            auto b = values(batch * g.k * g.n, 2);
            auto c = values(batch * g.m * g.n, 3);
            auto bias = values(g.n, 4);
            EXPECT_EQ(runPlan(p, a, b, c, bias), rowMajor(g, a, b, c, bias))
                << "batch " << batch << " sharedA " << sharedA << " transA "
                << transA << " transB " << transB << " variant " << variant;
          }
}

TEST(CudaGemmPlan, EpilogueForEveryBiasAndActivation) {
  struct Case {
    bool bias;
    int64_t act;
    cublasLtEpilogue_t epilogue;
    int64_t separate;
  } cases[] = {
      {false, STRATA_RT_ACT_NONE, CUBLASLT_EPILOGUE_DEFAULT, 0},
      {true, STRATA_RT_ACT_NONE, CUBLASLT_EPILOGUE_BIAS, 0},
      // cuBLASLt's ReLU (a max) drops NaN: the runtime's runs after.
      {false, STRATA_RT_ACT_RELU, CUBLASLT_EPILOGUE_DEFAULT,
       STRATA_RT_ACT_RELU},
      {true, STRATA_RT_ACT_RELU, CUBLASLT_EPILOGUE_BIAS, STRATA_RT_ACT_RELU},
      {false, STRATA_RT_ACT_GELU_TANH, CUBLASLT_EPILOGUE_GELU, 0},
      {true, STRATA_RT_ACT_GELU_TANH, CUBLASLT_EPILOGUE_GELU_BIAS, 0},
      // cuBLASLt's GELU is the tanh form: erf runs after the GEMM.
      {false, STRATA_RT_ACT_GELU_ERF, CUBLASLT_EPILOGUE_DEFAULT,
       STRATA_RT_ACT_GELU_ERF},
      {true, STRATA_RT_ACT_GELU_ERF, CUBLASLT_EPILOGUE_BIAS,
       STRATA_RT_ACT_GELU_ERF},
  };
  for (int64_t dtype : {STRATA_RT_F32, STRATA_RT_BF16, STRATA_RT_F16})
    for (const Case &c : cases) {
      GemmCall g;
      g.m = g.n = g.k = 8;
      g.dtype = dtype;
      g.bias = c.bias;
      g.act = c.act;
      GemmPlan p = planGemm(g, false);
      ASSERT_TRUE(p.error.empty()) << p.error;
      SCOPED_TRACE("dtype " + std::to_string(dtype) + " act " +
                   std::to_string(c.act) + " bias " + std::to_string(c.bias));
      EXPECT_EQ(p.separateAct, c.separate);
      EXPECT_EQ(p.compute, CUBLAS_COMPUTE_32F);
      // bf16 / f16: erf after the GEMM would read rounded sums; the GEMM
      // keeps f32 sums (no epilogue) for the kernel that adds the bias.
      // ReLU gives the same values on rounded sums.
      const bool f32Sums =
          dtype != STRATA_RT_F32 && c.act == STRATA_RT_ACT_GELU_ERF;
      EXPECT_EQ(p.f32Sums, f32Sums);
      EXPECT_EQ(p.epilogue, f32Sums ? CUBLASLT_EPILOGUE_DEFAULT : c.epilogue);
      EXPECT_EQ(p.dataType, dtype == STRATA_RT_F32    ? CUDA_R_32F
                            : dtype == STRATA_RT_BF16 ? CUDA_R_16BF
                                                      : CUDA_R_16F);
      EXPECT_EQ(p.resultType, f32Sums ? CUDA_R_32F : p.dataType);
    }
}

TEST(CudaGemmPlan, Bf16OperandsWithAnF32Result) {
  // Fused attention's scores: bf16 q and k, their f32 sums kept.
  GemmCall g;
  g.batch = 12;
  g.m = 128;
  g.n = 96;
  g.k = 64;
  g.aBatchStride = 128 * 64;
  g.bBatchStride = 96 * 64;
  g.transB = true;
  g.dtype = STRATA_RT_BF16;
  g.resultType = STRATA_RT_F32;
  GemmPlan p = planGemm(g, false);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.dataType, CUDA_R_16BF);
  EXPECT_EQ(p.resultType, CUDA_R_32F);
  EXPECT_EQ(p.compute, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(p.c.batchStride, 128 * 96);
  GemmDescriptors d;
  ASSERT_EQ(createDescriptors(p, d), "");
  cudaDataType_t type{};
  size_t written = 0;
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(d.c, CUBLASLT_MATRIX_LAYOUT_TYPE,
                                             &type, sizeof(type), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(type, CUDA_R_32F);
  ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(d.a, CUBLASLT_MATRIX_LAYOUT_TYPE,
                                             &type, sizeof(type), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(type, CUDA_R_16BF);
  // The same type is no mixed product; an epilogue has no mixed form, nor
  // has a low-precision result.
  g.resultType = STRATA_RT_BF16;
  EXPECT_EQ(planGemm(g, false).resultType, CUDA_R_16BF);
  g.resultType = STRATA_RT_F32;
  g.bias = true;
  EXPECT_EQ(planGemm(g, false).error,
            "a GEMM of bf16 operands with a f32 result and an epilogue");
  g.bias = false;
  g.dtype = STRATA_RT_F32;
  g.resultType = STRATA_RT_BF16;
  EXPECT_EQ(planGemm(g, false).error,
            "a GEMM of f32 operands with a bf16 result");
}

TEST(CudaGemmPlan, PreActivationKeptByTheEpilogueOrBeside) {
  GemmCall g;
  g.m = 32;
  g.n = 64;
  g.k = 16;
  g.dtype = STRATA_RT_BF16;
  g.bias = true;
  g.aux = true;
  g.act = STRATA_RT_ACT_GELU_TANH;
  GemmPlan p = planGemm(g, false);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.epilogue, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(p.auxLd, 64);
  EXPECT_FALSE(p.auxOnly);
  EXPECT_EQ(p.separateAct, 0);
  GemmDescriptors d;
  ASSERT_EQ(createDescriptors(p, d), "");
  int64_t ld = 0;
  size_t written = 0;
  ASSERT_EQ(cublasLtMatmulDescGetAttribute(d.op,
                                           CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                           &ld, sizeof(ld), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(ld, 64);
  g.bias = false;
  EXPECT_EQ(planGemm(g, false).epilogue, CUBLASLT_EPILOGUE_GELU_AUX);

  // ReLU's aux would be a bit mask and erf has no epilogue: the GEMM writes
  // the pre-activation into aux and the activation reads it, where reading
  // the rounded pre-activation gives the same values (f32; ReLU). Else the
  // GEMM keeps its f32 sums, and one kernel writes aux and the activation.
  auto expectBeside = [&](bool f32Sums) {
    GemmPlan q = planGemm(g, false);
    ASSERT_TRUE(q.error.empty()) << q.error;
    EXPECT_EQ(q.f32Sums, f32Sums);
    EXPECT_EQ(q.auxOnly, !f32Sums);
    EXPECT_EQ(q.separateAct, g.act);
    EXPECT_EQ(q.auxLd, 0);
    EXPECT_EQ(q.epilogue, f32Sums || !g.bias ? CUBLASLT_EPILOGUE_DEFAULT
                                             : CUBLASLT_EPILOGUE_BIAS);
  };
  g.bias = true;
  for (int64_t dtype : {STRATA_RT_F32, STRATA_RT_BF16}) {
    SCOPED_TRACE("dtype " + std::to_string(dtype));
    g.dtype = dtype;
    g.n = 64;
    g.act = STRATA_RT_ACT_RELU;
    expectBeside(false);
    g.act = STRATA_RT_ACT_GELU_ERF;
    expectBeside(dtype != STRATA_RT_F32);
    // N not a multiple of 8 (cuBLASLt's aux rule), no activation, SiLU: the
    // activation runs after the GEMM.
    g.n = 60;
    g.act = STRATA_RT_ACT_GELU_TANH;
    expectBeside(dtype != STRATA_RT_F32);
    g.act = STRATA_RT_ACT_NONE;
    expectBeside(false);
    g.act = STRATA_RT_ACT_SILU;
    expectBeside(dtype != STRATA_RT_F32);
  }
  g.batch = 2;
  EXPECT_EQ(planGemm(g, false).error,
            "a batch of GEMMs that keep their pre-activation");
}

TEST(CudaGemmPlan, F32SumsInChunksOfRows) {
  // GPT-2's MLP with erf GELU at batch 16: 16384 x 3072 f32 sums, 192 MiB,
  // in 7 chunks of at most 32 MiB (the runtime's budget).
  const int64_t kBytes = int64_t(32) << 20;
  GemmCall g;
  g.m = 16384;
  g.n = 3072;
  g.k = 768;
  g.dtype = STRATA_RT_BF16;
  const int64_t rows = sumsChunkRows(g, kBytes);
  EXPECT_EQ(rows, 2341);
  EXPECT_LE(rows * g.n * 4, int64_t(32) << 20);
  EXPECT_GE(rows * 7, g.m);
  g.m = 100;
  EXPECT_EQ(sumsChunkRows(g, kBytes), 100);
  // The GPU check's budget of 1 byte: one row a chunk.
  EXPECT_EQ(sumsChunkRows(g, 1), 1);
  // A row wider than 32 MiB: one row at a time.
  g.n = int64_t(1) << 24;
  EXPECT_EQ(sumsChunkRows(g, kBytes), 1);
  // A transposed A, or a batch: all rows at once.
  g.n = 3072;
  g.m = 16384;
  g.transA = true;
  EXPECT_EQ(sumsChunkRows(g, kBytes), 16384);
  g.transA = false;
  g.batch = 2;
  EXPECT_EQ(sumsChunkRows(g, kBytes), 2 * 16384);
}

/// The backward epilogues: DGELU for the tanh GELU's gradient with N a
/// multiple of 8 (the aux rule), the gradient after the GEMM otherwise;
/// BGRADA/BGRADB for the ABI's B/A, whose sums (evaluated on the host as
/// cuBLASLt defines them) equal the ABI's bias gradient; the fallback
/// without either epilogue.
TEST(CudaGemmPlan, BackwardEpiloguesAndTheirFallback) {
  GemmCall g;
  g.m = 32;
  g.n = 64;
  g.k = 16;
  g.dtype = STRATA_RT_F32;
  g.dact = true;
  g.act = STRATA_RT_ACT_GELU_TANH;
  GemmPlan p = planGemm(g, false);
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.epilogue, CUBLASLT_EPILOGUE_DGELU);
  EXPECT_EQ(p.auxLd, 64);
  EXPECT_EQ(p.separateActGrad, 0);
  GemmDescriptors d;
  ASSERT_EQ(createDescriptors(p, d), "");
  for (auto [n, act, unfused] :
       {std::tuple{int64_t(60), STRATA_RT_ACT_GELU_TANH, false},
        std::tuple{int64_t(64), STRATA_RT_ACT_RELU, false},
        std::tuple{int64_t(64), STRATA_RT_ACT_GELU_ERF, false},
        std::tuple{int64_t(64), STRATA_RT_ACT_GELU_TANH, true}}) {
    g.n = n;
    g.act = act;
    g.unfused = unfused;
    GemmPlan q = planGemm(g, false);
    ASSERT_TRUE(q.error.empty()) << q.error;
    EXPECT_EQ(q.epilogue, CUBLASLT_EPILOGUE_DEFAULT);
    EXPECT_EQ(q.separateActGrad, act);
    EXPECT_EQ(q.auxLd, 0);
  }
  g.unfused = false;
  g.bias = true;
  EXPECT_NE(planGemm(g, false).error, "");
  g.bias = false;
  g.batch = 2;
  EXPECT_NE(planGemm(g, false).error, "");

  // Bias gradients of every operand and transpose.
  for (int64_t operand : {0, 1})
    for (bool transA : {false, true})
      for (bool transB : {false, true}) {
        GemmCall h;
        h.m = 5;
        h.n = 7;
        h.k = 6;
        h.transA = transA;
        h.transB = transB;
        h.dtype = STRATA_RT_F32;
        h.bgrad = operand;
        GemmPlan q = planGemm(h, false);
        ASSERT_TRUE(q.error.empty()) << q.error;
        EXPECT_EQ(q.epilogue, operand == 0 ? CUBLASLT_EPILOGUE_BGRADB
                                           : CUBLASLT_EPILOGUE_BGRADA);
        GemmDescriptors dq;
        ASSERT_EQ(createDescriptors(q, dq), "");
        std::vector<float> a = values(h.m * h.k, 1), b = values(h.k * h.n, 2);
        // cuBLASLt: BGRADA sums its A (the ABI's B) over k, one per row of
        // D; BGRADB its B (the ABI's A), one per column of D.
        std::vector<double> epilogue, abi;
        if (operand == 1) {
          for (uint64_t i = 0; i < q.c.rows; ++i) {
            double s = 0;
            for (int64_t t = 0; t < h.k; ++t)
              s += element(b.data(), q.a, q.opA, 0, i, t);
            epilogue.push_back(s);
          }
        } else {
          for (uint64_t j = 0; j < q.c.cols; ++j) {
            double s = 0;
            for (int64_t t = 0; t < h.k; ++t)
              s += element(a.data(), q.b, q.opB, 0, t, j);
            epilogue.push_back(s);
          }
        }
        // The ABI: op(A) [m, k] or op(B) [k, n] summed over k, by the
        // reduction both runtimes' fallback uses.
        int64_t desc[4];
        strata::rt::bgradReduction(h.m, h.n, h.k, transA, transB, operand,
                                   desc);
        const std::vector<float> &x = operand == 0 ? a : b;
        abi.assign(desc[2] == 0 ? desc[1] : desc[0], 0.0);
        for (int64_t r = 0; r < desc[0]; ++r)
          for (int64_t c = 0; c < desc[1]; ++c)
            abi[r * desc[2] + c * desc[3]] += x[r * desc[1] + c];
        ASSERT_EQ(epilogue.size(), size_t(operand == 0 ? h.m : h.n));
        for (size_t i = 0; i < abi.size(); ++i)
          EXPECT_NEAR(epilogue[i], abi[i], 1e-9)
              << "operand " << operand << " transA " << transA << " transB "
              << transB << " element " << i;
        h.unfused = true;
        GemmPlan r = planGemm(h, false);
        EXPECT_EQ(r.epilogue, CUBLASLT_EPILOGUE_DEFAULT);
        EXPECT_TRUE(r.separateBgrad);
      }
}

TEST(CudaGemmPlan, TypesComputeAndRefusals) {
  GemmCall g;
  g.m = g.n = g.k = 4;
  g.dtype = STRATA_RT_F32;
  EXPECT_EQ(planGemm(g, false).compute, CUBLAS_COMPUTE_32F);
  EXPECT_EQ(planGemm(g, true).compute, CUBLAS_COMPUTE_32F_FAST_TF32);
  g.dtype = STRATA_RT_F16;
  EXPECT_EQ(planGemm(g, true).dataType, CUDA_R_16F);
  EXPECT_EQ(planGemm(g, true).compute, CUBLAS_COMPUTE_32F);

  g.dtype = STRATA_RT_I32;
  EXPECT_EQ(planGemm(g, false).error, "i32 GEMMs");
  g.dtype = STRATA_RT_F32;
  g.act = 42;
  EXPECT_EQ(planGemm(g, false).error,
            "unknown GEMM epilogue activation code 42");
  g.act = STRATA_RT_ACT_NONE;
  g.k = 0;
  EXPECT_NE(planGemm(g, false).error.find("each must be at least 1"),
            std::string::npos);
}

TEST(CudaGemmPlan, WorkspaceAndAlignment) {
  EXPECT_EQ(gemmWorkspaceBytes(8), size_t(4) << 20);
  EXPECT_EQ(gemmWorkspaceBytes(9), size_t(32) << 20);
  EXPECT_EQ(gemmWorkspaceBytes(10), size_t(32) << 20);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x1000)), 256u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x1010)), 16u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x1006)), 2u);
  EXPECT_EQ(pointerAlignment(reinterpret_cast<void *>(0x1003)), 1u);
}

TEST(CudaGemmPlan, DescriptorsNeedNoDevice) {
  for (int64_t act : {STRATA_RT_ACT_NONE, STRATA_RT_ACT_GELU_TANH})
    for (int64_t batch : {1, 4}) {
      GemmCall g;
      g.batch = batch;
      g.m = 64;
      g.n = 128;
      g.k = 32;
      g.aBatchStride = g.m * g.k;
      g.transB = true;
      g.dtype = STRATA_RT_BF16;
      g.bias = true;
      g.act = act;
      GemmPlan p = planGemm(g, false);
      GemmDescriptors d;
      ASSERT_EQ(createDescriptors(p, d), "");
      cublasLtEpilogue_t epilogue;
      size_t written = 0;
      ASSERT_EQ(
          cublasLtMatmulDescGetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                         &epilogue, sizeof(epilogue), &written),
          CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(epilogue, p.epilogue);
      int32_t count = 0;
      ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(
                    d.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                    sizeof(count), &written),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(count, batch);
      // cuBLASLt's B is the ABI's A, batched by m * k; its A the shared
      // (stride 0) weight.
      int64_t strideA = -1, strideB = -1;
      ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(
                    d.a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strideA,
                    sizeof(strideA), &written),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(cublasLtMatrixLayoutGetAttribute(
                    d.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strideB,
                    sizeof(strideB), &written),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(strideA, 0);
      EXPECT_EQ(strideB, batch > 1 ? g.m * g.k : 0);
    }
}

/// The device error word of a bad id: the first position wins whatever
/// the values (atomicMin), the value survives (saturated to 32 bits), and
/// no report stays "none".
TEST(CudaRuntime, BadIdWordsKeepTheFirstPositionAndItsValue) {
  using strata::cuda::badIdWord;
  EXPECT_LT(badIdWord(3, 1000), badIdWord(4, -5));
  EXPECT_LT(badIdWord(0, INT64_MAX), badIdWord(1, 0));
  EXPECT_LT(badIdWord(int64_t(1) << 40, 7), strata::cuda::kNoError);
  EXPECT_EQ(badIdWord(5, -3) >> 32, 6u);
  EXPECT_EQ(int32_t(uint32_t(badIdWord(5, -3))), -3);
  EXPECT_EQ(int32_t(uint32_t(badIdWord(0, int64_t(1) << 40))), INT32_MAX);
  EXPECT_EQ(int32_t(uint32_t(badIdWord(0, -(int64_t(1) << 40)))), INT32_MIN);
}

TEST(CudaRuntime, GroupedAdamUpdatesShareLaunchesByTypeAndScalars) {
  float lr[2];
  int64_t step;
  auto update = [&](int64_t lowType, const float *rate, float eps) {
    StrataRtContext::PendingAdam p{};
    p.lowType = lowType;
    p.gradType = lowType;
    p.lr = rate;
    p.step = &step;
    p.beta1 = 0.9;
    p.beta2 = 0.999;
    p.eps = eps;
    p.tensor.n = 1;
    return p;
  };
  using Launches = std::vector<std::vector<size_t>>;
  // 40 alike: a full launch of 32, then 8.
  std::vector<StrataRtContext::PendingAdam> pending(
      40, update(STRATA_RT_F32, &lr[0], 1e-8f));
  Launches launches = adamLaunches(pending);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].size(), kAdamBatch);
  EXPECT_EQ(launches[0].front(), 0u);
  EXPECT_EQ(launches[1].size(), 8u);
  EXPECT_EQ(launches[1].front(), 32u);
  // Element types, learning rates and epsilons apart; a NaN epsilon shares
  // a launch with its like, and every update is launched once.
  pending = {update(STRATA_RT_F32, &lr[0], 1e-8f),
             update(STRATA_RT_BF16, &lr[0], 1e-8f),
             update(STRATA_RT_F32, &lr[1], 1e-8f),
             update(STRATA_RT_F32, &lr[0], NAN),
             update(STRATA_RT_F32, &lr[0], 1e-8f),
             update(STRATA_RT_F32, &lr[0], NAN),
             update(STRATA_RT_BF16, &lr[0], 1e-8f)};
  EXPECT_EQ(adamLaunches(pending), (Launches{{0, 4}, {1, 6}, {2}, {3, 5}}));
  pending[6].adam = true; // Adam, where the others are AdamW
  EXPECT_EQ(adamLaunches(pending), (Launches{{0, 4}, {1}, {2}, {3, 5}, {6}}));
  EXPECT_TRUE(adamLaunches({}).empty());
}

TEST(CudaRng, NvccBuildEqualsTheHostBuild) {
  for (int64_t index :
       {int64_t(0), int64_t(1), int64_t(12345), (int64_t(1) << 33) + 7})
    for (int64_t key : {0, 3, 1 << 20}) {
      uint32_t nv[4];
      strataPhiloxFromNvcc(0x1234567890abcdefull, key, 2, index, nv);
      auto host = strata::rng::draw(0x1234567890abcdefull, key, 2, index);
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(nv[i], host[i]) << "index " << index << " key " << key;
    }
  int differ = 0;
  for (int64_t i = 0; i < 4096; ++i) {
    bool host = strata::rng::dropoutKeep(99, 5, i, 0.3);
    EXPECT_EQ(bool(strataDropoutKeepFromNvcc(99, 5, i, 0.3)), host);
    differ += host ? 0 : 1;
  }
  // About 30% dropped: the mask is not constant.
  EXPECT_GT(differ, 1000);
  EXPECT_LT(differ, 1500);
}

/// The CUDA runtime as strata-run loads it: its own handle, its symbols.
struct Library {
  void *handle = dlopen(STRATA_CUDA_RUNTIME_PATH, RTLD_NOW | RTLD_LOCAL);
  ~Library() {
    if (handle)
      dlclose(handle);
  }
  template <typename F> F get(const char *name) {
    return reinterpret_cast<F>(dlsym(handle, name));
  }
};

TEST(CudaRuntime, SymbolTableHasEveryFunctionOfTheLoweredStep) {
  Library lib;
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  auto symbols =
      lib.get<const StrataRtSymbol *(*)(size_t *)>("strata_rt_symbols");
  ASSERT_NE(symbols, nullptr);
  size_t count = 0;
  const StrataRtSymbol *table = symbols(&count);
  std::set<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_NE(table[i].address, nullptr) << table[i].name;
    // The table's address is the library's own definition.
    EXPECT_EQ(table[i].address, dlsym(lib.handle, table[i].name))
        << table[i].name;
    names.insert(table[i].name);
  }
  for (const char *name :
       {"strata_rt_gemm", "strata_rt_attention_grad", "strata_rt_adam",
        "strata_rt_collective", "strata_rt_step_begin", "strata_rt_step_end"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_EQ(names.size(), count);
  auto isa = lib.get<const char *(*)()>("strata_rt_isa");
  ASSERT_NE(isa, nullptr);
  EXPECT_STREQ(isa(), "cuda");
}

TEST(CudaRuntime, ContextStartsOnADeviceAndRefusesWithout) {
  Library lib;
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  auto defaults =
      lib.get<void (*)(StrataRtOptions *)>("strata_rt_default_options");
  auto create =
      lib.get<StrataRtContext *(*)(const StrataRtOptions *, char *, size_t)>(
          "strata_rt_create");
  auto destroy = lib.get<void (*)(StrataRtContext *)>("strata_rt_destroy");
  StrataRtOptions options;
  defaults(&options);
  char error[256] = {0};
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    EXPECT_EQ(create(&options, error, sizeof(error)), nullptr);
    EXPECT_EQ(std::string(error).rfind("no CUDA device: ", 0), 0u) << error;
    return;
  }
  StrataRtContext *ctx = create(&options, error, sizeof(error));
  ASSERT_NE(ctx, nullptr) << error;
  destroy(ctx);
  options.device = devices;
  EXPECT_EQ(create(&options, error, sizeof(error)), nullptr);
  EXPECT_NE(std::string(error).find("was asked for"), std::string::npos)
      << error;
}

} // namespace
