// acme runtime tests: compute units (runtime/compute_units.h), a program of
// its own (tests/test_compute_units_program.py builds it with the runtime's
// sources): every chunk once, exceptions, concurrent and nested loops,
// reconfiguration, options, fork, and loops run from device work, whose
// chunks run as device work on every unit.
#include "harness.h"

#include "compute_units.h"

#include <set>

ACME_TEST_MAIN("compute units tests")

namespace {

constexpr int kFileOrder = 1;
namespace units = acme::units;

// Every chunk runs exactly once, with any unit count, and on several threads
// when there are several units.
TEST(every_chunk_once) {
  for (int u : {1, 2, 3, 8}) {
    units::configure(u);
    CHECK(units::count() == u);
    for (int64_t n : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 50; ++rep) units::run(n, u, [&](int64_t i) { hits[i]++; });
      bool all = true;
      for (auto& h : hits) all &= h.load() == 50;
      CHECK(all);
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
}

// The lowest failing chunk's exception reaches the caller; the pool keeps working.
TEST(exceptions_propagate) {
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
}

// Several threads (acme streams) run parallel loops at once, with loops nested
// in chunks: all complete, nothing deadlocks, every chunk counted once.
TEST(concurrent_and_nested) {
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
}

// Reconfiguring while other threads run loops is safe.
TEST(reconfigure_while_running) {
  std::atomic<bool> stop{false};
  std::atomic<long> done{0};
  std::thread worker([&] {
    while (!stop) units::run(32, 8, [&](int64_t) { done++; });
  });
  for (int u = 1; u <= 6; ++u) {
    units::configure(u);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  worker.join();
  CHECK(done.load() % 32 == 0 && done.load() > 0);
}

// Options: "compute_units" takes 1..1024 or auto; junk is refused with a message.
TEST(options) {
  std::string err;
  CHECK(units::set_option("3", &err) && units::get_option() == "3");
  CHECK(units::set_option("auto", &err) && units::count() >= 1);
  for (const char* bad : {"0", "-2", "x", "", "2x", "5000"}) {
    err.clear();
    CHECK(!units::set_option(bad, &err));
    CHECK(contains(err, "compute_units='") && contains(err, "1..1024"));
  }
}

// A forked child has no worker threads: its loops still run (on a new pool).
TEST(fork_child) {
  units::configure(4);
  units::run(8, 4, [](int64_t) {});  // start the parent's workers
  CHECK_CHILD_OK(run_in_child([] {
    std::atomic<int> n{0};
    units::run(100, 4, [&](int64_t) { n++; });
    _exit(n.load() == 100 ? 0 : 3);
  }));
}

// A parallel loop run from launched work: every chunk, on whichever unit,
// runs as device work and reaches device memory through its view.
TEST(device_work_on_every_unit) {
  ensure_init();
  units::configure(4);
  constexpr int64_t n = 64;
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, n * sizeof(int64_t), &d));
  std::mutex m;
  std::set<std::thread::id> unit_threads;
  std::atomic<int> not_on_device{0}, no_view{0};
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  int rep = 0;
  for (; rep < 200 && unit_threads.size() < 2; ++rep) {
    // The default stream and a created one, in turn.
    rtm::Stream stream = rep % 2 ? s : nullptr;
    CHECK_OK(rtm::launch(0, stream, [&, rep] {
      units::run(n, 4, [&, rep](int64_t i) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (acmeOnDevice() != 1) not_on_device++;
        auto* p = static_cast<int64_t*>(acmeDeviceView(d));
        if (!p) {
          no_view++;
          return;
        }
        p[i] = i * 1000 + rep;
        std::lock_guard<std::mutex> lock(m);
        unit_threads.insert(std::this_thread::get_id());
      });
    }));
    CHECK_OK(rtm::stream_synchronize(0, stream));
  }
  CHECK(unit_threads.size() >= 2);  // the loop really ran on several units
  CHECK(not_on_device == 0);
  CHECK(no_view == 0);
  std::vector<int64_t> back(n);
  CHECK_ACME(acmeMemcpy(back.data(), d, n * sizeof(int64_t), acmeMemcpyDeviceToHost, 0),
             acmeSuccess);
  bool all = true;
  for (int64_t i = 0; i < n; ++i) all &= back[i] == i * 1000 + (rep - 1);
  CHECK(all);
  // A chunk's exception reaches the synchronize of the stream that ran the loop.
  CHECK_OK(rtm::launch(0, nullptr, [] {
    units::run(16, 4, [](int64_t i) {
      if (i == 5) throw std::runtime_error("chunk 5 failed");
    });
  }));
  CHECK_ST(rtm::stream_synchronize(0, nullptr), Status::Error);
  CHECK(contains(last(), "chunk 5 failed"));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

// Units that ran device work do not stay device work: a loop run by host code
// reaches no device memory, on any unit.
TEST(host_work_stays_host) {
  ensure_init();
  units::configure(4);
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  CHECK_OK(rtm::launch(0, nullptr, [d] {
    units::run(64, 4, [d](int64_t) { (void)acmeDeviceView(d); });
  }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  std::mutex m;
  std::set<std::thread::id> unit_threads;
  std::atomic<int> on_device{0}, got_view{0};
  for (int rep = 0; rep < 200 && unit_threads.size() < 2; ++rep)
    units::run(64, 4, [&](int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (acmeOnDevice()) on_device++;
      if (acmeDeviceView(d) || acmeDeviceOrHostView(d)) got_view++;
      std::lock_guard<std::mutex> lock(m);
      unit_threads.insert(std::this_thread::get_id());
    });
  CHECK(unit_threads.size() >= 2);
  CHECK(on_device == 0);
  CHECK(got_view == 0);
  CHECK_OK(rtm::free(0, d));
}

}  // namespace
