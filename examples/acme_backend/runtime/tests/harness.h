// The runtime's part of acme's test harness: what the vendor runtime's
// standalone test programs (runtime/tests/test_*.cpp, built with the runtime's
// sources) add to acme's one C++ test harness, tests/cpp/harness.h (TEST,
// CHECK, REQUIRE, the driver and its PASS/FAIL lines; read it first).
//
// Exactly one file of a program says ACME_TEST_MAIN("<title>"): the driver with
// the runtime's hooks. A failed check's message ends with the runtime's last
// error, and after each test the harness checks that it cleaned up (no memory,
// streams, events or unreported errors left, slow_device 0, no device lost)
// and reports it as a failure of that test if not. CHECK_OK / CHECK_ST /
// CHECK_ACME check a runtime call's status.
//
// Built and run by tests/test_runtime_programs.py and tests/test_compute_units_program.py.
#pragma once

#include "../../tests/cpp/harness.h"
#include "acme_runtime.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

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

[[gnu::noinline]] inline void check_status(Status got, Status want, const char* expr,
                                           const char* file, int line) {
  if (got == want) return;
  record_failure(file, line,
                 with_note(std::string(expr) + " gave status " + std::to_string(int(got)) +
                           ", want " + std::to_string(int(want))));
}

// The status must equal `want`; a mismatch reports the runtime's message.
#define CHECK_ST(expr, want) ::harness::check_status((expr), (want), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) CHECK_ST(expr, Status::Ok)
// The same for the C API (acmeError_t).
#define CHECK_ACME(expr, want) \
  CHECK_ST(static_cast<Status>(expr), static_cast<Status>(want))

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

// The runtime's hooks of the driver: failed checks name the runtime's last
// error; check_clean runs after each test.
inline std::string last_error_note() { return std::string("last_error: ") + rtm::last_error(); }
inline Hooks runtime_hooks() { return {last_error_note, check_clean}; }

#define ACME_TEST_MAIN(title)                                                  \
  int main(int argc, char** argv) {                                            \
    return ::harness::run_tests(argc, argv, title, ::harness::runtime_hooks()); \
  }

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
