// Host parts of sort (stable, every dtype its spec lists) and max_unpool2d/3d
// (device part: kernels/sort.cl).
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/WrapDimMinimal.h>

#include <string>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

std::string element_type(const char* name, const at::Tensor& t) {
  switch (t.element_size()) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    case 8: return "ulong";
    default: TORCH_CHECK(false, "ocl: ", name, ": elements of ", t.element_size(), " bytes are not moved by the OpenCL "
                         "kernel");
  }
}

std::string compare_type(const char* name, at::ScalarType t, int device) {
  switch (t) {
    case at::kFloat: return "#define CT float\n#define CT_FLOAT 1\n#define IN_T float\n#define LOAD(p, o) ((p)[o])\n";
    case at::kDouble:
      TORCH_CHECK(runtime::device_has_fp64(device), "ocl: ", name, ": float64 needs cl_khr_fp64, which ocl:", device,
                  " does not report");
      return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define CT double\n#define CT_FLOAT 1\n#define IN_T double\n"
             "#define LOAD(p, o) ((p)[o])\n";
    case at::kHalf: return "#define CT float\n#define CT_FLOAT 1\n#define IN_T half\n#define LOAD(p, o) vload_half((o), (p))\n";
    case at::kBFloat16:
      return "#define CT float\n#define CT_FLOAT 1\n#define IN_T ushort\n"
             "#define LOAD(p, o) as_float(((uint)(p)[o]) << 16)\n";
    case at::kBool: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T uchar\n#define LOAD(p, o) ((long)((p)[o] != 0))\n";
    case at::kByte: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T uchar\n#define LOAD(p, o) ((long)(p)[o])\n";
    case at::kChar: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T char\n#define LOAD(p, o) ((long)(p)[o])\n";
    case at::kShort: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T short\n#define LOAD(p, o) ((long)(p)[o])\n";
    case at::kInt: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T int\n#define LOAD(p, o) ((long)(p)[o])\n";
    case at::kLong: return "#define CT long\n#define CT_FLOAT 0\n#define IN_T long\n#define LOAD(p, o) ((p)[o])\n";
    default: TORCH_CHECK(false, "ocl: ", name, ": dtype ", t, " is not sorted by the OpenCL kernel");
  }
}

std::tuple<at::Tensor, at::Tensor> sort_impl(const char* name, const at::Tensor& self, int64_t dim, bool descending) {
  const at::TensorOptions lopt = self.options().dtype(at::kLong);
  if (self.dim() == 0) return {self.clone(), at::zeros({}, lopt)};
  const int64_t nd = self.dim();
  const int64_t d = c10::maybe_wrap_dim(dim, nd);
  std::vector<int64_t> perm, inverse(static_cast<std::size_t>(nd));
  for (int64_t k = 0; k < nd; ++k)
    if (k != d) perm.push_back(k);
  perm.push_back(d);
  for (int64_t k = 0; k < nd; ++k) inverse[static_cast<std::size_t>(perm[k])] = k;
  const at::Tensor in = self.permute(perm).contiguous();
  at::Tensor values = at::empty(in.sizes(), self.options());
  at::Tensor indices = at::empty(in.sizes(), lopt);
  const int64_t n = self.size(d);
  const int64_t rows = n ? self.numel() / n : 0;
  if (rows && n) {
    const int device = self.device().index();
    const std::string defs = compare_type(name, self.scalar_type(), device) + "#define ET " +
                             element_type(name, self) + "\n";
    launch_specialised(name, device, "kernels/sort.cl", defs, "sort_rank",
                       runtime::Range1D(static_cast<std::size_t>(rows * n)),
                       {runtime::buffer_arg(values.data_ptr()), runtime::buffer_arg(indices.data_ptr()),
                        runtime::buffer_arg(in.const_data_ptr()), runtime::value_arg<std::uint64_t>(rows),
                        runtime::value_arg<std::uint64_t>(n), runtime::value_arg<std::int32_t>(descending ? 1 : 0)});
  }
  return {values.permute(inverse).contiguous(), indices.permute(inverse).contiguous()};
}

at::Tensor unpool(const char* name, const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                  int64_t dims) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, name, ": elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(output_size.size()) == dims, name, ": There should be exactly ", dims,
              " elements (depth, height, width) in output_size, but got ", output_size.size(), " elements.");
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, ": Input to max_unpooling", dims, "d should be a ",
              dims + 1, "d or ", dims + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
  TORCH_CHECK(self.sizes().equals(indices.sizes()), name, ": Expected shape of indices to be same as that of the "
              "input tensor (", self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - dims);
  int64_t out_n = 1, n = 1;
  for (int64_t j = 0; j < dims; ++j) {
    shape.push_back(output_size[static_cast<std::size_t>(j)]);
    out_n *= output_size[static_cast<std::size_t>(j)];
    n *= self.size(self.dim() - dims + j);
  }
  at::Tensor out = at::zeros(shape, self.options());
  const int64_t planes = n ? self.numel() / n : 0;
  if (planes && n && out_n) {
    const at::Tensor x = self.contiguous(), ix = indices.contiguous();
    const int device = self.device().index();
    const std::string defs = compare_type(name, self.scalar_type(), device) + "#define ET " +
                             element_type(name, self) + "\n";
    launch_specialised(name, device, "kernels/sort.cl", defs, "unpool_plane",
                       runtime::Range1D(static_cast<std::size_t>(planes)),
                       {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
                        runtime::buffer_arg(ix.const_data_ptr()), runtime::value_arg<std::uint64_t>(planes),
                        runtime::value_arg<std::uint64_t>(n), runtime::value_arg<std::uint64_t>(out_n)});
  }
  return out;
}

}  // namespace

::std::tuple<at::Tensor,at::Tensor> k_sort(const at::Tensor & self, int64_t dim, bool descending) {
  return sort_impl("sort", self, dim, descending);
}

::std::tuple<at::Tensor,at::Tensor> k_sort_stable(const at::Tensor & self, ::std::optional<bool> stable, int64_t dim,
                                                  bool descending) {
  (void)stable;  // always stable
  return sort_impl("sort.stable", self, dim, descending);
}

at::Tensor k_max_unpool2d(const at::Tensor & self, const at::Tensor & indices, at::IntArrayRef output_size) {
  return unpool("max_unpool2d", self, indices, output_size, 2);
}

at::Tensor k_max_unpool3d(const at::Tensor & self, const at::Tensor & indices, at::IntArrayRef output_size,
                          at::IntArrayRef stride, at::IntArrayRef padding) {
  (void)stride;
  (void)padding;
  return unpool("max_unpool3d", self, indices, output_size, 3);
}

}  // namespace ocl::kernels
