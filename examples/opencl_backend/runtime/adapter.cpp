// Runtime adapter of the OpenCL device: the calls the generated glue makes
// (interface: generated/runtime_adapter.h, reference: docs/runtime-adapter.md),
// each mapped onto the OpenCL driver. Everything is queued: copies, fills and
// event records are commands on an in-order command queue per stream, and no
// call waits for the device unless its contract says the host waits.
#include "runtime_adapter.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "device_code.h"
#include "state.h"

namespace ocl::runtime {

// Runtime version 1.1 of generated/runtime_adapter.h (device.yaml adapter_versions).
static_assert(kRuntimeAdapterVersionMajor == 1, "runtime_adapter.h changed major version: "
              "revisit this adapter (flsdk gen printed what changed)");

namespace detail {
namespace {

std::vector<Device> g_devices;
std::size_t g_alignment = 256;
thread_local std::string t_last_error;

// Created streams per device, for device_synchronize.
std::mutex g_queues_mutex;
std::vector<std::set<Queue*>> g_queues;

// Pinned host blocks: mapped pointer -> (buffer, bytes).
std::mutex g_pinned_mutex;
std::map<std::uintptr_t, std::pair<cl_mem, std::size_t>> g_pinned;
cl_command_queue g_map_queue = nullptr;  // maps pinned blocks without waiting behind compute
std::mutex g_map_mutex;                  // one map/unmap at a time (see Queue::finish_mutex)

// Fault injection (flsdk readiness): malloc failure rate, a lost device.
std::atomic<double> g_fault_malloc{0.0};
std::atomic<int> g_lost_device{-1};

// Slow device: held barriers (user events) and the time each may open; the
// delay is the same for all, so the deadlines come in order. Never destroyed:
// the timer thread waits on the condition variable until the process ends, and
// destroying a condition variable something waits on blocks exit.
std::atomic<std::uint64_t> g_slow_us{0};
struct SlowDevice {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::pair<std::chrono::steady_clock::time_point, cl_event>> held;
  bool thread_started = false;
};
SlowDevice& slow_state() {
  static SlowDevice* state = new SlowDevice;
  return *state;
}

void slow_thread() {
  SlowDevice& st = slow_state();
  std::unique_lock lock(st.mutex);
  for (;;) {
    st.cv.wait(lock, [&] { return !st.held.empty(); });
    auto [when, event] = st.held.front();
    st.cv.wait_until(lock, when, [] { return false; });  // new arrivals open later
    st.held.pop_front();
    lock.unlock();
    driver::cl->clSetUserEventStatus(event, CL_COMPLETE);
    driver::cl->clReleaseEvent(event);
    lock.lock();
  }
}

bool parse_microseconds(const char* text, std::uint64_t* out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-' || v > 10'000'000ULL) return false;
  *out = v;
  return true;
}

cl_command_queue make_queue(cl_device_id id, cl_int* rc) {
  // Profiling on: event_elapsed_ms reads the markers' timestamps.
  cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  return driver::cl->clCreateCommandQueueWithProperties(driver::get().context, id, props, rc);
}

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::vector<Device>& devices() { return g_devices; }
std::size_t alignment() { return g_alignment; }

Status fail(Status status, const std::string& message) {
  t_last_error = "ocl: " + message;
  return status;
}

Status cl_fail(const char* call, cl_int rc, int device) {
  const bool oom = rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES ||
                   rc == CL_OUT_OF_HOST_MEMORY;
  return fail(oom ? Status::OutOfMemory : Status::Error,
              std::string(call) + " failed on ocl:" + std::to_string(device) + ": " +
                  driver::error_name(rc));
}

Status check_device(int device) {
  if (device < 0 || device >= static_cast<int>(g_devices.size()))
    return fail(Status::InvalidDevice, "no device ocl:" + std::to_string(device) + " (" +
                                           std::to_string(g_devices.size()) + " present)");
  if (g_lost_device.load() == device)
    return fail(Status::Error, "device " + std::to_string(device) +
                                   " was lost (device_lost fault injected); its memory and queued "
                                   "work are gone: restart the process");
  return Status::Ok;
}

Queue* queue_of(int device, Stream stream) {
  return stream ? static_cast<Queue*>(stream) : &g_devices[device].default_queue;
}

cl_int finish(Queue* q) {
  std::lock_guard lock(q->finish_mutex);
  return driver::cl->clFinish(q->queue);
}

void hold_back(Queue* q) {
  const std::uint64_t us = g_slow_us.load(std::memory_order_relaxed);
  if (!us) return;
  cl_int rc = CL_SUCCESS;
  cl_event gate = driver::cl->clCreateUserEvent(driver::get().context, &rc);
  if (rc != CL_SUCCESS) return;  // a debugging aid: without it the work just runs
  if (driver::cl->clEnqueueBarrierWithWaitList(q->queue, 1, &gate, nullptr) != CL_SUCCESS) {
    driver::cl->clSetUserEventStatus(gate, CL_COMPLETE);
    driver::cl->clReleaseEvent(gate);
    return;
  }
  SlowDevice& st = slow_state();
  std::lock_guard lock(st.mutex);
  if (!st.thread_started) {
    std::thread(slow_thread).detach();
    st.thread_started = true;
  }
  st.held.emplace_back(std::chrono::steady_clock::now() + std::chrono::microseconds(us), gate);
  st.cv.notify_one();
}

void queued(Queue* q, cl_event event) {
  driver::cl->clFlush(q->queue);
  std::lock_guard lock(q->mutex);
  if (q->last) driver::cl->clReleaseEvent(q->last);
  q->last = event;
}

bool resolve(int device, const void* address, std::size_t bytes, const char* what, cl_mem* mem,
             std::size_t* offset) {
  const Device& d = g_devices[device];
  const auto p = reinterpret_cast<std::uintptr_t>(address);
  std::shared_lock lock(d.mutex);
  auto it = d.allocations.upper_bound(p);
  if (it != d.allocations.begin()) {
    --it;
    const Allocation& a = it->second;
    if (p >= a.base && p - a.base + bytes <= a.bytes) {
      *mem = a.mem;
      *offset = p - a.base;
      return true;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: %zu bytes at %p are not inside one live allocation of ocl:%d",
                what, bytes, address, device);
  fail(Status::InvalidValue, buf);
  return false;
}

bool pinned_buffer(const void* host, std::size_t bytes, cl_mem* mem, std::size_t* offset) {
  const auto p = reinterpret_cast<std::uintptr_t>(host);
  std::lock_guard lock(g_pinned_mutex);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  if (p - it->first + bytes > it->second.second) return false;
  *mem = it->second.first;
  *offset = p - it->first;
  return true;
}

}  // namespace detail

using namespace detail;

Status init(const DeviceConfig& config) {
  if (const char* slow = std::getenv("OCL_SLOW_DEVICE"); slow && *slow) {
    std::uint64_t us = 0;
    if (!parse_microseconds(slow, &us))
      return fail(Status::InvalidValue, std::string("OCL_SLOW_DEVICE=") + slow + ": expected microseconds, 0..10000000");
    g_slow_us = us;
  }
  std::string error;
  if (!driver::load(config.device_count, &error)) return fail(Status::Error, error);
  const driver::Driver& drv = driver::get();
  g_alignment = config.memory_alignment;
  g_devices = std::vector<Device>(drv.devices.size());
  g_queues.resize(drv.devices.size());
  for (std::size_t i = 0; i < drv.devices.size(); ++i) {
    Device& d = g_devices[i];
    d.index = static_cast<int>(i);
    d.id = drv.devices[i].id;
    cl_int rc = CL_SUCCESS;
    d.default_queue.device = d.index;
    d.default_queue.queue = make_queue(d.id, &rc);
    if (rc != CL_SUCCESS) return cl_fail("clCreateCommandQueueWithProperties", rc, d.index);
    d.capacity = std::min<std::size_t>(config.memory_capacity, drv.devices[i].global_mem);
    // Twice the capacity of address space: fragmentation of the addresses never
    // fails an allocation the capacity allows.
    d.va_size = round_up(2 * d.capacity, 1 << 21);
    void* va = mmap(nullptr, d.va_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED)
      return fail(Status::Error, "cannot reserve " + std::to_string(d.va_size) +
                                     " bytes of address space for ocl:" + std::to_string(i));
    d.va_base = reinterpret_cast<std::uintptr_t>(va);
    d.free_ranges[d.va_base] = d.va_size;
  }
  if (!g_devices.empty()) {
    cl_int rc = CL_SUCCESS;
    g_map_queue = make_queue(g_devices[0].id, &rc);
    if (rc != CL_SUCCESS) return cl_fail("clCreateCommandQueueWithProperties", rc, 0);
  }
  return Status::Ok;
}

int device_count() { return static_cast<int>(g_devices.size()); }

Status malloc(int device, std::size_t bytes, void** ptr) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Device& d = g_devices[device];
  const std::size_t size = round_up(bytes ? bytes : 1, g_alignment);
  if (double rate = g_fault_malloc.load(); rate > 0) {
    thread_local std::mt19937 rng(12345);
    if (std::uniform_real_distribution<double>(0, 1)(rng) < rate)
      return fail(Status::OutOfMemory, "malloc of " + std::to_string(bytes) + " bytes on ocl:" +
                                           std::to_string(device) + " failed (fault_malloc injected)");
  }
  std::unique_lock lock(d.mutex);
  if (d.used + size > d.capacity)
    return fail(Status::OutOfMemory,
                "out of memory on ocl:" + std::to_string(device) + ": " + std::to_string(bytes) +
                    " bytes requested, " + std::to_string(d.capacity - d.used) + " of " +
                    std::to_string(d.capacity) + " free");
  auto range = d.free_ranges.begin();
  while (range != d.free_ranges.end() && range->second < size) ++range;
  if (range == d.free_ranges.end())
    return fail(Status::OutOfMemory, "out of device address space on ocl:" + std::to_string(device));
  cl_int rc = CL_SUCCESS;
  cl_mem mem = driver::cl->clCreateBuffer(driver::get().context, CL_MEM_READ_WRITE, size, nullptr, &rc);
  if (rc != CL_SUCCESS) return cl_fail("clCreateBuffer", rc, device);
  const std::uintptr_t base = range->first;
  const std::size_t left = range->second - size;
  d.free_ranges.erase(range);
  if (left) d.free_ranges[base + size] = left;
  d.allocations[base] = Allocation{base, size, mem};
  d.used += size;
  *ptr = reinterpret_cast<void*>(base);
  return Status::Ok;
}

Status free(int device, void* ptr) {
  if (device < 0 || device >= static_cast<int>(g_devices.size()))
    return fail(Status::InvalidDevice, "free on no device ocl:" + std::to_string(device));
  Device& d = g_devices[device];
  std::unique_lock lock(d.mutex);
  auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == d.allocations.end())
    return fail(Status::InvalidValue, "free of an address malloc did not return on ocl:" +
                                          std::to_string(device));
  // Released when the commands still using it have finished (OpenCL's rule).
  driver::cl->clReleaseMemObject(it->second.mem);
  std::uintptr_t start = it->first;
  std::size_t size = it->second.bytes;
  d.used -= size;
  d.allocations.erase(it);
  // Give the range back, merged with its neighbours.
  auto next = d.free_ranges.lower_bound(start);
  if (next != d.free_ranges.end() && start + size == next->first) {
    size += next->second;
    next = d.free_ranges.erase(next);
  }
  if (next != d.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += size;
      return Status::Ok;
    }
  }
  d.free_ranges[start] = size;
  return Status::Ok;
}

Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Device& d = g_devices[device];
  std::shared_lock lock(d.mutex);
  *free_bytes = d.capacity - d.used;
  *total_bytes = d.capacity;
  return Status::Ok;
}

// Queued, non-blocking: the host memory stays valid until the queue reaches the
// copy (the glue's promise), and clFlush hands the command to the device now.
Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int device, Stream stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  if (!bytes) return Status::Ok;
  Queue* queue = queue_of(device, stream);
  cl_command_queue q = queue->queue;
  cl_mem dmem = nullptr, smem = nullptr;
  std::size_t doff = 0, soff = 0;
  cl_int rc = CL_SUCCESS;
  cl_event done = nullptr;
  if (kind != CopyKind::HostToHost) hold_back(queue);
  switch (kind) {
    case CopyKind::HostToDevice:
      if (!resolve(device, dst, bytes, "memcpy: the destination", &dmem, &doff)) return Status::InvalidValue;
      rc = driver::cl->clEnqueueWriteBuffer(q, dmem, CL_FALSE, doff, bytes, src, 0, nullptr, &done);
      if (rc != CL_SUCCESS) return cl_fail("clEnqueueWriteBuffer", rc, device);
      break;
    case CopyKind::DeviceToHost:
      if (!resolve(device, src, bytes, "memcpy: the source", &smem, &soff)) return Status::InvalidValue;
      rc = driver::cl->clEnqueueReadBuffer(q, smem, CL_FALSE, soff, bytes, dst, 0, nullptr, &done);
      if (rc != CL_SUCCESS) return cl_fail("clEnqueueReadBuffer", rc, device);
      break;
    case CopyKind::DeviceToDevice: {
      if (!resolve(device, dst, bytes, "memcpy: the destination", &dmem, &doff)) return Status::InvalidValue;
      if (!resolve(device, src, bytes, "memcpy: the source", &smem, &soff)) return Status::InvalidValue;
      const bool overlap = dmem == smem && doff < soff + bytes && soff < doff + bytes;
      if (overlap) {
        // clEnqueueCopyBuffer refuses overlapping ranges (CL_MEM_COPY_OVERLAP):
        // memmove semantics through a temporary buffer, freed once the copies ran.
        cl_mem tmp = driver::cl->clCreateBuffer(driver::get().context, CL_MEM_READ_WRITE, bytes, nullptr, &rc);
        if (rc != CL_SUCCESS) return cl_fail("clCreateBuffer", rc, device);
        rc = driver::cl->clEnqueueCopyBuffer(q, smem, tmp, soff, 0, bytes, 0, nullptr, nullptr);
        if (rc == CL_SUCCESS)
          rc = driver::cl->clEnqueueCopyBuffer(q, tmp, dmem, 0, doff, bytes, 0, nullptr, &done);
        driver::cl->clReleaseMemObject(tmp);
      } else {
        rc = driver::cl->clEnqueueCopyBuffer(q, smem, dmem, soff, doff, bytes, 0, nullptr, &done);
      }
      if (rc != CL_SUCCESS) return cl_fail("clEnqueueCopyBuffer", rc, device);
      break;
    }
    case CopyKind::HostToHost:
      // Ordered after the stream's work: wait for it, then copy on the host.
      rc = finish(queue);
      if (rc != CL_SUCCESS) return cl_fail("clFinish", rc, device);
      std::memmove(dst, src, bytes);
      return Status::Ok;
  }
  queued(queue, done);
  return Status::Ok;
}

Status memcpy_peer(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) {
  if (auto s = check_device(dst_device); s != Status::Ok) return s;
  if (auto s = check_device(src_device); s != Status::Ok) return s;
  if (!bytes) return Status::Ok;
  cl_mem dmem = nullptr, smem = nullptr;
  std::size_t doff = 0, soff = 0;
  if (!resolve(dst_device, dst, bytes, "memcpy_peer: the destination", &dmem, &doff)) return Status::InvalidValue;
  if (!resolve(src_device, src, bytes, "memcpy_peer: the source", &smem, &soff)) return Status::InvalidValue;
  // One context holds every device: a buffer copy moves the bytes between them.
  cl_command_queue q = g_devices[src_device].default_queue.queue;  // finished below: no last event
  cl_int rc = driver::cl->clEnqueueCopyBuffer(q, smem, dmem, soff, doff, bytes, 0, nullptr, nullptr);
  if (rc != CL_SUCCESS) return cl_fail("clEnqueueCopyBuffer", rc, src_device);
  rc = finish(&g_devices[src_device].default_queue);  // complete when it returns (the contract)
  if (rc != CL_SUCCESS) return cl_fail("clFinish", rc, src_device);
  return Status::Ok;
}

// ---- Streams: one in-order command queue each ----------------------------------

Status stream_create(int device, Stream* stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  cl_int rc = CL_SUCCESS;
  auto* q = new Queue{device, make_queue(g_devices[device].id, &rc)};
  if (rc != CL_SUCCESS) {
    delete q;
    return cl_fail("clCreateCommandQueueWithProperties", rc, device);
  }
  {
    std::lock_guard lock(g_queues_mutex);
    g_queues[device].insert(q);
  }
  *stream = q;
  return Status::Ok;
}

Status stream_destroy(int device, Stream stream) {
  if (!stream) return Status::Ok;
  auto* q = static_cast<Queue*>(stream);
  // Under the registry's lock: device_synchronize finishes the registered
  // queues under it too, so it never finishes a queue being released.
  std::lock_guard lock(g_queues_mutex);
  g_queues[device].erase(q);
  finish(q);
  if (q->last) driver::cl->clReleaseEvent(q->last);
  driver::cl->clReleaseCommandQueue(q->queue);
  delete q;
  return Status::Ok;
}

Status stream_synchronize(int device, Stream stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  cl_int rc = finish(queue_of(device, stream));
  if (rc != CL_SUCCESS) return cl_fail("clFinish", rc, device);
  return Status::Ok;
}

Status stream_query(int device, Stream stream, bool* idle) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  // The last command completes after everything queued before it (in-order queue).
  Queue* queue = queue_of(device, stream);
  cl_event last = nullptr;
  {
    std::lock_guard lock(queue->mutex);
    if (queue->last) driver::cl->clRetainEvent(last = queue->last);
  }
  if (!last) {
    *idle = true;
    return Status::Ok;
  }
  cl_int status = CL_QUEUED;
  cl_int rc = driver::cl->clGetEventInfo(last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  driver::cl->clReleaseEvent(last);
  if (rc != CL_SUCCESS) return cl_fail("clGetEventInfo", rc, device);
  *idle = status == CL_COMPLETE;
  return Status::Ok;
}

Status stream_wait_event(int device, Stream stream, Event event) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto* e = static_cast<EventRecord*>(event);
  std::lock_guard lock(e->mutex);
  if (!e->marker) return Status::Ok;  // never recorded: complete
  Queue* queue = queue_of(device, stream);
  cl_event barrier = nullptr;
  cl_int rc = driver::cl->clEnqueueBarrierWithWaitList(queue->queue, 1, &e->marker, &barrier);
  if (rc != CL_SUCCESS) return cl_fail("clEnqueueBarrierWithWaitList", rc, device);
  queued(queue, barrier);
  return Status::Ok;
}

// ---- Events: the cl_event of a marker command ----------------------------------

Status event_create(int device, Event* event) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto* e = new EventRecord;
  e->device = device;
  *event = e;
  return Status::Ok;
}

Status event_destroy(int, Event event) {
  auto* e = static_cast<EventRecord*>(event);
  if (e->marker) driver::cl->clReleaseEvent(e->marker);
  delete e;
  return Status::Ok;
}

Status event_record(int device, Event event, Stream stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto* e = static_cast<EventRecord*>(event);
  Queue* queue = queue_of(device, stream);
  cl_event marker = nullptr;
  cl_int rc = driver::cl->clEnqueueMarkerWithWaitList(queue->queue, 0, nullptr, &marker);
  if (rc != CL_SUCCESS) return cl_fail("clEnqueueMarkerWithWaitList", rc, device);
  driver::cl->clRetainEvent(marker);  // one reference for the event, one for the queue's last
  queued(queue, marker);  // flushed: a query or a wait from another queue sees it progress
  std::lock_guard lock(e->mutex);
  if (e->marker) driver::cl->clReleaseEvent(e->marker);
  e->marker = marker;
  e->device = device;
  return Status::Ok;
}

namespace {
// The event's current marker, retained (null: never recorded).
cl_event current_marker(EventRecord* e) {
  std::lock_guard lock(e->mutex);
  if (e->marker) driver::cl->clRetainEvent(e->marker);
  return e->marker;
}
}  // namespace

Status event_synchronize(int device, Event event) {
  cl_event m = current_marker(static_cast<EventRecord*>(event));
  if (!m) return Status::Ok;
  cl_int rc = driver::cl->clWaitForEvents(1, &m);
  driver::cl->clReleaseEvent(m);
  if (rc != CL_SUCCESS) return cl_fail("clWaitForEvents", rc, device);
  return Status::Ok;
}

Status event_query(int device, Event event, bool* done) {
  cl_event m = current_marker(static_cast<EventRecord*>(event));
  if (!m) {
    *done = true;
    return Status::Ok;
  }
  cl_int status = CL_QUEUED;
  cl_int rc = driver::cl->clGetEventInfo(m, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
  driver::cl->clReleaseEvent(m);
  if (rc != CL_SUCCESS) return cl_fail("clGetEventInfo", rc, device);
  *done = status == CL_COMPLETE;
  return Status::Ok;
}

Status event_elapsed_ms(Event start, Event end, float* ms) {
  auto* a = static_cast<EventRecord*>(start);
  auto* b = static_cast<EventRecord*>(end);
  cl_event ma = current_marker(a), mb = current_marker(b);
  if (!ma || !mb) {
    if (ma) driver::cl->clReleaseEvent(ma);
    if (mb) driver::cl->clReleaseEvent(mb);
    return fail(Status::InvalidValue, "event_elapsed_ms: both events must have been recorded");
  }
  cl_ulong t0 = 0, t1 = 0;
  cl_int rc = driver::cl->clGetEventProfilingInfo(ma, CL_PROFILING_COMMAND_END, sizeof t0, &t0, nullptr);
  if (rc == CL_SUCCESS)
    rc = driver::cl->clGetEventProfilingInfo(mb, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr);
  driver::cl->clReleaseEvent(ma);
  driver::cl->clReleaseEvent(mb);
  if (rc != CL_SUCCESS) return cl_fail("clGetEventProfilingInfo", rc, a->device);
  *ms = static_cast<float>((static_cast<double>(t1) - static_cast<double>(t0)) / 1e6);
  return Status::Ok;
}

Status device_synchronize(int device) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  if (cl_int rc = finish(&g_devices[device].default_queue); rc != CL_SUCCESS) return cl_fail("clFinish", rc, device);
  // The created streams, held registered (not destroyed) while they finish.
  std::lock_guard lock(g_queues_mutex);
  for (Queue* q : g_queues[device])
    if (cl_int rc = finish(q); rc != CL_SUCCESS) return cl_fail("clFinish", rc, device);
  return Status::Ok;
}

// kernel_launch: stream: never called.
void kernel_begin() {}
void kernel_end() {}

// ---- Options -------------------------------------------------------------------

Status set_option(const char* key, const char* value) {
  const std::string k = key ? key : "", v = value ? value : "";
  if (k == "fault_malloc") {
    char* end = nullptr;
    const double rate = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || rate < 0 || rate > 1)
      return fail(Status::InvalidValue, "fault_malloc=" + v + ": expected a rate in [0, 1]");
    g_fault_malloc = rate;
    return Status::Ok;
  }
  if (k == "slow_device") {
    std::uint64_t us = 0;
    if (!parse_microseconds(v.c_str(), &us))
      return fail(Status::InvalidValue, "slow_device=" + v + ": expected microseconds, 0..10000000");
    g_slow_us = us;
    return Status::Ok;
  }
  if (k == "device_lost") {
    if (v == "none") {
      g_lost_device = -1;
      return Status::Ok;
    }
    char* end = nullptr;
    const long d = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || d < 0 || d >= static_cast<long>(g_devices.size()))
      return fail(Status::InvalidValue, "device_lost=" + v + ": expected a device index or 'none'");
    g_lost_device = static_cast<int>(d);
    return Status::Ok;
  }
  return fail(Status::InvalidValue, "unknown runtime option '" + k +
                                        "' (known: slow_device, fault_malloc, device_lost; read-only: driver, "
                                        "platform, device_name, driver_version, runtime_version, "
                                        "api_version, built_api_version, svm, kernel_cache)");
}

std::string get_option(const char* key) {
  const std::string k = key ? key : "";
  const driver::Driver& drv = driver::get();
  if (k == "slow_device") return std::to_string(g_slow_us.load());
  if (k == "fault_malloc") return std::to_string(g_fault_malloc.load());
  if (k == "device_lost") return g_lost_device < 0 ? "none" : std::to_string(g_lost_device.load());
  if (k == "driver") return drv.library;
  if (k == "platform") return drv.platform_name + " / " + drv.platform_version;
  if (k == "device_name") return drv.devices.empty() ? "" : drv.devices[0].name;
  if (k == "driver_version") return drv.devices.empty() ? "" : drv.devices[0].driver_version;
  if (k == "runtime_version") return drv.platform_version;
  // Built against an API, not a driver (loaded at run time through the ICD):
  // torch_fl's readiness checks the driver found implements at least it.
  if (k == "built_api_version") return "OpenCL 1.2";
  if (k == "api_version") return drv.devices.empty() ? "" : drv.devices[0].version;
  if (k == "svm") {
    if (drv.devices.empty()) return "";
    const auto caps = drv.devices[0].svm;
    std::string s;
    if (caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) s += "coarse_grain_buffer ";
    if (caps & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) s += "fine_grain_buffer ";
    if (caps & CL_DEVICE_SVM_FINE_GRAIN_SYSTEM) s += "fine_grain_system ";
    if (caps & CL_DEVICE_SVM_ATOMICS) s += "atomics ";
    if (!s.empty()) s.pop_back();
    return s.empty() ? "none" : s + " (not used: README.md, Device memory)";
  }
  if (k == "kernel_cache") return kernel_cache_dir();
  return "";
}

const char* last_error() { return t_last_error.c_str(); }

// ---- Optional primitives ---------------------------------------------------------

Status memset(void* dst, int value, std::size_t bytes, int device, Stream stream) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  if (!bytes) return Status::Ok;
  cl_mem mem = nullptr;
  std::size_t off = 0;
  if (!resolve(device, dst, bytes, "memset", &mem, &off)) return Status::InvalidValue;
  const cl_uchar pattern = static_cast<cl_uchar>(value);
  Queue* queue = queue_of(device, stream);
  cl_event done = nullptr;
  hold_back(queue);
  cl_int rc = driver::cl->clEnqueueFillBuffer(queue->queue, mem, &pattern, 1, off, bytes, 0, nullptr, &done);
  if (rc != CL_SUCCESS) return cl_fail("clEnqueueFillBuffer", rc, device);
  queued(queue, done);
  return Status::Ok;
}

// pinned_host: a buffer the driver allocates in host memory it can DMA from
// (CL_MEM_ALLOC_HOST_PTR), mapped once for the life of the block: the usual
// way to get page-locked memory out of OpenCL.
Status host_alloc(std::size_t bytes, void** ptr) {
  if (g_devices.empty()) return fail(Status::InvalidDevice, "host_alloc: no OpenCL device");
  cl_int rc = CL_SUCCESS;
  cl_mem mem = driver::cl->clCreateBuffer(driver::get().context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                          bytes ? bytes : 1, nullptr, &rc);
  if (rc != CL_SUCCESS) return cl_fail("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", rc, 0);
  std::unique_lock map_lock(g_map_mutex);
  void* host = driver::cl->clEnqueueMapBuffer(g_map_queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                              bytes ? bytes : 1, 0, nullptr, nullptr, &rc);
  if (rc != CL_SUCCESS) {
    driver::cl->clReleaseMemObject(mem);
    return cl_fail("clEnqueueMapBuffer", rc, 0);
  }
  if (reinterpret_cast<std::uintptr_t>(host) % 64) {
    driver::cl->clEnqueueUnmapMemObject(g_map_queue, mem, host, 0, nullptr, nullptr);
    driver::cl->clFinish(g_map_queue);
    driver::cl->clReleaseMemObject(mem);
    return fail(Status::Error, "host_alloc: the driver mapped pinned memory at an address not aligned "
                               "to 64 bytes");
  }
  map_lock.unlock();
  std::lock_guard lock(g_pinned_mutex);
  g_pinned[reinterpret_cast<std::uintptr_t>(host)] = {mem, bytes ? bytes : 1};
  *ptr = host;
  return Status::Ok;
}

Status host_free(void* ptr) {
  cl_mem mem = nullptr;
  {
    std::lock_guard lock(g_pinned_mutex);
    auto it = g_pinned.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g_pinned.end()) return fail(Status::InvalidValue, "host_free of memory host_alloc did not return");
    mem = it->second.first;
    g_pinned.erase(it);
  }
  std::lock_guard map_lock(g_map_mutex);
  driver::cl->clEnqueueUnmapMemObject(g_map_queue, mem, ptr, 0, nullptr, nullptr);
  driver::cl->clFinish(g_map_queue);
  driver::cl->clReleaseMemObject(mem);
  return Status::Ok;
}

}  // namespace ocl::runtime
