// The OpenCL driver as this runtime reaches it: one platform's ICD, its devices,
// one context, and the names of OpenCL's error codes.
//
// No OpenCL ICD loader (libOpenCL.so) is needed: the runtime loads the vendor's
// ICD library itself (the one a loader would pick from /etc/OpenCL/vendors, or
// OCL_DRIVER=<path>, which torch_fl_ocl sets to the pocl-binary-distribution
// wheel's PoCL when nothing else is configured) and calls the driver through the
// dispatch table every OpenCL object of an ICD starts with (Khronos cl_icd.h).
// That is what a loader does too; doing it here keeps the wheel free of a
// system package and lets the error say which driver it tried.
#pragma once

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_icd.h>

#include <string>
#include <vector>

namespace ocl::runtime::driver {

// The driver's entry points (the platform's dispatch table); valid after load().
extern const cl_icd_dispatch* cl;

struct DeviceInfo {
  cl_device_id id = nullptr;
  std::string name, driver_version, version;
  cl_ulong global_mem = 0, max_alloc = 0;
  cl_device_svm_capabilities svm = 0;
  bool fp64 = false, fp16 = false;
};

struct Driver {
  std::string library;        // the ICD library loaded
  std::string platform_name, platform_version;
  cl_platform_id platform = nullptr;
  cl_context context = nullptr;
  std::vector<DeviceInfo> devices;
};

// Loads the driver once (thread-safe); false with `*error` set on failure.
bool load(int max_devices, std::string* error);
const Driver& get();

// "CL_OUT_OF_RESOURCES (-5)".
std::string error_name(cl_int code);

}  // namespace ocl::runtime::driver
