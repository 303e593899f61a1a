// The caching allocator's history (memory_history.h). Stacks are PyTorch's
// CapturedTraceback, as CUDA's allocator takes them: Python frames through the
// unwinder torch's Python module registers, C++ frames with stacks="all".
#include "memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::memory_history {
namespace {

struct Recorded {
  int device;
  Action action;
  std::uintptr_t addr;
  std::size_t size;
  int64_t stream;
  int64_t time_us;
  std::size_t device_free;
  std::shared_ptr<c10::GatheredContext> context;
};

std::atomic<bool> g_recording{false};
std::mutex g_mutex;
Settings g_settings;
std::deque<Recorded> g_trace;

Settings settings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_settings;
}

std::shared_ptr<c10::GatheredContext> gather(bool wanted, bool cpp) {
  if (!wanted) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, cpp);
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* action_name(Action action) {
  switch (action) {
    case Action::Alloc: return "alloc";
    case Action::FreeRequested: return "free_requested";
    case Action::FreeCompleted: return "free_completed";
    case Action::SegmentAlloc: return "segment_alloc";
    case Action::SegmentFree: return "segment_free";
    case Action::Oom: return "oom";
  }
  return "?";
}

void configure(const Settings& settings, bool clear) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_settings = settings;
  if (clear || !settings.trace) g_trace.clear();
  while (g_trace.size() > g_settings.max_entries) g_trace.pop_front();
  g_recording.store(settings.trace || settings.state);
}

bool recording() { return g_recording.load(std::memory_order_relaxed); }

std::shared_ptr<c10::GatheredContext> gather_alloc() {
  if (!recording()) return nullptr;
  const Settings s = settings();
  return gather(s.alloc_stacks, s.cpp);
}

std::shared_ptr<c10::GatheredContext> gather_free() {
  if (!recording()) return nullptr;
  const Settings s = settings();
  return gather(s.free_stacks, s.cpp);
}

void record(int device, Action action, std::uintptr_t addr, std::size_t size, int64_t stream,
            std::shared_ptr<c10::GatheredContext> context, std::size_t device_free) {
  if (!recording()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_settings.trace || g_settings.max_entries == 0) return;
  g_trace.push_back({device, action, addr, size, stream, now_us(), device_free, std::move(context)});
  if (g_trace.size() > g_settings.max_entries) g_trace.pop_front();
}

std::vector<std::vector<Frame>> symbolize(
    const std::vector<std::shared_ptr<c10::GatheredContext>>& contexts) {
  std::vector<torch::CapturedTraceback*> captured;
  std::vector<long> index(contexts.size(), -1);
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    if (!contexts[i]) continue;
    index[i] = static_cast<long>(captured.size());
    captured.push_back(torch::getCapturedTracebackFromContext(contexts[i]));
  }
  std::vector<std::vector<Frame>> out(contexts.size());
  if (captured.empty()) return out;
  const torch::SymbolizedTracebacks resolved = torch::symbolize(captured);
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    if (index[i] < 0) continue;
    for (uint64_t f : resolved.tracebacks[static_cast<std::size_t>(index[i])]) {
      const auto& frame = resolved.all_frames[f];
      out[i].push_back({frame.filename, frame.funcname, static_cast<int64_t>(frame.lineno)});
    }
  }
  return out;
}

std::vector<Entry> trace() {
  std::vector<Recorded> copy;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    copy.assign(g_trace.begin(), g_trace.end());
  }
  std::vector<std::shared_ptr<c10::GatheredContext>> contexts;
  contexts.reserve(copy.size());
  for (const auto& r : copy) contexts.push_back(r.context);
  auto frames = symbolize(contexts);
  std::vector<Entry> out;
  out.reserve(copy.size());
  for (std::size_t i = 0; i < copy.size(); ++i) {
    const auto& r = copy[i];
    out.push_back({r.device, r.action, r.addr, r.size, r.stream, r.time_us, r.device_free,
                   std::move(frames[i])});
  }
  return out;
}

}  // namespace FLSDK_BACKEND_NS::memory_history
