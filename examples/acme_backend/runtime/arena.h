// acme vendor runtime: one device's memory (internal, see internal.h).
#pragma once

#include "errors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace acme_internal {

// One device's memory: `capacity` bytes of memory behind an address space
// kAddressSpaceFactor times larger (a reserved mapping), with a best-fit
// allocator over the addresses. Like an accelerator's MMU (and CUDA's driver),
// an allocation needs free *memory*, not a free hole of its size: a device
// whose memory is free only in holes between live tensors still serves a
// large tensor at fresh addresses. (With addresses equal to capacity, one
// model's leftovers in the caching allocator could strand the next model's
// 400 MB weight while half the device was free.)
//
// Device memory is not host memory. The addresses handed out (malloc) lie in
// a reservation that is never readable or writable (PROT_NONE): host code that
// dereferences a device pointer, on any thread at any time, dies with SIGSEGV.
// The bytes live in a second mapping, the device's view, at the same offsets;
// only the runtime's copies and work running on the device (streams' workers,
// acmeDeviceView) reach them. Pages of the view are committed when touched and
// given back on free, so the spare addresses cost no host memory. Where the
// process's address space is limited (ulimit -v) and the larger reservations
// fail, the arena falls back to addresses equal to its capacity. Allocator
// metadata lives outside both mappings.
class Arena {
 public:
  static constexpr size_t kAddressSpaceFactor = 4;

  Arena(int index, size_t capacity, size_t alignment)
      : index_(index), align_(alignment) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    cap_ = capacity / alignment * alignment;  // usable bytes
    for (size_t factor : {kAddressSpaceFactor, size_t{1}}) {
      span_ = cap_ * factor;
      // Over-reserve when alignment exceeds a page so the bases can be aligned.
      map_len_ = round_up(span_ + (alignment > page ? alignment : 0), page);
      device_map_ = reserve(PROT_NONE);
      view_map_ = reserve(PROT_READ | PROT_WRITE);
      if (device_map_ && view_map_) break;
      unmap();
    }
    if (!ok()) return;
    base_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(device_map_), alignment));
    view_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(view_map_), alignment));
    free_by_off_.emplace(0, span_);
    free_by_size_.emplace(span_, 0);
    free_bytes_ = cap_;
  }
  ~Arena() { unmap(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  bool ok() const { return device_map_ != nullptr && view_map_ != nullptr; }
  size_t capacity() const { return cap_; }
  bool contains(const void* p) const {
    auto c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + span_;
  }
  // The device's view of device address p (which contains(p)).
  char* view(const void* p) const {
    return view_ + (static_cast<const char*>(p) - base_);
  }

  acmeError_t allocate(size_t bytes, void** out) {
    if (bytes > cap_) return oom(bytes, "larger than the device");
    const size_t need = round_up(bytes, align_);
    std::lock_guard<std::mutex> lk(mu_);
    if (need > free_bytes_) return oom_locked(bytes);
    // Best fit: the smallest free address range that holds `need`.
    auto it = free_by_size_.lower_bound({need, 0});
    if (it == free_by_size_.end()) return oom_locked(bytes);
    const size_t size = it->first, off = it->second;
    free_by_size_.erase(it);
    free_by_off_.erase(off);
    if (size > need) {
      free_by_off_.emplace(off + need, size - need);
      free_by_size_.emplace(size - need, off + need);
    }
    used_.emplace(off, Block{need, bytes});
    free_bytes_ -= need;
    peak_used_ = std::max(peak_used_, cap_ - free_bytes_);
    *out = base_ + off;
    return acmeSuccess;
  }

  acmeError_t release(void* p) {
    if (!contains(p))
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: pointer is not in this device's memory", p,
                  index_);
    const size_t off = static_cast<size_t>(static_cast<char*>(p) - base_);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.find(off);
    if (it == used_.end())
      return fail(acmeErrorInvalidValue,
                  "acme: free(%p) on device %d: not the start of a live allocation "
                  "(double free, or an interior pointer)",
                  p, index_);
    size_t start = off, size = it->second.size;
    used_.erase(it);
    free_bytes_ += size;
    release_pages(start, size);
    // Coalesce with the free neighbours on both sides.
    auto next = free_by_off_.lower_bound(start);
    if (next != free_by_off_.end() && next->first == start + size) {
      size += next->second;
      free_by_size_.erase({next->second, next->first});
      next = free_by_off_.erase(next);
    }
    if (next != free_by_off_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        free_by_size_.erase({prev->second, prev->first});
        free_by_off_.erase(prev);
      }
    }
    free_by_off_.emplace(start, size);
    free_by_size_.emplace(size, start);
    return acmeSuccess;
  }

  // Checks that [p, p+n) lies inside one live allocation (its requested
  // size, not the alignment padding).
  acmeError_t check_range(const void* p, size_t n, const char* role) const {
    const size_t off = static_cast<size_t>(static_cast<const char*>(p) - base_);
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.upper_bound(off);
    if (it == used_.begin())
      return fail(acmeErrorInvalidValue, "acme: memcpy %s %p is not in a live allocation of device %d",
                  role, p, index_);
    --it;
    const size_t end = it->first + it->second.requested;
    if (off >= end)
      return fail(acmeErrorInvalidValue, "acme: memcpy %s %p is not in a live allocation of device %d",
                  role, p, index_);
    if (n > end - off)
      return fail(acmeErrorInvalidValue,
                  "acme: memcpy %s range [%p, +%zu) overruns its allocation on device %d "
                  "(%zu bytes left from %p)",
                  role, p, n, index_, end - off, p);
    return acmeSuccess;
  }

  void info(size_t* free_bytes, size_t* total) const {
    std::lock_guard<std::mutex> lk(mu_);
    *free_bytes = free_bytes_;
    *total = cap_;
  }

  bool idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return used_.empty();
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lk(mu_);
    peak_used_ = cap_ - free_bytes_;
  }

  std::string json() const {
    std::lock_guard<std::mutex> lk(mu_);
    const size_t largest = largest_allocation_locked();
    char buf[384];
    std::snprintf(buf, sizeof buf,
                  "{\"index\": %d, \"capacity\": %zu, \"free\": %zu, \"used\": %zu, "
                  "\"peak_used\": %zu, \"live_allocations\": %zu, \"free_blocks\": %zu, "
                  "\"largest_free_block\": %zu, \"address_space\": %zu}",
                  index_, cap_, free_bytes_, cap_ - free_bytes_, peak_used_, used_.size(),
                  free_by_off_.size(), largest, span_);
    return buf;
  }

 private:
  struct Block {
    size_t size;       // rounded to the alignment
    size_t requested;  // what the caller asked for
  };

  static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

  char* reserve(int protection) const {
    void* m = mmap(nullptr, map_len_, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }
  void unmap() {
    if (device_map_) munmap(device_map_, map_len_);
    if (view_map_) munmap(view_map_, map_len_);
    device_map_ = view_map_ = nullptr;
  }

  // The largest allocation that would succeed now: bounded by the free memory
  // and by the largest free address range (only the first matters in practice).
  size_t largest_allocation_locked() const {
    const size_t hole = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    return std::min(hole, free_bytes_);
  }

  acmeError_t oom(size_t bytes, const char* why) const {
    size_t f, t;
    info(&f, &t);
    return fail_str(acmeErrorMemoryAllocation,
                    "acme: out of memory on device " + std::to_string(index_) + ": requested " +
                        human_bytes(bytes) + " (" + why + "); " + human_bytes(f) +
                        " free of " + human_bytes(t) + " capacity");
  }
  acmeError_t oom_locked(size_t bytes) const {
    const size_t largest = largest_allocation_locked();
    return fail_str(acmeErrorMemoryAllocation,
                    "acme: out of memory on device " + std::to_string(index_) + ": requested " +
                        human_bytes(bytes) + "; " + human_bytes(free_bytes_) + " free of " +
                        human_bytes(cap_) + " capacity, largest free block " +
                        human_bytes(largest));
  }

  // Gives the physical pages of a large freed block back to the OS, so a
  // simulated device that once held a big tensor does not keep host RAM.
  // Only whole pages strictly inside the block: neighbours may share pages.
  void release_pages(size_t off, size_t size) {
    constexpr size_t kMin = 1 << 20;
    if (size < kMin) return;
    const uintptr_t page = 4096;
    uintptr_t b = round_up(reinterpret_cast<uintptr_t>(view_ + off), page);
    uintptr_t e = (reinterpret_cast<uintptr_t>(view_ + off + size)) / page * page;
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
  }

  int index_;
  size_t align_;
  size_t cap_ = 0;   // memory: what allocations may use in total
  size_t span_ = 0;  // addresses: kAddressSpaceFactor * cap_
  size_t map_len_ = 0;
  char* device_map_ = nullptr;  // the reservation device addresses come from (PROT_NONE)
  char* view_map_ = nullptr;    // the device's view of the same bytes
  char* base_ = nullptr;        // first device address (aligned)
  char* view_ = nullptr;        // its view
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_by_off_;             // offset -> size
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (size, offset)
  std::map<size_t, Block> used_;                      // offset -> block
  size_t free_bytes_ = 0;
  size_t peak_used_ = 0;
};

}  // namespace acme_internal
