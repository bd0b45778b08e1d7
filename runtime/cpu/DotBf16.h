//===- DotBf16.h - Small bf16 GEMMs with AVX512-BF16 ------------*- C++ -*-===//
//
// The products inside fused attention's blocks (an inner dimension of the
// head size or of one block of keys) in bf16 with f32 sums, through
// AVX512-BF16's VDPBF16PS: twice the f32 FMA rate on processors that have
// it. oneDNN 2.6's public BLAS calls are sgemm (f32) and integer GEMMs, so
// these are the runtime's own.
//
// Compiled once, with the instructions enabled per function; callers check
// hasBf16DotProducts() first (the AVX-512 build of Kernels.cpp does).
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CPU_DOTBF16_H
#define STRATA_RUNTIME_CPU_DOTBF16_H

#include <algorithm>
#include <cstdint>
#include <utility>

namespace strata::cpu {

/// What a causal mask makes known of a product, for query rows from
/// `offset` on (key j is seen by query row r when j <= r + offset):
/// `Output`: C(i, j) (i a query row, j a key) is needed only where seen;
/// the tiles wholly beyond are stored as zeros. `Rows`: A(i, p) (i a query
/// row, p a key) is zero where not seen; `Columns`: A(i, p) (i a key, p a
/// query row) is; the sums skip those terms (0 times B's element: the same
/// sums for finite B).
struct Causal {
  enum Kind { None, Output, Rows, Columns } kind = None;
  int64_t offset = 0;

  /// The terms [first, last) of an inner dimension of k that a tile of C
  /// (rows i0 .. i0 + rows - 1, from column j0 on) sums: none where
  /// `Output` leaves the whole tile unseen, up to the key of its last row
  /// with `Rows`, from the query row of its first row with `Columns`
  /// (`first` may exceed k: the caller clamps it, in its own units).
  std::pair<int64_t, int64_t> terms(int64_t i0, int64_t rows, int64_t j0,
                                    int64_t k) const {
    if (kind == Output && j0 > i0 + rows - 1 + offset)
      return {0, 0};
    if (kind == Rows)
      return {0, std::min(k, i0 + rows + offset)};
    if (kind == Columns)
      return {std::max<int64_t>(0, i0 - offset), k};
    return {0, k};
  }
};

/// Whether this processor has AVX512-BF16's dot products (and AVX-512 F and
/// BW, which the kernels also use).
bool hasBf16DotProducts();

/// Floats of work memory dotBf16 needs for an m x n x k product (its
/// operands repacked in bf16 pairs).
int64_t dotBf16WorkFloats(int64_t m, int64_t n, int64_t k);

/// C[m x n] (row stride ldc) = alpha * A B + (accumulate ? C : 0), where
/// A(i, p) = a[i * ars + p * acs] and B(p, j) = b[p * brs + j * bcs] are
/// bf16 (given as their bits) or, for A, f32 values rounded to bf16 first
/// (to nearest even): the products of bf16 values summed in f32 over p (a
/// pair of p at a time, in order), then scaled by alpha. `work`:
/// dotBf16WorkFloats(m, n, k) floats on a 64-byte boundary.
/// Single-threaded (callers parallelise around it).
void dotBf16(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t ars, int64_t acs, const uint16_t *b, int64_t brs,
             int64_t bcs, float *c, int64_t ldc, bool accumulate, float *work,
             Causal causal = {});
void dotBf16(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
             int64_t ars, int64_t acs, const uint16_t *b, int64_t brs,
             int64_t bcs, float *c, int64_t ldc, bool accumulate, float *work,
             Causal causal = {});

/// B packed once for several products that read it, or its first rows or
/// columns: packBf16B writes packedBf16BFloats(k, n) floats at `dst` (on a
/// 64-byte boundary) for the k x n matrix B(p, j) = b[p * brs + j * bcs];
/// dotBf16Packed is dotBf16 with B the first k rows and n columns of such a
/// matrix of `packedK` rows, k even or equal to packedK (an odd k would
/// read row k, where dotBf16 reads zeros). The same sums as dotBf16.
int64_t packedBf16BFloats(int64_t k, int64_t n);
void packBf16B(float *dst, const uint16_t *b, int64_t brs, int64_t bcs,
               int64_t k, int64_t n);
void dotBf16Packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t ars, int64_t acs, const float *packedB,
                   int64_t packedK, float *c, int64_t ldc, bool accumulate,
                   float *work, Causal causal = {});
void dotBf16Packed(int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t *a, int64_t ars, int64_t acs,
                   const float *packedB, int64_t packedK, float *c, int64_t ldc,
                   bool accumulate, float *work, Causal causal = {});

} // namespace strata::cpu

#endif // STRATA_RUNTIME_CPU_DOTBF16_H
