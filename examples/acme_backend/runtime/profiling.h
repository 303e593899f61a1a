// acme vendor runtime: the activity records behind acmeProfiler* (internal).
// Queued work carries an ActivityTag; the stream's worker times the work and
// hands the tag to record(). With profiling off, tag() is one relaxed load and
// the tag says "not recorded".
#pragma once

#include "acme_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdint>

namespace acme_internal {

struct ActivityTag {
  bool recorded = false;  // false: profiling was off when the work was queued
  acmeActivityKind kind = acmeActivityKernel;
  const char* name = nullptr;
  uint64_t correlation_id = 0;
  uint64_t bytes = 0;
  acmeMemcpyKind copy_kind = acmeMemcpyDeviceToDevice;
  int64_t launch_start_ns = 0;  // steady_clock at the queuing call's entry
};

extern std::atomic<bool> g_profiling;

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Stamps the queuing call's entry when profiling is on (0 otherwise): taken
// first thing, so a record's launch span covers the call.
inline int64_t launch_clock() {
  return g_profiling.load(std::memory_order_relaxed) ? steady_ns() : 0;
}

// The tag of work being queued now by this thread (recorded = false when
// profiling is off).
ActivityTag tag(acmeActivityKind kind, const char* name, int64_t launch_start_ns,
                uint64_t bytes = 0, acmeMemcpyKind copy_kind = acmeMemcpyDeviceToDevice);

// The work tagged `t`, queued on `stream` of `device`, ran from `start_ns` to
// `end_ns`; its queuing call returned at `launch_end_ns`.
void record(const ActivityTag& t, int device, acmeStream_t stream, int64_t start_ns,
            int64_t end_ns, int64_t launch_end_ns);

}  // namespace acme_internal
