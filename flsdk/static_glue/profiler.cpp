// Device activity in torch.profiler (profiler.h says what each part is for).
//
// * A Kineto activity profiler (PyTorch 2.13's PrivateUse1 door:
//   REGISTER_PRIVATEUSE1_PROFILER). While a profile with
//   ProfilerActivity.PrivateUse1 runs, its session turns the runtime's activity
//   records (runtime_primitives: profiling) into Kineto activities: kernels,
//   copies, fills and collectives on a lane per device and stream, each linked to
//   the PyTorch op that queued it (the op's correlation id, which Kineto hands
//   every session as ops begin and end), with a "launch" event inside that op and
//   a flow arrow from it to the device work; record_function ranges get a span on
//   the device lanes they reach. PyTorch then puts the device time on the op
//   (device_time_total / self_device_time_total in key_averages()).
// * The legacy path (torch.autograd.profiler.profile(use_device=<name>,
//   use_kineto=False)): ProfilerStubs timing each op with two runtime events on
//   the current stream. It needs no profiling primitive.
// * A runtime without the profiling primitive records no device activity: the
//   first profile that asks for it says so, once, instead of showing nothing.
//
// The traps a Kineto plugin meets, and what this file does about each:
// * Two clocks: the runtime stamps steady_clock, Kineto's timeline is Unix time
//   in ns. The offset between them is sampled when the session starts and stops.
// * Two kinds of ids: the op's correlation id (Kineto's, what links device time
//   to the op: `linked`) and the flow id pairing the launch event with the device
//   work (ours, one per piece of work). Mixing them up silently zeroes device time
//   or leaves unpaired arrows.
// * The capture window: the runtime records only work queued while the profile
//   runs, and the session synchronizes every device before it stops, so every
//   record ends inside the window.
// * Only the four-argument processTrace gets the op lookup (getLinkedActivity).
// * Lifetime: the activities live in the trace buffer handed to Kineto
//   (getTraceBuffer), which the trace keeps; `linked` points at Kineto's own
//   CPU op activities, which live as long.
#ifndef USE_KINETO
#define USE_KINETO 1  // the torch wheels are built with Kineto; its headers need this
#endif
// Kineto's activities format their metadata with fmt, whose compiled part torch
// does not export: use fmt as a header-only library here.
#ifndef FMT_HEADER_ONLY
#define FMT_HEADER_ONLY 1
#endif

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.h"
#include "device_config.h"
#include "profiler.h"

namespace FLSDK_BACKEND_NS::profiler {
namespace {

using libkineto::ActivityType;

// The device activity types PyTorch asks Kineto for with ProfilerActivity.PrivateUse1.
const std::set<ActivityType>& device_types() {
  static const std::set<ActivityType> types = {
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
      ActivityType::GPU_USER_ANNOTATION, ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

ActivityType kineto_type(runtime::ActivityKind kind) {
  switch (kind) {
    case runtime::ActivityKind::Memcpy: return ActivityType::GPU_MEMCPY;
    case runtime::ActivityKind::Memset: return ActivityType::GPU_MEMSET;
    // Kineto has no device-side collective type; CUDA's collectives are kernels too.
    case runtime::ActivityKind::Kernel:
    case runtime::ActivityKind::Collective: break;
  }
  return ActivityType::CONCURRENT_KERNEL;
}

const char* kind_name(runtime::ActivityKind kind) {
  switch (kind) {
    case runtime::ActivityKind::Kernel: return "kernel";
    case runtime::ActivityKind::Memcpy: return "memcpy";
    case runtime::ActivityKind::Memset: return "memset";
    case runtime::ActivityKind::Collective: return "collective";
  }
  return "kernel";
}

// The launch event's name on the CPU lane, per kind ("acme::launch_kernel").
std::string launch_name(runtime::ActivityKind kind) {
  switch (kind) {
    case runtime::ActivityKind::Memcpy: return std::string(kBackendName) + "::memcpy";
    case runtime::ActivityKind::Memset: return std::string(kBackendName) + "::memset";
    case runtime::ActivityKind::Collective: return std::string(kBackendName) + "::collective";
    case runtime::ActivityKind::Kernel: break;
  }
  return std::string(kBackendName) + "::launch_kernel";
}

const char* copy_name(runtime::CopyKind kind) {
  switch (kind) {
    case runtime::CopyKind::HostToHost: return "HtoH";
    case runtime::CopyKind::HostToDevice: return "HtoD";
    case runtime::CopyKind::DeviceToHost: return "DtoH";
    case runtime::CopyKind::DeviceToDevice: return "DtoD";
  }
  return "?";
}

int64_t unix_minus_steady_ns() {
  const auto steady = std::chrono::steady_clock::now().time_since_epoch();
  const auto unix_time = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(unix_time - steady).count();
}

// The correlation ids Kineto pushed on this thread and not yet popped, and
// whether each was passed on to the runtime (only while a session records) and
// was a record_function range ("user" id). Pops pair with pushes per thread.
enum class Pushed : uint8_t { Skipped, Op, Range };
thread_local std::vector<std::pair<uint64_t, Pushed>> t_pushed;

// The innermost record_function range open on this thread (0: none).
uint64_t innermost_range() {
  for (auto it = t_pushed.rbegin(); it != t_pushed.rend(); ++it)
    if (it->second == Pushed::Range) return it->first;
  return 0;
}

std::atomic<bool> g_recording{false};

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    offset_ns_ = unix_minus_steady_ns();
    check_status(runtime::profiler_start(), "profiler_start");
    g_recording.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (!g_recording.exchange(false)) return;
    // Work still queued would be recorded after the profile: finish it first.
    for (int device = 0; device < device_count(); ++device) {
      try {
        host_wait_device(device, HostWait::Synchronize, "the profiler's stop");
      } catch (const c10::Error& e) {
        errors_.push_back(e.what_without_backtrace());
      }
    }
    if (runtime::profiler_stop() != runtime::Status::Ok ||
        runtime::profiler_flush(&records_) != runtime::Status::Ok)
      errors_.push_back(std::string(kBackendName) + ": profiler: " + runtime::last_error());
    offset_ns_ = (offset_ns_ + unix_minus_steady_ns()) / 2;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  // Kineto calls these on the op's thread as ops (and record_function ranges,
  // "user" ids) begin and end. Work queued meanwhile carries the innermost id.
  void pushCorrelationId(uint64_t id) override { push(id, Pushed::Op); }
  void popCorrelationId() override { pop(); }
  void pushUserCorrelationId(uint64_t id) override { push(id, Pushed::Range); }
  void popUserCorrelationId() override { pop(); }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_op, int64_t window_start,
                    int64_t window_end) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(window_start, window_end,
                                         std::string(kBackendName) + " device activity");
    buffer_->span.iteration = 0;
    buffer_->gpuOpCount = static_cast<int>(records_.size());
    std::set<std::pair<int, int64_t>> lanes;  // (device, stream id)
    // record_function range id -> its span on each lane it reached
    std::map<std::pair<uint64_t, std::pair<int, int64_t>>, std::pair<int64_t, int64_t>> ranges;
    int32_t next_flow = 1;
    for (const auto& r : records_) {
      const int64_t start = r.start_ns + offset_ns_;
      const int64_t end = std::max(r.end_ns, r.start_ns) + offset_ns_;
      const int64_t stream = lane_of(r.device, r.stream);
      lanes.insert({r.device, stream});
      const libkineto::ITraceActivity* op =
          (r.correlation_id != 0 && linked_op) ? linked_op(static_cast<int32_t>(r.correlation_id))
                                               : nullptr;
      const int32_t flow = op ? next_flow++ : 0;

      auto& device_work = add(kineto_type(r.kind), display_name(r));
      device_work.startTime = start;
      device_work.endTime = end;
      device_work.device = r.device;
      device_work.resource = static_cast<int32_t>(stream);
      device_work.id = flow;
      device_work.linked = op;
      device_work.addMetadata("device", r.device);
      device_work.addMetadata("stream", stream);
      device_work.addMetadata("correlation", flow);
      device_work.addMetadataQuoted("kind", kind_name(r.kind));
      if (r.bytes) device_work.addMetadata("bytes", r.bytes);
      if (op) {
        device_work.flow.id = static_cast<uint32_t>(flow);
        device_work.flow.type = libkineto::kLinkAsyncCpuGpu;
        device_work.flow.start = 0;
        // The launch, on the thread (and inside the op) that queued the work:
        // where the flow arrow to the device work starts, as CUDA's
        // cudaLaunchKernel events are.
        auto& launch = add(ActivityType::PRIVATEUSE1_RUNTIME, launch_name(r.kind));
        const int64_t queued = r.launch_start_ns ? r.launch_start_ns + offset_ns_ : op->timestamp();
        launch.startTime = std::max(queued, op->timestamp());
        launch.endTime = std::max(launch.startTime,
                                  r.launch_end_ns ? r.launch_end_ns + offset_ns_ : launch.startTime);
        launch.device = static_cast<int32_t>(op->deviceId());
        launch.resource = static_cast<int32_t>(op->resourceId());
        launch.threadId = op->getThreadId();
        launch.id = flow;
        launch.linked = op;
        launch.addMetadata("correlation", flow);
        launch.flow.id = static_cast<uint32_t>(flow);
        launch.flow.type = libkineto::kLinkAsyncCpuGpu;
        launch.flow.start = 1;
      }
      // The record_function range the work ran under, if any.
      uint64_t range = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = enclosing_range_.find(r.correlation_id);
        if (it != enclosing_range_.end()) range = it->second;
      }
      if (range == 0 && op && op->type() == ActivityType::USER_ANNOTATION) range = r.correlation_id;
      if (range != 0) {
        auto [it, fresh] = ranges.try_emplace({range, {r.device, stream}}, start, end);
        if (!fresh) {
          it->second.first = std::min(it->second.first, start);
          it->second.second = std::max(it->second.second, end);
        }
      }
    }
    for (const auto& [key, span] : ranges) {
      const auto* user = linked_op ? linked_op(static_cast<int32_t>(key.first)) : nullptr;
      if (!user) continue;
      // As Kineto does for CUDA: the span carries the range's id, not a link, so
      // the range's device time is not counted twice.
      auto& annotation = add(ActivityType::GPU_USER_ANNOTATION, user->name());
      annotation.startTime = span.first;
      annotation.endTime = span.second;
      annotation.device = key.second.first;
      annotation.resource = static_cast<int32_t>(key.second.second);
      annotation.id = static_cast<int32_t>(key.first);
    }
    for (const auto& [device, stream] : lanes) {
      // Device 0 is named through getDeviceInfo (which keeps Kineto from naming
      // the lanes "GPU n"); the others here.
      if (device != 0) logger.handleDeviceInfo(device_info(device), window_start);
      const std::string name = stream == 0 ? "stream 0 (default)"
                               : stream >= kRuntimeStreamLanes
                                   ? "stream (runtime's #" + std::to_string(stream - kRuntimeStreamLanes) + ")"
                                   : "stream " + std::to_string(stream);
      logger.handleResourceInfo(libkineto::ResourceInfo{stream, stream, device, name}, window_start);
    }
    for (const auto& activity : buffer_->activities) activity->log(logger);
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    // Named here so that Kineto does not label the device lanes "GPU n".
    return std::make_unique<libkineto::DeviceInfo>(device_info(0));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  std::unordered_map<std::string, std::string> getMetadata() override {
    std::unordered_map<std::string, std::string> out;
    out["privateuse1_backend"] = std::string("\"") + kBackendName + "\"";  // a JSON string
    out["privateuse1_device_records"] = std::to_string(records_.size());
    return out;
  }

 private:
  void push(uint64_t id, Pushed kind) {
    if (!g_recording.load(std::memory_order_relaxed)) {
      t_pushed.emplace_back(id, Pushed::Skipped);
      return;
    }
    if (kind == Pushed::Op) {
      if (const uint64_t range = innermost_range()) {
        std::lock_guard<std::mutex> lock(mutex_);
        enclosing_range_[id] = range;
      }
    }
    t_pushed.emplace_back(id, kind);
    runtime::profiler_push_correlation(id);
  }

  static void pop() {
    if (t_pushed.empty()) return;
    const Pushed kind = t_pushed.back().second;
    t_pushed.pop_back();
    if (kind != Pushed::Skipped) runtime::profiler_pop_correlation();
  }

  // The lane (trace tid) of work queued on `handle`: the torch stream id of the
  // glue's streams (0 the default stream), and for a stream the glue did not
  // create (one the runtime or a collective library made itself) a lane of its
  // own from kRuntimeStreamLanes on.
  static constexpr int64_t kRuntimeStreamLanes = 1000;
  int64_t lane_of(int device, runtime::Stream handle) {
    const int64_t id = stream_id_of(device, handle);
    if (id >= 0) return id;
    auto [it, fresh] = foreign_streams_.try_emplace({device, handle}, 0);
    if (fresh) it->second = kRuntimeStreamLanes + static_cast<int64_t>(foreign_streams_.size()) - 1;
    return it->second;
  }

  libkineto::GenericTraceActivity& add(ActivityType type, const std::string& name) {
    buffer_->emplace_activity(buffer_->span, type, name);
    return *buffer_->activities.back();
  }

  static std::string display_name(const runtime::Activity& r) {
    if (!r.name.empty()) return r.name;
    switch (r.kind) {
      case runtime::ActivityKind::Memcpy: return std::string("Memcpy ") + copy_name(r.copy_kind);
      case runtime::ActivityKind::Memset: return "Memset";
      case runtime::ActivityKind::Collective: return "collective";
      case runtime::ActivityKind::Kernel: break;
    }
    return "kernel";
  }

  static libkineto::DeviceInfo device_info(int device) {
    return libkineto::DeviceInfo{device, libkineto::kExceedMaxPid + device,
                                 std::string(kBackendName) + ":" + std::to_string(device),
                                 std::string(config::kDisplayName) + " " + std::to_string(device)};
  }

  int64_t offset_ns_ = 0;
  std::vector<runtime::Activity> records_;
  std::vector<std::string> errors_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> enclosing_range_;  // op id -> record_function id
  std::map<std::pair<int, runtime::Stream>, int64_t> foreign_streams_;  // lane_of()
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

std::atomic<bool> g_warned_no_activity{false};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return device_types(); }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& requested, const libkineto::Config&) override {
    const bool wanted = std::any_of(requested.begin(), requested.end(), [](ActivityType t) {
      return t == ActivityType::CONCURRENT_KERNEL || t == ActivityType::GPU_MEMCPY;
    });
    if (!wanted) return nullptr;
    // Without the primitive the session (and the runtime calls it makes) is never
    // built: a runtime that does not list profiling need not define them.
    if constexpr (config::kRuntimeHasProfiling) {
      return std::make_unique<Session>();
    } else {
      if (!g_warned_no_activity.exchange(true)) TORCH_WARN(no_device_activity_message());
      return nullptr;
    }
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& requested,
      const libkineto::Config& config) override {
    return configure(requested, config);
  }

 private:
  std::string name_ = std::string(kBackendName) + "_activity_profiler";
};

REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

// ---- the legacy path: two events per op ---------------------------------------

class EventStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device) *device = index;
    runtime::Event handle = nullptr;
    check_status(runtime::event_create(index, &handle), "event_create");
    *event = std::shared_ptr<void>(handle, [index](void* e) { runtime::event_destroy(index, e); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    check_status(runtime::event_record(index, handle, launch_stream(index)), "event_record");
  }

  // Microseconds between two recorded events, as CUDA's stubs answer.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    const c10::DeviceIndex index = current_device();
    host_wait_event(index, end->get(), HostWait::Event, "the profiler's device time");
    float ms = 0;
    check_status(runtime::event_elapsed_ms(start->get(), end->get(), &ms), "event_elapsed_ms");
    return ms * 1000.0f;
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (int device = 0; device < device_count(); ++device) {
      set_current_device(static_cast<c10::DeviceIndex>(device));
      op(device);
    }
    set_current_device(previous);
  }
  void synchronize() const override {
    for (int device = 0; device < device_count(); ++device)
      host_wait_device(device, HostWait::Synchronize, "the profiler");
  }
};

struct RegisterStubs {
  RegisterStubs() {
    static EventStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
RegisterStubs g_register_stubs;

}  // namespace

bool records_device_activity() { return config::kRuntimeHasProfiling; }

std::string no_device_activity_message() {
  return std::string(kBackendName) +
         ": torch.profiler records no device activity on this backend: its runtime adapter "
         "has no profiling primitive (device.yaml runtime_primitives: profiling; see "
         "docs/runtime-adapter.md). CPU ops are profiled; their device time stays 0. "
         "torch.autograd.profiler.profile(use_device='" + kBackendName +
         "', use_kineto=False) times each op with device events instead.";
}

}  // namespace FLSDK_BACKEND_NS::profiler
