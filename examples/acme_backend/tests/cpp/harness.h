// The one test harness of acme's standalone C++ test programs: the kernel
// tests here (tests/cpp/test_*.cpp) and the vendor runtime's tests
// (runtime/tests), which add the runtime's checks and clean-up on top of it in
// runtime/tests/harness.h. It needs the standard library only.
//
// A test program is some test_*.cpp files; each sets its place in the run with
// `constexpr int kFileOrder = N;` before its tests:
//
//   TEST(name) { CHECK(a == b); REQUIRE(x < 1, "x is %g", x); }
//
// and one of them has main: TEST_MAIN("<title>") (ACME_TEST_MAIN for the
// runtime's programs), or its own that calls harness::run_tests (a program that
// cannot run on this machine prints "SKIP <reason>" and exits 0 instead).
//
// Tests run in (kFileOrder, order of definition). The program prints
// "PASS <name> (N ms)" or "FAIL <name> (N ms)" plus the failed checks per test,
// then "<title>: N passed, M failed", and exits 0 iff M == 0. Optional argv[1]:
// run only tests whose name contains it (TEST_ALWAYS tests run regardless).
// The pytest files next to the programs run them and read these lines.
//
// A failed CHECK records the failure and the test goes on; a failed REQUIRE
// records it with its printf-style message and ends the test (for checks in
// loops, where one failure says enough). An exception escaping a test fails it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace harness {

// What a program adds around its tests (run_tests' hooks).
struct Hooks {
  // Appended to each failed check's message, e.g. the runtime's last error.
  std::string (*note)() = nullptr;
  // Runs after each test; failures it records are that test's.
  void (*after_each)() = nullptr;
};
inline Hooks& hooks() {
  static Hooks h;
  return h;
}

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

// A failed check's message with the program's note.
inline std::string with_note(std::string what) {
  if (hooks().note) what += "; " + hooks().note();
  return what;
}

// Out of line, so that each CHECK stays one call.
[[gnu::noinline]] inline void check_failed(const char* cond, const char* file, int line) {
  record_failure(file, line, with_note(std::string("CHECK(") + cond + ") failed"));
}
[[gnu::noinline, gnu::format(printf, 4, 5)]] inline void require_failed(
    const char* cond, const char* file, int line, const char* fmt, ...) {
  char msg[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, args);
  va_end(args);
  record_failure(file, line, with_note(std::string("REQUIRE(") + cond + ") failed: " + msg));
}

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) ::harness::check_failed(#cond, __FILE__, __LINE__); \
  } while (0)
// Ends the test (returns from it) when cond is false; the rest is a printf
// format and its arguments, saying what was checked.
#define REQUIRE(cond, ...)                                                  \
  do {                                                                      \
    if (!(cond)) {                                                          \
      ::harness::require_failed(#cond, __FILE__, __LINE__, __VA_ARGS__);    \
      return;                                                               \
    }                                                                       \
  } while (0)

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

inline int run_tests(int argc, char** argv, const char* title, Hooks with = {}) {
  hooks() = with;
  std::vector<Test> tests = registry();
  std::stable_sort(tests.begin(), tests.end(), [](const Test& a, const Test& b) {
    return a.file_order != b.file_order ? a.file_order < b.file_order : a.index < b.index;
  });
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0, failed = 0;
  for (const Test& t : tests) {
    if (filter && !t.always && !contains(t.name, filter)) continue;
    failures().lines.clear();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      t.fn();
    } catch (const std::exception& e) {
      record_failure(__FILE__, __LINE__, std::string("uncaught exception: ") + e.what());
    } catch (...) {
      record_failure(__FILE__, __LINE__, "uncaught exception (not a std::exception)");
    }
    if (with.after_each) with.after_each();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
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

#define TEST_MAIN(title) \
  int main(int argc, char** argv) { return ::harness::run_tests(argc, argv, title); }

}  // namespace harness

using harness::contains;
