// The Python binding of the backend's c10d process group (python_distributed.cpp),
// added to the backend's module by python_module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include "device_config.h"

namespace FLSDK_BACKEND_NS {

// Adds to `m`: has_collective_library, has_ipc, comm_backend, and the creator
// _create_process_group the Python glue registers with torch.distributed.
void bind_distributed(pybind11::module_& m);

}  // namespace FLSDK_BACKEND_NS
