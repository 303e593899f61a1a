// Pointwise kernels, float32. The output is contiguous; inputs are strided
// (operands 1 and 2 of the Layout; stride 0 broadcasts).

__kernel void relu_f32(BUF(float, out), BUF(const float, x), Layout L, ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, x)[a];
  AT(float, out)[i] = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as torch.relu
}

__kernel void add_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L, ulong n,
                      float alpha) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] + alpha * AT(const float, y)[b];
}

__kernel void add_nomul_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L,
                            ulong n) {
  // alpha == 1: no multiply, so inf * 1 and NaN behave exactly as the CPU's add.
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] + AT(const float, y)[b];
}

__kernel void mul_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L, ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] * AT(const float, y)[b];
}

// grad where self > threshold, else 0 (relu's backward with threshold 0).
__kernel void threshold_backward_f32(BUF(float, out), BUF(const float, grad), BUF(const float, self),
                                     Layout L, ulong n, float threshold) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float s = AT(const float, self)[b];
  AT(float, out)[i] = s <= threshold ? 0.0f : AT(const float, grad)[a];
}

// out = x - alpha * y
__kernel void sub_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L, ulong n,
                      float alpha) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] - alpha * AT(const float, y)[b];
}

__kernel void sub_nomul_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L,
                            ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] - AT(const float, y)[b];
}

__kernel void div_f32(BUF(float, out), BUF(const float, x), BUF(const float, y), Layout L, ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const float, x)[a] / AT(const float, y)[b];
}

// Unary ops over one strided input (operand 1 of the Layout).
#define UNARY(name, expr)                                                              \
  __kernel void name(BUF(float, out), BUF(const float, x), Layout L, ulong n) {        \
    const ulong i = get_global_id(0);                                                  \
    if (i >= n) return;                                                                \
    long o, a, b;                                                                      \
    layout_offsets(&L, i, &o, &a, &b);                                                 \
    const float v = AT(const float, x)[a];                                             \
    AT(float, out)[i] = (expr);                                                        \
  }
UNARY(neg_f32, -v)
UNARY(exp_f32, exp(v))
UNARY(tanh_f32, tanh(v))
UNARY(sigmoid_f32, 1.0f / (1.0f + exp(-v)))

// x ** e, with the exponents the CPU computes exactly by multiplication or sqrt
// special-cased as it does (pow(x, 2) is x * x there, not exp(2 log x)).
__kernel void pow_scalar_f32(BUF(float, out), BUF(const float, x), Layout L, ulong n, float e) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, x)[a];
  float r;
  if (e == 2.0f) r = v * v;
  else if (e == 3.0f) r = v * v * v;
  else if (e == 1.0f) r = v;
  else if (e == 0.5f) r = sqrt(v);
  else if (e == -1.0f) r = 1.0f / v;
  else if (e == -2.0f) r = 1.0f / (v * v);
  else if (e == 0.0f) r = 1.0f;
  else r = pow(v, e);
  AT(float, out)[i] = r;
}

// Backward of tanh and sigmoid from their output y: grad * (1 - y^2), grad * (1 - y) * y.
__kernel void tanh_backward_f32(BUF(float, out), BUF(const float, grad), BUF(const float, y), Layout L,
                                ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, y)[b];
  AT(float, out)[i] = AT(const float, grad)[a] * (1.0f - v * v);
}

__kernel void sigmoid_backward_f32(BUF(float, out), BUF(const float, grad), BUF(const float, y), Layout L,
                                   ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, y)[b];
  AT(float, out)[i] = AT(const float, grad)[a] * (1.0f - v) * v;
}

// A tensor with a number from the host (x + 2, 0.5 * x, x / 3): the number is a
// kernel argument, so nothing is copied to the device and nobody waits.
// code: 0 x + alpha*s, 1 x - alpha*s, 2 x * s, 3 x / s, 4 s - alpha*x (rsub-like,
// when the number came first in sub), 5 s / x; alpha_one: skip the multiply.
__kernel void scalar_op_f32(BUF(float, out), BUF(const float, x), Layout L, ulong n, float s,
                            float alpha, int code, int alpha_one) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, x)[a];
  float r;
  switch (code) {
    case 0: r = alpha_one ? v + s : v + alpha * s; break;
    case 1: r = alpha_one ? v - s : v - alpha * s; break;
    case 2: r = v * s; break;
    case 3: r = v / s; break;
    case 4: r = alpha_one ? s - v : s - alpha * v; break;
    default: r = s / v; break;
  }
  AT(float, out)[i] = r;
}

// int64 add (counters such as batch norm's num_batches_tracked): wrapping
// arithmetic, as the CPU's. y is a tensor, or (y_is_scalar) the number s.
__kernel void add_i64(BUF(long, out), BUF(const long, x), BUF(const long, y), Layout L, ulong n,
                      long alpha, long s, int y_is_scalar) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const long v = y_is_scalar ? s : AT(const long, y)[b];
  AT(long, out)[i] = (long)((ulong)AT(const long, x)[a] + (ulong)alpha * (ulong)v);
}

// gelu (approx 0: exact erf form; 1: tanh form) and its backward from the input.
#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_C 0.044715f
__kernel void gelu_f32(BUF(float, out), BUF(const float, x), Layout L, ulong n, int approx) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float v = AT(const float, x)[a];
  AT(float, out)[i] = approx ? 0.5f * v * (1.0f + tanh(GELU_K * (v + GELU_C * v * v * v)))
                             : 0.5f * v * (1.0f + erf(v * 0.7071067811865476f));
}

__kernel void gelu_backward_f32(BUF(float, out), BUF(const float, grad), BUF(const float, x), Layout L,
                                ulong n, int approx) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  const float g = AT(const float, grad)[a];
  const float v = AT(const float, x)[b];
  float d;
  if (approx) {
    const float t = tanh(GELU_K * (v + GELU_C * v * v * v));
    d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
  } else {
    d = 0.5f * (1.0f + erf(v * 0.7071067811865476f)) + v * exp(-0.5f * v * v) * 0.3989422804014327f;
  }
  AT(float, out)[i] = g * d;
}

// out = mask ? value : x (mask: bool bytes, broadcast by its strides)
__kernel void masked_fill_f32(BUF(float, out), BUF(const float, x), BUF(const uchar, mask), Layout L, ulong n,
                              float value) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  long o, a, b;
  layout_offsets(&L, i, &o, &a, &b);
  AT(float, out)[i] = AT(const uchar, mask)[b] ? value : AT(const float, x)[a];
}
