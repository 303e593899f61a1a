// Standalone test of the acme vendor runtime through flsdk's adapter
// interface (acme::runtime::*), plus a few micro-benchmarks.
//
// Built and run by tests/test_acme_runtime.py:
//   g++ -O1 -std=c++20 -pthread -fPIC -I runtime runtime/{device,memory,stream,options}.cpp
//       runtime/adapter.cpp runtime/tests/test_runtime.cpp
// Prints "PASS <name>" / "FAIL <name>: ..." per test, "bench: ..." lines and
// a summary "acme runtime tests: N passed, M failed"; exit 0 iff M == 0.
// Optional argv[1]: run only tests whose name contains it.
#include "acme_runtime.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rtm = acme::runtime;
using rtm::CopyKind;
using rtm::Status;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kDevices = 2;
constexpr size_t kCap = 64u << 20;  // 64 MiB per device
constexpr size_t kAlign = 512;

// ---- tiny harness -------------------------------------------------------------
std::vector<std::string> g_failures;  // of the current test
std::mutex g_fail_mu;

void record_failure(const char* file, int line, const std::string& what) {
  std::lock_guard<std::mutex> lk(g_fail_mu);
  g_failures.push_back(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

// Out-of-line reporting keeps each CHECK to one call (the file has hundreds;
// inline string building made it slow to compile).
[[gnu::noinline]] void check_failed(const char* cond, const char* file, int line) {
  record_failure(file, line, std::string("CHECK(") + cond + ") failed; last_error: " +
                                 rtm::last_error());
}
[[gnu::noinline]] void check_status(Status got, Status want, const char* expr, const char* file,
                                    int line) {
  if (got == want) return;
  record_failure(file, line, std::string(expr) + " gave status " + std::to_string(int(got)) +
                                 ", want " + std::to_string(int(want)) + "; last_error: " +
                                 rtm::last_error());
}

#define CHECK(cond) \
  do {              \
    if (!(cond)) check_failed(#cond, __FILE__, __LINE__); \
  } while (0)

// Status must equal `want`; on mismatch report the runtime's message.
#define CHECK_ST(expr, want) check_status((expr), (want), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) CHECK_ST(expr, Status::Ok)

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
std::string last() { return rtm::last_error(); }

void init_default() {
  rtm::DeviceConfig cfg{kDevices, kCap, kAlign};
  CHECK_OK(rtm::init(cfg));
}

// Runs `child` in a forked process; returns the raw wait status.
int run_in_child(const std::function<void()>& child) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    rlimit no_core{0, 0};  // an expected SIGSEGV must not write a core file
    setrlimit(RLIMIT_CORE, &no_core);
    child();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}
bool died_of_segv(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV; }
bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

uint64_t stat_field(const std::string& json, const std::string& name) {
  auto pos = json.find("\"" + name + "\": ");
  if (pos == std::string::npos) return ~0ull;
  return std::strtoull(json.c_str() + pos + name.size() + 4, nullptr, 10);
}

size_t free_of(int dev) {
  size_t f = 0, t = 0;
  CHECK_OK(rtm::memory_info(dev, &f, &t));
  return f;
}

// ---- tests --------------------------------------------------------------------

void test_init() {
  // First test in the process: nothing is initialized yet.
  CHECK(rtm::device_count() == 0);
  void* p = nullptr;
  CHECK_ST(rtm::malloc(0, 16, &p), Status::Error);
  CHECK(contains(last(), "not initialized"));
  CHECK_ST(rtm::init({2, kCap, 3}), Status::InvalidValue);
  CHECK(contains(last(), "power of two"));
  CHECK_ST(rtm::init({0, kCap, kAlign}), Status::InvalidValue);
  CHECK_ST(rtm::init({1, 100, 512}), Status::InvalidValue);
  init_default();
  CHECK(rtm::device_count() == kDevices);
  CHECK(rtm::get_option("device_count") == "2");
  size_t f = 0, t = 0;
  CHECK_OK(rtm::memory_info(1, &f, &t));
  CHECK(f == kCap && t == kCap);
}

void test_alloc_free_basic() {
  const size_t f0 = free_of(0);
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(rtm::malloc(0, 1000, &a));
  CHECK(a != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(a) % kAlign == 0);
  CHECK(free_of(0) == f0 - 1024);  // rounded up to the alignment
  CHECK_OK(rtm::malloc(0, 1, &b));
  CHECK(reinterpret_cast<uintptr_t>(b) % kAlign == 0);
  CHECK(b != a);
  CHECK(free_of(0) == f0 - 1024 - 512);
  CHECK_OK(rtm::free(0, a));
  CHECK_OK(rtm::free(0, b));
  CHECK(free_of(0) == f0);
  void* z = reinterpret_cast<void*>(1);
  CHECK_OK(rtm::malloc(0, 0, &z));  // zero bytes: null, success
  CHECK(z == nullptr);
  CHECK_OK(rtm::free(0, nullptr));
  // Two devices are separate arenas.
  void* d1 = nullptr;
  CHECK_OK(rtm::malloc(1, 4096, &d1));
  CHECK(free_of(0) == f0);
  CHECK(free_of(1) == kCap - 4096);
  CHECK_OK(rtm::free(1, d1));
}

void test_invalid_arguments() {
  void* p = nullptr;
  CHECK_ST(rtm::malloc(5, 16, &p), Status::InvalidDevice);
  CHECK(contains(last(), "5") && contains(last(), "2 device"));
  CHECK_ST(rtm::malloc(-1, 16, &p), Status::InvalidDevice);
  CHECK(contains(last(), "-1"));
  size_t f, t;
  CHECK_ST(rtm::memory_info(2, &f, &t), Status::InvalidDevice);
  rtm::Stream s = nullptr;
  CHECK_ST(rtm::stream_create(7, &s), Status::InvalidDevice);
  CHECK_ST(rtm::device_synchronize(2), Status::InvalidDevice);

  int host = 0;
  CHECK_ST(rtm::free(0, &host), Status::InvalidValue);  // a host pointer
  CHECK(contains(last(), "not in this device"));
  CHECK_OK(rtm::malloc(0, 4096, &p));
  CHECK_ST(rtm::free(0, static_cast<char*>(p) + 512), Status::InvalidValue);  // interior
  CHECK(contains(last(), "not the start of a live allocation"));
  CHECK_ST(rtm::free(1, p), Status::InvalidValue);  // wrong device
  CHECK(contains(last(), "belongs to device 0"));
  CHECK_OK(rtm::free(0, p));
  CHECK_ST(rtm::free(0, p), Status::InvalidValue);  // double free
  CHECK(free_of(0) == kCap);

  // Bad handles are reported, not dereferenced.
  bool idle;
  CHECK_ST(rtm::stream_query(0, &host, &idle), Status::InvalidValue);
  CHECK_ST(rtm::stream_synchronize(0, &host), Status::InvalidValue);
  CHECK_ST(rtm::event_record(0, &host, nullptr), Status::InvalidValue);
  CHECK_ST(rtm::event_destroy(0, &host), Status::InvalidValue);
  CHECK_ST(rtm::stream_destroy(0, nullptr), Status::InvalidValue);
  // A stream used with another device's index.
  CHECK_OK(rtm::stream_create(1, &s));
  CHECK_ST(rtm::stream_synchronize(0, s), Status::InvalidValue);
  CHECK(contains(last(), "belongs to device 1"));
  CHECK_OK(rtm::stream_destroy(1, s));
  CHECK_ST(rtm::stream_synchronize(1, s), Status::InvalidValue);  // destroyed
}

void test_oom() {
  void* p = nullptr;
  CHECK_ST(rtm::malloc(0, kCap + 1, &p), Status::OutOfMemory);
  CHECK(p == nullptr);
  std::string msg = last();
  CHECK(contains(msg, "out of memory on device 0"));
  CHECK(contains(msg, "requested") && contains(msg, "free") && contains(msg, "capacity"));
  CHECK(contains(msg, std::to_string(kCap + 1)));
  // The whole capacity is allocatable, and then nothing more.
  CHECK_OK(rtm::malloc(0, kCap, &p));
  CHECK(free_of(0) == 0);
  void* q = nullptr;
  CHECK_ST(rtm::malloc(0, 1, &q), Status::OutOfMemory);
  CHECK(contains(last(), "0 B free"));
  CHECK_OK(rtm::free(0, p));
  CHECK(free_of(0) == kCap);
  // Device 1 is unaffected by device 0 being full (separate arenas).
  CHECK_OK(rtm::malloc(0, kCap, &p));
  CHECK_OK(rtm::malloc(1, 1 << 20, &q));
  CHECK_OK(rtm::free(1, q));
  CHECK_OK(rtm::free(0, p));
}

void test_coalescing_and_holes() {
  constexpr int n = 8;
  const size_t unit = kCap / n;
  void* b[n];
  for (auto& x : b) CHECK_OK(rtm::malloc(0, unit, &x));
  CHECK(free_of(0) == 0);
  void* extra = nullptr;
  CHECK_ST(rtm::malloc(0, 1, &extra), Status::OutOfMemory);  // the memory is the limit
  for (int i = 1; i < n; i += 2) CHECK_OK(rtm::free(0, b[i]));
  CHECK(free_of(0) == kCap / 2);
  // Half the memory is free, but only in holes of one unit between live blocks.
  // As on a GPU (its MMU maps fresh addresses), two units still fit: one
  // model's leftovers must not strand the next model's large weight.
  void* big = nullptr;
  CHECK_OK(rtm::malloc(0, 2 * unit, &big));
  CHECK(free_of(0) == kCap / 2 - 2 * unit);
  std::string stats = rtm::get_option("stats");
  CHECK(contains(stats, "\"free_blocks\": 4"));
  CHECK(contains(stats, "\"largest_free_block\": " + std::to_string(2 * unit) + ","));
  CHECK(contains(stats, "\"address_space\": " + std::to_string(4 * kCap) + "}"));
  // Three units are more memory than is free: out of memory, saying how much is.
  void* too_big = nullptr;
  CHECK_ST(rtm::malloc(0, 3 * unit, &too_big), Status::OutOfMemory);
  CHECK(contains(last(), "largest free block") && contains(last(), std::to_string(2 * unit)));
  CHECK_OK(rtm::free(0, big));
  // Freeing the even blocks merges with both neighbours each time.
  for (int i = 0; i < n; i += 2) CHECK_OK(rtm::free(0, b[i]));
  CHECK(free_of(0) == kCap);
  CHECK(contains(rtm::get_option("stats"), "\"free_blocks\": 1,"));
  CHECK_OK(rtm::malloc(0, kCap, &big));  // one block again
  CHECK_OK(rtm::free(0, big));
  // Free order: middle first, then left (merge right), then right (merge left).
  void *x, *y, *z;
  CHECK_OK(rtm::malloc(0, unit, &x));
  CHECK_OK(rtm::malloc(0, unit, &y));
  CHECK_OK(rtm::malloc(0, unit, &z));
  CHECK_OK(rtm::free(0, y));
  CHECK_OK(rtm::free(0, x));
  CHECK_OK(rtm::free(0, z));
  CHECK(contains(rtm::get_option("stats"), "\"free_blocks\": 1,"));
}

void test_best_fit() {
  // Layout: [A 3u][sep][B 1u][sep][rest]; free A and B; a 1u request must
  // land in B's hole (best fit), not in A's (first fit).
  const size_t u = 64 * 1024;
  void *a, *s1, *b, *s2;
  CHECK_OK(rtm::malloc(0, 3 * u, &a));
  CHECK_OK(rtm::malloc(0, u, &s1));
  CHECK_OK(rtm::malloc(0, u, &b));
  CHECK_OK(rtm::malloc(0, u, &s2));
  CHECK_OK(rtm::free(0, a));
  CHECK_OK(rtm::free(0, b));
  void* c = nullptr;
  CHECK_OK(rtm::malloc(0, u, &c));
  CHECK(c == b);
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 2 * u, &d));
  CHECK(d == a);
  for (void* p : {c, d, s1, s2}) CHECK_OK(rtm::free(0, p));
  CHECK(free_of(0) == kCap);
}

void test_alignment_config() {
  CHECK_OK(rtm::init({1, 1 << 20, 4096}));
  CHECK(rtm::get_option("alignment") == "4096");
  std::vector<void*> ps;
  for (size_t sz : {1, 100, 4095, 4096, 4097, 10000}) {
    void* p = nullptr;
    CHECK_OK(rtm::malloc(0, sz, &p));
    CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
    ps.push_back(p);
  }
  CHECK(free_of(0) == (1 << 20) - 4096 * (1 + 1 + 1 + 1 + 2 + 3));
  // Re-init with live memory is refused, with a reason.
  CHECK_ST(rtm::init({kDevices, kCap, kAlign}), Status::Error);
  CHECK(contains(last(), "allocated"));
  for (void* p : ps) CHECK_OK(rtm::free(0, p));
  // Alignment above the page size still gives aligned addresses.
  CHECK_OK(rtm::init({1, 4 << 20, 1 << 16}));
  void* p = nullptr;
  CHECK_OK(rtm::malloc(0, 10, &p));
  CHECK(reinterpret_cast<uintptr_t>(p) % (1 << 16) == 0);
  CHECK_OK(rtm::free(0, p));
  init_default();
}

void test_copies() {
  const size_t n = 3 * 1000 * 1000 + 7;  // not a multiple of anything
  std::vector<unsigned char> src(n), dst(n, 0);
  std::mt19937 rng(1);
  for (auto& c : src) c = static_cast<unsigned char>(rng());
  void *d0, *d0b, *d1;
  CHECK_OK(rtm::malloc(0, n, &d0));
  CHECK_OK(rtm::malloc(0, n, &d0b));
  CHECK_OK(rtm::malloc(1, n, &d1));
  CHECK_OK(rtm::memcpy(d0, src.data(), n, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(d0b, d0, n, CopyKind::DeviceToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy_peer(d1, 1, d0b, 0, n));
  CHECK_OK(rtm::memcpy(dst.data(), d1, n, CopyKind::DeviceToHost, 1, nullptr));
  CHECK(dst == src);
  // DeviceToDevice with a source on another device (destination device given).
  std::fill(dst.begin(), dst.end(), 0);
  CHECK_OK(rtm::memcpy(d0, d1, n, CopyKind::DeviceToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(dst.data(), d0, n, CopyKind::DeviceToHost, 0, nullptr));
  CHECK(dst == src);
  // Partial copies at an offset inside an allocation.
  unsigned char four[4] = {9, 8, 7, 6}, back[4] = {};
  CHECK_OK(rtm::memcpy(static_cast<char*>(d0) + 1001, four, 4, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(back, static_cast<char*>(d0) + 1001, 4, CopyKind::DeviceToHost, 0, nullptr));
  CHECK(std::memcmp(four, back, 4) == 0);
  // Host to host.
  CHECK_OK(rtm::memcpy(back, src.data(), 4, CopyKind::HostToHost, 0, nullptr));
  CHECK(std::memcmp(back, src.data(), 4) == 0);

  // Misuse is caught before any byte moves.
  CHECK_ST(rtm::memcpy(d0, src.data(), n + 1, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);
  CHECK(contains(last(), "overruns"));
  CHECK_ST(rtm::memcpy(d1, src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);  // d1 is device 1's
  CHECK(contains(last(), "device 1"));
  CHECK_ST(rtm::memcpy(dst.data(), src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);  // destination is host memory
  CHECK(contains(last(), "not device memory"));
  CHECK_ST(rtm::memcpy(dst.data(), d0, 16, CopyKind::HostToHost, 0, nullptr),
           Status::InvalidValue);  // source is device memory: a missed H2D/D2H
  CHECK(contains(last(), "device memory of device 0"));
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, static_cast<CopyKind>(9), 0, nullptr),
           Status::InvalidValue);
  CHECK_ST(rtm::memcpy(d0, nullptr, 16, CopyKind::HostToDevice, 0, nullptr), Status::InvalidValue);
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, CopyKind::HostToDevice, 3, nullptr),
           Status::InvalidDevice);
  CHECK_OK(rtm::memcpy(d0, nullptr, 0, CopyKind::HostToDevice, 0, nullptr));  // empty copy
  CHECK_OK(rtm::free(0, d0));
  // A freed block is no longer a valid copy target.
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);
  CHECK_OK(rtm::free(0, d0b));
  CHECK_OK(rtm::free(1, d1));
}

void test_protect_mode() {
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 4096, &d));
  int v = 1234;
  CHECK_OK(rtm::memcpy(d, &v, sizeof v, CopyKind::HostToDevice, 0, nullptr));
  volatile int* dp = static_cast<volatile int*>(d);

  // Protect off: a host read "works" (this is the bug protect mode exposes).
  CHECK(exited_ok(run_in_child([&] { _exit(*dp == 1234 ? 0 : 3); })));

  CHECK_OK(rtm::set_option("protect", "1"));
  CHECK(rtm::get_option("protect") == "1");
  CHECK(died_of_segv(run_in_child([&] { (void)*dp; })));
  CHECK(died_of_segv(run_in_child([&] { *dp = 5; })));
  // Inside a kernel (nested too) the memory is readable and writable.
  CHECK(exited_ok(run_in_child([&] {
    rtm::kernel_begin();
    rtm::kernel_begin();
    rtm::kernel_end();
    int x = *dp;
    *dp = x + 1;
    rtm::kernel_end();
    _exit(x == 1234 ? 0 : 3);
  })));
  // ... and closed again after the outermost kernel_end.
  CHECK(died_of_segv(run_in_child([&] {
    rtm::kernel_begin();
    (void)*dp;
    rtm::kernel_end();
    (void)*dp;
  })));
  // In this process: runtime copies work while protected.
  int w = 0;
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, nullptr));
  CHECK(w == 1234);
  rtm::kernel_begin();
  *dp = 77;
  rtm::kernel_end();
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, nullptr));
  CHECK(w == 77);
  // Kernels launched on a created stream open memory on the worker thread.
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::launch(0, s, [dp] { *dp = *dp + 1; }));
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, s));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(w == 78);
  CHECK_OK(rtm::launch(0, nullptr, [dp] { *dp = 1; }));  // default stream: inline
  CHECK_OK(rtm::stream_destroy(0, s));
  // An unmatched kernel_end is reported and ignored, and memory stays closed.
  rtm::kernel_end();
  CHECK(contains(last(), "without a matching kernel_begin"));
  CHECK(died_of_segv(run_in_child([&] { (void)*dp; })));

  // Off again: readable.
  CHECK_OK(rtm::set_option("protect", "0"));
  CHECK(exited_ok(run_in_child([&] { _exit(*dp == 1 ? 0 : 3); })));
  CHECK_ST(rtm::set_option("protect", "maybe"), Status::InvalidValue);
  CHECK_OK(rtm::free(0, d));

  // ACME_PROTECT=1 at init turns it on.
  setenv("ACME_PROTECT", "1", 1);
  init_default();
  unsetenv("ACME_PROTECT");
  CHECK(rtm::get_option("protect") == "1");
  CHECK_OK(rtm::malloc(0, 64, &d));
  dp = static_cast<volatile int*>(d);
  CHECK(died_of_segv(run_in_child([&] { (void)*dp; })));
  CHECK_OK(rtm::free(0, d));
  CHECK_OK(rtm::set_option("protect", "0"));
}

void test_stream_ordering() {
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  std::vector<int> order;  // only touched by the stream's worker until sync
  for (int i = 0; i < 200; ++i) {
    CHECK_OK(rtm::launch(0, s, [&order, i] {
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      order.push_back(i);
    }));
  }
  CHECK_OK(rtm::stream_synchronize(0, s));
  bool in_order = order.size() == 200;
  for (int i = 0; in_order && i < 200; ++i) in_order = order[i] == i;
  CHECK(in_order);

  // A kernel then a copy on the same stream: the copy sees the kernel's write.
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int host = -1;
  auto t0 = Clock::now();
  CHECK_OK(rtm::launch(0, s, [d] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    *static_cast<int*>(d) = 42;
  }));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, s));
  bool idle = true;
  CHECK_OK(rtm::stream_query(0, s, &idle));
  CHECK(!idle);                        // asynchronous: still sleeping
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(25));  // enqueue did not block
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(host == 42);
  CHECK_OK(rtm::stream_query(0, s, &idle));
  CHECK(idle);
  // The default stream is always idle; its work runs inline.
  CHECK_OK(rtm::stream_query(0, nullptr, &idle));
  CHECK(idle);
  int inline_ran = 0;
  CHECK_OK(rtm::launch(0, nullptr, [&] { inline_ran = 1; }));
  CHECK(inline_ran == 1);
  // device_synchronize drains all streams of the device.
  std::atomic<int> done{0};
  rtm::Stream s2 = nullptr;
  CHECK_OK(rtm::stream_create(0, &s2));
  for (auto st : {s, s2})
    CHECK_OK(rtm::launch(0, st, [&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      done++;
    }));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK(done == 2);
  CHECK_OK(rtm::stream_destroy(0, s2));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

void test_events() {
  rtm::Stream s = nullptr;
  rtm::Event a = nullptr, b = nullptr, never = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::event_create(0, &a));
  CHECK_OK(rtm::event_create(0, &b));
  CHECK_OK(rtm::event_create(0, &never));
  bool done = false;
  CHECK_OK(rtm::event_query(0, never, &done));
  CHECK(done);  // never recorded counts as complete (nothing to wait for)
  float ms = -1;
  CHECK_ST(rtm::event_elapsed_ms(a, never, &ms), Status::Error);
  CHECK(contains(last(), "never recorded"));

  CHECK_OK(rtm::event_record(0, a, s));
  CHECK_OK(rtm::launch(0, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  CHECK_OK(rtm::event_record(0, b, s));
  CHECK_OK(rtm::event_query(0, b, &done));
  CHECK(!done);
  CHECK_ST(rtm::event_elapsed_ms(a, b, &ms), Status::Error);
  CHECK(contains(last(), "not completed"));
  CHECK_OK(rtm::event_synchronize(0, b));
  CHECK_OK(rtm::event_query(0, b, &done));
  CHECK(done);
  CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 19.0f && ms < 2000.0f);
  float back = 0;
  CHECK_OK(rtm::event_elapsed_ms(b, a, &back));
  CHECK(back < 0 && back == -ms);
  // Back-to-back events on an idle stream: elapsed is tiny but positive-or-zero.
  CHECK_OK(rtm::event_record(0, a, s));
  CHECK_OK(rtm::event_record(0, b, s));
  CHECK_OK(rtm::event_synchronize(0, b));
  CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 0.0f && ms < 100.0f);
  // Recording on the default stream completes at once.
  CHECK_OK(rtm::event_record(0, a, nullptr));
  CHECK_OK(rtm::event_query(0, a, &done));
  CHECK(done);
  // Record: the event's device must be the stream's.
  rtm::Stream s1 = nullptr;
  CHECK_OK(rtm::stream_create(1, &s1));
  CHECK_ST(rtm::event_record(1, a, s1), Status::InvalidValue);
  CHECK(contains(last(), "belongs to device 0"));
  // Destroying an event with a marker still queued is safe.
  rtm::Event tmp = nullptr;
  CHECK_OK(rtm::event_create(0, &tmp));
  CHECK_OK(rtm::launch(0, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }));
  CHECK_OK(rtm::event_record(0, tmp, s));
  CHECK_OK(rtm::event_destroy(0, tmp));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK_ST(rtm::event_query(0, tmp, &done), Status::InvalidValue);
  for (auto e : {a, b, never}) CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(1, s1));
  CHECK_OK(rtm::stream_destroy(0, s));
}

void test_stream_wait_event() {
  rtm::Stream s1 = nullptr, s2 = nullptr;
  rtm::Event e = nullptr;
  CHECK_OK(rtm::stream_create(0, &s1));
  CHECK_OK(rtm::stream_create(0, &s2));
  CHECK_OK(rtm::event_create(0, &e));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int zero = 0, host = -1;
  CHECK_OK(rtm::memcpy(d, &zero, sizeof zero, CopyKind::HostToDevice, 0, nullptr));

  // s1: slow producer; s2 waits for s1's event, then reads.
  CHECK_OK(rtm::launch(0, s1, [d] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    *static_cast<int*>(d) = 7;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(0, s2, e));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, s2));
  bool idle = true;
  CHECK_OK(rtm::stream_query(0, s2, &idle));
  CHECK(!idle);  // s2 is blocked on s1's event
  CHECK_OK(rtm::stream_synchronize(0, s2));
  CHECK(host == 7);

  // Cross-device: a device-1 stream waits on a device-0 event.
  rtm::Stream t1 = nullptr;
  CHECK_OK(rtm::stream_create(1, &t1));
  std::atomic<int> step{0};
  CHECK_OK(rtm::launch(0, s1, [&step] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    step = 1;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(1, t1, e));
  int seen = -1;
  CHECK_OK(rtm::launch(1, t1, [&] { seen = step.load(); }));
  CHECK_OK(rtm::stream_synchronize(1, t1));
  CHECK(seen == 1);

  // The default stream waits by blocking the caller.
  CHECK_OK(rtm::launch(0, s1, [&step] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    step = 2;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(0, nullptr, e));
  CHECK(step == 2);

  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(1, t1));
  CHECK_OK(rtm::stream_destroy(0, s2));
  CHECK_OK(rtm::stream_destroy(0, s1));
  CHECK_OK(rtm::free(0, d));
}

void test_sticky_errors() {
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  std::atomic<bool> later_ran{false};
  CHECK_OK(rtm::launch(0, s, [] { throw std::runtime_error("boom 123"); }));
  CHECK_OK(rtm::launch(0, s, [&] { later_ran = true; }));
  CHECK_ST(rtm::stream_synchronize(0, s), Status::Error);
  CHECK(contains(last(), "boom 123") && contains(last(), "kernel") &&
        contains(last(), "device 0"));
  CHECK(later_ran);
  CHECK_OK(rtm::stream_synchronize(0, s));  // reported once, then cleared

  // Several failures: the first is reported, the others counted.
  CHECK_OK(rtm::launch(0, s, [] { throw std::runtime_error("first"); }));
  CHECK_OK(rtm::launch(0, s, [] { throw 5; }));  // not a std::exception
  CHECK_OK(rtm::launch(0, s, [] { throw std::logic_error("third"); }));
  CHECK_ST(rtm::stream_synchronize(0, s), Status::Error);
  CHECK(contains(last(), "first") && contains(last(), "2 later failure"));

  // device_synchronize reports a stream's error too.
  CHECK_OK(rtm::launch(0, s, [] { throw std::runtime_error("via device sync"); }));
  CHECK_ST(rtm::device_synchronize(0), Status::Error);
  CHECK(contains(last(), "via device sync"));
  CHECK_OK(rtm::device_synchronize(0));

  // An error left on a destroyed stream surfaces at the next device_synchronize.
  CHECK_OK(rtm::launch(0, s, [] { throw std::runtime_error("orphaned"); }));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_ST(rtm::device_synchronize(0), Status::Error);
  CHECK(contains(last(), "orphaned") && contains(last(), "destroyed"));
  CHECK_OK(rtm::device_synchronize(0));

  // On the default stream the failure is returned at once.
  CHECK_ST(rtm::launch(0, nullptr, [] { throw std::runtime_error("inline boom"); }),
           Status::Error);
  CHECK(contains(last(), "inline boom") && contains(last(), "default stream"));
  // The protect depth was restored by the exception path (balanced).
  CHECK_OK(rtm::set_option("protect", "1"));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  CHECK(died_of_segv(run_in_child([&] { (void)*static_cast<volatile char*>(d); })));
  CHECK_OK(rtm::set_option("protect", "0"));
  CHECK_OK(rtm::free(0, d));

  // Synchronizing a stream from its own work is refused instead of deadlocking.
  CHECK_OK(rtm::stream_create(0, &s));
  Status inner = Status::Ok;
  CHECK_OK(rtm::launch(0, s, [&] { inner = rtm::stream_synchronize(0, s); }));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(inner == Status::Error);
  CHECK_OK(rtm::stream_destroy(0, s));
}

void test_fork_child_streams() {
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  // Leave work in flight across the fork: in the child it can never finish.
  CHECK_OK(rtm::launch(0, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }));
  const int status = run_in_child([&] {
    int code = 0;
    if (rtm::stream_synchronize(0, s) != Status::Error) code |= 1;
    if (!contains(last(), "before fork()")) code |= 2;
    if (rtm::launch(0, s, [] {}) != Status::Error) code |= 4;
    if (rtm::device_synchronize(0) != Status::Ok) code |= 8;  // skips the inherited stream
    rtm::Stream fresh = nullptr;  // streams created in the child work
    int ran = 0;
    if (rtm::stream_create(0, &fresh) != Status::Ok) code |= 16;
    if (rtm::launch(0, fresh, [&] { ran = 1; }) != Status::Ok) code |= 32;
    if (rtm::stream_synchronize(0, fresh) != Status::Ok || ran != 1) code |= 64;
    _exit(code);
  });
  CHECK(WIFEXITED(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    record_failure(__FILE__, __LINE__, "child failed, code " + std::to_string(WEXITSTATUS(status)));
  CHECK_OK(rtm::stream_synchronize(0, s));  // the parent's stream is unaffected
  CHECK_OK(rtm::stream_destroy(0, s));
}

std::vector<bool> malloc_fault_pattern(const char* seed, int n, int* failures,
                                       bool* all_oom, bool* all_say_injected) {
  CHECK_OK(rtm::set_option("fault_seed", seed));
  CHECK_OK(rtm::set_option("fault_malloc", "0.25"));
  std::vector<bool> pat(n);
  *failures = 0;
  *all_oom = *all_say_injected = true;
  for (int i = 0; i < n; ++i) {
    void* p = nullptr;
    Status st = rtm::malloc(i % 2, 512, &p);
    pat[i] = st != Status::Ok;
    if (st == Status::Ok) {
      CHECK_OK(rtm::free(i % 2, p));
    } else {
      ++*failures;
      *all_oom &= st == Status::OutOfMemory;
      *all_say_injected &= contains(last(), "injected");
    }
  }
  CHECK_OK(rtm::set_option("fault_malloc", "0"));
  return pat;
}

void test_fault_injection() {
  const int n = 4000;
  int f1, f2, f3;
  bool oom, injected;
  auto p1 = malloc_fault_pattern("1234", n, &f1, &oom, &injected);
  CHECK(f1 > n * 0.2 && f1 < n * 0.3);
  CHECK(oom && injected);
  auto p2 = malloc_fault_pattern("1234", n, &f2, &oom, &injected);
  CHECK(p1 == p2);  // deterministic per seed
  auto p3 = malloc_fault_pattern("99", n, &f3, &oom, &injected);
  CHECK(p3 != p1);
  CHECK(f3 > n * 0.2 && f3 < n * 0.3);
  CHECK(contains(rtm::get_option("stats"), "\"injected_malloc_faults\": "));

  // memcpy faults: Error, message says injected, nothing is copied.
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  CHECK_OK(rtm::set_option("fault_memcpy", "0.1"));
  CHECK(rtm::get_option("fault_memcpy") == "0.1");
  int fails = 0;
  bool all_error = true, all_msg = true;
  char buf[64] = {};
  for (int i = 0; i < n; ++i) {
    Status st = rtm::memcpy(d, buf, 64, CopyKind::HostToDevice, 0, nullptr);
    if (st != Status::Ok) {
      ++fails;
      all_error &= st == Status::Error;
      all_msg &= contains(last(), "injected memcpy fault");
    }
  }
  CHECK(fails > n * 0.07 && fails < n * 0.13);
  CHECK(all_error && all_msg);
  CHECK_OK(rtm::set_option("fault_memcpy", "1"));
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  // On a stream the fault is reported at enqueue time (deterministic order).
  CHECK_ST(rtm::memcpy(d, buf, 64, CopyKind::HostToDevice, 0, s), Status::Error);
  CHECK_OK(rtm::set_option("fault_memcpy", "0"));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));

  // Bad values are refused with a reason.
  CHECK_ST(rtm::set_option("fault_malloc", "1.5"), Status::InvalidValue);
  CHECK(contains(last(), "[0, 1]"));
  CHECK_ST(rtm::set_option("fault_malloc", "abc"), Status::InvalidValue);
  CHECK_ST(rtm::set_option("fault_seed", "-3"), Status::InvalidValue);

  // Environment variables, read at init.
  setenv("ACME_FAULT_MALLOC", "1", 1);
  setenv("ACME_FAULT_SEED", "7", 1);
  init_default();
  unsetenv("ACME_FAULT_MALLOC");
  unsetenv("ACME_FAULT_SEED");
  CHECK(rtm::get_option("fault_seed") == "7");
  void* p = nullptr;
  CHECK_ST(rtm::malloc(0, 16, &p), Status::OutOfMemory);
  CHECK(contains(last(), "injected") && contains(last(), "fault_seed=7"));
  CHECK_OK(rtm::set_option("fault_malloc", "0"));
  setenv("ACME_FAULT_MEMCPY", "2", 1);
  CHECK_ST(rtm::init({1, kCap / 2, kAlign}), Status::InvalidValue);
  CHECK(contains(last(), "ACME_FAULT_MEMCPY"));
  unsetenv("ACME_FAULT_MEMCPY");
  CHECK(rtm::device_count() == kDevices);  // the failed init changed nothing
  CHECK(free_of(0) == kCap);
  init_default();
}

void test_options_and_stats() {
  CHECK_OK(rtm::set_option("stats", "reset"));
  std::string s0 = rtm::get_option("stats");
  CHECK(stat_field(s0, "mallocs") == 0 && stat_field(s0, "copies") == 0);
  void* p = nullptr;
  CHECK_OK(rtm::malloc(1, 1000, &p));
  char buf[1000] = {};
  CHECK_OK(rtm::memcpy(p, buf, 1000, CopyKind::HostToDevice, 1, nullptr));
  CHECK_OK(rtm::memcpy(buf, p, 500, CopyKind::DeviceToHost, 1, nullptr));
  std::string s1 = rtm::get_option("stats");
  CHECK(stat_field(s1, "mallocs") == 1);
  CHECK(stat_field(s1, "malloc_bytes") == 1000);
  CHECK(stat_field(s1, "copies") == 2 && stat_field(s1, "copy_bytes") == 1500);
  CHECK(stat_field(s1, "h2d") == 1 && stat_field(s1, "d2h") == 1);
  CHECK(contains(s1, "\"live_allocations\": 1"));
  CHECK_OK(rtm::free(1, p));
  CHECK(stat_field(rtm::get_option("stats"), "frees") == 1);
  CHECK(rtm::get_option("device_count") == std::to_string(kDevices));
  CHECK(rtm::get_option("capacity") == std::to_string(kCap));
  CHECK_ST(rtm::set_option("device_count", "4"), Status::InvalidValue);
  CHECK(contains(last(), "read-only"));
  CHECK_ST(rtm::set_option("no_such_option", "1"), Status::InvalidValue);
  CHECK(contains(last(), "unknown option 'no_such_option'"));
  CHECK(rtm::get_option("no_such_option").empty());
  CHECK(contains(last(), "unknown option"));
}

void test_last_error_is_thread_local() {
  std::string m1, m2;
  std::thread t1([&] {
    void* p;
    rtm::malloc(9, 1, &p);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m1 = rtm::last_error();
  });
  std::thread t2([&] {
    int x;
    rtm::free(0, &x);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m2 = rtm::last_error();
  });
  t1.join();
  t2.join();
  CHECK(contains(m1, "invalid device index 9"));
  CHECK(contains(m2, "free(") && !contains(m2, "index 9"));
}

// A few threads hammer malloc/free/copies/kernels/streams/events on both
// devices in protect mode for about a second. Each block carries a pattern
// unique to its owner; a mixed-up allocator (overlapping blocks) or a protect
// race (memory closed under a running kernel) shows up as a wrong pattern or
// a SIGSEGV. At the end every arena must be whole again.
void test_multithread_stress() {
  CHECK_OK(rtm::set_option("protect", "1"));
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::atomic<long> ops{0}, bad{0}, failed_calls{0};
  std::mutex err_mu;
  std::string first_err;
  auto note = [&](Status st, const char* what) {
    if (st == Status::Ok) return true;
    failed_calls++;
    std::lock_guard<std::mutex> lk(err_mu);
    if (first_err.empty()) first_err = std::string(what) + ": " + rtm::last_error();
    return false;
  };
  auto worker = [&](int tid) {
    std::mt19937 rng(tid * 7919 + 1);
    rtm::Stream mine[kDevices] = {};
    for (int dev = 0; dev < kDevices; ++dev) note(rtm::stream_create(dev, &mine[dev]), "stream_create");
    rtm::Event ev = nullptr;
    std::vector<uint32_t> host, back;
    while (!stop.load()) {
      const int dev = rng() % kDevices;
      const size_t words = 1 + rng() % (64 * 1024);
      const size_t bytes = words * 4;
      void* d = nullptr;
      if (!note(rtm::malloc(dev, bytes, &d), "malloc")) continue;
      const uint32_t tag = (static_cast<uint32_t>(tid) << 24) ^ static_cast<uint32_t>(ops.load());
      host.assign(words, tag);
      back.assign(words, 0);
      switch (rng() % 3) {
        case 0:  // synchronous copies
          note(rtm::memcpy(d, host.data(), bytes, CopyKind::HostToDevice, dev, nullptr), "h2d");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, nullptr), "d2h");
          break;
        case 1:  // an inline kernel writes, a copy reads
          note(rtm::launch(dev, nullptr,
                           [d, words, tag] {
                             auto* w = static_cast<uint32_t*>(d);
                             for (size_t i = 0; i < words; ++i) w[i] = tag;
                           }),
               "launch inline");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, nullptr), "d2h");
          break;
        case 2: {  // everything on the thread's stream, then an event
          rtm::Stream s = mine[dev];
          note(rtm::launch(dev, s,
                           [d, words, tag] {
                             auto* w = static_cast<uint32_t*>(d);
                             for (size_t i = 0; i < words; ++i) w[i] = tag ^ 1u;
                           }),
               "launch stream");
          note(rtm::launch(dev, s,
                           [d, words] {
                             auto* w = static_cast<uint32_t*>(d);
                             for (size_t i = 0; i < words; ++i) w[i] ^= 1u;
                           }),
               "launch stream 2");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, s), "d2h async");
          note(rtm::event_create(dev, &ev), "event_create");
          note(rtm::event_record(dev, ev, s), "event_record");
          note(rtm::event_synchronize(dev, ev), "event_synchronize");
          note(rtm::event_destroy(dev, ev), "event_destroy");
          note(rtm::stream_synchronize(dev, s), "stream_synchronize");
          break;
        }
      }
      if (back != host) bad++;
      note(rtm::free(dev, d), "free");
      ops++;
    }
    for (int dev = 0; dev < kDevices; ++dev) note(rtm::stream_destroy(dev, mine[dev]), "stream_destroy");
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  stop = true;
  for (auto& t : ts) t.join();
  for (int dev = 0; dev < kDevices; ++dev) CHECK_OK(rtm::device_synchronize(dev));
  CHECK(ops > 200);
  CHECK(bad == 0);
  if (failed_calls != 0) record_failure(__FILE__, __LINE__, "stress call failed: " + first_err);
  for (int dev = 0; dev < kDevices; ++dev) CHECK(free_of(dev) == kCap);
  std::string st = rtm::get_option("stats");
  CHECK(stat_field(st, "live_streams") == 0 && stat_field(st, "live_events") == 0);
  CHECK(contains(st, "\"live_allocations\": 0, \"free_blocks\": 1,"));
  // The stress left the arenas closed (depth back to 0).
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  CHECK(died_of_segv(run_in_child([&] { (void)*static_cast<volatile char*>(d); })));
  CHECK_OK(rtm::free(0, d));
  CHECK_OK(rtm::set_option("protect", "0"));
  std::printf("  stress: %d threads, %ld iterations in 1 s\n", kThreads, ops.load());
}

// ---- micro-benchmarks (printed, asserted only loosely) ------------------------------

double ns_per(const std::function<void()>& body, int iters) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

double gbps(size_t bytes, const std::function<void()>& body, int reps) {
  body();  // first touch of the pages
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) body();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(bytes) * reps / s / 1e9;
}

void test_benchmarks() {
  // malloc+free of 4 KiB with 1000 other live blocks around.
  std::vector<void*> live(1000);
  for (auto& p : live) CHECK_OK(rtm::malloc(0, 4096 + 512 * (&p - live.data()) % 8192, &p));
  void* p = nullptr;
  double mf = ns_per([&] {
    rtm::malloc(0, 4096, &p);
    rtm::free(0, p);
  }, 200000);
  for (auto q : live) CHECK_OK(rtm::free(0, q));
  double kb = ns_per([] {
    rtm::kernel_begin();
    rtm::kernel_end();
  }, 200000);
  double li = ns_per([] { rtm::launch(0, nullptr, [] {}); }, 200000);
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  double ls = ns_per([&] { rtm::launch(0, s, [] {}); }, 100000);
  CHECK_OK(rtm::stream_synchronize(0, s));
  double lss = ns_per([&] {
    rtm::launch(0, s, [] {});
    rtm::stream_synchronize(0, s);
  }, 20000);
  CHECK_OK(rtm::stream_destroy(0, s));

  const size_t n = 64u << 20;
  std::vector<char> host(n, 1), host2(n);
  void *d0, *d1;
  CHECK_OK(rtm::malloc(0, n, &d0));
  CHECK_OK(rtm::malloc(1, n, &d1));
  double h2d = gbps(n, [&] { rtm::memcpy(d0, host.data(), n, CopyKind::HostToDevice, 0, nullptr); }, 5);
  double d2h = gbps(n, [&] { rtm::memcpy(host2.data(), d0, n, CopyKind::DeviceToHost, 0, nullptr); }, 5);
  double d2d = gbps(n, [&] { rtm::memcpy_peer(d1, 1, d0, 0, n); }, 5);
  CHECK(std::memcmp(host.data(), host2.data(), 4096) == 0);
  CHECK_OK(rtm::set_option("protect", "1"));
  char small[256];
  double cp_small_prot = ns_per([&] {
    rtm::memcpy(small, d0, sizeof small, CopyKind::DeviceToHost, 0, nullptr);
  }, 100);
  CHECK_OK(rtm::set_option("protect", "0"));
  double cp_small = ns_per([&] {
    rtm::memcpy(small, d0, sizeof small, CopyKind::DeviceToHost, 0, nullptr);
  }, 200000);
  CHECK_OK(rtm::free(0, d0));
  CHECK_OK(rtm::free(1, d1));
  std::printf("bench: malloc+free 4KiB (1000 live blocks): %.0f ns/pair\n", mf);
  std::printf("bench: kernel_begin+end (protect off): %.0f ns\n", kb);
  std::printf("bench: launch default stream (inline, empty fn): %.0f ns\n", li);
  std::printf("bench: launch created stream (enqueue only): %.0f ns; enqueue+sync round trip: %.0f ns\n", ls, lss);
  std::printf("bench: memcpy 64 MiB: H2D %.2f GB/s, D2H %.2f GB/s, D2D(peer) %.2f GB/s\n", h2d, d2h, d2d);
  std::printf("bench: memcpy 256 B D2H: %.0f ns (protect off), %.0f ns (protect on, 2 x 64 MiB live and touched: each copy opens+closes both arenas)\n",
              cp_small, cp_small_prot);
  // Loose sanity bounds: catch pathological regressions, not machine noise.
  CHECK(mf < 20000);
  CHECK(h2d > 0.2 && d2h > 0.2);
}

void test_device_loss_and_versions() {
  CHECK(rtm::get_option("runtime_version") == ACME_RUNTIME_VERSION);
  CHECK(rtm::get_option("built_driver_version") == ACME_DRIVER_VERSION);
  CHECK(rtm::get_option("driver_version") == ACME_DRIVER_VERSION);  // env unset: as built
  CHECK_ST(rtm::set_option("driver_version", "9"), Status::InvalidValue);
  void* p = nullptr;
  CHECK_OK(rtm::malloc(1, 256, &p));
  char buf[256] = {};
  CHECK_OK(rtm::set_option("device_lost", "1"));
  CHECK(rtm::get_option("device_lost") == "1");
  CHECK_ST(rtm::memcpy(p, buf, 256, CopyKind::HostToDevice, 1, nullptr), Status::Error);
  CHECK(contains(last(), "device 1 was lost"));
  void* q = nullptr;
  CHECK_ST(rtm::malloc(1, 256, &q), Status::Error);
  CHECK_ST(rtm::device_synchronize(1), Status::Error);
  CHECK_OK(rtm::malloc(0, 256, &q));  // the other device is fine
  CHECK_OK(rtm::free(0, q));
  CHECK_OK(rtm::free(1, p));          // cleanup works on a lost device
  CHECK_ST(rtm::set_option("device_lost", "7"), Status::InvalidValue);
  CHECK(contains(last(), "device_lost must be a device index"));
  CHECK_OK(rtm::set_option("device_lost", "none"));
  CHECK(rtm::get_option("device_lost").empty());
  CHECK_OK(rtm::malloc(1, 256, &p));
  CHECK_OK(rtm::free(1, p));
  // Simulated start failures name their cause; a failed init changes nothing.
  for (auto [what, cause] : {std::pair{"version_mismatch", "driver/runtime version mismatch"},
                             std::pair{"library_path", "runtime library path not configured"},
                             std::pair{"device_busy", "device held by another process"}}) {
    setenv("ACME_SIMULATE_INIT_FAILURE", what, 1);
    rtm::DeviceConfig cfg{kDevices, kCap, kAlign};
    CHECK_ST(rtm::init(cfg), Status::Error);
    CHECK(contains(last(), std::string("acme: init: ") + cause));
  }
  unsetenv("ACME_SIMULATE_INIT_FAILURE");
  setenv("ACME_DRIVER_VERSION", "2.0.0", 1);
  rtm::DeviceConfig cfg{kDevices, kCap, kAlign};
  CHECK_ST(rtm::init(cfg), Status::Error);
  CHECK(contains(last(), "installed acme driver is 2.0.0"));
  unsetenv("ACME_DRIVER_VERSION");
  CHECK(rtm::device_count() == kDevices);
  init_default();
}

struct Test {
  const char* name;
  void (*fn)();
};

}  // namespace

int main(int argc, char** argv) {
  const Test tests[] = {
      {"init", test_init},
      {"alloc_free_basic", test_alloc_free_basic},
      {"invalid_arguments", test_invalid_arguments},
      {"oom", test_oom},
      {"coalescing_and_holes", test_coalescing_and_holes},
      {"best_fit", test_best_fit},
      {"alignment_config", test_alignment_config},
      {"copies", test_copies},
      {"protect_mode", test_protect_mode},
      {"stream_ordering", test_stream_ordering},
      {"events", test_events},
      {"stream_wait_event", test_stream_wait_event},
      {"sticky_errors", test_sticky_errors},
      {"fork_child_streams", test_fork_child_streams},
      {"fault_injection", test_fault_injection},
      {"options_and_stats", test_options_and_stats},
      {"device_loss_and_versions", test_device_loss_and_versions},
      {"last_error_is_thread_local", test_last_error_is_thread_local},
      {"multithread_stress", test_multithread_stress},
      {"benchmarks", test_benchmarks},
  };
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0, failed = 0;
  for (const Test& t : tests) {
    // "init" must run first in the process (it checks the uninitialized state).
    if (filter && !contains(t.name, filter) && std::strcmp(t.name, "init") != 0) continue;
    g_failures.clear();
    const auto t0 = Clock::now();
    t.fn();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (g_failures.empty()) {
      ++passed;
      std::printf("PASS %s (%.0f ms)\n", t.name, ms);
    } else {
      ++failed;
      std::printf("FAIL %s (%.0f ms)\n", t.name, ms);
      for (auto& f : g_failures) std::printf("    %s\n", f.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("acme runtime tests: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
