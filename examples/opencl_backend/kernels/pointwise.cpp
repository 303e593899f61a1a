// Host parts of the pointwise kernels (device parts: kernels/pointwise.cl).
// float32 only (device.yaml narrows these ops): other dtypes never reach them.
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>

#include <string>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

// A 0-dim CPU tensor (a wrapped Python number) lives in host memory: its value
// goes to the kernel as an argument, never through a device address.
bool host_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

at::Tensor binary(const char* op, const char* kernel, const at::Tensor& self, const at::Tensor& other,
                  const float* alpha) {
  if (host_scalar(other) || host_scalar(self)) {
    // x + 2, 2 * x: the number goes to the kernel as an argument (a copy to the
    // device would make the host wait for it).
    const bool first = host_scalar(self);
    const at::Tensor& dev = first ? other : self;
    const float value = (first ? self : other).item().toFloat();
    const std::string k = kernel;
    int code = k.rfind("add", 0) == 0 ? 0 : k.rfind("sub", 0) == 0 ? 1 : k.rfind("mul", 0) == 0 ? 2
             : k.rfind("div", 0) == 0 ? 3 : -1;
    if (first && code == 1) code = 4;        // s - alpha * x
    else if (first && code == 3) code = 5;   // s / x
    if (code < 0 || (first && code == 0 && alpha)) {
      // other ops, and s + alpha * x (not x + alpha * s): a one-element device
      // tensor broadcast by stride 0
      at::Tensor moved = (first ? self : other).to(dev.options());
      return first ? binary(op, kernel, moved, other, alpha) : binary(op, kernel, self, moved, alpha);
    }
    at::Tensor out = at::empty(dev.sizes(), dev.options());
    const int64_t n = out.numel();
    if (n == 0) return out;
    const runtime::Layout L = broadcast_layout(op, dev.sizes(), {&dev});
    launch(op, out.device().index(), "kernels/pointwise.cl", "scalar_op_f32", runtime::Range1D(n),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(dev.const_data_ptr()), runtime::value_arg(L),
            runtime::value_arg<std::uint64_t>(n), runtime::value_arg(value),
            runtime::value_arg(alpha ? *alpha : 1.0f), runtime::value_arg<std::int32_t>(code),
            runtime::value_arg<std::int32_t>(alpha ? 0 : 1)});
    return out;
  }
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), other.sizes());
  at::Tensor out = at::empty(shape, self.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = broadcast_layout(op, shape, {&self, &other});
  const int device = out.device().index();
  if (alpha)
    launch(op, device, "kernels/pointwise.cl", kernel, runtime::Range1D(n),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
            runtime::buffer_arg(other.const_data_ptr()), runtime::value_arg(L),
            runtime::value_arg<std::uint64_t>(n), runtime::value_arg(*alpha)});
  else
    launch(op, device, "kernels/pointwise.cl", kernel, runtime::Range1D(n),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
            runtime::buffer_arg(other.const_data_ptr()), runtime::value_arg(L),
            runtime::value_arg<std::uint64_t>(n)});
  return out;
}

// A contiguous result of `kernel` over one strided input; `extra`: a float
// argument after the element count (pow's exponent).
at::Tensor unary(const char* op, const char* kernel, const at::Tensor& self, const float* extra = nullptr) {
  at::Tensor out = at::empty(self.sizes(), self.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = broadcast_layout(op, self.sizes(), {&self});
  if (extra)
    launch(op, out.device().index(), "kernels/pointwise.cl", kernel, runtime::Range1D(n),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
            runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n), runtime::value_arg(*extra)});
  else
    launch(op, out.device().index(), "kernels/pointwise.cl", kernel, runtime::Range1D(n),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
            runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n)});
  return out;
}

}  // namespace

at::Tensor k_relu(const at::Tensor & self) { return unary("relu", "relu_f32", self); }
at::Tensor k_neg(const at::Tensor & self) { return unary("neg", "neg_f32", self); }
at::Tensor k_exp(const at::Tensor & self) { return unary("exp", "exp_f32", self); }
at::Tensor k_tanh(const at::Tensor & self) { return unary("tanh", "tanh_f32", self); }
at::Tensor k_sigmoid(const at::Tensor & self) { return unary("sigmoid", "sigmoid_f32", self); }

at::Tensor k_pow_Tensor_Scalar(const at::Tensor & self, const at::Scalar & exponent) {
  // A float32 tensor to a number: the result stays float32 (the wrapper routed only float32).
  const float e = exponent.toFloat();
  return unary("pow.Tensor_Scalar", "pow_scalar_f32", self, &e);
}

at::Tensor k_sub_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  if (alpha.toDouble() == 1.0) return binary("sub.Tensor", "sub_nomul_f32", self, other, nullptr);
  const float a = alpha.toFloat();
  return binary("sub.Tensor", "sub_f32", self, other, &a);
}

at::Tensor k_tanh_backward(const at::Tensor & grad_output, const at::Tensor & output) {
  return binary("tanh_backward", "tanh_backward_f32", grad_output, output, nullptr);
}

at::Tensor k_sigmoid_backward(const at::Tensor & grad_output, const at::Tensor & output) {
  return binary("sigmoid_backward", "sigmoid_backward_f32", grad_output, output, nullptr);
}

namespace {
int gelu_approx(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "ocl: gelu: approximate must be 'none' or 'tanh', got '",
              std::string(approximate), "'");
  return approximate == "tanh" ? 1 : 0;
}
}  // namespace

at::Tensor k_gelu(const at::Tensor & self, c10::string_view approximate) {
  const int approx = gelu_approx(approximate);
  at::Tensor out = at::empty(self.sizes(), self.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = broadcast_layout("gelu", self.sizes(), {&self});
  launch("gelu", out.device().index(), "kernels/pointwise.cl", "gelu_f32", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()), runtime::value_arg(L),
          runtime::value_arg<std::uint64_t>(n), runtime::value_arg<std::int32_t>(approx)});
  return out;
}

at::Tensor k_gelu_backward(const at::Tensor & grad_output, const at::Tensor & self, c10::string_view approximate) {
  const int approx = gelu_approx(approximate);
  const std::vector<int64_t> shape = at::infer_size(grad_output.sizes(), self.sizes());
  at::Tensor out = at::empty(shape, grad_output.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = broadcast_layout("gelu_backward", shape, {&grad_output, &self});
  launch("gelu_backward", out.device().index(), "kernels/pointwise.cl", "gelu_backward_f32", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(grad_output.const_data_ptr()),
          runtime::buffer_arg(self.const_data_ptr()), runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n),
          runtime::value_arg<std::int32_t>(approx)});
  return out;
}

at::Tensor k_masked_fill_Scalar(const at::Tensor & self, const at::Tensor & mask, const at::Scalar & value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "ocl: masked_fill: expected a bool mask, got ", mask.scalar_type());
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor out = at::empty(shape, self.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  at::Tensor m = mask.device() == self.device() ? mask : mask.to(self.device());  // a 0-dim CPU mask
  const runtime::Layout L = broadcast_layout("masked_fill.Scalar", shape, {&self, &m});
  launch("masked_fill.Scalar", out.device().index(), "kernels/pointwise.cl", "masked_fill_f32", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
          runtime::buffer_arg(m.const_data_ptr()), runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n),
          runtime::value_arg(value.toFloat())});
  return out;
}

at::Tensor k_div_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("div.Tensor", "div_f32", self, other, nullptr);
}

namespace {

// int64 + int64 (a tensor or a number from Python).
at::Tensor add_int64(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (host_scalar(self)) {
    // s + x: the same as x + s when alpha is 1; else s moves to the device
    if (alpha.toLong() == 1) return add_int64(other, self, alpha);
    return add_int64(self.to(other.device()), other, alpha);
  }
  const bool scalar = host_scalar(other);
  const std::vector<int64_t> shape = scalar ? self.sizes().vec() : at::infer_size(self.sizes(), other.sizes());
  at::Tensor out = at::empty(shape, self.options().dtype(at::kLong));
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = scalar ? broadcast_layout("add.Tensor", shape, {&self})
                                   : broadcast_layout("add.Tensor", shape, {&self, &other});
  const int64_t s = scalar ? other.item().toLong() : 0;
  launch("add.Tensor", out.device().index(), "kernels/pointwise.cl", "add_i64", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
          runtime::buffer_arg(scalar ? self.const_data_ptr() : other.const_data_ptr()), runtime::value_arg(L),
          runtime::value_arg<std::uint64_t>(n), runtime::value_arg(alpha.toLong()), runtime::value_arg(s),
          runtime::value_arg<std::int32_t>(scalar ? 1 : 0)});
  return out;
}

}  // namespace

at::Tensor k_add_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  // float32 and int64 both reach this kernel, mixed too (x + idx): compute in the
  // result's type, converting a device operand of the other type on the device.
  const at::ScalarType result = at::result_type(self, other);
  if (result == at::kLong) return add_int64(self, other, alpha);
  TORCH_CHECK(result == at::kFloat, "ocl: add.Tensor: ", self.scalar_type(), " + ", other.scalar_type(), " gives ",
              result, ", which the OpenCL kernels do not compute");
  auto as_float = [](const at::Tensor& t) { return host_scalar(t) || t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); };
  if (self.scalar_type() != other.scalar_type() && !(host_scalar(self) || host_scalar(other)))
    return k_add_Tensor(as_float(self), as_float(other), alpha);
  if (!host_scalar(self) && self.scalar_type() != at::kFloat) return k_add_Tensor(as_float(self), other, alpha);
  if (!host_scalar(other) && other.scalar_type() != at::kFloat) return k_add_Tensor(self, as_float(other), alpha);
  if (alpha.toDouble() == 1.0) return binary("add.Tensor", "add_nomul_f32", self, other, nullptr);
  const float a = alpha.toFloat();
  return binary("add.Tensor", "add_f32", self, other, &a);
}

at::Tensor k_mul_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("mul.Tensor", "mul_f32", self, other, nullptr);
}

at::Tensor k_threshold_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                const at::Scalar & threshold) {
  const float t = threshold.toFloat();
  const std::vector<int64_t> shape = at::infer_size(grad_output.sizes(), self.sizes());
  at::Tensor out = at::empty(shape, grad_output.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const runtime::Layout L = broadcast_layout("threshold_backward", shape, {&grad_output, &self});
  launch("threshold_backward", out.device().index(), "kernels/pointwise.cl", "threshold_backward_f32",
         runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(grad_output.const_data_ptr()),
          runtime::buffer_arg(self.const_data_ptr()), runtime::value_arg(L),
          runtime::value_arg<std::uint64_t>(n), runtime::value_arg(t)});
  return out;
}

}  // namespace ocl::kernels
