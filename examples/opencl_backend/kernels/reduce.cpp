// Host parts of sum and mean over dims (device part: kernels/reduce.cl). The reduced dims
// are moved last and made contiguous on the device (the glue's copy, through
// runtime copy_strided), so the kernel sums rows of a [kept, reduced] matrix.
#include "kernels.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/empty.h>
#include <limits>

#include "ocl_kernel.h"

namespace ocl::kernels {

namespace {

// Sum (mean: divided by the count) over `dim` (none or empty: all dims).
at::Tensor reduce_rows(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       ::std::optional<at::ScalarType> dtype, bool mean) {
  TORCH_CHECK(!dtype || *dtype == at::kFloat, "ocl: ", op, ": dtype=", *dtype,
              " is not computed by the OpenCL kernel (float32 only)");
  const int64_t nd = self.dim();
  std::vector<bool> reduced(std::max<int64_t>(nd, 1), false);
  const bool all = !dim || dim->empty();
  if (all) {
    std::fill(reduced.begin(), reduced.end(), true);
  } else {
    for (int64_t d : *dim) {
      const int64_t w = c10::maybe_wrap_dim(d, nd);
      TORCH_CHECK(!reduced[w], "ocl: sum.dim_IntList: dim ", w, " appears multiple times in the list of dims");
      reduced[w] = true;
    }
  }
  std::vector<int64_t> perm, out_shape;
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced[d]) {
      perm.push_back(d);
      rows *= self.size(d);
      out_shape.push_back(self.size(d));
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) {
      perm.push_back(d);
      cols *= self.size(d);
    }
  if (!keepdim) {
    out_shape.clear();
    for (int64_t d = 0; d < nd; ++d)
      if (!reduced[d]) out_shape.push_back(self.size(d));
  }
  at::Tensor out = at::empty(out_shape, self.options());
  if (rows == 0) return out;
  if (cols == 0) return mean ? out.fill_(std::numeric_limits<float>::quiet_NaN()) : out.zero_();
  at::Tensor in = (nd ? self.permute(perm) : self).contiguous();
  constexpr std::size_t kGroup = 64;  // REDUCE_GROUP of reduce.cl
  runtime::Range range;
  range.global[0] = static_cast<std::size_t>(rows) * kGroup;
  range.local[0] = kGroup;
  launch(op, out.device().index(), "kernels/reduce.cl", "sum_rows_f32", range,
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(in.const_data_ptr()),
          runtime::value_arg<std::uint64_t>(rows), runtime::value_arg<std::uint64_t>(cols),
          runtime::value_arg(static_cast<float>(cols)), runtime::value_arg<std::int32_t>(mean ? 1 : 0)});
  return out;
}

}  // namespace

at::Tensor k_sum_dim_IntList(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim,
                             ::std::optional<at::ScalarType> dtype) {
  return reduce_rows("sum.dim_IntList", self, dim, keepdim, dtype, false);
}

at::Tensor k_mean_dim(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim,
                      ::std::optional<at::ScalarType> dtype) {
  return reduce_rows("mean.dim", self, dim, keepdim, dtype, true);
}

}  // namespace ocl::kernels
