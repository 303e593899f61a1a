// acme unary pointwise kernels: math functions (integer inputs promote to the
// default float dtype, as in torch) and type-preserving ops (abs, neg, sign,
// rounding, bitwise_not).
#include "kernel_lib/common.h"
#include "math/vec_tensor.h"

#include "kernels.h"

#include <cmath>
#include <limits>

namespace acme::kernels {
using namespace acme::common;

namespace {

// Float-valued unary op: int/bool inputs compute in the default float dtype.
template <class F>
at::Tensor float_unary(const char* op, const at::Tensor& self, F fn) {
  return unary_kernel<kFloating>(op, self, float_compute(self.scalar_type()), [fn](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [fn](M x) -> M { return fn(x); };
  });
}

}  // namespace

namespace {
// float_unary with a vector-math fast path for float32.
template <class F>
at::Tensor float_unary(const char* op, const at::Tensor& self, F fn, vec::Unary v) {
  at::Tensor out = vec_unary_f32(self, v);
  return out.defined() ? out : float_unary(op, self, fn);
}
}  // namespace

at::Tensor k_exp(const at::Tensor& self) {
  return float_unary("exp", self, [](auto x) -> decltype(x) { return std::exp(x); }, vec::Unary::Exp);
}

at::Tensor k_exp2(const at::Tensor& self) {
  return float_unary("exp2", self, [](auto x) -> decltype(x) { return std::exp2(x); }, vec::Unary::Exp2);
}

at::Tensor k_expm1(const at::Tensor& self) {
  return float_unary("expm1", self, [](auto x) -> decltype(x) { return std::expm1(x); }, vec::Unary::Expm1);
}

at::Tensor k_log(const at::Tensor& self) {
  return float_unary("log", self, [](auto x) -> decltype(x) { return std::log(x); }, vec::Unary::Log);
}

at::Tensor k_log2(const at::Tensor& self) {
  return float_unary("log2", self, [](auto x) -> decltype(x) { return std::log2(x); }, vec::Unary::Log2);
}

at::Tensor k_log10(const at::Tensor& self) {
  return float_unary("log10", self, [](auto x) -> decltype(x) { return std::log10(x); }, vec::Unary::Log10);
}

at::Tensor k_log1p(const at::Tensor& self) {
  return float_unary("log1p", self, [](auto x) -> decltype(x) { return std::log1p(x); }, vec::Unary::Log1p);
}

at::Tensor k_sqrt(const at::Tensor& self) {
  return float_unary("sqrt", self, [](auto x) -> decltype(x) { return std::sqrt(x); }, vec::Unary::Sqrt);
}

at::Tensor k_rsqrt(const at::Tensor& self) {
  return float_unary("rsqrt", self, [](auto x) -> decltype(x) { return decltype(x)(1) / std::sqrt(x); }, vec::Unary::Rsqrt);
}

at::Tensor k_reciprocal(const at::Tensor& self) {
  return float_unary("reciprocal", self, [](auto x) -> decltype(x) { return decltype(x)(1) / x; }, vec::Unary::Reciprocal);
}

at::Tensor k_sin(const at::Tensor& self) {
  return float_unary("sin", self, [](auto x) -> decltype(x) { return std::sin(x); }, vec::Unary::Sin);
}

at::Tensor k_cos(const at::Tensor& self) {
  return float_unary("cos", self, [](auto x) -> decltype(x) { return std::cos(x); }, vec::Unary::Cos);
}

at::Tensor k_tan(const at::Tensor& self) {
  return float_unary("tan", self, [](auto x) -> decltype(x) { return std::tan(x); }, vec::Unary::Tan);
}

at::Tensor k_asin(const at::Tensor& self) {
  return float_unary("asin", self, [](auto x) -> decltype(x) { return std::asin(x); }, vec::Unary::Asin);
}

at::Tensor k_acos(const at::Tensor& self) {
  return float_unary("acos", self, [](auto x) -> decltype(x) { return std::acos(x); }, vec::Unary::Acos);
}

at::Tensor k_atan(const at::Tensor& self) {
  return float_unary("atan", self, [](auto x) -> decltype(x) { return std::atan(x); }, vec::Unary::Atan);
}

at::Tensor k_sinh(const at::Tensor& self) {
  return float_unary("sinh", self, [](auto x) -> decltype(x) { return std::sinh(x); }, vec::Unary::Sinh);
}

at::Tensor k_cosh(const at::Tensor& self) {
  return float_unary("cosh", self, [](auto x) -> decltype(x) { return std::cosh(x); }, vec::Unary::Cosh);
}

at::Tensor k_asinh(const at::Tensor& self) {
  return float_unary("asinh", self, [](auto x) -> decltype(x) { return std::asinh(x); }, vec::Unary::Asinh);
}

at::Tensor k_acosh(const at::Tensor& self) {
  return float_unary("acosh", self, [](auto x) -> decltype(x) { return std::acosh(x); }, vec::Unary::Acosh);
}

at::Tensor k_atanh(const at::Tensor& self) {
  return float_unary("atanh", self, [](auto x) -> decltype(x) { return std::atanh(x); }, vec::Unary::Atanh);
}

at::Tensor k_erf(const at::Tensor& self) {
  return float_unary("erf", self, [](auto x) -> decltype(x) { return std::erf(x); }, vec::Unary::Erf);
}

at::Tensor k_erfc(const at::Tensor& self) {
  return float_unary("erfc", self, [](auto x) -> decltype(x) { return std::erfc(x); }, vec::Unary::Erfc);
}

at::Tensor k_abs(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Abs); out.defined()) return out;
  return unary_kernel<kAllNoBool>("abs", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_unsigned_v<M>) return x;
      else return x < M(0) ? M(-x) : x;
    };
  });
}

at::Tensor k_neg(const at::Tensor& self) {
  FL_CHECK_T(self.scalar_type() != at::kBool, "neg", self,
               "negation, the `-` operator, on a bool tensor is not supported; "
               "use the `~` or `logical_not()` operator instead");
  if (auto out = vec_unary_f32(self, vec::Unary::Neg); out.defined()) return out;
  return unary_kernel<kAllNoBool>("neg", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return static_cast<M>(-x); };
  });
}

at::Tensor k_sign(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Sign); out.defined()) return out;
  return unary_kernel<kAll>("sign", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return x;
      else return static_cast<M>((M(0) < x) - (x < M(0)));
    };
  });
}

// Rounding ops are the identity on integers (torch returns a copy).

at::Tensor k_floor(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Floor); out.defined()) return out;
  return unary_kernel<kAllNoBool>("floor", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_integral_v<M>) return x;
      else return std::floor(x);
    };
  });
}

at::Tensor k_ceil(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Ceil); out.defined()) return out;
  return unary_kernel<kAllNoBool>("ceil", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_integral_v<M>) return x;
      else return std::ceil(x);
    };
  });
}

at::Tensor k_trunc(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Trunc); out.defined()) return out;
  return unary_kernel<kAllNoBool>("trunc", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_integral_v<M>) return x;
      else return std::trunc(x);
    };
  });
}

// half to even, as torch.round
at::Tensor k_round(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Round); out.defined()) return out;
  return unary_kernel<kAllNoBool>("round", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_integral_v<M>) return x;
      else return std::nearbyint(x);
    };
  });
}

at::Tensor k_frac(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Frac); out.defined()) return out;
  return unary_kernel<kFloating>("frac", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return x - std::trunc(x); };
  });
}

at::Tensor k_round_decimals(const at::Tensor& self, int64_t decimals) {
  FL_CHECK_T(c10::isFloatingType(self.scalar_type()) || decimals == 0, "round.decimals",
               self, "round with decimals is only implemented for floating point tensors");
  return unary_kernel<kFloating>("round.decimals", self, self.scalar_type(), [decimals](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    // torch scales by 10^|decimals| and divides (or multiplies) back.
    const M ten = static_cast<M>(std::pow(10.0, static_cast<double>(std::abs(decimals))));
    const bool neg = decimals < 0;
    return [ten, neg](M x) -> M {
      return neg ? std::nearbyint(x / ten) * ten : std::nearbyint(x * ten) / ten;
    };
  });
}

at::Tensor k_bitwise_not(const at::Tensor& self) {
  return unary_kernel<kIntegralAndBool>("bitwise_not", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return !x;
      else return static_cast<M>(~x);
    };
  });
}

// sgn is sign for real dtypes
at::Tensor k_sgn(const at::Tensor& self) {
  return unary_kernel<kAll>("sgn", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return x;
      else return static_cast<M>((M(0) < x) - (x < M(0)));
    };
  });
}

namespace {
// Inverse error function: a rational first guess refined by two Newton steps
// on erf(y) - x (erf and its derivative 2/sqrt(pi) exp(-y^2) are exact enough).
double erfinv_d(double x) {
  if (x <= -1.0) return x == -1.0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (x >= 1.0) return x == 1.0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(x)) return x;
  const double a = 0.147;  // Winitzki's approximation
  const double ln = std::log(1.0 - x * x);
  const double t = 2.0 / (M_PI * a) + ln / 2.0;
  double y = std::copysign(std::sqrt(std::sqrt(t * t - ln / a) - t), x);
  for (int i = 0; i < 3; ++i) {
    const double err = std::erf(y) - x;
    y -= err / (2.0 / std::sqrt(M_PI) * std::exp(-y * y));
  }
  return y;
}

// Digamma: recurrence up to x >= 6, then the asymptotic series; reflection
// for negative x.
double digamma_d(double x) {
  if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
  if (x < 0) {
    if (x == std::floor(x)) return std::numeric_limits<double>::quiet_NaN();
    return digamma_d(1.0 - x) - M_PI / std::tan(M_PI * x);
  }
  double r = 0;
  while (x < 6) {
    r -= 1 / x;
    x += 1;
  }
  const double f = 1 / (x * x);
  return r + std::log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}
}  // namespace

at::Tensor k_erfinv(const at::Tensor& self) {
  return float_unary("erfinv", self, [](auto x) -> decltype(x) {
    return static_cast<decltype(x)>(erfinv_d(static_cast<double>(x)));
  }, vec::Unary::Erfinv);
}

at::Tensor k_lgamma(const at::Tensor& self) {
  return float_unary("lgamma", self, [](auto x) -> decltype(x) { return std::lgamma(x); }, vec::Unary::Lgamma);
}

at::Tensor k_digamma(const at::Tensor& self) {
  return float_unary("digamma", self, [](auto x) -> decltype(x) {
    return static_cast<decltype(x)>(digamma_d(static_cast<double>(x)));
  });
}

at::Tensor k_sinc(const at::Tensor& self) {
  return float_unary("sinc", self, [](auto x) -> decltype(x) {
    using M = decltype(x);
    if (x == M(0)) return M(1);
    const M px = static_cast<M>(M_PI) * x;
    return std::sin(px) / px;
  });
}

at::Tensor k_deg2rad(const at::Tensor& self) {
  return float_unary("deg2rad", self, [](auto x) -> decltype(x) {
    return x * static_cast<decltype(x)>(M_PI / 180.0);
  });
}

at::Tensor k_rad2deg(const at::Tensor& self) {
  return float_unary("rad2deg", self, [](auto x) -> decltype(x) {
    return x * static_cast<decltype(x)>(180.0 / M_PI);
  });
}

at::Tensor k_logit(const at::Tensor& self, std::optional<double> eps) {
  return unary_kernel<kFloating>("logit", self, float_compute(self.scalar_type()), [eps](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const bool clamp = eps.has_value();
    const M lo = clamp ? static_cast<M>(*eps) : M(0), hi = M(1) - lo;
    return [=](M x) -> M {
      if (clamp) x = x < lo ? lo : (x > hi ? hi : x);
      return std::log(x / (M(1) - x));
    };
  });
}

namespace {
// Out of line on purpose: GCC 12 at -O3 crashes (ICE in extract_insn) when it
// vectorizes std::signbit on float inside the elementwise loop.
[[gnu::noinline]] bool signbit_of(double x) { return std::signbit(x); }
}  // namespace

at::Tensor k_signbit(const at::Tensor& self) {
  return unary_kernel<kAll, bool>("signbit", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> bool {
      // Not std::signbit: gcc 12 at -O3 crashes (ICE) vectorizing it. copysign
      // keeps the same meaning for -0.0 and NaNs with the sign bit set.
      if constexpr (std::is_floating_point_v<M>) return std::copysign(M(1), x) < M(0);
      else if constexpr (std::is_signed_v<M>) return x < 0;
      else return false;
    };
  });
}

// angle of a real number: pi for negative values, 0 otherwise, NaN stays NaN.
at::Tensor k_angle(const at::Tensor& self) {
  return float_unary("angle", self, [](auto x) -> decltype(x) {
    using M = decltype(x);
    if (std::isnan(x)) return x;
    return x < M(0) ? static_cast<M>(M_PI) : M(0);
  });
}

}  // namespace acme::kernels
