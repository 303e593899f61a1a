// acmeccl's tests: N ranks as N processes (ranks.h), no torch. Every
// collective and every reduction op and dtype against values computed on the
// host, on one host (2 and 4 ranks) and on two simulated hosts (ACME_HOST_ID,
// 2 ranks each, contiguous and interleaved); in-place forms; all_to_all with
// uneven splits; send/recv, grouped in both orders; several communicators;
// stream order, the link-speed and slow-device options; abort from another
// thread; a peer killed mid-collective; comm_init timeouts; argument errors and
// mismatched collectives. Every wait has a timeout: a hang fails the test.
#include "ranks.h"

#include <numeric>

using ranks::Buf;
using ranks::Clock;
using ranks::Ctx;
using ranks::d2h;
using ranks::h2d;

TEST_MAIN("acmeccl tests")

namespace {

constexpr int kFileOrder = 1;
constexpr int kDevice = 1;  // ranks use device 1 of their process (device 0 elsewhere)

// ---- helpers run by each rank -------------------------------------------------------------

struct Stream {
  int device;
  acmeStream_t s = nullptr;
  explicit Stream(int dev) : device(dev) {
    if (acmeStreamCreate(dev, &s) != acmeSuccess) throw std::runtime_error(acmeGetLastErrorString());
  }
  ~Stream() { acmeStreamDestroy(device, s); }
  // Synchronizes; "" or the error.
  std::string sync() const {
    return acmeStreamSynchronize(device, s) == acmeSuccess ? std::string() : acmeGetLastErrorString();
  }
};

#define CCL_OK(x, expr)                                                                  \
  do {                                                                                   \
    if ((expr) != acmecclSuccess) (x).fail("%s failed: %s", #expr, acmecclGetLastError()); \
  } while (0)

// all_reduce, reduce and reduce_scatter, every dtype and op, in place and not.
void check_reductions(Ctx& x, acmecclComm_t comm, int n, int rank, const std::vector<size_t>& counts,
                      const std::vector<acmecclDataType_t>& dtypes) {
  Stream st(kDevice);
  const size_t maxc = *std::max_element(counts.begin(), counts.end());
  Buf send(kDevice, maxc * 8 * static_cast<size_t>(n)), recv(kDevice, maxc * 8 * static_cast<size_t>(n));
  std::vector<char> host(maxc * 8 * static_cast<size_t>(n)), out(maxc * 8 * static_cast<size_t>(n));
  int root = 0;
  for (auto dt : dtypes) {
    const size_t el = acmeccl::dtype_size(dt);
    for (auto op : ranks::ops()) {
      for (size_t count : counts) {
        for (int inplace = 0; inplace < 2; ++inplace) {
          const char* tag = inplace ? " in place" : "";
          // all_reduce
          for (size_t i = 0; i < count; ++i) ranks::set(dt, host.data(), i, ranks::input(dt, rank, i));
          h2d(send.p, host.data(), count * el, kDevice, st.s);
          void* dst = inplace ? send.p : recv.p;
          CCL_OK(x, acmecclAllReduce(send.p, dst, count, dt, op, comm, st.s));
          d2h(out.data(), dst, count * el, kDevice, st.s);
          if (auto e = st.sync(); !e.empty()) x.fail("all_reduce: %s", e.c_str());
          for (size_t i = 0; i < count; ++i) {
            const double got = ranks::get(dt, out.data(), i), want = ranks::expected(dt, op, n, i);
            if (!ranks::close_to(dt, got, want)) {
              x.fail("all_reduce%s %s %s count %zu: element %zu is %g, want %g", tag,
                     acmeccl::dtype_name(dt), acmeccl::op_name(op), count, i, got, want);
              break;
            }
          }
          // reduce (the root moves round)
          root = (root + 1) % n;
          h2d(send.p, host.data(), count * el, kDevice, st.s);
          CCL_OK(x, acmecclReduce(send.p, dst, count, dt, op, root, comm, st.s));
          if (rank == root) d2h(out.data(), dst, count * el, kDevice, st.s);
          if (auto e = st.sync(); !e.empty()) x.fail("reduce: %s", e.c_str());
          if (rank == root)
            for (size_t i = 0; i < count; ++i) {
              const double got = ranks::get(dt, out.data(), i), want = ranks::expected(dt, op, n, i);
              if (!ranks::close_to(dt, got, want)) {
                x.fail("reduce%s %s %s count %zu root %d: element %zu is %g, want %g", tag,
                       acmeccl::dtype_name(dt), acmeccl::op_name(op), count, root, i, got, want);
                break;
              }
            }
          // reduce_scatter: slot p of rank r's send holds input(r, p * count + i)
          const size_t all = count * static_cast<size_t>(n);
          for (size_t i = 0; i < all; ++i) ranks::set(dt, host.data(), i, ranks::input(dt, rank, i));
          h2d(send.p, host.data(), all * el, kDevice, st.s);
          void* rs_dst = inplace ? send.at(static_cast<size_t>(rank) * count * el) : recv.p;
          CCL_OK(x, acmecclReduceScatter(send.p, rs_dst, count, dt, op, comm, st.s));
          d2h(out.data(), rs_dst, count * el, kDevice, st.s);
          if (auto e = st.sync(); !e.empty()) x.fail("reduce_scatter: %s", e.c_str());
          for (size_t i = 0; i < count; ++i) {
            const size_t g = static_cast<size_t>(rank) * count + i;
            const double got = ranks::get(dt, out.data(), i), want = ranks::expected(dt, op, n, g);
            if (!ranks::close_to(dt, got, want)) {
              x.fail("reduce_scatter%s %s %s count %zu: element %zu is %g, want %g", tag,
                     acmeccl::dtype_name(dt), acmeccl::op_name(op), count, i, got, want);
              break;
            }
          }
          if (!x.ok) return;  // one failure says enough
        }
      }
    }
  }
}

inline unsigned char byte_of(int rank, size_t i) {
  return static_cast<unsigned char>((i * 13 + static_cast<size_t>(rank) * 71 + 5) & 0xff);
}

// broadcast (every root, in place on the root and not) and all_gather (in place and not), as bytes.
void check_movement(Ctx& x, acmecclComm_t comm, int n, int rank, size_t bytes) {
  Stream st(kDevice);
  Buf a(kDevice, bytes * static_cast<size_t>(n)), b(kDevice, bytes * static_cast<size_t>(n));
  std::vector<unsigned char> host(bytes * static_cast<size_t>(n)), out(bytes * static_cast<size_t>(n));
  for (int root = 0; root < n; ++root)
    for (int inplace = 0; inplace < 2; ++inplace) {
      for (size_t i = 0; i < bytes; ++i) host[i] = byte_of(rank, i);
      h2d(a.p, host.data(), bytes, kDevice, st.s);
      void* dst = inplace ? a.p : b.p;
      CCL_OK(x, acmecclBroadcast(a.p, dst, bytes, acmecclUint8, root, comm, st.s));
      d2h(out.data(), dst, bytes, kDevice, st.s);
      if (auto e = st.sync(); !e.empty()) x.fail("broadcast: %s", e.c_str());
      for (size_t i = 0; i < bytes; ++i)
        if (out[i] != byte_of(root, i)) {
          x.fail("broadcast%s root %d of %zu bytes: byte %zu is %d, want %d",
                 inplace ? " in place" : "", root, bytes, i, out[i], byte_of(root, i));
          break;
        }
    }
  for (int inplace = 0; inplace < 2; ++inplace) {
    for (size_t i = 0; i < bytes; ++i) host[i] = byte_of(rank, i);
    void* src = inplace ? b.at(static_cast<size_t>(rank) * bytes) : a.p;
    h2d(src, host.data(), bytes, kDevice, st.s);
    CCL_OK(x, acmecclAllGather(src, b.p, bytes, acmecclUint8, comm, st.s));
    d2h(out.data(), b.p, bytes * static_cast<size_t>(n), kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("all_gather: %s", e.c_str());
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < bytes; ++i)
        if (out[static_cast<size_t>(p) * bytes + i] != byte_of(p, i)) {
          x.fail("all_gather%s of %zu bytes: slot %d byte %zu is wrong", inplace ? " in place" : "",
                 bytes, p, i);
          p = n;
          break;
        }
  }
}

// all_to_all with uneven splits (some zero): rank r sends (r + 2p) % 4 * k
// elements to rank p, at scattered offsets.
void check_all_to_all(Ctx& x, acmecclComm_t comm, int n, int rank, size_t k) {
  Stream st(kDevice);
  auto count = [&](int from, int to) { return static_cast<size_t>((from + 2 * to) % 4) * k; };
  std::vector<size_t> sc(static_cast<size_t>(n)), so(static_cast<size_t>(n)),
      rc(static_cast<size_t>(n)), ro(static_cast<size_t>(n));
  size_t stot = 0, rtot = 0;
  for (int p = n - 1; p >= 0; --p) {  // blocks in reverse rank order, with gaps
    sc[static_cast<size_t>(p)] = count(rank, p);
    so[static_cast<size_t>(p)] = stot + 3;
    stot += sc[static_cast<size_t>(p)] + 3;
  }
  for (int p = 0; p < n; ++p) {
    rc[static_cast<size_t>(p)] = count(p, rank);
    ro[static_cast<size_t>(p)] = rtot + 1;
    rtot += rc[static_cast<size_t>(p)] + 1;
  }
  Buf send(kDevice, stot * 4), recv(kDevice, rtot * 4);
  std::vector<int32_t> host(stot, -1), out(rtot, -7);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < sc[static_cast<size_t>(p)]; ++i)
      host[so[static_cast<size_t>(p)] + i] = rank * 100000 + p * 1000 + static_cast<int32_t>(i);
  h2d(send.p, host.data(), stot * 4, kDevice, st.s);
  h2d(recv.p, out.data(), rtot * 4, kDevice, st.s);
  CCL_OK(x, acmecclAllToAllv(send.p, sc.data(), so.data(), recv.p, rc.data(), ro.data(),
                             acmecclInt32, comm, st.s));
  d2h(out.data(), recv.p, rtot * 4, kDevice, st.s);
  if (auto e = st.sync(); !e.empty()) x.fail("all_to_all: %s", e.c_str());
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < rc[static_cast<size_t>(p)]; ++i) {
      const int32_t want = p * 100000 + rank * 1000 + static_cast<int32_t>(i);
      if (out[ro[static_cast<size_t>(p)] + i] != want) {
        x.fail("all_to_all: from rank %d element %zu is %d, want %d", p, i,
               out[ro[static_cast<size_t>(p)] + i], want);
        return;
      }
    }
    if (out[ro[static_cast<size_t>(p)] - 1] != -7) x.fail("all_to_all wrote into a gap");
  }
}

// Point to point: a ring in a group (both orders), pairs that both send first
// (large), many messages to one peer in one group (more than the slots), self
// send, and plain matched send/recv in order.
void check_p2p(Ctx& x, acmecclComm_t comm, int n, int rank) {
  Stream st(kDevice);
  const size_t big = 3u << 20;  // larger than a socket buffer: sends must not block receives
  Buf a(kDevice, big), b(kDevice, big);
  std::vector<unsigned char> host(big), out(big);
  auto fill = [&](int who, size_t len, int salt) {
    for (size_t i = 0; i < len; ++i) host[i] = static_cast<unsigned char>(byte_of(who, i) + salt);
  };
  auto verify = [&](int who, size_t len, int salt, const char* what) {
    for (size_t i = 0; i < len; ++i)
      if (out[i] != static_cast<unsigned char>(byte_of(who, i) + salt)) {
        x.fail("%s: byte %zu from rank %d is wrong", what, i, who);
        return;
      }
  };
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (int order = 0; order < 2; ++order) {
    const size_t len = 1000 + static_cast<size_t>(order) * 70000;
    fill(rank, len, order);
    h2d(a.p, host.data(), len, kDevice, st.s);
    CCL_OK(x, acmecclGroupStart());
    if (order == 0) {
      CCL_OK(x, acmecclSend(a.p, len, acmecclUint8, next, comm, st.s));
      CCL_OK(x, acmecclRecv(b.p, len, acmecclUint8, prev, comm, st.s));
    } else {
      CCL_OK(x, acmecclRecv(b.p, len, acmecclUint8, prev, comm, st.s));
      CCL_OK(x, acmecclSend(a.p, len, acmecclUint8, next, comm, st.s));
    }
    CCL_OK(x, acmecclGroupEnd());
    d2h(out.data(), b.p, len, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("ring: %s", e.c_str());
    verify(prev, len, order, order ? "ring (recv first)" : "ring (send first)");
  }
  // Pairs (0,1), (2,3): both send first, large.
  const int partner = rank ^ 1;
  if (partner < n) {
    fill(rank, big, 9);
    h2d(a.p, host.data(), big, kDevice, st.s);
    CCL_OK(x, acmecclGroupStart());
    CCL_OK(x, acmecclSend(a.p, big, acmecclUint8, partner, comm, st.s));
    CCL_OK(x, acmecclRecv(b.p, big, acmecclUint8, partner, comm, st.s));
    CCL_OK(x, acmecclGroupEnd());
    d2h(out.data(), b.p, big, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("exchange: %s", e.c_str());
    verify(partner, big, 9, "exchange (both send first)");
    // 12 messages each way in one group (more than the 8 slots a pair has).
    constexpr int kMsgs = 12;
    constexpr size_t kLen = 4096;
    fill(rank, kLen * kMsgs, 3);
    h2d(a.p, host.data(), kLen * kMsgs, kDevice, st.s);
    CCL_OK(x, acmecclGroupStart());
    for (int m = 0; m < kMsgs; ++m)
      CCL_OK(x, acmecclSend(a.at(static_cast<size_t>(m) * kLen), kLen, acmecclUint8, partner, comm, st.s));
    for (int m = 0; m < kMsgs; ++m)
      CCL_OK(x, acmecclRecv(b.at(static_cast<size_t>(m) * kLen), kLen, acmecclUint8, partner, comm, st.s));
    CCL_OK(x, acmecclGroupEnd());
    d2h(out.data(), b.p, kLen * kMsgs, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("many messages: %s", e.c_str());
    verify(partner, kLen * kMsgs, 3, "12 messages in one group");
  }
  // Plain send/recv, matched in call order: rank 0 sends three sizes to rank 1.
  if (rank < 2 && n >= 2) {
    const size_t lens[3] = {10, 100000, 1};
    fill(0, 200000, 5);
    if (rank == 0) {
      h2d(a.p, host.data(), 200000, kDevice, st.s);
      size_t off = 0;
      for (size_t len : lens) {
        CCL_OK(x, acmecclSend(a.at(off), len, acmecclUint8, 1, comm, st.s));
        off += len;
      }
    } else {
      size_t off = 0;
      for (size_t len : lens) {
        CCL_OK(x, acmecclRecv(b.at(off), len, acmecclUint8, 0, comm, st.s));
        off += len;
      }
      d2h(out.data(), b.p, off, kDevice, st.s);
    }
    if (auto e = st.sync(); !e.empty()) x.fail("send/recv: %s", e.c_str());
    if (rank == 1) verify(0, 100011, 5, "send/recv in order");
  }
  // To itself, in a group.
  fill(rank, 777, 1);
  h2d(a.p, host.data(), 777, kDevice, st.s);
  CCL_OK(x, acmecclGroupStart());
  CCL_OK(x, acmecclRecv(b.p, 777, acmecclUint8, rank, comm, st.s));
  CCL_OK(x, acmecclSend(a.p, 777, acmecclUint8, rank, comm, st.s));
  CCL_OK(x, acmecclGroupEnd());
  d2h(out.data(), b.p, 777, kDevice, st.s);
  if (auto e = st.sync(); !e.empty()) x.fail("self: %s", e.c_str());
  verify(rank, 777, 1, "send to self");
}

// Everything, on one communicator.
void check_all(Ctx& x, acmecclComm_t comm, const std::vector<size_t>& counts,
               const std::vector<acmecclDataType_t>& dtypes) {
  int n = 0, rank = -1;
  CCL_OK(x, acmecclCommCount(comm, &n));
  CCL_OK(x, acmecclCommUserRank(comm, &rank));
  check_reductions(x, comm, n, rank, counts, dtypes);
  check_movement(x, comm, n, rank, 3001);
  check_movement(x, comm, n, rank, 200000);
  check_all_to_all(x, comm, n, rank, 1000);
  check_p2p(x, comm, n, rank);
  acmecclResult_t async = acmecclError;
  CCL_OK(x, acmecclCommGetAsyncError(comm, &async, nullptr, 0));
  if (async != acmecclSuccess) x.fail("the communicator reports an async error");
}

void expect_topology(Ctx& x, acmecclComm_t comm, int nhosts, int local) {
  int h = 0, l = 0;
  CCL_OK(x, acmecclCommTopology(comm, &h, &l));
  if (h != nhosts || l != local) x.fail("topology: %d hosts, %d local ranks; want %d, %d", h, l, nhosts, local);
}

const std::vector<size_t> kCounts = {37, 70000};

// ---- tests ----------------------------------------------------------------------------------------

TEST(one_rank) {
  ranks::run(1, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 1, 0, kDevice);
    expect_topology(x, c, 1, 1);
    check_all(x, c, {37, 70000}, {acmecclFloat32, acmecclInt8});
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

TEST(one_host_2_ranks) {
  ranks::run(2, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
    expect_topology(x, c, 1, 2);
    check_all(x, c, kCounts, ranks::reduce_dtypes());
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

TEST(one_host_4_ranks) {
  ranks::run(4, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 4, x.rank, kDevice);
    expect_topology(x, c, 1, 4);
    check_all(x, c, kCounts, ranks::reduce_dtypes());
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

TEST(two_hosts_2_ranks_each) {
  ranks::run(4, {"hostA", "hostA", "hostB", "hostB"}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 4, x.rank, kDevice);
    expect_topology(x, c, 2, 2);
    check_all(x, c, {37, 70000}, ranks::reduce_dtypes());
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

// Hosts whose ranks interleave (0, 2 on one; 1, 3 on the other), and a host of one rank.
TEST(two_hosts_interleaved_and_uneven) {
  ranks::run(4, {"hostA", "hostB", "hostA", "hostB"}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 4, x.rank, kDevice);
    expect_topology(x, c, 2, 2);
    check_all(x, c, {1000, 300000}, {acmecclFloat32, acmecclBfloat16, acmecclInt8});
    CCL_OK(x, acmecclCommDestroy(c));
  });
  ranks::run(3, {"hostA", "hostA", "hostC"}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 3, x.rank, kDevice);
    expect_topology(x, c, 2, x.rank < 2 ? 2 : 1);
    check_all(x, c, {5, 3000}, {acmecclFloat64, acmecclInt32});
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

// Buffers larger than the caches (written with non-temporal stores): odd
// counts, a 16-bit type, in place and not.
TEST(large_buffers) {
  ranks::run(2, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
    Stream st(kDevice);
    for (auto dt : {acmecclFloat32, acmecclBfloat16}) {
      const size_t el = acmeccl::dtype_size(dt);
      const size_t count = (10u << 20) / el + 13;  // 10 MiB and a bit
      Buf send(kDevice, count * el), recv(kDevice, count * el);
      std::vector<char> host(count * el), out(count * el);
      for (size_t i = 0; i < count; ++i) ranks::set(dt, host.data(), i, ranks::input(dt, x.rank, i));
      auto verify = [&](const char* what, int n, size_t first, size_t len, int op) {
        for (size_t i = 0; i < len; ++i) {
          const double got = ranks::get(dt, out.data(), i), want = ranks::expected(dt, op, n, first + i);
          if (!ranks::close_to(dt, got, want)) {
            x.fail("%s %s of %zu: element %zu is %g, want %g", what, acmeccl::dtype_name(dt), count,
                   i, got, want);
            return;
          }
        }
      };
      for (int inplace = 0; inplace < 2; ++inplace) {
        h2d(send.p, host.data(), count * el, kDevice, st.s);
        void* dst = inplace ? send.p : recv.p;
        CCL_OK(x, acmecclAllReduce(send.p, dst, count, dt, acmecclSum, c, st.s));
        d2h(out.data(), dst, count * el, kDevice, st.s);
        if (auto e = st.sync(); !e.empty()) x.fail("all_reduce: %s", e.c_str());
        verify(inplace ? "all_reduce in place" : "all_reduce", 2, 0, count, acmecclSum);
        h2d(send.p, host.data(), count * el, kDevice, st.s);
        CCL_OK(x, acmecclReduce(send.p, dst, count, dt, acmecclMax, 1, c, st.s));
        if (x.rank == 1) d2h(out.data(), dst, count * el, kDevice, st.s);
        if (auto e = st.sync(); !e.empty()) x.fail("reduce: %s", e.c_str());
        if (x.rank == 1) verify("reduce", 2, 0, count, acmecclMax);
      }
      const size_t half = count / 2;  // reduce_scatter of 2 * half
      h2d(send.p, host.data(), count * el, kDevice, st.s);
      CCL_OK(x, acmecclReduceScatter(send.p, recv.p, half, dt, acmecclAvg, c, st.s));
      d2h(out.data(), recv.p, half * el, kDevice, st.s);
      if (auto e = st.sync(); !e.empty()) x.fail("reduce_scatter: %s", e.c_str());
      verify("reduce_scatter", 2, static_cast<size_t>(x.rank) * half, half, acmecclAvg);
      // all_gather and broadcast as bytes.
      CCL_OK(x, acmecclAllGather(send.at(static_cast<size_t>(x.rank) * half * el), send.p, half * el,
                                 acmecclUint8, c, st.s));
      CCL_OK(x, acmecclBroadcast(send.p, recv.p, count * el, acmecclUint8, 0, c, st.s));
      d2h(out.data(), recv.p, count * el, kDevice, st.s);
      if (auto e = st.sync(); !e.empty()) x.fail("all_gather/broadcast: %s", e.c_str());
      // Slot r came from rank r's input.
      std::vector<char> want(2 * half * el);
      for (size_t i = 0; i < 2 * half; ++i)
        ranks::set(dt, want.data(), i, ranks::input(dt, i < half ? 0 : 1, i));
      if (std::memcmp(out.data(), want.data(), want.size()) != 0)
        x.fail("all_gather (in place) then broadcast of %zu bytes differ", want.size());
    }
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

// Memory opened from another process's IPC handle is a buffer like any other
// (ccl_adapter.h / runtime_adapter.h): rank 1 of a communicator of ranks 0
// and 1 uses memory of process 2 as its send and recv buffers; rank 0 then
// reaches process 2's memory too.
TEST(ipc_opened_buffers) {
  ranks::run(3, {}, [](Ctx& x) {
    constexpr size_t kCount = 5000;
    Stream st(kDevice);
    if (x.rank == 2) {  // the owner: shares a buffer, checks what it holds at the end
      Buf mem(kDevice, kCount * 4);
      std::vector<float> v(kCount, 5.0f);
      h2d(mem.p, v.data(), kCount * 4, kDevice, st.s);
      if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
      acmeIpcMemHandle_t h;
      if (acmeIpcGetMemHandle(kDevice, mem.p, &h) != acmeSuccess) x.fail("%s", acmeGetLastErrorString());
      std::memcpy(&ranks::g_shared->ids[30], &h, sizeof h);
      x.set_flag(1);
      if (!x.wait_flag(2)) x.fail("the others never finished");
      d2h(v.data(), mem.p, kCount * 4, kDevice, st.s);
      if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
      if (v[0] != 7.0f || v[kCount - 1] != 7.0f) x.fail("the shared buffer holds %g, want 7 (broadcast)", v[0]);
      return;
    }
    acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
    Buf mine(kDevice, kCount * 4);
    std::vector<float> v(kCount, x.rank == 0 ? 1.0f : 2.0f), out(kCount);
    h2d(mine.p, v.data(), kCount * 4, kDevice, st.s);
    void* shared = mine.p;
    if (x.rank == 1) {
      if (!x.wait_flag(1)) x.fail("no handle");
      acmeIpcMemHandle_t h;
      std::memcpy(&h, &ranks::g_shared->ids[30], sizeof h);
      if (acmeIpcOpenMemHandle(kDevice, h, &shared) != acmeSuccess) x.fail("%s", acmeGetLastErrorString());
    }
    // rank 1 sends process 2's 5s: 1 + 5 on rank 0 (into its own buffer), in place on rank 1.
    CCL_OK(x, acmecclAllReduce(shared, shared, kCount, acmecclFloat32, acmecclSum, c, st.s));
    d2h(out.data(), shared, kCount * 4, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("all_reduce: %s", e.c_str());
    if (out[0] != 6.0f || out[kCount - 1] != 6.0f) x.fail("all_reduce gave %g, want 6", out[0]);
    // A broadcast into it, and point to point from it.
    std::vector<float> seven(kCount, 7.0f);
    if (x.rank == 0) h2d(mine.p, seven.data(), kCount * 4, kDevice, st.s);
    CCL_OK(x, acmecclBroadcast(mine.p, shared, kCount, acmecclFloat32, 0, c, st.s));
    if (x.rank == 1) CCL_OK(x, acmecclSend(shared, 10, acmecclFloat32, 0, c, st.s));
    else CCL_OK(x, acmecclRecv(mine.p, 10, acmecclFloat32, 1, c, st.s));
    d2h(out.data(), mine.p, 40, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("broadcast/send: %s", e.c_str());
    if (x.rank == 0 && out[9] != 7.0f) x.fail("recv from opened memory gave %g, want 7", out[9]);
    x.barrier(0, 2);
    if (x.rank == 1 && acmeIpcCloseMemHandle(kDevice, shared) != acmeSuccess) x.fail("close");
    CCL_OK(x, acmecclCommDestroy(c));
    x.barrier(1, 2);
    x.set_flag(2);
  });
}

// Several communicators: the world, two halves of it, and a second
// communicator of the same ranks on the same device, used in turn.
TEST(several_communicators) {
  ranks::run(4, {}, [](Ctx& x) {
    acmecclComm_t world = x.comm(0, 4, x.rank, kDevice);
    const int half = x.rank / 2;
    acmecclComm_t sub = x.comm(1 + half, 2, x.rank % 2, kDevice, /*maker=*/half * 2);
    acmecclComm_t again = x.comm(3, 4, x.rank, kDevice);
    expect_topology(x, sub, 1, 2);
    for (int round = 0; round < 3; ++round) {
      check_reductions(x, world, 4, x.rank, {100}, {acmecclFloat32});
      check_reductions(x, sub, 2, x.rank % 2, {100}, {acmecclInt64});
      check_movement(x, again, 4, x.rank, 1000);
    }
    for (auto c : {world, sub, again}) CCL_OK(x, acmecclCommDestroy(c));
  });
}

// Work of two communicators on two streams at once, and of one communicator
// queued on both streams (it runs in call order), many times over: nothing
// mixes up or deadlocks.
TEST(concurrent_streams_and_communicators) {
  ranks::run(3, {}, [](Ctx& x) {
    acmecclComm_t a = x.comm(0, 3, x.rank, kDevice);
    acmecclComm_t b = x.comm(1, 3, x.rank, kDevice);
    Stream s1(kDevice), s2(kDevice);
    constexpr int kIters = 150;
    constexpr size_t kCount = 3000;
    Buf ba(kDevice, kCount * 4 * kIters), bb(kDevice, kCount * 4 * 3 * kIters);
    std::vector<int32_t> host(kCount * kIters);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i) * (x.rank + 1);
    h2d(ba.p, host.data(), host.size() * 4, kDevice, s1.s);
    h2d(bb.p, host.data(), host.size() * 4, kDevice, s2.s);
    if (auto e = s1.sync(); !e.empty()) x.fail("%s", e.c_str());
    if (auto e = s2.sync(); !e.empty()) x.fail("%s", e.c_str());
    for (int it = 0; it < kIters; ++it) {
      const size_t off = static_cast<size_t>(it) * kCount * 4;
      CCL_OK(x, acmecclAllReduce(ba.at(off), ba.at(off), kCount, acmecclInt32, acmecclSum, a, s1.s));
      // b, on the streams in turn.
      CCL_OK(x, acmecclAllReduce(bb.at(off), bb.at(off), kCount, acmecclInt32, acmecclMax, b,
                                 it % 2 ? s1.s : s2.s));
      const int next = (x.rank + 1) % 3, prev = (x.rank + 2) % 3;
      CCL_OK(x, acmecclGroupStart());
      CCL_OK(x, acmecclSend(bb.at(off + kCount * 4 * kIters), 64, acmecclUint8, next, a, s2.s));
      CCL_OK(x, acmecclRecv(bb.at(off + 2 * kCount * 4 * kIters), 64, acmecclUint8, prev, a, s2.s));
      CCL_OK(x, acmecclGroupEnd());
    }
    std::vector<int32_t> out(host.size());
    d2h(out.data(), ba.p, out.size() * 4, kDevice, s1.s);
    if (auto e = s1.sync(); !e.empty()) x.fail("%s", e.c_str());
    if (auto e = s2.sync(); !e.empty()) x.fail("%s", e.c_str());
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != static_cast<int32_t>(i) * 6) {
        x.fail("concurrent all_reduce (sum): element %zu is %d, want %zu", i, out[i], i * 6);
        break;
      }
    d2h(out.data(), bb.p, out.size() * 4, kDevice, s2.s);
    if (auto e = s2.sync(); !e.empty()) x.fail("%s", e.c_str());
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != static_cast<int32_t>(i) * 3) {
        x.fail("concurrent all_reduce (max): element %zu is %d, want %zu", i, out[i], i * 3);
        break;
      }
    for (auto c : {a, b}) CCL_OK(x, acmecclCommDestroy(c));
  });
}

// Calls are queued: they return while the stream is held back, the bytes move
// when it gets there. The link-speed option makes a collective take at least
// bytes / bandwidth; the slow-device option delays it (results stay right).
TEST(stream_order_link_speed_and_slow_device) {
  ranks::run(2, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
    Stream st(kDevice);
    constexpr size_t kCount = 1 << 18;  // 1 MiB of float32
    Buf buf(kDevice, kCount * 4);
    std::vector<float> host(kCount, static_cast<float>(x.rank + 1)), out(kCount);
    h2d(buf.p, host.data(), kCount * 4, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
    std::atomic<bool> open{false};
    acmeLaunch(kDevice, st.s, [&open] {
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (!open.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    const auto t0 = Clock::now();
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, kCount, acmecclFloat32, acmecclSum, c, st.s));
    if (Clock::now() - t0 > std::chrono::milliseconds(100)) x.fail("all_reduce blocked the caller");
    int idle = 1;
    acmeStreamQuery(kDevice, st.s, &idle);
    if (idle) x.fail("the stream is idle while its gate holds the collective back");
    open = true;
    d2h(out.data(), buf.p, kCount * 4, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
    if (out[0] != 3.0f || out[kCount - 1] != 3.0f) x.fail("all_reduce gave %g, want 3", out[0]);

    // 0.05 GB/s: 1 MiB crossing the link (half reduced, half gathered) takes >= 20 ms.
    if (acmeSetOption("link_gbps", "0.05") != acmeSuccess) x.fail("link_gbps: %s", acmeGetLastErrorString());
    x.barrier(0);
    const auto t1 = Clock::now();
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, kCount, acmecclFloat32, acmecclSum, c, st.s));
    if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    if (ms < 19.0) x.fail("with link_gbps 0.05, 1 MiB took %.1f ms (want >= 20)", ms);
    acmeSetOption("link_gbps", "0");

    if (acmeSetOption("slow_device", "3000") != acmeSuccess) x.fail("slow_device");
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, kCount, acmecclFloat32, acmecclMax, c, st.s));
    d2h(out.data(), buf.p, kCount * 4, kDevice, st.s);
    if (auto e = st.sync(); !e.empty()) x.fail("%s", e.c_str());
    if (out[7] != 6.0f) x.fail("under the slow device all_reduce gave %g, want 6", out[7]);
    acmeSetOption("slow_device", "0");
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

// comm_abort from another thread while a collective waits for a peer that
// never comes: the work ends with an error at the stream's next synchronize,
// later calls fail at once, and the peer learns that this rank aborted.
void abort_scenario(Ctx& x) {
  acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
  Stream st(kDevice);
  Buf buf(kDevice, 4096);
  if (x.rank == 0) {
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 1024, acmecclFloat32, acmecclSum, c, st.s));
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 1024, acmecclFloat32, acmecclSum, c, st.s));  // queued
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      CCL_OK(x, acmecclCommAbort(c));
    });
    const auto t0 = Clock::now();
    const std::string e = st.sync();
    aborter.join();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (e.find("aborted") == std::string::npos) x.fail("after abort the stream says '%s'", e.c_str());
    if (e.find("all_reduce #1") == std::string::npos) x.fail("the error does not name the op: %s", e.c_str());
    if (e.find("and 1 later failure") == std::string::npos) x.fail("queued work did not fail: %s", e.c_str());
    if (ms > 3000) x.fail("abort took %.0f ms to end the work", ms);
    acmecclResult_t async = acmecclSuccess;
    char msg[512] = "";
    CCL_OK(x, acmecclCommGetAsyncError(c, &async, msg, sizeof msg));
    if (async != acmecclError || std::strstr(msg, "aborted") == nullptr)
      x.fail("async error after abort: %d '%s'", async, msg);
    if (acmecclAllReduce(buf.p, buf.p, 1, acmecclFloat32, acmecclSum, c, st.s) != acmecclError ||
        std::strstr(acmecclGetLastError(), "failed") == nullptr)
      x.fail("a call after abort did not fail at once: %s", acmecclGetLastError());
    x.set_flag(0);
  } else {
    if (!x.wait_flag(0)) x.fail("rank 0 never aborted");
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 1024, acmecclFloat32, acmecclSum, c, st.s));
    const std::string e = st.sync();
    if (e.find("rank 0") == std::string::npos || e.find("aborted") == std::string::npos)
      x.fail("the peer of an aborted rank says '%s'", e.c_str());
  }
  CCL_OK(x, acmecclCommDestroy(c));
}

TEST(abort_from_another_thread) {
  ranks::run(2, {}, abort_scenario);
  ranks::run(2, {"hostA", "hostB"}, abort_scenario);  // across hosts: through the links
}

// A rank killed mid-collective: the survivors' work ends with an error naming
// the op, the communicator and the dead rank, within a few seconds.
void killed_scenario(Ctx& x, int victim) {
  acmecclComm_t c = x.comm(0, x.n, x.rank, kDevice);
  Stream st(kDevice);
  constexpr size_t kCount = 1 << 18;
  Buf buf(kDevice, kCount * 4);
  // One collective that works, then the victim dies in the middle of the next.
  CCL_OK(x, acmecclAllReduce(buf.p, buf.p, kCount, acmecclFloat32, acmecclSum, c, st.s));
  if (auto e = st.sync(); !e.empty()) x.fail("first all_reduce: %s", e.c_str());
  if (x.rank == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    raise(SIGKILL);
  }
  const auto t0 = Clock::now();
  CCL_OK(x, acmecclAllReduce(buf.p, buf.p, kCount, acmecclFloat32, acmecclSum, c, st.s));
  const std::string e = st.sync();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::string dead = "rank " + std::to_string(victim) + " (pid";
  if (e.find(dead) == std::string::npos || e.find("exited") == std::string::npos ||
      e.find("all_reduce #2") == std::string::npos || e.find("communicator") == std::string::npos)
    x.fail("error after rank %d died: '%s'", victim, e.c_str());
  if (ms > 5000) x.fail("the error took %.0f ms", ms);
  acmecclResult_t async = acmecclSuccess;
  CCL_OK(x, acmecclCommGetAsyncError(c, &async, nullptr, 0));
  if (async != acmecclError) x.fail("no async error after a peer died");
  CCL_OK(x, acmecclCommDestroy(c));
}

TEST(peer_killed_mid_collective) {
  ranks::run(3, {}, [](Ctx& x) { killed_scenario(x, 2); }, 30000, {2});
  // Across hosts: a non-leader of the other host dies.
  ranks::run(4, {"hostA", "hostA", "hostB", "hostB"}, [](Ctx& x) { killed_scenario(x, 3); }, 30000,
             {3});
}

// comm_init names the ranks that did not join (rank 0 and, through rank 0's
// verdict, the others); a missing rank 0 is named by the others.
TEST(comm_init_timeouts_name_missing_ranks) {
  ranks::run(3, {}, [](Ctx& x) {
    if (x.rank == 2) return;  // never joins
    const acmecclUniqueId id = x.id(0);
    acmecclComm_t c = nullptr;
    const auto t0 = Clock::now();
    const acmecclResult_t r = acmecclCommInitRank(&c, 3, id, x.rank, kDevice, 700);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const std::string e = acmecclGetLastError();
    if (r != acmecclError || e.find("did not join (rank 2)") == std::string::npos)
      x.fail("comm_init without rank 2 gave %d: '%s'", r, e.c_str());
    if (ms < 650 || ms > 4000) x.fail("comm_init gave up after %.0f ms (timeout 700)", ms);
  });
  ranks::run(2, {}, [](Ctx& x) {
    const acmecclUniqueId id = x.id(0);  // rank 0 makes the id but never joins
    if (x.rank == 0) {
      x.wait_flag(0, 5000);
      return;
    }
    acmecclComm_t c = nullptr;
    const acmecclResult_t r = acmecclCommInitRank(&c, 2, id, 1, kDevice, 500);
    const std::string e = acmecclGetLastError();
    if (r != acmecclError || e.find("rank 0") == std::string::npos)
      x.fail("comm_init without rank 0 gave %d: '%s'", r, e.c_str());
    x.set_flag(0);
  });
}

// Bad arguments fail at the call; collectives that do not match fail on every
// rank instead of hanging.
void mismatch_across_hosts(Ctx& x) {
  acmecclComm_t c = x.comm(0, x.n, x.rank, kDevice);
  Stream st(kDevice);
  Buf buf(kDevice, 1 << 20);
  // Host A does all_reduce, host B all_gather: the hosts' acting ranks find out.
  if (x.rank < x.n / 2)
    CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 1000, acmecclFloat32, acmecclSum, c, st.s));
  else
    CCL_OK(x, acmecclAllGather(buf.p, buf.p, 100, acmecclUint8, c, st.s));
  const std::string e = st.sync();
  if (e.find("do not match") == std::string::npos)
    x.fail("mismatched collectives across hosts gave '%s'", e.c_str());
  CCL_OK(x, acmecclCommDestroy(c));
}

TEST(argument_errors_and_mismatched_collectives) {
  ranks::run(4, {"hostA", "hostA", "hostB", "hostB"}, mismatch_across_hosts);
  ranks::run(2, {}, [](Ctx& x) {
    acmecclComm_t c = x.comm(0, 2, x.rank, kDevice);
    Stream st(kDevice);
    Buf buf(kDevice, 4096);
    Buf other(0, 4096);  // device 0: not the communicator's device
    int host = 0;
    auto expect = [&](acmecclResult_t got, acmecclResult_t want, const char* text, const char* what) {
      if (got != want || std::strstr(acmecclGetLastError(), text) == nullptr)
        x.fail("%s gave %d '%s'; want %d and '%s'", what, got, acmecclGetLastError(), want, text);
    };
    expect(acmecclAllReduce(buf.p, buf.p, 10, static_cast<acmecclDataType_t>(99), acmecclSum, c, st.s),
           acmecclInvalidArgument, "unknown dtype", "a bad dtype");
    expect(acmecclAllReduce(buf.p, buf.p, 10, acmecclFloat32, static_cast<acmecclRedOp_t>(9), c, st.s),
           acmecclInvalidArgument, "unknown reduction op", "a bad op");
    expect(acmecclBroadcast(buf.p, buf.p, 10, acmecclFloat32, 2, c, st.s), acmecclInvalidArgument,
           "root 2 is not a rank", "a bad root");
    expect(acmecclAllReduce(&host, buf.p, 1, acmecclInt32, acmecclSum, c, st.s),
           acmecclInvalidArgument, "not memory of device 1", "host memory");
    expect(acmecclAllReduce(other.p, buf.p, 1, acmecclInt32, acmecclSum, c, st.s),
           acmecclInvalidArgument, "not memory of device 1", "another device's memory");
    expect(acmecclAllReduce(buf.p, buf.p, 2000, acmecclFloat32, acmecclSum, c, st.s),
           acmecclInvalidArgument, "overruns", "a buffer too small");
    expect(acmecclSend(buf.p, 1, acmecclUint8, 5, c, st.s), acmecclInvalidArgument,
           "peer 5 is not a rank", "a bad peer");
    expect(acmecclGroupEnd(), acmecclInvalidArgument, "without group_start", "a lone group_end");
    acmeStream_t other_dev = nullptr;
    acmeStreamCreate(0, &other_dev);
    expect(acmecclAllReduce(buf.p, buf.p, 1, acmecclInt32, acmecclSum, c, other_dev),
           acmecclInvalidArgument, "belongs to device 0", "a stream of another device");
    acmeStreamDestroy(0, other_dev);
    {  // the communicator is still fine: the call never took its turn
      int v = 1, w = 0;
      acmeMemcpy(buf.p, &v, 4, acmeMemcpyHostToDevice, kDevice);
      CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 1, acmecclInt32, acmecclSum, c, st.s));
      d2h(&w, buf.p, 4, kDevice, st.s);
      if (auto e = st.sync(); !e.empty() || w != 2) x.fail("after a refused call: %d, '%s'", w, e.c_str());
    }
    expect(acmecclCommInitRank(nullptr, 2, x.id(1, 0), 0, kDevice, 100), acmecclInvalidArgument,
           "null output", "a null comm");
    // Mismatched collectives.
    if (x.rank == 0)
      CCL_OK(x, acmecclAllReduce(buf.p, buf.p, 100, acmecclFloat32, acmecclSum, c, st.s));
    else
      CCL_OK(x, acmecclAllGather(buf.p, buf.p, 50, acmecclUint8, c, st.s));
    const std::string e = st.sync();
    if (e.find("do not match") == std::string::npos && e.find("failed") == std::string::npos)
      x.fail("mismatched collectives gave '%s'", e.c_str());
    CCL_OK(x, acmecclCommDestroy(c));
  });
}

}  // namespace
