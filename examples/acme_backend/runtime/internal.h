// acme vendor runtime: what its source files share (not part of the API).
// One file per concern, as torch_openreg splits its simulated runtime:
//   device.cpp   init, device count, synchronize, kernel brackets, errors, start-up checks
//   memory.cpp   malloc/free/memory info and every copy (the arenas are in arena.h)
//   stream.cpp   streams, events and launch (the queue types are in stream.h)
//   options.cpp  set_option/get_option: slow device, fault injection, stats
//   profiling.cpp  acmeProfiler*: records of the work the streams ran (profiling.h)
#pragma once

#include "acme_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
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
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> host_allocs{0}, host_frees{0}, host_alloc_bytes{0};
  std::atomic<uint64_t> injected_malloc{0}, injected_memcpy{0};
  // Calls in which the host waited for a stream, an event or a device.
  std::atomic<uint64_t> host_waits{0};

  void reset() {
    for (auto* c : {&mallocs, &frees, &malloc_bytes, &malloc_failures, &copies, &copy_bytes,
                    &h2h, &h2d, &d2h, &d2d, &peer, &launches, &host_allocs, &host_frees,
                    &host_alloc_bytes, &injected_malloc,
                    &injected_memcpy, &host_waits})
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

  // Handle registries (validation of opaque handles), per-device errors left
  // by destroyed streams, and each device's default stream (created on first
  // use; a null acmeStream_t names it).
  std::mutex reg_mu;
  std::unordered_map<acmeStream_st*, std::shared_ptr<acmeStream_st>> streams;
  std::unordered_map<acmeEvent_st*, std::shared_ptr<acmeEvent_st>> events;
  std::vector<std::string> orphan_errors;
  std::vector<std::shared_ptr<acmeStream_st>> default_streams;
  // Bumped (under reg_mu) whenever acmeInit replaces the default streams: a
  // launching thread's cached default streams (stream.cpp) are then stale.
  std::atomic<uint64_t> default_streams_generation{0};
  uint64_t next_id = 1;

  // Slow-device option: every piece of queued work waits this long before it
  // runs, so a missing synchronization shows as a wrong answer.
  std::atomic<uint64_t> slow_device_us{0};
  // Link-speed option (ACME_LINK_GBPS / "link_gbps"): bytes crossing a link
  // between devices (acmeccl) take at least bytes / this many GB/s; 0: unlimited.
  std::atomic<double> link_gbps{0.0};

  // Page-locked host blocks handed out by acmeMallocHost (acmeFreeHost checks
  // against them).
  std::mutex host_mu;
  std::unordered_set<void*> host_blocks;

  std::mutex init_mu;
  Faults faults;
  Stats stats;
  // Injected device loss (option "device_lost"): bit i set = device i is gone.
  std::atomic<uint64_t> lost{0};
  // Option "wrong_kernel": the kernel whose results acme's kernel library spoils
  // on purpose (acmeKernelIsWrong); the flag spares every launch a lock.
  std::mutex wrong_mu;
  std::string wrong_kernel;
  std::atomic<bool> has_wrong_kernel{false};
};


Runtime& rt();

// Work running on the device (a stream's worker running queued work, and the
// compute units helping it): only there does acmeDeviceView answer (device.cpp).
struct DeviceWork {
  DeviceWork();
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};
bool on_device();

// Where the runtime reads and writes the bytes at device address p (any
// device, and memory opened from another process's IPC handle), or nullptr
// when p is not device memory.
char* view_of(const void* p);

// ---- device memory of other processes (ipc.cpp) ----
// Memory opened from another process's IPC handle: device addresses
// [base, base + size) of device `device` of this process, whose bytes are at
// `view`. Like an allocation of that device for copies, kernels and views.
struct Imported {
  int device = -1;
  const char* base = nullptr;
  size_t size = 0;
  char* view = nullptr;
};
// True when p lies in opened memory (cheap when nothing is opened).
bool find_import(const void* p, Imported* out);
// fork(): the handlers of the arenas, opened memory, shared events and the
// IPC server (pthread_atfork, registered by rt()).
void ipc_fork_prepare();
void ipc_fork_parent();
void ipc_fork_child();

// The device index is valid (the runtime is initialized).
acmeError_t check_device(int d);
// check_device, plus: the device has not been lost (injected device loss).
// Only calls that need the device working check this; frees, destroys and
// queries keep working so a program can clean up after losing a device.
acmeError_t check_alive(int d);

// Handle lookups (stream.cpp): a live stream of `device` (null: its default
// stream), a live event.
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
