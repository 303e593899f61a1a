// acme softmax kernels: _softmax, _log_softmax, their backward_data ops, and
// _safe_softmax (the variant scaled_dot_product_attention's math path calls,
// where a row of all -inf gives zeros instead of NaN).
//
// The tensor is seen as (outer, D, inner) around the softmax dim and staged as
// a dense compute-type array. Numerically stable: the row maximum is
// subtracted before exponentiation; exp and the row sums use nn_math.h's
// vectorizable forms.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "math/nn_math.h"
#include "kernel_lib/parallel.h"
#include "math/vec_math.h"
#include "kernels.h"

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

struct Axis {
  int64_t outer = 1, D = 1, inner = 1;
  // Offset of row r (of the outer x inner rows) in the dense array; its
  // elements are inner apart.
  int64_t row_start(int64_t r) const { return (r / inner) * D * inner + r % inner; }
};

Axis make_axis(const char* op, const at::Tensor& t, int64_t dim) {
  const int64_t nd = std::max<int64_t>(t.dim(), 1);
  FL_CHECK_T(dim >= -nd && dim < nd, op, t, "dim ", dim, " out of range for a ", t.dim(),
               "-d tensor");
  if (dim < 0) dim += nd;
  Axis a;
  if (t.dim() == 0) return a;
  for (int64_t d = 0; d < dim; ++d) a.outer *= t.size(d);
  a.D = t.size(dim);
  for (int64_t d = dim + 1; d < t.dim(); ++d) a.inner *= t.size(d);
  return a;
}

// f(r0, r1) for the rows [r0, r1) of the outer x inner rows, split over the
// compute units (~kGrainMath elements per chunk). Rows are independent, so
// the result has the same bits whatever the split. f keeps its own scratch.
template <class F>
void for_rows(const Axis& ax, F&& f) {
  const int64_t grain = std::max<int64_t>(1, kGrainMath / std::max<int64_t>(ax.D, 1));
  parallel_for(ax.outer * ax.inner, grain, f);
}

enum class Kind { kSoftmax, kLogSoftmax, kSafeSoftmax };

// One row of D contiguous values: for float on an AVX2/AVX-512 host the vector
// library's pass (vec_math.h), otherwise the portable loops.
template <class Acc>
void softmax_row(Kind kind, const Acc* row, Acc* res, int64_t D, Acc* tmp, vec::RowFn row_fn) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (row_fn && kind != Kind::kSafeSoftmax) {
      row_fn(kind == Kind::kLogSoftmax ? vec::Row::LogSoftmax : vec::Row::Softmax, row, res, D);
      return;
    }
  }
  const Acc mx = nn::lane_max(row, D);
  if (kind == Kind::kSafeSoftmax && mx == -std::numeric_limits<Acc>::infinity()) {
    std::fill(res, res + D, Acc(0));
  } else if (kind == Kind::kLogSoftmax) {
    nn::exp_shifted(row, mx, tmp, D);
    const Acc lse = std::log(nn::lane_sum(tmp, D));
    for (int64_t d = 0; d < D; ++d) res[d] = row[d] - mx - lse;
  } else {
    nn::exp_shifted(row, mx, res, D);
    const Acc inv = Acc(1) / nn::lane_sum(res, D);
    for (int64_t d = 0; d < D; ++d) res[d] *= inv;
  }
}

at::Tensor softmax_fwd(const char* op, const at::Tensor& self, int64_t dim,
                       c10::ScalarType out_dtype, Kind kind) {
  nn::check_float(op, self);
  const Axis ax = make_axis(op, self, dim);
  at::Tensor out = at::empty(self.sizes(), self.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  // float64 in or out computes in double, everything else in float.
  const at::Tensor& compute_ref =
      out_dtype == c10::ScalarType::Double ? out : self;
  // float rows on an AVX2/AVX-512 host: one vectorized pass per step (vec_math.h)
  const auto row_fn = vec::row_f32();
  nn::dispatch_compute(op, compute_ref, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, ax, kind, row_fn, in = DeviceTensor(self), res = DeviceTensor(out)] {
    auto x = nn::load<Acc>(op, in);
    nn::OutBuf<Acc> ob(res);
    const int64_t D = ax.D, inner = ax.inner;
    const Acc* xd = x.data();
    Acc* od = ob.data();
    for_rows(ax, [&](int64_t r0, int64_t r1) {
      // rows along the softmax dim are contiguous when inner == 1; otherwise
      // each row is gathered into `in_row` and the result scattered from `out_row`
      std::vector<Acc> in_row(inner == 1 ? 0 : D), out_row(inner == 1 ? 0 : D), tmp(D);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t base = ax.row_start(r);
        const Acc* row = xd + base;
        Acc* res = od + base;
        if (inner != 1) {
          for (int64_t d = 0; d < D; ++d) in_row[d] = row[d * inner];
          row = in_row.data();
          res = out_row.data();
        }
        softmax_row(kind, row, res, D, tmp.data(), row_fn);
        if (inner != 1)
          for (int64_t d = 0; d < D; ++d) od[base + d * inner] = out_row[d];
      }
    });
    ob.finish(op);
    });
  });
  return out;
}

c10::ScalarType fwd_out_dtype(const char* op, const at::Tensor& self, bool half_to_float) {
  if (!half_to_float) return self.scalar_type();
  FL_CHECK_T(self.scalar_type() == c10::ScalarType::Half ||
                   self.scalar_type() == c10::ScalarType::BFloat16,
               op, self, "half_to_float requires a float16 or bfloat16 input");
  return c10::ScalarType::Float;
}

at::Tensor softmax_bwd(const char* op, const at::Tensor& grad_output, const at::Tensor& output,
                       int64_t dim, c10::ScalarType input_dtype, bool log) {
  nn::check_float(op, grad_output);
  nn::check_float(op, output);
  FL_CHECK_T(grad_output.sizes().equals(output.sizes()), op, grad_output,
               "grad_output has shape ", grad_output.sizes(), ", output has ", output.sizes());
  FL_CHECK(dtype_bit(input_dtype) & nn::kNNFloat, op, "input_dtype ",
             dtype_name(input_dtype), " is not a supported float dtype");
  const Axis ax = make_axis(op, output, dim);
  // As on CPU: the gradient has grad_output's dtype, except in the half_to_float
  // case (float32 gradients of a float16/bfloat16 input), where it has the input's.
  const bool half_to_float = grad_output.scalar_type() == c10::ScalarType::Float &&
                             (input_dtype == c10::ScalarType::Half ||
                              input_dtype == c10::ScalarType::BFloat16);
  at::Tensor gi = at::empty(output.sizes(),
                            grad_output.options().dtype(half_to_float ? input_dtype
                                                                      : grad_output.scalar_type()));
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gi, [op, ax, log, go = DeviceTensor(grad_output), yo = DeviceTensor(output),
                res = DeviceTensor(gi)] {
    auto g = nn::load<Acc>(op, go);
    auto y = nn::load<Acc>(op, yo);
    nn::OutBuf<Acc> ob(res);
    const int64_t D = ax.D, inner = ax.inner;
    for_rows(ax, [&](int64_t r0, int64_t r1) {
      std::vector<Acc> gr(inner == 1 ? 0 : D), yr(inner == 1 ? 0 : D), rr(inner == 1 ? 0 : D);
      std::vector<Acc> ey(log ? D : 0);
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t base = ax.row_start(r);
        const Acc* gp = g.data() + base;
        const Acc* yp = y.data() + base;
        Acc* dst = ob.data() + base;
        Acc* res = dst;
        if (inner != 1) {
          for (int64_t d = 0; d < D; ++d) {
            gr[d] = gp[d * inner];
            yr[d] = yp[d * inner];
          }
          gp = gr.data();
          yp = yr.data();
          res = rr.data();
        }
        if (log) {
          // d/dx log_softmax: g - exp(y) * sum(g)
          const Acc sg = nn::lane_sum(gp, D);
          nn::exp_shifted(yp, Acc(0), ey.data(), D);
          for (int64_t d = 0; d < D; ++d) res[d] = gp[d] - ey[d] * sg;
        } else {
          // d/dx softmax: y * (g - sum(g * y))
          const Acc sgy = nn::lane_dot(gp, yp, D);
          for (int64_t d = 0; d < D; ++d) res[d] = yp[d] * (gp[d] - sgy);
        }
        if (inner != 1)
          for (int64_t d = 0; d < D; ++d) dst[d * inner] = rr[d];
      }
    });
    ob.finish(op);
    });
  });
  return gi;
}

}  // namespace

at::Tensor k__softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  const char* op = "_softmax";
  return softmax_fwd(op, self, dim, fwd_out_dtype(op, self, half_to_float), Kind::kSoftmax);
}

at::Tensor k__log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  const char* op = "_log_softmax";
  return softmax_fwd(op, self, dim, fwd_out_dtype(op, self, half_to_float), Kind::kLogSoftmax);
}

at::Tensor k__softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output,
                                    int64_t dim, at::ScalarType input_dtype) {
  return softmax_bwd("_softmax_backward_data", grad_output, output, dim, input_dtype, false);
}

at::Tensor k__log_softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output,
                                        int64_t dim, at::ScalarType input_dtype) {
  return softmax_bwd("_log_softmax_backward_data", grad_output, output, dim, input_dtype, true);
}

at::Tensor k__safe_softmax(const at::Tensor& self, int64_t dim,
                           ::std::optional<at::ScalarType> dtype) {
  const char* op = "_safe_softmax";
  const auto out_dtype = dtype.value_or(self.scalar_type());
  FL_CHECK(dtype_bit(out_dtype) & nn::kNNFloat, op, "dtype ", dtype_name(out_dtype),
             " is not a supported float dtype");
  return softmax_fwd(op, self, dim, out_dtype, Kind::kSafeSoftmax);
}

}  // namespace acme::kernels
