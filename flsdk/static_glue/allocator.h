// Configuration and inspection of the caching device allocator.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device_config.h"

namespace c10 {
struct GatheredContext;
}  // namespace c10

namespace FLSDK_BACKEND_NS::allocator {

// Parses "key:value,key:value" (the same syntax as the environment variable
// named in device.yaml) and applies it; throws naming the bad key or value.
// Keys: round_size (bytes), max_split_size_mb, garbage_collection_threshold
// (0..1 of capacity), pool_limit_mb (cap on reserved bytes per device, 0 = none).
void set_config(const std::string& text);
std::map<std::string, double> get_config();

// Drops every cached block that is not in use, on every device.
void empty_cache();

// One block of a segment, as CUDA's snapshot describes it.
struct BlockInfo {
  std::size_t address;
  std::size_t size;
  std::size_t requested_size;
  const char* state;  // "active_allocated", "active_pending_free" or "inactive"
  std::shared_ptr<c10::GatheredContext> context;  // its stack (memory_history.h), or null
};

struct SegmentInfo {
  int device;
  std::size_t address;
  std::size_t total_size;
  std::size_t allocated_size;
  std::size_t blocks;
  long long stream;
  bool small = false;
  std::size_t active_size = 0;
  std::size_t requested_size = 0;
  std::vector<BlockInfo> block_list;
};
std::vector<SegmentInfo> snapshot();

// The runtime allocation (what runtime::malloc returned, and its size) that
// holds the memory of `data`, a DataPtr of this allocator; false for memory
// the caching allocator did not hand out (IPC shares allocations, ipc.cpp).
bool allocation_of(const void* data_context, void (*data_deleter)(void*), void** base,
                   std::size_t* size);

}  // namespace FLSDK_BACKEND_NS::allocator
