// Per-op routing at run time: calls of an op with a native kernel can be sent
// to the CPU fallback instead (torch_fl.set_op_route("aten::mm", "fallback"),
// TORCH_FL_OP_ROUTES), to take one suspicious kernel off the chip without a
// rebuild. The generated wrappers ask any() on every call (one relaxed atomic
// load: nothing is routed in normal runs) and look their op up only when some
// op is routed. Light on purpose: every registration shard includes it.
#pragma once

#include <atomic>
#include <map>
#include <string>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::op_routes {

extern std::atomic<bool> g_any_routed;

// True when at least one op is routed to the fallback.
inline bool any() { return g_any_routed.load(std::memory_order_relaxed); }

// Whether calls of `op` (the overload a wrapper registers: "mm", "mm.out",
// "add.Tensor") go to the fallback: routed by that overload or by its base name
// ("mm" routes mm and mm.out).
bool to_fallback(const char* op);

// Routes `op` ("mm", "add.Tensor"; no "aten::") to the fallback, or back to its
// native kernel; `origin` says who asked (shown in the fallback log's reason).
void set(const std::string& op, bool fallback, const std::string& origin);

// The routed ops, each with its origin.
std::map<std::string, std::string> routes();

// The reason the fallback log gives for a routed call of `op`.
std::string reason(const std::string& op);

}  // namespace FLSDK_BACKEND_NS::op_routes
