// What the kernel library's device-part helpers (device.h, parallel.h) need
// from the backend: how to queue work on a stream, how device work reaches
// device memory, and how it spreads over the device's compute units. The
// backend defines these functions once, in kernels/kernel_port.cpp
// (`flsdk new-backend` writes one over the runtime adapter's host_kernels
// primitive; acme's maps them onto its own runtime).
//
// Only a backend whose device parts run as host code (runtime_primitives:
// host_kernels: a simulator, a CPU-like chip) defines them. A backend whose
// device code is another language (device.yaml device_code: OpenCL C ...) uses
// the host-part half of the library (dtype.h, errors.h, args.h, alloc.h's
// shapes, promotion and allocation) and launches through its own driver.
//
// No torch includes: the port is the runtime's side of the library.
#pragma once

#include "device_config.h"  // FLSDK_BACKEND_NS
#include "runtime_adapter.h"

#include <cstdint>

namespace FLSDK_BACKEND_NS::common::port {

// Queues fn(arg) on `stream` of `device` and returns once it is queued; it
// runs later, in stream order, as device work (device_or_host_view answers
// inside it). fn owns arg, as with launch_host_kernel (runtime_adapter.h): call
// it exactly once. When queue returns an error, fn must not run; the caller
// frees arg. `name` (static storage, null: unnamed) and `kind` are what the
// profiler's device lanes show for it.
//
// A plain function and argument, not a std::function, because launch()
// (device.h) keeps the closure in recycled memory (queued_work.h): wrapping it
// again would put it back on the C heap.
runtime::Status queue(int device, runtime::Stream stream, void (*fn)(void*), void* arg,
                      const char* name, runtime::ActivityKind kind);

// Inside device work: the device's view of `p` when it is device memory, `p`
// itself when it is host memory (a device part's scratch buffers). Null when
// host code asks for device memory (a kernel's host part read it), so the
// library can name the mistake; a port that cannot tell may return `p`.
void* device_or_host_view(const void* p);

// Calls body(ctx, i) for every i in [0, n) on up to `max_units` compute units
// of the device running the current work (the caller is one of them), and
// returns when all are done. Chunk i's result must not depend on which unit
// ran it (parallel.h relies on it for bitwise-reproducible reductions). If
// chunks throw, the exception of the lowest failing index is rethrown here. A
// device without parallel units runs the chunks in order on the caller. The
// library's loops call device_or_host_view inside chunks, so a port that runs
// chunks on other threads answers it there too (acme's units do).
void run_units(int64_t n, int max_units, void (*body)(void* ctx, int64_t i), void* ctx);

// Fault injection for testing the tests: true when the kernel named `name`
// ("k_relu") must give a wrong answer (launch() then adds 1 to the first
// element of its output), so a conformance run can prove it catches a wrong
// kernel. A port without the option returns false.
bool kernel_is_wrong(const char* name);

}  // namespace FLSDK_BACKEND_NS::common::port
