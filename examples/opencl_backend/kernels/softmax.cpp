// Host parts of softmax, log_softmax and their backward ops (device parts:
// kernels/softmax.cl). The softmax dim is moved last and made contiguous (no
// copy when it is last already), rows are computed, and the result is given
// back in the input's dim order.
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <c10/core/WrapDimMinimal.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

constexpr std::size_t kGroup = 64;  // SOFTMAX_GROUP of softmax.cl

// The permutation moving `dim` last, and its inverse.
void last_dim_perm(int64_t nd, int64_t dim, std::vector<int64_t>* perm, std::vector<int64_t>* inverse) {
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) perm->push_back(d);
  perm->push_back(dim);
  inverse->assign(nd, 0);
  for (int64_t i = 0; i < nd; ++i) (*inverse)[(*perm)[i]] = i;
}

at::Tensor forward(const char* op, const at::Tensor& self, int64_t dim, bool half_to_float, bool log) {
  TORCH_CHECK(!half_to_float, "ocl: ", op, ": half_to_float is for float16 inputs; the OpenCL kernel computes "
              "float32 only (got ", self.scalar_type(), ")");
  const int64_t nd = self.dim();
  const int64_t d = c10::maybe_wrap_dim(dim, nd);
  if (nd == 0) {  // one element: softmax 1, log_softmax 0 (NaN stays NaN through the kernel)
    at::Tensor out = at::empty({1}, self.options());
    at::Tensor in = self.reshape({1});
    runtime::Range one;
    one.global[0] = kGroup;
    one.local[0] = kGroup;  // the kernel requires its work-group size
    launch(op, out.device().index(), "kernels/softmax.cl", "softmax_rows_f32", one,
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
            runtime::value_arg<std::uint64_t>(1), runtime::value_arg<std::int32_t>(log ? 1 : 0)});
    return out.reshape({});
  }
  std::vector<int64_t> perm, inverse;
  last_dim_perm(nd, d, &perm, &inverse);
  at::Tensor in = self.permute(perm).contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  const int64_t cols = self.size(d);
  const int64_t rows = cols ? self.numel() / cols : 0;
  if (rows > 0) {
    runtime::Range range;
    range.global[0] = static_cast<std::size_t>(rows) * kGroup;
    range.local[0] = kGroup;
    launch(op, out.device().index(), "kernels/softmax.cl", "softmax_rows_f32", range,
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
            runtime::value_arg<std::uint64_t>(cols), runtime::value_arg<std::int32_t>(log ? 1 : 0)});
  }
  // Contiguous, as the CPU's result (a permuted view would reach other kernels,
  // and CPU fallbacks that require contiguous inputs, as a strided tensor).
  return d == nd - 1 ? out : out.permute(inverse).contiguous();
}

at::Tensor backward(const char* op, const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                    at::ScalarType input_dtype, bool log) {
  TORCH_CHECK(input_dtype == at::kFloat && grad.scalar_type() == at::kFloat &&
                  output.scalar_type() == at::kFloat,
              "ocl: ", op, ": the OpenCL kernel computes float32 only (grad ", grad.scalar_type(), ", output ",
              output.scalar_type(), ", input_dtype ", input_dtype, ")");
  TORCH_CHECK(grad.sizes() == output.sizes(), "ocl: ", op, ": grad_output of shape ", grad.sizes(),
              " and output of shape ", output.sizes(), " differ");
  const int64_t nd = grad.dim();
  const int64_t d = c10::maybe_wrap_dim(dim, nd);
  std::vector<int64_t> perm, inverse;
  if (nd == 0) {
    perm = {};
    inverse = {};
  } else {
    last_dim_perm(nd, d, &perm, &inverse);
  }
  at::Tensor g = (nd ? grad.permute(perm) : grad.reshape({1})).contiguous();
  at::Tensor o = (nd ? output.permute(perm) : output.reshape({1})).contiguous();
  at::Tensor out = at::empty(g.sizes(), g.options());
  const int64_t cols = nd ? grad.size(d) : 1;
  const int64_t rows = cols ? g.numel() / cols : 0;
  if (rows > 0) {
    runtime::Range range;
    range.global[0] = static_cast<std::size_t>(rows) * kGroup;
    range.local[0] = kGroup;
    launch(op, out.device().index(), "kernels/softmax.cl", "softmax_backward_rows_f32", range,
           {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(g.const_data_ptr()),
            runtime::buffer_arg(o.const_data_ptr()), runtime::value_arg<std::uint64_t>(cols),
            runtime::value_arg<std::int32_t>(log ? 1 : 0)});
  }
  if (nd == 0) return out.reshape({});
  return d == nd - 1 ? out : out.permute(inverse).contiguous();
}

}  // namespace

at::Tensor k__softmax(const at::Tensor & self, int64_t dim, bool half_to_float) {
  return forward("_softmax", self, dim, half_to_float, false);
}

at::Tensor k__log_softmax(const at::Tensor & self, int64_t dim, bool half_to_float) {
  return forward("_log_softmax", self, dim, half_to_float, true);
}

at::Tensor k__softmax_backward_data(const at::Tensor & grad_output, const at::Tensor & output, int64_t dim,
                                    at::ScalarType input_dtype) {
  return backward("_softmax_backward_data", grad_output, output, dim, input_dtype, false);
}

at::Tensor k__log_softmax_backward_data(const at::Tensor & grad_output, const at::Tensor & output,
                                        int64_t dim, at::ScalarType input_dtype) {
  return backward("_log_softmax_backward_data", grad_output, output, dim, input_dtype, true);
}

}  // namespace ocl::kernels
