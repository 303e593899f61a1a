// acme whole-sequence recurrent layers: one LSTM, GRU or Elman RNN (tanh / relu)
// layer, one direction, over all time steps in a single device launch, and its
// backward in another.
//
// PyTorch's nn.LSTM / nn.GRU / nn.RNN on a PrivateUse1 device run aten::lstm.input /
// gru.input / rnn_tanh.input / rnn_relu.input as a composite: per time step a
// matmul, an add and a fused cell op (nn.RNN: an add and the activation), each a
// host launch (a 9-step 2-layer LSTM step is hundreds of launches, and on acme
// every one crosses the stream queue). CUDA avoids this with cuDNN's
// whole-sequence kernel; acme does the same here. rnn_sequence_glue.cpp routes
// those ops to these (and their backward ops) when it can.
//
// Layout: input [T, B, I] (time major), hx / cx [B, H], w_ih [G*H, I],
// w_hh [G*H, H], biases [G*H]; G = 4 (LSTM gates i, f, g, o), 3 (GRU r, z, n) or
// 1 (RNN), PyTorch's order. `reverse` runs time backwards (the second direction of
// a bidirectional layer): output[t] is then the state after steps T-1 .. t.
// Saved for backward (time-indexed like the output):
//   LSTM workspace [T, B, 4H]: the activated gates i, f, g, o; cell_states [T, B, H]
//   GRU  workspace [T, B, 4H]: r, z, n and hn + b_hn (the hidden n-gate before r
//   scales it), the CUDA cell's workspace without the saved hx (output has it)
//   RNN  nothing but the output: h = tanh(a) or relu(a), and the derivative of
//   either is a function of h (1 - h^2; 0 where h <= 0, else 1, as PyTorch's
//   threshold_backward takes it)
// The input projection of every step is one GEMM over the whole sequence; each
// step then adds h_{t-1} W_hh^T (a GEMM of B rows) and the gate math. Computed in
// float (double for float64); the device part works on dense arrays.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/args.h"
#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "math/gemm.h"
#include "math/vec_math.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// In-place activations of n values. float32 uses the vector unit's math (the
// same functions acme's sigmoid / tanh kernels use); other types a scalar loop.
template <class Acc>
void sigmoid_inplace(Acc* p, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (auto fn = vec::unary_f32()) {
      fn(vec::Unary::Sigmoid, p, p, n, 0.f, 0.f);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) p[i] = Acc(1) / (Acc(1) + std::exp(-p[i]));
}

template <class Acc>
void tanh_inplace(Acc* p, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (auto fn = vec::unary_f32()) {
      fn(vec::Unary::Tanh, p, p, n, 0.f, 0.f);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) p[i] = std::tanh(p[i]);
}

// max(x, 0) in place (NaN stays NaN, as PyTorch's relu). float32 uses the
// vector unit's, as acme's relu kernel does.
template <class Acc>
void relu_inplace(Acc* p, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (auto fn = vec::unary_f32()) {
      fn(vec::Unary::Relu, p, p, n, 0.f, 0.f);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] < Acc(0) ? Acc(0) : p[i];
}

// Row-major dense matrix views for nn::gemm.
template <class Acc>
nn::Mat<Acc> rows(const Acc* p, int64_t r, int64_t c) {
  return {p, r, c, c, 1};
}
// The transpose of a dense r x c matrix, as a c x r view.
template <class Acc>
nn::Mat<Acc> transposed(const Acc* p, int64_t r, int64_t c) {
  return {p, c, r, 1, c};
}

// Shapes of a layer call; returns {T, B, I, H}.
struct Dims {
  int64_t T, B, I, H;
};

Dims check_layer(const char* op, int64_t G, const at::Tensor& input, const at::Tensor& hx,
                 const at::Tensor& w_ih, const at::Tensor& w_hh, const at::Tensor& b_ih,
                 const at::Tensor& b_hh) {
  FL_CHECK_T(input.dim() == 3, op, input, "expected input of shape [T, B, I], got ", input.sizes());
  FL_CHECK_T(hx.dim() == 2, op, hx, "expected hx of shape [B, H], got ", hx.sizes());
  const int64_t T = input.size(0), B = input.size(1), I = input.size(2), H = hx.size(1);
  FL_CHECK_T(hx.size(0) == B, op, hx, "expected hx of shape [", B, ", H], got ", hx.sizes());
  FL_CHECK_T(w_ih.dim() == 2 && w_ih.size(0) == G * H && w_ih.size(1) == I, op, w_ih,
               "expected w_ih of shape [", G * H, ", ", I, "], got ", w_ih.sizes());
  FL_CHECK_T(w_hh.dim() == 2 && w_hh.size(0) == G * H && w_hh.size(1) == H, op, w_hh,
               "expected w_hh of shape [", G * H, ", ", H, "], got ", w_hh.sizes());
  FL_CHECK(b_ih.defined() == b_hh.defined(), op, "b_ih and b_hh must both be given or both be None");
  for (const at::Tensor* b : {&b_ih, &b_hh})
    if (b->defined())
      FL_CHECK_T(b->dim() == 1 && b->size(0) == G * H, op, *b, "expected a bias of shape [",
                   G * H, "], got ", b->sizes());
  for (const at::Tensor* t : {&input, &hx, &w_ih, &w_hh, &b_ih, &b_hh})
    if (t->defined())
      FL_CHECK_T(t->scalar_type() == input.scalar_type(), op, *t,
                   "every tensor must have the input's dtype ", input.scalar_type());
  return {T, B, I, H};
}

void check_same(const char* op, const at::Tensor& t, const char* name, c10::IntArrayRef shape,
                c10::ScalarType st) {
  FL_CHECK_T(t.sizes().equals(shape) && t.scalar_type() == st, op, t, "expected ", name,
               " of shape ", shape, " and dtype ", st, ", got ", t.sizes(), " ", t.scalar_type());
}

// Time index of processing step s (reverse layers run from the last step).
inline int64_t time_of(int64_t s, int64_t T, bool reverse) { return reverse ? T - 1 - s : s; }

// Column sums of a dense [N, C] array into `dst` (a [C] tensor).
template <class Acc>
void column_sums(const char* op, const Acc* src, int64_t N, int64_t C, const DeviceTensor& dst) {
  std::vector<Acc> s(static_cast<size_t>(C), Acc(0));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) s[c] += src[n * C + c];
  nn::store<Acc>(op, s.data(), dst);
}

// grad_w_hh = sum over steps of dG[t]^T h_prev(t): h_prev is h0 for the first
// step processed and output[t -+ 1] for the others, so two GEMMs cover it (the
// output rows shifted by one step, then h0's step).
template <class Acc>
void grad_recurrent_weight(const char* op, const Acc* dg, const Acc* y, const Acc* h0, int64_t T,
                           int64_t B, int64_t G, int64_t H, bool reverse, Acc* out) {
  const int64_t rows_shifted = (T - 1) * B;
  // forward: steps 1..T-1 take output 0..T-2; reverse: steps 0..T-2 take output 1..T-1
  const Acc* dg_shifted = reverse ? dg : dg + B * G;
  const Acc* y_shifted = reverse ? y + B * H : y;
  nn::gemm<Acc>(op, transposed(dg_shifted, std::max<int64_t>(rows_shifted, 0), G),
                rows(y_shifted, std::max<int64_t>(rows_shifted, 0), H), Acc(1), Acc(0), out, H);
  if (T == 0) return;
  const Acc* dg_first = dg + time_of(0, T, reverse) * B * G;
  nn::gemm<Acc>(op, transposed(dg_first, B, G), rows(h0, B, H), Acc(1), Acc(1), out, H);
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_lstm_layer(
    const at::Tensor& input, const at::Tensor& hx, const at::Tensor& cx, const at::Tensor& w_ih,
    const at::Tensor& w_hh, const ::std::optional<at::Tensor>& b_ih_,
    const ::std::optional<at::Tensor>& b_hh_, bool reverse) {
  const char* op = "lstm_layer";
  const at::Tensor& b_ih = opt(b_ih_);
  const at::Tensor& b_hh = opt(b_hh_);
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 4, input, hx, w_ih, w_hh, b_ih, b_hh);
  check_same(op, cx, "cx", hx.sizes(), input.scalar_type());
  const auto opts = input.options();
  at::Tensor output = at::empty({T, B, H}, opts);
  at::Tensor hy = at::empty({B, H}, opts);
  at::Tensor cy = at::empty({B, H}, opts);
  at::Tensor workspace = at::empty({T, B, 4 * H}, opts);
  at::Tensor cell_states = at::empty({T, B, H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(output, [op, T, B, I, H, reverse, input = DeviceTensor(input), hx = DeviceTensor(hx),
                    cx = DeviceTensor(cx), w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh),
                    b_ih = DeviceTensor(b_ih), b_hh = DeviceTensor(b_hh),
                    output = DeviceTensor(output), hy = DeviceTensor(hy), cy = DeviceTensor(cy),
                    workspace = DeviceTensor(workspace), cell_states = DeviceTensor(cell_states)] {
      const int64_t G = 4 * H;
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto c0 = nn::load<Acc>(op, cx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      nn::OutBuf<Acc> y(output), ws(workspace), cs(cell_states), hyb(hy), cyb(cy);
      // Every step's input projection at once; the workspace holds the gates'
      // pre-activations until each step turns its slice into activations.
      Acc* gates = ws.data();
      nn::gemm<Acc>(op, rows(x.data(), T * B, I), transposed(wi.data(), G, I), Acc(1), Acc(0),
                    gates, G);
      if (b_ih.defined()) {
        auto bi = nn::load<Acc>(op, b_ih);
        auto bh = nn::load<Acc>(op, b_hh);
        std::vector<Acc> bias(static_cast<size_t>(G));
        for (int64_t g = 0; g < G; ++g) bias[g] = bi.data()[g] + bh.data()[g];
        for (int64_t r = 0; r < T * B; ++r)
          for (int64_t g = 0; g < G; ++g) gates[r * G + g] += bias[g];
      }
      std::vector<Acc> tc(static_cast<size_t>(H));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = time_of(s, T, reverse);
        const int64_t tp = s == 0 ? -1 : time_of(s - 1, T, reverse);
        const Acc* hprev = s == 0 ? h0.data() : y.data() + tp * B * H;
        const Acc* cprev = s == 0 ? c0.data() : cs.data() + tp * B * H;
        Acc* g = gates + t * B * G;
        nn::gemm<Acc>(op, rows(hprev, B, H), transposed(wh.data(), G, H), Acc(1), Acc(1), g, G);
        for (int64_t b = 0; b < B; ++b) {
          Acc* gr = g + b * G;
          sigmoid_inplace(gr, 2 * H);  // i, f
          tanh_inplace(gr + 2 * H, H);  // g
          sigmoid_inplace(gr + 3 * H, H);  // o
          Acc* c = cs.data() + (t * B + b) * H;
          for (int64_t j = 0; j < H; ++j) c[j] = gr[H + j] * cprev[b * H + j] + gr[j] * gr[2 * H + j];
          std::copy(c, c + H, tc.data());
          tanh_inplace(tc.data(), H);
          Acc* h = y.data() + (t * B + b) * H;
          for (int64_t j = 0; j < H; ++j) h[j] = gr[3 * H + j] * tc[j];
        }
      }
      const int64_t last = time_of(T - 1, T, reverse);
      std::copy(T ? y.data() + last * B * H : h0.data(), (T ? y.data() + last * B * H : h0.data()) + B * H,
                hyb.data());
      std::copy(T ? cs.data() + last * B * H : c0.data(), (T ? cs.data() + last * B * H : c0.data()) + B * H,
                cyb.data());
      y.finish(op);
      ws.finish(op);
      cs.finish(op);
      hyb.finish(op);
      cyb.finish(op);
    });
  });
  return {output, hy, cy, workspace, cell_states};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
k_lstm_layer_backward(const at::Tensor& grad_output, const at::Tensor& grad_hy,
                      const at::Tensor& grad_cy, const at::Tensor& input, const at::Tensor& hx,
                      const at::Tensor& cx, const at::Tensor& w_ih, const at::Tensor& w_hh,
                      const at::Tensor& output, const at::Tensor& workspace,
                      const at::Tensor& cell_states, bool reverse) {
  const char* op = "lstm_layer_backward";
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 4, input, hx, w_ih, w_hh, at::Tensor(), at::Tensor());
  const auto st = input.scalar_type();
  check_same(op, cx, "cx", {B, H}, st);
  check_same(op, grad_hy, "grad_hy", {B, H}, st);
  check_same(op, grad_cy, "grad_cy", {B, H}, st);
  check_same(op, grad_output, "grad_output", {T, B, H}, st);
  check_same(op, output, "output", {T, B, H}, st);
  check_same(op, cell_states, "cell_states", {T, B, H}, st);
  check_same(op, workspace, "workspace", {T, B, 4 * H}, st);
  const auto opts = input.options();
  at::Tensor grad_input = at::empty({T, B, I}, opts);
  at::Tensor grad_hx = at::empty({B, H}, opts);
  at::Tensor grad_cx = at::empty({B, H}, opts);
  at::Tensor grad_w_ih = at::empty({4 * H, I}, opts);
  at::Tensor grad_w_hh = at::empty({4 * H, H}, opts);
  at::Tensor grad_b_ih = at::empty({4 * H}, opts);
  at::Tensor grad_b_hh = at::empty({4 * H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_input, [op, T, B, I, H, reverse, grad_output = DeviceTensor(grad_output),
                        grad_hy = DeviceTensor(grad_hy), grad_cy = DeviceTensor(grad_cy),
                        input = DeviceTensor(input), hx = DeviceTensor(hx), cx = DeviceTensor(cx),
                        w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh),
                        output = DeviceTensor(output), workspace = DeviceTensor(workspace),
                        cell_states = DeviceTensor(cell_states), grad_input = DeviceTensor(grad_input),
                        grad_hx = DeviceTensor(grad_hx), grad_cx = DeviceTensor(grad_cx),
                        grad_w_ih = DeviceTensor(grad_w_ih), grad_w_hh = DeviceTensor(grad_w_hh),
                        grad_b_ih = DeviceTensor(grad_b_ih), grad_b_hh = DeviceTensor(grad_b_hh)] {
      const int64_t G = 4 * H;
      auto gy = nn::load<Acc>(op, grad_output);
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto c0 = nn::load<Acc>(op, cx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      auto y = nn::load<Acc>(op, output);
      auto ws = nn::load<Acc>(op, workspace);
      auto cs = nn::load<Acc>(op, cell_states);
      auto ghy = nn::load<Acc>(op, grad_hy);
      auto gcy = nn::load<Acc>(op, grad_cy);
      // gradients of the gates' pre-activations, every step
      std::vector<Acc> dg(static_cast<size_t>(T * B * G));
      // running gradients of h and c reaching the step being processed
      std::vector<Acc> dh(ghy.data(), ghy.data() + B * H), dc(gcy.data(), gcy.data() + B * H);
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        const Acc* cprev = s == 0 ? c0.data() : cs.data() + time_of(s - 1, T, reverse) * B * H;
        for (int64_t b = 0; b < B; ++b) {
          const Acc* w = ws.data() + (t * B + b) * G;
          const Acc* c = cs.data() + (t * B + b) * H;
          const Acc* gout = gy.data() + (t * B + b) * H;
          Acc* d = dg.data() + (t * B + b) * G;
          for (int64_t j = 0; j < H; ++j) {
            const Acc i_ = w[j], f_ = w[H + j], g_ = w[2 * H + j], o_ = w[3 * H + j];
            const Acc tc = std::tanh(c[j]);
            const Acc dhv = gout[j] + dh[b * H + j];
            // the gradient reaching c: through h = o * tanh(c) and from the next step
            const Acc dcv = dc[b * H + j] + dhv * o_ * (Acc(1) - tc * tc);
            d[j] = dcv * g_ * i_ * (Acc(1) - i_);
            d[H + j] = dcv * cprev[b * H + j] * f_ * (Acc(1) - f_);
            d[2 * H + j] = dcv * i_ * (Acc(1) - g_ * g_);
            d[3 * H + j] = dhv * tc * o_ * (Acc(1) - o_);
            dc[b * H + j] = dcv * f_;
          }
        }
        // h_prev feeds the gates through W_hh
        nn::gemm<Acc>(op, rows(dg.data() + t * B * G, B, G), rows(wh.data(), G, H), Acc(1), Acc(0),
                      dh.data(), H);
      }
      nn::OutBuf<Acc> gi(grad_input), gwi(grad_w_ih), gwh(grad_w_hh);
      nn::gemm<Acc>(op, rows(dg.data(), T * B, G), rows(wi.data(), G, I), Acc(1), Acc(0), gi.data(), I);
      nn::gemm<Acc>(op, transposed(dg.data(), T * B, G), rows(x.data(), T * B, I), Acc(1), Acc(0),
                    gwi.data(), I);
      grad_recurrent_weight<Acc>(op, dg.data(), y.data(), h0.data(), T, B, G, H, reverse, gwh.data());
      gi.finish(op);
      gwi.finish(op);
      gwh.finish(op);
      nn::store<Acc>(op, dh.data(), grad_hx);
      nn::store<Acc>(op, dc.data(), grad_cx);
      column_sums<Acc>(op, dg.data(), T * B, G, grad_b_ih);
      column_sums<Acc>(op, dg.data(), T * B, G, grad_b_hh);
    });
  });
  return {grad_input, grad_hx, grad_cx, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_gru_layer(
    const at::Tensor& input, const at::Tensor& hx, const at::Tensor& w_ih, const at::Tensor& w_hh,
    const ::std::optional<at::Tensor>& b_ih_, const ::std::optional<at::Tensor>& b_hh_, bool reverse) {
  const char* op = "gru_layer";
  const at::Tensor& b_ih = opt(b_ih_);
  const at::Tensor& b_hh = opt(b_hh_);
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 3, input, hx, w_ih, w_hh, b_ih, b_hh);
  const auto opts = input.options();
  at::Tensor output = at::empty({T, B, H}, opts);
  at::Tensor hy = at::empty({B, H}, opts);
  at::Tensor workspace = at::empty({T, B, 4 * H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(output, [op, T, B, I, H, reverse, input = DeviceTensor(input), hx = DeviceTensor(hx),
                    w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh), b_ih = DeviceTensor(b_ih),
                    b_hh = DeviceTensor(b_hh), output = DeviceTensor(output), hy = DeviceTensor(hy),
                    workspace = DeviceTensor(workspace)] {
      const int64_t G = 3 * H;
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      std::vector<Acc> bi(static_cast<size_t>(G), Acc(0)), bh(static_cast<size_t>(G), Acc(0));
      if (b_ih.defined()) {
        auto lbi = nn::load<Acc>(op, b_ih);
        auto lbh = nn::load<Acc>(op, b_hh);
        std::copy(lbi.data(), lbi.data() + G, bi.begin());
        std::copy(lbh.data(), lbh.data() + G, bh.begin());
      }
      nn::OutBuf<Acc> y(output), ws(workspace), hyb(hy);
      // every step's input projection (+ b_ih) at once
      std::vector<Acc> gx(static_cast<size_t>(T * B * G));
      nn::gemm<Acc>(op, rows(x.data(), T * B, I), transposed(wi.data(), G, I), Acc(1), Acc(0),
                    gx.data(), G);
      for (int64_t r = 0; r < T * B; ++r)
        for (int64_t g = 0; g < G; ++g) gx[r * G + g] += bi[g];
      std::vector<Acc> gh(static_cast<size_t>(B * G));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = time_of(s, T, reverse);
        const Acc* hprev = s == 0 ? h0.data() : y.data() + time_of(s - 1, T, reverse) * B * H;
        for (int64_t b = 0; b < B; ++b) std::copy(bh.begin(), bh.end(), gh.begin() + b * G);
        nn::gemm<Acc>(op, rows(hprev, B, H), transposed(wh.data(), G, H), Acc(1), Acc(1), gh.data(), G);
        for (int64_t b = 0; b < B; ++b) {
          const Acc* a = gx.data() + (t * B + b) * G;
          const Acc* c = gh.data() + b * G;
          Acc* w = ws.data() + (t * B + b) * 4 * H;
          for (int64_t j = 0; j < 2 * H; ++j) w[j] = a[j] + c[j];
          sigmoid_inplace(w, 2 * H);  // r, z
          for (int64_t j = 0; j < H; ++j) {
            w[3 * H + j] = c[2 * H + j];  // hn + b_hn
            w[2 * H + j] = a[2 * H + j] + w[j] * c[2 * H + j];
          }
          tanh_inplace(w + 2 * H, H);  // n
          Acc* h = y.data() + (t * B + b) * H;
          const Acc* hp = hprev + b * H;
          for (int64_t j = 0; j < H; ++j) h[j] = w[2 * H + j] + w[H + j] * (hp[j] - w[2 * H + j]);
        }
      }
      const Acc* last = T ? y.data() + time_of(T - 1, T, reverse) * B * H : h0.data();
      std::copy(last, last + B * H, hyb.data());
      y.finish(op);
      ws.finish(op);
      hyb.finish(op);
    });
  });
  return {output, hy, workspace};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
k_gru_layer_backward(const at::Tensor& grad_output, const at::Tensor& grad_hy,
                     const at::Tensor& input, const at::Tensor& hx, const at::Tensor& w_ih,
                     const at::Tensor& w_hh, const at::Tensor& output, const at::Tensor& workspace,
                     bool reverse) {
  const char* op = "gru_layer_backward";
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 3, input, hx, w_ih, w_hh, at::Tensor(), at::Tensor());
  const auto st = input.scalar_type();
  check_same(op, grad_hy, "grad_hy", {B, H}, st);
  check_same(op, grad_output, "grad_output", {T, B, H}, st);
  check_same(op, output, "output", {T, B, H}, st);
  check_same(op, workspace, "workspace", {T, B, 4 * H}, st);
  const auto opts = input.options();
  at::Tensor grad_input = at::empty({T, B, I}, opts);
  at::Tensor grad_hx = at::empty({B, H}, opts);
  at::Tensor grad_w_ih = at::empty({3 * H, I}, opts);
  at::Tensor grad_w_hh = at::empty({3 * H, H}, opts);
  at::Tensor grad_b_ih = at::empty({3 * H}, opts);
  at::Tensor grad_b_hh = at::empty({3 * H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_input, [op, T, B, I, H, reverse, grad_output = DeviceTensor(grad_output),
                        grad_hy = DeviceTensor(grad_hy), input = DeviceTensor(input),
                        hx = DeviceTensor(hx), w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh),
                        output = DeviceTensor(output), workspace = DeviceTensor(workspace),
                        grad_input = DeviceTensor(grad_input), grad_hx = DeviceTensor(grad_hx),
                        grad_w_ih = DeviceTensor(grad_w_ih), grad_w_hh = DeviceTensor(grad_w_hh),
                        grad_b_ih = DeviceTensor(grad_b_ih), grad_b_hh = DeviceTensor(grad_b_hh)] {
      const int64_t G = 3 * H;
      auto gy = nn::load<Acc>(op, grad_output);
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      auto y = nn::load<Acc>(op, output);
      auto ws = nn::load<Acc>(op, workspace);
      auto ghy = nn::load<Acc>(op, grad_hy);
      // gradients of the input-side and hidden-side gate pre-activations
      std::vector<Acc> dgx(static_cast<size_t>(T * B * G)), dgh(static_cast<size_t>(T * B * G));
      std::vector<Acc> dh(ghy.data(), ghy.data() + B * H), dh_prev(static_cast<size_t>(B * H));
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        const Acc* hprev = s == 0 ? h0.data() : y.data() + time_of(s - 1, T, reverse) * B * H;
        for (int64_t b = 0; b < B; ++b) {
          const Acc* w = ws.data() + (t * B + b) * 4 * H;
          const Acc* gout = gy.data() + (t * B + b) * H;
          Acc* a = dgx.data() + (t * B + b) * G;
          Acc* c = dgh.data() + (t * B + b) * G;
          for (int64_t j = 0; j < H; ++j) {
            const Acc r = w[j], z = w[H + j], n = w[2 * H + j], hn = w[3 * H + j];
            const Acc g = gout[j] + dh[b * H + j];
            const Acc hp = hprev[b * H + j];
            const Acc dn = g * (Acc(1) - z) * (Acc(1) - n * n);  // of n's pre-activation
            const Acc dz = g * (hp - n) * z * (Acc(1) - z);
            const Acc dr = dn * hn * r * (Acc(1) - r);
            a[j] = dr;
            a[H + j] = dz;
            a[2 * H + j] = dn;
            c[j] = dr;
            c[H + j] = dz;
            c[2 * H + j] = dn * r;
            dh_prev[b * H + j] = g * z;
          }
        }
        // h_prev also feeds the gates through W_hh
        nn::gemm<Acc>(op, rows(dgh.data() + t * B * G, B, G), rows(wh.data(), G, H), Acc(1), Acc(1),
                      dh_prev.data(), H);
        dh.swap(dh_prev);
      }
      nn::OutBuf<Acc> gi(grad_input), gwi(grad_w_ih), gwh(grad_w_hh);
      nn::gemm<Acc>(op, rows(dgx.data(), T * B, G), rows(wi.data(), G, I), Acc(1), Acc(0), gi.data(), I);
      nn::gemm<Acc>(op, transposed(dgx.data(), T * B, G), rows(x.data(), T * B, I), Acc(1), Acc(0),
                    gwi.data(), I);
      grad_recurrent_weight<Acc>(op, dgh.data(), y.data(), h0.data(), T, B, G, H, reverse, gwh.data());
      gi.finish(op);
      gwi.finish(op);
      gwh.finish(op);
      nn::store<Acc>(op, dh.data(), grad_hx);
      column_sums<Acc>(op, dgx.data(), T * B, G, grad_b_ih);
      column_sums<Acc>(op, dgh.data(), T * B, G, grad_b_hh);
    });
  });
  return {grad_input, grad_hx, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh};
}

::std::tuple<at::Tensor, at::Tensor> k_rnn_layer(const at::Tensor& input, const at::Tensor& hx,
                                                const at::Tensor& w_ih, const at::Tensor& w_hh,
                                                const ::std::optional<at::Tensor>& b_ih_,
                                                const ::std::optional<at::Tensor>& b_hh_,
                                                bool reverse, bool relu) {
  const char* op = "rnn_layer";
  const at::Tensor& b_ih = opt(b_ih_);
  const at::Tensor& b_hh = opt(b_hh_);
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 1, input, hx, w_ih, w_hh, b_ih, b_hh);
  const auto opts = input.options();
  at::Tensor output = at::empty({T, B, H}, opts);
  at::Tensor hy = at::empty({B, H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(output, [op, T, B, I, H, reverse, relu, input = DeviceTensor(input), hx = DeviceTensor(hx),
                    w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh), b_ih = DeviceTensor(b_ih),
                    b_hh = DeviceTensor(b_hh), output = DeviceTensor(output), hy = DeviceTensor(hy)] {
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      nn::OutBuf<Acc> y(output), hyb(hy);
      // Every step's input projection (+ both biases) at once, into the output:
      // each step then adds h_{t-1} W_hh^T to its slice and activates it in place.
      Acc* a = y.data();
      nn::gemm<Acc>(op, rows(x.data(), T * B, I), transposed(wi.data(), H, I), Acc(1), Acc(0), a, H);
      if (b_ih.defined()) {
        auto bi = nn::load<Acc>(op, b_ih);
        auto bh = nn::load<Acc>(op, b_hh);
        std::vector<Acc> bias(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) bias[j] = bi.data()[j] + bh.data()[j];
        for (int64_t r = 0; r < T * B; ++r)
          for (int64_t j = 0; j < H; ++j) a[r * H + j] += bias[j];
      }
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = time_of(s, T, reverse);
        const Acc* hprev = s == 0 ? h0.data() : y.data() + time_of(s - 1, T, reverse) * B * H;
        Acc* h = a + t * B * H;
        nn::gemm<Acc>(op, rows(hprev, B, H), transposed(wh.data(), H, H), Acc(1), Acc(1), h, H);
        if (relu)
          relu_inplace(h, B * H);
        else
          tanh_inplace(h, B * H);
      }
      const Acc* last = T ? y.data() + time_of(T - 1, T, reverse) * B * H : h0.data();
      std::copy(last, last + B * H, hyb.data());
      y.finish(op);
      hyb.finish(op);
    });
  });
  return {output, hy};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
k_rnn_layer_backward(const at::Tensor& grad_output, const at::Tensor& grad_hy,
                     const at::Tensor& input, const at::Tensor& hx, const at::Tensor& w_ih,
                     const at::Tensor& w_hh, const at::Tensor& output, bool reverse, bool relu) {
  const char* op = "rnn_layer_backward";
  nn::check_float(op, input);
  const auto [T, B, I, H] = check_layer(op, 1, input, hx, w_ih, w_hh, at::Tensor(), at::Tensor());
  const auto st = input.scalar_type();
  check_same(op, grad_hy, "grad_hy", {B, H}, st);
  check_same(op, grad_output, "grad_output", {T, B, H}, st);
  check_same(op, output, "output", {T, B, H}, st);
  const auto opts = input.options();
  at::Tensor grad_input = at::empty({T, B, I}, opts);
  at::Tensor grad_hx = at::empty({B, H}, opts);
  at::Tensor grad_w_ih = at::empty({H, I}, opts);
  at::Tensor grad_w_hh = at::empty({H, H}, opts);
  at::Tensor grad_b_ih = at::empty({H}, opts);
  at::Tensor grad_b_hh = at::empty({H}, opts);
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_input, [op, T, B, I, H, reverse, relu, grad_output = DeviceTensor(grad_output),
                        grad_hy = DeviceTensor(grad_hy), input = DeviceTensor(input),
                        hx = DeviceTensor(hx), w_ih = DeviceTensor(w_ih), w_hh = DeviceTensor(w_hh),
                        output = DeviceTensor(output), grad_input = DeviceTensor(grad_input),
                        grad_hx = DeviceTensor(grad_hx), grad_w_ih = DeviceTensor(grad_w_ih),
                        grad_w_hh = DeviceTensor(grad_w_hh), grad_b_ih = DeviceTensor(grad_b_ih),
                        grad_b_hh = DeviceTensor(grad_b_hh)] {
      auto gy = nn::load<Acc>(op, grad_output);
      auto x = nn::load<Acc>(op, input);
      auto h0 = nn::load<Acc>(op, hx);
      auto wi = nn::load<Acc>(op, w_ih);
      auto wh = nn::load<Acc>(op, w_hh);
      auto y = nn::load<Acc>(op, output);
      auto ghy = nn::load<Acc>(op, grad_hy);
      // gradients of the pre-activations, every step
      std::vector<Acc> da(static_cast<size_t>(T * B * H));
      // the running gradient of h reaching the step being processed
      std::vector<Acc> dh(ghy.data(), ghy.data() + B * H);
      for (int64_t s = T - 1; s >= 0; --s) {
        const int64_t t = time_of(s, T, reverse);
        const Acc* h = y.data() + t * B * H;
        const Acc* gout = gy.data() + t * B * H;
        Acc* d = da.data() + t * B * H;
        if (relu)
          for (int64_t k = 0; k < B * H; ++k) d[k] = h[k] <= Acc(0) ? Acc(0) : gout[k] + dh[k];
        else
          for (int64_t k = 0; k < B * H; ++k) d[k] = (gout[k] + dh[k]) * (Acc(1) - h[k] * h[k]);
        // h_prev feeds the step through W_hh
        nn::gemm<Acc>(op, rows(d, B, H), rows(wh.data(), H, H), Acc(1), Acc(0), dh.data(), H);
      }
      nn::OutBuf<Acc> gi(grad_input), gwi(grad_w_ih), gwh(grad_w_hh);
      nn::gemm<Acc>(op, rows(da.data(), T * B, H), rows(wi.data(), H, I), Acc(1), Acc(0), gi.data(), I);
      nn::gemm<Acc>(op, transposed(da.data(), T * B, H), rows(x.data(), T * B, I), Acc(1), Acc(0),
                    gwi.data(), I);
      grad_recurrent_weight<Acc>(op, da.data(), y.data(), h0.data(), T, B, H, H, reverse, gwh.data());
      gi.finish(op);
      gwi.finish(op);
      gwh.finish(op);
      nn::store<Acc>(op, dh.data(), grad_hx);
      column_sums<Acc>(op, da.data(), T * B, H, grad_b_ih);
      column_sums<Acc>(op, da.data(), T * B, H, grad_b_hh);
    });
  });
  return {grad_input, grad_hx, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh};
}

}  // namespace acme::kernels
