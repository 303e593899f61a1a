// acme grid sampling: grid_sampler_2d / _3d and their backwards, the kernels behind
// F.grid_sample (spatial transformers, deformable attention, optical-flow warping;
// volumes and video in 3-d). input (N, C, H, W), grid (N, Ho, Wo, 2) of (x, y) in
// [-1, 1], output (N, C, Ho, Wo); in 3-d input (N, C, D, H, W), grid (N, Do, Ho, Wo, 3)
// of (x, y, z). The code is written once for K = 2 or 3 spatial dims, in the grid's
// component order (x along W, y along H, z along D); bicubic is 2-d only, as in torch.
//
// Where a grid point samples follows PyTorch's rules, which decide which pixels are
// read and so must match exactly:
//   * unnormalize: align_corners maps -1 and 1 to the centres of the corner pixels,
//     ((g + 1) / 2) * (size - 1); otherwise to their outer edges, ((g + 1) * size - 1) / 2;
//   * padding (bilinear and nearest: the point; bicubic: each of its 16 taps):
//     zeros reads 0 outside, border clamps into [0, size - 1], reflection mirrors
//     at the corner centres (align_corners) or the outer edges, then clamps;
//   * bilinear weights the 4 (8 in 3-d) pixels around the point by (x1 - x)(y1 - y) ...;
//     nearest rounds half to even; bicubic is Keys' cubic convolution, A = -0.75;
//   * a coordinate that is still not finite after the padding mode (NaN; infinity
//     under zeros or reflection padding; border clamps infinities to the edge)
//     gives NaN in bilinear and bicubic mode and 0 in nearest mode, as CPU's kernels
//     do with zeros padding (with the other paddings CPU reads some edge pixel), and
//     a NaN gradient for the grid point.
// The backward scatters grad_output into the input's gradient and gives the grid's
// gradient: d(output)/d(coordinate) times d(coordinate)/d(grid), where clamping has
// slope 0 outside and reflection slope -1 on mirrored spans (CPU's convention).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernel_lib/parallel.h"
#include "kernels.h"

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

enum class Interp { bilinear = 0, nearest = 1, bicubic = 2 };
enum class Pad { zeros = 0, border = 1, reflection = 2 };

struct Mode {
  Interp interp;
  Pad pad;
  bool align_corners;
};

// Sizes in the grid's component order: size[0] = W (x), size[1] = H, size[2] = D.
template <int K>
struct Shape {
  int64_t N, C;
  int64_t size[K];
  int64_t stride[K];  // of a pixel along each axis, in a dense (C, [D,] H, W) image
  int64_t image;      // C * D * H * W
  int64_t points;     // grid points per image: Ho * Wo (* Do)
};

Mode check_mode(const char* op, int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  FL_CHECK_VALUE(interpolation_mode >= 0 && interpolation_mode <= 2, op,
                   "interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), got ",
                   interpolation_mode);
  FL_CHECK_VALUE(padding_mode >= 0 && padding_mode <= 2, op,
                   "padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), got ", padding_mode);
  return {static_cast<Interp>(interpolation_mode), static_cast<Pad>(padding_mode), align_corners};
}

// CPU's checks (check_grid_sampler_common / _2d / _3d), with the op and device named.
template <int K>
Shape<K> check_shapes(const char* op, const at::Tensor& input, const at::Tensor& grid, const Mode& m) {
  nn::check_float(op, input);
  nn::check_float(op, grid);
  FL_CHECK_T(input.scalar_type() == grid.scalar_type(), op, input,
               "expected input and grid to have the same dtype, got input ", input.scalar_type(),
               " and grid ", grid.scalar_type());
  FL_CHECK_T(input.dim() == K + 2 && grid.dim() == K + 2, op, input, "expected ", K + 2,
               K == 2 ? "-d input (N, C, H, W) and grid (N, H_out, W_out, 2)"
                      : "-d input (N, C, D, H, W) and grid (N, D_out, H_out, W_out, 3)",
               ", got input ", input.sizes(), " and grid ", grid.sizes());
  FL_CHECK_T(input.size(0) == grid.size(0), op, input,
               "expected grid and input to have the same batch size, got input ", input.sizes(),
               " and grid ", grid.sizes());
  FL_CHECK_T(grid.size(K + 1) == K, op, grid, "expected grid to have size ", K,
               " in its last dimension (", K == 2 ? "x, y" : "x, y, z", "), got ", grid.sizes());
  FL_CHECK(K == 2 || m.interp != Interp::bicubic, op,
             "bicubic interpolation only supports 4-d input (grid_sampler_2d)");
  Shape<K> s{input.size(0), input.size(1), {}, {}, input.size(1), 1};
  for (int d = 0; d < K; ++d) {
    s.size[d] = input.size(K + 1 - d);
    FL_CHECK_T(s.size[d] > 0, op, input, "expected input to have non-empty spatial dimensions, got ",
                 input.sizes());
    s.stride[d] = d == 0 ? 1 : s.stride[d - 1] * s.size[d - 1];
    s.image *= s.size[d];
    s.points *= grid.size(K - d);
  }
  return s;
}

// ---- where a grid value samples, and the slope of that map ----

template <class Acc>
Acc unnormalize(Acc g, int64_t size, bool align_corners, Acc& slope) {
  if (align_corners) {
    slope = static_cast<Acc>(size - 1) / 2;
    return ((g + 1) / 2) * static_cast<Acc>(size - 1);
  }
  slope = static_cast<Acc>(size) / 2;
  return ((g + 1) * static_cast<Acc>(size) - 1) / 2;
}

// Into [0, size - 1]; NaN stays NaN (and later reads nothing).
template <class Acc>
Acc clamp_into(Acc x, int64_t size, Acc& slope) {
  const Acc hi = static_cast<Acc>(size - 1);
  if (x <= 0) {
    slope = 0;
    return 0;
  }
  if (x >= hi) {
    slope = 0;
    return hi;
  }
  slope = 1;
  return x;
}

// Mirrors x into [twice_low / 2, twice_high / 2]: the span is walked back and forth,
// so odd spans run backwards (slope -1). Parity is taken in floating point, so huge
// coordinates stay defined.
template <class Acc>
Acc reflect(Acc x, int64_t twice_low, int64_t twice_high, Acc& slope) {
  if (twice_low == twice_high) {
    slope = 0;
    return 0;
  }
  const Acc low = static_cast<Acc>(twice_low) / 2;
  const Acc span = static_cast<Acc>(twice_high - twice_low) / 2;
  Acc sign = 1;
  x -= low;
  if (x < 0) {
    sign = -1;
    x = -x;
  }
  const Acc extra = std::fmod(x, span);
  const bool odd = std::fmod(std::floor(x / span), Acc(2)) != 0;
  slope = odd ? -sign : sign;
  return odd ? span - extra + low : extra + low;
}

// A pixel coordinate after the padding mode (border, reflection), with its slope.
template <class Acc>
Acc apply_padding(Acc x, int64_t size, const Mode& m, Acc& slope) {
  slope = 1;
  if (m.pad == Pad::border) return clamp_into(x, size, slope);
  if (m.pad == Pad::reflection) {
    Acc s_reflect, s_clamp;
    x = m.align_corners ? reflect(x, 0, 2 * (size - 1), s_reflect)
                        : reflect(x, -1, 2 * size - 1, s_reflect);
    x = clamp_into(x, size, s_clamp);
    slope = s_reflect * s_clamp;
  }
  return x;
}

// The pixel index of an integral coordinate, or -1 when it lies outside [0, size).
template <class Acc>
int64_t index_in(Acc x, int64_t size) {
  return (x >= 0 && x < static_cast<Acc>(size)) ? static_cast<int64_t>(x) : -1;
}

// ---- one grid point ----

// Its source coordinates in pixels and their slopes in the grid values.
template <class Acc, int K>
struct Source {
  Acc pos[K], slope[K];
};

template <class Acc, int K>
Source<Acc, K> source(const Acc* g, const Shape<K>& s, const Mode& m) {
  Source<Acc, K> src;
  for (int d = 0; d < K; ++d) {
    src.pos[d] = unnormalize(g[d], s.size[d], m.align_corners, src.slope[d]);
    if (m.interp != Interp::bicubic) {  // bicubic pads its taps instead (cubic_taps)
      Acc pad;
      src.pos[d] = apply_padding(src.pos[d], s.size[d], m, pad);
      src.slope[d] *= pad;
    }
  }
  return src;
}

// A point with a coordinate that is not finite reads no pixel: its value (and, for
// the grid's gradient, its slope) is NaN, except nearest's 0.
template <class Acc, int K>
bool finite(const Source<Acc, K>& p) {
  for (int d = 0; d < K; ++d)
    if (!std::isfinite(p.pos[d])) return false;
  return true;
}
template <class Acc>
Acc non_finite_value(const Mode& m) {
  return m.interp == Interp::nearest ? Acc(0) : std::numeric_limits<Acc>::quiet_NaN();
}

// ---- interpolation weights ----

// The 2^K neighbourhood of a point: per axis the pixel indices (-1 outside) of
// floor(pos) and floor(pos) + 1 and their weights x1 - x and x - x0. Corner c takes
// side (c >> d) & 1 along axis d; its weight is the product of its sides' weights.
template <class Acc, int K>
struct Linear {
  int64_t idx[K][2];
  Acc w[K][2];

  // The corner's offset in the image, or -1 when a side lies outside.
  int64_t offset(int c, const Shape<K>& s) const {
    int64_t at = 0;
    for (int d = 0; d < K; ++d) {
      const int64_t i = idx[d][(c >> d) & 1];
      if (i < 0) return -1;
      at += i * s.stride[d];
    }
    return at;
  }
  // The product of the corner's weights along every axis but `skip` (-1: all axes).
  // Starting from 1 is exact: 1 * w is w.
  Acc weight(int c, int skip = -1) const {
    Acc p = 1;
    for (int d = 0; d < K; ++d)
      if (d != skip) p *= w[d][(c >> d) & 1];
    return p;
  }
};

template <class Acc, int K>
Linear<Acc, K> linear_at(const Source<Acc, K>& p, const Shape<K>& s) {
  Linear<Acc, K> b;
  for (int d = 0; d < K; ++d) {
    const Acc x0 = std::floor(p.pos[d]);
    b.idx[d][0] = index_in(x0, s.size[d]), b.idx[d][1] = index_in(x0 + 1, s.size[d]);
    b.w[d][0] = (x0 + 1) - p.pos[d], b.w[d][1] = p.pos[d] - x0;
  }
  return b;
}

// Nearest pixel (round half to even), or -1 when it lies outside.
template <class Acc, int K>
int64_t nearest_offset(const Source<Acc, K>& p, const Shape<K>& s) {
  int64_t at = 0;
  for (int d = 0; d < K; ++d) {
    const int64_t i = index_in(std::nearbyint(p.pos[d]), s.size[d]);
    if (i < 0) return -1;
    at += i * s.stride[d];
  }
  return at;
}

// Keys' cubic convolution (A = -0.75): the weights of the taps at floor(x) - 1 .. + 2,
// for t = x - floor(x), and their derivatives in t.
template <class Acc>
void cubic_weights(Acc t, Acc w[4], Acc dw[4]) {
  constexpr Acc A = Acc(-0.75);
  // a tap at distance d: |d| <= 1 (inner) or 1 < |d| < 2 (outer)
  const auto inner = [](Acc d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };
  const auto outer = [](Acc d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };
  const auto d_inner = [](Acc d) { return (3 * (A + 2) * d - 2 * (A + 3)) * d; };
  const auto d_outer = [](Acc d) { return (3 * A * d - 10 * A) * d + 8 * A; };
  w[0] = outer(t + 1), w[1] = inner(t), w[2] = inner(1 - t), w[3] = outer(2 - t);
  dw[0] = d_outer(t + 1), dw[1] = d_inner(t), dw[2] = -d_inner(1 - t), dw[3] = -d_outer(2 - t);
}

// The 4 tap indices of a bicubic coordinate along one axis (-1 outside), each tap
// put through the padding mode first, as PyTorch does.
template <class Acc>
void cubic_taps(Acc x0, int64_t size, const Mode& m, int64_t idx[4]) {
  for (int k = 0; k < 4; ++k) {
    Acc unused;
    idx[k] = index_in(apply_padding(x0 - 1 + static_cast<Acc>(k), size, m, unused), size);
  }
}

// The 4x4 neighbourhood of a point (2-d only): tap indices (-1 outside), weights and
// their derivatives in x and y. The weight of tap (i, j) is wx[i] * wy[j].
template <class Acc>
struct Bicubic {
  int64_t x[4], y[4];
  Acc wx[4], wy[4], dwx[4], dwy[4];
};

template <class Acc>
Bicubic<Acc> bicubic_at(const Source<Acc, 2>& p, const Shape<2>& s, const Mode& m) {
  const Acc x0 = std::floor(p.pos[0]), y0 = std::floor(p.pos[1]);
  Bicubic<Acc> b;
  cubic_weights(p.pos[0] - x0, b.wx, b.dwx);
  cubic_weights(p.pos[1] - y0, b.wy, b.dwy);
  cubic_taps(x0, s.size[0], m, b.x);
  cubic_taps(y0, s.size[1], m, b.y);
  return b;
}

// ---- forward: one grid point's outputs, channel by channel (out strides by points) ----

template <class Acc, int K>
void sample_point(const Acc* in, Acc* out, const Shape<K>& s, const Mode& m, const Source<Acc, K>& p) {
  const int64_t plane = s.image / s.C;
  if (!finite(p)) {
    for (int64_t c = 0; c < s.C; ++c) out[c * s.points] = non_finite_value<Acc>(m);
    return;
  }
  if (m.interp == Interp::bilinear) {
    const auto b = linear_at(p, s);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc* pl = in + c * plane;
      Acc acc = 0;
      for (int corner = 0; corner < (1 << K); ++corner) {
        const int64_t at = b.offset(corner, s);
        if (at >= 0) acc += pl[at] * b.weight(corner);
      }
      out[c * s.points] = acc;
    }
  } else if (m.interp == Interp::nearest) {
    const int64_t at = nearest_offset(p, s);
    for (int64_t c = 0; c < s.C; ++c) out[c * s.points] = at >= 0 ? in[c * plane + at] : Acc(0);
  } else if constexpr (K == 2) {
    const auto b = bicubic_at(p, s, m);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc* pl = in + c * plane;
      Acc acc = 0;
      for (int j = 0; j < 4; ++j) {  // each row interpolated along x, then the rows along y
        Acc row = 0;
        for (int i = 0; i < 4; ++i)
          row += (b.y[j] >= 0 && b.x[i] >= 0 ? pl[b.y[j] * s.size[0] + b.x[i]] : Acc(0)) * b.wx[i];
        acc += row * b.wy[j];
      }
      out[c * s.points] = acc;
    }
  }
}

// ---- backward: one grid point's share of both gradients ----

template <class Acc, int K>
void point_backward(const Acc* go, const Acc* in, Acc* gin, Acc* ggrid, const Shape<K>& s,
                    const Mode& m, const Source<Acc, K>& p) {
  const int64_t plane = s.image / s.C;
  for (int d = 0; d < K; ++d) ggrid[d] = 0;
  if (!finite(p)) {
    for (int d = 0; d < K; ++d) ggrid[d] = non_finite_value<Acc>(m);
    return;
  }
  Acc gpos[K] = {};  // d(loss)/d(pixel coordinate) per axis
  if (m.interp == Interp::bilinear) {
    const auto b = linear_at(p, s);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc g = go[c * s.points];
      const Acc* pl = in + c * plane;
      for (int corner = 0; corner < (1 << K); ++corner) {
        const int64_t at = b.offset(corner, s);
        if (at < 0) continue;
        if (gin) gin[c * plane + at] += g * b.weight(corner);
        // along axis d the corner's weight has slope -1 (lower side) or +1 (upper side)
        const Acc v = pl[at] * g;
        for (int d = 0; d < K; ++d) gpos[d] += (((corner >> d) & 1) ? v : -v) * b.weight(corner, d);
      }
    }
  } else if (m.interp == Interp::nearest) {  // piecewise constant: the grid gets no gradient
    const int64_t at = nearest_offset(p, s);
    if (gin && at >= 0)
      for (int64_t c = 0; c < s.C; ++c) gin[c * plane + at] += go[c * s.points];
    return;
  } else if constexpr (K == 2) {
    const auto b = bicubic_at(p, s, m);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc g = go[c * s.points];
      const Acc* pl = in + c * plane;
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) {
          if (b.y[j] < 0 || b.x[i] < 0) continue;
          const int64_t at = b.y[j] * s.size[0] + b.x[i];
          if (gin) gin[c * plane + at] += g * b.wx[i] * b.wy[j];
          const Acc v = pl[at] * g;
          gpos[0] += v * b.dwx[i] * b.wy[j];
          gpos[1] += v * b.wx[i] * b.dwy[j];
        }
    }
  }
  for (int d = 0; d < K; ++d) ggrid[d] = gpos[d] * p.slope[d];
}

// ---- the ops, for K spatial dims ----

template <int K>
at::Tensor grid_sample_forward(const char* op, const at::Tensor& input, const at::Tensor& grid,
                               int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  const Mode m = check_mode(op, interpolation_mode, padding_mode, align_corners);
  const Shape<K> s = check_shapes<K>(op, input, grid, m);
  std::vector<int64_t> sizes{s.N, s.C};
  for (int d = 1; d <= K; ++d) sizes.push_back(grid.size(d));
  at::Tensor out = at::empty(sizes, input.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, s, m, input = DeviceTensor(input), grid = DeviceTensor(grid),
                 out = DeviceTensor(out)] {
      const auto x = nn::load<Acc>(op, input);
      const auto g = nn::load<Acc>(op, grid);
      nn::OutBuf<Acc> ob(out);
      // every grid point writes only its own outputs: cut anywhere, same results
      parallel_for(s.N * s.points, 256, [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) {
          const int64_t n = q / s.points, pt = q % s.points;
          const Source<Acc, K> p = source(g.data() + q * K, s, m);
          sample_point(x.data() + n * s.image, ob.data() + n * s.C * s.points + pt, s, m, p);
        }
      });
      ob.finish(op);
    });
  });
  return out;
}

template <int K>
::std::tuple<at::Tensor, at::Tensor> grid_sample_backward(
    const char* op, const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
    int64_t interpolation_mode, int64_t padding_mode, bool align_corners, ::std::array<bool, 2> output_mask) {
  const Mode m = check_mode(op, interpolation_mode, padding_mode, align_corners);
  const Shape<K> s = check_shapes<K>(op, input, grid, m);
  nn::check_float(op, grad_output);
  std::vector<int64_t> out_sizes{s.N, s.C};
  for (int d = 1; d <= K; ++d) out_sizes.push_back(grid.size(d));
  FL_CHECK_T(grad_output.sizes().equals(out_sizes), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", at::IntArrayRef(out_sizes));
  // Only output_mask[0] is read, as on CPU and CUDA: the grid's gradient is always computed.
  const bool want_input = output_mask[0];
  at::Tensor grad_input = want_input ? at::zeros(input.sizes(), input.options()) : at::Tensor();
  at::Tensor grad_grid = at::empty(grid.sizes(), grid.options());
  if (grad_grid.numel() == 0) return {grad_input, grad_grid};
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    // grad_input (zeros, queued above) is an undefined DeviceTensor when not wanted
    launch(grad_grid, [op, s, m, want_input, grad_output = DeviceTensor(grad_output),
                       input = DeviceTensor(input), grid = DeviceTensor(grid),
                       grad_input = DeviceTensor(grad_input),
                       grad_grid = DeviceTensor(grad_grid)] {
      const auto go = nn::load<Acc>(op, grad_output);
      const auto x = nn::load<Acc>(op, input);
      const auto g = nn::load<Acc>(op, grid);
      std::optional<nn::OutBuf<Acc>> gi;
      if (want_input) gi.emplace(grad_input);
      nn::OutBuf<Acc> gg(grad_grid);
      // Images on the units: an image's grid points all scatter into its own input
      // gradient, in point order, so the sums do not depend on the unit count.
      parallel_for(s.N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n)
          for (int64_t pt = 0; pt < s.points; ++pt) {
            const int64_t q = n * s.points + pt;
            const Source<Acc, K> p = source(g.data() + q * K, s, m);
            point_backward(go.data() + n * s.C * s.points + pt, x.data() + n * s.image,
                           gi ? gi->data() + n * s.image : nullptr, gg.data() + q * K, s, m, p);
          }
      });
      if (gi) gi->finish(op);
      gg.finish(op);
    });
  });
  return {grad_input, grad_grid};
}

}  // namespace

at::Tensor k_grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                             int64_t padding_mode, bool align_corners) {
  return grid_sample_forward<2>("grid_sampler_2d", input, grid, interpolation_mode, padding_mode,
                                align_corners);
}

::std::tuple<at::Tensor, at::Tensor> k_grid_sampler_2d_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
    int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
    ::std::array<bool, 2> output_mask) {
  return grid_sample_backward<2>("grid_sampler_2d_backward", grad_output, input, grid,
                                 interpolation_mode, padding_mode, align_corners, output_mask);
}

at::Tensor k_grid_sampler_3d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                             int64_t padding_mode, bool align_corners) {
  return grid_sample_forward<3>("grid_sampler_3d", input, grid, interpolation_mode, padding_mode,
                                align_corners);
}

::std::tuple<at::Tensor, at::Tensor> k_grid_sampler_3d_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
    int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
    ::std::array<bool, 2> output_mask) {
  return grid_sample_backward<3>("grid_sampler_3d_backward", grad_output, input, grid,
                                 interpolation_mode, padding_mode, align_corners, output_mask);
}

}  // namespace acme::kernels
