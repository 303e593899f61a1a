// acme vendor runtime: the stream and event handle types (internal, see
// internal.h). acme_runtime.h's opaque acmeStream_t / acmeEvent_t point at these.
#pragma once

#include "acme_runtime.h"
#include "profiling.h"

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

// How long the host (synchronize) and the stream's worker (an empty queue) poll
// before they sleep on a condition variable. A sleeping thread's wake-up is a
// system call and a reschedule, tens of microseconds on a VM: twice per
// round trip (a few tiny ops, then .item()) it was most of the round trip's
// time. CUDA's default scheduling does the same (poll, then block). The poll
// yields the core on every turn: with a pause instruction instead, a poll
// that shares a loaded 2-core machine with the host thread took the host's
// core and made round trips 4x slower, not faster. Bounded, so an idle device
// costs one short poll, not a busy core.
inline constexpr auto kStreamSpin = std::chrono::microseconds(50);

// Polls `done()` until it holds or kStreamSpin has passed; the caller re-checks
// under its lock either way.
template <class Done>
void stream_spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kStreamSpin;
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
}

// Set by work that must take effect only once it counts as completed (an event
// marker: after event_synchronize, stream_query must find the work before the
// record, the marker included, done, as CUDA's does); the worker runs it right
// after the count.
inline thread_local std::function<void()> t_after_completed;

struct acmeStream_st {
  int device = 0;
  uint64_t id = 0;
  uint64_t fork_epoch = 0;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  // Each piece of work, what it is (for error messages) and what the profiler
  // records of it (profiling.h).
  struct Work {
    std::function<void()> fn;
    const char* what = "";
    acme_internal::ActivityTag activity;
    int64_t launch_end_ns = 0;
  };
  std::deque<Work> queue;
  uint64_t enqueued = 0, completed = 0;
  // Copies of enqueued / completed for the lock-free polls (stream_spin_until);
  // the counters under `mu` stay the truth every wait re-checks.
  std::atomic<uint64_t> enqueued_seen{0}, completed_seen{0};
  bool stop = false;
  // Wake-ups are system calls: a push wakes the worker only when it sleeps, and a
  // finished item wakes the host only when someone drains (most pushes find the
  // worker busy, and most work completes with nobody waiting).
  bool worker_sleeping = false;
  int drainers = 0;
  std::string error;        // first unreported failure of queued work
  uint64_t more_errors = 0;  // failures after that one
  std::thread worker;
  const std::atomic<uint64_t>* slow_us = nullptr;  // the runtime's slow-device delay

  // False when the stream is being destroyed: a racing destroy must not
  // leave work queued that no worker will ever run.
  [[nodiscard]] bool push(std::function<void()> fn, const char* what,
                          const acme_internal::ActivityTag& activity = {}) {
    bool wake;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stop) return false;
      queue.push_back(Work{std::move(fn), what, activity,
                           activity.recorded ? acme_internal::steady_ns() : 0});
      ++enqueued;
      enqueued_seen.store(enqueued, std::memory_order_release);
      wake = worker_sleeping;
    }
    if (wake) cv_work.notify_one();
    return true;
  }

  void run() {
    for (;;) {
      Work item;
      {
        std::unique_lock<std::mutex> lk(mu);
        if (!stop && queue.empty()) {
          // Poll a little before sleeping: the next op usually follows at once.
          const uint64_t seen = enqueued;
          lk.unlock();
          stream_spin_until([&] { return enqueued_seen.load(std::memory_order_acquire) != seen; });
          lk.lock();
        }
        while (!stop && queue.empty()) {
          worker_sleeping = true;
          cv_work.wait(lk);
          worker_sleeping = false;
        }
        if (queue.empty()) return;  // stop requested and drained
        item = std::move(queue.front());
        queue.pop_front();
      }
      // The slow-device option: the device takes its time, so a host that reads
      // results without waiting for them sees stale bytes.
      if (const uint64_t us = slow_us ? slow_us->load(std::memory_order_relaxed) : 0)
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      // Queued work must never take the process down: capture, report later.
      std::string err;
      const int64_t started = item.activity.recorded ? acme_internal::steady_ns() : 0;
      try {
        item.fn();
      } catch (const std::exception& e) {
        err = e.what();
        if (err.empty()) err = "std::exception with an empty message";
      } catch (...) {
        err = "unknown exception (not derived from std::exception)";
      }
      if (item.activity.recorded)
        acme_internal::record(item.activity, device, id == 0 ? nullptr : this, started,
                              acme_internal::steady_ns(), item.launch_end_ns);
      item.fn = nullptr;  // drop captures before reporting completion
      bool wake;
      {
        std::lock_guard<std::mutex> lk(mu);
        ++completed;
        completed_seen.store(completed, std::memory_order_release);
        wake = drainers > 0;
        if (!err.empty()) {
          if (error.empty())
            error = "acme: " + std::string(item.what) + " on stream #" + std::to_string(id) +
                    " of device " + std::to_string(device) + " failed: " + err;
          else
            ++more_errors;
        }
      }
      if (t_after_completed) {
        auto after = std::move(t_after_completed);
        t_after_completed = nullptr;
        after();
      }
      if (wake) cv_done.notify_all();
    }
  }

  bool on_worker() const { return worker.get_id() == std::this_thread::get_id(); }

  // Waits for everything queued so far; returns and clears the error.
  std::string drain() {
    std::unique_lock<std::mutex> lk(mu);
    const uint64_t target = enqueued;
    if (completed < target) {
      // Poll a little before sleeping: tiny work finishes within microseconds.
      lk.unlock();
      stream_spin_until([&] { return completed_seen.load(std::memory_order_acquire) >= target; });
      lk.lock();
    }
    ++drainers;
    cv_done.wait(lk, [&] { return completed >= target; });
    --drainers;
    std::string e = std::move(error);
    if (!e.empty() && more_errors)
      e += " (and " + std::to_string(more_errors) + " later failure(s) on this stream)";
    error.clear();
    more_errors = 0;
    return e;
  }

  bool idle() {
    std::lock_guard<std::mutex> lk(mu);
    return completed == enqueued;
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv_work.notify_all();  // unconditionally: the worker may be about to sleep
    if (worker.joinable()) worker.join();
  }
};

namespace acme_internal {
// Events shared between processes (ipc.cpp). An event whose handle was given
// out mirrors its reached generation into a slot of a shared page; an event
// opened from another process's handle reads that slot.
struct IpcSlot;
struct IpcRemoteEvent;
void ipc_slot_publish(IpcSlot* slot, uint64_t reached);
void ipc_slot_release(IpcSlot* slot);
bool ipc_remote_reached(const IpcRemoteEvent& remote, uint64_t gen);
// Waits until the remote event reaches gen: "" or why it never will.
std::string ipc_remote_wait(const IpcRemoteEvent& remote, uint64_t gen);
}  // namespace acme_internal

struct acmeEvent_st {
  int device = 0;
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;  // generation of the latest record
  uint64_t reached = 0;   // highest generation reached so far
  std::chrono::steady_clock::time_point stamp;
  acme_internal::IpcSlot* slot = nullptr;  // shared mirror of `reached` (a handle was taken)
  // Opened from another process's handle: `recorded` is the handle's generation
  // and the other process's slot says when it is reached.
  std::shared_ptr<acme_internal::IpcRemoteEvent> remote;

  acmeEvent_st() = default;
  acmeEvent_st(const acmeEvent_st&) = delete;
  acmeEvent_st& operator=(const acmeEvent_st&) = delete;
  ~acmeEvent_st() {
    if (slot) acme_internal::ipc_slot_release(slot);
  }

  void reach(uint64_t gen) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (gen > reached) {
        reached = gen;
        stamp = std::chrono::steady_clock::now();
        if (slot) acme_internal::ipc_slot_publish(slot, reached);
      }
    }
    cv.notify_all();
  }
  // Waits until generation `gen` is reached; "" or why it never will be (an
  // opened event whose process exited first).
  std::string wait(uint64_t gen) {
    if (remote) return acme_internal::ipc_remote_wait(*remote, gen);
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return reached >= gen; });
    return {};
  }
  // The latest record has been reached (or there was none).
  bool done() {
    std::lock_guard<std::mutex> lk(mu);
    if (remote) return acme_internal::ipc_remote_reached(*remote, recorded);
    return reached >= recorded;
  }
};
