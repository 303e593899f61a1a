// acme pooling kernels, 2-d on (C, H, W) or (N, C, H, W) inputs and 3-d on
// (C, D, H, W) or (N, C, D, H, W): max_pool{2,3}d_with_indices, avg_pool{2,3}d,
// _adaptive_avg_pool{2,3}d and adaptive_max_pool{2,3}d, each with its backward,
// and max_unpool{2,3}d. One implementation per pool serves both ranks: a 2-d
// pool is a 3-d pool over a depth of 1 (window 1, stride 1, no padding). Each
// (n, c) plane (or volume) is pooled independently on a dense staging copy in
// the compute type, and averages accumulate in it (the op's accumulate type, as
// PyTorch's CPU kernels); outputs are contiguous. Max-pool indices are flat
// offsets into the input plane (h * W + w) or volume ((d * H + h) * W + w), as
// PyTorch defines them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/dense.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// Value i of a pooling parameter given as one int or one per spatial dim (2 or 3).
int64_t pick(const char* op, const char* name, at::IntArrayRef v, size_t i, int64_t dflt,
             size_t spatial) {
  if (v.empty()) return dflt;
  FL_CHECK(v.size() == 1 || v.size() == spatial, op, name, " must be a single int or a ",
             spatial == 2 ? "pair" : "triple", ", got ", v);
  return v.size() == 1 ? v[0] : v[i];
}

// PyTorch's pooling output size (floor or ceil mode; in ceil mode the last
// window must start inside the input or the left padding).
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

// A pooling input of `spatial` (2 or 3) dims: (C, *spatial) or (N, C, *spatial), float.
void check_pool_input(const char* op, const at::Tensor& self, int64_t spatial) {
  const char* dims = spatial == 2 ? "H, W" : "D, H, W";
  FL_CHECK_T(self.dim() == spatial + 1 || self.dim() == spatial + 2, op, self, "expected a ",
               spatial + 1, "-d (C, ", dims, ") or ", spatial + 2, "-d (N, C, ", dims,
               ") input, got ", self.sizes());
  nn::check_float(op, self);
  // Only the batch dimension may be empty.
  for (int64_t d = 1; d < self.dim(); ++d) {
    FL_CHECK_T(self.size(d) > 0, op, self, "expected non-empty dims except the batch, got ",
                 self.sizes());
  }
}

// The window of one output index along one dim, inside the input: n taps from
// first, the dilation apart; size also counts the padding inside the window
// (avg_pool's divisor with count_include_pad). A window is the product of its
// dims' spans, so they are computed once per dim and output index.
struct Span {
  int64_t first, n, size;
};

// The geometry of a pool over `spatial` (2 or 3) dims, padded in front to
// (D, H, W): a 2-d pool has D = Do = 1, window 1, stride 1, no padding.
// A windowed pool (max_pool, avg_pool) reads the window k, stride s, padding p
// and dilation d; an adaptive pool splits each input dim into out[i] windows.
struct Pool {
  int spatial = 2;
  bool adaptive = false;
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0}, d[3] = {1, 1, 1};
  // avg_pool's divisor rule (an adaptive pool divides by its window's size)
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override;
  // span[i][o]: the window of output index o along dim i (set_spans)
  std::vector<Span> span[3];
  int64_t vol() const { return in[0] * in[1] * in[2]; }
};

// Adaptive pooling window of output index o over an input of size in.
inline int64_t ada_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t ada_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

// Fills p.span from the (checked) geometry.
void set_spans(Pool& p) {
  for (int i = 0; i < 3; ++i) {
    p.span[i].resize(static_cast<size_t>(p.out[i]));
    for (int64_t o = 0; o < p.out[i]; ++o) {
      Span& sp = p.span[i][static_cast<size_t>(o)];
      if (p.adaptive) {
        sp.first = ada_start(o, p.out[i], p.in[i]);
        sp.n = sp.size = ada_end(o, p.out[i], p.in[i]) - sp.first;
        continue;
      }
      // the taps start + a * d, a in [0, k), that fall inside [0, in)
      const int64_t start = o * p.s[i] - p.p[i], d = p.d[i];
      const int64_t a0 = start < 0 ? (-start + d - 1) / d : 0;
      const int64_t a1 = start >= p.in[i] ? 0 : std::min(p.k[i], (p.in[i] - 1 - start) / d + 1);
      sp.first = start + a0 * d;
      sp.n = std::max<int64_t>(a1 - a0, 0);
      sp.size = std::min(start + p.k[i], p.in[i] + p.p[i]) - start;
    }
  }
}

// The input sizes of a checked pooling input; the output sizes are the caller's.
Pool pool_input(const char* op, const at::Tensor& self, int spatial) {
  check_pool_input(op, self, spatial);
  Pool p;
  p.spatial = spatial;
  for (int i = 3 - spatial; i < 3; ++i) p.in[i] = self.size(self.dim() - 3 + i);
  p.planes = self.numel() / p.vol();
  return p;
}

// A windowed pool: parameters given as one int or one per dim.
Pool make_pool(const char* op, const at::Tensor& self, int spatial, at::IntArrayRef kernel_size,
               at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
               bool ceil_mode) {
  Pool p = pool_input(op, self, spatial);
  FL_CHECK(!kernel_size.empty(), op, "kernel_size must not be empty");
  for (int i = 3 - spatial, a = 0; i < 3; ++i, ++a) {
    const size_t arg = static_cast<size_t>(a), n = static_cast<size_t>(spatial);
    p.k[i] = pick(op, "kernel_size", kernel_size, arg, 1, n);
    p.s[i] = pick(op, "stride", stride, arg, p.k[i], n);
    p.p[i] = pick(op, "padding", padding, arg, 0, n);
    p.d[i] = pick(op, "dilation", dilation, arg, 1, n);
    FL_CHECK(p.k[i] > 0, op, "kernel_size must be positive, got ", kernel_size);
    FL_CHECK(p.s[i] > 0, op, "stride must be positive, got ", stride);
    FL_CHECK(p.d[i] > 0, op, "dilation must be positive, got ", dilation);
    FL_CHECK(p.p[i] >= 0 && p.p[i] <= p.k[i] / 2, op,
               "pad should be at most half of effective kernel size, but got pad=", padding,
               " and kernel_size=", kernel_size);
    p.out[i] = pooled_size(p.in[i], p.k[i], p.p[i], p.s[i], p.d[i], ceil_mode);
  }
  const at::IntArrayRef outs(p.out + 3 - spatial, static_cast<size_t>(spatial));
  for (const int64_t o : outs)
    FL_CHECK(o > 0, op, "output size is too small: input ", self.sizes(), ", output ", outs);
  set_spans(p);
  return p;
}

// avg_pool's: no dilation, and the divisor rule.
Pool make_avg_pool(const char* op, const at::Tensor& self, int spatial, at::IntArrayRef kernel_size,
                   at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                   bool count_include_pad, std::optional<int64_t> divisor_override) {
  Pool p = make_pool(op, self, spatial, kernel_size, stride, padding, {}, ceil_mode);
  FL_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
             "divisor must be not zero");
  p.count_include_pad = count_include_pad;
  p.divisor_override = divisor_override;
  return p;
}

// An adaptive pool: output_size has one value per dim.
Pool make_adaptive(const char* op, const at::Tensor& self, int spatial, at::IntArrayRef output_size,
                   bool allow_zero) {
  Pool p = pool_input(op, self, spatial);
  p.adaptive = true;
  FL_CHECK(output_size.size() == static_cast<size_t>(spatial), op, "output_size must have ", spatial,
             " values, got ", output_size);
  for (int i = 3 - spatial, a = 0; i < 3; ++i, ++a) {
    const int64_t o = output_size[static_cast<size_t>(a)];
    FL_CHECK(allow_zero ? o >= 0 : o > 0, op, "output_size must be ",
               allow_zero ? "non-negative" : "positive", ", got ", output_size);
    p.out[i] = o;
  }
  set_spans(p);
  return p;
}

// adaptive avg pool's backward reads the output size off grad_output.
Pool adaptive_from_grad(const char* op, const at::Tensor& grad_output, const at::Tensor& self, int spatial) {
  FL_CHECK_T(grad_output.dim() == self.dim() && self.dim() >= spatial, op, grad_output,
               "grad_output must have the rank of self");
  const auto gsizes = grad_output.sizes();
  return make_adaptive(op, self, spatial, gsizes.slice(gsizes.size() - static_cast<size_t>(spatial)),
                       /*allow_zero=*/true);
}

// self's shape with the spatial dims replaced by the pool's output sizes.
std::vector<int64_t> out_shape(const at::Tensor& self, const Pool& p) {
  std::vector<int64_t> s(self.sizes().begin(), self.sizes().end());
  for (int i = 3 - p.spatial; i < 3; ++i) s[s.size() - 3 + static_cast<size_t>(i)] = p.out[i];
  return s;
}

void check_grad_output(const char* op, const at::Tensor& grad_output, const at::Tensor& self,
                       const Pool& p) {
  const auto shape = out_shape(self, p);
  FL_CHECK_T(grad_output.sizes().equals(shape), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(shape));
}

// A shape-matching tensor of int64 as a dense (contiguous) tensor, for a
// device part to read as an array (host part: checks, and copies if strided).
at::Tensor dense_long(const char* op, const at::Tensor& t) {
  FL_CHECK_T(t.scalar_type() == c10::ScalarType::Long, op, t, "indices must be int64");
  return t.is_contiguous() ? t : t.contiguous();
}

// The backward of every max pool (2-d, 3-d, adaptive): grad_input (self's shape) is
// grad_output scatter-added through the flat per-plane indices the forward returned.
at::Tensor scatter_grad_by_indices(const char* op, const at::Tensor& grad_output,
                                   const at::Tensor& self, const at::Tensor& indices,
                                   int64_t vol) {
  FL_CHECK_T(grad_output.sizes().equals(indices.sizes()) && grad_output.dim() == self.dim(), op,
               grad_output, "grad_output ", grad_output.sizes(), " and indices ",
               indices.sizes(), " must have the same shape and the rank of self");
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  const int64_t planes = self.numel() / vol;
  const int64_t per = planes ? grad_output.numel() / planes : 0;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    const at::Tensor ix = dense_long(op, indices);
    launch(gi, [op, planes, per, vol, grad_output = DeviceTensor(grad_output),
                ix = DeviceTensor(ix), gi = DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      const int64_t* ixp = ix.numel() ? ix.const_data_ptr<int64_t>() : nullptr;
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < planes; ++pl)
        for (int64_t o = 0; o < per; ++o) {
          // a data-dependent check: raised on the device, reported at the next sync
          const int64_t k = ixp[pl * per + o];
          FL_CHECK(k >= 0 && k < vol, op, "index ", k, " out of range for a plane of ", vol,
                     " elements");
          ob.data()[pl * vol + k] += go.data()[pl * per + o];
        }
      ob.finish(op);
    });
  });
  return gi;
}

// The input window of one output element (its spans along D, H, W) and the
// divisor of an average over it: 0 when the window lies entirely in the
// padding (that average is 0).
struct Window {
  const Span* span[3];
  int64_t div;
};

// Calls f(plane offset, output offset, window) for every output element, in order.
template <class F>
void for_each_window(const Pool& p, F&& f) {
  int64_t o = 0;
  for (int64_t pl = 0; pl < p.planes; ++pl)
    for (const Span& sd : p.span[0])
      for (const Span& sh : p.span[1])
        for (const Span& sw : p.span[2]) {
          const int64_t valid = sd.n * sh.n * sw.n;
          const int64_t div = valid == 0                       ? 0
                              : p.adaptive                     ? valid
                              : p.divisor_override.has_value() ? *p.divisor_override
                              : p.count_include_pad            ? sd.size * sh.size * sw.size
                                                               : valid;
          f(pl * p.vol(), o++, Window{{&sd, &sh, &sw}, div});
        }
}

// Calls tap(flat offset in the plane) for the window's taps in order, while it returns true.
template <class F>
void for_each_tap(const Pool& p, const Window& w, F&& tap) {
  const Span &sd = *w.span[0], &sh = *w.span[1], &sw = *w.span[2];
  for (int64_t a = 0; a < sd.n; ++a) {
    const int64_t z = sd.first + a * p.d[0];
    for (int64_t b = 0; b < sh.n; ++b) {
      const int64_t row = (z * p.in[1] + sh.first + b * p.d[1]) * p.in[2] + sw.first;
      for (int64_t c = 0; c < sw.n; ++c)
        if (!tap(row + c * p.d[2])) return;
    }
  }
}

// ---- one implementation per pool, for both ranks, windowed or adaptive ----

// The maximum of each window and its flat index in the plane: the first
// maximum wins; a NaN wins and sticks, as in PyTorch.
std::tuple<at::Tensor, at::Tensor> max_pool(const char* op, const at::Tensor& self, const Pool& p) {
  const auto shape = out_shape(self, p);
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor idx = at::empty(shape, self.options().dtype(c10::ScalarType::Long));
  if (out.numel() == 0) return {out, idx};
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, p, self = DeviceTensor(self), out = DeviceTensor(out),
                 idx = DeviceTensor(idx)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t* ip = idx.data_ptr<int64_t>();
      for_each_window(p, [&](int64_t plane, int64_t o, const Window& w) {
        const Acc* in = x.data() + plane;
        Acc best = -std::numeric_limits<Acc>::infinity();
        int64_t bi = -1;
        for_each_tap(p, w, [&](int64_t k) {
          const Acc v = in[k];
          if (bi < 0 || v > best || std::isnan(v)) {
            best = v;
            bi = k;
          }
          return !std::isnan(v);
        });
        ob.data()[o] = best;
        ip[o] = bi;
      });
      ob.finish(op);
    });
  });
  return {out, idx};
}

// The backward of every max pool: each gradient goes where the forward's index points.
at::Tensor max_pool_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& self,
                             const Pool& p, const at::Tensor& indices) {
  check_grad_output(op, grad_output, self, p);
  return scatter_grad_by_indices(op, grad_output, self, indices, p.vol());
}

// The average of each window, accumulated in the compute type (the op's
// accumulate type, as PyTorch's CPU kernels do).
at::Tensor avg_pool(const char* op, const at::Tensor& self, const Pool& p) {
  at::Tensor out = at::empty(out_shape(self, p), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, p, self = DeviceTensor(self), out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      for_each_window(p, [&](int64_t plane, int64_t o, const Window& w) {
        const Acc* in = x.data() + plane;
        Acc sum = 0;
        for_each_tap(p, w, [&](int64_t k) {
          sum += in[k];
          return true;
        });
        ob.data()[o] = w.div == 0 ? Acc(0) : sum / Acc(w.div);
      });
      ob.finish(op);
    });
  });
  return out;
}

// Each output gradient divided by its window's divisor, added over the window.
at::Tensor avg_pool_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& self,
                             const Pool& p) {
  check_grad_output(op, grad_output, self, p);
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gi, [op, p, grad_output = DeviceTensor(grad_output), gi = DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for_each_window(p, [&](int64_t plane, int64_t o, const Window& w) {
        if (w.div == 0) return;
        Acc* g = ob.data() + plane;
        const Acc v = go.data()[o] / Acc(w.div);
        for_each_tap(p, w, [&](int64_t k) {
          g[k] += v;
          return true;
        });
      });
      ob.finish(op);
    });
  });
  return gi;
}

}  // namespace

// The kernels: each names its pool and rank. Forwards first, then backwards.

std::tuple<at::Tensor, at::Tensor> k_max_pool2d_with_indices(const at::Tensor& self,
                                                             at::IntArrayRef kernel_size,
                                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                                             at::IntArrayRef dilation, bool ceil_mode) {
  const char* op = "max_pool2d_with_indices";
  return max_pool(op, self, make_pool(op, self, 2, kernel_size, stride, padding, dilation, ceil_mode));
}

std::tuple<at::Tensor, at::Tensor> k_max_pool3d_with_indices(const at::Tensor& self,
                                                             at::IntArrayRef kernel_size,
                                                             at::IntArrayRef stride, at::IntArrayRef padding,
                                                             at::IntArrayRef dilation, bool ceil_mode) {
  const char* op = "max_pool3d_with_indices";
  return max_pool(op, self, make_pool(op, self, 3, kernel_size, stride, padding, dilation, ceil_mode));
}

at::Tensor k_avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                        at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                        std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  return avg_pool(op, self, make_avg_pool(op, self, 2, kernel_size, stride, padding, ceil_mode,
                                          count_include_pad, divisor_override));
}

at::Tensor k_avg_pool3d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                        at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                        std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool3d";
  return avg_pool(op, self, make_avg_pool(op, self, 3, kernel_size, stride, padding, ceil_mode,
                                          count_include_pad, divisor_override));
}

at::Tensor k__adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
  const char* op = "_adaptive_avg_pool2d";
  return avg_pool(op, self, make_adaptive(op, self, 2, output_size, /*allow_zero=*/true));
}

at::Tensor k__adaptive_avg_pool3d(const at::Tensor& self, at::IntArrayRef output_size) {
  const char* op = "_adaptive_avg_pool3d";
  return avg_pool(op, self, make_adaptive(op, self, 3, output_size, /*allow_zero=*/true));
}

std::tuple<at::Tensor, at::Tensor> k_adaptive_max_pool2d(const at::Tensor& self,
                                                         at::IntArrayRef output_size) {
  const char* op = "adaptive_max_pool2d";
  return max_pool(op, self, make_adaptive(op, self, 2, output_size, /*allow_zero=*/false));
}

std::tuple<at::Tensor, at::Tensor> k_adaptive_max_pool3d(const at::Tensor& self,
                                                         at::IntArrayRef output_size) {
  const char* op = "adaptive_max_pool3d";
  return max_pool(op, self, make_adaptive(op, self, 3, output_size, /*allow_zero=*/false));
}

at::Tensor k_max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                              at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                              at::IntArrayRef padding, at::IntArrayRef dilation,
                                              bool ceil_mode, const at::Tensor& indices) {
  const char* op = "max_pool2d_with_indices_backward";
  const Pool p = make_pool(op, self, 2, kernel_size, stride, padding, dilation, ceil_mode);
  return max_pool_backward(op, grad_output, self, p, indices);
}

at::Tensor k_max_pool3d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                              at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                              at::IntArrayRef padding, at::IntArrayRef dilation,
                                              bool ceil_mode, const at::Tensor& indices) {
  const char* op = "max_pool3d_with_indices_backward";
  const Pool p = make_pool(op, self, 3, kernel_size, stride, padding, dilation, ceil_mode);
  return max_pool_backward(op, grad_output, self, p, indices);
}

at::Tensor k_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                 bool ceil_mode, bool count_include_pad,
                                 std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d_backward";
  const Pool p = make_avg_pool(op, self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                               divisor_override);
  return avg_pool_backward(op, grad_output, self, p);
}

at::Tensor k_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                 bool ceil_mode, bool count_include_pad,
                                 std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool3d_backward";
  const Pool p = make_avg_pool(op, self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                               divisor_override);
  return avg_pool_backward(op, grad_output, self, p);
}

at::Tensor k__adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* op = "_adaptive_avg_pool2d_backward";
  return avg_pool_backward(op, grad_output, self, adaptive_from_grad(op, grad_output, self, 2));
}

at::Tensor k__adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* op = "_adaptive_avg_pool3d_backward";
  return avg_pool_backward(op, grad_output, self, adaptive_from_grad(op, grad_output, self, 3));
}

at::Tensor k_adaptive_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Tensor& indices) {
  const char* op = "adaptive_max_pool2d_backward";
  return scatter_grad_by_indices(op, grad_output, self, indices, pool_input(op, self, 2).vol());
}

at::Tensor k_adaptive_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Tensor& indices) {
  const char* op = "adaptive_max_pool3d_backward";
  return scatter_grad_by_indices(op, grad_output, self, indices, pool_input(op, self, 3).vol());
}

namespace {
// max_unpool: each input element is written at its flat index in the output
// plane / volume (zeros elsewhere); later elements win on repeated indices,
// as in torch's CPU kernel. Values are moved as bytes, so every dtype works.
at::Tensor max_unpool(const char* op, const at::Tensor& self, const at::Tensor& indices,
                      at::IntArrayRef output_size, int spatial) {
  FL_CHECK_T(indices.scalar_type() == at::kLong, op, indices,
               "elements in indices should be type int64 but got: ", dtype_name(indices.scalar_type()));
  FL_CHECK(static_cast<int>(output_size.size()) == spatial, op, "There should be exactly ", spatial,
             " elements (", spatial == 2 ? "height, width" : "depth, height, width",
             ") in output_size, but got ", output_size.size(), " elements.");
  FL_CHECK_T(self.dim() == spatial + 1 || self.dim() == spatial + 2, op, self, "Input to ", op,
               " should be a ", spatial + 1, "d or ", spatial + 2, "d Tensor, but got a tensor with ",
               self.dim(), " dimensions.");
  FL_CHECK_T(self.sizes() == indices.sizes(), op, indices,
               "Expected shape of indices to be same as that of the input tensor (", self.sizes(),
               ") but got indices tensor with shape: ", indices.sizes());
  int64_t in_plane = 1, out_plane = 1;
  for (int k = 0; k < spatial; ++k) {
    in_plane *= self.size(self.dim() - spatial + k);
    out_plane *= output_size[k];
  }
  std::vector<int64_t> osz(self.sizes().begin(), self.sizes().end() - spatial);
  osz.insert(osz.end(), output_size.begin(), output_size.end());
  at::Tensor out = at::empty(osz, self.options());
  if (out.numel() > 0) {
    launch(out, [out = DeviceTensor(out), nbytes = static_cast<size_t>(out.nbytes())] {
      std::memset(out.data_ptr(), 0, nbytes);
    });
  }
  if (self.numel() == 0) return out;
  at::Tensor in = self.contiguous();
  at::Tensor idx = indices.contiguous();
  const int64_t planes = self.numel() / in_plane;
  const size_t esz = static_cast<size_t>(self.element_size());
  // output_size, copied: the device part's error message prints it.
  std::vector<int64_t> osize(output_size.begin(), output_size.end());
  launch(out, [op, planes, in_plane, out_plane, esz, osize, in = DeviceTensor(in),
               idx = DeviceTensor(idx), out = DeviceTensor(out)] {
    const char* ip = static_cast<const char*>(in.data_ptr());
    const int64_t* xp = static_cast<const int64_t*>(idx.data_ptr());
    char* opp = static_cast<char*>(out.data_ptr());
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < in_plane; ++i) {
        // a data-dependent check: raised on the device, reported at the next sync
        const int64_t j = xp[p * in_plane + i];
        FL_CHECK_INDEX(j >= 0 && j < out_plane, op, "Found an invalid max index: ", j,
                         " (output volumes are of size ", at::IntArrayRef(osize), ")");
        std::memcpy(opp + (p * out_plane + j) * esz, ip + (p * in_plane + i) * esz, esz);
      }
  });
  return out;
}
}  // namespace

at::Tensor k_max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  return max_unpool("max_unpool2d", self, indices, output_size, 2);
}

at::Tensor k_max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                          at::IntArrayRef stride, at::IntArrayRef padding) {
  const char* op = "max_unpool3d";
  FL_CHECK(stride.size() == 3 && padding.size() == 3, op,
             "There should be exactly three elements (depth, height, width) in stride and padding, got ",
             stride.size(), " and ", padding.size());
  for (int k = 0; k < 3; ++k)
    FL_CHECK(stride[k] > 0, op, "strides should be greater than zero, but got stride: ", stride);
  return max_unpool(op, self, indices, output_size, 3);
}

}  // namespace acme::kernels
