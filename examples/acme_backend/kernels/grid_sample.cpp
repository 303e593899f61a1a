// acme grid sampling: grid_sampler_2d and its backward, the kernels behind
// F.grid_sample of 4-d inputs (spatial transformers, deformable attention,
// optical-flow warping). input (N, C, H, W), grid (N, Ho, Wo, 2) of (x, y) in
// [-1, 1], output (N, C, Ho, Wo).
//
// Where a grid point samples follows PyTorch's rules, which decide which pixels are
// read and so must match exactly:
//   * unnormalize: align_corners maps -1 and 1 to the centres of the corner pixels,
//     ((g + 1) / 2) * (size - 1); otherwise to their outer edges, ((g + 1) * size - 1) / 2;
//   * padding (bilinear and nearest: the point; bicubic: each of its 16 taps):
//     zeros reads 0 outside, border clamps into [0, size - 1], reflection mirrors
//     at the corner centres (align_corners) or the outer edges, then clamps;
//   * bilinear weights the 4 pixels around the point by (x1 - x)(y1 - y) ...;
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

#include "common/parallel.h"
#include "kernels.h"
#include "nn_buffers.h"

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace acme::kernels {
namespace {

namespace cm = ::acme::common;

enum class Interp { bilinear = 0, nearest = 1, bicubic = 2 };
enum class Pad { zeros = 0, border = 1, reflection = 2 };

struct Mode {
  Interp interp;
  Pad pad;
  bool align_corners;
};

struct Shape {
  int64_t N, C, H, W, Ho, Wo;
};

Mode check_mode(const char* op, int64_t interpolation_mode, int64_t padding_mode, bool align_corners) {
  ACME_CHECK_VALUE(interpolation_mode >= 0 && interpolation_mode <= 2, op,
                   "interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), got ",
                   interpolation_mode);
  ACME_CHECK_VALUE(padding_mode >= 0 && padding_mode <= 2, op,
                   "padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), got ", padding_mode);
  return {static_cast<Interp>(interpolation_mode), static_cast<Pad>(padding_mode), align_corners};
}

// CPU's checks (check_grid_sampler_common / _2d), with the op and device named.
Shape check_shapes(const char* op, const at::Tensor& input, const at::Tensor& grid) {
  nn::check_float(op, input);
  nn::check_float(op, grid);
  ACME_CHECK_T(input.scalar_type() == grid.scalar_type(), op, input,
               "expected input and grid to have the same dtype, got input ", input.scalar_type(),
               " and grid ", grid.scalar_type());
  ACME_CHECK_T(input.dim() == 4 && grid.dim() == 4, op, input,
               "expected 4-d input (N, C, H, W) and 4-d grid (N, H_out, W_out, 2), got input ",
               input.sizes(), " and grid ", grid.sizes());
  ACME_CHECK_T(input.size(0) == grid.size(0), op, input,
               "expected grid and input to have the same batch size, got input ", input.sizes(),
               " and grid ", grid.sizes());
  ACME_CHECK_T(grid.size(3) == 2, op, grid,
               "expected grid to have size 2 in its last dimension (x, y), got ", grid.sizes());
  ACME_CHECK_T(input.size(2) > 0 && input.size(3) > 0, op, input,
               "expected input to have non-empty spatial dimensions, got ", input.sizes());
  return {input.size(0), input.size(1), input.size(2), input.size(3), grid.size(1), grid.size(2)};
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

// ---- interpolation weights ----

// The 2x2 neighbourhood of a point: pixel indices (-1 outside) and weights.
template <class Acc>
struct Bilinear {
  int64_t x[2], y[2];
  Acc wx[2], wy[2];  // wx[0] = x1 - x, wx[1] = x - x0 (and y): the weight of a corner is wx * wy
};

template <class Acc>
Bilinear<Acc> bilinear_at(Acc ix, Acc iy, int64_t W, int64_t H) {
  const Acc x0 = std::floor(ix), y0 = std::floor(iy);
  Bilinear<Acc> b;
  b.x[0] = index_in(x0, W), b.x[1] = index_in(x0 + 1, W);
  b.y[0] = index_in(y0, H), b.y[1] = index_in(y0 + 1, H);
  b.wx[0] = (x0 + 1) - ix, b.wx[1] = ix - x0;
  b.wy[0] = (y0 + 1) - iy, b.wy[1] = iy - y0;
  return b;
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

// The 4x4 neighbourhood of a point: tap indices (-1 outside), weights and their
// derivatives in x and y. The weight of tap (i, j) is wx[i] * wy[j].
template <class Acc>
struct Bicubic {
  int64_t x[4], y[4];
  Acc wx[4], wy[4], dwx[4], dwy[4];
};

template <class Acc>
Bicubic<Acc> bicubic_at(Acc ix, Acc iy, int64_t W, int64_t H, const Mode& m) {
  const Acc x0 = std::floor(ix), y0 = std::floor(iy);
  Bicubic<Acc> b;
  cubic_weights(ix - x0, b.wx, b.dwx);
  cubic_weights(iy - y0, b.wy, b.dwy);
  cubic_taps(x0, W, m, b.x);
  cubic_taps(y0, H, m, b.y);
  return b;
}

// One grid point: its source coordinates (x, y) in pixels and their slopes in the grid value.
template <class Acc>
struct Source {
  Acc ix, iy, sx, sy;
};

template <class Acc>
Source<Acc> source(const Acc* g, const Shape& s, const Mode& m) {
  Source<Acc> src;
  Acc ux, uy;
  src.ix = unnormalize(g[0], s.W, m.align_corners, ux);
  src.iy = unnormalize(g[1], s.H, m.align_corners, uy);
  src.sx = ux, src.sy = uy;
  if (m.interp != Interp::bicubic) {  // bicubic pads its taps instead (cubic_taps)
    Acc px, py;
    src.ix = apply_padding(src.ix, s.W, m, px);
    src.iy = apply_padding(src.iy, s.H, m, py);
    src.sx *= px, src.sy *= py;
  }
  return src;
}

// A point with a coordinate that is not finite reads no pixel: its value (and, for
// the grid's gradient, its slope) is NaN, except nearest's 0.
template <class Acc>
bool finite(const Source<Acc>& p) {
  return std::isfinite(p.ix) && std::isfinite(p.iy);
}
template <class Acc>
Acc non_finite_value(const Mode& m) {
  return m.interp == Interp::nearest ? Acc(0) : std::numeric_limits<Acc>::quiet_NaN();
}

// ---- forward ----

template <class Acc>
void sample_point(const Acc* in, Acc* out, const Shape& s, const Mode& m, const Source<Acc>& p) {
  const int64_t plane = s.H * s.W, out_plane = s.Ho * s.Wo;
  if (!finite(p)) {
    for (int64_t c = 0; c < s.C; ++c) out[c * out_plane] = non_finite_value<Acc>(m);
    return;
  }
  if (m.interp == Interp::bilinear) {
    const auto b = bilinear_at(p.ix, p.iy, s.W, s.H);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc* pl = in + c * plane;
      Acc acc = 0;
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 2; ++i)
          if (b.y[j] >= 0 && b.x[i] >= 0) acc += pl[b.y[j] * s.W + b.x[i]] * (b.wx[i] * b.wy[j]);
      out[c * out_plane] = acc;
    }
  } else if (m.interp == Interp::nearest) {
    const int64_t x = index_in(std::nearbyint(p.ix), s.W), y = index_in(std::nearbyint(p.iy), s.H);
    for (int64_t c = 0; c < s.C; ++c)
      out[c * out_plane] = (x >= 0 && y >= 0) ? in[c * plane + y * s.W + x] : Acc(0);
  } else {
    const auto b = bicubic_at(p.ix, p.iy, s.W, s.H, m);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc* pl = in + c * plane;
      Acc acc = 0;
      for (int j = 0; j < 4; ++j) {  // each row interpolated along x, then the rows along y
        Acc row = 0;
        for (int i = 0; i < 4; ++i)
          row += (b.y[j] >= 0 && b.x[i] >= 0 ? pl[b.y[j] * s.W + b.x[i]] : Acc(0)) * b.wx[i];
        acc += row * b.wy[j];
      }
      out[c * out_plane] = acc;
    }
  }
}

// ---- backward: one grid point's share of both gradients ----

template <class Acc>
void point_backward(const Acc* go, const Acc* in, Acc* gin, Acc* ggrid, const Shape& s,
                    const Mode& m, const Source<Acc>& p) {
  const int64_t plane = s.H * s.W, out_plane = s.Ho * s.Wo;
  ggrid[0] = ggrid[1] = 0;
  if (!finite(p)) {
    ggrid[0] = ggrid[1] = non_finite_value<Acc>(m);
    return;
  }
  Acc gx = 0, gy = 0;  // d(loss)/d(pixel coordinate)
  if (m.interp == Interp::bilinear) {
    const auto b = bilinear_at(p.ix, p.iy, s.W, s.H);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc g = go[c * out_plane];
      const Acc* pl = in + c * plane;
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 2; ++i) {
          if (b.y[j] < 0 || b.x[i] < 0) continue;
          const int64_t at = b.y[j] * s.W + b.x[i];
          if (gin) gin[c * plane + at] += g * (b.wx[i] * b.wy[j]);
          // d(wx[i])/dx is -1 for the left pixel and +1 for the right one (and y)
          const Acc v = pl[at] * g;
          gx += (i ? v : -v) * b.wy[j];
          gy += (j ? v : -v) * b.wx[i];
        }
    }
  } else if (m.interp == Interp::nearest) {  // piecewise constant: the grid gets no gradient
    const int64_t x = index_in(std::nearbyint(p.ix), s.W), y = index_in(std::nearbyint(p.iy), s.H);
    if (gin && x >= 0 && y >= 0)
      for (int64_t c = 0; c < s.C; ++c) gin[c * plane + y * s.W + x] += go[c * out_plane];
    return;
  } else {
    const auto b = bicubic_at(p.ix, p.iy, s.W, s.H, m);
    for (int64_t c = 0; c < s.C; ++c) {
      const Acc g = go[c * out_plane];
      const Acc* pl = in + c * plane;
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) {
          if (b.y[j] < 0 || b.x[i] < 0) continue;
          const int64_t at = b.y[j] * s.W + b.x[i];
          if (gin) gin[c * plane + at] += g * b.wx[i] * b.wy[j];
          const Acc v = pl[at] * g;
          gx += v * b.dwx[i] * b.wy[j];
          gy += v * b.wx[i] * b.dwy[j];
        }
    }
  }
  ggrid[0] = gx * p.sx;
  ggrid[1] = gy * p.sy;
}

}  // namespace

at::Tensor k_grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                             int64_t padding_mode, bool align_corners) {
  const char* op = "grid_sampler_2d";
  const Mode m = check_mode(op, interpolation_mode, padding_mode, align_corners);
  const Shape s = check_shapes(op, input, grid);
  at::Tensor out = at::empty({s.N, s.C, s.Ho, s.Wo}, input.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = ACME_T(tag);
    const auto x = nn::load<Acc>(op, input);
    const auto g = nn::load<Acc>(op, grid);
    nn::OutBuf<Acc> ob(out);
    const int64_t points = s.Ho * s.Wo;
    // every grid point writes only its own outputs: cut anywhere, same results
    cm::parallel_for(s.N * points, 256, [&](int64_t begin, int64_t end) {
      for (int64_t q = begin; q < end; ++q) {
        const int64_t n = q / points, pt = q % points;
        const Source<Acc> p = source(g.data() + q * 2, s, m);
        sample_point(x.data() + n * s.C * s.H * s.W, ob.data() + n * s.C * points + pt, s, m, p);
      }
    });
    ob.finish(op);
  });
  return out;
}

::std::tuple<at::Tensor, at::Tensor> k_grid_sampler_2d_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid,
    int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
    ::std::array<bool, 2> output_mask) {
  const char* op = "grid_sampler_2d_backward";
  const Mode m = check_mode(op, interpolation_mode, padding_mode, align_corners);
  const Shape s = check_shapes(op, input, grid);
  nn::check_float(op, grad_output);
  ACME_CHECK_T(grad_output.sizes().equals({s.N, s.C, s.Ho, s.Wo}), op, grad_output,
               "grad_output has shape ", grad_output.sizes(), ", expected (", s.N, ", ", s.C, ", ",
               s.Ho, ", ", s.Wo, ")");
  // Only output_mask[0] is read, as on CPU and CUDA: the grid's gradient is always computed.
  const bool want_input = output_mask[0];
  at::Tensor grad_input = want_input ? at::zeros(input.sizes(), input.options()) : at::Tensor();
  at::Tensor grad_grid = at::empty(grid.sizes(), grid.options());
  if (grad_grid.numel() == 0) return {grad_input, grad_grid};
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = ACME_T(tag);
    const auto go = nn::load<Acc>(op, grad_output);
    const auto x = nn::load<Acc>(op, input);
    const auto g = nn::load<Acc>(op, grid);
    std::optional<nn::OutBuf<Acc>> gi;
    if (want_input) gi.emplace(grad_input);
    nn::OutBuf<Acc> gg(grad_grid);
    const int64_t points = s.Ho * s.Wo, image = s.C * s.H * s.W;
    // Images on the units: an image's grid points all scatter into its own input
    // gradient, in point order, so the sums do not depend on the unit count.
    cm::parallel_for(s.N, 1, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        for (int64_t pt = 0; pt < points; ++pt) {
          const int64_t q = n * points + pt;
          const Source<Acc> p = source(g.data() + q * 2, s, m);
          point_backward(go.data() + n * s.C * points + pt, x.data() + n * image,
                         gi ? gi->data() + n * image : nullptr, gg.data() + q * 2, s, m, p);
        }
    });
    if (gi) gi->finish(op);
    gg.finish(op);
  });
  return {grad_input, grad_grid};
}

}  // namespace acme::kernels
