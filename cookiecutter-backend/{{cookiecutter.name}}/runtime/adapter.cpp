// Runtime adapter of the {{ cookiecutter.display_name }}: the device-facing
// calls the generated glue makes (interface: generated/runtime_adapter.h).
//
// Scaffolded as a host-memory implementation so the backend builds and runs
// before the chip's runtime is wired in: "device" memory is host memory with
// a per-device capacity, copies are memcpy, streams run work in order.
// Replace each body with a call into your driver.
#include "runtime_adapter.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {{ cookiecutter.name }}::runtime {
namespace {

thread_local std::string t_last_error;

struct DeviceState {
  std::size_t capacity = 0;
  std::size_t used = 0;
  std::unordered_map<void*, std::size_t> blocks;
};

std::mutex g_mutex;
DeviceConfig g_config{};
std::vector<DeviceState> g_devices;

struct HostEvent {
  std::chrono::steady_clock::time_point time;
};

Status fail(Status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

Status check_device(int device) {
  if (device >= 0 && device < static_cast<int>(g_devices.size())) return Status::Ok;
  return fail(Status::InvalidDevice, "invalid device index " + std::to_string(device) + " (" +
                                         std::to_string(g_devices.size()) + " devices)");
}

}  // namespace

Status init(const DeviceConfig& config) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = config;
  g_devices.assign(static_cast<std::size_t>(config.device_count), DeviceState{});
  for (auto& d : g_devices) d.capacity = config.memory_capacity;
  return Status::Ok;
}

int device_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int>(g_devices.size());
}

Status malloc(int device, std::size_t bytes, void** ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto& d = g_devices[static_cast<std::size_t>(device)];
  if (d.used + bytes > d.capacity)
    return fail(Status::OutOfMemory, "requested " + std::to_string(bytes) + " bytes, " +
                                         std::to_string(d.capacity - d.used) + " free of " +
                                         std::to_string(d.capacity));
  std::size_t align = g_config.memory_alignment ? g_config.memory_alignment : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!p) return fail(Status::OutOfMemory, "host allocation failed");
  d.used += bytes;
  d.blocks[p] = bytes;
  *ptr = p;
  return Status::Ok;
}

Status free(int device, void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto& d = g_devices[static_cast<std::size_t>(device)];
  auto it = d.blocks.find(ptr);
  if (it == d.blocks.end()) return fail(Status::InvalidValue, "free of an unknown pointer");
  d.used -= it->second;
  d.blocks.erase(it);
  std::free(ptr);
  return Status::Ok;
}

Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind, int, Stream) {
  if (bytes) std::memcpy(dst, src, bytes);
  return Status::Ok;
}

Status memcpy_peer(void* dst, int, const void* src, int, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
  return Status::Ok;
}

Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  const auto& d = g_devices[static_cast<std::size_t>(device)];
  *free_bytes = d.capacity - d.used;
  *total_bytes = d.capacity;
  return Status::Ok;
}

// Work runs synchronously in the caller, so every stream is always idle.
Status stream_create(int, Stream* stream) {
  static std::atomic<std::uintptr_t> next{1};
  *stream = reinterpret_cast<Stream>(next++);
  return Status::Ok;
}
Status stream_destroy(int, Stream) { return Status::Ok; }
Status stream_synchronize(int, Stream) { return Status::Ok; }
Status stream_query(int, Stream, bool* idle) {
  *idle = true;
  return Status::Ok;
}
Status stream_wait_event(int, Stream, Event) { return Status::Ok; }

Status event_create(int, Event* event) {
  *event = new HostEvent();
  return Status::Ok;
}
Status event_destroy(int, Event event) {
  delete static_cast<HostEvent*>(event);
  return Status::Ok;
}
Status event_record(int, Event event, Stream) {
  static_cast<HostEvent*>(event)->time = std::chrono::steady_clock::now();
  return Status::Ok;
}
Status event_synchronize(int, Event) { return Status::Ok; }
Status event_query(int, Event, bool* done) {
  *done = true;
  return Status::Ok;
}
Status event_elapsed_ms(Event start, Event end, float* ms) {
  auto a = static_cast<HostEvent*>(start)->time;
  auto b = static_cast<HostEvent*>(end)->time;
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return Status::Ok;
}

Status device_synchronize(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return check_device(device);
}

void kernel_begin() {}
void kernel_end() {}

Status set_option(const char* key, const char*) {
  return fail(Status::InvalidValue, std::string("unknown runtime option '") + key +
                                        "' (this runtime has no options)");
}
std::string get_option(const char*) { return ""; }

const char* last_error() { return t_last_error.c_str(); }

}  // namespace {{ cookiecutter.name }}::runtime
