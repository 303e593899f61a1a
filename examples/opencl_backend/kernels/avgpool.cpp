// Host parts of average pooling, 2-D and 3-D, fixed and adaptive windows, and
// their backward (device part: kernels/avgpool.cl), in the floating dtypes.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include <string>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

struct Pool {
  std::int64_t planes = 0, D = 1, H = 1, W = 1, OD = 1, OH = 1, OW = 1;
  std::int64_t kd = 1, kh = 1, kw = 1, sd = 1, sh = 1, sw = 1, pd = 0, ph = 0, pw = 0;
  std::int64_t count_include_pad = 1, divisor = 0;
};

void launch_pool(const char* name, const char* kernel, bool adaptive, const at::Tensor& out, const at::Tensor& in,
                 const Pool& P, std::int64_t n) {
  if (n == 0) return;
  const at::ScalarType t = in.scalar_type();
  const int device = in.device().index();
  std::string d;
  switch (t) {
    case at::kFloat: d = "#define CT float\n#define IN_T float\n#define LOAD(p, o) ((p)[o])\n#define OUT_T float\n"
                         "#define STORE(p, i, v) (p)[i] = (v)\n"; break;
    case at::kDouble:
      TORCH_CHECK(runtime::device_has_fp64(device), "ocl: ", name, ": float64 needs cl_khr_fp64, which ocl:", device,
                  " does not report");
      d = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define CT double\n#define IN_T double\n"
          "#define LOAD(p, o) ((p)[o])\n#define OUT_T double\n#define STORE(p, i, v) (p)[i] = (v)\n"; break;
    case at::kHalf: d = "#define CT float\n#define IN_T half\n#define LOAD(p, o) vload_half((o), (p))\n"
                        "#define OUT_T half\n#define STORE(p, i, v) vstore_half_rte((v), (i), (p))\n"; break;
    case at::kBFloat16:
      d = "#define CT float\n#define IN_T ushort\n#define LOAD(p, o) as_float(((uint)(p)[o]) << 16)\n"
          "#define OUT_T ushort\n#define STORE(p, i, v) { float f_ = (v); uint b_ = as_uint(f_); (p)[i] = isnan(f_) ? "
          "(ushort)0x7fc0 : (ushort)((b_ + 0x7fffu + ((b_ >> 16) & 1u)) >> 16); }\n"; break;
    default: TORCH_CHECK(false, name, ": expected a floating tensor, got ", t);
  }
  d += std::string("#define ADAPTIVE ") + (adaptive ? "1" : "0") + "\n";
  launch_specialised(name, device, "kernels/avgpool.cl", d, kernel, runtime::Range1D(static_cast<std::size_t>(n)),
                     {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
                      runtime::value_arg(P)});
}

int64_t pick(at::IntArrayRef v, std::size_t i, int64_t dims, const char* name, const char* what) {
  TORCH_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == dims, name, ": ", what, " must either be a single int, "
              "or a tuple of ", dims, " ints");
  return v.size() == 1 ? v[0] : v[i];
}

int64_t out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, bool ceil_mode) {
  const int64_t span = in + 2 * pad - (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The pooling geometry of a `dims`-D pool (2 or 3) over self's last dims.
Pool geometry(const char* name, const at::Tensor& self, int64_t dims, at::IntArrayRef kernel_size,
              at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
              std::optional<int64_t> divisor_override) {
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, ": Expected ", dims + 1, "D or ", dims + 2,
              "D input tensor, but got ", self.sizes());
  TORCH_CHECK(!divisor_override || *divisor_override != 0, name, ": divisor must be not zero");
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0}, in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  for (int64_t j = 0; j < dims; ++j) {
    const std::size_t jj = static_cast<std::size_t>(j);
    const int64_t a = 3 - dims + j;
    k[a] = pick(kernel_size, jj, dims, name, "kernel_size");
    s[a] = stride.empty() ? k[a] : pick(stride, jj, dims, name, "stride");
    p[a] = pick(padding, jj, dims, name, "padding");
    TORCH_CHECK(k[a] > 0 && s[a] > 0, name, ": kernel_size and stride must be positive");
    TORCH_CHECK(p[a] >= 0 && p[a] <= k[a] / 2, name, ": pad should be at most half of effective kernel size, but got "
                "pad=", p[a], ", kernel_size=", k[a]);
    in[a] = self.size(self.dim() - dims + j);
    out[a] = out_size(in[a], k[a], p[a], s[a], ceil_mode);
    TORCH_CHECK(out[a] > 0, name, ": Given input size ", self.sizes(), ", calculated output size is too small");
  }
  Pool P;
  P.D = in[0], P.H = in[1], P.W = in[2], P.OD = out[0], P.OH = out[1], P.OW = out[2];
  P.kd = k[0], P.kh = k[1], P.kw = k[2], P.sd = s[0], P.sh = s[1], P.sw = s[2], P.pd = p[0], P.ph = p[1], P.pw = p[2];
  P.count_include_pad = count_include_pad ? 1 : 0;
  P.divisor = divisor_override.value_or(0);
  const int64_t plane = P.D * P.H * P.W;
  P.planes = plane ? self.numel() / plane : 0;
  return P;
}

std::vector<int64_t> pooled_shape(const at::Tensor& self, int64_t dims, const Pool& P) {
  std::vector<int64_t> shape = self.sizes().vec();
  const int64_t o[3] = {P.OD, P.OH, P.OW};
  for (int64_t j = 0; j < dims; ++j) shape[self.dim() - dims + j] = o[3 - dims + j];
  return shape;
}

at::Tensor avg_forward(const char* name, const at::Tensor& self, int64_t dims, const Pool& P, bool adaptive) {
  const at::Tensor x = self.contiguous();
  at::Tensor out = at::empty(pooled_shape(self, dims, P), self.options());
  launch_pool(name, "avg_pool", adaptive, out, x, P, P.planes * P.OD * P.OH * P.OW);
  return out;
}

at::Tensor avg_backward(const char* name, const at::Tensor& grad_output, const at::Tensor& self, const Pool& P,
                        bool adaptive) {
  const at::Tensor g = grad_output.contiguous();
  TORCH_CHECK(g.numel() == P.planes * P.OD * P.OH * P.OW, name, ": grad_output of shape ", grad_output.sizes(),
              " does not match the pooled shape of ", self.sizes());
  at::Tensor grad_in = at::empty(self.sizes(), grad_output.options());
  launch_pool(name, "avg_pool_backward", adaptive, grad_in, g, P, P.planes * P.D * P.H * P.W);
  return grad_in;
}

Pool adaptive_geometry(const char* name, const at::Tensor& self, int64_t dims, at::IntArrayRef output_size) {
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == dims, name, ": output_size must be ", dims);
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, ": Expected ", dims + 1, "D or ", dims + 2,
              "D tensor, but got ", self.sizes());
  for (int64_t j = 1; j < self.dim(); ++j)
    TORCH_CHECK(self.size(j) > 0, name, ": Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ", self.sizes(), " with dimension ", j, " being empty");
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  for (int64_t j = 0; j < dims; ++j) {
    in[3 - dims + j] = self.size(self.dim() - dims + j);
    out[3 - dims + j] = output_size[static_cast<std::size_t>(j)];
    TORCH_CHECK(out[3 - dims + j] >= 0, name, ": output_size must be non-negative");
  }
  Pool P;
  P.D = in[0], P.H = in[1], P.W = in[2], P.OD = out[0], P.OH = out[1], P.OW = out[2];
  const int64_t plane = P.D * P.H * P.W;
  P.planes = plane ? self.numel() / plane : 0;
  return P;
}

}  // namespace

at::Tensor k_avg_pool2d(const at::Tensor & self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                        at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                        ::std::optional<int64_t> divisor_override) {
  const Pool P = geometry("avg_pool2d", self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override);
  return avg_forward("avg_pool2d", self, 2, P, false);
}
at::Tensor k_avg_pool2d_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef kernel_size,
                                 at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                 bool count_include_pad, ::std::optional<int64_t> divisor_override) {
  const Pool P = geometry("avg_pool2d_backward", self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override);
  return avg_backward("avg_pool2d_backward", grad_output, self, P, false);
}
at::Tensor k_avg_pool3d(const at::Tensor & self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                        at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                        ::std::optional<int64_t> divisor_override) {
  const Pool P = geometry("avg_pool3d", self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override);
  return avg_forward("avg_pool3d", self, 3, P, false);
}
at::Tensor k_avg_pool3d_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef kernel_size,
                                 at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                 bool count_include_pad, ::std::optional<int64_t> divisor_override) {
  const Pool P = geometry("avg_pool3d_backward", self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override);
  return avg_backward("avg_pool3d_backward", grad_output, self, P, false);
}
at::Tensor k__adaptive_avg_pool2d(const at::Tensor & self, at::IntArrayRef output_size) {
  const Pool P = adaptive_geometry("adaptive_avg_pool2d", self, 2, output_size);
  return avg_forward("adaptive_avg_pool2d", self, 2, P, true);
}
at::Tensor k__adaptive_avg_pool2d_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  const at::IntArrayRef o = grad_output.sizes().slice(grad_output.dim() - 2);
  const Pool P = adaptive_geometry("adaptive_avg_pool2d_backward", self, 2, o);
  return avg_backward("adaptive_avg_pool2d_backward", grad_output, self, P, true);
}
at::Tensor k__adaptive_avg_pool3d(const at::Tensor & self, at::IntArrayRef output_size) {
  const Pool P = adaptive_geometry("adaptive_avg_pool3d", self, 3, output_size);
  return avg_forward("adaptive_avg_pool3d", self, 3, P, true);
}
at::Tensor k__adaptive_avg_pool3d_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  const at::IntArrayRef o = grad_output.sizes().slice(grad_output.dim() - 3);
  const Pool P = adaptive_geometry("adaptive_avg_pool3d_backward", self, 3, o);
  return avg_backward("adaptive_avg_pool3d_backward", grad_output, self, P, true);
}

}  // namespace ocl::kernels
