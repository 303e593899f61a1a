// Element conversions of the simulated device's copy_strided: exactly what
// PyTorch's CPU .to() gives on x86-64, every value included (the rules are
// runtime_adapter.h's, at copy_strided). Each element is loaded as a wide
// value, then stored with the destination's rule:
// * to bool: nonzero (NaN too); integer to integer: the low bits;
// * to float16 / bfloat16: through float32, both roundings to nearest even;
// * floating to int64: truncated, INT64_MIN when out of range or NaN;
// * floating to int32 / int16 / int8 / uint8: truncated to int32 (INT32_MIN when
//   out of range or NaN), then the low bits.
#include "simulator.h"

#include <cmath>
#include <cstring>

namespace ocl::sim {
namespace {

using runtime::Dtype;

// One element, widened: an integer (bool as 0/1), or a floating value.
struct Value {
  bool floating;
  std::int64_t i;
  double f;  // exact for every floating source
};

float bits_to_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1f;
  const std::uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f)  // inf or NaN
    return bits_to_float(sign | 0x7f800000 | (mantissa << 13));
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t bits = float_to_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
  const std::uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return sign | 0x7e00;    // NaN
  if (magnitude >= 0x477ff000) return sign | 0x7c00;   // 65520 and above round to inf
  if (magnitude < 0x38800000) {                         // below 2^-14: subnormal or zero
    // the number of 2^-24 steps, rounded to nearest even (the scaling is exact)
    return sign | static_cast<std::uint16_t>(std::nearbyint(bits_to_float(magnitude) * 16777216.0f));
  }
  // normal: rebias the exponent (127 -> 15), round 23 mantissa bits to 10 (ties to even;
  // a carry moves into the exponent, as it should)
  const std::uint32_t rounded = magnitude + 0xfff + ((magnitude >> 13) & 1);
  return sign | static_cast<std::uint16_t>((rounded - (112u << 23)) >> 13);
}

float bfloat16_to_float(std::uint16_t b) { return bits_to_float(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t float_to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const std::uint32_t bits = float_to_bits(f);
  return static_cast<std::uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

template <class T>
T read(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void write(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

Value load(const char* p, Dtype t) {
  switch (t) {
    case Dtype::Bool: return {false, read<std::uint8_t>(p) != 0, 0};
    case Dtype::UInt8: return {false, read<std::uint8_t>(p), 0};
    case Dtype::Int8: return {false, read<std::int8_t>(p), 0};
    case Dtype::Int16: return {false, read<std::int16_t>(p), 0};
    case Dtype::Int32: return {false, read<std::int32_t>(p), 0};
    case Dtype::Int64: return {false, read<std::int64_t>(p), 0};
    case Dtype::Float16: return {true, 0, half_to_float(read<std::uint16_t>(p))};
    case Dtype::BFloat16: return {true, 0, bfloat16_to_float(read<std::uint16_t>(p))};
    case Dtype::Float32: return {true, 0, read<float>(p)};
    case Dtype::Float64: return {true, 0, read<double>(p)};
  }
  return {false, 0, 0};
}

// The value as float32 (one rounding to nearest even from float64 or int64).
float as_float32(const Value& v) {
  if (!v.floating) return static_cast<float>(v.i);
  return static_cast<float>(v.f);
}

// Floating to int32 as x86-64's truncating conversion does: INT32_MIN when the
// truncated value does not fit (or NaN).
std::int32_t float_to_int32(double d) {
  if (!(d > -2147483649.0 && d < 2147483648.0)) return INT32_MIN;
  return static_cast<std::int32_t>(d);
}
std::int64_t float_to_int64(double d) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return INT64_MIN;
  return static_cast<std::int64_t>(d);
}

// The low bits of an integer, as an integer type narrowing keeps them.
std::uint64_t integer_bits(const Value& v) {
  if (!v.floating) return static_cast<std::uint64_t>(v.i);
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(float_to_int32(v.f)));
}

void store(char* p, Dtype t, const Value& v) {
  switch (t) {
    case Dtype::Bool:
      write<std::uint8_t>(p, v.floating ? (v.f != 0.0) : (v.i != 0));
      return;
    case Dtype::UInt8: write(p, static_cast<std::uint8_t>(integer_bits(v))); return;
    case Dtype::Int8: write(p, static_cast<std::int8_t>(integer_bits(v))); return;
    case Dtype::Int16: write(p, static_cast<std::int16_t>(integer_bits(v))); return;
    case Dtype::Int32: write(p, static_cast<std::int32_t>(integer_bits(v))); return;
    case Dtype::Int64: write(p, v.floating ? float_to_int64(v.f) : v.i); return;
    case Dtype::Float16: write(p, float_to_half(as_float32(v))); return;
    case Dtype::BFloat16: write(p, float_to_bfloat16(as_float32(v))); return;
    case Dtype::Float32: write(p, as_float32(v)); return;
    case Dtype::Float64: write(p, v.floating ? v.f : static_cast<double>(v.i)); return;
  }
}

}  // namespace

std::size_t element_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::UInt8: case Dtype::Int8: case Dtype::Bool: return 1;
    case Dtype::Int16: case Dtype::Float16: case Dtype::BFloat16: return 2;
    case Dtype::Int32: case Dtype::Float32: return 4;
    case Dtype::Int64: case Dtype::Float64: return 8;
  }
  return 0;
}

void strided_convert(const runtime::StridedCopy& c, char* dst, const char* src) {
  const std::int64_t dst_size = static_cast<std::int64_t>(element_size(c.dst_dtype));
  const std::int64_t src_size = static_cast<std::int64_t>(element_size(c.src_dtype));
  const bool same = c.dst_dtype == c.src_dtype;
  std::int64_t index[runtime::kMaxCopyDims] = {};
  std::int64_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= c.sizes[d];
  for (std::int64_t n = 0; n < total; ++n) {
    std::int64_t dst_off = 0, src_off = 0;
    for (int d = 0; d < c.ndim; ++d) {
      dst_off += index[d] * c.dst_strides[d];
      src_off += index[d] * c.src_strides[d];
    }
    char* out = dst + dst_off * dst_size;
    const char* in = src + src_off * src_size;
    if (same)
      std::memcpy(out, in, static_cast<std::size_t>(dst_size));
    else
      store(out, c.dst_dtype, load(in, c.src_dtype));
    for (int d = c.ndim - 1; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[d] < c.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace ocl::sim
