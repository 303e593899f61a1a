// acme vendor runtime: devices. Init (with the start-up checks a real driver
// stack can fail), device count, device synchronize, the device's view of its
// memory (only for work running on the device), and the error API.
#include "internal.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace acme_internal {

thread_local std::string t_last_error;

[[gnu::format(printf, 2, 3)]] acmeError_t fail(acmeError_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  t_last_error = buf;
  return code;
}

acmeError_t fail_str(acmeError_t code, std::string msg) {
  t_last_error = std::move(msg);
  return code;
}

std::string human_bytes(size_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu B", n);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s (%zu bytes)", v, units[u], n);
  return buf;
}

Runtime& rt() {
  static Runtime* r = [] {
    pthread_atfork(ipc_fork_prepare, ipc_fork_parent, [] {
      g_fork_epoch.fetch_add(1);
      ipc_fork_child();
    });
    return new Runtime;
  }();
  return *r;
}

// Depth of device work on this thread: a stream's worker running queued work,
// and a compute unit running a chunk of it.
thread_local int t_device_work = 0;

DeviceWork::DeviceWork() { ++t_device_work; }
DeviceWork::~DeviceWork() { --t_device_work; }
bool on_device() { return t_device_work > 0; }

char* view_of(const void* p) {
  Runtime& r = rt();
  for (auto& a : r.arenas)
    if (a->contains(p)) return a->view(p);
  Imported im;
  if (find_import(p, &im)) return im.view + (static_cast<const char*>(p) - im.base);
  return nullptr;
}



acmeError_t check_device(int d) {
  const int n = rt().count.load();
  if (n == 0) return fail(acmeErrorRuntime, "acme: runtime not initialized (call init first)");
  if (d < 0 || d >= n)
    return fail(acmeErrorInvalidDevice,
                "acme: invalid device index %d: acme has %d device(s) (valid: 0..%d)", d, n,
                n - 1);
  return acmeSuccess;
}

// check_device, plus: the device has not been lost (injected device loss).
// Only calls that need the device working check this; frees, destroys and
// queries keep working so a program can clean up after losing a device.
acmeError_t check_alive(int d) {
  if (auto e = check_device(d)) return e;
  if (rt().lost.load() & (uint64_t{1} << d))
    return fail(acmeErrorRuntime,
                "acme: device %d was lost (device_lost fault injected); its memory and queued "
                "work are gone: restart the process",
                d);
  return acmeSuccess;
}

// ---- the environment a real driver stack can get wrong -------------------------
// The three ways a device stack typically fails to start, each simulated by
// ACME_SIMULATE_INIT_FAILURE (version_mismatch | library_path | device_busy);
// a real installed-driver mismatch is simulated by ACME_DRIVER_VERSION.
// Every message starts with the cause so callers can tell them apart.

std::string installed_driver_version() {
  const char* v = std::getenv("ACME_DRIVER_VERSION");
  return (v && *v) ? std::string(v) : std::string(ACME_DRIVER_VERSION);
}

std::string major_of(const std::string& version) {
  return version.substr(0, version.find('.'));
}

}  // namespace acme_internal

using namespace acme_internal;

namespace {

acmeError_t version_mismatch(const std::string& installed, const char* how) {
  return fail(acmeErrorRuntime,
              "acme: init: driver/runtime version mismatch: the installed acme driver is %s, "
              "but this runtime (%s) was built and tested with driver %s (major versions must "
              "match); install acme driver %s or a torch-fl-acme wheel built for driver %s%s",
              installed.c_str(), ACME_RUNTIME_VERSION, ACME_DRIVER_VERSION, ACME_DRIVER_VERSION,
              installed.c_str(), how);
}

acmeError_t check_environment() {
  const char* sim = std::getenv("ACME_SIMULATE_INIT_FAILURE");
  const std::string what = sim ? sim : "";
  const char* how = " [simulated by ACME_SIMULATE_INIT_FAILURE]";
  if (what == "version_mismatch") return version_mismatch("99.0.0", how);
  if (what == "library_path")
    return fail(acmeErrorRuntime,
                "acme: init: runtime library path not configured: libacme_driver.so.%s was "
                "not found in $ACME_HOME/lib or on LD_LIBRARY_PATH; set ACME_HOME to the "
                "driver's install prefix or add its lib directory to LD_LIBRARY_PATH%s",
                major_of(ACME_DRIVER_VERSION).c_str(), how);
  if (what == "device_busy")
    return fail(acmeErrorRuntime,
                "acme: init: device held by another process: acme device 0 is opened "
                "exclusively by pid %d; stop that process (or wait for it) before starting "
                "this one%s",
                static_cast<int>(getppid()), how);
  if (!what.empty() && what != "none")
    return fail(acmeErrorInvalidValue,
                "acme: init: ACME_SIMULATE_INIT_FAILURE='%s' is not one of version_mismatch, "
                "library_path, device_busy, none",
                what.c_str());
  const std::string installed = installed_driver_version();
  if (major_of(installed) != major_of(ACME_DRIVER_VERSION))
    return version_mismatch(installed, " [installed version from ACME_DRIVER_VERSION]");
  return acmeSuccess;
}


}  // namespace

extern "C" {

acmeError_t acmeInit(int device_count, size_t capacity, size_t alignment) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> init_lk(r.init_mu);
  if (auto e = check_environment()) return e;
  if (device_count < 1)
    return fail(acmeErrorInvalidValue, "acme: init: device_count must be >= 1, got %d",
                device_count);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return fail(acmeErrorInvalidValue, "acme: init: alignment must be a power of two, got %zu",
                alignment);
  if (capacity < alignment)
    return fail(acmeErrorInvalidValue,
                "acme: init: capacity (%zu bytes) must be at least the alignment (%zu)",
                capacity, alignment);
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    if (!r.streams.empty() || !r.events.empty())
      return fail(acmeErrorRuntime,
                  "acme: init: cannot re-initialize while %zu stream(s) and %zu event(s) are "
                  "alive",
                  r.streams.size(), r.events.size());
  }
  for (auto& a : r.arenas)
    if (!a->idle())
      return fail(acmeErrorRuntime,
                  "acme: init: cannot re-initialize while device memory is allocated");

  {
    std::lock_guard<std::mutex> wrong(r.wrong_mu);  // a fresh start has every kernel right
    r.wrong_kernel.clear();
    r.has_wrong_kernel = false;
  }
  // Environment options first: a bad value fails init before anything changes.
  for (auto [env, key] : {std::pair{"ACME_SLOW_DEVICE", "slow_device"},
                          std::pair{"ACME_LINK_GBPS", "link_gbps"},
                          std::pair{"ACME_FAULT_SEED", "fault_seed"},
                          std::pair{"ACME_FAULT_MALLOC", "fault_malloc"},
                          std::pair{"ACME_FAULT_MEMCPY", "fault_memcpy"},
                          std::pair{"ACME_WRONG_KERNEL", "wrong_kernel"}})
    if (auto e = env_option(env, key)) return e;

  std::vector<std::unique_ptr<Arena>> arenas;
  for (int i = 0; i < device_count; ++i) {
    arenas.push_back(std::make_unique<Arena>(i, capacity, alignment));
    if (!arenas.back()->ok())
      return fail(acmeErrorMemoryAllocation,
                  "acme: init: cannot reserve %s of address space for device %d: %s",
                  human_bytes(capacity).c_str(), i, std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    // Default streams of the previous devices: idle (nothing is allocated, so
    // nothing queued can still use memory); their workers stop here.
    for (auto& s : r.default_streams)
      if (s) s->shutdown();
    r.default_streams.assign(device_count, nullptr);
    r.default_streams_generation.fetch_add(1, std::memory_order_release);
    r.arenas.swap(arenas);
    r.count = device_count;
    r.capacity = capacity;
    r.alignment = alignment;
    r.orphan_errors.assign(device_count, std::string());
  }
  r.lost = 0;  // a fresh start has every device back
  arenas.clear();  // the old ones (unmapped; they were idle)
  return acmeSuccess;
}

acmeError_t acmeGetDeviceCount(int* count) {
  if (!count) return fail(acmeErrorInvalidValue, "acme: device count: null output pointer");
  *count = rt().count.load();
  return acmeSuccess;
}

acmeError_t acmeDeviceSynchronize(int device) {
  if (auto e = check_alive(device)) return e;
  Runtime& r = rt();
  std::vector<std::shared_ptr<acmeStream_st>> mine;
  std::string err;
  {
    std::shared_ptr<acmeStream_st> dflt;
    if (auto e = find_stream(device, nullptr, &dflt)) return e;
    mine.push_back(dflt);
    std::lock_guard<std::mutex> lk(r.reg_mu);
    // Streams inherited through fork() have no worker here: skip them.
    for (auto& [h, s] : r.streams)
      if (s->device == device && s->fork_epoch == g_fork_epoch.load()) mine.push_back(s);
    err = std::move(r.orphan_errors[device]);
    r.orphan_errors[device].clear();
  }
  for (auto& s : mine) {
    if (s->on_worker())
      return fail(acmeErrorRuntime,
                  "acme: device_synchronize called from work running on stream #%llu of that "
                  "device (would deadlock)",
                  static_cast<unsigned long long>(s->id));
  }
  r.stats.host_waits++;  // counted only once the wait really happens
  for (auto& s : mine) {
    std::string e = s->drain<acme_internal::DeviceWork>();
    if (err.empty()) err = std::move(e);
  }
  if (!err.empty()) return fail_str(acmeErrorRuntime, std::move(err));
  return acmeSuccess;
}

// ---- the device's view ------------------------------------------------------------

void* acmeDeviceView(const void* ptr) {
  if (!on_device()) {
    fail(acmeErrorInvalidValue,
         "acme: device_view(%p) from the host: device memory is reachable only from work "
         "running on the device (queue it with acmeLaunch)",
         ptr);
    return nullptr;
  }
  char* v = view_of(ptr);
  if (!v) fail(acmeErrorInvalidValue, "acme: device_view(%p): not device memory", ptr);
  return v;
}

void* acmeDeviceOrHostView(const void* ptr) {
  char* v = view_of(ptr);
  if (!v) return const_cast<void*>(ptr);
  return on_device() ? v : nullptr;
}

int acmeOnDevice(void) { return on_device() ? 1 : 0; }

// ---- errors -------------------------------------------------------------------

const char* acmeGetLastErrorString(void) { return t_last_error.c_str(); }

const char* acmeGetErrorName(acmeError_t error) {
  switch (error) {
    case acmeSuccess: return "acmeSuccess";
    case acmeErrorMemoryAllocation: return "acmeErrorMemoryAllocation";
    case acmeErrorInvalidDevice: return "acmeErrorInvalidDevice";
    case acmeErrorInvalidValue: return "acmeErrorInvalidValue";
    case acmeErrorRuntime: return "acmeErrorRuntime";
  }
  return "acmeErrorUnknownCode";
}

}  // extern "C"

