// Runtime adapter of the OpenCL device: the device-facing
// calls the generated glue makes (interface: generated/runtime_adapter.h,
// reference: docs/runtime-adapter.md).
//
// Scaffolded over a simulated device (runtime/simulator/), so the backend builds
// and runs before the chip's runtime is wired in: a strict one, with the
// memory model device.yaml names (memory.model: discrete makes device memory
// unreadable by host code), streams that queue their work on worker threads,
// and a slow-device option (OCL_SLOW_DEVICE=<microseconds>,
// or the option slow_device) that holds queued work back. Each call below maps
// onto one call of the simulator: replace it with the call of your driver, then
// delete runtime/simulator/ (and its lines in runtime/runtime.cmake).
#include "runtime_adapter.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "simulator/simulator.h"

namespace ocl::runtime {
namespace {

// An unsigned number of microseconds, or false.
bool parse_microseconds(const char* text, std::uint64_t* out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-' || v > 10'000'000ULL) return false;
  *out = v;
  return true;
}

}  // namespace

// Runtime version 1.1 of generated/runtime_adapter.h (device.yaml adapter_versions).
static_assert(kRuntimeAdapterVersionMajor == 1, "runtime_adapter.h changed major version: "
              "revisit this adapter (flsdk gen printed what changed)");

Status init(const DeviceConfig& config) {
  std::uint64_t slow_us = 0;
  const char* slow = std::getenv(sim::kSlowDeviceEnv);
  if (slow && *slow && !parse_microseconds(slow, &slow_us))
    return sim::fail(Status::InvalidValue, std::string(sim::kSlowDeviceEnv) + "=" + slow +
                                               ": expected microseconds, 0..10000000");
  if (auto s = sim::memory_init(config.device_count, config.memory_capacity,
                                config.memory_alignment);
      s != Status::Ok)
    return s;
  sim::install_fault_report();
  return sim::streams_init(slow_us);
}

int device_count() { return sim::device_count(); }

Status malloc(int device, std::size_t bytes, void** ptr) { return sim::malloc(device, bytes, ptr); }
Status free(int device, void* ptr) { return sim::free(device, ptr); }
Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  return sim::memory_info(device, free_bytes, total_bytes);
}

// Checked now (the ranges, the kinds), the bytes moved when the stream reaches
// the copy: host memory must stay valid until then.
Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int device,
              Stream stream) {
  if (auto s = sim::check_device(device); s != Status::Ok) return s;
  if (!bytes) return Status::Ok;
  const bool dst_device = kind == CopyKind::HostToDevice || kind == CopyKind::DeviceToDevice;
  const bool src_device = kind == CopyKind::DeviceToHost || kind == CopyKind::DeviceToDevice;
  char* d = dst_device ? sim::bytes_of(dst, bytes, device, "memcpy: the destination")
                       : const_cast<char*>(sim::host_side(dst, bytes, "memcpy: the destination"));
  if (!d) return Status::InvalidValue;
  const char* s = src_device ? sim::bytes_of(src, bytes, device, "memcpy: the source")
                             : sim::host_side(src, bytes, "memcpy: the source");
  if (!s) return Status::InvalidValue;
  return sim::enqueue(device, stream, "copy", [d, s, bytes] { std::memmove(d, s, bytes); });
}

// Complete when it returns (the glue waited for both devices' streams).
Status memcpy_peer(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) {
  if (!bytes) return Status::Ok;
  char* d = sim::bytes_of(dst, bytes, dst_device, "memcpy_peer: the destination");
  if (!d) return Status::InvalidValue;
  const char* s = sim::bytes_of(src, bytes, src_device, "memcpy_peer: the source");
  if (!s) return Status::InvalidValue;
  std::memmove(d, s, bytes);
  return Status::Ok;
}

Status stream_create(int device, Stream* stream) { return sim::stream_create(device, stream); }
Status stream_destroy(int device, Stream stream) { return sim::stream_destroy(device, stream); }
Status stream_synchronize(int device, Stream stream) { return sim::stream_synchronize(device, stream); }
Status stream_query(int device, Stream stream, bool* idle) { return sim::stream_query(device, stream, idle); }
Status stream_wait_event(int device, Stream stream, Event event) {
  return sim::stream_wait_event(device, stream, event);
}

Status event_create(int device, Event* event) { return sim::event_create(device, event); }
Status event_destroy(int device, Event event) { return sim::event_destroy(device, event); }
Status event_record(int device, Event event, Stream stream) { return sim::event_record(device, event, stream); }
Status event_synchronize(int device, Event event) { return sim::event_synchronize(device, event); }
Status event_query(int device, Event event, bool* done) { return sim::event_query(device, event, done); }
Status event_elapsed_ms(Event start, Event end, float* ms) { return sim::event_elapsed_ms(start, end, ms); }

Status device_synchronize(int device) { return sim::device_synchronize(device); }

// kernel_launch: stream (device.yaml): kernels queue their work; never called.
void kernel_begin() {}
void kernel_end() {}

// slow_device: microseconds every piece of queued work waits before it runs.
Status set_option(const char* key, const char* value) {
  if (std::strcmp(key, "slow_device") == 0) {
    std::uint64_t us = 0;
    if (!parse_microseconds(value, &us))
      return sim::fail(Status::InvalidValue, std::string("ocl: option slow_device=") +
                                                 value + ": expected microseconds, 0..10000000");
    sim::set_slow_device(us);
    return Status::Ok;
  }
  return sim::fail(Status::InvalidValue, std::string("ocl: unknown runtime option '") +
                                             key + "' (this runtime has: slow_device)");
}

std::string get_option(const char* key) {
  if (std::strcmp(key, "slow_device") == 0) return std::to_string(sim::slow_device());
  return "";
}

const char* last_error() { return sim::last_error(); }

// ---- optional primitives (device.yaml runtime_primitives) --------------------

Status memset(void* dst, int value, std::size_t bytes, int device, Stream stream) {
  if (auto s = sim::check_device(device); s != Status::Ok) return s;
  if (!bytes) return Status::Ok;
  char* d = sim::bytes_of(dst, bytes, device, "memset: the destination");
  if (!d) return Status::InvalidValue;
  return sim::enqueue(device, stream, "fill", [d, value, bytes] { std::memset(d, value, bytes); });
}

// Strided copies converting the element type as PyTorch's CPU does
// (runtime_adapter.h lists the rules; simulator/convert.cpp follows them).
Status copy_strided(const StridedCopy& c, int device, Stream stream) {
  if (auto s = sim::check_device(device); s != Status::Ok) return s;
  if (c.ndim < 0 || c.ndim > kMaxCopyDims)
    return sim::fail(Status::InvalidValue, "ocl: copy_strided: ndim " + std::to_string(c.ndim));
  // The extent each side spans (strides are never negative), checked against its allocation.
  std::int64_t dst_last = 0, src_last = 0;
  for (int d = 0; d < c.ndim; ++d) {
    if (c.sizes[d] == 0) return Status::Ok;
    dst_last += (c.sizes[d] - 1) * c.dst_strides[d];
    src_last += (c.sizes[d] - 1) * c.src_strides[d];
  }
  const auto span = [](std::int64_t last, Dtype t) {
    return static_cast<std::size_t>(last + 1) * sim::element_size(t);
  };
  char* d = sim::bytes_of(c.dst, span(dst_last, c.dst_dtype), device, "copy_strided: the destination");
  if (!d) return Status::InvalidValue;
  const char* s = sim::bytes_of(c.src, span(src_last, c.src_dtype), device, "copy_strided: the source");
  if (!s) return Status::InvalidValue;
  return sim::enqueue(device, stream, "strided copy", [c, d, s] { sim::strided_convert(c, d, s); });
}

Status launch_host_kernel(int device, Stream stream, void (*fn)(void*), void* arg) {
  if (!fn) return sim::fail(Status::InvalidValue, "ocl: launch_host_kernel: null function");
  return sim::enqueue(device, stream, "kernel", [fn, arg] { fn(arg); });
}

// Device work reaches device memory; host code does not (null).
void* device_view(const void* device_ptr) {
  if (!sim::running_work()) return nullptr;
  return sim::bytes_of(device_ptr, 1, -1, "device_view");
}

Status host_alloc(std::size_t bytes, void** ptr) { return sim::host_alloc(bytes, ptr); }
Status host_free(void* ptr) { return sim::host_free(ptr); }

}  // namespace ocl::runtime
