// Error helpers: every kernel error reads "<backend>: <op>: <what>", and the
// tensor-specific ones add the device and dtype, so a user can tell which op on
// which device rejected which input.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "dtype.h"

#include <sstream>
#include <string>

namespace FLSDK_BACKEND_NS::common {

// Generic argument check: FL_CHECK(cond, "op.overload", "message parts", ...)
#define FL_CHECK(cond, op, ...) TORCH_CHECK((cond), ::FLSDK_BACKEND_NS::common::kBackend, ": ", (op), ": ", __VA_ARGS__)
#define FL_CHECK_INDEX(cond, op, ...) \
  TORCH_CHECK_INDEX((cond), ::FLSDK_BACKEND_NS::common::kBackend, ": ", (op), ": ", __VA_ARGS__)
#define FL_CHECK_VALUE(cond, op, ...) \
  TORCH_CHECK_VALUE((cond), ::FLSDK_BACKEND_NS::common::kBackend, ": ", (op), ": ", __VA_ARGS__)

// " (device acme:0, dtype float32)" suffix for messages about one tensor.
inline std::string where(const at::Tensor& t) {
  std::ostringstream s;
  s << " (device " << t.device() << ", dtype " << dtype_name(t.scalar_type()) << ")";
  return s.str();
}

// Check on one tensor argument, with device and dtype in the message.
#define FL_CHECK_T(cond, op, tensor, ...) \
  TORCH_CHECK((cond), ::FLSDK_BACKEND_NS::common::kBackend, ": ", (op), ": ", __VA_ARGS__, ::FLSDK_BACKEND_NS::common::where(tensor))

inline std::string shape_str(c10::IntArrayRef s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

// Tensors a kernel reads must live on the device of the output;
// CPU 0-dim tensors (Python scalars wrapped by torch) are the one exception
// and are read on the host.
inline bool is_cpu_scalar(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() == 0;
}

// A dim argument in [-ndim, ndim) made non-negative; 0-dim tensors accept 0 and -1.
inline int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t n = ndim > 1 ? ndim : 1;
  FL_CHECK_INDEX(d >= -n && d < n, op, "dimension out of range (expected to be in range of [",
                   -n, ", ", n - 1, "], but got ", d, ")");
  return d < 0 ? d + n : d;
}

}  // namespace FLSDK_BACKEND_NS::common
