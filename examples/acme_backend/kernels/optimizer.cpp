// acme optimizer kernels: the _foreach_* ops used by torch.optim's foreach
// path (each applies acme's pointwise kernel to every tensor of the list),
// the fused SGD / AdamW steps (one pass over each parameter), and AMP's
// non-finite check + unscale.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <cmath>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {
void check_lists(const char* op, size_t n, size_t m, const char* what) {
  FL_CHECK(n == m, op, "Tensor lists must have the same number of tensors, got ", n, " and ", m,
             " (", what, ")");
}

template <class F>
std::vector<at::Tensor> each(at::TensorList self, F f) {
  std::vector<at::Tensor> out;
  out.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) out.push_back(f(i));
  return out;
}
}  // namespace

std::vector<at::Tensor> k__foreach_add_List(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  check_lists("_foreach_add.List", self.size(), other.size(), "other");
  return each(self, [&](size_t i) { return k_add_Tensor(self[i], other[i], alpha); });
}

std::vector<at::Tensor> k__foreach_add_Scalar(at::TensorList self, const at::Scalar& scalar) {
  return each(self, [&](size_t i) { return k_add_Scalar(self[i], scalar, 1); });
}

std::vector<at::Tensor> k__foreach_add_Tensor(at::TensorList self, const at::Tensor& other, const at::Scalar& alpha) {
  FL_CHECK_T(other.dim() == 0 && other.numel() == 1, "_foreach_add.Tensor", other,
               "scalar tensor expected to be 0 dim but it has ", other.dim(), " dimensions and ",
               other.numel(), " elements.");
  return each(self, [&](size_t i) { return k_add_Tensor(self[i], other, alpha); });
}

std::vector<at::Tensor> k__foreach_sub_List(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
  check_lists("_foreach_sub.List", self.size(), other.size(), "other");
  return each(self, [&](size_t i) { return k_sub_Tensor(self[i], other[i], alpha); });
}

std::vector<at::Tensor> k__foreach_mul_Scalar(at::TensorList self, const at::Scalar& scalar) {
  return each(self, [&](size_t i) { return k_mul_Scalar(self[i], scalar); });
}

std::vector<at::Tensor> k__foreach_mul_List(at::TensorList self, at::TensorList other) {
  check_lists("_foreach_mul.List", self.size(), other.size(), "other");
  return each(self, [&](size_t i) { return k_mul_Tensor(self[i], other[i]); });
}

std::vector<at::Tensor> k__foreach_mul_Tensor(at::TensorList self, const at::Tensor& other) {
  FL_CHECK_T(other.dim() == 0 && other.numel() == 1, "_foreach_mul.Tensor", other,
               "scalar tensor expected to be 0 dim but it has ", other.dim(), " dimensions and ",
               other.numel(), " elements.");
  return each(self, [&](size_t i) { return k_mul_Tensor(self[i], other); });
}

std::vector<at::Tensor> k__foreach_div_List(at::TensorList self, at::TensorList other) {
  check_lists("_foreach_div.List", self.size(), other.size(), "other");
  return each(self, [&](size_t i) { return k_div_Tensor(self[i], other[i]); });
}

std::vector<at::Tensor> k__foreach_div_ScalarList(at::TensorList self, at::ArrayRef<at::Scalar> scalars) {
  check_lists("_foreach_div.ScalarList", self.size(), scalars.size(), "scalars");
  return each(self, [&](size_t i) { return k_div_Scalar(self[i], scalars[i]); });
}

std::vector<at::Tensor> k__foreach_addcmul_Scalar(at::TensorList self, at::TensorList tensor1,
                                                  at::TensorList tensor2, const at::Scalar& value) {
  check_lists("_foreach_addcmul.Scalar", self.size(), tensor1.size(), "tensor1");
  check_lists("_foreach_addcmul.Scalar", self.size(), tensor2.size(), "tensor2");
  return each(self, [&](size_t i) { return k_addcmul(self[i], tensor1[i], tensor2[i], value); });
}

std::vector<at::Tensor> k__foreach_addcdiv_Scalar(at::TensorList self, at::TensorList tensor1,
                                                  at::TensorList tensor2, const at::Scalar& value) {
  check_lists("_foreach_addcdiv.Scalar", self.size(), tensor1.size(), "tensor1");
  check_lists("_foreach_addcdiv.Scalar", self.size(), tensor2.size(), "tensor2");
  return each(self, [&](size_t i) { return k_addcdiv(self[i], tensor1[i], tensor2[i], value); });
}

std::vector<at::Tensor> k__foreach_addcdiv_ScalarList(at::TensorList self, at::TensorList tensor1,
                                                      at::TensorList tensor2, at::ArrayRef<at::Scalar> scalars) {
  check_lists("_foreach_addcdiv.ScalarList", self.size(), tensor1.size(), "tensor1");
  check_lists("_foreach_addcdiv.ScalarList", self.size(), tensor2.size(), "tensor2");
  check_lists("_foreach_addcdiv.ScalarList", self.size(), scalars.size(), "scalars");
  return each(self, [&](size_t i) { return k_addcdiv(self[i], tensor1[i], tensor2[i], scalars[i]); });
}

std::vector<at::Tensor> k__foreach_lerp_Scalar(at::TensorList self, at::TensorList tensors1, const at::Scalar& weight) {
  check_lists("_foreach_lerp.Scalar", self.size(), tensors1.size(), "tensors1");
  return each(self, [&](size_t i) { return k_lerp_Scalar(self[i], tensors1[i], weight); });
}

std::vector<at::Tensor> k__foreach_sqrt(at::TensorList self) {
  return each(self, [&](size_t i) { return k_sqrt(self[i]); });
}

std::vector<at::Tensor> k__foreach_maximum_List(at::TensorList self, at::TensorList other) {
  check_lists("_foreach_maximum.List", self.size(), other.size(), "other");
  return each(self, [&](size_t i) { return k_maximum(self[i], other[i]); });
}

std::vector<at::Tensor> k__foreach_norm_Scalar(at::TensorList self, const at::Scalar& ord,
                                               std::optional<at::ScalarType> dtype) {
  return each(self, [&](size_t i) { return k_linalg_vector_norm(self[i], ord, std::nullopt, false, dtype); });
}

std::vector<at::Tensor> k__foreach_zero(at::TensorList self) {
  return each(self, [&](size_t i) {
    at::Tensor z = at::empty(self[i].sizes(), self[i].options());
    if (z.numel() == 0) return z;
    dispatch<kAll>("_foreach_zero", z.device(), z.scalar_type(), [&](auto tag) {
      using T = FL_T(tag);
      launch(z, [addr = z.data_ptr(), n = z.numel()] {
        T* p = static_cast<T*>(device_view(addr));
        for (int64_t k = 0; k < n; ++k) p[k] = cvt<T>(0);
      });
    });
    return z;
  });
}

namespace {
// The value of a 1-element tensor (device or CPU) as double, in a device part:
// the fused steps read AMP's found_inf and grad_scale and the step counts where
// they live, as CUDA's fused kernels do, so the host never waits for them.
// `fallback` when the tensor is undefined.
double value_of(const DeviceTensor& t, double fallback) {
  if (!t.defined()) return fallback;
  double v = fallback;
  dispatch<kAll>("value_of", t.device(), t.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    v = static_cast<double>(cvt<double>(*t.const_data_ptr<T>()));
  });
  return v;
}

void check_one_element(const char* op, const std::optional<at::Tensor>& t, const char* what) {
  if (t.has_value() && t->defined())
    FL_CHECK_T(t->numel() == 1, op, *t, what, " must have one element, got shape ", t->sizes());
}
}  // namespace

void k__fused_sgd_(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
                   double weight_decay, double momentum, double lr, double dampening, bool nesterov,
                   bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                   const std::optional<at::Tensor>& found_inf) {
  const char* op = "_fused_sgd_";
  check_lists(op, self.size(), grads.size(), "grads");
  const bool use_buf = momentum != 0.0;
  if (use_buf) check_lists(op, self.size(), momentum_buffer_list.size(), "momentum_buffer_list");
  check_one_element(op, found_inf, "found_inf");
  check_one_element(op, grad_scale, "grad_scale");
  const DeviceTensor found(found_inf), scale(grad_scale);
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor& p = self[i];
    const at::Tensor& g = grads[i];
    FL_CHECK_T(g.sizes() == p.sizes() && g.scalar_type() == p.scalar_type(), op, g,
                 "grad must match its parameter in shape and dtype");
    StridedIter it(p.sizes());
    it.add(p);
    it.add(g);
    if (use_buf) it.add(momentum_buffer_list[i]);
    it.build();
    if (p.numel() == 0) continue;
    dispatch<kFloating>(op, p.device(), p.scalar_type(), [&](auto tag) {
      using T = FL_T(tag);
      using M = opmath_t<T>;
      launch(p, [it, found, scale, use_buf, weight_decay, momentum, lr, dampening, nesterov,
                 maximize, is_first_step] {
      if (value_of(found, 0.0) == 1.0) return;  // AMP found infs/NaNs: no step
      const double inv_scale = scale.defined() ? 1.0 / value_of(scale, 1.0) : 1.0;
      it.for_each([&](char* const* ptr, const int64_t* s, int64_t n) {
        for (int64_t k = 0; k < n; ++k) {
          T* pp = reinterpret_cast<T*>(ptr[0] + k * s[0]);
          T* gp = reinterpret_cast<T*>(ptr[1] + k * s[1]);
          M grad = static_cast<M>(*gp);
          if (inv_scale != 1.0) {
            grad *= static_cast<M>(inv_scale);
            *gp = cvt<T>(grad);  // the unscaled gradient is stored back, as torch's fused step
          }
          if (maximize) grad = -grad;
          const M param = static_cast<M>(*pp);
          if (weight_decay != 0.0) grad += static_cast<M>(weight_decay) * param;
          if (use_buf) {
            T* bp = reinterpret_cast<T*>(ptr[2] + k * s[2]);
            M buf = is_first_step ? grad
                                  : static_cast<M>(momentum) * static_cast<M>(*bp) +
                                        static_cast<M>(1.0 - dampening) * grad;
            *bp = cvt<T>(buf);
            grad = nesterov ? grad + static_cast<M>(momentum) * buf : buf;
          }
          *pp = cvt<T>(param - static_cast<M>(lr) * grad);
        }
      });
      });
    });
  }
}

void k__fused_adamw_(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                     at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1,
                     double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                     const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const char* op = "_fused_adamw_";
  check_lists(op, self.size(), grads.size(), "grads");
  check_lists(op, self.size(), exp_avgs.size(), "exp_avgs");
  check_lists(op, self.size(), exp_avg_sqs.size(), "exp_avg_sqs");
  check_lists(op, self.size(), state_steps.size(), "state_steps");
  if (amsgrad) check_lists(op, self.size(), max_exp_avg_sqs.size(), "max_exp_avg_sqs");
  check_one_element(op, found_inf, "found_inf");
  check_one_element(op, grad_scale, "grad_scale");
  const DeviceTensor found(found_inf), scale(grad_scale);
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor& p = self[i];
    FL_CHECK_T(grads[i].sizes() == p.sizes() && grads[i].scalar_type() == p.scalar_type(), op, grads[i],
                 "grad must match its parameter in shape and dtype");
    FL_CHECK_T(state_steps[i].numel() == 1, op, state_steps[i], "a step count must have one element");
    const DeviceTensor step_count(state_steps[i]);
    StridedIter it(p.sizes());
    it.add(p);
    it.add(grads[i]);
    it.add(exp_avgs[i]);
    it.add(exp_avg_sqs[i]);
    if (amsgrad) it.add(max_exp_avg_sqs[i]);
    it.build();
    if (p.numel() == 0) continue;
    dispatch<kFloating>(op, p.device(), p.scalar_type(), [&](auto tag) {
      using T = FL_T(tag);
      using M = opmath_t<T>;
      launch(p, [it, found, scale, step_count, lr, beta1, beta2, weight_decay, eps, amsgrad,
                 maximize] {
      if (value_of(found, 0.0) == 1.0) return;  // AMP found infs/NaNs: no step
      const double inv_scale = scale.defined() ? 1.0 / value_of(scale, 1.0) : 1.0;
      // the optimizer has already incremented the step
      const double step = value_of(step_count, 0.0);
      const double bc1 = 1.0 - std::pow(beta1, step);
      const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
      const double step_size = lr / bc1;
      const M b1 = static_cast<M>(beta1), b2 = static_cast<M>(beta2);
      it.for_each([&](char* const* ptr, const int64_t* s, int64_t n) {
        for (int64_t k = 0; k < n; ++k) {
          T* pp = reinterpret_cast<T*>(ptr[0] + k * s[0]);
          T* gp = reinterpret_cast<T*>(ptr[1] + k * s[1]);
          T* ap = reinterpret_cast<T*>(ptr[2] + k * s[2]);
          T* sp = reinterpret_cast<T*>(ptr[3] + k * s[3]);
          M grad = static_cast<M>(*gp);
          if (inv_scale != 1.0) {
            grad *= static_cast<M>(inv_scale);
            *gp = cvt<T>(grad);
          }
          if (maximize) grad = -grad;
          M param = static_cast<M>(*pp);
          param *= static_cast<M>(1.0 - lr * weight_decay);  // decoupled weight decay
          const M avg = b1 * static_cast<M>(*ap) + (M(1) - b1) * grad;
          const M sq = b2 * static_cast<M>(*sp) + (M(1) - b2) * grad * grad;
          *ap = cvt<T>(avg);
          *sp = cvt<T>(sq);
          M second = sq;
          if (amsgrad) {
            T* mp = reinterpret_cast<T*>(ptr[4] + k * s[4]);
            const M mx = std::max(static_cast<M>(*mp), sq);
            *mp = cvt<T>(mx);
            second = mx;
          }
          const M denom = std::sqrt(second) / static_cast<M>(bc2_sqrt) + static_cast<M>(eps);
          *pp = cvt<T>(param - static_cast<M>(step_size) * avg / denom);
        }
      });
      });
    });
  }
}

void k__amp_foreach_non_finite_check_and_unscale_(at::TensorList self, at::Tensor& found_inf,
                                                  const at::Tensor& inv_scale) {
  const char* op = "_amp_foreach_non_finite_check_and_unscale_";
  FL_CHECK_T(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat, op, found_inf,
               "found_inf must be a 1-element float32 tensor");
  FL_CHECK_T(inv_scale.numel() == 1 && inv_scale.scalar_type() == at::kFloat, op, inv_scale,
               "inv_scale must be a 1-element float32 tensor");
  // Read and written where they live: the host never waits (as CUDA's kernel).
  const DeviceTensor inv_dev(inv_scale), found_dev(found_inf);
  for (const at::Tensor& t : self) {
    if (t.numel() == 0) continue;
    StridedIter it(t.sizes());
    it.add(t);
    it.build();
    dispatch<kFloating>(op, t.device(), t.scalar_type(), [&](auto tag) {
      using T = FL_T(tag);
      using M = opmath_t<T>;
      launch(t, [it, inv_dev, found_dev] {
        const float inv = *inv_dev.const_data_ptr<float>();
        bool found = false;
        it.for_each([&](char* const* ptr, const int64_t* s, int64_t n) {
          for (int64_t k = 0; k < n; ++k) {
            T* v = reinterpret_cast<T*>(ptr[0] + k * s[0]);
            const M x = static_cast<M>(*v);
            if (!std::isfinite(static_cast<double>(x))) found = true;
            *v = cvt<T>(x * static_cast<M>(inv));
          }
        });
        if (found) *found_dev.data_ptr<float>() = 1.0f;
      });
    });
  }
}

}  // namespace acme::kernels
