//===- LowPrecision.h - bf16 and f16 storage types ------------------------===//
//
// The CPU kernels store bf16 and f16 tensors and compute in f32: an element
// is widened when it is read and rounded (to nearest, ties to even) when it
// is written. BFloat16 and Half wrap the 16 bits with those two conversions
// so that a kernel written for a storage type T reads `float(x[i])` and
// writes `out[i] = T(v)`; for T = float both are no-ops. The MPI
// communicator sums bf16 and f16 buffers with them too.
//
// Everything here has internal linkage: runtime/cpu/Kernels.cpp is compiled
// twice, once with AVX2 + F16C, and the linker must never hand a baseline
// caller the AVX2 copy of an inline function.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_COMMON_LOWPRECISION_H
#define STRATA_RUNTIME_COMMON_LOWPRECISION_H

#include "strata/Runtime/StrataRuntime.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace strata::cpu {
namespace {

/// bfloat16: the upper half of an f32 (8 exponent bits, 7 mantissa bits).
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  BFloat16(float f) : bits(round(f)) {}
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  /// Round to nearest even on the 16 dropped bits; NaNs stay (quiet) NaNs.
  /// Branch-free, so that loops of it vectorise.
  static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quietNan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quietNan : rounded);
  }
};
static_assert(sizeof(BFloat16) == 2);

/// IEEE binary16, through the compiler's _Float16 (F16C instructions in the
/// AVX2 build, a library call in the baseline one).
struct Half {
  _Float16 value;
  Half() = default;
  Half(float f) : value(static_cast<_Float16>(f)) {}
  operator float() const { return static_cast<float>(value); }
};
static_assert(sizeof(Half) == 2);

/// Floating-point storage types compute in float, integers in themselves.
template <typename T>
using ComputeType = std::conditional_t<std::is_integral_v<T>, T, float>;

/// Calls `f(T{})` with the storage type of `dtype` (f32, bf16 or f16);
/// false for another type.
template <typename F> bool withFloatType(int64_t dtype, F &&f) {
  switch (dtype) {
  case STRATA_RT_F32:
    f(float{});
    return true;
  case STRATA_RT_BF16:
    f(BFloat16{});
    return true;
  case STRATA_RT_F16:
    f(Half{});
    return true;
  }
  return false;
}

} // namespace
} // namespace strata::cpu

#endif // STRATA_RUNTIME_COMMON_LOWPRECISION_H
