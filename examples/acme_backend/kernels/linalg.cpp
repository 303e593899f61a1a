// acme linear-algebra kernels: mm, bmm, addmm (with their out= kernels), baddbmm,
// addbmm, addr, dot, vdot, mv, addmv, _addmm_activation, linalg_cross, _grouped_mm.
// All products go through acme's GEMM (gemm.h -> vendor BLAS). float32 and
// float64 operands are handed to BLAS in place, strides and transposition
// included; float16/bfloat16 operands are widened to float32, multiplied, and
// rounded once into the output.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/common.h"
#include "kernel_lib/dense.h"
#include "math/gemm.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {
using nn::Dense;
using nn::Mat;

// Matrix view of a 2-d tensor (or of batch `b` of a 3-d one) in compute type
// Acc, in a kernel's device part. Same-dtype tensors are viewed in place;
// others are densified into `keep` once per call (keep is shared by all batches).
template <class Acc>
struct MatSource {
  const Acc* base = nullptr;
  int64_t bs = 0, rs = 0, cs = 0, rows = 0, cols = 0;
  Dense<Acc> keep;

  MatSource(const char* op, const DeviceTensor& t) {
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
  nn::check_float(op, t);
  FL_CHECK_T(t.scalar_type() == ref.scalar_type(), op, t, "expected '", arg,
               "' to have the same dtype as the first operand (",
               dtype_name(ref.scalar_type()), ")");
}

std::vector<int64_t> matmul_shape(const at::Tensor& a, const at::Tensor& m2) {
  if (a.dim() == 3) return {a.size(0), a.size(-2), m2.size(-1)};
  return {a.size(-2), m2.size(-1)};
}

// out[b] = alpha * a[b] @ m2[b] + beta * bias (broadcast); bias may be undefined.
// `out` has matmul_shape(a, m2), a's device, and is contiguous.
void matmul_into(const char* op, const at::Tensor& a, const at::Tensor& m2,
                 const at::Tensor* bias, double beta, double alpha, const at::Tensor& out) {
  const int64_t B = a.dim() == 3 ? a.size(0) : 1;
  const int64_t m = a.size(-2), n = m2.size(-1);
  const std::vector<int64_t> shape = matmul_shape(a, m2);
  if (out.numel() == 0) return;
  const bool use_bias = bias != nullptr && bias->defined() && beta != 0.0;
  nn::dispatch_compute(op, a, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, B, m, n, shape, use_bias, beta, alpha, a = DeviceTensor(a),
                 m2 = DeviceTensor(m2), out = DeviceTensor(out),
                 bias = use_bias ? DeviceTensor(*bias) : DeviceTensor()] {
      MatSource<Acc> sa(op, a), sb(op, m2);
      nn::OutBuf<Acc> ob(out);
      Acc* c = ob.data();
      if (use_bias) nn::load_into<Acc>(op, bias, shape, c);
      for (int64_t b = 0; b < B; ++b) {
        nn::gemm<Acc>(op, sa.at(b), sb.at(b), static_cast<Acc>(alpha),
                      use_bias ? static_cast<Acc>(beta) : Acc(0), c + b * m * n, n);
      }
      ob.finish(op);
    });
  });
}

at::Tensor matmul_impl(const char* op, const at::Tensor& a, const at::Tensor& m2,
                       const at::Tensor* bias, double beta, double alpha) {
  at::Tensor out = at::empty(matmul_shape(a, m2), a.options());
  matmul_into(op, a, m2, bias, beta, alpha, out);
  return out;
}

// The out= kernels write straight into `out` (Inductor's graphs call mm, addmm
// and bmm with out=, into buffers it planned) when it is exactly what the
// functional kernel would allocate: the result's shape, the operands' dtype,
// contiguous, and sharing no memory with an operand. Anything else declines
// (false), and the generated wrapper computes, resizes and copies.
bool matmul_out(const char* op, const at::Tensor& a, const at::Tensor& m2, const at::Tensor* bias,
                double beta, double alpha, const at::Tensor& out) {
  if (out.scalar_type() != a.scalar_type() || !out.is_contiguous() ||
      out.sizes() != at::IntArrayRef(matmul_shape(a, m2)))
    return false;
  for (const at::Tensor* t : {&a, &m2, bias})
    if (t != nullptr && t->defined() && at::get_overlap_status(out, *t) != at::MemOverlapStatus::No)
      return false;
  matmul_into(op, a, m2, bias, beta, alpha, out);
  return true;
}

// baddbmm and addbmm: self + batch1 @ batch2 over 3-d batches; self broadcasts
// to the result, which has `self_max_dim` dims (3 for baddbmm, 2 for addbmm).
void check_batched_operands(const char* op, const at::Tensor& self, const at::Tensor& batch1,
                            const at::Tensor& batch2, int64_t self_max_dim) {
  FL_CHECK_T(batch1.dim() == 3, op, batch1, "batch1 must be a 3-d tensor");
  FL_CHECK_T(batch2.dim() == 3, op, batch2, "batch2 must be a 3-d tensor");
  check_float_operand(op, batch1, batch1, "batch1");
  check_float_operand(op, batch1, batch2, "batch2");
  check_float_operand(op, batch1, self, "self");
  FL_CHECK(batch1.size(0) == batch2.size(0), op, "batch sizes differ: ", batch1.size(0),
             " vs ", batch2.size(0));
  FL_CHECK(batch1.size(2) == batch2.size(1), op, "shapes cannot be multiplied (",
             batch1.sizes(), " and ", batch2.sizes(), ")");
  FL_CHECK(self.dim() <= self_max_dim, op, "self must be at most ", self_max_dim, "-d, got ",
             self.sizes());
}

void check_mm(const char* op, const at::Tensor& self, const at::Tensor& mat2) {
  FL_CHECK_T(self.dim() == 2, op, self, "self must be a matrix, got ", self.dim(), "-d");
  FL_CHECK_T(mat2.dim() == 2, op, mat2, "mat2 must be a matrix, got ", mat2.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, mat2, "mat2");
  FL_CHECK(self.size(1) == mat2.size(0), op, "mat1 and mat2 shapes cannot be multiplied (",
             self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
}

void check_bmm(const char* op, const at::Tensor& self, const at::Tensor& mat2) {
  FL_CHECK_T(self.dim() == 3, op, self, "batch1 must be a 3-d tensor, got ", self.dim(), "-d");
  FL_CHECK_T(mat2.dim() == 3, op, mat2, "batch2 must be a 3-d tensor, got ", mat2.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, mat2, "mat2");
  FL_CHECK(self.size(0) == mat2.size(0), op, "batch sizes differ: ", self.size(0), " vs ",
             mat2.size(0));
  FL_CHECK(self.size(2) == mat2.size(1), op, "shapes cannot be multiplied (", self.sizes(),
             " and ", mat2.sizes(), ")");
}

void check_addmm(const char* op, const at::Tensor& self, const at::Tensor& mat1,
                 const at::Tensor& mat2) {
  FL_CHECK_T(mat1.dim() == 2, op, mat1, "mat1 must be a matrix, got ", mat1.dim(), "-d");
  FL_CHECK_T(mat2.dim() == 2, op, mat2, "mat2 must be a matrix, got ", mat2.dim(), "-d");
  check_float_operand(op, mat1, mat1, "mat1");
  check_float_operand(op, mat1, mat2, "mat2");
  check_float_operand(op, mat1, self, "self");
  FL_CHECK(mat1.size(1) == mat2.size(0), op, "mat1 and mat2 shapes cannot be multiplied (",
             mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  FL_CHECK(self.dim() <= 2, op, "self must be at most 2-d, got ", self.sizes());
}

}  // namespace

at::Tensor k_mm(const at::Tensor& self, const at::Tensor& mat2) {
  check_mm("mm", self, mat2);
  return matmul_impl("mm", self, mat2, nullptr, 0.0, 1.0);
}

bool k_mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_mm("mm", self, mat2);
  return matmul_out("mm", self, mat2, nullptr, 0.0, 1.0, out);
}

at::Tensor k_bmm(const at::Tensor& self, const at::Tensor& mat2) {
  check_bmm("bmm", self, mat2);
  return matmul_impl("bmm", self, mat2, nullptr, 0.0, 1.0);
}

bool k_bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  check_bmm("bmm", self, mat2);
  return matmul_out("bmm", self, mat2, nullptr, 0.0, 1.0, out);
}

at::Tensor k_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  check_addmm("addmm", self, mat1, mat2);
  return matmul_impl("addmm", mat1, mat2, &self, beta.to<double>(), alpha.to<double>());
}

bool k_addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  check_addmm("addmm", self, mat1, mat2);
  return matmul_out("addmm", mat1, mat2, &self, beta.to<double>(), alpha.to<double>(), out);
}

at::Tensor k_baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "baddbmm";
  check_batched_operands(op, self, batch1, batch2, 3);
  return matmul_impl(op, batch1, batch2, &self, beta.to<double>(), alpha.to<double>());
}

at::Tensor k_mv(const at::Tensor& self, const at::Tensor& vec) {
  const char* op = "mv";
  FL_CHECK_T(self.dim() == 2, op, self, "self must be a matrix, got ", self.dim(), "-d");
  FL_CHECK_T(vec.dim() == 1, op, vec, "vec must be 1-d, got ", vec.dim(), "-d");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, vec, "vec");
  FL_CHECK(self.size(1) == vec.size(0), op, "size mismatch, got input (", self.size(0),
             "x", self.size(1), "), vec (", vec.size(0), ")");
  return matmul_impl(op, self, vec.unsqueeze(1), nullptr, 0.0, 1.0).squeeze(1);
}

at::Tensor k_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "addmv";
  FL_CHECK_T(mat.dim() == 2, op, mat, "mat must be a matrix, got ", mat.dim(), "-d");
  FL_CHECK_T(vec.dim() == 1, op, vec, "vec must be 1-d, got ", vec.dim(), "-d");
  check_float_operand(op, mat, mat, "mat");
  check_float_operand(op, mat, vec, "vec");
  check_float_operand(op, mat, self, "self");
  FL_CHECK(mat.size(1) == vec.size(0), op, "size mismatch, got mat (", mat.size(0), "x",
             mat.size(1), "), vec (", vec.size(0), ")");
  FL_CHECK(self.dim() <= 1, op, "self must be at most 1-d, got ", self.sizes());
  // self (m) broadcast against the (m, 1) result column.
  const at::Tensor bias = self.dim() == 1 ? self.unsqueeze(1) : self;
  return matmul_impl(op, mat, vec.unsqueeze(1), &bias, beta.to<double>(), alpha.to<double>())
      .squeeze(1);
}

at::Tensor k_dot(const at::Tensor& self, const at::Tensor& tensor) {
  const char* op = "dot";
  FL_CHECK_T(self.dim() == 1 && tensor.dim() == 1, op, self,
               "1D tensors expected, but got ", self.dim(), "D and ", tensor.dim(), "D tensors");
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, tensor, "tensor");
  FL_CHECK(self.size(0) == tensor.size(0), op,
             "inconsistent tensor size, expected tensor [", self.size(0),
             "] and src [", tensor.size(0), "] to have the same number of elements");
  // (1 x k) @ (k x 1) through the same GEMM path, then drop both dims.
  return matmul_impl(op, self.unsqueeze(0), tensor.unsqueeze(1), nullptr, 0.0, 1.0)
      .reshape({});
}

at::Tensor k_vdot(const at::Tensor& self, const at::Tensor& other) {
  // acme has no complex dtypes, so vdot (conjugating dot) is dot.
  return k_dot(self, other);
}

// addr is elementwise in torch, not a GEMM: out = beta * self + alpha * v1 (x) v2,
// where beta == 0 ignores self (NaN included) but alpha == 0 still multiplies
// (NaN in a vector stays NaN), and inputs promote like a pointwise op. A bool
// result is (beta && self) || (alpha && v1 && v2).
at::Tensor k_addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                  const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "addr";
  FL_CHECK_T(vec1.dim() == 1 && vec2.dim() == 1, op, vec1, "vec1 and vec2 must be 1-d, got ",
               vec1.dim(), "-d and ", vec2.dim(), "-d");
  const int64_t m = vec1.size(0), n = vec2.size(0);
  FL_CHECK_T(self.dim() <= 2 &&
                   (self.dim() < 1 || self.size(-1) == n || self.size(-1) == 1) &&
                   (self.dim() < 2 || self.size(0) == m || self.size(0) == 1),
               op, self, "self of shape ", self.sizes(), " does not broadcast to [", m, ", ", n, "]");
  const auto compute = promote({&self, &vec1, &vec2});
  if (c10::isIntegralType(compute, /*includeBool=*/false)) {
    FL_CHECK(!beta.isFloatingPoint(), op,
               "For integral input tensors, argument beta must not be a floating point number.");
    FL_CHECK(!alpha.isFloatingPoint(), op,
               "For integral input tensors, argument alpha must not be a floating point number.");
  }
  const at::Tensor s = cast(op, self, compute);
  const at::Tensor a = cast(op, vec1, compute);
  const at::Tensor b = cast(op, vec2, compute);
  at::Tensor out = at::empty({m, n}, vec1.options().dtype(compute));
  if (out.numel() == 0) return out;
  StridedIter it(out.sizes());
  it.add(out);
  it.add(s);
  // vec1 as a column: its address with strides (stride(0), 0), no data read
  const int64_t m_sizes[2] = {m, 1}, m_strides[2] = {a.stride(0), 0};
  it.add_strided(static_cast<char*>(const_cast<void*>(a.const_data_ptr())), m_sizes, m_strides,
                 static_cast<int64_t>(a.element_size()));
  it.add(b);
  it.build();
  dispatch<kAll>(op, out.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    if constexpr (std::is_same_v<T, bool>) {
      const bool bt = beta.to<bool>(), al = alpha.to<bool>();
      launch(out, [it, bt, al] {
        map3<bool, bool, bool, bool>(it, [=](bool x, bool u, bool v) { return (bt && x) || (al && u && v); });
      });
    } else {
      using M = opmath_t<T>;
      const M bt = beta.to<M>(), al = alpha.to<M>();
      launch(out, [it, bt, al] {
        if (bt == M(0)) {
          map3<T, T, T, T>(it, [=](T, T u, T v) { return al * static_cast<M>(u) * static_cast<M>(v); });
        } else {
          map3<T, T, T, T>(it, [=](T x, T u, T v) {
            return bt * static_cast<M>(x) + al * static_cast<M>(u) * static_cast<M>(v);
          });
        }
      });
    }
  });
  return out;
}

at::Tensor k_addbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                    const at::Scalar& beta, const at::Scalar& alpha) {
  const char* op = "addbmm";
  check_batched_operands(op, self, batch1, batch2, 2);
  const int64_t B = batch1.size(0), m = batch1.size(1), n = batch2.size(2);
  const double b = beta.to<double>(), a = alpha.to<double>();
  at::Tensor out = at::empty({m, n}, batch1.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, batch1, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, B, m, n, a, b, self = DeviceTensor(self),
                 batch1 = DeviceTensor(batch1), batch2 = DeviceTensor(batch2),
                 out = DeviceTensor(out)] {
      MatSource<Acc> sa(op, batch1), sb(op, batch2);
      nn::OutBuf<Acc> ob(out);
      Acc* c = ob.data();
      const bool use_bias = b != 0.0;
      if (use_bias) {
        nn::load_into<Acc>(op, self, {m, n}, c);
        for (int64_t i = 0; i < m * n; ++i) c[i] *= static_cast<Acc>(b);
      } else {
        std::fill(c, c + m * n, Acc(0));
      }
      // sum of products accumulates in C (beta 1 after the bias)
      for (int64_t k = 0; k < B; ++k)
        nn::gemm<Acc>(op, sa.at(k), sb.at(k), static_cast<Acc>(a), Acc(1), c, n);
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k__addmm_activation(const at::Tensor& self, const at::Tensor& mat1,
                               const at::Tensor& mat2, const at::Scalar& beta,
                               const at::Scalar& alpha, bool use_gelu) {
  const char* op = "_addmm_activation";
  FL_CHECK_T(mat1.dim() == 2 && mat2.dim() == 2, op, mat1, "mat1 and mat2 must be matrices");
  check_float_operand(op, mat1, mat1, "mat1");
  check_float_operand(op, mat1, mat2, "mat2");
  check_float_operand(op, mat1, self, "self");
  FL_CHECK(mat1.size(1) == mat2.size(0), op, "mat1 and mat2 shapes cannot be multiplied (",
             mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  const int64_t m = mat1.size(0), n = mat2.size(1);
  const double b = beta.to<double>(), a = alpha.to<double>();
  at::Tensor out = at::empty({m, n}, mat1.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, mat1, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, m, n, a, b, use_gelu, self = DeviceTensor(self),
                 mat1 = DeviceTensor(mat1), mat2 = DeviceTensor(mat2),
                 out = DeviceTensor(out)] {
    MatSource<Acc> sa(op, mat1), sb(op, mat2);
    nn::OutBuf<Acc> ob(out);
    Acc* c = ob.data();
    if (b != 0.0) nn::load_into<Acc>(op, self, {m, n}, c);
    nn::gemm<Acc>(op, sa.at(0), sb.at(0), static_cast<Acc>(a), static_cast<Acc>(b), c, n);
    // fused epilogue: exact (erf) GELU or ReLU, before the single rounding
    if (use_gelu) {
      for (int64_t i = 0; i < m * n; ++i)
        c[i] = Acc(0.5) * c[i] * (Acc(1) + std::erf(c[i] * static_cast<Acc>(M_SQRT1_2)));
    } else {
      for (int64_t i = 0; i < m * n; ++i) c[i] = c[i] > Acc(0) ? c[i] : (std::isnan(c[i]) ? c[i] : Acc(0));
    }
    ob.finish(op);
    });
  });
  return out;
}

at::Tensor k_linalg_cross(const at::Tensor& self, const at::Tensor& other, int64_t dim) {
  const char* op = "linalg_cross";
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, other, "other");
  FL_CHECK(self.dim() == other.dim(), op, "inputs must have the same number of dimensions, got ",
             self.dim(), " and ", other.dim());
  const int64_t nd = self.dim();
  FL_CHECK(dim >= -nd && dim < nd, op, "dim ", dim, " out of range for ", nd, "-d inputs");
  if (dim < 0) dim += nd;
  std::vector<int64_t> shape(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t x = self.size(d), y = other.size(d);
    FL_CHECK(x == y || x == 1 || y == 1, op, "shapes ", self.sizes(), " and ", other.sizes(),
               " do not broadcast");
    shape[d] = x == 1 ? y : x;
  }
  FL_CHECK(self.size(dim) == 3 && other.size(dim) == 3, op,
             "inputs dimension ", dim, " must have length 3, got ", self.size(dim), " and ",
             other.size(dim));
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, shape, outer, inner, self = DeviceTensor(self),
                 other = DeviceTensor(other), out = DeviceTensor(out)] {
    auto a = nn::load<Acc>(op, self, shape);
    auto b = nn::load<Acc>(op, other, shape);
    nn::OutBuf<Acc> ob(out);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * 3 * inner + i;
        const Acc* x = a.data() + base;
        const Acc* y = b.data() + base;
        Acc* z = ob.data() + base;
        const Acc x0 = x[0], x1 = x[inner], x2 = x[2 * inner];
        const Acc y0 = y[0], y1 = y[inner], y2 = y[2 * inner];
        z[0] = x1 * y2 - x2 * y1;
        z[inner] = x2 * y0 - x0 * y2;
        z[2 * inner] = x0 * y1 - x1 * y0;
      }
    ob.finish(op);
    });
  });
  return out;
}


// _grouped_mm: a GEMM per group in one launch. offs (int32, one entry per group)
// holds each group's end along the split dimension: the rows of a 2-d self
// (2-d x 3-d), the columns of a 2-d mat2 (3-d x 2-d), or the shared inner
// dimension (2-d x 2-d, one [M, N] result per group); 3-d x 3-d takes no offs
// and is a bmm. The offsets are read in the device part, so nothing waits on the
// host (PyTorch's CPU path copies them to the host first). Result rows or columns
// no group covers are zero (the CPU path leaves them unwritten).
at::Tensor k__grouped_mm(const at::Tensor& self, const at::Tensor& mat2,
                         const ::std::optional<at::Tensor>& offs_,
                         const ::std::optional<at::Tensor>& bias,
                         ::std::optional<at::ScalarType> out_dtype) {
  const char* op = "_grouped_mm";
  check_float_operand(op, self, self, "self");
  check_float_operand(op, self, mat2, "mat2");
  FL_CHECK_T(self.dim() == 2 || self.dim() == 3, op, self, "self must be 2-d or 3-d, got ",
             self.dim(), "-d");
  FL_CHECK_T(mat2.dim() == 2 || mat2.dim() == 3, op, mat2, "mat2 must be 2-d or 3-d, got ",
             mat2.dim(), "-d");
  FL_CHECK(!bias.has_value() || !bias->defined(), op, "bias is not supported (as on the CPU)");
  FL_CHECK(!out_dtype.has_value() || *out_dtype == self.scalar_type(), op,
           "out_dtype must be self's dtype (", dtype_name(self.scalar_type()), ")");
  const bool a2 = self.dim() == 2, b2 = mat2.dim() == 2;
  const bool has_offs = offs_.has_value() && offs_->defined();
  FL_CHECK(has_offs == (a2 || b2), op,
           "offs must be given when self or mat2 is 2-d, and only then (got ",
           has_offs ? "offs" : "no offs", " for ", self.dim(), "-d x ", mat2.dim(), "-d)");
  FL_CHECK(self.size(-1) == mat2.size(-2), op, "shapes cannot be multiplied (", self.sizes(),
           " and ", mat2.sizes(), ")");
  at::Tensor offs;
  int64_t groups = a2 && b2 ? 0 : (a2 ? mat2.size(0) : self.size(0));
  if (has_offs) {
    FL_CHECK_T(offs_->scalar_type() == at::kInt && offs_->dim() == 1, op, *offs_,
               "offs must be a 1-d int32 tensor");
    FL_CHECK(offs_->device() == self.device(), op, "offs is on ", offs_->device(),
             ", self on ", self.device());
    offs = offs_->contiguous();
    if (a2 && b2) groups = offs.size(0);
    FL_CHECK(offs.size(0) == groups, op, "offs has ", offs.size(0), " entries for ", groups,
             " groups");
  }
  const int64_t M = a2 ? self.size(0) : self.size(1);
  const int64_t N = mat2.size(-1);
  // 2-d x 2-d and 3-d x 3-d give a result per group; the mixed forms one matrix
  at::Tensor out = at::empty(a2 == b2 ? std::vector<int64_t>{groups, M, N} : std::vector<int64_t>{M, N},
                             self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, a2, b2, groups, M, N, a = DeviceTensor(self), b = DeviceTensor(mat2),
                 offs = has_offs ? DeviceTensor(offs) : DeviceTensor(), out = DeviceTensor(out)] {
      MatSource<Acc> sa(op, a), sb(op, b);
      nn::OutBuf<Acc> ob(out);
      Acc* c = ob.data();
      std::fill(c, c + out.numel(), Acc(0));
      const int32_t* ends = offs.defined() ? offs.const_data_ptr<int32_t>() : nullptr;
      // the split dimension's length, which the offsets must stay within
      const int64_t split = a2 && b2 ? a.size(1) : (a2 ? M : N);
      int64_t start = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t end = ends ? ends[g] : 0;
        if (ends) {
          FL_CHECK(end >= start && end <= split, op, "offs[", g, "] = ", end,
                   ": offsets must be non-decreasing and at most ", split);
        }
        if (a2 && b2) {  // inner dimension split: out[g] = a[:, start:end] @ b[start:end, :]
          const Mat<Acc> ma{sa.base + start * sa.cs, M, end - start, sa.rs, sa.cs};
          const Mat<Acc> mb{sb.base + start * sb.rs, end - start, N, sb.rs, sb.cs};
          nn::gemm<Acc>(op, ma, mb, Acc(1), Acc(0), c + g * M * N, N);
        } else if (a2) {  // rows of a: out[start:end] = a[start:end] @ b[g]
          const Mat<Acc> ma{sa.base + start * sa.rs, end - start, sa.cols, sa.rs, sa.cs};
          nn::gemm<Acc>(op, ma, sb.at(g), Acc(1), Acc(0), c + start * N, N);
        } else if (b2) {  // columns of b: out[:, start:end] = a[g] @ b[:, start:end]
          const Mat<Acc> mb{sb.base + start * sb.cs, sb.rows, end - start, sb.rs, sb.cs};
          nn::gemm<Acc>(op, sa.at(g), mb, Acc(1), Acc(0), c + start, N);
        } else {  // batched
          nn::gemm<Acc>(op, sa.at(g), sb.at(g), Acc(1), Acc(0), c + g * M * N, N);
        }
        start = end;
      }
      ob.finish(op);
    });
  });
  return out;
}

}  // namespace acme::kernels
