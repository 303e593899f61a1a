// acme vendor runtime: the "driver" of the simulated acme chip.
//
// This is the library a chip vendor would ship on its own, independent of
// PyTorch (no torch includes here or in its sources, see internal.h). It has a CUDA-like
// C API; the flsdk runtime adapter (adapter.cpp) maps flsdk's generated
// interface (generated/runtime_adapter.h) onto it.
//
// The model being simulated:
// * N devices, each with its own memory of fixed capacity behind an address
//   space four times larger (mmap'd reservations, pages cost nothing until
//   touched). Allocation is a real best-fit allocator with coalescing over the
//   addresses, so out-of-memory is real, but, as behind a GPU's MMU, free
//   memory in holes between live blocks still serves a larger block at fresh
//   addresses.
// * Device memory is not host memory: device addresses are never readable or
//   writable by host code, from any thread at any time (a dereference dies
//   with SIGSEGV). Bytes move only through acmeMemcpy* calls and work running
//   on the device, which reaches them through acmeDeviceView.
// * Work is asynchronous: every stream, the default one (null) included, has a
//   worker thread draining a FIFO queue; kernels (acmeLaunch), copies and
//   event markers are queued and the call returns at once. Exceptions thrown by
//   queued work are captured and reported (once) by the next stream/device
//   synchronize on that stream ("sticky" until reported). The slow-device
//   option (ACME_SLOW_DEVICE / "slow_device", microseconds) delays every piece
//   of queued work, so a missing synchronization becomes a wrong answer.
// * Events stamp a steady_clock time when the stream reaches them.
// * Failure injection for malloc/memcpy, deterministic per seed, and a
//   deliberately wrong kernel.
// * Profiling: records of every piece of queued work (acmeProfiler*).
//
// * fork(): streams created before fork() are refused in the child (their
//   worker threads do not exist there); everything else keeps working. The
//   child's device memory is its own copy of the parent's.
// * Device memory and events shared between processes of one machine (IPC
//   handles, as CUDA's): each device's memory is a shared file that another
//   process maps when it opens a handle; acmeccl (../ccl) moves bytes between
//   the devices of processes on one host through the same mappings.
//
// Every call may come from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

// Version of this runtime, and of the acme driver it is built and tested with
// (like CUDART_VERSION). Compiled into whatever links the runtime, so a backend
// reports at run time what it was built with (get_option "runtime_version",
// "built_driver_version"; the installed driver is "driver_version").
// acmeInit refuses an installed driver of another major version.
#define ACME_RUNTIME_VERSION "1.4.0"
#define ACME_DRIVER_VERSION "1.4.0"

// C linkage for everything C can express; acmeLaunch (std::function) and the
// adapter-side launch below are C++.
extern "C" {

// Numeric values equal acme::runtime::Status so the adapter maps 1:1.
typedef enum acmeError {
  acmeSuccess = 0,
  acmeErrorMemoryAllocation = 1,  // out of memory (real or injected)
  acmeErrorInvalidDevice = 2,     // device index out of range
  acmeErrorInvalidValue = 3,      // bad pointer/handle/argument
  acmeErrorRuntime = 4,           // anything else (not initialized, errors
                                  // from queued work, injected copy faults)
} acmeError_t;

typedef enum acmeMemcpyKind {
  acmeMemcpyHostToHost = 0,
  acmeMemcpyHostToDevice = 1,
  acmeMemcpyDeviceToHost = 2,
  acmeMemcpyDeviceToDevice = 3,
} acmeMemcpyKind;

typedef struct acmeStream_st* acmeStream_t;  // nullptr = the device's default stream
typedef struct acmeEvent_st* acmeEvent_t;

// ---- setup -----------------------------------------------------------------
// (Re)initialize with `device_count` devices of `capacity` bytes each;
// `alignment` (a power of two) applies to every allocation's address and
// size. Also reads ACME_SLOW_DEVICE, ACME_LINK_GBPS, ACME_FAULT_MALLOC,
// ACME_FAULT_MEMCPY and ACME_FAULT_SEED, ACME_DRIVER_VERSION (simulated installed driver; default
// ACME_DRIVER_VERSION) and ACME_SIMULATE_INIT_FAILURE (version_mismatch |
// library_path | device_busy: init fails with that cause, message starting
// "acme: init: <cause>:"). Re-init is allowed only while no allocation, stream or
// event is alive; it must not race with other calls.
acmeError_t acmeInit(int device_count, size_t capacity, size_t alignment);
// 0 before acmeInit.
acmeError_t acmeGetDeviceCount(int* count);

// ---- memory ----------------------------------------------------------------
// bytes == 0 gives *ptr = nullptr and success; acmeFree(dev, nullptr) is a no-op.
acmeError_t acmeMalloc(int device, void** ptr, size_t bytes);
// Unknown, interior or already-freed pointers give acmeErrorInvalidValue.
acmeError_t acmeFree(int device, void* ptr);
acmeError_t acmeMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// Page-locked host memory, the kind a DMA engine reads and writes without a
// staging copy (acme simulates the locking: the block is ordinary heap memory,
// 64-byte aligned, tracked so that a wrong free is an error). bytes == 0 gives
// *ptr = nullptr; acmeFreeHost(nullptr) is a no-op; a pointer not from
// acmeMallocHost gives acmeErrorInvalidValue.
acmeError_t acmeMallocHost(void** ptr, size_t bytes);
acmeError_t acmeFreeHost(void* ptr);

// `device` owns the device-side pointer (the destination for DeviceToDevice;
// the source of DeviceToDevice may live on any device). Device ranges must
// lie inside one live allocation; host pointers must not be device memory.
// Synchronous: queued on the default stream, which is then synchronized.
acmeError_t acmeMemcpy(void* dst, const void* src, size_t bytes,
                       acmeMemcpyKind kind, int device);
// Same checks, done at call time; the copy itself is queued after earlier work
// on `stream` (null: the default stream), so host buffers must stay alive (and
// device blocks allocated) until the stream reaches it. A HostToHost copy on
// the null stream runs now.
acmeError_t acmeMemcpyAsync(void* dst, const void* src, size_t bytes,
                            acmeMemcpyKind kind, int device, acmeStream_t stream);
// Synchronous device-to-device copy between two (possibly equal) devices.
acmeError_t acmeMemcpyPeer(void* dst, int dst_device, const void* src,
                           int src_device, size_t bytes);

// ---- streams ---------------------------------------------------------------
// Handles are validated: a destroyed or foreign handle, or a stream of
// another device, gives acmeErrorInvalidValue.
acmeError_t acmeStreamCreate(int device, acmeStream_t* stream);
// Drains the queue, then destroys. An error still pending on the stream is
// moved to the device and reported by the next acmeDeviceSynchronize.
acmeError_t acmeStreamDestroy(int device, acmeStream_t stream);
// Waits for all work queued before the call (null: the default stream);
// returns (and clears) the first error raised by queued work since the last
// synchronize.
acmeError_t acmeStreamSynchronize(int device, acmeStream_t stream);
// *idle = 1 when all queued work has run. Does not report errors.
acmeError_t acmeStreamQuery(int device, acmeStream_t stream, int* idle);
// Later work on `stream` waits until `event` (as last recorded at the time of
// this call) is reached; the caller does not block. Never-recorded event: no-op.
acmeError_t acmeStreamWaitEvent(int device, acmeStream_t stream, acmeEvent_t event);

// ---- events ----------------------------------------------------------------
acmeError_t acmeEventCreate(int device, acmeEvent_t* event);
acmeError_t acmeEventDestroy(int device, acmeEvent_t event);
// Queues a marker; when the stream reaches it, the event completes and
// stamps steady_clock::now(). Re-recording replaces the previous record (the
// latest one counts).
acmeError_t acmeEventRecord(int device, acmeEvent_t event, acmeStream_t stream);
acmeError_t acmeEventSynchronize(int device, acmeEvent_t event);
// *done = 1 when the last record was reached (or the event never recorded).
acmeError_t acmeEventQuery(int device, acmeEvent_t event, int* done);
// Both events recorded and completed, else acmeErrorRuntime.
acmeError_t acmeEventElapsedTime(float* ms, acmeEvent_t start, acmeEvent_t end);

// Synchronizes every stream of the device, the default one included; returns
// the first error found (from any stream, or one left by a destroyed stream)
// and clears it.
acmeError_t acmeDeviceSynchronize(int device);

// ---- kernels ---------------------------------------------------------------
// Queues fn(arg) on `stream` as device work. See acmeLaunch.
acmeError_t acmeLaunchHostFunc(int device, acmeStream_t stream,
                               void (*fn)(void*), void* arg);
// Inside work running on the device (a stream's worker, and the compute units
// helping it): the address at which it reaches the bytes at device address
// `ptr` (of any device). Null, with the last error set, when `ptr` is not
// device memory or the caller is host code: the host never reaches them.
void* acmeDeviceView(const void* ptr);
// As acmeDeviceView for device memory, but a pointer that is not device
// memory (a kernel's host scratch) comes back as it is, and nothing sets the
// last error (device parts call it per loop): null only for device memory
// asked for by host code.
void* acmeDeviceOrHostView(const void* ptr);
// 1 inside work running on the device, else 0.
int acmeOnDevice(void);

// ---- sharing between processes (IPC) ----------------------------------------
// Handles are plain bytes (they travel through pipes and pickles). The process
// that makes a handle serves its memory to the process that opens it through
// a unix socket in the abstract namespace (a server thread started on the
// first handle; no /proc/<pid>/fd, no ptrace rights needed), checking that the
// peer runs as the same user.
#define ACME_IPC_HANDLE_SIZE 64
typedef struct acmeIpcMemHandle_st {
  unsigned char reserved[ACME_IPC_HANDLE_SIZE];
} acmeIpcMemHandle_t;
typedef struct acmeIpcEventHandle_st {
  unsigned char reserved[ACME_IPC_HANDLE_SIZE];
} acmeIpcEventHandle_t;

// Names the allocation starting at `base` (a pointer acmeMalloc returned on
// `device`) for another process. Memory this process opened from a handle gives
// that handle back. acmeErrorInvalidValue when base is not the start of a live
// allocation of device; acmeErrorRuntime when device memory cannot be shared
// here (no memfd).
acmeError_t acmeIpcGetMemHandle(int device, void* base, acmeIpcMemHandle_t* handle);
// In another process: a device address of `device` for the same bytes (the
// allocation's requested size), valid for copies, kernels and acmeccl as an
// allocation of `device` is, until acmeIpcCloseMemHandle. Opening a handle
// twice gives the same address (closed when both are closed). A handle of this
// process itself, a freed allocation, or a process that exited:
// acmeErrorInvalidValue with the reason. The owner must keep the allocation
// alive while it is open (freeing it leaves the bytes to its next user).
acmeError_t acmeIpcOpenMemHandle(int device, acmeIpcMemHandle_t handle, void** ptr);
// Unmaps memory opened by acmeIpcOpenMemHandle (no work may use it any more).
acmeError_t acmeIpcCloseMemHandle(int device, void* ptr);
// Names `event` as last recorded (its generation at this call) for another
// process. An event opened from a handle gives that handle back.
acmeError_t acmeIpcGetEventHandle(int device, acmeEvent_t event, acmeIpcEventHandle_t* handle);
// In another process: an event (of `device`) that acmeStreamWaitEvent,
// acmeEventSynchronize and acmeEventQuery treat as that record; it cannot be
// recorded or timed. Free it with acmeEventDestroy. If the owning process
// exits before the record completes, waits end with acmeErrorRuntime (a
// stream's wait reports it at its next synchronize) instead of hanging.
acmeError_t acmeIpcOpenEventHandle(int device, acmeIpcEventHandle_t handle, acmeEvent_t* event);

// ---- options ---------------------------------------------------------------
// keys: "slow_device" (microseconds every piece of queued work waits before it
// runs), "link_gbps" (GB/s of the links between devices acmeccl uses, 0 =
// unlimited; env ACME_LINK_GBPS at init), "fault_malloc", "fault_memcpy" (rate in [0,1];
// setting it restarts that fault sequence), "fault_seed" (unsigned; restarts
// both sequences), "stats" (set "reset" to zero the counters), "device_lost"
// (a device index: from then on malloc, copies, launches and synchronizes on
// it fail with "device N was lost"; frees and destroys still work; "none"
// brings every device back; init clears it).
acmeError_t acmeSetOption(const char* key, const char* value);
// keys: the above plus "device_count", "capacity", "alignment",
// "runtime_version", "driver_version", "built_driver_version". Writes a
// NUL-terminated value into buf (truncated to buflen) and the full length
// (without NUL) into *needed if non-null. "stats" is a JSON object.
acmeError_t acmeGetOption(const char* key, char* buf, size_t buflen, size_t* needed);

// ---- profiling -------------------------------------------------------------
// What the device did, as CUPTI's activity records tell of a GPU. Between
// acmeProfilerStart and acmeProfilerStop every piece of work queued on any
// stream (kernels, copies, fills) is recorded when its stream's worker runs it:
// kind, name, device, stream, the steady_clock times the worker started and
// ended it and the time of the call that queued it, and the correlation id the
// queuing thread had pushed (0: none). With profiling off a queue push costs
// one relaxed atomic load more. Event markers and waits are not recorded.
typedef enum acmeActivityKind {
  acmeActivityKernel = 0,
  acmeActivityMemcpy = 1,
  acmeActivityMemset = 2,
  acmeActivityCollective = 3,
} acmeActivityKind;

typedef struct acmeActivity {
  acmeActivityKind kind;
  const char* name;        // static storage (a kernel's name as launched, "Memcpy HtoD")
  int device;
  acmeStream_t stream;     // null: the default stream
  int64_t start_ns, end_ns;                // steady_clock, since its epoch
  int64_t launch_start_ns, launch_end_ns;  // the call that queued it
  uint64_t correlation_id;
  uint64_t bytes;          // copies and fills
  acmeMemcpyKind copy_kind;
} acmeActivity;

acmeError_t acmeProfilerStart(void);
acmeError_t acmeProfilerStop(void);
// Per calling thread, nested: work this thread queues until the matching pop
// carries `id`.
void acmeProfilerPushCorrelation(uint64_t id);
void acmeProfilerPopCorrelation(void);
// Moves up to `capacity` records of work that has run into `out`; *count is
// how many. Call again until it gives 0.
acmeError_t acmeProfilerFlush(acmeActivity* out, size_t capacity, size_t* count);

// ---- fault injection: a wrong kernel -----------------------------------------
// Option "wrong_kernel" names a kernel (as launched: "k_mm") whose results are
// deliberately wrong: acme's kernel library adds 1 to the first element each
// such launch writes (kernels/kernel_port.cpp: flsdk kernel_lib launch()). "none" clears it. For testing
// tools that must find a wrong kernel (torch_fl.compare_model's bisection).
// 1 when `name` is that kernel.
int acmeKernelIsWrong(const char* name);

// ---- errors ----------------------------------------------------------------
// Message of the last failed call on this thread ("" if none yet).
const char* acmeGetLastErrorString(void);
const char* acmeGetErrorName(acmeError_t error);

}  // extern "C"

// Queues `fn` on `stream` of `device` (null: the default stream) as device
// work, and returns once it is queued: capture by value, it runs later on the
// stream's worker thread, where acmeDeviceView answers. An exception is
// captured and reported by the next acmeStreamSynchronize /
// acmeDeviceSynchronize of that stream.
// `name` (static storage; null: "kernel") and `kind` are what the profiler
// records for it.
acmeError_t acmeLaunch(int device, acmeStream_t stream, std::function<void()> fn,
                       const char* name = nullptr, acmeActivityKind kind = acmeActivityKernel);

#include "../generated/runtime_adapter.h"

namespace acme::runtime {
// For acme kernel authors: queue a kernel's device part on a stream, the way a
// real chip launches on a queue (acmeLaunch). Returns Status::Ok,
// InvalidDevice, InvalidValue (bad stream) or Error (device lost). `name`
// (static storage: current_kernel() gives it) and `kind` name the work in
// profiles.
Status launch(int device, Stream stream, std::function<void()> fn, const char* name = nullptr,
              ActivityKind kind = ActivityKind::Kernel);
// For kernels' device parts, which mix device memory with host scratch memory:
// the device's view of `p` when it is device memory and the caller is device
// work; `p` itself when it is not device memory; null when host code asks for
// device memory (the host never reaches it). No error message is formatted.
void* device_or_host_view(const void* p);
}  // namespace acme::runtime
