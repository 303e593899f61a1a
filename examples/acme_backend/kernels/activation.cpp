// acme activation kernels and their backward kernels.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <cmath>
#include <tuple>
#include <type_traits>

#include "math/nn_math.h"
#include "math/vec_tensor.h"

namespace acme::kernels {
using namespace acme::common;

namespace {
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2*pi)

bool gelu_is_tanh(const char* op, c10::string_view approximate) {
  FL_CHECK(approximate == "none" || approximate == "tanh", op,
             "approximate argument must be either none or tanh, got '", std::string(approximate), "'");
  return approximate == "tanh";
}

// erf without libm for float, so gelu loops vectorize: Abramowitz & Stegun
// 7.1.26 (|error| < 1.5e-7, well inside float32 tolerances) on acme's
// branch-free exp. double keeps std::erf.
template <typename M>
inline M erf_fast(M x) {
  if constexpr (std::is_same_v<M, float>) {
    const float ax = std::fabs(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float poly =
        ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
         0.254829592f) * t;
    return std::copysign(1.0f - poly * nn::exp_f32(-ax * ax), x);
  } else {
    return std::erf(x);
  }
}

// dtype checks shared by the backward kernels: grad and input promote.
at::ScalarType bwd_compute(const at::Tensor& grad, const at::Tensor& x) {
  return promote({&grad, &x});
}
}  // namespace

at::Tensor k_relu(const at::Tensor& self) {
  FL_CHECK_T(self.scalar_type() != at::kBool, "relu", self,
               "relu is not implemented for bool tensors");
  if (auto out = vec_unary_f32(self, vec::Unary::Relu); out.defined()) return out;
  return unary_kernel<kAllNoBool>("relu", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    // NaN stays NaN (x > 0 is false for NaN, so test the other way round)
    return [](M x) -> M { return x < M(0) ? M(0) : x; };
  });
}

at::Tensor k_threshold_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                const at::Scalar& threshold) {
  const char* op = "threshold_backward";
  return binary_kernel<kAllNoBool>(op, grad_output, self, bwd_compute(grad_output, self),
                                   [&threshold](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M th = threshold.to<M>();
    return [th](M g, M x) -> M { return x <= th ? M(0) : g; };
  });
}

// The two gelu forms get separate loops: a branch inside the element function
// keeps GCC from vectorizing it.
at::Tensor k_gelu(const at::Tensor& self, c10::string_view approximate) {
  const char* op = "gelu";
  const bool tanh_form = gelu_is_tanh(op, approximate);
  if (auto out = vec_unary_f32(self, tanh_form ? vec::Unary::GeluTanh : vec::Unary::Gelu); out.defined())
    return out;
  if (gelu_is_tanh(op, approximate)) {
    return unary_kernel<kFloating>(op, self, self.scalar_type(), [](auto tag) {
      using M = opmath_t<FL_T(tag)>;
      return [](M x) -> M {
        const M inner = M(kSqrt2OverPi) * (x + M(0.044715) * x * x * x);
        return M(0.5) * x * (M(1) + std::tanh(inner));
      };
    });
  }
  return unary_kernel<kFloating>(op, self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return M(0.5) * x * (M(1) + erf_fast(x / M(kSqrt2))); };
  });
}

at::Tensor k_gelu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                           c10::string_view approximate) {
  const char* op = "gelu_backward";
  const bool tanh_form = gelu_is_tanh(op, approximate);
  if (auto out = vec_binary_f32(grad_output, self, tanh_form ? vec::Binary::GeluTanhBackward
                                                             : vec::Binary::GeluBackward);
      out.defined())
    return out;
  const auto compute = bwd_compute(grad_output, self);
  if (gelu_is_tanh(op, approximate)) {
    return binary_kernel<kFloating>(op, grad_output, self, compute, [](auto tag) {
      using M = opmath_t<FL_T(tag)>;
      return [](M g, M x) -> M {
        const M x2 = x * x;
        const M inner = M(kSqrt2OverPi) * (x + M(0.044715) * x2 * x);
        const M t = std::tanh(inner);
        const M dinner = M(kSqrt2OverPi) * (M(1) + M(3 * 0.044715) * x2);
        return g * (M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * dinner);
      };
    });
  }
  return binary_kernel<kFloating>(op, grad_output, self, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x) -> M {
      const M cdf = M(0.5) * (M(1) + erf_fast(x / M(kSqrt2)));
      const M pdf = M(kInvSqrt2Pi) * nn::exp_fast(M(-0.5) * x * x);
      return g * (cdf + x * pdf);
    };
  });
}

at::Tensor k_silu(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Silu); out.defined()) return out;
  return unary_kernel<kFloating>("silu", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return x / (M(1) + std::exp(-x)); };
  });
}

at::Tensor k_silu_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  if (auto out = vec_binary_f32(grad_output, self, vec::Binary::SiluBackward); out.defined()) return out;
  return binary_kernel<kFloating>("silu_backward", grad_output, self,
                                  bwd_compute(grad_output, self), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x) -> M {
      const M s = M(1) / (M(1) + std::exp(-x));
      return g * s * (M(1) + x * (M(1) - s));
    };
  });
}

at::Tensor k_sigmoid(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Sigmoid); out.defined()) return out;
  return unary_kernel<kFloating>("sigmoid", self, float_compute(self.scalar_type()), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return M(1) / (M(1) + std::exp(-x)); };
  });
}

at::Tensor k_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& output) {
  return binary_kernel<kFloating>("sigmoid_backward", grad_output, output,
                                  bwd_compute(grad_output, output), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M y) -> M { return g * (M(1) - y) * y; };
  });
}

at::Tensor k_tanh(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Tanh); out.defined()) return out;
  return unary_kernel<kFloating>("tanh", self, float_compute(self.scalar_type()), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return std::tanh(x); };
  });
}

at::Tensor k_tanh_backward(const at::Tensor& grad_output, const at::Tensor& output) {
  return binary_kernel<kFloating>("tanh_backward", grad_output, output,
                                  bwd_compute(grad_output, output), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M y) -> M { return g * (M(1) - y * y); };
  });
}

at::Tensor k_leaky_relu(const at::Tensor& self, const at::Scalar& negative_slope) {
  if (self.scalar_type() == at::kFloat)
    if (auto out = vec_unary_f32(self, vec::Unary::LeakyRelu, negative_slope.to<float>()); out.defined())
      return out;
  return unary_kernel<kFloating>("leaky_relu", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M slope = negative_slope.to<M>();
    return [slope](M x) -> M { return x > M(0) ? x : x * slope; };
  });
}

at::Tensor k_leaky_relu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 const at::Scalar& negative_slope, bool self_is_result) {
  const char* op = "leaky_relu_backward";
  FL_CHECK(!self_is_result || negative_slope.to<double>() >= 0.0, op,
             "In-place leakyReLu backward calculation is triggered with a negative slope "
             "which is not supported.");
  return binary_kernel<kFloating>(op, grad_output, self, bwd_compute(grad_output, self), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M slope = negative_slope.to<M>();
    return [slope](M g, M x) -> M { return x > M(0) ? g : g * slope; };
  });
}

at::Tensor k_hardtanh(const at::Tensor& self, const at::Scalar& min_val, const at::Scalar& max_val) {
  FL_CHECK_T(self.scalar_type() != at::kByte ||
                   (min_val.to<double>() >= 0 && max_val.to<double>() >= 0),
               "hardtanh", self, "cannot do hardtanh on an unsigned type with negative limits");
  return unary_kernel<kAllNoBool>("hardtanh", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M lo = min_val.to<M>(), hi = max_val.to<M>();
    return [lo, hi](M x) -> M { return x < lo ? lo : (x > hi ? hi : x); };
  });
}

at::Tensor k_hardtanh_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Scalar& min_val, const at::Scalar& max_val) {
  return binary_kernel<kFloating>("hardtanh_backward", grad_output, self,
                                  bwd_compute(grad_output, self), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M lo = min_val.to<M>(), hi = max_val.to<M>();
    return [lo, hi](M g, M x) -> M { return (x <= lo || x >= hi) ? M(0) : g; };
  });
}

at::Tensor k_hardswish(const at::Tensor& self) {
  return unary_kernel<kFloating>("hardswish", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M {
      const M r = std::min(std::max(x + M(3), M(0)), M(6));
      return x * r / M(6);
    };
  });
}

at::Tensor k_hardswish_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  return binary_kernel<kFloating>("hardswish_backward", grad_output, self,
                                  bwd_compute(grad_output, self), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x) -> M {
      if (x < M(-3)) return M(0);
      if (x <= M(3)) return g * ((x / M(3)) + M(0.5));
      return g;
    };
  });
}

at::Tensor k_hardsigmoid(const at::Tensor& self) {
  return unary_kernel<kFloating>("hardsigmoid", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return std::min(std::max(x + M(3), M(0)), M(6)) / M(6); };
  });
}

at::Tensor k_hardsigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  return binary_kernel<kFloating>("hardsigmoid_backward", grad_output, self,
                                  bwd_compute(grad_output, self), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x) -> M { return (x > M(-3) && x < M(3)) ? g / M(6) : M(0); };
  });
}

at::Tensor k_threshold(const at::Tensor& self, const at::Scalar& threshold, const at::Scalar& value) {
  return unary_kernel<kAllNoBool>("threshold", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M th = threshold.to<M>(), v = value.to<M>();
    return [th, v](M x) -> M { return x <= th ? v : x; };
  });
}

at::Tensor k_elu(const at::Tensor& self, const at::Scalar& alpha, const at::Scalar& scale,
                 const at::Scalar& input_scale) {
  return unary_kernel<kFloating>("elu", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M negcoef = alpha.to<M>() * scale.to<M>(), poscoef = scale.to<M>(), inscale = input_scale.to<M>();
    return [=](M x) -> M { return x > M(0) ? x * poscoef : negcoef * std::expm1(x * inscale); };
  });
}

at::Tensor k_elu_backward(const at::Tensor& grad_output, const at::Scalar& alpha, const at::Scalar& scale,
                          const at::Scalar& input_scale, bool is_result, const at::Tensor& self_or_result) {
  const char* op = "elu_backward";
  FL_CHECK(!is_result || alpha.to<double>() >= 0.0, op,
             "In-place elu backward calculation is triggered with a negative slope which is not supported.");
  return binary_kernel<kFloating>(op, grad_output, self_or_result, bwd_compute(grad_output, self_or_result),
                                  [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M negcoef = alpha.to<M>() * scale.to<M>(), poscoef = scale.to<M>(), inscale = input_scale.to<M>();
    return [=](M g, M v) -> M {
      if (v > M(0)) return g * poscoef;
      // from the result y = negcoef * (exp(x * s) - 1): dy/dx = s * (y + negcoef)
      return is_result ? g * inscale * (v + negcoef) : g * inscale * negcoef * std::exp(v * inscale);
    };
  });
}

at::Tensor k_softplus(const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold) {
  if (self.scalar_type() == at::kFloat)
    if (auto out = vec_unary_f32(self, vec::Unary::Softplus, beta.to<float>(), threshold.to<float>());
        out.defined())
      return out;
  return unary_kernel<kFloating>("softplus", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M b = beta.to<M>(), th = threshold.to<M>();
    return [=](M x) -> M { return x * b > th ? x : std::log1p(std::exp(x * b)) / b; };
  });
}

at::Tensor k_softplus_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& beta,
                               const at::Scalar& threshold) {
  return binary_kernel<kFloating>("softplus_backward", grad_output, self, bwd_compute(grad_output, self),
                                  [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M b = beta.to<M>(), th = threshold.to<M>();
    return [=](M g, M x) -> M {
      if (x * b > th) return g;
      const M z = std::exp(x * b);
      return g * z / (z + M(1));
    };
  });
}

at::Tensor k_mish(const at::Tensor& self) {
  if (auto out = vec_unary_f32(self, vec::Unary::Mish); out.defined()) return out;
  return unary_kernel<kFloating>("mish", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return x * std::tanh(std::log1p(std::exp(x))); };
  });
}

at::Tensor k_mish_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  if (auto out = vec_binary_f32(grad_output, self, vec::Binary::MishBackward); out.defined()) return out;
  return binary_kernel<kFloating>("mish_backward", grad_output, self, bwd_compute(grad_output, self),
                                  [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x) -> M {
      const M sig = M(1) / (M(1) + std::exp(-x));
      const M t = std::tanh(std::log1p(std::exp(x)));
      return g * (t + x * sig * (M(1) - t * t));
    };
  });
}

namespace {
int64_t glu_dim(const char* op, const at::Tensor& self, int64_t dim) {
  FL_CHECK_T(self.dim() > 0, op, self, "glu does not support scalars because halving size must be even");
  const int64_t n = self.dim();
  FL_CHECK_INDEX(dim >= -n && dim < n, op, "dimension out of range (expected to be in range of [", -n,
                   ", ", n - 1, "], but got ", dim, ")");
  if (dim < 0) dim += n;
  FL_CHECK_T(self.size(dim) % 2 == 0, op, self, "Halving dimension must be even, but dimension ", dim,
               " is size ", self.size(dim));
  return dim;
}
}  // namespace

at::Tensor k_glu(const at::Tensor& self, int64_t dim) {
  const char* op = "glu";
  dim = glu_dim(op, self, dim);
  const int64_t h = self.size(dim) / 2;
  const at::Tensor a = self.narrow(dim, 0, h), b = self.narrow(dim, h, h);
  return binary_kernel<kFloating>(op, a, b, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> M { return x / (M(1) + std::exp(-y)); };
  });
}

at::Tensor k_glu_backward(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim) {
  const char* op = "glu_backward";
  dim = glu_dim(op, self, dim);
  const int64_t h = self.size(dim) / 2;
  const at::Tensor a = self.narrow(dim, 0, h), b = self.narrow(dim, h, h);
  // d/da = g * sig(b) ; d/db = g * a * sig(b) * (1 - sig(b))
  at::Tensor ga = ternary_kernel<kFloating>(op, grad_output, a, b, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M, M y) -> M { return g / (M(1) + std::exp(-y)); };
  });
  at::Tensor gb = ternary_kernel<kFloating>(op, grad_output, a, b, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x, M y) -> M {
      const M s = M(1) / (M(1) + std::exp(-y));
      return g * x * s * (M(1) - s);
    };
  });
  at::Tensor out = at::empty(self.sizes(), self.options());
  at::Tensor lo = out.narrow(dim, 0, h), hi = out.narrow(dim, h, h);
  convert_into(op, lo, ga);
  convert_into(op, hi, gb);
  return out;
}

at::Tensor k_logit_backward(const at::Tensor& grad_output, const at::Tensor& self, std::optional<double> eps) {
  return binary_kernel<kFloating>("logit_backward", grad_output, self, bwd_compute(grad_output, self),
                                  [eps](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const bool clamp = eps.has_value();
    const M lo = clamp ? static_cast<M>(*eps) : M(0), hi = M(1) - lo;
    return [=](M g, M x) -> M {
      if (clamp && (x < lo || x > hi)) return M(0);
      return g / (x * (M(1) - x));
    };
  });
}

at::Tensor k_hardshrink(const at::Tensor& self, const at::Scalar& lambd) {
  return unary_kernel<kFloating>("hardshrink", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M l = lambd.to<M>();
    return [l](M x) -> M { return (x >= -l && x <= l) ? M(0) : x; };
  });
}

at::Tensor k_softshrink(const at::Tensor& self, const at::Scalar& lambd) {
  return unary_kernel<kFloating>("softshrink", self, self.scalar_type(), [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M l = lambd.to<M>();
    return [l](M x) -> M { return x > l ? x - l : (x < -l ? x + l : M(0)); };
  });
}

at::Tensor k__prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  return binary_kernel<kFloating>("_prelu_kernel", self, weight, bwd_compute(self, weight), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M w) -> M { return x > M(0) ? x : w * x; };
  });
}

std::tuple<at::Tensor, at::Tensor> k__prelu_kernel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                            const at::Tensor& weight) {
  const char* op = "_prelu_kernel_backward";
  const auto compute = promote({&grad_output, &self, &weight});
  at::Tensor gi = ternary_kernel<kFloating>(op, grad_output, self, weight, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x, M w) -> M { return x > M(0) ? g : w * g; };
  });
  at::Tensor gw = ternary_kernel<kFloating>(op, grad_output, self, weight, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M g, M x, M) -> M { return x > M(0) ? M(0) : x * g; };
  });
  return {gi, gw};
}

// Backward of hardshrink / softshrink: the gradient passes where |x| > lambda
// (torch's CPU rule, inclusive bounds give 0).
at::Tensor k_hardshrink_backward(const at::Tensor& grad_out, const at::Tensor& self,
                                 const at::Scalar& lambd) {
  return binary_kernel<kFloating>("hardshrink_backward", grad_out, self, bwd_compute(grad_out, self),
                                  [&lambd](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M l = lambd.to<M>();
    return [l](M g, M x) -> M { return (x >= -l && x <= l) ? M(0) : g; };
  });
}

at::Tensor k_softshrink_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 const at::Scalar& lambd) {
  return binary_kernel<kFloating>("softshrink_backward", grad_output, self,
                                  bwd_compute(grad_output, self), [&lambd](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M l = lambd.to<M>();
    return [l](M g, M x) -> M { return (x >= -l && x <= l) ? M(0) : g; };
  });
}

// log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)), stable for large |x|.
// The second result is torch's CPU `buffer`, exp(-|x|), which the CPU
// backward reads; the backward below does the same, and recomputes it from
// the input when given the empty buffer other devices pass.
std::tuple<at::Tensor, at::Tensor> k_log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor out = unary_kernel<kFloating>("log_sigmoid_forward", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return std::min(x, M(0)) - std::log1p(std::exp(-std::abs(x))); };
  });
  at::Tensor buffer = unary_kernel<kFloating>("log_sigmoid_forward", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> M { return std::exp(-std::abs(x)); };
  });
  return {out, buffer};
}

at::Tensor k_log_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                  const at::Tensor& buffer) {
  const char* op = "log_sigmoid_backward";
  const at::Tensor z = buffer.defined() && buffer.numel() == self.numel()
                           ? buffer
                           : std::get<1>(k_log_sigmoid_forward(self));
  const auto compute = promote({&grad_output, &self, &z});
  // d/dx = 1 - sigmoid(x): z / (1 + z) for x >= 0, 1 - z / (1 + z) for x < 0
  return ternary_kernel<kFloating>(op, self, z, grad_output, compute, [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M b, M g) -> M {
      const bool neg = x < M(0);
      const M max_deriv = neg ? M(1) : M(0);
      const M sign = neg ? M(1) : -M(1);
      return (max_deriv - sign * (b / (M(1) + b))) * g;
    };
  });
}

}  // namespace acme::kernels
