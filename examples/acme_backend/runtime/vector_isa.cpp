// acme's vector instruction set choice (vector_isa.h).
#include "vector_isa.h"

#include <atomic>
#include <cstdlib>

namespace acme::isa {
namespace {

const char* name_of(Level level) {
  switch (level) {
    case kAvx512: return "avx512";
    case kAvx2: return "avx2";
    default: return "scalar";
  }
}

Level detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kAvx2;
#endif
  return kScalar;
}

std::atomic<int>& chosen() {
  static std::atomic<int> level{static_cast<int>(hardware())};
  return level;
}

}  // namespace

Level hardware() {
  static const Level best = detect();
  return best;
}

Level active() { return static_cast<Level>(chosen().load(std::memory_order_relaxed)); }

bool set_option(const std::string& value, std::string* error) {
  Level want;
  if (value == "auto") want = hardware();
  else if (value == "scalar") want = kScalar;
  else if (value == "avx2") want = kAvx2;
  else if (value == "avx512") want = kAvx512;
  else {
    *error = "acme: isa: unknown instruction set '" + value +
             "' (expected auto, scalar, avx2 or avx512)";
    return false;
  }
  if (want > hardware()) {
    *error = std::string("acme: isa: this CPU cannot run ") + name_of(want) +
             " code (the best it supports is " + name_of(hardware()) + ")";
    return false;
  }
  chosen().store(static_cast<int>(want), std::memory_order_relaxed);
  return true;
}

std::string get_option() { return name_of(active()); }

bool configure_from_env(std::string* error) {
  const char* value = std::getenv("ACME_ISA");
  if (!value || !*value) return true;
  if (set_option(value, error)) return true;
  *error = "ACME_ISA=" + std::string(value) + ": " + *error;
  return false;
}

}  // namespace acme::isa
