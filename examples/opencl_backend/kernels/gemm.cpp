// Host parts of mm, addmm and bmm (device part: kernels/gemm.cl). Operands are read
// through their strides: a transposed view (linear's weight.t()) costs no copy.
#include "kernels.h"

#include <ATen/ops/empty.h>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

constexpr std::size_t kTile = 16;  // TILE of gemm.cl

at::Tensor gemm(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* c, float alpha,
                float beta) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "ocl: ", op, ": expected 2-D matrices, got ", a.dim(), "-D and ",
              b.dim(), "-D (", a.scalar_type(), ")");
  TORCH_CHECK(a.size(1) == b.size(0), "ocl: ", op, ": mat1 and mat2 shapes cannot be multiplied (",
              a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "ocl: ", op, ": expected mat1 and mat2 to have the same dtype, but got ",
              a.scalar_type(), " != ", b.scalar_type());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  at::Tensor out = at::empty({M, N}, a.options());
  if (M == 0 || N == 0) return out;
  int64_t c_rs = 0, c_cs = 0;
  if (c) {
    TORCH_CHECK(c->scalar_type() == a.scalar_type(), "ocl: ", op, ": self has dtype ", c->scalar_type(),
                " but the matrices ", a.scalar_type());
    TORCH_CHECK(c->dim() <= 2, "ocl: ", op, ": self must be a matrix, got ", c->dim(), "-D");
    const std::vector<int64_t> shape = at::infer_size(c->sizes(), {M, N});
    TORCH_CHECK(shape == std::vector<int64_t>({M, N}), "ocl: ", op, ": self of shape ", c->sizes(),
                " does not broadcast to ", M, "x", N);
    // Broadcast by strides: size-1 or missing dims read the same element.
    if (c->dim() == 2) {
      c_rs = c->size(0) == 1 ? 0 : c->stride(0);
      c_cs = c->size(1) == 1 ? 0 : c->stride(1);
    } else if (c->dim() == 1) {
      c_cs = c->size(0) == 1 ? 0 : c->stride(0);
    }
  }
  const bool has_c = c != nullptr && beta != 0.0f;
  const void* c_ptr = has_c ? c->const_data_ptr() : a.const_data_ptr();  // unused when !has_c
  launch(op, out.device().index(), "kernels/gemm.cl", "gemm_f32",
         runtime::Range2D(static_cast<std::size_t>(N), static_cast<std::size_t>(M), kTile, kTile),
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(a.const_data_ptr()),
          runtime::buffer_arg(b.const_data_ptr()), runtime::buffer_arg(c_ptr), runtime::value_arg(M),
          runtime::value_arg(N), runtime::value_arg(K), runtime::value_arg(a.stride(0)),
          runtime::value_arg(a.stride(1)), runtime::value_arg(b.stride(0)), runtime::value_arg(b.stride(1)),
          runtime::value_arg(c_rs), runtime::value_arg(c_cs), runtime::value_arg(alpha),
          runtime::value_arg(beta), runtime::value_arg<std::int32_t>(has_c ? 1 : 0),
          runtime::value_arg<int64_t>(0), runtime::value_arg<int64_t>(0), runtime::value_arg<int64_t>(0)});
  return out;
}

}  // namespace

at::Tensor k_bmm(const at::Tensor & self, const at::Tensor & mat2) {
  TORCH_CHECK(self.dim() == 3 && mat2.dim() == 3, "ocl: bmm: expected 3-D tensors, got ", self.dim(), "-D and ",
              mat2.dim(), "-D (", self.scalar_type(), ")");
  TORCH_CHECK(self.size(0) == mat2.size(0) && self.size(2) == mat2.size(1), "ocl: bmm: shapes ", self.sizes(),
              " and ", mat2.sizes(), " cannot be multiplied");
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type(), "ocl: bmm: expected both to have the same dtype, got ",
              self.scalar_type(), " and ", mat2.scalar_type());
  const int64_t Bn = self.size(0), M = self.size(1), K = self.size(2), N = mat2.size(2);
  at::Tensor out = at::empty({Bn, M, N}, self.options());
  if (Bn == 0 || M == 0 || N == 0) return out;
  runtime::Range range = runtime::Range2D(static_cast<std::size_t>(N), static_cast<std::size_t>(M), kTile, kTile);
  range.dims = 3;
  range.global[2] = static_cast<std::size_t>(Bn);
  range.local[2] = 1;
  launch("bmm", out.device().index(), "kernels/gemm.cl", "gemm_f32", range,
         {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
          runtime::buffer_arg(mat2.const_data_ptr()), runtime::buffer_arg(self.const_data_ptr()),
          runtime::value_arg(M), runtime::value_arg(N), runtime::value_arg(K), runtime::value_arg(self.stride(1)),
          runtime::value_arg(self.stride(2)), runtime::value_arg(mat2.stride(1)), runtime::value_arg(mat2.stride(2)),
          runtime::value_arg<int64_t>(0), runtime::value_arg<int64_t>(0), runtime::value_arg(1.0f),
          runtime::value_arg(0.0f), runtime::value_arg<std::int32_t>(0), runtime::value_arg(self.stride(0)),
          runtime::value_arg(mat2.stride(0)), runtime::value_arg<int64_t>(0)});
  return out;
}

at::Tensor k_mm(const at::Tensor & self, const at::Tensor & mat2) {
  return gemm("mm", self, mat2, nullptr, 1.0f, 0.0f);
}

at::Tensor k_addmm(const at::Tensor & self, const at::Tensor & mat1, const at::Tensor & mat2,
                   const at::Scalar & beta, const at::Scalar & alpha) {
  return gemm("addmm", mat1, mat2, &self, alpha.toFloat(), beta.toFloat());
}

}  // namespace ocl::kernels
