// Internal API shared by the generated glue files of the backend.
// Only light c10 headers here: every glue file includes this.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <string>

#include "device_config.h"
#include "host_sync.h"
#include "kernel_api.h"
#include "runtime_adapter.h"

namespace FLSDK_BACKEND_NS {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
// The device string (e.g. "acme"), from device.yaml `name`.
using config::kBackendName;

// Starts the vendor runtime once (device count and memory capacity from
// device.yaml, overridable through the environment). Throws on failure.
void ensure_initialized();
// Never throws: 0 when the runtime failed to start (see init_error()).
int device_count() noexcept;
std::string init_error();

// Throws c10::Error when index is not a valid device of this backend.
void check_device_index(int index);

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// Streams: id 0 is the default stream of a device (native handle nullptr).
runtime::Stream native_stream(const c10::Stream& stream);
// The id of the stream whose native handle is `handle` on `device` (0: the
// default stream, null); -1 for a handle the glue did not create.
c10::StreamId stream_id_of(int device, runtime::Stream handle);
c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream set_current_stream(const c10::Stream& stream);  // returns the previous one
c10::Stream new_stream(c10::DeviceIndex index);
// One of a few streams per device, reused round-robin (like CUDA's pool);
// backs both torch.Stream() and the streams autograd asks for.
c10::Stream pool_stream(c10::DeviceIndex index);

// kernel_launch: inline (kernels run in the calling thread): before a kernel,
// wait for the work queued on the current stream, so order holds. A no-op on
// the default stream of a runtime that runs it inline.
void wait_for_current_stream(c10::DeviceIndex index);

// Brackets a kernel that runs in the calling thread (kernel_launch: inline) so
// the runtime can open device memory.
struct KernelScope {
  KernelScope() { runtime::kernel_begin(); }
  ~KernelScope() { runtime::kernel_end(); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};

// Names the op whose wrapper runs on this thread (runtime::current_op(),
// runtime_adapter.h) until the scope ends, then the outer one again (a kernel
// calling another op through the dispatcher). `op` has static storage.
struct CurrentOp {
  explicit CurrentOp(const runtime::OpInfo* op) : outer_(runtime::t_current_op) {
    runtime::t_current_op = op;
  }
  ~CurrentOp() { runtime::t_current_op = outer_; }
  CurrentOp(const CurrentOp&) = delete;
  CurrentOp& operator=(const CurrentOp&) = delete;

 private:
  const runtime::OpInfo* outer_;
};

}  // namespace FLSDK_BACKEND_NS
