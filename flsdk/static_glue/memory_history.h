// The caching allocator's history, in the form of CUDA's
// (torch.cuda.memory._record_memory_history / _snapshot): a trace of allocs,
// frees and segment (runtime malloc/free) events with the stack that caused
// them, and the stack of every live block, so PyTorch's memory viewer
// (torch.cuda._memory_viz, pytorch.org/memory_viz) renders a device's memory.
// Off by default: the allocator then pays one relaxed atomic load per call.
// Light on purpose (allocator.cpp includes it); the stack capture lives in
// memory_history.cpp.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::memory_history {

enum class Action : int { Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree, Oom };
const char* action_name(Action action);  // "alloc", "free_requested", ... as CUDA's snapshot

// What _record_memory_history asked for.
struct Settings {
  bool trace = false;        // enabled="all": record the trace of events
  bool state = false;        // enabled="state" or "all": remember each live block's stack
  bool alloc_stacks = false;  // context "alloc", "state" or "all": stacks of allocs
  bool free_stacks = false;   // context "all": stacks of frees too
  bool cpp = false;           // stacks="all": C++ frames as well as Python's
  std::size_t max_entries = SIZE_MAX;
};
void configure(const Settings& settings, bool clear);

// Whether anything is recorded (blocks keep a stack, or events are traced).
bool recording();

// The caller's stack for an alloc / a free, when the settings ask for one (else
// null). Called before the allocator takes its lock: gathering Python frames
// takes the GIL.
std::shared_ptr<c10::GatheredContext> gather_alloc();
std::shared_ptr<c10::GatheredContext> gather_free();

// Appends an event to the trace when tracing (a ring of max_entries).
void record(int device, Action action, std::uintptr_t addr, std::size_t size, int64_t stream,
            std::shared_ptr<c10::GatheredContext> context, std::size_t device_free = 0);

struct Frame {
  std::string filename;
  std::string name;
  int64_t line = 0;
};
struct Entry {
  int device = 0;
  Action action = Action::Alloc;
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  int64_t stream = 0;
  int64_t time_us = 0;
  std::size_t device_free = 0;
  std::vector<Frame> frames;
};

// The recorded trace, frames resolved, oldest first.
std::vector<Entry> trace();

// Resolves captured stacks (a null one gives no frames), innermost frame first.
std::vector<std::vector<Frame>> symbolize(
    const std::vector<std::shared_ptr<c10::GatheredContext>>& contexts);

}  // namespace FLSDK_BACKEND_NS::memory_history
