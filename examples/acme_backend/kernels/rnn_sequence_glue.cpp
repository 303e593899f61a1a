// nn.LSTM / nn.GRU / nn.RNN on acme as a few launches per layer
// (kernels/rnn_sequence.cpp) instead of a few per time step.
//
// aten::lstm.input, aten::gru.input, aten::rnn_tanh.input and aten::rnn_relu.input
// are CompositeImplicitAutograd: on any device but CUDA (whose composite hands the
// sequence to cuDNN through a dispatch stub that checks `is_cuda()`) they run every
// time step as separate ops. A backend can take them over by registering them on
// its own keys: AutogradPrivateUse1 wins over the composite kernel for tensors of
// this backend, and PrivateUse1 covers inference mode, where the autograd keys are
// skipped. The registration here is itself a composite: per layer and direction it
// applies an autograd function whose forward and backward are acme's
// whole-sequence ops (lstm_layer, gru_layer, rnn_layer: nn.RNN's tanh and relu are
// one op with a flag), and joins the layers with cat / dropout / stack, so
// autograd records a handful of nodes per layer.
//
// Calls the fused ops do not cover go to PyTorch's own composite
// (at::compositeimplicitautograd::lstm / gru / rnn_tanh / rnn_relu), i.e. the
// per-step path as before:
//   * autocast enabled for the device: the per-step path runs the cells (nn.RNN's:
//     linear and the activation) under the policy the op specs give them (lower
//     precision, as CUDA's); the fused ops compute in the input's dtype only;
//   * projections (LSTM proj_size > 0);
//   * dtypes other than float32 / float64, or tensors of mixed dtypes or devices;
//   * shapes the composite rejects (it raises PyTorch's usual messages);
//   * packed sequences (lstm.data / gru.data / rnn_tanh.data / rnn_relu.data are
//     not taken over: the batch shrinks over time there).
// The fused backward is not itself differentiable: a backward with
// create_graph=True recomputes the layer through the per-step composite and lets
// autograd differentiate that (cuDNN's RNN on CUDA refuses a double backward).
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/gru_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/lstm_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/rnn_relu_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/rnn_tanh_compositeimplicitautograd_dispatch.h>
#include <ATen/ops/stack.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "device_config.h"
#include "kernels.h"

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace FLSDK_BACKEND_NS::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using LstmLayerSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool);
using LstmLayerBackwardSig =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, bool);
using GruLayerSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool);
using GruLayerBackwardSig =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, const at::Tensor&, const at::Tensor&, bool);
using RnnLayerSig = std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool, bool);
using RnnLayerBackwardSig =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
        const at::Tensor&, const at::Tensor&, bool, bool);

// The ops are called through the dispatcher, not as k_* directly: their generated
// wrappers set the device guard and name the kernel for profiles and reports.
// Named after the backend (device.yaml `name`): nothing in this file is acme's
// own, so another flsdk backend with the same six op specs can take it as is.
template <class Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* op) {
  const std::string name = std::string(FLSDK_BACKEND_NS::config::kBackendName) + "::" + op;
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "").typed<Sig>();
}

// Biases travel as optionals: the autograd function's inputs must be defined
// tensors or not tensors at all.
std::optional<at::Tensor> bias(bool has_biases, const at::Tensor* p, int64_t k) {
  return has_biases ? std::optional<at::Tensor>(p[k]) : std::nullopt;
}

// The backward of one layer as a differentiable graph, for a backward that is
// itself differentiated (create_graph=True: a gradient penalty, a Hessian-vector
// product): the layer is run again through PyTorch's per-step composite from the
// saved inputs, and autograd differentiates that. `outputs` are that run's
// results matching `grads`; returns one gradient per entry of `inputs` (undefined
// for inputs that need none).
variable_list differentiable_grads(const variable_list& outputs, const variable_list& grads,
                                   const variable_list& inputs) {
  variable_list wanted, result(inputs.size());
  std::vector<size_t> where;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      wanted.push_back(inputs[i]);
      where.push_back(i);
    }
  if (wanted.empty()) return result;
  auto g = torch::autograd::grad(outputs, wanted, grads, /*retain_graph=*/true,
                                 /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t k = 0; k < where.size(); ++k) result[where[k]] = g[k];
  return result;
}

struct LstmLayerFunction : public torch::autograd::Function<LstmLayerFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& hx,
                               const at::Tensor& cx, const at::Tensor& w_ih, const at::Tensor& w_hh,
                               const std::optional<at::Tensor>& b_ih,
                               const std::optional<at::Tensor>& b_hh, bool reverse) {
    static const auto op = find_op<LstmLayerSig>("lstm_layer");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [output, hy, cy, workspace, cell_states] =
        op.call(input, hx, cx, w_ih, w_hh, b_ih, b_hh, reverse);
    // the biases only for a differentiated backward (differentiable_grads)
    ctx->save_for_backward({input, hx, cx, w_ih, w_hh, output, workspace, cell_states,
                            b_ih.value_or(at::Tensor()), b_hh.value_or(at::Tensor())});
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["has_bias"] = b_ih.has_value();
    return {output, hy, cy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: see differentiable_grads
      const at::Tensor& input = saved[0];
      std::vector<at::Tensor> params{saved[3], saved[4]};
      if (has_bias) params.insert(params.end(), {saved[8], saved[9]});
      auto [out, hy, cy] = at::compositeimplicitautograd::lstm(
          reverse ? input.flip(0) : input, {saved[1].unsqueeze(0), saved[2].unsqueeze(0)}, params,
          has_bias, 1, 0.0, false, false, false);
      auto g = differentiable_grads({reverse ? out.flip(0) : out, hy.squeeze(0), cy.squeeze(0)},
                                    {grads[0], grads[1], grads[2]},
                                    {saved[0], saved[1], saved[2], saved[3], saved[4], saved[8],
                                     saved[9]});
      g.emplace_back();  // reverse
      return g;
    }
    static const auto op = find_op<LstmLayerBackwardSig>("lstm_layer_backward");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // grads were materialized (zeros for outputs the loss did not use)
    auto [gi, ghx, gcx, gwi, gwh, gbi, gbh] =
        op.call(grads[0], grads[1], grads[2], saved[0], saved[1], saved[2], saved[3], saved[4],
                saved[5], saved[6], saved[7], reverse);
    return {gi, ghx, gcx, gwi, gwh, has_bias ? gbi : at::Tensor(), has_bias ? gbh : at::Tensor(),
            at::Tensor()};
  }
};

struct GruLayerFunction : public torch::autograd::Function<GruLayerFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& hx,
                               const at::Tensor& w_ih, const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
                               const std::optional<at::Tensor>& b_hh, bool reverse) {
    static const auto op = find_op<GruLayerSig>("gru_layer");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [output, hy, workspace] = op.call(input, hx, w_ih, w_hh, b_ih, b_hh, reverse);
    // the biases only for a differentiated backward (differentiable_grads)
    ctx->save_for_backward({input, hx, w_ih, w_hh, output, workspace, b_ih.value_or(at::Tensor()),
                            b_hh.value_or(at::Tensor())});
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["has_bias"] = b_ih.has_value();
    return {output, hy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: see differentiable_grads
      const at::Tensor& input = saved[0];
      std::vector<at::Tensor> params{saved[2], saved[3]};
      if (has_bias) params.insert(params.end(), {saved[6], saved[7]});
      auto [out, hy] = at::compositeimplicitautograd::gru(reverse ? input.flip(0) : input,
                                                          saved[1].unsqueeze(0), params, has_bias,
                                                          1, 0.0, false, false, false);
      auto g = differentiable_grads({reverse ? out.flip(0) : out, hy.squeeze(0)},
                                    {grads[0], grads[1]},
                                    {saved[0], saved[1], saved[2], saved[3], saved[6], saved[7]});
      g.emplace_back();  // reverse
      return g;
    }
    static const auto op = find_op<GruLayerBackwardSig>("gru_layer_backward");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [gi, ghx, gwi, gwh, gbi, gbh] = op.call(grads[0], grads[1], saved[0], saved[1], saved[2],
                                                 saved[3], saved[4], saved[5], reverse);
    return {gi, ghx, gwi, gwh, has_bias ? gbi : at::Tensor(), has_bias ? gbh : at::Tensor(),
            at::Tensor()};
  }
};

// nn.RNN's layer: tanh or relu (`relu`) of x W_ih^T + b_ih + h W_hh^T + b_hh. Only
// the output is saved (the backward takes the activation's derivative from it).
struct RnnLayerFunction : public torch::autograd::Function<RnnLayerFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& hx,
                               const at::Tensor& w_ih, const at::Tensor& w_hh,
                               const std::optional<at::Tensor>& b_ih,
                               const std::optional<at::Tensor>& b_hh, bool reverse, bool relu) {
    static const auto op = find_op<RnnLayerSig>("rnn_layer");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [output, hy] = op.call(input, hx, w_ih, w_hh, b_ih, b_hh, reverse, relu);
    // the biases only for a differentiated backward (differentiable_grads)
    ctx->save_for_backward({input, hx, w_ih, w_hh, output, b_ih.value_or(at::Tensor()),
                            b_hh.value_or(at::Tensor())});
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["has_bias"] = b_ih.has_value();
    return {output, hy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const bool relu = ctx->saved_data["relu"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: see differentiable_grads
      const at::Tensor& input = saved[0];
      std::vector<at::Tensor> params{saved[2], saved[3]};
      if (has_bias) params.insert(params.end(), {saved[5], saved[6]});
      const at::Tensor x = reverse ? input.flip(0) : input;
      auto [out, hy] =
          relu ? at::compositeimplicitautograd::rnn_relu(x, saved[1].unsqueeze(0), params, has_bias, 1,
                                                         0.0, false, false, false)
               : at::compositeimplicitautograd::rnn_tanh(x, saved[1].unsqueeze(0), params, has_bias, 1,
                                                         0.0, false, false, false);
      auto g = differentiable_grads({reverse ? out.flip(0) : out, hy.squeeze(0)},
                                    {grads[0], grads[1]},
                                    {saved[0], saved[1], saved[2], saved[3], saved[5], saved[6]});
      g.emplace_back();  // reverse
      g.emplace_back();  // relu
      return g;
    }
    static const auto op = find_op<RnnLayerBackwardSig>("rnn_layer_backward");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [gi, ghx, gwi, gwh, gbi, gbh] = op.call(grads[0], grads[1], saved[0], saved[1], saved[2],
                                                 saved[3], saved[4], reverse, relu);
    return {gi, ghx, gwi, gwh, has_bias ? gbi : at::Tensor(), has_bias ? gbh : at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Whether the fused layers take this call (see the head of this file); when
// they do not, the caller runs PyTorch's per-step composite.
bool fused_applies(const at::Tensor& input, at::TensorList states, at::TensorList params,
                   bool has_biases, int64_t num_layers, bool bidirectional, bool batch_first,
                   int64_t gates) {
  if (at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1)) return false;
  if (input.dim() != 3 || num_layers < 1) return false;
  const auto st = input.scalar_type();
  if (st != at::kFloat && st != at::kDouble) return false;
  const int64_t dirs = bidirectional ? 2 : 1;
  const int64_t per_layer = has_biases ? 4 : 2;
  if (static_cast<int64_t>(params.size()) != num_layers * dirs * per_layer) return false;
  const auto device = input.device();
  int64_t H = -1;
  for (const auto& s : states) {
    if (!s.defined() || s.dim() != 3 || s.scalar_type() != st || s.device() != device) return false;
    if (s.size(0) != num_layers * dirs || s.size(1) != input.size(batch_first ? 0 : 1)) return false;
    if (H >= 0 && s.size(2) != H) return false;  // LSTM with proj_size: h and c differ
    H = s.size(2);
  }
  int64_t in = input.size(2);
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t base = (l * dirs + d) * per_layer;
      for (int64_t k = 0; k < per_layer; ++k) {
        const auto& p = params[base + k];
        if (!p.defined() || p.scalar_type() != st || p.device() != device) return false;
        const int64_t cols = k == 0 ? in : H;
        if (k < 2 ? (p.dim() != 2 || p.size(0) != gates * H || p.size(1) != cols)
                  : (p.dim() != 1 || p.size(0) != gates * H))
          return false;
      }
    }
    in = dirs * H;
  }
  return true;
}

// One layer's output joined over directions, dropout between layers as the
// composite applies it (not after the last layer).
at::Tensor next_layer_input(std::vector<at::Tensor>& outs, int64_t layer, int64_t num_layers,
                            double dropout, bool train) {
  at::Tensor x = outs.size() == 1 ? outs[0] : at::cat(outs, 2);
  if (dropout != 0 && train && layer < num_layers - 1) x = at::dropout(x, dropout, train);
  return x;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_sequence(
    const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
    int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  if (hx.size() != 2 || !fused_applies(input, hx, params, has_biases, num_layers, bidirectional, batch_first, 4))
    return at::compositeimplicitautograd::lstm(input, hx, params, has_biases, num_layers, dropout,
                                               train, bidirectional, batch_first);
  const int64_t dirs = bidirectional ? 2 : 1;
  const int64_t per_layer = has_biases ? 4 : 2;
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hy, cy;
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = l * dirs + d;
      const at::Tensor* p = params.data() + idx * per_layer;
      auto r = LstmLayerFunction::apply(x, hx[0][idx], hx[1][idx], p[0], p[1],
                                        bias(has_biases, p, 2), bias(has_biases, p, 3), d == 1);
      outs.push_back(r[0]);
      hy.push_back(r[1]);
      cy.push_back(r[2]);
    }
    x = next_layer_input(outs, l, num_layers, dropout, train);
  }
  return {batch_first ? x.transpose(0, 1) : x, at::stack(hy, 0), at::stack(cy, 0)};
}

std::tuple<at::Tensor, at::Tensor> gru_sequence(const at::Tensor& input, const at::Tensor& hx,
                                                at::TensorList params, bool has_biases,
                                                int64_t num_layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  if (!fused_applies(input, {hx}, params, has_biases, num_layers, bidirectional, batch_first, 3))
    return at::compositeimplicitautograd::gru(input, hx, params, has_biases, num_layers, dropout,
                                              train, bidirectional, batch_first);
  const int64_t dirs = bidirectional ? 2 : 1;
  const int64_t per_layer = has_biases ? 4 : 2;
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hy;
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = l * dirs + d;
      const at::Tensor* p = params.data() + idx * per_layer;
      auto r = GruLayerFunction::apply(x, hx[idx], p[0], p[1], bias(has_biases, p, 2),
                                       bias(has_biases, p, 3), d == 1);
      outs.push_back(r[0]);
      hy.push_back(r[1]);
    }
    x = next_layer_input(outs, l, num_layers, dropout, train);
  }
  return {batch_first ? x.transpose(0, 1) : x, at::stack(hy, 0)};
}

// nn.RNN: rnn_tanh.input and rnn_relu.input have gru.input's signature.
template <bool Relu>
std::tuple<at::Tensor, at::Tensor> rnn_sequence(const at::Tensor& input, const at::Tensor& hx,
                                                at::TensorList params, bool has_biases,
                                                int64_t num_layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  if (!fused_applies(input, {hx}, params, has_biases, num_layers, bidirectional, batch_first, 1)) {
    if constexpr (Relu)
      return at::compositeimplicitautograd::rnn_relu(input, hx, params, has_biases, num_layers,
                                                      dropout, train, bidirectional, batch_first);
    else
      return at::compositeimplicitautograd::rnn_tanh(input, hx, params, has_biases, num_layers,
                                                      dropout, train, bidirectional, batch_first);
  }
  const int64_t dirs = bidirectional ? 2 : 1;
  const int64_t per_layer = has_biases ? 4 : 2;
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hy;
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = l * dirs + d;
      const at::Tensor* p = params.data() + idx * per_layer;
      auto r = RnnLayerFunction::apply(x, hx[idx], p[0], p[1], bias(has_biases, p, 2),
                                       bias(has_biases, p, 3), d == 1, Relu);
      outs.push_back(r[0]);
      hy.push_back(r[1]);
    }
    x = next_layer_input(outs, l, num_layers, dropout, train);
  }
  return {batch_first ? x.transpose(0, 1) : x, at::stack(hy, 0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm_sequence));
  m.impl("gru.input", TORCH_FN(gru_sequence));
  m.impl("rnn_tanh.input", TORCH_FN(rnn_sequence<false>));
  m.impl("rnn_relu.input", TORCH_FN(rnn_sequence<true>));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm_sequence));
  m.impl("gru.input", TORCH_FN(gru_sequence));
  m.impl("rnn_tanh.input", TORCH_FN(rnn_sequence<false>));
  m.impl("rnn_relu.input", TORCH_FN(rnn_sequence<true>));
}

}  // namespace FLSDK_BACKEND_NS::kernels
