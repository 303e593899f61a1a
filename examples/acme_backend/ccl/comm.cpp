// acmeccl: the C API. Communicators (init, destroy, abort, errors), and every
// call that queues work: it checks its arguments now, turns the buffers into
// offsets in the device memory every rank of the host maps, takes its sequence
// number (the order ranks match calls in), and queues the work on the stream
// (acmeLaunch) or, inside a group, keeps it for group_end.
#include "internal.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

namespace acmeccl {

thread_local std::string t_last_error;

acmecclResult_t fail(acmecclResult_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  t_last_error = buf;
  return code;
}

acmecclResult_t fail_str(acmecclResult_t code, std::string msg) {
  t_last_error = std::move(msg);
  return code;
}

std::string strprintf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

long futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), timeout_ns % 1000000000};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts,
                 nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case kAllReduce: return "all_reduce";
    case kBroadcast: return "broadcast";
    case kReduce: return "reduce";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kAllToAll: return "all_to_all";
  }
  return "collective";
}

size_t Box::bytes(int n) {
  const size_t un = static_cast<size_t>(n);
  return sizeof(BoxHeader) + 4 * un * sizeof(uint64_t) + un * kP2PSlots * sizeof(P2PSlot) +
         un * sizeof(uint64_t);
}

void Box::bind(void* base, int n) {
  const size_t un = static_cast<size_t>(n);
  char* p = static_cast<char*>(base);
  h = reinterpret_cast<BoxHeader*>(p);
  p += sizeof(BoxHeader);
  a2a = reinterpret_cast<uint64_t*>(p);
  p += 4 * un * sizeof(uint64_t);
  out = reinterpret_cast<P2PSlot*>(p);
  p += un * kP2PSlots * sizeof(P2PSlot);
  ack = reinterpret_cast<std::atomic<uint64_t>*>(p);
}

std::atomic<uint64_t> g_fork_epoch{0};

char* Comm::view_of(const ArenaId& a) {
  for (int r : local) {
    const RankInfo& ri = info[static_cast<size_t>(r)];
    if (ri.pid == a.pid && ri.nonce == a.nonce && ri.arena_uid == a.uid)
      return views[static_cast<size_t>(r)];
  }
  std::lock_guard<std::mutex> lk(mu);
  for (auto& [id, view] : extra_views)
    if (id == a) return view;
  acme_internal::ArenaRef ref;
  ref.proc.pid = a.pid;
  ref.proc.nonce = a.nonce;
  ref.uid = a.uid;
  char* view = nullptr;
  if (acme_internal::ipc_map_arena(ref, &view) != acmeSuccess)
    throw Failure(strprintf("acmeccl: %s: cannot reach the device memory of process %d that a "
                            "buffer lies in: %s",
                            where().c_str(), a.pid, acmeGetLastErrorString()));
  extra_views.emplace_back(a, view);
  mapped_arenas.push_back(ref);
  return view;
}

Comm::~Comm() {
  if (box_key) acme_internal::ipc_unregister_fd(box_key);
  for (auto& ref : mapped_arenas) acme_internal::ipc_unmap_arena(ref);
  for (auto& [p, len] : maps) munmap(p, len);
  if (box_fd >= 0) close(box_fd);
  for (auto* fds : {&coll_fd, &p2p_fd, &ctl_fd})
    for (int fd : *fds)
      if (fd >= 0) close(fd);
}

std::string Comm::rank_name(int r) const {
  if (r < 0 || r >= static_cast<int>(info.size())) return "rank " + std::to_string(r);
  const RankInfo& ri = info[static_cast<size_t>(r)];
  return strprintf("rank %d (pid %d, host '%s')", r, ri.pid, ri.host);
}

std::string Comm::where() const {
  return strprintf("%s (rank %d of %d)", name.c_str(), rank, nranks);
}

void Comm::ring(int r) {
  BoxHeader* h = boxes[static_cast<size_t>(r)].h;
  if (!h) return;
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst)) futex_wake(&h->bell);
}

std::string Comm::current_error() {
  std::lock_guard<std::mutex> lk(err_mu);
  return error;
}

std::string Comm::record_failure(const std::string& message, const std::string& reason) {
  bool first = false;
  std::string recorded;
  {
    std::lock_guard<std::mutex> lk(err_mu);
    if (error.empty()) {
      error = message;
      first = true;
    }
    recorded = error;
  }
  broken = true;
  if (first) {
    // Tell this host's ranks (they see `failed` while waiting on us) ...
    if (me.h) {
      std::snprintf(me.h->reason, sizeof me.h->reason, "%s", reason.c_str());
      me.h->failed.store(1, std::memory_order_release);
    }
    for (int r : local) ring(r);
    // ... and the other hosts' (a reason on the control link, then the data links close).
    const std::string why = rank_name(rank) + " failed: " + reason;
    const uint32_t len = static_cast<uint32_t>(std::min<size_t>(why.size(), 1000));
    for (size_t r = 0; r < ctl_fd.size(); ++r) {
      if (ctl_fd[r] < 0) continue;
      char buf[1004];
      std::memcpy(buf, &len, 4);
      std::memcpy(buf + 4, why.data(), len);
      [[maybe_unused]] ssize_t k = send(ctl_fd[r], buf, 4 + len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (coll_fd[r] >= 0) shutdown(coll_fd[r], SHUT_RDWR);
      if (p2p_fd[r] >= 0) shutdown(p2p_fd[r], SHUT_RDWR);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu);
  }
  cv.notify_all();
  return recorded;
}

}  // namespace acmeccl

using namespace acmeccl;

namespace {
constexpr uint64_t kHandleMagic = 0x6c63636d6563616eull;
}  // namespace

// What acmecclComm_t points at: the communicator lives as long as work of it is
// queued (the work holds it too).
struct acmecclComm {
  uint64_t magic = kHandleMagic;
  std::shared_ptr<Comm> comm;
};

namespace {

acmecclResult_t get(acmecclComm_t h, const char* call, std::shared_ptr<Comm>* out) {
  if (!h || h->magic != kHandleMagic || !h->comm)
    return fail(acmecclInvalidArgument, "acmeccl: %s: not a live communicator", call);
  Comm& c = *h->comm;
  if (c.fork_epoch != g_fork_epoch.load())
    return fail(acmecclError,
                "acmeccl: %s: %s was created before fork(): a forked child must create its own",
                call, c.where().c_str());
  *out = h->comm;
  return acmecclSuccess;
}

// The communicator must still be healthy to take new work.
acmecclResult_t usable(const Comm& c0, const char* call) {
  Comm& c = const_cast<Comm&>(c0);
  if (!c.broken.load()) return acmecclSuccess;
  return fail(acmecclError, "acmeccl: %s on %s: the communicator failed: %s", call,
              c.where().c_str(), c.current_error().c_str());
}

acmecclResult_t check_dtype(int dtype, bool reduction, int op, const char* call) {
  if (dtype_size(dtype) == 0)
    return fail(acmecclInvalidArgument, "acmeccl: %s: unknown dtype %d", call, dtype);
  if (reduction && (op < acmecclSum || op > acmecclMax))
    return fail(acmecclInvalidArgument, "acmeccl: %s: unknown reduction op %d", call, op);
  return acmecclSuccess;
}

acmecclResult_t bytes_of(size_t count, int dtype, size_t times, const char* call, size_t* out) {
  const size_t el = dtype_size(dtype);
  if (count > SIZE_MAX / el / (times ? times : 1))
    return fail(acmecclInvalidArgument, "acmeccl: %s: count %zu overflows", call, count);
  *out = count * el * times;
  return acmecclSuccess;
}

// Where [p, p+n) of the communicator's device lives for the peers: its arena
// (this process's device memory, or the owner's of memory opened from an IPC
// handle) and the file offset there.
acmecclResult_t offset_of(const Comm& c, const void* p, size_t n, const char* call,
                          const char* what, ArenaId* arena, uint64_t* off) {
  const std::string label = strprintf("acmeccl: %s: %s", call, what);
  acme_internal::ArenaRef ref;
  if (acme_internal::ipc_locate(c.device, p, n, label.c_str(), &ref, off) != acmeSuccess)
    return fail_str(acmecclInvalidArgument, acmeGetLastErrorString());
  *arena = ArenaId{ref.proc.pid, 0, ref.proc.nonce, ref.uid};
  return acmecclSuccess;
}

// ---- groups and queuing --------------------------------------------------------------------

struct Pending {
  std::shared_ptr<Comm> comm;
  acmeStream_t stream;
  bool p2p;
  CollOp coll;
  P2POp pp;
};

struct Group {
  int depth = 0;
  bool have_stream = false;
  acmeStream_t stream = nullptr;
  std::vector<Pending> ops;
};
thread_local Group t_group;

// Queues a piece of work. A failure to queue breaks the communicator: its
// sequence numbers are taken and the peers would wait for it.
acmecclResult_t launch(const std::shared_ptr<Comm>& c, acmeStream_t stream, Work w,
                       const char* call) {
  auto work = std::make_shared<Work>(std::move(w));
  // Recorded for torch.profiler as a collective named after the call (a string literal).
  const acmeError_t e = acmeLaunch(c->device, stream, [c, work] { execute(c, *work); }, call,
                                   acmeActivityCollective);
  if (e == acmeSuccess) return acmecclSuccess;
  const std::string why = acmeGetLastErrorString();
  const std::string msg = strprintf("acmeccl: %s on %s could not be queued: %s", call,
                                    c->where().c_str(), why.c_str());
  c->record_failure(msg, std::string(call) + " could not be queued: " + why);
  return fail_str(static_cast<acmecclResult_t>(e), msg);
}

// The stream must be a live stream of the communicator's device (checked
// before the call takes its sequence number: a call that cannot be queued then
// leaves the communicator as it was).
acmecclResult_t check_stream(const Comm& c, acmeStream_t stream, const char* call) {
  int idle = 0;
  if (acmeStreamQuery(c.device, stream, &idle) != acmeSuccess)
    return fail(acmecclInvalidArgument, "acmeccl: %s: %s", call, acmeGetLastErrorString());
  if (t_group.depth > 0 && t_group.have_stream && t_group.stream != stream)
    return fail(acmecclInvalidArgument,
                "acmeccl: %s: every call of a group must name the same stream", call);
  return acmecclSuccess;
}

acmecclResult_t submit_coll(const std::shared_ptr<Comm>& c, acmeStream_t stream, CollOp op,
                            const char* call) {
  if (auto r = check_stream(*c, stream, call)) return r;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    op.seq = c->next_coll++;
  }
  if (t_group.depth > 0) {
    t_group.have_stream = true;
    t_group.stream = stream;
    t_group.ops.push_back(Pending{c, stream, false, std::move(op), {}});
    return acmecclSuccess;
  }
  Work w;
  w.colls.push_back(std::move(op));
  return launch(c, stream, std::move(w), call);
}

acmecclResult_t submit_p2p(const std::shared_ptr<Comm>& c, acmeStream_t stream, P2POp op,
                           const char* call) {
  if (auto r = check_stream(*c, stream, call)) return r;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    auto& next = op.send ? c->next_send : c->next_recv;
    op.seq = next[static_cast<size_t>(op.peer)]++;
  }
  if (t_group.depth > 0) {
    t_group.have_stream = true;
    t_group.stream = stream;
    t_group.ops.push_back(Pending{c, stream, true, {}, op});
    return acmecclSuccess;
  }
  Work w;
  w.p2p.push_back(op);
  return launch(c, stream, std::move(w), call);
}

// The common part of the collectives: handle, health, dtype, and the buffers.
struct Prep {
  std::shared_ptr<Comm> c;
  CollOp op;
};

acmecclResult_t prepare(acmecclComm_t comm, const char* call, uint32_t kind, int dtype, bool reduction,
                        int op, Prep* p) {
  if (auto r = get(comm, call, &p->c)) return r;
  if (auto r = usable(*p->c, call)) return r;
  if (auto r = check_dtype(dtype, reduction, op, call)) return r;
  p->op.kind = kind;
  p->op.dtype = dtype;
  p->op.op = reduction ? op : acmecclSum;
  return acmecclSuccess;
}

}  // namespace

extern "C" {

const char* acmecclGetLastError(void) { return t_last_error.c_str(); }

const char* acmecclGetErrorString(acmecclResult_t result) {
  switch (result) {
    case acmecclSuccess: return "acmecclSuccess";
    case acmecclOutOfMemory: return "acmecclOutOfMemory";
    case acmecclInvalidDevice: return "acmecclInvalidDevice";
    case acmecclInvalidArgument: return "acmecclInvalidArgument";
    case acmecclError: return "acmecclError";
  }
  return "acmecclUnknownResult";
}

acmecclResult_t acmecclGetUniqueId(acmecclUniqueId* id) { return make_unique_id(id); }

acmecclResult_t acmecclCommInitRank(acmecclComm_t* comm, int nranks, acmecclUniqueId id, int rank,
                                    int device, int64_t timeout_ms) {
  static const bool fork_handler = [] {
    pthread_atfork(nullptr, nullptr, [] { g_fork_epoch.fetch_add(1); });
    return true;
  }();
  (void)fork_handler;
  if (!comm) return fail(acmecclInvalidArgument, "acmeccl: comm_init: null output pointer");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(acmecclInvalidArgument, "acmeccl: comm_init: rank %d of %d is not a rank", rank,
                nranks);
  if (timeout_ms <= 0)
    return fail(acmecclInvalidArgument, "acmeccl: comm_init: timeout must be positive, got %lld ms",
                static_cast<long long>(timeout_ms));
  int count = 0;
  acmeGetDeviceCount(&count);
  if (count == 0)
    return fail(acmecclError, "acmeccl: comm_init: the acme runtime is not initialized");
  if (device < 0 || device >= count)
    return fail(acmecclInvalidDevice, "acmeccl: comm_init: invalid acme device %d (acme has %d)",
                device, count);
  auto c = std::make_shared<Comm>();
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->fork_epoch = g_fork_epoch.load();
  c->next_send.assign(static_cast<size_t>(nranks), 1);
  c->next_recv.assign(static_cast<size_t>(nranks), 1);
  c->net_send_turn.assign(static_cast<size_t>(nranks), 1);
  c->net_recv_turn.assign(static_cast<size_t>(nranks), 1);
  if (auto r = init_comm(*c, id, timeout_ms)) return r;
  *comm = new acmecclComm{kHandleMagic, std::move(c)};
  return acmecclSuccess;
}

acmecclResult_t acmecclCommDestroy(acmecclComm_t comm) {
  if (!comm) return acmecclSuccess;
  if (comm->magic != kHandleMagic)
    return fail(acmecclInvalidArgument, "acmeccl: comm_destroy: not a live communicator");
  comm->magic = 0;
  delete comm;  // the communicator itself goes with its last queued work
  return acmecclSuccess;
}

acmecclResult_t acmecclCommAbort(acmecclComm_t comm) {
  std::shared_ptr<Comm> c;
  if (!comm || comm->magic != kHandleMagic || !comm->comm)
    return fail(acmecclInvalidArgument, "acmeccl: comm_abort: not a live communicator");
  c = comm->comm;
  c->aborted = true;
  c->record_failure(strprintf("acmeccl: %s was aborted (comm_abort)", c->where().c_str()),
                    "it aborted the communicator");
  if (c->me.h) c->ring(c->rank);  // wake this rank's own waits
  return acmecclSuccess;
}

acmecclResult_t acmecclCommGetAsyncError(acmecclComm_t comm, acmecclResult_t* async_error,
                                         char* message, size_t message_len) {
  if (!async_error)
    return fail(acmecclInvalidArgument, "acmeccl: comm_get_async_error: null output pointer");
  if (!comm || comm->magic != kHandleMagic || !comm->comm)
    return fail(acmecclInvalidArgument, "acmeccl: comm_get_async_error: not a live communicator");
  Comm& c = *comm->comm;
  const std::string e = c.broken.load() ? c.current_error() : std::string();
  *async_error = e.empty() ? acmecclSuccess : acmecclError;
  if (message && message_len) {
    const size_t n = std::min(e.size(), message_len - 1);
    std::memcpy(message, e.data(), n);
    message[n] = '\0';
  }
  return acmecclSuccess;
}

acmecclResult_t acmecclCommCount(acmecclComm_t comm, int* nranks) {
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, "comm_count", &c)) return r;
  if (!nranks) return fail(acmecclInvalidArgument, "acmeccl: comm_count: null output pointer");
  *nranks = c->nranks;
  return acmecclSuccess;
}

acmecclResult_t acmecclCommUserRank(acmecclComm_t comm, int* rank) {
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, "comm_user_rank", &c)) return r;
  if (!rank) return fail(acmecclInvalidArgument, "acmeccl: comm_user_rank: null output pointer");
  *rank = c->rank;
  return acmecclSuccess;
}

acmecclResult_t acmecclCommDevice(acmecclComm_t comm, int* device) {
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, "comm_device", &c)) return r;
  if (!device) return fail(acmecclInvalidArgument, "acmeccl: comm_device: null output pointer");
  *device = c->device;
  return acmecclSuccess;
}

acmecclResult_t acmecclCommTopology(acmecclComm_t comm, int* nhosts, int* local_ranks) {
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, "comm_topology", &c)) return r;
  if (nhosts) *nhosts = c->nhosts;
  if (local_ranks) *local_ranks = static_cast<int>(c->local.size());
  return acmecclSuccess;
}

acmecclResult_t acmecclAllReduce(const void* send, void* recv, size_t count,
                                 acmecclDataType_t dtype, acmecclRedOp_t op, acmecclComm_t comm,
                                 acmeStream_t stream) {
  const char* call = "all_reduce";
  Prep p;
  if (auto r = prepare(comm, call, kAllReduce, dtype, true, op, &p)) return r;
  if (count == 0) return acmecclSuccess;
  size_t bytes = 0;
  if (auto r = bytes_of(count, dtype, 1, call, &bytes)) return r;
  if (auto r = offset_of(*p.c, send, bytes, call, "send buffer", &p.op.send_arena, &p.op.send_off)) return r;
  if (auto r = offset_of(*p.c, recv, bytes, call, "recv buffer", &p.op.recv_arena, &p.op.recv_off)) return r;
  p.op.count = count;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclBroadcast(const void* send, void* recv, size_t count,
                                 acmecclDataType_t dtype, int root, acmecclComm_t comm,
                                 acmeStream_t stream) {
  const char* call = "broadcast";
  Prep p;
  if (auto r = prepare(comm, call, kBroadcast, dtype, false, 0, &p)) return r;
  if (root < 0 || root >= p.c->nranks)
    return fail(acmecclInvalidArgument, "acmeccl: broadcast: root %d is not a rank of %d", root,
                p.c->nranks);
  if (count == 0) return acmecclSuccess;
  size_t bytes = 0;
  if (auto r = bytes_of(count, dtype, 1, call, &bytes)) return r;
  if (p.c->rank == root) {
    if (auto r = offset_of(*p.c, send, bytes, call, "send buffer", &p.op.send_arena, &p.op.send_off)) return r;
  }
  if (auto r = offset_of(*p.c, recv, bytes, call, "recv buffer", &p.op.recv_arena, &p.op.recv_off)) return r;
  p.op.count = count;
  p.op.root = root;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclReduce(const void* send, void* recv, size_t count, acmecclDataType_t dtype,
                              acmecclRedOp_t op, int root, acmecclComm_t comm,
                              acmeStream_t stream) {
  const char* call = "reduce";
  Prep p;
  if (auto r = prepare(comm, call, kReduce, dtype, true, op, &p)) return r;
  if (root < 0 || root >= p.c->nranks)
    return fail(acmecclInvalidArgument, "acmeccl: reduce: root %d is not a rank of %d", root,
                p.c->nranks);
  if (count == 0) return acmecclSuccess;
  size_t bytes = 0;
  if (auto r = bytes_of(count, dtype, 1, call, &bytes)) return r;
  if (auto r = offset_of(*p.c, send, bytes, call, "send buffer", &p.op.send_arena, &p.op.send_off)) return r;
  if (p.c->rank == root) {
    if (auto r = offset_of(*p.c, recv, bytes, call, "recv buffer", &p.op.recv_arena, &p.op.recv_off)) return r;
  }
  p.op.count = count;
  p.op.root = root;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclAllGather(const void* send, void* recv, size_t send_count,
                                 acmecclDataType_t dtype, acmecclComm_t comm,
                                 acmeStream_t stream) {
  const char* call = "all_gather";
  Prep p;
  if (auto r = prepare(comm, call, kAllGather, dtype, false, 0, &p)) return r;
  if (send_count == 0) return acmecclSuccess;
  size_t bytes = 0, all = 0;
  if (auto r = bytes_of(send_count, dtype, 1, call, &bytes)) return r;
  if (auto r = bytes_of(send_count, dtype, static_cast<size_t>(p.c->nranks), call, &all)) return r;
  if (auto r = offset_of(*p.c, send, bytes, call, "send buffer", &p.op.send_arena, &p.op.send_off)) return r;
  if (auto r = offset_of(*p.c, recv, all, call, "recv buffer", &p.op.recv_arena, &p.op.recv_off)) return r;
  p.op.count = send_count;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclReduceScatter(const void* send, void* recv, size_t recv_count,
                                     acmecclDataType_t dtype, acmecclRedOp_t op,
                                     acmecclComm_t comm, acmeStream_t stream) {
  const char* call = "reduce_scatter";
  Prep p;
  if (auto r = prepare(comm, call, kReduceScatter, dtype, true, op, &p)) return r;
  if (recv_count == 0) return acmecclSuccess;
  size_t bytes = 0, all = 0;
  if (auto r = bytes_of(recv_count, dtype, 1, call, &bytes)) return r;
  if (auto r = bytes_of(recv_count, dtype, static_cast<size_t>(p.c->nranks), call, &all)) return r;
  if (auto r = offset_of(*p.c, send, all, call, "send buffer", &p.op.send_arena, &p.op.send_off)) return r;
  if (auto r = offset_of(*p.c, recv, bytes, call, "recv buffer", &p.op.recv_arena, &p.op.recv_off)) return r;
  p.op.count = recv_count;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclAllToAllv(const void* send, const size_t* send_counts,
                                 const size_t* send_offsets, void* recv, const size_t* recv_counts,
                                 const size_t* recv_offsets, acmecclDataType_t dtype,
                                 acmecclComm_t comm, acmeStream_t stream) {
  const char* call = "all_to_all";
  Prep p;
  if (auto r = prepare(comm, call, kAllToAll, dtype, false, 0, &p)) return r;
  if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
    return fail(acmecclInvalidArgument, "acmeccl: all_to_all: null count or offset array");
  const size_t n = static_cast<size_t>(p.c->nranks);
  p.op.a2a.assign(4 * n, 0);
  bool any_send = false, any_recv = false;
  // Each block is checked against the live allocation; offsets are kept relative
  // to the buffer's file offset (so a zero-sized rank may pass any pointer).
  for (size_t q = 0; q < n; ++q) {
    size_t sb = 0, rb = 0, so = 0, ro = 0;
    if (auto r = bytes_of(send_counts[q], dtype, 1, call, &sb)) return r;
    if (auto r = bytes_of(recv_counts[q], dtype, 1, call, &rb)) return r;
    if (auto r = bytes_of(send_offsets[q], dtype, 1, call, &so)) return r;
    if (auto r = bytes_of(recv_offsets[q], dtype, 1, call, &ro)) return r;
    // Every block of one buffer lies in the same device memory (one arena).
    auto place = [&](const void* at, size_t len, const char* what, bool send_side,
                     uint64_t* off) -> acmecclResult_t {
      ArenaId a;
      const std::string label = strprintf("%s block for rank %zu", what, q);
      if (auto r = offset_of(*p.c, at, len, call, label.c_str(), &a, off)) return r;
      bool& seen = send_side ? any_send : any_recv;
      ArenaId& arena = send_side ? p.op.send_arena : p.op.recv_arena;
      if (seen && !(arena == a))
        return fail(acmecclInvalidArgument,
                    "acmeccl: all_to_all: the %s blocks lie in different allocations", what);
      seen = true;
      arena = a;
      return acmecclSuccess;
    };
    if (sb) {
      if (auto r = place(static_cast<const char*>(send) + so, sb, "send", true, &p.op.a2a[0 * n + q]))
        return r;
    }
    if (rb) {
      if (auto r = place(static_cast<char*>(recv) + ro, rb, "recv", false, &p.op.a2a[2 * n + q]))
        return r;
    }
    p.op.a2a[1 * n + q] = sb;
    p.op.a2a[3 * n + q] = rb;
  }
  p.op.has_send = any_send;
  p.op.has_recv = any_recv;
  p.op.count = 0;
  return submit_coll(p.c, stream, std::move(p.op), call);
}

acmecclResult_t acmecclSend(const void* buf, size_t count, acmecclDataType_t dtype, int peer,
                            acmecclComm_t comm, acmeStream_t stream) {
  const char* call = "send";
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, call, &c)) return r;
  if (auto r = usable(*c, call)) return r;
  if (auto r = check_dtype(dtype, false, 0, call)) return r;
  if (peer < 0 || peer >= c->nranks)
    return fail(acmecclInvalidArgument, "acmeccl: send: peer %d is not a rank of %d", peer,
                c->nranks);
  P2POp op;
  op.send = true;
  op.peer = peer;
  if (auto r = bytes_of(count, dtype, 1, call, &op.bytes)) return r;
  if (op.bytes) {
    if (auto r = offset_of(*c, buf, op.bytes, call, "buffer", &op.arena, &op.off)) return r;
  }
  return submit_p2p(c, stream, op, call);
}

acmecclResult_t acmecclRecv(void* buf, size_t count, acmecclDataType_t dtype, int peer,
                            acmecclComm_t comm, acmeStream_t stream) {
  const char* call = "recv";
  std::shared_ptr<Comm> c;
  if (auto r = get(comm, call, &c)) return r;
  if (auto r = usable(*c, call)) return r;
  if (auto r = check_dtype(dtype, false, 0, call)) return r;
  if (peer < 0 || peer >= c->nranks)
    return fail(acmecclInvalidArgument, "acmeccl: recv: peer %d is not a rank of %d", peer,
                c->nranks);
  P2POp op;
  op.send = false;
  op.peer = peer;
  if (auto r = bytes_of(count, dtype, 1, call, &op.bytes)) return r;
  if (op.bytes) {
    if (auto r = offset_of(*c, buf, op.bytes, call, "buffer", &op.arena, &op.off)) return r;
  }
  return submit_p2p(c, stream, op, call);
}

acmecclResult_t acmecclGroupStart(void) {
  ++t_group.depth;
  return acmecclSuccess;
}

acmecclResult_t acmecclGroupEnd(void) {
  if (t_group.depth == 0)
    return fail(acmecclInvalidArgument, "acmeccl: group_end without group_start");
  if (--t_group.depth > 0) return acmecclSuccess;
  std::vector<Pending> ops = std::move(t_group.ops);
  t_group = Group{};
  // One piece of work per communicator, in the order the communicators came.
  acmecclResult_t result = acmecclSuccess;
  std::string first_error;
  std::vector<bool> taken(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (taken[i]) continue;
    Work w;
    for (size_t j = i; j < ops.size(); ++j) {
      if (taken[j] || ops[j].comm != ops[i].comm) continue;
      taken[j] = true;
      if (ops[j].p2p)
        w.p2p.push_back(ops[j].pp);
      else
        w.colls.push_back(std::move(ops[j].coll));
    }
    if (auto r = launch(ops[i].comm, ops[i].stream, std::move(w), "group_end")) {
      if (result == acmecclSuccess) {
        result = r;
        first_error = t_last_error;
      }
    }
  }
  if (result != acmecclSuccess) t_last_error = first_error;
  return result;
}

}  // extern "C"
