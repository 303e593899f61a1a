// Host code run as device work (runtime primitive host_kernels), for code the
// backend did not write itself: Inductor's C++ kernels on a discrete device
// (torch_fl/compile/host_kernels.py). A C ABI, so that code reaches it through
// plain function pointers without linking against the backend.
#pragma once

#include "device_config.h"

namespace FLSDK_BACKEND_NS::host_kernels {

// Queues fn(arg) on the current stream of the current device; fn owns arg.
// 0 on success; otherwise arg was not queued and last_launch_error() says why.
extern "C" int flsdk_launch_host_kernel(void (*fn)(void*), void* arg);
// While such work runs: where it reaches device address p.
extern "C" void* flsdk_device_view(const void* p);
// The message of this thread's last failed flsdk_launch_host_kernel.
extern "C" const char* flsdk_last_launch_error();

}  // namespace FLSDK_BACKEND_NS::host_kernels
