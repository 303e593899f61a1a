// acme ternary / parameterized pointwise kernels: where, addcmul, addcdiv,
// lerp, clamp, nan_to_num.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <cmath>
#include <limits>

namespace acme::kernels {
using namespace acme::common;

at::Tensor k_where_self(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const char* op = "where.self";
  FL_CHECK_T(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte, op,
               condition, "where expected condition to be a boolean tensor");
  const auto compute = promote({&self, &other});
  auto shape = broadcast_shape(op, {&condition, &self, &other});
  at::Tensor out = alloc_output(op, {&self, &other, &condition}, shape, compute);
  at::Tensor cond = cast(op, condition, at::kBool);
  at::Tensor a = cast(op, self, compute);
  at::Tensor b = cast(op, other, compute);
  StridedIter it(out.sizes());
  it.add(out);
  it.add(cond);
  it.add(a);
  it.add(b);
  it.build();
  if (out.numel() == 0) return out;
  dispatch<kAll>(op, out.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [it] { map3<T, bool, T, T>(it, [](bool c, T x, T y) { return c ? x : y; }); });
  });
  return out;
}

// Element functors and checks shared by a functional kernel and its in-place kernel.
namespace {

at::ScalarType addcmul_compute(const char* op, const at::Tensor& self, const at::Tensor& tensor1,
                               const at::Tensor& tensor2, const at::Scalar& value) {
  const auto compute = promote({&self, &tensor1, &tensor2});
  if (c10::isIntegralType(compute, true)) {
    FL_CHECK(!value.isFloatingPoint(), op,
               "for integer inputs, value must be an integer (dtype ", dtype_name(compute), ")");
  }
  return compute;
}

auto addcmul_body(const at::Scalar& value) {
  return [&value](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M v = value.to<M>();
    return [v](M s, M a, M b) -> M { return s + v * a * b; };
  };
}

at::ScalarType addcdiv_compute(const char* op, const at::Tensor& self, const at::Tensor& tensor1,
                               const at::Tensor& tensor2) {
  FL_CHECK(!c10::isIntegralType(tensor1.scalar_type(), true) ||
                 !c10::isIntegralType(tensor2.scalar_type(), true),
             op,
             "Integer division with addcdiv is no longer supported, and in a future release "
             "addcdiv will perform a true division of tensor1 and tensor2.");
  return promote({&self, &tensor1, &tensor2});
}

auto addcdiv_body(const at::Scalar& value) {
  return [&value](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M v = value.to<M>();
    return [v](M s, M a, M b) -> M { return s + v * (a / b); };
  };
}

}  // namespace

at::Tensor k_addcmul(const at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2,
                     const at::Scalar& value) {
  const char* op = "addcmul";
  const auto compute = addcmul_compute(op, self, tensor1, tensor2, value);
  return ternary_kernel<kAllNoBool>(op, self, tensor1, tensor2, compute, addcmul_body(value));
}

bool k_addcmul_(at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2,
                const at::Scalar& value) {
  const char* op = "addcmul_";
  const auto compute = addcmul_compute(op, self, tensor1, tensor2, value);
  return ternary_inplace<kAllNoBool>(op, self, tensor1, tensor2, compute, addcmul_body(value));
}

at::Tensor k_addcdiv(const at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2,
                     const at::Scalar& value) {
  const char* op = "addcdiv";
  const auto compute = addcdiv_compute(op, self, tensor1, tensor2);
  return ternary_kernel<kFloating>(op, self, tensor1, tensor2, compute, addcdiv_body(value));
}

bool k_addcdiv_(at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2,
                const at::Scalar& value) {
  const char* op = "addcdiv_";
  const auto compute = addcdiv_compute(op, self, tensor1, tensor2);
  return ternary_inplace<kFloating>(op, self, tensor1, tensor2, compute, addcdiv_body(value));
}

namespace {
// torch's lerp: the two-sided form keeps lerp(a, b, 1) == b exactly.
template <class M>
inline M lerp_value(M s, M e, M w) {
  const M d = e - s;
  return std::abs(w) < M(0.5) ? s + w * d : e - d * (M(1) - w);
}

void check_lerp_dtypes(const char* op, const at::Tensor& self, const at::Tensor& end) {
  FL_CHECK_T(self.scalar_type() == end.scalar_type(), op, self, "expected dtype ",
               dtype_name(self.scalar_type()), " for `end` but got dtype ",
               dtype_name(end.scalar_type()));
}
}  // namespace

namespace {
auto lerp_scalar_body(const at::Scalar& weight) {
  return [&weight](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M w = weight.to<M>();
    return [w](M s, M e) -> M { return lerp_value<M>(s, e, w); };
  };
}
}  // namespace

at::Tensor k_lerp_Scalar(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  const char* op = "lerp.Scalar";
  check_lerp_dtypes(op, self, end);
  return binary_kernel<kFloating>(op, self, end, self.scalar_type(), lerp_scalar_body(weight));
}

bool k_lerp__Scalar(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  const char* op = "lerp_.Scalar";
  check_lerp_dtypes(op, self, end);
  return binary_inplace<kFloating>(op, self, end, self.scalar_type(), lerp_scalar_body(weight));
}

at::Tensor k_lerp_Tensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  const char* op = "lerp.Tensor";
  check_lerp_dtypes(op, self, end);
  FL_CHECK_T(self.scalar_type() == weight.scalar_type(), op, self, "expected dtype ",
               dtype_name(self.scalar_type()), " for `weight` but got dtype ",
               dtype_name(weight.scalar_type()));
  return ternary_kernel<kFloating>(op, self, end, weight, self.scalar_type(), [](auto) {
    return [](auto s, auto e, auto w) { return lerp_value<decltype(s)>(s, e, w); };
  });
}

namespace {
// clamp keeps NaN inputs NaN; when min > max the result is max (as in torch).
template <class M>
inline M clamp_value(M x, bool has_lo, M lo, bool has_hi, M hi) {
  if constexpr (std::is_floating_point_v<M>) {
    if (std::isnan(x)) return x;
  }
  if (has_lo && x < lo) x = lo;
  if (has_hi && x > hi) x = hi;
  return x;
}

at::Tensor clamp_scalar(const char* op, const at::Tensor& self, const std::optional<at::Scalar>& min,
                        const std::optional<at::Scalar>& max) {
  FL_CHECK(min.has_value() || max.has_value(), op,
             "At least one of 'min' or 'max' must not be None");
  const auto compute = promote({&self}, {min ? &*min : nullptr, max ? &*max : nullptr});
  return unary_kernel<kAllNoBool>(op, self, compute, [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const bool has_lo = min.has_value(), has_hi = max.has_value();
    const M lo = has_lo ? min->to<M>() : M(0);
    const M hi = has_hi ? max->to<M>() : M(0);
    // a NaN bound makes every element NaN, as in torch
    bool nan_bound = false;
    if constexpr (std::is_floating_point_v<M>) {
      nan_bound = (has_lo && std::isnan(lo)) || (has_hi && std::isnan(hi));
    }
    return [=](M x) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (nan_bound) return std::numeric_limits<M>::quiet_NaN();
      }
      return clamp_value<M>(x, has_lo, lo, has_hi, hi);
    };
  });
}
}  // namespace

at::Tensor k_clamp(const at::Tensor& self, const std::optional<at::Scalar>& min,
                   const std::optional<at::Scalar>& max) {
  return clamp_scalar("clamp", self, min, max);
}

at::Tensor k_clamp_min(const at::Tensor& self, const at::Scalar& min) {
  return clamp_scalar("clamp_min", self, min, std::nullopt);
}

at::Tensor k_clamp_max(const at::Tensor& self, const at::Scalar& max) {
  return clamp_scalar("clamp_max", self, std::nullopt, max);
}

at::Tensor k_clamp_Tensor(const at::Tensor& self, const std::optional<at::Tensor>& min,
                          const std::optional<at::Tensor>& max) {
  const char* op = "clamp.Tensor";
  const bool has_lo = min.has_value() && min->defined();
  const bool has_hi = max.has_value() && max->defined();
  FL_CHECK(has_lo || has_hi, op, "At least one of 'min' or 'max' must not be None");
  // A missing bound is replaced by the tensor itself (clamp(x, x, hi) == clamp(x, None, hi)).
  const at::Tensor& lo = has_lo ? *min : self;
  const at::Tensor& hi = has_hi ? *max : self;
  const auto compute = promote({&self, has_lo ? &lo : nullptr, has_hi ? &hi : nullptr});
  return ternary_kernel<kAll>(op, self, lo, hi, compute, [&](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [=](M x, M l, M h) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (std::isnan(x)) return x;
        if ((has_lo && std::isnan(l)) || (has_hi && std::isnan(h)))
          return std::numeric_limits<M>::quiet_NaN();
      }
      return clamp_value<M>(x, has_lo, l, has_hi, h);
    };
  });
}

at::Tensor k_nan_to_num(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                        std::optional<double> neginf) {
  const char* op = "nan_to_num";
  if (!c10::isFloatingType(self.scalar_type())) {
    // integers have no NaN/inf: a copy, as torch returns
    return unary_kernel<kIntegralAndBool>(op, self, self.scalar_type(), [](auto tag) {
      using M = opmath_t<FL_T(tag)>;
      return [](M x) -> M { return x; };
    });
  }
  return unary_kernel<kFloating>(op, self, self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    // defaults: the largest / lowest finite value of the *storage* dtype
    const M nan_v = static_cast<M>(nan.value_or(0.0));
    const M pos_v = posinf ? static_cast<M>(*posinf)
                           : static_cast<M>(static_cast<float>(std::numeric_limits<T>::max()));
    const M neg_v = neginf ? static_cast<M>(*neginf)
                           : static_cast<M>(static_cast<float>(std::numeric_limits<T>::lowest()));
    const M pos_d = posinf ? pos_v : (std::is_same_v<T, double> ? std::numeric_limits<M>::max() : pos_v);
    const M neg_d = neginf ? neg_v : (std::is_same_v<T, double> ? std::numeric_limits<M>::lowest() : neg_v);
    return [=](M x) -> M {
      if (std::isnan(x)) return nan_v;
      if (std::isinf(x)) return x > M(0) ? pos_d : neg_d;
      return x;
    };
  });
}

// clamp_min / clamp_max with a tensor bound: torch computes them as
// maximum / minimum (NaN in either operand gives NaN), with type promotion.
at::Tensor k_clamp_min_Tensor(const at::Tensor& self, const at::Tensor& min) {
  return binary_kernel<kAllNoBool>("clamp_min.Tensor", self, min, promote({&self, &min}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M lo) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (std::isnan(x) || std::isnan(lo)) return std::numeric_limits<M>::quiet_NaN();
      }
      return x < lo ? lo : x;
    };
  });
}

at::Tensor k_clamp_max_Tensor(const at::Tensor& self, const at::Tensor& max) {
  return binary_kernel<kAllNoBool>("clamp_max.Tensor", self, max, promote({&self, &max}), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M hi) -> M {
      if constexpr (std::is_floating_point_v<M>) {
        if (std::isnan(x) || std::isnan(hi)) return std::numeric_limits<M>::quiet_NaN();
      }
      return x > hi ? hi : x;
    };
  });
}

}  // namespace acme::kernels
