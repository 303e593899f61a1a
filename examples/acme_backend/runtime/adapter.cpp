// acme's implementation of flsdk's runtime adapter (generated/runtime_adapter.h):
// a thin mapping onto the acme vendor runtime's C API. Kept free of logic on
// purpose: every check and every message comes from the runtime itself, so the
// PyTorch glue and direct runtime users see the same behaviour.
// The exceptions: compute units (compute_units.h), a pool beside the runtime,
// whose size init() and the "compute_units" option set here, and the vector
// instruction set kernels use (vector_isa.h: ACME_ISA, option "isa").
#include "acme_runtime.h"
#include "compute_units.h"
#include "vector_isa.h"

#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace acme::runtime {
namespace {

// acmeError_t values are chosen equal to Status values; these asserts keep it so.
static_assert(static_cast<int>(Status::Ok) == acmeSuccess);
static_assert(static_cast<int>(Status::OutOfMemory) == acmeErrorMemoryAllocation);
static_assert(static_cast<int>(Status::InvalidDevice) == acmeErrorInvalidDevice);
static_assert(static_cast<int>(Status::InvalidValue) == acmeErrorInvalidValue);
static_assert(static_cast<int>(Status::Error) == acmeErrorRuntime);
static_assert(static_cast<int>(CopyKind::HostToHost) == acmeMemcpyHostToHost);
static_assert(static_cast<int>(CopyKind::HostToDevice) == acmeMemcpyHostToDevice);
static_assert(static_cast<int>(CopyKind::DeviceToHost) == acmeMemcpyDeviceToHost);
static_assert(static_cast<int>(CopyKind::DeviceToDevice) == acmeMemcpyDeviceToDevice);

Status st(acmeError_t e) { return static_cast<Status>(e); }
acmeStream_t as_stream(Stream s) { return static_cast<acmeStream_t>(s); }
acmeEvent_t as_event(Event e) { return static_cast<acmeEvent_t>(e); }

// Message of a failed "compute_units" or "isa" option (or ACME_ISA at init) on
// this thread, reported by the next last_error() (the runtime's own last error
// knows nothing of units or instruction sets).
thread_local std::string t_adapter_error;

}  // namespace

Status init(const DeviceConfig& config) {
  Status s = st(acmeInit(config.device_count, config.memory_capacity, config.memory_alignment));
  if (s != Status::Ok) return s;
  units::configure(config.compute_units);
  if (!isa::configure_from_env(&t_adapter_error)) return Status::InvalidValue;
  return s;
}

int device_count() {
  int n = 0;
  acmeGetDeviceCount(&n);
  return n;
}

Status malloc(int device, std::size_t bytes, void** ptr) {
  return st(acmeMalloc(device, ptr, bytes));
}

Status free(int device, void* ptr) { return st(acmeFree(device, ptr)); }

// pinned_host (device.yaml runtime_primitives): the glue's pinned-memory blocks.
Status host_alloc(std::size_t bytes, void** ptr) { return st(acmeMallocHost(ptr, bytes)); }

Status host_free(void* ptr) { return st(acmeFreeHost(ptr)); }

Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int device,
              Stream stream) {
  return st(acmeMemcpyAsync(dst, src, bytes, static_cast<acmeMemcpyKind>(kind), device,
                            as_stream(stream)));
}

Status memcpy_peer(void* dst, int dst_device, const void* src, int src_device,
                   std::size_t bytes) {
  return st(acmeMemcpyPeer(dst, dst_device, src, src_device, bytes));
}

Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  return st(acmeMemGetInfo(device, free_bytes, total_bytes));
}

Status stream_create(int device, Stream* stream) {
  acmeStream_t s = nullptr;
  Status r = st(acmeStreamCreate(device, &s));
  if (stream) *stream = s;
  return r;
}

Status stream_destroy(int device, Stream stream) {
  return st(acmeStreamDestroy(device, as_stream(stream)));
}

Status stream_synchronize(int device, Stream stream) {
  return st(acmeStreamSynchronize(device, as_stream(stream)));
}

Status stream_query(int device, Stream stream, bool* idle) {
  int v = 0;
  Status r = st(acmeStreamQuery(device, as_stream(stream), idle ? &v : nullptr));
  if (r == Status::Ok) *idle = v != 0;
  return r;
}

Status stream_wait_event(int device, Stream stream, Event event) {
  return st(acmeStreamWaitEvent(device, as_stream(stream), as_event(event)));
}

Status event_create(int device, Event* event) {
  acmeEvent_t e = nullptr;
  Status r = st(acmeEventCreate(device, &e));
  if (event) *event = e;
  return r;
}

Status event_destroy(int device, Event event) {
  return st(acmeEventDestroy(device, as_event(event)));
}

Status event_record(int device, Event event, Stream stream) {
  return st(acmeEventRecord(device, as_event(event), as_stream(stream)));
}

Status event_synchronize(int device, Event event) {
  return st(acmeEventSynchronize(device, as_event(event)));
}

Status event_query(int device, Event event, bool* done) {
  int v = 0;
  Status r = st(acmeEventQuery(device, as_event(event), done ? &v : nullptr));
  if (r == Status::Ok) *done = v != 0;
  return r;
}

Status event_elapsed_ms(Event start, Event end, float* ms) {
  return st(acmeEventElapsedTime(ms, as_event(start), as_event(end)));
}

Status device_synchronize(int device) { return st(acmeDeviceSynchronize(device)); }

// Not called: acme's kernels queue their device work themselves
// (device.yaml kernel_launch: stream).
void kernel_begin() {}
void kernel_end() {}

Status set_option(const char* key, const char* value) {
  if (key && std::string(key) == "compute_units")
    return units::set_option(value ? value : "", &t_adapter_error) ? Status::Ok : Status::InvalidValue;
  if (key && std::string(key) == "isa")
    return isa::set_option(value ? value : "", &t_adapter_error) ? Status::Ok : Status::InvalidValue;
  return st(acmeSetOption(key, value));
}

// Unknown keys give "" (the interface has no status here); last_error() says why.
std::string get_option(const char* key) {
  if (key && std::string(key) == "compute_units") return units::get_option();
  if (key && std::string(key) == "isa") return isa::get_option();
  size_t needed = 0;
  if (acmeGetOption(key, nullptr, 0, &needed) != acmeSuccess) return {};
  std::string v(needed + 1, '\0');
  // Stats may grow between the two calls; retry until the value fits.
  while (acmeGetOption(key, v.data(), v.size(), &needed) == acmeSuccess) {
    if (needed < v.size()) {
      v.resize(needed);
      return v;
    }
    v.assign(needed + 1, '\0');
  }
  return {};
}

const char* last_error() {
  thread_local std::string shown;
  if (t_adapter_error.empty()) return acmeGetLastErrorString();
  shown = std::move(t_adapter_error);
  t_adapter_error.clear();
  return shown.c_str();
}

Status launch(int device, Stream stream, std::function<void()> fn, const char* name,
              ActivityKind kind) {
  return st(acmeLaunch(device, as_stream(stream), std::move(fn), name,
                       static_cast<acmeActivityKind>(kind)));
}

// runtime_primitives: host_kernels (Inductor's C++ kernels run as device work).
Status launch_host_kernel(int device, Stream stream, void (*fn)(void*), void* arg) {
  return st(acmeLaunchHostFunc(device, as_stream(stream), fn, arg));
}

void* device_view(const void* device_ptr) { return acmeDeviceView(device_ptr); }

// runtime_primitives: ipc (device memory and events shared between processes).
static_assert(sizeof(IpcMemHandle) == sizeof(acmeIpcMemHandle_t));
static_assert(sizeof(IpcEventHandle) == sizeof(acmeIpcEventHandle_t));

Status ipc_get_mem_handle(int device, void* base, IpcMemHandle* handle) {
  acmeIpcMemHandle_t h;
  Status r = st(acmeIpcGetMemHandle(device, base, handle ? &h : nullptr));
  if (handle) std::memcpy(handle->bytes, h.reserved, sizeof h.reserved);
  return r;
}

Status ipc_open_mem_handle(int device, const IpcMemHandle& handle, void** ptr) {
  acmeIpcMemHandle_t h;
  std::memcpy(h.reserved, handle.bytes, sizeof h.reserved);
  return st(acmeIpcOpenMemHandle(device, h, ptr));
}

Status ipc_close_mem_handle(int device, void* ptr) {
  return st(acmeIpcCloseMemHandle(device, ptr));
}

Status ipc_get_event_handle(int device, Event event, IpcEventHandle* handle) {
  acmeIpcEventHandle_t h;
  Status r = st(acmeIpcGetEventHandle(device, as_event(event), handle ? &h : nullptr));
  if (handle) std::memcpy(handle->bytes, h.reserved, sizeof h.reserved);
  return r;
}

Status ipc_open_event_handle(int device, const IpcEventHandle& handle, Event* event) {
  acmeIpcEventHandle_t h;
  std::memcpy(h.reserved, handle.bytes, sizeof h.reserved);
  acmeEvent_t e = nullptr;
  Status r = st(acmeIpcOpenEventHandle(device, h, event ? &e : nullptr));
  if (event) *event = e;
  return r;
}

void* device_or_host_view(const void* p) { return acmeDeviceOrHostView(p); }

// runtime_primitives: profiling (the records behind torch.profiler's device lanes).
static_assert(static_cast<int>(ActivityKind::Kernel) == acmeActivityKernel);
static_assert(static_cast<int>(ActivityKind::Memcpy) == acmeActivityMemcpy);
static_assert(static_cast<int>(ActivityKind::Memset) == acmeActivityMemset);
static_assert(static_cast<int>(ActivityKind::Collective) == acmeActivityCollective);

Status profiler_start() { return st(acmeProfilerStart()); }

Status profiler_stop() { return st(acmeProfilerStop()); }

void profiler_push_correlation(std::uint64_t id) { acmeProfilerPushCorrelation(id); }

void profiler_pop_correlation() { acmeProfilerPopCorrelation(); }

Status profiler_flush(std::vector<Activity>* out) {
  acmeActivity chunk[1024];
  for (;;) {
    size_t n = 0;
    if (auto e = acmeProfilerFlush(chunk, std::size(chunk), &n)) return st(e);
    if (n == 0) return Status::Ok;
    for (size_t i = 0; i < n; ++i) {
      const acmeActivity& a = chunk[i];
      Activity r;
      r.kind = static_cast<ActivityKind>(a.kind);
      r.name = a.name ? a.name : "";
      r.device = a.device;
      r.stream = a.stream;
      r.start_ns = a.start_ns;
      r.end_ns = a.end_ns;
      r.correlation_id = a.correlation_id;
      r.launch_start_ns = a.launch_start_ns;
      r.launch_end_ns = a.launch_end_ns;
      r.bytes = a.bytes;
      r.copy_kind = static_cast<CopyKind>(a.copy_kind);
      out->push_back(std::move(r));
    }
  }
}

}  // namespace acme::runtime
