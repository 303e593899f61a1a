// The kernel library's dtype machinery: type tags, a dispatch over dtype sets,
// compute (opmath) and accumulation types, and value conversions.
// It is used instead of ATen's AT_DISPATCH macros: a kernel names the dtypes it
// computes (a set below), instantiates its body for those only, and an
// unsupported dtype fails with a clear message naming op, device and dtype
// instead of a generic ATen error.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include "device_config.h"

#include <cstdint>
#include <string>
#include <type_traits>

namespace FLSDK_BACKEND_NS::common {

// The backend's name, first word of every kernel error ("acme: add: ...").
inline constexpr const char* kBackend = ::FLSDK_BACKEND_NS::config::kBackendName;

// A value that carries a C++ element type into a generic lambda:
//   dispatch<kAll>(op, dev, st, [&](auto tag) { using T = FL_T(tag); ... });
template <class T>
struct Tag {
  using type = T;
};
#define FL_T(tag) typename std::decay_t<decltype(tag)>::type

// dtype sets, as bit masks, so the dispatch only instantiates the kernel body
// for the dtypes the kernel supports (bitwise ops never see float types).
enum : unsigned {
  kF32 = 1u << 0,
  kF64 = 1u << 1,
  kF16 = 1u << 2,
  kBF16 = 1u << 3,
  kI64 = 1u << 4,
  kI32 = 1u << 5,
  kI16 = 1u << 6,
  kI8 = 1u << 7,
  kU8 = 1u << 8,
  kBool = 1u << 9,
};
constexpr unsigned kFloating = kF32 | kF64 | kF16 | kBF16;
constexpr unsigned kIntegral = kI64 | kI32 | kI16 | kI8 | kU8;  // no bool
constexpr unsigned kAllNoBool = kFloating | kIntegral;
constexpr unsigned kAll = kAllNoBool | kBool;
constexpr unsigned kIntegralAndBool = kIntegral | kBool;

// Bit of a ScalarType in the sets above; 0 for dtypes no set holds.
inline unsigned dtype_bit(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Float: return kF32;
    case c10::ScalarType::Double: return kF64;
    case c10::ScalarType::Half: return kF16;
    case c10::ScalarType::BFloat16: return kBF16;
    case c10::ScalarType::Long: return kI64;
    case c10::ScalarType::Int: return kI32;
    case c10::ScalarType::Short: return kI16;
    case c10::ScalarType::Char: return kI8;
    case c10::ScalarType::Byte: return kU8;
    case c10::ScalarType::Bool: return kBool;
    default: return 0;
  }
}

// torch's Python spelling (torch.float32 -> "float32"), used in messages.
inline const char* dtype_name(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(st);
  }
}

inline std::string dtype_set_names(unsigned set) {
  static const c10::ScalarType order[] = {
      c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half,
      c10::ScalarType::BFloat16, c10::ScalarType::Long, c10::ScalarType::Int,
      c10::ScalarType::Short, c10::ScalarType::Char, c10::ScalarType::Byte,
      c10::ScalarType::Bool};
  std::string s;
  for (auto st : order) {
    if (set & dtype_bit(st)) {
      if (!s.empty()) s += ", ";
      s += dtype_name(st);
    }
  }
  return s;
}

// "<backend>: <op>: dtype <dt> not supported on <device> (supported: ...)"
[[noreturn]] inline void fail_dtype(const char* op, c10::Device device,
                                    c10::ScalarType st, unsigned set) {
  TORCH_CHECK_TYPE(false, kBackend, ": ", op, ": dtype ", dtype_name(st),
                   " not supported on ", device.str(),
                   " (supported: ", dtype_set_names(set), ")");
}

// The dtype check of a kernel that dispatches later or not at all: raises the
// error above unless `st` is in Set.
template <unsigned Set>
inline void check_dtype(const char* op, c10::Device device, c10::ScalarType st) {
  if ((dtype_bit(st) & Set) == 0) fail_dtype(op, device, st, Set);
}

// Calls f(Tag<T>{}) with the C++ type of `st` if `st` is in Set, otherwise
// raises the dtype error above.
template <unsigned Set, class F>
inline void dispatch(const char* op, c10::Device device, c10::ScalarType st, F&& f) {
  switch (st) {
    case c10::ScalarType::Float:
      if constexpr ((Set & kF32) != 0) { f(Tag<float>{}); return; }
      break;
    case c10::ScalarType::Double:
      if constexpr ((Set & kF64) != 0) { f(Tag<double>{}); return; }
      break;
    case c10::ScalarType::Half:
      if constexpr ((Set & kF16) != 0) { f(Tag<c10::Half>{}); return; }
      break;
    case c10::ScalarType::BFloat16:
      if constexpr ((Set & kBF16) != 0) { f(Tag<c10::BFloat16>{}); return; }
      break;
    case c10::ScalarType::Long:
      if constexpr ((Set & kI64) != 0) { f(Tag<int64_t>{}); return; }
      break;
    case c10::ScalarType::Int:
      if constexpr ((Set & kI32) != 0) { f(Tag<int32_t>{}); return; }
      break;
    case c10::ScalarType::Short:
      if constexpr ((Set & kI16) != 0) { f(Tag<int16_t>{}); return; }
      break;
    case c10::ScalarType::Char:
      if constexpr ((Set & kI8) != 0) { f(Tag<int8_t>{}); return; }
      break;
    case c10::ScalarType::Byte:
      if constexpr ((Set & kU8) != 0) { f(Tag<uint8_t>{}); return; }
      break;
    case c10::ScalarType::Bool:
      if constexpr ((Set & kBool) != 0) { f(Tag<bool>{}); return; }
      break;
    default:
      break;
  }
  fail_dtype(op, device, st, Set);
}

template <class T>
constexpr bool is_reduced_float_v =
    std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;
template <class T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// Type in which pointwise math runs: float16/bfloat16 compute in float32 and
// round once when stored.
template <class T>
using opmath_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

// Type in which reductions accumulate: float for float32/16/bf16, double for
// float64, int64 for integers and bool (as torch's sum of ints is int64).
template <class T>
using acc_t = std::conditional_t<
    is_floating_v<T>, std::conditional_t<std::is_same_v<T, double>, double, float>,
    int64_t>;

// Value conversion between any two element types of the sets above. Conversion to bool is
// "!= 0" (NaN is true, as in torch); reduced floats go through float.
template <class To, class From>
inline To cvt(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_reduced_float_v<From>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From(0);
    }
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (is_reduced_float_v<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace FLSDK_BACKEND_NS::common
