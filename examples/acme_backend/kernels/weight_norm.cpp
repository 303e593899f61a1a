// acme weight normalization kernels: _weight_norm_interface and its backward,
// the fused path torch._weight_norm (nn.utils.weight_norm, and its
// parametrization) takes when `dim` is the first or the last dimension of v.
//
//   w = v * (g / ||v||)      the norm over every dimension of v except `dim`
//
// v is seen as a dense (M, N) array: dim 0 normalizes each of the M rows over
// its N elements, the last dim each of the N columns over the M rows; g and the
// norms hold one value per normalized slice (K of them, in g's shape). As in
// PyTorch's CPU kernel the math runs in the compute type (float for
// float32/float16/bfloat16, double for float64) and the norms of a
// float16/bfloat16 g are float32; sums of squares and products accumulate in
// double (a weight's slices are long, and the backward's grad_g is a sum over
// all of one).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// The (M, N) view of v and which of its axes `dim` keeps.
struct WNShape {
  int64_t M = 0, N = 0;
  bool first = true;  // dim == 0: K = M slices of N; else K = N slices of M
  int64_t K() const { return first ? M : N; }
};

bool is_reduced(c10::ScalarType st) {
  return st == c10::ScalarType::Half || st == c10::ScalarType::BFloat16;
}

WNShape wn_shape(const char* op, const at::Tensor& v, int64_t dim) {
  FL_CHECK_T(v.dim() >= 1, op, v, "expected v with at least one dimension, got a 0-dim tensor");
  // CPU and CUDA have no fused kernel for any other dim (torch._weight_norm
  // computes those with the composite v * (g / norm_except_dim(v, 2, dim)))
  FL_CHECK_T(dim == 0 || dim == v.dim() - 1, op, v,
               "dim must be the first (0) or the last (", v.dim() - 1,
               ") dimension of v, got ", dim, " (v of shape ", v.sizes(), ")");
  WNShape s;
  // a 1-d v takes the dim-0 path, as on CPU (every slice is one element)
  s.first = dim == 0;
  if (s.first) {
    s.M = v.size(0);
    s.N = s.M ? v.numel() / s.M : 0;
  } else {
    s.N = v.size(-1);
    s.M = s.N ? v.numel() / s.N : 0;
  }
  return s;
}

// g (and a backward's saved_norms) must hold one value per slice; CPU reads
// them as K contiguous values without checking, here a wrong size is an error.
void check_per_slice(const char* op, const at::Tensor& t, const WNShape& s, const char* arg) {
  FL_CHECK_T(t.numel() == s.K(), op, t, "expected ", arg, " with ", s.K(),
               " elements (one per slice of v along dim ", s.first ? "0" : "-1", "), got shape ",
               t.sizes());
}

void check_same_dtype(const char* op, const at::Tensor& t, const at::Tensor& v, const char* arg) {
  FL_CHECK_T(t.scalar_type() == v.scalar_type(), op, t, "expected ", arg,
               " to have v's dtype ", dtype_name(v.scalar_type()));
}

// Device part: sum over the normalized slices of f(i, j) for the dense (M, N)
// layout, in double, one value per slice, in a fixed order (the same sums for
// any number of compute units).
template <class F>
std::vector<double> slice_sums(const WNShape& s, F f) {
  std::vector<double> acc(static_cast<size_t>(s.K()), 0.0);
  if (s.first) {
    const int64_t grain = std::max<int64_t>(1, kGrainMath / std::max<int64_t>(s.N, 1));
    parallel_for(s.M, grain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double a = 0;
        for (int64_t j = 0; j < s.N; ++j) a += f(i, j);
        acc[static_cast<size_t>(i)] = a;
      }
    });
  } else {
    // column sums: each unit owns a block of columns and walks the rows in
    // order, so the inner loop stays contiguous
    const int64_t grain = std::max<int64_t>(64, kGrainMath / std::max<int64_t>(s.M, 1));
    parallel_for(s.N, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t i = 0; i < s.M; ++i)
        for (int64_t j = j0; j < j1; ++j) acc[static_cast<size_t>(j)] += f(i, j);
    });
  }
  return acc;
}

// Device part: out[i, j] = f(i, j, k) for the dense (M, N) layout, k the slice
// of (i, j).
template <class Acc, class F>
void apply_slices(const WNShape& s, Acc* out, F f) {
  const int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(s.N, 1));
  parallel_for(s.M, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      Acc* o = out + i * s.N;
      for (int64_t j = 0; j < s.N; ++j) o[j] = f(i, j, s.first ? i : j);
    }
  });
}

// The checks forward and backward share: a float v, and g of v's dtype (CPU
// reads g with v's element type) holding one value per slice.
WNShape check_v_and_g(const char* op, const at::Tensor& v, const at::Tensor& g, int64_t dim,
                      const char* g_name) {
  nn::check_float(op, v);
  const WNShape s = wn_shape(op, v, dim);
  check_same_dtype(op, g, v, g_name);
  check_per_slice(op, g, s, g_name);
  return s;
}

// Queues zeros into `t` (the norms / grad_g of an empty v, as CPU's zero_()).
void zero_on_device(const char* op, const at::Tensor& t) {
  if (t.numel() == 0) return;
  launch(t, [op, t = DeviceTensor(t)] {
    std::vector<double> z(static_cast<size_t>(t.numel()), 0.0);
    nn::store<double>(op, z.data(), t);
  });
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor> k__weight_norm_interface(const at::Tensor& v,
                                                              const at::Tensor& g, int64_t dim) {
  const char* op = "_weight_norm_interface";
  const WNShape s = check_v_and_g(op, v, g, dim, "g");
  at::Tensor w = at::empty(v.sizes(), v.options());  // contiguous, as CPU's empty_like(Contiguous)
  // the norms take g's shape and strides (CPU: empty_strided like g), in
  // float32 for a float16/bfloat16 g
  const auto norm_opts =
      g.options().dtype(is_reduced(g.scalar_type()) ? c10::ScalarType::Float : g.scalar_type());
  at::Tensor norm = g.is_non_overlapping_and_dense()
                        ? at::empty_strided(g.sizes(), g.strides(), norm_opts)
                        : at::empty(g.sizes(), norm_opts);
  if (v.numel() == 0) {
    zero_on_device(op, norm);
    return {w, norm};
  }
  nn::dispatch_compute(op, v, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(w, [op, s, v = DeviceTensor(v), g = DeviceTensor(g),
               w = DeviceTensor(w), norm = DeviceTensor(norm)] {
      auto x = nn::load<Acc>(op, v);
      auto gv = nn::load<Acc>(op, g);  // K values in g's logical order
      const Acc* xp = x.data();
      const auto ss = slice_sums(s, [xp, N = s.N](int64_t i, int64_t j) {
        const double e = static_cast<double>(xp[i * N + j]);
        return e * e;
      });
      std::vector<Acc> nrm(static_cast<size_t>(s.K())), scale(static_cast<size_t>(s.K()));
      for (int64_t k = 0; k < s.K(); ++k) {
        nrm[k] = static_cast<Acc>(std::sqrt(ss[k]));
        scale[k] = gv.data()[k] / nrm[k];  // a zero norm gives inf / NaN, as on CPU
      }
      nn::OutBuf<Acc> ob(w);
      apply_slices<Acc>(s, ob.data(), [xp, N = s.N, &scale](int64_t i, int64_t j, int64_t k) {
        return xp[i * N + j] * scale[k];
      });
      ob.finish(op);
      nn::store<Acc>(op, nrm.data(), norm);
    });
  });
  return {w, norm};
}

::std::tuple<at::Tensor, at::Tensor> k__weight_norm_interface_backward(
    const at::Tensor& grad_w, const at::Tensor& saved_v, const at::Tensor& saved_g,
    const at::Tensor& saved_norms, int64_t dim) {
  const char* op = "_weight_norm_interface_backward";
  const WNShape s = check_v_and_g(op, saved_v, saved_g, dim, "saved_g");
  check_same_dtype(op, grad_w, saved_v, "grad_w");
  FL_CHECK_T(grad_w.sizes().equals(saved_v.sizes()), op, grad_w, "expected grad_w of v's shape ",
               saved_v.sizes(), ", got ", grad_w.sizes());
  check_per_slice(op, saved_norms, s, "saved_norms");
  // the forward returns float32 norms for float16/bfloat16 (what CPU's kernel
  // requires there); v's own dtype is taken too
  const bool norms_ok = saved_norms.scalar_type() == saved_v.scalar_type() ||
                        (is_reduced(saved_v.scalar_type()) &&
                         saved_norms.scalar_type() == c10::ScalarType::Float);
  FL_CHECK_T(norms_ok, op, saved_norms, "expected saved_norms of dtype ",
               dtype_name(is_reduced(saved_v.scalar_type()) ? c10::ScalarType::Float
                                                                : saved_v.scalar_type()),
               " (as _weight_norm_interface returns them) for v of dtype ",
               dtype_name(saved_v.scalar_type()));
  at::Tensor grad_v = at::empty(saved_v.sizes(), saved_v.options());
  at::Tensor grad_g = at::empty(saved_g.sizes(), saved_g.options());
  if (saved_v.numel() == 0) {
    zero_on_device(op, grad_g);
    return {grad_v, grad_g};
  }
  nn::dispatch_compute(op, saved_v, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_v, [op, s, gw = DeviceTensor(grad_w), v = DeviceTensor(saved_v),
                    g = DeviceTensor(saved_g), norms = DeviceTensor(saved_norms),
                    grad_v = DeviceTensor(grad_v), grad_g = DeviceTensor(grad_g)] {
      auto dw = nn::load<Acc>(op, gw);
      auto x = nn::load<Acc>(op, v);
      auto gv = nn::load<Acc>(op, g);
      auto nv = nn::load<Acc>(op, norms);
      const Acc* dwp = dw.data();
      const Acc* xp = x.data();
      const auto sums = slice_sums(s, [dwp, xp, N = s.N](int64_t i, int64_t j) {
        return static_cast<double>(dwp[i * N + j]) * static_cast<double>(xp[i * N + j]);
      });
      // grad_g = sum(grad_w * v) / norm
      // grad_v = (g / norm) * grad_w - (g / norm) * grad_g / norm * v = a * grad_w - b * v
      const size_t K = static_cast<size_t>(s.K());
      std::vector<Acc> gg(K), a(K), b(K);
      for (size_t k = 0; k < K; ++k) {
        const Acc n = nv.data()[k];
        gg[k] = static_cast<Acc>(sums[k]) / n;
        a[k] = gv.data()[k] / n;
        b[k] = a[k] * gg[k] / n;
      }
      nn::OutBuf<Acc> ob(grad_v);
      apply_slices<Acc>(s, ob.data(), [dwp, xp, N = s.N, &a, &b](int64_t i, int64_t j, int64_t k) {
        return a[k] * dwp[i * N + j] - b[k] * xp[i * N + j];
      });
      ob.finish(op);
      nn::store<Acc>(op, gg.data(), grad_g);
    });
  });
  return {grad_v, grad_g};
}

}  // namespace acme::kernels
