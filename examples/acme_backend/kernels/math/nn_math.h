// Vector-friendly math for acme's nn kernels (softmax, layer norm).
//
// GCC does not vectorize std::exp nor float reductions (reordering a sum needs
// -ffast-math, which acme does not build with). These helpers are written so
// the compiler can vectorize them under strict IEEE rules: a branch-free exp
// (Cody-Waite range reduction + degree-6 polynomial, max error ~2 ulp over the
// float range, exact 0 below -104 and +inf above 88.7) and sums kept in 8
// independent lanes.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "vec_math.h"

namespace acme::kernels::nn {

inline float exp_f32(float x) {
  // Branch-free and without float comparisons (under the default
  // -ftrapping-math GCC will not turn those into selects, which blocks
  // vectorization): special inputs are found on the bit pattern.
  const float hi = 88.7228391f, lo = -103.972076f;
  const uint32_t xb = std::bit_cast<uint32_t>(x);
  const uint32_t mag = xb & 0x7fffffffu;
  const uint32_t neg = 0u - (xb >> 31);                                       // all ones if x < 0
  const uint32_t m_nan = 0u - static_cast<uint32_t>(mag > 0x7f800000u);
  const uint32_t m_under = neg & (0u - static_cast<uint32_t>(mag > std::bit_cast<uint32_t>(-lo)));
  const uint32_t m_over = ~neg & (0u - static_cast<uint32_t>(mag > std::bit_cast<uint32_t>(hi))) & ~m_nan;
  // clamp to [lo, hi] (NaN -> 0) so the exponent arithmetic stays in range
  uint32_t cb = (xb & ~(m_under | m_over | m_nan)) | (std::bit_cast<uint32_t>(lo) & m_under) |
                (std::bit_cast<uint32_t>(hi) & m_over);
  x = std::bit_cast<float>(cb);
  // x = n * ln2 + r, |r| <= ln2 / 2; round to nearest by the 1.5 * 2^23 trick
  const float magic = 12582912.0f;
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // e^r on [-ln2/2, ln2/2]
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // scale by 2^n in two steps so n down to -150 stays representable
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  // below lo -> 0, above hi -> +inf, NaN -> the NaN
  uint32_t yb = std::bit_cast<uint32_t>(p * s1 * s2);
  yb &= ~m_under;
  yb = (yb & ~m_over) | (0x7f800000u & m_over);
  yb = (yb & ~m_nan) | (xb & m_nan);
  return std::bit_cast<float>(yb);
}

// out[i] = exp(in[i] - shift) for float: the hot loop of softmax and attention
// (in == out is allowed). On AVX2/AVX-512 hosts it is the vector library's exp
// (vec_math.h: 8 or 16 lanes with FMA, 3x faster than the loop below); the loop
// is the fallback for other hosts.
inline void exp_shifted_f32(const float* in, float shift, float* out, int64_t n) {
  if (auto fn = ::acme::vec::unary_f32()) {
    if (shift != 0.f) {
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] - shift;
      in = out;
    }
    fn(::acme::vec::Unary::Exp, in, out, n, 0.f, 0.f);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = exp_f32(in[i] - shift);
}

template <class T>
inline void exp_shifted(const T* in, T shift, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    exp_shifted_f32(in, shift, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = std::exp(in[i] - shift);
  }
}

template <class T>
inline T exp_fast(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

// sum of p[0..n) in 8 lanes (vectorizable without reassociation flags)
template <class T>
inline T lane_sum(const T* p, int64_t n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  T s = 0;
  for (; i < n; ++i) s += p[i];
  return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// sum of p[i] * q[i]
template <class T>
inline T lane_dot(const T* p, const T* q, int64_t n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j] * q[i + j];
  T s = 0;
  for (; i < n; ++i) s += p[i] * q[i];
  return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// max of p[0..n), NaN-propagating
template <class T>
inline T lane_max(const T* p, int64_t n) {
  T acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = -std::numeric_limits<T>::infinity();
  bool nan = false;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const T v = p[i + j];
      nan |= (v != v);
      acc[j] = v > acc[j] ? v : acc[j];
    }
  T m = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) {
    nan |= (p[i] != p[i]);
    m = p[i] > m ? p[i] : m;
  }
  for (int j = 0; j < 8; ++j) m = acc[j] > m ? acc[j] : m;
  return nan ? std::numeric_limits<T>::quiet_NaN() : m;
}

}  // namespace acme::kernels::nn
