// acmeccl: the reduction kernels (reduce.h). Blocked: each block of elements
// is accumulated in a small buffer (in L1) over all inputs, divided for Avg,
// then stored once; the loops are simple enough for the compiler to vectorize.
#include "reduce.h"

#include <cmath>
#include <type_traits>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace acmeccl {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf / nan (keep nan quiet)
    return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                        // below the smallest normal half
    if (ax < 0x33000000u) return sign;            // < half the smallest subnormal: 0
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24: to the subnormal's scale (2^-24)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias, round the 13 dropped bits to nearest even.
  uint32_t r = ax - ((127u - 15u) << 23);
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return sign | static_cast<uint16_t>(r);
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

namespace {

struct Half {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

// The accumulator type of a storage type, and the conversions.
template <class T> struct Acc { using type = T; };
template <> struct Acc<Half> { using type = float; };
template <> struct Acc<BF16> { using type = float; };
template <class T> inline typename Acc<T>::type load(T v) { return v; }
inline float load(Half v) { return half_to_float(v.bits); }
inline float load(BF16 v) { return bf16_to_float(v.bits); }
template <class T> inline T store(typename Acc<T>::type v) { return v; }
template <> inline Half store<Half>(float v) { return Half{float_to_half(v)}; }
template <> inline BF16 store<BF16>(float v) { return BF16{float_to_bf16(v)}; }

// Integer sums and products wrap (modular arithmetic on the unsigned type).
template <class A>
inline A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class A>
inline A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if constexpr (sizeof(A) < sizeof(unsigned)) {
      return static_cast<A>(static_cast<unsigned>(static_cast<U>(a)) * static_cast<U>(b));
    } else {
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    }
  } else {
    return a * b;
  }
}
// Min and max propagate NaN, as torch's do.
template <class A>
inline A vmin(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) return (a != a || a < b) ? a : b;
  else return a < b ? a : b;
}
template <class A>
inline A vmax(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) return (a != a || a > b) ? a : b;
  else return a > b ? a : b;
}
// Floor division for integers (toward negative infinity), plain for floats.
template <class A>
inline A divide(A a, int n) {
  if constexpr (std::is_integral_v<A>) {
    if constexpr (std::is_signed_v<A>) {
      const A d = static_cast<A>(n);
      A q = static_cast<A>(a / d);
      if ((a % d) != 0 && (a < 0)) --q;
      return q;
    } else {
      return static_cast<A>(a / static_cast<A>(n));
    }
  } else {
    return a / static_cast<A>(n);
  }
}

constexpr size_t kBlock = 1024;

// Stores `bytes` at dst, non-temporally where dst is 16-byte aligned.
inline void store_block(char* dst, const char* src, size_t bytes, bool stream) {
#if defined(__x86_64__)
  if (stream && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
    return;
  }
#endif
  (void)stream;
  std::memcpy(dst, src, bytes);
}

inline void store_fence(bool stream) {
#if defined(__x86_64__)
  if (stream) _mm_sfence();
#endif
  (void)stream;
}

template <class T, int Op>
void reduce_typed(void* const* dsts, int ndst, const void* const* src, int n, size_t count,
                  int avg_by, bool stream) {
  using A = typename Acc<T>::type;
  alignas(64) A acc[kBlock];
  alignas(64) T out[std::is_same_v<A, T> ? 1 : kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t m = count - b < kBlock ? count - b : kBlock;
    const T* s0 = static_cast<const T*>(src[0]) + b;
    for (size_t i = 0; i < m; ++i) acc[i] = load(s0[i]);
    for (int k = 1; k < n; ++k) {
      const T* s = static_cast<const T*>(src[k]) + b;
      for (size_t i = 0; i < m; ++i) {
        if constexpr (Op == acmecclSum || Op == acmecclAvg) acc[i] = add<A>(acc[i], load(s[i]));
        else if constexpr (Op == acmecclProd) acc[i] = mul<A>(acc[i], load(s[i]));
        else if constexpr (Op == acmecclMin) acc[i] = vmin<A>(acc[i], load(s[i]));
        else acc[i] = vmax<A>(acc[i], load(s[i]));
      }
    }
    if constexpr (Op == acmecclAvg) {
      if (avg_by > 1)
        for (size_t i = 0; i < m; ++i) acc[i] = divide<A>(acc[i], avg_by);
    }
    const char* bytes;
    if constexpr (std::is_same_v<A, T>) {
      bytes = reinterpret_cast<const char*>(acc);
    } else {
      for (size_t i = 0; i < m; ++i) out[i] = store<T>(acc[i]);
      bytes = reinterpret_cast<const char*>(out);
    }
    for (int k = 0; k < ndst; ++k)
      store_block(static_cast<char*>(dsts[k]) + b * sizeof(T), bytes, m * sizeof(T), stream);
  }
  store_fence(stream);
}

template <class T>
bool reduce_op(void* const* dst, int ndst, const void* const* src, int n, size_t count, int op,
               int avg_by, bool stream) {
  switch (op) {
    case acmecclSum: reduce_typed<T, acmecclSum>(dst, ndst, src, n, count, avg_by, stream); return true;
    case acmecclAvg: reduce_typed<T, acmecclAvg>(dst, ndst, src, n, count, avg_by, stream); return true;
    case acmecclProd: reduce_typed<T, acmecclProd>(dst, ndst, src, n, count, avg_by, stream); return true;
    case acmecclMin: reduce_typed<T, acmecclMin>(dst, ndst, src, n, count, avg_by, stream); return true;
    case acmecclMax: reduce_typed<T, acmecclMax>(dst, ndst, src, n, count, avg_by, stream); return true;
  }
  return false;
}

}  // namespace

bool reduce_to(void* const* dst, int ndst, const void* const* src, int n, size_t count,
               int dtype, int op, int avg_by, bool stream) {
  switch (dtype) {
    case acmecclUint8: case acmecclBool: return reduce_op<uint8_t>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclInt8: return reduce_op<int8_t>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclInt16: return reduce_op<int16_t>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclInt32: return reduce_op<int32_t>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclInt64: return reduce_op<int64_t>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclFloat16: return reduce_op<Half>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclBfloat16: return reduce_op<BF16>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclFloat32: return reduce_op<float>(dst, ndst, src, n, count, op, avg_by, stream);
    case acmecclFloat64: return reduce_op<double>(dst, ndst, src, n, count, op, avg_by, stream);
  }
  return false;
}

bool reduce(void* dst, const void* const* src, int n, size_t count, int dtype, int op,
            int avg_by) {
  return reduce_to(&dst, 1, src, n, count, dtype, op, avg_by, false);
}

void copy(void* dst, const void* src, size_t bytes, bool stream) {
  constexpr size_t kPiece = 1 << 16;
  if (!stream) {
    std::memcpy(dst, src, bytes);
    return;
  }
  for (size_t i = 0; i < bytes; i += kPiece)
    store_block(static_cast<char*>(dst) + i, static_cast<const char*>(src) + i,
                std::min(kPiece, bytes - i), true);
  store_fence(true);
}

}  // namespace acmeccl
