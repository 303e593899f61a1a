// acme vendor runtime: profiling (acmeProfiler* in acme_runtime.h). Records of
// the work the streams' workers ran, for the profiler the glue feeds Kineto.
#include "internal.h"
#include "profiling.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace acme_internal {

std::atomic<bool> g_profiling{false};

namespace {

std::mutex g_mu;
std::vector<acmeActivity> g_records;  // finished work since start or the last flush
// The correlation ids this thread pushed (innermost last).
thread_local std::vector<uint64_t> t_correlation;

}  // namespace

ActivityTag tag(acmeActivityKind kind, const char* name, int64_t launch_start_ns, uint64_t bytes,
                acmeMemcpyKind copy_kind) {
  ActivityTag t;
  if (!g_profiling.load(std::memory_order_relaxed)) return t;
  t.recorded = true;
  t.kind = kind;
  t.name = name;
  t.correlation_id = t_correlation.empty() ? 0 : t_correlation.back();
  t.bytes = bytes;
  t.copy_kind = copy_kind;
  t.launch_start_ns = launch_start_ns ? launch_start_ns : steady_ns();
  return t;
}

void record(const ActivityTag& t, int device, acmeStream_t stream, int64_t start_ns,
            int64_t end_ns, int64_t launch_end_ns) {
  acmeActivity a{};
  a.kind = t.kind;
  a.name = t.name;
  a.device = device;
  a.stream = stream;
  a.start_ns = start_ns;
  a.end_ns = end_ns;
  a.launch_start_ns = t.launch_start_ns;
  a.launch_end_ns = launch_end_ns;
  a.correlation_id = t.correlation_id;
  a.bytes = t.bytes;
  a.copy_kind = t.copy_kind;
  std::lock_guard<std::mutex> lk(g_mu);
  g_records.push_back(a);
}

}  // namespace acme_internal

using namespace acme_internal;

extern "C" {

acmeError_t acmeProfilerStart(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_records.clear();
  g_profiling.store(true);
  return acmeSuccess;
}

acmeError_t acmeProfilerStop(void) {
  g_profiling.store(false);
  return acmeSuccess;
}

void acmeProfilerPushCorrelation(uint64_t id) { t_correlation.push_back(id); }

void acmeProfilerPopCorrelation(void) {
  if (!t_correlation.empty()) t_correlation.pop_back();
}

acmeError_t acmeProfilerFlush(acmeActivity* out, size_t capacity, size_t* count) {
  if (!count || (!out && capacity))
    return fail(acmeErrorInvalidValue, "acme: profiler_flush: null output pointer");
  std::lock_guard<std::mutex> lk(g_mu);
  const size_t n = std::min(capacity, g_records.size());
  std::copy(g_records.begin(), g_records.begin() + static_cast<std::ptrdiff_t>(n), out);
  g_records.erase(g_records.begin(), g_records.begin() + static_cast<std::ptrdiff_t>(n));
  *count = n;
  return acmeSuccess;
}

}  // extern "C"
