// Op table of the pointwise op spec family (flsdk's opspec/pointwise.yaml) for
// kernels/elementwise.cl: ops of up to three tensors (a, b, c) and clamps.
// p0..p2: value / weight / bounds / replacements, in CT.

#if defined(OP_addcmul)
#define EXPR (a + p0 * b * c)
#elif defined(OP_addcdiv)
#define EXPR (a + p0 * b / c)
#elif defined(OP_lerp)
// weight: c (a tensor) or p0 (LERP_SCALAR)
inline CT ew_lerp(CT x, CT y, CT w) {
  return fabs(w) < K(0.5) ? x + w * (y - x) : y - (y - x) * (K(1.0) - w);
}
#if LERP_SCALAR
#define EXPR ew_lerp(a, b, p0)
#else
#define EXPR ew_lerp(a, b, c)
#endif
#elif defined(OP_where)
#define EXPR (a != 0 ? b : c)
#elif defined(OP_clamp)
// bounds: b (HAS_MIN) and c (HAS_MAX), operands or numbers from the host;
// NaN stays NaN, and min > max gives max, as on the CPU
inline CT ew_clamp(CT x, CT lo, CT hi) {
#if CT_FLOAT
  if (isnan(x)) return x;
#endif
#if HAS_MIN
#if CT_FLOAT
  if (isnan(lo)) return lo;
#endif
  x = x < lo ? lo : x;
#endif
#if HAS_MAX
#if CT_FLOAT
  if (isnan(hi)) return hi;
#endif
  x = x > hi ? hi : x;
#endif
  return x;
}
#define EXPR ew_clamp(a, b, c)
#elif defined(OP_nan_to_num)
// p0: NaN's replacement, p1: +inf's, p2: -inf's
#define EXPR (isnan(a) ? p0 : (isinf(a) ? (a > 0 ? p1 : p2) : a))
#endif
