// Counted host waits and the sync debug mode (host_sync.h).
#include "host_sync.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "backend.h"

namespace FLSDK_BACKEND_NS {
namespace {

std::array<std::atomic<std::uint64_t>, kHostWaitReasons> g_counts{};
std::atomic<int> g_debug_mode{0};
std::mutex g_warned_mutex;
std::set<std::string> g_warned;
thread_local int t_reason_override = -1;

std::atomic<void (*)()> g_async_poll{nullptr};
std::atomic<bool> g_async_pending{false};
std::mutex g_async_mutex;
std::string g_async_error;

// After every host wait: the device's work may have failed asynchronously.
void raise_async_error() {
  if (auto poll = g_async_poll.load(std::memory_order_acquire)) poll();
  if (!g_async_pending.load(std::memory_order_acquire)) return;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_async_mutex);
    message = std::move(g_async_error);
    g_async_error.clear();
    g_async_pending.store(false, std::memory_order_release);
  }
  if (!message.empty()) TORCH_CHECK(false, message);
}

bool implicit(HostWait why) { return why != HostWait::Synchronize && why != HostWait::Event; }

// Counts the wait; in debug mode reports (or refuses) an implicit one.
void before_wait(HostWait why, const char* what) {
  if (t_reason_override >= 0) why = static_cast<HostWait>(t_reason_override);
  g_counts[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
  const int mode = g_debug_mode.load(std::memory_order_relaxed);
  if (mode == 0 || !implicit(why)) return;
  TORCH_CHECK(mode < 2, kBackendName, ": ", what, " made the host wait for the device (",
              host_wait_name(why), ") while sync debug mode is 'error'");
  std::lock_guard<std::mutex> lock(g_warned_mutex);
  if (g_warned.insert(std::string(what) + "/" + host_wait_name(why)).second)
    TORCH_WARN(kBackendName, ": ", what, " made the host wait for the device (",
               host_wait_name(why), ")");
}

}  // namespace

const char* host_wait_name(HostWait why) {
  switch (why) {
    case HostWait::CopyToHost: return "copy_to_host";
    case HostWait::CopyToDevice: return "copy_to_device";
    case HostWait::Item: return "item";
    case HostWait::Kernel: return "kernel";
    case HostWait::Fallback: return "fallback";
    case HostWait::Staging: return "staging";
    case HostWait::PeerCopy: return "peer_copy";
    case HostWait::Allocator: return "allocator";
    case HostWait::InlineKernel: return "inline_kernel";
    case HostWait::Synchronize: return "synchronize";
    case HostWait::Event: return "event";
    case HostWait::kCount: break;
  }
  return "?";
}

void host_wait_stream(int device, runtime::Stream stream, HostWait why, const char* what) {
  before_wait(why, what);
  check_status(runtime::stream_synchronize(device, stream), "stream_synchronize");
  raise_async_error();
}

void host_wait_device(int device, HostWait why, const char* what) {
  before_wait(why, what);
  check_status(runtime::device_synchronize(device), "device_synchronize");
  raise_async_error();
}

void host_wait_event(int device, runtime::Event event, HostWait why, const char* what) {
  before_wait(why, what);
  check_status(runtime::event_synchronize(device, event), "event_synchronize");
  raise_async_error();
}

void report_async_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_async_mutex);
  if (g_async_error.empty()) g_async_error = message;
  g_async_pending.store(true, std::memory_order_release);
}

void set_async_error_poll(void (*poll)()) { g_async_poll.store(poll, std::memory_order_release); }

std::array<std::uint64_t, kHostWaitReasons> host_wait_counts() {
  std::array<std::uint64_t, kHostWaitReasons> out{};
  for (int i = 0; i < kHostWaitReasons; ++i) out[i] = g_counts[i].load(std::memory_order_relaxed);
  return out;
}

void reset_host_wait_counts() {
  for (auto& c : g_counts) c.store(0, std::memory_order_relaxed);
}

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, kBackendName, ": sync debug mode must be 0 (off), "
              "1 (warn) or 2 (error), got ", mode);
  g_debug_mode.store(mode);
  std::lock_guard<std::mutex> lock(g_warned_mutex);
  g_warned.clear();
}

int sync_debug_mode() { return g_debug_mode.load(); }

HostWaitReason::HostWaitReason(HostWait why) : previous_(t_reason_override) {
  t_reason_override = static_cast<int>(why);
}
HostWaitReason::~HostWaitReason() { t_reason_override = previous_; }

}  // namespace FLSDK_BACKEND_NS
