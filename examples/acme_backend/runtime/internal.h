// acme vendor runtime: what its source files share (not part of the API).
// One file per concern, as torch_openreg splits its simulated runtime:
//   device.cpp   init, device count, synchronize, kernel brackets, errors, start-up checks
//   memory.cpp   malloc/free/memory info and every copy (the arenas are in arena.h)
//   stream.cpp   streams, events and launch (the queue types are in stream.h)
//   options.cpp  set_option/get_option: protect mode, fault injection, stats
#pragma once

#include "acme_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "arena.h"
#include "errors.h"
#include "stream.h"

namespace acme_internal {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Counters behind get_option("stats").
struct Stats {
  std::atomic<uint64_t> mallocs{0}, frees{0}, malloc_bytes{0}, malloc_failures{0};
  std::atomic<uint64_t> copies{0}, copy_bytes{0}, h2h{0}, h2d{0}, d2h{0}, d2d{0}, peer{0};
  std::atomic<uint64_t> launches{0}, kernel_begins{0};
  std::atomic<uint64_t> injected_malloc{0}, injected_memcpy{0};

  void reset() {
    for (auto* c : {&mallocs, &frees, &malloc_bytes, &malloc_failures, &copies, &copy_bytes,
                    &h2h, &h2d, &d2h, &d2d, &peer, &launches, &kernel_begins,
                    &injected_malloc, &injected_memcpy})
      c->store(0);
  }
};

// ---------------------------------------------------------------------------
// Deterministic failure injection: call i of a kind fails when
// hash(seed, kind, i) / 2^64 < rate. The same seed and call sequence gives
// the same failures.
struct Faults {
  std::atomic<double> rate[2] = {0.0, 0.0};  // 0 malloc, 1 memcpy
  std::atomic<uint64_t> calls[2] = {0, 0};
  std::atomic<uint64_t> seed{0};

  static uint64_t mix(uint64_t x) {  // splitmix64 finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  // Returns the call number when this call must fail, 0 otherwise.
  uint64_t hit(int kind) {
    const double r = rate[kind].load(std::memory_order_relaxed);
    if (r <= 0.0) return 0;
    const uint64_t i = calls[kind].fetch_add(1) + 1;
    const uint64_t h = mix(mix(seed.load() ^ (0xA5A5ull * (kind + 1))) + i);
    const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
    return u < r ? i : 0;
  }
};

// Bumped in a forked child: streams created before fork() have no worker
// thread there, so using them would hang; they are refused instead.
extern std::atomic<uint64_t> g_fork_epoch;

// ---------------------------------------------------------------------------
// Process-wide state. Leaked on purpose: worker threads may still run while
// static destructors execute at exit.
struct Runtime {
  // Devices (replaced only by acmeInit).
  std::atomic<int> count{0};
  size_t capacity = 0, alignment = 0;
  std::vector<std::unique_ptr<Arena>> arenas;

  // Kernel/copy depth and protect mode.
  std::mutex guard_mu;
  int depth = 0;
  bool protect = false;
  bool open = true;

  // Handle registries (validation of opaque handles), per-device errors left
  // by destroyed streams.
  std::mutex reg_mu;
  std::unordered_map<acmeStream_st*, std::shared_ptr<acmeStream_st>> streams;
  std::unordered_map<acmeEvent_st*, std::shared_ptr<acmeEvent_st>> events;
  std::vector<std::string> orphan_errors;
  uint64_t next_id = 1;

  std::mutex init_mu;
  Faults faults;
  Stats stats;
  // Injected device loss (option "device_lost"): bit i set = device i is gone.
  std::atomic<uint64_t> lost{0};

  void set_all_access(bool o) {
    for (auto& a : arenas) a->set_access(o);
    open = o;
  }
};


Runtime& rt();

// Open/close of device memory around kernels and copies (device.cpp).
void enter_device();
bool leave_device();  // false without a matching enter_device

struct DeviceScope {
  DeviceScope() { enter_device(); }
  ~DeviceScope() { leave_device(); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
};

// The device index is valid (the runtime is initialized).
acmeError_t check_device(int d);
// check_device, plus: the device has not been lost (injected device loss).
// Only calls that need the device working check this; frees, destroys and
// queries keep working so a program can clean up after losing a device.
acmeError_t check_alive(int d);

// Handle lookups (stream.cpp): a live stream of `device`, a live event.
acmeError_t find_stream(int device, acmeStream_t s, std::shared_ptr<acmeStream_st>* out);
acmeError_t find_event(acmeEvent_t e, std::shared_ptr<acmeEvent_st>* out);
// The error of a push onto a stream that is being destroyed.
acmeError_t destroyed(const std::shared_ptr<acmeStream_st>& s);

// Options (options.cpp): applies key=value; `source` names where it came from.
acmeError_t apply_option(const char* key, const char* value, const char* source);
// Reads an env var as an option; unset leaves the current value.
acmeError_t env_option(const char* env, const char* key);
// The installed (simulated) driver version (device.cpp).
std::string installed_driver_version();

}  // namespace acme_internal
