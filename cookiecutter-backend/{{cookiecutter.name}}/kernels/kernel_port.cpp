// flsdk's kernel library (generated/kernel_lib/, docs/writing-a-kernel.md) on
// this backend's runtime: the four functions of kernel_lib/port.h that the
// library's launch(), DeviceTensor and parallel loops call, written over the
// runtime adapter's host_kernels primitive (the simulated device runs host code
// as device work). This file is yours: map them onto your driver (your launch
// API, your compute units) as acme's kernels/kernel_port.cpp maps them onto
// acme's. A device whose kernels are another language (OpenCL C ...) drops
// host_kernels and this file (docs/writing-a-kernel.md, last section).
#include "kernel_lib/port.h"

namespace {{ cookiecutter.name }}::common::port {

// port.h's queue is launch_host_kernel's contract (fn owns arg, runs once).
runtime::Status queue(int device, runtime::Stream stream, void (*fn)(void*), void* arg,
                      const char* /*name: a runtime with profiling names the work*/,
                      runtime::ActivityKind /*kind*/) {
  return runtime::launch_host_kernel(device, stream, fn, arg);
}

// device_view answers inside device work only, and null for memory that is not
// the device's: that is a device part's own host scratch, reached as it is. A
// host part that reads device memory gets the raw device address, and the
// simulated device stops that read with a report (memory.model: discrete).
void* device_or_host_view(const void* p) {
  if (p == nullptr) return nullptr;
  void* view = runtime::device_view(p);
  return view != nullptr ? view : const_cast<void*>(p);
}

// The simulated device has one compute unit per stream: chunks run in order.
void run_units(int64_t n, int /*max_units*/, void (*body)(void* ctx, int64_t i), void* ctx) {
  for (int64_t i = 0; i < n; ++i) body(ctx, i);
}

// No fault injection in the scaffold (acme's runtime option "wrong_kernel" shows one).
bool kernel_is_wrong(const char* /*name*/) { return false; }

}  // namespace {{ cookiecutter.name }}::common::port
