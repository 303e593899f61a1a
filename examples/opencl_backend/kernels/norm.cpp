// Host parts of batch norm and layer norm, forward and backward (device parts:
// kernels/norm.cl).
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

namespace {

// rows x cols of a layer norm: cols the product of normalized_shape, which must
// be the input's trailing dims.
void layer_shape(const char* op, const at::Tensor& x, at::IntArrayRef normalized, int64_t* rows, int64_t* cols) {
  const int64_t nd = x.dim(), k = static_cast<int64_t>(normalized.size());
  TORCH_CHECK(k >= 1 && k <= nd && x.sizes().slice(nd - k).equals(normalized), "ocl: ", op,
              ": normalized_shape ", normalized, " must be the trailing dims of the input ", x.sizes());
  *cols = 1;
  for (int64_t v : normalized) *cols *= v;
  *rows = *cols ? x.numel() / *cols : 0;
}

// mean / rstd of shape input[:axis] + [1] * len(normalized_shape), as the CPU's.
std::vector<int64_t> stat_shape(const at::Tensor& x, int64_t k) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - k);
  shape.insert(shape.end(), k, 1);
  return shape;
}

runtime::Range per_row(int64_t rows) {
  runtime::Range r;
  r.global[0] = static_cast<std::size_t>(rows) * kGroup;
  r.local[0] = kGroup;
  return r;
}

}  // namespace

::std::tuple<at::Tensor,at::Tensor,at::Tensor> k_native_layer_norm(
    const at::Tensor & input, at::IntArrayRef normalized_shape, const ::std::optional<at::Tensor> & weight,
    const ::std::optional<at::Tensor> & bias, double eps) {
  const char* op = "native_layer_norm";
  int64_t rows = 0, cols = 0;
  layer_shape(op, input, normalized_shape, &rows, &cols);
  const bool has_w = given(weight), has_b = given(bias);
  at::Tensor x = input.contiguous();
  at::Tensor w = has_w ? channel_vector(op, "weight", *weight, cols) : x;
  at::Tensor b = has_b ? channel_vector(op, "bias", *bias, cols) : x;
  at::Tensor out = at::empty(x.sizes(), x.options());
  const auto stats = stat_shape(x, static_cast<int64_t>(normalized_shape.size()));
  at::Tensor mean = at::empty(stats, x.options()), rstd = at::empty(stats, x.options());
  if (rows && cols)
    launch(op, out.device().index(), "kernels/norm.cl", "layer_norm_f32", per_row(rows),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(mean.data_ptr()),
            runtime::buffer_arg(rstd.data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
            runtime::buffer_arg(w.const_data_ptr()), runtime::buffer_arg(b.const_data_ptr()), runtime::value_arg(cols),
            runtime::value_arg<std::int32_t>(has_w), runtime::value_arg<std::int32_t>(has_b),
            runtime::value_arg(static_cast<float>(eps))});
  return {out, mean, rstd};
}

::std::tuple<at::Tensor,at::Tensor,at::Tensor> k_native_layer_norm_backward(
    const at::Tensor & grad_out, const at::Tensor & input, at::IntArrayRef normalized_shape, const at::Tensor & mean,
    const at::Tensor & rstd, const ::std::optional<at::Tensor> & weight, const ::std::optional<at::Tensor> & bias,
    ::std::array<bool,3> output_mask) {
  const char* op = "native_layer_norm_backward";
  int64_t rows = 0, cols = 0;
  layer_shape(op, input, normalized_shape, &rows, &cols);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "ocl: ", op, ": grad_out of shape ", grad_out.sizes(),
              " and input of shape ", input.sizes(), " differ");
  TORCH_CHECK(mean.numel() == rows && rstd.numel() == rows, "ocl: ", op, ": mean and rstd must have ", rows,
              " elements (one per row), got ", mean.numel(), " and ", rstd.numel());
  const bool has_w = given(weight);
  at::Tensor x = input.contiguous(), dy = grad_out.contiguous(), m = mean.contiguous(), r = rstd.contiguous();
  at::Tensor w = has_w ? channel_vector(op, "weight", *weight, cols) : x;
  at::Tensor grad_in = output_mask[0] ? at::empty(x.sizes(), x.options()) : at::Tensor();
  at::Tensor grad_w = output_mask[1] && has_w ? at::empty(weight->sizes(), x.options()) : at::Tensor();
  at::Tensor grad_b = output_mask[2] && given(bias) ? at::empty(bias->sizes(), x.options()) : at::Tensor();
  const int device = x.device().index();
  if (grad_in.defined() && rows && cols)
    launch(op, device, "kernels/norm.cl", "layer_norm_backward_input_f32", per_row(rows),
           {runtime::buffer_arg(grad_in.data_ptr()), runtime::buffer_arg(dy.const_data_ptr()),
            runtime::buffer_arg(x.const_data_ptr()), runtime::buffer_arg(m.const_data_ptr()),
            runtime::buffer_arg(r.const_data_ptr()), runtime::buffer_arg(w.const_data_ptr()),
            runtime::value_arg(cols), runtime::value_arg<std::int32_t>(has_w)});
  if ((grad_w.defined() || grad_b.defined()) && cols)
    launch(op, device, "kernels/norm.cl", "layer_norm_backward_params_f32", runtime::Range1D(static_cast<std::size_t>(cols)),
           {runtime::buffer_arg(grad_w.defined() ? grad_w.data_ptr() : nullptr),
            runtime::buffer_arg(grad_b.defined() ? grad_b.data_ptr() : nullptr), runtime::buffer_arg(dy.const_data_ptr()),
            runtime::buffer_arg(x.const_data_ptr()), runtime::buffer_arg(m.const_data_ptr()),
            runtime::buffer_arg(r.const_data_ptr()), runtime::value_arg(rows), runtime::value_arg(cols),
            runtime::value_arg<std::int32_t>(grad_w.defined()), runtime::value_arg<std::int32_t>(grad_b.defined())});
  return {grad_in, grad_w, grad_b};
}

}  // namespace ocl::kernels
