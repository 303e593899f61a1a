// The key of an op's counter-based random stream (Philox, as GPUs use): drawn on
// the host, one 64-bit draw per op from the generator (the caller's, or the
// device's default: the glue's CPUGeneratorImpl bound to the device), so a seed
// (manual_seed, the rng state) reproduces every op's stream. Host part: any
// backend uses it, whatever language its device part is written in.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include "errors.h"

namespace FLSDK_BACKEND_NS::common {

// The generator to draw from: the caller's, or the default one of the tensor's
// device. Not at::get_generator_or_default: that insists on a CPU device type,
// while this device's generator reports this device.
inline at::CPUGeneratorImpl* generator_for(const char* op, const std::optional<at::Generator>& gen,
                                           const at::Tensor& t) {
  at::Generator g = (gen.has_value() && gen->defined()) ? *gen
                                                        : at::globalContext().defaultGenerator(t.device());
  FL_CHECK(g.defined(), op, "no generator for device ", t.device());
  FL_CHECK(g.device().type() == t.device().type(), op, "expected a generator of device type ",
           t.device().type(), " but got one of ", g.device().type());
  return static_cast<at::CPUGeneratorImpl*>(g.unsafeGetGeneratorImpl());
}

// An op's key: one draw from the generator, under its lock.
inline std::uint64_t draw_key(const char* op, const std::optional<at::Generator>& gen, const at::Tensor& t) {
  at::CPUGeneratorImpl* g = generator_for(op, gen, t);
  std::lock_guard<std::mutex> lock(g->mutex_);
  return g->random64();
}

}  // namespace FLSDK_BACKEND_NS::common
