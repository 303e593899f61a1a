// acmeccl's bandwidth benchmark: all_reduce, all_gather and reduce_scatter of
// float32 from 4 KiB to 256 MiB between N ranks (processes) on one simulated
// host, or split over two (--hosts 2), as nccl-tests measures them: the time of
// one call (the slowest rank's mean over the iterations), algbw = size / time,
// busbw = algbw * 2(n-1)/n for all_reduce and (n-1)/n for the others; `size`
// is the buffer (all_reduce), the gathered output (all_gather) or the scattered
// input (reduce_scatter). Out of place, on a created stream, after a warm-up.
// Also the host's single-thread memcpy bandwidth (the limit a collective that
// moves bytes between processes' memory runs against on this machine), the
// best of a measurement before and one after the collectives, and (from 1 MiB)
// memcpy measured right before each size, under the same load.
//
//   bench_acmeccl [--ranks N] [--hosts H] [--min BYTES] [--max BYTES] [--ops a,b] [--json]
//
// benchmarks/bench_acmeccl.py builds and runs it beside gloo.
#include "../tests/ranks.h"

#include <cstring>
#include <map>

namespace {

struct Args {
  int ranks = 2, hosts = 1;
  size_t min = 4 << 10, max = 256u << 20;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter"};
  bool json = false;
};

double memcpy_gbps(int reps = 5) {
  const size_t n = 64u << 20;
  static std::vector<char> a(n, 1), b(n, 2);  // committed once
  std::memcpy(b.data(), a.data(), n);
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = ranks::Clock::now();
    for (int i = 0; i < 4; ++i) std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
    const double s = std::chrono::duration<double>(ranks::Clock::now() - t0).count();
    best = std::max(best, 4.0 * n / s / 1e9);
  }
  return best;
}

// Slots in the shared page for the ranks' times (microseconds) of each size.
constexpr int kTimeSlot = 8;

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--ranks") a.ranks = std::stoi(next());
    else if (k == "--hosts") a.hosts = std::stoi(next());
    else if (k == "--min") a.min = std::stoull(next());
    else if (k == "--max") a.max = std::stoull(next());
    else if (k == "--json") a.json = true;
    else if (k == "--ops") {
      a.ops.clear();
      std::string s = next();
      for (size_t p = 0; p <= s.size();) {
        const size_t q = std::min(s.find(',', p), s.size());
        a.ops.push_back(s.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--ranks N] [--hosts H] [--min B] [--max B] [--ops a,b] [--json]\n", argv[0]);
      return 2;
    }
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < a.ranks; ++r)
    hosts.push_back("bench-host-" + std::to_string(r * a.hosts / a.ranks));
  std::vector<size_t> sizes;
  for (size_t s = a.min; s <= a.max; s *= 2) sizes.push_back(s);

  double mcpy = memcpy_gbps();
  // Results, filled by rank 0 of the forked ranks through a file (the shared
  // page of ranks.h is the driver's only while the ranks run).
  char path[] = "/tmp/bench_acmeccl.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  const Args args = a;
  ranks::run(a.ranks, a.hosts > 1 ? hosts : std::vector<std::string>{}, [&](ranks::Ctx& x) {
    // ranks.h initialized 2 devices of 64 MiB: this benchmark needs more.
    if (acmeInit(1, 3 * args.max + (64u << 20), 512) != acmeSuccess) {
      x.fail("acmeInit: %s", acmeGetLastErrorString());
      return;
    }
    acmecclComm_t c = x.comm(0, x.n, x.rank, 0, 0, 60000);
    acmeStream_t st = nullptr;
    acmeStreamCreate(0, &st);
    void *send = nullptr, *recv = nullptr;
    if (acmeMalloc(0, &send, args.max) != acmeSuccess || acmeMalloc(0, &recv, args.max) != acmeSuccess) {
      x.fail("malloc: %s", acmeGetLastErrorString());
      return;
    }
    // Commit the pages once (a device memory's first touch is not what is measured).
    std::vector<char> ones(args.max, 1);
    acmeMemcpyAsync(send, ones.data(), args.max, acmeMemcpyHostToDevice, 0, st);
    acmeMemcpyAsync(recv, ones.data(), args.max, acmeMemcpyHostToDevice, 0, st);
    acmeStreamSynchronize(0, st);
    FILE* out = x.rank == 0 ? std::fopen(path, "w") : nullptr;
    int barrier = 0;
    const size_t n = static_cast<size_t>(x.n);
    for (const std::string& op : args.ops) {
      for (size_t size : sizes) {
        const size_t count = size / 4;
        if (count % n) continue;
        auto call = [&] {
          if (op == "all_reduce")
            return acmecclAllReduce(send, recv, count, acmecclFloat32, acmecclSum, c, st);
          if (op == "all_gather")
            return acmecclAllGather(send, recv, count / n, acmecclFloat32, c, st);
          return acmecclReduceScatter(send, recv, count / n, acmecclFloat32, acmecclSum, c, st);
        };
        const int iters = static_cast<int>(std::clamp<size_t>((512u << 20) / size, 5, 200));
        for (int i = 0; i < 2; ++i) call();  // warm-up
        acmeStreamSynchronize(0, st);
        // memcpy at this moment (the machine is shared: its load moves both),
        // measured by rank 0 while the others wait.
        x.barrier(barrier++);
        const double now_gbps = x.rank == 0 && size >= (1u << 20) ? memcpy_gbps(2) : 0.0;
        x.barrier(barrier++);
        const auto t0 = ranks::Clock::now();
        for (int i = 0; i < iters; ++i)
          if (call() != acmecclSuccess) x.fail("%s: %s", op.c_str(), acmecclGetLastError());
        if (acmeStreamSynchronize(0, st) != acmeSuccess) x.fail("%s: %s", op.c_str(), acmeGetLastErrorString());
        const double us = std::chrono::duration<double, std::micro>(ranks::Clock::now() - t0).count() / iters;
        ranks::g_shared->flags[kTimeSlot + x.rank].store(static_cast<int>(us * 10));
        x.barrier(barrier++);
        if (out) {
          double worst = 0;
          for (int r = 0; r < x.n; ++r)
            worst = std::max(worst, ranks::g_shared->flags[kTimeSlot + r].load() / 10.0);
          const double algbw = size / (worst * 1e-6) / 1e9;
          const double factor = op == "all_reduce" ? 2.0 * (x.n - 1) / x.n : (x.n - 1.0) / x.n;
          std::fprintf(out, "%s %zu %.1f %.3f %.3f %.3f\n", op.c_str(), size, worst, algbw,
                       algbw * factor, now_gbps);
          std::fflush(out);
        }
        x.barrier(barrier++);
      }
    }
    if (out) std::fclose(out);
    acmeFree(0, send);
    acmeFree(0, recv);
    acmeStreamDestroy(0, st);
    acmecclCommDestroy(c);
  }, 600000);
  // The machine's memcpy bandwidth: the best of before and after (the load of
  // a shared machine moves it; the best is the conservative reference).
  mcpy = std::max(mcpy, memcpy_gbps());
  const int failures = harness::failures().lines.empty() ? 0 : 1;
  for (auto& l : harness::failures().lines) std::fprintf(stderr, "%s\n", l.c_str());
  FILE* in = std::fopen(path, "r");
  char opname[64];
  size_t size;
  double us, algbw, busbw, now;
  if (a.json) {
    std::printf("{\"ranks\": %d, \"hosts\": %d, \"memcpy_gbps\": %.3f, \"results\": [", a.ranks, a.hosts, mcpy);
    bool first = true;
    while (in && std::fscanf(in, "%63s %zu %lf %lf %lf %lf", opname, &size, &us, &algbw, &busbw, &now) == 6) {
      std::printf("%s\n  {\"op\": \"%s\", \"bytes\": %zu, \"us\": %.1f, \"algbw\": %.3f, \"busbw\": %.3f, "
                  "\"memcpy_now\": %.3f}",
                  first ? "" : ",", opname, size, us, algbw, busbw, now);
      first = false;
    }
    std::printf("]}\n");
  } else {
    std::printf("acmeccl, %d ranks on %d simulated host(s); host memcpy (1 thread): %.2f GB/s\n",
                a.ranks, a.hosts, mcpy);
    std::printf("%-15s %12s %10s %10s %10s %12s\n", "op", "bytes", "time us", "algbw GB/s",
                "busbw GB/s", "memcpy now");
    while (in && std::fscanf(in, "%63s %zu %lf %lf %lf %lf", opname, &size, &us, &algbw, &busbw, &now) == 6)
      std::printf("%-15s %12zu %10.1f %10.2f %10.2f %12.2f\n", opname, size, us, algbw, busbw, now);
  }
  if (in) std::fclose(in);
  unlink(path);
  return failures;
}
