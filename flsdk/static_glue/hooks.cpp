// PrivateUse1 hooks (what ATen asks of a device backend), the per-device
// random generators, and the host (pinned) memory allocator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <cstdlib>
#include <cstring>
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

// Page-locked memory has no meaning for a simulated chip; the allocator keeps
// the contract (is_pinned, stats) so user code written for GPUs runs unchanged.
class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) override {
    void* ptr = bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, ptr || bytes == 0, kBackendName,
                     ": could not allocate ", bytes, " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (ptr) sizes_[ptr] = bytes;
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(bytes);
      stats_.num_host_alloc += 1;
    }
    return {ptr, ptr, &HostAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &HostAllocator::deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // A non_blocking copy queued on a created stream still uses this block:
  // freeing it waits for that copy (CUDA's pinned allocator defers reuse the
  // same way). False (not tracked) tells the caller to synchronize instead.
  bool record_event(void* ptr, void*, c10::Stream stream) override {
    runtime::Stream native = native_stream(stream);
    if (!native) return true;  // the default stream runs copies inline
    int device = stream.device_index();
    runtime::Event event = nullptr;
    if (runtime::event_create(device, &event) != runtime::Status::Ok) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sizes_.count(ptr) || runtime::event_record(device, event, native) != runtime::Status::Ok) {
      runtime::event_destroy(device, event);
      return false;
    }
    auto& events = pending_[ptr];
    // Forget copies already done, so a long-lived buffer does not pile up events.
    std::erase_if(events, [](const std::pair<int, runtime::Event>& e) {
      bool done = false;
      if (runtime::event_query(e.first, e.second, &done) != runtime::Status::Ok || !done)
        return false;
      runtime::event_destroy(e.first, e.second);
      return true;
    });
    events.push_back({device, event});
    return true;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}

  bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return sizes_.count(const_cast<void*>(ptr)) > 0;
  }

  static HostAllocator& instance() {
    static auto* allocator = new HostAllocator();  // leaked: used during shutdown
    return *allocator;
  }

 private:
  static void deleter(void* ptr) {
    if (!ptr) return;
    auto& self = instance();
    std::vector<std::pair<int, runtime::Event>> copies;
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto pending = self.pending_.find(ptr);
      if (pending != self.pending_.end()) {
        copies = std::move(pending->second);
        self.pending_.erase(pending);
      }
      auto it = self.sizes_.find(ptr);
      if (it != self.sizes_.end()) {
        self.stats_.active_requests.decrease(1);
        self.stats_.active_bytes.decrease(it->second);
        self.stats_.num_host_free += 1;
        self.sizes_.erase(it);
      }
    }
    for (auto& [device, event] : copies) {  // queued copies still using the block
      runtime::event_synchronize(device, event);
      runtime::event_destroy(device, event);
    }
    std::free(ptr);
  }

  std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::unordered_map<void*, std::vector<std::pair<int, runtime::Event>>> pending_;
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
      check_status(runtime::memcpy(fresh.get(), impl->data_ptr().get(), keep,
                                   runtime::CopyKind::DeviceToDevice, fresh.device().index(),
                                   nullptr),
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
