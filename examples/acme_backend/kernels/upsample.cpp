// acme upsampling kernels, with their backwards: nearest and nearest-exact,
// linear, bilinear and trilinear in 1, 2 and 3 spatial dims (N, C, [D, [H,]] W),
// one implementation each for every number of dims; upsample_bicubic2d (plain and
// antialiased) and the antialiased bilinear on (N, C, H, W).
//
// Source coordinates follow PyTorch's rules exactly (they decide which input
// pixels an output pixel reads, so they must match bit for bit): an explicit
// scale factor s maps with 1/s, otherwise with in/out; nearest uses
// floor(dst * scale) computed in float; bilinear uses the half-pixel rule
// max(scale * (dst + 0.5) - 0.5, 0), or dst * (in-1)/(out-1) with
// align_corners; bicubic the same without the clamp at 0.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// The shapes of a resize of `spatial` (1 to 3) dims, checked: (N, C, *spatial)
// seen as N * C planes of (D, H, W), the dims the op does not have of size 1.
struct Resize {
  int spatial = 0;
  int64_t planes = 0, D = 1, H = 1, W = 1, Do = 1, Ho = 1, Wo = 1;
};

Resize resize_shape(const char* op, at::IntArrayRef in_sizes, at::IntArrayRef output_size,
                    size_t spatial) {
  FL_CHECK(output_size.size() == spatial, op, "output_size must have ", spatial, " values, got ",
             output_size);
  FL_CHECK(in_sizes.size() == spatial + 2, op, "expected ", spatial + 2, "-d input (N, C, spatial...), got ",
             in_sizes);
  Resize r;
  r.spatial = static_cast<int>(spatial);
  r.planes = in_sizes[0] * in_sizes[1];
  int64_t* in_d[3] = {&r.D, &r.H, &r.W};
  int64_t* out_d[3] = {&r.Do, &r.Ho, &r.Wo};
  for (size_t k = 0; k < spatial; ++k) {
    const size_t slot = 3 - spatial + k;
    const int64_t in = in_sizes[2 + k], out = output_size[k];
    FL_CHECK(in > 0 && out > 0, op, "input and output sizes should be greater than 0, but got input ",
               in_sizes, " and output ", output_size);
    *in_d[slot] = in;
    *out_d[slot] = out;
  }
  return r;
}

// (N, C, *output_size) for an input of sizes (N, C, ...).
std::vector<int64_t> resized_shape(at::IntArrayRef in_sizes, at::IntArrayRef output_size) {
  std::vector<int64_t> osz{in_sizes[0], in_sizes[1]};
  osz.insert(osz.end(), output_size.begin(), output_size.end());
  return osz;
}

// The forward's checks: a float input of `spatial` + 2 dims.
Resize forward_resize(const char* op, const at::Tensor& self, at::IntArrayRef output_size, size_t spatial) {
  nn::check_float(op, self);
  return resize_shape(op, self.sizes(), output_size, spatial);
}

// The backward's: also grad_output of the output's shape.
Resize backward_resize(const char* op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                       at::IntArrayRef input_size, size_t spatial) {
  nn::check_float(op, grad_output);
  const Resize r = resize_shape(op, input_size, output_size, spatial);
  const auto osz = resized_shape(input_size, output_size);
  FL_CHECK_T(grad_output.sizes().equals(osz), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", osz);
  return r;
}

// ---- nearest ----
float nearest_scale(int64_t in, int64_t out, std::optional<double> scale) {
  return (scale.has_value() && *scale > 0) ? static_cast<float>(1.0 / *scale)
                                           : static_cast<float>(in) / static_cast<float>(out);
}
int64_t nearest_src(int64_t dst, int64_t in, int64_t out, float scale) {
  if (in == out) return dst;
  if (out == 2 * in) return dst >> 1;
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale)), in - 1);
}
std::vector<int64_t> nearest_map(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> m(static_cast<size_t>(out));
  const float s = nearest_scale(in, out, scale);
  for (int64_t i = 0; i < out; ++i) m[i] = nearest_src(i, in, out, s);
  return m;
}

// ---- bilinear ----
template <class Acc>
struct Lin {
  int64_t i0, i1;
  Acc l0, l1;  // weights of i0 and i1
};
template <class Acc>
Acc area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<Acc>(in - 1) / static_cast<Acc>(out - 1) : Acc(0);
  return (scale.has_value() && *scale > 0) ? static_cast<Acc>(1.0 / *scale)
                                           : static_cast<Acc>(in) / static_cast<Acc>(out);
}
template <class Acc>
std::vector<Lin<Acc>> linear_map(int64_t in, int64_t out, bool align_corners,
                                 std::optional<double> scale) {
  std::vector<Lin<Acc>> m(static_cast<size_t>(out));
  const Acc s = area_scale<Acc>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    Acc src = align_corners ? s * static_cast<Acc>(i)
                            : std::max(s * (static_cast<Acc>(i) + Acc(0.5)) - Acc(0.5), Acc(0));
    const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const Acc l1 = std::min(std::max(src - static_cast<Acc>(i0), Acc(0)), Acc(1));
    m[i] = {i0, i1, Acc(1) - l1, l1};
  }
  return m;
}

// ---- bicubic ----
// Keys' cubic convolution with A = -0.75, as PyTorch: the source coordinate is not
// clamped at 0 (the half-pixel rule only), the four taps around floor(src) are
// clamped into the input when read or accumulated.
template <class Acc>
struct Cubic {
  int64_t i[4];  // input indices of the taps, clamped
  Acc w[4];      // their weights
};
template <class Acc>
std::vector<Cubic<Acc>> cubic_map(int64_t in, int64_t out, bool align_corners,
                                  std::optional<double> scale) {
  constexpr Acc A = Acc(-0.75);
  std::vector<Cubic<Acc>> m(static_cast<size_t>(out));
  const Acc s = area_scale<Acc>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    const Acc src = align_corners ? s * static_cast<Acc>(o) : s * (static_cast<Acc>(o) + Acc(0.5)) - Acc(0.5);
    const Acc f = std::floor(src);
    const int64_t i0 = static_cast<int64_t>(f);
    const Acc t = src - f;
    const Acc x1 = t + Acc(1), x2 = Acc(1) - t, x3 = Acc(2) - t;  // distances of taps 0, 2, 3
    auto& c = m[o];
    c.w[0] = ((A * x1 - Acc(5) * A) * x1 + Acc(8) * A) * x1 - Acc(4) * A;
    c.w[1] = ((A + Acc(2)) * t - (A + Acc(3))) * t * t + Acc(1);
    c.w[2] = ((A + Acc(2)) * x2 - (A + Acc(3))) * x2 * x2 + Acc(1);
    c.w[3] = ((A * x3 - Acc(5) * A) * x3 + Acc(8) * A) * x3 - Acc(4) * A;
    for (int k = 0; k < 4; ++k) c.i[k] = std::min(std::max(i0 - 1 + k, int64_t{0}), in - 1);
  }
  return m;
}


// ---- antialiased bilinear / bicubic (PIL's resampling, as PyTorch) ----
// Output index o reads the run [xmin[o], xmin[o] + xsize[o]) of the input with
// normalized weights w[o * K + j]: the filter (a triangle for bilinear, Keys'
// cubic with A = -0.5 for bicubic) centred on scale * (o + 0.5) and, when
// downsampling, stretched by the scale so that every input pixel contributes.
// The arithmetic follows PyTorch's (center, bounds and filter argument rounded
// where its scalar type rounds them), so the runs are the same.
template <class Acc>
struct AaMap {
  std::vector<int64_t> xmin, xsize;
  std::vector<Acc> w;
  int64_t K = 0;  // the widest run
};
template <class Acc>
Acc aa_triangle(Acc x) {
  x = std::abs(x);
  return x < Acc(1) ? Acc(1) - x : Acc(0);
}
template <class Acc>
Acc aa_keys_cubic(Acc x) {
  constexpr Acc A = Acc(-0.5);
  x = std::abs(x);
  if (x < Acc(1)) return ((A + Acc(2)) * x - (A + Acc(3))) * x * x + Acc(1);
  if (x < Acc(2)) return ((A * x - Acc(5) * A) * x + Acc(8) * A) * x - Acc(4) * A;
  return Acc(0);
}
enum class AaFilter { triangle, keys_cubic };  // bilinear, bicubic
template <class Acc>
AaMap<Acc> aa_map(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_opt,
                  AaFilter filter) {
  const bool cubic = filter == AaFilter::keys_cubic;
  const int interp = cubic ? 4 : 2;
  const Acc scale = area_scale<Acc>(in, out, align_corners, scale_opt);
  const Acc support = scale >= Acc(1) ? static_cast<Acc>(interp * 0.5 * scale) : static_cast<Acc>(interp * 0.5);
  const Acc invscale = scale >= Acc(1) ? static_cast<Acc>(1.0 / scale) : Acc(1);
  AaMap<Acc> m;
  m.K = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  m.xmin.resize(out);
  m.xsize.resize(out);
  m.w.assign(static_cast<size_t>(out * m.K), Acc(0));
  for (int64_t o = 0; o < out; ++o) {
    const Acc center = static_cast<Acc>(scale * (o + 0.5));
    const int64_t lo = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    const int64_t size = std::clamp(std::min(static_cast<int64_t>(center + support + 0.5), in) - lo,
                                    int64_t{0}, m.K);
    Acc* w = m.w.data() + o * m.K;
    Acc total = 0;
    for (int64_t j = 0; j < size; ++j) {
      const Acc x = static_cast<Acc>((static_cast<Acc>(j + lo) - center + 0.5) * invscale);
      w[j] = cubic ? aa_keys_cubic(x) : aa_triangle(x);
      total += w[j];
    }
    if (total != Acc(0))
      for (int64_t j = 0; j < size; ++j) w[j] /= total;
    m.xmin[o] = lo;
    m.xsize[o] = size;
  }
  return m;
}

// One separable pass: `lines` lines of `in` values (stride `step` between a
// line's values, `next` between lines) resampled to `out` values each.
template <class Acc>
void aa_pass(const AaMap<Acc>& m, const Acc* src, Acc* dst, int64_t lines, int64_t out,
             int64_t step, int64_t next, int64_t dst_step, int64_t dst_next) {
  for (int64_t l = 0; l < lines; ++l)
    for (int64_t o = 0; o < out; ++o) {
      const Acc* x = src + l * next + m.xmin[o] * step;
      const Acc* w = m.w.data() + o * m.K;
      Acc acc = 0;
      for (int64_t j = 0; j < m.xsize[o]; ++j) acc += x[j * step] * w[j];
      dst[l * dst_next + o * dst_step] = acc;
    }
}

at::Tensor aa_forward(const char* op, const at::Tensor& self, at::IntArrayRef output_size,
                      bool align_corners, std::optional<double> scales_h,
                      std::optional<double> scales_w, AaFilter filter) {
  const Resize r = forward_resize(op, self, output_size, 2);
  const int64_t P = r.planes, H = r.H, W = r.W, Ho = r.Ho, Wo = r.Wo;
  at::Tensor out = at::empty(resized_shape(self.sizes(), output_size), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    // the filter maps depend on sizes only: built here, used by the device part
    AaMap<Acc> mw, mh;
    if (W != Wo) mw = aa_map<Acc>(W, Wo, align_corners, scales_w, filter);
    if (H != Ho) mh = aa_map<Acc>(H, Ho, align_corners, scales_h, filter);
    launch(out, [op, P, H, W, Ho, Wo, mw, mh, self = DeviceTensor(self),
                 out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      // along W first, then along H, as PyTorch; a dim whose size does not change
      // is copied, not resampled (PyTorch skips its pass)
      std::vector<Acc> mid;
      const Acc* rows = x.data();
      if (W != Wo) {
        mid.resize(static_cast<size_t>(P * H * Wo));
        aa_pass(mw, x.data(), mid.data(), P * H, Wo, 1, W, 1, Wo);
        rows = mid.data();
      }
      if (H != Ho) {
        for (int64_t pl = 0; pl < P; ++pl)
          aa_pass(mh, rows + pl * H * Wo, ob.data() + pl * Ho * Wo, Wo, Ho, Wo, 1, Wo, 1);
      } else {
        std::copy(rows, rows + P * H * Wo, ob.data());
      }
      ob.finish(op);
    });
  });
  return out;
}

// The adjoint of the forward, not separable (PyTorch's backward computes the
// same weights and scatters every output's gradient over its window).
at::Tensor aa_backward(const char* op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                       at::IntArrayRef input_size, bool align_corners,
                       std::optional<double> scales_h, std::optional<double> scales_w, AaFilter filter) {
  const Resize r = backward_resize(op, grad_output, output_size, input_size, 2);
  const int64_t P = r.planes, H = r.H, W = r.W, Ho = r.Ho, Wo = r.Wo;
  at::Tensor gi = at::empty(input_size, grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    const auto mh = aa_map<Acc>(H, Ho, align_corners, scales_h, filter);
    const auto mw = aa_map<Acc>(W, Wo, align_corners, scales_w, filter);
    launch(gi, [op, P, H, W, Ho, Wo, mh, mw, grad_output = DeviceTensor(grad_output),
                gi = DeviceTensor(gi)] {
      auto g = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < P; ++pl) {
        const Acc* src = g.data() + pl * Ho * Wo;
        Acc* d = ob.data() + pl * H * W;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const Acc* wy = mh.w.data() + oh * mh.K;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const Acc* wx = mw.w.data() + ow * mw.K;
            const Acc v = src[oh * Wo + ow];
            for (int64_t y = 0; y < mh.xsize[oh]; ++y) {
              Acc* row = d + (mh.xmin[oh] + y) * W + mw.xmin[ow];
              for (int64_t x = 0; x < mw.xsize[ow]; ++x) row[x] += wx[x] * wy[y] * v;
            }
          }
        }
      }
      ob.finish(op);
    });
  });
  return gi;
}

}  // namespace

at::Tensor k_upsample_bicubic2d(const at::Tensor& self, at::IntArrayRef output_size,
                                bool align_corners, ::std::optional<double> scales_h,
                                ::std::optional<double> scales_w) {
  const char* op = "upsample_bicubic2d";
  const Resize r = forward_resize(op, self, output_size, 2);
  const int64_t P = r.planes, H = r.H, W = r.W, Ho = r.Ho, Wo = r.Wo;
  at::Tensor out = at::empty(resized_shape(self.sizes(), output_size), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    const auto mh = cubic_map<Acc>(H, Ho, align_corners, scales_h);
    const auto mw = cubic_map<Acc>(W, Wo, align_corners, scales_w);
    launch(out, [op, P, H, W, Ho, Wo, mh, mw, self = DeviceTensor(self),
                 out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      for (int64_t pl = 0; pl < P; ++pl) {
        const Acc* in = x.data() + pl * H * W;
        Acc* o = ob.data() + pl * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const auto& h = mh[oh];
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const auto& w = mw[ow];
            Acc acc = 0;
            for (int r = 0; r < 4; ++r) {  // each row interpolated along x, then the rows along y
              const Acc* row = in + h.i[r] * W;
              acc += h.w[r] * (w.w[0] * row[w.i[0]] + w.w[1] * row[w.i[1]] + w.w[2] * row[w.i[2]] +
                               w.w[3] * row[w.i[3]]);
            }
            o[oh * Wo + ow] = acc;
          }
        }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k_upsample_bicubic2d_backward(const at::Tensor& grad_output,
                                         at::IntArrayRef output_size, at::IntArrayRef input_size,
                                         bool align_corners, ::std::optional<double> scales_h,
                                         ::std::optional<double> scales_w) {
  const char* op = "upsample_bicubic2d_backward";
  const Resize r = backward_resize(op, grad_output, output_size, input_size, 2);
  const int64_t P = r.planes, H = r.H, W = r.W, Ho = r.Ho, Wo = r.Wo;
  at::Tensor gi = at::empty(input_size, grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    const auto mh = cubic_map<Acc>(H, Ho, align_corners, scales_h);
    const auto mw = cubic_map<Acc>(W, Wo, align_corners, scales_w);
    launch(gi, [op, P, H, W, Ho, Wo, mh, mw, grad_output = DeviceTensor(grad_output),
                gi = DeviceTensor(gi)] {
      auto g = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t pl = 0; pl < P; ++pl) {
        const Acc* src = g.data() + pl * Ho * Wo;
        Acc* d = ob.data() + pl * H * W;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const auto& h = mh[oh];
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const auto& w = mw[ow];
            const Acc v = src[oh * Wo + ow];
            for (int r = 0; r < 4; ++r)
              for (int c = 0; c < 4; ++c) d[h.i[r] * W + w.i[c]] += v * h.w[r] * w.w[c];
          }
        }
      }
      ob.finish(op);
    });
  });
  return gi;
}

namespace {
// ---- nearest, nearest-exact, linear, bilinear, trilinear: 1 to 3 spatial dims ----
// One implementation each for (N, C, W), (N, C, H, W) and (N, C, D, H, W): the
// loops run over the (D, H, W) of a Resize.

// nearest-exact reads floor((dst + 0.5) * scale), plain nearest floor(dst * scale)
// (with torch's integer shortcuts for equal and doubled sizes).
std::vector<int64_t> nearest_exact_map(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> m(static_cast<size_t>(out));
  const float s = nearest_scale(in, out, scale);
  for (int64_t i = 0; i < out; ++i)
    m[i] = std::min(static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(i) + 0.5) * s))),
                    in - 1);
  return m;
}

// The source of every output element of a nearest resize, within a plane: the
// output row (od, oh) reads the input row starting at rows[od * Ho + oh], its
// element ow the element cols[ow] of that row. (Per-row offsets keep the inner
// loops short of live values: they run as fast as a 2-d-only loop.)
struct NearestMaps {
  std::vector<int64_t> rows, cols;
};

NearestMaps nearest_maps(const Resize& r, const std::vector<std::optional<double>>& scales, bool exact) {
  const int64_t in[3] = {r.D, r.H, r.W}, out[3] = {r.Do, r.Ho, r.Wo};
  std::vector<int64_t> maps[3] = {{0}, {0}, {0}};  // a missing dim reads index 0
  for (int slot = 3 - r.spatial, k = 0; slot < 3; ++slot, ++k)
    maps[slot] = exact ? nearest_exact_map(in[slot], out[slot], scales[k])
                       : nearest_map(in[slot], out[slot], scales[k]);
  NearestMaps m;
  for (const int64_t id : maps[0])
    for (const int64_t ih : maps[1]) m.rows.push_back((id * r.H + ih) * r.W);
  m.cols = std::move(maps[2]);
  return m;
}

// Per-dim taps of a linear resize. A missing dim has no taps: the kernels below
// do not interpolate along it at all (its weights 1 and 0 would turn an infinite
// input into 0 * inf = NaN).
template <class Acc>
struct LinearMaps {
  std::vector<Lin<Acc>> md{{0, 0, Acc(1), Acc(0)}}, mh{{0, 0, Acc(1), Acc(0)}}, mw{{0, 0, Acc(1), Acc(0)}};
};

template <class Acc>
LinearMaps<Acc> linear_maps(const Resize& r, bool align_corners,
                            const std::vector<std::optional<double>>& scales) {
  LinearMaps<Acc> m;
  const int64_t in[3] = {r.D, r.H, r.W}, out[3] = {r.Do, r.Ho, r.Wo};
  std::vector<Lin<Acc>>* maps[3] = {&m.md, &m.mh, &m.mw};
  for (int slot = 3 - r.spatial, k = 0; slot < 3; ++slot, ++k)
    *maps[slot] = linear_map<Acc>(in[slot], out[slot], align_corners, scales[k]);
  return m;
}

// Calls f(std::integral_constant<int, spatial>): the per-element code of the
// linear kernels is compiled once per number of spatial dims.
template <class F>
void with_spatial_dims(int spatial, F&& f) {
  switch (spatial) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 3>{}); break;
  }
}

// One output value: interpolated along the first spatial dim, each of its two
// taps along the next, and so on, as PyTorch (so the sums round the same way).
template <int Dims, class Acc>
inline Acc linear_at(const Acc* in, const Resize& r, const Lin<Acc>& d, const Lin<Acc>& h,
                     const Lin<Acc>& w) {
  auto row = [&](const Acc* p) { return w.l0 * p[w.i0] + w.l1 * p[w.i1]; };
  auto plane = [&](const Acc* p) { return h.l0 * row(p + h.i0 * r.W) + h.l1 * row(p + h.i1 * r.W); };
  if constexpr (Dims == 1) return row(in);
  else if constexpr (Dims == 2) return plane(in);
  else return d.l0 * plane(in + d.i0 * r.H * r.W) + d.l1 * plane(in + d.i1 * r.H * r.W);
}

// The adjoint: one output gradient v added to the taps it was read from, with
// the weight products in PyTorch's order.
template <int Dims, class Acc>
inline void linear_add(Acc* in, const Resize& r, const Lin<Acc>& d, const Lin<Acc>& h, const Lin<Acc>& w,
                       Acc v) {
  const int64_t iw[2] = {w.i0, w.i1}, ih[2] = {h.i0, h.i1}, id[2] = {d.i0, d.i1};
  const Acc lw[2] = {w.l0, w.l1}, lh[2] = {h.l0, h.l1}, ld[2] = {d.l0, d.l1};
  if constexpr (Dims == 1) {
    for (int c = 0; c < 2; ++c) in[iw[c]] += lw[c] * v;
  } else if constexpr (Dims == 2) {
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) in[ih[b] * r.W + iw[c]] += lh[b] * lw[c] * v;
  } else {
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 2; ++c) in[(id[a] * r.H + ih[b]) * r.W + iw[c]] += ld[a] * lh[b] * lw[c] * v;
  }
}

at::Tensor linear_nd(const char* op, const at::Tensor& self, at::IntArrayRef output_size, bool align_corners,
                     const std::vector<std::optional<double>>& scales) {
  const Resize r = forward_resize(op, self, output_size, scales.size());
  at::Tensor out = at::empty(resized_shape(self.sizes(), output_size), self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    const auto m = linear_maps<Acc>(r, align_corners, scales);
    launch(out, [op, r, m, self = DeviceTensor(self), out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      with_spatial_dims(r.spatial, [&](auto dims) {
        Acc* o = ob.data();
        for (int64_t pl = 0; pl < r.planes; ++pl) {
          const Acc* in = x.data() + pl * r.D * r.H * r.W;
          for (const auto& d : m.md)
            for (const auto& h : m.mh)
              for (const auto& w : m.mw) *o++ = linear_at<decltype(dims)::value>(in, r, d, h, w);
        }
      });
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor linear_nd_backward(const char* op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                              at::IntArrayRef input_size, bool align_corners,
                              const std::vector<std::optional<double>>& scales) {
  const Resize r = backward_resize(op, grad_output, output_size, input_size, scales.size());
  at::Tensor gi = at::empty(input_size, grad_output.options());
  if (gi.numel() == 0) return gi;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    const auto m = linear_maps<Acc>(r, align_corners, scales);
    launch(gi, [op, r, m, grad_output = DeviceTensor(grad_output), gi = DeviceTensor(gi)] {
      auto gr = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      with_spatial_dims(r.spatial, [&](auto dims) {
        const Acc* src = gr.data();
        for (int64_t pl = 0; pl < r.planes; ++pl) {
          Acc* dst = ob.data() + pl * r.D * r.H * r.W;
          for (const auto& d : m.md)
            for (const auto& h : m.mh)
              for (const auto& w : m.mw) linear_add<decltype(dims)::value>(dst, r, d, h, w, *src++);
        }
      });
      ob.finish(op);
    });
  });
  return gi;
}

at::Tensor nearest_nd(const char* op, const at::Tensor& self, at::IntArrayRef output_size,
                      const std::vector<std::optional<double>>& scales, bool exact) {
  const Resize r = forward_resize(op, self, output_size, scales.size());
  at::Tensor out = at::empty(resized_shape(self.sizes(), output_size), self.options());
  if (out.numel() == 0) return out;
  const NearestMaps m = nearest_maps(r, scales, exact);
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, r, m, self = DeviceTensor(self), out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      nn::OutBuf<Acc> ob(out);
      const int64_t* cols = m.cols.data();
      const int64_t Wo = r.Wo;
      Acc* o = ob.data();
      for (int64_t pl = 0; pl < r.planes; ++pl) {
        const Acc* in = x.data() + pl * r.D * r.H * r.W;
        for (const int64_t row : m.rows) {
          for (int64_t ow = 0; ow < Wo; ++ow) o[ow] = in[row + cols[ow]];
          o += Wo;
        }
      }
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor nearest_nd_backward(const char* op, const at::Tensor& grad_output, at::IntArrayRef output_size,
                               at::IntArrayRef input_size,
                               const std::vector<std::optional<double>>& scales, bool exact) {
  const Resize r = backward_resize(op, grad_output, output_size, input_size, scales.size());
  at::Tensor gi = at::empty(input_size, grad_output.options());
  if (gi.numel() == 0) return gi;
  const NearestMaps m = nearest_maps(r, scales, exact);
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gi, [op, r, m, grad_output = DeviceTensor(grad_output), gi = DeviceTensor(gi)] {
      auto gr = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      const int64_t* cols = m.cols.data();
      const int64_t Wo = r.Wo;
      const Acc* g = gr.data();
      for (int64_t pl = 0; pl < r.planes; ++pl) {
        Acc* in = ob.data() + pl * r.D * r.H * r.W;
        for (const int64_t row : m.rows) {
          for (int64_t ow = 0; ow < Wo; ++ow) in[row + cols[ow]] += g[ow];
          g += Wo;
        }
      }
      ob.finish(op);
    });
  });
  return gi;
}
}  // namespace

at::Tensor k_upsample_nearest2d(const at::Tensor& self, at::IntArrayRef output_size,
                                ::std::optional<double> scales_h,
                                ::std::optional<double> scales_w) {
  return nearest_nd("upsample_nearest2d", self, output_size, {scales_h, scales_w}, false);
}

at::Tensor k_upsample_nearest2d_backward(const at::Tensor& grad_output,
                                         at::IntArrayRef output_size, at::IntArrayRef input_size,
                                         ::std::optional<double> scales_h,
                                         ::std::optional<double> scales_w) {
  return nearest_nd_backward("upsample_nearest2d_backward", grad_output, output_size, input_size,
                             {scales_h, scales_w}, false);
}

at::Tensor k_upsample_bilinear2d(const at::Tensor& self, at::IntArrayRef output_size,
                                 bool align_corners, ::std::optional<double> scales_h,
                                 ::std::optional<double> scales_w) {
  return linear_nd("upsample_bilinear2d", self, output_size, align_corners, {scales_h, scales_w});
}

at::Tensor k_upsample_bilinear2d_backward(const at::Tensor& grad_output,
                                          at::IntArrayRef output_size, at::IntArrayRef input_size,
                                          bool align_corners, ::std::optional<double> scales_h,
                                          ::std::optional<double> scales_w) {
  return linear_nd_backward("upsample_bilinear2d_backward", grad_output, output_size, input_size,
                            align_corners, {scales_h, scales_w});
}

at::Tensor k_upsample_nearest1d(const at::Tensor& self, at::IntArrayRef output_size,
                                ::std::optional<double> scales) {
  return nearest_nd("upsample_nearest1d", self, output_size, {scales}, false);
}

at::Tensor k_upsample_nearest3d(const at::Tensor& self, at::IntArrayRef output_size,
                                ::std::optional<double> scales_d, ::std::optional<double> scales_h,
                                ::std::optional<double> scales_w) {
  return nearest_nd("upsample_nearest3d", self, output_size, {scales_d, scales_h, scales_w}, false);
}

at::Tensor k__upsample_nearest_exact1d(const at::Tensor& self, at::IntArrayRef output_size,
                                       ::std::optional<double> scales) {
  return nearest_nd("_upsample_nearest_exact1d", self, output_size, {scales}, true);
}

at::Tensor k__upsample_nearest_exact2d(const at::Tensor& self, at::IntArrayRef output_size,
                                       ::std::optional<double> scales_h, ::std::optional<double> scales_w) {
  return nearest_nd("_upsample_nearest_exact2d", self, output_size, {scales_h, scales_w}, true);
}

at::Tensor k__upsample_nearest_exact3d(const at::Tensor& self, at::IntArrayRef output_size,
                                       ::std::optional<double> scales_d, ::std::optional<double> scales_h,
                                       ::std::optional<double> scales_w) {
  return nearest_nd("_upsample_nearest_exact3d", self, output_size, {scales_d, scales_h, scales_w}, true);
}

at::Tensor k_upsample_nearest1d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                         at::IntArrayRef input_size, ::std::optional<double> scales) {
  return nearest_nd_backward("upsample_nearest1d_backward", grad_output, output_size, input_size, {scales},
                             false);
}

at::Tensor k_upsample_nearest3d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                         at::IntArrayRef input_size, ::std::optional<double> scales_d,
                                         ::std::optional<double> scales_h, ::std::optional<double> scales_w) {
  return nearest_nd_backward("upsample_nearest3d_backward", grad_output, output_size, input_size,
                             {scales_d, scales_h, scales_w}, false);
}

at::Tensor k__upsample_nearest_exact1d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                                at::IntArrayRef input_size, ::std::optional<double> scales) {
  return nearest_nd_backward("_upsample_nearest_exact1d_backward", grad_output, output_size, input_size,
                             {scales}, true);
}

at::Tensor k__upsample_nearest_exact2d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                                at::IntArrayRef input_size, ::std::optional<double> scales_h,
                                                ::std::optional<double> scales_w) {
  return nearest_nd_backward("_upsample_nearest_exact2d_backward", grad_output, output_size, input_size,
                             {scales_h, scales_w}, true);
}

at::Tensor k__upsample_nearest_exact3d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                                at::IntArrayRef input_size, ::std::optional<double> scales_d,
                                                ::std::optional<double> scales_h,
                                                ::std::optional<double> scales_w) {
  return nearest_nd_backward("_upsample_nearest_exact3d_backward", grad_output, output_size, input_size,
                             {scales_d, scales_h, scales_w}, true);
}

at::Tensor k__upsample_bilinear2d_aa(const at::Tensor& self, at::IntArrayRef output_size,
                                     bool align_corners, ::std::optional<double> scales_h,
                                     ::std::optional<double> scales_w) {
  return aa_forward("_upsample_bilinear2d_aa", self, output_size, align_corners, scales_h, scales_w,
                    AaFilter::triangle);
}

at::Tensor k__upsample_bilinear2d_aa_backward(const at::Tensor& grad_output,
                                              at::IntArrayRef output_size, at::IntArrayRef input_size,
                                              bool align_corners, ::std::optional<double> scales_h,
                                              ::std::optional<double> scales_w) {
  return aa_backward("_upsample_bilinear2d_aa_backward", grad_output, output_size, input_size,
                     align_corners, scales_h, scales_w, AaFilter::triangle);
}

at::Tensor k__upsample_bicubic2d_aa(const at::Tensor& self, at::IntArrayRef output_size,
                                    bool align_corners, ::std::optional<double> scales_h,
                                    ::std::optional<double> scales_w) {
  return aa_forward("_upsample_bicubic2d_aa", self, output_size, align_corners, scales_h, scales_w,
                    AaFilter::keys_cubic);
}

at::Tensor k__upsample_bicubic2d_aa_backward(const at::Tensor& grad_output,
                                             at::IntArrayRef output_size, at::IntArrayRef input_size,
                                             bool align_corners, ::std::optional<double> scales_h,
                                             ::std::optional<double> scales_w) {
  return aa_backward("_upsample_bicubic2d_aa_backward", grad_output, output_size, input_size,
                     align_corners, scales_h, scales_w, AaFilter::keys_cubic);
}


at::Tensor k_upsample_linear1d(const at::Tensor& self, at::IntArrayRef output_size, bool align_corners,
                               ::std::optional<double> scales) {
  return linear_nd("upsample_linear1d", self, output_size, align_corners, {scales});
}

at::Tensor k_upsample_linear1d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                        at::IntArrayRef input_size, bool align_corners,
                                        ::std::optional<double> scales) {
  return linear_nd_backward("upsample_linear1d_backward", grad_output, output_size, input_size,
                            align_corners, {scales});
}

at::Tensor k_upsample_trilinear3d(const at::Tensor& self, at::IntArrayRef output_size, bool align_corners,
                                  ::std::optional<double> scales_d, ::std::optional<double> scales_h,
                                  ::std::optional<double> scales_w) {
  return linear_nd("upsample_trilinear3d", self, output_size, align_corners, {scales_d, scales_h, scales_w});
}

at::Tensor k_upsample_trilinear3d_backward(const at::Tensor& grad_output, at::IntArrayRef output_size,
                                           at::IntArrayRef input_size, bool align_corners,
                                           ::std::optional<double> scales_d, ::std::optional<double> scales_h,
                                           ::std::optional<double> scales_w) {
  return linear_nd_backward("upsample_trilinear3d_backward", grad_output, output_size, input_size,
                            align_corners, {scales_d, scales_h, scales_w});
}

}  // namespace acme::kernels
