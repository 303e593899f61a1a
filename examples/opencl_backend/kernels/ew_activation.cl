// Op table of the activation op spec family (flsdk's opspec/activation.yaml) for
// kernels/elementwise.cl: forward ops over `a` (the input), backward ops over
// `a` (the gradient) and `b` (the input or the result). p0..p2: the op's numbers.

#if defined(OP_relu)
#define EXPR (a < 0 ? (CT)0 : a)  /* NaN stays NaN */
#elif defined(OP_sigmoid)
#define EXPR (K(1.0) / (K(1.0) + exp(-a)))
#elif defined(OP_tanh)
#define EXPR tanh(a)
#elif defined(OP_sigmoid_backward)
#define EXPR (a * (K(1.0) - b) * b)
#elif defined(OP_tanh_backward)
#define EXPR (a * (K(1.0) - b * b))
#elif defined(OP_threshold)
#define EXPR (a <= p0 ? p1 : a)
#elif defined(OP_threshold_backward)
#define EXPR (b <= p0 ? (CT)0 : a)
#elif defined(OP_gelu) || defined(OP_gelu_backward)
#define GELU_K K(0.7978845608028654) /* sqrt(2 / pi) */
#define GELU_C K(0.044715)
inline CT ew_gelu(CT v) {
#if GELU_TANH
  return K(0.5) * v * (K(1.0) + tanh(GELU_K * (v + GELU_C * v * v * v)));
#else
  return K(0.5) * v * (K(1.0) + erf(v * K(0.7071067811865476)));
#endif
}
inline CT ew_gelu_backward(CT g, CT v) {
#if GELU_TANH
  const CT t = tanh(GELU_K * (v + GELU_C * v * v * v));
  return g * (K(0.5) * (K(1.0) + t) + K(0.5) * v * (K(1.0) - t * t) * GELU_K * (K(1.0) + K(3.0) * GELU_C * v * v));
#else
  return g * (K(0.5) * (K(1.0) + erf(v * K(0.7071067811865476))) + v * exp(K(-0.5) * v * v) * K(0.3989422804014327));
#endif
}
#if defined(OP_gelu)
#define EXPR ew_gelu(a)
#else
#define EXPR ew_gelu_backward(a, b)
#endif
#elif defined(OP_silu)
#define EXPR (a / (K(1.0) + exp(-a)))
#elif defined(OP_silu_backward)
inline CT ew_silu_backward(CT g, CT x) {
  const CT s = K(1.0) / (K(1.0) + exp(-x));
  return g * s * (K(1.0) + x * (K(1.0) - s));
}
#define EXPR ew_silu_backward(a, b)
#elif defined(OP_leaky_relu)
#define EXPR (a > 0 ? a : a * p0)
#elif defined(OP_leaky_relu_backward)
#define EXPR (b > 0 ? a : a * p0)
#elif defined(OP_elu)
// p0 = alpha * scale, p1 = scale, p2 = input_scale
#define EXPR (a <= 0 ? expm1(a * p2) * p0 : a * p1)
#elif defined(OP_elu_backward)
#if ELU_IS_RESULT
#define EXPR (b <= 0 ? a * p2 * (b + p0) : a * p1)
#else
#define EXPR (b <= 0 ? a * p2 * p0 * exp(b * p2) : a * p1)
#endif
#elif defined(OP_hardtanh)
#define EXPR (isnan(a) ? a : (a < p0 ? p0 : (a > p1 ? p1 : a)))
#elif defined(OP_hardtanh_backward)
#define EXPR ((b <= p0 || b >= p1) ? K(0.0) : a)
#elif defined(OP_hardsigmoid)
#define EXPR (fmin(fmax(a + K(3.0), K(0.0)), K(6.0)) / K(6.0))
#elif defined(OP_hardsigmoid_backward)
#define EXPR ((b > K(-3.0) && b < K(3.0)) ? a / K(6.0) : K(0.0))
#elif defined(OP_hardswish)
#define EXPR (a * fmin(fmax(a + K(3.0), K(0.0)), K(6.0)) / K(6.0))
#elif defined(OP_hardswish_backward)
#define EXPR (b < K(-3.0) ? K(0.0) : (b <= K(3.0) ? a * (b / K(3.0) + K(0.5)) : a))
#elif defined(OP_softplus)
// p0 = beta, p1 = threshold
#define EXPR (a * p0 > p1 ? a : log1p(exp(a * p0)) / p0)
#elif defined(OP_softplus_backward)
inline CT ew_softplus_backward(CT g, CT x, CT beta, CT threshold) {
  const CT z = exp(x * beta);
  return x * beta > threshold ? g : g * z / (z + K(1.0));
}
#define EXPR ew_softplus_backward(a, b, p0, p1)
#elif defined(OP_mish)
#define EXPR (a * tanh(log1p(exp(a))))
#elif defined(OP_mish_backward)
inline CT ew_mish_backward(CT g, CT x) {
  const CT s = K(1.0) / (K(1.0) + exp(-x));
  const CT t = tanh(log1p(exp(x)));
  return g * (t + x * s * (K(1.0) - t * t));
}
#define EXPR ew_mish_backward(a, b)
#elif defined(OP_logit_backward)
// p0 = eps (< 0: none)
inline CT ew_logit_backward(CT g, CT x, CT eps) {
  if (eps < K(0.0)) return (x < K(0.0) || x > K(1.0)) ? NAN : g / (x * (K(1.0) - x));
  return (x < eps || x > K(1.0) - eps) ? K(0.0) : g / (x * (K(1.0) - x));
}
#define EXPR ew_logit_backward(a, b, p0)
#elif defined(OP_hardshrink)
#define EXPR ((a >= -p0 && a <= p0) ? K(0.0) : a)
#elif defined(OP_softshrink)
#define EXPR (a > p0 ? a - p0 : (a < -p0 ? a + p0 : K(0.0)))
#elif defined(OP_shrink_backward)
#define EXPR ((b >= -p0 && b <= p0) ? K(0.0) : a)
#elif defined(OP_log_sigmoid)
#define EXPR (fmin(a, K(0.0)) - log1p(exp(-fabs(a))))
#elif defined(OP_log_sigmoid_buffer)
#define EXPR exp(-fabs(a))  /* the CPU's buffer, which its backward reads */
#elif defined(OP_log_sigmoid_backward)
// a: grad, b: the input, c: the forward's buffer z = exp(-|x|), read as the CPU does
inline CT ew_log_sigmoid_backward(CT g, CT x, CT z) {
  return x < K(0.0) ? g * (K(1.0) - z / (K(1.0) + z)) : g * (z / (K(1.0) + z));
}
#define EXPR ew_log_sigmoid_backward(a, b, c)
#elif defined(OP_glu)
// a: the first half, b: the second
#define EXPR (a * (K(1.0) / (K(1.0) + exp(-b))))
#elif defined(OP_glu_backward_first)
// a: grad, b: the second half
#define EXPR (a * (K(1.0) / (K(1.0) + exp(-b))))
#elif defined(OP_glu_backward_second)
// a: grad, b: the first half, c: the second half
inline CT ew_glu_second(CT g, CT x, CT y) {
  const CT s = K(1.0) / (K(1.0) + exp(-y));
  return g * x * s * (K(1.0) - s);
}
#define EXPR ew_glu_second(a, b, c)
#endif
