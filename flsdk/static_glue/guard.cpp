// Device guard: current device, streams and events for c10 and torch.accelerator.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "backend.h"

namespace FLSDK_BACKEND_NS {
namespace {

struct EventHandle {
  runtime::Event event = nullptr;
  int device = 0;
  bool recorded = false;
};

class GuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    auto previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }

  c10::Device getDevice() const override { return c10::Device(kDeviceType, current_device()); }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kDeviceType, kBackendName, ": expected a ", kBackendName,
                " device, got ", device);
    set_current_device(device.index() < 0 ? 0 : device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      set_current_device(device.index() < 0 ? 0 : device.index());
    } catch (...) {
      // Restoring a device during unwinding must not throw.
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return current_stream(device.index() < 0 ? current_device() : device.index());
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  // As on CUDA, "new" streams come from a per-device pool: each runtime stream
  // owns a worker thread, and c10 never says when a stream is dropped.
  c10::Stream getNewStream(c10::Device device, int) const override {
    return pool_stream(device.index() < 0 ? current_device() : device.index());
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return pool_stream(device.index() < 0 ? current_device() : device.index());
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return set_current_stream(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), kBackendName,
                ": event on device ", device_index, " cannot record stream of device ",
                stream.device_index());
    auto* handle = static_cast<EventHandle*>(*event);
    if (!handle) {
      handle = new EventHandle();
      handle->device = stream.device_index();
      check_status(runtime::event_create(handle->device, &handle->event), "event_create");
      *event = handle;
    }
    check_status(runtime::event_record(handle->device, handle->event, native_stream(stream)),
                 "event_record");
    handle->recorded = true;
  }

  void block(void* event, const c10::Stream& stream) const override {
    auto* handle = static_cast<EventHandle*>(event);
    if (!handle || !handle->recorded) return;
    check_status(runtime::stream_wait_event(stream.device_index(), native_stream(stream),
                                            handle->event),
                 "stream_wait_event");
  }

  bool queryEvent(void* event) const override {
    auto* handle = static_cast<EventHandle*>(event);
    if (!handle || !handle->recorded) return true;
    bool done = false;
    check_status(runtime::event_query(handle->device, handle->event, &done), "event_query");
    return done;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    auto* handle = static_cast<EventHandle*>(event);
    if (!handle) return;
    runtime::event_destroy(handle->device, handle->event);
    delete handle;
  }

  void synchronizeEvent(void* event) const override {
    auto* handle = static_cast<EventHandle*>(event);
    if (!handle || !handle->recorded) return;
    host_wait_event(handle->device, handle->event, HostWait::Event, "event.synchronize()");
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<EventHandle*>(start);
    auto* b = static_cast<EventHandle*>(end);
    TORCH_CHECK(a && b && a->recorded && b->recorded, kBackendName,
                ": elapsed_time needs two recorded events");
    float ms = 0;
    check_status(runtime::event_elapsed_ms(a->event, b->event, &ms), "event_elapsed_ms");
    return ms;
  }

  bool queryStream(const c10::Stream& stream) const override {
    bool idle = false;
    check_status(runtime::stream_query(stream.device_index(), native_stream(stream), &idle),
                 "stream_query");
    return idle;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    host_wait_stream(stream.device_index(), native_stream(stream), HostWait::Synchronize,
                     "stream.synchronize()");
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    auto index = device_index < 0 ? current_device() : device_index;
    host_wait_device(index, HostWait::Synchronize, "synchronize()");
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    // The caching allocator keeps the block until work on that stream is done.
    auto* allocator = dynamic_cast<c10::DeviceAllocator*>(c10::GetAllocator(kDeviceType));
    if (allocator) allocator->recordStream(data, stream);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl)

}  // namespace FLSDK_BACKEND_NS
