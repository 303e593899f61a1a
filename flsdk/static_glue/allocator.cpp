// Caching device allocator on the vendor runtime's malloc/free.
//
// Device malloc is slow on real chips, so freed blocks are kept and reused.
// Memory comes from the runtime in segments; a segment is split into blocks
// and freed neighbours coalesce. Blocks belong to the stream that allocated
// them; a block used on other streams (record_stream) is reused only after
// events recorded on those streams complete. When the runtime is out of
// memory, cached blocks are released and the allocation retried once before
// torch.OutOfMemoryError is raised. Every alloc and free is reported to the
// profiler (profile_memory=True), and, while _record_memory_history is on, to the
// history (memory_history.h), in CUDA's snapshot format.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator.h"
#include "backend.h"
#include "device_config.h"
#include "memory_history.h"

namespace FLSDK_BACKEND_NS::allocator {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;
using c10::CachingAllocator::Stat;

constexpr std::size_t kMiB = 1ULL << 20;
constexpr std::size_t kSmallRequest = 1 * kMiB;   // requests up to this share segments
constexpr std::size_t kSmallSegment = 2 * kMiB;
constexpr std::size_t kLargeRounding = 2 * kMiB;

struct Config {
  std::size_t round_size = config::kMemoryAlignment;
  std::size_t max_split_size = SIZE_MAX;
  double garbage_collection_threshold = 0.0;
  std::size_t pool_limit = 0;
};

struct Block {
  int device = 0;
  c10::StreamId stream = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;
  bool parked = false;  // freed, kept aside for a request of its exact size (see park)
  Block* prev = nullptr;  // neighbours inside one segment
  Block* next = nullptr;
  std::unordered_set<c10::StreamId> stream_uses;  // record_stream
  int pending_events = 0;
  // The stack that allocated it, while memory history records stacks.
  std::shared_ptr<c10::GatheredContext> context;
};

using memory_history::Action;

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

void bump(Stat& stat, int64_t amount) {
  if (amount >= 0) {
    stat.increase(static_cast<std::size_t>(amount));
  } else {
    stat.decrease(static_cast<std::size_t>(-amount));
  }
}

void update(c10::CachingAllocator::StatArray& array, bool small, int64_t amount) {
  bump(array[static_cast<std::size_t>(StatType::AGGREGATE)], amount);
  auto pool = small ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  bump(array[static_cast<std::size_t>(pool)], amount);
}

class DeviceCache {
 public:
  explicit DeviceCache(int device) : device_(device) {}

  // `context`: the caller's stack when memory history records stacks (gathered
  // before this lock: it may take the GIL).
  Block* malloc(std::size_t requested, c10::StreamId stream, const Config& cfg,
                std::shared_ptr<c10::GatheredContext> context) {
    std::lock_guard<std::mutex> lock(mutex_);
    process_events_locked();
    last_oom_reason_.clear();
    std::size_t size = round(requested, cfg);
    bool small = size <= kSmallRequest;
    Block* block = take_parked_locked(size, stream);
    if (!block) block = find_free_locked(size, stream, cfg);
    if (!block && !parked_.empty()) {
      flush_parked_locked();
      block = find_free_locked(size, stream, cfg);
    }
    if (!block) {
      maybe_collect_garbage_locked(cfg);
      block = new_segment_locked(size, small, stream, cfg);
    }
    if (!block) {
      // Out of memory: release what the cache holds and try once more.
      stats_.num_alloc_retries += 1;
      release_cached_locked();
      block = new_segment_locked(size, small, stream, cfg);
    }
    if (!block) {
      stats_.num_ooms += 1;
      raise_oom_locked(requested, size);
    }
    block = split_locked(block, size, cfg);
    block->allocated = true;
    block->requested = requested;
    block->context = std::move(context);
    update(stats_.allocation, block->small, 1);
    update(stats_.allocated_bytes, block->small, static_cast<int64_t>(block->size));
    update(stats_.active, block->small, 1);
    update(stats_.active_bytes, block->small, static_cast<int64_t>(block->size));
    update(stats_.requested_bytes, block->small, static_cast<int64_t>(requested));
    memory_history::record(device_, Action::Alloc, address(block), block->size, block->stream,
                           block->context);
    report_to_profiler(block, static_cast<int64_t>(block->size));
    return block;
  }

  // `context`: the caller's stack when memory history records stacks of frees.
  void free(Block* block, std::shared_ptr<c10::GatheredContext> context) {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_history::record(device_, Action::FreeRequested, address(block), block->size,
                           block->stream, std::move(context));
    report_to_profiler(block, -static_cast<int64_t>(block->size));
    update(stats_.allocation, block->small, -1);
    update(stats_.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
    update(stats_.requested_bytes, block->small, -static_cast<int64_t>(block->requested));
    block->allocated = false;
    if (!block->stream_uses.empty()) {
      // Other streams may still read it: wait for their work to finish.
      for (auto id : block->stream_uses) {
        runtime::Event event = nullptr;
        c10::Stream stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, device_), id);
        if (runtime::event_create(device_, &event) != runtime::Status::Ok ||
            runtime::event_record(device_, event, native_stream(stream)) != runtime::Status::Ok) {
          // Cannot track it: make the device idle instead, then reuse at once.
          if (event) runtime::event_destroy(device_, event);
          host_wait_device(device_, HostWait::Allocator, "freeing a block used on another stream");
          continue;
        }
        pending_.push_back({event, block});
        block->pending_events += 1;
      }
      block->stream_uses.clear();
      if (block->pending_events > 0) return;
    }
    release_block_locked(block);
  }

  void record_stream(Block* block, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stream != block->stream) block->stream_uses.insert(stream);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    process_events_locked();
    release_cached_locked();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_parked_locked();  // what is reported is the coalesced state, parked or not
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](Stat& s) { s.peak = s.current; });
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat([](Stat& s) {
      s.allocated = 0;
      s.freed = 0;
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  // The segment (one runtime allocation) that `block` lies in.
  std::pair<void*, std::size_t> segment_of(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* head = block;
    while (head->prev) head = head->prev;
    std::size_t size = 0;
    for (Block* b = head; b; b = b->next) size += b->size;
    return {head->ptr, size};
  }

  void snapshot(std::vector<SegmentInfo>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    flush_parked_locked();
    for (Block* head : segments_) {
      SegmentInfo info{device_, reinterpret_cast<std::size_t>(head->ptr), 0, 0, 0, head->stream};
      info.small = head->small;
      for (Block* b = head; b; b = b->next) {
        info.total_size += b->size;
        info.allocated_size += b->allocated ? b->size : 0;
        info.blocks += 1;
        // As CUDA's snapshot: a block freed while other streams may still use it
        // is "active_pending_free" until their events complete.
        const char* state = b->allocated ? "active_allocated"
                            : b->pending_events > 0 ? "active_pending_free"
                                                    : "inactive";
        const bool active = b->allocated || b->pending_events > 0;
        info.active_size += active ? b->size : 0;
        info.requested_size += active ? b->requested : 0;
        info.block_list.push_back({reinterpret_cast<std::size_t>(b->ptr), b->size,
                                   active ? b->requested : b->size, state, b->context});
      }
      out.push_back(std::move(info));
    }
  }

 private:
  static std::size_t round(std::size_t size, const Config& cfg) {
    std::size_t unit = std::max<std::size_t>(cfg.round_size, 1);
    if (size == 0) size = 1;
    return (size + unit - 1) / unit * unit;
  }

  static std::uintptr_t address(const Block* block) {
    return reinterpret_cast<std::uintptr_t>(block->ptr);
  }

  // profile_memory=True: the profiler's memory events of this device.
  void report_to_profiler(const Block* block, int64_t bytes) {
    c10::reportMemoryUsageToProfiler(
        block->ptr, bytes, stats_.allocated_bytes[0].current, stats_.reserved_bytes[0].current,
        c10::Device(kDeviceType, static_cast<c10::DeviceIndex>(device_)));
  }

  template <typename F>
  void for_each_stat(F f) {
    for (auto* array : {&stats_.allocation, &stats_.segment, &stats_.active,
                        &stats_.inactive_split, &stats_.allocated_bytes, &stats_.reserved_bytes,
                        &stats_.active_bytes, &stats_.inactive_split_bytes,
                        &stats_.requested_bytes}) {
      for (auto& s : *array) f(s);
    }
  }

  Block* find_free_locked(std::size_t size, c10::StreamId stream, const Config& cfg) {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = free_.lower_bound(&key);
    if (it == free_.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    // Fragmentation avoidance: never hand a big unsplittable block to a small request.
    if (size < cfg.max_split_size && block->size >= cfg.max_split_size) return nullptr;
    free_.erase(it);
    if (block->prev || block->next) {
      update(stats_.inactive_split, block->small, -1);
      update(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
    }
    return block;
  }

  Block* new_segment_locked(std::size_t size, bool small, c10::StreamId stream,
                            const Config& cfg) {
    std::size_t segment = small ? kSmallSegment
                                : (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
    if (cfg.pool_limit && reserved_ + segment > cfg.pool_limit) return nullptr;
    void* ptr = nullptr;
    auto status = runtime::malloc(device_, segment, &ptr);
    if (status == runtime::Status::OutOfMemory) {
      // Kept for the OOM message: the runtime may say why (e.g. an injected fault).
      const char* reason = runtime::last_error();
      last_oom_reason_ = reason ? reason : "";
      return nullptr;
    }
    check_status(status, "malloc");
    auto* block = new Block();
    block->device = device_;
    block->stream = stream;
    block->size = segment;
    block->ptr = static_cast<char*>(ptr);
    block->small = small;
    segments_.insert(block);
    reserved_ += segment;
    memory_history::record(device_, Action::SegmentAlloc, address(block), segment, stream, nullptr);
    stats_.num_device_alloc += 1;
    update(stats_.segment, small, 1);
    update(stats_.reserved_bytes, small, static_cast<int64_t>(segment));
    return block;
  }

  Block* split_locked(Block* block, std::size_t size, const Config& cfg) {
    std::size_t remaining = block->size - size;
    bool can_split = block->size < cfg.max_split_size &&
                     remaining >= std::max<std::size_t>(cfg.round_size, 1);
    if (!can_split) return block;
    auto* rest = new Block();
    rest->device = device_;
    rest->stream = block->stream;
    rest->small = block->small;
    rest->ptr = block->ptr + size;
    rest->size = remaining;
    rest->prev = block;
    rest->next = block->next;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    free_.insert(rest);
    update(stats_.inactive_split, rest->small, 1);
    update(stats_.inactive_split_bytes, rest->small, static_cast<int64_t>(rest->size));
    return block;
  }

  // A block nobody uses any more: it leaves the active stats and the history
  // sees it freed. Small blocks are parked for the next request of their exact
  // size; the rest coalesce into the free tree at once.
  void release_block_locked(Block* block) {
    update(stats_.active, block->small, -1);
    update(stats_.active_bytes, block->small, -static_cast<int64_t>(block->size));
    memory_history::record(device_, Action::FreeCompleted, address(block), block->size,
                           block->stream, nullptr);
    block->context.reset();
    if (block->small && block->size <= kParkMaxSize && parked_.size() < kMaxParked) {
      park_locked(block);
      return;
    }
    coalesce_into_free_locked(block);
  }

  // Parking (issue 39): an eager op on a small tensor frees its inputs' and
  // temporaries' blocks and allocates the same sizes again at once. Through the
  // free tree each such pair costs a split (a new Block), four tree updates
  // and a merge; a parked block is handed back as it is. Parked blocks count as
  // free, split blocks ("inactive_split") in the stats; anything that looks at
  // the cache as a whole (stats, snapshot, empty_cache, a request the tree and
  // the parked blocks cannot serve) first coalesces them, so what it sees is
  // the same as without parking. Bounded, so the fragmentation they hold is too.
  static constexpr std::size_t kParkMaxSize = 64 * 1024;
  static constexpr std::size_t kMaxParked = 64;

  void park_locked(Block* block) {
    block->parked = true;
    parked_.push_back(block);
    if (block->prev || block->next) {
      update(stats_.inactive_split, block->small, 1);
      update(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
    }
  }

  void unpark_locked(std::size_t index) {
    Block* block = parked_[index];
    parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(index));
    block->parked = false;
    if (block->prev || block->next) {
      update(stats_.inactive_split, block->small, -1);
      update(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
    }
  }

  // The most recently parked block of exactly `size` bytes on `stream`, if any.
  Block* take_parked_locked(std::size_t size, c10::StreamId stream) {
    for (std::size_t i = parked_.size(); i-- > 0;) {
      Block* block = parked_[i];
      if (block->size == size && block->stream == stream) {
        unpark_locked(i);
        return block;
      }
    }
    return nullptr;
  }

  void flush_parked_locked() {
    while (!parked_.empty()) {
      Block* block = parked_.back();
      unpark_locked(parked_.size() - 1);
      coalesce_into_free_locked(block);
    }
  }

  // Merges a free block with its free neighbours of the same segment (parked
  // ones stay parked) and files the result in the free tree.
  void coalesce_into_free_locked(Block* block) {
    for (Block* neighbour : {block->prev, block->next}) {
      if (!neighbour || neighbour->allocated || neighbour->parked || neighbour->pending_events > 0)
        continue;
      free_.erase(neighbour);
      update(stats_.inactive_split, neighbour->small, -1);
      update(stats_.inactive_split_bytes, neighbour->small,
             -static_cast<int64_t>(neighbour->size));
      if (neighbour == block->prev) {
        neighbour->size += block->size;
        neighbour->next = block->next;
        if (block->next) block->next->prev = neighbour;
        if (segments_.erase(block)) segments_.insert(neighbour);
        delete block;
        block = neighbour;
      } else {
        block->size += neighbour->size;
        block->next = neighbour->next;
        if (neighbour->next) neighbour->next->prev = block;
        delete neighbour;
      }
    }
    free_.insert(block);
    if (block->prev || block->next) {
      update(stats_.inactive_split, block->small, 1);
      update(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
    }
  }

  void process_events_locked() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = false;
      if (runtime::event_query(device_, it->first, &done) != runtime::Status::Ok) done = true;
      if (!done) {
        ++it;
        continue;
      }
      runtime::event_destroy(device_, it->first);
      Block* block = it->second;
      it = pending_.erase(it);
      if (--block->pending_events == 0) release_block_locked(block);
    }
  }

  // Gives whole free segments back to the runtime. A cached block may still be
  // read or written by work queued before it was freed (reuse on the same
  // stream is ordered after that work; giving the memory back is not), so the
  // device finishes its work first, once, when there is anything to give back.
  void release_cached_locked() {
    flush_parked_locked();
    bool waited = false;
    for (auto it = free_.begin(); it != free_.end();) {
      Block* block = *it;
      if (block->prev || block->next) {
        ++it;
        continue;
      }
      if (!waited) {
        host_wait_device(device_, HostWait::Allocator, "releasing cached device memory");
        waited = true;
      }
      it = free_.erase(it);
      segments_.erase(block);
      reserved_ -= block->size;
      memory_history::record(device_, Action::SegmentFree, address(block), block->size,
                             block->stream, nullptr);
      stats_.num_device_free += 1;
      update(stats_.segment, block->small, -1);
      update(stats_.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
      runtime::free(device_, block->ptr);
      delete block;
    }
  }

  void maybe_collect_garbage_locked(const Config& cfg) {
    if (cfg.garbage_collection_threshold <= 0) return;
    std::size_t free_bytes = 0, total = 0;
    if (runtime::memory_info(device_, &free_bytes, &total) != runtime::Status::Ok) return;
    if (reserved_ > static_cast<std::size_t>(cfg.garbage_collection_threshold * total))
      release_cached_locked();
  }

  [[noreturn]] void raise_oom_locked(std::size_t requested, std::size_t rounded) {
    std::size_t free_bytes = 0, total = 0;
    runtime::memory_info(device_, &free_bytes, &total);
    auto allocated = stats_.allocated_bytes[0].current;
    memory_history::record(device_, Action::Oom, 0, rounded, 0, memory_history::gather_alloc(),
                           free_bytes);
    c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(rounded), allocated, reserved_,
                                     c10::Device(kDeviceType, static_cast<c10::DeviceIndex>(device_)));
    std::ostringstream msg;
    msg << kBackendName << " out of memory on device " << kBackendName << ":" << device_
        << ": tried to allocate " << requested << " bytes (" << rounded
        << " rounded); device capacity " << total << " bytes, " << free_bytes
        << " bytes free on the device, " << reserved_ << " bytes reserved by the caching allocator ("
        << allocated << " allocated). Free tensors or call torch_fl.empty_cache(); "
        << "the capacity is set by " << config::kMemoryCapacityEnv << ".";
    if (!last_oom_reason_.empty()) msg << " The runtime said: " << last_oom_reason_;
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg.str());
  }

  int device_;
  std::mutex mutex_;
  std::set<Block*, BlockOrder> free_;
  std::set<Block*> segments_;  // first block of every segment
  std::vector<Block*> parked_;  // see park_locked
  std::vector<std::pair<runtime::Event, Block*>> pending_;
  std::size_t reserved_ = 0;
  std::string last_oom_reason_;
  DeviceStats stats_;
};

std::mutex g_config_mutex;
Config g_config;
// Bumped (under the mutex) each time g_config changes. Every allocation reads the
// config: a thread keeps a copy and takes the mutex only when the generation
// moved, so the hot path costs one load instead of a lock and an unlock.
std::atomic<uint64_t> g_config_generation{1};

const Config& current_config() {
  thread_local uint64_t seen = 0;
  thread_local Config copy;
  const uint64_t now = g_config_generation.load(std::memory_order_acquire);
  if (now != seen) {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    copy = g_config;
    seen = g_config_generation.load(std::memory_order_relaxed);
  }
  return copy;
}

void apply_config_locked(const std::string& text, Config& cfg) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    auto colon = item.find(':');
    TORCH_CHECK(colon != std::string::npos, kBackendName, ": allocator config item '", item,
                "' is not key:value (keys: round_size, max_split_size_mb, "
                "garbage_collection_threshold, pool_limit_mb)");
    std::string key = item.substr(0, colon);
    std::string value = item.substr(colon + 1);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    char* end = nullptr;
    double number = std::strtod(value.c_str(), &end);
    bool unlimited = value == "unlimited" || value == "none";
    TORCH_CHECK(unlimited || (end != value.c_str() && number >= 0), kBackendName,
                ": allocator config ", key, ":", value, " needs a non-negative number");
    if (key == "round_size") {
      TORCH_CHECK(!unlimited && number >= 1 && number <= 64 * kMiB, kBackendName,
                  ": allocator config round_size must be 1..", 64 * kMiB, " bytes, got ", value);
      cfg.round_size = static_cast<std::size_t>(number);
    } else if (key == "max_split_size_mb") {
      cfg.max_split_size = unlimited ? SIZE_MAX : static_cast<std::size_t>(number * kMiB);
    } else if (key == "garbage_collection_threshold") {
      TORCH_CHECK(!unlimited && number >= 0 && number < 1, kBackendName,
                  ": allocator config garbage_collection_threshold must be in [0, 1), got ", value);
      cfg.garbage_collection_threshold = number;
    } else if (key == "pool_limit_mb") {
      cfg.pool_limit = unlimited ? 0 : static_cast<std::size_t>(number * kMiB);
    } else {
      TORCH_CHECK(false, kBackendName, ": unknown allocator config key '", key,
                  "' (keys: round_size, max_split_size_mb, garbage_collection_threshold, "
                  "pool_limit_mb)");
    }
  }
}

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  CachingAllocator() {
    apply_config_locked(config::kAllocatorDefaults, g_config);
    if (const char* text = std::getenv(config::kAllocatorConfEnv)) {
      try {
        apply_config_locked(text, g_config);
      } catch (const c10::Error& e) {
        // Static initialisation must not throw; report on first use instead.
        env_error_ = std::string(config::kAllocatorConfEnv) + ": " + e.what_without_backtrace();
      }
    }
  }

  c10::DataPtr allocate(std::size_t bytes) override {
    TORCH_CHECK(env_error_.empty(), env_error_);
    ensure_initialized();
    auto device = current_device();
    if (bytes == 0) return c10::DataPtr(nullptr, c10::Device(kDeviceType, device));
    Block* block = cache(device).malloc(bytes, current_stream(device).id(), current_config(),
                                        memory_history::gather_alloc());
    return c10::DataPtr(block->ptr, block, &CachingAllocator::deleter,
                        c10::Device(kDeviceType, device));
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    auto device = current_device();
    check_status(runtime::memcpy(dest, src, count, runtime::CopyKind::DeviceToDevice, device,
                                 native_stream(current_stream(device))),
                 "memcpy");
  }

  bool initialized() override { return device_count() > 0; }

  void emptyCache(c10::MempoolId_t) override {
    int count = device_count();
    for (int i = 0; i < count; ++i) cache(i).empty_cache();
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get_context()) return;
    auto* block = static_cast<Block*>(ptr.get_context());
    cache(block->device).record_stream(block, stream.id());
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device);
    return cache(device).stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device);
    cache(device).reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device);
    cache(device).reset_peak();
  }

  std::pair<std::size_t, std::size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    std::size_t free_bytes = 0, total = 0;
    check_status(runtime::memory_info(device, &free_bytes, &total), "memory_info");
    return {free_bytes, total};
  }

  std::vector<SegmentInfo> snapshot() {
    std::vector<SegmentInfo> out;
    int count = device_count();
    for (int i = 0; i < count; ++i) cache(i).snapshot(out);
    return out;
  }

  bool allocation_of(const void* context, c10::DeleterFnPtr deleter, void** base,
                     std::size_t* size) {
    if (deleter != &CachingAllocator::deleter || !context) return false;
    auto* block = static_cast<Block*>(const_cast<void*>(context));
    auto [head, bytes] = cache(block->device).segment_of(block);
    *base = head;
    *size = bytes;
    return true;
  }

 private:
  static void deleter(void* context) {
    auto* block = static_cast<Block*>(context);
    instance().cache(block->device).free(block, memory_history::gather_free());
  }

  // Every allocation and free asks for its device's cache: one load once the
  // caches exist (std::call_once cost a thread-local lookup and a pthread_once
  // on each call).
  DeviceCache& cache(int device) {
    if (!caches_ready_.load(std::memory_order_acquire)) make_caches();
    check_device_index(device);
    return *caches_[static_cast<std::size_t>(device)];
  }

  void make_caches() {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    if (caches_ready_.load(std::memory_order_relaxed)) return;
    int count = device_count();
    for (int i = 0; i < count; ++i) caches_.push_back(std::make_unique<DeviceCache>(i));
    caches_ready_.store(true, std::memory_order_release);
  }

 public:
  static CachingAllocator& instance();

 private:
  std::mutex caches_mutex_;
  std::atomic<bool> caches_ready_{false};
  std::vector<std::unique_ptr<DeviceCache>> caches_;
  std::string env_error_;
};

// Leaked on purpose: tensors may be freed during interpreter shutdown.
CachingAllocator* g_allocator = new CachingAllocator();
CachingAllocator& CachingAllocator::instance() { return *g_allocator; }

}  // namespace

void set_config(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  Config updated = g_config;
  apply_config_locked(text, updated);  // throws before anything changes
  g_config = updated;
  g_config_generation.fetch_add(1, std::memory_order_release);
}

std::map<std::string, double> get_config() {
  Config cfg = current_config();
  return {
      {"round_size", static_cast<double>(cfg.round_size)},
      {"max_split_size_mb",
       cfg.max_split_size == SIZE_MAX ? -1.0 : static_cast<double>(cfg.max_split_size) / kMiB},
      {"garbage_collection_threshold", cfg.garbage_collection_threshold},
      {"pool_limit_mb", static_cast<double>(cfg.pool_limit) / kMiB},
  };
}

void empty_cache() { g_allocator->emptyCache({0, 0}); }

std::vector<SegmentInfo> snapshot() { return g_allocator->snapshot(); }

bool allocation_of(const void* data_context, void (*data_deleter)(void*), void** base,
                   std::size_t* size) {
  return g_allocator->allocation_of(data_context, data_deleter, base, size);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, g_allocator)

}  // namespace FLSDK_BACKEND_NS::allocator
