// acme linear-algebra kernels: mm, bmm, addmm, baddbmm, dot, mv, addmv.
// All products go through acme's GEMM (gemm.h -> vendor BLAS). float32 and
// float64 operands are handed to BLAS in place, strides and transposition
// included; float16/bfloat16 operands are widened to float32, multiplied, and
// rounded once into the output.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "gemm.h"
#include "nn_buffers.h"

namespace acme::kernels {
namespace {

namespace cm = ::acme::common;
using nn::Dense;
using nn::Mat;

// Matrix view of a 2-d tensor (or of batch `b` of a 3-d one) in compute type
// Acc. Same-dtype tensors are viewed in place; others are densified into
// `keep` once per call (keep is shared by all batches).
template <class Acc>
struct MatSource {
  const Acc* base = nullptr;
  int64_t bs = 0, rs = 0, cs = 0, rows = 0, cols = 0;
  Dense<Acc> keep;

  MatSource(const char* op, const at::Tensor& t) {
    const int64_t d = t.dim();
    rows = t.size(d - 2);
    cols = t.size(d - 1);
    if (t.scalar_type() == c10::CppTypeToScalarType<Acc>::value) {
      base = t.numel() ? t.const_data_ptr<Acc>() : nullptr;
      rs = t.stride(d - 2);
      cs = t.stride(d - 1);
      bs = d == 3 ? t.stride(0) : 0;
    } else {
      keep = nn::load<Acc>(op, t);
      base = keep.data();
      rs = cols;
      cs = 1;
      bs = rows * cols;
    }
  }
  Mat<Acc> at(int64_t b) const { return Mat<Acc>{base + b * bs, rows, cols, rs, cs}; }
};

void check_float_operand(const char* op, const at::Tensor& ref, const at::Tensor& t,
                         const char* arg) {
  cm::check_same_device(op, ref, t, arg);
  if (!(cm::dtype_bit(t.scalar_type()) & nn::kNNFloat)) {
    cm::fail_dtype(op, t.device(), t.scalar_type(), nn::kNNFloat);
  }
  ACME_CHECK_T(t.scalar_type() == ref.scalar_type(), op, t, "expected '", arg,
               "' to have the same dtype as the first operand (",
               cm::dtype_name(ref.scalar_type()), ")");
}

// out[b] = alpha * a[b] @ m2[b] + beta * bias (broadcast); bias may be undefined.
at::Tensor matmul_impl(const char* op, const at::Tensor& a, const at::Tensor& m2,
                       const at::Tensor* bias, double beta, double alpha) {
  const bool batched = a.dim() == 3;
  const int64_t B = batched ? a.size(0) : 1;
  const int64_t m = a.size(-2), n = m2.size(-1);
  std::vector<int64_t> shape = batched ? std::vector<int64_t>{B, m, n} : std::vector<int64_t>{m, n};
  at::Tensor out = at::empty(shape, a.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, a, [&](auto tag) {
    using Acc = ACME_T(tag);
    MatSource<Acc> sa(op, a), sb(op, m2);
    nn::OutBuf<Acc> ob(out);
    Acc* c = ob.data();
    const bool use_bias = bias != nullptr && bias->defined() && beta != 0.0;
    if (use_bias) nn::load_into<Acc>(op, *bias, shape, c);
    for (int64_t b = 0; b < B; ++b) {
      nn::gemm<Acc>(op, sa.at(b), sb.at(b), static_cast<Acc>(alpha),
                    use_bias ? static_cast<Acc>(beta) : Acc(0), c + b * m * n, n);
    }
    ob.finish(op);
  });
  return out;
}

}  // namespace

at::Tensor k_mm(const at::Tensor& self, const at::Tensor& mat2) {
  const char* op = "mm";
  ACME_CHECK_T(self.dim() == 2, op, self, "self must be a matrix, got ", self.dim(), "-d");
  ACME_CHECK_T(mat2.dim() == 2, op, mat2, "mat2 must be a matrix, got ", mat2.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, mat2, "mat2");
  ACME_CHECK(self.size(1) == mat2.size(0), op, "mat1 and mat2 shapes cannot be multiplied (",
             self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  return matmul_impl(op, self, mat2, nullptr, 0.0, 1.0);
}

at::Tensor k_bmm(const at::Tensor& self, const at::Tensor& mat2) {
  const char* op = "bmm";
  ACME_CHECK_T(self.dim() == 3, op, self, "batch1 must be a 3-d tensor, got ", self.dim(), "-d");
  ACME_CHECK_T(mat2.dim() == 3, op, mat2, "batch2 must be a 3-d tensor, got ", mat2.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, mat2, "mat2");
  ACME_CHECK(self.size(0) == mat2.size(0), op, "batch sizes differ: ", self.size(0), " vs ",
             mat2.size(0));
  ACME_CHECK(self.size(2) == mat2.size(1), op, "shapes cannot be multiplied (", self.sizes(),
             " and ", mat2.sizes(), ")");
  return matmul_impl(op, self, mat2, nullptr, 0.0, 1.0);
}

at::Tensor k_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "addmm";
  ACME_CHECK_T(mat1.dim() == 2, op, mat1, "mat1 must be a matrix, got ", mat1.dim(), "-d");
  ACME_CHECK_T(mat2.dim() == 2, op, mat2, "mat2 must be a matrix, got ", mat2.dim(), "-d");
  check_float_operand(op, mat1, mat1, "mat1");
  check_float_operand(op, mat1, mat2, "mat2");
  check_float_operand(op, mat1, self, "self");
  ACME_CHECK(mat1.size(1) == mat2.size(0), op, "mat1 and mat2 shapes cannot be multiplied (",
             mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  ACME_CHECK(self.dim() <= 2, op, "self must be at most 2-d, got ", self.sizes());
  return matmul_impl(op, mat1, mat2, &self, beta.to<double>(), alpha.to<double>());
}

at::Tensor k_baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "baddbmm";
  ACME_CHECK_T(batch1.dim() == 3, op, batch1, "batch1 must be a 3-d tensor");
  ACME_CHECK_T(batch2.dim() == 3, op, batch2, "batch2 must be a 3-d tensor");
  check_float_operand(op, batch1, batch1, "batch1");
  check_float_operand(op, batch1, batch2, "batch2");
  check_float_operand(op, batch1, self, "self");
  ACME_CHECK(batch1.size(0) == batch2.size(0), op, "batch sizes differ: ", batch1.size(0),
             " vs ", batch2.size(0));
  ACME_CHECK(batch1.size(2) == batch2.size(1), op, "shapes cannot be multiplied (",
             batch1.sizes(), " and ", batch2.sizes(), ")");
  ACME_CHECK(self.dim() <= 3, op, "self must be at most 3-d, got ", self.sizes());
  return matmul_impl(op, batch1, batch2, &self, beta.to<double>(), alpha.to<double>());
}

at::Tensor k_mv(const at::Tensor& self, const at::Tensor& vec) {
  const char* op = "mv";
  ACME_CHECK_T(self.dim() == 2, op, self, "self must be a matrix, got ", self.dim(), "-d");
  ACME_CHECK_T(vec.dim() == 1, op, vec, "vec must be 1-d, got ", vec.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, vec, "vec");
  ACME_CHECK(self.size(1) == vec.size(0), op, "size mismatch, got input (", self.size(0),
             "x", self.size(1), "), vec (", vec.size(0), ")");
  return matmul_impl(op, self, vec.unsqueeze(1), nullptr, 0.0, 1.0).squeeze(1);
}

at::Tensor k_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "addmv";
  ACME_CHECK_T(mat.dim() == 2, op, mat, "mat must be a matrix, got ", mat.dim(), "-d");
  ACME_CHECK_T(vec.dim() == 1, op, vec, "vec must be 1-d, got ", vec.dim(), "-d");
  check_float_operand(op, mat, mat, "mat");
  check_float_operand(op, mat, vec, "vec");
  check_float_operand(op, mat, self, "self");
  ACME_CHECK(mat.size(1) == vec.size(0), op, "size mismatch, got mat (", mat.size(0), "x",
             mat.size(1), "), vec (", vec.size(0), ")");
  ACME_CHECK(self.dim() <= 1, op, "self must be at most 1-d, got ", self.sizes());
  // self (m) broadcast against the (m, 1) result column.
  const at::Tensor bias = self.dim() == 1 ? self.unsqueeze(1) : self;
  return matmul_impl(op, mat, vec.unsqueeze(1), &bias, beta.to<double>(), alpha.to<double>())
      .squeeze(1);
}

at::Tensor k_dot(const at::Tensor& self, const at::Tensor& tensor) {
  const char* op = "dot";
  ACME_CHECK_T(self.dim() == 1 && tensor.dim() == 1, op, self,
               "1D tensors expected, but got ", self.dim(), "D and ", tensor.dim(), "D tensors");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, tensor, "tensor");
  ACME_CHECK(self.size(0) == tensor.size(0), op,
             "inconsistent tensor size, expected tensor [", self.size(0),
             "] and src [", tensor.size(0), "] to have the same number of elements");
  // (1 x k) @ (k x 1) through the same GEMM path, then drop both dims.
  return matmul_impl(op, self.unsqueeze(0), tensor.unsqueeze(1), nullptr, 0.0, 1.0)
      .reshape({});
}

}  // namespace acme::kernels
