// Device activity in torch.profiler (profiler.cpp): what the Python module
// tells torch_fl about it.
#pragma once

#include <string>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::profiler {

// Whether torch.profiler shows this backend's device work (the runtime adapter
// has the profiling primitive: config::kRuntimeHasProfiling).
bool records_device_activity();

// What the first profile asking for device activity warns when it does not.
std::string no_device_activity_message();

}  // namespace FLSDK_BACKEND_NS::profiler
