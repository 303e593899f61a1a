// Launching a kernel's device part: what a kernel of the OpenCL device
// runs on the device, queued on a stream (kernels/README.md, docs/writing-a-kernel.md).
//
//   launch(device, stream, [in, out, n] {
//     const float* x = device_ptr<const float>(in);  // the device's view of `in`
//     ...
//   });
//
// The host part of a kernel never reads device memory: it checks arguments,
// allocates outputs and captures device addresses by value. Inside the launched
// body device_ptr() gives the addresses at which device work reaches them.
// Replace launch_host_kernel in adapter.cpp with your driver's kernel launch
// when the device part becomes your chip's own code.
#pragma once

#include <memory>
#include <utility>

#include "runtime_adapter.h"

namespace ocl::runtime {

// Queues `body` on `stream` of `device`. Capture by value: it may run after
// the kernel returned.
template <class Body>
Status launch(int device, Stream stream, Body body) {
  auto* heap = new Body(std::move(body));
  Status status = launch_host_kernel(
      device, stream, [](void* p) { std::unique_ptr<Body> owned(static_cast<Body*>(p)); (*owned)(); },
      heap);
  if (status != Status::Ok) delete heap;  // never queued
  return status;
}

// Inside a launched body: the device's view of device address `p`.
template <class T>
T* device_ptr(const void* p) {
  return static_cast<T*>(device_view(p));
}

}  // namespace ocl::runtime
