// DDP's timer for this device (what CudaTimer is for CUDA): DDP's logger
// measures forward, backward compute and backward communication time with it
// (model.module's DDP logging data, TORCH_DISTRIBUTED_DEBUG). Without one
// DDP warns "Time stats are currently only collected for CPU and CUDA devices".
// Times come from events on the current stream, so they measure the device's
// work, not the host's queuing of it.
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>

#include "backend.h"

namespace FLSDK_BACKEND_NS::distributed {

class DeviceTimer final : public c10d::Timer {
 public:
  explicit DeviceTimer(c10::Device device)
      : device_(device),
        events_{timed(), timed(), timed(), timed(), timed()} {}

  void record(Event event) override {
    // The host time too: DDP also reports timestamps.
    c10d::Timer::record(event);
    c10::impl::VirtualGuardImpl guard(kDeviceType);
    at(event).record(guard.getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    auto& a = at(start);
    auto& b = at(end);
    if (!a.was_marked_for_recording() || !b.was_marked_for_recording()) return std::nullopt;
    // DDP asks only at its logging intervals; the events are then long done.
    a.synchronize();
    b.synchronize();
    const double ms = a.elapsedTime(b);
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(ms * 1e6);
  }

 private:
  // Events that keep their time (a CUDA event with enable_timing=True).
  static c10::Event timed() { return c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT); }

  c10::Event& at(Event event) { return events_[static_cast<std::size_t>(event)]; }

  c10::Device device_;
  std::array<c10::Event, 5> events_;
};

}  // namespace FLSDK_BACKEND_NS::distributed

// The registry's macro names it unqualified, so it runs in c10d's namespace.
namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::DeviceType::PrivateUse1,
                         FLSDK_BACKEND_NS::distributed::DeviceTimer)
}  // namespace c10d
