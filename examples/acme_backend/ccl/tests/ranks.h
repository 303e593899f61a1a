// acmeccl's test programs: running N ranks as N processes. A scenario forks
// one child per rank (the driver itself never initializes the acme runtime, so
// each child starts clean); each child initializes the runtime, runs the
// scenario as its rank and exits 0 iff its checks held. The children share one
// page with the driver: unique ids (rank 0 makes them, the others wait for
// them), flags and barriers for orchestration, and each rank's failure
// messages, which the driver reports as the test's failed checks. Every wait
// has a timeout; a scenario whose children do not all exit in time is killed
// and fails ("hung").
#pragma once

#include "../../tests/cpp/harness.h"
#include "../acmeccl.h"
#include "../reduce.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace harness {
inline std::string describe(int status) {
  if (status == -1) return "was not reaped";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}
}  // namespace harness

namespace ranks {

using Clock = std::chrono::steady_clock;
constexpr int kMaxRanks = 8;
constexpr size_t kCapacity = 64u << 20;

struct Shared {
  std::atomic<int> id_ready[32];
  acmecclUniqueId ids[32];
  std::atomic<int> flags[64];
  std::atomic<int> arrived[64];
  std::atomic<int> failures[kMaxRanks];
  char msgs[kMaxRanks][4096];
  std::atomic<int> msg_len[kMaxRanks];
};

inline Shared* g_shared = nullptr;

// A rank's view of its scenario.
struct Ctx {
  int rank = 0, n = 0;
  bool ok = true;

  // Records a failed check (the driver prints it); the scenario goes on.
  [[gnu::format(printf, 2, 3)]] void fail(const char* fmt, ...) {
    ok = false;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_shared->failures[rank]++;
    const int len = g_shared->msg_len[rank].load();
    const std::string line = "rank " + std::to_string(rank) + ": " + buf + "\n";
    if (len + static_cast<int>(line.size()) < 4000) {
      std::memcpy(g_shared->msgs[rank] + len, line.data(), line.size());
      g_shared->msg_len[rank] = len + static_cast<int>(line.size());
    }
  }

  // Unique id number k of the scenario: made by `maker`, waited for by the others.
  acmecclUniqueId id(int k, int maker = 0) {
    if (rank == maker) {
      if (acmecclGetUniqueId(&g_shared->ids[k]) != acmecclSuccess)
        fail("get_unique_id: %s", acmecclGetLastError());
      g_shared->id_ready[k].store(1);
      return g_shared->ids[k];
    }
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (!g_shared->id_ready[k].load()) {
      if (Clock::now() > until) {
        fail("timed out waiting for unique id %d", k);
        _exit(3);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return g_shared->ids[k];
  }

  // A communicator of `nranks` with this process as rank `r` (id number k, made by `maker`).
  acmecclComm_t comm(int k, int nranks, int r, int device, int maker = 0, int64_t timeout = 10000) {
    const acmecclUniqueId uid = id(k, maker);
    acmecclComm_t c = nullptr;
    if (acmecclCommInitRank(&c, nranks, uid, r, device, timeout) != acmecclSuccess) {
      fail("comm_init (id %d, rank %d of %d): %s", k, r, nranks, acmecclGetLastError());
      _exit(4);
    }
    return c;
  }

  // A barrier of `count` ranks (number k; each number used once).
  void barrier(int k, int count = -1) {
    if (count < 0) count = n;
    g_shared->arrived[k]++;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (g_shared->arrived[k].load() < count) {
      if (Clock::now() > until) {
        fail("timed out in test barrier %d", k);
        _exit(5);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  void set_flag(int k) { g_shared->flags[k].store(1); }
  bool wait_flag(int k, int timeout_ms = 20000) {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!g_shared->flags[k].load()) {
      if (Clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
};

// Runs `body` as n ranks (rank r's ACME_HOST_ID is hosts[r] when given; each
// child initializes the runtime with 2 devices of kCapacity) and reports every
// rank's failures as the test's. `expect_killed`: ranks that end by SIGKILL on
// purpose.
inline void run(int n, const std::vector<std::string>& hosts, const std::function<void(Ctx&)>& body,
                int timeout_ms = 30000, std::vector<int> expect_killed = {}) {
  Shared* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) {
    harness::record_failure(__FILE__, __LINE__, "cannot map the shared page");
    return;
  }
  new (sh) Shared();
  g_shared = sh;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      if (!hosts.empty()) setenv("ACME_HOST_ID", hosts[static_cast<size_t>(r)].c_str(), 1);
      Ctx x;
      x.rank = r;
      x.n = n;
      if (acmeInit(2, kCapacity, 512) != acmeSuccess) {
        x.fail("acmeInit: %s", acmeGetLastErrorString());
        _exit(2);
      }
      try {
        body(x);
      } catch (const std::exception& e) {
        x.fail("exception: %s", e.what());
      }
      std::fflush(stdout);
      _exit(x.ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<int> status(static_cast<size_t>(n), -1);
  int left = n;
  bool hung = false;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[static_cast<size_t>(r)] != -1) continue;
      int st = 0;
      if (waitpid(pids[static_cast<size_t>(r)], &st, WNOHANG) == pids[static_cast<size_t>(r)]) {
        status[static_cast<size_t>(r)] = st;
        --left;
      }
    }
    if (left && Clock::now() > until) {
      hung = true;
      for (int r = 0; r < n; ++r)
        if (status[static_cast<size_t>(r)] == -1) kill(pids[static_cast<size_t>(r)], SIGKILL);
      for (int r = 0; r < n; ++r)
        if (status[static_cast<size_t>(r)] == -1) waitpid(pids[static_cast<size_t>(r)], &status[static_cast<size_t>(r)], 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int r = 0; r < n; ++r) {
    const int st = status[static_cast<size_t>(r)];
    const bool killed_on_purpose =
        std::find(expect_killed.begin(), expect_killed.end(), r) != expect_killed.end();
    std::string what;
    if (killed_on_purpose) {
      if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
        what = "rank " + std::to_string(r) + " should have been killed; " + harness::describe(st);
    } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      what = "rank " + std::to_string(r) + " " + harness::describe(st);
    }
    if (hung && !what.empty())
      what += " (the scenario hung: killed after " + std::to_string(timeout_ms) + " ms)";
    if (!what.empty()) harness::record_failure(__FILE__, __LINE__, what);
    const int len = sh->msg_len[r].load();
    if (len > 0) {
      std::string msgs(sh->msgs[r], static_cast<size_t>(len));
      size_t pos = 0;
      while (pos < msgs.size()) {
        const size_t nl = msgs.find('\n', pos);
        harness::record_failure(__FILE__, __LINE__, msgs.substr(pos, nl - pos));
        pos = nl == std::string::npos ? msgs.size() : nl + 1;
      }
    }
  }
  munmap(sh, sizeof(Shared));
  g_shared = nullptr;
}

// ---- device buffers and values --------------------------------------------------------------

struct Buf {
  int device = 0;
  void* p = nullptr;
  size_t bytes = 0;
  Buf(int dev, size_t n) : device(dev), bytes(n) {
    if (acmeMalloc(dev, &p, n ? n : 1) != acmeSuccess) throw std::runtime_error(acmeGetLastErrorString());
  }
  ~Buf() { acmeFree(device, p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* at(size_t off) const { return static_cast<char*>(p) + off; }
};

inline void h2d(void* dst, const void* src, size_t n, int dev, acmeStream_t s) {
  if (n && acmeMemcpyAsync(dst, src, n, acmeMemcpyHostToDevice, dev, s) != acmeSuccess)
    throw std::runtime_error(acmeGetLastErrorString());
}
inline void d2h(void* dst, const void* src, size_t n, int dev, acmeStream_t s) {
  if (n && acmeMemcpyAsync(dst, src, n, acmeMemcpyDeviceToHost, dev, s) != acmeSuccess)
    throw std::runtime_error(acmeGetLastErrorString());
}

inline const std::vector<acmecclDataType_t>& reduce_dtypes() {
  static const std::vector<acmecclDataType_t> all = {
      acmecclFloat32, acmecclFloat64, acmecclFloat16, acmecclBfloat16, acmecclInt64,
      acmecclInt32,   acmecclInt16,   acmecclInt8,    acmecclUint8};
  return all;
}
inline const std::vector<acmecclRedOp_t>& ops() {
  static const std::vector<acmecclRedOp_t> all = {acmecclSum, acmecclAvg, acmecclProd, acmecclMin,
                                                  acmecclMax};
  return all;
}

inline bool is_float(int dt) {
  return dt == acmecclFloat32 || dt == acmecclFloat64 || dt == acmecclFloat16 ||
         dt == acmecclBfloat16;
}

// Element i of a buffer as a double, and back (rounded to the dtype).
inline double get(int dt, const void* b, size_t i) {
  switch (dt) {
    case acmecclUint8: return static_cast<const uint8_t*>(b)[i];
    case acmecclInt8: return static_cast<const int8_t*>(b)[i];
    case acmecclInt16: return static_cast<const int16_t*>(b)[i];
    case acmecclInt32: return static_cast<const int32_t*>(b)[i];
    case acmecclInt64: return static_cast<double>(static_cast<const int64_t*>(b)[i]);
    case acmecclFloat16: return acmeccl::half_to_float(static_cast<const uint16_t*>(b)[i]);
    case acmecclBfloat16: return acmeccl::bf16_to_float(static_cast<const uint16_t*>(b)[i]);
    case acmecclFloat32: return static_cast<const float*>(b)[i];
    case acmecclFloat64: return static_cast<const double*>(b)[i];
  }
  return 0;
}
inline void set(int dt, void* b, size_t i, double v) {
  switch (dt) {
    case acmecclUint8: static_cast<uint8_t*>(b)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case acmecclInt8: static_cast<int8_t*>(b)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case acmecclInt16: static_cast<int16_t*>(b)[i] = static_cast<int16_t>(static_cast<int64_t>(v)); break;
    case acmecclInt32: static_cast<int32_t*>(b)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case acmecclInt64: static_cast<int64_t*>(b)[i] = static_cast<int64_t>(v); break;
    case acmecclFloat16: static_cast<uint16_t*>(b)[i] = acmeccl::float_to_half(static_cast<float>(v)); break;
    case acmecclBfloat16: static_cast<uint16_t*>(b)[i] = acmeccl::float_to_bf16(static_cast<float>(v)); break;
    case acmecclFloat32: static_cast<float*>(b)[i] = static_cast<float>(v); break;
    case acmecclFloat64: static_cast<double*>(b)[i] = v; break;
  }
}

// The value rank r contributes at element i: small integers (signed types
// include negatives), so sums and products are exact in every dtype.
inline double input(int dt, int r, size_t i) {
  const int v = static_cast<int>((i * 3 + static_cast<size_t>(r) * 5 + i / 7) % 7);
  return dt == acmecclUint8 ? v % 4 : v - 3;
}

// The expected reduction of element i over n ranks, wrapped/rounded to the dtype.
inline double expected(int dt, int op, int n, size_t i) {
  double acc = input(dt, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input(dt, r, i);
    switch (op) {
      case acmecclSum: case acmecclAvg: acc += v; break;
      case acmecclProd: acc *= v; break;
      case acmecclMin: acc = std::min(acc, v); break;
      case acmecclMax: acc = std::max(acc, v); break;
    }
  }
  if (op == acmecclAvg) acc = is_float(dt) ? acc / n : std::floor(acc / n);
  char tmp[8];
  set(dt, tmp, 0, acc);
  return get(dt, tmp, 0);
}

inline bool close_to(int dt, double got, double want) {
  if (!is_float(dt)) return got == want;
  const double tol = dt == acmecclFloat64 ? 1e-12 : dt == acmecclFloat32 ? 1e-6
                     : dt == acmecclFloat16 ? 1e-3 : 1e-2;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace ranks

