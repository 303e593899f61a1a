// acme vendor runtime: options (set_option / get_option and the ACME_* env
// variables init reads): the slow device, fault injection (failing calls, a
// wrong kernel), device loss, stats.
#include "internal.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

using namespace acme_internal;

// Strict parsers for option values (a typo must not silently mean 0).
bool parse_rate(const char* s, double* out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno || *end || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}
bool parse_u64(const char* s, uint64_t* out) {
  if (!s || !*s || *s == '-') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

}  // namespace

namespace acme_internal {

acmeError_t apply_option(const char* key, const char* value, const char* source) {
  Runtime& r = rt();
  const std::string k(key);
  if (k == "slow_device") {
    uint64_t us;
    if (!parse_u64(value, &us) || us > 10'000'000)
      return fail(acmeErrorInvalidValue,
                  "acme: %s: slow_device must be a delay in microseconds, 0..10000000, got '%s'",
                  source, value);
    r.slow_device_us = us;
    return acmeSuccess;
  }
  if (k == "link_gbps") {
    char* end = nullptr;
    errno = 0;
    const double v = value && *value ? std::strtod(value, &end) : -1.0;
    if (errno || !end || *end || !(v >= 0.0 && v <= 1e6))
      return fail(acmeErrorInvalidValue,
                  "acme: %s: link_gbps must be a bandwidth in GB/s, 0 (unlimited)..1000000, "
                  "got '%s'",
                  source, value);
    r.link_gbps = v;
    return acmeSuccess;
  }
  if (k == "protect")
    return fail(acmeErrorInvalidValue,
                "acme: %s: option 'protect' is gone: acme's device memory is never readable by "
                "the host, at any time, from any thread (no mode to switch on)",
                source);
  if (k == "fault_malloc" || k == "fault_memcpy") {
    double v;
    if (!parse_rate(value, &v))
      return fail(acmeErrorInvalidValue, "acme: %s: %s must be a rate in [0, 1], got '%s'",
                  source, key, value);
    const int kind = k == "fault_malloc" ? 0 : 1;
    r.faults.rate[kind] = v;
    r.faults.calls[kind] = 0;
    return acmeSuccess;
  }
  if (k == "fault_seed") {
    uint64_t v;
    if (!parse_u64(value, &v))
      return fail(acmeErrorInvalidValue,
                  "acme: %s: fault_seed must be an unsigned integer, got '%s'", source, value);
    r.faults.seed = v;
    r.faults.calls[0] = 0;
    r.faults.calls[1] = 0;
    return acmeSuccess;
  }
  if (k == "stats") {
    if (std::string(value) != "reset" && std::string(value) != "0")
      return fail(acmeErrorInvalidValue, "acme: %s: stats only accepts 'reset', got '%s'",
                  source, value);
    r.stats.reset();
    for (auto& a : r.arenas) a->reset_peak();
    return acmeSuccess;
  }
  if (k == "device_lost") {
    if (std::string(value) == "none") {
      r.lost = 0;
      return acmeSuccess;
    }
    uint64_t v;
    if (!parse_u64(value, &v) || v >= static_cast<uint64_t>(r.count.load()))
      return fail(acmeErrorInvalidValue,
                  "acme: %s: device_lost must be a device index 0..%d or 'none', got '%s'",
                  source, r.count.load() - 1, value);
    r.lost.fetch_or(uint64_t{1} << v);
    return acmeSuccess;
  }
  if (k == "wrong_kernel") {
    const std::string name(value);
    if (name.empty() || name.find_first_of(" \t,") != std::string::npos)
      return fail(acmeErrorInvalidValue,
                  "acme: %s: wrong_kernel must be one kernel name as launched (e.g. 'k_mm') or "
                  "'none', got '%s'",
                  source, value);
    std::lock_guard<std::mutex> lk(r.wrong_mu);
    r.wrong_kernel = name == "none" ? "" : name;
    r.has_wrong_kernel = !r.wrong_kernel.empty();
    return acmeSuccess;
  }
  if (k == "device_count" || k == "capacity" || k == "alignment" || k == "runtime_version" ||
      k == "driver_version" || k == "built_driver_version")
    return fail(acmeErrorInvalidValue,
                "acme: option '%s' is read-only (set it through the device config / init)", key);
  return fail(acmeErrorInvalidValue,
              "acme: unknown option '%s' (settable: slow_device, link_gbps, fault_malloc, "
              "fault_memcpy, fault_seed, stats, device_lost, wrong_kernel)",
              key);
}


}  // namespace acme_internal

namespace {

using namespace acme_internal;

std::string stats_json() {
  Runtime& r = rt();
  Stats& s = r.stats;
  size_t nstreams, nevents;
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    nstreams = r.streams.size();
    nevents = r.events.size();
  }
  std::string j = "{";
  auto add = [&](const char* name, uint64_t v) {
    j += "\"";
    j += name;
    j += "\": " + std::to_string(v) + ", ";
  };
  add("mallocs", s.mallocs);
  add("frees", s.frees);
  add("malloc_bytes", s.malloc_bytes);
  add("malloc_failures", s.malloc_failures);
  add("copies", s.copies);
  add("copy_bytes", s.copy_bytes);
  add("h2h", s.h2h);
  add("h2d", s.h2d);
  add("d2h", s.d2h);
  add("d2d", s.d2d);
  add("peer", s.peer);
  add("launches", s.launches);
  add("host_allocs", s.host_allocs);
  add("host_frees", s.host_frees);
  add("host_alloc_bytes", s.host_alloc_bytes);
  add("host_waits", s.host_waits);
  add("injected_malloc_faults", s.injected_malloc);
  add("injected_memcpy_faults", s.injected_memcpy);
  add("live_streams", nstreams);
  add("live_events", nevents);
  j += "\"devices\": [";
  for (size_t i = 0; i < r.arenas.size(); ++i) {
    if (i) j += ", ";
    j += r.arenas[i]->json();
  }
  j += "]}";
  return j;
}

}  // namespace

using namespace acme_internal;

namespace acme_internal {

acmeError_t env_option(const char* env, const char* key) {
  const char* v = std::getenv(env);
  if (!v) return acmeSuccess;
  return apply_option(key, v, env);
}

}  // namespace acme_internal

extern "C" {

// ---- options ------------------------------------------------------------------

int acmeKernelIsWrong(const char* name) {
  Runtime& r = rt();
  if (!name || !r.has_wrong_kernel.load(std::memory_order_relaxed)) return 0;
  std::lock_guard<std::mutex> lk(r.wrong_mu);
  return r.wrong_kernel == name ? 1 : 0;
}

acmeError_t acmeSetOption(const char* key, const char* value) {
  if (!key || !value) return fail(acmeErrorInvalidValue, "acme: set_option: null key or value");
  return apply_option(key, value, "set_option");
}

acmeError_t acmeGetOption(const char* key, char* buf, size_t buflen, size_t* needed) {
  if (!key) return fail(acmeErrorInvalidValue, "acme: get_option: null key");
  Runtime& r = rt();
  const std::string k(key);
  std::string v;
  char num[64];
  if (k == "slow_device") {
    v = std::to_string(r.slow_device_us.load());
  } else if (k == "link_gbps") {
    std::snprintf(num, sizeof num, "%g", r.link_gbps.load());
    v = num;
  } else if (k == "fault_malloc" || k == "fault_memcpy") {
    std::snprintf(num, sizeof num, "%g", r.faults.rate[k == "fault_malloc" ? 0 : 1].load());
    v = num;
  } else if (k == "fault_seed") {
    v = std::to_string(r.faults.seed.load());
  } else if (k == "stats") {
    v = stats_json();
  } else if (k == "device_count") {
    v = std::to_string(r.count.load());
  } else if (k == "capacity") {
    v = std::to_string(r.count.load() ? r.arenas[0]->capacity() : 0);
  } else if (k == "alignment") {
    v = std::to_string(r.count.load() ? r.alignment : 0);
  } else if (k == "runtime_version") {
    v = ACME_RUNTIME_VERSION;
  } else if (k == "built_driver_version") {
    v = ACME_DRIVER_VERSION;
  } else if (k == "driver_version") {
    v = installed_driver_version();
  } else if (k == "wrong_kernel") {
    std::lock_guard<std::mutex> lk(r.wrong_mu);
    v = r.wrong_kernel.empty() ? "none" : r.wrong_kernel;
  } else if (k == "device_lost") {
    const uint64_t lost = r.lost.load();
    for (int i = 0; i < 64; ++i)
      if (lost & (uint64_t{1} << i)) v += (v.empty() ? "" : ",") + std::to_string(i);
  } else {
    return fail(acmeErrorInvalidValue,
                "acme: unknown option '%s' (known: slow_device, link_gbps, fault_malloc, "
                "fault_memcpy, fault_seed, stats, device_lost, wrong_kernel, device_count, "
                "capacity, alignment, "
                "runtime_version, driver_version, built_driver_version)",
                key);
  }
  if (needed) *needed = v.size();
  if (buf && buflen) {
    const size_t n = std::min(v.size(), buflen - 1);
    std::memcpy(buf, v.data(), n);
    buf[n] = '\0';
  }
  return acmeSuccess;
}

}  // extern "C"
