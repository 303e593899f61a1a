// Host parts of the convolutions nn.Conv1d/2d/3d and nn.ConvTranspose* reach on
// PrivateUse1 (convolution_overrideable and its backward; device parts:
// kernels/conv.cl). Spatial dims are padded to 3 with size-1 dims.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

// Mirrors conv.cl's Geom.
struct Geom {
  int64_t N, CI, CO, G;
  int64_t I[3], O[3], K[3], s[3], p[3], d[3];
};

struct Conv {
  int64_t N, Cin, Cout, G;
  int64_t I[3], O[3], K[3], s[3], p[3], d[3];
};

int64_t at_or(at::IntArrayRef v, size_t i, size_t spatial, int64_t fallback, const char* what) {
  if (v.empty()) return fallback;
  TORCH_CHECK(v.size() == 1 || v.size() == spatial, "ocl: convolution: ", what, " must have 1 or ", spatial,
              " values, got ", v.size());
  return v.size() == 1 ? v[0] : v[i];
}

Conv describe(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride, at::IntArrayRef padding,
              at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups) {
  const int64_t nd = input.dim();
  TORCH_CHECK(nd >= 3 && nd <= 5, "ocl: convolution: expected a 3-D to 5-D input (N, C, spatial...), got ", nd, "-D");
  TORCH_CHECK(weight.dim() == nd, "ocl: convolution: weight must have ", nd, " dims like the input, got ", weight.dim());
  TORCH_CHECK(groups > 0, "ocl: convolution: groups must be positive, got ", groups);
  TORCH_CHECK(input.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
              "ocl: convolution: the OpenCL kernel computes float32 only (input ", input.scalar_type(), ", weight ",
              weight.scalar_type(), ")");
  const size_t spatial = static_cast<size_t>(nd - 2);
  Conv c{};
  c.N = input.size(0);
  c.Cin = input.size(1);
  c.G = groups;
  if (transposed) {
    TORCH_CHECK(weight.size(0) == c.Cin, "ocl: convolution: transposed weight of shape ", weight.sizes(),
                " expects ", weight.size(0), " input channels, got ", c.Cin);
    c.Cout = weight.size(1) * groups;
  } else {
    TORCH_CHECK(weight.size(1) * groups == c.Cin, "ocl: convolution: weight of shape ", weight.sizes(), " with ",
                groups, " groups expects ", weight.size(1) * groups, " input channels, got ", c.Cin);
    c.Cout = weight.size(0);
  }
  TORCH_CHECK(c.Cin % groups == 0 && c.Cout % groups == 0, "ocl: convolution: channels (", c.Cin, " in, ", c.Cout,
              " out) must divide into ", groups, " groups");
  for (int j = 0; j < 3; ++j) {
    const int64_t sd = j - (3 - static_cast<int64_t>(spatial));  // the spatial dim, or < 0 for a padded one
    if (sd < 0) {
      c.I[j] = c.K[j] = c.s[j] = c.d[j] = c.O[j] = 1;
      c.p[j] = 0;
      continue;
    }
    c.I[j] = input.size(2 + sd);
    c.K[j] = weight.size(2 + sd);
    c.s[j] = at_or(stride, sd, spatial, 1, "stride");
    c.p[j] = at_or(padding, sd, spatial, 0, "padding");
    c.d[j] = at_or(dilation, sd, spatial, 1, "dilation");
    TORCH_CHECK(c.s[j] > 0 && c.d[j] > 0 && c.p[j] >= 0, "ocl: convolution: stride and dilation must be positive "
                "and padding non-negative");
    if (transposed) {
      const int64_t op = at_or(output_padding, sd, spatial, 0, "output_padding");
      c.O[j] = (c.I[j] - 1) * c.s[j] - 2 * c.p[j] + c.d[j] * (c.K[j] - 1) + op + 1;
    } else {
      c.O[j] = (c.I[j] + 2 * c.p[j] - c.d[j] * (c.K[j] - 1) - 1) / c.s[j] + 1;
    }
    TORCH_CHECK(c.O[j] > 0, "ocl: convolution: the output would be empty (input ", input.sizes(), ", kernel ",
                weight.sizes(), ")");
  }
  return c;
}

// Geometry of a kernel reading `from` ([N, CI, I]) and writing `to` ([N, CO, O]).
Geom geom(int64_t N, int64_t G, int64_t CI, const int64_t* I, int64_t CO, const int64_t* O, const Conv& c) {
  Geom g{N, CI, CO, G, {}, {}, {}, {}, {}, {}};
  for (int j = 0; j < 3; ++j) {
    g.I[j] = I[j];
    g.O[j] = O[j];
    g.K[j] = c.K[j];
    g.s[j] = c.s[j];
    g.p[j] = c.p[j];
    g.d[j] = c.d[j];
  }
  return g;
}

std::vector<int64_t> shape_of(int64_t N, int64_t C, const int64_t* S, int64_t spatial) {
  std::vector<int64_t> shape{N, C};
  for (int64_t j = 3 - spatial; j < 3; ++j) shape.push_back(S[j]);
  return shape;
}

void run(const char* op, const char* kernel, const at::Tensor& out, const at::Tensor& in, const at::Tensor& w,
         const at::Tensor* bias, const Geom& g) {
  const int64_t total = out.numel();
  if (!total) return;
  launch(op, out.device().index(), "kernels/conv.cl", kernel, runtime::Range1D(static_cast<std::size_t>(total)),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
          runtime::buffer_arg(w.const_data_ptr()), runtime::buffer_arg(bias ? bias->const_data_ptr() : w.const_data_ptr()),
          runtime::value_arg(g), runtime::value_arg<std::int32_t>(bias ? 1 : 0)});
}

}  // namespace

at::Tensor k_convolution_overrideable(const at::Tensor & input, const at::Tensor & weight,
                                      const ::std::optional<at::Tensor> & bias, at::IntArrayRef stride,
                                      at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                      at::IntArrayRef output_padding, int64_t groups) {
  const char* op = "convolution_overrideable";
  const Conv c = describe(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  const int64_t spatial = input.dim() - 2;
  at::Tensor x = input.contiguous(), w = weight.contiguous();
  at::Tensor b;
  if (bias && bias->defined()) {
    TORCH_CHECK(bias->numel() == c.Cout && bias->scalar_type() == at::kFloat, "ocl: convolution: bias must be "
                "float32 with ", c.Cout, " elements, got ", bias->numel(), " of ", bias->scalar_type());
    b = bias->contiguous();
  }
  at::Tensor out = at::empty(shape_of(c.N, c.Cout, c.O, spatial), x.options());
  run(op, transposed ? "conv_tfwd_f32" : "conv_fwd_f32", out, x, w, b.defined() ? &b : nullptr,
      geom(c.N, c.G, c.Cin, c.I, c.Cout, c.O, c));
  return out;
}

::std::tuple<at::Tensor,at::Tensor,at::Tensor> k_convolution_backward_overrideable(
    const at::Tensor & grad_output, const at::Tensor & input, const at::Tensor & weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, ::std::array<bool,3> output_mask) {
  const char* op = "convolution_backward_overrideable";
  const Conv c = describe(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  const int64_t spatial = input.dim() - 2;
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(shape_of(c.N, c.Cout, c.O, spatial)), "ocl: ", op,
              ": grad_output of shape ", grad_output.sizes(), " does not match the convolution's output ",
              at::IntArrayRef(shape_of(c.N, c.Cout, c.O, spatial)));
  at::Tensor go = grad_output.contiguous(), x = input.contiguous(), w = weight.contiguous();
  at::Tensor grad_in, grad_w, grad_b;
  if (output_mask[0]) {
    // A convolution's input gradient is the transposed convolution of grad_output,
    // and the other way round: grad_output [N, Cout, O] is read, grad_input [N, Cin, I] written.
    grad_in = at::empty(x.sizes(), x.options());
    run(op, transposed ? "conv_fwd_f32" : "conv_tfwd_f32", grad_in, go, w, nullptr,
        geom(c.N, c.G, c.Cout, c.O, c.Cin, c.I, c));
  }
  if (output_mask[1]) {
    grad_w = at::empty(w.sizes(), w.options());
    // A is iterated, B indexed at a*s - p + k*d (conv.cl, conv_gw_f32)
    const at::Tensor& A = transposed ? x : go;
    const at::Tensor& B = transposed ? go : x;
    const Geom g = transposed ? geom(c.N, c.G, c.Cin, c.I, c.Cout, c.O, c) : geom(c.N, c.G, c.Cout, c.O, c.Cin, c.I, c);
    if (grad_w.numel())
      launch(op, grad_w.device().index(), "kernels/conv.cl", "conv_gw_f32",
             runtime::Range1D(static_cast<std::size_t>(grad_w.numel())),
             {runtime::buffer_arg(grad_w.data_ptr()), runtime::buffer_arg(A.const_data_ptr()),
              runtime::buffer_arg(B.const_data_ptr()), runtime::value_arg(g)});
  }
  if (output_mask[2]) {
    std::vector<int64_t> dims{0};
    for (int64_t j = 0; j < spatial; ++j) dims.push_back(2 + j);
    grad_b = k_sum_dim_IntList(go, dims, false, std::nullopt);
  }
  return {grad_in, grad_w, grad_b};
}

}  // namespace ocl::kernels
