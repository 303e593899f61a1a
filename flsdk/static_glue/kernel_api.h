// What kernels may use of the generated glue (kernels.h includes it): output
// allocation without the dispatcher, the stream to queue device work on, the
// name of the running kernel (to name that work), a counted host wait for the
// few kernels whose output shape depends on data (nonzero, unique,
// masked_select), which must read a count from the device before they can
// allocate, and the glue's error for a failed runtime call.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include "device_config.h"
#include "host_sync.h"

namespace at {
class Tensor;
}

namespace FLSDK_BACKEND_NS {

// An uninitialized contiguous (or strided) tensor on `device`, as at::empty /
// at::empty_strided give one there, without their trip through the dispatcher
// (BackendSelect, then the backend's factory): the kernels' output allocation,
// as PyTorch's CPU kernels allocate theirs. Under torch.use_deterministic_algorithms
// with fill_uninitialized_memory it is filled, as at::empty's is.
at::Tensor empty_device(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::Device device);
at::Tensor empty_strided_device(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype, c10::Device device);

// Throws a c10::Error (a Python RuntimeError) naming `call` and carrying the
// runtime's last_error(), unless `status` is Ok.
void check_status(runtime::Status status, const char* call);

// The native handle of the current stream of `device` (null: its default
// stream): where a kernel queues its device work, in order after the work
// the caller queued before.
runtime::Stream launch_stream(c10::DeviceIndex device);

// The host waits for the work queued on the current stream of `device`, so
// the kernel `op` can read a result it copied to the host (counted as a
// "kernel" host wait).
void wait_for_device_results(c10::DeviceIndex device, const char* op);

// The kernel the generated wrapper running on this thread called ("k_mm"; the
// innermost, when a kernel's host part calls another op), or nullptr outside
// kernels. A runtime that records device activity (runtime_primitives:
// profiling) names the work a kernel queues after it, so the profiler's device
// lanes say which kernel ran; acme's fault injection picks kernels by it.
const char* current_kernel();

// Set by the generated wrappers (and the glue's calls of a kernel) around each
// kernel call: one thread-local store each way.
class CurrentKernel {
 public:
  explicit CurrentKernel(const char* name) noexcept;
  ~CurrentKernel();
  CurrentKernel(const CurrentKernel&) = delete;
  CurrentKernel& operator=(const CurrentKernel&) = delete;

 private:
  const char* previous_;
};

}  // namespace FLSDK_BACKEND_NS
