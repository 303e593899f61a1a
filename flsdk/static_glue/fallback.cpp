// Boxed CPU fallback for every op without a native kernel: copies the device
// inputs to the host, runs PyTorch's CPU kernel, copies results back, and
// logs what it did, with the reason the op ran there (no native kernel, a
// dtype its kernel does not compute, or a run-time route: op_routes.h). It can
// be switched off (then the op fails, naming op, device and dtypes) and ops can
// be denied one by one. The generated wrappers send it the calls whose dtypes a
// native kernel does not list, and the calls of routed ops. Its copies to the
// host are the host waits it causes (HostWait::Fallback).
//
// Device-only ops (flsdk/spec/device_only.py: no CPU kernel exists, so the
// boxed fallback cannot run them) that the backend does not implement get
// their CPU reference op, a composite of other ops, or an error saying they
// must be native: fallback_device_only.cpp (generated) registers them with
// the functions of fallback_device_only.h defined here.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Logging.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "backend.h"
#include "device_config.h"
#include "fallback.h"
#include "fallback_device_only.h"
#include "op_routes.h"

namespace FLSDK_BACKEND_NS::fallback {
namespace {

struct Stats {
  int64_t count = 0;
  double time_s = 0;
  int64_t bytes = 0;
};

// Why an op ran on the fallback, as the log says it.
constexpr const char* kNoKernel = "no native kernel";
constexpr const char* kDtype = "dtype not computed by the native kernel";
constexpr const char* kMathView = "a conjugate or negative view, resolved on the CPU";

std::mutex g_mutex;
std::map<std::pair<std::string, std::string>, Stats> g_log;  // (op, reason) -> stats
std::set<std::string> op_set(const char* const* ops) {
  std::set<std::string> out;
  for (; *ops; ++ops) out.insert(*ops);
  return out;
}
std::set<std::string> g_deny = op_set(config::kFallbackDenyList);
// With the fallback off (device.yaml `mode: deny`), these ops may still fall back.
const std::set<std::string> g_allow = op_set(config::kFallbackAllowList);

// Entries are overload names ("exp.out") or base names ("exp": every overload).
bool listed(const std::set<std::string>& ops, const std::string& name) {
  return ops.count(name) > 0 || ops.count(name.substr(0, name.find('.'))) > 0;
}
std::set<std::string> g_warned;
std::atomic<bool> g_enabled{config::kFallbackEnabledByDefault};
std::atomic<bool> g_warn{[] {
  const char* value = std::getenv(config::kFallbackWarnEnv);
  return value && *value && std::string(value) != "0";
}()};

}  // namespace

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  std::string out = name.name;
  auto colons = out.find("::");
  if (colons != std::string::npos && out.compare(0, colons, "aten") == 0) out = out.substr(colons + 2);
  if (!name.overload_name.empty()) out += "." + name.overload_name;
  return out;
}

namespace {

int64_t device_bytes(const c10::IValue& value) {
  if (value.isTensor()) {
    const auto& t = value.toTensor();
    return t.defined() && t.device().type() == kDeviceType && t.layout() == c10::kStrided
               ? static_cast<int64_t>(t.nbytes())
               : 0;
  }
  if (value.isTensorList()) {
    int64_t total = 0;
    for (const at::Tensor& t : value.toTensorList())
      if (t.defined() && t.device().type() == kDeviceType && t.layout() == c10::kStrided)
        total += static_cast<int64_t>(t.nbytes());
    return total;
  }
  if (value.isList()) {
    int64_t total = 0;
    for (const c10::IValue& item : value.toListRef()) total += device_bytes(item);
    return total;
  }
  return 0;
}

// "acme:0, dtypes (Float, Float)" from the op's arguments, for error messages.
std::string describe_arguments(const torch::jit::Stack& stack, std::size_t num_arguments) {
  std::string device;
  std::ostringstream dtypes;
  bool first = true;
  for (std::size_t i = stack.size() - num_arguments; i < stack.size(); ++i) {
    const auto& value = stack[i];
    if (!value.isTensor() || !value.toTensor().defined()) continue;
    const auto& t = value.toTensor();
    if (device.empty() || t.device().type() == kDeviceType) device = t.device().str();
    dtypes << (first ? "" : ", ") << t.scalar_type();
    first = false;
  }
  return "device " + (device.empty() ? std::string(kBackendName) : device) + ", dtypes (" +
         dtypes.str() + ")";
}

// The CPU kernel would happily mix devices (it sees only host copies) and put
// the result on the first one; a kernel on the chip could not. Raise as the
// native wrappers do. _foreach_ ops are per tensor, so lists may span devices.
void check_one_device(const std::string& name, const torch::jit::Stack& stack,
                      std::size_t num_arguments) {
  if (name.rfind("_foreach_", 0) == 0) return;
  std::optional<c10::Device> common;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kDeviceType) return;
    if (!common.has_value()) common = t.device();
    TORCH_CHECK(*common == t.device(), kBackendName, ": aten::", name,
                ": expected all tensors on the same device, but found ", *common, " and ",
                t.device(), " (dtype ", t.scalar_type(), ")");
  };
  for (std::size_t i = stack.size() - num_arguments; i < stack.size(); ++i) {
    const auto& value = stack[i];
    if (value.isTensor()) {
      check(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) check(t);
    } else if (value.isList()) {
      for (const c10::IValue& item : value.toListRef())
        if (item.isTensor()) check(item.toTensor());
    }
  }
}

void record(const std::string& name, const std::string& reason, double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& stats = g_log[{name, reason}];
  stats.count += 1;
  stats.time_s += seconds;
  stats.bytes += bytes;
}

// Conjugate and negative views (complex x.conj(), lazily negated tensors) are
// materialized on the device before the CPU work: moving one to the CPU as it
// is makes PyTorch resolve it on the device with clone, which comes back here
// (clone of a dtype the device does not compute) and recursed until the stack
// overflowed. Only arguments the op reads: a written argument must stay the
// caller's tensor.
void resolve_lazy_views(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        std::size_t num_arguments) {
  const auto& args = op.schema().arguments();
  const std::size_t base = stack->size() - num_arguments;
  for (std::size_t i = 0; i < num_arguments; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.device().type() != kDeviceType || !(t.is_conj() || t.is_neg()))
      continue;
    const auto* alias = args[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    // The bytes as stored (bits cleared: a plain view) copied to the host, the
    // lazy operations applied there, and the result copied back: the op's other
    // arguments and its outputs stay on the device.
    at::Tensor stored = t.is_conj() ? t.conj() : t;
    if (stored.is_neg()) stored = stored._neg_view();
    at::Tensor host = stored.to(c10::kCPU);
    if (t.is_conj()) host = host.conj_physical();
    if (t.is_neg()) host = host.neg();
    v = c10::IValue(host.to(t.device()));
  }
}

// Everything the fallback does around the CPU work `run` does on the stack:
// deny list and mode, the warning, the device check, timing and the log.
// The CPU kernel of a structured out= op may use a CPU copy of `out` for an
// intermediate of another shape and resize it back (mse_loss computes its
// elementwise losses there before reducing into the 0-dim result), and PyTorch
// warns about that first resize although the caller's tensor ends with the
// shape it had. Such a warning the user did not cause is dropped when every
// written argument ends with its shape; every other warning, and that one when
// an argument did change shape (the user's out really was resized), is passed on.
class OutResizeWarnings final : public c10::WarningHandler {
 public:
  OutResizeWarnings(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                    std::size_t num_arguments)
      : guard_(this) {
    const auto& args = op.schema().arguments();
    const std::size_t base = stack.size() - num_arguments;
    for (std::size_t i = 0; i < num_arguments; ++i) {
      const auto* alias = args[i].alias_info();
      const auto& v = stack[base + i];
      if (alias != nullptr && alias->isWrite() && v.isTensor() && v.toTensor().defined())
        written_.push_back({v.toTensor(), v.toTensor().sizes().vec()});
    }
  }

  void process(const c10::Warning& warning) override { warnings_.push_back(warning); }

  // After the op: pass the warnings on (this handler is no longer current).
  void finish() {
    guard_.reset();
    bool kept_shapes = true;
    for (const auto& [tensor, sizes] : written_) kept_shapes &= tensor.sizes().vec() == sizes;
    for (const auto& w : warnings_) {
      if (kept_shapes && w.msg().find("An output with one or more elements was resized") !=
                             std::string::npos)
        continue;
      c10::warn(w);
    }
  }

 private:
  std::optional<c10::WarningUtils::WarningHandlerGuard> guard_;
  std::vector<std::pair<at::Tensor, std::vector<int64_t>>> written_;
  std::vector<c10::Warning> warnings_;
};

template <class Run>
void run_logged(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason,
                Run run) {
  std::string name = op_name(op);
  auto num_arguments = op.schema().arguments().size();
  bool denied;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    denied = listed(g_deny, name);
  }
  if ((!g_enabled.load() && !listed(g_allow, name)) || denied) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, kBackendName, ": aten::", name, " has no native ", kBackendName,
        " kernel for these arguments (", describe_arguments(*stack, num_arguments),
        ") and the CPU fallback is ",
        denied ? "denied for this op (fallback deny list)" : "disabled",
        ". Enable it with torch_fl.set_fallback_mode(True), or implement the kernel.");
  }
  if (g_warn.load()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_warned.insert(name).second)
      TORCH_WARN(kBackendName, ": aten::", name, " runs on the CPU fallback (",
                 describe_arguments(*stack, num_arguments), ")");
  }
  check_one_device(name, *stack, num_arguments);
  resolve_lazy_views(op, stack, num_arguments);
  int64_t bytes = 0;
  for (std::size_t i = stack->size() - num_arguments; i < stack->size(); ++i)
    bytes += device_bytes((*stack)[i]);
  auto start = std::chrono::steady_clock::now();
  {
    HostWaitReason reason(HostWait::Fallback);  // its copies to the host
    OutResizeWarnings warnings(op, *stack, num_arguments);
    run();
    warnings.finish();
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto num_returns = op.schema().returns().size();
  for (std::size_t i = stack->size() - num_returns; i < stack->size(); ++i)
    bytes += device_bytes((*stack)[i]);
  record(name, reason, seconds, bytes);
}

// --- device-only ops the backend does not implement ---------------------------
// (the tables and registrations are generated: fallback_device_only.cpp)

// convolution_backward takes bias_sizes after weight, which the overrideable
// form leaves out: [C_out] (weight is [C_out, C_in/groups, ...], transposed
// [C_in, C_out/groups, ...]).
void insert_bias_sizes(torch::jit::Stack* stack) {
  constexpr std::size_t kArguments = 10;  // convolution_backward_overrideable's
  std::size_t base = stack->size() - kArguments;
  const at::Tensor& weight = (*stack)[base + 2].toTensor();
  bool transposed = (*stack)[base + 6].toBool();
  int64_t groups = (*stack)[base + 8].toInt();
  int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(base + 3),
                c10::IValue(std::vector<int64_t>{channels}));
}

}  // namespace

namespace {
void run_as_reference(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                      const std::string& reference_op, const std::string& reason) {
  std::string name = op_name(op);
  const auto& reference = c10::Dispatcher::singleton().findSchemaOrThrow(
      ("aten::" + reference_op).c_str(), "");
  run_logged(op, stack, reason, [&] {
    if (name == "convolution_backward_overrideable") insert_bias_sizes(stack);
    at::native::cpu_fallback(reference, stack);
  });
}
}  // namespace

void run_as_cpu_reference(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          const std::string& reference_op) {
  run_as_reference(op, stack, reference_op, kNoKernel);
}

void raise_must_be_native(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                          const std::string& reached_by) {
  std::string name = op_name(op);
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, kBackendName, ": aten::", name, " must be implemented natively by the ",
      kBackendName, " backend (", describe_arguments(*stack, op.schema().arguments().size()),
      "): PyTorch has no CPU kernel for it, so the CPU fallback cannot run it. It is reached by ",
      reached_by, ". The vendor must add aten::", name,
      " to an op spec, list it in device.yaml's native ops and write its kernel.");
}

namespace {

// Composites: the fused RNN cells PyTorch uses on PrivateUse1 (as on CUDA),
// written with other ops, which run natively or on the fallback. Workspaces
// are laid out as CUDA's: LSTM [i, f, g, o] activated gates; GRU [r, z, n,
// hx, hn] (hn = the hidden part of the n gate, bias included).
template <class F>
auto timed(const char* name, F f) {
  auto start = std::chrono::steady_clock::now();
  auto result = f();
  record(name, kNoKernel,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0);
  return result;
}

at::Tensor with_biases(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  return timed("_thnn_fused_lstm_cell", [&] {
    auto gates = with_biases(with_biases(input_gates + hidden_gates, input_bias), hidden_bias);
    auto chunks = gates.chunk(4, 1);
    auto i = at::sigmoid(chunks[0]);
    auto f = at::sigmoid(chunks[1]);
    auto g = at::tanh(chunks[2]);
    auto o = at::sigmoid(chunks[3]);
    auto cy = f * cx + i * g;
    auto hy = o * at::tanh(cy);
    return std::make_tuple(hy, cy, at::cat({i, f, g, o}, 1));
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  return timed("_thnn_fused_lstm_cell_backward_impl", [&] {
    auto chunks = workspace.chunk(4, 1);
    const auto &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
    bool has_hy = grad_hy.has_value() && grad_hy->defined();
    auto ghy = has_hy ? *grad_hy : at::zeros_like(cy);
    auto tanh_cy = at::tanh(cy);
    auto gcy = ghy * o * (1 - tanh_cy * tanh_cy);
    if (grad_cy.has_value() && grad_cy->defined()) gcy = gcy + *grad_cy;
    auto grad_gates = at::cat({gcy * g * i * (1 - i), gcy * cx * f * (1 - f),
                               gcy * i * (1 - g * g), ghy * tanh_cy * o * (1 - o)},
                              1);
    auto grad_cx = gcy * f;
    at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
    return std::make_tuple(grad_gates, grad_cx, grad_bias);
  });
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  return timed("_thnn_fused_gru_cell", [&] {
    auto in = with_biases(input_gates, input_bias).chunk(3, 1);
    auto hid = with_biases(hidden_gates, hidden_bias).chunk(3, 1);
    auto r = at::sigmoid(in[0] + hid[0]);
    auto z = at::sigmoid(in[1] + hid[1]);
    auto n = at::tanh(in[2] + r * hid[2]);
    auto hy = n + z * (hx - n);
    return std::make_tuple(hy, at::cat({r, z, n, hx, hid[2]}, 1));
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  return timed("_thnn_fused_gru_cell_backward", [&] {
    auto chunks = workspace.chunk(5, 1);
    const auto &r = chunks[0], &z = chunks[1], &n = chunks[2], &hx = chunks[3], &hn = chunks[4];
    auto grad_hx = grad_hy * z;
    auto gn = grad_hy * (1 - z) * (1 - n * n);
    auto gz = grad_hy * (hx - n) * z * (1 - z);
    auto gr = gn * hn * r * (1 - r);
    auto grad_input_gates = at::cat({gr, gz, gn}, 1);
    auto grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
    at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
    at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
    return std::make_tuple(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
                           grad_hidden_bias);
  });
}

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_logged(op, stack, kNoKernel, [&] { at::native::cpu_fallback(op, stack); });
}

// The wrapper's check failed (register_kernels.h, computes): a dtype its kernel
// does not compute, or a lazy conjugate / negative view of a device tensor.
void run_dtype_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::size_t n = op.schema().arguments().size();
  bool math_view = false;
  for (std::size_t i = stack->size() - n; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kDeviceType)
      math_view = math_view || v.toTensor().is_conj() || v.toTensor().is_neg();
  }
  run_logged(op, stack, math_view ? kMathView : kDtype, [&] { at::native::cpu_fallback(op, stack); });
}

void run_routed_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name(op);
  if (const char* reference = cpu_reference_of(name.substr(0, name.find('.')))) {
    run_as_reference(op, stack, reference, op_routes::reason(name));
    return;
  }
  run_logged(op, stack, op_routes::reason(name), [&] { at::native::cpu_fallback(op, stack); });
}

namespace {
// Ops on sparse device tensors run on CPU's sparse kernels.
void run_on_sparse_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_logged(op, stack, kNoKernel,
             [&] { at::native::cpu_fallback(op, stack, false, c10::DispatchKey::SparseCPU); });
}

// Moves every device tensor of `value` (a tensor or a list of them) with `move`.
template <class Move>
c10::IValue moved(const c10::IValue& value, Move move) {
  if (value.isTensor()) return c10::IValue(move(value.toTensor()));
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(move(t));
    return c10::IValue(out);
  }
  return value;
}

// Ops on sparse compressed device tensors (CSR, CSC, BSR, BSC): their tensor
// arguments go to the CPU in their layout (ATen's own copy of the compressed
// members), the CPU kernel runs, its tensors come back to the device, and the
// arguments it wrote (out=) are copied back into the caller's tensors. PyTorch's
// cpu_fallback does not move these layouts (it crashed in an OpInfo run), hence
// this one. The copies keep requires_grad: some CPU kernels save what their
// backward needs only then (sparse.mm's reduce keeps the argmax indices).
bool sparse_compressed(const at::Tensor& t) {
  const auto layout = t.layout();
  return layout == c10::kSparseCsr || layout == c10::kSparseCsc || layout == c10::kSparseBsr ||
         layout == c10::kSparseBsc;
}

void copy_back(const at::Tensor& device_tensor, const at::Tensor& cpu) {
  if (sparse_compressed(device_tensor)) {
    at::native::resize_as_sparse_compressed_(device_tensor, cpu);
    at::native::copy_sparse_compressed_(const_cast<at::Tensor&>(device_tensor), cpu);
  } else {
    device_tensor.resize_(cpu.sizes());
    const_cast<at::Tensor&>(device_tensor).copy_(cpu);
  }
}

void run_on_sparse_compressed_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  run_logged(op, stack, kNoKernel, [&] {
    const std::size_t base = stack->size() - arguments.size();
    std::optional<c10::Device> device;
    std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (caller's tensor, CPU copy)
    for (std::size_t i = base; i < stack->size(); ++i) {
      const auto* alias = arguments[i - base].alias_info();
      const bool writes = alias != nullptr && alias->isWrite();
      (*stack)[i] = moved((*stack)[i], [&](const at::Tensor& t) {
        if (!t.defined() || t.device().type() != kDeviceType) return t;
        device = t.device();
        at::Tensor cpu = t.to(c10::kCPU);
        if (t.requires_grad() && !cpu.requires_grad()) cpu.requires_grad_(true);
        if (writes) written.emplace_back(t, cpu);
        return cpu;
      });
    }
    // Without a device tensor (a factory naming the device) the call would come
    // straight back here.
    TORCH_CHECK_NOT_IMPLEMENTED(device.has_value(), kBackendName, ": aten::", op_name(op),
                                " has no kernel for sparse compressed ", kBackendName,
                                " tensors and no device tensor argument to run it on the CPU");
    op.callBoxed(stack);
    for (const auto& [caller, cpu] : written) copy_back(caller, cpu);
    const std::size_t returned = op.schema().returns().size();
    for (std::size_t i = stack->size() - returned; i < stack->size(); ++i) {
      (*stack)[i] = moved((*stack)[i], [&](const at::Tensor& t) {
        for (const auto& [caller, cpu] : written)
          if (t.is_same(cpu)) return caller;  // out= returns the caller's tensor
        return t.defined() && t.device().is_cpu() ? t.to(*device) : t;
      });
    }
  });
}
}  // namespace

std::vector<LogEntry> log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<LogEntry> out;
  for (const auto& [key, stats] : g_log)
    out.push_back({key.first, key.second, stats.count, stats.time_s, stats.bytes});
  return out;
}

void clear_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log.clear();
  g_warned.clear();
}

void set_enabled(bool enabled) { g_enabled.store(enabled); }
bool enabled() { return g_enabled.load(); }

void set_deny_list(const std::vector<std::string>& ops) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_deny = std::set<std::string>(ops.begin(), ops.end());
}

std::vector<std::string> deny_list() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_deny.begin(), g_deny.end()};
}

void set_warn(bool warn_once_per_op) { g_warn.store(warn_once_per_op); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_cpu>());
}

// Sparse device tensors: PyTorch's CPU fallback moves them to SparseCPU and back.
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_sparse_cpu>());
}

// Sparse compressed device tensors (sparse.sampled_addmm, sparse.mm(reduce=...)).
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_sparse_compressed_cpu>());
}

void register_sparse_ops() {
  // Structured ops (add, mul, mm, ...) have a kernel for every backend, the
  // CompositeExplicitAutogradNonFunctional one written for strided tensors,
  // which the dispatcher prefers to a backend fallback: on a sparse device
  // tensor it fails ("unsupported tensor layout"). So each such op that CPU runs
  // on a sparse layout and this backend does not is registered to the sparse
  // fallbacks by name (about 120 of them). Called once the module's own
  // registrations are in.
  static std::once_flag once;
  std::call_once(once, [] {
    auto* coo = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::SparsePrivateUse1,
                                   __FILE__, __LINE__);  // leaked: lives as long as torch
    auto* compressed = new torch::Library(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::SparseCsrPrivateUse1, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = dispatcher.findOp(name);
      if (!op.has_value()) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
        continue;  // the fallback is reached already
      const std::string overload = name.name.substr(6) +
                                   (name.overload_name.empty() ? "" : "." + name.overload_name);
      if (op->hasKernelForDispatchKey(c10::DispatchKey::SparseCPU) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::SparsePrivateUse1))
        coo->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_on_sparse_cpu>());
      if (op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrCPU) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrPrivateUse1))
        compressed->impl(overload.c_str(),
                         torch::CppFunction::makeFromBoxedFunction<&run_on_sparse_compressed_cpu>());
    }
  });
}
}  // namespace FLSDK_BACKEND_NS::fallback
