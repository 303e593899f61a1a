// acme convolution kernels: convolution_overrideable and
// convolution_backward_overrideable, the ops PyTorch routes conv1d/2d/3d and
// conv_transpose1d/2d/3d to on a PrivateUse1 device; plus the im2col / col2im
// ops (nn.Unfold / nn.Fold), which are this file's building blocks.
//
// Method: im2col + GEMM per image and group. Every direction is one of three
// primitives on a "plain conv" geometry, where the big side has C channels of
// D x H x W and the small side O channels of Do x Ho x Wo (1-d and 2-d convs
// are 3-d ones with unit leading spatial dims):
//   fwd        small = W  @ im2col(big)
//   bwd_data   big   = col2im(W^T @ small)
//   bwd_weight W    += small @ im2col(big)^T
// A plain conv maps input->big, output->small; a transposed conv is the same
// geometry read backwards (its input is the small side, its output the big
// side), so its forward is bwd_data and its input gradient is fwd.
// Operands are staged in the compute type (float, or double for float64);
// float16/bfloat16 round once into the outputs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/dense.h"
#include "math/gemm.h"
#include "kernels.h"

#include <array>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {
using nn::Mat;

struct ConvGeom {
  int64_t N = 0, G = 1;
  int64_t C = 0, D = 1, H = 0, W = 0;     // big side (plain conv input)
  int64_t O = 0, Do = 1, Ho = 0, Wo = 0;  // small side (plain conv output)
  int64_t kd = 1, kh = 1, kw = 1, sd = 1, sh = 1, sw = 1, pd = 0, ph = 0, pw = 0;
  int64_t dd = 1, dh = 1, dw = 1;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  int64_t K() const { return Cg() * kd * kh * kw; }  // rows of a column matrix
  int64_t P() const { return Do * Ho * Wo; }         // columns of a column matrix
  int64_t S() const { return D * H * W; }            // big-side elements per channel
  // A 1x1(x1) kernel with unit stride and no padding reads the big side as is.
  bool pointwise() const {
    return kd == 1 && kh == 1 && kw == 1 && sd == 1 && sh == 1 && sw == 1 && pd == 0 &&
           ph == 0 && pw == 0;
  }
};

// Parameters as 3-d (d, h, w); 1-d and 2-d convs get unit leading dimensions.
std::array<int64_t, 3> param3(const char* op, const char* name, at::IntArrayRef p, int64_t sd,
                              int64_t unit) {
  FL_CHECK(p.size() == static_cast<size_t>(sd) || p.size() == 1, op, name, " must have ", sd,
             " values for a ", sd, "-d convolution, got ", p);
  std::array<int64_t, 3> r{unit, unit, unit};
  for (int64_t i = 0; i < sd; ++i) r[3 - sd + i] = p.size() == 1 ? p[0] : p[i];
  return r;
}

// View a (N, C, L) or (N, C, H, W) tensor as (N, C, D, H, W) with unit leading dims.
at::Tensor as5d(const at::Tensor& t) {
  if (t.dim() == 3) return t.unsqueeze(2).unsqueeze(2);
  if (t.dim() == 4) return t.unsqueeze(2);
  return t;
}

// Images per GEMM: small images are batched so one GEMM covers several of
// them (a 1x1 or 2x2 late-ResNet feature map would otherwise give GEMMs with a
// handful of columns that re-read the whole weight per image), while the
// column buffer stays below ~16 MB.
int64_t images_per_gemm(const ConvGeom& g) {
  constexpr int64_t kTargetCols = 512;
  constexpr int64_t kMaxColElems = int64_t(4) << 20;
  const int64_t P = std::max<int64_t>(g.P(), 1), K = std::max<int64_t>(g.K(), 1);
  int64_t nb = std::max<int64_t>(1, (kTargetCols + P - 1) / P);
  nb = std::min(nb, std::max<int64_t>(1, kMaxColElems / (K * P)));
  return std::max<int64_t>(1, std::min(nb, g.N));
}

// Where im2col/col2im find nb images: image j's big side (Cg, D, H, W) at
// big + j * big_stride, its columns at col + j * col_stride, each row of the
// column matrix ld apart. conv's blocks hold their images side by side
// (col_stride P, ld nb * P); the unfold/fold ops one matrix per image
// (col_stride K * P, ld P).
struct ColumnLayout {
  int64_t nb = 1, big_stride = 0, col_stride = 0, ld = 0;
};

// conv's block of nb images: their columns side by side in one matrix.
ColumnLayout block_layout(const ConvGeom& g, int64_t nb) {
  return {nb, g.C * g.S(), g.P(), nb * g.P()};
}

// The unfold/fold ops: the whole batch, one column matrix per image.
ColumnLayout per_image_layout(const ConvGeom& g) {
  return {g.N, g.C * g.S(), g.K() * g.P(), g.P()};
}

// f(image, channel) for every image and channel of a layout, split over the
// compute units: each pair reads and writes a plane and column rows of its
// own. ~kGrainCheap elements per chunk; one parallel loop for all images,
// since small feature maps leave one image's channels too little work to
// wake a unit for.
template <class F>
void for_each_image_channel(const ConvGeom& g, const ColumnLayout& l, F&& f) {
  const int64_t Cg = g.Cg();
  const int64_t per_channel = std::max<int64_t>(1, g.kd * g.kh * g.kw * g.P());
  parallel_for(l.nb * Cg, std::max<int64_t>(1, kGrainCheap / per_channel),
               [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) f(i / Cg, i % Cg);
  });
}

// A stride-1, undilated 2-d conv whose output has the input's size (3x3 with
// padding 1, ResNet's convs): each kernel tap's column row is the input plane
// shifted by (dy, dx), zero where the shift leaves it. im2col then copies one
// span per tap instead of one short span per output row.
bool same_size_plane(const ConvGeom& g) {
  return g.D == 1 && g.Do == 1 && g.kd == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
         g.dw == 1 && g.Ho == g.H && g.Wo == g.W;
}

// dst (H x W) = plane shifted by (dy, dx): dst[r][c] = plane[r + dy][c + dx],
// or 0 outside the plane.
template <class T>
void shifted_plane(const T* plane, int64_t H, int64_t W, int64_t dy, int64_t dx, T* dst) {
  if (dy <= -H || dy >= H || dx <= -W || dx >= W) {
    std::fill(dst, dst + H * W, T(0));
    return;
  }
  const int64_t r0 = std::max<int64_t>(0, -dy), r1 = std::min(H, H - dy);  // rows inside
  std::fill(dst, dst + r0 * W, T(0));
  std::fill(dst + r1 * W, dst + H * W, T(0));
  // Rows r0..r1 in one copy. It also fills the |dx| edge columns of each row
  // from the neighbouring row (never from outside the plane: the copy starts
  // and ends |dx| in); they are zeroed after.
  const int64_t q0 = r0 * W + std::max<int64_t>(0, -dx), q1 = r1 * W - std::max<int64_t>(0, dx);
  std::memcpy(dst + q0, plane + q0 + dy * W + dx, sizeof(T) * (q1 - q0));
  const int64_t c0 = dx < 0 ? 0 : W - dx, c1 = dx < 0 ? -dx : W;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) dst[r * W + c] = T(0);
}

// im2col of one channel c of one image: its plane(s) big (D, H, W) -> the
// column rows of its kernel taps, col (row stride ld).
template <class T>
void im2col_channel(const ConvGeom& g, int64_t c, const T* big, T* col, int64_t ld) {
   for (int64_t kz = 0; kz < g.kd; ++kz) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* krow = col + (((c * g.kd + kz) * g.kh + ki) * g.kw + kj) * ld;
        if (same_size_plane(g)) {
          shifted_plane(big, g.H, g.W, ki - g.ph, kj - g.pw, krow);
          continue;
        }
       for (int64_t od = 0; od < g.Do; ++od) {
        T* row = krow + od * g.Ho * g.Wo;
        const int64_t iz = od * g.sd - g.pd + kz * g.dd;
        if (iz < 0 || iz >= g.D) {
          std::fill(row, row + g.Ho * g.Wo, T(0));
          continue;
        }
        const T* plane = big + iz * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          T* dst = row + oh * g.Wo;
          if (ih < 0 || ih >= g.H) {
            std::fill(dst, dst + g.Wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.W;
          const int64_t off = kj * g.dw - g.pw;
          if (g.sw == 1) {
            // contiguous run: valid ow satisfy 0 <= ow + off < W
            const int64_t lo = std::min(g.Wo, std::max<int64_t>(0, -off));
            const int64_t hi = std::max(lo, std::min(g.Wo, g.W - off));
            std::fill(dst, dst + lo, T(0));
            if (hi > lo) std::memcpy(dst + lo, src + lo + off, sizeof(T) * (hi - lo));
            std::fill(dst + hi, dst + g.Wo, T(0));
          } else {
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const int64_t iw = ow * g.sw + off;
              dst[ow] = (iw >= 0 && iw < g.W) ? src[iw] : T(0);
            }
          }
        }
       }
      }
    }
   }
}

// im2col of nb images of one group (layout l): big -> col (K rows).
template <class T>
void im2col(const ConvGeom& g, const T* big, T* col, const ColumnLayout& l) {
  for_each_image_channel(g, l, [&](int64_t j, int64_t c) {
    im2col_channel(g, c, big + j * l.big_stride + c * g.S(), col + j * l.col_stride, l.ld);
  });
}

// col2im of one channel c of one image: big (D, H, W) += the scatter of its
// kernel taps' column rows, col (row stride ld).
template <class T>
void col2im_channel(const ConvGeom& g, int64_t c, const T* col, int64_t ld, T* big) {
   for (int64_t kz = 0; kz < g.kd; ++kz) {
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* krow = col + (((c * g.kd + kz) * g.kh + ki) * g.kw + kj) * ld;
       for (int64_t od = 0; od < g.Do; ++od) {
        const int64_t iz = od * g.sd - g.pd + kz * g.dd;
        if (iz < 0 || iz >= g.D) continue;
        const T* row = krow + od * g.Ho * g.Wo;
        T* plane = big + iz * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* dst = plane + ih * g.W;
          const T* src = row + oh * g.Wo;
          const int64_t off = kj * g.dw - g.pw;
          if (g.sw == 1) {
            const int64_t lo = std::min(g.Wo, std::max<int64_t>(0, -off));
            const int64_t hi = std::max(lo, std::min(g.Wo, g.W - off));
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow + off] += src[ow];
          } else {
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const int64_t iw = ow * g.sw + off;
              if (iw >= 0 && iw < g.W) dst[iw] += src[ow];
            }
          }
        }
       }
      }
    }
   }
}

// col2im of nb images of one group (layout l): big = the scatter of col
// (overwritten: each plane is zeroed first).
template <class T>
void col2im(const ConvGeom& g, const T* col, T* big, const ColumnLayout& l) {
  for_each_image_channel(g, l, [&](int64_t j, int64_t c) {
    T* plane = big + j * l.big_stride + c * g.S();
    std::fill(plane, plane + g.S(), T(0));
    col2im_channel(g, c, col + j * l.col_stride, l.ld, plane);
  });
}

// Small-side block of group grp for images [n0, n0+nb) as an (Og, nb*P)
// matrix: copied between the (N, O, P) tensor layout and a side-by-side buffer.
template <class T>
void gather_small(const ConvGeom& g, const T* small, int64_t n0, int64_t nb, int64_t grp, T* buf) {
  const int64_t P = g.P(), ld = nb * P;
  for (int64_t o = 0; o < g.Og(); ++o)
    for (int64_t j = 0; j < nb; ++j)
      std::memcpy(buf + o * ld + j * P, small + ((n0 + j) * g.O + grp * g.Og() + o) * P,
                  sizeof(T) * P);
}
template <class T>
void scatter_small(const ConvGeom& g, const T* buf, int64_t n0, int64_t nb, int64_t grp, T* small) {
  const int64_t P = g.P(), ld = nb * P;
  for (int64_t o = 0; o < g.Og(); ++o)
    for (int64_t j = 0; j < nb; ++j)
      std::memcpy(small + ((n0 + j) * g.O + grp * g.Og() + o) * P, buf + o * ld + j * P,
                  sizeof(T) * P);
}

// The batch as blocks of images_per_gemm images (the last one may be shorter),
// one GEMM per block and group, and how the blocks are split over the compute
// units.
struct ConvBlocks {
  int64_t nb = 1;       // images per block
  int64_t count = 1;    // blocks
  int64_t grain = 1;    // blocks per chunk of the parallel loop
  bool split = false;   // more than one chunk
  bool direct = false;  // 1x1 kernel, one image per block: the image is its own column matrix
};

// Most chunks a conv's blocks are cut into: enough for a few units to balance
// their load; each chunk holds column buffers of its own while it runs and, for
// the weight gradient, a partial gradient until the end, so this also bounds
// the extra memory (at most 8 weight gradients).
constexpr int64_t kMaxConvChunks = 8;

ConvBlocks conv_blocks(const ConvGeom& g) {
  ConvBlocks b;
  b.nb = images_per_gemm(g);
  b.count = (g.N + b.nb - 1) / b.nb;
  b.direct = g.pointwise() && b.nb == 1;
  // A full block's GEMM does Og * K * nb*P multiply-adds in all three
  // directions. From kGemmThreadedMacs on, gemm() spreads it over the units
  // itself (acme's sgemm) or BLAS threads it; below, the units take whole
  // blocks instead. The cut depends on the sizes only, never on the unit
  // count: the weight gradient's summation order follows it, and its bits must
  // not change with the units.
  const double macs = static_cast<double>(g.Og()) * g.K() * b.nb * g.P();
  b.split = b.count > 1 && macs < nn::kGemmThreadedMacs;
  b.grain = b.split ? (b.count + kMaxConvChunks - 1) / kMaxConvChunks : b.count;
  return b;
}

// BLAS's thread mode for a conv's GEMMs. When the units split the blocks, BLAS
// gets one thread for the whole parallel loop, set here on the calling thread
// before the loop starts: the count is process-wide, and units setting it
// while another unit is inside BLAS would race. The GEMMs in the chunks then
// leave it alone (kAsSet); they would have asked for 1 thread anyway.
nn::BlasThreads blas_threads(const ConvBlocks& b) {
  if (!b.split) return nn::BlasThreads::kBySize;
  nn::gemm_detail::use_threads(1);
  return nn::BlasThreads::kAsSet;
}

// f(n0, nb, col, tmp) for the blocks [b0, b1): images [n0, n0 + nb), with a
// column buffer (K x nb*P, unless direct) and a small-side buffer (Og x nb*P,
// if blocks hold several images) of this call's own, so that chunks running on
// different units do not share them.
template <class T, class F>
void for_blocks(const ConvGeom& g, const ConvBlocks& b, int64_t b0, int64_t b1, F&& f) {
  std::vector<T> col, tmp;
  if (!b.direct) col.resize(static_cast<size_t>(g.K() * b.nb * g.P()));
  if (b.nb > 1) tmp.resize(static_cast<size_t>(g.Og() * b.nb * g.P()));
  for (int64_t i = b0; i < b1; ++i) {
    const int64_t n0 = i * b.nb;
    f(n0, std::min(b.nb, g.N - n0), col.data(), tmp.data());
  }
}

// f(n0, nb, grp, col, tmp) for every image block and group, the blocks split over
// the compute units as conv_blocks decided: for directions whose blocks write
// disjoint images of the output (forward, input gradient).
template <class T, class F>
void for_each_block_group(const ConvGeom& g, const ConvBlocks& b, F&& f) {
  parallel_for(b.count, b.grain, [&](int64_t b0, int64_t b1) {
    for_blocks<T>(g, b, b0, b1, [&](int64_t n0, int64_t nb, T* col, T* tmp) {
      for (int64_t grp = 0; grp < g.G; ++grp) f(n0, nb, grp, col, tmp);
    });
  });
}

// The column matrix (K x nb*P) of group grp of images [n0, n0 + nb): built in
// `col` by im2col, or the images themselves for a direct (1x1) conv.
template <class T>
const T* columns(const ConvGeom& g, const ConvBlocks& b, const T* big, int64_t n0, int64_t nb,
                 int64_t grp, T* col) {
  if (b.direct) return big + (n0 * g.C + grp * g.Cg()) * g.S();
  im2col(g, big + (n0 * g.C + grp * g.Cg()) * g.S(), col, block_layout(g, nb));
  return col;
}

// small (N, O, Ho, Wo) = conv(big (N, C, H, W), w (O, Cg, kh, kw)); dense arrays.
template <class T>
void conv_fwd(const char* op, const ConvGeom& g, const T* big, const T* w, T* small) {
  const ConvBlocks b = conv_blocks(g);
  const nn::BlasThreads threads = blas_threads(b);
  for_each_block_group<T>(g, b, [&](int64_t n0, int64_t nb, int64_t grp, T* col, T* tmp) {
    const int64_t ld = nb * g.P();
    Mat<T> A{w + grp * g.Og() * g.K(), g.Og(), g.K(), g.K(), 1};
    Mat<T> B{columns(g, b, big, n0, nb, grp, col), g.K(), ld, ld, 1};
    if (nb == 1) {
      nn::gemm<T>(op, A, B, T(1), T(0), small + (n0 * g.O + grp * g.Og()) * g.P(), g.P(), threads);
    } else {
      nn::gemm<T>(op, A, B, T(1), T(0), tmp, ld, threads);
      scatter_small(g, tmp, n0, nb, grp, small);
    }
  });
}

// big (N, C, H, W) = conv^T(small (N, O, Ho, Wo), w): the input gradient of a plain conv.
template <class T>
void conv_bwd_data(const char* op, const ConvGeom& g, const T* small, const T* w, T* big) {
  const ConvBlocks b = conv_blocks(g);
  const nn::BlasThreads threads = blas_threads(b);
  for_each_block_group<T>(g, b, [&](int64_t n0, int64_t nb, int64_t grp, T* col, T* tmp) {
    const int64_t ld = nb * g.P();
    // W_g^T: (K x Og) view of the (Og x K) row-major block.
    Mat<T> A{w + grp * g.Og() * g.K(), g.K(), g.Og(), 1, g.K()};
    const T* s = small + (n0 * g.O + grp * g.Og()) * g.P();
    if (nb > 1) {
      gather_small(g, small, n0, nb, grp, tmp);
      s = tmp;
    }
    Mat<T> B{s, g.Og(), ld, ld, 1};
    if (b.direct) {
      nn::gemm<T>(op, A, B, T(1), T(0), big + (n0 * g.C + grp * g.Cg()) * g.S(), g.P(), threads);
      return;
    }
    nn::gemm<T>(op, A, B, T(1), T(0), col, ld, threads);
    col2im(g, col, big + (n0 * g.C + grp * g.Cg()) * g.S(), block_layout(g, nb));
  });
}

// gw (O, Cg, kh, kw) = sum_n small_n @ im2col(big_n)^T.
template <class T>
void conv_bwd_weight(const char* op, const ConvGeom& g, const T* big, const T* small, T* gw) {
  const ConvBlocks b = conv_blocks(g);
  const nn::BlasThreads threads = blas_threads(b);
  const int64_t size = g.O * g.K();
  // out = the weight gradient of the blocks [b0, b1).
  auto gradient = [&](int64_t b0, int64_t b1, T* out) {
    std::fill(out, out + size, T(0));
    for_blocks<T>(g, b, b0, b1, [&](int64_t n0, int64_t nb, T* col, T* tmp) {
      const int64_t ld = nb * g.P();
      for (int64_t grp = 0; grp < g.G; ++grp) {
        const T* cm_ = columns(g, b, big, n0, nb, grp, col);
        const T* s = small + (n0 * g.O + grp * g.Og()) * g.P();
        if (nb > 1) {
          gather_small(g, small, n0, nb, grp, tmp);
          s = tmp;
        }
        Mat<T> A{s, g.Og(), ld, ld, 1};
        Mat<T> Bt{cm_, ld, g.K(), 1, ld};  // col^T
        nn::gemm<T>(op, A, Bt, T(1), T(1), out + grp * g.Og() * g.K(), g.K(), threads);
      }
    });
  };
  if (!b.split) {
    gradient(0, b.count, gw);
    return;
  }
  // Each chunk sums its blocks into a partial gradient of its own; the
  // partials are added in chunk order (parallel_reduce), so the rounding
  // follows the cut, not which unit ran which chunk.
  const std::vector<T> sum = parallel_reduce(
      b.count, b.grain, std::vector<T>(),
      [&](int64_t b0, int64_t b1) {
        std::vector<T> part(static_cast<size_t>(size));
        gradient(b0, b1, part.data());
        return part;
      },
      [](std::vector<T> acc, const std::vector<T>& part) -> std::vector<T> {
        if (acc.empty()) return part;  // the identity
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += part[i];
        return acc;
      });
  std::copy(sum.begin(), sum.end(), gw);
}

// Taps that read only padding. A kernel tap whose input row (column, plane)
// is padding for every output position adds exact zeros: a 3x3 conv with
// padding 1 on a 1x1 feature map (ResNet's last stage on small images) has
// one live tap of nine, so the GEMMs would do 9x the work. The live taps of
// each dim form the range [lo, hi) (the hull, if gaps); the conv restricted to
// them is a conv with kernel hi - lo and padding p - lo * dilation (negative
// padding is fine for im2col/col2im: they check every index), its weight the
// slice [lo, hi) of each kernel dim.
struct LiveTaps {
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  bool all = true;   // no tap is dead: the geometry as it is
  bool none = false; // every tap is dead: the conv is all zeros
};

LiveTaps live_taps(const ConvGeom& g) {
  const int64_t k[3] = {g.kd, g.kh, g.kw}, s[3] = {g.sd, g.sh, g.sw}, p[3] = {g.pd, g.ph, g.pw};
  const int64_t dil[3] = {g.dd, g.dh, g.dw}, in[3] = {g.D, g.H, g.W}, out[3] = {g.Do, g.Ho, g.Wo};
  LiveTaps t;
  for (int d = 0; d < 3; ++d) {
    int64_t lo = k[d], hi = 0;
    for (int64_t ki = 0; ki < k[d]; ++ki) {
      // smallest output o with o * s - p + ki * dil >= 0, then is it < in?
      const int64_t base = ki * dil[d] - p[d];
      const int64_t o = base >= 0 ? 0 : (-base + s[d] - 1) / s[d];
      if (o < out[d] && o * s[d] + base < in[d]) {
        lo = std::min(lo, ki);
        hi = ki + 1;
      }
    }
    if (hi <= lo) {
      t.none = true;
      return t;
    }
    t.lo[d] = lo;
    t.hi[d] = hi;
    if (lo != 0 || hi != k[d]) t.all = false;
  }
  return t;
}

ConvGeom live_geom(const ConvGeom& g, const LiveTaps& t) {
  ConvGeom r = g;
  r.kd = t.hi[0] - t.lo[0]; r.kh = t.hi[1] - t.lo[1]; r.kw = t.hi[2] - t.lo[2];
  r.pd = g.pd - t.lo[0] * g.dd; r.ph = g.ph - t.lo[1] * g.dh; r.pw = g.pw - t.lo[2] * g.dw;
  return r;
}

// f(index in the full weight, index in the live slice) for every live tap,
// split over the compute units by (output, input) channel pairs. The taps'
// offsets come from a table built once: computing each element's index in
// four nested loops took ~4 ns per element, 0.98 ms for the one-tap slice of
// a late-ResNet weight (512 x 512 x 3 x 3), most of that conv's forward.
template <class F>
void for_live_taps(const ConvGeom& g, const LiveTaps& t, F&& f) {
  // The live taps' offsets within one pair's kd x kh x kw kernel, in order.
  std::vector<int64_t> offsets;
  for (int64_t z = t.lo[0]; z < t.hi[0]; ++z)
    for (int64_t y = t.lo[1]; y < t.hi[1]; ++y)
      for (int64_t x = t.lo[2]; x < t.hi[2]; ++x) offsets.push_back((z * g.kh + y) * g.kw + x);
  const int64_t taps = static_cast<int64_t>(offsets.size());
  const int64_t per_pair = g.kd * g.kh * g.kw;  // the weight elements a pair spans
  parallel_for(g.O * g.Cg(), std::max<int64_t>(1, kGrainCheap / per_pair),
               [&](int64_t oc0, int64_t oc1) {
    for (int64_t oc = oc0; oc < oc1; ++oc)
      for (int64_t i = 0; i < taps; ++i) f(oc * per_pair + offsets[i], oc * taps + i);
  });
}

// The weight's live slice (O, Cg, kd', kh', kw'), dense.
template <class T>
std::vector<T> live_weight(const ConvGeom& g, const LiveTaps& t, const T* w) {
  const ConvGeom r = live_geom(g, t);
  std::vector<T> out(static_cast<size_t>(g.O * r.K()));
  for_live_taps(g, t, [&](int64_t full, int64_t live) { out[live] = w[full]; });
  return out;
}

// conv_fwd and conv_bwd_data on the live taps only: primitive(geometry,
// weight) writes `out` (out_size elements), which is all zeros when no tap lives.
template <class T, class Primitive>
void on_live_taps(const ConvGeom& g, const T* w, T* out, int64_t out_size, Primitive&& primitive) {
  const LiveTaps t = live_taps(g);
  if (t.none) return std::fill(out, out + out_size, T(0));
  if (t.all) return primitive(g, w);
  const std::vector<T> wl = live_weight(g, t, w);
  primitive(live_geom(g, t), wl.data());
}

template <class T>
void conv_fwd_live(const char* op, const ConvGeom& g, const T* big, const T* w, T* small) {
  on_live_taps(g, w, small, g.N * g.O * g.P(), [&](const ConvGeom& r, const T* rw) {
    conv_fwd<T>(op, r, big, rw, small);
  });
}

template <class T>
void conv_bwd_data_live(const char* op, const ConvGeom& g, const T* small, const T* w, T* big) {
  on_live_taps(g, w, big, g.N * g.C * g.S(), [&](const ConvGeom& r, const T* rw) {
    conv_bwd_data<T>(op, r, small, rw, big);
  });
}

// conv_bwd_weight on the live taps only; the dead taps' gradient is zero.
template <class T>
void conv_bwd_weight_live(const char* op, const ConvGeom& g, const T* big, const T* small, T* gw) {
  const LiveTaps t = live_taps(g);
  const int64_t size = g.O * g.K();
  if (t.none) return std::fill(gw, gw + size, T(0));
  if (t.all) return conv_bwd_weight<T>(op, g, big, small, gw);
  const ConvGeom r = live_geom(g, t);
  std::vector<T> gl(static_cast<size_t>(g.O * r.K()));
  conv_bwd_weight<T>(op, r, big, small, gl.data());
  // Dead taps: sums of products with padding, zero.
  parallel_for(size, kGrainCheap,
               [&](int64_t i0, int64_t i1) { std::fill(gw + i0, gw + i1, T(0)); });
  for_live_taps(g, t, [&](int64_t full, int64_t live) { gw[full] = gl[live]; });
}

void check_conv_dtype(const char* op, const at::Tensor& ref, const at::Tensor& t, const char* arg) {
  nn::check_float(op, t);
  FL_CHECK_T(t.scalar_type() == ref.scalar_type(), op, t, "expected '", arg,
               "' to have the dtype of input (", dtype_name(ref.scalar_type()), ")");
}

// What forward and backward check alike: a 1-, 2- or 3-d convolution (3- to 5-d
// input), a weight of the input's rank, both of one float dtype. Returns the
// number of spatial dims.
int64_t check_conv_operands(const char* op, const at::Tensor& input, const at::Tensor& weight) {
  const int64_t sd = input.dim() - 2;
  FL_CHECK_T(sd >= 1 && sd <= 3, op, input, "expected a 3-d, 4-d or 5-d input (1-d, 2-d or ",
               "3-d convolution), got ", input.dim(), "-d input");
  FL_CHECK_T(weight.dim() == input.dim(), op, weight, "weight must be ", input.dim(),
               "-d, got ", weight.sizes());
  check_conv_dtype(op, input, input, "input");
  check_conv_dtype(op, input, weight, "weight");
  return sd;
}

// The output's channels and spatial sizes (a transposed convolution's output is
// the geometry's input side).
struct ConvOut {
  int64_t C, D, H, W;
};
ConvOut conv_out_dims(const ConvGeom& g, bool transposed) {
  return transposed ? ConvOut{g.C, g.D, g.H, g.W} : ConvOut{g.O, g.Do, g.Ho, g.Wo};
}

// Geometry from the 5-d input-side/weight shapes (as5d views) and parameters.
// `in5` is the op's input; for a transposed conv it is the small side.
ConvGeom make_geom(const char* op, const at::Tensor& in5, const at::Tensor& w5,
                   at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                   bool transposed, at::IntArrayRef output_padding, int64_t groups, int64_t sd) {
  ConvGeom g;
  FL_CHECK(groups >= 1, op, "groups must be positive, got ", groups);
  g.G = groups;
  const auto s = param3(op, "stride", stride, sd, 1);
  const auto p = param3(op, "padding", padding, sd, 0);
  const auto d = param3(op, "dilation", dilation, sd, 1);
  g.sd = s[0]; g.sh = s[1]; g.sw = s[2];
  g.pd = p[0]; g.ph = p[1]; g.pw = p[2];
  g.dd = d[0]; g.dh = d[1]; g.dw = d[2];
  for (int i = 0; i < 3; ++i) {
    FL_CHECK(s[i] > 0, op, "stride must be positive, got ", stride);
    FL_CHECK(d[i] > 0, op, "dilation must be positive, got ", dilation);
    FL_CHECK(p[i] >= 0, op, "padding must be non-negative, got ", padding);
  }
  g.kd = w5.size(2); g.kh = w5.size(3); g.kw = w5.size(4);
  g.N = in5.size(0);
  if (!transposed) {
    g.C = in5.size(1); g.D = in5.size(2); g.H = in5.size(3); g.W = in5.size(4);
    g.O = w5.size(0);
    FL_CHECK(g.C == w5.size(1) * groups, op, "expected input with ", w5.size(1) * groups,
               " channels (weight ", w5.sizes(), ", groups ", groups, "), got ", in5.size(1));
    FL_CHECK(g.O % groups == 0, op, "out channels ", g.O, " not divisible by groups ", groups);
    const int64_t in[3] = {g.D, g.H, g.W}, k[3] = {g.kd, g.kh, g.kw};
    int64_t out[3];
    for (int i = 0; i < 3; ++i) {
      FL_CHECK(in[i] + 2 * p[i] >= d[i] * (k[i] - 1) + 1, op, "kernel size ",
                 w5.sizes().slice(5 - sd), " (dilated) is larger than the padded input ",
                 in5.sizes().slice(5 - sd));
      out[i] = (in[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
    }
    g.Do = out[0]; g.Ho = out[1]; g.Wo = out[2];
  } else {
    // weight (Cin, Cout/groups, kd, kh, kw): plain-conv O = Cin (small side), C = Cout (big side).
    const auto op3 = param3(op, "output_padding", output_padding, sd, 0);
    g.O = in5.size(1); g.Do = in5.size(2); g.Ho = in5.size(3); g.Wo = in5.size(4);
    FL_CHECK(w5.size(0) == g.O, op, "expected weight with ", g.O, " input channels, got ",
               w5.sizes());
    FL_CHECK(g.O % groups == 0, op, "in channels ", g.O, " not divisible by groups ", groups);
    g.C = w5.size(1) * groups;
    const int64_t small[3] = {g.Do, g.Ho, g.Wo}, k[3] = {g.kd, g.kh, g.kw};
    int64_t big[3];
    for (int i = 0; i < 3; ++i) {
      big[i] = (small[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op3[i] + 1;
      FL_CHECK(big[i] > 0, op, "transposed convolution output size is non-positive");
    }
    g.D = big[0]; g.H = big[1]; g.W = big[2];
  }
  return g;
}

// The output shape of a convolution: (N, C, spatial...) with sd spatial dims.
std::vector<int64_t> conv_shape(int64_t N, int64_t C, int64_t D, int64_t H, int64_t W,
                                int64_t sd) {
  if (sd == 1) return {N, C, W};
  if (sd == 2) return {N, C, H, W};
  return {N, C, D, H, W};
}

}  // namespace

at::Tensor k_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                      const ::std::optional<at::Tensor>& bias,
                                      at::IntArrayRef stride, at::IntArrayRef padding,
                                      at::IntArrayRef dilation, bool transposed,
                                      at::IntArrayRef output_padding, int64_t groups) {
  const char* op = "convolution_overrideable";
  const int64_t sd = check_conv_operands(op, input, weight);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    check_conv_dtype(op, input, *bias, "bias");
  }
  const at::Tensor in5 = as5d(input), w5 = as5d(weight);
  const ConvGeom g = make_geom(op, in5, w5, stride, padding, dilation, transposed,
                               output_padding, groups, sd);
  const ConvOut o = conv_out_dims(g, transposed);
  const int64_t outC = o.C, oD = o.D, oH = o.H, oW = o.W;
  if (has_bias) {
    FL_CHECK_T(bias->dim() == 1 && bias->size(0) == outC, op, *bias, "bias must have shape [",
                 outC, "], got ", bias->sizes());
  }
  const std::vector<int64_t> oshape = conv_shape(g.N, outC, oD, oH, oW, sd);
  at::Tensor out = at::empty(oshape, input.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, g, transposed, has_bias, outC, oD, oH, oW, in5 = DeviceTensor(in5),
                 w5 = DeviceTensor(w5),
                 bias = has_bias ? DeviceTensor(*bias) : DeviceTensor(),
                 out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, in5);
      auto w = nn::load<Acc>(op, w5);
      nn::OutBuf<Acc> ob(out);
      Acc* y = ob.data();
      if (g.K() == 0 || x.data() == nullptr) {
        std::fill(y, y + out.numel(), Acc(0));
      } else if (!transposed) {
        conv_fwd_live<Acc>(op, g, x.data(), w.data(), y);
      } else {
        conv_bwd_data_live<Acc>(op, g, x.data(), w.data(), y);
      }
      if (has_bias) {
        auto b = nn::load<Acc>(op, bias);
        const int64_t plane = oD * oH * oW;
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t c = 0; c < outC; ++c) {
            Acc* p = y + (n * outC + c) * plane;
            const Acc bv = b.data()[c];
            for (int64_t i = 0; i < plane; ++i) p[i] += bv;
          }
      }
      ob.finish(op);
    });
  });
  return out;
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, ::std::array<bool, 3> output_mask) {
  const char* op = "convolution_backward_overrideable";
  const int64_t sd = check_conv_operands(op, input, weight);
  FL_CHECK_T(grad_output.dim() == input.dim(), op, grad_output, "grad_output must be ",
               input.dim(), "-d, got ", grad_output.sizes());
  check_conv_dtype(op, input, grad_output, "grad_output");
  const at::Tensor in5 = as5d(input), w5 = as5d(weight), go5 = as5d(grad_output);
  const ConvGeom g = make_geom(op, in5, w5, stride, padding, dilation, transposed,
                               output_padding, groups, sd);
  {
    const ConvOut o = conv_out_dims(g, transposed);
    const int64_t outC = o.C, oD = o.D, oH = o.H, oW = o.W;
    FL_CHECK_T(go5.size(0) == g.N && go5.size(1) == outC && go5.size(2) == oD &&
                     go5.size(3) == oH && go5.size(4) == oW,
                 op, grad_output, "grad_output has shape ", grad_output.sizes(),
                 ", expected the convolution output shape");
  }
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1]) gw = at::empty(weight.sizes(), weight.options());
  if (output_mask[2]) gb = at::empty({transposed ? g.C : g.O}, grad_output.options());
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    // One device part for the three gradients: they share the staged grad_output.
    // An output not asked for is an undefined DeviceTensor (never reached).
    launch(input, [op, g, transposed, output_mask, in5 = DeviceTensor(in5),
                   w5 = DeviceTensor(w5), go5 = DeviceTensor(go5),
                   gi = DeviceTensor(gi), gw = DeviceTensor(gw),
                   gb = DeviceTensor(gb)] {
      auto go = nn::load<Acc>(op, go5);
      const bool empty_k = g.K() == 0;
      if (output_mask[0] && gi.numel() > 0) {
        auto w = nn::load<Acc>(op, w5);
        nn::OutBuf<Acc> ob(gi);
        if (empty_k || go5.numel() == 0) {
          std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
        } else if (!transposed) {
          conv_bwd_data_live<Acc>(op, g, go.data(), w.data(), ob.data());
        } else {
          conv_fwd_live<Acc>(op, g, go.data(), w.data(), ob.data());
        }
        ob.finish(op);
      }
      if (output_mask[1] && gw.numel() > 0) {
        auto x = nn::load<Acc>(op, in5);
        nn::OutBuf<Acc> ob(gw);
        if (g.N == 0 || g.P() == 0 || g.S() == 0) {
          std::fill(ob.data(), ob.data() + gw.numel(), Acc(0));
        } else if (!transposed) {
          conv_bwd_weight_live<Acc>(op, g, x.data(), go.data(), ob.data());
        } else {
          // big side = grad_output, small side = input
          conv_bwd_weight_live<Acc>(op, g, go.data(), x.data(), ob.data());
        }
        ob.finish(op);
      }
      if (output_mask[2] && gb.numel() > 0) {
        // The bias gradient sums N x plane values per channel (thousands in a
        // transposed 3-d conv): a float running sum loses ~plane * eps of the
        // largest term (OpInfo's conv_transpose3d sample: 2.3e-4 off float64 on
        // 194, CPU 1.6e-5), so the sum runs in double and rounds once.
        const int64_t C = gb.size(0);
        const int64_t plane = go5.size(2) * go5.size(3) * go5.size(4);
        std::vector<double> sum(static_cast<size_t>(C), 0.0);
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t c = 0; c < C; ++c) {
            const Acc* p = go.data() + (n * C + c) * plane;
            double s = 0;
            for (int64_t i = 0; i < plane; ++i) s += p[i];
            sum[c] += s;
          }
        std::vector<Acc> acc(sum.begin(), sum.end());
        nn::store<Acc>(op, acc.data(), gb);
      }
    });
  });
  return {gi, gw, gb};
}

namespace {
// Geometry of im2col/col2im ops: big side (C, H, W), one group, columns (Ho, Wo).
ConvGeom fold_geom(const char* op, int64_t N, int64_t C, int64_t H, int64_t W,
                   at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                   at::IntArrayRef padding, at::IntArrayRef stride) {
  for (auto* a : {&kernel_size, &dilation, &padding, &stride})
    FL_CHECK(a->size() == 2, op, "kernel_size, dilation, padding and stride must have 2 values");
  ConvGeom g;
  g.N = N; g.G = 1; g.C = C; g.H = H; g.W = W; g.O = C;
  g.kh = kernel_size[0]; g.kw = kernel_size[1];
  g.dh = dilation[0]; g.dw = dilation[1];
  g.ph = padding[0]; g.pw = padding[1];
  g.sh = stride[0]; g.sw = stride[1];
  FL_CHECK(g.kh > 0 && g.kw > 0 && g.dh > 0 && g.dw > 0 && g.sh > 0 && g.sw > 0, op,
             "kernel_size, dilation and stride must be positive");
  FL_CHECK(g.ph >= 0 && g.pw >= 0, op, "padding must be non-negative");
  g.Ho = (H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.Wo = (W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  FL_CHECK(g.Ho > 0 && g.Wo > 0, op, "the kernel does not fit: input (", H, ", ", W,
             "), kernel ", kernel_size, ", dilation ", dilation, ", padding ", padding);
  return g;
}
}  // namespace

at::Tensor k_im2col(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                    at::IntArrayRef padding, at::IntArrayRef stride) {
  const char* op = "im2col";
  check_conv_dtype(op, self, self, "self");
  FL_CHECK_T(self.dim() == 3 || self.dim() == 4, op, self,
               "expected 3-d (C, H, W) or 4-d (N, C, H, W) input, got ", self.sizes());
  const bool batched = self.dim() == 4;
  const at::Tensor x4 = batched ? self : self.unsqueeze(0);
  const ConvGeom g = fold_geom(op, x4.size(0), x4.size(1), x4.size(2), x4.size(3), kernel_size,
                               dilation, padding, stride);
  std::vector<int64_t> shape{g.N, g.K(), g.P()};
  if (!batched) shape.erase(shape.begin());
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, g, x4 = DeviceTensor(x4), out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, x4);
      nn::OutBuf<Acc> ob(out);
      im2col(g, x.data(), ob.data(), per_image_layout(g));
      ob.finish(op);
    });
  });
  return out;
}

at::Tensor k_col2im(const at::Tensor& self, at::IntArrayRef output_size,
                    at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                    at::IntArrayRef padding, at::IntArrayRef stride) {
  const char* op = "col2im";
  check_conv_dtype(op, self, self, "self");
  FL_CHECK_T(self.dim() == 2 || self.dim() == 3, op, self,
               "expected 2-d (C*kh*kw, L) or 3-d (N, C*kh*kw, L) input, got ", self.sizes());
  FL_CHECK(output_size.size() == 2 && kernel_size.size() == 2, op,
             "output_size and kernel_size must have 2 values");
  const bool batched = self.dim() == 3;
  const at::Tensor c3 = batched ? self : self.unsqueeze(0);
  const int64_t kk = kernel_size[0] * kernel_size[1];
  FL_CHECK_T(kk > 0 && c3.size(1) % kk == 0, op, self, "expected size(-2) = ", c3.size(1),
               " to be divisible by the kernel size ", kk);
  const ConvGeom g = fold_geom(op, c3.size(0), c3.size(1) / kk, output_size[0], output_size[1],
                               kernel_size, dilation, padding, stride);
  FL_CHECK_T(c3.size(2) == g.P(), op, self, "expected ", g.P(),
               " blocks (size(-1)) for output_size ", output_size, ", got ", c3.size(2));
  std::vector<int64_t> shape{g.N, g.C, g.H, g.W};
  if (!batched) shape.erase(shape.begin());
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, g, c3 = DeviceTensor(c3), out = DeviceTensor(out)] {
      auto c = nn::load<Acc>(op, c3);
      nn::OutBuf<Acc> ob(out);
      col2im(g, c.data(), ob.data(), per_image_layout(g));
      ob.finish(op);
    });
  });
  return out;
}

}  // namespace acme::kernels
