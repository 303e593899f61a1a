// acme vendor runtime: one device's memory (internal, see internal.h).
#pragma once

#include "errors.h"

#include <fcntl.h>
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

// A random 64-bit number (getrandom; ipc.cpp), naming arenas and processes.
uint64_t random_u64();

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
//
// The view is a shared mapping of a memfd (one file per arena, offset 0 at the
// view mapping's start): another process given the fd (ipc.cpp hands it over a
// unix socket) maps the same bytes, which is how acme shares device memory
// between processes (IPC handles, acmeccl's peer-to-peer links). Freed pages go
// back with a hole punched in the file. A forked child gets its own copy of
// the live bytes in a fresh memfd (fork_child; the view is not inherited), as
// the private mapping of old gave it. Where memfd_create fails the view is
// private anonymous memory, as before, and nothing can be shared.
class Arena {
 public:
  static constexpr size_t kAddressSpaceFactor = 4;

  Arena(int index, size_t capacity, size_t alignment)
      : index_(index), align_(alignment), uid_(random_u64()) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    cap_ = capacity / alignment * alignment;  // usable bytes
    fd_ = memfd_create(name().c_str(), MFD_CLOEXEC);
    if (fd_ < 0) share_error_ = std::string("memfd_create failed: ") + std::strerror(errno);
    for (size_t factor : {kAddressSpaceFactor, size_t{1}}) {
      span_ = cap_ * factor;
      // Over-reserve when alignment exceeds a page so the bases can be aligned.
      map_len_ = round_up(span_ + (alignment > page ? alignment : 0), page);
      device_map_ = reserve(PROT_NONE);
      view_map_ = map_view();
      if (device_map_ && view_map_) break;
      unmap();
    }
    if (!ok()) return;
    // A child process must not inherit the shared view (fork_child maps its own).
    if (fd_ >= 0) madvise(view_map_, map_len_, MADV_DONTFORK);
    base_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(device_map_), alignment));
    view_ = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(view_map_), alignment));
    free_by_off_.emplace(0, span_);
    free_by_size_.emplace(span_, 0);
    free_bytes_ = cap_;
  }
  ~Arena() {
    unmap();
    if (fd_ >= 0) close(fd_);
  }
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

  // ---- sharing (ipc.cpp) ----
  // The memfd behind the view (-1: private memory, share_error() says why).
  int fd() const { return fd_; }
  const std::string& share_error() const { return share_error_; }
  // Random, new for every arena (and in a forked child): peers name the file by it.
  uint64_t uid() const { return uid_; }
  int index() const { return index_; }
  // Length of the file / the view mapping; the file offset of device address p.
  size_t map_len() const { return map_len_; }
  char* view_map() const { return view_map_; }
  size_t file_offset(const void* p) const {
    return static_cast<size_t>(view(p) - view_map_);
  }
  // The requested size of the live allocation starting at p (0: none does).
  size_t live_block(const void* p) const {
    if (!contains(p)) return 0;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.find(static_cast<size_t>(static_cast<const char*>(p) - base_));
    return it == used_.end() ? 0 : it->second.requested;
  }
  // The live allocation holding file offset `off` has its requested size from
  // `off` on at least n bytes (a peer's buffer is still what it was).
  bool live_file_range(size_t off, size_t n) const {
    const size_t lead = static_cast<size_t>(view_ - view_map_);
    if (off < lead) return false;
    const size_t o = off - lead;
    if (o >= span_) return false;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = used_.upper_bound(o);
    if (it == used_.begin()) return false;
    --it;
    const size_t end = it->first + it->second.requested;
    return o < end && n <= end - o;
  }
  // fork(): the parent's handler holds every arena's lock across fork() so the
  // child finds the bookkeeping consistent.
  std::mutex& mutex() const { return mu_; }
  // In a forked child, with mutex() held: the inherited view is not mapped
  // (MADV_DONTFORK); give the child its own memfd with a copy of the live bytes,
  // at the same addresses. The parent's file stays the parent's.
  void fork_child() {
    if (fd_ < 0 || !view_map_) return;  // private memory: fork copied it (copy on write)
    const int old = fd_;
    int nfd = memfd_create(name().c_str(), MFD_CLOEXEC);
    void* m = MAP_FAILED;
    if (nfd >= 0 && ftruncate(nfd, static_cast<off_t>(map_len_)) == 0)
      m = mmap(view_map_, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
               nfd, 0);
    if (m == MAP_FAILED) {
      if (nfd >= 0) close(nfd);
      nfd = -1;
      share_error_ = "the forked child could not create its own memfd";
      m = mmap(view_map_, map_len_, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    }
    if (m != MAP_FAILED) {
      if (nfd >= 0) madvise(view_map_, map_len_, MADV_DONTFORK);
      const size_t lead = static_cast<size_t>(view_ - view_map_);
      for (const auto& [off, block] : used_) {
        size_t done = 0;
        while (done < block.requested) {
          const ssize_t got = pread(old, view_ + off + done, block.requested - done,
                                    static_cast<off_t>(lead + off + done));
          if (got <= 0) break;  // beyond the file's end: zeros, as a fresh page
          done += static_cast<size_t>(got);
        }
      }
    }
    close(old);
    fd_ = nfd;
    uid_ = random_u64();
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

  std::string name() const { return "acme-device-" + std::to_string(index_); }

  char* reserve(int protection) const {
    void* m = mmap(nullptr, map_len_, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }
  // The view: the memfd, shared (sized to the mapping; a sparse file costs
  // nothing until touched), or private memory without one.
  char* map_view() const {
    if (fd_ < 0) return reserve(PROT_READ | PROT_WRITE);
    if (ftruncate(fd_, static_cast<off_t>(map_len_)) != 0) return nullptr;
    void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
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
    if (e <= b) return;
    if (fd_ >= 0)  // shared memory: the pages belong to the file, punch them out of it
      fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(reinterpret_cast<char*>(b) - view_map_),
                static_cast<off_t>(e - b));
    else
      madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
  }

  int index_;
  size_t align_;
  int fd_ = -1;              // the memfd behind the view (-1: private memory)
  std::string share_error_;  // why there is none
  uint64_t uid_;
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
