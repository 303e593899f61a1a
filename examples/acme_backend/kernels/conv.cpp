// acme convolution kernels: convolution_overrideable and
// convolution_backward_overrideable, the ops PyTorch routes conv1d/conv2d and
// conv_transpose1d/2d to on a PrivateUse1 device; plus the im2col / col2im
// ops (nn.Unfold / nn.Fold), which are this file's building blocks.
//
// Method: im2col + GEMM per image and group. Every direction is one of three
// primitives on a "plain conv" geometry, where the big side has C channels of
// H x W and the small side O channels of Ho x Wo:
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

#include "gemm.h"
#include "nn_buffers.h"

#include <array>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
namespace {

namespace cm = ::acme::common;
using nn::Mat;

struct ConvGeom {
  int64_t N = 0, G = 1;
  int64_t C = 0, H = 0, W = 0;     // big side (plain conv input)
  int64_t O = 0, Ho = 0, Wo = 0;   // small side (plain conv output)
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  int64_t K() const { return Cg() * kh * kw; }     // rows of a column matrix
  int64_t P() const { return Ho * Wo; }            // columns of a column matrix
  // A 1x1 kernel with unit stride and no padding reads the big side as is.
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

// Parameters as 2-d (h, w); 1-d convs (3-d tensors) get a unit h dimension.
std::array<int64_t, 2> param2(const char* op, const char* name, at::IntArrayRef p, int64_t sd,
                              int64_t unit) {
  ACME_CHECK(p.size() == static_cast<size_t>(sd) || p.size() == 1, op, name, " must have ", sd,
             " values for a ", sd, "-d convolution, got ", p);
  if (sd == 1) return {unit, p[0]};
  if (p.size() == 1) return {p[0], p[0]};
  return {p[0], p[1]};
}

// View a 3-d (N, C, L) tensor as (N, C, 1, L).
at::Tensor as4d(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(2) : t; }

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

// im2col of one image/group: big (Cg, H, W) dense -> col (K, P) with row
// stride ld (several images share a column buffer side by side).
template <class T>
void im2col(const ConvGeom& g, const T* big, T* col, int64_t ld) {
  const int64_t Cg = g.Cg();
  for (int64_t c = 0; c < Cg; ++c) {
    const T* plane = big + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
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

// col2im of one image/group: big (Cg, H, W) += scatter of col (K, P), row stride ld.
template <class T>
void col2im(const ConvGeom& g, const T* col, int64_t ld, T* big) {
  const int64_t Cg = g.Cg();
  for (int64_t c = 0; c < Cg; ++c) {
    T* plane = big + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * ld;
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

// small (N, O, Ho, Wo) = conv(big (N, C, H, W), w (O, Cg, kh, kw)); dense arrays.
template <class T>
void conv_fwd(const char* op, const ConvGeom& g, const T* big, const T* w, T* small) {
  const int64_t nbmax = images_per_gemm(g);
  const bool direct = g.pointwise() && nbmax == 1;  // 1x1: the image is its own column matrix
  std::vector<T> col, tmp;
  if (!direct) col.resize(static_cast<size_t>(g.K() * nbmax * g.P()));
  if (nbmax > 1) tmp.resize(static_cast<size_t>(g.Og() * nbmax * g.P()));
  for (int64_t n0 = 0; n0 < g.N; n0 += nbmax) {
    const int64_t nb = std::min(nbmax, g.N - n0), ld = nb * g.P();
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const T* cm_ = big + (n0 * g.C + grp * g.Cg()) * g.H * g.W;
      if (!direct) {
        for (int64_t j = 0; j < nb; ++j)
          im2col(g, big + ((n0 + j) * g.C + grp * g.Cg()) * g.H * g.W, col.data() + j * g.P(), ld);
        cm_ = col.data();
      }
      Mat<T> A{w + grp * g.Og() * g.K(), g.Og(), g.K(), g.K(), 1};
      Mat<T> B{cm_, g.K(), ld, ld, 1};
      if (nb == 1) {
        nn::gemm<T>(op, A, B, T(1), T(0), small + (n0 * g.O + grp * g.Og()) * g.P(), g.P());
      } else {
        nn::gemm<T>(op, A, B, T(1), T(0), tmp.data(), ld);
        scatter_small(g, tmp.data(), n0, nb, grp, small);
      }
    }
  }
}

// big (N, C, H, W) = conv^T(small (N, O, Ho, Wo), w): the input gradient of a plain conv.
template <class T>
void conv_bwd_data(const char* op, const ConvGeom& g, const T* small, const T* w, T* big) {
  const int64_t nbmax = images_per_gemm(g);
  const bool direct = g.pointwise() && nbmax == 1;
  std::vector<T> col, tmp;
  if (!direct) col.resize(static_cast<size_t>(g.K() * nbmax * g.P()));
  if (nbmax > 1) tmp.resize(static_cast<size_t>(g.Og() * nbmax * g.P()));
  for (int64_t n0 = 0; n0 < g.N; n0 += nbmax) {
    const int64_t nb = std::min(nbmax, g.N - n0), ld = nb * g.P();
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // W_g^T: (K x Og) view of the (Og x K) row-major block.
      Mat<T> A{w + grp * g.Og() * g.K(), g.K(), g.Og(), 1, g.K()};
      const T* s = small + (n0 * g.O + grp * g.Og()) * g.P();
      if (nb > 1) {
        gather_small(g, small, n0, nb, grp, tmp.data());
        s = tmp.data();
      }
      Mat<T> B{s, g.Og(), ld, ld, 1};
      if (direct) {
        nn::gemm<T>(op, A, B, T(1), T(0), big + (n0 * g.C + grp * g.Cg()) * g.H * g.W, g.P());
        continue;
      }
      nn::gemm<T>(op, A, B, T(1), T(0), col.data(), ld);
      for (int64_t j = 0; j < nb; ++j) {
        T* b = big + ((n0 + j) * g.C + grp * g.Cg()) * g.H * g.W;
        std::fill(b, b + g.Cg() * g.H * g.W, T(0));
        col2im(g, col.data() + j * g.P(), ld, b);
      }
    }
  }
}

// gw (O, Cg, kh, kw) = sum_n small_n @ im2col(big_n)^T.
template <class T>
void conv_bwd_weight(const char* op, const ConvGeom& g, const T* big, const T* small, T* gw) {
  const int64_t nbmax = images_per_gemm(g);
  const bool direct = g.pointwise() && nbmax == 1;
  std::vector<T> col, tmp;
  if (!direct) col.resize(static_cast<size_t>(g.K() * nbmax * g.P()));
  if (nbmax > 1) tmp.resize(static_cast<size_t>(g.Og() * nbmax * g.P()));
  std::fill(gw, gw + g.O * g.K(), T(0));
  for (int64_t n0 = 0; n0 < g.N; n0 += nbmax) {
    const int64_t nb = std::min(nbmax, g.N - n0), ld = nb * g.P();
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const T* cm_ = big + (n0 * g.C + grp * g.Cg()) * g.H * g.W;
      if (!direct) {
        for (int64_t j = 0; j < nb; ++j)
          im2col(g, big + ((n0 + j) * g.C + grp * g.Cg()) * g.H * g.W, col.data() + j * g.P(), ld);
        cm_ = col.data();
      }
      const T* s = small + (n0 * g.O + grp * g.Og()) * g.P();
      if (nb > 1) {
        gather_small(g, small, n0, nb, grp, tmp.data());
        s = tmp.data();
      }
      Mat<T> A{s, g.Og(), ld, ld, 1};
      Mat<T> Bt{cm_, ld, g.K(), 1, ld};  // col^T
      nn::gemm<T>(op, A, Bt, T(1), T(1), gw + grp * g.Og() * g.K(), g.K());
    }
  }
}

void check_conv_dtype(const char* op, const at::Tensor& ref, const at::Tensor& t, const char* arg) {
  cm::check_same_device(op, ref, t, arg);
  if (!(cm::dtype_bit(t.scalar_type()) & nn::kNNFloat)) {
    cm::fail_dtype(op, t.device(), t.scalar_type(), nn::kNNFloat);
  }
  ACME_CHECK_T(t.scalar_type() == ref.scalar_type(), op, t, "expected '", arg,
               "' to have the dtype of input (", cm::dtype_name(ref.scalar_type()), ")");
}

// Geometry from the 4-d input-side/weight shapes and parameters.
// `in` is the op's input; for a transposed conv it is the small side.
ConvGeom make_geom(const char* op, const at::Tensor& in4, const at::Tensor& w4,
                   at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                   bool transposed, at::IntArrayRef output_padding, int64_t groups, int64_t sd) {
  ConvGeom g;
  ACME_CHECK(groups >= 1, op, "groups must be positive, got ", groups);
  g.G = groups;
  auto s = param2(op, "stride", stride, sd, 1);
  auto p = param2(op, "padding", padding, sd, 0);
  auto d = param2(op, "dilation", dilation, sd, 1);
  g.sh = s[0]; g.sw = s[1]; g.ph = p[0]; g.pw = p[1]; g.dh = d[0]; g.dw = d[1];
  ACME_CHECK(g.sh > 0 && g.sw > 0, op, "stride must be positive, got ", stride);
  ACME_CHECK(g.dh > 0 && g.dw > 0, op, "dilation must be positive, got ", dilation);
  ACME_CHECK(g.ph >= 0 && g.pw >= 0, op, "padding must be non-negative, got ", padding);
  g.kh = w4.size(2);
  g.kw = w4.size(3);
  g.N = in4.size(0);
  if (!transposed) {
    g.C = in4.size(1); g.H = in4.size(2); g.W = in4.size(3);
    g.O = w4.size(0);
    ACME_CHECK(g.C == w4.size(1) * groups, op, "expected input with ", w4.size(1) * groups,
               " channels (weight ", w4.sizes(), ", groups ", groups, "), got ", in4.size(1));
    ACME_CHECK(g.O % groups == 0, op, "out channels ", g.O, " not divisible by groups ", groups);
    g.Ho = (g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
    g.Wo = (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
    ACME_CHECK(g.H + 2 * g.ph >= g.dh * (g.kh - 1) + 1 && g.W + 2 * g.pw >= g.dw * (g.kw - 1) + 1,
               op, "kernel size ", w4.sizes().slice(2), " (dilated) is larger than the padded input ",
               in4.sizes().slice(2));
  } else {
    // weight (Cin, Cout/groups, kh, kw): plain-conv O = Cin (small side), C = Cout (big side).
    auto op2 = param2(op, "output_padding", output_padding, sd, 0);
    g.O = in4.size(1); g.Ho = in4.size(2); g.Wo = in4.size(3);
    ACME_CHECK(w4.size(0) == g.O, op, "expected weight with ", g.O, " input channels, got ",
               w4.sizes());
    ACME_CHECK(g.O % groups == 0, op, "in channels ", g.O, " not divisible by groups ", groups);
    g.C = w4.size(1) * groups;
    g.H = (g.Ho - 1) * g.sh - 2 * g.ph + g.dh * (g.kh - 1) + op2[0] + 1;
    g.W = (g.Wo - 1) * g.sw - 2 * g.pw + g.dw * (g.kw - 1) + op2[1] + 1;
    ACME_CHECK(g.H > 0 && g.W > 0, op, "transposed convolution output size is non-positive");
  }
  return g;
}

// Big-side weight view used by the primitives: (O, Cg, kh, kw) for a plain conv;
// a transposed conv's (Cin, Cout/g, kh, kw) weight already has that layout.
}  // namespace

at::Tensor k_convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                      const ::std::optional<at::Tensor>& bias,
                                      at::IntArrayRef stride, at::IntArrayRef padding,
                                      at::IntArrayRef dilation, bool transposed,
                                      at::IntArrayRef output_padding, int64_t groups) {
  const char* op = "convolution_overrideable";
  const int64_t sd = input.dim() - 2;
  ACME_CHECK_T(sd == 1 || sd == 2, op, input, "only 1-d and 2-d convolutions are supported, got ",
               input.dim(), "-d input");
  ACME_CHECK_T(weight.dim() == input.dim(), op, weight, "weight must be ", input.dim(),
               "-d, got ", weight.sizes());
  check_conv_dtype(op, input, input, "input");
  check_conv_dtype(op, input, weight, "weight");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    check_conv_dtype(op, input, *bias, "bias");
  }
  const at::Tensor in4 = as4d(input), w4 = as4d(weight);
  const ConvGeom g = make_geom(op, in4, w4, stride, padding, dilation, transposed,
                               output_padding, groups, sd);
  const int64_t outC = transposed ? g.C : g.O;
  const int64_t oH = transposed ? g.H : g.Ho, oW = transposed ? g.W : g.Wo;
  if (has_bias) {
    ACME_CHECK_T(bias->dim() == 1 && bias->size(0) == outC, op, *bias, "bias must have shape [",
                 outC, "], got ", bias->sizes());
  }
  std::vector<int64_t> oshape = sd == 1 ? std::vector<int64_t>{g.N, outC, oW}
                                        : std::vector<int64_t>{g.N, outC, oH, oW};
  at::Tensor out = at::empty(oshape, input.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = ACME_T(tag);
    auto x = nn::load<Acc>(op, in4);
    auto w = nn::load<Acc>(op, w4);
    nn::OutBuf<Acc> ob(out);
    Acc* y = ob.data();
    if (g.K() == 0 || x.data() == nullptr) {
      std::fill(y, y + out.numel(), Acc(0));
    } else if (!transposed) {
      conv_fwd<Acc>(op, g, x.data(), w.data(), y);
    } else {
      conv_bwd_data<Acc>(op, g, x.data(), w.data(), y);
    }
    if (has_bias) {
      auto b = nn::load<Acc>(op, *bias);
      const int64_t plane = oH * oW;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < outC; ++c) {
          Acc* p = y + (n * outC + c) * plane;
          const Acc bv = b.data()[c];
          for (int64_t i = 0; i < plane; ++i) p[i] += bv;
        }
    }
    ob.finish(op);
  });
  return out;
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, ::std::array<bool, 3> output_mask) {
  const char* op = "convolution_backward_overrideable";
  const int64_t sd = input.dim() - 2;
  ACME_CHECK_T(sd == 1 || sd == 2, op, input, "only 1-d and 2-d convolutions are supported, got ",
               input.dim(), "-d input");
  ACME_CHECK_T(weight.dim() == input.dim() && grad_output.dim() == input.dim(), op, weight,
               "weight and grad_output must be ", input.dim(), "-d");
  check_conv_dtype(op, input, input, "input");
  check_conv_dtype(op, input, weight, "weight");
  check_conv_dtype(op, input, grad_output, "grad_output");
  const at::Tensor in4 = as4d(input), w4 = as4d(weight), go4 = as4d(grad_output);
  const ConvGeom g = make_geom(op, in4, w4, stride, padding, dilation, transposed,
                               output_padding, groups, sd);
  {
    const int64_t outC = transposed ? g.C : g.O;
    const int64_t oH = transposed ? g.H : g.Ho, oW = transposed ? g.W : g.Wo;
    ACME_CHECK_T(go4.size(0) == g.N && go4.size(1) == outC && go4.size(2) == oH &&
                     go4.size(3) == oW,
                 op, grad_output, "grad_output has shape ", grad_output.sizes(),
                 ", expected the convolution output shape");
  }
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1]) gw = at::empty(weight.sizes(), weight.options());
  if (output_mask[2]) gb = at::empty({transposed ? g.C : g.O}, grad_output.options());
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = ACME_T(tag);
    auto go = nn::load<Acc>(op, go4);
    const bool empty_k = g.K() == 0;
    if (output_mask[0] && gi.numel() > 0) {
      auto w = nn::load<Acc>(op, w4);
      nn::OutBuf<Acc> ob(gi);
      if (empty_k || go4.numel() == 0) {
        std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      } else if (!transposed) {
        conv_bwd_data<Acc>(op, g, go.data(), w.data(), ob.data());
      } else {
        conv_fwd<Acc>(op, g, go.data(), w.data(), ob.data());
      }
      ob.finish(op);
    }
    if (output_mask[1] && gw.numel() > 0) {
      auto x = nn::load<Acc>(op, in4);
      nn::OutBuf<Acc> ob(gw);
      if (g.N == 0 || g.P() == 0 || g.H * g.W == 0) {
        std::fill(ob.data(), ob.data() + gw.numel(), Acc(0));
      } else if (!transposed) {
        conv_bwd_weight<Acc>(op, g, x.data(), go.data(), ob.data());
      } else {
        // big side = grad_output, small side = input
        conv_bwd_weight<Acc>(op, g, go.data(), x.data(), ob.data());
      }
      ob.finish(op);
    }
    if (output_mask[2] && gb.numel() > 0) {
      const int64_t C = gb.size(0);
      const int64_t plane = go4.size(2) * go4.size(3);
      std::vector<Acc> acc(static_cast<size_t>(C), Acc(0));
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* p = go.data() + (n * C + c) * plane;
          Acc s = 0;
          for (int64_t i = 0; i < plane; ++i) s += p[i];
          acc[c] += s;
        }
      nn::store<Acc>(op, acc.data(), gb);
    }
  });
  return {gi, gw, gb};
}

namespace {
// Geometry of im2col/col2im ops: big side (C, H, W), one group, columns (Ho, Wo).
ConvGeom fold_geom(const char* op, int64_t N, int64_t C, int64_t H, int64_t W,
                   at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                   at::IntArrayRef padding, at::IntArrayRef stride) {
  for (auto* a : {&kernel_size, &dilation, &padding, &stride})
    ACME_CHECK(a->size() == 2, op, "kernel_size, dilation, padding and stride must have 2 values");
  ConvGeom g;
  g.N = N; g.G = 1; g.C = C; g.H = H; g.W = W; g.O = C;
  g.kh = kernel_size[0]; g.kw = kernel_size[1];
  g.dh = dilation[0]; g.dw = dilation[1];
  g.ph = padding[0]; g.pw = padding[1];
  g.sh = stride[0]; g.sw = stride[1];
  ACME_CHECK(g.kh > 0 && g.kw > 0 && g.dh > 0 && g.dw > 0 && g.sh > 0 && g.sw > 0, op,
             "kernel_size, dilation and stride must be positive");
  ACME_CHECK(g.ph >= 0 && g.pw >= 0, op, "padding must be non-negative");
  g.Ho = (H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.Wo = (W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  ACME_CHECK(g.Ho > 0 && g.Wo > 0, op, "the kernel does not fit: input (", H, ", ", W,
             "), kernel ", kernel_size, ", dilation ", dilation, ", padding ", padding);
  return g;
}
}  // namespace

at::Tensor k_im2col(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                    at::IntArrayRef padding, at::IntArrayRef stride) {
  const char* op = "im2col";
  check_conv_dtype(op, self, self, "self");
  ACME_CHECK_T(self.dim() == 3 || self.dim() == 4, op, self,
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
    using Acc = ACME_T(tag);
    auto x = nn::load<Acc>(op, x4);
    nn::OutBuf<Acc> ob(out);
    for (int64_t n = 0; n < g.N; ++n)
      im2col(g, x.data() + n * g.C * g.H * g.W, ob.data() + n * g.K() * g.P(), g.P());
    ob.finish(op);
  });
  return out;
}

at::Tensor k_col2im(const at::Tensor& self, at::IntArrayRef output_size,
                    at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                    at::IntArrayRef padding, at::IntArrayRef stride) {
  const char* op = "col2im";
  check_conv_dtype(op, self, self, "self");
  ACME_CHECK_T(self.dim() == 2 || self.dim() == 3, op, self,
               "expected 2-d (C*kh*kw, L) or 3-d (N, C*kh*kw, L) input, got ", self.sizes());
  ACME_CHECK(output_size.size() == 2 && kernel_size.size() == 2, op,
             "output_size and kernel_size must have 2 values");
  const bool batched = self.dim() == 3;
  const at::Tensor c3 = batched ? self : self.unsqueeze(0);
  const int64_t kk = kernel_size[0] * kernel_size[1];
  ACME_CHECK_T(kk > 0 && c3.size(1) % kk == 0, op, self, "expected size(-2) = ", c3.size(1),
               " to be divisible by the kernel size ", kk);
  const ConvGeom g = fold_geom(op, c3.size(0), c3.size(1) / kk, output_size[0], output_size[1],
                               kernel_size, dilation, padding, stride);
  ACME_CHECK_T(c3.size(2) == g.P(), op, self, "expected ", g.P(),
               " blocks (size(-1)) for output_size ", output_size, ", got ", c3.size(2));
  std::vector<int64_t> shape{g.N, g.C, g.H, g.W};
  if (!batched) shape.erase(shape.begin());
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel() == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = ACME_T(tag);
    auto c = nn::load<Acc>(op, c3);
    nn::OutBuf<Acc> ob(out);
    std::fill(ob.data(), ob.data() + out.numel(), Acc(0));
    for (int64_t n = 0; n < g.N; ++n)
      col2im(g, c.data() + n * g.K() * g.P(), g.P(), ob.data() + n * g.C * g.H * g.W);
    ob.finish(op);
  });
  return out;
}

}  // namespace acme::kernels
