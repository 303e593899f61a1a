// Checks of the runtime adapter against what its reference promises
// (runtime_adapter.h, the scaffold's docs/runtime-adapter.md), run on the
// backend's own runtime: every backend's generated tests call them
// (tests/generated/test_<name>_adapter.py, through _C._adapter_contract), on the
// simulated device before silicon and on the driver after.
#pragma once

#include <string>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::adapter_contract {

struct Result {
  std::string claim;   // an id docs/runtime-adapter.md lists ("event_never_recorded")
  std::string status;  // "ok", "fail" or "skip"
  std::string detail;  // what went wrong, or why it was skipped
};

// Runs every check on `device` (the runtime is initialized). Never throws.
std::vector<Result> run(int device);

}  // namespace FLSDK_BACKEND_NS::adapter_contract
