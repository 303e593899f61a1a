// acme runtime tests: device memory. Allocation (alloc/free, out of memory,
// coalescing, best fit, alignment), copies and their checks, and discrete
// memory: device addresses are never readable by host code; only runtime
// copies and work running on the device (acmeDeviceView) reach the bytes.
#include "harness.h"

#include <cstring>
#include <random>

namespace {

constexpr int kFileOrder = 2;

TEST(alloc_free_basic) {
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

// Page-locked host memory (the pinned_host primitive): aligned, host-writable,
// and a pointer it did not hand out cannot be freed through it.
TEST(host_alloc_free) {
  void* p = nullptr;
  CHECK_OK(rtm::host_alloc(1000, &p));
  CHECK(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  std::memset(p, 0x5a, 1000);  // host memory: the host reads and writes it
  CHECK(static_cast<unsigned char*>(p)[999] == 0x5a);
  void* z = reinterpret_cast<void*>(1);
  CHECK_OK(rtm::host_alloc(0, &z));  // zero bytes: null, success
  CHECK(z == nullptr);
  int not_ours = 0;
  CHECK_ST(rtm::host_free(&not_ours), Status::InvalidValue);
  CHECK(contains(last(), "not a block of acmeMallocHost"));
  CHECK_OK(rtm::host_free(p));
  CHECK_ST(rtm::host_free(p), Status::InvalidValue);  // freed already
  CHECK_OK(rtm::host_free(nullptr));
}

TEST(oom) {
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

TEST(coalescing_and_holes) {
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

TEST(best_fit) {
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

TEST(alignment_config) {
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
  // Alignment above the page size still gives aligned addresses, and the
  // bytes behind them work (copy in, a kernel, copy out).
  CHECK_OK(rtm::init({1, 4 << 20, 1 << 16}));
  void* p = nullptr;
  CHECK_OK(rtm::malloc(0, 10, &p));
  CHECK(reinterpret_cast<uintptr_t>(p) % (1 << 16) == 0);
  int v = 5, w = 0;
  CHECK_OK(rtm::memcpy(p, &v, sizeof v, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::launch(0, nullptr, [p] { *view<int>(p) *= 3; }));
  CHECK_OK(rtm::memcpy(&w, p, sizeof w, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(w == 15);
  CHECK_OK(rtm::free(0, p));
  init_default();
}

TEST(copies) {
  const size_t n = 3 * 1000 * 1000 + 7;  // not a multiple of anything
  std::vector<unsigned char> src(n), dst(n, 0);
  std::mt19937 rng(1);
  for (auto& c : src) c = static_cast<unsigned char>(rng());
  void *d0, *d0b, *d1;
  CHECK_OK(rtm::malloc(0, n, &d0));
  CHECK_OK(rtm::malloc(0, n, &d0b));
  CHECK_OK(rtm::malloc(1, n, &d1));
  // The adapter's memcpy is queued (here on the default stream); the host
  // buffers stay alive and untouched until the stream is synchronized.
  CHECK_OK(rtm::memcpy(d0, src.data(), n, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(d0b, d0, n, CopyKind::DeviceToDevice, 0, nullptr));
  // memcpy_peer is synchronous but not ordered after queued work: wait first.
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK_OK(rtm::memcpy_peer(d1, 1, d0b, 0, n));
  CHECK_OK(rtm::memcpy(dst.data(), d1, n, CopyKind::DeviceToHost, 1, nullptr));
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  CHECK(dst == src);
  // DeviceToDevice with a source on another device (destination device given).
  std::fill(dst.begin(), dst.end(), 0);
  CHECK_OK(rtm::memcpy(d0, d1, n, CopyKind::DeviceToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(dst.data(), d0, n, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(dst == src);
  // Partial copies at an offset inside an allocation.
  unsigned char four[4] = {9, 8, 7, 6}, back[4] = {};
  CHECK_OK(rtm::memcpy(static_cast<char*>(d0) + 1001, four, 4, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(back, static_cast<char*>(d0) + 1001, 4, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(std::memcmp(four, back, 4) == 0);
  // Host to host on the null stream involves no device: done when it returns.
  CHECK_OK(rtm::memcpy(back, src.data(), 4, CopyKind::HostToHost, 0, nullptr));
  CHECK(std::memcmp(back, src.data(), 4) == 0);
  // ... but on a created stream it is queued behind the stream's work.
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  Gate gate;
  CHECK_OK(rtm::launch(0, s, [gate] { gate.wait(); }));
  CHECK_OK(rtm::memcpy(back, four, 4, CopyKind::HostToHost, 0, s));
  CHECK(std::memcmp(back, src.data(), 4) == 0);  // not yet
  gate.open();
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(std::memcmp(back, four, 4) == 0);
  // Every kind on a created stream.
  std::fill(dst.begin(), dst.end(), 0);
  CHECK_OK(rtm::memcpy(d0b, src.data(), n, CopyKind::HostToDevice, 0, s));
  CHECK_OK(rtm::memcpy(d0, d0b, n, CopyKind::DeviceToDevice, 0, s));
  CHECK_OK(rtm::memcpy(dst.data(), d0, n, CopyKind::DeviceToHost, 0, s));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(dst == src);
  CHECK_OK(rtm::stream_destroy(0, s));
  // The C API's acmeMemcpy is synchronous: the bytes are there when it returns.
  std::fill(dst.begin(), dst.end(), 0);
  CHECK_ACME(acmeMemcpy(dst.data(), d0, n, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(dst == src);
  CHECK_ACME(acmeMemcpyAsync(back, d1, 4, acmeMemcpyDeviceToHost, 1, nullptr), acmeSuccess);
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  CHECK(std::memcmp(back, src.data(), 4) == 0);
  CHECK_OK(rtm::free(0, d0));
  CHECK_OK(rtm::free(0, d0b));
  CHECK_OK(rtm::free(1, d1));
}

// Misuse is caught at call time, before anything is queued.
TEST(copy_checks) {
  const size_t n = 4096;
  std::vector<unsigned char> src(n, 1), dst(n, 0);
  void *d0, *d1;
  CHECK_OK(rtm::malloc(0, n, &d0));
  CHECK_OK(rtm::malloc(1, n, &d1));
  CHECK_ST(rtm::memcpy(d0, src.data(), n + 1, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);
  CHECK(contains(last(), "overruns"));
  CHECK_ST(rtm::memcpy(static_cast<char*>(d0) + n, src.data(), 1, CopyKind::HostToDevice, 0,
                       nullptr),
           Status::InvalidValue);  // one past the end: the alignment padding is not the block's
  CHECK_ST(rtm::memcpy(d1, src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);  // d1 is device 1's
  CHECK(contains(last(), "device 1"));
  CHECK_ST(rtm::memcpy(dst.data(), src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);  // destination is host memory
  CHECK(contains(last(), "not device memory"));
  CHECK_ST(rtm::memcpy(dst.data(), d0, 16, CopyKind::HostToHost, 0, nullptr),
           Status::InvalidValue);  // source is device memory: a missed H2D/D2H
  CHECK(contains(last(), "device memory of device 0"));
  CHECK_ST(rtm::memcpy(d0, dst.data(), 16, CopyKind::HostToHost, 0, nullptr),
           Status::InvalidValue);
  CHECK_ST(rtm::memcpy(dst.data(), d0, 16, CopyKind::DeviceToHost, 1, nullptr),
           Status::InvalidValue);  // d0 is not device 1's
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, static_cast<CopyKind>(9), 0, nullptr),
           Status::InvalidValue);
  CHECK_ST(rtm::memcpy(d0, nullptr, 16, CopyKind::HostToDevice, 0, nullptr), Status::InvalidValue);
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, CopyKind::HostToDevice, 3, nullptr),
           Status::InvalidDevice);
  CHECK_ST(rtm::memcpy_peer(d1, 1, d0, 1, 16), Status::InvalidValue);  // d0 is device 0's
  CHECK_ST(rtm::memcpy_peer(d1, 1, d0, 0, n + 1), Status::InvalidValue);
  CHECK_ACME(acmeMemcpy(d0, src.data(), n + 1, acmeMemcpyHostToDevice, 0), acmeErrorInvalidValue);
  CHECK_OK(rtm::memcpy(d0, nullptr, 0, CopyKind::HostToDevice, 0, nullptr));  // empty copy
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK_OK(rtm::free(0, d0));
  // A freed block is no longer a valid copy target.
  CHECK_ST(rtm::memcpy(d0, src.data(), 16, CopyKind::HostToDevice, 0, nullptr),
           Status::InvalidValue);
  CHECK_OK(rtm::free(1, d1));
}

// acmeMemcpy queues on the default stream and waits: with a slow device, the
// adapter's (queued) copy leaves the host buffer stale until a synchronize;
// the synchronous one does not.
TEST(memcpy_sync_waits) {
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 64, &d));
  constexpr int kSlowUs = 100000;  // 100 ms per queued item
  SlowDevice slow(kSlowUs);
  int v = 7, w = -1;
  auto t0 = Clock::now();
  CHECK_ACME(acmeMemcpy(d, &v, sizeof v, acmeMemcpyHostToDevice, 0), acmeSuccess);
  CHECK(ms_since(t0) >= kSlowUs / 1000 - 1);  // it waited for the slow device
  v = 8;  // the device already has 7
  t0 = Clock::now();
  CHECK_ACME(acmeMemcpy(&w, d, sizeof w, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(w == 7);
  CHECK(ms_since(t0) >= kSlowUs / 1000 - 1);
  // The queued copy returns at once; the host sees stale bytes until it waits.
  w = -1;
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, nullptr));
  CHECK(w == -1);
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(w == 7);
  // acmeMemcpy is ordered after earlier work on the default stream.
  CHECK_OK(rtm::launch(0, nullptr, [d] { *view<int>(d) = 99; }));
  CHECK_ACME(acmeMemcpy(&w, d, sizeof w, acmeMemcpyDeviceToHost, 0), acmeSuccess);
  CHECK(w == 99);
  CHECK_OK(rtm::free(0, d));
}

// In-process probe of whether the host can read [p, p+1): write(2) from p
// into a pipe fails with EFAULT where a dereference would die of SIGSEGV.
bool host_can_read(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return true;  // cannot tell: report as readable (a failure)
  const ssize_t r = write(fds[1], p, 1);
  const int err = errno;
  close(fds[0]);
  close(fds[1]);
  return !(r == -1 && err == EFAULT);
}

// Device memory is not host memory: host code dereferencing a device address
// dies of SIGSEGV, on the main thread and on any other, before and after
// device work used the memory, and while it is using it.
TEST(host_dereference_segfaults) {
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 4096, &d));
  auto* p = static_cast<volatile int*>(d);
  auto read_main = [p] { (void)*p; };
  auto write_main = [p] { *p = 5; };
  auto read_thread = [p] { std::thread([p] { (void)*p; }).join(); };
  auto write_thread = [p] { std::thread([p] { *p = 5; }).join(); };

  // Fresh memory that no work has touched yet.
  CHECK_CHILD_SEGV(run_in_child(read_main));
  CHECK_CHILD_SEGV(run_in_child(write_main));
  CHECK_CHILD_SEGV(run_in_child(read_thread));
  CHECK_CHILD_SEGV(run_in_child(write_thread));
  CHECK(!host_can_read(d));
  bool other_thread_can_read = true;
  std::thread([&] { other_thread_can_read = host_can_read(d); }).join();
  CHECK(!other_thread_can_read);

  // Work runs: a copy in, a kernel through its view, a copy out.
  int v = 1234, w = 0;
  CHECK_OK(rtm::memcpy(d, &v, sizeof v, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::launch(0, nullptr, [d] { *view<int>(d) += 1; }));
  CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(w == 1235);

  // Afterwards: still closed to the host, in this process and in children.
  CHECK_CHILD_SEGV(run_in_child(read_main));
  CHECK_CHILD_SEGV(run_in_child(write_main));
  CHECK_CHILD_SEGV(run_in_child(read_thread));
  CHECK_CHILD_SEGV(run_in_child(write_thread));
  CHECK(!host_can_read(d));
  CHECK(!host_can_read(static_cast<char*>(d) + 4095));

  // While a kernel runs on the device (in the child: its default stream is
  // started again), the host still cannot read: device work does not open
  // the memory to other threads. The child first checks that device work
  // there reaches the bytes (exit codes 3, 4 say it did not).
  CHECK_CHILD_SEGV(run_in_child([d, p] {
    std::atomic<int> seen{-1};
    std::atomic<bool> in_kernel{false};
    Gate never;
    if (rtm::launch(0, nullptr, [d, &seen] { seen = *view<int>(d); }) != Status::Ok ||
        rtm::stream_synchronize(0, nullptr) != Status::Ok || seen != 1235)
      _exit(3);
    if (rtm::launch(0, nullptr, [d, &in_kernel, never] {
          *view<int>(d) += 0;
          in_kernel = true;
          never.wait(3000);
        }) != Status::Ok ||
        !wait_for(in_kernel))
      _exit(4);
    (void)*p;
    _exit(0);
  }));
  CHECK_OK(rtm::free(0, d));
}

// acmeDeviceView (and the adapter's device_view, device_or_host_view) answer
// only inside work running on the device.
TEST(device_view_only_on_device) {
  void *d = nullptr, *d1 = nullptr;
  CHECK_OK(rtm::malloc(0, 256, &d));
  CHECK_OK(rtm::malloc(1, 64, &d1));
  int host = 5;
  char* const dc = static_cast<char*>(d);

  // Host code: no view of device memory, and a message saying why.
  CHECK(acmeOnDevice() == 0);
  CHECK(acmeDeviceView(d) == nullptr);
  CHECK(contains(acmeGetLastErrorString(), "from the host"));
  CHECK(acmeDeviceView(dc + 100) == nullptr);
  CHECK(rtm::device_view(d) == nullptr);
  CHECK(acmeDeviceOrHostView(d) == nullptr);
  CHECK(rtm::device_or_host_view(d1) == nullptr);
  CHECK(acmeDeviceOrHostView(&host) == &host);  // host memory stays as it is
  CHECK(rtm::device_or_host_view(&host) == &host);

  struct Seen {
    int on_device = -1;
    void* v = nullptr;
    void* v_offset = nullptr;
    void* v_other_device = nullptr;
    void* adapter_v = nullptr;
    void* or_host_device = nullptr;
    void* or_host_host = nullptr;
    void* host_v = reinterpret_cast<void*>(1);
    std::string host_v_msg;
    void* spawned_v = reinterpret_cast<void*>(1);
    int spawned_on_device = -1;
  };
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  int value = 0;
  for (rtm::Stream stream : {static_cast<rtm::Stream>(nullptr), s}) {
    Seen seen;
    ++value;
    CHECK_OK(rtm::launch(0, stream, [&seen, d, d1, dc, &host, value] {
      seen.on_device = acmeOnDevice();
      seen.v = acmeDeviceView(d);
      seen.v_offset = acmeDeviceView(dc + 100);
      seen.v_other_device = acmeDeviceView(d1);  // device memory of any device
      seen.adapter_v = rtm::device_view(d);
      seen.or_host_device = acmeDeviceOrHostView(d);
      seen.or_host_host = acmeDeviceOrHostView(&host);
      seen.host_v = acmeDeviceView(&host);
      seen.host_v_msg = acmeGetLastErrorString();
      if (seen.v) *static_cast<int*>(seen.v) = value;
      // A thread the work starts is not device work.
      std::thread([&seen, d] {
        seen.spawned_v = acmeDeviceView(d);
        seen.spawned_on_device = acmeOnDevice();
      }).join();
    }));
    int w = 0;
    CHECK_OK(rtm::memcpy(&w, d, sizeof w, CopyKind::DeviceToHost, 0, stream));
    CHECK_OK(rtm::stream_synchronize(0, stream));
    CHECK(seen.on_device == 1);
    CHECK(seen.v != nullptr && seen.v != d);
    CHECK(seen.v_offset == static_cast<char*>(seen.v) + 100);
    CHECK(seen.v_other_device != nullptr && seen.v_other_device != d1);
    CHECK(seen.adapter_v == seen.v);
    CHECK(seen.or_host_device == seen.v);
    CHECK(seen.or_host_host == &host);
    CHECK(seen.host_v == nullptr && contains(seen.host_v_msg, "not device memory"));
    CHECK(seen.spawned_v == nullptr && seen.spawned_on_device == 0);
    CHECK(w == value);  // written through the view, read back by a copy
  }
  // launch_host_kernel (a C function pointer) runs as device work too.
  struct Arg {
    void* d;
    int seen;
  } arg{d, -1};
  CHECK_OK(rtm::launch_host_kernel(
      0, s, [](void* a) {
        auto* x = static_cast<Arg*>(a);
        int* v = static_cast<int*>(acmeDeviceView(x->d));
        x->seen = v ? *v : -2;
      },
      &arg));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK(arg.seen == value);
  CHECK_OK(rtm::stream_destroy(0, s));
  // Still nothing for the host afterwards.
  CHECK(acmeDeviceView(d) == nullptr && acmeOnDevice() == 0);
  CHECK_OK(rtm::free(0, d));
  CHECK_OK(rtm::free(1, d1));
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

TEST(memory_benchmarks) {
  // malloc+free of 4 KiB with 1000 other live blocks around.
  std::vector<void*> live(1000);
  for (auto& p : live) CHECK_OK(rtm::malloc(0, 4096 + 512 * (&p - live.data()) % 8192, &p));
  void* p = nullptr;
  const double mf = ns_per([&] {
    (void)rtm::malloc(0, 4096, &p);
    (void)rtm::free(0, p);
  }, 200000);
  for (auto q : live) CHECK_OK(rtm::free(0, q));

  // Copies through the adapter (queued on the default stream), each waited for.
  const size_t n = 64u << 20;
  std::vector<char> host(n, 1), host2(n);
  void *d0, *d1;
  CHECK_OK(rtm::malloc(0, n, &d0));
  CHECK_OK(rtm::malloc(1, n, &d1));
  const double h2d = gbps(n, [&] {
    (void)rtm::memcpy(d0, host.data(), n, CopyKind::HostToDevice, 0, nullptr);
    (void)rtm::stream_synchronize(0, nullptr);
  }, 5);
  const double d2h = gbps(n, [&] {
    (void)rtm::memcpy(host2.data(), d0, n, CopyKind::DeviceToHost, 0, nullptr);
    (void)rtm::stream_synchronize(0, nullptr);
  }, 5);
  const double d2d = gbps(n, [&] { (void)rtm::memcpy_peer(d1, 1, d0, 0, n); }, 5);
  CHECK(std::memcmp(host.data(), host2.data(), 4096) == 0);
  char small[256];
  const double cp_small = ns_per([&] {
    (void)acmeMemcpy(small, d0, sizeof small, acmeMemcpyDeviceToHost, 0);
  }, 20000);
  CHECK_OK(rtm::free(0, d0));
  CHECK_OK(rtm::free(1, d1));
  std::printf("bench: malloc+free 4KiB (1000 live blocks): %.0f ns/pair\n", mf);
  std::printf("bench: memcpy 64 MiB: H2D %.2f GB/s, D2H %.2f GB/s, D2D(peer) %.2f GB/s\n", h2d,
              d2h, d2d);
  std::printf("bench: acmeMemcpy 256 B D2H (queued on the default stream + wait): %.0f ns\n",
              cp_small);
  // Loose sanity bounds: catch pathological regressions, not machine noise.
  CHECK(mf < 20000);
  CHECK(h2d > 0.2 && d2h > 0.2);
}

}  // namespace
