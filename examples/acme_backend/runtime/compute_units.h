// acme's compute units: the simulated chip runs a kernel's independent chunks
// of work on several units at once, the way a GPU spreads blocks over its SMs.
// On this host-memory simulator a unit is a host thread; the calling thread is
// unit 0 and a pool of (units - 1) worker threads, started on the first
// parallel kernel, are the others.
//
// How many units exist comes from device.yaml (`compute_units`, overridable by
// the environment variable it names; runtime_init hands it to runtime::init).
// A kernel asks for at most `max_units` (kernels cap it by torch's intra-op
// thread count, so torch.set_num_threads(1) makes acme single-unit too).
//
// Determinism: run() executes chunk i exactly once for every i in [0, n); which
// unit runs it is timing-dependent, so callers must make chunk i's work and
// output independent of the unit (pointwise: disjoint output ranges;
// reductions: one partial per chunk, combined in chunk order by the caller).
// Chunk boundaries are the caller's and must not depend on the unit count.
//
// Concurrency: one kernel at a time owns the workers. A kernel launched while
// another holds them (another acme stream's worker thread, or a parallel loop
// nested inside a chunk) runs its chunks inline on its own thread: same
// results, no deadlock, no oversubscription.
//
// No torch includes: this is part of the vendor runtime.
#pragma once

#include <cstdint>
#include <string>

namespace acme::units {

// Sets the number of units (>= 1; 0 = the host's hardware threads). Running
// workers are stopped and restarted lazily with the new count. Not to be called
// while a kernel runs.
void configure(int units);

// The configured number of units (>= 1).
int count();

// Calls body(ctx, i) for every i in [0, n) on up to max_units units, the
// caller included; returns when all chunks are done. If chunks throw, the
// remaining unstarted chunks are skipped and the exception of the lowest
// failing chunk index is rethrown here.
void run(int64_t n, int max_units, void (*body)(void* ctx, int64_t i), void* ctx);

// Typed convenience wrapper: f(i) for i in [0, n).
template <class F>
inline void run(int64_t n, int max_units, F&& f) {
  run(n, max_units, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); },
      static_cast<void*>(&f));
}

// Runtime options (runtime set_option/get_option key "compute_units"): a
// positive integer, or "auto" for the host's hardware threads. Returns false
// with a message in *error on a bad value.
bool set_option(const std::string& value, std::string* error);
std::string get_option();

}  // namespace acme::units
