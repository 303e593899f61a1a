// Parallel loops over the device's compute units (port.h run_units).
//
//   parallel_for(n, grain, [&](int64_t begin, int64_t end) { ... });
//   T r = parallel_reduce(n, grain, identity, chunk_fn, combine);
//
// [0, n) is cut into chunks of exactly `grain` elements (the last one may be
// shorter): the cut depends on n and grain only, never on how many units run
// or on timing, so
// * a pointwise loop writes the same bytes with 1 unit or 16, and
// * a reduction combines the same per-chunk partials in the same (chunk)
//   order, so its result is bitwise identical for any unit count.
// Loops of at most one chunk run on the caller without touching the pool.
//
// The loop body is compiled once: every call, one chunk or many, reaches it
// through run_units's out-of-line function pointer. An inline shortcut for
// the one-chunk case would be a second copy of every vectorized loop body in
// every kernel (it once doubled acme's compile time); the indirect call costs
// nanoseconds.
//
// Units used: min(the device's compute units, torch's intra-op thread count):
// a simulator's units are host threads that share the cores with torch's CPU
// work, so torch.set_num_threads(1) makes the device single-unit as it makes CPU
// single-threaded (the same rule as the BLAS threads in gemm.h). The count is
// read process-wide (intra_op_threads below), not per thread.
#pragma once

#include "device_config.h"  // FLSDK_BACKEND_NS

#include <ATen/Parallel.h>

#include "port.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace FLSDK_BACKEND_NS::common {

// Grain sizes (elements per chunk) by cost per element: a chunk should take
// tens of microseconds, well above the cost of waking a worker.
constexpr int64_t kGrainCheap = 32768;  // copies, add, mul, relu
constexpr int64_t kGrainMath = 8192;    // exp, sin, tanh, gelu (vector math)
constexpr int64_t kGrainHeavy = 1024;   // scalar libm calls, erfinv, lgamma

// torch's intra-op thread count, as torch documents it: one setting for the
// process. torch (OpenMP build) keeps it per thread: set_num_threads changes
// the calling thread's count and the default of threads that start later. The
// autograd engine runs a backend's backward kernels on a device thread of its own,
// started at the first backward, which keeps the count of that moment: after
// set_num_threads(1) -> backward -> set_num_threads(2), every backward kernel
// would still run on one unit and one BLAS thread. So the most recent change
// seen on any thread wins: a thread whose count differs from what it read last
// time (its first read, or set_num_threads was called on it) publishes its
// count; a thread whose count did not change takes the published one.
//
// Device work runs on a stream's thread, not the caller's: launch() (device.h)
// takes the caller's count when it queues the work and sets it for the work
// (LaunchedThreads), so the count in force when an op was called is the one its
// device part uses, as on the host.
inline int& launched_threads() {
  thread_local int n = 0;  // 0: not inside launched work
  return n;
}

struct LaunchedThreads {
  explicit LaunchedThreads(int n) : saved(launched_threads()) { launched_threads() = n; }
  ~LaunchedThreads() { launched_threads() = saved; }
  LaunchedThreads(const LaunchedThreads&) = delete;
  LaunchedThreads& operator=(const LaunchedThreads&) = delete;
  int saved;
};

inline int intra_op_threads() {
  if (const int launched = launched_threads(); launched > 0) return launched;
  static std::atomic<int> published{0};  // 0: nothing published yet
  thread_local int last_read = 0;
  const int mine = std::max(1, at::get_num_threads());
  if (mine != last_read) {
    last_read = mine;
    published.store(mine, std::memory_order_relaxed);
    return mine;
  }
  const int latest = published.load(std::memory_order_relaxed);
  return latest > 0 ? latest : mine;
}

inline int max_units() { return intra_op_threads(); }

// f(i) for every chunk i in [0, n), through the port's out-of-line run_units.
template <class F>
inline void run_chunks(int64_t n, int units, F&& f) {
  using Fn = std::remove_reference_t<F>;
  port::run_units(n, units, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); },
                  const_cast<void*>(static_cast<const void*>(&f)));
}

template <class F>
inline void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  run_chunks(chunks, max_units(), [&](int64_t c) {
    const int64_t begin = c * grain;
    f(begin, std::min(n, begin + grain));
  });
}

// chunk(begin, end) -> T is the partial of one chunk; combine(acc, partial)
// folds them left to right in chunk order, starting from `identity`.
template <class T, class Chunk, class Combine>
inline T parallel_reduce(int64_t n, int64_t grain, T identity, Chunk&& chunk, Combine&& combine) {
  if (n <= 0) return identity;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  std::vector<T> partial(static_cast<size_t>(chunks), identity);
  run_chunks(chunks, max_units(), [&](int64_t c) {
    const int64_t begin = c * grain;
    partial[static_cast<size_t>(c)] = chunk(begin, std::min(n, begin + grain));
  });
  T acc = identity;
  for (const T& p : partial) acc = combine(acc, p);
  return acc;
}

}  // namespace FLSDK_BACKEND_NS::common
