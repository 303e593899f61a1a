// Standalone tests of acme's compute units (runtime/compute_units.h), built
// and run by tests/test_acme_compute_units.py. Prints "PASS <name>" per test
// and "compute units tests: N passed, M failed"; exit 1 on any failure.
#include "compute_units.h"

#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace units = acme::units;

namespace {
int g_failed = 0, g_passed = 0;
std::string g_why;

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      g_why = std::string(#cond) + " (line " + std::to_string(__LINE__) + ")"; \
      return false;                                                     \
    }                                                                   \
  } while (0)

void run_test(const char* name, bool (*fn)()) {
  g_why.clear();
  bool ok = false;
  try {
    ok = fn();
  } catch (const std::exception& e) {
    g_why = std::string("exception: ") + e.what();
  }
  if (ok) {
    ++g_passed;
    std::printf("PASS %s\n", name);
  } else {
    ++g_failed;
    std::printf("FAIL %s: %s\n", name, g_why.c_str());
  }
}

// Every chunk runs exactly once, with any unit count, and on several threads
// when there are several units.
bool every_chunk_once() {
  for (int u : {1, 2, 3, 8}) {
    units::configure(u);
    CHECK(units::count() == u);
    for (int64_t n : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep) units::run(n, u, [&](int64_t i) { hits[i]++; });
      for (auto& h : hits) CHECK(h.load() == 50);
    }
  }
  units::configure(4);
  std::mutex m;
  std::set<std::thread::id> seen;
  for (int rep = 0; rep < 200 && seen.size() < 2; ++rep)
    units::run(64, 4, [&](int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lock(m);
      seen.insert(std::this_thread::get_id());
    });
  CHECK(seen.size() >= 2);
  // max_units 1 keeps everything on the caller
  seen.clear();
  units::run(64, 1, [&](int64_t) {
    std::lock_guard<std::mutex> lock(m);
    seen.insert(std::this_thread::get_id());
  });
  CHECK(seen.size() == 1 && *seen.begin() == std::this_thread::get_id());
  return true;
}

// The lowest failing chunk's exception reaches the caller; the pool keeps working.
bool exceptions_propagate() {
  units::configure(4);
  for (int rep = 0; rep < 20; ++rep) {
    std::string what;
    try {
      units::run(100, 4, [&](int64_t i) {
        if (i == 3 || i == 60) throw std::runtime_error("chunk " + std::to_string(i));
      });
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    // chunk 60 only wins when chunk 3 had not started when 60 failed (then it is skipped)
    CHECK(what == "chunk 3" || what == "chunk 60");
  }
  std::atomic<int> after{0};
  units::run(10, 4, [&](int64_t) { after++; });
  CHECK(after.load() == 10);
  return true;
}

// Several threads (acme streams) run parallel loops at once, with loops nested
// in chunks: all complete, nothing deadlocks, every chunk counted once.
bool concurrent_and_nested() {
  units::configure(4);
  std::atomic<long> sum{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep)
        units::run(16, 4, [&](int64_t) { units::run(3, 4, [&](int64_t) { sum++; }); });
    });
  for (auto& t : threads) t.join();
  CHECK(sum.load() == 4L * 200 * 16 * 3);
  return true;
}

// Reconfiguring while other threads run loops is safe.
bool reconfigure_while_running() {
  std::atomic<bool> stop{false};
  std::atomic<long> done{0};
  std::thread worker([&] {
    while (!stop) {
      units::run(32, 8, [&](int64_t) { done++; });
    }
  });
  for (int u = 1; u <= 6; ++u) {
    units::configure(u);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  worker.join();
  CHECK(done.load() % 32 == 0 && done.load() > 0);
  return true;
}

// Options: "compute_units" takes 1..1024 or auto; junk is refused with a message.
bool options() {
  std::string err;
  CHECK(units::set_option("3", &err) && units::get_option() == "3");
  CHECK(units::set_option("auto", &err) && units::count() >= 1);
  for (const char* bad : {"0", "-2", "x", "", "2x", "5000"}) {
    err.clear();
    CHECK(!units::set_option(bad, &err));
    CHECK(err.find("compute_units='") != std::string::npos && err.find("1..1024") != std::string::npos);
  }
  return true;
}

// A forked child has no worker threads: its loops still run (on a new pool).
bool fork_child() {
  units::configure(4);
  units::run(8, 4, [](int64_t) {});  // start the parent's workers
  pid_t pid = fork();
  if (pid == 0) {
    std::atomic<int> n{0};
    units::run(100, 4, [&](int64_t) { n++; });
    _exit(n.load() == 100 ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return true;
}
}  // namespace

int main() {
  run_test("every_chunk_once", every_chunk_once);
  run_test("exceptions_propagate", exceptions_propagate);
  run_test("concurrent_and_nested", concurrent_and_nested);
  run_test("reconfigure_while_running", reconfigure_while_running);
  run_test("options", options);
  run_test("fork_child", fork_child);
  std::printf("compute units tests: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
