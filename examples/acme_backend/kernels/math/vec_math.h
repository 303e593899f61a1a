// acme's vector math: float32 loops of transcendental pointwise functions,
// built for the host's vector units (AVX-512 and AVX2+FMA, vec_math_avx512.cpp
// and vec_math_avx2.cpp compile vec_math_impl.h with the matching flags) and
// chosen at run time by what the CPU supports (or ACME_ISA forces). The math is Sleef's (through
// ATen's at::vec, as PyTorch's CPU kernels use it), acme's "vendor math library".
//
// This header is light on purpose (no ATen): kernels include it and call
//   if (auto fn = vec::unary_f32()) fn(vec::Unary::Sin, in, out, n, 0.f, 0.f);
// and fall back to their scalar loop when it returns null (no vector unit).
//
// Every lane is computed the same way whatever its position (tails go through
// the same vector code with a partial load), so the result of an element does
// not depend on how a loop is cut into chunks.
#pragma once

#include <cstdint>

#include "vector_isa.h"

namespace acme::vec {

enum class Unary : int {
  Exp, Exp2, Expm1, Log, Log2, Log10, Log1p,
  Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh, Atanh,
  Erf, Erfc, Erfinv, Lgamma, Sqrt, Rsqrt, Reciprocal,
  Sigmoid, Silu, Gelu, GeluTanh, Mish,
  // cheap ones too: without -m flags the compiler has only SSE2 for the scalar
  // loops (floor and round become libm calls there)
  Floor, Ceil, Round, Trunc, Frac, Neg, Abs, Relu, Sign,
  // with parameters p0, p1 (unused by the ops above)
  LeakyRelu,  // p0 = negative slope
  Softplus,   // p0 = beta, p1 = threshold: x where beta * x > threshold
  PowScalar,  // p0 = exponent
  MulScalar,  // p0 * x: exact, as the scalar loop
  AddScalar,  // x + p0: exact, as the scalar loop
};

enum class Binary : int {
  GeluBackward,      // (grad, x)
  GeluTanhBackward,  // (grad, x)
  SiluBackward,      // (grad, x)
  MishBackward,      // (grad, x)
  Atan2,             // (y, x)
  Pow,               // (base, exponent)
  Maximum,           // (a, b), NaN in either gives NaN
  Minimum,           // (a, b), NaN in either gives NaN
  Div,               // (a, b); IEEE division: the scalar loop's bits
};

// One softmax row of n contiguous floats: max (NaN-propagating), exp(x - max)
// and its sum, then the scaling; the same steps as the scalar loop it replaces.
enum class Row : int {
  Softmax,     // out = exp(x - max) / sum
  LogSoftmax,  // out = x - max - log(sum)
};

// One layer-norm row of n contiguous floats: its mean, the centred sum of
// squares (a second pass), rstd = 1 / sqrt(var + eps) (in double, as the scalar
// loop), then out = (x - mean) * rstd * weight + bias (weight, bias: n floats or
// null).
using LayerNormRowFn = void (*)(const float* x, const float* weight, const float* bias, float* out,
                                int64_t n, double eps, float* mean, float* rstd);
// Its backward for one row: dweight += dy * xhat and dbias += dy (each n floats
// or null), and dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy *
// weight (dx null: not wanted; weight null: g = dy).
using LayerNormBackwardRowFn = void (*)(const float* x, const float* dy, const float* weight,
                                        float mean, float rstd, float* dx, float* dweight,
                                        float* dbias, int64_t n);

using UnaryFn = void (*)(Unary op, const float* in, float* out, int64_t n, float p0, float p1);
using RowFn = void (*)(Row op, const float* in, float* out, int64_t n);
using BinaryFn = void (*)(Binary op, const float* a, const float* b, float* out, int64_t n);

// Per instruction set (defined in vec_math_<isa>.cpp).
void unary_f32_avx512(Unary op, const float* in, float* out, int64_t n, float p0, float p1);
void unary_f32_avx2(Unary op, const float* in, float* out, int64_t n, float p0, float p1);
void binary_f32_avx512(Binary op, const float* a, const float* b, float* out, int64_t n);
void binary_f32_avx2(Binary op, const float* a, const float* b, float* out, int64_t n);
void row_f32_avx512(Row op, const float* in, float* out, int64_t n);
void row_f32_avx2(Row op, const float* in, float* out, int64_t n);
void layer_norm_row_f32_avx512(const float* x, const float* weight, const float* bias, float* out,
                               int64_t n, double eps, float* mean, float* rstd);
void layer_norm_row_f32_avx2(const float* x, const float* weight, const float* bias, float* out,
                             int64_t n, double eps, float* mean, float* rstd);
void layer_norm_backward_row_f32_avx512(const float* x, const float* dy, const float* weight,
                                        float mean, float rstd, float* dx, float* dweight,
                                        float* dbias, int64_t n);
void layer_norm_backward_row_f32_avx2(const float* x, const float* dy, const float* weight,
                                      float mean, float rstd, float* dx, float* dweight,
                                      float* dbias, int64_t n);

// 2 = AVX-512 (F, BW, VL, DQ), 1 = AVX2 + FMA, 0 = neither (scalar loops): the
// best this CPU has, unless ACME_ISA or the runtime option "isa" chose a lower
// one (runtime/vector_isa.h), so tests run every path on any machine.
inline int host_isa() { return static_cast<int>(::acme::isa::active()); }

inline UnaryFn unary_f32() {
  switch (host_isa()) {
    case 2: return &unary_f32_avx512;
    case 1: return &unary_f32_avx2;
    default: return nullptr;
  }
}

inline RowFn row_f32() {
  switch (host_isa()) {
    case 2: return &row_f32_avx512;
    case 1: return &row_f32_avx2;
    default: return nullptr;
  }
}

inline LayerNormRowFn layer_norm_row_f32() {
  switch (host_isa()) {
    case 2: return &layer_norm_row_f32_avx512;
    case 1: return &layer_norm_row_f32_avx2;
    default: return nullptr;
  }
}

inline LayerNormBackwardRowFn layer_norm_backward_row_f32() {
  switch (host_isa()) {
    case 2: return &layer_norm_backward_row_f32_avx512;
    case 1: return &layer_norm_backward_row_f32_avx2;
    default: return nullptr;
  }
}

inline BinaryFn binary_f32() {
  switch (host_isa()) {
    case 2: return &binary_f32_avx512;
    case 1: return &binary_f32_avx2;
    default: return nullptr;
  }
}

}  // namespace acme::vec
