// Device storages shared with other processes (ipc.cpp), bound into the
// backend's module by python_module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::ipc {

// Adds _ipc_share, _ipc_open, _ipc_lookup and ipc_collect to `m`.
void bind(pybind11::module_& m);

}  // namespace FLSDK_BACKEND_NS::ipc
