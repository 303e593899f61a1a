// acme's compute units: a fixed pool of worker threads that share a kernel's
// chunks with the calling thread. See compute_units.h for the contract.
#include "compute_units.h"

#include "internal.h"  // DeviceWork: units helping device work run as device work

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <mutex>
#include <thread>
#include <vector>

namespace acme::units {
namespace {

int hardware_units() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// One parallel loop: chunks are claimed with an atomic counter, so each runs
// exactly once, on whichever unit gets to it first.
struct Job {
  bool device_work = false;  // submitted by work running on the device
  int64_t n = 0;
  void (*body)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  int64_t error_index = -1;
  std::exception_ptr error;

  void work() {
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        body(ctx, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error_index < 0 || i < error_index) {
          error_index = i;
          error = std::current_exception();
        }
        next.store(n, std::memory_order_relaxed);  // skip what has not started
      }
    }
  }
};

thread_local bool t_inside_unit = false;  // this thread is running a chunk

class Pool {
 public:
  explicit Pool(int workers) : workers_(workers) {}

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      posted_.fetch_add(1, std::memory_order_release);  // ends a worker's spin
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Runs `job` on the caller and up to `helpers` workers.
  void run(Job& job, int helpers) {
    start_threads();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      wanted_ = std::min(helpers, workers_);
      joined_ = 0;
      ++generation_;
      posted_.store(generation_, std::memory_order_release);
    }
    wake_.notify_all();
    job.work();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      wanted_ = 0;  // late wakers must not join a finished job
    }
    if (!spin([&] { return running_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return running_.load(std::memory_order_acquire) == 0; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = nullptr;
  }

  // Serializes kernels on the pool: a second caller runs inline instead.
  std::mutex& owner() { return owner_; }

 private:
  void start_threads() {
    if (!threads_.empty() || workers_ == 0) return;
    threads_.reserve(workers_);
    for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { loop(); });
  }

  void loop() {
    t_inside_unit = true;
    uint64_t seen = 0;
    for (;;) {
      // A kernel's next parallel loop usually follows within microseconds:
      // watch for it before sleeping, so that it does not pay a wake-up.
      spin([&] { return posted_.load(std::memory_order_acquire) != seen; });
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && joined_ < wanted_); });
        if (stop_) return;
        seen = generation_;
        ++joined_;
        running_.fetch_add(1, std::memory_order_relaxed);
        job = job_;
      }
      if (job->device_work) {
        acme_internal::DeviceWork on_device;  // reaches device memory as the submitter does
        job->work();
      } else {
        job->work();
      }
      if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to sleep
        done_.notify_all();
      }
    }
  }

  // Polls `ready` for up to kSpin before the caller falls back to sleeping on
  // a condition variable (a futex wake-up costs tens of microseconds on a VM,
  // more than many kernels' parallel loops take). Returns whether it was ready.
  template <class F>
  static bool spin(F&& ready) {
    constexpr auto kSpin = std::chrono::microseconds(100);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      if (std::chrono::steady_clock::now() >= until) return false;
    }
  }

  const int workers_;
  std::vector<std::thread> threads_;
  std::mutex owner_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> posted_{0};  // generation_, readable without the mutex
  Job* job_ = nullptr;
  int wanted_ = 0, joined_ = 0;
  std::atomic<int> running_{0};  // workers inside a job
};

std::mutex g_config_mutex;
std::atomic<int> g_units{0};     // 0 = not configured yet: hardware_units()
// Guarded by g_config_mutex; workers = units - 1. Kernels hold a reference
// while they run, so configure() can swap in a new pool at any time and the
// old one stops (joins its threads) when its last kernel is done.
std::shared_ptr<Pool> g_pool;

int configured() {
  const int u = g_units.load(std::memory_order_relaxed);
  return u > 0 ? u : hardware_units();
}

std::shared_ptr<Pool> pool() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  if (!g_pool) g_pool = std::make_shared<Pool>(configured() - 1);
  return g_pool;
}

// A child of fork() has none of the parent's worker threads: leak the parent's
// pool (destroying it would join threads that do not exist, and its mutexes
// may be held by them) and start a fresh one on the next parallel kernel.
void forget_pool_in_child() {
  new std::shared_ptr<Pool>(std::move(g_pool));  // intentionally leaked
  new (&g_config_mutex) std::mutex();            // may have been held at fork
}
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, forget_pool_in_child);

}  // namespace

void configure(int units) {
  std::shared_ptr<Pool> old;
  {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    const int u = units > 0 ? units : hardware_units();
    if (u == configured() && g_units.load(std::memory_order_relaxed) > 0) return;
    g_units.store(u, std::memory_order_relaxed);
    old = std::move(g_pool);
  }
  // `old` stops here, or when the last kernel still running on it finishes.
}

int count() { return configured(); }

void run(int64_t n, int max_units, void (*body)(void*, int64_t), void* ctx) {
  if (n <= 0) return;
  if (n == 1) {
    // One chunk (every small tensor): on the caller, no job, no pool.
    body(ctx, 0);
    return;
  }
  const int units = std::min(max_units, configured());
  Job job;
  job.device_work = acme_internal::on_device();
  job.n = n;
  job.body = body;
  job.ctx = ctx;
  const bool nested = t_inside_unit;
  bool parallel = units > 1 && n > 1 && !nested;
  std::shared_ptr<Pool> p = parallel ? pool() : nullptr;
  std::unique_lock<std::mutex> owner;
  if (p) {
    owner = std::unique_lock<std::mutex>(p->owner(), std::try_to_lock);
    parallel = owner.owns_lock();
  }
  t_inside_unit = true;
  if (parallel) {
    const int helpers = static_cast<int>(std::min<int64_t>(units - 1, n - 1));
    p->run(job, helpers);
  } else {
    job.work();
  }
  t_inside_unit = nested;
  if (job.error) std::rethrow_exception(job.error);
}

bool set_option(const std::string& value, std::string* error) {
  int units = 0;
  if (value != "auto") {
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 1 || v > 1024) {
      if (error)
        *error = "compute_units='" + value + "' is not a unit count; expected an integer 1..1024 or 'auto'";
      return false;
    }
    units = static_cast<int>(v);
  }
  configure(units);
  return true;
}

std::string get_option() { return std::to_string(count()); }

}  // namespace acme::units
