// acme vendor runtime: device memory and events shared between processes of
// one machine (IPC handles, as CUDA's), and the interconnect's hooks acmeccl
// maps peers' device memory with (ipc.h).
//
// Each device's memory is a memfd (arena.h). A process that gives out a handle
// (or joins an acmeccl communicator) starts a small server thread on a unix
// socket in the abstract namespace, "acme-ipc.<pid>.<nonce>", that hands the
// file over SCM_RIGHTS to a process of the same user that asks for it: no
// /proc/<pid>/fd, no pidfd_getfd, so no ptrace rights are needed. The process
// that opens a handle reserves device addresses of its own (PROT_NONE, as all
// device addresses are) and maps the peer's pages as their view; the region is
// registered so that copies, kernels and views treat it as memory of the
// device it was opened on, bounded by the allocation the handle names.
//
// An event whose handle is given out mirrors its reached generation into a
// slot of a shared page of its process (also served by the server); the handle
// carries the generation recorded when it was taken, and the opened event in
// the other process waits on the slot (a futex on shared memory) for it,
// checking that the owner is still alive.
#include "internal.h"
#include "ipc.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace acme_internal {

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v) || v == 0) {
    static std::atomic<uint64_t> counter{0};
    v = Faults::mix(static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                    (static_cast<uint64_t>(getpid()) << 32) ^ counter.fetch_add(1));
  }
  return v ? v : 1;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie (exited, not reaped yet) still answers kill(); its state says Z.
  char path[64], buf[256];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // "pid (comm) S ..."
  if (!paren || paren[1] != ' ') return true;
  return paren[2] != 'Z' && paren[2] != 'X';
}

double link_gbps() { return rt().link_gbps.load(std::memory_order_relaxed); }

namespace {

// futex on shared memory (not FUTEX_PRIVATE: the word is in a shared file).
long futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), timeout_ns % 1000000000};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts,
                 nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

constexpr uint32_t kMemMagic = 0x4d434d41;    // "AMCM"
constexpr uint32_t kEventMagic = 0x45434d41;  // "AMCE"
constexpr uint32_t kWireMagic = 0x57434d41;   // "AMCW"
constexpr uint32_t kVersion = 1;

// The bytes of acmeIpcMemHandle_t / acmeIpcEventHandle_t.
struct MemHandle {
  uint32_t magic, version;
  int32_t pid, device;  // the owner and its device (for messages)
  uint64_t nonce, uid;  // the owner's server, the arena
  uint64_t off, size;   // file offset and requested size of the allocation
};
struct EventHandle {
  uint32_t magic, version;
  int32_t pid;
  uint32_t slot;
  uint64_t nonce, page_uid;
  uint64_t tag;  // the slot's owner (a destroyed event's slot gets another)
  uint64_t gen;  // the record this handle names
};
static_assert(sizeof(MemHandle) <= ACME_IPC_HANDLE_SIZE);
static_assert(sizeof(EventHandle) <= ACME_IPC_HANDLE_SIZE);

// ---- the server ----------------------------------------------------------------

enum Kind : uint32_t { kArena = 1, kFile = 2 };
struct Request {
  uint32_t magic, kind;
  uint64_t key;        // arena uid / registered file key
  uint64_t off, size;  // kArena: the allocation that must still be live (size 0: none)
};
struct Reply {
  int32_t status;  // acmeError_t
  uint32_t pad;
  uint64_t len;    // the file's length
  char msg[240];
};

// Guarded by `mu` (the first of the IPC locks; held across requests to other
// processes, so the server thread never takes it), except the files the server
// hands out (`files_mu`, a leaf) and the opened-memory registry (`imports_mu`,
// a leaf; lookups outside the bounds of all opened memory take no lock).
struct State {
  std::mutex mu;
  int listen_fd = -1;
  uint64_t nonce = 0;  // 0: no server in this process (yet)
  std::mutex files_mu;
  std::unordered_map<uint64_t, std::pair<int, size_t>> files;  // registered: key -> fd, len
  // Peers' arenas mapped whole (acmeccl): (pid, nonce, uid) -> view, len, uses.
  struct PeerMap {
    char* view;
    size_t len;
    int uses;
  };
  std::map<std::tuple<int32_t, uint64_t, uint64_t>, PeerMap> peer_maps;
  // Peers' event pages: (pid, nonce, page uid) -> their slots, mapped here.
  std::map<std::tuple<int32_t, uint64_t, uint64_t>, IpcSlot*> remote_pages;

  // Opened memory, by the device address it starts at.
  struct Import {
    Imported region;
    char* dev_map;
    size_t dev_len;
    char* view_map;
    size_t view_len;
    MemHandle handle;
    int opens;
  };
  std::mutex imports_mu;  // a plain mutex: a forked child can unlock it (not a rwlock)
  std::map<uintptr_t, Import> imports;
  std::atomic<uintptr_t> imports_lo{UINTPTR_MAX}, imports_hi{0};
};
State& st() {
  static State* s = new State;  // leaked: the server thread outlives static destructors
  return *s;
}

std::string socket_name(int32_t pid, uint64_t nonce) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "acme-ipc.%d.%016llx", static_cast<int>(pid),
                static_cast<unsigned long long>(nonce));
  return buf;
}
socklen_t abstract_address(const std::string& name, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), std::min(name.size(), sizeof a->sun_path - 2));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

bool read_full(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n) {
    const ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// The reply to one request, and the fd it hands over (-1: none).
Reply answer(const Request& req, int* fd) {
  Reply rep{};
  *fd = -1;
  rep.status = acmeErrorInvalidValue;
  auto say = [&rep](const char* fmt, auto... args) {
    std::snprintf(rep.msg, sizeof rep.msg, fmt, args...);
  };
  if (req.magic != kWireMagic) {
    say("not an acme IPC request");
    return rep;
  }
  if (req.kind == kArena) {
    for (auto& a : rt().arenas) {
      if (a->uid() != req.key) continue;
      if (a->fd() < 0) {
        say("device %d memory of process %d cannot be shared: %s", a->index(),
            static_cast<int>(getpid()), a->share_error().c_str());
        return rep;
      }
      if (req.size && !a->live_file_range(req.off, req.size)) {
        say("the allocation of device %d of process %d that the handle names (%llu bytes) is not "
            "live any more (freed by its process?)",
            a->index(), static_cast<int>(getpid()), static_cast<unsigned long long>(req.size));
        return rep;
      }
      rep.status = acmeSuccess;
      rep.len = a->map_len();
      *fd = a->fd();
      return rep;
    }
    say("process %d has no such device memory any more (re-initialized or forked since)",
        static_cast<int>(getpid()));
    return rep;
  }
  if (req.kind == kFile) {
    std::lock_guard<std::mutex> lk(st().files_mu);
    auto it = st().files.find(req.key);
    if (it == st().files.end()) {
      say("process %d serves no such shared file (freed already?)", static_cast<int>(getpid()));
      return rep;
    }
    rep.status = acmeSuccess;
    rep.len = it->second.second;
    *fd = it->second.first;
    return rep;
  }
  say("unknown IPC request kind %u", req.kind);
  return rep;
}

void serve_one(int c) {
  timeval tv{2, 0};  // a client that stalls cannot wedge the server
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  Request req{};
  if (!read_full(c, &req, sizeof req)) return;
  int fd = -1;
  Reply rep{};
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
    rep.status = acmeErrorInvalidValue;
    std::snprintf(rep.msg, sizeof rep.msg,
                  "process %d serves its device memory only to processes of its own user",
                  static_cast<int>(getpid()));
  } else {
    rep = answer(req, &fd);
  }
  iovec iov{&rep, sizeof rep};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  while (sendmsg(c, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void serve(int listen_fd) {
  for (;;) {
    const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
          errno == ENOBUFS || errno == ENOMEM) {
        if (errno != EINTR && errno != ECONNABORTED)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return;  // the socket is gone (a forked child closed its copy: not ours)
    }
    serve_one(c);
    close(c);
  }
}

// Starts this process's server (once; again in a forked child). Caller holds st().mu.
acmeError_t ensure_server_locked() {
  State& s = st();
  if (s.listen_fd >= 0) return acmeSuccess;
  const uint64_t nonce = random_u64();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return fail(acmeErrorRuntime, "acme: ipc: cannot create a unix socket: %s",
                std::strerror(errno));
  sockaddr_un a;
  const socklen_t alen = abstract_address(socket_name(getpid(), nonce), &a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), alen) != 0 || listen(fd, 128) != 0) {
    const int err = errno;
    close(fd);
    return fail(acmeErrorRuntime, "acme: ipc: cannot listen on an abstract unix socket: %s",
                std::strerror(err));
  }
  try {
    std::thread(serve, fd).detach();
  } catch (const std::system_error& ex) {
    close(fd);
    return fail(acmeErrorRuntime, "acme: ipc: cannot start the IPC server thread: %s", ex.what());
  }
  s.listen_fd = fd;
  s.nonce = nonce;
  return acmeSuccess;
}

// Asks process (pid, nonce) for a file: an arena (checking that the allocation
// [off, off+size) is live) or a registered file. The fd is the caller's.
acmeError_t fetch(int32_t pid, uint64_t nonce, Kind kind, uint64_t key, uint64_t off,
                  uint64_t size, int* fd, size_t* len) {
  *fd = -1;
  const int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0)
    return fail(acmeErrorRuntime, "acme: ipc: cannot create a unix socket: %s",
                std::strerror(errno));
  timeval tv{10, 0};  // a wedged peer gives an error, not a hang
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un a;
  const socklen_t alen = abstract_address(socket_name(pid, nonce), &a);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), alen) != 0) {
    const int err = errno;
    close(c);
    return fail(acmeErrorInvalidValue,
                "acme: ipc: cannot reach process %d to open its device memory or event (%s): it "
                "exited, forked since, or runs on another machine",
                static_cast<int>(pid), std::strerror(err));
  }
  const Request req{kWireMagic, kind, key, off, size};
  Reply rep{};
  bool ok = send(c, &req, sizeof req, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof req);
  if (ok) {
    iovec iov{&rep, sizeof rep};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got;
    while ((got = recvmsg(c, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL)) < 0 && errno == EINTR) {
    }
    ok = got == static_cast<ssize_t>(sizeof rep);
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); ok && cm; cm = CMSG_NXTHDR(&msg, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
        std::memcpy(fd, CMSG_DATA(cm), sizeof(int));
  }
  close(c);
  if (!ok) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return fail(acmeErrorRuntime, "acme: ipc: process %d did not answer (it exited?)",
                static_cast<int>(pid));
  }
  rep.msg[sizeof rep.msg - 1] = '\0';
  if (rep.status != acmeSuccess) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return fail(static_cast<acmeError_t>(rep.status), "acme: ipc: %s", rep.msg);
  }
  if (*fd < 0)
    return fail(acmeErrorRuntime, "acme: ipc: process %d answered without a file",
                static_cast<int>(pid));
  *len = rep.len;
  return acmeSuccess;
}

bool is_self(int32_t pid, uint64_t nonce) {
  std::lock_guard<std::mutex> lk(st().mu);
  return pid == getpid() && nonce == st().nonce && nonce != 0;
}

// ---- shared events ---------------------------------------------------------------

constexpr uint32_t kSlots = 4096;

struct EventPage {
  std::mutex mu;  // after st().mu
  int fd = -1;
  IpcSlot* slots = nullptr;
  uint64_t uid = 0;
  uint32_t used = 0;
  std::vector<uint32_t> free;
};
EventPage& page() {
  static EventPage* p = new EventPage;
  return *p;
}

}  // namespace

// One event's mirror: the latest reached generation, a futex sequence bumped on
// every change, and how many processes sleep on it (wakes only when some do).
struct IpcSlot {
  std::atomic<uint64_t> tag;  // 0: free
  std::atomic<uint64_t> reached;
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> waiters;
  uint64_t pad;
};
static_assert(sizeof(IpcSlot) == 32);

struct IpcRemoteEvent {
  EventHandle handle;
  IpcSlot* slot;
};

void ipc_slot_publish(IpcSlot* slot, uint64_t reached) {
  slot->reached.store(reached, std::memory_order_release);
  slot->seq.fetch_add(1, std::memory_order_release);
  if (slot->waiters.load(std::memory_order_acquire)) futex_wake(&slot->seq);
}

void ipc_slot_release(IpcSlot* slot) {
  EventPage& p = page();
  slot->tag.store(0, std::memory_order_release);
  slot->seq.fetch_add(1, std::memory_order_release);
  if (slot->waiters.load(std::memory_order_acquire)) futex_wake(&slot->seq);
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.slots && slot >= p.slots && slot < p.slots + kSlots)
    p.free.push_back(static_cast<uint32_t>(slot - p.slots));
}

bool ipc_remote_reached(const IpcRemoteEvent& r, uint64_t gen) {
  if (r.slot->tag.load(std::memory_order_acquire) != r.handle.tag) return true;  // destroyed
  if (r.slot->reached.load(std::memory_order_acquire) >= gen) return true;
  return !process_alive(r.handle.pid);  // never will: waits report it
}

std::string ipc_remote_wait(const IpcRemoteEvent& r, uint64_t gen) {
  IpcSlot* s = r.slot;
  auto reached = [&] {
    return s->tag.load(std::memory_order_acquire) != r.handle.tag ||
           s->reached.load(std::memory_order_acquire) >= gen;
  };
  stream_spin_until(reached);
  for (;;) {
    const uint32_t seq = s->seq.load(std::memory_order_acquire);
    if (reached()) return {};
    if (!process_alive(r.handle.pid)) {
      if (reached()) return {};
      return "acme: event opened from an IPC handle: its process (pid " +
             std::to_string(r.handle.pid) + ") exited before the record it names completed";
    }
    s->waiters.fetch_add(1);
    if (!reached()) futex_wait(&s->seq, seq, 50'000'000);  // 50 ms: then check the owner
    s->waiters.fetch_sub(1);
  }
}

// ---- opened memory ------------------------------------------------------------------

bool find_import(const void* p, Imported* out) {
  State& s = st();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a < s.imports_lo.load(std::memory_order_relaxed) ||
      a >= s.imports_hi.load(std::memory_order_relaxed))
    return false;
  std::lock_guard<std::mutex> lk(s.imports_mu);
  auto it = s.imports.upper_bound(a);
  if (it == s.imports.begin()) return false;
  --it;
  const Imported& im = it->second.region;
  if (a >= reinterpret_cast<uintptr_t>(im.base) + im.size) return false;
  *out = im;
  return true;
}

namespace {

// The bounds find_import's fast path checks; caller holds imports_mu exclusively.
void update_bounds_locked() {
  State& s = st();
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (auto& [a, im] : s.imports) {
    lo = std::min(lo, a);
    hi = std::max(hi, a + im.region.size);
  }
  s.imports_lo = lo;
  s.imports_hi = hi;
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

}  // namespace

// ---- interconnect hooks (ipc.h) --------------------------------------------------------

acmeError_t ipc_self(ProcessRef* out) {
  std::lock_guard<std::mutex> lk(st().mu);
  if (auto e = ensure_server_locked()) return e;
  out->pid = getpid();
  out->nonce = st().nonce;
  return acmeSuccess;
}

acmeError_t ipc_export_arena(int device, ArenaRef* out) {
  if (auto e = check_device(device)) return e;
  Arena& a = *rt().arenas[device];
  if (a.fd() < 0)
    return fail(acmeErrorRuntime, "acme: device %d memory of this process cannot be shared: %s",
                device, a.share_error().c_str());
  if (auto e = ipc_self(&out->proc)) return e;
  out->uid = a.uid();
  out->len = a.map_len();
  return acmeSuccess;
}

acmeError_t ipc_map_arena(const ArenaRef& ref, char** view) {
  State& s = st();
  if (is_self(ref.proc.pid, ref.proc.nonce)) {
    for (auto& a : rt().arenas)
      if (a->uid() == ref.uid) {
        *view = a->view_map();
        return acmeSuccess;
      }
    return fail(acmeErrorInvalidValue, "acme: ipc: this process has no such device memory");
  }
  std::lock_guard<std::mutex> lk(s.mu);
  const auto key = std::make_tuple(ref.proc.pid, ref.proc.nonce, ref.uid);
  auto it = s.peer_maps.find(key);
  if (it != s.peer_maps.end()) {
    it->second.uses++;
    *view = it->second.view;
    return acmeSuccess;
  }
  int fd;
  size_t len;
  if (auto e = fetch(ref.proc.pid, ref.proc.nonce, kArena, ref.uid, 0, 0, &fd, &len)) return e;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  const int err = errno;
  close(fd);
  if (m == MAP_FAILED)
    return fail(acmeErrorMemoryAllocation,
                "acme: ipc: cannot map %s of device memory of process %d: %s",
                human_bytes(len).c_str(), static_cast<int>(ref.proc.pid), std::strerror(err));
  s.peer_maps.emplace(key, State::PeerMap{static_cast<char*>(m), len, 1});
  *view = static_cast<char*>(m);
  return acmeSuccess;
}

void ipc_unmap_arena(const ArenaRef& ref) {
  State& s = st();
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.peer_maps.find(std::make_tuple(ref.proc.pid, ref.proc.nonce, ref.uid));
  if (it == s.peer_maps.end() || --it->second.uses > 0) return;
  munmap(it->second.view, it->second.len);
  s.peer_maps.erase(it);
}

acmeError_t ipc_arena_offset(int device, const void* p, size_t n, const char* what,
                             uint64_t* off) {
  if (auto e = check_device(device)) return e;
  Arena& a = *rt().arenas[device];
  if (!a.contains(p)) {
    Imported im;
    if (find_import(p, &im))
      return fail(acmeErrorInvalidValue,
                  "%s %p was opened from another process's IPC handle: only memory allocated on "
                  "device %d of this process can be used here",
                  what, p, device);
    return fail(acmeErrorInvalidValue, "%s %p is not memory of device %d of this process", what,
                p, device);
  }
  if (n && !a.live_file_range(a.file_offset(p), n))
    return fail(acmeErrorInvalidValue,
                "%s [%p, +%zu) overruns its allocation of device %d (or is not in a live one)",
                what, p, n, device);
  *off = a.file_offset(p);
  return acmeSuccess;
}

acmeError_t ipc_locate(int device, const void* p, size_t n, const char* what, ArenaRef* ref,
                       uint64_t* off) {
  if (auto e = check_device(device)) return e;
  if (!rt().arenas[device]->contains(p)) {
    Imported im;
    if (find_import(p, &im) && im.device == device) {
      const size_t from = static_cast<size_t>(static_cast<const char*>(p) - im.base);
      if (n > im.size - from)
        return fail(acmeErrorInvalidValue,
                    "%s [%p, +%zu) overruns the memory opened from an IPC handle on device %d",
                    what, p, n, device);
      std::lock_guard<std::mutex> lk(st().imports_mu);
      auto it = st().imports.find(reinterpret_cast<uintptr_t>(im.base));
      if (it == st().imports.end())
        return fail(acmeErrorInvalidValue, "%s %p was closed meanwhile", what, p);
      const MemHandle& h = it->second.handle;
      ref->proc.pid = h.pid;
      ref->proc.nonce = h.nonce;
      ref->uid = h.uid;
      ref->len = 0;
      *off = h.off + from;
      return acmeSuccess;
    }
  }
  if (auto e = ipc_arena_offset(device, p, n, what, off)) return e;
  return ipc_export_arena(device, ref);
}

acmeError_t ipc_register_fd(uint64_t key, int fd, size_t len) {
  {
    std::lock_guard<std::mutex> lk(st().mu);
    if (auto e = ensure_server_locked()) return e;
  }
  std::lock_guard<std::mutex> lk(st().files_mu);
  st().files[key] = {fd, len};
  return acmeSuccess;
}

void ipc_unregister_fd(uint64_t key) {
  std::lock_guard<std::mutex> lk(st().files_mu);
  st().files.erase(key);
}

acmeError_t ipc_fetch_fd(const ProcessRef& peer, uint64_t key, int* fd, size_t* len) {
  return fetch(peer.pid, peer.nonce, kFile, key, 0, 0, fd, len);
}

// ---- fork ---------------------------------------------------------------------------
// The parent holds every IPC lock and every arena's lock across fork(), so the
// child finds them consistent. The child gets its own device memory (a copy of
// the live bytes in fresh files), its own event page, and no server (the
// parent's thread is not in it; a new one starts on the child's first handle).

void ipc_fork_prepare() {
  st().mu.lock();
  st().files_mu.lock();
  page().mu.lock();
  st().imports_mu.lock();
  for (auto& a : rt().arenas) a->mutex().lock();
}

void ipc_fork_parent() {
  for (auto it = rt().arenas.rbegin(); it != rt().arenas.rend(); ++it) (*it)->mutex().unlock();
  st().imports_mu.unlock();
  page().mu.unlock();
  st().files_mu.unlock();
  st().mu.unlock();
}

void ipc_fork_child() {
  for (auto it = rt().arenas.rbegin(); it != rt().arenas.rend(); ++it) {
    (*it)->fork_child();
    (*it)->mutex().unlock();
  }
  st().imports_mu.unlock();
  EventPage& p = page();
  if (p.slots) {
    // The page was not inherited (MADV_DONTFORK): a copy of its own, same place.
    const size_t len = kSlots * sizeof(IpcSlot);
    const int old = p.fd;
    int nfd = memfd_create("acme-events", MFD_CLOEXEC);
    void* m = MAP_FAILED;
    if (nfd >= 0 && ftruncate(nfd, static_cast<off_t>(len)) == 0)
      m = mmap(p.slots, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, nfd, 0);
    if (m == MAP_FAILED) {
      if (nfd >= 0) close(nfd);
      nfd = -1;
      m = mmap(p.slots, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
               0);
    }
    if (m != MAP_FAILED) {
      madvise(p.slots, len, MADV_DONTFORK);
      [[maybe_unused]] ssize_t got = pread(old, p.slots, len, 0);
    }
    close(old);
    p.fd = nfd;
    p.uid = random_u64();
    if (nfd < 0) p.slots = nullptr;  // nothing to share: handles start a new page
  }
  p.mu.unlock();
  State& s = st();
  if (s.listen_fd >= 0) close(s.listen_fd);
  s.listen_fd = -1;
  s.nonce = 0;
  s.files.clear();
  s.files_mu.unlock();
  s.mu.unlock();
}

}  // namespace acme_internal

using namespace acme_internal;

namespace {

// The event page of this process, created on the first event handle; caller
// holds st().mu (the server registers it) and page().mu.
acmeError_t ensure_page_locked() {
  EventPage& p = page();
  if (p.slots) return acmeSuccess;
  const size_t len = kSlots * sizeof(IpcSlot);
  const int fd = memfd_create("acme-events", MFD_CLOEXEC);
  if (fd < 0)
    return fail(acmeErrorRuntime, "acme: ipc: events cannot be shared: memfd_create failed: %s",
                std::strerror(errno));
  void* m = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(len)) == 0)
    m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return fail(acmeErrorRuntime, "acme: ipc: cannot map the shared event page: %s",
                std::strerror(err));
  }
  madvise(m, len, MADV_DONTFORK);
  p.fd = fd;
  p.slots = static_cast<IpcSlot*>(m);
  p.uid = random_u64();
  return acmeSuccess;
}

}  // namespace

extern "C" {

acmeError_t acmeIpcGetMemHandle(int device, void* base, acmeIpcMemHandle_t* handle) {
  if (!handle) return fail(acmeErrorInvalidValue, "acme: ipc_get_mem_handle: null output pointer");
  std::memset(handle, 0, sizeof *handle);
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  Arena& a = *r.arenas[device];
  MemHandle h{};
  if (!a.contains(base)) {
    Imported im;
    if (find_import(base, &im) && im.base == base && im.device == device) {
      State& s = st();
      std::lock_guard<std::mutex> lk(s.imports_mu);
      auto it = s.imports.find(reinterpret_cast<uintptr_t>(base));
      if (it != s.imports.end()) {
        std::memcpy(handle, &it->second.handle, sizeof it->second.handle);
        return acmeSuccess;  // the owner's handle: opening it elsewhere reaches the same bytes
      }
    }
    return fail(acmeErrorInvalidValue,
                "acme: ipc_get_mem_handle(%p) on device %d: not the start of an allocation of "
                "that device",
                base, device);
  }
  const size_t size = a.live_block(base);
  if (size == 0)
    return fail(acmeErrorInvalidValue,
                "acme: ipc_get_mem_handle(%p) on device %d: not the start of a live allocation "
                "(an interior pointer, or freed)",
                base, device);
  if (a.fd() < 0)
    return fail(acmeErrorRuntime, "acme: ipc_get_mem_handle: device %d memory cannot be shared: %s",
                device, a.share_error().c_str());
  ProcessRef self;
  if (auto e = ipc_self(&self)) return e;
  h.magic = kMemMagic;
  h.version = kVersion;
  h.pid = self.pid;
  h.device = device;
  h.nonce = self.nonce;
  h.uid = a.uid();
  h.off = a.file_offset(base);
  h.size = size;
  std::memcpy(handle, &h, sizeof h);
  return acmeSuccess;
}

acmeError_t acmeIpcOpenMemHandle(int device, acmeIpcMemHandle_t handle, void** ptr) {
  if (!ptr) return fail(acmeErrorInvalidValue, "acme: ipc_open_mem_handle: null output pointer");
  *ptr = nullptr;
  if (auto e = check_alive(device)) return e;
  MemHandle h;
  std::memcpy(&h, &handle, sizeof h);
  if (h.magic != kMemMagic || h.version != kVersion || h.size == 0)
    return fail(acmeErrorInvalidValue,
                "acme: ipc_open_mem_handle: not an acme memory handle (or of another version)");
  State& s = st();
  // One open at a time: the lookup, the fetch and the registration stay together.
  std::lock_guard<std::mutex> lk(s.mu);
  if (h.pid == getpid() && h.nonce == s.nonce)
    return fail(acmeErrorInvalidValue,
                "acme: ipc_open_mem_handle: the handle names memory of this process itself (use "
                "the pointer it was made from)");
  {
    std::lock_guard<std::mutex> ilk(s.imports_mu);
    for (auto& [addr, im] : s.imports)
      if (im.region.device == device && std::memcmp(&im.handle, &h, sizeof h) == 0) {
        im.opens++;
        *ptr = const_cast<char*>(im.region.base);
        return acmeSuccess;
      }
  }
  int fd;
  size_t len;
  if (auto e = fetch(h.pid, h.nonce, kArena, h.uid, h.off, h.size, &fd, &len)) return e;
  if (h.off + h.size > len || h.off + h.size < h.off) {
    close(fd);
    return fail(acmeErrorInvalidValue, "acme: ipc_open_mem_handle: the handle lies outside the "
                                       "memory of its process");
  }
  const size_t page = page_size();
  const size_t moff = h.off / page * page;
  const size_t view_len = (h.off + h.size - moff + page - 1) / page * page;
  void* vm = mmap(nullptr, view_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(moff));
  int err = errno;
  close(fd);
  if (vm == MAP_FAILED)
    return fail(acmeErrorMemoryAllocation, "acme: ipc_open_mem_handle: cannot map %s: %s",
                human_bytes(view_len).c_str(), std::strerror(err));
  // Device addresses of our own (never readable by the host), aligned as this
  // runtime aligns allocations.
  const size_t align = std::max(page, rt().alignment);
  const size_t dev_len = view_len + align;
  void* dm = mmap(nullptr, dev_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  err = errno;
  if (dm == MAP_FAILED) {
    munmap(vm, view_len);
    return fail(acmeErrorMemoryAllocation,
                "acme: ipc_open_mem_handle: cannot reserve %s of device addresses: %s",
                human_bytes(dev_len).c_str(), std::strerror(err));
  }
  const uintptr_t dev_start = (reinterpret_cast<uintptr_t>(dm) + align - 1) / align * align;
  State::Import im{};
  im.region.device = device;
  im.region.base = reinterpret_cast<const char*>(dev_start + (h.off - moff));
  im.region.size = h.size;
  im.region.view = static_cast<char*>(vm) + (h.off - moff);
  im.dev_map = static_cast<char*>(dm);
  im.dev_len = dev_len;
  im.view_map = static_cast<char*>(vm);
  im.view_len = view_len;
  im.handle = h;
  im.opens = 1;
  {
    std::lock_guard<std::mutex> ilk(s.imports_mu);
    s.imports.emplace(reinterpret_cast<uintptr_t>(im.region.base), im);
    update_bounds_locked();
  }
  *ptr = const_cast<char*>(im.region.base);
  return acmeSuccess;
}

acmeError_t acmeIpcCloseMemHandle(int device, void* ptr) {
  if (auto e = check_device(device)) return e;
  State& s = st();
  State::Import im;
  {
    std::lock_guard<std::mutex> ilk(s.imports_mu);
    auto it = s.imports.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.imports.end() || it->second.region.device != device)
      return fail(acmeErrorInvalidValue,
                  "acme: ipc_close_mem_handle(%p) on device %d: not memory opened from an IPC "
                  "handle on that device",
                  ptr, device);
    if (--it->second.opens > 0) return acmeSuccess;
    im = it->second;
    s.imports.erase(it);
    update_bounds_locked();
  }
  munmap(im.view_map, im.view_len);
  munmap(im.dev_map, im.dev_len);
  return acmeSuccess;
}

acmeError_t acmeIpcGetEventHandle(int device, acmeEvent_t event, acmeIpcEventHandle_t* handle) {
  if (!handle)
    return fail(acmeErrorInvalidValue, "acme: ipc_get_event_handle: null output pointer");
  std::memset(handle, 0, sizeof *handle);
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  if (ev->remote) {
    std::memcpy(handle, &ev->remote->handle, sizeof ev->remote->handle);
    return acmeSuccess;
  }
  State& s = st();
  EventPage& p = page();
  std::lock_guard<std::mutex> lk(s.mu);
  if (auto e = ensure_server_locked()) return e;
  std::lock_guard<std::mutex> plk(p.mu);
  if (auto e = ensure_page_locked()) return e;
  {
    std::lock_guard<std::mutex> flk(s.files_mu);
    s.files[p.uid] = {p.fd, kSlots * sizeof(IpcSlot)};
  }
  std::lock_guard<std::mutex> elk(ev->mu);
  if (!ev->slot) {
    uint32_t index;
    if (!p.free.empty()) {
      index = p.free.back();
      p.free.pop_back();
    } else if (p.used < kSlots) {
      index = p.used++;
    } else {
      return fail(acmeErrorRuntime,
                  "acme: ipc_get_event_handle: %u events of this process are shared already (the "
                  "limit); destroy some",
                  kSlots);
    }
    IpcSlot* slot = &p.slots[index];
    slot->reached.store(ev->reached, std::memory_order_relaxed);
    slot->tag.store(random_u64(), std::memory_order_release);
    ev->slot = slot;
  }
  EventHandle h{};
  h.magic = kEventMagic;
  h.version = kVersion;
  h.pid = getpid();
  h.slot = static_cast<uint32_t>(ev->slot - p.slots);
  h.nonce = s.nonce;
  h.page_uid = p.uid;
  h.tag = ev->slot->tag.load(std::memory_order_relaxed);
  h.gen = ev->recorded;
  std::memcpy(handle, &h, sizeof h);
  return acmeSuccess;
}

acmeError_t acmeIpcOpenEventHandle(int device, acmeIpcEventHandle_t handle, acmeEvent_t* event) {
  if (!event) return fail(acmeErrorInvalidValue, "acme: ipc_open_event_handle: null output pointer");
  *event = nullptr;
  if (auto e = check_device(device)) return e;
  EventHandle h;
  std::memcpy(&h, &handle, sizeof h);
  if (h.magic != kEventMagic || h.version != kVersion || h.slot >= kSlots || h.tag == 0)
    return fail(acmeErrorInvalidValue,
                "acme: ipc_open_event_handle: not an acme event handle (or of another version)");
  State& s = st();
  IpcSlot* slots = nullptr;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (h.pid == getpid() && h.nonce == s.nonce)
      return fail(acmeErrorInvalidValue,
                  "acme: ipc_open_event_handle: the handle names an event of this process itself "
                  "(use the event)");
    const auto key = std::make_tuple(h.pid, h.nonce, h.page_uid);
    auto it = s.remote_pages.find(key);
    if (it != s.remote_pages.end()) {
      slots = it->second;
    } else {
      int fd;
      size_t len;
      if (auto e = fetch(h.pid, h.nonce, kFile, h.page_uid, 0, 0, &fd, &len)) return e;
      void* m = len >= kSlots * sizeof(IpcSlot)
                    ? mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
      const int err = errno;
      close(fd);
      if (m == MAP_FAILED)
        return fail(acmeErrorRuntime, "acme: ipc_open_event_handle: cannot map the event page of "
                                      "process %d: %s",
                    static_cast<int>(h.pid), std::strerror(err));
      slots = static_cast<IpcSlot*>(m);
      s.remote_pages.emplace(key, slots);
    }
  }
  Runtime& r = rt();
  auto ev = std::make_shared<acmeEvent_st>();
  ev->device = device;
  ev->recorded = h.gen;
  ev->remote = std::make_shared<IpcRemoteEvent>(IpcRemoteEvent{h, &slots[h.slot]});
  std::lock_guard<std::mutex> lk(r.reg_mu);
  ev->id = r.next_id++;
  r.events.emplace(ev.get(), ev);
  *event = ev.get();
  return acmeSuccess;
}

}  // extern "C"
