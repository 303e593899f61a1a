// acme special functions (torch.special.*, i0, igamma, polygamma): Bessel and
// related functions, orthogonal polynomials, gamma-family functions.
// acme is a simulated chip whose math library is the host's: the scalar
// routines are the templated host helpers of ATen/native/Math.h (the same
// series and Chebyshev expansions torch's CPU kernels evaluate), applied
// element by element through acme's own pointwise drivers, so acme and the
// CPU agree to the last bit in float32 and float64.
// Integer inputs promote to the default float dtype, as in torch.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/native/Math.h>

#include <cmath>
#include <limits>

namespace acme::kernels {
using namespace acme::common;

namespace {

// The dtypes these kernels compute: the host helpers are written for
// float and double (torch's CPU kernels dispatch the same two).
constexpr unsigned kSpecial = kF32 | kF64;

// f(x) element-wise in the input's float dtype.
template <class F>
at::Tensor special_unary(const char* op, const at::Tensor& self, F fn) {
  return unary_kernel<kSpecial>(op, self, float_compute(self.scalar_type()), [fn](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [fn](M x) -> M { return fn(x); };
  });
}

// f(a, b) element-wise, a and b broadcast and promoted to a float dtype
// (wrapped Python scalars take part as in torch's binary float ops).
template <class F>
at::Tensor special_binary(const char* op, const at::Tensor& a, const at::Tensor& b, F fn) {
  const auto compute = float_compute(promote({&a, &b}));
  return binary_kernel<kSpecial>(op, a, b, compute, [fn](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [fn](M x, M y) -> M { return fn(x, y); };
  });
}

}  // namespace

// ---- modified Bessel functions of the first kind (torch.i0 / special.i0e ...)

at::Tensor k_i0(const at::Tensor& self) {
  return special_unary("i0", self, [](auto x) { return ::calc_i0(x); });
}

at::Tensor k_special_i0e(const at::Tensor& self) {
  return special_unary("special_i0e", self, [](auto x) { return ::calc_i0e(x); });
}

at::Tensor k_special_i1(const at::Tensor& self) {
  return special_unary("special_i1", self, [](auto x) { return ::calc_i1(x); });
}

at::Tensor k_special_i1e(const at::Tensor& self) {
  return special_unary("special_i1e", self, [](auto x) { return ::calc_i1e(x); });
}

at::Tensor k_special_modified_bessel_i0(const at::Tensor& self) {
  return special_unary("special_modified_bessel_i0", self,
                       [](auto x) { return ::modified_bessel_i0_forward(x); });
}

at::Tensor k_special_modified_bessel_i1(const at::Tensor& self) {
  return special_unary("special_modified_bessel_i1", self,
                       [](auto x) { return ::modified_bessel_i1_forward(x); });
}

at::Tensor k_special_modified_bessel_k0(const at::Tensor& self) {
  return special_unary("special_modified_bessel_k0", self,
                       [](auto x) { return ::modified_bessel_k0_forward(x); });
}

at::Tensor k_special_modified_bessel_k1(const at::Tensor& self) {
  return special_unary("special_modified_bessel_k1", self,
                       [](auto x) { return ::modified_bessel_k1_forward(x); });
}

at::Tensor k_special_scaled_modified_bessel_k0(const at::Tensor& x) {
  return special_unary("special_scaled_modified_bessel_k0", x,
                       [](auto v) { return ::scaled_modified_bessel_k0_forward(v); });
}

at::Tensor k_special_scaled_modified_bessel_k1(const at::Tensor& x) {
  return special_unary("special_scaled_modified_bessel_k1", x,
                       [](auto v) { return ::scaled_modified_bessel_k1_forward(v); });
}

// ---- Bessel functions of the first and second kind, Airy, spherical Bessel

at::Tensor k_special_bessel_j0(const at::Tensor& self) {
  return special_unary("special_bessel_j0", self,
                       [](auto x) { return ::bessel_j0_forward(x); });
}

at::Tensor k_special_bessel_j1(const at::Tensor& self) {
  return special_unary("special_bessel_j1", self,
                       [](auto x) { return ::bessel_j1_forward(x); });
}

at::Tensor k_special_bessel_y0(const at::Tensor& self) {
  return special_unary("special_bessel_y0", self,
                       [](auto x) { return ::bessel_y0_forward(x); });
}

at::Tensor k_special_bessel_y1(const at::Tensor& self) {
  return special_unary("special_bessel_y1", self,
                       [](auto x) { return ::bessel_y1_forward(x); });
}

at::Tensor k_special_airy_ai(const at::Tensor& x) {
  return special_unary("special_airy_ai", x, [](auto v) { return ::airy_ai_forward(v); });
}

at::Tensor k_special_spherical_bessel_j0(const at::Tensor& x) {
  return special_unary("special_spherical_bessel_j0", x,
                       [](auto v) { return ::spherical_bessel_j0_forward(v); });
}

// ---- error-function family and entropy

at::Tensor k_special_erfcx(const at::Tensor& self) {
  return special_unary("special_erfcx", self, [](auto x) { return ::calc_erfcx(x); });
}

at::Tensor k_special_ndtri(const at::Tensor& self) {
  return special_unary("special_ndtri", self, [](auto x) { return ::calc_ndtri(x); });
}

at::Tensor k_special_log_ndtr(const at::Tensor& self) {
  return special_unary("special_log_ndtr", self,
                       [](auto x) { return ::calc_log_ndtr(x); });
}

// entr(x) = -x log x for x > 0, 0 at 0, -inf for x < 0, NaN stays NaN.
at::Tensor k_special_entr(const at::Tensor& self) {
  return special_unary("special_entr", self, [](auto x) {
    using M = decltype(x);
    if (std::isnan(x)) return x;
    if (x > M(0)) return -x * std::log(x);
    if (x == M(0)) return M(0);
    return -std::numeric_limits<M>::infinity();
  });
}

// xlog1py(x, y) = x * log1p(y), 0 where x == 0 (unless y is NaN).
at::Tensor k_special_xlog1py(const at::Tensor& self, const at::Tensor& other) {
  return special_binary("special_xlog1py", self, other, [](auto x, auto y) {
    using M = decltype(x);
    if (std::isnan(y)) return y;
    if (x == M(0)) return M(0);
    return x * std::log1p(y);
  });
}

// ---- gamma family

// Hurwitz zeta(x, q).
at::Tensor k_special_zeta(const at::Tensor& self, const at::Tensor& other) {
  return special_binary("special_zeta", self, other,
                        [](auto x, auto q) { return ::zeta(x, q); });
}

// Regularized lower / upper incomplete gamma functions.
at::Tensor k_igamma(const at::Tensor& self, const at::Tensor& other) {
  return special_binary("igamma", self, other,
                        [](auto a, auto x) { return ::calc_igamma(a, x); });
}

at::Tensor k_igammac(const at::Tensor& self, const at::Tensor& other) {
  return special_binary("igammac", self, other,
                        [](auto a, auto x) { return ::calc_igammac(a, x); });
}

// n-th derivative of digamma. n = 0 and n = 1 use the dedicated digamma and
// trigamma routines (as torch does): the general series is slow and less
// accurate there.
at::Tensor k_polygamma(int64_t n, const at::Tensor& self) {
  FL_CHECK(n >= 0, "polygamma", "polygamma(n, x) does not support negative n (got ", n, ")");
  const int ni = static_cast<int>(n);
  return special_unary("polygamma", self, [ni](auto x) -> decltype(x) {
    if (ni == 0) return ::calc_digamma(x);
    if (ni == 1) return ::trigamma(x);
    return ::calc_polygamma(x, ni);
  });
}

// ---- orthogonal polynomials p_n(x); n is a tensor (or a wrapped scalar)
// whose values are truncated to integers, as in torch.

at::Tensor k_special_chebyshev_polynomial_t(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_chebyshev_polynomial_t", x, n, [](auto v, auto k) {
    return ::chebyshev_polynomial_t_forward(v, k);
  });
}

at::Tensor k_special_chebyshev_polynomial_u(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_chebyshev_polynomial_u", x, n, [](auto v, auto k) {
    return ::chebyshev_polynomial_u_forward(v, k);
  });
}

at::Tensor k_special_chebyshev_polynomial_v(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_chebyshev_polynomial_v", x, n, [](auto v, auto k) {
    return ::chebyshev_polynomial_v_forward(v, k);
  });
}

at::Tensor k_special_chebyshev_polynomial_w(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_chebyshev_polynomial_w", x, n, [](auto v, auto k) {
    return ::chebyshev_polynomial_w_forward(v, k);
  });
}

at::Tensor k_special_shifted_chebyshev_polynomial_t(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_shifted_chebyshev_polynomial_t", x, n, [](auto v, auto k) {
    return ::shifted_chebyshev_polynomial_t_forward(v, k);
  });
}

at::Tensor k_special_shifted_chebyshev_polynomial_u(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_shifted_chebyshev_polynomial_u", x, n, [](auto v, auto k) {
    return ::shifted_chebyshev_polynomial_u_forward(v, k);
  });
}

at::Tensor k_special_shifted_chebyshev_polynomial_v(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_shifted_chebyshev_polynomial_v", x, n, [](auto v, auto k) {
    return ::shifted_chebyshev_polynomial_v_forward(v, k);
  });
}

at::Tensor k_special_shifted_chebyshev_polynomial_w(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_shifted_chebyshev_polynomial_w", x, n, [](auto v, auto k) {
    return ::shifted_chebyshev_polynomial_w_forward(v, k);
  });
}

at::Tensor k_special_hermite_polynomial_h(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_hermite_polynomial_h", x, n, [](auto v, auto k) {
    return ::hermite_polynomial_h_forward(v, k);
  });
}

at::Tensor k_special_hermite_polynomial_he(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_hermite_polynomial_he", x, n, [](auto v, auto k) {
    return ::hermite_polynomial_he_forward(v, k);
  });
}

at::Tensor k_special_laguerre_polynomial_l(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_laguerre_polynomial_l", x, n, [](auto v, auto k) {
    return ::laguerre_polynomial_l_forward(v, k);
  });
}

at::Tensor k_special_legendre_polynomial_p(const at::Tensor& x, const at::Tensor& n) {
  return special_binary("special_legendre_polynomial_p", x, n, [](auto v, auto k) {
    return ::legendre_polynomial_p_forward(v, k);
  });
}

}  // namespace acme::kernels
