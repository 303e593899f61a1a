// acme fused RNN cells: _thnn_fused_lstm_cell, _thnn_fused_gru_cell and their
// backward kernels.
//
// On a PrivateUse1 device PyTorch's nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell
// compute the gate projections themselves (input_gates = x W_ih^T,
// hidden_gates = h W_hh^T, through acme's matmul) and hand the pointwise rest
// of each time step to these ops. They have no CPU kernel, so the CPU fallback
// cannot run them: a backend must implement them to run RNNs at all.
//
// Gate order is PyTorch's: LSTM [i, f, g, o], GRU [r, z, n], each block H wide.
// The workspace (saved for backward) has the layout of PyTorch's CUDA kernels,
// so a saved tensor means the same thing on every device:
//   LSTM [N, 4H]: the activated gates i, f, g, o
//   GRU  [N, 5H]: r, z, n, hx, hn + b_hn (the hidden n-gate before r scales it)
// Inputs of any float dtype (mixed ones promote, as the CPU composition of the
// same math does) are staged as dense float (double for float64) arrays; every
// result is rounded once into the promoted dtype.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/args.h"
#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernels.h"

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

template <class Acc>
inline Acc sigmoid(Acc x) {
  return Acc(1) / (Acc(1) + std::exp(-x));
}

// Float dtype all defined tensors promote to, after checking they are float
// tensors on the device of `ref`.
c10::ScalarType float_dtype(const char* op, const at::Tensor& ref,
                            std::initializer_list<std::pair<const at::Tensor*, const char*>> args) {
  c10::ScalarType st = ref.scalar_type();
  bool first = true;
  for (auto [t, name] : args) {
    if (!t->defined()) continue;
    nn::check_float(op, *t);
    st = first ? t->scalar_type() : c10::promoteTypes(st, t->scalar_type());
    first = false;
  }
  return st;
}

void check_2d(const char* op, const at::Tensor& t, const char* name, int64_t rows, int64_t cols) {
  FL_CHECK_T(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, op, t, "expected ", name,
               " of shape [", rows, ", ", cols, "], got ", t.sizes());
}

// Shapes of a forward cell: input_gates and hidden_gates [N, factor*H],
// prev (cx or hx) [N, H], biases both given or both absent, each [factor*H].
// Returns {N, H}.
std::pair<int64_t, int64_t> check_cell(const char* op, const at::Tensor& input_gates,
                                       const at::Tensor& hidden_gates, const at::Tensor& prev,
                                       const char* prev_name, const at::Tensor& input_bias,
                                       const at::Tensor& hidden_bias, int64_t factor) {
  FL_CHECK_T(input_gates.dim() == 2, op, input_gates, "expected input_gates to be 2-D [N, ",
               factor, "*H], got shape ", input_gates.sizes());
  FL_CHECK_T(prev.dim() == 2, op, prev, "expected ", prev_name, " to be 2-D [N, H], got shape ",
               prev.sizes());
  const int64_t N = prev.size(0), H = prev.size(1);
  check_2d(op, input_gates, "input_gates", N, factor * H);
  check_2d(op, hidden_gates, "hidden_gates", N, factor * H);
  FL_CHECK(input_bias.defined() == hidden_bias.defined(), op,
             "input_bias and hidden_bias must both be given or both be None");
  if (input_bias.defined()) {
    FL_CHECK_T(input_bias.dim() == 1 && input_bias.size(0) == factor * H, op, input_bias,
                 "expected input_bias of shape [", factor * H, "], got ", input_bias.sizes());
    FL_CHECK_T(hidden_bias.dim() == 1 && hidden_bias.size(0) == factor * H, op, hidden_bias,
                 "expected hidden_bias of shape [", factor * H, "], got ", hidden_bias.sizes());
  }
  return {N, H};
}

// Column sums of a dense [N, G] array into `dst` (a [G] tensor): the bias
// gradient is the gate gradient summed over the batch.
template <class Acc>
void column_sums(const char* op, const Acc* src, int64_t N, int64_t G,
                 const DeviceTensor& dst) {
  std::vector<Acc> s(static_cast<size_t>(G), Acc(0));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) s[g] += src[n * G + g];
  nn::store<Acc>(op, s.data(), dst);
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k__thnn_fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const ::std::optional<at::Tensor>& input_bias_, const ::std::optional<at::Tensor>& hidden_bias_) {
  const char* op = "_thnn_fused_lstm_cell";
  const at::Tensor& input_bias = opt(input_bias_);
  const at::Tensor& hidden_bias = opt(hidden_bias_);
  const auto st = float_dtype(op, input_gates,
                              {{&input_gates, "input_gates"}, {&hidden_gates, "hidden_gates"},
                               {&cx, "cx"}, {&input_bias, "input_bias"},
                               {&hidden_bias, "hidden_bias"}});
  const auto [N, H] = check_cell(op, input_gates, hidden_gates, cx, "cx", input_bias, hidden_bias, 4);
  const auto opts = input_gates.options().dtype(st);
  at::Tensor hy = at::empty({N, H}, opts);
  at::Tensor cy = at::empty({N, H}, opts);
  at::Tensor workspace = at::empty({N, 4 * H}, opts);
  if (N * H == 0) return {hy, cy, workspace};
  nn::dispatch_compute(op, hy, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(hy, [op, N, H, input_gates = DeviceTensor(input_gates),
                hidden_gates = DeviceTensor(hidden_gates), cx = DeviceTensor(cx),
                input_bias = DeviceTensor(input_bias),
                hidden_bias = DeviceTensor(hidden_bias), hy = DeviceTensor(hy),
                cy = DeviceTensor(cy), workspace = DeviceTensor(workspace)] {
    auto ig = nn::load<Acc>(op, input_gates);
    auto hg = nn::load<Acc>(op, hidden_gates);
    auto c0 = nn::load<Acc>(op, cx);
    // one bias vector: b_ih + b_hh (zeros without bias)
    std::vector<Acc> bias(static_cast<size_t>(4 * H), Acc(0));
    if (input_bias.defined()) {
      auto bi = nn::load<Acc>(op, input_bias);
      auto bh = nn::load<Acc>(op, hidden_bias);
      for (int64_t g = 0; g < 4 * H; ++g) bias[g] = bi.data()[g] + bh.data()[g];
    }
    nn::OutBuf<Acc> hb(hy), cb(cy), wb(workspace);
    for (int64_t n = 0; n < N; ++n) {
      const Acc* x = ig.data() + n * 4 * H;
      const Acc* h = hg.data() + n * 4 * H;
      Acc* w = wb.data() + n * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const Acc i_ = sigmoid(x[j] + h[j] + bias[j]);
        const Acc f_ = sigmoid(x[H + j] + h[H + j] + bias[H + j]);
        const Acc g_ = std::tanh(x[2 * H + j] + h[2 * H + j] + bias[2 * H + j]);
        const Acc o_ = sigmoid(x[3 * H + j] + h[3 * H + j] + bias[3 * H + j]);
        const Acc c = f_ * c0.data()[n * H + j] + i_ * g_;
        cb.data()[n * H + j] = c;
        hb.data()[n * H + j] = o_ * std::tanh(c);
        w[j] = i_;
        w[H + j] = f_;
        w[2 * H + j] = g_;
        w[3 * H + j] = o_;
      }
    }
    hb.finish(op);
    cb.finish(op);
    wb.finish(op);
    });
  });
  return {hy, cy, workspace};
}

// Gradients of the LSTM cell from its saved state. grad_hy or grad_cy may be
// absent (the loss uses only one of h and c); both absent gives no gradients.
// Returns (grad_gates [N, 4H], the gradient of input_gates and of
// hidden_gates alike; grad_cx; grad_bias [4H] if has_bias).
::std::tuple<at::Tensor, at::Tensor, at::Tensor> k__thnn_fused_lstm_cell_backward_impl(
    const ::std::optional<at::Tensor>& grad_hy_, const ::std::optional<at::Tensor>& grad_cy_,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const char* op = "_thnn_fused_lstm_cell_backward_impl";
  const at::Tensor& grad_hy = opt(grad_hy_);
  const at::Tensor& grad_cy = opt(grad_cy_);
  if (!grad_hy.defined() && !grad_cy.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
  const auto st = float_dtype(op, workspace,
                              {{&grad_hy, "grad_hy"}, {&grad_cy, "grad_cy"}, {&cx, "cx"},
                               {&cy, "cy"}, {&workspace, "workspace"}});
  FL_CHECK_T(cx.dim() == 2, op, cx, "expected cx to be 2-D [N, H], got shape ", cx.sizes());
  const int64_t N = cx.size(0), H = cx.size(1);
  if (grad_hy.defined()) check_2d(op, grad_hy, "grad_hy", N, H);
  if (grad_cy.defined()) check_2d(op, grad_cy, "grad_cy", N, H);
  check_2d(op, cy, "cy", N, H);
  check_2d(op, workspace, "workspace", N, 4 * H);
  const auto opts = workspace.options().dtype(st);
  at::Tensor grad_gates = at::empty({N, 4 * H}, opts);
  at::Tensor grad_cx = at::empty({N, H}, opts);
  at::Tensor grad_bias = has_bias ? at::empty({4 * H}, opts) : at::Tensor();
  if (N * H == 0) {
    if (has_bias) grad_bias.zero_();
    return {grad_gates, grad_cx, grad_bias};
  }
  nn::dispatch_compute(op, grad_gates, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_gates, [op, N, H, has_bias, grad_hy = DeviceTensor(grad_hy),
                        grad_cy = DeviceTensor(grad_cy), cx = DeviceTensor(cx),
                        cy = DeviceTensor(cy), workspace = DeviceTensor(workspace),
                        grad_gates = DeviceTensor(grad_gates),
                        grad_cx = DeviceTensor(grad_cx),
                        grad_bias = DeviceTensor(grad_bias)] {
    nn::Dense<Acc> gh, gc;
    if (grad_hy.defined()) gh = nn::load<Acc>(op, grad_hy);
    if (grad_cy.defined()) gc = nn::load<Acc>(op, grad_cy);
    auto c0 = nn::load<Acc>(op, cx);
    auto c1 = nn::load<Acc>(op, cy);
    auto ws = nn::load<Acc>(op, workspace);
    nn::OutBuf<Acc> gg(grad_gates), gcx(grad_cx);
    for (int64_t n = 0; n < N; ++n) {
      const Acc* w = ws.data() + n * 4 * H;
      Acc* g = gg.data() + n * 4 * H;
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = n * H + j;
        const Acc i_ = w[j], f_ = w[H + j], g_ = w[2 * H + j], o_ = w[3 * H + j];
        const Acc dh = gh.data() ? gh.data()[k] : Acc(0);
        const Acc dc_out = gc.data() ? gc.data()[k] : Acc(0);
        const Acc tc = std::tanh(c1.data()[k]);
        // gradient reaching c (through h = o * tanh(c) and directly)
        const Acc dc = dh * o_ * (Acc(1) - tc * tc) + dc_out;
        g[j] = dc * g_ * i_ * (Acc(1) - i_);
        g[H + j] = dc * c0.data()[k] * f_ * (Acc(1) - f_);
        g[2 * H + j] = dc * i_ * (Acc(1) - g_ * g_);
        g[3 * H + j] = dh * tc * o_ * (Acc(1) - o_);
        gcx.data()[k] = dc * f_;
      }
    }
    if (has_bias) column_sums<Acc>(op, gg.data(), N, 4 * H, grad_bias);
    gg.finish(op);
    gcx.finish(op);
    });
  });
  return {grad_gates, grad_cx, grad_bias};
}

::std::tuple<at::Tensor, at::Tensor> k__thnn_fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const ::std::optional<at::Tensor>& input_bias_, const ::std::optional<at::Tensor>& hidden_bias_) {
  const char* op = "_thnn_fused_gru_cell";
  const at::Tensor& input_bias = opt(input_bias_);
  const at::Tensor& hidden_bias = opt(hidden_bias_);
  const auto st = float_dtype(op, input_gates,
                              {{&input_gates, "input_gates"}, {&hidden_gates, "hidden_gates"},
                               {&hx, "hx"}, {&input_bias, "input_bias"},
                               {&hidden_bias, "hidden_bias"}});
  const auto [N, H] = check_cell(op, input_gates, hidden_gates, hx, "hx", input_bias, hidden_bias, 3);
  const auto opts = input_gates.options().dtype(st);
  at::Tensor hy = at::empty({N, H}, opts);
  at::Tensor workspace = at::empty({N, 5 * H}, opts);
  if (N * H == 0) return {hy, workspace};
  nn::dispatch_compute(op, hy, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(hy, [op, N, H, input_gates = DeviceTensor(input_gates),
                hidden_gates = DeviceTensor(hidden_gates), hx = DeviceTensor(hx),
                input_bias = DeviceTensor(input_bias),
                hidden_bias = DeviceTensor(hidden_bias), hy = DeviceTensor(hy),
                workspace = DeviceTensor(workspace)] {
    auto ig = nn::load<Acc>(op, input_gates);
    auto hg = nn::load<Acc>(op, hidden_gates);
    auto h0 = nn::load<Acc>(op, hx);
    // the n-gate's hidden bias stays apart: r scales (hn + b_hn) only
    std::vector<Acc> bi(static_cast<size_t>(3 * H), Acc(0)), bh(static_cast<size_t>(3 * H), Acc(0));
    if (input_bias.defined()) {
      auto lbi = nn::load<Acc>(op, input_bias);
      auto lbh = nn::load<Acc>(op, hidden_bias);
      std::copy(lbi.data(), lbi.data() + 3 * H, bi.begin());
      std::copy(lbh.data(), lbh.data() + 3 * H, bh.begin());
    }
    nn::OutBuf<Acc> hb(hy), wb(workspace);
    for (int64_t n = 0; n < N; ++n) {
      const Acc* x = ig.data() + n * 3 * H;
      const Acc* h = hg.data() + n * 3 * H;
      Acc* w = wb.data() + n * 5 * H;
      for (int64_t j = 0; j < H; ++j) {
        const Acc prev = h0.data()[n * H + j];
        const Acc r = sigmoid(x[j] + bi[j] + h[j] + bh[j]);
        const Acc z = sigmoid(x[H + j] + bi[H + j] + h[H + j] + bh[H + j]);
        const Acc hn = h[2 * H + j] + bh[2 * H + j];
        const Acc nn_ = std::tanh(x[2 * H + j] + bi[2 * H + j] + r * hn);
        hb.data()[n * H + j] = nn_ + z * (prev - nn_);
        w[j] = r;
        w[H + j] = z;
        w[2 * H + j] = nn_;
        w[3 * H + j] = prev;
        w[4 * H + j] = hn;
      }
    }
    hb.finish(op);
    wb.finish(op);
    });
  });
  return {hy, workspace};
}

// Gradients of the GRU cell from its workspace: (grad_input_gates [N, 3H],
// grad_hidden_gates [N, 3H], grad_hx, grad_input_bias, grad_hidden_bias); the
// bias gradients only if has_bias.
::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> k__thnn_fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  const auto st = float_dtype(op, workspace, {{&grad_hy, "grad_hy"}, {&workspace, "workspace"}});
  FL_CHECK_T(grad_hy.dim() == 2, op, grad_hy, "expected grad_hy to be 2-D [N, H], got shape ",
               grad_hy.sizes());
  const int64_t N = grad_hy.size(0), H = grad_hy.size(1);
  check_2d(op, workspace, "workspace", N, 5 * H);
  const auto opts = workspace.options().dtype(st);
  at::Tensor grad_ig = at::empty({N, 3 * H}, opts);
  at::Tensor grad_hg = at::empty({N, 3 * H}, opts);
  at::Tensor grad_hx = at::empty({N, H}, opts);
  at::Tensor grad_ib = has_bias ? at::empty({3 * H}, opts) : at::Tensor();
  at::Tensor grad_hb = has_bias ? at::empty({3 * H}, opts) : at::Tensor();
  if (N * H == 0) {
    if (has_bias) {
      grad_ib.zero_();
      grad_hb.zero_();
    }
    return {grad_ig, grad_hg, grad_hx, grad_ib, grad_hb};
  }
  nn::dispatch_compute(op, grad_ig, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(grad_ig, [op, N, H, has_bias, grad_hy = DeviceTensor(grad_hy),
                     workspace = DeviceTensor(workspace), grad_ig = DeviceTensor(grad_ig),
                     grad_hg = DeviceTensor(grad_hg), grad_hx = DeviceTensor(grad_hx),
                     grad_ib = DeviceTensor(grad_ib), grad_hb = DeviceTensor(grad_hb)] {
    auto gy = nn::load<Acc>(op, grad_hy);
    auto ws = nn::load<Acc>(op, workspace);
    nn::OutBuf<Acc> gi(grad_ig), gh(grad_hg), gx(grad_hx);
    for (int64_t n = 0; n < N; ++n) {
      const Acc* w = ws.data() + n * 5 * H;
      Acc* a = gi.data() + n * 3 * H;
      Acc* b = gh.data() + n * 3 * H;
      for (int64_t j = 0; j < H; ++j) {
        const Acc r = w[j], z = w[H + j], nn_ = w[2 * H + j], prev = w[3 * H + j], hn = w[4 * H + j];
        const Acc g = gy.data()[n * H + j];
        const Acc dz = g * (prev - nn_) * z * (Acc(1) - z);
        const Acc dn = g * (Acc(1) - z) * (Acc(1) - nn_ * nn_);  // before tanh: the n pre-activation
        const Acc dr = dn * hn * r * (Acc(1) - r);
        a[j] = dr;
        a[H + j] = dz;
        a[2 * H + j] = dn;
        b[j] = dr;
        b[H + j] = dz;
        b[2 * H + j] = dn * r;
        gx.data()[n * H + j] = g * z;
      }
    }
    if (has_bias) {
      column_sums<Acc>(op, gi.data(), N, 3 * H, grad_ib);
      column_sums<Acc>(op, gh.data(), N, 3 * H, grad_hb);
    }
    gi.finish(op);
    gh.finish(op);
    gx.finish(op);
    });
  });
  return {grad_ig, grad_hg, grad_hx, grad_ib, grad_hb};
}

}  // namespace acme::kernels
