// Host parts of 2-D max pooling forward and backward (device parts: kernels/pool.cl).
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

struct Pool {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// One or two values (or none, for stride: the kernel size), as max_pool2d takes them.
int64_t pick(at::IntArrayRef v, int i, const char* what) {
  TORCH_CHECK(v.size() == 1 || v.size() == 2, "ocl: max_pool2d: ", what, " must be one int or two, got ", v.size());
  return v.size() == 1 ? v[0] : v[i];
}

Pool pool_of(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  Pool p{pick(kernel_size, 0, "kernel_size"), pick(kernel_size, 1, "kernel_size"), 0, 0,
         pick(padding, 0, "padding"), pick(padding, 1, "padding"), pick(dilation, 0, "dilation"),
         pick(dilation, 1, "dilation")};
  p.sh = stride.empty() ? p.kh : pick(stride, 0, "stride");
  p.sw = stride.empty() ? p.kw : pick(stride, 1, "stride");
  TORCH_CHECK(p.kh > 0 && p.kw > 0 && p.sh > 0 && p.sw > 0 && p.dh > 0 && p.dw > 0,
              "ocl: max_pool2d: kernel_size, stride and dilation must be positive");
  TORCH_CHECK(p.ph >= 0 && p.pw >= 0 && p.ph <= p.kh / 2 && p.pw <= p.kw / 2,
              "ocl: max_pool2d: pad should be at most half of effective kernel size, but got pad=", p.ph, "x", p.pw,
              ", kernel_size=", p.kh, "x", p.kw);
  return p;
}

// PyTorch's pooling output size: floor (or ceil) division, and with ceil_mode
// the last window must start inside the input or its left padding.
int64_t out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

::std::tuple<at::Tensor,at::Tensor> k_max_pool2d_with_indices(const at::Tensor & self, at::IntArrayRef kernel_size,
                                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                                             at::IntArrayRef dilation, bool ceil_mode) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "ocl: max_pool2d: expected 3-D or 4-D input, got ", self.dim(), "-D");
  const Pool p = pool_of(kernel_size, stride, padding, dilation);
  const int64_t H = self.size(-2), W = self.size(-1);
  const int64_t OH = out_size(H, p.kh, p.ph, p.sh, p.dh, ceil_mode), OW = out_size(W, p.kw, p.pw, p.sw, p.dw, ceil_mode);
  TORCH_CHECK(OH > 0 && OW > 0, "ocl: max_pool2d: the output would be ", OH, "x", OW, " for input ", H, "x", W);
  std::vector<int64_t> shape = self.sizes().vec();
  shape[shape.size() - 2] = OH;
  shape[shape.size() - 1] = OW;
  at::Tensor x = self.contiguous();
  at::Tensor out = at::empty(shape, x.options());
  at::Tensor indices = at::empty(shape, x.options().dtype(at::kLong));
  const int64_t planes = H * W ? x.numel() / (H * W) : 0;
  const int64_t total = planes * OH * OW;
  if (total)
    launch("max_pool2d_with_indices", out.device().index(), "kernels/pool.cl", "max_pool2d_f32",
           runtime::Range1D(static_cast<std::size_t>(total)),
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(indices.data_ptr()),
            runtime::buffer_arg(x.const_data_ptr()), runtime::value_arg(planes), runtime::value_arg(H),
            runtime::value_arg(W), runtime::value_arg(OH), runtime::value_arg(OW),
            runtime::value_arg<std::int32_t>(p.kh), runtime::value_arg<std::int32_t>(p.kw),
            runtime::value_arg<std::int32_t>(p.sh), runtime::value_arg<std::int32_t>(p.sw),
            runtime::value_arg<std::int32_t>(p.ph), runtime::value_arg<std::int32_t>(p.pw),
            runtime::value_arg<std::int32_t>(p.dh), runtime::value_arg<std::int32_t>(p.dw)});
  return {out, indices};
}

at::Tensor k_max_pool2d_with_indices_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                              at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                              at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                              const at::Tensor & indices) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "ocl: max_pool2d_backward: expected 3-D or 4-D input, got ",
              self.dim(), "-D");
  TORCH_CHECK(indices.scalar_type() == at::kLong && indices.sizes() == grad_output.sizes(),
              "ocl: max_pool2d_backward: indices must be int64 of grad_output's shape ", grad_output.sizes(),
              ", got ", indices.scalar_type(), " ", indices.sizes());
  pool_of(kernel_size, stride, padding, dilation);  // the same argument checks as forward
  const int64_t H = self.size(-2), W = self.size(-1);
  const int64_t OH = grad_output.size(-2), OW = grad_output.size(-1);
  at::Tensor grad_in = at::zeros(self.sizes(), grad_output.options());  // a fill: memset
  const int64_t planes = H * W ? self.numel() / (H * W) : 0;
  TORCH_CHECK(grad_output.numel() == planes * OH * OW, "ocl: max_pool2d_backward: grad_output of shape ",
              grad_output.sizes(), " does not match input ", self.sizes());
  const int64_t total = planes * OH * OW;
  if (total) {
    at::Tensor g = grad_output.contiguous(), idx = indices.contiguous();
    launch("max_pool2d_with_indices_backward", grad_in.device().index(), "kernels/pool.cl", "max_pool2d_backward_f32",
           runtime::Range1D(static_cast<std::size_t>(total)),
           {runtime::buffer_arg(grad_in.data_ptr()), runtime::buffer_arg(g.const_data_ptr()),
            runtime::buffer_arg(idx.const_data_ptr()), runtime::value_arg(planes), runtime::value_arg(H * W),
            runtime::value_arg(OH * OW)});
  }
  return grad_in;
}

}  // namespace ocl::kernels
