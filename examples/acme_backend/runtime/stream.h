// acme vendor runtime: the stream and event handle types (internal, see
// internal.h). acme_runtime.h's opaque acmeStream_t / acmeEvent_t point at these.
#pragma once

#include "acme_runtime.h"
#include "profiling.h"

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

// How long the host (synchronize) and the stream's worker (an empty queue) poll
// before they sleep. A sleeping thread's wake-up is a system call and a
// reschedule, tens of microseconds on a VM: twice per round trip (a few tiny
// ops, then .item()) it was most of the round trip's time. CUDA's default
// scheduling does the same (poll, then block). The poll yields the core on every
// turn: with a pause instruction instead, a poll that shares a loaded 2-core
// machine with the host thread took the host's core and made round trips 4x
// slower, not faster (measured again for issue 39: 4 us of pause-polling before
// the yields, on either side, made tiny-op round trips 1.2-2x slower on the
// loaded machine). Bounded, so an idle device costs one short poll, not a busy
// core.
inline constexpr auto kStreamSpin = std::chrono::microseconds(50);

// Polls `done()` until it holds (true) or kStreamSpin has passed (false); the
// caller re-checks before it sleeps either way.
template <class Done>
bool stream_spin_until(Done done) {
  if (done()) return true;
  const auto deadline = std::chrono::steady_clock::now() + kStreamSpin;
  do {
    std::this_thread::yield();
    if (done()) return true;
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// Set by work that must take effect only once it counts as completed (an event
// marker: after event_synchronize, stream_query must find the work before the
// record, the marker included, done, as CUDA's does); the worker runs it right
// after the count.
inline thread_local std::function<void()> t_after_completed;

// The stream whose work this thread is running now (its worker, or a host
// thread that synchronizes it: see drain), so that work calling synchronize on
// its own stream is refused instead of deadlocking.
struct acmeStream_st;
inline thread_local const acmeStream_st* t_running_stream = nullptr;

// A stream: a queue of device work, run in order by the stream's worker thread.
//
// The host's side costs no lock: a launch links its work into a lock-free
// multi-producer list (one atomic exchange; any host thread may launch onto any
// stream) and wakes the worker only when it sleeps. The old queue (a mutex and
// condition variables) cost the host a lock per launch that the worker took
// too, once to take the item and once to count it done: on 2 cores both threads
// ran at the same rate on tiny ops, and a contended lock sends the loser to
// sleep in the kernel. List nodes are recycled (the host allocating what the
// worker frees makes every launch a cross-thread free in the C heap; the
// kernel library recycles its closures for the same reason, queued_work.h).
//
// Work is taken off the list by whoever holds the consumer token: the worker,
// or a host thread that synchronizes the stream (drain). A host that waits for
// the device runs the queued work itself, in order, as device work, whenever
// the worker is not running an item: a real device picks up queued work within
// microseconds, while a simulated one whose worker thread sleeps, or is not
// scheduled on a loaded machine, would make every synchronize wait for the
// operating system. The work is the same and runs one item at a time, in order,
// either way.
//
// Sleeping and waking without a lost wake-up: a sleeper publishes that it
// sleeps, then checks once more for what it waits for (both sequentially
// consistent); the other side publishes what it produced, then checks for a
// sleeper and, if there is one, bumps the futex word the sleeper read before it
// looked. Either the sleeper sees the work or the producer sees the sleeper.
struct acmeStream_st {
  int device = 0;
  uint64_t id = 0;
  uint64_t fork_epoch = 0;
  // Each piece of work, what it is (for error messages) and what the profiler
  // records of it (profiling.h).
  struct Work {
    std::function<void()> fn;
    const char* what = "";
    acme_internal::ActivityTag activity;
    int64_t launch_end_ns = 0;
  };
  struct Node {
    std::atomic<Node*> next{nullptr};
    Work work;
  };

  acmeStream_st() : head_(new Node), tail_(head_.load()) {}
  acmeStream_st(const acmeStream_st&) = delete;
  acmeStream_st& operator=(const acmeStream_st&) = delete;
  ~acmeStream_st() {
    // Only after shutdown: what is left is the list's stub.
    for (Node* n = head_.load(); n;) {
      Node* next = n->next.load(std::memory_order_relaxed);
      delete n;
      n = next;
    }
  }

  std::thread worker;
  const std::atomic<uint64_t>* slow_us = nullptr;  // the runtime's slow-device delay

  // False when the stream is being destroyed: a racing destroy must not
  // leave work queued that no worker will ever run.
  [[nodiscard]] bool push(std::function<void()> fn, const char* what,
                          const acme_internal::ActivityTag& activity = {}) {
    // Counted before it is linked: a drain that reads the count waits for it,
    // and completions never overtake the count. The same word holds the stop
    // flag, so a push and a shutdown agree on whether this work runs.
    if (state_.fetch_add(1, std::memory_order_seq_cst) & kStopped) {
      state_.fetch_sub(1, std::memory_order_seq_cst);
      wake_worker();  // a stopping worker waits for the count to settle
      return false;
    }
    Node* n = take_node();
    n->work = Work{std::move(fn), what, activity,
                   activity.recorded ? acme_internal::steady_ns() : 0};
    // The exchange is the publication a sleeping worker looks for (tail_ moved
    // past its head); it is a full barrier, so the check for a sleeper after it
    // cannot be reordered before it.
    Node* prev = tail_.exchange(n, std::memory_order_seq_cst);
    prev->next.store(n, std::memory_order_release);
    if (worker_sleeping_.load(std::memory_order_seq_cst)) wake_worker();
    return true;
  }

  // The worker's loop (it runs as device work for its whole life).
  void run() {
    for (;;) {
      const int r = run_one();
      if (r > 0) continue;
      // Stop requested and drained: no push counted before the stop is still
      // to be linked (pushes counted after it take their count back).
      if (r == 0 && state_.load(std::memory_order_seq_cst) ==
                        (kStopped | completed_.load(std::memory_order_relaxed)))
        return;
      wait_for_work();
    }
  }

  bool on_worker() const {
    return t_running_stream == this || worker.get_id() == std::this_thread::get_id();
  }

  // Waits for everything queued so far, running it on this thread when the
  // worker is not (see above); returns and clears the error. `DeviceScope` makes
  // this thread count as device work meanwhile (acme_internal::DeviceWork).
  template <class DeviceScope>
  std::string drain() {
    const uint64_t target = state_.load(std::memory_order_acquire) & ~kStopped;
    auto reached = [&] { return completed_.load(std::memory_order_acquire) >= target; };
    if (!reached()) {
      DeviceScope on_device;
      while (!reached()) {
        const int r = run_one();
        if (r > 0) continue;
        // The worker is running an item (or a push counted in the target is
        // still linking it): poll a little, then sleep until an item completes.
        if (stream_spin_until([&] { return reached() || !consumer_.load(std::memory_order_relaxed); }))
          continue;
        drainers_.fetch_add(1, std::memory_order_seq_cst);
        for (;;) {
          const uint32_t signal = done_signal_.load(std::memory_order_acquire);
          if (reached() || !consumer_.load(std::memory_order_seq_cst)) break;
          done_signal_.wait(signal, std::memory_order_acquire);
        }
        drainers_.fetch_sub(1, std::memory_order_relaxed);
      }
      // Work queued after the target is the worker's; it may have gone to sleep
      // while this thread held the token.
      if (worker_sleeping_.load(std::memory_order_seq_cst) && has_work()) wake_worker();
    }
    std::lock_guard<std::mutex> lk(error_mu_);
    std::string e = std::move(error_);
    if (!e.empty() && more_errors_)
      e += " (and " + std::to_string(more_errors_) + " later failure(s) on this stream)";
    error_.clear();
    more_errors_ = 0;
    return e;
  }

  bool idle() const {
    const uint64_t done = completed_.load(std::memory_order_acquire);
    return done == (state_.load(std::memory_order_acquire) & ~kStopped);
  }

  // Work counted before this runs first (its pushes link it; the worker waits
  // for them); pushes after it fail.
  void shutdown() {
    state_.fetch_or(kStopped, std::memory_order_seq_cst);
    wake_worker();  // unconditionally: it may be about to sleep
    if (worker.joinable()) worker.join();
  }

 private:
  static constexpr uint64_t kStopped = uint64_t{1} << 63;

  // Takes the consumer token and runs the next item: 1 ran one, 0 the list is
  // empty (or its next item is still being linked), -1 another thread holds
  // the token.
  int run_one() {
    if (consumer_.exchange(true, std::memory_order_acquire)) return -1;
    Node* head = head_.load(std::memory_order_relaxed);
    Node* next = head->next.load(std::memory_order_acquire);
    if (!next) {
      release_consumer();
      return 0;
    }
    Work item = std::move(next->work);
    head_.store(next, std::memory_order_relaxed);
    give_node(head);  // the old stub; `next` (its work moved out) is the new one
    const acmeStream_st* outer = t_running_stream;
    t_running_stream = this;
    run_item(item);
    t_running_stream = outer;
    completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    if (t_after_completed) {
      auto after = std::move(t_after_completed);
      t_after_completed = nullptr;
      after();
    }
    release_consumer();
    if (drainers_.load(std::memory_order_seq_cst) > 0) {
      done_signal_.fetch_add(1, std::memory_order_release);
      done_signal_.notify_all();
    }
    return 1;
  }

  void release_consumer() {
    consumer_.store(false, std::memory_order_seq_cst);
  }

  void run_item(Work& item) {
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
    if (!err.empty()) {
      std::lock_guard<std::mutex> lk(error_mu_);
      if (error_.empty())
        error_ = "acme: " + std::string(item.what) + " on stream #" + std::to_string(id) +
                 " of device " + std::to_string(device) + " failed: " + err;
      else
        ++more_errors_;
    }
  }

  // Work is queued that no thread is running: tail_ moved past the head (its
  // link may still be on the way) and the token is free.
  bool has_work() const {
    return tail_.load(std::memory_order_seq_cst) != head_.load(std::memory_order_seq_cst);
  }

  void wake_worker() {
    work_signal_.fetch_add(1, std::memory_order_seq_cst);
    work_signal_.notify_one();
  }

  // Polls briefly, then sleeps until a push, a draining host handing the list
  // back, or shutdown signals.
  void wait_for_work() {
    auto ready = [&] {
      return (has_work() && !consumer_.load(std::memory_order_seq_cst)) ||
             (state_.load(std::memory_order_relaxed) & kStopped);
    };
    // Poll a little before sleeping: the next op usually follows at once.
    if (stream_spin_until(ready)) return;
    const uint32_t signal = work_signal_.load(std::memory_order_acquire);
    worker_sleeping_.store(true, std::memory_order_seq_cst);
    if (!ready()) work_signal_.wait(signal, std::memory_order_acquire);
    worker_sleeping_.store(false, std::memory_order_relaxed);
  }

  // Recycled list nodes, shared by all streams: a worker (or draining host)
  // returns each stub it moves past to `returned`; a launching thread takes
  // the whole stack at once into its own cache when its cache is empty (taking
  // all at once has no ABA problem, unlike popping single nodes).
  struct NodeCache {
    Node* head = nullptr;
    ~NodeCache() {
      while (Node* n = head) {
        head = n->next.load(std::memory_order_relaxed);
        delete n;
      }
    }
  };
  static std::atomic<Node*>& returned_nodes() {
    // A cache line of its own: the worker swaps it after every item, and a
    // neighbour in .bss (rt()'s guard was one) would cost the host a miss per launch.
    struct alignas(64) Line {
      std::atomic<Node*> head{nullptr};
    };
    static Line line;
    return line.head;
  }
  static Node* take_node() {
    thread_local NodeCache cache;
    if (!cache.head) cache.head = returned_nodes().exchange(nullptr, std::memory_order_acquire);
    if (Node* n = cache.head) {
      cache.head = n->next.load(std::memory_order_relaxed);
      n->next.store(nullptr, std::memory_order_relaxed);
      return n;
    }
    return new Node;
  }
  static void give_node(Node* n) {
    auto& stack = returned_nodes();
    Node* top = stack.load(std::memory_order_relaxed);
    do {
      n->next.store(top, std::memory_order_relaxed);
    } while (!stack.compare_exchange_weak(top, n, std::memory_order_release,
                                          std::memory_order_relaxed));
  }

  // The list: the token holder owns head_ (a stub whose successors are queued
  // work); producers swap themselves in at tail_.
  std::atomic<Node*> head_;
  std::atomic<bool> consumer_{false};
  alignas(64) std::atomic<Node*> tail_;
  std::atomic<uint64_t> state_{0};  // work counted (pushed), | kStopped once shutdown began
  // Futex words: bumped to wake the worker / the draining hosts.
  alignas(64) std::atomic<bool> worker_sleeping_{false};
  std::atomic<uint32_t> work_signal_{0};
  alignas(64) std::atomic<uint64_t> completed_{0};
  std::atomic<int> drainers_{0};
  std::atomic<uint32_t> done_signal_{0};
  std::mutex error_mu_;
  std::string error_;        // first unreported failure of queued work
  uint64_t more_errors_ = 0;  // failures after that one
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
