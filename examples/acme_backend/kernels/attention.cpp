// acme fused scaled-dot-product attention: the "overrideable" pair PyTorch
// calls when a PrivateUse1 backend's _fused_sdp_choice answers
// SDPBackend::overrideable. (acme's generated glue currently answers "math",
// so F.scaled_dot_product_attention decomposes into bmm/_safe_softmax; these
// kernels serve backends or configurations that route to the fused path.)
//
// Per (batch, head): S = scale * Q K^T + bias (causal: key j <= query i),
// P = softmax(S) kept implicit through the row log-sum-exp, O = P V. The
// backward recomputes P from the saved logsumexp. GEMMs go through acme's
// BLAS wrapper; dropout is not supported (it needs the device RNG stream) and
// is rejected with a clear error.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "math/gemm.h"
#include "math/nn_math.h"
#include "kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {
using nn::Mat;

// A tensor of `shape` whose dims are laid out in the order of `query`'s strides
// (query's own layout when the shapes agree): what PyTorch's meta kernels of the
// overrideable attention ops promise, so torch.compile's stride checks hold
// (attention called on heads split from a (B, L, H*E) projection, a transposed view).
at::Tensor like_query_layout(const at::Tensor& query, c10::IntArrayRef shape) {
  const int64_t nd = query.dim();
  std::vector<int64_t> order(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> strides(static_cast<size_t>(nd));
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[static_cast<size_t>(*it)] = stride;
    stride *= std::max<int64_t>(shape[static_cast<size_t>(*it)], 1);
  }
  return at::empty_strided(shape, strides, query.options());
}

struct AttnShape {
  int64_t B, H, L, S, E, Ev;
};

AttnShape attn_shape(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    FL_CHECK_T(t->dim() == 4, op, *t, "expected 4-d (batch, heads, seq, dim) tensors, got ",
                 t->sizes());
    nn::check_float(op, *t);
    FL_CHECK_T(t->scalar_type() == q.scalar_type(), op, *t,
                 "query, key and value must have the same dtype");
  }
  AttnShape s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  FL_CHECK(k.size(0) == s.B && v.size(0) == s.B && k.size(1) == s.H && v.size(1) == s.H, op,
             "batch and head dims of query ", q.sizes(), ", key ", k.sizes(), " and value ",
             v.sizes(), " must match (grouped-query attention is not supported here)");
  FL_CHECK(k.size(3) == s.E && v.size(2) == s.S, op, "key ", k.sizes(), " and value ",
             v.sizes(), " do not fit query ", q.sizes());
  return s;
}

template <class Tensor>
bool has_bias(const Tensor& b) { return b.defined() && b.numel() > 0; }

// Additive bias broadcast to (B, H, L, S) as a dense Acc array; a bool mask
// becomes 0 (keep) / -inf (drop). Device part.
template <class Acc>
std::vector<Acc> load_bias(const char* op, const DeviceTensor& bias, const AttnShape& s) {
  const std::vector<int64_t> shape{s.B, s.H, s.L, s.S};
  std::vector<Acc> out(static_cast<size_t>(s.B * s.H * s.L * s.S));
  if (bias.scalar_type() == c10::ScalarType::Bool) {
    const auto st = nn::contiguous_strides(shape);
    StridedIter it(shape);
    it.add_strided(reinterpret_cast<char*>(out.data()), shape, st, sizeof(Acc));
    it.add(bias);
    it.build();
    map1<Acc, bool>(it, [](bool keep) {
      return keep ? Acc(0) : -std::numeric_limits<Acc>::infinity();
    });
  } else {
    nn::load_into<Acc>(op, bias, shape, out.data());
  }
  return out;
}

// The scores of head bh (of the (B * H, L | S, E) q and k) before the softmax, forward and backward alike:
// P = scale * Q K^T + bias, -inf above the diagonal when causal. Device part.
template <class Acc>
void masked_scores(const char* op, const AttnShape& s, double sc, bool is_causal, const Acc* q, const Acc* k,
                   const std::vector<Acc>& bias_v, int64_t bh, Acc* P) {
  const Acc* qp = q + bh * s.L * s.E;
  const Acc* kp = k + bh * s.S * s.E;
  nn::gemm<Acc>(op, Mat<Acc>{qp, s.L, s.E, s.E, 1}, Mat<Acc>{kp, s.E, s.S, 1, s.E},
                static_cast<Acc>(sc), Acc(0), P, s.S);
  for (int64_t i = 0; i < s.L; ++i) {
    Acc* row = P + i * s.S;
    if (!bias_v.empty()) {
      const Acc* br = bias_v.data() + (bh * s.L + i) * s.S;
      for (int64_t j = 0; j < s.S; ++j) row[j] += br[j];
    }
    if (is_causal)
      for (int64_t j = i + 1; j < s.S; ++j) row[j] = -std::numeric_limits<Acc>::infinity();
  }
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
             at::Tensor, at::Tensor>
k__scaled_dot_product_fused_attention_overrideable(const at::Tensor& query, const at::Tensor& key,
                                                   const at::Tensor& value,
                                                   const ::std::optional<at::Tensor>& attn_bias,
                                                   double dropout_p, bool is_causal,
                                                   bool return_debug_mask,
                                                   ::std::optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable";
  const AttnShape s = attn_shape(op, query, key, value);
  FL_CHECK(dropout_p == 0.0, op, "attention dropout is not supported on acme's fused path (got ",
             "dropout_p=", dropout_p, "); use the math path");
  FL_CHECK(!return_debug_mask, op, "return_debug_mask is not supported");
  const at::Tensor bias = attn_bias.has_value() ? *attn_bias : at::Tensor();
  const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(s.E));
  at::Tensor out = like_query_layout(query, {s.B, s.H, s.L, s.Ev});
  at::Tensor lse = at::empty({s.B, s.H, s.L}, query.options().dtype(c10::ScalarType::Float));
  const auto lopt = query.options().dtype(c10::ScalarType::Long);
  at::Tensor none = at::empty({0}, lopt);
  if (s.B * s.H * s.L > 0) {
    nn::dispatch_compute(op, query, [&](auto tag) {
      using Acc = FL_T(tag);
      launch(out, [op, s, sc, is_causal, query = DeviceTensor(query),
                   key = DeviceTensor(key), value = DeviceTensor(value),
                   bias = DeviceTensor(bias), out = DeviceTensor(out),
                   lse = DeviceTensor(lse)] {
      auto q = nn::load<Acc>(op, query);
      auto k = nn::load<Acc>(op, key);
      auto v = nn::load<Acc>(op, value);
      std::vector<Acc> bias_v;
      if (has_bias(bias)) bias_v = load_bias<Acc>(op, bias, s);
      std::vector<Acc> P(static_cast<size_t>(s.L * s.S)), O(static_cast<size_t>(s.B * s.H * s.L * s.Ev));
      std::vector<float> L_(static_cast<size_t>(s.B * s.H * s.L));
      for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
        const Acc* vp = v.data() + bh * s.S * s.Ev;
        masked_scores(op, s, sc, is_causal, q.data(), k.data(), bias_v, bh, P.data());
        // P = softmax(P) by rows
        for (int64_t i = 0; i < s.L; ++i) {
          Acc* row = P.data() + i * s.S;
          const Acc mx = nn::lane_max(row, s.S);
          if (mx == -std::numeric_limits<Acc>::infinity()) {
            // fully masked row: zeros (as the math path's _safe_softmax), lse -inf
            std::fill(row, row + s.S, Acc(0));
            L_[bh * s.L + i] = -std::numeric_limits<float>::infinity();
            continue;
          }
          nn::exp_shifted(row, mx, row, s.S);
          const Acc sum = nn::lane_sum(row, s.S);
          const Acc inv = Acc(1) / sum;
          for (int64_t j = 0; j < s.S; ++j) row[j] *= inv;
          L_[bh * s.L + i] = static_cast<float>(mx + std::log(sum));
        }
        // O = P V
        nn::gemm<Acc>(op, Mat<Acc>{P.data(), s.L, s.S, s.S, 1}, Mat<Acc>{vp, s.S, s.Ev, s.Ev, 1},
                      Acc(1), Acc(0), O.data() + bh * s.L * s.Ev, s.Ev);
      }
      nn::store<Acc>(op, O.data(), out);
      nn::store<float>(op, L_.data(), lse);
      });
    });
  } else if (out.numel()) {
    // no keys: every row is fully masked
    nn::dispatch_compute(op, query, [&](auto tag) {
      using Acc = FL_T(tag);
      launch(out, [op, out = DeviceTensor(out)] {
        std::vector<Acc> z(static_cast<size_t>(out.numel()), Acc(0));
        nn::store<Acc>(op, z.data(), out);
      });
    });
  }
  at::Tensor debug = at::empty({0}, query.options());
  // seed and offset as 0-dim tensors, as the meta kernel (no dropout: never read)
  at::Tensor seed = at::empty({}, lopt), offset = at::empty({}, lopt);
  return {out, lse, none, none, c10::SymInt(s.L), c10::SymInt(s.S), seed, offset, debug};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
k__scaled_dot_product_fused_attention_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, ::std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, int64_t max_q, int64_t max_k, double dropout_p, bool is_causal,
    const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    ::std::optional<double> scale) {
  const char* op = "_scaled_dot_product_fused_attention_overrideable_backward";
  (void)cum_seq_q; (void)cum_seq_k; (void)max_q; (void)max_k;
  (void)philox_seed; (void)philox_offset;
  const AttnShape s = attn_shape(op, query, key, value);
  FL_CHECK(dropout_p == 0.0, op, "attention dropout is not supported on acme's fused path");
  FL_CHECK_T(grad_out.sizes().equals(out.sizes()) && out.size(0) == s.B && out.size(1) == s.H &&
                   out.size(2) == s.L && out.size(3) == s.Ev,
               op, grad_out, "grad_out ", grad_out.sizes(), " and out ", out.sizes(),
               " must be (batch, heads, L, Ev)");
  FL_CHECK_T(logsumexp.numel() == s.B * s.H * s.L, op, logsumexp, "logsumexp must be (B, H, L)");
  const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(s.E));
  const bool bias_on = has_bias(attn_bias);
  at::Tensor gq, gk, gv, gb;
  // each gradient in its input's layout, as PyTorch's meta kernel (torch.compile) says
  if (grad_input_mask[0]) gq = like_query_layout(query, query.sizes());
  if (grad_input_mask[1]) gk = like_query_layout(key, key.sizes());
  if (grad_input_mask[2]) gv = like_query_layout(value, value.sizes());
  const bool want_gb = grad_input_mask[3] && bias_on;
  if (want_gb) {
    FL_CHECK_T(attn_bias.scalar_type() != c10::ScalarType::Bool, op, attn_bias,
                 "a boolean mask has no gradient");
    FL_CHECK_T(attn_bias.dim() <= 4, op, attn_bias, "attn_bias must be at most 4-d");
    gb = at::empty(attn_bias.sizes(), attn_bias.options());
  }
  const at::Tensor& on = query;
  nn::dispatch_compute(op, query, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(on, [op, s, sc, is_causal, bias_on, want_gb, query = DeviceTensor(query),
                key = DeviceTensor(key), value = DeviceTensor(value),
                out = DeviceTensor(out), grad_out = DeviceTensor(grad_out),
                logsumexp = DeviceTensor(logsumexp), attn_bias = DeviceTensor(attn_bias),
                gq = DeviceTensor(gq), gk = DeviceTensor(gk), gv = DeviceTensor(gv),
                gb = DeviceTensor(gb)] {
    auto q = nn::load<Acc>(op, query);
    auto k = nn::load<Acc>(op, key);
    auto v = nn::load<Acc>(op, value);
    auto o = nn::load<Acc>(op, out);
    auto dO = nn::load<Acc>(op, grad_out);
    auto lse = nn::load<float>(op, logsumexp);
    std::vector<Acc> bias_v;
    if (bias_on) bias_v = load_bias<Acc>(op, attn_bias, s);
    std::vector<Acc> P(s.L * s.S), dP(s.L * s.S), Dr(s.L);
    std::vector<Acc> GQ(gq.defined() ? s.B * s.H * s.L * s.E : 0),
        GK(gk.defined() ? s.B * s.H * s.S * s.E : 0), GV(gv.defined() ? s.B * s.H * s.S * s.Ev : 0),
        GB(want_gb ? s.B * s.H * s.L * s.S : 0);
    for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
      const Acc* qp = q.data() + bh * s.L * s.E;
      const Acc* kp = k.data() + bh * s.S * s.E;
      const Acc* vp = v.data() + bh * s.S * s.Ev;
      const Acc* op_ = o.data() + bh * s.L * s.Ev;
      const Acc* dop = dO.data() + bh * s.L * s.Ev;
      // recompute P = exp(scale * Q K^T + bias - lse)
      masked_scores(op, s, sc, is_causal, q.data(), k.data(), bias_v, bh, P.data());
      for (int64_t i = 0; i < s.L; ++i) {
        Acc* row = P.data() + i * s.S;
        const float l = lse.data()[bh * s.L + i];
        if (std::isinf(l) && l < 0) {
          std::fill(row, row + s.S, Acc(0));
        } else {
          nn::exp_shifted(row, static_cast<Acc>(l), row, s.S);
        }
        // D_i = sum_j dO_i . O_i
        Dr[i] = nn::lane_dot(dop + i * s.Ev, op_ + i * s.Ev, s.Ev);
      }
      if (!GV.empty())  // dV = P^T dO
        nn::gemm<Acc>(op, Mat<Acc>{P.data(), s.S, s.L, 1, s.S}, Mat<Acc>{dop, s.L, s.Ev, s.Ev, 1},
                      Acc(1), Acc(0), GV.data() + bh * s.S * s.Ev, s.Ev);
      // dP = dO V^T; dS = P * (dP - D)
      nn::gemm<Acc>(op, Mat<Acc>{dop, s.L, s.Ev, s.Ev, 1}, Mat<Acc>{vp, s.Ev, s.S, 1, s.Ev},
                    Acc(1), Acc(0), dP.data(), s.S);
      for (int64_t i = 0; i < s.L; ++i)
        for (int64_t j = 0; j < s.S; ++j) {
          const int64_t ij = i * s.S + j;
          dP[ij] = P[ij] * (dP[ij] - Dr[i]);
        }
      if (!GB.empty()) std::copy(dP.begin(), dP.end(), GB.begin() + bh * s.L * s.S);
      if (!GQ.empty())  // dQ = scale * dS K
        nn::gemm<Acc>(op, Mat<Acc>{dP.data(), s.L, s.S, s.S, 1}, Mat<Acc>{kp, s.S, s.E, s.E, 1},
                      static_cast<Acc>(sc), Acc(0), GQ.data() + bh * s.L * s.E, s.E);
      if (!GK.empty())  // dK = scale * dS^T Q
        nn::gemm<Acc>(op, Mat<Acc>{dP.data(), s.S, s.L, 1, s.S}, Mat<Acc>{qp, s.L, s.E, s.E, 1},
                      static_cast<Acc>(sc), Acc(0), GK.data() + bh * s.S * s.E, s.E);
    }
    if (gq.defined()) nn::store<Acc>(op, GQ.data(), gq);
    if (gk.defined()) nn::store<Acc>(op, GK.data(), gk);
    if (gv.defined()) nn::store<Acc>(op, GV.data(), gv);
    if (want_gb) {
      // a broadcast bias gets the sum of dS over its broadcast dims
      int64_t bsz[4] = {1, 1, 1, 1};
      const int64_t off = 4 - attn_bias.dim();
      for (int64_t d = 0; d < attn_bias.dim(); ++d) bsz[off + d] = attn_bias.size(d);
      const int64_t full[4] = {s.B, s.H, s.L, s.S};
      int64_t bst[4];
      bst[3] = 1;
      for (int d = 2; d >= 0; --d) bst[d] = bst[d + 1] * bsz[d + 1];
      std::vector<Acc> red(static_cast<size_t>(attn_bias.numel()), Acc(0));
      int64_t n = 0;
      for (int64_t a = 0; a < full[0]; ++a)
        for (int64_t b = 0; b < full[1]; ++b)
          for (int64_t c = 0; c < full[2]; ++c)
            for (int64_t d = 0; d < full[3]; ++d, ++n) {
              const int64_t r = (bsz[0] == 1 ? 0 : a) * bst[0] + (bsz[1] == 1 ? 0 : b) * bst[1] +
                                (bsz[2] == 1 ? 0 : c) * bst[2] + (bsz[3] == 1 ? 0 : d) * bst[3];
              red[r] += GB[n];
            }
      nn::store<Acc>(op, red.data(), gb);
    }
    });
  });
  return {gq, gk, gv, gb};
}

}  // namespace acme::kernels
