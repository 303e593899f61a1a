// acme unary pointwise kernels: math functions (integer inputs promote to the
// default float dtype, as in torch) and type-preserving ops (abs, neg, sign,
// rounding, bitwise_not).
#include "common/common.h"

#if __has_include("../generated/kernels.h")
#include "../generated/kernels.h"
#endif

#include <cmath>

namespace acme::kernels {
using namespace acme::common;

namespace {

// Float-valued unary op: int/bool inputs compute in the default float dtype.
template <class F>
at::Tensor float_unary(const char* op, const at::Tensor& self, F fn) {
  return unary_kernel<kFloating>(op, self, float_compute(self.scalar_type()), [fn](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
    return [fn](M x) -> M { return fn(x); };
  });
}

}  // namespace

#define ACME_FLOAT_UNARY(NAME, EXPR)                                          \
  at::Tensor k_##NAME(const at::Tensor& self) {                               \
    return float_unary(#NAME, self, [](auto x) -> decltype(x) { return EXPR; }); \
  }

ACME_FLOAT_UNARY(exp, std::exp(x))
ACME_FLOAT_UNARY(exp2, std::exp2(x))
ACME_FLOAT_UNARY(expm1, std::expm1(x))
ACME_FLOAT_UNARY(log, std::log(x))
ACME_FLOAT_UNARY(log2, std::log2(x))
ACME_FLOAT_UNARY(log10, std::log10(x))
ACME_FLOAT_UNARY(log1p, std::log1p(x))
ACME_FLOAT_UNARY(sqrt, std::sqrt(x))
ACME_FLOAT_UNARY(rsqrt, decltype(x)(1) / std::sqrt(x))
ACME_FLOAT_UNARY(reciprocal, decltype(x)(1) / x)
ACME_FLOAT_UNARY(sin, std::sin(x))
ACME_FLOAT_UNARY(cos, std::cos(x))
ACME_FLOAT_UNARY(tan, std::tan(x))
ACME_FLOAT_UNARY(asin, std::asin(x))
ACME_FLOAT_UNARY(acos, std::acos(x))
ACME_FLOAT_UNARY(atan, std::atan(x))
ACME_FLOAT_UNARY(sinh, std::sinh(x))
ACME_FLOAT_UNARY(cosh, std::cosh(x))
ACME_FLOAT_UNARY(asinh, std::asinh(x))
ACME_FLOAT_UNARY(acosh, std::acosh(x))
ACME_FLOAT_UNARY(atanh, std::atanh(x))
ACME_FLOAT_UNARY(erf, std::erf(x))
ACME_FLOAT_UNARY(erfc, std::erfc(x))
#undef ACME_FLOAT_UNARY

at::Tensor k_abs(const at::Tensor& self) {
  return unary_kernel<kAllNoBool>("abs", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_unsigned_v<M>) return x;
      else return x < M(0) ? M(-x) : x;
    };
  });
}

at::Tensor k_neg(const at::Tensor& self) {
  ACME_CHECK_T(self.scalar_type() != at::kBool, "neg", self,
               "negation, the `-` operator, on a bool tensor is not supported; "
               "use the `~` or `logical_not()` operator instead");
  return unary_kernel<kAllNoBool>("neg", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
    return [](M x) -> M { return static_cast<M>(-x); };
  });
}

at::Tensor k_sign(const at::Tensor& self) {
  return unary_kernel<kAll>("sign", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return x;
      else return static_cast<M>((M(0) < x) - (x < M(0)));
    };
  });
}

// Rounding ops are the identity on integers (torch returns a copy).
#define ACME_ROUNDING(NAME, EXPR)                                                 \
  at::Tensor k_##NAME(const at::Tensor& self) {                                   \
    return unary_kernel<kAllNoBool>(#NAME, self, self.scalar_type(), [](auto tag) { \
      using M = opmath_t<ACME_T(tag)>;                                            \
      return [](M x) -> M {                                                       \
        if constexpr (std::is_integral_v<M>) return x;                            \
        else return EXPR;                                                         \
      };                                                                          \
    });                                                                           \
  }

ACME_ROUNDING(floor, std::floor(x))
ACME_ROUNDING(ceil, std::ceil(x))
ACME_ROUNDING(trunc, std::trunc(x))
ACME_ROUNDING(round, std::nearbyint(x))  // half to even, as torch.round
#undef ACME_ROUNDING

at::Tensor k_frac(const at::Tensor& self) {
  return unary_kernel<kFloating>("frac", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
    return [](M x) -> M { return x - std::trunc(x); };
  });
}

at::Tensor k_round_decimals(const at::Tensor& self, int64_t decimals) {
  ACME_CHECK_T(c10::isFloatingType(self.scalar_type()) || decimals == 0, "round.decimals",
               self, "round with decimals is only implemented for floating point tensors");
  return unary_kernel<kFloating>("round.decimals", self, self.scalar_type(), [decimals](auto tag) {
    using M = opmath_t<ACME_T(tag)>;
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
    using M = opmath_t<ACME_T(tag)>;
    return [](M x) -> M {
      if constexpr (std::is_same_v<M, bool>) return !x;
      else return static_cast<M>(~x);
    };
  });
}

}  // namespace acme::kernels
