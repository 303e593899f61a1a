// acme comparison, logical and classification kernels; all produce bool.
#include "common/common.h"

#if __has_include("../generated/kernels.h")
#include "../generated/kernels.h"
#endif

#include <cmath>

namespace acme::kernels {
using namespace acme::common;

// Comparisons run in the promoted dtype of both operands (so int vs float
// compares as float) and write bool.
#define ACME_COMPARE(NAME, OPR)                                                            \
  at::Tensor k_##NAME##_Tensor(const at::Tensor& self, const at::Tensor& other) {          \
    return binary_kernel<kAll, bool>(#NAME ".Tensor", self, other, promote({&self, &other}), \
                                     [](auto tag) {                                        \
      using M = opmath_t<ACME_T(tag)>;                                                      \
      return [](M x, M y) -> bool { return x OPR y; };                                      \
    });                                                                                     \
  }                                                                                         \
  at::Tensor k_##NAME##_Scalar(const at::Tensor& self, const at::Scalar& other) {          \
    return unary_kernel<kAll, bool>(#NAME ".Scalar", self, promote({&self}, {&other}),      \
                                    [&other](auto tag) {                                   \
      using M = opmath_t<ACME_T(tag)>;                                                      \
      const M y = other.to<M>();                                                            \
      return [y](M x) -> bool { return x OPR y; };                                          \
    });                                                                                     \
  }
ACME_COMPARE(eq, ==)
ACME_COMPARE(ne, !=)
ACME_COMPARE(lt, <)
ACME_COMPARE(le, <=)
ACME_COMPARE(gt, >)
ACME_COMPARE(ge, >=)
#undef ACME_COMPARE

// Logical ops read any dtype as "!= 0" (the conversion to bool) and write bool.
#define ACME_LOGICAL(NAME, EXPR)                                                         \
  at::Tensor k_##NAME(const at::Tensor& self, const at::Tensor& other) {                 \
    return binary_kernel<kBool, bool>(#NAME, self, other, at::kBool, [](auto) {           \
      return [](bool x, bool y) -> bool { return EXPR; };                                 \
    });                                                                                   \
  }
ACME_LOGICAL(logical_and, x && y)
ACME_LOGICAL(logical_or, x || y)
ACME_LOGICAL(logical_xor, x != y)
#undef ACME_LOGICAL

at::Tensor k_logical_not(const at::Tensor& self) {
  return unary_kernel<kBool, bool>("logical_not", self, at::kBool, [](auto) {
    return [](bool x) -> bool { return !x; };
  });
}

// Classification: integers are never NaN/inf; they are still checked for
// support (any acme dtype) and produce all-false / all-true.
#define ACME_CLASSIFY(NAME, FLOAT_EXPR, INT_VALUE)                                      \
  at::Tensor k_##NAME(const at::Tensor& self) {                                         \
    return unary_kernel<kAll, bool>(#NAME, self, self.scalar_type(), [](auto tag) {      \
      using M = opmath_t<ACME_T(tag)>;                                                  \
      return [](M x) -> bool {                                                          \
        if constexpr (std::is_floating_point_v<M>) return FLOAT_EXPR;                  \
        else { (void)x; return INT_VALUE; }                                             \
      };                                                                                \
    });                                                                                 \
  }
ACME_CLASSIFY(isnan, std::isnan(x), false)
ACME_CLASSIFY(isinf, std::isinf(x), false)
ACME_CLASSIFY(isposinf, std::isinf(x) && x > M(0), false)
ACME_CLASSIFY(isneginf, std::isinf(x) && x < M(0), false)
ACME_CLASSIFY(isfinite, std::isfinite(x), true)
#undef ACME_CLASSIFY

}  // namespace acme::kernels
