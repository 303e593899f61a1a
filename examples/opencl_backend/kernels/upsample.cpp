// Host parts of 2-D nearest and bilinear upsampling and their backward, float32
// (device parts: kernels/upsample.cl). The scales are computed here as ATen's
// CPU kernels compute them (UpSample.h: compute_scales_value,
// area_pixel_compute_scale), in float.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include <optional>
#include <vector>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

struct Planes {
  int64_t planes, ih, iw, oh, ow;
};

// A given scale factor s > 0 means the source step is 1/s; else in / out.
float source_step(std::optional<double> scale, int64_t in, int64_t out) {
  return (scale.has_value() && *scale > 0.) ? static_cast<float>(1.0 / *scale)
                                            : static_cast<float>(in) / static_cast<float>(out);
}

float linear_step(std::optional<double> scale, int64_t in, int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  return source_step(scale, in, out);
}

Planes planes_of(const char* op, at::IntArrayRef input_size, at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2, "ocl: ", op, ": output_size must have 2 elements, got ", output_size.size());
  TORCH_CHECK(input_size.size() == 4, "ocl: ", op, ": expected a 4-D input (N, C, H, W), got ", input_size.size(),
              "-D");
  const Planes p{input_size[0] * input_size[1], input_size[2], input_size[3], output_size[0], output_size[1]};
  TORCH_CHECK(p.ih > 0 && p.iw > 0 && p.oh > 0 && p.ow > 0, "ocl: ", op,
              ": input and output sizes should be greater than 0, but got input (H: ", p.ih, ", W: ", p.iw,
              ") output (H: ", p.oh, ", W: ", p.ow, ")");
  return p;
}

std::vector<int64_t> with_hw(at::IntArrayRef nchw, int64_t h, int64_t w) {
  return {nchw[0], nchw[1], h, w};
}

// Queues `kernel` (every kernel of upsample.cl takes these arguments) writing
// `out` from `in`, over `items` work items.
void run(const char* op, const char* kernel, const at::Tensor& out, const at::Tensor& in, const Planes& p,
         int64_t items, float scale_h, float scale_w, bool align_corners) {
  launch(op, in.device().index(), "kernels/upsample.cl", kernel, runtime::Range1D(static_cast<std::size_t>(items)),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
          runtime::value_arg<std::int64_t>(p.planes), runtime::value_arg<std::int64_t>(p.ih),
          runtime::value_arg<std::int64_t>(p.iw), runtime::value_arg<std::int64_t>(p.oh),
          runtime::value_arg<std::int64_t>(p.ow), runtime::value_arg(scale_h), runtime::value_arg(scale_w),
          runtime::value_arg<std::int32_t>(align_corners ? 1 : 0)});
}

// One work item per output element.
at::Tensor forward(const char* op, const char* kernel, const at::Tensor& self, at::IntArrayRef output_size,
                   float scale_h, float scale_w, bool align_corners) {
  const Planes p = planes_of(op, self.sizes(), output_size);
  const at::Tensor x = self.contiguous();
  at::Tensor out = at::empty(with_hw(self.sizes(), p.oh, p.ow), x.options());
  if (p.planes > 0) run(op, kernel, out, x, p, p.planes * p.oh * p.ow, scale_h, scale_w, align_corners);
  return out;
}

// One work item per (n, c) plane.
at::Tensor backward(const char* op, const char* kernel, const at::Tensor& grad_output, at::IntArrayRef output_size,
                    at::IntArrayRef input_size, float scale_h, float scale_w, bool align_corners) {
  const Planes p = planes_of(op, input_size, output_size);
  const std::vector<int64_t> expected = with_hw(input_size, p.oh, p.ow);
  TORCH_CHECK(grad_output.sizes().equals(expected), "ocl: ", op, ": expected grad_output of shape ",
              at::IntArrayRef(expected), " but got ", grad_output.sizes());
  const at::Tensor g = grad_output.contiguous();
  at::Tensor grad_input = at::empty(input_size, g.options());
  if (p.planes > 0) run(op, kernel, grad_input, g, p, p.planes, scale_h, scale_w, align_corners);
  return grad_input;
}

}  // namespace

at::Tensor k_upsample_nearest2d(const at::Tensor & self, at::IntArrayRef output_size,
                                ::std::optional<double> scales_h, ::std::optional<double> scales_w) {
  const char* op = "upsample_nearest2d";
  const Planes p = planes_of(op, self.sizes(), output_size);
  return forward(op, "nearest2d_f32", self, output_size, source_step(scales_h, p.ih, p.oh),
                 source_step(scales_w, p.iw, p.ow), false);
}

at::Tensor k_upsample_nearest2d_backward(const at::Tensor & grad_output, at::IntArrayRef output_size,
                                         at::IntArrayRef input_size, ::std::optional<double> scales_h,
                                         ::std::optional<double> scales_w) {
  const char* op = "upsample_nearest2d_backward";
  const Planes p = planes_of(op, input_size, output_size);
  return backward(op, "nearest2d_backward_f32", grad_output, output_size, input_size,
                  source_step(scales_h, p.ih, p.oh), source_step(scales_w, p.iw, p.ow), false);
}

at::Tensor k_upsample_bilinear2d(const at::Tensor & self, at::IntArrayRef output_size, bool align_corners,
                                 ::std::optional<double> scales_h, ::std::optional<double> scales_w) {
  const char* op = "upsample_bilinear2d";
  const Planes p = planes_of(op, self.sizes(), output_size);
  return forward(op, "bilinear2d_f32", self, output_size, linear_step(scales_h, p.ih, p.oh, align_corners),
                 linear_step(scales_w, p.iw, p.ow, align_corners), align_corners);
}

at::Tensor k_upsample_bilinear2d_backward(const at::Tensor & grad_output, at::IntArrayRef output_size,
                                          at::IntArrayRef input_size, bool align_corners,
                                          ::std::optional<double> scales_h, ::std::optional<double> scales_w) {
  const char* op = "upsample_bilinear2d_backward";
  const Planes p = planes_of(op, input_size, output_size);
  return backward(op, "bilinear2d_backward_f32", grad_output, output_size, input_size,
                  linear_step(scales_h, p.ih, p.oh, align_corners), linear_step(scales_w, p.iw, p.ow, align_corners),
                  align_corners);
}

}  // namespace ocl::kernels
