/*===- Activations.h - The activation formulas of every runtime ----------===*
 *
 * The scalar formulas of the activations, their gradients and the exp
 * approximation of the softmax-like kernels, shared by the CPU runtime
 * (compiled once per instruction set, so every function has internal
 * linkage: each build keeps its own copy) and the CUDA runtime (nvcc,
 * __host__ __device__): both compute the same function, operation for
 * operation. Header-only C++.
 *
 *===---------------------------------------------------------------------===*/

#ifndef STRATA_RUNTIME_COMMON_ACTIVATIONS_H
#define STRATA_RUNTIME_COMMON_ACTIVATIONS_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_ACT_FN __host__ __device__ static inline
#else
#define STRATA_ACT_FN static inline
#endif

namespace strata::act {

STRATA_ACT_FN int32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  int32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
#endif
}

STRATA_ACT_FN float bitsFloat(int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

/// exp in plain arithmetic, so that loops over it vectorise (glibc's vector
/// exp needs -ffast-math): x = n ln2 + r, |r| <= ln2/2, e^r by its degree-6
/// Taylor polynomial (relative error < 2e-7), 2^n through the exponent
/// bits. Inputs are clamped to [-87, 88] (the float range) by comparisons
/// that keep a NaN, as std::max / std::min do.
STRATA_ACT_FN float fastExp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = 88.0f < x ? 88.0f : x;
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick.
  const float shifter = 12582912.0f;
  float t = x * 1.44269504088896341f + shifter;
  float n = t - shifter;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float p =
      1.0f +
      r * (1.0f +
           r * (0.5f + r * (0.166666672f +
                            r * (0.0416666679f +
                                 r * (0.00833333377f + r * 0.00138888892f)))));
  return p * bitsFloat((floatBits(t) - 0x4B400000 + 127) << 23);
}

/// tanh through one exp; exact at the ends (1 and -1). Its error is
/// absolute (about 1e-7), not relative: enough where 1 is added to it
/// (GELU), not near 0 on its own (preciseTanh).
STRATA_ACT_FN float fastTanh(float u) {
  return 1.0f - 2.0f / (fastExp(2.0f * u) + 1.0f);
}

/// tanh with a small relative error everywhere (under 3e-7): below 0.625 in
/// magnitude an odd polynomial (the minimax fit of Cephes' tanhf), above it
/// fastTanh, whose absolute error is then relative too. Both are computed,
/// and one chosen, so that loops over it vectorise.
STRATA_ACT_FN float preciseTanh(float u) {
  const float s = u * u;
  const float odd =
      ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) *
            s +
        1.33314422036e-1f) *
           s -
       3.33332819422e-1f) *
          s * u +
      u;
  return fabsf(u) < 0.625f ? odd : fastTanh(u);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

STRATA_ACT_FN float geluTanh(float x) {
  return 0.5f * x *
         (1.0f + fastTanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
/// exp through fastExp, but 0 below f32's range and infinite above it
/// (where fastExp's clamp gives exp(-87) and exp(88): right for softmax,
/// not for a tail or a logistic function); a NaN stays NaN.
STRATA_ACT_FN float rangeExp(float y) {
  return y < -87.0f ? 0.0f : 88.0f < y ? INFINITY : fastExp(y);
}

/// The standard normal distribution function Phi(x) = (1 + erf(x / sqrt 2))
/// / 2 in plain arithmetic (so that loops over it vectorise). On the side
/// where it is small it is erfc(a) / 2, a = |x| / sqrt 2, from t = 1 / (1 +
/// a/2) and erfc(a) = t exp(-a^2 + P(t)), P the degree-9 Chebyshev fit of
/// Numerical Recipes' erfcc (fractional error under 1.2e-7 in exact
/// arithmetic), so the left tail keeps its relative precision (1 + erf(x)
/// loses it): about 3e-7 relative near the centre, growing with x^2 (the
/// rounding of x^2 / 2 in the exponent) to 1e-5 at |x| = 12; the absolute
/// error is about 2e-7.
STRATA_ACT_FN float normalCdf(float x) {
  const float t = 1.0f / (1.0f + 0.5f * kSqrtHalf * fabsf(x));
  const float p =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f +
                                    t * (1.48851587f +
                                         t * (-0.82215223f +
                                              t * 0.17087277f))))))));
  const float half = 0.5f * t * rangeExp(p - 0.5f * x * x);
  return x < 0.0f ? half : 1.0f - half;
}

STRATA_ACT_FN float geluErf(float x) { return x * normalCdf(x); }
STRATA_ACT_FN float geluTanhGrad(float x) {
  float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  float t = fastTanh(u);
  float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
STRATA_ACT_FN float geluErfGrad(float x) {
  return normalCdf(x) + x * rangeExp(-0.5f * x * x) * kInvSqrt2Pi;
}
STRATA_ACT_FN float silu(float x) { return x / (1.0f + rangeExp(-x)); }
/// dy * silu'(x).
STRATA_ACT_FN float siluGrad(float x, float dy) {
  float s = 1.0f / (1.0f + rangeExp(-x));
  return dy * s * (1.0f + x * (1.0f - s));
}

} // namespace strata::act

#undef STRATA_ACT_FN

#endif // STRATA_RUNTIME_COMMON_ACTIVATIONS_H
