// Op table of the unary op spec family (flsdk's opspec/unary.yaml): the EXPR of
// each op over `a` (operand 0, in CT), for kernels/elementwise.cl. The host
// (kernels/elementwise.cpp) picks CT and the output type: math functions of
// integer or bool tensors compute in the default float dtype, as torch does.

#if defined(OP_abs)
#if CT_FLOAT
#define EXPR fabs(a)
#else
#define EXPR (a < 0 ? -a : a)
#endif
#elif defined(OP_neg)
#define EXPR (-a)
#elif defined(OP_sign) || defined(OP_sgn)
#define EXPR ((CT)((a > 0) - (a < 0)))  /* NaN and -0.0 give 0, as on the CPU */
#elif defined(OP_exp)
#define EXPR exp(a)
#elif defined(OP_exp2)
#define EXPR exp2(a)
#elif defined(OP_expm1)
#define EXPR expm1(a)
#elif defined(OP_log)
#define EXPR log(a)
#elif defined(OP_log2)
#define EXPR log2(a)
#elif defined(OP_log10)
#define EXPR log10(a)
#elif defined(OP_log1p)
#define EXPR log1p(a)
#elif defined(OP_sqrt)
#define EXPR sqrt(a)
#elif defined(OP_rsqrt)
#define EXPR (K(1.0) / sqrt(a))
#elif defined(OP_reciprocal)
#define EXPR (K(1.0) / a)
#elif defined(OP_sin)
#define EXPR sin(a)
#elif defined(OP_cos)
#define EXPR cos(a)
#elif defined(OP_tan)
#define EXPR tan(a)
#elif defined(OP_asin)
#define EXPR asin(a)
#elif defined(OP_acos)
#define EXPR acos(a)
#elif defined(OP_atan)
#define EXPR atan(a)
#elif defined(OP_sinh)
#define EXPR sinh(a)
#elif defined(OP_cosh)
#define EXPR cosh(a)
#elif defined(OP_asinh)
#define EXPR asinh(a)
#elif defined(OP_acosh)
#define EXPR acosh(a)
#elif defined(OP_atanh)
#define EXPR atanh(a)
#elif defined(OP_erf)
#define EXPR erf(a)
#elif defined(OP_erfc)
#define EXPR erfc(a)
#elif defined(OP_erfinv)
// Inverse error function: a rational first guess on the central range and on
// the tails (in w = -log((1 - x)(1 + x))), refined by two Newton steps on erf.
inline CT ew_erfinv(CT x) {
  if (isnan(x) || x < K(-1.0) || x > K(1.0)) return NAN;
  if (x == K(1.0)) return INFINITY;
  if (x == K(-1.0)) return -INFINITY;
  const CT w = -log((K(1.0) - x) * (K(1.0) + x));
  CT p;
  if (w < K(5.0)) {
    const CT t = w - K(2.5);
    p = K(2.81022636e-08);
    p = K(3.43273939e-07) + p * t;
    p = K(-3.5233877e-06) + p * t;
    p = K(-4.39150654e-06) + p * t;
    p = K(0.00021858087) + p * t;
    p = K(-0.00125372503) + p * t;
    p = K(-0.00417768164) + p * t;
    p = K(0.246640727) + p * t;
    p = K(1.50140941) + p * t;
  } else {
    const CT t = sqrt(w) - K(3.0);
    p = K(-0.000200214257);
    p = K(0.000100950558) + p * t;
    p = K(0.00134934322) + p * t;
    p = K(-0.00367342844) + p * t;
    p = K(0.00573950773) + p * t;
    p = K(-0.0076224613) + p * t;
    p = K(0.00943887047) + p * t;
    p = K(1.00167406) + p * t;
    p = K(2.83297682) + p * t;
  }
  CT y = p * x;
  // Newton on erf(y) = x: erf'(y) = 2/sqrt(pi) exp(-y^2)
  for (int k = 0; k < 2; ++k) {
    const CT e = erf(y) - x;
    y -= e / (K(1.1283791670955126) * exp(-y * y));
  }
  return y;
}
#define EXPR ew_erfinv(a)
#elif defined(OP_ceil)
#if CT_FLOAT
#define EXPR ceil(a)
#else
#define EXPR a
#endif
#elif defined(OP_floor)
#if CT_FLOAT
#define EXPR floor(a)
#else
#define EXPR a
#endif
#elif defined(OP_round)
#if CT_FLOAT
#define EXPR rint(a)  /* half to even, as torch.round */
#else
#define EXPR a
#endif
#elif defined(OP_round_decimals)
// p0 = 10^|decimals|, p1 = 1 when decimals < 0
#define EXPR (p1 != K(0.0) ? rint(a / p0) * p0 : rint(a * p0) / p0)
#elif defined(OP_trunc)
#if CT_FLOAT
#define EXPR trunc(a)
#else
#define EXPR a
#endif
#elif defined(OP_frac)
#define EXPR (a - trunc(a))
#elif defined(OP_logit)
// p0 = eps, p1 = 1 when an eps was given (eps < 0 clamps nothing, as the CPU)
inline CT ew_logit(CT x, CT eps, CT has_eps) {
  if (has_eps != K(0.0) && eps >= K(0.0)) x = x < eps ? eps : (x > K(1.0) - eps ? K(1.0) - eps : x);
  return log(x / (K(1.0) - x));
}
#define EXPR ew_logit(a, p0, p1)
#elif defined(OP_bitwise_not)
#if IN0_BOOL
#define EXPR ((CT)(a == 0))
#else
#define EXPR (~a)
#endif
#elif defined(OP_signbit)
#if CT_FLOAT
#define EXPR ((RT)(signbit(a) != 0))
#else
#define EXPR ((RT)(a < 0))
#endif
#elif defined(OP_lgamma)
#define EXPR lgamma(a)
#elif defined(OP_digamma)
// digamma: reflection below 0, the recurrence psi(x) = psi(x + 1) - 1/x up to
// x >= 6, then the asymptotic series in 1/x^2.
inline CT ew_digamma(CT x) {
  if (isnan(x)) return x;
  if (x == K(0.0)) return signbit(x) ? INFINITY : -INFINITY;  // as the CPU: -inf at +0
  CT acc = K(0.0);
  if (x < K(0.0)) {
    if (x == floor(x)) return NAN;
    // psi(1 - x) - psi(x) = pi / tan(pi x)
    const CT r = x - floor(x);  // keeps tan's argument small
    acc = -K(3.141592653589793) / tan(K(3.141592653589793) * r);
    x = K(1.0) - x;
  }
  while (x < K(6.0)) {
    acc -= K(1.0) / x;
    x += K(1.0);
  }
  const CT z = K(1.0) / (x * x);
  const CT series =
      z * (K(0.08333333333333333) -
           z * (K(0.008333333333333333) -
                z * (K(0.003968253968253968) - z * (K(0.004166666666666667) - z * K(0.007575757575757576)))));
  return acc + log(x) - K(0.5) / x - series;
}
#define EXPR ew_digamma(a)
#elif defined(OP_sinc)
inline CT ew_sinc(CT x) {
  if (x == K(0.0)) return K(1.0);
  const CT y = K(3.141592653589793) * x;
  return sin(y) / y;
}
#define EXPR ew_sinc(a)
#elif defined(OP_deg2rad)
#define EXPR (a * K(0.017453292519943295))
#elif defined(OP_rad2deg)
#define EXPR (a * K(57.29577951308232))
#elif defined(OP_angle)
#define EXPR (isnan(a) ? a : (a < K(0.0) ? K(3.141592653589793) : K(0.0)))
#elif defined(OP_copy)
// fill.Tensor: the value converted to the output type
#define EXPR a
#endif
