// Host waits: every place the glue (or a kernel) makes the host wait for the
// device goes through here, so they can be counted per reason and, as with
// CUDA's sync debug mode, reported or refused when the user asks
// (torch.<backend>.set_sync_debug_mode, torch_fl.host_syncs()).
// Light on purpose (no ATen): kernels include it through kernel_api.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "device_config.h"
#include "runtime_adapter.h"

namespace FLSDK_BACKEND_NS {

// Why the host waited. The first ones are implicit (the user's code did not
// ask to synchronize): sync debug mode reports those. The last two are the
// user's own synchronize / event waits.
enum class HostWait : int {
  CopyToHost,    // a copy into pageable host memory (x.cpu(), print(x), .tolist())
  CopyToDevice,  // a copy to the device without non_blocking: done when it returns, as CUDA's
  Item,          // _local_scalar_dense: x.item(), float(x), `if x:`
  Kernel,        // a kernel whose output shape depends on data (nonzero, unique)
  Fallback,      // the CPU fallback's copies to the host
  Staging,       // a copy or fill staged through host memory (no kernel or runtime primitive for it)
  PeerCopy,      // a copy between two devices
  Allocator,     // the caching allocator giving memory back, or a block it cannot track
  InlineKernel,  // kernel_launch: inline, a kernel waiting for the current stream
  Synchronize,   // torch.<backend>.synchronize(), stream.synchronize()
  Event,         // event.synchronize()
  kCount,
};
constexpr int kHostWaitReasons = static_cast<int>(HostWait::kCount);
const char* host_wait_name(HostWait why);  // "copy_to_host", "item", ...

// Wait for the work queued on `stream` of `device` / all of `device` / `event`,
// counted under `why`; `what` names the op for the debug mode's message.
// Throw the runtime's error (the first failure of queued work) as a c10::Error.
void host_wait_stream(int device, runtime::Stream stream, HostWait why, const char* what);
void host_wait_device(int device, HostWait why, const char* what);
void host_wait_event(int device, runtime::Event event, HostWait why, const char* what);

// Errors the device found asynchronously, outside any call the host made (a
// collective of the c10d backend that timed out, a peer process that exited):
// the next host wait of any thread raises the first one as a c10::Error, once,
// as CUDA reports a failed kernel at the next synchronization, so a tensor the
// failed work should have written is never read as if it were right.
// `poll` (set by the distributed glue while a process group lives, else null)
// runs before that check in every host wait, so an error the collective library
// found just now is raised at this wait, not at a later one.
void report_async_error(const std::string& message);
void set_async_error_poll(void (*poll)());

std::array<std::uint64_t, kHostWaitReasons> host_wait_counts();
void reset_host_wait_counts();

// 0: off; 1: warn once per op on an implicit wait; 2: raise on it (the op
// fails before waiting). Like torch.cuda.set_sync_debug_mode.
void set_sync_debug_mode(int mode);
int sync_debug_mode();

// While alive, waits on this thread are counted under `why` instead of their
// own reason (the CPU fallback's copies count as Fallback).
class HostWaitReason {
 public:
  explicit HostWaitReason(HostWait why);
  ~HostWaitReason();
  HostWaitReason(const HostWaitReason&) = delete;
  HostWaitReason& operator=(const HostWaitReason&) = delete;

 private:
  int previous_;
};

}  // namespace FLSDK_BACKEND_NS
