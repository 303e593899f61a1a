// The ops this build registers natively, for torch_fl_<backend>._C.native_ops().
#pragma once

#include <string>
#include <vector>

#include "device_config.h"

namespace FLSDK_BACKEND_NS {

// aten overload names ("add.Tensor") and the backend's own ops ("<backend>::name").
std::vector<std::string> native_op_names();

}  // namespace FLSDK_BACKEND_NS
