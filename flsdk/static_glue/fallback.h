// The CPU fallback's switches and its log, for the Python module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_config.h"

namespace c10 {
class OperatorHandle;
struct IValue;
}  // namespace c10

namespace FLSDK_BACKEND_NS::fallback {

// Runs `op` on the CPU: device inputs copied to the host, the CPU kernel,
// results copied back, logged; honours the mode and the deny list. A boxed
// kernel (the stack is torch::jit::Stack), also called by the wrappers of
// native kernels for dtypes the kernel does not list.
void run_on_cpu(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
// The same, logged with another reason: a dtype the native kernel does not
// compute (the wrappers' dtype route), or a run-time route (op_routes.h; a
// device-only op runs as its CPU reference op).
void run_dtype_on_cpu(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
void run_routed_on_cpu(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);

struct LogEntry {
  std::string op;        // "add.Tensor"
  std::string reason;    // "no native kernel", "dtype not computed by the native kernel",
                         // "routed to the CPU (torch_fl.set_op_route)"
  int64_t count;
  double time_s;         // wall time inside the fallback, copies included
  int64_t bytes_copied;  // device bytes moved to and from the host
};

// Registers the sparse fallbacks for the ops whose generic (strided) kernel would
// otherwise take sparse device tensors; once, after the module's static
// registrations (python_module.cpp).
void register_sparse_ops();

std::vector<LogEntry> log();
void clear_log();
void set_enabled(bool enabled);
bool enabled();
void set_deny_list(const std::vector<std::string>& ops);
std::vector<std::string> deny_list();
void set_warn(bool warn_once_per_op);

}  // namespace FLSDK_BACKEND_NS::fallback
