// acme binary pointwise kernels: arithmetic, division with rounding modes,
// pow, min/max, modulo, bitwise. Inputs broadcast and promote as in torch;
// CPU 0-dim tensors (wrapped Python scalars) are read on the host.
#include "kernel_lib/common.h"
#include "math/vec_tensor.h"

#include "kernels.h"

#include <cmath>
#include <limits>

namespace acme::kernels {
using namespace acme::common;

namespace {

void check_alpha(const char* op, at::ScalarType compute, const at::Scalar& alpha) {
  if (c10::isIntegralType(compute, /*includeBool=*/true)) {
    FL_CHECK(!alpha.isFloatingPoint(), op,
               "for integral input tensors, argument alpha must not be a floating point "
               "number (dtype ", dtype_name(compute), ")");
  }
  if (compute == at::kBool) {
    FL_CHECK(alpha.isBoolean() || alpha.isIntegral(true), op,
               "boolean alpha only supported for boolean results");
  }
}

// Python-style floor division of floats (result rounded like Python's //):
// computed from fmod so that e.g. 0.3 // 0.1 == 2 rather than 3.
template <class M>
M floor_div_float(M a, M b) {
  if (b == M(0)) return a / b;
  M mod = std::fmod(a, b);
  M div = (a - mod) / b;
  if (mod != M(0) && ((b < M(0)) != (mod < M(0)))) div -= M(1);
  if (div == M(0)) return std::copysign(M(0), a / b);
  M fl = std::floor(div);
  if (div - fl > M(0.5)) fl += M(1);
  return fl;
}

template <class M>
M floor_div_int(M a, M b) {
  M q = a / b;
  if constexpr (std::is_signed_v<M>) {
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  }
  return q;
}

// x modulo y with the sign of y (Python's %, torch.remainder).
template <class M>
M python_mod(M x, M y) {
  if constexpr (std::is_integral_v<M>) {
    M r = static_cast<M>(x % y);
    if constexpr (std::is_signed_v<M>) {
      if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<M>(r + y);
    }
    return r;
  } else {
    M r = std::fmod(x, y);
    if (r != M(0) && ((r < M(0)) != (y < M(0)))) r += y;
    return r;
  }
}

// x modulo y with the sign of x (C's fmod, torch.fmod).
template <class M>
M c_mod(M x, M y) {
  if constexpr (std::is_integral_v<M>) return static_cast<M>(x % y);
  else return std::fmod(x, y);
}

// An integer division or modulo by a zero element raises, as on PyTorch's CPU.
// The divisor is data: the check runs in the device part (inside the element
// function) and is reported at the next synchronization.
template <class M>
void check_int_divisor(const char* op, M y, const char* what) {
  if constexpr (std::is_integral_v<M>)
    FL_CHECK(y != 0, op, "ZeroDivisionError (integer ", what, " by zero)");
}

// A binary op over the non-bool dtypes that divides by `other` (`what`: division
// or modulo): fn(x, y) computes an element after the divisor check.
template <class Fn>
at::Tensor dividing_kernel(const char* op, const char* what, const at::Tensor& self, const at::Tensor& other,
                           Fn fn) {
  return binary_kernel<kAllNoBool>(op, self, other, promote({&self, &other}), [op, what, fn](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [op, what, fn](M x, M y) -> M {
      check_int_divisor(op, y, what);
      return fn(x, y);
    };
  });
}

// fmod / remainder by a Scalar: fn(x, y) per element; the divisor is known on
// the host, so an integer zero raises there.
template <class Fn>
at::Tensor modulo_by_scalar(const char* op, const at::Tensor& self, const at::Scalar& other, Fn fn) {
  const auto compute = promote({&self}, {&other});
  if (c10::isIntegralType(compute, true))
    FL_CHECK(other.toLong() != 0, op, "ZeroDivisionError (integer modulo by zero)");
  return unary_kernel<kAllNoBool>(op, self, compute, [&other, fn](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y, fn](M x) -> M { return fn(x, y); };
  });
}

template <class M>
M int_pow(M base, M exp) {
  if constexpr (std::is_signed_v<M>) {
    if (exp < 0) {
      // torch's rule for integer tensors raised to negative integer powers
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  M result = 1;
  while (exp) {
    if (exp & 1) result = static_cast<M>(result * base);
    exp >>= 1;
    base = static_cast<M>(base * base);
  }
  return result;
}

template <class M>
M float_pow(M x, M e) {
  return std::pow(x, e);
}

}  // namespace

// Element functors shared by a functional kernel and its in-place kernel (the
// in-place one writes self directly when the call is plain, see pointwise.h).
namespace {

auto add_body(const at::Scalar& alpha) {
  return [&alpha](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M al = alpha.to<M>();
    if constexpr (std::is_same_v<M, bool>) {
      return [al](M x, M y) -> M { return x || (al && y); };
    } else {
      return [al](M x, M y) -> M { return x + al * y; };
    }
  };
}

auto sub_body(const at::Scalar& alpha) {
  return [&alpha](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M al = alpha.to<M>();
    return [al](M x, M y) -> M { return x - al * y; };
  };
}

auto mul_body() {
  return [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if constexpr (std::is_same_v<M, bool>) return x && y;
      else return x * y;
    };
  };
}

auto div_body() {
  return [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return x / y; };
  };
}

// float32 `self op= number` on the vector units (vec::Unary::MulScalar/AddScalar):
// what optimizers call per parameter (buf.mul_(momentum), p.mul_(1 - lr * wd)).
// The plain in-place loop is compiled for SSE2 only. Same IEEE operation, same bits.
// False when it does not apply; the generic in-place path then runs. Contiguous,
// as the generic path's inplace_plain asks; vec_unary_f32_inplace checks the dtype.
bool number_inplace_f32(at::Tensor& self, at::ScalarType compute, vec::Unary v, float value) {
  return compute == at::kFloat && self.is_contiguous() && vec_unary_f32_inplace(self, v, value);
}

// A wrapped Python number's value in the compute dtype, as binary_inplace binds it.
float wrapped_number_f32(const char* op, const at::Tensor& other) {
  return *static_cast<const float*>(cast(op, other, at::kFloat).data_ptr());
}

void check_sub(const char* op, at::ScalarType a, at::ScalarType b) {
  FL_CHECK(a != at::kBool && b != at::kBool, op,
             "subtraction, the `-` operator, with a bool tensor is not supported. "
             "If you are trying to invert a mask, use the `~` or `logical_not()` operator "
             "instead.");
}

}  // namespace

at::Tensor k_add_Tensor(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  const char* op = "add.Tensor";
  const auto compute = promote({&self, &other});
  check_alpha(op, compute, alpha);
  return binary_kernel<kAll>(op, self, other, compute, add_body(alpha));
}

bool k_add__Tensor(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  const char* op = "add_.Tensor";
  const auto compute = promote({&self, &other});
  check_alpha(op, compute, alpha);
  if (compute == at::kFloat && is_cpu_scalar(other) &&
      number_inplace_f32(self, compute, vec::Unary::AddScalar,
                         alpha.to<float>() * wrapped_number_f32(op, other)))
    return true;
  return binary_inplace<kAll>(op, self, other, compute, add_body(alpha));
}

at::Tensor k_sub_Tensor(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  const char* op = "sub.Tensor";
  const auto compute = promote({&self, &other});
  check_sub(op, self.scalar_type(), other.scalar_type());
  check_alpha(op, compute, alpha);
  return binary_kernel<kAllNoBool>(op, self, other, compute, sub_body(alpha));
}

bool k_sub__Tensor(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  const char* op = "sub_.Tensor";
  const auto compute = promote({&self, &other});
  check_sub(op, self.scalar_type(), other.scalar_type());
  check_alpha(op, compute, alpha);
  return binary_inplace<kAllNoBool>(op, self, other, compute, sub_body(alpha));
}

at::Tensor k_mul_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll>("mul.Tensor", self, other, promote({&self, &other}), mul_body());
}

bool k_mul__Tensor(at::Tensor& self, const at::Tensor& other) {
  const char* op = "mul_.Tensor";
  const auto compute = promote({&self, &other});
  if (compute == at::kFloat && is_cpu_scalar(other) &&
      number_inplace_f32(self, compute, vec::Unary::MulScalar, wrapped_number_f32(op, other)))
    return true;
  return binary_inplace<kAll>(op, self, other, compute, mul_body());
}

at::Tensor k_div_Tensor(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = vec_binary_f32(self, other, vec::Binary::Div); out.defined()) return out;
  // true division: integers promote to the default float dtype
  const auto compute = float_compute(promote({&self, &other}));
  return binary_kernel<kFloating>("div.Tensor", self, other, compute, div_body());
}

bool k_div__Tensor(at::Tensor& self, const at::Tensor& other) {
  const auto compute = float_compute(promote({&self, &other}));
  return binary_inplace<kFloating>("div_.Tensor", self, other, compute, div_body());
}

at::Tensor k_div_Tensor_mode(const at::Tensor& self, const at::Tensor& other,
                             std::optional<c10::string_view> rounding_mode) {
  const char* op = "div.Tensor_mode";
  if (!rounding_mode.has_value()) return k_div_Tensor(self, other);
  const bool trunc = *rounding_mode == "trunc";
  FL_CHECK(trunc || *rounding_mode == "floor", op,
             "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
             std::string(*rounding_mode), "'");
  return dividing_kernel(op, "division", self, other, [trunc](auto x, auto y) {
    using M = decltype(x);
    if constexpr (std::is_integral_v<M>) return trunc ? static_cast<M>(x / y) : floor_div_int<M>(x, y);
    else return trunc ? std::trunc(x / y) : floor_div_float<M>(x, y);
  });
}

at::Tensor k_pow_Tensor_Scalar(const at::Tensor& self, const at::Scalar& exponent) {
  const char* op = "pow.Tensor_Scalar";
  const auto compute = promote({&self}, {&exponent});
  if (c10::isIntegralType(compute, true) && exponent.isIntegral(false)) {
    FL_CHECK(exponent.toLong() >= 0, op,
               "Integers to negative integer powers are not allowed.");
  }
  if (compute == at::kFloat && exponent.isFloatingPoint()) {
    // a general float exponent: the vector pow (the exact paths below are kept
    // for 2, 0.5 and -1, and integer exponents stay std::pow)
    const double e = exponent.toDouble();
    if (e != std::nearbyint(e) && e != 0.5)
      if (auto out = vec_unary_f32(self, vec::Unary::PowScalar, static_cast<float>(e)); out.defined())
        return out;
  }
  return unary_kernel<kAllNoBool>(op, self, compute, [&exponent](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M e = exponent.to<M>();
    if constexpr (std::is_integral_v<M>) {
      return [e](M x) -> M { return int_pow<M>(x, e); };
    } else {
      // exact and fast paths for the exponents optimizers and norms use
      const int mode = e == M(2) ? 1 : e == M(0.5) ? 2 : e == M(-1) ? 3 : 0;
      return [e, mode](M x) -> M {
        switch (mode) {
          case 1: return x * x;
          case 2: return std::sqrt(x);
          case 3: return M(1) / x;
          default: return float_pow<M>(x, e);
        }
      };
    }
  });
}

at::Tensor k_pow_Tensor_Tensor(const at::Tensor& self, const at::Tensor& exponent) {
  return binary_kernel<kAllNoBool>("pow.Tensor_Tensor", self, exponent,
                                   promote({&self, &exponent}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M e) -> M {
      if constexpr (std::is_integral_v<M>) return int_pow<M>(x, e);
      else return float_pow<M>(x, e);
    };
  });
}

at::Tensor k_pow_Scalar(const at::Scalar& self, const at::Tensor& exponent) {
  const char* op = "pow.Scalar";
  const auto compute = promote({&exponent}, {&self});
  return unary_kernel<kAllNoBool>(op, exponent, compute, [&self](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M b = self.to<M>();
    return [b](M e) -> M {
      if constexpr (std::is_integral_v<M>) return int_pow<M>(b, e);
      else return float_pow<M>(b, e);
    };
  });
}

// maximum/minimum propagate NaN (unlike fmax/fmin).
at::Tensor k_maximum(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = vec_binary_f32(self, other, vec::Binary::Maximum); out.defined()) return out;
  return binary_kernel<kAll>("maximum", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<M>::quiet_NaN();
      }
      return x > y ? x : y;
    };
  });
}

at::Tensor k_minimum(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = vec_binary_f32(self, other, vec::Binary::Minimum); out.defined()) return out;
  return binary_kernel<kAll>("minimum", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<M>::quiet_NaN();
      }
      return x < y ? x : y;
    };
  });
}

at::Tensor k_fmod_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return dividing_kernel("fmod.Tensor", "modulo", self, other, [](auto x, auto y) { return c_mod(x, y); });
}

at::Tensor k_remainder_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return dividing_kernel("remainder.Tensor", "modulo", self, other,
                         [](auto x, auto y) { return python_mod(x, y); });
}

at::Tensor k_atan2(const at::Tensor& self, const at::Tensor& other) {
  if (auto out = vec_binary_f32(self, other, vec::Binary::Atan2); out.defined()) return out;
  const auto compute = float_compute(promote({&self, &other}));
  return binary_kernel<kFloating>("atan2", self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M y, M x) -> M { return std::atan2(y, x); };
  });
}

at::Tensor k_bitwise_and_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegralAndBool>("bitwise_and.Tensor", self, other,
                                         promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return static_cast<M>(x & y); };
  });
}

at::Tensor k_bitwise_or_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegralAndBool>("bitwise_or.Tensor", self, other,
                                         promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return static_cast<M>(x | y); };
  });
}

at::Tensor k_bitwise_xor_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegralAndBool>("bitwise_xor.Tensor", self, other,
                                         promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return static_cast<M>(x ^ y); };
  });
}

// fmax/fmin ignore NaN unless both are NaN.
at::Tensor k_fmax(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll>("fmax", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if constexpr (std::is_floating_point_v<M>) return std::fmax(x, y);
      else return x > y ? x : y;
    };
  });
}

at::Tensor k_fmin(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll>("fmin", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if constexpr (std::is_floating_point_v<M>) return std::fmin(x, y);
      else return x < y ? x : y;
    };
  });
}

at::Tensor k_hypot(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kFloating>("hypot", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return std::hypot(x, y); };
  });
}

at::Tensor k_copysign_Tensor(const at::Tensor& self, const at::Tensor& other) {
  const auto compute = float_compute(promote({&self, &other}));
  return binary_kernel<kFloating>("copysign.Tensor", self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return std::copysign(x, y); };
  });
}

at::Tensor k_floor_divide(const at::Tensor& self, const at::Tensor& other) {
  return k_div_Tensor_mode(self, other, c10::string_view("floor"));
}

at::Tensor k_bitwise_left_shift_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegral>("bitwise_left_shift.Tensor", self, other, promote({&self, &other}),
                                  [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    // shifting by >= the bit width (or a negative amount) gives 0, as torch
    return [](M x, M y) -> M {
      using U = std::make_unsigned_t<M>;
      if (y < 0 || y >= static_cast<M>(sizeof(M) * 8)) return 0;
      return static_cast<M>(static_cast<U>(x) << y);
    };
  });
}

at::Tensor k_bitwise_right_shift_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegral>("bitwise_right_shift.Tensor", self, other, promote({&self, &other}),
                                  [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    // arithmetic shift; over-wide shifts give the sign fill
    return [](M x, M y) -> M {
      if (y < 0 || y >= static_cast<M>(sizeof(M) * 8)) return x < 0 ? M(-1) : M(0);
      return static_cast<M>(x >> y);
    };
  });
}

at::Tensor k_xlogy_Tensor(const at::Tensor& self, const at::Tensor& other) {
  const auto compute = float_compute(promote({&self, &other}));
  return binary_kernel<kFloating>("xlogy.Tensor", self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if (std::isnan(y)) return y;
      if (x == M(0)) return M(0);
      return x * std::log(y);
    };
  });
}

at::Tensor k_logaddexp(const at::Tensor& self, const at::Tensor& other) {
  const auto compute = promote({&self, &other});  // integers unsupported, as in torch
  return binary_kernel<kFloating>("logaddexp", self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if (std::isinf(x) && x == y) return x;  // both +inf or both -inf
      const M m = std::max(x, y);
      return m + std::log1p(std::exp(-std::abs(x - y)));
    };
  });
}

at::Tensor k_logaddexp2(const at::Tensor& self, const at::Tensor& other) {
  const auto compute = promote({&self, &other});  // integers unsupported, as in torch
  return binary_kernel<kFloating>("logaddexp2", self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      if (std::isinf(x) && x == y) return x;
      const M m = std::max(x, y);
      return m + std::log1p(std::exp2(-std::abs(x - y))) / static_cast<M>(M_LN2);
    };
  });
}

at::Tensor k_nextafter(const at::Tensor& self, const at::Tensor& other) {
  const char* op = "nextafter";
  const auto compute = promote({&self, &other});
  FL_CHECK(compute == at::kFloat || compute == at::kDouble, op,
             "nextafter is only implemented for float32 and float64 on acme, got ", dtype_name(compute));
  return binary_kernel<kF32 | kF64>(op, self, other, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return std::nextafter(x, y); };
  });
}

at::Tensor k_heaviside(const at::Tensor& self, const at::Tensor& values) {
  const char* op = "heaviside";
  FL_CHECK(self.scalar_type() == values.scalar_type(), op,
             "heaviside is not yet implemented for tensors with different dtypes");
  return binary_kernel<kAll>(op, self, values, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M v) -> M {
      if constexpr (std::is_same_v<M, bool>) return x ? true : v;
      else return x == M(0) ? v : static_cast<M>(x > M(0) ? 1 : 0);
    };
  });
}

namespace {
template <class M>
M gcd_value(M a, M b) {
  if constexpr (std::is_signed_v<M>) {
    a = a < 0 ? static_cast<M>(-a) : a;
    b = b < 0 ? static_cast<M>(-b) : b;
  }
  while (b != 0) {
    const M t = static_cast<M>(a % b);
    a = b;
    b = t;
  }
  return a;
}
}  // namespace

at::Tensor k_gcd(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegral>("gcd", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return gcd_value<M>(x, y); };
  });
}

at::Tensor k_lcm(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kIntegral>("lcm", self, other, promote({&self, &other}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M {
      const M g = gcd_value<M>(x, y);
      if (g == 0) return 0;
      M r = static_cast<M>((x / g) * y);
      if constexpr (std::is_signed_v<M>) r = r < 0 ? static_cast<M>(-r) : r;
      return r;
    };
  });
}

at::Tensor k_rsub_Tensor(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  // rsub(self, other, alpha) = other - alpha * self
  return k_sub_Tensor(other, self, alpha);
}

// ---- Scalar overloads: the Scalar takes part in promotion as a wrapped number ----

namespace {

auto add_scalar_body(const at::Scalar& other, const at::Scalar& alpha) {
  return [&other, &alpha](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    if constexpr (std::is_same_v<M, bool>) {
      const bool add = alpha.to<bool>() && other.to<bool>();
      return [add](M x) -> M { return x || add; };
    } else {
      const M v = static_cast<M>(alpha.to<M>() * other.to<M>());
      return [v](M x) -> M { return x + v; };
    }
  };
}

auto mul_scalar_body(const at::Scalar& other) {
  return [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M v = other.to<M>();
    return [v](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return x && v;
      else return x * v;
    };
  };
}

auto div_scalar_body(const at::Scalar& other) {
  return [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M v = other.to<M>();
    return [v](M x) -> M { return x / v; };
  };
}

}  // namespace

at::Tensor k_add_Scalar(const at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  const char* op = "add.Scalar";
  const auto compute = promote({&self}, {&other});
  check_alpha(op, compute, alpha);
  return unary_kernel<kAll>(op, self, compute, add_scalar_body(other, alpha));
}

bool k_add__Scalar(at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  const char* op = "add_.Scalar";
  const auto compute = promote({&self}, {&other});
  check_alpha(op, compute, alpha);
  if (compute == at::kFloat &&
      number_inplace_f32(self, compute, vec::Unary::AddScalar, alpha.to<float>() * other.to<float>()))
    return true;
  return unary_inplace<kAll>(op, self, compute, add_scalar_body(other, alpha));
}

at::Tensor k_sub_Scalar(const at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  const char* op = "sub.Scalar";
  FL_CHECK(self.scalar_type() != at::kBool && !other.isBoolean(), op,
             "subtraction, the `-` operator, with a bool tensor is not supported. "
             "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  const auto compute = promote({&self}, {&other});
  check_alpha(op, compute, alpha);
  return unary_kernel<kAllNoBool>(op, self, compute, [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M v = static_cast<M>(alpha.to<M>() * other.to<M>());
    return [v](M x) -> M { return x - v; };
  });
}

at::Tensor k_mul_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll>("mul.Scalar", self, promote({&self}, {&other}), mul_scalar_body(other));
}

bool k_mul__Scalar(at::Tensor& self, const at::Scalar& other) {
  const auto compute = promote({&self}, {&other});
  if (number_inplace_f32(self, compute, vec::Unary::MulScalar, other.to<float>())) return true;
  return unary_inplace<kAll>("mul_.Scalar", self, compute, mul_scalar_body(other));
}

at::Tensor k_div_Scalar(const at::Tensor& self, const at::Scalar& other) {
  const auto compute = float_compute(promote({&self}, {&other}));
  return unary_kernel<kFloating>("div.Scalar", self, compute, div_scalar_body(other));
}

bool k_div__Scalar(at::Tensor& self, const at::Scalar& other) {
  const auto compute = float_compute(promote({&self}, {&other}));
  return unary_inplace<kFloating>("div_.Scalar", self, compute, div_scalar_body(other));
}

at::Tensor k_remainder_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return modulo_by_scalar("remainder.Scalar", self, other, [](auto x, auto y) { return python_mod(x, y); });
}

at::Tensor k_fmod_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return modulo_by_scalar("fmod.Scalar", self, other, [](auto x, auto y) { return c_mod(x, y); });
}

}  // namespace acme::kernels
