// Host parts of cat and embedding_dense_backward
// (device parts: kernels/index.cl; cat is device copies into views of its result).
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <c10/core/WrapDimMinimal.h>

#include "ocl_kernel.h"

namespace ocl::kernels {

at::Tensor k_cat(const at::ITensorListRef & tensors, int64_t dim) {
  std::vector<at::Tensor> all(tensors.begin(), tensors.end());
  TORCH_CHECK(!all.empty(), "ocl: cat: expected a non-empty list of tensors");
  // 1-D empty tensors are skipped, as torch.cat's legacy rule says
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : all)
    if (!(t.dim() == 1 && t.numel() == 0)) parts.push_back(t);
  at::ScalarType dtype = all[0].scalar_type();
  for (const at::Tensor& t : all) dtype = at::promote_types(dtype, t.scalar_type());
  if (parts.empty()) return at::empty({0}, all[0].options().dtype(dtype));
  const int64_t nd = parts[0].dim();
  const int64_t d = c10::maybe_wrap_dim(dim, nd);
  std::vector<int64_t> shape = parts[0].sizes().vec();
  shape[d] = 0;
  for (const at::Tensor& t : parts) {
    TORCH_CHECK(t.dim() == nd, "ocl: cat: tensors must have the same number of dims: got ", nd, " and ", t.dim());
    for (int64_t j = 0; j < nd; ++j)
      TORCH_CHECK(j == d || t.size(j) == parts[0].size(j), "ocl: cat: sizes of tensors must match except in "
                  "dimension ", d, ": expected ", parts[0].size(j), " but got ", t.size(j), " in dimension ", j);
    shape[d] += t.size(d);
  }
  at::Tensor out = at::empty(shape, parts[0].options().dtype(dtype));
  int64_t offset = 0;
  for (const at::Tensor& t : parts) {
    // a device copy (the glue's copy_: runtime copy_strided, converting the dtype)
    if (t.size(d)) out.narrow(d, offset, t.size(d)).copy_(t);
    offset += t.size(d);
  }
  return out;
}


at::Tensor k_embedding_dense_backward(const at::Tensor & grad_output, const at::Tensor & indices,
                                      int64_t num_weights, int64_t padding_idx, bool scale_grad_by_freq) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "ocl: embedding_dense_backward: indices must be int64, got ",
              indices.scalar_type());
  const int64_t n = indices.numel();
  const int64_t dim = grad_output.size(-1);
  TORCH_CHECK(grad_output.numel() == n * dim, "ocl: embedding_dense_backward: grad_output of shape ",
              grad_output.sizes(), " does not match ", n, " indices");
  at::Tensor grad_w = at::zeros({num_weights, dim}, grad_output.options());  // a fill: memset
  if (n == 0 || dim == 0) return grad_w;
  at::Tensor g = grad_output.contiguous(), idx = indices.contiguous();
  at::Tensor counts = at::zeros({scale_grad_by_freq ? num_weights : 1}, grad_output.options().dtype(at::kInt));
  const int device = grad_w.device().index();
  if (scale_grad_by_freq)
    launch("embedding_dense_backward", device, "kernels/index.cl", "embedding_count",
           runtime::Range1D(static_cast<std::size_t>(n)),
           {runtime::buffer_arg(counts.data_ptr()), runtime::buffer_arg(idx.const_data_ptr()), runtime::value_arg(n),
            runtime::value_arg(num_weights)});
  launch("embedding_dense_backward", device, "kernels/index.cl", "embedding_backward_f32",
         runtime::Range1D(static_cast<std::size_t>(n * dim)),
         {runtime::buffer_arg(grad_w.data_ptr()), runtime::buffer_arg(g.const_data_ptr()),
          runtime::buffer_arg(idx.const_data_ptr()), runtime::buffer_arg(counts.const_data_ptr()), runtime::value_arg(n),
          runtime::value_arg(dim), runtime::value_arg(num_weights), runtime::value_arg(padding_idx),
          runtime::value_arg<std::int32_t>(scale_grad_by_freq)});
  return grad_w;
}


}  // namespace ocl::kernels
