// acme's own fused op: gelu(x + bias) in one pass over memory, the kind of
// fusion a vendor ships for transformer MLPs. bias broadcasts over the last dim.
#include "kernels.h"

#include "kernel_lib/device.h"

#include <ATen/ops/empty.h>

#include <cmath>

namespace acme::kernels {

at::Tensor k_fused_bias_gelu(const at::Tensor & x, const at::Tensor & bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "acme: fused_bias_gelu: dtype ", x.scalar_type(), "/", bias.scalar_type(),
              " not supported on ", x.device(), " (float32 only)");
  TORCH_CHECK(bias.dim() == 1 && x.dim() >= 1 && bias.size(0) == x.size(-1),
              "acme: fused_bias_gelu: bias must have shape [", x.dim() ? x.size(-1) : 0,
              "] (the last dim of x), got ", bias.sizes());
  at::Tensor in = x.contiguous();
  at::Tensor b = bias.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  if (out.numel() == 0) return out;
  // the device part: one pass, queued on the stream
  common::launch(out, [src_addr = in.const_data_ptr(), bias_addr = b.const_data_ptr(),
                       dst_addr = out.data_ptr(), width = b.numel(), n = in.numel()] {
    const auto* src = static_cast<const float*>(common::device_view(src_addr));
    const auto* bias_data = static_cast<const float*>(common::device_view(bias_addr));
    auto* dst = static_cast<float*>(common::device_view(dst_addr));
    for (int64_t i = 0; i < n; ++i) {
      float v = src[i] + bias_data[i % width];
      dst[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    }
  });
  return out;
}

}  // namespace acme::kernels
