// Runtime adapter of the {{ cookiecutter.display_name }}: the device-facing
// calls the generated glue makes (interface: generated/runtime_adapter.h).
//
{% if cookiecutter.memory_model == "discrete" %}
// Scaffolded as a simulated *discrete* device so the backend builds and runs
// before the chip's runtime is wired in, with the property every discrete
// accelerator has: host code cannot read device memory. Each device's memory
// sits behind two address ranges: the device addresses handed to PyTorch,
// which are never readable (a host dereference crashes at once), and a view
// only this runtime uses (copies, and work run by launch_host_kernel, which
// reaches the bytes through device_view). Streams run work in order, before
// the call returns. Replace each body with a call into your driver.
{% else %}
// Scaffolded as a host-memory implementation so the backend builds and runs
// before the chip's runtime is wired in: "device" memory is host memory with
// a per-device capacity, copies are memcpy, streams run work in order, before
// the call returns. Replace each body with a call into your driver.
{% endif %}
#include "runtime_adapter.h"

{% if cookiecutter.memory_model == "discrete" %}
#include <sys/mman.h>

{% endif %}
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {{ cookiecutter.name }}::runtime {
namespace {

thread_local std::string t_last_error;
// Set while work queued by launch_host_kernel runs: device_view answers only then.
thread_local int t_running_device_work = 0;

Status fail(Status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

{% if cookiecutter.memory_model == "discrete" %}
// One device's memory: `capacity` bytes at device addresses [device, device +
// capacity) that are never readable (PROT_NONE), mirrored at [view, view +
// capacity) where this runtime reads and writes them. Allocation is first fit
// over offsets with coalescing free ranges.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t capacity) : capacity_(capacity) {
    device_ = reserve(PROT_NONE);
    view_ = reserve(PROT_READ | PROT_WRITE);
    if (capacity_) free_[0] = capacity_;
  }
  ~DeviceMemory() {
    if (device_) munmap(device_, capacity_);
    if (view_) munmap(view_, capacity_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  bool ok() const { return capacity_ == 0 || (device_ && view_); }
  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }

  void* allocate(std::size_t bytes, std::size_t align) {
    bytes = (bytes + align - 1) / align * align;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const std::size_t offset = it->first, rest = it->second - bytes;
      free_.erase(it);
      if (rest) free_[offset + bytes] = rest;
      used_blocks_[offset] = bytes;
      used_ += bytes;
      return device_ + offset;
    }
    return nullptr;
  }

  bool release(void* ptr) {
    auto it = used_blocks_.find(offset_of(ptr));
    if (!contains(ptr) || it == used_blocks_.end()) return false;
    std::size_t offset = it->first, size = it->second;
    used_blocks_.erase(it);
    used_ -= size;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_[offset] = size;
    return true;
  }

  bool contains(const void* p) const {
    auto c = static_cast<const char*>(p);
    return device_ && c >= device_ && c < device_ + capacity_;
  }
  // The runtime's view of device address p (which must be inside this memory).
  char* view(const void* p) const { return view_ + offset_of(p); }

 private:
  char* reserve(int protection) {
    if (!capacity_) return nullptr;
    void* m = mmap(nullptr, capacity_, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }
  std::size_t offset_of(const void* p) const {
    return static_cast<std::size_t>(static_cast<const char*>(p) - device_);
  }

  std::size_t capacity_;
  char* device_ = nullptr;
  char* view_ = nullptr;
  std::size_t used_ = 0;
  std::map<std::size_t, std::size_t> free_;          // offset -> size
  std::unordered_map<std::size_t, std::size_t> used_blocks_;  // offset -> size
};

std::mutex g_mutex;
DeviceConfig g_config{};
std::vector<std::unique_ptr<DeviceMemory>> g_devices;

Status check_device(int device) {
  if (device >= 0 && device < static_cast<int>(g_devices.size())) return Status::Ok;
  return fail(Status::InvalidDevice, "invalid device index " + std::to_string(device) + " (" +
                                         std::to_string(g_devices.size()) + " devices)");
}

// The view of a device address of any device, or null.
char* view_of(const void* p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& d : g_devices)
    if (d->contains(p)) return d->view(p);
  return nullptr;
}

// One side of a copy: a device address becomes its view; a host pointer stays.
Status side(const void* p, bool on_device, const char* role, const char** out) {
  if (!on_device) {
    if (view_of(p))
      return fail(Status::InvalidValue, std::string("memcpy: the ") + role +
                                            " is device memory but the copy kind says host");
    *out = static_cast<const char*>(p);
    return Status::Ok;
  }
  const char* v = view_of(p);
  if (!v) return fail(Status::InvalidValue, std::string("memcpy: the ") + role +
                                                " is not device memory");
  *out = v;
  return Status::Ok;
}
{% else %}
struct DeviceState {
  std::size_t capacity = 0;
  std::size_t used = 0;
  std::unordered_map<void*, std::size_t> blocks;
};

std::mutex g_mutex;
DeviceConfig g_config{};
std::vector<DeviceState> g_devices;

Status check_device(int device) {
  if (device >= 0 && device < static_cast<int>(g_devices.size())) return Status::Ok;
  return fail(Status::InvalidDevice, "invalid device index " + std::to_string(device) + " (" +
                                         std::to_string(g_devices.size()) + " devices)");
}
{% endif %}

struct HostEvent {
  std::chrono::steady_clock::time_point time;
};

}  // namespace

{% if cookiecutter.memory_model == "discrete" %}
Status init(const DeviceConfig& config) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = config;
  g_devices.clear();
  for (int i = 0; i < config.device_count; ++i) {
    g_devices.push_back(std::make_unique<DeviceMemory>(config.memory_capacity));
    if (!g_devices.back()->ok())
      return fail(Status::Error, "cannot reserve " + std::to_string(config.memory_capacity) +
                                     " bytes of address space for device " + std::to_string(i));
  }
  return Status::Ok;
}

int device_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int>(g_devices.size());
}

Status malloc(int device, std::size_t bytes, void** ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto& d = *g_devices[static_cast<std::size_t>(device)];
  std::size_t align = g_config.memory_alignment ? g_config.memory_alignment : 64;
  *ptr = d.allocate(bytes, align);
  if (!*ptr)
    return fail(Status::OutOfMemory, "requested " + std::to_string(bytes) + " bytes, " +
                                         std::to_string(d.capacity() - d.used()) + " free of " +
                                         std::to_string(d.capacity()));
  return Status::Ok;
}

Status free(int device, void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  if (!g_devices[static_cast<std::size_t>(device)]->release(ptr))
    return fail(Status::InvalidValue, "free of an unknown pointer");
  return Status::Ok;
}

Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int, Stream) {
  if (!bytes) return Status::Ok;
  const bool dst_device = kind == CopyKind::HostToDevice || kind == CopyKind::DeviceToDevice;
  const bool src_device = kind == CopyKind::DeviceToHost || kind == CopyKind::DeviceToDevice;
  const char *d = nullptr, *s = nullptr;
  if (auto st = side(dst, dst_device, "destination", &d); st != Status::Ok) return st;
  if (auto st = side(src, src_device, "source", &s); st != Status::Ok) return st;
  std::memmove(const_cast<char*>(d), s, bytes);
  return Status::Ok;
}

Status memcpy_peer(void* dst, int, const void* src, int, std::size_t bytes) {
  return memcpy(dst, src, bytes, CopyKind::DeviceToDevice, 0, nullptr);
}

Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto s = check_device(device); s != Status::Ok) return s;
  const auto& d = *g_devices[static_cast<std::size_t>(device)];
  *free_bytes = d.capacity() - d.used();
  *total_bytes = d.capacity();
  return Status::Ok;
}
{% else %}
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
  if (bytes) std::memmove(dst, src, bytes);
  return Status::Ok;
}

Status memcpy_peer(void* dst, int, const void* src, int, std::size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
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
{% endif %}

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

// ---- optional primitives (device.yaml runtime_primitives) --------------------

Status memset(void* dst, int value, std::size_t bytes, int device, Stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
{% if cookiecutter.memory_model == "discrete" %}
  char* d = view_of(dst);
  if (!d) return fail(Status::InvalidValue, "memset: not device memory");
  std::memset(d, value, bytes);
{% else %}
  std::memset(dst, value, bytes);
{% endif %}
  return Status::Ok;
}

// Same-dtype strided copies only, to show the contract: a dtype change is
// declined (Unsupported) and the glue stages it through host memory.
Status copy_strided(const StridedCopy& c, int device, Stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  if (c.dst_dtype != c.src_dtype) return Status::Unsupported;
  std::size_t size = 0;
  switch (c.dst_dtype) {
    case Dtype::UInt8: case Dtype::Int8: case Dtype::Bool: size = 1; break;
    case Dtype::Int16: case Dtype::Float16: case Dtype::BFloat16: size = 2; break;
    case Dtype::Int32: case Dtype::Float32: size = 4; break;
    case Dtype::Int64: case Dtype::Float64: size = 8; break;
  }
{% if cookiecutter.memory_model == "discrete" %}
  char* dst = view_of(c.dst);
  const char* src = view_of(c.src);
  if (!dst || !src) return fail(Status::InvalidValue, "copy_strided: not device memory");
{% else %}
  char* dst = static_cast<char*>(c.dst);
  const char* src = static_cast<const char*>(c.src);
{% endif %}
  std::int64_t index[kMaxCopyDims] = {};
  std::int64_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= c.sizes[d];
  for (std::int64_t i = 0; i < total; ++i) {
    std::int64_t dst_off = 0, src_off = 0;
    for (int d = 0; d < c.ndim; ++d) {
      dst_off += index[d] * c.dst_strides[d];
      src_off += index[d] * c.src_strides[d];
    }
    std::memcpy(dst + dst_off * static_cast<std::int64_t>(size),
                src + src_off * static_cast<std::int64_t>(size), size);
    for (int d = c.ndim - 1; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[d] < c.sizes[d]) break;
      index[d] = 0;
    }
  }
  return Status::Ok;
}

Status launch_host_kernel(int device, Stream, void (*fn)(void*), void* arg) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  struct Running {  // device_view answers while fn runs, also if it throws
    Running() { ++t_running_device_work; }
    ~Running() { --t_running_device_work; }
  } running;
  fn(arg);  // the stream runs work before the call returns
  return Status::Ok;
}

void* device_view(const void* device_ptr) {
  if (t_running_device_work == 0) return nullptr;  // only device work reaches device memory
{% if cookiecutter.memory_model == "discrete" %}
  return view_of(device_ptr);
{% else %}
  return const_cast<void*>(device_ptr);
{% endif %}
}

}  // namespace {{ cookiecutter.name }}::runtime
