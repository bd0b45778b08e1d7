//===- PackedGemm.h - Strata's own GEMM for AVX2 processors -----*- C++ -*-===//
//
// A GEMM in the manner of BLIS and GotoBLAS: blocks of both operands are
// copied into panels that the micro-kernel reads in order (6 rows of A and
// 16 columns of B at a time, f32 sums in 12 AVX2 registers). The copies
// take any storage type (f32, bf16, f16; widened exactly) and either
// layout (plain or transposed), so that a bf16 or f16 product needs no
// widened copy of its operands and a transposed operand no scratch
// transpose; the result is written in the output's type once its sums are
// complete (f32 accumulation, one rounding), with the bias and an
// accumulation into the output on the way.
//
// It runs on processors with AVX2, FMA and F16C (those whose kernels are
// the AVX2 or AVX-512 build: strata_rt_isa). Every sum runs in one fixed
// order, whatever the thread count: over the
// inner dimension in ascending order, in blocks of kBlockK whose partial sums
// are added in order. Private to runtime/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_PACKEDGEMM_H
#define STRATA_RUNTIME_CPU_PACKEDGEMM_H

#include "Context.h"

#include <cstdint>

namespace strata::cpu {

/// C = act(A B + bias) (C = C + A B when `accumulate`), `batch` products of
/// m x n from m x k and k x n; A (B) is stored k x m (n x k) when
/// transposed. A nonzero batch stride means one operand per product (m * k
/// or k * n elements apart), zero one operand for all. A, B and the bias
/// are of storage type `type` (STRATA_RT_F32, _BF16 or _F16), C of that
/// type or f32 (`cType`). The activation (a STRATA_RT_ACT_* code, applied
/// by strata_rt_unary to the f32 sums, which are then rounded once) is of
/// the sums of a block of rows as soon as they are finished. Runs on the
/// runtime's OpenMP threads; `ctx` lends the packing buffers, `site` names
/// the call in a failure.
void packedGemm(StrataRtContext *ctx, int64_t site, int64_t type, int64_t batch,
                int64_t m, int64_t n, int64_t k, const void *a,
                int64_t aBatchStride, bool transA, const void *b,
                int64_t bBatchStride, bool transB, void *c, int64_t cType,
                const void *bias, int64_t act, bool accumulate);

} // namespace strata::cpu

#endif // STRATA_RUNTIME_CPU_PACKEDGEMM_H
