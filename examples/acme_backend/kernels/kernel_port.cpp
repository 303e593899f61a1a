// flsdk's kernel library (generated/kernel_lib/) on acme's runtime: the four
// functions of kernel_lib/port.h, which the library's launch(), DeviceTensor
// and parallel loops call. acme gives more than the runtime adapter does: the
// work's name and kind for the profiler's device lanes, compute units that
// split a kernel's chunks over host threads, and the "wrong_kernel" fault
// injection of its runtime options.
#include "kernel_lib/port.h"

#include "acme_runtime.h"
#include "compute_units.h"

#include <utility>

namespace acme::common::port {

// A function pointer and its argument fit in std::function's own storage: acme's
// queue takes the work with no allocation (port.h says why that matters).
runtime::Status queue(int device, runtime::Stream stream, void (*fn)(void*), void* arg,
                      const char* name, runtime::ActivityKind kind) {
  return runtime::launch(device, stream, [fn, arg] { fn(arg); }, name, kind);
}

void* device_or_host_view(const void* p) { return runtime::device_or_host_view(p); }

void run_units(int64_t n, int max_units, void (*body)(void* ctx, int64_t i), void* ctx) {
  units::run(n, max_units, body, ctx);
}

bool kernel_is_wrong(const char* name) { return acmeKernelIsWrong(name) != 0; }

}  // namespace acme::common::port
