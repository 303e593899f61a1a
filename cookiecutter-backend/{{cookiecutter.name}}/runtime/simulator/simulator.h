// The simulated {{ cookiecutter.display_name }}: a strict stand-in for the chip's
// driver, so that the backend's kernels and the generated glue meet the contract
// of a real accelerator before silicon. runtime/adapter.cpp maps every adapter
// call onto it; when your driver arrives, make adapter.cpp call the driver
// instead and delete this folder (and its lines in runtime/runtime.cmake).
//
// What it simulates (docs/runtime-adapter.md, "Testing before silicon"):
// * memory chosen by device.yaml's memory.model (kDiscrete, from the generated
//   device_config.h, so switching the line and rebuilding switches it):
//   `discrete` hands out device addresses the host can never read or write
//   (PROT_NONE); the bytes sit in a second mapping only copies and launched
//   work reach. A host dereference dies with a report naming the op being run,
//   its kernel, the address and the allocation it falls in (fault_report.cpp).
//   `host` hands out readable addresses, as on an integrated chip;
// * streams that are real queues: every stream, the default one included, has
//   a worker thread; copies, fills, kernels and event records are queued (no
//   lock: queueing costs the host what a driver's launch would) and the call
//   returns at once. Host memory a queued copy reads or writes is touched only
//   when the stream reaches it; a host thread that synchronizes runs the queued
//   work itself, in order, while the worker is idle, as a real device would
//   have picked it up without waiting for a sleeping thread;
// * the slow device (<NAME>_SLOW_DEVICE=<microseconds>, or the runtime option
//   slow_device): every piece of queued work waits that long before it runs, so
//   a kernel that captures by reference or reads a result without waiting for
//   it gives a wrong answer instead of passing by luck;
// * every broken promise refused: copies must stay inside one live allocation,
//   with pinned_host listed every host pointer of a copy must come from
//   host_alloc, handles must be live and of the right device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "runtime_adapter.h"

namespace {{ cookiecutter.name }}::sim {

using runtime::Status;

// device.yaml memory.model, compiled in (generated/device_config.h).
inline constexpr bool kDiscrete = std::string_view(config::kMemoryModel) == "discrete";
// The environment variable of the slow device, read by init.
inline constexpr const char* kSlowDeviceEnv = "{{ cookiecutter.name | upper }}_SLOW_DEVICE";

// Sets the calling thread's last error message; returns `status`.
Status fail(Status status, std::string message);
const char* last_error();

// ---- memory (memory.cpp) -----------------------------------------------------------

Status memory_init(int device_count, std::size_t capacity, std::size_t alignment);
int device_count();
Status check_device(int device);
Status malloc(int device, std::size_t bytes, void** ptr);
Status free(int device, void* ptr);
Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes);

// Where the bytes of device range [p, p + bytes) live, for the simulator's own
// copies: the allocation must be live and on `device` (-1: any device). Null
// with the message set when it is not (`what` names the caller's argument).
char* bytes_of(const void* p, std::size_t bytes, int device, const char* what);
// Whether p lies in any device's address range (allocated or not).
bool is_device_address(const void* p);
// The host side of a copy: null with the message set when it is device memory,
// or (with pinned_host listed) not inside a block from host_alloc.
const char* host_side(const void* p, std::size_t bytes, const char* what);

Status host_alloc(std::size_t bytes, void** ptr);
Status host_free(void* ptr);

// For the fault report, from a signal handler (no allocation, no blocking lock):
// whether `addr` lies in a device's address range; if so its device, and the
// live allocation holding it when one does and the allocator's lock was free.
struct FaultSite {
  int device = -1;
  std::uintptr_t base = 0;  // 0: in no live allocation (or unknown)
  std::size_t size = 0;
  bool allocations_known = false;
};
bool locate_fault(const void* addr, FaultSite* site);

// ---- streams and events (streams.cpp) ----------------------------------------

Status streams_init(std::uint64_t slow_us);
void set_slow_device(std::uint64_t microseconds);
std::uint64_t slow_device();

// Queues `work` on `stream` of `device` (null: the default stream); `what` names
// it in errors ("kernel", "copy"). The op running on this thread
// (runtime::current_op()) is kept with it for reports.
Status enqueue(int device, runtime::Stream stream, const char* what, std::function<void()> work);
Status stream_create(int device, runtime::Stream* stream);
Status stream_destroy(int device, runtime::Stream stream);
Status stream_synchronize(int device, runtime::Stream stream);
Status stream_query(int device, runtime::Stream stream, bool* idle);
Status stream_wait_event(int device, runtime::Stream stream, runtime::Event event);
Status device_synchronize(int device);

Status event_create(int device, runtime::Event* event);
Status event_destroy(int device, runtime::Event event);
Status event_record(int device, runtime::Event event, runtime::Stream stream);
Status event_synchronize(int device, runtime::Event event);
Status event_query(int device, runtime::Event event, bool* done);
Status event_elapsed_ms(runtime::Event start, runtime::Event end, float* ms);

// The queued work the calling thread is running, or null (host code): device
// work reaches device memory, host code does not.
struct RunningWork {
  int device;
  std::uint64_t stream_id;              // 0: the default stream
  const char* what;
  const runtime::OpInfo* queued_by;     // the op that queued it, or null
};
const RunningWork* running_work();

// ---- copies within the device (convert.cpp) ----------------------------------

// dst[i] = src[i] converted as PyTorch's CPU .to() does (runtime_adapter.h,
// copy_strided), for every index of the copy; both sides are the runtime's
// views of the bytes.
void strided_convert(const runtime::StridedCopy& copy, char* dst, const char* src);
std::size_t element_size(runtime::Dtype dtype);

// ---- the fault report (fault_report.cpp) -------------------------------------

// Installs the SIGSEGV handler that names the op, the kernel, the address and the
// allocation of a host access to device memory (discrete memory), and the op that
// queued work which crashed (a body that captured by reference).
void install_fault_report();

}  // namespace {{ cookiecutter.name }}::sim
