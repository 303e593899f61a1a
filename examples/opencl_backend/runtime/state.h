// What the OpenCL runtime's files share: devices, queues, events and the device
// address space. Internal to runtime/ (kernels use device_code.h).
//
// Device memory (README.md, "Device memory"): OpenCL memory is a handle
// (cl_mem), not an address, but PyTorch and the glue compute addresses
// (data_ptr() + offset, views, the caching allocator splitting a segment). So
// every device gets a range of host *virtual address space* reserved with no
// access at all (PROT_NONE): malloc hands out addresses in it, each backed by
// one cl_mem, and every call that touches bytes maps an address back to
// (cl_mem, byte offset). The addresses are never host-addressable (a host
// dereference faults at once), they cannot collide with host memory, and any
// OpenCL 1.2+ driver works: no SVM needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "driver.h"
#include "runtime_adapter.h"

namespace ocl::runtime::detail {

// A Stream handle points at one of these; the null Stream is the device's default.
// `last` is the event of the last command queued (in-order queue: when it is
// complete, everything before it is), which stream_query reads without queuing.
struct Queue {
  int device = 0;
  cl_command_queue queue = nullptr;
  std::mutex mutex;
  cl_event last = nullptr;
  // clFinish of one queue from two threads at once aborts PoCL 3.0's pthread
  // device (pocl_pthread_join: EINVAL), though OpenCL allows it: finishes of a
  // queue take turns (finish()).
  std::mutex finish_mutex;
};

// An Event handle points at one of these. `marker` is the last record (null:
// never recorded, which counts as complete).
struct EventRecord {
  int device = 0;
  std::mutex mutex;
  cl_event marker = nullptr;
};

struct Allocation {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  cl_mem mem = nullptr;
};

struct Device {
  int index = 0;
  cl_device_id id = nullptr;
  Queue default_queue;
  // Address space: [va_base, va_base + va_size), reserved PROT_NONE.
  std::uintptr_t va_base = 0;
  std::size_t va_size = 0;
  std::size_t capacity = 0;
  std::size_t used = 0;
  mutable std::shared_mutex mutex;                 // guards the two maps and `used`
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::map<std::uintptr_t, std::size_t> free_ranges;  // by start: size
  bool lost = false;                               // fault injection: device_lost
};

std::vector<Device>& devices();
std::size_t alignment();

// Sets the calling thread's last_error() and returns `status`.
Status fail(Status status, const std::string& message);
// A failed OpenCL call: the message names the call, the error and the device.
Status cl_fail(const char* call, cl_int rc, int device);
Status check_device(int device);

Queue* queue_of(int device, Stream stream);
// clFinish of `q`, one thread at a time per queue.
cl_int finish(Queue* q);
// The slow device (option slow_device, OCL_SLOW_DEVICE=<microseconds>): queues
// on `q`, before the command about to be queued, a barrier that a timer thread
// opens that long later, so a missing wait or a by-reference capture in a
// kernel's host part gives a wrong answer instead of passing by luck. Nothing
// when the option is 0 (one relaxed load).
void hold_back(Queue* q);
// Takes over `event`, the event of the command just queued on `q`, as its last,
// and hands the command to the device (clFlush).
void queued(Queue* q, cl_event event);

// Device address -> (buffer, byte offset), the `bytes` after it inside one live
// allocation of `device`. False (last_error set, naming `what`) otherwise.
bool resolve(int device, const void* address, std::size_t bytes, const char* what, cl_mem* mem,
             std::size_t* offset);

// Pinned host blocks (host_alloc): host pointer -> the buffer mapped there.
bool pinned_buffer(const void* host, std::size_t bytes, cl_mem* mem, std::size_t* offset);

}  // namespace ocl::runtime::detail
