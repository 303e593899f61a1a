// Host parts of nll_loss forward and backward (device parts: kernels/loss.cl).
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

constexpr std::size_t kGroup = 64;  // NLL_GROUP of loss.cl

// [N, C] input and [N] target (a 1-D input is one row with a 0-dim target).
void check_shapes(const char* op, const at::Tensor& self, const at::Tensor& target,
                  const ::std::optional<at::Tensor>& weight, int64_t reduction, int64_t* N, int64_t* C) {
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "ocl: ", op, ": input must be 1-D or 2-D, got ", self.dim(),
              "-D (", self.scalar_type(), ")");
  TORCH_CHECK(target.scalar_type() == at::kLong, "ocl: ", op, ": target must be int64, got ",
              target.scalar_type());
  TORCH_CHECK(target.dim() <= 1, "ocl: ", op, ": 0-D or 1-D target tensor expected, multi-target not supported");
  *N = self.dim() == 2 ? self.size(0) : 1;
  *C = self.size(-1);
  TORCH_CHECK(target.numel() == *N, "ocl: ", op, ": expected input batch_size (", *N,
              ") to match target batch_size (", target.numel(), ")");
  TORCH_CHECK(reduction >= 0 && reduction <= 2, "ocl: ", op, ": reduction must be 0, 1 or 2, got ", reduction);
  if (weight && weight->defined()) {
    TORCH_CHECK(weight->numel() == *C && weight->scalar_type() == at::kFloat, "ocl: ", op,
                ": weight must be a float32 tensor of ", *C, " elements, got ", weight->numel(), " of ",
                weight->scalar_type());
  }
}

}  // namespace

::std::tuple<at::Tensor,at::Tensor> k_nll_loss_forward(const at::Tensor & self, const at::Tensor & target,
                                                      const ::std::optional<at::Tensor> & weight,
                                                      int64_t reduction, int64_t ignore_index) {
  int64_t N = 0, C = 0;
  check_shapes("nll_loss_forward", self, target, weight, reduction, &N, &C);
  const bool has_weight = weight && weight->defined();
  at::Tensor in = self.contiguous(), t = target.contiguous();
  at::Tensor w = has_weight ? weight->contiguous() : in;  // unread without a weight
  at::Tensor out = reduction == 0 && self.dim() == 2 ? at::empty({N}, self.options()) : at::empty({}, self.options());
  at::Tensor total = at::empty({}, self.options());
  runtime::Range range;
  range.global[0] = kGroup;
  range.local[0] = kGroup;
  launch("nll_loss_forward", out.device().index(), "kernels/loss.cl", "nll_loss_forward_f32", range,
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(total.data_ptr()),
          runtime::buffer_arg(in.const_data_ptr()), runtime::buffer_arg(t.const_data_ptr()),
          runtime::buffer_arg(w.const_data_ptr()), runtime::value_arg(N), runtime::value_arg(C),
          runtime::value_arg<std::int32_t>(has_weight), runtime::value_arg<std::int32_t>(reduction),
          runtime::value_arg(ignore_index)});
  return {out, total};
}

at::Tensor k_nll_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target,
                               const ::std::optional<at::Tensor> & weight, int64_t reduction,
                               int64_t ignore_index, const at::Tensor & total_weight) {
  int64_t N = 0, C = 0;
  check_shapes("nll_loss_backward", self, target, weight, reduction, &N, &C);
  TORCH_CHECK(total_weight.numel() == 1 && total_weight.scalar_type() == at::kFloat, "ocl: nll_loss_backward: "
              "expected total_weight to be a float32 single element tensor, got ", total_weight.numel(),
              " elements of ", total_weight.scalar_type());
  if (reduction == 0 && self.dim() == 2) {
    TORCH_CHECK(grad_output.dim() == 1 && grad_output.size(0) == N, "ocl: nll_loss_backward: expected grad_output "
                "of shape [", N, "] with reduction none, got ", grad_output.sizes());
  } else {
    TORCH_CHECK(grad_output.numel() == 1, "ocl: nll_loss_backward: expected a single element grad_output, got ",
                grad_output.sizes());
  }
  const bool has_weight = weight && weight->defined();
  at::Tensor grad_in = at::zeros(self.sizes(), self.options());  // a fill: memset, no host copy
  if (N == 0) return grad_in;
  at::Tensor g = grad_output.contiguous(), t = target.contiguous(), tw = total_weight.contiguous();
  at::Tensor w = has_weight ? weight->contiguous() : g;
  launch("nll_loss_backward", grad_in.device().index(), "kernels/loss.cl", "nll_loss_backward_f32",
         runtime::Range1D(static_cast<std::size_t>(N)),
         {runtime::buffer_arg(grad_in.data_ptr()), runtime::buffer_arg(g.const_data_ptr()),
          runtime::buffer_arg(t.const_data_ptr()), runtime::buffer_arg(w.const_data_ptr()),
          runtime::buffer_arg(tw.const_data_ptr()), runtime::value_arg(N), runtime::value_arg(C),
          runtime::value_arg<std::int32_t>(has_weight), runtime::value_arg<std::int32_t>(reduction),
          runtime::value_arg(ignore_index)});
  return grad_in;
}

}  // namespace ocl::kernels
