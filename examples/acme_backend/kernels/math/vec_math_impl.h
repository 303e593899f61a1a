// Body of acme's vector math (vec_math.h), compiled once per instruction set
// by vec_math_<isa>.cpp, which define ACME_VEC_SUFFIX and CPU_CAPABILITY before
// including this. ATen's vector header stays confined to those two files.
#pragma once

#ifndef ACME_VEC_SUFFIX
#error "include vec_math_impl.h only from vec_math_<isa>.cpp"
#endif

// cmake/vendor.cmake sets CPU_CAPABILITY (ATen's name for the instruction set
// its vector classes are built for) with the matching -m flags on x86-64;
// elsewhere the functions are built for the generic vector class and never
// chosen (vec::host_isa() is 0).
#ifndef CPU_CAPABILITY
#define CPU_CAPABILITY DEFAULT
#endif
#include <ATen/cpu/vec/vec.h>

#include "vec_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

#define ACME_VEC_CAT2(a, b) a##b
#define ACME_VEC_CAT(a, b) ACME_VEC_CAT2(a, b)
#define ACME_VEC_NAME(base) ACME_VEC_CAT(base, ACME_VEC_SUFFIX)

namespace acme::vec {
namespace {

using V = at::vec::Vectorized<float>;

// Whole vectors, then the tail through the same vector code (partial load and
// store), so each element's result is independent of where the loop starts.
template <class F>
inline void loop1(const float* in, float* out, int64_t n, F f) {
  constexpr int64_t w = V::size();
  int64_t i = 0;
  for (; i + w <= n; i += w) f(V::loadu(in + i)).store(out + i);
  if (i < n) f(V::loadu(in + i, static_cast<int>(n - i))).store(out + i, static_cast<int>(n - i));
}

template <class F>
inline void loop2(const float* a, const float* b, float* out, int64_t n, F f) {
  constexpr int64_t w = V::size();
  int64_t i = 0;
  for (; i + w <= n; i += w) f(V::loadu(a + i), V::loadu(b + i)).store(out + i);
  if (i < n) {
    const int r = static_cast<int>(n - i);
    f(V::loadu(a + i, r), V::loadu(b + i, r)).store(out + i, r);
  }
}

constexpr float kSqrt1_2 = 0.70710678118654752440f;    // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f; // 1/sqrt(2*pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f; // sqrt(2/pi)
constexpr float kKappa = 0.044715f;

// Sleef's 1-ULP exp. Not ATen's faster exp_u20: it returns inf for NaN and
// flushes results below FLT_MIN to 0 (found by tests/test_compute_units.py).
inline V exp(V x) { return x.exp(); }

// tanh within 3.5 ULP: Sleef's 1-ULP tanh costs over twice as much.
inline V tanh(V x) {
#if defined(CPU_CAPABILITY_AVX512)
  return V(Sleef_tanhf16_u35(x));
#elif defined(CPU_CAPABILITY_AVX2)
  return V(Sleef_tanhf8_u35(x));
#else
  return x.tanh();
#endif
}

// Sleef's 3.5-ULP versions where they exist, for the same reason as tanh
// (each about twice as fast as the 1-ULP one); elsewhere ATen's.
#if defined(CPU_CAPABILITY_AVX512)
#define ACME_SLEEF_U35(fn, x) V(Sleef_##fn##f16_u35(x))
#elif defined(CPU_CAPABILITY_AVX2)
#define ACME_SLEEF_U35(fn, x) V(Sleef_##fn##f8_u35(x))
#endif
#ifdef ACME_SLEEF_U35
inline V log_(V x) { return ACME_SLEEF_U35(log, x); }
inline V log2_(V x) { return ACME_SLEEF_U35(log2, x); }
inline V tan_(V x) { return ACME_SLEEF_U35(tan, x); }
inline V atan_(V x) { return ACME_SLEEF_U35(atan, x); }
inline V asin_(V x) { return ACME_SLEEF_U35(asin, x); }
inline V acos_(V x) { return ACME_SLEEF_U35(acos, x); }
#else
inline V log_(V x) { return x.log(); }
inline V log2_(V x) { return x.log2(); }
inline V tan_(V x) { return x.tan(); }
inline V atan_(V x) { return x.atan(); }
inline V asin_(V x) { return x.asin(); }
inline V acos_(V x) { return x.acos(); }
#endif

inline V sigmoid(V x) { return (V(1.f) + exp(x.neg())).reciprocal(); }

// Inverse error function in float32 without a scalar loop: ATen's vector erfinv
// maps a scalar rational guess plus two Newton steps (erf and exp per step) over
// the lanes, ~25x the cost of CPU's (MKL's) vector erfinv. This is M. Giles'
// single-precision approximation ("Approximating the erfinv function", GPU
// Computing Gems, 2011): a polynomial in w = -log(1 - x^2), in two ranges,
// relative error below 4e-7 (~3 ULP) over (-1, 1). Edges as torch: +-1 give
// +-inf, |x| > 1 and NaN give NaN, -0 stays -0.
inline V erfinv_(V x) {
  const V one(1.f);
  const V w = ((one - x) * (one + x)).log().neg();
  // |x| < 0.99966 (w < 5): polynomial in w - 2.5
  const V a = w - V(2.5f);
  V p = V(2.81022636e-08f);
  for (float c : {3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f, 0.00021858087f,
                  -0.00125372503f, -0.00417768164f, 0.246640727f, 1.50140941f})
    p = at::vec::fmadd(p, a, V(c));
  // the tails: polynomial in sqrt(w) - 3
  const V b = w.sqrt() - V(3.f);
  V q = V(-0.000200214257f);
  for (float c : {0.000100950558f, 0.00134934322f, -0.00367342844f, 0.00573950773f,
                  -0.0076224613f, 0.00943887047f, 1.00167406f, 2.83297682f})
    q = at::vec::fmadd(q, b, V(c));
  V r = V::blendv(p, q, w >= V(5.f)) * x;
  const V ax = x.abs();
  r = V::blendv(r, V(std::numeric_limits<float>::infinity()) * x, ax == one);  // +-1: +-inf
  return V::blendv(r, V(std::numeric_limits<float>::quiet_NaN()), ax > one);    // NaN stays NaN via log
}

inline V softplus(V x) { return exp(x).log1p(); }

template <size_t N>
inline V horner(V x, const float (&c)[N]) {  // c[0] + c[1] x + ... + c[N-1] x^(N-1)
  V p(c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) p = at::vec::fmadd(p, x, V(c[i]));
  return p;
}

// erfc within 5 ULP (4.6 measured over every 7th float in [-11, 11]; the
// polynomial's own error is 0.2 ULP, the rest is float32 rounding), subnormal
// results included; the tolerance of the u35 functions above. ATen's vector erfc
// is Sleef's 1.5-ULP one, computed in double-float arithmetic: 3.6 ns per element,
// 1.3x CPU's (MKL) time; this one takes a third of it. Two ranges,
// coefficients from scripts/fit_erfc.py:
//   |x| < 0.5   1 - x P(x^2)                                  (P ~ erf(x) / x)
//   |x| >= 0.5  exp(-a^2) H(1 / (1 + a)), a = |x|, and 2 - that for x < 0
// a^2 is split exactly into hi + lo (fma) and exp(-lo) taken as 1 - lo: one
// rounding of a^2 would cost up to 50 ULP near a = 10, where exp(-a^2) magnifies it.
constexpr float kErfOverX[] = {1.1283791065216064f, -0.37611863017082214f, 0.11267992109060287f,
                               -0.025811094790697098f, 0.0028299870900809765f};
constexpr float kErfcScaled[] = {2.7774437967309495e-06f, 0.5640637874603271f, 0.5665850043296814f,
                                 0.2572229504585266f, -0.13121841847896576f, -1.2142372131347656f,
                                 0.4551610052585602f, 3.6443660259246826f, -6.577034950256348f,
                                 4.766154766082764f, -1.3363267183303833f};
inline V erfc_(V x) {
  const V one(1.f);
  const V small = at::vec::fnmadd(x, horner(x * x, kErfOverX), one);
  // past 10.5 exp(-a^2) is 0; the clamp keeps lo finite for infinities (NaN stays NaN)
  const V a = at::vec::minimum(x.abs(), V(10.5f));
  const V hi = a * a;
  const V lo = at::vec::fmsub(a, a, hi);
  V r = exp(hi.neg()) * horner(one / (one + a), kErfcScaled);
  r = at::vec::fnmadd(r, lo, r);
  r = V::blendv(r, V(2.f) - r, x < V(0.f));
  return V::blendv(r, small, a < V(0.5f));
}

// erf(x) = sign(x) (1 - t P(t) e), t = 1 / (1 + p |x|), e = exp(-x^2): Abramowitz &
// Stegun 7.1.26, the formula ATen's vector erf uses, absolute error below 1.5e-7.
// Taking e from the caller lets GELU's backward share one exp with its pdf.
inline V erf_given_exp(V x, V e) {
  const V one(1.f);
  const V t = one / at::vec::fmadd(V(0.3275911f), x.abs(), one);
  V r = at::vec::fmadd(V(1.061405429f), t, V(-1.453152027f));
  r = at::vec::fmadd(r, t, V(1.421413741f));
  r = at::vec::fmadd(r, t, V(-0.284496736f));
  r = at::vec::fmadd(r, t, V(0.254829592f));
  return at::vec::fnmadd(e * t, r, one) | (x & V(-0.f));
}

// erf for GELU, where it is added to 1: its error counts absolutely, so the exp
// can be ATen's inline exp_u20 (a few ULP of a value below 1, well inside the
// formula's 1.5e-7) instead of Sleef's exp call. About 20% off GELU's time.
// Not for torch.erf itself, whose small results need relative accuracy.
inline V erf_for_gelu(V x) { return erf_given_exp(x, (x * x).neg().exp_u20()); }

}  // namespace

void ACME_VEC_NAME(unary_f32_)(Unary op, const float* in, float* out, int64_t n, float p0, float p1) {
  switch (op) {
    case Unary::Exp: return loop1(in, out, n, [](V x) { return exp(x); });
    case Unary::Exp2: return loop1(in, out, n, [](V x) { return x.exp2(); });
    case Unary::Expm1: return loop1(in, out, n, [](V x) { return x.expm1(); });
    case Unary::Log: return loop1(in, out, n, [](V x) { return log_(x); });
    case Unary::Log2: return loop1(in, out, n, [](V x) { return log2_(x); });
    case Unary::Log10: return loop1(in, out, n, [](V x) { return x.log10(); });
    case Unary::Log1p: return loop1(in, out, n, [](V x) { return x.log1p(); });
    case Unary::Sin: return loop1(in, out, n, [](V x) { return x.sin(); });
    case Unary::Cos: return loop1(in, out, n, [](V x) { return x.cos(); });
    case Unary::Tan: return loop1(in, out, n, [](V x) { return tan_(x); });
    case Unary::Asin: return loop1(in, out, n, [](V x) { return asin_(x); });
    case Unary::Acos: return loop1(in, out, n, [](V x) { return acos_(x); });
    case Unary::Atan: return loop1(in, out, n, [](V x) { return atan_(x); });
    case Unary::Sinh: return loop1(in, out, n, [](V x) { return x.sinh(); });
    case Unary::Cosh: return loop1(in, out, n, [](V x) { return x.cosh(); });
    case Unary::Tanh: return loop1(in, out, n, [](V x) { return tanh(x); });
    case Unary::Asinh: return loop1(in, out, n, [](V x) { return x.asinh(); });
    case Unary::Acosh: return loop1(in, out, n, [](V x) { return x.acosh(); });
    case Unary::Atanh: return loop1(in, out, n, [](V x) { return x.atanh(); });
    case Unary::Erf: return loop1(in, out, n, [](V x) { return x.erf(); });
    case Unary::Erfc: return loop1(in, out, n, [](V x) { return erfc_(x); });
    case Unary::Erfinv: return loop1(in, out, n, [](V x) { return erfinv_(x); });
    case Unary::Lgamma: return loop1(in, out, n, [](V x) { return x.lgamma(); });
    case Unary::Sqrt: return loop1(in, out, n, [](V x) { return x.sqrt(); });
    case Unary::Rsqrt: return loop1(in, out, n, [](V x) { return x.rsqrt(); });
    case Unary::Reciprocal: return loop1(in, out, n, [](V x) { return x.reciprocal(); });
    case Unary::Sigmoid: return loop1(in, out, n, [](V x) { return sigmoid(x); });
    case Unary::Silu: return loop1(in, out, n, [](V x) { return x * sigmoid(x); });
    case Unary::Gelu:
      return loop1(in, out, n, [](V x) {
        return V(0.5f) * x * (V(1.f) + erf_for_gelu(x * V(kSqrt1_2)));
      });
    case Unary::GeluTanh:
      return loop1(in, out, n, [](V x) {
        const V inner = V(kSqrt2OverPi) * (x + V(kKappa) * x * x * x);
        return V(0.5f) * x * (V(1.f) + tanh(inner));
      });
    case Unary::Mish: return loop1(in, out, n, [](V x) { return x * tanh(softplus(x)); });
    case Unary::Floor: return loop1(in, out, n, [](V x) { return x.floor(); });
    case Unary::Ceil: return loop1(in, out, n, [](V x) { return x.ceil(); });
    case Unary::Round: return loop1(in, out, n, [](V x) { return x.round(); });  // half to even
    case Unary::Trunc: return loop1(in, out, n, [](V x) { return x.trunc(); });
    case Unary::Frac: return loop1(in, out, n, [](V x) { return x - x.trunc(); });
    case Unary::Neg: return loop1(in, out, n, [](V x) { return x.neg(); });
    case Unary::Abs: return loop1(in, out, n, [](V x) { return x.abs(); });
    // (0 < x) - (x < 0), as torch: NaN and -0.0 give +0.0. Comparisons give
    // all-ones lanes where true; masked with 1.0 they are 1.0 or 0.0.
    case Unary::Sign:
      return loop1(in, out, n, [](V x) {
        return ((x > V(0.f)) & V(1.f)) - ((x < V(0.f)) & V(1.f));
      });
    // x < 0 is false for NaN: NaN stays NaN, as in torch
    case Unary::Relu: return loop1(in, out, n, [](V x) { return V::blendv(x, V(0.f), x < V(0.f)); });
    case Unary::LeakyRelu:
      return loop1(in, out, n, [s = V(p0)](V x) { return V::blendv(x * s, x, x > V(0.f)); });
    case Unary::Softplus:
      return loop1(in, out, n, [beta = V(p0), th = V(p1)](V x) {
        const V bx = x * beta;
        return V::blendv(exp(bx).log1p() / beta, x, bx > th);
      });
    case Unary::PowScalar: return loop1(in, out, n, [e = V(p0)](V x) { return x.pow(e); });
    case Unary::MulScalar: return loop1(in, out, n, [v = V(p0)](V x) { return x * v; });
    case Unary::AddScalar: return loop1(in, out, n, [v = V(p0)](V x) { return x + v; });
  }
}

void ACME_VEC_NAME(binary_f32_)(Binary op, const float* a, const float* b, float* out, int64_t n) {
  switch (op) {
    case Binary::GeluBackward:
      return loop2(a, b, out, n, [](V g, V x) {
        // exp(-x^2 / 2) is both erf(x / sqrt 2)'s exp and the pdf's
        const V e = exp(V(-0.5f) * x * x);
        const V cdf = V(0.5f) * (V(1.f) + erf_given_exp(x * V(kSqrt1_2), e));
        const V pdf = e * V(kInvSqrt2Pi);
        return g * (cdf + x * pdf);
      });
    case Binary::GeluTanhBackward:
      return loop2(a, b, out, n, [](V g, V x) {
        const V x2 = x * x;
        const V inner = V(kSqrt2OverPi) * (x + V(kKappa) * x2 * x);
        const V t = tanh(inner);
        const V d_inner = V(kSqrt2OverPi) * (V(1.f) + V(3.f * kKappa) * x2);
        return g * (V(0.5f) * (V(1.f) + t) + V(0.5f) * x * (V(1.f) - t * t) * d_inner);
      });
    case Binary::SiluBackward:
      return loop2(a, b, out, n, [](V g, V x) {
        const V s = sigmoid(x);
        return g * s * (V(1.f) + x * (V(1.f) - s));
      });
    case Binary::MishBackward:
      return loop2(a, b, out, n, [](V g, V x) {
        const V t = tanh(softplus(x));
        return g * (t + x * sigmoid(x) * (V(1.f) - t * t));
      });
    case Binary::Atan2: return loop2(a, b, out, n, [](V y, V x) { return y.atan2(x); });
    case Binary::Pow: return loop2(a, b, out, n, [](V x, V e) { return x.pow(e); });
    // ATen's vector maximum/minimum propagate NaN, as torch.maximum does.
    case Binary::Maximum: return loop2(a, b, out, n, [](V x, V y) { return at::vec::maximum(x, y); });
    case Binary::Minimum: return loop2(a, b, out, n, [](V x, V y) { return at::vec::minimum(x, y); });
    case Binary::Div: return loop2(a, b, out, n, [](V x, V y) { return x / y; });
  }
}

namespace {  // inline helpers differ per instruction set: never shared by the linker

// A row's vectors, the partial last one filled with `pad` past the row's end.
inline V row_vector(const float* p, int64_t i, int64_t n, float pad) {
  constexpr int64_t w = V::size();
  if (i + w <= n) return V::loadu(p + i);
  const int r = static_cast<int>(n - i);
  return V::set(V(pad), V::loadu(p + i, r), r);
}

// Lanes of a vector summed in lane order: one fixed order, so a row's result
// does not depend on anything but its values.
inline float lanes_sum(V v) {
  constexpr int64_t w = V::size();
  float lanes[w];
  v.store(lanes);
  float s = 0.f;
  for (int64_t j = 0; j < w; ++j) s += lanes[j];
  return s;
}

inline void store_part(V v, float* p, int64_t i, int64_t n) {
  constexpr int64_t w = V::size();
  if (i + w <= n) v.store(p + i);
  else v.store(p + i, static_cast<int>(n - i));
}

}  // namespace

void ACME_VEC_NAME(row_f32_)(Row op, const float* in, float* out, int64_t n) {
  constexpr int64_t w = V::size();
  const float inf = std::numeric_limits<float>::infinity();
  V vmax(-inf);
  for (int64_t i = 0; i < n; i += w) vmax = at::vec::maximum(vmax, row_vector(in, i, n, -inf));
  float lanes[w];
  vmax.store(lanes);
  float mx = -inf;  // a NaN lane, once taken, stays: NaN > v and v > NaN are false
  for (int64_t j = 0; j < w; ++j) mx = (lanes[j] > mx || lanes[j] != lanes[j]) ? lanes[j] : mx;

  // exp(x - max) into out (the log-softmax only needs its sum)
  V vsum(0.f);
  for (int64_t i = 0; i < n; i += w) {
    const int r = static_cast<int>(std::min<int64_t>(w, n - i));
    const V e = exp(row_vector(in, i, n, 0.f) - V(mx));
    vsum = vsum + (r == w ? e : V::set(V(0.f), e, r));
    if (op == Row::Softmax) e.store(out + i, r);
  }
  const float sum = lanes_sum(vsum);

  if (op == Row::Softmax) {
    const float inv = 1.f / sum;
    loop1(out, out, n, [v = V(inv)](V e) { return e * v; });
  } else {
    loop1(in, out, n, [mx = V(mx), lse = V(std::log(sum))](V x) { return x - mx - lse; });
  }
}


void ACME_VEC_NAME(layer_norm_row_f32_)(const float* x, const float* weight, const float* bias,
                                        float* out, int64_t n, double eps, float* mean,
                                        float* rstd) {
  constexpr int64_t w = V::size();
  V vs(0.f);
  for (int64_t i = 0; i < n; i += w) vs = vs + row_vector(x, i, n, 0.f);
  const float m = lanes_sum(vs) / static_cast<float>(n);
  // the centred sum of squares, a second pass (as the scalar loop: no
  // cancellation of E[x^2] - E[x]^2); the tail's padding is the mean itself
  const V vm(m);
  V vq(0.f);
  for (int64_t i = 0; i < n; i += w) {
    const V d = row_vector(x, i, n, m) - vm;
    vq = at::vec::fmadd(d, d, vq);
  }
  const float var = lanes_sum(vq) / static_cast<float>(n);
  const float is = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps));
  *mean = m;
  *rstd = is;
  const V vis(is);
  for (int64_t i = 0; i < n; i += w) {
    V y = (row_vector(x, i, n, 0.f) - vm) * vis;
    if (weight) y = y * row_vector(weight, i, n, 0.f);
    if (bias) y = y + row_vector(bias, i, n, 0.f);
    store_part(y, out, i, n);
  }
}

void ACME_VEC_NAME(layer_norm_backward_row_f32_)(const float* x, const float* dy,
                                                 const float* weight, float m, float is,
                                                 float* dx, float* dweight, float* dbias,
                                                 int64_t n) {
  constexpr int64_t w = V::size();
  const V vm(m), vis(is);
  V vg(0.f), vgx(0.f);
  for (int64_t i = 0; i < n; i += w) {
    const V d = row_vector(dy, i, n, 0.f);
    const V xh = (row_vector(x, i, n, 0.f) - vm) * vis;
    if (dweight) store_part(at::vec::fmadd(d, xh, row_vector(dweight, i, n, 0.f)), dweight, i, n);
    if (dbias) store_part(row_vector(dbias, i, n, 0.f) + d, dbias, i, n);
    if (dx) {
      const V g = weight ? d * row_vector(weight, i, n, 0.f) : d;
      vg = vg + g;
      vgx = at::vec::fmadd(g, xh, vgx);
    }
  }
  if (!dx) return;
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight
  const V a(lanes_sum(vg) / static_cast<float>(n));
  const V c(lanes_sum(vgx) / static_cast<float>(n));
  for (int64_t i = 0; i < n; i += w) {
    const V d = row_vector(dy, i, n, 0.f);
    const V xh = (row_vector(x, i, n, 0.f) - vm) * vis;
    const V g = weight ? d * row_vector(weight, i, n, 0.f) : d;
    store_part(vis * (g - a - xh * c), dx, i, n);
  }
}

}  // namespace acme::vec
