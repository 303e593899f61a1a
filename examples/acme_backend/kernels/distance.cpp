// acme pairwise-distance kernels: _cdist_forward / _cdist_backward (torch.cdist
// between the rows of two batched matrices) and _pdist_forward /
// _pdist_backward (F.pdist, the upper triangle of the distances between the
// rows of one matrix), for p-norms p >= 0 (0: count of differing entries,
// inf: largest difference).
// Sums run in the element type in column order, as torch's CPU kernels do,
// so float32 results agree with the CPU to rounding.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

constexpr unsigned kDist = kF32 | kF64;

enum class Norm { Zero, One, Two, Inf, P };

Norm norm_of(double p) {
  if (p == 0.0) return Norm::Zero;
  if (p == 1.0) return Norm::One;
  if (p == 2.0) return Norm::Two;
  if (std::isinf(p)) return Norm::Inf;
  return Norm::P;
}

// distance between rows a and b of length m
template <class T>
T row_distance(const T* a, const T* b, int64_t m, Norm n, T p) {
  T agg = 0;
  for (int64_t k = 0; k < m; ++k) {
    const T d = std::abs(a[k] - b[k]);
    switch (n) {
      case Norm::Zero: agg += std::min(std::ceil(d), T(1)); break;
      case Norm::One: agg += d; break;
      case Norm::Two: agg += d * d; break;
      case Norm::Inf: agg = std::max(agg, d); break;
      case Norm::P: agg += std::pow(d, p); break;
    }
  }
  if (n == Norm::Two) return std::sqrt(agg);
  if (n == Norm::P) return std::pow(agg, T(1) / p);
  return agg;
}

template <class T>
T sign_of(T v) {
  return static_cast<T>((T(0) < v) - (v < T(0)));
}

// d dist / d a_k for one pair, times the incoming gradient g
template <class T>
T pair_grad(T diff, T g, T dist, Norm n, T p) {
  switch (n) {
    case Norm::Zero: return T(0);
    case Norm::One: return g * sign_of(diff);
    case Norm::Two: return dist == T(0) ? T(0) : g * diff / dist;
    case Norm::Inf: return std::abs(diff) == dist ? g * sign_of(diff) : T(0);
    case Norm::P:
      if (dist == T(0)) return T(0);
      if (p < T(2)) {
        if (diff == T(0) && p < T(1)) return T(0);
        return sign_of(diff) * std::pow(std::abs(diff), p - T(1)) * g / std::pow(dist, p - T(1));
      }
      return diff * std::pow(std::abs(diff), p - T(2)) * g / std::pow(dist, p - T(1));
  }
  return T(0);
}

void check_matrix_input(const char* op, const at::Tensor& t, const char* name) {
  FL_CHECK_T(t.dim() >= 2, op, t, "cdist only supports at least 2D tensors, ", name, " got: ", t.dim(), "D");
  FL_CHECK_T(at::isFloatingType(t.scalar_type()), op, t, name, " only supports floating-point dtypes, got ",
               dtype_name(t.scalar_type()));
}

// the shape (*batch, rows, cols)
std::vector<int64_t> batched(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// batch sizes of x1 (..., r1, m) and x2 (..., r2, m) broadcast together
std::vector<int64_t> batch_shape(const char* op, const at::Tensor& x1, const at::Tensor& x2) {
  std::vector<int64_t> b1(x1.sizes().begin(), x1.sizes().end() - 2);
  std::vector<int64_t> b2(x2.sizes().begin(), x2.sizes().end() - 2);
  const size_t n = std::max(b1.size(), b2.size());
  b1.insert(b1.begin(), n - b1.size(), 1);
  b2.insert(b2.begin(), n - b2.size(), 1);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    FL_CHECK(b1[i] == b2[i] || b1[i] == 1 || b2[i] == 1, op, "batch dimensions of x1 ", x1.sizes(),
               " and x2 ", x2.sizes(), " are not broadcastable");
    out[i] = b1[i] == 1 ? b2[i] : b1[i];
  }
  return out;
}

// The sizes of cdist(x1, x2): x1 (..., r1, m) and x2 (..., r2, m), their batch
// sizes broadcast together.
struct CdistSizes {
  std::vector<int64_t> batch;
  int64_t r1, r2, m;
};
CdistSizes cdist_sizes(const char* op, const at::Tensor& x1, const at::Tensor& x2) {
  return {batch_shape(op, x1, x2), x1.size(-2), x2.size(-2), x1.size(-1)};
}

// t expanded to batch + its last two dims, contiguous
at::Tensor expanded(const char* op, const at::Tensor& t, const std::vector<int64_t>& batch) {
  std::vector<int64_t> shape(batch);
  shape.push_back(t.size(-2));
  shape.push_back(t.size(-1));
  at::Tensor e = t.expand(shape);
  at::Tensor out = at::empty(shape, t.options());
  convert_into(op, out, e);
  return out;
}

}  // namespace

at::Tensor k__cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p,
                            std::optional<int64_t> compute_mode) {
  const char* op = "_cdist_forward";
  (void)compute_mode;  // the matmul form is a speed trade-off; acme computes distances directly
  check_matrix_input(op, x1, "X1");
  check_matrix_input(op, x2, "X2");
  FL_CHECK(x1.size(-1) == x2.size(-1), op, "X1 and X2 must have the same number of columns. X1: ",
             x1.size(-1), " X2: ", x2.size(-1));
  FL_CHECK(p >= 0, op, "cdist only supports non-negative p values");
  FL_CHECK_T(x1.scalar_type() == x2.scalar_type(), op, x2, "X1 and X2 must have the same dtype, got ",
               dtype_name(x1.scalar_type()), " and ", dtype_name(x2.scalar_type()));
  const auto [batch, r1, r2, m] = cdist_sizes(op, x1, x2);
  const std::vector<int64_t> shape = batched(batch, r1, r2);
  at::Tensor out = at::empty(shape, x1.options());
  if (out.numel() == 0) return out;
  const at::Tensor a = expanded(op, x1, batch), b = expanded(op, x2, batch);
  const int64_t nb = out.numel() / (r1 * r2);
  const Norm n = norm_of(p);
  dispatch<kDist>(op, x1.device(), x1.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [p, n, nb, r1, r2, m, a = DeviceTensor(a), b = DeviceTensor(b), out = DeviceTensor(out)] {
      const T* ap = static_cast<const T*>(a.data_ptr());
      const T* bp = static_cast<const T*>(b.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      const T pt = static_cast<T>(p);
      for (int64_t l = 0; l < nb; ++l)
        for (int64_t i = 0; i < r1; ++i)
          for (int64_t j = 0; j < r2; ++j)
            o[(l * r1 + i) * r2 + j] = row_distance(ap + (l * r1 + i) * m, bp + (l * r2 + j) * m, m, n, pt);
    });
  });
  return out;
}

// Gradient with respect to x1 only (x2's is this with the arguments swapped);
// of x1's shape expanded to the broadcast batch, as torch returns it.
at::Tensor k__cdist_backward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                             const at::Tensor& cdist) {
  const char* op = "_cdist_backward";
  check_matrix_input(op, x1, "x1");
  check_matrix_input(op, x2, "x2");
  const auto [batch, r1, r2, m] = cdist_sizes(op, x1, x2);
  const std::vector<int64_t> shape = batched(batch, r1, m);
  at::Tensor out = at::empty(shape, x1.options());
  if (out.numel() == 0) return out;
  const at::Tensor a = expanded(op, x1, batch), b = expanded(op, x2, batch);
  const std::vector<int64_t> dshape = batched(batch, r1, r2);
  FL_CHECK_T(grad.numel() == cdist.numel() && cdist.dim() == static_cast<int64_t>(dshape.size()) &&
                   cdist.sizes().equals(dshape),
               op, cdist, "cdist of shape ", cdist.sizes(), " does not match x1 ", x1.sizes(), " and x2 ",
               x2.sizes());
  at::Tensor g = at::empty(dshape, grad.options());
  convert_into(op, g, grad.expand(dshape));
  at::Tensor d = at::empty(dshape, cdist.options());
  convert_into(op, d, cdist);
  const int64_t nb = out.numel() / (r1 * m);
  const Norm n = norm_of(p);
  dispatch<kDist>(op, x1.device(), x1.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [p, n, nb, r1, r2, m, a = DeviceTensor(a), b = DeviceTensor(b), g = DeviceTensor(g),
                 d = DeviceTensor(d), out = DeviceTensor(out)] {
      const T* ap = static_cast<const T*>(a.data_ptr());
      const T* bp = static_cast<const T*>(b.data_ptr());
      const T* gp = static_cast<const T*>(g.data_ptr());
      const T* dp = static_cast<const T*>(d.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      const T pt = static_cast<T>(p);
      for (int64_t l = 0; l < nb; ++l)
        for (int64_t i = 0; i < r1; ++i) {
          T* res = o + (l * r1 + i) * m;
          const T* ai = ap + (l * r1 + i) * m;
          std::fill(res, res + m, T(0));
          for (int64_t j = 0; j < r2; ++j) {
            const T* bj = bp + (l * r2 + j) * m;
            const int64_t k = (l * r1 + i) * r2 + j;
            for (int64_t c = 0; c < m; ++c) res[c] += pair_grad(ai[c] - bj[c], gp[k], dp[k], n, pt);
          }
        }
    });
  });
  return out;
}

at::Tensor k__pdist_forward(const at::Tensor& self, double p) {
  const char* op = "_pdist_forward";
  FL_CHECK_T(self.is_contiguous(), op, self, "_pdist_forward requires contiguous input");
  FL_CHECK_T(self.dim() == 2, op, self, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  FL_CHECK_T(at::isFloatingType(self.scalar_type()), op, self,
               "pdist only supports floating-point dtypes");
  FL_CHECK(p >= 0, op, "pdist only supports non-negative p values");
  const int64_t r = self.size(0), m = self.size(1);
  at::Tensor out = at::empty({r >= 2 ? r * (r - 1) / 2 : 0}, self.options());
  if (out.numel() == 0) return out;
  const Norm n = norm_of(p);
  dispatch<kDist>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [p, n, r, m, self = DeviceTensor(self), out = DeviceTensor(out)] {
      const T* x = static_cast<const T*>(self.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      const T pt = static_cast<T>(p);
      int64_t k = 0;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = i + 1; j < r; ++j) o[k++] = row_distance(x + i * m, x + j * m, m, n, pt);
    });
  });
  return out;
}

at::Tensor k__pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p, const at::Tensor& pdist) {
  const char* op = "_pdist_backward";
  FL_CHECK_T(self.is_contiguous(), op, self, "_pdist_backward requires self to be contiguous");
  FL_CHECK_T(pdist.is_contiguous(), op, pdist, "_pdist_backward requires pdist to be contiguous");
  FL_CHECK_T(self.dim() == 2, op, self, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  const int64_t r = self.size(0), m = self.size(1);
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  const int64_t pairs = r >= 2 ? r * (r - 1) / 2 : 0;
  FL_CHECK_T(pdist.numel() == pairs && grad.numel() == pairs, op, grad, "grad and pdist must have ", pairs,
               " elements, got ", grad.numel(), " and ", pdist.numel());
  at::Tensor g = at::empty({pairs}, grad.options());
  convert_into(op, g, grad.reshape({pairs}));
  const Norm n = norm_of(p);
  dispatch<kDist>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [p, n, r, m, self = DeviceTensor(self), g = DeviceTensor(g), pdist = DeviceTensor(pdist),
                 out = DeviceTensor(out)] {
      const T* x = static_cast<const T*>(self.data_ptr());
      const T* gp = static_cast<const T*>(g.data_ptr());
      const T* dp = static_cast<const T*>(pdist.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      const T pt = static_cast<T>(p);
      std::fill(o, o + out.numel(), T(0));
      int64_t k = 0;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = i + 1; j < r; ++j, ++k)
          for (int64_t c = 0; c < m; ++c) {
            const T v = pair_grad(x[i * m + c] - x[j * m + c], gp[k], dp[k], n, pt);
            o[i * m + c] += v;
            o[j * m + c] -= v;
          }
    });
  });
  return out;
}

}  // namespace acme::kernels
