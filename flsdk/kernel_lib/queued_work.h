// A kernel's device part on its way to the stream: the closure launch()
// (device.h) queues, in memory that never passes through the C heap.
//
// Why: the closure is made on the launching host thread and destroyed on the
// thread that runs the stream's work. From the C heap that is a cross-thread
// free on every launch, and glibc then serialises the host's mallocs and the
// worker's frees on one arena lock. On acme's tiny ops (issue 39) perf found a
// futex system call every few launches on both threads, because both threads
// contended for that lock. Here a block goes back to a lock-free stack of its
// size when its work is done, and a launching thread takes the whole stack at
// once when its own cache is empty. Taking everything at once has no ABA
// problem, as popping single blocks would.
//
// The pools keep what they hold: their size is the most closures ever queued
// at once (a thread's own cache goes back to the C heap when the thread exits).
//
// The contract is launch_host_kernel's (runtime_adapter.h): run(arg) runs the
// work and frees it, so the runtime calls it exactly once. If it never runs
// (the queue call failed), the caller frees it with discard(arg).
#pragma once

#include "device_config.h"  // FLSDK_BACKEND_NS

#include <atomic>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace FLSDK_BACKEND_NS::common {

namespace queued_work_detail {

struct FreeBlock {
  FreeBlock* next;
};

// Blocks of `Size` bytes: a cache per launching thread, and the stack that
// finished work returns blocks to (any thread may run the work).
template <std::size_t Size>
class BlockPool {
 public:
  static void* take() {
    Cache& cache = thread_cache();
    if (cache.head == nullptr) cache.head = returned().exchange(nullptr, std::memory_order_acquire);
    if (FreeBlock* b = cache.head) {
      cache.head = b->next;
      return b;
    }
    return ::operator new(Size);
  }

  static void give(void* p) {
    auto* b = static_cast<FreeBlock*>(p);
    std::atomic<FreeBlock*>& stack = returned();
    FreeBlock* top = stack.load(std::memory_order_relaxed);
    do {
      b->next = top;
    } while (!stack.compare_exchange_weak(top, b, std::memory_order_release,
                                          std::memory_order_relaxed));
  }

 private:
  struct Cache {
    FreeBlock* head = nullptr;
    Cache() = default;
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;
    ~Cache() {  // the thread exits: its unused blocks go back to the C heap
      while (FreeBlock* b = head) {
        head = b->next;
        ::operator delete(b);
      }
    }
  };
  static Cache& thread_cache() {
    thread_local Cache cache;
    return cache;
  }
  static std::atomic<FreeBlock*>& returned() {
    // A cache line of its own: whoever runs the work swaps it after every item,
    // and a neighbour in .bss would cost the launching host a miss per launch.
    struct alignas(64) Line {
      std::atomic<FreeBlock*> head{nullptr};
    };
    static Line line;
    return line.head;
  }
};

// The smallest size class that holds T: powers of two from 128 bytes to 4 KB
// (an elementwise kernel's closure, its 1.3 KB iterator included, takes 2 KB);
// 0: none (over-aligned or larger: T goes to the C heap).
template <class T>
constexpr std::size_t size_class() {
  if constexpr (alignof(T) > alignof(std::max_align_t) || sizeof(T) > 4096) {
    return 0;
  } else {
    std::size_t size = 128;
    while (size < sizeof(T)) size *= 2;
    return size;
  }
}

template <class Fn>
void destroy(Fn* fn) {
  constexpr std::size_t kSize = size_class<Fn>();
  if constexpr (kSize == 0) {
    delete fn;
  } else {
    fn->~Fn();
    BlockPool<kSize>::give(fn);
  }
}

}  // namespace queued_work_detail

// One closure, made on the host and run once on the device's stream.
struct QueuedWork {
  void (*run)(void* arg) = nullptr;      // runs the work, then frees it
  void (*discard)(void* arg) = nullptr;  // frees work that never ran
  void* arg = nullptr;
};

// Constructs Fn{args...} in place, in its block: the work is built once where
// it will run from, not built and then copied there (a kernel's closure holds
// its iterator, issue 39).
template <class Fn, class... Args>
QueuedWork emplace_queued_work(Args&&... args) {
  constexpr std::size_t kSize = queued_work_detail::size_class<Fn>();
  Fn* fn = nullptr;
  if constexpr (kSize == 0) {
    fn = new Fn{std::forward<Args>(args)...};
  } else {
    void* block = queued_work_detail::BlockPool<kSize>::take();
    try {
      fn = new (block) Fn{std::forward<Args>(args)...};
    } catch (...) {
      queued_work_detail::BlockPool<kSize>::give(block);
      throw;
    }
  }
  QueuedWork work;
  work.arg = fn;
  work.run = [](void* p) {
    Fn* self = static_cast<Fn*>(p);
    // Freed when the work returns or throws (the runtime reports the throw).
    struct Release {
      Fn* self;
      ~Release() { queued_work_detail::destroy(self); }
    } release{self};
    (*self)();
  };
  work.discard = [](void* p) { queued_work_detail::destroy(static_cast<Fn*>(p)); };
  return work;
}

template <class F>
QueuedWork make_queued_work(F&& f) {
  return emplace_queued_work<std::decay_t<F>>(std::forward<F>(f));
}

}  // namespace FLSDK_BACKEND_NS::common
