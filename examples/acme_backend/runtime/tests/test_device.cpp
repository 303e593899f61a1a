// acme runtime tests: devices. Init and its failures, device count, errors,
// options (slow device, fault injection, device loss, versions, stats).
// This file holds the program's main(): its tests run first ("init" checks
// the state before anything is initialized).
#include "harness.h"

#include <utility>

ACME_TEST_MAIN("acme runtime tests")

namespace {

constexpr int kFileOrder = 1;

TEST_ALWAYS(init) {
  // First test in the process: nothing is initialized yet.
  CHECK(rtm::device_count() == 0);
  void* p = nullptr;
  CHECK_ST(rtm::malloc(0, 16, &p), Status::Error);
  CHECK(contains(last(), "not initialized"));
  CHECK_ST(rtm::launch(0, nullptr, [] {}), Status::Error);
  CHECK_ST(rtm::stream_synchronize(0, nullptr), Status::Error);
  CHECK(contains(last(), "not initialized"));
  CHECK_ST(rtm::init({2, kCap, 3}), Status::InvalidValue);
  CHECK(contains(last(), "power of two"));
  CHECK_ST(rtm::init({0, kCap, kAlign}), Status::InvalidValue);
  CHECK_ST(rtm::init({1, 100, 512}), Status::InvalidValue);
  CHECK(rtm::device_count() == 0);
  init_default();
  CHECK(rtm::device_count() == kDevices);
  CHECK(rtm::get_option("device_count") == "2");
  size_t f = 0, t = 0;
  CHECK_OK(rtm::memory_info(1, &f, &t));
  CHECK(f == kCap && t == kCap);
  // Each device's default stream exists from the start: synchronizing it is fine.
  for (int dev = 0; dev < kDevices; ++dev) CHECK_OK(rtm::stream_synchronize(dev, nullptr));
}

TEST(invalid_arguments) {
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
  CHECK_ST(rtm::stream_synchronize(2, nullptr), Status::InvalidDevice);
  CHECK_ST(rtm::launch(2, nullptr, [] {}), Status::InvalidDevice);
  CHECK_ST(rtm::launch(0, nullptr, std::function<void()>()), Status::InvalidValue);
  CHECK_ST(rtm::launch_host_kernel(0, nullptr, nullptr, nullptr), Status::InvalidValue);
  CHECK(contains(last(), "null function"));

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
  CHECK_ST(rtm::launch(0, &host, [] {}), Status::InvalidValue);
  CHECK_ST(rtm::event_record(0, &host, nullptr), Status::InvalidValue);
  CHECK_ST(rtm::event_destroy(0, &host), Status::InvalidValue);
  CHECK_ST(rtm::stream_wait_event(0, nullptr, &host), Status::InvalidValue);
  CHECK_ST(rtm::stream_destroy(0, nullptr), Status::InvalidValue);
  CHECK(contains(last(), "default stream cannot be destroyed"));
  // A stream used with another device's index.
  CHECK_OK(rtm::stream_create(1, &s));
  CHECK_ST(rtm::stream_synchronize(0, s), Status::InvalidValue);
  CHECK(contains(last(), "belongs to device 1"));
  CHECK_OK(rtm::stream_destroy(1, s));
  CHECK_ST(rtm::stream_synchronize(1, s), Status::InvalidValue);  // destroyed
}

TEST(last_error_is_thread_local) {
  std::string m1, m2;
  std::thread t1([&] {
    void* p;
    (void)rtm::malloc(9, 1, &p);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m1 = rtm::last_error();
  });
  std::thread t2([&] {
    int x;
    (void)rtm::free(0, &x);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m2 = rtm::last_error();
  });
  t1.join();
  t2.join();
  CHECK(contains(m1, "invalid device index 9"));
  CHECK(contains(m2, "free(") && !contains(m2, "index 9"));
}

TEST(options_and_stats) {
  CHECK_OK(rtm::set_option("stats", "reset"));
  const std::string s0 = rtm::get_option("stats");
  CHECK(stat_field(s0, "mallocs") == 0 && stat_field(s0, "copies") == 0);
  CHECK(stat_field(s0, "launches") == 0 && stat_field(s0, "host_waits") == 0);
  CHECK(!contains(s0, "kernel_begins"));  // protect mode and its counter are gone
  void* p = nullptr;
  CHECK_OK(rtm::malloc(1, 1000, &p));
  char buf[1000] = {};
  CHECK_OK(rtm::memcpy(p, buf, 1000, CopyKind::HostToDevice, 1, nullptr));
  CHECK_OK(rtm::memcpy(buf, p, 500, CopyKind::DeviceToHost, 1, nullptr));
  CHECK_OK(rtm::launch(1, nullptr, [] {}));
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  const std::string s1 = rtm::get_option("stats");
  CHECK(stat_field(s1, "mallocs") == 1);
  CHECK(stat_field(s1, "malloc_bytes") == 1000);
  CHECK(stat_field(s1, "copies") == 2 && stat_field(s1, "copy_bytes") == 1500);
  CHECK(stat_field(s1, "h2d") == 1 && stat_field(s1, "d2h") == 1);
  CHECK(stat_field(s1, "launches") == 1);
  CHECK(contains(s1, "\"live_allocations\": 1"));
  CHECK_OK(rtm::free(1, p));
  CHECK(stat_of("frees") == 1);
  CHECK(rtm::get_option("device_count") == std::to_string(kDevices));
  CHECK(rtm::get_option("capacity") == std::to_string(kCap));
  CHECK(rtm::get_option("alignment") == std::to_string(kAlign));
  CHECK_ST(rtm::set_option("device_count", "4"), Status::InvalidValue);
  CHECK(contains(last(), "read-only"));
  CHECK_ST(rtm::set_option("stats", "later"), Status::InvalidValue);
  CHECK_ST(rtm::set_option("no_such_option", "1"), Status::InvalidValue);
  CHECK(contains(last(), "unknown option 'no_such_option'"));
  CHECK(rtm::get_option("no_such_option").empty());
  CHECK(contains(last(), "unknown option"));
}

// Stats "host_waits": one per synchronize call (stream, event, device, and the
// synchronous acmeMemcpy); queuing work, queries and refused calls never wait.
TEST(host_waits_counts_synchronize) {
  rtm::Stream s = nullptr;
  rtm::Event e = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::event_create(0, &e));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  int v = 1, w = 0;
  CHECK_OK(rtm::set_option("stats", "reset"));
  CHECK(stat_of("host_waits") == 0);

  CHECK_OK(rtm::launch(0, nullptr, [] {}));
  CHECK_OK(rtm::launch(0, s, [] {}));
  CHECK_OK(rtm::memcpy(d, &v, sizeof v, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, s));
  CHECK_OK(rtm::event_record(0, e, s));
  CHECK_OK(rtm::stream_wait_event(0, nullptr, e));
  bool flag = false;
  CHECK_OK(rtm::stream_query(0, nullptr, &flag));
  CHECK_OK(rtm::event_query(0, e, &flag));
  CHECK(stat_of("host_waits") == 0);

  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(stat_of("host_waits") == 1);
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(stat_of("host_waits") == 2);
  CHECK_OK(rtm::event_synchronize(0, e));
  CHECK(stat_of("host_waits") == 3);
  CHECK_OK(rtm::device_synchronize(0));
  CHECK(stat_of("host_waits") == 4);
  CHECK_ACME(acmeMemcpy(&w, d, sizeof w, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(w == 1);
  CHECK(stat_of("host_waits") == 5);
  CHECK_ACME(acmeMemcpy(&w, &v, sizeof w, acmeMemcpyHostToHost, 0), acmeSuccess);
  CHECK(stat_of("host_waits") == 5);  // no device involved: nothing to wait for
  int bogus = 0;
  CHECK_ST(rtm::stream_synchronize(0, &bogus), Status::InvalidValue);
  CHECK(stat_of("host_waits") == 5);

  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

TEST(protect_option_gone) {
  // Device memory is never readable by the host: there is no mode to switch.
  for (const char* v : {"1", "0"}) {
    CHECK_ST(rtm::set_option("protect", v), Status::InvalidValue);
    CHECK(contains(last(), "'protect' is gone"));
  }
  CHECK(rtm::get_option("protect").empty());
  CHECK(contains(last(), "unknown option 'protect'"));
  // ACME_PROTECT is not read any more: "0" turns nothing off.
  setenv("ACME_PROTECT", "0", 1);
  init_default();
  unsetenv("ACME_PROTECT");
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  CHECK_CHILD_SEGV(run_in_child([d] { (void)*static_cast<volatile char*>(d); }));
  CHECK_OK(rtm::free(0, d));
  // kernel_begin/kernel_end (kernel_launch: inline backends) do nothing for acme.
  rtm::kernel_begin();
  CHECK_CHILD_SEGV(run_in_child([d] { (void)*static_cast<volatile char*>(d); }));
  rtm::kernel_end();
}

TEST(slow_device_option) {
  CHECK(rtm::get_option("slow_device") == "0");
  CHECK_OK(rtm::set_option("slow_device", "2500"));
  CHECK(rtm::get_option("slow_device") == "2500");
  CHECK_OK(rtm::set_option("slow_device", "10000000"));  // the maximum: 10 s
  CHECK(rtm::get_option("slow_device") == "10000000");
  for (const char* bad : {"-1", "abc", "", "10000001", "1.5", "12us", "99999999999999999999"}) {
    CHECK_ST(rtm::set_option("slow_device", bad), Status::InvalidValue);
    CHECK(contains(last(), "slow_device must be a delay in microseconds"));
    CHECK(contains(last(), std::string("'") + bad + "'"));
  }
  CHECK(rtm::get_option("slow_device") == "10000000");  // refused values change nothing
  CHECK_OK(rtm::set_option("slow_device", "0"));
  CHECK(rtm::get_option("slow_device") == "0");

  // ACME_SLOW_DEVICE, read at init.
  setenv("ACME_SLOW_DEVICE", "1500", 1);
  init_default();
  unsetenv("ACME_SLOW_DEVICE");
  CHECK(rtm::get_option("slow_device") == "1500");
  CHECK_OK(rtm::set_option("slow_device", "0"));
  setenv("ACME_SLOW_DEVICE", "soon", 1);
  CHECK_ST(rtm::init({1, kCap / 2, kAlign}), Status::InvalidValue);
  unsetenv("ACME_SLOW_DEVICE");
  CHECK(contains(last(), "ACME_SLOW_DEVICE") && contains(last(), "'soon'"));
  CHECK(rtm::device_count() == kDevices);  // the failed init changed nothing
  CHECK(rtm::get_option("slow_device") == "0");
  init_default();  // without the variable: the delay stays as it is
  CHECK(rtm::get_option("slow_device") == "0");
}

std::vector<bool> malloc_fault_pattern(const char* seed, int n, int* failures, bool* all_oom,
                                       bool* all_say_injected) {
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

TEST(fault_injection) {
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

  // memcpy faults: Error at call time (the copy is queued only when it did not
  // fail), the message says injected.
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
  CHECK_OK(rtm::stream_synchronize(0, nullptr));  // `buf` must outlive the queued copies
  CHECK(fails > n * 0.07 && fails < n * 0.13);
  CHECK(all_error && all_msg);
  CHECK_OK(rtm::set_option("fault_memcpy", "1"));
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  // On a stream too the fault is reported at call time (deterministic order).
  CHECK_ST(rtm::memcpy(d, buf, 64, CopyKind::HostToDevice, 0, s), Status::Error);
  CHECK_ACME(acmeMemcpy(buf, d, 64, acmeMemcpyDeviceToHost, 0), acmeErrorRuntime);
  CHECK(contains(last(), "injected memcpy fault"));
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

TEST(device_loss_and_versions) {
  CHECK(rtm::get_option("runtime_version") == ACME_RUNTIME_VERSION);
  CHECK(rtm::get_option("built_driver_version") == ACME_DRIVER_VERSION);
  CHECK(rtm::get_option("driver_version") == ACME_DRIVER_VERSION);  // env unset: as built
  CHECK_ST(rtm::set_option("driver_version", "9"), Status::InvalidValue);
  void* p = nullptr;
  CHECK_OK(rtm::malloc(1, 256, &p));
  char buf[256] = {};
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(1, &s));
  CHECK_OK(rtm::set_option("device_lost", "1"));
  CHECK(rtm::get_option("device_lost") == "1");
  CHECK_ST(rtm::memcpy(p, buf, 256, CopyKind::HostToDevice, 1, nullptr), Status::Error);
  CHECK(contains(last(), "device 1 was lost"));
  CHECK_ACME(acmeMemcpy(buf, p, 256, acmeMemcpyDeviceToHost, 1), acmeErrorRuntime);
  void* q = nullptr;
  CHECK_ST(rtm::malloc(1, 256, &q), Status::Error);
  CHECK_ST(rtm::launch(1, nullptr, [] {}), Status::Error);
  CHECK_ST(rtm::launch(1, s, [] {}), Status::Error);
  CHECK_ST(rtm::stream_synchronize(1, nullptr), Status::Error);
  CHECK_ST(rtm::stream_synchronize(1, s), Status::Error);
  CHECK_ST(rtm::device_synchronize(1), Status::Error);
  CHECK(contains(last(), "device 1 was lost"));
  CHECK_OK(rtm::malloc(0, 256, &q));  // the other device is fine
  CHECK_OK(rtm::launch(0, nullptr, [] {}));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::free(0, q));
  CHECK_OK(rtm::free(1, p));  // cleanup works on a lost device
  CHECK_OK(rtm::stream_destroy(1, s));
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
    CHECK_ST(rtm::init({kDevices, kCap, kAlign}), Status::Error);
    CHECK(contains(last(), std::string("acme: init: ") + cause));
  }
  setenv("ACME_SIMULATE_INIT_FAILURE", "sometimes", 1);
  CHECK_ST(rtm::init({kDevices, kCap, kAlign}), Status::InvalidValue);
  unsetenv("ACME_SIMULATE_INIT_FAILURE");
  setenv("ACME_DRIVER_VERSION", "2.0.0", 1);
  CHECK_ST(rtm::init({kDevices, kCap, kAlign}), Status::Error);
  CHECK(contains(last(), "installed acme driver is 2.0.0"));
  unsetenv("ACME_DRIVER_VERSION");
  CHECK(rtm::device_count() == kDevices);
  init_default();
}

}  // namespace
