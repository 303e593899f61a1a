// acme pooling kernels: max_pool2d_with_indices (+ backward), avg_pool2d
// (+ backward), _adaptive_avg_pool2d (+ backward), adaptive_max_pool2d
// (+ backward) on (C, H, W) or (N, C, H, W) inputs; max_pool3d_with_indices,
// avg_pool3d, _adaptive_avg_pool3d and adaptive_max_pool3d (+ backward) on
// (C, D, H, W) or (N, C, D, H, W) inputs. Each (n, c) plane (or volume) is
// pooled independently on a dense staging copy
// in the compute type; outputs are contiguous. Max-pool indices are flat
// offsets into the input plane (h * W + w) or volume ((d * H + h) * W + w),
// as PyTorch defines them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels.h"
#include "nn_buffers.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
namespace {

namespace cm = ::acme::common;

struct Pool2d {
  int64_t planes = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// Value i of a pooling parameter given as one int or one per spatial dim (2 or 3).
int64_t pick(const char* op, const char* name, at::IntArrayRef v, size_t i, int64_t dflt,
             size_t spatial = 2) {
  if (v.empty()) return dflt;
  ACME_CHECK(v.size() == 1 || v.size() == spatial, op, name, " must be a single int or a ",
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
void check_pool_input(const char* op, const at::Tensor& self, int64_t spatial = 2) {
  const char* dims = spatial == 2 ? "H, W" : "D, H, W";
  ACME_CHECK_T(self.dim() == spatial + 1 || self.dim() == spatial + 2, op, self, "expected a ",
               spatial + 1, "-d (C, ", dims, ") or ", spatial + 2, "-d (N, C, ", dims,
               ") input, got ", self.sizes());
  nn::check_float(op, self);
  // Only the batch dimension may be empty.
  for (int64_t d = 1; d < self.dim(); ++d) {
    ACME_CHECK_T(self.size(d) > 0, op, self, "expected non-empty dims except the batch, got ",
                 self.sizes());
  }
}

Pool2d make_pool(const char* op, const at::Tensor& self, at::IntArrayRef kernel_size,
                 at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                 bool ceil_mode) {
  check_pool_input(op, self);
  ACME_CHECK(!kernel_size.empty(), op, "kernel_size must not be empty");
  Pool2d p;
  p.kh = pick(op, "kernel_size", kernel_size, 0, 1);
  p.kw = pick(op, "kernel_size", kernel_size, 1, 1);
  p.sh = pick(op, "stride", stride, 0, p.kh);
  p.sw = pick(op, "stride", stride, 1, p.kw);
  p.ph = pick(op, "padding", padding, 0, 0);
  p.pw = pick(op, "padding", padding, 1, 0);
  p.dh = pick(op, "dilation", dilation, 0, 1);
  p.dw = pick(op, "dilation", dilation, 1, 1);
  ACME_CHECK(p.kh > 0 && p.kw > 0, op, "kernel_size must be positive, got ", kernel_size);
  ACME_CHECK(p.sh > 0 && p.sw > 0, op, "stride must be positive, got ", stride);
  ACME_CHECK(p.dh > 0 && p.dw > 0, op, "dilation must be positive, got ", dilation);
  ACME_CHECK(p.ph >= 0 && p.pw >= 0 && p.ph <= p.kh / 2 && p.pw <= p.kw / 2, op,
             "pad should be at most half of effective kernel size, but got pad=", padding,
             " and kernel_size=", kernel_size);
  p.H = self.size(-2);
  p.W = self.size(-1);
  p.planes = self.numel() / (p.H * p.W);
  p.Ho = pooled_size(p.H, p.kh, p.ph, p.sh, p.dh, ceil_mode);
  p.Wo = pooled_size(p.W, p.kw, p.pw, p.sw, p.dw, ceil_mode);
  ACME_CHECK(p.Ho > 0 && p.Wo > 0, op, "output size is too small: input ", self.sizes(),
             ", output (", p.Ho, ", ", p.Wo, ")");
  return p;
}

std::vector<int64_t> out_shape(const at::Tensor& self, int64_t Ho, int64_t Wo) {
  std::vector<int64_t> s(self.sizes().begin(), self.sizes().end());
  s[s.size() - 2] = Ho;
  s[s.size() - 1] = Wo;
  return s;
}

// A shape-matching tensor of int64 as a dense (contiguous) tensor, for a
// device part to read as an array (host part: checks, and copies if strided).
at::Tensor dense_long(const char* op, const at::Tensor& t) {
  ACME_CHECK_T(t.scalar_type() == c10::ScalarType::Long, op, t, "indices must be int64");
  return t.is_contiguous() ? t : t.contiguous();
}

// The backward of every max pool (2-d, 3-d, adaptive): grad_input (self's shape) is
// grad_output scatter-added through the flat per-plane indices the forward returned.
at::Tensor scatter_grad_by_indices(const char* op, const at::Tensor& grad_output,
                                   const at::Tensor& self, const at::Tensor& indices,
                                   int64_t vol) {
  ACME_CHECK_T(grad_output.sizes().equals(indices.sizes()) && grad_output.dim() == self.dim(), op,
               grad_output, "grad_output ", grad_output.sizes(), " and indices ",
               indices.sizes(), " must have the same shape and the rank of self");
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  const int64_t planes = self.numel() / vol;
  const int64_t per = planes ? grad_output.numel() / planes : 0;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = ACME_T(tag);
    const at::Tensor ix = dense_long(op, indices);
    cm::launch(gi, [op, planes, per, vol, grad_output = cm::DeviceTensor(grad_output),
                    ix = cm::DeviceTensor(ix), gi = cm::DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      const int64_t* ixp = ix.numel() ? ix.const_data_ptr<int64_t>() : nullptr;
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < planes; ++pl)
        for (int64_t o = 0; o < per; ++o) {
          // a data-dependent check: raised on the device, reported at the next sync
          const int64_t k = ixp[pl * per + o];
          ACME_CHECK(k >= 0 && k < vol, op, "index ", k, " out of range for a plane of ", vol,
                     " elements");
          ob.data()[pl * vol + k] += go.data()[pl * per + o];
        }
      ob.finish(op);
    });
  });
  return gi;
}

// avg-pool window [hs, he) x [ws, we) clipped to the input, and its divisor.
struct AvgWin {
  int64_t hs, he, ws, we;
  int64_t div;
};
AvgWin avg_window(const Pool2d& p, int64_t oh, int64_t ow, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
  int64_t he = std::min(hs + p.kh, p.H + p.ph), we = std::min(ws + p.kw, p.W + p.pw);
  const int64_t pool_size = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, p.H);
  we = std::min(we, p.W);
  int64_t div;
  if (divisor_override.has_value()) {
    div = *divisor_override;
  } else if (count_include_pad) {
    div = pool_size;
  } else {
    div = (he - hs) * (we - ws);
  }
  return {hs, he, ws, we, div};
}

// Adaptive pooling window of output index o over an input of size in.
inline int64_t ada_start(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t ada_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor> k_max_pool2d_with_indices(const at::Tensor& self,
                                                               at::IntArrayRef kernel_size,
                                                               at::IntArrayRef stride,
                                                               at::IntArrayRef padding,
                                                               at::IntArrayRef dilation,
                                                               bool ceil_mode) {
  const char* op = "max_pool2d_with_indices";
  const Pool2d p = make_pool(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  const auto shape = out_shape(self, p.Ho, p.Wo);
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor idx = at::empty(shape, self.options().dtype(c10::ScalarType::Long));
  if (out.numel() == 0) return {out, idx};
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, p, self = cm::DeviceTensor(self), out = cm::DeviceTensor(out),
                     idx = cm::DeviceTensor(idx)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t* ip = idx.data_ptr<int64_t>();
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        const Acc* in = x.data() + pl * p.H * p.W;
        Acc* o = ob.data() + pl * p.Ho * p.Wo;
        int64_t* oi = ip + pl * p.Ho * p.Wo;
        for (int64_t oh = 0; oh < p.Ho; ++oh) {
          const int64_t hs = oh * p.sh - p.ph;
          for (int64_t ow = 0; ow < p.Wo; ++ow) {
            const int64_t ws = ow * p.sw - p.pw;
            Acc best = -std::numeric_limits<Acc>::infinity();
            int64_t bi = -1;
            for (int64_t i = 0; i < p.kh; ++i) {
              const int64_t h = hs + i * p.dh;
              if (h < 0 || h >= p.H) continue;
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t w = ws + j * p.dw;
                if (w < 0 || w >= p.W) continue;
                const Acc v = in[h * p.W + w];
                // NaN wins and sticks, as in PyTorch.
                if (bi < 0 || v > best || std::isnan(v)) {
                  best = v;
                  bi = h * p.W + w;
                  if (std::isnan(v)) { i = p.kh; break; }
                }
              }
            }
            o[oh * p.Wo + ow] = best;
            oi[oh * p.Wo + ow] = bi;
          }
        }
      }
      ob.finish(op);
    });
  });
  return {out, idx};
}

at::Tensor k_max_pool2d_with_indices_backward(const at::Tensor& grad_output,
                                              const at::Tensor& self,
                                              at::IntArrayRef kernel_size,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, bool ceil_mode,
                                              const at::Tensor& indices) {
  const char* op = "max_pool2d_with_indices_backward";
  const Pool2d p = make_pool(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  const auto shape = out_shape(self, p.Ho, p.Wo);
  ACME_CHECK_T(grad_output.sizes().equals(shape), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(shape));
  return scatter_grad_by_indices(op, grad_output, self, indices, p.H * p.W);
}

at::Tensor k_avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size,
                        at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                        bool count_include_pad, ::std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  const Pool2d p = make_pool(op, self, kernel_size, stride, padding, {}, ceil_mode);
  ACME_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
             "divisor must be not zero");
  at::Tensor out = at::empty(out_shape(self, p.Ho, p.Wo), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, p, count_include_pad, divisor_override, self = cm::DeviceTensor(self),
                     out = cm::DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        const Acc* in = x.data() + pl * p.H * p.W;
        Acc* o = ob.data() + pl * p.Ho * p.Wo;
        for (int64_t oh = 0; oh < p.Ho; ++oh)
          for (int64_t ow = 0; ow < p.Wo; ++ow) {
            const AvgWin w = avg_window(p, oh, ow, count_include_pad, divisor_override);
            Acc s = 0;
            for (int64_t h = w.hs; h < w.he; ++h)
              for (int64_t c = w.ws; c < w.we; ++c) s += in[h * p.W + c];
            o[oh * p.Wo + ow] = (w.hs >= w.he || w.ws >= w.we) ? Acc(0) : s / Acc(w.div);
          }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                 at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                 ::std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d_backward";
  const Pool2d p = make_pool(op, self, kernel_size, stride, padding, {}, ceil_mode);
  ACME_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
             "divisor must be not zero");
  const auto shape = out_shape(self, p.Ho, p.Wo);
  ACME_CHECK_T(grad_output.sizes().equals(shape), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(shape));
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(gi, [op, p, count_include_pad, divisor_override,
                    grad_output = cm::DeviceTensor(grad_output), gi = cm::DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        Acc* g = ob.data() + pl * p.H * p.W;
        const Acc* src = go.data() + pl * p.Ho * p.Wo;
        for (int64_t oh = 0; oh < p.Ho; ++oh)
          for (int64_t ow = 0; ow < p.Wo; ++ow) {
            const AvgWin w = avg_window(p, oh, ow, count_include_pad, divisor_override);
            if (w.hs >= w.he || w.ws >= w.we) continue;
            const Acc v = src[oh * p.Wo + ow] / Acc(w.div);
            for (int64_t h = w.hs; h < w.he; ++h)
              for (int64_t c = w.ws; c < w.we; ++c) g[h * p.W + c] += v;
          }
      }
      ob.finish(op);
    });
  });
  return gi;
}

at::Tensor k__adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
  const char* op = "_adaptive_avg_pool2d";
  check_pool_input(op, self);
  ACME_CHECK(output_size.size() == 2, op, "output_size must have 2 values, got ", output_size);
  ACME_CHECK(output_size[0] >= 0 && output_size[1] >= 0, op,
             "output_size must be non-negative, got ", output_size);
  const int64_t H = self.size(-2), W = self.size(-1);
  const int64_t Ho = output_size[0], Wo = output_size[1];
  at::Tensor out = at::empty(out_shape(self, Ho, Wo), self.options());
  if (out.numel() == 0) return out;
  const int64_t planes = self.numel() / (H * W);
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, planes, H, W, Ho, Wo, self = cm::DeviceTensor(self),
                     out = cm::DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      for (int64_t pl = 0; pl < planes; ++pl) {
        const Acc* in = x.data() + pl * H * W;
        Acc* o = ob.data() + pl * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t hs = ada_start(oh, Ho, H), he = ada_end(oh, Ho, H);
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t ws = ada_start(ow, Wo, W), we = ada_end(ow, Wo, W);
            Acc s = 0;
            for (int64_t h = hs; h < he; ++h)
              for (int64_t c = ws; c < we; ++c) s += in[h * W + c];
            o[oh * Wo + ow] = s / Acc((he - hs) * (we - ws));
          }
        }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k__adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* op = "_adaptive_avg_pool2d_backward";
  check_pool_input(op, self);
  ACME_CHECK_T(grad_output.dim() == self.dim(), op, grad_output,
               "grad_output must have the rank of self");
  const int64_t H = self.size(-2), W = self.size(-1);
  const int64_t Ho = grad_output.size(-2), Wo = grad_output.size(-1);
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  const int64_t planes = self.numel() / (H * W);
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(gi, [op, planes, H, W, Ho, Wo, grad_output = cm::DeviceTensor(grad_output),
                    gi = cm::DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < planes; ++pl) {
        Acc* g = ob.data() + pl * H * W;
        const Acc* src = go.data() + pl * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t hs = ada_start(oh, Ho, H), he = ada_end(oh, Ho, H);
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t ws = ada_start(ow, Wo, W), we = ada_end(ow, Wo, W);
            const Acc v = src[oh * Wo + ow] / Acc((he - hs) * (we - ws));
            for (int64_t h = hs; h < he; ++h)
              for (int64_t c = ws; c < we; ++c) g[h * W + c] += v;
          }
        }
      }
      ob.finish(op);
    });
  });
  return gi;
}

::std::tuple<at::Tensor, at::Tensor> k_adaptive_max_pool2d(const at::Tensor& self,
                                                           at::IntArrayRef output_size) {
  const char* op = "adaptive_max_pool2d";
  check_pool_input(op, self);
  ACME_CHECK(output_size.size() == 2, op, "output_size must have 2 values, got ", output_size);
  ACME_CHECK(output_size[0] > 0 && output_size[1] > 0, op, "output_size must be positive, got ",
             output_size);
  const int64_t H = self.size(-2), W = self.size(-1);
  const int64_t Ho = output_size[0], Wo = output_size[1];
  const auto shape = out_shape(self, Ho, Wo);
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor idx = at::empty(shape, self.options().dtype(c10::ScalarType::Long));
  if (out.numel() == 0) return {out, idx};
  const int64_t planes = self.numel() / (H * W);
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, planes, H, W, Ho, Wo, self = cm::DeviceTensor(self),
                     out = cm::DeviceTensor(out), idx = cm::DeviceTensor(idx)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t* ip = idx.data_ptr<int64_t>();
      for (int64_t pl = 0; pl < planes; ++pl) {
        const Acc* in = x.data() + pl * H * W;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t hs = ada_start(oh, Ho, H), he = ada_end(oh, Ho, H);
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t ws = ada_start(ow, Wo, W), we = ada_end(ow, Wo, W);
            Acc best = -std::numeric_limits<Acc>::infinity();
            int64_t bi = hs * W + ws;
            for (int64_t h = hs; h < he; ++h)
              for (int64_t c = ws; c < we; ++c) {
                const Acc v = in[h * W + c];
                if (v > best || std::isnan(v)) {
                  best = v;
                  bi = h * W + c;
                  if (std::isnan(v)) { h = he; break; }
                }
              }
            ob.data()[(pl * Ho + oh) * Wo + ow] = best;
            ip[(pl * Ho + oh) * Wo + ow] = bi;
          }
        }
      }
      ob.finish(op);
    });
  });
  return {out, idx};
}

at::Tensor k_adaptive_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Tensor& indices) {
  const char* op = "adaptive_max_pool2d_backward";
  check_pool_input(op, self);
  return scatter_grad_by_indices(op, grad_output, self, indices, self.size(-2) * self.size(-1));
}

// ---- 3-d pooling ------------------------------------------------------------------

namespace {
struct Pool3d {
  int64_t planes = 0, D = 0, H = 0, W = 0, Do = 0, Ho = 0, Wo = 0;
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0}, d[3] = {1, 1, 1};
};

Pool3d make_pool3d(const char* op, const at::Tensor& self, at::IntArrayRef kernel_size,
                   at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                   bool ceil_mode) {
  check_pool_input(op, self, 3);
  ACME_CHECK(!kernel_size.empty(), op, "kernel_size must not be empty");
  Pool3d p;
  const int64_t in[3] = {self.size(-3), self.size(-2), self.size(-1)};
  int64_t outs[3];
  for (size_t i = 0; i < 3; ++i) {
    p.k[i] = pick(op, "kernel_size", kernel_size, i, 1, 3);
    p.s[i] = pick(op, "stride", stride, i, p.k[i], 3);
    p.p[i] = pick(op, "padding", padding, i, 0, 3);
    p.d[i] = pick(op, "dilation", dilation, i, 1, 3);
    ACME_CHECK(p.k[i] > 0 && p.s[i] > 0 && p.d[i] > 0, op,
               "kernel_size, stride and dilation must be positive");
    ACME_CHECK(p.p[i] >= 0 && p.p[i] <= p.k[i] / 2, op,
               "pad should be at most half of effective kernel size, but got pad=", padding,
               " and kernel_size=", kernel_size);
    outs[i] = pooled_size(in[i], p.k[i], p.p[i], p.s[i], p.d[i], ceil_mode);
    ACME_CHECK(outs[i] > 0, op, "output size is too small for input ", self.sizes());
  }
  p.D = in[0]; p.H = in[1]; p.W = in[2];
  p.Do = outs[0]; p.Ho = outs[1]; p.Wo = outs[2];
  p.planes = self.numel() / (p.D * p.H * p.W);
  return p;
}

std::vector<int64_t> out_shape3(const at::Tensor& self, int64_t Do, int64_t Ho, int64_t Wo) {
  std::vector<int64_t> s(self.sizes().begin(), self.sizes().end());
  s[s.size() - 3] = Do;
  s[s.size() - 2] = Ho;
  s[s.size() - 1] = Wo;
  return s;
}
std::vector<int64_t> out_shape3(const at::Tensor& self, const Pool3d& p) {
  return out_shape3(self, p.Do, p.Ho, p.Wo);
}

// An avg-pool3d window: [st, en) per dim clipped to the input, and its divisor
// (0 when the window lies entirely in the padding).
struct AvgWin3 {
  int64_t st[3], en[3];
  int64_t div;
};
AvgWin3 avg_window3(const Pool3d& p, const int64_t (&oi)[3], bool count_include_pad,
                    std::optional<int64_t> divisor_override) {
  const int64_t in[3] = {p.D, p.H, p.W};
  AvgWin3 w{};
  int64_t pool_size = 1, valid = 1;
  for (int i = 0; i < 3; ++i) {
    w.st[i] = oi[i] * p.s[i] - p.p[i];
    w.en[i] = std::min(w.st[i] + p.k[i], in[i] + p.p[i]);
    pool_size *= w.en[i] - w.st[i];
    w.st[i] = std::max<int64_t>(w.st[i], 0);
    w.en[i] = std::min(w.en[i], in[i]);
    valid *= std::max<int64_t>(w.en[i] - w.st[i], 0);
  }
  w.div = valid == 0                     ? 0
          : divisor_override.has_value() ? *divisor_override
          : count_include_pad            ? pool_size
                                         : valid;
  return w;
}

// The input and output volumes of an adaptive 3-d pool; output_size checked.
struct Adaptive3d {
  int64_t planes = 0, in[3] = {0, 0, 0}, out[3] = {0, 0, 0};
  int64_t vol() const { return in[0] * in[1] * in[2]; }
  int64_t ovol() const { return out[0] * out[1] * out[2]; }
};
Adaptive3d make_adaptive3d(const char* op, const at::Tensor& self, at::IntArrayRef output_size,
                           bool allow_zero) {
  make_pool3d(op, self, {1}, {}, {}, {}, false);  // rank, dtype and non-empty checks
  ACME_CHECK(output_size.size() == 3, op, "output_size must have 3 values, got ", output_size);
  Adaptive3d a;
  for (int i = 0; i < 3; ++i) {
    ACME_CHECK(allow_zero ? output_size[i] >= 0 : output_size[i] > 0, op, "output_size must be ",
               allow_zero ? "non-negative" : "positive", ", got ", output_size);
    a.in[i] = self.size(self.dim() - 3 + i);
    a.out[i] = output_size[i];
  }
  a.planes = self.numel() / a.vol();
  return a;
}

// Calls f(flat input offset) for every element of the adaptive window of output (od, oh, ow).
template <class F>
void for_adaptive_window(const Adaptive3d& a, int64_t od, int64_t oh, int64_t ow, F&& f) {
  const int64_t o[3] = {od, oh, ow};
  int64_t st[3], en[3];
  for (int i = 0; i < 3; ++i) {
    st[i] = ada_start(o[i], a.out[i], a.in[i]);
    en[i] = ada_end(o[i], a.out[i], a.in[i]);
  }
  for (int64_t z = st[0]; z < en[0]; ++z)
    for (int64_t y = st[1]; y < en[1]; ++y)
      for (int64_t x = st[2]; x < en[2]; ++x) f((z * a.in[1] + y) * a.in[2] + x);
}

int64_t adaptive_window_size(const Adaptive3d& a, int64_t od, int64_t oh, int64_t ow) {
  const int64_t o[3] = {od, oh, ow};
  int64_t n = 1;
  for (int i = 0; i < 3; ++i)
    n *= ada_end(o[i], a.out[i], a.in[i]) - ada_start(o[i], a.out[i], a.in[i]);
  return n;
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor> k_max_pool3d_with_indices(const at::Tensor& self,
                                                               at::IntArrayRef kernel_size,
                                                               at::IntArrayRef stride,
                                                               at::IntArrayRef padding,
                                                               at::IntArrayRef dilation,
                                                               bool ceil_mode) {
  const char* op = "max_pool3d_with_indices";
  const Pool3d p = make_pool3d(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  const auto shape = out_shape3(self, p);
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor idx = at::empty(shape, self.options().dtype(c10::ScalarType::Long));
  if (out.numel() == 0) return {out, idx};
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, p, self = cm::DeviceTensor(self), out = cm::DeviceTensor(out),
                     idx = cm::DeviceTensor(idx)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t* ip = idx.data_ptr<int64_t>();
      const int64_t vol = p.D * p.H * p.W, ovol = p.Do * p.Ho * p.Wo;
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        const Acc* in = x.data() + pl * vol;
        int64_t o = pl * ovol;
        for (int64_t od = 0; od < p.Do; ++od)
          for (int64_t oh = 0; oh < p.Ho; ++oh)
            for (int64_t ow = 0; ow < p.Wo; ++ow, ++o) {
              Acc best = -std::numeric_limits<Acc>::infinity();
              int64_t bi = -1;
              bool nan_found = false;
              for (int64_t a = 0; a < p.k[0] && !nan_found; ++a) {
                const int64_t z = od * p.s[0] - p.p[0] + a * p.d[0];
                if (z < 0 || z >= p.D) continue;
                for (int64_t b = 0; b < p.k[1] && !nan_found; ++b) {
                  const int64_t y = oh * p.s[1] - p.p[1] + b * p.d[1];
                  if (y < 0 || y >= p.H) continue;
                  for (int64_t c = 0; c < p.k[2]; ++c) {
                    const int64_t xw = ow * p.s[2] - p.p[2] + c * p.d[2];
                    if (xw < 0 || xw >= p.W) continue;
                    const int64_t k = (z * p.H + y) * p.W + xw;
                    const Acc v = in[k];
                    if (bi < 0 || v > best || std::isnan(v)) {
                      best = v;
                      bi = k;
                      if (std::isnan(v)) { nan_found = true; break; }
                    }
                  }
                }
              }
              ob.data()[o] = best;
              ip[o] = bi;
            }
      }
      ob.finish(op);
    });
  });
  return {out, idx};
}

at::Tensor k_avg_pool3d(const at::Tensor& self, at::IntArrayRef kernel_size,
                        at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                        bool count_include_pad, ::std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool3d";
  const Pool3d p = make_pool3d(op, self, kernel_size, stride, padding, {}, ceil_mode);
  ACME_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
             "divisor must be not zero");
  at::Tensor out = at::empty(out_shape3(self, p), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, p, count_include_pad, divisor_override, self = cm::DeviceTensor(self),
                     out = cm::DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      const int64_t vol = p.D * p.H * p.W, ovol = p.Do * p.Ho * p.Wo;
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        const Acc* src = x.data() + pl * vol;
        int64_t o = pl * ovol;
        for (int64_t od = 0; od < p.Do; ++od)
          for (int64_t oh = 0; oh < p.Ho; ++oh)
            for (int64_t ow = 0; ow < p.Wo; ++ow, ++o) {
              const AvgWin3 w = avg_window3(p, {od, oh, ow}, count_include_pad, divisor_override);
              if (w.div == 0) {
                ob.data()[o] = Acc(0);
                continue;
              }
              double sum = 0;
              for (int64_t z = w.st[0]; z < w.en[0]; ++z)
                for (int64_t y = w.st[1]; y < w.en[1]; ++y)
                  for (int64_t xw = w.st[2]; xw < w.en[2]; ++xw)
                    sum += src[(z * p.H + y) * p.W + xw];
              ob.data()[o] = static_cast<Acc>(sum / static_cast<double>(w.div));
            }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                 at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                 ::std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool3d_backward";
  const Pool3d p = make_pool3d(op, self, kernel_size, stride, padding, {}, ceil_mode);
  ACME_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
             "divisor must be not zero");
  const auto shape = out_shape3(self, p);
  ACME_CHECK_T(grad_output.sizes().equals(shape), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(shape));
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(gi, [op, p, count_include_pad, divisor_override,
                    grad_output = cm::DeviceTensor(grad_output), gi = cm::DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      const int64_t vol = p.D * p.H * p.W, ovol = p.Do * p.Ho * p.Wo;
      for (int64_t pl = 0; pl < p.planes; ++pl) {
        Acc* g = ob.data() + pl * vol;
        int64_t o = pl * ovol;
        for (int64_t od = 0; od < p.Do; ++od)
          for (int64_t oh = 0; oh < p.Ho; ++oh)
            for (int64_t ow = 0; ow < p.Wo; ++ow, ++o) {
              const AvgWin3 w = avg_window3(p, {od, oh, ow}, count_include_pad, divisor_override);
              if (w.div == 0) continue;
              const Acc v = go.data()[o] / Acc(w.div);
              for (int64_t z = w.st[0]; z < w.en[0]; ++z)
                for (int64_t y = w.st[1]; y < w.en[1]; ++y)
                  for (int64_t xw = w.st[2]; xw < w.en[2]; ++xw) g[(z * p.H + y) * p.W + xw] += v;
            }
      }
      ob.finish(op);
    });
  });
  return gi;
}

at::Tensor k_max_pool3d_with_indices_backward(const at::Tensor& grad_output,
                                              const at::Tensor& self,
                                              at::IntArrayRef kernel_size,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, bool ceil_mode,
                                              const at::Tensor& indices) {
  const char* op = "max_pool3d_with_indices_backward";
  const Pool3d p = make_pool3d(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  const auto shape = out_shape3(self, p);
  ACME_CHECK_T(grad_output.sizes().equals(shape), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(shape));
  return scatter_grad_by_indices(op, grad_output, self, indices, p.D * p.H * p.W);
}

at::Tensor k__adaptive_avg_pool3d(const at::Tensor& self, at::IntArrayRef output_size) {
  const char* op = "_adaptive_avg_pool3d";
  const Adaptive3d a = make_adaptive3d(op, self, output_size, /*allow_zero=*/true);
  at::Tensor out = at::empty(out_shape3(self, a.out[0], a.out[1], a.out[2]), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, a, self = cm::DeviceTensor(self), out = cm::DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t o = 0;
      for (int64_t pl = 0; pl < a.planes; ++pl) {
        const Acc* src = x.data() + pl * a.vol();
        for (int64_t od = 0; od < a.out[0]; ++od)
          for (int64_t oh = 0; oh < a.out[1]; ++oh)
            for (int64_t ow = 0; ow < a.out[2]; ++ow, ++o) {
              Acc sum = 0;
              for_adaptive_window(a, od, oh, ow, [&](int64_t k) { sum += src[k]; });
              ob.data()[o] = sum / Acc(adaptive_window_size(a, od, oh, ow));
            }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k__adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  const char* op = "_adaptive_avg_pool3d_backward";
  ACME_CHECK_T(grad_output.dim() == self.dim() && self.dim() >= 3, op, grad_output,
               "grad_output must have the rank of self");
  const int64_t gd = grad_output.dim();
  const Adaptive3d a = make_adaptive3d(
      op, self, {grad_output.size(gd - 3), grad_output.size(gd - 2), grad_output.size(gd - 1)},
      /*allow_zero=*/true);
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(gi, [op, a, grad_output = cm::DeviceTensor(grad_output), gi = cm::DeviceTensor(gi)] {
      auto go = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      int64_t o = 0;
      for (int64_t pl = 0; pl < a.planes; ++pl) {
        Acc* g = ob.data() + pl * a.vol();
        for (int64_t od = 0; od < a.out[0]; ++od)
          for (int64_t oh = 0; oh < a.out[1]; ++oh)
            for (int64_t ow = 0; ow < a.out[2]; ++ow, ++o) {
              const Acc v = go.data()[o] / Acc(adaptive_window_size(a, od, oh, ow));
              for_adaptive_window(a, od, oh, ow, [&](int64_t k) { g[k] += v; });
            }
      }
      ob.finish(op);
    });
  });
  return gi;
}

::std::tuple<at::Tensor, at::Tensor> k_adaptive_max_pool3d(const at::Tensor& self,
                                                           at::IntArrayRef output_size) {
  const char* op = "adaptive_max_pool3d";
  const Adaptive3d a = make_adaptive3d(op, self, output_size, /*allow_zero=*/false);
  const auto shape = out_shape3(self, a.out[0], a.out[1], a.out[2]);
  at::Tensor out = at::empty(shape, self.options());
  at::Tensor idx = at::empty(shape, self.options().dtype(c10::ScalarType::Long));
  if (out.numel() == 0) return {out, idx};
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    cm::launch(out, [op, a, self = cm::DeviceTensor(self), out = cm::DeviceTensor(out),
                     idx = cm::DeviceTensor(idx)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      int64_t* ip = idx.data_ptr<int64_t>();
      int64_t o = 0;
      for (int64_t pl = 0; pl < a.planes; ++pl) {
        const Acc* src = x.data() + pl * a.vol();
        for (int64_t od = 0; od < a.out[0]; ++od)
          for (int64_t oh = 0; oh < a.out[1]; ++oh)
            for (int64_t ow = 0; ow < a.out[2]; ++ow, ++o) {
              Acc best = -std::numeric_limits<Acc>::infinity();
              int64_t bi = -1;
              bool nan_found = false;
              // The first maximum (or the first NaN) wins, as on CPU.
              for_adaptive_window(a, od, oh, ow, [&](int64_t k) {
                if (nan_found) return;
                const Acc v = src[k];
                if (bi < 0 || v > best || std::isnan(v)) {
                  best = v;
                  bi = k;
                  nan_found = std::isnan(v);
                }
              });
              ob.data()[o] = best;
              ip[o] = bi;
            }
      }
      ob.finish(op);
    });
  });
  return {out, idx};
}

at::Tensor k_adaptive_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                          const at::Tensor& indices) {
  const char* op = "adaptive_max_pool3d_backward";
  make_pool3d(op, self, {1}, {}, {}, {}, false);  // rank, dtype and non-empty checks
  const int64_t vol = self.size(-3) * self.size(-2) * self.size(-1);
  return scatter_grad_by_indices(op, grad_output, self, indices, vol);
}

namespace {
// max_unpool: each input element is written at its flat index in the output
// plane / volume (zeros elsewhere); later elements win on repeated indices,
// as in torch's CPU kernel. Values are moved as bytes, so every dtype works.
at::Tensor max_unpool(const char* op, const at::Tensor& self, const at::Tensor& indices,
                      at::IntArrayRef output_size, int spatial) {
  ACME_CHECK_T(indices.scalar_type() == at::kLong, op, indices,
               "elements in indices should be type int64 but got: ", cm::dtype_name(indices.scalar_type()));
  ACME_CHECK(static_cast<int>(output_size.size()) == spatial, op, "There should be exactly ", spatial,
             " elements (", spatial == 2 ? "height, width" : "depth, height, width",
             ") in output_size, but got ", output_size.size(), " elements.");
  ACME_CHECK_T(self.dim() == spatial + 1 || self.dim() == spatial + 2, op, self, "Input to ", op,
               " should be a ", spatial + 1, "d or ", spatial + 2, "d Tensor, but got a tensor with ",
               self.dim(), " dimensions.");
  ACME_CHECK_T(self.sizes() == indices.sizes(), op, indices,
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
    cm::launch(out, [out = cm::DeviceTensor(out), nbytes = static_cast<size_t>(out.nbytes())] {
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
  cm::launch(out, [op, planes, in_plane, out_plane, esz, osize, in = cm::DeviceTensor(in),
                   idx = cm::DeviceTensor(idx), out = cm::DeviceTensor(out)] {
    const char* ip = static_cast<const char*>(in.data_ptr());
    const int64_t* xp = static_cast<const int64_t*>(idx.data_ptr());
    char* opp = static_cast<char*>(out.data_ptr());
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < in_plane; ++i) {
        // a data-dependent check: raised on the device, reported at the next sync
        const int64_t j = xp[p * in_plane + i];
        ACME_CHECK_INDEX(j >= 0 && j < out_plane, op, "Found an invalid max index: ", j,
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
  ACME_CHECK(stride.size() == 3 && padding.size() == 3, op,
             "There should be exactly three elements (depth, height, width) in stride and padding, got ",
             stride.size(), " and ", padding.size());
  for (int k = 0; k < 3; ++k)
    ACME_CHECK(stride[k] > 0, op, "strides should be greater than zero, but got stride: ", stride);
  return max_unpool(op, self, indices, output_size, 3);
}

}  // namespace acme::kernels
