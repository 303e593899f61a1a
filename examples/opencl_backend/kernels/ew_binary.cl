// Op table of the binary op spec family (flsdk's opspec/binary.yaml): the EXPR
// of each op over `a` and `b` (operands 0 and 1, in CT) and p0 (alpha), for
// kernels/elementwise.cl. Integer arithmetic wraps as the CPU's (ulong math).

#if CT_FLOAT
#define EW_ADD(x, y) ((x) + (y))
#define EW_MULADD(x, s, y) ((x) + (s) * (y))
#else
#define EW_ADD(x, y) ((CT)((ulong)(x) + (ulong)(y)))
#define EW_MULADD(x, s, y) ((CT)((ulong)(x) + (ulong)(s) * (ulong)(y)))
#endif

// Python's floor division and modulo (the quotient rounds toward -inf, the
// remainder takes the divisor's sign), which torch's // and % follow.
#if CT_FLOAT
inline CT ew_floordiv(CT x, CT y) {
  if (y == K(0.0)) return x / y;
  const CT mod = fmod(x, y);
  CT q = (x - mod) / y;
  if (mod != K(0.0) && (y < K(0.0)) != (mod < K(0.0))) q -= K(1.0);
  if (q == K(0.0)) return copysign(K(0.0), x / y);
  CT fq = floor(q);
  if (q - fq > K(0.5)) fq += K(1.0);
  return fq;
}
inline CT ew_mod(CT x, CT y) {
  CT m = fmod(x, y);
  if (m != K(0.0) && (y < K(0.0)) != (m < K(0.0))) m += y;
  return m;
}
#else
// Division by zero raises on the CPU; a kernel cannot, and gives 0.
inline CT ew_floordiv(CT x, CT y) {
  if (y == 0) return 0;
  if (y == -1) return (CT)(0 - (ulong)x);
  CT q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) q -= 1;
  return q;
}
inline CT ew_mod(CT x, CT y) {
  if (y == 0 || y == -1) return 0;
  CT m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}
#endif

#if defined(OP_add)
#if HAS_ALPHA
#define EXPR EW_MULADD(a, p0, b)
#else
#define EXPR EW_ADD(a, b)
#endif
#elif defined(OP_sub)
#if HAS_ALPHA
#define EXPR EW_MULADD(a, -p0, b)
#else
#define EXPR EW_MULADD(a, -1, b)
#endif
#elif defined(OP_rsub)
#if HAS_ALPHA
#define EXPR EW_MULADD(b, -p0, a)
#else
#define EXPR EW_MULADD(b, -1, a)
#endif
#elif defined(OP_mul)
#if CT_FLOAT
#define EXPR (a * b)
#else
#define EXPR ((CT)((ulong)a * (ulong)b))
#endif
#elif defined(OP_div)
#define EXPR (a / b)
#elif defined(OP_div_trunc)
#if CT_FLOAT
#define EXPR trunc(a / b)
#else
#define EXPR (b == 0 ? (CT)0 : (b == -1 ? (CT)(0 - (ulong)a) : a / b))
#endif
#elif defined(OP_div_floor) || defined(OP_floor_divide)
#define EXPR ew_floordiv(a, b)
#elif defined(OP_remainder)
#define EXPR ew_mod(a, b)
#elif defined(OP_fmod)
#if CT_FLOAT
#define EXPR fmod(a, b)
#else
#define EXPR ((b == 0 || b == -1) ? (CT)0 : a % b)
#endif
#elif defined(OP_pow)
#if CT_FLOAT
// the exponents the CPU computes without pow() (pow(x, 2) is x * x there)
inline CT ew_pow(CT x, CT e) {
  if (e == K(2.0)) return x * x;
  if (e == K(3.0)) return x * x * x;
  if (e == K(0.5)) return sqrt(x);
  if (e == K(-0.5)) return K(1.0) / sqrt(x);
  if (e == K(-1.0)) return K(1.0) / x;
  if (e == K(-2.0)) return K(1.0) / (x * x);
  return pow(x, e);
}
#if POW_TENSOR_EXP
#define EXPR pow(a, b)
#else
#define EXPR ew_pow(a, b)
#endif
#else
// integer power by squaring; negative exponents: 1, -1 keep their value, else 0
inline CT ew_ipow(CT x, CT e) {
  if (e < 0) {
    if (x == 1) return 1;
    if (x == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  ulong r = 1, base = (ulong)x;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return (CT)r;
}
#define EXPR ew_ipow(a, b)
#endif
#elif defined(OP_atan2)
#define EXPR atan2(a, b)
#elif defined(OP_maximum)
#if CT_FLOAT
#define EXPR ((isnan(a) || isnan(b)) ? (a + b) : (a > b ? a : b))
#else
#define EXPR (a > b ? a : b)
#endif
#elif defined(OP_minimum)
#if CT_FLOAT
#define EXPR ((isnan(a) || isnan(b)) ? (a + b) : (a < b ? a : b))
#else
#define EXPR (a < b ? a : b)
#endif
#elif defined(OP_fmax)
#define EXPR fmax(a, b)
#elif defined(OP_fmin)
#define EXPR fmin(a, b)
#elif defined(OP_hypot)
#define EXPR hypot(a, b)
#elif defined(OP_copysign)
#define EXPR copysign(a, b)
#elif defined(OP_bitwise_and)
#define EXPR (a & b)
#elif defined(OP_bitwise_or)
#define EXPR (a | b)
#elif defined(OP_bitwise_xor)
#define EXPR (a ^ b)
#elif defined(OP_bitwise_left_shift)
#define EXPR ((b < 0 || b >= OUT_BITS) ? (CT)0 : (CT)((ulong)a << b))
#elif defined(OP_bitwise_right_shift)
#define EXPR ((b < 0 || b >= OUT_BITS) ? (a < 0 ? (CT)-1 : (CT)0) : (a >> b))
#elif defined(OP_xlogy)
#define EXPR (isnan(b) ? b : (a == K(0.0) ? K(0.0) : a * log(b)))
#elif defined(OP_logaddexp)
inline CT ew_logaddexp(CT x, CT y) {
  if (isinf(x) && x == y) return x;
  const CT m = x > y ? x : y;
  return m + log1p(exp(-fabs(x - y)));
}
#define EXPR ew_logaddexp(a, b)
#elif defined(OP_logaddexp2)
inline CT ew_logaddexp2(CT x, CT y) {
  if (isinf(x) && x == y) return x;
  const CT m = x > y ? x : y;
  return m + log1p(exp2(-fabs(x - y))) * K(1.4426950408889634);
}
#define EXPR ew_logaddexp2(a, b)
#elif defined(OP_nextafter)
#define EXPR nextafter(a, b)
#elif defined(OP_heaviside)
#define EXPR (a == 0 ? b : (CT)(a > 0))
#elif defined(OP_gcd) || defined(OP_lcm)
inline CT ew_gcd(CT x, CT y) {
  x = x < 0 ? -x : x;
  y = y < 0 ? -y : y;
  while (y != 0) {
    const CT t = x % y;
    x = y;
    y = t;
  }
  return x;
}
#if defined(OP_gcd)
#define EXPR ew_gcd(a, b)
#else
inline CT ew_lcm(CT x, CT y) {
  const CT g = ew_gcd(x, y);
  if (g == 0) return 0;
  const CT l = (CT)((ulong)(x / g) * (ulong)y);
  return l < 0 ? -l : l;
}
#define EXPR ew_lcm(a, b)
#endif
#endif
