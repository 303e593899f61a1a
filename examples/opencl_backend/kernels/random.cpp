// Dropout on the ocl device (kernels/random.cl): native_dropout and its
// backward, float32 (device.yaml narrows them; other dtypes run on the CPU
// fallback). The key of an op's Philox stream is one draw from the device's
// default generator (flsdk's kernel library, random_key.h), so torch.manual_seed
// reproduces the masks.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include <cstdint>
#include <tuple>

#include "kernel_lib/random_key.h"
#include "ocl_kernel.h"

namespace ocl::kernels {

::std::tuple<at::Tensor, at::Tensor> k_native_dropout(const at::Tensor & input, double p,
                                                      ::std::optional<bool> train) {
  const char* op = "native_dropout";
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "ocl: ", op, ": dropout probability has to be between 0 and 1, but got ", p);
  const bool active = train.value_or(false) && p > 0.0;
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  if (!active) {  // eval mode (or p == 0): the input, all kept
    mask.fill_(true);
    return {input.clone(), mask};
  }
  at::Tensor in = input.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  const std::uint64_t n = static_cast<std::uint64_t>(in.numel());
  if (n == 0) return {out, mask};
  const double keep = 1.0 - p;
  const float scale = keep > 0.0 ? static_cast<float>(1.0 / keep) : 0.0f;
  const std::uint64_t key = common::draw_key(op, std::nullopt, input);
  launch(op, in.device().index(), "kernels/random.cl", "dropout_f32", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(mask.data_ptr()),
          runtime::buffer_arg(in.const_data_ptr()), runtime::value_arg<std::uint64_t>(n),
          runtime::value_arg(static_cast<float>(keep)), runtime::value_arg(scale),
          runtime::value_arg(static_cast<std::uint32_t>(key)),
          runtime::value_arg(static_cast<std::uint32_t>(key >> 32))});
  return {out, mask};
}

at::Tensor k_native_dropout_backward(const at::Tensor & grad_output, const at::Tensor & mask, double scale) {
  const char* op = "native_dropout_backward";
  TORCH_CHECK(mask.scalar_type() == at::kBool, "ocl: ", op, ": Mask should be Bool Scalar Type, got ",
              mask.scalar_type());
  TORCH_CHECK(mask.sizes() == grad_output.sizes(), "ocl: ", op, ": mask of shape ", mask.sizes(),
              " for a gradient of shape ", grad_output.sizes());
  at::Tensor g = grad_output.contiguous();
  at::Tensor m = mask.contiguous();
  at::Tensor out = at::empty(g.sizes(), g.options());
  const std::uint64_t n = static_cast<std::uint64_t>(g.numel());
  if (n == 0) return out;
  launch(op, g.device().index(), "kernels/random.cl", "dropout_backward_f32", runtime::Range1D(n),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(g.const_data_ptr()),
          runtime::buffer_arg(m.const_data_ptr()), runtime::value_arg<std::uint64_t>(n),
          runtime::value_arg(static_cast<float>(scale))});
  return out;
}

}  // namespace ocl::kernels
