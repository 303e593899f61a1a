// The device-runtime adapter: the only device-facing code the vendor writes
// (in runtime/adapter.cpp). Everything that touches PyTorch's C++ API is
// generated on top of these calls. Keep this header free of torch includes.
//
// The glue never reads or writes device memory itself: bytes move only through
// these calls (and the backend's kernels). So a device whose memory the host
// cannot address (device.yaml `memory.model: discrete`) works as one whose
// memory it can.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::runtime {

// ---- Version -------------------------------------------------------------------
// This header is a source-level API: the adapter is compiled into the backend
// together with the glue of the flsdk that generated it (never loaded as a
// binary plugin), so there is no ABI to keep across flsdk releases. The version
// tells the author of an adapter what to revisit when a newer flsdk regenerates
// the backend:
// * a new minor adds optional calls or services of the glue, or states exactly
//   behaviour the glue already relied on: an adapter written for an older minor
//   of the same major still builds and keeps working (read what it states);
// * a new major changes a declaration or a promise: the adapter must be revisited.
// device.yaml's `adapter_versions: {runtime: "X.Y"}` records the version a
// backend's adapter was written for; `flsdk gen` and `flsdk check` compare it
// with this one and print the changes in between (listed here, newest first).
//
// Changes:
//   1.2  states what the glue does with a device address (it always did): it
//        offsets it within the range malloc returned and compares it, never
//        dereferences it; an address need be neither host-addressable nor
//        one contiguous object (a handle-based memory, OpenCL's cl_mem, can
//        sit behind a reserved address range): see malloc.
//   1.1  copy_strided converts exactly as PyTorch's CPU .to() does (out-of-range
//        floats to int8/uint8/int16/int32 through int32, float64 and int64 to
//        float16/bfloat16 through float32); with pinned_host every host pointer
//        the glue passes to memcpy lies in a block from host_alloc (pageable
//        memory is bounced through one); device_view is called on the thread
//        running the launched function; current_op() names the op whose
//        wrapper runs on this thread (the glue sets it; a runtime may report it);
//        two optional primitives: ipc (memory and event handles another process
//        opens: torch.multiprocessing, c10d) and profiling (records of device
//        work for torch.profiler).
//   1.0  the interface before versions were recorded.
constexpr int kRuntimeAdapterVersionMajor = 1;
constexpr int kRuntimeAdapterVersionMinor = 2;

enum class Status : int {
  Ok = 0,
  OutOfMemory = 1,
  InvalidDevice = 2,
  InvalidValue = 3,
  Error = 4,
  // An optional primitive (memset, copy_strided) declining this call: the glue
  // then takes its next path (see "Optional primitives" below). Not an error.
  Unsupported = 5,
};

enum class CopyKind : int {
  HostToHost = 0,
  HostToDevice = 1,
  DeviceToHost = 2,
  DeviceToDevice = 3,
};

// Opaque handles owned by the vendor runtime. A null Stream is the device's
// default stream. Every stream, the default one included, may queue its work
// and return at once (an asynchronous device) or run it before returning
// (a synchronous one): the glue waits only where the result must be on the
// host (a copy into host memory, .item(), synchronize, events).
using Stream = void*;
using Event = void*;

// Facts from device.yaml, after environment overrides, handed to init().
struct DeviceConfig {
  int device_count;
  std::size_t memory_capacity;   // bytes per device
  std::size_t memory_alignment;  // bytes
  int compute_units = 1;         // per device, >= 1; 0 = auto (the host's hardware threads)
};

Status init(const DeviceConfig& config);
int device_count();

// A device address is a number the glue computes with, never a pointer it
// follows: views add byte offsets to it (data_ptr of a slice), the caching
// allocator splits the range [ptr, ptr + bytes) malloc returned into blocks,
// and addresses are compared (which range, which block, overlap) and handed back
// to this runtime (memcpy, memset, copy_strided, kernels). So an address need
// not be host-addressable nor backed by one contiguous object: a runtime over
// handle-based memory (OpenCL cl_mem, Vulkan buffers) may reserve an address
// range, return addresses in it and translate an address to (handle, offset)
// itself, as examples/opencl_backend does. What must hold: every address in
// [ptr, ptr + bytes) names the byte at that offset of the allocation, until free.
Status malloc(int device, std::size_t bytes, void** ptr);
// The glue frees only memory no queued work uses any more (it synchronizes
// the device before giving cached blocks back).
Status free(int device, void* ptr);
// Queued on `stream` after the work already there; `device` is the device of
// the device-side pointer (the destination for DeviceToDevice). Host memory
// must stay valid until the stream reaches the copy: the glue guarantees it
// (it stages pageable host memory through pinned buffers whose reuse waits
// for the copy, and synchronizes before reading a copy into host memory).
Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind,
              int device, Stream stream);
// Between two devices; complete when it returns (the glue first waits for the
// work queued on both devices' current streams).
Status memcpy_peer(void* dst, int dst_device, const void* src, int src_device,
                   std::size_t bytes);
Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes);

Status stream_create(int device, Stream* stream);
Status stream_destroy(int device, Stream stream);
// Waits for every piece of work queued on `stream` (null: the default stream).
Status stream_synchronize(int device, Stream stream);
Status stream_query(int device, Stream stream, bool* idle);
Status stream_wait_event(int device, Stream stream, Event event);

Status event_create(int device, Event* event);
Status event_destroy(int device, Event event);
Status event_record(int device, Event event, Stream stream);
Status event_synchronize(int device, Event event);
Status event_query(int device, Event event, bool* done);
Status event_elapsed_ms(Event start, Event end, float* ms);

Status device_synchronize(int device);

// Bracket every native kernel of a backend whose kernels run in the calling
// thread (device.yaml `kernel_launch: inline`; nested calls allowed). A runtime
// that guards device memory from the host opens it here. Not called for
// `kernel_launch: stream`, where kernels queue their device work themselves.
void kernel_begin();
void kernel_end();

// Vendor-defined options (fault injection, debug modes), settable from Python.
Status set_option(const char* key, const char* value);
std::string get_option(const char* key);

// Message of the last failed call on this thread.
const char* last_error();

// ---- Optional primitives ------------------------------------------------------
// Declared for every backend, called only when device.yaml's
// `runtime_primitives:` list names them (config::kRuntimeHasMemset,
// kRuntimeHasCopyStrided, kRuntimeHasHostKernels, kRuntimeHasPinnedHost,
// kRuntimeHasIpc, kRuntimeHasProfiling): a
// runtime that does not list one need not define it. memset and copy_strided
// are queued on `stream` like memcpy. Either may return Unsupported for a call
// it does not handle; the glue then takes its next path: a native kernel of the
// backend comes first, these second, and copying through host memory last.

// Sets `bytes` bytes at device address `dst` to `value` (zero_, fill_ with a
// value whose bytes are all equal: 0, -1, false, true on one byte...).
Status memset(void* dst, int value, std::size_t bytes, int device, Stream stream);

// Element types of copy_strided, numbered as PyTorch's ScalarType (the glue
// checks the numbering at compile time).
enum class Dtype : int {
  UInt8 = 0, Int8 = 1, Int16 = 2, Int32 = 3, Int64 = 4, Float16 = 5, Float32 = 6,
  Float64 = 7, Bool = 11, BFloat16 = 15,
};

// One strided copy between two device buffers of `device`, converting the
// element type: for every index i (0 <= i[d] < sizes[d]),
//   dst[sum i[d] * dst_strides[d]] = convert(src[sum i[d] * src_strides[d]])
// Strides count elements; a source stride may be 0 (a fill is a copy from one
// element). Source and destination do not overlap. convert is PyTorch's CPU
// .to() (x86-64), every value included:
// * to bool: nonzero is true (NaN too); from bool: 0 or 1;
// * integer to integer: two's complement, the low bits kept (200 uint8 -> -56 int8);
// * to float32 / float64: rounded to nearest even;
// * to float16 / bfloat16: first to float32 (rounded to nearest even), then
//   rounded to nearest even (overflow: +-inf, NaN stays NaN). From float64 and
//   int64 that rounds twice, as the CPU does: 1.0004882812509095 -> 1.0 float16;
// * floating to int64: truncated toward zero; out of range, inf and NaN give
//   INT64_MIN;
// * floating to int32, int16, int8, uint8: truncated toward zero to int32 (out
//   of range, inf and NaN give INT32_MIN), then narrowed as integer to integer:
//   3e9 -> int32 INT32_MIN, -> int16 0; 300.7 -> int8 44.
constexpr int kMaxCopyDims = 16;
struct StridedCopy {
  void* dst;
  const void* src;
  Dtype dst_dtype;
  Dtype src_dtype;
  int ndim;  // 0..kMaxCopyDims (0: one element)
  std::int64_t sizes[kMaxCopyDims];
  std::int64_t dst_strides[kMaxCopyDims];
  std::int64_t src_strides[kMaxCopyDims];
};
Status copy_strided(const StridedCopy& copy, int device, Stream stream);

// host_kernels: host code run as device work, for a device whose "device" can
// execute host code (a simulator): Inductor's C++ kernels on a discrete device
// (device.yaml compile.codegen cpp with memory.model discrete).
// launch_host_kernel queues fn(arg) on `stream` and returns; fn owns `arg`.
// While fn runs, device_view(p) gives the address at which that code reaches
// the bytes at device address p (null if p is not device memory). The glue,
// the kernel library's port (kernels/kernel_port.cpp) and Inductor's kernels
// call it only on the thread running fn, translating every pointer there before
// fn spreads work over other threads (OpenMP, a pool), which then use the
// translated addresses; the views stay
// valid until fn returns. Outside such work it returns null (a runtime may
// answer on its own helper threads too, as acme's compute units do).
Status launch_host_kernel(int device, Stream stream, void (*fn)(void*), void* arg);
void* device_view(const void* device_ptr);

// pinned_host: page-locked host memory from the driver, for a DMA engine that
// reads and writes only registered host memory. The glue's pinned-memory
// allocator (tensor.pin_memory(), DataLoader(pin_memory=True), and the staging
// blocks of every copy between host and device) takes its blocks from
// host_alloc instead of the C heap, caches them, and gives them back with
// host_free only when no queued copy uses them. With pinned_host listed, every
// host pointer the glue passes to memcpy lies in such a block: a copy to or
// from pageable memory (.cpu(), .item(), print, a non_blocking copy into a
// pageable tensor) goes through a staging block, and the host copies between
// it and the pageable memory. `*ptr` must be aligned to at least 64 bytes;
// return OutOfMemory when the driver has no more to give.
Status host_alloc(std::size_t bytes, void** ptr);
Status host_free(void* ptr);

// ipc: device memory and events shared between processes of one machine, as
// CUDA's IPC handles: what torch.multiprocessing needs to hand a device tensor
// to another process (as an argument or through a Queue), the consumer then
// reading and writing the producer's memory in place.
// ipc_get_mem_handle names the allocation that starts at `base` (a pointer
// malloc returned on `device`) so that another process can open it. In that
// process, ipc_open_mem_handle gives a device address of `device` for the same
// bytes (valid for memcpy, kernels and the collective library as any
// allocation of that device is), until ipc_close_mem_handle; opening a handle
// of this process itself is refused (InvalidValue). The producer keeps the
// allocation alive while consumers use it (the glue holds the tensor until
// every consumer has closed it).
// ipc_get_event_handle names `event` as last recorded; in another process
// ipc_open_event_handle gives an event that stream_wait_event,
// event_synchronize and event_query treat as that record (destroy it with
// event_destroy). Handles are plain bytes: they travel through pickles.
constexpr std::size_t kIpcHandleBytes = 64;
struct IpcMemHandle {
  unsigned char bytes[kIpcHandleBytes];
};
struct IpcEventHandle {
  unsigned char bytes[kIpcHandleBytes];
};
Status ipc_get_mem_handle(int device, void* base, IpcMemHandle* handle);
Status ipc_open_mem_handle(int device, const IpcMemHandle& handle, void** ptr);
Status ipc_close_mem_handle(int device, void* ptr);
Status ipc_get_event_handle(int device, Event event, IpcEventHandle* handle);
Status ipc_open_event_handle(int device, const IpcEventHandle& handle, Event* event);

// profiling: what the device did, for torch.profiler (as CUPTI's activity
// records are to CUDA). Between profiler_start and profiler_stop the runtime
// records every piece of work queued on any stream of any device when the
// device runs it: one Activity each, with the host-clock time it started and
// ended and the correlation id the queuing thread had pushed. The glue pushes
// the id of the PyTorch op being run (profiler_push_correlation, nested as ops
// nest) before the op queues work, and pops it after; work queued with nothing
// pushed carries 0. profiler_flush hands over the records of work that has run
// and forgets them; the glue synchronizes every device before it flushes at the
// end of a profile. With profiling off (before start, after stop) recording must
// cost next to nothing: the glue calls push and pop only while a profile runs.
enum class ActivityKind : int {
  Kernel = 0,      // device code: a kernel, Inductor's kernels (host_kernels)
  Memcpy = 1,      // memcpy, memcpy_peer, copy_strided
  Memset = 2,      // memset, and fills the runtime or a kernel does
  Collective = 3,  // work of the collective library (ccl_adapter.h)
};
struct Activity {
  ActivityKind kind = ActivityKind::Kernel;
  std::string name;             // "k_mm", "Memcpy HtoD": what the trace shows
  int device = 0;
  Stream stream = nullptr;      // the stream it was queued on (null: the default stream)
  std::int64_t start_ns = 0;    // std::chrono::steady_clock, nanoseconds since its epoch
  std::int64_t end_ns = 0;      // >= start_ns
  std::uint64_t correlation_id = 0;  // profiler_push_correlation's id when it was queued
  std::int64_t launch_start_ns = 0;  // the runtime call that queued it (steady_clock; 0: unknown)
  std::int64_t launch_end_ns = 0;
  std::uint64_t bytes = 0;      // copies, fills and collectives: bytes moved or set
  CopyKind copy_kind = CopyKind::DeviceToDevice;  // Memcpy only
};
Status profiler_start();
Status profiler_stop();
// Per calling thread: the id later queued work carries, until the matching pop.
void profiler_push_correlation(std::uint64_t id);
void profiler_pop_correlation();
// Appends the records of work that has run since start (or the last flush) to
// `out` and drops them from the runtime.
Status profiler_flush(std::vector<Activity>* out);
// ---- What the glue tells the runtime (since 1.1) -------------------------------
// The op whose generated wrapper runs on the calling thread, or null: the glue
// sets it for the whole wrapper (its kernel, or the CPU fallback a call in
// another dtype takes), a nested op restoring the outer one when it returns;
// OpInfo objects have static storage, so a runtime may keep the pointer (for
// work it queues). A runtime may read it to name the op in its own reports:
// the scaffold's simulated device names it, and the op that queued the work,
// when host code reads device memory. Nothing to implement: an inline
// variable, so the runtime needs no link to the glue.
struct OpInfo {
  const char* op;      // "aten::relu"
  const char* kernel;  // "k_relu", or "" (the glue itself)
};
inline thread_local const OpInfo* t_current_op = nullptr;
inline const OpInfo* current_op() { return t_current_op; }

}  // namespace FLSDK_BACKEND_NS::runtime
