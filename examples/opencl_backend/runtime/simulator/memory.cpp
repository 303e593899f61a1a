// The simulated device's memory (simulator.h). Each device has `capacity` bytes
// behind an address range of its own. With memory.model discrete those device
// addresses are never readable or writable by host code (PROT_NONE) and the
// bytes live in a second mapping at the same offsets, the view, which only the
// simulator's copies and launched work reach; with memory.model host the device
// addresses are the view. Allocation is first fit over offsets with coalescing;
// the bookkeeping lives outside the memory.
#include "simulator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace ocl::sim {
namespace {

thread_local std::string t_last_error;

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t capacity) : capacity_(capacity) {
    if (!capacity_) return;
    view_ = reserve(PROT_READ | PROT_WRITE);
    device_ = kDiscrete ? reserve(PROT_NONE) : view_;
    if (view_ && device_) free_[0] = capacity_;
  }
  ~DeviceMemory() {
    if (kDiscrete && device_) munmap(device_, capacity_);
    if (view_) munmap(view_, capacity_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  bool ok() const { return capacity_ == 0 || (device_ && view_); }
  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  char* base() const { return device_; }

  void* allocate(std::size_t bytes, std::size_t align) {
    bytes = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const std::size_t offset = it->first, rest = it->second - bytes;
      free_.erase(it);
      if (rest) free_[offset + bytes] = rest;
      live_[offset] = bytes;
      used_ += bytes;
      return device_ + offset;
    }
    return nullptr;
  }

  bool release(void* ptr) {
    if (!contains(ptr)) return false;
    auto it = live_.find(offset_of(ptr));
    if (it == live_.end()) return false;
    std::size_t offset = it->first, size = it->second;
    live_.erase(it);
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

  // The live allocation holding p: (offset, size), or size 0.
  std::pair<std::size_t, std::size_t> allocation_of(const void* p) const {
    const std::size_t offset = offset_of(p);
    auto it = live_.upper_bound(offset);
    if (it == live_.begin()) return {0, 0};
    --it;
    if (offset >= it->first + it->second) return {0, 0};
    return *it;
  }

  char* view(const void* p) const { return view_ + offset_of(p); }

 private:
  char* reserve(int protection) const {
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
  std::map<std::size_t, std::size_t> free_;  // offset -> size
  std::map<std::size_t, std::size_t> live_;  // offset -> size
};

struct Memory {
  std::mutex mu;
  std::size_t alignment = 256;
  std::vector<std::unique_ptr<DeviceMemory>> devices;
  std::unordered_set<const void*> pinned;  // blocks from host_alloc ...
  std::map<std::uintptr_t, std::size_t> pinned_ranges;  // ... and their extents
};

// Never destroyed: streams may still copy while the process exits.
Memory& memory() {
  static auto* m = new Memory();
  return *m;
}

// The address ranges of the devices, for the fault report: written by init
// before the handler is installed, read without a lock from the handler.
constexpr int kMaxDevices = 64;
struct Range {
  std::uintptr_t begin = 0, end = 0;
};
Range g_ranges[kMaxDevices];
int g_range_count = 0;

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

Status fail(Status status, std::string message) {
  t_last_error = std::move(message);
  return status;
}

const char* last_error() { return t_last_error.c_str(); }

Status memory_init(int count, std::size_t capacity, std::size_t alignment) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  if (count > kMaxDevices)
    return fail(Status::InvalidValue, "ocl: the simulator handles at most " +
                                          std::to_string(kMaxDevices) + " devices, not " +
                                          std::to_string(count));
  m.alignment = alignment ? alignment : 256;
  m.devices.clear();
  g_range_count = 0;
  for (int i = 0; i < count; ++i) {
    m.devices.push_back(std::make_unique<DeviceMemory>(capacity));
    if (!m.devices.back()->ok())
      return fail(Status::Error, "ocl: cannot reserve " + std::to_string(capacity) +
                                     " bytes of address space for device " + std::to_string(i));
    auto begin = reinterpret_cast<std::uintptr_t>(m.devices.back()->base());
    g_ranges[i] = {begin, begin + capacity};
  }
  g_range_count = count;
  return Status::Ok;
}

int device_count() {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  return static_cast<int>(m.devices.size());
}

Status check_device(int device) {
  const int count = device_count();
  if (device >= 0 && device < count) return Status::Ok;
  return fail(Status::InvalidDevice, "ocl: invalid device index " +
                                         std::to_string(device) + " (" + std::to_string(count) +
                                         " devices)");
}

Status malloc(int device, std::size_t bytes, void** ptr) {
  if (!ptr) return fail(Status::InvalidValue, "ocl: malloc: null output pointer");
  *ptr = nullptr;
  if (auto s = check_device(device); s != Status::Ok) return s;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto& d = *m.devices[static_cast<std::size_t>(device)];
  *ptr = d.allocate(bytes, m.alignment);
  if (!*ptr)
    return fail(Status::OutOfMemory, "ocl: device " + std::to_string(device) +
                                         ": requested " + std::to_string(bytes) + " bytes, " +
                                         std::to_string(d.capacity() - d.used()) + " free of " +
                                         std::to_string(d.capacity()));
  return Status::Ok;
}

Status free(int device, void* ptr) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.devices[static_cast<std::size_t>(device)]->release(ptr))
    return fail(Status::InvalidValue, "ocl: free of " + hex(ptr) +
                                          ", which is no live allocation of device " +
                                          std::to_string(device));
  return Status::Ok;
}

Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto& d = *m.devices[static_cast<std::size_t>(device)];
  *free_bytes = d.capacity() - d.used();
  *total_bytes = d.capacity();
  return Status::Ok;
}

char* bytes_of(const void* p, std::size_t bytes, int device, const char* what) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  for (std::size_t i = 0; i < m.devices.size(); ++i) {
    auto& d = *m.devices[i];
    if (!d.contains(p)) continue;
    if (device >= 0 && static_cast<int>(i) != device) {
      fail(Status::InvalidValue, std::string("ocl: ") + what + " " + hex(p) +
                                     " is memory of device " + std::to_string(i) + ", not of device " +
                                     std::to_string(device));
      return nullptr;
    }
    auto [offset, size] = d.allocation_of(p);
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(p) - d.base());
    if (size == 0 || at + bytes > offset + size) {
      fail(Status::InvalidValue,
           std::string("ocl: ") + what + " [" + hex(p) + ", +" +
               std::to_string(bytes) + " bytes) is not inside one live allocation of device " +
               std::to_string(i) +
               (size ? " (it overruns the allocation of " + std::to_string(size) + " bytes at " +
                           hex(d.base() + offset) + ")"
                     : " (freed, or never allocated)"));
      return nullptr;
    }
    return d.view(p);
  }
  fail(Status::InvalidValue, std::string("ocl: ") + what + " " + hex(p) +
                                 " is not device memory");
  return nullptr;
}

bool is_device_address(const void* p) {
  auto a = reinterpret_cast<std::uintptr_t>(p);
  for (int i = 0; i < g_range_count; ++i)
    if (a >= g_ranges[i].begin && a < g_ranges[i].end) return true;
  return false;
}

const char* host_side(const void* p, std::size_t bytes, const char* what) {
  if (is_device_address(p)) {
    fail(Status::InvalidValue, std::string("ocl: ") + what + " " + hex(p) +
                                   " is device memory, but the copy kind says host memory");
    return nullptr;
  }
  if constexpr (config::kRuntimeHasPinnedHost) {
    // A DMA engine that reaches registered host memory only: the glue promises
    // such memory (runtime_adapter.h, pinned_host), so anything else is refused.
    Memory& m = memory();
    std::lock_guard<std::mutex> lock(m.mu);
    auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = m.pinned_ranges.upper_bound(a);
    const bool inside = it != m.pinned_ranges.begin() &&
                        (--it, a + bytes <= it->first + it->second);
    if (!inside) {
      fail(Status::InvalidValue,
           std::string("ocl: ") + what + " [" + hex(p) + ", +" +
               std::to_string(bytes) +
               " bytes) is not in host memory from host_alloc (runtime_primitives lists "
               "pinned_host: the DMA engine reaches registered host memory only)");
      return nullptr;
    }
  }
  return static_cast<const char*>(p);
}

Status host_alloc(std::size_t bytes, void** ptr) {
  if (!ptr) return fail(Status::InvalidValue, "ocl: host_alloc: null output pointer");
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  *ptr = std::aligned_alloc(64, size);
  if (!*ptr) return fail(Status::OutOfMemory, "ocl: host_alloc of " +
                                                  std::to_string(bytes) + " bytes failed");
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.pinned.insert(*ptr);
  m.pinned_ranges[reinterpret_cast<std::uintptr_t>(*ptr)] = size;
  return Status::Ok;
}

Status host_free(void* ptr) {
  Memory& m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.pinned.erase(ptr))
      return fail(Status::InvalidValue, "ocl: host_free of " + hex(ptr) +
                                            ", which host_alloc did not return");
    m.pinned_ranges.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  std::free(ptr);
  return Status::Ok;
}

bool locate_fault(const void* addr, FaultSite* site) {
  auto a = reinterpret_cast<std::uintptr_t>(addr);
  for (int i = 0; i < g_range_count; ++i) {
    if (a < g_ranges[i].begin || a >= g_ranges[i].end) continue;
    site->device = i;
    Memory& m = memory();
    // try_lock: the faulting thread may hold the lock (it never reads device
    // memory while holding it, but a report must never hang).
    if (m.mu.try_lock()) {
      if (static_cast<std::size_t>(i) < m.devices.size()) {
        auto& d = *m.devices[static_cast<std::size_t>(i)];
        auto [offset, size] = d.allocation_of(addr);
        if (size) {
          site->base = g_ranges[i].begin + offset;
          site->size = size;
        }
        site->allocations_known = true;
      }
      m.mu.unlock();
    }
    return true;
  }
  return false;
}

}  // namespace ocl::sim
