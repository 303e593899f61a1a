// Starting the vendor runtime, device selection and stream bookkeeping.
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "device_config.h"
#include "kernel_api.h"

namespace FLSDK_BACKEND_NS {
namespace {

std::mutex g_init_mutex;
// Read on every device switch: checked without the lock once set.
std::atomic<bool> g_initialized{false};
std::string g_init_error;
int g_device_count = 0;

// "1 GiB", "512MiB", "4096" -> bytes; throws with the variable name on junk.
std::size_t parse_size(const std::string& text, const char* variable) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t digits_start = i;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  TORCH_CHECK(i > digits_start, kBackendName, ": ", variable, "='", text,
              "' is not a size; expected a positive integer of bytes or e.g. '512 MiB', '2 GiB'");
  std::size_t value = std::stoull(text.substr(digits_start, i - digits_start));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  std::size_t scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB" || unit == "K") scale = 1ULL << 10;
  else if (unit == "MiB" || unit == "M") scale = 1ULL << 20;
  else if (unit == "GiB" || unit == "G") scale = 1ULL << 30;
  else
    TORCH_CHECK(false, kBackendName, ": ", variable, "='", text, "' has unknown unit '", unit,
                "'; expected B, KiB, MiB or GiB");
  TORCH_CHECK(value > 0, kBackendName, ": ", variable, "='", text, "' must be positive");
  return value * scale;
}

int parse_count(const std::string& text, const char* variable) {
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  TORCH_CHECK(end != text.c_str() && *end == '\0' && value >= 0 && value <= 64, kBackendName,
              ": ", variable, "='", text, "' is not a device count; expected an integer 0..64");
  return static_cast<int>(value);
}

// "auto" -> 0, "1".."1024" -> the count; throws with the variable name on junk.
int parse_units(const std::string& text, const char* variable) {
  if (text == "auto") return 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  TORCH_CHECK(end != text.c_str() && *end == '\0' && value >= 1 && value <= 1024, kBackendName,
              ": ", variable, "='", text,
              "' is not a compute unit count; expected an integer 1..1024 or 'auto'");
  return static_cast<int>(value);
}

std::string env(const char* name) {
  const char* value = (name && *name) ? std::getenv(name) : nullptr;
  return value ? std::string(value) : std::string();
}

void initialize_locked() {
  runtime::DeviceConfig cfg{};
  cfg.device_count = config::kDefaultDeviceCount;
  cfg.memory_capacity = config::kMemoryCapacity;
  cfg.memory_alignment = config::kMemoryAlignment;
  cfg.compute_units = config::kComputeUnits;
  if (auto text = env(config::kDeviceCountEnv); !text.empty())
    cfg.device_count = parse_count(text, config::kDeviceCountEnv);
  if (auto text = env(config::kMemoryCapacityEnv); !text.empty())
    cfg.memory_capacity = parse_size(text, config::kMemoryCapacityEnv);
  if (auto text = env(config::kComputeUnitsEnv); !text.empty())
    cfg.compute_units = parse_units(text, config::kComputeUnitsEnv);
  check_status(runtime::init(cfg), "runtime::init");
  g_device_count = runtime::device_count();
}

thread_local c10::DeviceIndex t_current_device = 0;
// Current stream id per device, per thread (0 = default stream).
thread_local std::vector<c10::StreamId> t_current_streams;

std::mutex g_streams_mutex;
// Created streams per device; stream id N (N >= 1) is g_streams[device][N - 1].
std::vector<std::vector<runtime::Stream>> g_streams;

}  // namespace

void ensure_initialized() {
  if (g_initialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_initialized.load(std::memory_order_relaxed)) return;
  try {
    initialize_locked();
    g_initialized.store(true, std::memory_order_release);
    g_init_error.clear();
  } catch (const c10::Error& e) {
    g_init_error = e.what_without_backtrace();
    throw;
  }
}

int device_count() noexcept {
  try {
    ensure_initialized();
    return g_device_count;
  } catch (...) {
    return 0;
  }
}

std::string init_error() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  return g_init_error;
}

void check_status(runtime::Status status, const char* call) {
  if (status == runtime::Status::Ok) return;
  const char* message = runtime::last_error();
  TORCH_CHECK(false, kBackendName, ": ", call, " failed: ",
              (message && *message) ? message : "no message from the runtime");
}

void check_device_index(int index) {
  int count = device_count();
  TORCH_CHECK_INDEX(index >= 0 && index < count, kBackendName, ": invalid device index ", index,
                    "; ", count, " ", kBackendName, " device(s) available (indices 0..",
                    count - 1, ")");
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

runtime::Stream native_stream(const c10::Stream& stream) {
  if (stream.id() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  auto device = static_cast<std::size_t>(stream.device_index());
  auto index = static_cast<std::size_t>(stream.id() - 1);
  TORCH_CHECK(device < g_streams.size() && index < g_streams[device].size(), kBackendName,
              ": unknown stream id ", stream.id(), " on device ", stream.device_index());
  return g_streams[device][index];
}

c10::StreamId stream_id_of(int device, runtime::Stream handle) {
  if (handle == nullptr) return 0;
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  if (device < 0 || static_cast<std::size_t>(device) >= g_streams.size()) return -1;
  const auto& handles = g_streams[static_cast<std::size_t>(device)];
  for (std::size_t i = 0; i < handles.size(); ++i)
    if (handles[i] == handle) return static_cast<c10::StreamId>(i + 1);
  return -1;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  auto slot = static_cast<std::size_t>(index);
  c10::StreamId id = slot < t_current_streams.size() ? t_current_streams[slot] : 0;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), id);
}

c10::Stream set_current_stream(const c10::Stream& stream) {
  auto previous = current_stream(stream.device_index());
  auto slot = static_cast<std::size_t>(stream.device_index());
  if (t_current_streams.size() <= slot) t_current_streams.resize(slot + 1, 0);
  t_current_streams[slot] = stream.id();
  return previous;
}

// kernel_launch: inline requires a runtime whose default stream runs work before
// returning (docs/runtime-adapter.md), so only a created stream is waited for.
void wait_for_current_stream(c10::DeviceIndex index) {
  auto slot = static_cast<std::size_t>(index);
  if (slot >= t_current_streams.size() || t_current_streams[slot] == 0) return;
  auto stream = current_stream(index);
  host_wait_stream(index, native_stream(stream), HostWait::InlineKernel, "a kernel");
}

runtime::Stream launch_stream(c10::DeviceIndex device) {
  return native_stream(current_stream(device));
}

void wait_for_device_results(c10::DeviceIndex device, const char* op) {
  host_wait_stream(device, launch_stream(device), HostWait::Kernel, op);
}

namespace {
thread_local const char* t_current_kernel = nullptr;
}  // namespace

const char* current_kernel() { return t_current_kernel; }

CurrentKernel::CurrentKernel(const char* name) noexcept : previous_(t_current_kernel) {
  t_current_kernel = name;
}
CurrentKernel::~CurrentKernel() { t_current_kernel = previous_; }

c10::Stream new_stream(c10::DeviceIndex index) {
  check_device_index(index);
  runtime::Stream handle = nullptr;
  check_status(runtime::stream_create(index, &handle), "stream_create");
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  if (g_streams.size() <= static_cast<std::size_t>(index)) g_streams.resize(index + 1);
  g_streams[index].push_back(handle);
  auto id = static_cast<c10::StreamId>(g_streams[index].size());
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), id);
}

c10::Stream pool_stream(c10::DeviceIndex index) {
  constexpr std::size_t kPoolSize = 8;  // distinct streams before reuse
  static std::mutex mutex;
  static std::vector<std::vector<c10::Stream>> pools;
  static std::vector<std::size_t> next;
  check_device_index(index);
  std::lock_guard<std::mutex> lock(mutex);
  auto slot = static_cast<std::size_t>(index);
  if (pools.size() <= slot) {
    pools.resize(slot + 1);
    next.resize(slot + 1, 0);
  }
  if (pools[slot].size() < kPoolSize) {
    pools[slot].push_back(new_stream(index));
    return pools[slot].back();
  }
  return pools[slot][next[slot]++ % kPoolSize];
}

}  // namespace FLSDK_BACKEND_NS
