// The one test harness of acme's standalone C++ test programs (runtime/tests).
//
// A test program is some test_*.cpp files plus the runtime's sources; exactly
// one of its files says ACME_TEST_MAIN("<title>"). Each file sets its place in
// the run with `constexpr int kFileOrder = N;` before its tests:
//
//   TEST(name) { CHECK(...); CHECK_OK(rtm::...); }
//
// Tests run in (kFileOrder, order of definition). The program prints
// "PASS <name> (N ms)" or "FAIL <name> (N ms)" plus the failed checks per test,
// then "<title>: N passed, M failed", and exits 0 iff M == 0. Optional argv[1]:
// run only tests whose name contains it (TEST_ALWAYS tests run regardless).
//
// A failed CHECK records the failure and the test goes on. After each test the
// harness checks that it cleaned up (no memory, streams, events or unreported
// errors left, slow_device 0, no device lost) and reports it if not.
//
// Built and run by tests/test_runtime_programs.py and tests/test_compute_units_program.py.
#pragma once

#include "acme_runtime.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rtm = acme::runtime;
using rtm::CopyKind;
using rtm::Status;
using Clock = std::chrono::steady_clock;

namespace harness {

// The configuration most tests run with (init_default).
constexpr int kDevices = 2;
constexpr size_t kCap = 64u << 20;  // 64 MiB per device
constexpr size_t kAlign = 512;

// ---- checks --------------------------------------------------------------------

struct Failures {
  std::mutex mu;
  std::vector<std::string> lines;  // of the current test
};
inline Failures& failures() {
  static Failures f;
  return f;
}

inline void record_failure(const char* file, int line, const std::string& what) {
  std::string where = file;
  where = where.substr(where.find_last_of('/') + 1);
  std::lock_guard<std::mutex> lk(failures().mu);
  failures().lines.push_back(where + ":" + std::to_string(line) + ": " + what);
}

// Out of line, so that each CHECK stays one call.
[[gnu::noinline]] inline void check_failed(const char* cond, const char* file, int line) {
  record_failure(file, line,
                 std::string("CHECK(") + cond + ") failed; last_error: " + rtm::last_error());
}
[[gnu::noinline]] inline void check_status(Status got, Status want, const char* expr,
                                           const char* file, int line) {
  if (got == want) return;
  record_failure(file, line,
                 std::string(expr) + " gave status " + std::to_string(int(got)) + ", want " +
                     std::to_string(int(want)) + "; last_error: " + rtm::last_error());
}

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) ::harness::check_failed(#cond, __FILE__, __LINE__); \
  } while (0)
// The status must equal `want`; a mismatch reports the runtime's message.
#define CHECK_ST(expr, want) ::harness::check_status((expr), (want), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) CHECK_ST(expr, Status::Ok)
// The same for the C API (acmeError_t).
#define CHECK_ACME(expr, want) \
  CHECK_ST(static_cast<Status>(expr), static_cast<Status>(want))

// ---- registry and driver ----------------------------------------------------------

struct Test {
  const char* name;
  int file_order;
  int index;  // order of registration (of definition within a file)
  void (*fn)();
  bool always;  // runs whatever the filter
};
inline std::vector<Test>& registry() {
  static std::vector<Test> tests;
  return tests;
}
inline bool add_test(const char* name, int file_order, void (*fn)(), bool always) {
  auto& r = registry();
  r.push_back({name, file_order, static_cast<int>(r.size()), fn, always});
  return true;
}

#define HARNESS_TEST(name, always)                                                   \
  static void test_##name();                                                          \
  [[maybe_unused]] static const bool harness_registered_##name =                      \
      ::harness::add_test(#name, kFileOrder, test_##name, always);                    \
  static void test_##name()
#define TEST(name) HARNESS_TEST(name, false)
#define TEST_ALWAYS(name) HARNESS_TEST(name, true)

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
inline std::string last() { return rtm::last_error(); }

inline size_t free_of(int dev) {
  size_t f = 0, t = 0;
  CHECK_OK(rtm::memory_info(dev, &f, &t));
  return f;
}

// A numeric field of get_option("stats") (the first one of that name); ~0 if absent.
inline uint64_t stat_field(const std::string& json, const std::string& name) {
  const auto pos = json.find("\"" + name + "\": ");
  if (pos == std::string::npos) return ~0ull;
  return std::strtoull(json.c_str() + pos + name.size() + 4, nullptr, 10);
}
inline uint64_t stat_of(const std::string& name) {
  return stat_field(rtm::get_option("stats"), name);
}

// What a test must leave behind: reported as failures of that test, then
// repaired where possible so that the next test starts clean.
inline void check_clean() {
  if (rtm::device_count() == 0) return;
  const std::string slow = rtm::get_option("slow_device");
  if (slow != "0") {
    record_failure(__FILE__, __LINE__, "test left slow_device=" + slow);
    rtm::set_option("slow_device", "0");
  }
  const std::string lost = rtm::get_option("device_lost");
  if (!lost.empty()) {
    record_failure(__FILE__, __LINE__, "test left device_lost=" + lost);
    rtm::set_option("device_lost", "none");
  }
  for (int dev = 0; dev < rtm::device_count(); ++dev) {
    if (rtm::device_synchronize(dev) != Status::Ok)
      record_failure(__FILE__, __LINE__,
                     "test left an unreported error on device " + std::to_string(dev) + ": " +
                         rtm::last_error());
    size_t f = 0, t = 0;
    if (rtm::memory_info(dev, &f, &t) == Status::Ok && f != t)
      record_failure(__FILE__, __LINE__,
                     "test left " + std::to_string(t - f) + " bytes allocated on device " +
                         std::to_string(dev));
  }
  const std::string st = rtm::get_option("stats");
  if (stat_field(st, "live_streams") != 0 || stat_field(st, "live_events") != 0)
    record_failure(__FILE__, __LINE__,
                   "test left " + std::to_string(stat_field(st, "live_streams")) +
                       " stream(s) and " + std::to_string(stat_field(st, "live_events")) +
                       " event(s) alive");
}

inline int run_tests(int argc, char** argv, const char* title) {
  std::vector<Test> tests = registry();
  std::stable_sort(tests.begin(), tests.end(), [](const Test& a, const Test& b) {
    return a.file_order != b.file_order ? a.file_order < b.file_order : a.index < b.index;
  });
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0, failed = 0;
  for (const Test& t : tests) {
    if (filter && !t.always && !contains(t.name, filter)) continue;
    failures().lines.clear();
    const auto t0 = Clock::now();
    try {
      t.fn();
    } catch (const std::exception& e) {
      record_failure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
    } catch (...) {
      record_failure(__FILE__, __LINE__, "uncaught exception (not a std::exception)");
    }
    check_clean();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const auto& lines = failures().lines;
    if (lines.empty()) {
      ++passed;
      std::printf("PASS %s (%.0f ms)\n", t.name, ms);
    } else {
      ++failed;
      std::printf("FAIL %s (%.0f ms)\n", t.name, ms);
      const size_t shown = std::min<size_t>(lines.size(), 20);
      for (size_t i = 0; i < shown; ++i) std::printf("    %s\n", lines[i].c_str());
      if (lines.size() > shown) std::printf("    ... and %zu more\n", lines.size() - shown);
    }
    std::fflush(stdout);
  }
  std::printf("%s: %d passed, %d failed\n", title, passed, failed);
  return failed == 0 ? 0 : 1;
}

#define ACME_TEST_MAIN(title) \
  int main(int argc, char** argv) { return ::harness::run_tests(argc, argv, title); }

// ---- helpers --------------------------------------------------------------------

inline void init_default() { CHECK_OK(rtm::init({kDevices, kCap, kAlign})); }
// init_default unless the runtime is initialized already.
inline void ensure_init() {
  if (rtm::device_count() == 0) init_default();
}

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Sets the slow-device delay for its scope.
class SlowDevice {
 public:
  explicit SlowDevice(unsigned long us) { CHECK_OK(rtm::set_option("slow_device", std::to_string(us).c_str())); }
  ~SlowDevice() { CHECK_OK(rtm::set_option("slow_device", "0")); }
  SlowDevice(const SlowDevice&) = delete;
  SlowDevice& operator=(const SlowDevice&) = delete;
};

// A gate queued work can wait at, opened by the host: it makes "the call
// returned before the work ran" observable without timing. Copies share the
// gate (capture it by value); waits time out so a broken test cannot hang.
class Gate {
 public:
  void open() const { open_->store(true); }
  bool is_open() const { return open_->load(); }
  // True once open; false after timeout_ms.
  bool wait(int timeout_ms = 5000) const {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!open_->load()) {
      if (Clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
  }

 private:
  std::shared_ptr<std::atomic<bool>> open_ = std::make_shared<std::atomic<bool>>(false);
};

// Waits until flag is set (true) or timeout_ms passed (false).
inline bool wait_for(const std::atomic<bool>& flag, int timeout_ms = 5000) {
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!flag.load()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Inside work running on the device: the view of device address p. Throws
// when there is none (host code), so the test's next synchronize fails with
// a message rather than the process crashing.
template <class T>
T* view(const void* p) {
  void* v = rtm::device_view(p);
  if (!v) throw std::runtime_error(std::string("no device view: ") + rtm::last_error());
  return static_cast<T*>(v);
}

// Runs `child` in a forked process (no core file; exit 0 when it returns) and
// returns its wait status. A child still running after timeout_ms is killed
// (SIGKILL), so a hang shows as a failure, not a stuck test program.
inline int run_in_child(const std::function<void()>& child, int timeout_ms = 10000) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit no_core{0, 0};  // an expected SIGSEGV must not write a core file
    setrlimit(RLIMIT_CORE, &no_core);
    child();
    _exit(0);
  }
  if (pid < 0) return -1;
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (Clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
inline bool died_of_segv(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}
inline bool exited_ok(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
inline std::string describe_status(int status) {
  if (status == -1) return "fork/wait failed";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + (WTERMSIG(status) == SIGKILL ? ", timed out?" : "") +
           ")";
  return "status " + std::to_string(status);
}
[[gnu::noinline]] inline void check_child(int status, bool segv, const char* expr,
                                          const char* file, int line) {
  if (segv ? died_of_segv(status) : exited_ok(status)) return;
  record_failure(file, line,
                 std::string(expr) + ": child " + describe_status(status) + ", want " +
                     (segv ? "death by SIGSEGV" : "exit code 0"));
}
// The child (run_in_child's status) died of SIGSEGV / exited with code 0.
#define CHECK_CHILD_SEGV(status) ::harness::check_child((status), true, #status, __FILE__, __LINE__)
#define CHECK_CHILD_OK(status) ::harness::check_child((status), false, #status, __FILE__, __LINE__)

}  // namespace harness

using harness::contains;
using harness::free_of;
using harness::Gate;
using harness::kAlign;
using harness::kCap;
using harness::kDevices;
using harness::last;
using harness::ms_since;
using harness::SlowDevice;
using harness::ensure_init;
using harness::init_default;
using harness::run_in_child;
using harness::stat_field;
using harness::stat_of;
using harness::view;
using harness::wait_for;
