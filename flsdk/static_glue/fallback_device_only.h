// What the generated fallback_device_only.cpp registers for device-only ops
// the backend does not implement (flsdk/spec/device_only.py), defined in
// fallback.cpp: a CPU reference op run on the fallback, an error naming what
// must be native, or a composite of other ops.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::fallback {

// "add.Tensor" for aten::add.Tensor; the backend's own ops keep their namespace.
std::string op_name(const c10::OperatorHandle& op);

// Runs `op` as the CPU op `reference_op` on the fallback, logged under `op`.
void run_as_cpu_reference(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack,
                          const std::string& reference_op);

// The CPU op a device-only op runs as ("convolution" for convolution_overrideable),
// whether or not the backend has a native kernel for it; nullptr for other ops
// (generated: fallback_device_only.cpp). A call routed to the CPU uses it.
const char* cpu_reference_of(const std::string& op);

// Raises NotImplementedError: `op` has no CPU kernel and must be native;
// `reached_by` says which user-level calls reach it.
void raise_must_be_native(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack,
                          const std::string& reached_by);

// The fused RNN cells PyTorch uses on PrivateUse1 (as on CUDA), composed of
// other ops, which run natively or on the fallback.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias);
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias);

}  // namespace FLSDK_BACKEND_NS::fallback
