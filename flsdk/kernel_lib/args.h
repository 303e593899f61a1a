// Kernel arguments as host parts pass them on.
#pragma once

#include "device_config.h"  // FLSDK_BACKEND_NS

#include <ATen/core/Tensor.h>

#include <optional>

namespace FLSDK_BACKEND_NS::common {

// An optional tensor argument as a tensor: undefined when absent or undefined,
// so a host part hands optional weights and biases on as plain tensors (and
// DeviceTensor, nn::load and check_float all accept an undefined one).
inline const at::Tensor& opt(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return (t.has_value() && t->defined()) ? *t : undefined;
}

}  // namespace FLSDK_BACKEND_NS::common
