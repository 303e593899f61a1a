// acmeccl: how ranks find each other. A unique id names a TCP socket rank 0's
// process listens on (opened by acmecclGetUniqueId) and a random tag. In
// comm_init every rank connects there and tells who it is (its process, its
// device memory, its control block, its host, the port of its own links);
// rank 0 gathers all of them within the timeout and sends the table back, or
// names the ranks that did not come. Then each rank maps the device memory and
// control blocks of the ranks on its host (fetched from their processes' IPC
// servers, ../runtime/ipc.cpp) and opens TCP links to the ranks on other hosts.
#include "internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace acmeccl {
namespace {

constexpr uint32_t kIdMagic = 0x44494341;     // "ACID"
constexpr uint32_t kInfoMagic = 0x4f464e49;   // "INFO"
constexpr uint32_t kReplyMagic = 0x4c504552;  // "REPL"
constexpr uint32_t kLinkMagic = 0x4b4e494c;   // "LINK"
constexpr uint32_t kVersion = 1;

struct IdBytes {
  uint32_t magic, version;
  uint32_t addr;  // network order
  uint16_t port;  // network order
  uint16_t pad;
  uint64_t tag;
  int32_t pid;
};
static_assert(sizeof(IdBytes) <= ACMECCL_UNIQUE_ID_BYTES);

struct Reply {
  uint32_t magic;
  int32_t status;  // acmecclResult_t
  uint32_t len;    // bytes that follow: the table, or a message
  uint32_t pad;
};

struct Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t tag;
  uint32_t kind;  // 0 collectives, 1 point to point, 2 control
  uint32_t pad;
};

// Listening sockets of unique ids made in this process, by tag: rank 0's
// comm_init gathers the ranks there.
std::mutex g_ids_mu;
std::map<uint64_t, int> g_ids;

int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Whole messages on a blocking socket, with a deadline (false: time out, EOF
// or error).
bool send_all(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (n) {
    pollfd pfd{fd, POLLOUT, 0};
    if (poll(&pfd, 1, std::min(ms_left(deadline), 100)) < 0 && errno != EINTR) return false;
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
  }
  return true;
}
bool recv_all(int fd, void* buf, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n) {
    pollfd pfd{fd, POLLIN, 0};
    const int r = poll(&pfd, 1, std::min(ms_left(deadline), 100));
    if (r < 0 && errno != EINTR) return false;
    if (r > 0) {
      const ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
      if (k == 0) return false;
      if (k > 0) {
        p += k;
        n -= static_cast<size_t>(k);
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    }
    if (Clock::now() >= deadline) return false;
  }
  return true;
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The IPv4 address this process tells others to reach it at: ACMECCL_SOCKET_ADDR,
// else what the host name resolves to, else loopback.
uint32_t advertised_addr() {
  if (const char* env = std::getenv("ACMECCL_SOCKET_ADDR")) {
    in_addr a{};
    if (inet_pton(AF_INET, env, &a) == 1) return a.s_addr;
  }
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    if (getaddrinfo(name, nullptr, &hints, &res) == 0 && res) {
      const uint32_t a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
      freeaddrinfo(res);
      return a;
    }
  }
  return htonl(INADDR_LOOPBACK);
}

// A listening TCP socket on an ephemeral port; its port (network order).
int listen_any(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = a.sin_port;
  return fd;
}

// Connects to addr:port, retrying refusals until the deadline; -1 on failure.
int connect_to(uint32_t addr, uint16_t port, Clock::time_point deadline) {
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = addr;
    a.sin_port = port;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      tune(fd);
      return fd;
    }
    close(fd);
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int accept_until(int listen_fd, Clock::time_point deadline) {
  for (;;) {
    pollfd pfd{listen_fd, POLLIN, 0};
    const int r = poll(&pfd, 1, std::min(ms_left(deadline), 100));
    if (r > 0) {
      const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        tune(c);
        return c;
      }
    }
    if (Clock::now() >= deadline) return -1;
  }
}

std::string addr_text(uint32_t addr, uint16_t port) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{addr};
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(port));
}

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Rank 0: gathers everyone's RankInfo at the id's socket; sends the table back
// (or the verdict naming the missing ranks).
acmecclResult_t gather(int listen_fd, const RankInfo& mine, const IdBytes& id, int64_t timeout_ms,
                       Clock::time_point deadline, std::vector<RankInfo>* table) {
  const int n = mine.nranks;
  table->assign(static_cast<size_t>(n), RankInfo{});
  std::vector<bool> joined(static_cast<size_t>(n), false);
  std::vector<int> conns(static_cast<size_t>(n), -1);
  (*table)[0] = mine;
  joined[0] = true;
  int count = 1;
  std::string bad;
  while (count < n && bad.empty()) {
    const int c = accept_until(listen_fd, deadline);
    if (c < 0) break;
    RankInfo ri{};
    if (!recv_all(c, &ri, sizeof ri, deadline) || ri.magic != kInfoMagic) {
      close(c);
      continue;
    }
    if (ri.nranks != n) {
      bad = strprintf("rank %d joined with nranks %d, rank 0 with %d", ri.rank, ri.nranks, n);
    } else if (ri.rank <= 0 || ri.rank >= n) {
      bad = strprintf("a rank joined as rank %d of %d", ri.rank, n);
    } else if (joined[static_cast<size_t>(ri.rank)]) {
      bad = strprintf("two processes joined as rank %d", ri.rank);
    }
    if (!bad.empty()) {
      conns.push_back(c);
      break;
    }
    joined[static_cast<size_t>(ri.rank)] = true;
    (*table)[static_cast<size_t>(ri.rank)] = ri;
    conns[static_cast<size_t>(ri.rank)] = c;
    ++count;
  }
  std::string verdict;
  acmecclResult_t status = acmecclSuccess;
  if (!bad.empty()) {
    status = acmecclInvalidArgument;
    verdict = "acmeccl: comm_init: " + bad;
  } else if (count < n) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r)
      if (!joined[static_cast<size_t>(r)]) missing.push_back(r);
    status = acmecclError;
    verdict = strprintf("acmeccl: comm_init timed out after %lld ms: %zu of %d ranks did not join "
                        "(rank%s %s) at %s",
                        static_cast<long long>(timeout_ms), missing.size(), n,
                        missing.size() > 1 ? "s" : "", rank_list(missing).c_str(),
                        addr_text(id.addr, id.port).c_str());
  }
  // Everyone who came gets the table, or the verdict.
  const auto reply_by = Clock::now() + std::chrono::seconds(5);
  for (int c : conns) {
    if (c < 0) continue;
    Reply rep{kReplyMagic, status, 0, 0};
    if (status == acmecclSuccess) {
      rep.len = static_cast<uint32_t>(n * sizeof(RankInfo));
      if (send_all(c, &rep, sizeof rep, reply_by)) send_all(c, table->data(), rep.len, reply_by);
    } else {
      rep.len = static_cast<uint32_t>(verdict.size());
      if (send_all(c, &rep, sizeof rep, reply_by)) send_all(c, verdict.data(), rep.len, reply_by);
    }
    close(c);
  }
  if (status != acmecclSuccess) return fail_str(status, verdict);
  return acmecclSuccess;
}

// Other ranks: tell rank 0 who we are, wait for the table. Rank 0 gives its
// verdict at the timeout; a little grace lets it arrive.
acmecclResult_t join(const RankInfo& mine, const IdBytes& id, int64_t timeout_ms,
                     Clock::time_point deadline, std::vector<RankInfo>* table) {
  const int fd = connect_to(id.addr, id.port, deadline);
  if (fd < 0)
    return fail(acmecclError,
                "acmeccl: comm_init (rank %d of %d) timed out after %lld ms: rank 0 (the root, at "
                "%s) did not answer; it did not call comm_init, or exited",
                mine.rank, mine.nranks, static_cast<long long>(timeout_ms),
                addr_text(id.addr, id.port).c_str());
  const auto grace = deadline + std::chrono::milliseconds(1000);
  Reply rep{};
  const bool sent = send_all(fd, &mine, sizeof mine, deadline);
  if (!sent || !recv_all(fd, &rep, sizeof rep, grace) || rep.magic != kReplyMagic) {
    close(fd);
    return fail(acmecclError,
                "acmeccl: comm_init (rank %d of %d) timed out after %lld ms waiting for rank 0 (at "
                "%s) to gather the ranks: rank 0 did not answer (it exited, or did not call "
                "comm_init)",
                mine.rank, mine.nranks, static_cast<long long>(timeout_ms),
                addr_text(id.addr, id.port).c_str());
  }
  std::string payload(rep.len, '\0');
  const bool got = recv_all(fd, payload.data(), payload.size(), grace);
  close(fd);
  if (!got) return fail(acmecclError, "acmeccl: comm_init: rank 0's answer was cut short");
  if (rep.status != acmecclSuccess)
    return fail_str(static_cast<acmecclResult_t>(rep.status), payload + " (reported by rank 0)");
  if (payload.size() != mine.nranks * sizeof(RankInfo))
    return fail(acmecclError, "acmeccl: comm_init: rank 0 sent a table of another size");
  table->resize(static_cast<size_t>(mine.nranks));
  std::memcpy(table->data(), payload.data(), payload.size());
  return acmecclSuccess;
}

}  // namespace

std::string host_id() {
  if (const char* env = std::getenv("ACME_HOST_ID"); env && *env) return env;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

acmecclResult_t make_unique_id(acmecclUniqueId* out) {
  if (!out) return fail(acmecclInvalidArgument, "acmeccl: get_unique_id: null output pointer");
  std::memset(out, 0, sizeof *out);
  uint16_t port = 0;
  const int fd = listen_any(&port);
  if (fd < 0)
    return fail(acmecclError, "acmeccl: get_unique_id: cannot listen on a TCP socket: %s",
                std::strerror(errno));
  IdBytes id{};
  id.magic = kIdMagic;
  id.version = kVersion;
  id.addr = advertised_addr();
  id.port = port;
  id.tag = acme_internal::random_u64();
  id.pid = getpid();
  {
    std::lock_guard<std::mutex> lk(g_ids_mu);
    g_ids[id.tag] = fd;
  }
  std::memcpy(out->internal, &id, sizeof id);
  return acmecclSuccess;
}

acmecclResult_t init_comm(Comm& c, const acmecclUniqueId& raw, int64_t timeout_ms) {
  IdBytes id;
  std::memcpy(&id, raw.internal, sizeof id);
  if (id.magic != kIdMagic || id.version != kVersion || id.tag == 0)
    return fail(acmecclInvalidArgument,
                "acmeccl: comm_init: not an acmeccl unique id (all zero, or of another version)");
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  c.id = id.tag;
  c.name = strprintf("communicator %08llx", static_cast<unsigned long long>(id.tag >> 32));
  const int n = c.nranks;

  // Who this rank is.
  RankInfo mine{};
  mine.magic = kInfoMagic;
  mine.rank = c.rank;
  mine.nranks = n;
  mine.device = c.device;
  acme_internal::ProcessRef self;
  if (acme_internal::ipc_self(&self) != acmeSuccess)
    return fail(acmecclError, "acmeccl: comm_init: %s", acmeGetLastErrorString());
  mine.pid = self.pid;
  mine.nonce = self.nonce;
  acme_internal::ArenaRef arena;
  if (acme_internal::ipc_export_arena(c.device, &arena) == acmeSuccess) {
    mine.arena_uid = arena.uid;
    mine.arena_len = arena.len;
  } else {
    std::snprintf(mine.unshareable, sizeof mine.unshareable, "%s", acmeGetLastErrorString());
  }
  // The control block.
  const size_t box_len = (Box::bytes(n) + 4095) / 4096 * 4096;
  c.box_fd = memfd_create("acmeccl-box", MFD_CLOEXEC);
  void* box = MAP_FAILED;
  if (c.box_fd >= 0 && ftruncate(c.box_fd, static_cast<off_t>(box_len)) == 0)
    box = mmap(nullptr, box_len, PROT_READ | PROT_WRITE, MAP_SHARED, c.box_fd, 0);
  if (box == MAP_FAILED)
    return fail(acmecclError, "acmeccl: comm_init: cannot create the control block: %s",
                std::strerror(errno));
  c.maps.emplace_back(box, box_len);
  c.me.bind(box, n);
  c.me.h->pid = self.pid;
  c.me.h->rank = c.rank;
  c.box_key = acme_internal::random_u64();
  if (acme_internal::ipc_register_fd(c.box_key, c.box_fd, box_len) != acmeSuccess)
    return fail(acmecclError, "acmeccl: comm_init: %s", acmeGetLastErrorString());
  mine.box_key = c.box_key;
  mine.box_len = box_len;
  // The port of this rank's links to other hosts.
  uint16_t port = 0;
  const int link_fd = listen_any(&port);
  if (link_fd < 0)
    return fail(acmecclError, "acmeccl: comm_init: cannot listen on a TCP socket: %s",
                std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{link_fd};
  mine.addr = advertised_addr();
  mine.port = port;
  std::snprintf(mine.host, sizeof mine.host, "%s", host_id().c_str());
  std::snprintf(mine.boot, sizeof mine.boot, "%s", boot_id().c_str());

  // Rendezvous.
  if (c.rank == 0) {
    int listen_fd = -1;
    {
      std::lock_guard<std::mutex> lk(g_ids_mu);
      auto it = g_ids.find(id.tag);
      if (it != g_ids.end()) {
        listen_fd = it->second;
        g_ids.erase(it);
      }
    }
    if (listen_fd < 0)
      return fail(acmecclInvalidArgument,
                  "acmeccl: comm_init: rank 0 must call it in the process that made the unique id "
                  "(acmecclGetUniqueId), once per id");
    const acmecclResult_t r = gather(listen_fd, mine, id, timeout_ms, deadline, &c.info);
    close(listen_fd);
    if (r != acmecclSuccess) return r;
  } else {
    if (auto r = join(mine, id, timeout_ms, deadline, &c.info)) return r;
  }

  // Hosts, numbered by their lowest rank.
  std::map<std::string, int> host_index;
  c.host_of.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    const std::string h = c.info[static_cast<size_t>(r)].host;
    auto it = host_index.find(h);
    if (it == host_index.end()) {
      it = host_index.emplace(h, static_cast<int>(c.host_ranks.size())).first;
      c.host_ranks.emplace_back();
    }
    c.host_of[static_cast<size_t>(r)] = it->second;
    c.host_ranks[static_cast<size_t>(it->second)].push_back(r);
  }
  c.nhosts = static_cast<int>(c.host_ranks.size());
  c.host = c.host_of[static_cast<size_t>(c.rank)];
  c.local = c.host_ranks[static_cast<size_t>(c.host)];

  // This host: everyone's device memory and control block.
  c.views.assign(static_cast<size_t>(n), nullptr);
  c.boxes.assign(static_cast<size_t>(n), Box{});
  for (int r : c.local) {
    const RankInfo& ri = c.info[static_cast<size_t>(r)];
    if (std::strcmp(ri.boot, mine.boot) != 0)
      return fail(acmecclInvalidArgument,
                  "acmeccl: comm_init: ranks %d and %d both say they are on host '%s' "
                  "(ACME_HOST_ID) but run on different machines",
                  c.rank, r, mine.host);
    if (ri.arena_uid == 0)
      return fail(acmecclError,
                  "acmeccl: comm_init: rank %d's device memory cannot be shared with the ranks on "
                  "its host: %s",
                  r, ri.unshareable);
    acme_internal::ArenaRef ref;
    ref.proc.pid = ri.pid;
    ref.proc.nonce = ri.nonce;
    ref.uid = ri.arena_uid;
    ref.len = ri.arena_len;
    char* view = nullptr;
    if (acme_internal::ipc_map_arena(ref, &view) != acmeSuccess)
      return fail(acmecclError, "acmeccl: comm_init: cannot map rank %d's device memory: %s", r,
                  acmeGetLastErrorString());
    c.mapped_arenas.push_back(ref);
    c.views[static_cast<size_t>(r)] = view;
    if (r == c.rank) {
      c.boxes[static_cast<size_t>(r)] = c.me;
      continue;
    }
    int fd = -1;
    size_t len = 0;
    acme_internal::ProcessRef peer{ri.pid, ri.nonce};
    if (acme_internal::ipc_fetch_fd(peer, ri.box_key, &fd, &len) != acmeSuccess)
      return fail(acmecclError, "acmeccl: comm_init: cannot reach rank %d's control block: %s", r,
                  acmeGetLastErrorString());
    void* m = len >= Box::bytes(n) ? mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                   : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED)
      return fail(acmecclError, "acmeccl: comm_init: cannot map rank %d's control block", r);
    c.maps.emplace_back(m, len);
    c.boxes[static_cast<size_t>(r)].bind(m, n);
  }

  // Other hosts: three links per pair (collectives, point to point, control);
  // the lower rank connects, the higher accepts.
  c.coll_fd.assign(static_cast<size_t>(n), -1);
  c.p2p_fd.assign(static_cast<size_t>(n), -1);
  c.ctl_fd.assign(static_cast<size_t>(n), -1);
  int expected = 0;
  for (int r = 0; r < n; ++r) {
    if (c.host_of[static_cast<size_t>(r)] == c.host) continue;
    if (r < c.rank) {
      expected += 3;
      continue;
    }
    const RankInfo& ri = c.info[static_cast<size_t>(r)];
    for (uint32_t kind = 0; kind < 3; ++kind) {
      const int fd = connect_to(ri.addr, ri.port, deadline);
      const Hello hello{kLinkMagic, c.rank, c.id, kind, 0};
      if (fd < 0 || !send_all(fd, &hello, sizeof hello, deadline)) {
        if (fd >= 0) close(fd);
        return fail(acmecclError,
                    "acmeccl: comm_init timed out after %lld ms linking to rank %d on host '%s' "
                    "(at %s)",
                    static_cast<long long>(timeout_ms), r, ri.host,
                    addr_text(ri.addr, ri.port).c_str());
      }
      (kind == 0 ? c.coll_fd : kind == 1 ? c.p2p_fd : c.ctl_fd)[static_cast<size_t>(r)] = fd;
    }
  }
  while (expected > 0) {
    const int fd = accept_until(link_fd, deadline);
    Hello hello{};
    if (fd >= 0 && recv_all(fd, &hello, sizeof hello, deadline) && hello.magic == kLinkMagic &&
        hello.tag == c.id && hello.rank >= 0 && hello.rank < c.rank && hello.kind < 3) {
      (hello.kind == 0 ? c.coll_fd : hello.kind == 1 ? c.p2p_fd : c.ctl_fd)
          [static_cast<size_t>(hello.rank)] = fd;
      --expected;
      continue;
    }
    if (fd >= 0) {
      close(fd);
      continue;
    }
    std::vector<int> missing;
    for (int r = 0; r < c.rank; ++r)
      if (c.host_of[static_cast<size_t>(r)] != c.host && c.ctl_fd[static_cast<size_t>(r)] < 0)
        missing.push_back(r);
    return fail(acmecclError,
                "acmeccl: comm_init timed out after %lld ms waiting for the links of rank%s %s "
                "(on other hosts)",
                static_cast<long long>(timeout_ms), missing.size() > 1 ? "s" : "",
                rank_list(missing).c_str());
  }
  return acmecclSuccess;
}

}  // namespace acmeccl
