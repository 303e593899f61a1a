// acme runtime tests: device memory shared between processes. Freed pages of
// the shared memory go back to the OS, IPC memory and event handles between
// two processes (open, copy in and out, kernels, bounds, errors, a process
// that exits), a forked child's memory is its own, the link-speed option.
#include "harness.h"

#include <poll.h>

#include <fstream>
#include <vector>

namespace {

constexpr int kFileOrder = 5;

// ---- two processes -------------------------------------------------------------------

// A pipe with timeouts (a peer that never answers is a failure, not a hang).
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (pipe(fd) != 0) fd[0] = fd[1] = -1;
  }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  bool put(const void* buf, size_t n) const {
    return write(fd[1], buf, n) == static_cast<ssize_t>(n);
  }
  bool get(void* buf, size_t n, int timeout_ms = 10000) const {
    char* p = static_cast<char*>(buf);
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (n) {
      pollfd pfd{fd[0], POLLIN, 0};
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
      if (left <= 0 || poll(&pfd, 1, left) <= 0) return false;
      const ssize_t got = read(fd[0], p, n);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  bool signal() const { return put("x", 1); }
  bool wait(int timeout_ms = 10000) const {
    char c;
    return get(&c, 1, timeout_ms);
  }
};

// A forked child running `fn` (exit 0 when it returns; no core file), while
// the parent goes on; finish() reaps it (killing it after timeout_ms).
pid_t start_child(const std::function<void()>& fn) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    fn();
    _exit(0);
  }
  return pid;
}
int finish(pid_t pid, int timeout_ms = 15000) {
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

uint64_t rss_shmem_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssShmem:", 0) == 0) return std::strtoull(line.c_str() + 9, nullptr, 10);
  return 0;
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 7 + seed) & 0xff);
  return v;
}

// ---- tests -------------------------------------------------------------------------------

TEST(link_gbps_option) {
  CHECK(rtm::get_option("link_gbps") == "0");
  CHECK_OK(rtm::set_option("link_gbps", "2.5"));
  CHECK(rtm::get_option("link_gbps") == "2.5");
  CHECK_ST(rtm::set_option("link_gbps", "-1"), Status::InvalidValue);
  CHECK(contains(last(), "link_gbps must be a bandwidth in GB/s"));
  CHECK_ST(rtm::set_option("link_gbps", "fast"), Status::InvalidValue);
  CHECK(rtm::get_option("link_gbps") == "2.5");
  CHECK_OK(rtm::set_option("link_gbps", "0"));
}

// Device memory is a shared file now: a large freed block's pages are punched
// out of it (given back to the OS), as the private memory's were.
TEST(freed_pages_return_to_the_os) {
  constexpr size_t n = 32u << 20;
  const uint64_t before = rss_shmem_kib();
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, n, &d));
  std::vector<unsigned char> ones(n, 1);
  CHECK_OK(rtm::memcpy(d, ones.data(), n, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  const uint64_t touched = rss_shmem_kib();
  CHECK(touched >= before + (30u << 10));
  CHECK_OK(rtm::free(0, d));
  const uint64_t after = rss_shmem_kib();
  REQUIRE(after + (30u << 10) <= touched, "RssShmem %llu KiB before, %llu touched, %llu after free",
          (unsigned long long)before, (unsigned long long)touched, (unsigned long long)after);
}

// A handle made here, opened in another process: copies in and out, a kernel
// through its view, a device-to-device copy, bounds, and the host still cannot
// read it there. The other process's writes are seen here.
TEST(ipc_mem_handles) {
  constexpr size_t kBytes = (1u << 20) + 100;
  void* d = nullptr;
  CHECK_OK(rtm::malloc(1, kBytes, &d));
  const auto pat = pattern(kBytes, 3);
  CHECK_OK(rtm::memcpy(d, pat.data(), kBytes, CopyKind::HostToDevice, 1, nullptr));
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  rtm::IpcMemHandle h{};
  CHECK_OK(rtm::ipc_get_mem_handle(1, d, &h));
  rtm::IpcMemHandle again{};
  CHECK_OK(rtm::ipc_get_mem_handle(1, d, &again));
  CHECK(std::memcmp(&h, &again, sizeof h) == 0);
  void* self = nullptr;
  CHECK_ST(rtm::ipc_open_mem_handle(0, h, &self), Status::InvalidValue);
  CHECK(contains(last(), "this process itself"));

  const pid_t child = start_child([h, &pat] {
    int code = 0;
    void* p = nullptr;
    void* p2 = nullptr;
    if (rtm::ipc_open_mem_handle(0, h, &p) != Status::Ok || !p) _exit(1);
    if (rtm::ipc_open_mem_handle(0, h, &p2) != Status::Ok || p2 != p) code |= 2;
    std::vector<unsigned char> got(kBytes);
    if (rtm::memcpy(got.data(), p, kBytes, CopyKind::DeviceToHost, 0, nullptr) != Status::Ok ||
        rtm::stream_synchronize(0, nullptr) != Status::Ok || got != pat)
      code |= 4;
    // Bounded by the allocation the handle names.
    if (rtm::memcpy(got.data(), p, kBytes + 1, CopyKind::DeviceToHost, 0, nullptr) !=
            Status::InvalidValue ||
        !contains(last(), "overruns the memory opened from an IPC handle"))
      code |= 8;
    if (rtm::free(0, p) != Status::InvalidValue || !contains(last(), "acmeIpcCloseMemHandle"))
      code |= 16;
    // A kernel through its view, and a copy in.
    const unsigned char tail[4] = {1, 2, 3, 4};
    if (rtm::launch(0, nullptr, [p] { view<unsigned char>(p)[0] = 0xAB; }) != Status::Ok ||
        rtm::memcpy(static_cast<char*>(p) + kBytes - 4, tail, 4, CopyKind::HostToDevice, 0,
                    nullptr) != Status::Ok ||
        rtm::stream_synchronize(0, nullptr) != Status::Ok)
      code |= 32;
    // Device to device, into memory of this process.
    void* q = nullptr;
    unsigned char first = 0;
    if (rtm::malloc(0, kBytes, &q) != Status::Ok ||
        rtm::memcpy(q, p, kBytes, CopyKind::DeviceToDevice, 0, nullptr) != Status::Ok ||
        rtm::memcpy(&first, q, 1, CopyKind::DeviceToHost, 0, nullptr) != Status::Ok ||
        rtm::stream_synchronize(0, nullptr) != Status::Ok || first != 0xAB)
      code |= 64;
    // Still device memory: the host dies reading it.
    if (!harness::died_of_segv(run_in_child([p] { (void)*static_cast<volatile char*>(p); }, 5000)))
      code |= 128;
    // The same handle made here names the owner's allocation.
    rtm::IpcMemHandle back{};
    if (rtm::ipc_get_mem_handle(0, p, &back) != Status::Ok ||
        std::memcmp(&back, &h, sizeof h) != 0)
      code |= 256;
    if (rtm::ipc_close_mem_handle(0, p) != Status::Ok ||
        rtm::ipc_close_mem_handle(0, p) != Status::Ok ||
        rtm::ipc_close_mem_handle(0, p) != Status::InvalidValue)
      code |= 512;
    rtm::free(0, q);
    _exit(code == 0 ? 0 : 100 + __builtin_ctz(code));  // the first failed step
  });
  const int status = finish(child);
  CHECK_CHILD_OK(status);
  std::vector<unsigned char> got(kBytes);
  CHECK_OK(rtm::memcpy(got.data(), d, kBytes, CopyKind::DeviceToHost, 1, nullptr));
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  auto want = pat;
  want[0] = 0xAB;
  for (int i = 0; i < 4; ++i) want[kBytes - 4 + i] = static_cast<unsigned char>(i + 1);
  CHECK(got == want);
  CHECK_OK(rtm::free(1, d));
}

TEST(ipc_mem_handle_errors) {
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, 4096, &d));
  rtm::IpcMemHandle h{};
  CHECK_ST(rtm::ipc_get_mem_handle(0, static_cast<char*>(d) + 512, &h), Status::InvalidValue);
  CHECK(contains(last(), "not the start of a live allocation"));
  int host = 0;
  CHECK_ST(rtm::ipc_get_mem_handle(0, &host, &h), Status::InvalidValue);
  CHECK_ST(rtm::ipc_get_mem_handle(1, d, &h), Status::InvalidValue);  // device 0's memory
  CHECK_ST(rtm::ipc_get_mem_handle(0, d, nullptr), Status::InvalidValue);
  rtm::IpcMemHandle junk{};
  std::memset(junk.bytes, 0x5a, sizeof junk.bytes);
  void* p = nullptr;
  CHECK_ST(rtm::ipc_open_mem_handle(0, junk, &p), Status::InvalidValue);
  CHECK(contains(last(), "not an acme memory handle"));
  CHECK_ST(rtm::ipc_close_mem_handle(0, d), Status::InvalidValue);

  // A freed allocation cannot be opened.
  CHECK_OK(rtm::ipc_get_mem_handle(0, d, &h));
  CHECK_OK(rtm::free(0, d));
  CHECK_CHILD_OK(run_in_child([h] {
    void* q = nullptr;
    if (rtm::ipc_open_mem_handle(0, h, &q) != Status::InvalidValue) _exit(1);
    if (!contains(last(), "not live any more")) _exit(2);
  }));

  // Nor the memory of a process that exited.
  Pipe to_parent;
  const pid_t child = start_child([&to_parent] {
    void* q = nullptr;
    rtm::IpcMemHandle ch{};
    if (rtm::malloc(0, 1024, &q) != Status::Ok || rtm::ipc_get_mem_handle(0, q, &ch) != Status::Ok)
      _exit(1);
    to_parent.put(&ch, sizeof ch);
  });
  rtm::IpcMemHandle ch{};
  CHECK(to_parent.get(&ch, sizeof ch));
  CHECK_CHILD_OK(finish(child));
  CHECK_ST(rtm::ipc_open_mem_handle(0, ch, &p), Status::InvalidValue);
  CHECK(contains(last(), "cannot reach process"));
}

// An event recorded here after a kernel that is held back; another process
// waits for it (a stream waits, then copies the kernel's result).
TEST(ipc_event_handles) {
  rtm::Stream s = nullptr;
  rtm::Event e = nullptr;
  void* d = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::event_create(0, &e));
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  Gate gate;
  CHECK_OK(rtm::launch(0, s, [d, gate] {
    gate.wait(10000);
    *view<int>(d) = 77;
  }));
  CHECK_OK(rtm::event_record(0, e, s));
  rtm::IpcEventHandle eh{};
  rtm::IpcMemHandle mh{};
  CHECK_OK(rtm::ipc_get_event_handle(0, e, &eh));
  CHECK_OK(rtm::ipc_get_mem_handle(0, d, &mh));
  Pipe to_parent;
  const pid_t child = start_child([&] {
    int code = 0;
    void* p = nullptr;
    rtm::Event ce = nullptr;
    rtm::Stream cs = nullptr;
    if (rtm::ipc_open_mem_handle(1, mh, &p) != Status::Ok ||
        rtm::ipc_open_event_handle(1, eh, &ce) != Status::Ok ||
        rtm::stream_create(1, &cs) != Status::Ok)
      _exit(1);
    bool done = true;
    if (rtm::event_query(1, ce, &done) != Status::Ok || done) code |= 2;
    int value = 0;
    if (rtm::stream_wait_event(1, cs, ce) != Status::Ok ||
        rtm::memcpy(&value, p, sizeof value, CopyKind::DeviceToHost, 1, cs) != Status::Ok)
      code |= 4;
    bool idle = true;
    if (rtm::stream_query(1, cs, &idle) != Status::Ok || idle) code |= 8;
    to_parent.signal();  // queued: now the parent lets its kernel run
    if (rtm::stream_synchronize(1, cs) != Status::Ok || value != 77) code |= 16;
    if (rtm::event_query(1, ce, &done) != Status::Ok || !done ||
        rtm::event_synchronize(1, ce) != Status::Ok)
      code |= 32;
    if (rtm::event_record(1, ce, cs) != Status::InvalidValue) code |= 64;
    float ms = 0;
    rtm::IpcEventHandle back{};
    if (rtm::event_elapsed_ms(ce, ce, &ms) != Status::InvalidValue ||
        rtm::ipc_get_event_handle(1, ce, &back) != Status::Ok ||
        std::memcmp(&back, &eh, sizeof eh) != 0)
      code |= 128;
    rtm::event_destroy(1, ce);
    rtm::stream_destroy(1, cs);
    rtm::ipc_close_mem_handle(1, p);
    _exit(code);
  });
  CHECK(to_parent.wait());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the child's stream waits
  gate.open();
  CHECK_CHILD_OK(finish(child));
  // Recorded again: a handle taken now names the new record.
  CHECK_OK(rtm::event_record(0, e, s));
  rtm::IpcEventHandle eh2{};
  CHECK_OK(rtm::ipc_get_event_handle(0, e, &eh2));
  CHECK(std::memcmp(&eh, &eh2, sizeof eh) != 0);
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_OK(rtm::free(0, d));
}

// The process that owns an event exits before the record completes: waits on
// the opened event end with an error instead of hanging (the owner is a
// zombie here: exited, not reaped yet).
TEST(ipc_event_owner_exits) {
  Pipe to_parent, to_child;
  const pid_t child = start_child([&] {
    rtm::Stream cs = nullptr;
    rtm::Event ce = nullptr;
    Gate never;
    rtm::IpcEventHandle h{};
    if (rtm::stream_create(0, &cs) != Status::Ok || rtm::event_create(0, &ce) != Status::Ok ||
        rtm::launch(0, cs, [never] { never.wait(20000); }) != Status::Ok ||
        rtm::event_record(0, ce, cs) != Status::Ok ||
        rtm::ipc_get_event_handle(0, ce, &h) != Status::Ok)
      _exit(1);
    to_parent.put(&h, sizeof h);
    to_child.wait();
    _exit(0);  // the record never completes
  });
  rtm::IpcEventHandle h{};
  CHECK(to_parent.get(&h, sizeof h));
  rtm::Event pe = nullptr;
  CHECK_OK(rtm::ipc_open_event_handle(0, h, &pe));
  bool done = true;
  CHECK_OK(rtm::event_query(0, pe, &done));
  CHECK(!done);
  rtm::Stream s = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::stream_wait_event(0, s, pe));
  to_child.signal();
  const auto t0 = Clock::now();
  CHECK_ST(rtm::event_synchronize(0, pe), Status::Error);
  CHECK(contains(last(), "exited before the record it names completed"));
  CHECK_ST(rtm::stream_synchronize(0, s), Status::Error);
  CHECK(contains(last(), "exited before the record it names completed"));
  CHECK(ms_since(t0) < 5000);
  CHECK_OK(rtm::event_query(0, pe, &done));
  CHECK(done);  // it never will complete: a poll does not spin forever
  CHECK_OK(rtm::event_destroy(0, pe));
  CHECK_OK(rtm::stream_destroy(0, s));
  CHECK_CHILD_OK(finish(child));
}

// A forked child's device memory is its own copy: its writes stay in it, the
// parent's later writes do not reach it, and it can share its own memory.
TEST(fork_child_memory_is_private) {
  constexpr size_t kBig = (4u << 20) + 1000;
  void *d = nullptr, *big = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  CHECK_OK(rtm::malloc(1, kBig, &big));
  int one = 1;
  const auto pat = pattern(kBig, 11);
  CHECK_OK(rtm::memcpy(d, &one, sizeof one, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::memcpy(big, pat.data(), kBig, CopyKind::HostToDevice, 1, nullptr));
  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::device_synchronize(1));
  Pipe to_parent, to_child;
  const pid_t child = start_child([&] {
    auto read_d = [d] {
      int v = -1;
      if (rtm::memcpy(&v, d, sizeof v, CopyKind::DeviceToHost, 0, nullptr) != Status::Ok ||
          rtm::stream_synchronize(0, nullptr) != Status::Ok)
        return -1;
      return v;
    };
    if (read_d() != 1) _exit(1);
    std::vector<unsigned char> got(kBig);
    if (rtm::memcpy(got.data(), big, kBig, CopyKind::DeviceToHost, 1, nullptr) != Status::Ok ||
        rtm::stream_synchronize(1, nullptr) != Status::Ok || got != pat)
      _exit(2);
    if (rtm::launch(0, nullptr, [d] { *view<int>(d) = 2; }) != Status::Ok || read_d() != 2)
      _exit(3);
    to_parent.signal();
    if (!to_child.wait()) _exit(4);
    if (read_d() != 2) _exit(5);  // the parent's write (3) is not here
    rtm::IpcMemHandle h{};
    if (rtm::ipc_get_mem_handle(0, d, &h) != Status::Ok) _exit(6);
    to_parent.put(&h, sizeof h);
    if (!to_child.wait()) _exit(7);
  });
  CHECK(to_parent.wait());
  int v = 0;
  CHECK_OK(rtm::memcpy(&v, d, sizeof v, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(v == 1);  // the child wrote its own copy
  int three = 3;
  CHECK_OK(rtm::memcpy(d, &three, sizeof three, CopyKind::HostToDevice, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(to_child.signal());
  rtm::IpcMemHandle h{};
  CHECK(to_parent.get(&h, sizeof h));
  void* p = nullptr;
  CHECK_OK(rtm::ipc_open_mem_handle(0, h, &p));
  v = 0;
  CHECK_OK(rtm::memcpy(&v, p, sizeof v, CopyKind::DeviceToHost, 0, nullptr));
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(v == 2);  // the child's memory, shared by the child
  CHECK_OK(rtm::ipc_close_mem_handle(0, p));
  CHECK(to_child.signal());
  CHECK_CHILD_OK(finish(child));
  CHECK_OK(rtm::free(0, d));
  CHECK_OK(rtm::free(1, big));
}

}  // namespace
