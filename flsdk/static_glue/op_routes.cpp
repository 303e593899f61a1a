// Per-op routing at run time (op_routes.h).
#include "op_routes.h"

#include <mutex>
#include <shared_mutex>
#include <string_view>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::op_routes {

std::atomic<bool> g_any_routed{false};

namespace {

std::shared_mutex g_mutex;
// op ("mm", "add.Tensor") -> origin ("torch_fl.set_op_route", "TORCH_FL_OP_ROUTES").
// Transparent comparison: wrappers look up string literals without a copy.
std::map<std::string, std::string, std::less<>> g_routes;

}  // namespace

bool to_fallback(const char* op) {
  std::string_view name(op);
  std::shared_lock<std::shared_mutex> lock(g_mutex);
  if (g_routes.find(name) != g_routes.end()) return true;
  auto dot = name.find('.');
  return dot != std::string_view::npos && g_routes.find(name.substr(0, dot)) != g_routes.end();
}

void set(const std::string& op, bool fallback, const std::string& origin) {
  std::unique_lock<std::shared_mutex> lock(g_mutex);
  if (fallback) {
    g_routes[op] = origin;
  } else {
    g_routes.erase(op);
  }
  g_any_routed.store(!g_routes.empty(), std::memory_order_relaxed);
}

std::map<std::string, std::string> routes() {
  std::shared_lock<std::shared_mutex> lock(g_mutex);
  return {g_routes.begin(), g_routes.end()};
}

std::string reason(const std::string& op) {
  std::shared_lock<std::shared_mutex> lock(g_mutex);
  auto it = g_routes.find(op);
  if (it == g_routes.end()) it = g_routes.find(op.substr(0, op.find('.')));
  const std::string origin = it == g_routes.end() ? "set_op_route" : it->second;
  return "routed to the CPU (" + origin + ")";
}

}  // namespace FLSDK_BACKEND_NS::op_routes
