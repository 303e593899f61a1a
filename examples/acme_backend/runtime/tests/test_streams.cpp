// acme runtime tests: streams. Every stream, the default (null) one included,
// is asynchronous: ordering, the default stream, sticky errors, device
// synchronize, fork, the slow device, a multi-thread stress, benchmarks.
#include "harness.h"

#include <random>
#include <set>

namespace {

constexpr int kFileOrder = 3;

TEST(stream_ordering) {
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

  // A kernel then a copy on the same stream: the copy sees the kernel's write,
  // and neither call waited for the kernel.
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int host = -1;
  Gate gate;
  CHECK_OK(rtm::launch(0, s, [d, gate] {
    gate.wait();
    *view<int>(d) = 42;
  }));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, s));
  bool idle = true;
  CHECK_OK(rtm::stream_query(0, s, &idle));
  CHECK(!idle);
  CHECK(host == -1);
  // Another stream is independent: its work runs while `s` waits.
  rtm::Stream s2 = nullptr;
  CHECK_OK(rtm::stream_create(0, &s2));
  std::atomic<bool> other_ran{false};
  CHECK_OK(rtm::launch(0, s2, [&] { other_ran = true; }));
  CHECK_OK(rtm::stream_synchronize(0, s2));
  CHECK(other_ran);
  CHECK_OK(rtm::stream_query(0, s, &idle));
  CHECK(!idle);
  gate.open();
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(host == 42);
  CHECK_OK(rtm::stream_query(0, s, &idle));
  CHECK(idle);
  // device_synchronize drains all streams of the device.
  std::atomic<int> done{0};
  for (auto st : {s, s2})
    CHECK_OK(rtm::launch(0, st, [&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      done++;
    }));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK(done == 2);
  CHECK_OK(rtm::stream_destroy(0, s2));
  // Destroying a stream drains it first.
  std::atomic<bool> drained{false};
  CHECK_OK(rtm::launch(0, s, [&drained] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    drained = true;
  }));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK(drained);
  CHECK_OK(rtm::free(0, d));
}

// The default stream is asynchronous: launch returns before the work ran;
// stream_synchronize(null) waits for it.
TEST(default_stream_async) {
  {
    constexpr int kSlowMs = 200;
    SlowDevice slow(kSlowMs * 1000);
    std::atomic<bool> ran{false};
    const auto t0 = Clock::now();
    CHECK_OK(rtm::launch(0, nullptr, [&ran] { ran = true; }));
    CHECK(!ran);  // returned before its work ran
    CHECK(ms_since(t0) < kSlowMs / 2);
    bool idle = true;
    CHECK_OK(rtm::stream_query(0, nullptr, &idle));
    CHECK(!idle);
    CHECK_OK(rtm::stream_synchronize(0, nullptr));
    CHECK(ran);  // ... and synchronize waited for it
    CHECK(ms_since(t0) >= kSlowMs - 1);
    CHECK_OK(rtm::stream_query(0, nullptr, &idle));
    CHECK(idle);
  }
  // Without the slow device: work that waits for the host does not block the
  // launch (run inline, it would time out first and then have run).
  Gate gate;
  std::atomic<bool> ran{false};
  CHECK_OK(rtm::launch(0, nullptr, [gate, &ran] {
    if (gate.wait()) ran = true;
  }));
  CHECK(!ran);
  bool idle = true;
  CHECK_OK(rtm::stream_query(0, nullptr, &idle));
  CHECK(!idle);
  gate.open();
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(ran);

  // It runs as device work, in order, one piece at a time: on the device's
  // default-stream worker, or on a host thread while that thread synchronizes
  // the stream (a waiting host runs queued work itself instead of waiting for
  // the worker to be scheduled), never on a thread that is not waiting for it:
  // not on the thread that queued it and went on, and not on another device's
  // worker.
  struct Ran {
    std::thread::id thread;
    int on_device;
  };
  std::vector<Ran> dev0;
  std::thread::id launcher;
  for (int i = 0; i < 3; ++i)
    CHECK_OK(rtm::launch(0, nullptr, [&dev0] { dev0.push_back({std::this_thread::get_id(), acmeOnDevice()}); }));
  std::thread([&dev0, &launcher] {
    launcher = std::this_thread::get_id();
    CHECK_OK(rtm::launch(0, nullptr, [&dev0] { dev0.push_back({std::this_thread::get_id(), acmeOnDevice()}); }));
  }).join();
  Ran dev1{};
  CHECK_OK(rtm::launch(1, nullptr, [&dev1] { dev1 = {std::this_thread::get_id(), acmeOnDevice()}; }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  CHECK(dev0.size() == 4);
  std::set<std::thread::id> threads;
  for (const Ran& r : dev0) {
    CHECK(r.on_device == 1);
    CHECK(r.thread != launcher);
    if (r.thread != std::this_thread::get_id()) threads.insert(r.thread);
  }
  CHECK(threads.size() <= 1);  // device 0's worker, besides this (synchronizing) thread
  CHECK(dev1.on_device == 1 && !threads.count(dev1.thread));
  // Without a synchronize, queued work runs on the worker alone.
  std::atomic<bool> done{false};
  std::thread::id ran_on;
  CHECK_OK(rtm::launch(0, nullptr, [&done, &ran_on] {
    ran_on = std::this_thread::get_id();
    done = true;
  }));
  while (!done) std::this_thread::yield();
  CHECK(ran_on != std::this_thread::get_id());
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
}

// Copies on the null stream are queued in order with the launches there.
TEST(null_stream_memcpy_ordered) {
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 2 * sizeof(int), &d));
  int* const di = static_cast<int*>(d);
  SlowDevice slow(20000);  // a copy run at call time would overtake the kernels
  // kernel writes, then a D2H copy reads
  int host = -1;
  CHECK_OK(rtm::launch(0, nullptr, [d] { *view<int>(d) = 42; }));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(host == 42);
  // kernel reads, then a H2D copy overwrites: the kernel sees the old value
  int seen = -1, next = 7;
  CHECK_OK(rtm::launch(0, nullptr, [d, &seen] { seen = *view<int>(d); }));
  CHECK_OK(rtm::memcpy(d, &next, sizeof next, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(seen == 42 && host == 7);
  // kernel writes, a D2D copy moves it, a kernel reads the copy
  CHECK_OK(rtm::launch(0, nullptr, [d] { *view<int>(d) = 5; }));
  CHECK_OK(rtm::memcpy(di + 1, d, sizeof(int), CopyKind::DeviceToDevice, 0, nullptr));
  CHECK_OK(rtm::launch(0, nullptr, [di, &seen] { seen = *view<int>(di + 1); }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(seen == 5);
  // The synchronous acmeMemcpy comes after the launches before it.
  CHECK_OK(rtm::launch(0, nullptr, [d] { *view<int>(d) = 99; }));
  CHECK_ACME(acmeMemcpy(&host, d, sizeof host, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(host == 99);
  CHECK_OK(rtm::free(0, d));
}

TEST(sticky_errors) {
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

  // Synchronizing a stream from its own work is refused instead of deadlocking.
  CHECK_OK(rtm::stream_create(0, &s));
  Status inner = Status::Ok, inner_device = Status::Ok;
  CHECK_OK(rtm::launch(0, s, [&] {
    inner = rtm::stream_synchronize(0, s);
    inner_device = rtm::device_synchronize(0);
  }));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(inner == Status::Error && inner_device == Status::Error);
  CHECK_OK(rtm::stream_destroy(0, s));
}

// An exception in default-stream work is not returned by launch: the next
// synchronize of the default stream (or of the device) reports it, once.
TEST(default_stream_errors) {
  std::atomic<bool> later_ran{false};
  CHECK_OK(rtm::launch(0, nullptr, [] { throw std::runtime_error("default boom"); }));
  CHECK_OK(rtm::launch(0, nullptr, [&] { later_ran = true; }));
  CHECK_ST(rtm::stream_synchronize(0, nullptr), Status::Error);
  CHECK(contains(last(), "default boom") && contains(last(), "kernel") &&
        contains(last(), "device 0"));
  CHECK(later_ran);
  CHECK_OK(rtm::stream_synchronize(0, nullptr));  // reported once, then cleared

  // Each device's default stream has its own error.
  CHECK_OK(rtm::launch(1, nullptr, [] { throw std::runtime_error("dev1 boom"); }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK_ST(rtm::stream_synchronize(1, nullptr), Status::Error);
  CHECK(contains(last(), "dev1 boom") && contains(last(), "device 1"));

  // Several failures: the first reported, the others counted.
  CHECK_OK(rtm::launch(0, nullptr, [] { throw std::runtime_error("one"); }));
  CHECK_OK(rtm::launch(0, nullptr, [] { throw 7; }));
  CHECK_ST(rtm::stream_synchronize(0, nullptr), Status::Error);
  CHECK(contains(last(), "one") && contains(last(), "1 later failure"));

  // device_synchronize reports it.
  CHECK_OK(rtm::launch(0, nullptr, [] { throw std::runtime_error("via device sync"); }));
  CHECK_ST(rtm::device_synchronize(0), Status::Error);
  CHECK(contains(last(), "via device sync"));
  CHECK_OK(rtm::device_synchronize(0));

  // So does the synchronous acmeMemcpy, which waits for the default stream.
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 16, &d));
  CHECK_OK(rtm::launch(0, nullptr, [] { throw std::runtime_error("before the copy"); }));
  int w = 0;
  CHECK_ACME(acmeMemcpy(&w, d, sizeof w, acmeMemcpyDeviceToHost, 0), acmeErrorRuntime);
  CHECK(contains(acmeGetLastErrorString(), "before the copy"));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK_OK(rtm::free(0, d));

  // Synchronizing the default stream (or its device) from its own work is
  // refused instead of deadlocking.
  Status inner = Status::Ok, inner_device = Status::Ok;
  CHECK_OK(rtm::launch(0, nullptr, [&] {
    inner = rtm::stream_synchronize(0, nullptr);
    inner_device = rtm::device_synchronize(0);
  }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(inner == Status::Error && inner_device == Status::Error);
}

// device_synchronize waits for the default stream (and the created ones) of
// its device, and only of its device.
TEST(device_synchronize_waits_default) {
  Gate gate;
  std::atomic<bool> done{false};
  CHECK_OK(rtm::launch(0, nullptr, [gate, &done] {
    gate.wait();
    done = true;
  }));
  CHECK_OK(rtm::device_synchronize(1));  // another device: does not wait for it
  CHECK(!done);
  std::thread opener([gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.open();
  });
  CHECK_OK(rtm::device_synchronize(0));
  CHECK(done);
  opener.join();

  SlowDevice slow(50000);
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  std::atomic<int> ran{0};
  const auto t0 = Clock::now();
  CHECK_OK(rtm::launch(0, nullptr, [&ran] { ran++; }));
  CHECK_OK(rtm::launch(0, s, [&ran] { ran++; }));
  CHECK(ran == 0);
  CHECK_OK(rtm::device_synchronize(0));
  CHECK(ran == 2);
  CHECK(ms_since(t0) >= 49);
  CHECK_OK(rtm::stream_destroy(0, s));
}

// Every queued item waits slow_device microseconds before it runs.
TEST(slow_device_delays_work) {
  constexpr int kSlowMs = 50;
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  rtm::Event e = nullptr;
  CHECK_OK(rtm::event_create(0, &e));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  int v = 3;
  {
    SlowDevice slow(kSlowMs * 1000);
    CHECK(rtm::get_option("slow_device") == std::to_string(kSlowMs * 1000));
    // Five items on a created stream: kernels, a copy, an event marker.
    auto t0 = Clock::now();
    for (int i = 0; i < 3; ++i) CHECK_OK(rtm::launch(0, s, [] {}));
    CHECK_OK(rtm::memcpy(d, &v, sizeof v, CopyKind::HostToDevice, 0, s));
    CHECK_OK(rtm::event_record(0, e, s));
    CHECK(ms_since(t0) < kSlowMs);  // queuing is not slowed
    CHECK_OK(rtm::stream_synchronize(0, s));
    CHECK(ms_since(t0) >= 5 * kSlowMs - 1);
    // The default stream too.
    t0 = Clock::now();
    for (int i = 0; i < 2; ++i) CHECK_OK(rtm::launch(0, nullptr, [] {}));
    CHECK_OK(rtm::stream_synchronize(0, nullptr));
    CHECK(ms_since(t0) >= 2 * kSlowMs - 1);
    // A host-to-host copy on the null stream involves no device: not slowed.
    int a = 1, b = 0;
    t0 = Clock::now();
    CHECK_OK(rtm::memcpy(&b, &a, sizeof a, CopyKind::HostToHost, 0, nullptr));
    CHECK(b == 1);
    CHECK(ms_since(t0) < kSlowMs);
  }
  // Back to 0: 200 items take nowhere near 200 x 50 ms.
  const auto t0 = Clock::now();
  for (int i = 0; i < 200; ++i) CHECK_OK(rtm::launch(0, s, [] {}));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(ms_since(t0) < 2000);
  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

// After fork(): created streams from before the fork are refused in the child
// (their threads are gone), default streams are started again.
TEST(fork_child_streams) {
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int v = 10;
  CHECK_OK(rtm::memcpy(d, &v, sizeof v, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  // Leave work in flight across the fork on both streams: in the child it can
  // never finish, and must not be waited for.
  Gate gate;
  CHECK_OK(rtm::launch(0, s, [gate] { gate.wait(); }));
  CHECK_OK(rtm::launch(0, nullptr, [gate] { gate.wait(); }));
  const int status = run_in_child([&] {
    int code = 0;
    if (rtm::stream_synchronize(0, s) != Status::Error) code |= 1;
    if (!contains(last(), "before fork()")) code |= 2;
    if (rtm::launch(0, s, [] {}) != Status::Error) code |= 4;
    if (rtm::device_synchronize(0) != Status::Ok) code |= 8;  // skips the inherited stream
    rtm::Stream fresh = nullptr;  // streams created in the child work
    std::atomic<int> ran{0};
    if (rtm::stream_create(0, &fresh) != Status::Ok) code |= 16;
    if (rtm::launch(0, fresh, [&] { ran = 1; }) != Status::Ok) code |= 32;
    if (rtm::stream_synchronize(0, fresh) != Status::Ok || ran != 1) code |= 64;
    // The default stream runs again (without the parent's pending work),
    // as device work that reaches device memory.
    int w = 0;
    if (rtm::launch(0, nullptr, [d] { *view<int>(d) += 1; }) != Status::Ok ||
        rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, nullptr) != Status::Ok ||
        rtm::stream_synchronize(0, nullptr) != Status::Ok || w != 11)
      code |= 128;
    _exit(code);
  }, 4000);  // shorter than the gate: a child waiting for the parent's work fails
  CHECK_CHILD_OK(status);
  gate.open();
  // The parent's streams are unaffected.
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  int w = 0;
  CHECK_ACME(acmeMemcpy(&w, d, sizeof w, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(w == 10);  // the child's copy of the memory was its own
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

// A launch finds its default stream without the registry's lock, through a
// per-thread cache (stream.cpp). Init replaces the default streams: a thread
// that launched before must reach the new one, not the stopped old one, and
// with fewer devices the ones gone are refused.
TEST(reinit_replaces_cached_default_streams) {
  std::atomic<int> ran{0};
  for (int dev = 0; dev < kDevices; ++dev)
    CHECK_OK(rtm::launch(dev, nullptr, [&ran] { ran++; }));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::device_synchronize(1));
  CHECK(ran == kDevices);
  CHECK_OK(rtm::init({1, kCap, kAlign}));
  CHECK_OK(rtm::launch(0, nullptr, [&ran] { ran++; }));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(ran == kDevices + 1);
  CHECK_ST(rtm::launch(1, nullptr, [&ran] { ran++; }), Status::InvalidDevice);
  init_default();
  for (int dev = 0; dev < kDevices; ++dev)
    CHECK_OK(rtm::launch(dev, nullptr, [&ran] { ran++; }));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::device_synchronize(1));
  CHECK(ran == 2 * kDevices + 1);
}

// A few threads hammer malloc/free/copies/kernels/streams/events on both
// devices for about a second. Each block carries a pattern unique to its
// owner; a mixed-up allocator (overlapping blocks) or lost ordering shows up
// as a wrong pattern. At the end every arena must be whole again.
TEST(multithread_stress) {
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
  auto fill = [](void* d, size_t words, uint32_t tag) {
    return [d, words, tag] {
      auto* w = view<uint32_t>(d);
      for (size_t i = 0; i < words; ++i) w[i] = tag;
    };
  };
  auto worker = [&](int tid) {
    std::mt19937 rng(tid * 7919 + 1);
    rtm::Stream mine[kDevices] = {};
    for (int dev = 0; dev < kDevices; ++dev)
      note(rtm::stream_create(dev, &mine[dev]), "stream_create");
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
      rtm::Stream s = mine[dev];
      switch (rng() % 4) {
        case 0:  // synchronous copies (C API)
          note(static_cast<Status>(acmeMemcpy(d, host.data(), bytes, acmeMemcpyHostToDevice, dev)),
               "acmeMemcpy h2d");
          note(static_cast<Status>(acmeMemcpy(back.data(), d, bytes, acmeMemcpyDeviceToHost, dev)),
               "acmeMemcpy d2h");
          break;
        case 1:  // the default stream: a kernel writes, a copy reads, then wait
          note(rtm::launch(dev, nullptr, fill(d, words, tag)), "launch default");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, nullptr),
               "d2h default");
          note(rtm::stream_synchronize(dev, nullptr), "stream_synchronize default");
          break;
        case 2: {  // everything on the thread's stream, then an event
          note(rtm::launch(dev, s, fill(d, words, tag ^ 1u)), "launch stream");
          note(rtm::launch(dev, s,
                           [d, words] {
                             auto* w = view<uint32_t>(d);
                             for (size_t i = 0; i < words; ++i) w[i] ^= 1u;
                           }),
               "launch stream 2");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, s), "d2h async");
          rtm::Event ev = nullptr;
          note(rtm::event_create(dev, &ev), "event_create");
          note(rtm::event_record(dev, ev, s), "event_record");
          note(rtm::event_synchronize(dev, ev), "event_synchronize");
          note(rtm::event_destroy(dev, ev), "event_destroy");
          note(rtm::stream_synchronize(dev, s), "stream_synchronize");
          break;
        }
        case 3: {  // written on the thread's stream, read on the default one after an event
          rtm::Event ev = nullptr;
          note(rtm::event_create(dev, &ev), "event_create");
          note(rtm::launch(dev, s, fill(d, words, tag)), "launch stream");
          note(rtm::event_record(dev, ev, s), "event_record");
          note(rtm::stream_wait_event(dev, nullptr, ev), "stream_wait_event default");
          note(rtm::memcpy(back.data(), d, bytes, CopyKind::DeviceToHost, dev, nullptr),
               "d2h default");
          note(rtm::event_destroy(dev, ev), "event_destroy");  // queued waits keep it alive
          note(rtm::stream_synchronize(dev, nullptr), "stream_synchronize default");
          break;
        }
      }
      if (back != host) bad++;
      note(rtm::free(dev, d), "free");
      ops++;
    }
    for (int dev = 0; dev < kDevices; ++dev)
      note(rtm::stream_destroy(dev, mine[dev]), "stream_destroy");
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  stop = true;
  for (auto& t : ts) t.join();
  for (int dev = 0; dev < kDevices; ++dev) CHECK_OK(rtm::device_synchronize(dev));
  CHECK(ops > 200);
  CHECK(bad == 0);
  if (failed_calls != 0)
    harness::record_failure(__FILE__, __LINE__, "stress call failed: " + first_err);
  for (int dev = 0; dev < kDevices; ++dev) CHECK(free_of(dev) == kCap);
  std::string st = rtm::get_option("stats");
  CHECK(stat_field(st, "live_streams") == 0 && stat_field(st, "live_events") == 0);
  CHECK(contains(st, "\"live_allocations\": 0, \"free_blocks\": 1,"));
  std::printf("  stress: %d threads, %ld iterations in 1 s\n", kThreads, ops.load());
}

// ---- micro-benchmarks (printed, asserted only loosely) ------------------------------

double ns_per(const std::function<void()>& body, int iters) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) body();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

TEST(stream_benchmarks) {
  const double ld = ns_per([] { (void)rtm::launch(0, nullptr, [] {}); }, 100000);
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  const double lds = ns_per([] {
    (void)rtm::launch(0, nullptr, [] {});
    (void)rtm::stream_synchronize(0, nullptr);
  }, 5000);
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  const double ls = ns_per([&] { (void)rtm::launch(0, s, [] {}); }, 100000);
  CHECK_OK(rtm::stream_synchronize(0, s));
  const double lss = ns_per([&] {
    (void)rtm::launch(0, s, [] {});
    (void)rtm::stream_synchronize(0, s);
  }, 5000);
  CHECK_OK(rtm::stream_destroy(0, s));
  std::printf("bench: launch default stream (enqueue only): %.0f ns; enqueue+sync round trip: %.0f ns\n",
              ld, lds);
  std::printf("bench: launch created stream (enqueue only): %.0f ns; enqueue+sync round trip: %.0f ns\n",
              ls, lss);
  CHECK(ld < 100000 && ls < 100000);  // loose: a pathological regression only
}

}  // namespace
