// acme vendor runtime: implementation. See acme_runtime.h for the model.
// No torch includes: this is the vendor's own library.
#include "acme_runtime.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Errors: a thread-local message per failed call, like cudaGetLastError's text.
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

const char* kind_name(acmeMemcpyKind k) {
  switch (k) {
    case acmeMemcpyHostToHost: return "HostToHost";
    case acmeMemcpyHostToDevice: return "HostToDevice";
    case acmeMemcpyDeviceToHost: return "DeviceToHost";
    case acmeMemcpyDeviceToDevice: return "DeviceToDevice";
  }
  return "?";
}

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
// One device's memory: a reserved mapping and a best-fit allocator over it.
// Allocator metadata lives outside the arena, so protect mode never has to
// open the arena for malloc/free.
class Arena {
 public:
  Arena(int index, size_t capacity, size_t alignment)
      : index_(index), align_(alignment) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    cap_ = capacity / alignment * alignment;  // usable bytes
    // Over-reserve when alignment exceeds a page so the base can be aligned.
    map_len_ = round_up(cap_ + (alignment > page ? alignment : 0), page);
    void* m = mmap(nullptr, map_len_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
      map_ = nullptr;
      return;
    }
    map_ = static_cast<char*>(m);
    base_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(map_), alignment));
    free_by_off_.emplace(0, cap_);
    free_by_size_.emplace(cap_, 0);
    free_bytes_ = cap_;
  }
  ~Arena() {
    if (map_) munmap(map_, map_len_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  bool ok() const { return map_ != nullptr; }
  size_t capacity() const { return cap_; }
  bool contains(const void* p) const {
    auto c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + cap_;
  }

  // Opens (read/write) or closes (no access) the whole arena.
  void set_access(bool open) {
    if (mprotect(map_, map_len_, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
      // Only fails on kernel resource exhaustion; carrying on would make
      // protect mode lie, so stop loudly.
      std::fprintf(stderr, "acme: mprotect of device %d arena failed: %s\n", index_,
                   std::strerror(errno));
      std::abort();
    }
  }

  acmeError_t allocate(size_t bytes, void** out) {
    if (bytes > cap_) return oom(bytes, "larger than the device");
    const size_t need = round_up(bytes, align_);
    std::lock_guard<std::mutex> lk(mu_);
    // Best fit: the smallest free block that holds `need`.
    auto it = free_by_size_.lower_bound({need, 0});
    if (it == free_by_size_.end()) return oom_locked(bytes);
    const size_t size = it->first, off = it->second;
    free_by_size_.erase(it);
    free_by_off_.erase(off);
    if (size > need) {
      free_by_off_.emplace(off + need, size - need);
      free_by_size_.emplace(size - need, off + need);
    }
    used_.emplace(off, Block{need, bytes});
    free_bytes_ -= need;
    peak_used_ = std::max(peak_used_, cap_ - free_bytes_);
    *out = base_ + off;
    return acmeSuccess;
  }

  acmeError_t release(void* p) {
    if (!contains(p))
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: pointer is not in this device's memory", p,
                  index_);
    const size_t off = static_cast<size_t>(static_cast<char*>(p) - base_);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.find(off);
    if (it == used_.end())
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: not the start of a live allocation "
                  "(double free, or an interior pointer)",
                  p, index_);
    size_t start = off, size = it->second.size;
    used_.erase(it);
    free_bytes_ += size;
    release_pages(start, size);
    // Coalesce with the free neighbours on both sides.
    auto next = free_by_off_.lower_bound(start);
    if (next != free_by_off_.end() && next->first == start + size) {
      size += next->second;
      free_by_size_.erase({next->second, next->first});
      next = free_by_off_.erase(next);
    }
    if (next != free_by_off_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        free_by_size_.erase({prev->second, prev->first});
        free_by_off_.erase(prev);
      }
    }
    free_by_off_.emplace(start, size);
    free_by_size_.emplace(size, start);
    return acmeSuccess;
  }

  // Checks that [p, p+n) lies inside one live allocation (its requested
  // size, not the alignment padding).
  acmeError_t check_range(const void* p, size_t n, const char* role) const {
    const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.upper_bound(off);
    if (it == used_.begin())
      return fail(acmeErrorInvalidValue, "acme: memcpy %s %p is not in a live allocation of device %d",
                  role, p, index_);
    --it;
    const size_t end = it->first + it->second.requested;
    if (off >= end)
      return fail(acmeErrorInvalidValue, "acme: memcpy %s %p is not in a live allocation of device %d",
                  role, p, index_);
    if (n > end - off)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s range [%p, +%zu) overruns its allocation on device %d "
                  "(%zu bytes left from %p)",
                  role, p, n, index_, end - off, p);
    return acmeSuccess;
  }

  void info(size_t* free_bytes, size_t* total) const {
    std::lock_guard<std::mutex> lk(mu_);
    *free_bytes = free_bytes_;
    *total = cap_;
  }

  bool idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return used_.empty();
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lk(mu_);
    peak_used_ = cap_ - free_bytes_;
  }

  std::string json() const {
    std::lock_guard<std::mutex> lk(mu_);
    const size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    char buf[384];
    std::snprintf(buf, sizeof buf,
                  "{\"index\": %d, \"capacity\": %zu, \"free\": %zu, \"used\": %zu, "
                  "\"peak_used\": %zu, \"live_allocations\": %zu, \"free_blocks\": %zu, "
                  "\"largest_free_block\": %zu}",
                  index_, cap_, free_bytes_, cap_ - free_bytes_, peak_used_, used_.size(),
                  free_by_off_.size(), largest);
    return buf;
  }

 private:
  struct Block {
    size_t size;       // rounded to the alignment
    size_t requested;  // what the caller asked for
  };

  static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

  acmeError_t oom(size_t bytes, const char* why) const {
    size_t f, t;
    info(&f, &t);
    return fail_str(acmeErrorMemoryAllocation,
                    "acme: out of memory on device " + std::to_string(index_) + ": requested " +
                        human_bytes(bytes) + " (" + why + "); " + human_bytes(f) +
                        " free of " + human_bytes(t) + " capacity");
  }
  acmeError_t oom_locked(size_t bytes) const {
    const size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    return fail_str(acmeErrorMemoryAllocation,
                    "acme: out of memory on device " + std::to_string(index_) + ": requested " +
                        human_bytes(bytes) + "; " + human_bytes(free_bytes_) + " free of " +
                        human_bytes(cap_) + " capacity, largest free block " +
                        human_bytes(largest));
  }

  // Gives the physical pages of a large freed block back to the OS, so a
  // simulated device that once held a big tensor does not keep host RAM.
  // Only whole pages strictly inside the block: neighbours may share pages.
  void release_pages(size_t off, size_t size) {
    constexpr size_t kMin = 1 << 20;
    if (size < kMin) return;
    const uintptr_t page = 4096;
    uintptr_t b = round_up(reinterpret_cast<uintptr_t>(base_ + off), page);
    uintptr_t e = (reinterpret_cast<uintptr_t>(base_ + off + size)) / page * page;
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
  }

  int index_;
  size_t align_;
  size_t cap_ = 0;
  char* map_ = nullptr;
  size_t map_len_ = 0;
  char* base_ = nullptr;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_off_;             // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::map<size_t, Block> used_;                      // offset -> block
  size_t free_bytes_ = 0;
  size_t peak_used_ = 0;
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

}  // namespace

// ---------------------------------------------------------------------------
// Streams and events. The handle types are the implementation structs.

namespace {
// Bumped in a forked child: streams created before fork() have no worker
// thread there, so using them would hang; they are refused instead.
std::atomic<uint64_t> g_fork_epoch{0};
}  // namespace

struct acmeStream_st {
  int device = 0;
  uint64_t id = 0;
  uint64_t fork_epoch = 0;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::deque<std::pair<std::function<void()>, const char*>> queue;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::string error;        // first unreported failure of queued work
  uint64_t more_errors = 0;  // failures after that one
  std::thread worker;

  // False when the stream is being destroyed: a racing destroy must not
  // leave work queued that no worker will ever run.
  [[nodiscard]] bool push(std::function<void()> fn, const char* what) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stop) return false;
      queue.emplace_back(std::move(fn), what);
      ++enqueued;
    }
    cv_work.notify_one();
    return true;
  }

  void run() {
    for (;;) {
      std::pair<std::function<void()>, const char*> item;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv_work.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stop requested and drained
        item = std::move(queue.front());
        queue.pop_front();
      }
      // Queued work must never take the process down: capture, report later.
      std::string err;
      try {
        item.first();
      } catch (const std::exception& e) {
        err = e.what();
        if (err.empty()) err = "std::exception with an empty message";
      } catch (...) {
        err = "unknown exception (not derived from std::exception)";
      }
      item.first = nullptr;  // drop captures before reporting completion
      {
        std::lock_guard<std::mutex> lk(mu);
        ++completed;
        if (!err.empty()) {
          if (error.empty())
            error = "acme: " + std::string(item.second) + " on stream #" + std::to_string(id) +
                    " of device " + std::to_string(device) + " failed: " + err;
          else
            ++more_errors;
        }
      }
      cv_done.notify_all();
    }
  }

  bool on_worker() const { return worker.get_id() == std::this_thread::get_id(); }

  // Waits for everything queued so far; returns and clears the error.
  std::string drain() {
    std::unique_lock<std::mutex> lk(mu);
    const uint64_t target = enqueued;
    cv_done.wait(lk, [&] { return completed >= target; });
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
    cv_work.notify_all();
    if (worker.joinable()) worker.join();
  }
};

struct acmeEvent_st {
  int device = 0;
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;  // generation of the latest record
  uint64_t reached = 0;   // highest generation reached so far
  Clock::time_point stamp;

  void reach(uint64_t gen) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (gen > reached) {
        reached = gen;
        stamp = Clock::now();
      }
    }
    cv.notify_all();
  }
  void wait(uint64_t gen) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return reached >= gen; });
  }
};

namespace {

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

Runtime& rt() {
  static Runtime* r = [] {
    pthread_atfork(nullptr, nullptr, [] { g_fork_epoch.fetch_add(1); });
    return new Runtime;
  }();
  return *r;
}

// Open/close of device memory around kernels and copies.
void enter_device() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.guard_mu);
  if (r.depth++ == 0 && r.protect && !r.open) r.set_all_access(true);
}

bool leave_device() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.guard_mu);
  if (r.depth == 0) return false;
  if (--r.depth == 0 && r.protect && r.open) r.set_all_access(false);
  return true;
}

struct DeviceScope {
  DeviceScope() { enter_device(); }
  ~DeviceScope() { leave_device(); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
};

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

// Device index whose arena holds p, or -1.
int owner_of(const void* p) {
  Runtime& r = rt();
  for (int i = 0; i < static_cast<int>(r.arenas.size()); ++i)
    if (r.arenas[i]->contains(p)) return i;
  return -1;
}

acmeError_t find_stream(int device, acmeStream_t s, std::shared_ptr<acmeStream_st>* out) {
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    auto it = r.streams.find(s);
    if (it != r.streams.end()) *out = it->second;
  }
  if (!*out)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme stream (destroyed?)",
                static_cast<void*>(s));
  if ((*out)->fork_epoch != g_fork_epoch.load(std::memory_order_relaxed))
    return fail(acmeErrorRuntime,
                "acme: stream #%llu was created before fork(); its worker thread does not "
                "exist in this child process (create new streams after forking)",
                static_cast<unsigned long long>((*out)->id));
  if ((*out)->device != device)
    return fail(acmeErrorInvalidValue, "acme: stream #%llu belongs to device %d, not device %d",
                static_cast<unsigned long long>((*out)->id), (*out)->device, device);
  return acmeSuccess;
}

acmeError_t find_event(acmeEvent_t e, std::shared_ptr<acmeEvent_st>* out) {
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    auto it = r.events.find(e);
    if (it != r.events.end()) *out = it->second;
  }
  if (!*out)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme event (destroyed?)",
                static_cast<void*>(e));
  return acmeSuccess;
}

acmeError_t destroyed(const std::shared_ptr<acmeStream_st>& s) {
  return fail(acmeErrorInvalidValue, "acme: stream #%llu was destroyed while work was being queued on it",
              static_cast<unsigned long long>(s->id));
}

// Validates one side of a copy. `dev` >= 0: device memory of that device
// (-2: device memory of any device); -1: host memory.
acmeError_t check_side(const void* p, size_t n, int dev, const char* role, acmeMemcpyKind kind) {
  Runtime& r = rt();
  if (p == nullptr) return fail(acmeErrorInvalidValue, "acme: memcpy %s is null", role);
  const int owner = owner_of(p);
  if (dev == -1) {
    if (owner >= 0)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s %p is device memory of device %d, but the copy kind %s "
                  "says host",
                  role, p, owner, kind_name(kind));
    return acmeSuccess;
  }
  if (owner < 0 || (dev >= 0 && owner != dev)) {
    if (owner < 0)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s %p is not device memory (copy kind %s)", role, p,
                  kind_name(kind));
    return fail(acmeErrorInvalidValue,
                "acme: memcpy %s %p is memory of device %d, expected device %d", role, p,
                owner, dev);
  }
  return r.arenas[owner]->check_range(p, n, role);
}

acmeError_t validate_copy(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                          int device) {
  switch (kind) {
    case acmeMemcpyHostToHost:
      if (auto e = check_side(dst, bytes, -1, "destination", kind)) return e;
      return check_side(src, bytes, -1, "source", kind);
    case acmeMemcpyHostToDevice:
      if (auto e = check_side(dst, bytes, device, "destination", kind)) return e;
      return check_side(src, bytes, -1, "source", kind);
    case acmeMemcpyDeviceToHost:
      if (auto e = check_side(dst, bytes, -1, "destination", kind)) return e;
      return check_side(src, bytes, device, "source", kind);
    case acmeMemcpyDeviceToDevice:
      if (auto e = check_side(dst, bytes, device, "destination", kind)) return e;
      return check_side(src, bytes, -2, "source", kind);
  }
  return fail(acmeErrorInvalidValue, "acme: invalid memcpy kind %d", static_cast<int>(kind));
}

void count_copy(acmeMemcpyKind kind, size_t bytes) {
  Stats& s = rt().stats;
  s.copies++;
  s.copy_bytes += bytes;
  switch (kind) {
    case acmeMemcpyHostToHost: s.h2h++; break;
    case acmeMemcpyHostToDevice: s.h2d++; break;
    case acmeMemcpyDeviceToHost: s.d2h++; break;
    case acmeMemcpyDeviceToDevice: s.d2d++; break;
  }
}

void raw_copy(void* dst, const void* src, size_t bytes, bool touches_device) {
  if (touches_device) {
    DeviceScope scope;
    std::memmove(dst, src, bytes);
  } else {
    std::memmove(dst, src, bytes);
  }
}

acmeError_t injected_copy_fault() {
  Runtime& r = rt();
  if (uint64_t i = r.faults.hit(1)) {
    r.stats.injected_memcpy++;
    return fail(acmeErrorRuntime,
                "acme: injected memcpy fault (fault_memcpy=%g, fault_seed=%llu, memcpy call #%llu)",
                r.faults.rate[1].load(), static_cast<unsigned long long>(r.faults.seed.load()),
                static_cast<unsigned long long>(i));
  }
  return acmeSuccess;
}

// Strict parsers for option values (a typo must not silently mean 0).
bool parse_rate(const char* s, double* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno || *end || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}
bool parse_u64(const char* s, uint64_t* out) {
  if (!s || !*s || *s == '-') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}
bool parse_bool(const char* s, bool* out) {
  if (!s) return false;
  std::string v(s);
  if (v == "1" || v == "true" || v == "on") return *out = true, true;
  if (v == "0" || v == "false" || v == "off" || v.empty()) return *out = false, true;
  return false;
}

acmeError_t set_protect(bool on) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.guard_mu);
  r.protect = on;
  // Close now only if nothing runs on the device; otherwise the last
  // leave_device closes.
  if (on && r.depth == 0 && r.open) r.set_all_access(false);
  if (!on && !r.open) r.set_all_access(true);
  return acmeSuccess;
}

acmeError_t apply_option(const char* key, const char* value, const char* source) {
  Runtime& r = rt();
  const std::string k(key);
  if (k == "protect") {
    bool on;
    if (!parse_bool(value, &on))
      return fail(acmeErrorInvalidValue, "acme: %s: protect must be 0 or 1, got '%s'", source,
                  value);
    return set_protect(on);
  }
  if (k == "fault_malloc" || k == "fault_memcpy") {
    double v;
    if (!parse_rate(value, &v))
      return fail(acmeErrorInvalidValue, "acme: %s: %s must be a rate in [0, 1], got '%s'",
                  source, key, value);
    const int kind = k == "fault_malloc" ? 0 : 1;
    r.faults.rate[kind] = v;
    r.faults.calls[kind] = 0;
    return acmeSuccess;
  }
  if (k == "fault_seed") {
    uint64_t v;
    if (!parse_u64(value, &v))
      return fail(acmeErrorInvalidValue,
                  "acme: %s: fault_seed must be an unsigned integer, got '%s'", source, value);
    r.faults.seed = v;
    r.faults.calls[0] = 0;
    r.faults.calls[1] = 0;
    return acmeSuccess;
  }
  if (k == "stats") {
    if (std::string(value) != "reset" && std::string(value) != "0")
      return fail(acmeErrorInvalidValue, "acme: %s: stats only accepts 'reset', got '%s'",
                  source, value);
    r.stats.reset();
    for (auto& a : r.arenas) a->reset_peak();
    return acmeSuccess;
  }
  if (k == "device_lost") {
    if (std::string(value) == "none") {
      r.lost = 0;
      return acmeSuccess;
    }
    uint64_t v;
    if (!parse_u64(value, &v) || v >= static_cast<uint64_t>(r.count.load()))
      return fail(acmeErrorInvalidValue,
                  "acme: %s: device_lost must be a device index 0..%d or 'none', got '%s'",
                  source, r.count.load() - 1, value);
    r.lost.fetch_or(uint64_t{1} << v);
    return acmeSuccess;
  }
  if (k == "device_count" || k == "capacity" || k == "alignment" || k == "runtime_version" ||
      k == "driver_version" || k == "built_driver_version")
    return fail(acmeErrorInvalidValue,
                "acme: option '%s' is read-only (set it through the device config / init)", key);
  return fail(acmeErrorInvalidValue,
              "acme: unknown option '%s' (settable: protect, fault_malloc, fault_memcpy, "
              "fault_seed, stats, device_lost)",
              key);
}

std::string stats_json() {
  Runtime& r = rt();
  Stats& s = r.stats;
  size_t nstreams, nevents;
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    nstreams = r.streams.size();
    nevents = r.events.size();
  }
  std::string j = "{";
  auto add = [&](const char* name, uint64_t v) {
    j += "\"";
    j += name;
    j += "\": " + std::to_string(v) + ", ";
  };
  add("mallocs", s.mallocs);
  add("frees", s.frees);
  add("malloc_bytes", s.malloc_bytes);
  add("malloc_failures", s.malloc_failures);
  add("copies", s.copies);
  add("copy_bytes", s.copy_bytes);
  add("h2h", s.h2h);
  add("h2d", s.h2d);
  add("d2h", s.d2h);
  add("d2d", s.d2d);
  add("peer", s.peer);
  add("launches", s.launches);
  add("kernel_begins", s.kernel_begins);
  add("injected_malloc_faults", s.injected_malloc);
  add("injected_memcpy_faults", s.injected_memcpy);
  add("live_streams", nstreams);
  add("live_events", nevents);
  j += "\"devices\": [";
  for (size_t i = 0; i < r.arenas.size(); ++i) {
    if (i) j += ", ";
    j += r.arenas[i]->json();
  }
  j += "]}";
  return j;
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

// Reads an env var as an option; unset leaves the current value.
acmeError_t env_option(const char* env, const char* key) {
  const char* v = std::getenv(env);
  if (!v) return acmeSuccess;
  return apply_option(key, v, env);
}

}  // namespace

// ===========================================================================
// C API

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

  // Environment options first: a bad value fails init before anything changes
  // device-wise (the arenas are set to the resulting protect state below).
  for (auto [env, key] : {std::pair{"ACME_PROTECT", "protect"},
                          std::pair{"ACME_FAULT_SEED", "fault_seed"},
                          std::pair{"ACME_FAULT_MALLOC", "fault_malloc"},
                          std::pair{"ACME_FAULT_MEMCPY", "fault_memcpy"}})
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
    std::lock_guard<std::mutex> lk(r.guard_mu);
    r.arenas.swap(arenas);
    r.count = device_count;
    r.capacity = capacity;
    r.alignment = alignment;
    // New arenas are PROT_NONE; match the current protect state.
    r.set_all_access(!r.protect || r.depth > 0);
    std::lock_guard<std::mutex> lk2(r.reg_mu);
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

acmeError_t acmeMalloc(int device, void** ptr, size_t bytes) {
  if (!ptr) return fail(acmeErrorInvalidValue, "acme: malloc: null output pointer");
  *ptr = nullptr;
  if (auto e = check_alive(device)) return e;
  Runtime& r = rt();
  if (bytes == 0) return acmeSuccess;
  if (uint64_t i = r.faults.hit(0)) {
    r.stats.injected_malloc++;
    r.stats.malloc_failures++;
    return fail(acmeErrorMemoryAllocation,
                "acme: injected malloc fault on device %d (requested %zu bytes; "
                "fault_malloc=%g, fault_seed=%llu, malloc call #%llu)",
                device, bytes, r.faults.rate[0].load(),
                static_cast<unsigned long long>(r.faults.seed.load()),
                static_cast<unsigned long long>(i));
  }
  acmeError_t e = r.arenas[device]->allocate(bytes, ptr);
  if (e) {
    r.stats.malloc_failures++;
    return e;
  }
  r.stats.mallocs++;
  r.stats.malloc_bytes += bytes;
  return acmeSuccess;
}

acmeError_t acmeFree(int device, void* ptr) {
  if (auto e = check_device(device)) return e;
  if (!ptr) return acmeSuccess;
  Runtime& r = rt();
  if (!r.arenas[device]->contains(ptr)) {
    const int owner = owner_of(ptr);
    if (owner >= 0)
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: the pointer belongs to device %d", ptr, device,
                  owner);
  }
  if (auto e = r.arenas[device]->release(ptr)) return e;
  r.stats.frees++;
  return acmeSuccess;
}

acmeError_t acmeMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (auto e = check_device(device)) return e;
  if (!free_bytes || !total_bytes)
    return fail(acmeErrorInvalidValue, "acme: memory_info: null output pointer");
  rt().arenas[device]->info(free_bytes, total_bytes);
  return acmeSuccess;
}

acmeError_t acmeMemcpyAsync(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                            int device, acmeStream_t stream) {
  // A host-to-host copy names no device; accept any index there.
  if (kind != acmeMemcpyHostToHost || stream) {
    if (auto e = check_alive(device)) return e;
  } else if (rt().count.load() == 0) {
    return check_device(device);
  }
  std::shared_ptr<acmeStream_st> s;
  if (stream)
    if (auto e = find_stream(device, stream, &s)) return e;
  if (bytes == 0) return acmeSuccess;
  if (auto e = validate_copy(dst, src, bytes, kind, device)) return e;
  if (auto e = injected_copy_fault()) return e;
  count_copy(kind, bytes);
  const bool dev = kind != acmeMemcpyHostToHost;
  if (!s) {
    raw_copy(dst, src, bytes, dev);
    return acmeSuccess;
  }
  if (!s->push([=] { raw_copy(dst, src, bytes, dev); }, "memcpy")) return destroyed(s);
  return acmeSuccess;
}

acmeError_t acmeMemcpy(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                       int device) {
  return acmeMemcpyAsync(dst, src, bytes, kind, device, nullptr);
}

acmeError_t acmeMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           size_t bytes) {
  if (auto e = check_alive(dst_device)) return e;
  if (auto e = check_alive(src_device)) return e;
  if (bytes == 0) return acmeSuccess;
  if (auto e = check_side(dst, bytes, dst_device, "destination", acmeMemcpyDeviceToDevice))
    return e;
  if (auto e = check_side(src, bytes, src_device, "source", acmeMemcpyDeviceToDevice)) return e;
  if (auto e = injected_copy_fault()) return e;
  count_copy(acmeMemcpyDeviceToDevice, bytes);
  rt().stats.peer++;
  raw_copy(dst, src, bytes, true);
  return acmeSuccess;
}

// ---- streams ----------------------------------------------------------------

acmeError_t acmeStreamCreate(int device, acmeStream_t* stream) {
  if (!stream) return fail(acmeErrorInvalidValue, "acme: stream_create: null output pointer");
  *stream = nullptr;
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  auto s = std::make_shared<acmeStream_st>();
  s->device = device;
  s->fork_epoch = g_fork_epoch.load();
  try {
    s->worker = std::thread([p = s.get()] { p->run(); });
  } catch (const std::system_error& ex) {
    return fail(acmeErrorRuntime, "acme: stream_create: cannot start a worker thread: %s",
                ex.what());
  }
  std::lock_guard<std::mutex> lk(r.reg_mu);
  s->id = r.next_id++;
  r.streams.emplace(s.get(), s);
  *stream = s.get();
  return acmeSuccess;
}

acmeError_t acmeStreamDestroy(int device, acmeStream_t stream) {
  if (auto e = check_device(device)) return e;
  if (!stream) return fail(acmeErrorInvalidValue, "acme: stream_destroy: the default stream cannot be destroyed");
  Runtime& r = rt();
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  if (s->on_worker())
    return fail(acmeErrorRuntime, "acme: stream_destroy: called from work running on stream #%llu",
                static_cast<unsigned long long>(s->id));
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    if (r.streams.erase(stream) == 0)  // lost a race with another destroy
      return fail(acmeErrorInvalidValue, "acme: %p is not a live acme stream (destroyed?)",
                  static_cast<void*>(stream));
  }
  std::string err = s->drain();
  s->shutdown();
  if (!err.empty()) {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    if (r.orphan_errors[device].empty())
      r.orphan_errors[device] = err + " (stream destroyed before the error was reported)";
  }
  return acmeSuccess;
}

acmeError_t acmeStreamSynchronize(int device, acmeStream_t stream) {
  if (auto e = check_alive(device)) return e;
  if (!stream) return acmeSuccess;  // default stream work already ran inline
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  if (s->on_worker())
    return fail(acmeErrorRuntime,
                "acme: stream_synchronize called from work running on stream #%llu itself "
                "(would deadlock)",
                static_cast<unsigned long long>(s->id));
  std::string err = s->drain();
  if (!err.empty()) return fail_str(acmeErrorRuntime, std::move(err));
  return acmeSuccess;
}

acmeError_t acmeStreamQuery(int device, acmeStream_t stream, int* idle) {
  if (!idle) return fail(acmeErrorInvalidValue, "acme: stream_query: null output pointer");
  if (auto e = check_device(device)) return e;
  if (!stream) {
    *idle = 1;
    return acmeSuccess;
  }
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  *idle = s->idle() ? 1 : 0;
  return acmeSuccess;
}

acmeError_t acmeStreamWaitEvent(int device, acmeStream_t stream, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  std::shared_ptr<acmeStream_st> s;
  if (stream)
    if (auto e = find_stream(device, stream, &s)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ev->recorded;
  }
  if (gen == 0) return acmeSuccess;  // never recorded: nothing to wait for
  if (!s) {
    ev->wait(gen);
    return acmeSuccess;
  }
  if (!s->push([ev, gen] { ev->wait(gen); }, "wait for event")) return destroyed(s);
  return acmeSuccess;
}

// ---- events -----------------------------------------------------------------

acmeError_t acmeEventCreate(int device, acmeEvent_t* event) {
  if (!event) return fail(acmeErrorInvalidValue, "acme: event_create: null output pointer");
  *event = nullptr;
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  auto ev = std::make_shared<acmeEvent_st>();
  ev->device = device;
  std::lock_guard<std::mutex> lk(r.reg_mu);
  ev->id = r.next_id++;
  r.events.emplace(ev.get(), ev);
  *event = ev.get();
  return acmeSuccess;
}

// Event calls other than record accept any valid device index: the event
// knows its device, and callers (PyTorch's guard) may only know the current one.
acmeError_t acmeEventDestroy(int device, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.reg_mu);
  // Queued markers/waits hold their own reference; the event lives until they ran.
  if (r.events.erase(event) == 0)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme event (destroyed?)",
                static_cast<void*>(event));
  return acmeSuccess;
}

acmeError_t acmeEventRecord(int device, acmeEvent_t event, acmeStream_t stream) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  if (ev->device != device)
    return fail(acmeErrorInvalidValue, "acme: event #%llu belongs to device %d, not device %d",
                static_cast<unsigned long long>(ev->id), ev->device, device);
  std::shared_ptr<acmeStream_st> s;
  if (stream)
    if (auto e = find_stream(device, stream, &s)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ++ev->recorded;
  }
  if (!s) {
    ev->reach(gen);  // the default stream has already done all its work
    return acmeSuccess;
  }
  if (!s->push([ev, gen] { ev->reach(gen); }, "event marker")) {
    ev->reach(gen);  // nobody would complete this record: do not leave waiters hanging
    return destroyed(s);
  }
  return acmeSuccess;
}

acmeError_t acmeEventSynchronize(int device, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ev->recorded;
  }
  ev->wait(gen);
  return acmeSuccess;
}

acmeError_t acmeEventQuery(int device, acmeEvent_t event, int* done) {
  if (!done) return fail(acmeErrorInvalidValue, "acme: event_query: null output pointer");
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  std::lock_guard<std::mutex> lk(ev->mu);
  *done = ev->reached >= ev->recorded ? 1 : 0;
  return acmeSuccess;
}

acmeError_t acmeEventElapsedTime(float* ms, acmeEvent_t start, acmeEvent_t end) {
  if (!ms) return fail(acmeErrorInvalidValue, "acme: event_elapsed_ms: null output pointer");
  std::shared_ptr<acmeEvent_st> a, b;
  if (auto e = find_event(start, &a)) return e;
  if (auto e = find_event(end, &b)) return e;
  Clock::time_point ta, tb;
  for (auto [ev, t, name] : {std::tuple{a.get(), &ta, "start"}, std::tuple{b.get(), &tb, "end"}}) {
    std::lock_guard<std::mutex> lk(ev->mu);
    if (ev->recorded == 0)
      return fail(acmeErrorRuntime, "acme: event_elapsed_ms: the %s event was never recorded",
                  name);
    if (ev->reached < ev->recorded)
      return fail(acmeErrorRuntime,
                  "acme: event_elapsed_ms: the %s event has not completed yet (synchronize it "
                  "first)",
                  name);
    *t = ev->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return acmeSuccess;
}

acmeError_t acmeDeviceSynchronize(int device) {
  if (auto e = check_alive(device)) return e;
  Runtime& r = rt();
  std::vector<std::shared_ptr<acmeStream_st>> mine;
  std::string err;
  {
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
  for (auto& s : mine) {
    std::string e = s->drain();
    if (err.empty()) err = std::move(e);
  }
  if (!err.empty()) return fail_str(acmeErrorRuntime, std::move(err));
  return acmeSuccess;
}

// ---- kernels ------------------------------------------------------------------

void acmeKernelBegin(void) {
  rt().stats.kernel_begins++;
  enter_device();
}

void acmeKernelEnd(void) {
  if (!leave_device())
    fail(acmeErrorInvalidValue, "acme: kernel_end without a matching kernel_begin (ignored)");
}

acmeError_t acmeLaunchHostFunc(int device, acmeStream_t stream, void (*fn)(void*), void* arg) {
  if (!fn) return fail(acmeErrorInvalidValue, "acme: launch: null function");
  return acmeLaunch(device, stream, [fn, arg] { fn(arg); });
}

// ---- options ------------------------------------------------------------------

acmeError_t acmeSetOption(const char* key, const char* value) {
  if (!key || !value) return fail(acmeErrorInvalidValue, "acme: set_option: null key or value");
  return apply_option(key, value, "set_option");
}

acmeError_t acmeGetOption(const char* key, char* buf, size_t buflen, size_t* needed) {
  if (!key) return fail(acmeErrorInvalidValue, "acme: get_option: null key");
  Runtime& r = rt();
  const std::string k(key);
  std::string v;
  char num[64];
  if (k == "protect") {
    std::lock_guard<std::mutex> lk(r.guard_mu);
    v = r.protect ? "1" : "0";
  } else if (k == "fault_malloc" || k == "fault_memcpy") {
    std::snprintf(num, sizeof num, "%g", r.faults.rate[k == "fault_malloc" ? 0 : 1].load());
    v = num;
  } else if (k == "fault_seed") {
    v = std::to_string(r.faults.seed.load());
  } else if (k == "stats") {
    v = stats_json();
  } else if (k == "device_count") {
    v = std::to_string(r.count.load());
  } else if (k == "capacity") {
    v = std::to_string(r.count.load() ? r.arenas[0]->capacity() : 0);
  } else if (k == "alignment") {
    v = std::to_string(r.count.load() ? r.alignment : 0);
  } else if (k == "runtime_version") {
    v = ACME_RUNTIME_VERSION;
  } else if (k == "built_driver_version") {
    v = ACME_DRIVER_VERSION;
  } else if (k == "driver_version") {
    v = installed_driver_version();
  } else if (k == "device_lost") {
    const uint64_t lost = r.lost.load();
    for (int i = 0; i < 64; ++i)
      if (lost & (uint64_t{1} << i)) v += (v.empty() ? "" : ",") + std::to_string(i);
  } else {
    return fail(acmeErrorInvalidValue,
                "acme: unknown option '%s' (known: protect, fault_malloc, fault_memcpy, "
                "fault_seed, stats, device_lost, device_count, capacity, alignment, "
                "runtime_version, driver_version, built_driver_version)",
                key);
  }
  if (needed) *needed = v.size();
  if (buf && buflen) {
    const size_t n = std::min(v.size(), buflen - 1);
    std::memcpy(buf, v.data(), n);
    buf[n] = '\0';
  }
  return acmeSuccess;
}

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

acmeError_t acmeLaunch(int device, acmeStream_t stream, std::function<void()> fn) {
  if (auto e = check_alive(device)) return e;
  if (!fn) return fail(acmeErrorInvalidValue, "acme: launch: empty function");
  Runtime& r = rt();
  if (!stream) {
    r.stats.launches++;
    try {
      r.stats.kernel_begins++;
      DeviceScope scope;
      fn();
    } catch (const std::exception& ex) {
      return fail(acmeErrorRuntime, "acme: kernel on the default stream of device %d failed: %s",
                  device, ex.what());
    } catch (...) {
      return fail(acmeErrorRuntime,
                  "acme: kernel on the default stream of device %d failed: unknown exception",
                  device);
    }
    return acmeSuccess;
  }
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  r.stats.launches++;
  if (!s->push(
          [f = std::move(fn)] {
            rt().stats.kernel_begins++;
            DeviceScope scope;
            f();
          },
          "kernel"))
    return destroyed(s);
  return acmeSuccess;
}
