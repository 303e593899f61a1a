// The C ABI of host_kernels.h over the runtime adapter's launch_host_kernel and
// device_view (device.yaml runtime_primitives: host_kernels). Without that
// primitive every launch fails with a message saying so.
#include "host_kernels.h"

#include <c10/util/Exception.h>

#include <string>

#include "backend.h"

namespace FLSDK_BACKEND_NS::host_kernels {
namespace {
thread_local std::string t_error;
}  // namespace

extern "C" int flsdk_launch_host_kernel(void (*fn)(void*), void* arg) {
  if constexpr (!config::kRuntimeHasHostKernels) {
    (void)fn;
    (void)arg;
    t_error = std::string(kBackendName) + ": the runtime cannot run host code as device work "
              "(device.yaml runtime_primitives lacks host_kernels)";
    return -1;
  } else {
    try {
      auto device = current_device();
      check_status(runtime::launch_host_kernel(device, launch_stream(device), fn, arg),
                   "launch_host_kernel");
      return 0;
    } catch (const c10::Error& e) {
      t_error = e.what_without_backtrace();
      return -1;
    }
  }
}

extern "C" void* flsdk_device_view(const void* p) {
  if constexpr (!config::kRuntimeHasHostKernels) {
    (void)p;
    return nullptr;
  } else {
    return runtime::device_view(p);
  }
}

extern "C" const char* flsdk_last_launch_error() { return t_error.c_str(); }

}  // namespace FLSDK_BACKEND_NS::host_kernels
