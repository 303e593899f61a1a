// acmeccl: what its sources share (not part of the API).
//   bootstrap.cpp  unique ids, the rendezvous of comm_init, the TCP links between hosts
//   comm.cpp       the C API: communicators, errors, abort, queuing calls, groups
//   exec.cpp       the device work: synchronisation through the control blocks,
//                  the collectives within a host and across hosts, point to point
//   reduce.cpp     the reduction kernels
#pragma once

#include "acmeccl.h"
#include "reduce.h"

#include "../runtime/ipc.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace acmeccl {

using Clock = std::chrono::steady_clock;

// ---- errors ------------------------------------------------------------------------
extern thread_local std::string t_last_error;
[[gnu::format(printf, 2, 3)]] acmecclResult_t fail(acmecclResult_t code, const char* fmt, ...);
acmecclResult_t fail_str(acmecclResult_t code, std::string msg);
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// What ends a piece of device work (exec.cpp throws it; the message is complete).
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- what ranks tell each other at comm_init ----------------------------------------
struct RankInfo {
  uint32_t magic;
  int32_t rank, nranks, device;
  int32_t pid, pad;
  uint64_t nonce;                // the process's IPC server (acme runtime)
  uint64_t arena_uid, arena_len;  // its device memory (uid 0: cannot be shared)
  uint64_t box_key, box_len;      // its control block
  uint32_t addr;                  // IPv4 (network order) and port of its TCP links
  uint16_t port, pad2;
  char host[64];                  // ACME_HOST_ID
  char boot[40];                  // the machine (boot id): one host is one machine
  char unshareable[160];          // why its memory cannot be shared, if it cannot
};

// ---- the control block: one per rank, in shared memory --------------------------------
// A rank writes only its own block, except the doorbell: whoever changes what a
// rank may be waiting for rings that rank's bell (a futex), so every rank
// sleeps on one word of its own.

enum Kind : uint32_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
};
const char* kind_name(uint32_t kind);

// The device memory a buffer lives in: a process's arena file (usually the
// rank's own device memory; memory it opened from an IPC handle lives in its
// owner's). Peers reach it through their mapping of that file.
struct ArenaId {
  int32_t pid, pad;
  uint64_t nonce, uid;
  bool operator==(const ArenaId& o) const {
    return pid == o.pid && nonce == o.nonce && uid == o.uid;
  }
};

// The collective a rank is in (valid from its arrival at the collective until
// every rank that reads it has passed the collective's last barrier).
struct Desc {
  uint64_t seq;
  uint32_t kind, dtype;
  int32_t op, root;
  uint64_t count;
  ArenaId send_arena, recv_arena;
  uint64_t send_off, recv_off;  // file offsets in those arenas
};

struct P2PSlot {
  std::atomic<uint64_t> seq;  // the send (per pair, from 1) this slot holds now
  ArenaId arena;
  uint64_t off, bytes;
};

struct BoxHeader {
  std::atomic<uint32_t> bell;      // bumped by whoever changes what this rank waits for
  std::atomic<uint32_t> sleepers;  // threads of this rank sleeping on the bell
  std::atomic<uint32_t> phase;     // this rank's progress through collectives (4 per collective)
  std::atomic<uint32_t> failed;    // 1: this rank's communicator failed; `reason` says why
  int32_t pid, rank;
  Desc desc;
  char reason[512];
};

constexpr int kP2PSlots = 8;

// The block's parts for a communicator of n ranks.
struct Box {
  BoxHeader* h = nullptr;
  uint64_t* a2a = nullptr;  // [4][n]: send_off, send_bytes, recv_off, recv_bytes per peer
  P2PSlot* out = nullptr;   // [n][kP2PSlots]: sends to each peer
  std::atomic<uint64_t>* ack = nullptr;  // [n]: the last send received in order from each peer

  static size_t bytes(int n);
  void bind(void* base, int n);
};

// ---- queued work ----------------------------------------------------------------------
struct CollOp {
  uint32_t kind = 0;
  uint64_t seq = 0;
  int dtype = 0, op = 0, root = 0;
  size_t count = 0;                 // elements (all_gather: per rank; reduce_scatter: per rank)
  ArenaId send_arena{}, recv_arena{};
  uint64_t send_off = 0, recv_off = 0;
  bool has_send = false, has_recv = false;
  std::vector<uint64_t> a2a;        // all_to_all: [4][n] as in Box::a2a
};

struct P2POp {
  bool send = false;
  int peer = 0;
  uint64_t seq = 0;  // per (this rank, peer, direction), from 1
  ArenaId arena{};
  uint64_t off = 0, bytes = 0;
};

struct Work {
  std::vector<CollOp> colls;
  std::vector<P2POp> p2p;
};

// ---- communicators ---------------------------------------------------------------------
struct Comm {
  uint64_t id = 0;      // from the unique id: names the communicator in messages
  std::string name;     // "communicator 1a2b3c4d"
  int rank = 0, nranks = 0, device = 0;
  uint64_t fork_epoch = 0;
  std::vector<RankInfo> info;

  // Hosts: index of each rank's host (hosts numbered by their lowest rank).
  int nhosts = 1, host = 0;
  std::vector<int> host_of;
  std::vector<std::vector<int>> host_ranks;  // ascending
  std::vector<int> local;                     // host_ranks[host]

  // This host: peers' device memory (views at file offset 0) and control blocks.
  std::vector<char*> views;  // per rank, null off this host
  std::vector<Box> boxes;    // per rank, unbound off this host
  std::vector<std::pair<void*, size_t>> maps;  // control blocks mapped here
  std::vector<acme_internal::ArenaRef> mapped_arenas;
  // Other processes' device memory a buffer lived in (opened from IPC
  // handles), mapped on first use by the work (guarded by mu).
  std::vector<std::pair<ArenaId, char*>> extra_views;
  // The view of an arena: a rank's of this host, or mapped now (throws Failure).
  char* view_of(const ArenaId& a);
  Box me;
  int box_fd = -1;
  uint64_t box_key = 0;

  // Other hosts: TCP links per rank (-1 on this host): collectives, point to
  // point, and the control link a failing rank says why on.
  std::vector<int> coll_fd, p2p_fd, ctl_fd;

  // Health.
  std::atomic<bool> aborted{false};
  std::atomic<bool> broken{false};
  std::mutex err_mu;
  std::string error;  // the first failure's message (async error)

  // Host-side order: sequence numbers handed out when calls are queued, and
  // whose turn it is when work runs (collectives one at a time per
  // communicator; TCP point-to-point in order per peer and direction).
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_coll = 1, coll_turn = 1;
  std::vector<uint64_t> next_send, next_recv;
  std::vector<uint64_t> net_send_turn, net_recv_turn;

  ~Comm();

  std::string rank_name(int r) const;  // "rank 2 (pid 1234, host 'a')"
  std::string where() const;           // "communicator 1a2b3c4d (rank 1 of 4)"
  // Records the first failure (sticky), marks this rank failed in its control
  // block, tells the peers on this host (bell) and other hosts (control link),
  // and wakes every wait of this communicator. Returns the recorded message.
  std::string record_failure(const std::string& message, const std::string& reason);
  std::string current_error();
  void ring(int r);
};

// The fork epoch (bumped in a forked child: communicators made before are unusable).
extern std::atomic<uint64_t> g_fork_epoch;

// ---- bootstrap.cpp ------------------------------------------------------------------------
acmecclResult_t make_unique_id(acmecclUniqueId* id);
// Everything comm_init does: rendezvous, mappings of this host's peers, links
// to the other hosts.
acmecclResult_t init_comm(Comm& c, const acmecclUniqueId& id, int64_t timeout_ms);
// This process's host (ACME_HOST_ID, else the host name).
std::string host_id();

// ---- exec.cpp -------------------------------------------------------------------------------
// Runs one piece of device work (on a stream's worker); throws Failure.
void execute(const std::shared_ptr<Comm>& c, Work& w);

// ---- helpers -------------------------------------------------------------------------------
long futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long timeout_ns);
void futex_wake(std::atomic<uint32_t>* word);

}  // namespace acmeccl
