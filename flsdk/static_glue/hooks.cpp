// PrivateUse1 hooks (what ATen asks of a device backend), the per-device
// random generators, and the host (pinned) memory allocator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend.h"

namespace FLSDK_BACKEND_NS {
namespace {

// The simulated device draws random numbers on the host with the same
// Mersenne-Twister state as CPUGeneratorImpl; only device and key differ.
class DeviceGenerator final : public at::CPUGeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex index) {
    device_ = c10::Device(kDeviceType, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    int count = device_count();
    for (int i = 0; i < count; ++i) {
      generators.push_back(at::make_generator<DeviceGenerator>(static_cast<c10::DeviceIndex>(i)));
      generators.back().set_current_seed(c10::detail::getNonDeterministicRandom());
    }
  });
  auto i = index < 0 ? current_device() : index;
  check_device_index(i);
  return generators[static_cast<std::size_t>(i)];
}

// Pinned host memory: what copies between the host and the device go through
// when they must not make the host wait. Blocks are cached by size class (a
// power of two), as CUDA's caching host allocator does: a block freed while a
// queued copy still reads or writes it goes back to the cache at once, and is
// handed out again only once the events recorded for those copies completed.
// The blocks come from the runtime's host_alloc when it offers page-locked
// memory (runtime_primitives: pinned_host), else from the C heap; either way
// the contract the copies rely on is the stream ordering above.
class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    if (bytes == 0) return {nullptr, nullptr, &HostAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
    const std::size_t size = size_class(bytes);
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[size];
      for (auto it = free.begin(); it != free.end(); ++it) {
        if (!copies_done_locked(*it)) continue;
        ptr = *it;
        free.erase(it);
        break;
      }
      if (ptr) {
        blocks_[ptr].in_use = true;
        stats_.active_requests.increase(1);
        stats_.active_bytes.increase(size);
        return {ptr, ptr, &HostAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
      }
    }
    ptr = allocate_block(size, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[ptr] = Block{size, true, {}};
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(size);
    stats_.num_host_alloc += 1;
    return {ptr, ptr, &HostAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &HostAllocator::deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // A copy queued on `stream` uses the block at `ptr` (its base): the block is
  // not handed out again before the copy is done. False: not a block of ours.
  bool record_event(void* ptr, void*, c10::Stream stream) override {
    int device = stream.device_index();
    runtime::Event event = nullptr;
    if (runtime::event_create(device, &event) != runtime::Status::Ok) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() ||
        runtime::event_record(device, event, native_stream(stream)) != runtime::Status::Ok) {
      runtime::event_destroy(device, event);
      return false;
    }
    it->second.copies.push_back({device, event});
    return true;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, free] : free_) {
      for (auto it = free.begin(); it != free.end();) {
        if (!copies_done_locked(*it)) {
          ++it;
          continue;
        }
        blocks_.erase(*it);
        free_block(*it);
        stats_.num_host_free += 1;
        it = free.erase(it);
      }
    }
  }
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}

  bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(const_cast<void*>(ptr));
    return it != blocks_.end() && it->second.in_use;
  }

  static HostAllocator& instance() {
    static auto* allocator = new HostAllocator();  // leaked: used during shutdown
    return *allocator;
  }

 private:
  struct Block {
    std::size_t size = 0;
    bool in_use = false;
    std::vector<std::pair<int, runtime::Event>> copies;  // queued copies using the block
  };

  // A new block of `size` bytes (the size class of a request of `bytes`).
  static void* allocate_block(std::size_t size, std::size_t bytes) {
    void* ptr = nullptr;
    if constexpr (config::kRuntimeHasPinnedHost) {
      const runtime::Status status = runtime::host_alloc(size, &ptr);
      TORCH_CHECK_WITH(OutOfMemoryError, status != runtime::Status::OutOfMemory, kBackendName,
                       ": could not allocate ", bytes, " bytes of pinned host memory (runtime "
                       "host_alloc: ", runtime::last_error(), ")");
      TORCH_CHECK(status == runtime::Status::Ok && ptr, kBackendName, ": runtime host_alloc of ",
                  size, " bytes failed: ", runtime::last_error());
      TORCH_CHECK(reinterpret_cast<std::uintptr_t>(ptr) % 64 == 0, kBackendName,
                  ": runtime host_alloc returned ", ptr, ", not aligned to 64 bytes as "
                  "runtime_adapter.h requires");
    } else {
      ptr = std::aligned_alloc(64, size);
      TORCH_CHECK_WITH(OutOfMemoryError, ptr, kBackendName, ": could not allocate ", bytes,
                       " bytes of pinned host memory");
    }
    return ptr;
  }

  static void free_block(void* ptr) {
    if constexpr (config::kRuntimeHasPinnedHost) {
      // Called from empty_cache, which has no way to report: a failure here
      // leaks the block, as CUDA's allocator does on a failed cudaFreeHost.
      (void)runtime::host_free(ptr);
    } else {
      std::free(ptr);
    }
  }

  static std::size_t size_class(std::size_t bytes) {
    std::size_t size = 512;
    while (size < bytes) size *= 2;
    return size;
  }

  // Drops the events of finished copies; true when none is left.
  bool copies_done_locked(void* ptr) {
    auto& copies = blocks_[ptr].copies;
    std::erase_if(copies, [](const std::pair<int, runtime::Event>& e) {
      bool done = false;
      if (runtime::event_query(e.first, e.second, &done) != runtime::Status::Ok) done = true;
      if (done) runtime::event_destroy(e.first, e.second);
      return done;
    });
    return copies.empty();
  }

  static void deleter(void* ptr) {
    if (!ptr) return;
    auto& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.blocks_.find(ptr);
    if (it == self.blocks_.end()) return;
    it->second.in_use = false;
    self.stats_.active_requests.decrease(1);
    self.stats_.active_bytes.decrease(it->second.size);
    self.free_[it->second.size].push_back(ptr);
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  std::map<std::size_t, std::vector<void*>> free_;  // size class -> cached blocks
  at::HostStats stats_;
};

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  void init() const override { ensure_initialized(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto previous = current_device();
    set_current_device(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    auto i = index < 0 ? current_device() : index;
    check_device_index(i);
    return at::make_generator<DeviceGenerator>(i);
  }

  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kDeviceType, current_device());
  }
  bool isPinnedPtr(const void* data) const override {
    return HostAllocator::instance().is_pinned(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return &HostAllocator::instance(); }

  // Growing a storage in place (resize_ beyond capacity): new block, copy, swap.
  void resizePrivateUse1Bytes(const c10::Storage& storage, std::size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    auto old_size = impl->nbytes();
    auto* allocator = impl->allocator();
    TORCH_CHECK(allocator, kBackendName, ": storage has no allocator; cannot resize");
    c10::DataPtr fresh = allocator->allocate(newsize);
    std::size_t keep = std::min(old_size, newsize);
    if (keep > 0 && impl->data_ptr().get()) {
      auto device = fresh.device().index();
      check_status(runtime::memcpy(fresh.get(), impl->data_ptr().get(), keep,
                                   runtime::CopyKind::DeviceToDevice, device,
                                   native_stream(current_stream(device))),
                   "memcpy");
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct Registration {
  Registration() {
    at::RegisterPrivateUse1HooksInterface(new Hooks());  // leaked: lives as long as torch
    at::setHostAllocator(kDeviceType, &HostAllocator::instance());
  }
};
Registration g_registration;

}  // namespace
}  // namespace FLSDK_BACKEND_NS
