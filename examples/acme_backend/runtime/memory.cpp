// acme vendor runtime: device memory. malloc/free/memory info on a device's
// arena (arena.h), and every copy, each checked against the arenas.
#include "internal.h"

#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>

using namespace acme_internal;

namespace {

const char* kind_name(acmeMemcpyKind k) {
  switch (k) {
    case acmeMemcpyHostToHost: return "HostToHost";
    case acmeMemcpyHostToDevice: return "HostToDevice";
    case acmeMemcpyDeviceToHost: return "DeviceToHost";
    case acmeMemcpyDeviceToDevice: return "DeviceToDevice";
  }
  return "?";
}

// Device index whose arena holds p (or that p was opened on, when it is
// another process's memory: *imported then says which), or -1.
int owner_of(const void* p, Imported* imported = nullptr) {
  Runtime& r = rt();
  for (int i = 0; i < static_cast<int>(r.arenas.size()); ++i)
    if (r.arenas[i]->contains(p)) return i;
  Imported im;
  if (find_import(p, &im)) {
    if (imported) *imported = im;
    return im.device;
  }
  return -1;
}

// [p, p+n) lies in the opened memory `im` (bounded by the allocation it names).
acmeError_t check_imported_range(const Imported& im, const void* p, size_t n, const char* role) {
  const size_t off = static_cast<size_t>(static_cast<const char*>(p) - im.base);
  if (n > im.size - off)
    return fail(acmeErrorInvalidValue,
                "acme: memcpy %s range [%p, +%zu) overruns the memory opened from an IPC handle "
                "on device %d (%zu bytes left from %p)",
                role, p, n, im.device, im.size - off, p);
  return acmeSuccess;
}

// Validates one side of a copy. `dev` >= 0: device memory of that device
// (-2: device memory of any device); -1: host memory.
acmeError_t check_side(const void* p, size_t n, int dev, const char* role, acmeMemcpyKind kind) {
  Runtime& r = rt();
  if (p == nullptr) return fail(acmeErrorInvalidValue, "acme: memcpy %s is null", role);
  Imported im;
  const int owner = owner_of(p, &im);
  if (dev == -1) {
    if (owner >= 0)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s %p is device memory of device %d, but the copy kind %s "
                  "says host",
                  role, p, owner, kind_name(kind));
    return acmeSuccess;
  }
  if (owner < 0 || (dev >= 0 && owner != dev)) {
    if (owner < 0)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s %p is not device memory (copy kind %s)", role, p,
                  kind_name(kind));
    return fail(acmeErrorInvalidValue,
                "acme: memcpy %s %p is memory of device %d, expected device %d", role, p,
                owner, dev);
  }
  if (im.base) return check_imported_range(im, p, n, role);
  return r.arenas[owner]->check_range(p, n, role);
}

acmeError_t validate_copy(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                          int device) {
  switch (kind) {
    case acmeMemcpyHostToHost:
      if (auto e = check_side(dst, bytes, -1, "destination", kind)) return e;
      return check_side(src, bytes, -1, "source", kind);
    case acmeMemcpyHostToDevice:
      if (auto e = check_side(dst, bytes, device, "destination", kind)) return e;
      return check_side(src, bytes, -1, "source", kind);
    case acmeMemcpyDeviceToHost:
      if (auto e = check_side(dst, bytes, -1, "destination", kind)) return e;
      return check_side(src, bytes, device, "source", kind);
    case acmeMemcpyDeviceToDevice:
      if (auto e = check_side(dst, bytes, device, "destination", kind)) return e;
      return check_side(src, bytes, -2, "source", kind);
  }
  return fail(acmeErrorInvalidValue, "acme: invalid memcpy kind %d", static_cast<int>(kind));
}

void count_copy(acmeMemcpyKind kind, size_t bytes) {
  Stats& s = rt().stats;
  s.copies++;
  s.copy_bytes += bytes;
  switch (kind) {
    case acmeMemcpyHostToHost: s.h2h++; break;
    case acmeMemcpyHostToDevice: s.h2d++; break;
    case acmeMemcpyDeviceToHost: s.d2h++; break;
    case acmeMemcpyDeviceToDevice: s.d2d++; break;
  }
}

// The bytes themselves, as the copy engine moves them: device addresses through
// the device's view, host pointers as they are.
void raw_copy(void* dst, const void* src, size_t bytes) {
  char* d = view_of(dst);
  const char* s = view_of(src);
  std::memmove(d ? d : dst, s ? s : src, bytes);
}

acmeError_t injected_copy_fault() {
  Runtime& r = rt();
  if (uint64_t i = r.faults.hit(1)) {
    r.stats.injected_memcpy++;
    return fail(acmeErrorRuntime,
                "acme: injected memcpy fault (fault_memcpy=%g, fault_seed=%llu, memcpy call #%llu)",
                r.faults.rate[1].load(), static_cast<unsigned long long>(r.faults.seed.load()),
                static_cast<unsigned long long>(i));
  }
  return acmeSuccess;
}

}  // namespace

extern "C" {

acmeError_t acmeMalloc(int device, void** ptr, size_t bytes) {
  if (!ptr) return fail(acmeErrorInvalidValue, "acme: malloc: null output pointer");
  *ptr = nullptr;
  if (auto e = check_alive(device)) return e;
  Runtime& r = rt();
  if (bytes == 0) return acmeSuccess;
  if (uint64_t i = r.faults.hit(0)) {
    r.stats.injected_malloc++;
    r.stats.malloc_failures++;
    return fail(acmeErrorMemoryAllocation,
                "acme: injected malloc fault on device %d (requested %zu bytes; "
                "fault_malloc=%g, fault_seed=%llu, malloc call #%llu)",
                device, bytes, r.faults.rate[0].load(),
                static_cast<unsigned long long>(r.faults.seed.load()),
                static_cast<unsigned long long>(i));
  }
  acmeError_t e = r.arenas[device]->allocate(bytes, ptr);
  if (e) {
    r.stats.malloc_failures++;
    return e;
  }
  r.stats.mallocs++;
  r.stats.malloc_bytes += bytes;
  return acmeSuccess;
}

acmeError_t acmeFree(int device, void* ptr) {
  if (auto e = check_device(device)) return e;
  if (!ptr) return acmeSuccess;
  Runtime& r = rt();
  if (!r.arenas[device]->contains(ptr)) {
    Imported im;
    const int owner = owner_of(ptr, &im);
    if (im.base)
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: the memory was opened from another process's "
                  "IPC handle; close it with acmeIpcCloseMemHandle (its process frees it)",
                  ptr, device);
    if (owner >= 0)
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: the pointer belongs to device %d", ptr, device,
                  owner);
  }
  if (auto e = r.arenas[device]->release(ptr)) return e;
  r.stats.frees++;
  return acmeSuccess;
}

acmeError_t acmeMallocHost(void** ptr, size_t bytes) {
  if (!ptr) return fail(acmeErrorInvalidValue, "acme: malloc_host: null output pointer");
  *ptr = nullptr;
  if (bytes == 0) return acmeSuccess;
  const size_t rounded = (bytes + 63) / 64 * 64;  // aligned_alloc: a multiple of the alignment
  void* p = rounded >= bytes ? std::aligned_alloc(64, rounded) : nullptr;
  if (!p)
    return fail(acmeErrorMemoryAllocation,
                "acme: malloc_host: could not allocate %zu bytes of page-locked host memory", bytes);
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.host_mu);
    r.host_blocks.insert(p);
  }
  r.stats.host_allocs++;
  r.stats.host_alloc_bytes += bytes;
  *ptr = p;
  return acmeSuccess;
}

acmeError_t acmeFreeHost(void* ptr) {
  if (!ptr) return acmeSuccess;
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.host_mu);
    if (r.host_blocks.erase(ptr) == 0)
      return fail(acmeErrorInvalidValue,
                  "acme: free_host(%p): not a block of acmeMallocHost (or freed already)", ptr);
  }
  std::free(ptr);
  r.stats.host_frees++;
  return acmeSuccess;
}

acmeError_t acmeMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (auto e = check_device(device)) return e;
  if (!free_bytes || !total_bytes)
    return fail(acmeErrorInvalidValue, "acme: memory_info: null output pointer");
  rt().arenas[device]->info(free_bytes, total_bytes);
  return acmeSuccess;
}

// What a profile calls each kind of copy (CUDA's names).
static const char* copy_activity_name(acmeMemcpyKind kind) {
  switch (kind) {
    case acmeMemcpyHostToHost: return "Memcpy HtoH";
    case acmeMemcpyHostToDevice: return "Memcpy HtoD";
    case acmeMemcpyDeviceToHost: return "Memcpy DtoH";
    case acmeMemcpyDeviceToDevice: return "Memcpy DtoD";
  }
  return "Memcpy";
}

acmeError_t acmeMemcpyAsync(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                            int device, acmeStream_t stream) {
  const int64_t called = launch_clock();
  // A host-to-host copy names no device; accept any index there.
  if (kind != acmeMemcpyHostToHost || stream) {
    if (auto e = check_alive(device)) return e;
  } else if (rt().count.load() == 0) {
    return check_device(device);
  }
  if (bytes == 0) return acmeSuccess;
  if (kind == acmeMemcpyHostToHost && !stream) {
    if (auto e = validate_copy(dst, src, bytes, kind, device)) return e;
    count_copy(kind, bytes);
    std::memmove(dst, src, bytes);  // no device involved: now
    return acmeSuccess;
  }
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  if (auto e = validate_copy(dst, src, bytes, kind, device)) return e;
  if (auto e = injected_copy_fault()) return e;
  count_copy(kind, bytes);
  // Queued after the stream's earlier work; the host returns at once.
  if (!s->push([=] { raw_copy(dst, src, bytes); }, "memcpy",
               tag(acmeActivityMemcpy, copy_activity_name(kind), called, bytes, kind)))
    return destroyed(s);
  return acmeSuccess;
}

acmeError_t acmeMemcpy(void* dst, const void* src, size_t bytes, acmeMemcpyKind kind,
                       int device) {
  if (auto e = acmeMemcpyAsync(dst, src, bytes, kind, device, nullptr)) return e;
  if (kind == acmeMemcpyHostToHost) return acmeSuccess;
  return acmeStreamSynchronize(device, nullptr);
}

acmeError_t acmeMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           size_t bytes) {
  if (auto e = check_alive(dst_device)) return e;
  if (auto e = check_alive(src_device)) return e;
  if (bytes == 0) return acmeSuccess;
  if (auto e = check_side(dst, bytes, dst_device, "destination", acmeMemcpyDeviceToDevice))
    return e;
  if (auto e = check_side(src, bytes, src_device, "source", acmeMemcpyDeviceToDevice)) return e;
  if (auto e = injected_copy_fault()) return e;
  count_copy(acmeMemcpyDeviceToDevice, bytes);
  rt().stats.peer++;
  const ActivityTag activity = tag(acmeActivityMemcpy, "Memcpy PtoP", 0, bytes,
                                   acmeMemcpyDeviceToDevice);
  const int64_t started = activity.recorded ? steady_ns() : 0;
  raw_copy(dst, src, bytes);  // synchronous: the caller waited for both devices' work
  // Synchronous, so no stream ran it: shown on the destination's default stream.
  if (activity.recorded) record(activity, dst_device, nullptr, started, steady_ns(), steady_ns());
  return acmeSuccess;
}

}  // extern "C"
