// The ops this build registers natively, for torch_fl_<backend>._C.native_ops().
#pragma once

#include <string>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS {

// aten overload names ("add.Tensor") and the backend's own ops ("<backend>::name").
std::vector<std::string> native_op_names();

// The native aten overloads whose calls torch_fl.set_op_route can send to the CPU
// fallback (those with a CPU kernel or CPU reference op; not the backend's own ops).
std::vector<std::string> routable_op_names();

}  // namespace FLSDK_BACKEND_NS
