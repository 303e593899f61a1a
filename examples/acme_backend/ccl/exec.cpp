// acmeccl: the device work. Each queued call runs here, on the worker of the
// stream it was queued on (device work: nothing here runs on the caller's
// thread).
//
// Ranks on one host synchronise through their control blocks: a rank arrives
// at step k of collective #s by storing phase 4s+k in its block and ringing its
// peers' bells; it waits for peers by sleeping on its own bell (a futex on
// shared memory) after a short spin, checking on every wake-up and at least
// every 10 ms for an abort, for peers marked failed, and (every 50 ms) for
// peers whose process exited. Bytes move between the devices directly: every
// rank maps its peers' device memory, so a collective reads (or writes) a
// peer's buffer in place at the offset the peer published in its block.
//
// Across hosts, one rank per host (the lowest; for broadcast and reduce the
// root on its host) gathers its host's data through the same mappings and
// exchanges it with the other hosts' over TCP, then hands the result to its
// host's ranks: within the host first, then between hosts.
#include "internal.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace acmeccl {
namespace {

inline bool reached(uint32_t phase, uint32_t target) {
  return static_cast<int32_t>(phase - target) >= 0;
}

// Reductions up to this size: every rank reduces the whole buffer itself
// (one barrier less); above it each rank reduces 1/N and copies the rest.
constexpr size_t kSmallAllReduce = 64 << 10;
// Results of collectives on buffers this large are written with non-temporal
// stores: the buffers do not fit the caches anyway, and the stores then skip
// reading the destination first (a third of the memory traffic).
constexpr size_t kStreamBytes = 8 << 20;
// The chunk the cross-host algorithms pipeline through host staging memory.
constexpr size_t kNetChunk = 4 << 20;
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr long kSleepNs = 10'000'000;  // the longest a wait sleeps between checks
constexpr auto kLivenessEvery = std::chrono::milliseconds(50);

// Staging memory of this thread (a stream's worker), reused across calls.
thread_local std::vector<char> t_stage;
char* stage(size_t bytes) {
  if (t_stage.size() < bytes) t_stage.resize(bytes);
  return t_stage.data();
}

struct Xfer {
  int peer;
  bool send;
  char* p;
  size_t n;
  size_t done = 0;
};

class Exec {
 public:
  explicit Exec(Comm& c) : c_(c) {
    for (int r : c.local)
      if (r != c.rank) others_.push_back(r);
  }

  std::string what = "work";

  [[noreturn]] void die(const std::string& cause) {
    throw Failure("acmeccl: " + what + " on " + c_.where() + ": " + cause);
  }

  // ---- health ----
  void check(const std::vector<int>& watch) {
    if (c_.aborted.load()) fail_cause("the communicator was aborted (comm_abort)");
    if (c_.broken.load()) fail_cause("the communicator failed: " + c_.current_error());
    for (int r : watch) {
      const BoxHeader* h = c_.boxes[static_cast<size_t>(r)].h;
      if (r == c_.rank || !h) continue;
      if (h->failed.load(std::memory_order_acquire)) {
        char reason[sizeof h->reason];
        std::memcpy(reason, h->reason, sizeof reason);
        reason[sizeof reason - 1] = '\0';
        fail_cause(c_.rank_name(r) + " failed: " + reason);
      }
    }
    const auto now = Clock::now();
    if (now >= next_liveness_) {
      next_liveness_ = now + kLivenessEvery;
      for (int r : watch) {
        if (r == c_.rank || !c_.boxes[static_cast<size_t>(r)].h) continue;
        if (!acme_internal::process_alive(c_.info[static_cast<size_t>(r)].pid))
          fail_cause(c_.rank_name(r) + " exited");
      }
    }
  }

  // Waits for cond() (peers on this host), watching `watch`.
  template <class Cond>
  void wait(Cond cond, const std::vector<int>& watch) {
    if (cond()) return;
    const auto spin_end = Clock::now() + kSpin;
    while (Clock::now() < spin_end) {
      sched_yield();
      if (cond()) return;
    }
    BoxHeader* h = c_.me.h;
    for (;;) {
      const uint32_t seen = h->bell.load(std::memory_order_seq_cst);
      if (cond()) return;
      check(watch);
      h->sleepers.fetch_add(1, std::memory_order_seq_cst);
      if (!cond()) futex_wait(&h->bell, seen, kSleepNs);
      h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // ---- the link-speed option ----
  void start_meter() {
    t0_ = Clock::now();
    intra_ = sent_ = rcvd_ = 0;
  }
  // Bytes crossing a link take at least bytes / bandwidth: the work sleeps the difference.
  void settle() {
    const double gbps = acme_internal::link_gbps();
    if (gbps <= 0) return;
    const size_t bytes = std::max({intra_, sent_, rcvd_});
    const auto until =
        t0_ + std::chrono::nanoseconds(static_cast<long long>(static_cast<double>(bytes) / gbps));
    for (auto now = Clock::now(); now < until; now = Clock::now()) {
      if (c_.aborted.load()) fail_cause("the communicator was aborted (comm_abort)");
      std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(20)));
    }
  }

  // ---- collectives ----
  void collective(const CollOp& op) {
    base_ = static_cast<uint32_t>(op.seq * 4);
    start_meter();
    publish(op);
    if (c_.nhosts == 1) {
      switch (op.kind) {
        case kAllReduce: flat_all_reduce(op); break;
        case kBroadcast: flat_broadcast(op); break;
        case kReduce: flat_reduce(op); break;
        case kAllGather: flat_all_gather(op); break;
        case kReduceScatter: flat_reduce_scatter(op); break;
        case kAllToAll: flat_all_to_all(op); break;
      }
    } else {
      hier(op);
    }
    settle();
  }

  // ---- point to point ----
  void p2p(std::vector<P2POp>& ops);

  std::string last_cause_;

 private:
  [[noreturn]] void fail_cause(const std::string& cause) {
    last_cause_ = cause;
    die(cause);
  }

  const Desc& desc(int r) { return c_.boxes[static_cast<size_t>(r)].h->desc; }
  char* at(const ArenaId& a, uint64_t off) { return c_.view_of(a) + off; }
  // Rank r's send and recv buffers of the current collective (r on this host).
  char* sendv(int r) { return at(desc(r).send_arena, desc(r).send_off); }
  char* recvv(int r) { return at(desc(r).recv_arena, desc(r).recv_off); }
  const uint64_t* a2a(int r) { return c_.boxes[static_cast<size_t>(r)].a2a; }

  void publish(const CollOp& op) {
    Desc& d = c_.me.h->desc;
    d.seq = op.seq;
    d.kind = op.kind;
    d.dtype = static_cast<uint32_t>(op.dtype);
    d.op = op.op;
    d.root = op.root;
    d.count = op.count;
    d.send_arena = op.send_arena;
    d.recv_arena = op.recv_arena;
    d.send_off = op.send_off;
    d.recv_off = op.recv_off;
    if (op.kind == kAllToAll)
      std::memcpy(c_.me.a2a, op.a2a.data(), op.a2a.size() * sizeof(uint64_t));
  }
  void arrive(uint32_t k) {
    c_.me.h->phase.store(base_ + k, std::memory_order_release);
    for (int r : others_) c_.ring(r);
  }
  void wait_phase(const std::vector<int>& ranks, uint32_t k) {
    const uint32_t target = base_ + k;
    wait(
        [&] {
          for (int r : ranks)
            if (!reached(c_.boxes[static_cast<size_t>(r)].h->phase.load(std::memory_order_acquire),
                         target))
              return false;
          return true;
        },
        ranks);
  }
  // The peer is in the same collective as this rank (read after its arrival).
  void same(int r, const CollOp& op) {
    const Desc d = desc(r);
    if (d.seq == op.seq && d.kind == op.kind && d.dtype == static_cast<uint32_t>(op.dtype) &&
        d.op == op.op && d.root == op.root && d.count == op.count)
      return;
    fail_cause(strprintf(
        "collectives do not match: rank %d is in %s #%llu (count %llu, %s, op %s, root %d) while "
        "this rank is in %s #%llu (count %zu, %s, op %s, root %d); every rank must issue the same "
        "collectives in the same order",
        r, kind_name(d.kind), static_cast<unsigned long long>(d.seq),
        static_cast<unsigned long long>(d.count), dtype_name(static_cast<int>(d.dtype)),
        op_name(d.op), d.root, kind_name(op.kind), static_cast<unsigned long long>(op.seq),
        op.count, dtype_name(op.dtype), op_name(op.op), op.root));
  }
  void reduce_into(void* dst, const std::vector<const void*>& src, size_t count, const CollOp& op,
                   int avg_by) {
    if (!reduce(dst, src.data(), static_cast<int>(src.size()), count, op.dtype, op.op, avg_by))
      fail_cause(strprintf("cannot reduce %s with %s", dtype_name(op.dtype), op_name(op.op)));
  }
  int avg_of(const CollOp& op) const { return op.op == acmecclAvg ? c_.nranks : 1; }
  // Part i of n of `count` elements, in whole cache lines.
  static std::pair<size_t, size_t> part(size_t count, size_t el, int i, int n) {
    const size_t line = std::max<size_t>(1, 64 / el);
    size_t chunk = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    chunk = (chunk + line - 1) / line * line;
    const size_t lo = std::min(count, chunk * static_cast<size_t>(i));
    return {lo, std::min(count, lo + chunk)};
  }
  int local_index(int r) const {
    return static_cast<int>(std::find(c_.local.begin(), c_.local.end(), r) - c_.local.begin());
  }

  // ---- one host ----
  void flat_all_reduce(const CollOp& op);
  void flat_broadcast(const CollOp& op);
  void flat_reduce(const CollOp& op);
  void flat_all_gather(const CollOp& op);
  void flat_reduce_scatter(const CollOp& op);
  void flat_all_to_all(const CollOp& op);
  // ---- several hosts ----
  void hier(const CollOp& op);
  void net_all_reduce(const CollOp& op);
  void net_broadcast(const CollOp& op);
  void net_reduce(const CollOp& op);
  void net_all_gather(const CollOp& op);
  void net_reduce_scatter(const CollOp& op);
  void net_all_to_all(const CollOp& op);
  void run_net(std::vector<Xfer>& xs);
  [[noreturn]] void net_failed(int peer);
  std::string ctl_reason(int peer, int timeout_ms);

  Comm& c_;
  std::vector<int> others_;  // the other ranks of this host
  uint32_t base_ = 0;
  Clock::time_point next_liveness_ = Clock::now() + kLivenessEvery;
  Clock::time_point t0_;
  size_t intra_ = 0, sent_ = 0, rcvd_ = 0;
};

// ---- one host: every rank reads its peers' buffers in place ---------------------------------

void Exec::flat_all_reduce(const CollOp& op) {
  const size_t el = dtype_size(op.dtype), bytes = op.count * el;
  const int n = static_cast<int>(c_.local.size());
  arrive(1);
  wait_phase(others_, 1);
  std::vector<const void*> src(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int r = c_.local[static_cast<size_t>(i)];
    if (r != c_.rank) same(r, op);
    src[static_cast<size_t>(i)] = sendv(r);
  }
  char* mine = recvv(c_.rank);
  if (bytes <= kSmallAllReduce || op.count < static_cast<size_t>(n) * 64) {
    // Everyone reduces everything (same order on every rank: same bits),
    // through a scratch buffer: peers may still read this rank's send.
    char* tmp = stage(bytes);
    reduce_into(tmp, src, op.count, op, avg_of(op));
    intra_ += bytes * static_cast<size_t>(n - 1);
    arrive(2);
    wait_phase(others_, 2);
    std::memcpy(mine, tmp, bytes);
    return;
  }
  // Each rank reduces its part of everyone's send and writes the result into
  // everyone's recv (each part is read and written by one rank only, so in
  // place is safe): every byte crosses a link once, and no second pass.
  const int me = local_index(c_.rank);
  auto [lo, hi] = part(op.count, el, me, n);
  std::vector<const void*> sp(static_cast<size_t>(n));
  std::vector<void*> dp(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int r = c_.local[static_cast<size_t>(i)];
    sp[static_cast<size_t>(i)] = static_cast<const char*>(src[static_cast<size_t>(i)]) + lo * el;
    dp[static_cast<size_t>(i)] = r == c_.rank ? mine + lo * el : recvv(r) + lo * el;
  }
  (void)mine;
  if (hi > lo &&
      !reduce_to(dp.data(), n, sp.data(), n, hi - lo, op.dtype, op.op, avg_of(op), bytes >= kStreamBytes))
    fail_cause(strprintf("cannot reduce %s with %s", dtype_name(op.dtype), op_name(op.op)));
  intra_ += (hi - lo) * el * static_cast<size_t>(n - 1) * 2;
  arrive(2);
  wait_phase(others_, 2);  // every part is everywhere; nobody reads this rank's buffers any more
}

void Exec::flat_broadcast(const CollOp& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  arrive(1);
  char* mine = recvv(c_.rank);
  if (c_.rank == op.root) {
    const char* src = sendv(c_.rank);
    if (src != mine) std::memmove(mine, src, bytes);
    wait_phase(others_, 2);  // everyone has read the root's buffer
    return;
  }
  wait_phase({op.root}, 1);
  same(op.root, op);
  copy(mine, sendv(op.root), bytes, bytes >= kStreamBytes);
  intra_ += bytes;
  arrive(2);
}

void Exec::flat_reduce(const CollOp& op) {
  const size_t el = dtype_size(op.dtype);
  const int n = static_cast<int>(c_.local.size());
  arrive(1);
  wait_phase(others_, 1);
  std::vector<const void*> src(static_cast<size_t>(n));
  const int me = local_index(c_.rank);
  auto [lo, hi] = part(op.count, el, me, n);
  for (int i = 0; i < n; ++i) {
    const int r = c_.local[static_cast<size_t>(i)];
    if (r != c_.rank) same(r, op);
    src[static_cast<size_t>(i)] = sendv(r) + lo * el;
  }
  // Each rank reduces its part into the root's recv.
  void* dst = recvv(op.root) + lo * el;
  if (hi > lo && !reduce_to(&dst, 1, src.data(), n, hi - lo, op.dtype, op.op, avg_of(op),
                            op.count * el >= kStreamBytes))
    fail_cause(strprintf("cannot reduce %s with %s", dtype_name(op.dtype), op_name(op.op)));
  intra_ += (hi - lo) * el * static_cast<size_t>(n - 1 + (c_.rank != op.root));
  arrive(2);
  wait_phase(others_, 2);
}

void Exec::flat_all_gather(const CollOp& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  arrive(1);
  wait_phase(others_, 1);
  char* mine = recvv(c_.rank);
  const bool stream = bytes * c_.local.size() >= kStreamBytes;
  for (int r : c_.local) {
    if (r != c_.rank) same(r, op);
    const char* src = sendv(r);
    char* dst = mine + static_cast<size_t>(r) * bytes;
    if (src != dst) copy(dst, src, bytes, stream);
    if (r != c_.rank) intra_ += bytes;
  }
  arrive(2);
  wait_phase(others_, 2);
}

void Exec::flat_reduce_scatter(const CollOp& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  arrive(1);
  wait_phase(others_, 1);
  std::vector<const void*> src;
  for (int r : c_.local) {
    if (r != c_.rank) same(r, op);
    src.push_back(sendv(r) + static_cast<size_t>(c_.rank) * bytes);
  }
  void* dst = recvv(c_.rank);
  if (!reduce_to(&dst, 1, src.data(), static_cast<int>(src.size()), op.count, op.dtype, op.op,
                 avg_of(op), bytes * src.size() >= kStreamBytes))
    fail_cause(strprintf("cannot reduce %s with %s", dtype_name(op.dtype), op_name(op.op)));
  intra_ += bytes * (src.size() - 1);
  arrive(2);
  wait_phase(others_, 2);
}

void Exec::flat_all_to_all(const CollOp& op) {
  const size_t n = static_cast<size_t>(c_.nranks);
  const size_t me = static_cast<size_t>(c_.rank);
  arrive(1);
  wait_phase(others_, 1);
  for (int r : c_.local) {
    if (r != c_.rank) same(r, op);
    const uint64_t* pa = a2a(r);
    const size_t ur = static_cast<size_t>(r);
    const uint64_t sent = pa[1 * n + me], expect = op.a2a[3 * n + ur];
    if (sent != expect)
      fail_cause(strprintf("all_to_all sizes do not match: rank %d sends %llu bytes to rank %d, "
                           "which expects %llu",
                           r, static_cast<unsigned long long>(sent), c_.rank,
                           static_cast<unsigned long long>(expect)));
    if (sent) std::memcpy(at(op.recv_arena, op.a2a[2 * n + ur]), at(desc(r).send_arena, pa[0 * n + me]), sent);
    if (r != c_.rank) intra_ += sent;
  }
  arrive(2);
  wait_phase(others_, 2);
}

// ---- several hosts: within each host first, then between hosts ---------------------------------

// The actor of host j for this collective.
static int actor_of(const Comm& c, const CollOp& op, int j) {
  if ((op.kind == kBroadcast || op.kind == kReduce) && c.host_of[static_cast<size_t>(op.root)] == j)
    return op.root;
  return c.host_ranks[static_cast<size_t>(j)].front();
}


void Exec::hier(const CollOp& op) {
  // The rank of each host that works for it (the root on its host for
  // broadcast and reduce).
  const int root_host = (op.kind == kBroadcast || op.kind == kReduce)
                            ? c_.host_of[static_cast<size_t>(op.root)]
                            : -1;
  const int actor = c_.host == root_host ? op.root : c_.local.front();
  arrive(1);
  if (c_.rank != actor) {
    wait_phase({actor}, 2);  // it reads and writes this rank's buffers, then says so
    return;
  }
  wait_phase(others_, 1);
  for (int r : others_) same(r, op);
  // The acting ranks of the hosts check they are in the same collective
  // before any byte of it is on the links (else the byte streams would go out
  // of step instead of failing).
  {
    struct Hdr {
      uint64_t seq, count;
      uint32_t kind, dtype;
      int32_t op, root;
    };
    const Hdr mine{op.seq, op.count, op.kind, static_cast<uint32_t>(op.dtype), op.op, op.root};
    std::vector<Hdr> theirs(static_cast<size_t>(c_.nhosts));
    std::vector<Xfer> xs;
    for (int j = 0; j < c_.nhosts; ++j) {
      if (j == c_.host) continue;
      const int peer = actor_of(c_, op, j);
      xs.push_back({peer, true, reinterpret_cast<char*>(const_cast<Hdr*>(&mine)), sizeof mine});
      xs.push_back({peer, false, reinterpret_cast<char*>(&theirs[static_cast<size_t>(j)]), sizeof mine});
    }
    run_net(xs);
    for (int j = 0; j < c_.nhosts; ++j) {
      const Hdr& t = theirs[static_cast<size_t>(j)];
      if (j == c_.host || (t.seq == mine.seq && t.count == mine.count && t.kind == mine.kind &&
                           t.dtype == mine.dtype && t.op == mine.op && t.root == mine.root))
        continue;
      fail_cause(strprintf(
          "collectives do not match: rank %d (host '%s') is in %s #%llu (count %llu, %s, op %s, "
          "root %d) while this rank is in %s #%llu (count %zu, %s, op %s, root %d); every rank "
          "must issue the same collectives in the same order",
          actor_of(c_, op, j), c_.info[static_cast<size_t>(actor_of(c_, op, j))].host,
          kind_name(t.kind), static_cast<unsigned long long>(t.seq),
          static_cast<unsigned long long>(t.count), dtype_name(static_cast<int>(t.dtype)),
          op_name(t.op), t.root, kind_name(op.kind), static_cast<unsigned long long>(op.seq),
          op.count, dtype_name(op.dtype), op_name(op.op), op.root));
    }
  }
  switch (op.kind) {
    case kAllReduce: net_all_reduce(op); break;
    case kBroadcast: net_broadcast(op); break;
    case kReduce: net_reduce(op); break;
    case kAllGather: net_all_gather(op); break;
    case kReduceScatter: net_reduce_scatter(op); break;
    case kAllToAll: net_all_to_all(op); break;
  }
  arrive(2);
}

void Exec::net_all_reduce(const CollOp& op) {
  const size_t el = dtype_size(op.dtype);
  const int H = c_.nhosts, h = c_.host;
  const size_t nl = c_.local.size();
  char* mine = recvv(c_.rank);
  const size_t C = std::max<size_t>(static_cast<size_t>(H), kNetChunk / el);
  // Staging: the host's partial sum of a chunk (several local ranks), and each
  // other host's partial sum of this host's share.
  const size_t rstride = (C / static_cast<size_t>(H) + 1) * el;
  const size_t psize = nl > 1 ? C * el : 0;
  char* P = stage(psize + static_cast<size_t>(H) * rstride);
  char* R = P + psize;
  for (size_t c0 = 0; c0 < op.count; c0 += C) {
    const size_t L = std::min(C, op.count - c0);
    auto lo = [&](int j) { return L * static_cast<size_t>(j) / static_cast<size_t>(H); };
    // The host's partial sum of this chunk.
    const char* part_sum;
    if (nl > 1) {
      std::vector<const void*> src;
      for (int r : c_.local) src.push_back(sendv(r) + c0 * el);
      reduce_into(P, src, L, op, 1);
      intra_ += L * el * (nl - 1);
      part_sum = P;
    } else {
      part_sum = sendv(c_.rank) + c0 * el;
    }
    // Each host reduces its share of the chunk from everyone's partial sums ...
    std::vector<Xfer> xs;
    for (int j = 0; j < H; ++j) {
      if (j == h) continue;
      const int peer = actor_of(c_, op, j);
      xs.push_back({peer, true, const_cast<char*>(part_sum) + lo(j) * el, (lo(j + 1) - lo(j)) * el});
      xs.push_back({peer, false, R + static_cast<size_t>(j) * rstride, (lo(h + 1) - lo(h)) * el});
    }
    run_net(xs);
    std::vector<const void*> in{part_sum + lo(h) * el};
    for (int j = 0; j < H; ++j)
      if (j != h) in.push_back(R + static_cast<size_t>(j) * rstride);
    reduce_into(mine + (c0 + lo(h)) * el, in, lo(h + 1) - lo(h), op, avg_of(op));
    // ... and hands it to the others.
    xs.clear();
    for (int j = 0; j < H; ++j) {
      if (j == h) continue;
      const int peer = actor_of(c_, op, j);
      xs.push_back({peer, true, mine + (c0 + lo(h)) * el, (lo(h + 1) - lo(h)) * el});
      xs.push_back({peer, false, mine + (c0 + lo(j)) * el, (lo(j + 1) - lo(j)) * el});
    }
    run_net(xs);
    for (int r : others_) {
      std::memcpy(recvv(r) + c0 * el, mine + c0 * el, L * el);
      intra_ += L * el;
    }
  }
}

void Exec::net_broadcast(const CollOp& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  char* mine = recvv(c_.rank);
  std::vector<Xfer> xs;
  if (c_.rank == op.root) {
    const char* src = sendv(c_.rank);
    for (int j = 0; j < c_.nhosts; ++j)
      if (j != c_.host) xs.push_back({actor_of(c_, op, j), true, const_cast<char*>(src), bytes});
    run_net(xs);
    if (src != mine) std::memmove(mine, src, bytes);
  } else {
    xs.push_back({op.root, false, mine, bytes});
    run_net(xs);
  }
  for (int r : others_) {
    std::memcpy(recvv(r), mine, bytes);
    intra_ += bytes;
  }
}

void Exec::net_reduce(const CollOp& op) {
  const size_t el = dtype_size(op.dtype);
  const int H = c_.nhosts;
  const int root_host = c_.host_of[static_cast<size_t>(op.root)];
  const size_t nl = c_.local.size();
  const size_t C = kNetChunk / el;
  char* P = stage(C * el * static_cast<size_t>(H));
  for (size_t c0 = 0; c0 < op.count; c0 += C) {
    const size_t L = std::min(C, op.count - c0);
    const char* part_sum;
    if (nl > 1) {
      std::vector<const void*> src;
      for (int r : c_.local) src.push_back(sendv(r) + c0 * el);
      reduce_into(P, src, L, op, 1);
      intra_ += L * el * (nl - 1);
      part_sum = P;
    } else {
      part_sum = sendv(c_.rank) + c0 * el;
    }
    std::vector<Xfer> xs;
    if (c_.host != root_host) {
      xs.push_back({op.root, true, const_cast<char*>(part_sum), L * el});
      run_net(xs);
      continue;
    }
    std::vector<const void*> in{part_sum};
    for (int j = 0; j < H; ++j) {
      if (j == root_host) continue;
      char* r = P + C * el * static_cast<size_t>(j + 1 > root_host ? j : j + 1);
      xs.push_back({actor_of(c_, op, j), false, r, L * el});
      in.push_back(r);
    }
    run_net(xs);
    reduce_into(recvv(c_.rank) + c0 * el, in, L, op, avg_of(op));
  }
}

void Exec::net_all_gather(const CollOp& op) {
  const size_t bytes = op.count * dtype_size(op.dtype);
  char* mine = recvv(c_.rank);
  std::vector<Xfer> xs;
  for (int j = 0; j < c_.nhosts; ++j) {
    if (j == c_.host) continue;
    const int peer = actor_of(c_, op, j);
    for (int q : c_.local) xs.push_back({peer, true, sendv(q), bytes});
    for (int p : c_.host_ranks[static_cast<size_t>(j)])
      xs.push_back({peer, false, mine + static_cast<size_t>(p) * bytes, bytes});
  }
  run_net(xs);
  for (int b : c_.local) {
    char* dst = recvv(b);
    for (int p = 0; p < c_.nranks; ++p) {
      const bool here = c_.host_of[static_cast<size_t>(p)] == c_.host;
      const char* src = here ? sendv(p) : mine + static_cast<size_t>(p) * bytes;
      char* d = dst + static_cast<size_t>(p) * bytes;
      if (src == d) continue;
      std::memcpy(d, src, bytes);
      if (b != c_.rank || (here && p != c_.rank)) intra_ += bytes;
    }
  }
}

void Exec::net_reduce_scatter(const CollOp& op) {
  const size_t el = dtype_size(op.dtype);
  const int H = c_.nhosts, h = c_.host;
  const size_t n = static_cast<size_t>(c_.nranks), nl = c_.local.size();
  const size_t W = std::max<size_t>(1, std::min(op.count, (2 * kNetChunk / el) / n));
  char* SP = stage((n + static_cast<size_t>(H) * nl) * W * el);
  char* R = SP + n * W * el;  // [host][local index] rows of W
  auto row = [&](char* base, size_t i) { return base + i * W * el; };
  for (size_t w0 = 0; w0 < op.count; w0 += W) {
    const size_t wl = std::min(W, op.count - w0);
    // This host's partial sums of every rank's slot.
    for (size_t p = 0; p < n; ++p) {
      std::vector<const void*> src;
      for (int q : c_.local) src.push_back(sendv(q) + (p * op.count + w0) * el);
      reduce_into(row(SP, p), src, wl, op, 1);
    }
    intra_ += n * wl * el * (nl - 1);
    std::vector<Xfer> xs;
    for (int j = 0; j < H; ++j) {
      if (j == h) continue;
      const int peer = actor_of(c_, op, j);
      for (int p : c_.host_ranks[static_cast<size_t>(j)])
        xs.push_back({peer, true, row(SP, static_cast<size_t>(p)), wl * el});
      for (size_t i = 0; i < nl; ++i)
        xs.push_back({peer, false, row(R, static_cast<size_t>(j) * nl + i), wl * el});
    }
    run_net(xs);
    for (size_t i = 0; i < nl; ++i) {
      const int p = c_.local[i];
      std::vector<const void*> in{row(SP, static_cast<size_t>(p))};
      for (int j = 0; j < H; ++j)
        if (j != h) in.push_back(row(R, static_cast<size_t>(j) * nl + i));
      reduce_into(recvv(p) + w0 * el, in, wl, op, avg_of(op));
      if (p != c_.rank) intra_ += wl * el;
    }
  }
}

void Exec::net_all_to_all(const CollOp& op) {
  const size_t n = static_cast<size_t>(c_.nranks);
  auto send_off = [&](int a, int b) { return a2a(a)[0 * n + static_cast<size_t>(b)]; };
  auto send_bytes = [&](int a, int b) { return a2a(a)[1 * n + static_cast<size_t>(b)]; };
  auto recv_off = [&](int b, int a) { return a2a(b)[2 * n + static_cast<size_t>(a)]; };
  auto recv_bytes = [&](int b, int a) { return a2a(b)[3 * n + static_cast<size_t>(a)]; };
  // First the sizes each host sends each other host (checked), then the blocks.
  std::vector<std::vector<uint64_t>> out(static_cast<size_t>(c_.nhosts)),
      in(static_cast<size_t>(c_.nhosts));
  std::vector<Xfer> xs;
  for (int j = 0; j < c_.nhosts; ++j) {
    if (j == c_.host) continue;
    const auto& there = c_.host_ranks[static_cast<size_t>(j)];
    auto& o = out[static_cast<size_t>(j)];
    for (int a : c_.local)
      for (int b : there) o.push_back(send_bytes(a, b));
    in[static_cast<size_t>(j)].assign(there.size() * c_.local.size(), 0);
    const int peer = actor_of(c_, op, j);
    xs.push_back({peer, true, reinterpret_cast<char*>(o.data()), o.size() * sizeof(uint64_t)});
    xs.push_back({peer, false, reinterpret_cast<char*>(in[static_cast<size_t>(j)].data()),
                  in[static_cast<size_t>(j)].size() * sizeof(uint64_t)});
  }
  run_net(xs);
  auto mismatch = [&](int a, int b, uint64_t sent, uint64_t expect) {
    fail_cause(strprintf("all_to_all sizes do not match: rank %d sends %llu bytes to rank %d, "
                         "which expects %llu",
                         a, static_cast<unsigned long long>(sent), b,
                         static_cast<unsigned long long>(expect)));
  };
  xs.clear();
  for (int j = 0; j < c_.nhosts; ++j) {
    if (j == c_.host) continue;
    const auto& there = c_.host_ranks[static_cast<size_t>(j)];
    const int peer = actor_of(c_, op, j);
    for (int a : c_.local)
      for (int b : there)
        if (send_bytes(a, b)) xs.push_back({peer, true, at(desc(a).send_arena, send_off(a, b)), send_bytes(a, b)});
    size_t k = 0;
    for (int a : there)
      for (int b : c_.local) {
        const uint64_t sent = in[static_cast<size_t>(j)][k++];
        if (sent != recv_bytes(b, a)) mismatch(a, b, sent, recv_bytes(b, a));
        if (sent) xs.push_back({peer, false, at(desc(b).recv_arena, recv_off(b, a)), sent});
      }
  }
  run_net(xs);
  for (int a : c_.local)
    for (int b : c_.local) {
      if (send_bytes(a, b) != recv_bytes(b, a)) mismatch(a, b, send_bytes(a, b), recv_bytes(b, a));
      if (send_bytes(a, b)) std::memcpy(at(desc(b).recv_arena, recv_off(b, a)), at(desc(a).send_arena, send_off(a, b)), send_bytes(a, b));
      if (a != c_.rank || b != c_.rank) intra_ += send_bytes(a, b);
    }
}

// ---- TCP -------------------------------------------------------------------------------------------

std::string Exec::ctl_reason(int peer, int timeout_ms) {
  const int fd = c_.ctl_fd[static_cast<size_t>(peer)];
  if (fd < 0) return {};
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) <= 0) return {};
  uint32_t len = 0;
  if (recv(fd, &len, 4, MSG_WAITALL) != 4 || len == 0 || len > 1000) return {};
  std::string s(len, '\0');
  if (recv(fd, s.data(), len, MSG_WAITALL) != static_cast<ssize_t>(len)) return {};
  return s;
}

void Exec::net_failed(int peer) {
  if (c_.aborted.load()) fail_cause("the communicator was aborted (comm_abort)");
  const std::string reason = ctl_reason(peer, 300);
  if (!reason.empty()) fail_cause(reason);
  fail_cause("the link to " + c_.rank_name(peer) + " broke (it exited or failed)");
}

// Moves every transfer, several at once (transfers to one peer in one
// direction go in list order).
void Exec::run_net(std::vector<Xfer>& xs) {
  const auto& fds = c_.coll_fd;
  std::vector<pollfd> pfds;
  std::vector<int> which;  // index into xs, or -1 - peer for a control link
  std::vector<bool> ctl_closed(static_cast<size_t>(c_.nranks), false);
  for (;;) {
    pfds.clear();
    which.clear();
    std::vector<bool> busy_send(static_cast<size_t>(c_.nranks), false),
        busy_recv(static_cast<size_t>(c_.nranks), false), peer_seen(static_cast<size_t>(c_.nranks), false);
    for (size_t i = 0; i < xs.size(); ++i) {
      Xfer& x = xs[i];
      if (x.done >= x.n) continue;
      auto& busy = x.send ? busy_send : busy_recv;
      if (busy[static_cast<size_t>(x.peer)]) continue;
      busy[static_cast<size_t>(x.peer)] = true;
      pfds.push_back({fds[static_cast<size_t>(x.peer)], static_cast<short>(x.send ? POLLOUT : POLLIN), 0});
      which.push_back(static_cast<int>(i));
      if (!peer_seen[static_cast<size_t>(x.peer)] && !ctl_closed[static_cast<size_t>(x.peer)]) {
        peer_seen[static_cast<size_t>(x.peer)] = true;
        pfds.push_back({c_.ctl_fd[static_cast<size_t>(x.peer)], POLLIN, 0});
        which.push_back(-1 - x.peer);
      }
    }
    if (which.empty() || std::all_of(which.begin(), which.end(), [](int w) { return w < 0; }))
      return;
    const int r = poll(pfds.data(), pfds.size(), 10);
    check({});
    if (r <= 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      if (which[k] < 0) {
        const int peer = -1 - which[k];
        // A reason on the control link ends the work; its close alone does not
        // (a peer that finished may exit while its last bytes are still here).
        char probe;
        const ssize_t got = recv(pfds[k].fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
        if (got > 0) net_failed(peer);
        if (got == 0) ctl_closed[static_cast<size_t>(peer)] = true;
        continue;
      }
      Xfer& x = xs[static_cast<size_t>(which[k])];
      const size_t want = std::min<size_t>(x.n - x.done, 4 << 20);
      const ssize_t got = x.send ? send(pfds[k].fd, x.p + x.done, want, MSG_NOSIGNAL | MSG_DONTWAIT)
                                 : recv(pfds[k].fd, x.p + x.done, want, MSG_DONTWAIT);
      if (got > 0) {
        x.done += static_cast<size_t>(got);
        (x.send ? sent_ : rcvd_) += static_cast<size_t>(got);
      } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        net_failed(x.peer);
      }
    }
  }
}

// ---- point to point --------------------------------------------------------------------------------
// On one host: the sender posts (offset, size) in a slot of its block for the
// receiver (kP2PSlots per pair, used round robin by sequence number), the
// receiver copies from the sender's device memory and acknowledges in its own
// block; the sender's work ends with the acknowledgement. Across hosts: a
// header (sequence, size) and the bytes on the pair's TCP link, in sequence
// order per direction. All calls of a group progress in one loop.

void Exec::p2p(std::vector<P2POp>& ops) {
  struct State {
    bool posted = false, done = false, started = false;
    uint64_t hdr[2] = {0, 0};
    Xfer hx{0, false, nullptr, 0}, bx{0, false, nullptr, 0};
  };
  std::vector<State> st(ops.size());
  std::vector<int> watch;
  for (auto& o : ops)
    if (c_.boxes[static_cast<size_t>(o.peer)].h &&
        std::find(watch.begin(), watch.end(), o.peer) == watch.end())
      watch.push_back(o.peer);
  const size_t K = kP2PSlots;
  size_t left = ops.size();
  auto spin_end = Clock::now() + kSpin;
  while (left) {
    const uint32_t seen = c_.me.h->bell.load(std::memory_order_seq_cst);
    bool progress = false, net = false;
    std::vector<pollfd> pfds;
    for (size_t i = 0; i < ops.size(); ++i) {
      P2POp& o = ops[i];
      State& s = st[i];
      if (s.done) continue;
      const size_t peer = static_cast<size_t>(o.peer);
      if (c_.boxes[peer].h) {  // this host
        if (o.send) {
          P2PSlot& slot = c_.me.out[peer * K + o.seq % K];
          std::atomic<uint64_t>& ack = c_.boxes[peer].ack[static_cast<size_t>(c_.rank)];
          if (!s.posted && ack.load(std::memory_order_acquire) + K >= o.seq) {
            slot.arena = o.arena;
            slot.off = o.off;
            slot.bytes = o.bytes;
            slot.seq.store(o.seq, std::memory_order_release);
            c_.ring(o.peer);
            s.posted = progress = true;
          }
          if (s.posted && ack.load(std::memory_order_acquire) >= o.seq) {
            s.done = progress = true;
            --left;
          }
        } else {
          P2PSlot& slot = c_.boxes[peer].out[static_cast<size_t>(c_.rank) * K + o.seq % K];
          std::atomic<uint64_t>& mine = c_.me.ack[peer];
          if (mine.load(std::memory_order_relaxed) + 1 == o.seq &&
              slot.seq.load(std::memory_order_acquire) == o.seq) {
            if (slot.bytes != o.bytes)
              fail_cause(strprintf("send/recv sizes do not match: rank %d sends %llu bytes, rank "
                                   "%d receives %llu",
                                   o.peer, static_cast<unsigned long long>(slot.bytes), c_.rank,
                                   static_cast<unsigned long long>(o.bytes)));
            if (o.bytes) std::memcpy(at(o.arena, o.off), at(slot.arena, slot.off), o.bytes);
            if (o.peer != c_.rank) intra_ += o.bytes;
            mine.store(o.seq, std::memory_order_release);
            c_.ring(o.peer);
            s.done = progress = true;
            --left;
          }
        }
        continue;
      }
      // Another host.
      if (!s.started) {
        std::lock_guard<std::mutex> lk(c_.mu);
        auto& turn = o.send ? c_.net_send_turn : c_.net_recv_turn;
        if (turn[peer] != o.seq) continue;
        s.started = true;
        s.hdr[0] = o.seq;
        s.hdr[1] = o.bytes;
        s.hx = {o.peer, o.send, reinterpret_cast<char*>(s.hdr), sizeof s.hdr};
        s.bx = {o.peer, o.send, at(o.arena, o.off), o.bytes};
      }
      net = true;
      Xfer& x = s.hx.done < s.hx.n ? s.hx : s.bx;
      const int fd = c_.p2p_fd[peer];
      const size_t want = std::min<size_t>(x.n - x.done, 4 << 20);
      ssize_t got = 0;
      if (want) {
        got = x.send ? send(fd, x.p + x.done, want, MSG_NOSIGNAL | MSG_DONTWAIT)
                     : recv(fd, x.p + x.done, want, MSG_DONTWAIT);
        if (got > 0) {
          x.done += static_cast<size_t>(got);
          (x.send ? sent_ : rcvd_) += static_cast<size_t>(got);
          progress = true;
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          net_failed(o.peer);
        }
      }
      if (!o.send && &x == &s.hx && s.hx.done == s.hx.n &&
          (s.hdr[0] != o.seq || s.hdr[1] != o.bytes))
        fail_cause(strprintf("send/recv sizes do not match: rank %d sends %llu bytes (message "
                             "%llu), rank %d receives %llu (message %llu)",
                             o.peer, static_cast<unsigned long long>(s.hdr[1]),
                             static_cast<unsigned long long>(s.hdr[0]), c_.rank,
                             static_cast<unsigned long long>(o.bytes),
                             static_cast<unsigned long long>(o.seq)));
      if (s.hx.done == s.hx.n && s.bx.done == s.bx.n) {
        {
          std::lock_guard<std::mutex> lk(c_.mu);
          (o.send ? c_.net_send_turn : c_.net_recv_turn)[peer]++;
        }
        c_.cv.notify_all();
        s.done = progress = true;
        --left;
        continue;
      }
      if (got <= 0) {
        pfds.push_back({fd, static_cast<short>(o.send ? POLLOUT : POLLIN), 0});
        pfds.push_back({c_.ctl_fd[peer], POLLIN, 0});
      }
    }
    if (!left) break;
    if (progress) {
      spin_end = Clock::now() + kSpin;
      continue;
    }
    if (Clock::now() < spin_end) {
      sched_yield();
      continue;
    }
    check(watch);
    if (net || !pfds.empty()) {
      // Sockets to wait for (and this host's peers: poll briefly then look again).
      if (poll(pfds.data(), pfds.size(), watch.empty() ? 10 : 1) > 0)
        for (size_t k = 1; k < pfds.size(); k += 2) {
          char probe;
          if ((pfds[k].revents & POLLIN) &&
              recv(pfds[k].fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
            for (auto& o : ops)
              if (c_.ctl_fd[static_cast<size_t>(o.peer)] == pfds[k].fd) net_failed(o.peer);
          }
        }
      continue;
    }
    BoxHeader* h = c_.me.h;
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    futex_wait(&h->bell, seen, kSleepNs);
    h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace

void execute(const std::shared_ptr<Comm>& cp, Work& w) {
  Comm& c = *cp;
  Exec ex(c);
  try {
    if (c.broken.load()) {
      ex.what = w.colls.empty() ? std::string(w.p2p.front().send ? "send" : "recv")
                                : std::string(kind_name(w.colls.front().kind)) + " #" +
                                      std::to_string(w.colls.front().seq);
      ex.die("the communicator failed earlier: " + c.current_error());
    }
    for (CollOp& op : w.colls) {
      ex.what = std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq);
      {
        // Collectives of a communicator run one at a time, in sequence order.
        std::unique_lock<std::mutex> lk(c.mu);
        while (c.coll_turn != op.seq) {
          if (c.broken.load()) {
            lk.unlock();
            ex.die("the communicator failed: " + c.current_error());
          }
          c.cv.wait_for(lk, std::chrono::milliseconds(10));
        }
      }
      ex.collective(op);
      {
        std::lock_guard<std::mutex> lk(c.mu);
        c.coll_turn = op.seq + 1;
      }
      c.cv.notify_all();
    }
    if (!w.p2p.empty()) {
      ex.what = w.p2p.size() == 1
                    ? strprintf("%s %s rank %d (#%llu)", w.p2p[0].send ? "send" : "recv",
                                w.p2p[0].send ? "to" : "from", w.p2p[0].peer,
                                static_cast<unsigned long long>(w.p2p[0].seq))
                    : strprintf("group of %zu sends/recvs", w.p2p.size());
      ex.start_meter();
      ex.p2p(w.p2p);
      ex.settle();
    }
  } catch (const Failure& f) {
    const std::string cause = ex.last_cause_.empty() ? std::string(f.what()) : ex.last_cause_;
    c.record_failure(f.what(), cause);
    throw;
  } catch (const std::exception& e) {  // out of memory for staging, ...
    const std::string msg = "acmeccl: " + ex.what + " on " + c.where() + ": " + e.what();
    c.record_failure(msg, e.what());
    throw Failure(msg);
  }
}

}  // namespace acmeccl
