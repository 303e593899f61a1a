// Host parts of batch norm forward and backward (device parts: kernels/norm.cl).
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

constexpr std::size_t kGroup = 64;  // NORM_GROUP of norm.cl

bool given(const ::std::optional<at::Tensor>& t) { return t && t->defined(); }

// A per-channel float32 vector of C elements, contiguous (running statistics are
// written in place: a strided one is written through a copy, copied back after).
at::Tensor channel_vector(const char* op, const char* what, const at::Tensor& t, int64_t C) {
  TORCH_CHECK(t.numel() == C, "ocl: ", op, ": ", what, " must have ", C, " elements (one per channel), got ",
              t.numel());
  TORCH_CHECK(t.scalar_type() == at::kFloat, "ocl: ", op, ": ", what, " must be float32 like the input, got ",
              t.scalar_type());
  return t.contiguous();
}

void shape_of(const char* op, const at::Tensor& x, int64_t* N, int64_t* C, int64_t* S) {
  TORCH_CHECK(x.dim() >= 2, "ocl: ", op, ": input must have at least 2 dims (N, C, ...), got ", x.dim(), "-D");
  *N = x.size(0);
  *C = x.size(1);
  *S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) *S *= x.size(d);
}

runtime::Range per_channel(int64_t C) {
  runtime::Range r;
  r.global[0] = static_cast<std::size_t>(C) * kGroup;
  r.local[0] = kGroup;
  return r;
}

}  // namespace

::std::tuple<at::Tensor,at::Tensor,at::Tensor> k_native_batch_norm(
    const at::Tensor & input, const ::std::optional<at::Tensor> & weight, const ::std::optional<at::Tensor> & bias,
    const ::std::optional<at::Tensor> & running_mean, const ::std::optional<at::Tensor> & running_var,
    bool training, double momentum, double eps) {
  const char* op = "native_batch_norm";
  int64_t N = 0, C = 0, S = 0;
  shape_of(op, input, &N, &C, &S);
  const bool has_w = given(weight), has_b = given(bias);
  const bool has_running = given(running_mean) && given(running_var);
  TORCH_CHECK(given(running_mean) == given(running_var), "ocl: ", op,
              ": running_mean and running_var must be given together");
  TORCH_CHECK(training || has_running, "ocl: ", op, ": running_mean and running_var must be defined in evaluation mode");
  at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  at::Tensor w = has_w ? channel_vector(op, "weight", *weight, C) : x;  // unread without
  at::Tensor b = has_b ? channel_vector(op, "bias", *bias, C) : x;
  at::Tensor rm = has_running ? channel_vector(op, "running_mean", *running_mean, C) : x;
  at::Tensor rv = has_running ? channel_vector(op, "running_var", *running_var, C) : x;
  const int device = out.device().index();
  if (!training) {
    const int64_t total = x.numel();
    if (total)
      launch(op, device, "kernels/norm.cl", "batch_norm_eval_f32", runtime::Range1D(static_cast<std::size_t>(total)),
             {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
              runtime::buffer_arg(w.const_data_ptr()), runtime::buffer_arg(b.const_data_ptr()),
              runtime::buffer_arg(rm.const_data_ptr()), runtime::buffer_arg(rv.const_data_ptr()),
              runtime::value_arg(C), runtime::value_arg(S), runtime::value_arg(total),
              runtime::value_arg<std::int32_t>(has_w), runtime::value_arg<std::int32_t>(has_b),
              runtime::value_arg(static_cast<float>(eps))});
    // as the CPU: no saved statistics in evaluation mode
    return {out, at::empty({0}, x.options()), at::empty({0}, x.options())};
  }
  at::Tensor save_mean = at::empty({C}, x.options());
  at::Tensor save_invstd = at::empty({C}, x.options());
  if (C)
    launch(op, device, "kernels/norm.cl", "batch_norm_train_f32", per_channel(C),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(save_mean.data_ptr()),
            runtime::buffer_arg(save_invstd.data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
            runtime::buffer_arg(w.const_data_ptr()), runtime::buffer_arg(b.const_data_ptr()),
            runtime::buffer_arg(rm.data_ptr()), runtime::buffer_arg(rv.data_ptr()), runtime::value_arg(N),
            runtime::value_arg(C), runtime::value_arg(S), runtime::value_arg<std::int32_t>(has_w),
            runtime::value_arg<std::int32_t>(has_b), runtime::value_arg<std::int32_t>(has_running),
            runtime::value_arg(static_cast<float>(momentum)), runtime::value_arg(static_cast<float>(eps))});
  if (has_running) {  // the statistics were updated in a contiguous copy: write them back
    if (!rm.is_same(*running_mean)) running_mean->copy_(rm);
    if (!rv.is_same(*running_var)) running_var->copy_(rv);
  }
  return {out, save_mean, save_invstd};
}

::std::tuple<at::Tensor,at::Tensor,at::Tensor> k_native_batch_norm_backward(
    const at::Tensor & grad_out, const at::Tensor & input, const ::std::optional<at::Tensor> & weight,
    const ::std::optional<at::Tensor> & running_mean, const ::std::optional<at::Tensor> & running_var,
    const ::std::optional<at::Tensor> & save_mean, const ::std::optional<at::Tensor> & save_invstd, bool train,
    double eps, ::std::array<bool,3> output_mask) {
  const char* op = "native_batch_norm_backward";
  int64_t N = 0, C = 0, S = 0;
  shape_of(op, input, &N, &C, &S);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "ocl: ", op, ": grad_out of shape ", grad_out.sizes(),
              " and input of shape ", input.sizes(), " differ");
  const auto& mean_src = train ? save_mean : running_mean;
  const auto& var_src = train ? save_invstd : running_var;
  TORCH_CHECK(given(mean_src) && given(var_src), "ocl: ", op, ": ",
              train ? "save_mean and save_invstd" : "running_mean and running_var", " must be defined");
  const bool has_w = given(weight);
  at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
  at::Tensor w = has_w ? channel_vector(op, "weight", *weight, C) : x;
  at::Tensor m = channel_vector(op, train ? "save_mean" : "running_mean", *mean_src, C);
  at::Tensor v = channel_vector(op, train ? "save_invstd" : "running_var", *var_src, C);
  at::Tensor grad_in = output_mask[0] ? at::empty(x.sizes(), x.options()) : at::Tensor();
  at::Tensor grad_w = output_mask[1] ? at::empty({C}, x.options()) : at::Tensor();
  at::Tensor grad_b = output_mask[2] ? at::empty({C}, x.options()) : at::Tensor();
  if (C && (output_mask[0] || output_mask[1] || output_mask[2])) {
    auto ptr = [&](const at::Tensor& t) -> void* { return t.defined() ? t.data_ptr() : nullptr; };
    launch(op, x.device().index(), "kernels/norm.cl", "batch_norm_backward_f32", per_channel(C),
           {runtime::buffer_arg(ptr(grad_in)), runtime::buffer_arg(ptr(grad_w)), runtime::buffer_arg(ptr(grad_b)),
            runtime::buffer_arg(dy.const_data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
            runtime::buffer_arg(w.const_data_ptr()), runtime::buffer_arg(m.const_data_ptr()),
            runtime::buffer_arg(v.const_data_ptr()), runtime::value_arg(N), runtime::value_arg(C),
            runtime::value_arg(S), runtime::value_arg<std::int32_t>(has_w), runtime::value_arg<std::int32_t>(train),
            runtime::value_arg(static_cast<float>(eps)), runtime::value_arg<std::int32_t>(output_mask[0]),
            runtime::value_arg<std::int32_t>(output_mask[1]), runtime::value_arg<std::int32_t>(output_mask[2])});
  }
  return {grad_in, grad_w, grad_b};
}

}  // namespace ocl::kernels
