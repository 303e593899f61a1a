// Loading the OpenCL driver: finding an ICD library, its platform and devices.
#include "driver.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

namespace ocl::runtime::driver {

const cl_icd_dispatch* cl = nullptr;

namespace {

Driver g_driver;
std::once_flag g_once;
bool g_ok = false;
std::string g_error;

using IcdGetPlatforms = cl_int (*)(cl_uint, cl_platform_id*, cl_uint*);
using GetExtensionAddress = void* (*)(const char*);

// ICD libraries to try, in order: OCL_DRIVER (a path, or several separated by
// ':'), then the libraries the Khronos loader's vendors folder names.
std::vector<std::string> candidate_libraries() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("OCL_DRIVER"); env && *env) {
    std::string all(env);
    for (std::size_t start = 0; start <= all.size();) {
      std::size_t end = all.find(':', start);
      if (end == std::string::npos) end = all.size();
      if (end > start) out.push_back(all.substr(start, end - start));
      start = end + 1;
    }
    return out;  // explicit: nothing else is tried
  }
  const char* vendors = std::getenv("OCL_ICD_VENDORS");
  std::string dir = vendors && *vendors ? vendors : "/etc/OpenCL/vendors";
  if (DIR* d = opendir(dir.c_str())) {
    std::vector<std::string> files;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 4 && name.substr(name.size() - 4) == ".icd") files.push_back(dir + "/" + name);
    }
    closedir(d);
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f);
      std::string lib;
      std::getline(in, lib);
      while (!lib.empty() && (lib.back() == '\n' || lib.back() == '\r' || lib.back() == ' ')) lib.pop_back();
      if (!lib.empty()) out.push_back(lib);
    }
  }
  return out;
}

std::string device_string(cl_device_id d, cl_device_info what) {
  std::size_t n = 0;
  if (cl->clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  cl->clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  std::size_t n = 0;
  if (cl->clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  cl->clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// One ICD library: its first platform that has devices.
bool try_library(const std::string& path, int max_devices, std::string* why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *why = path + ": " + dlerror();
    return false;
  }
  auto get_address = reinterpret_cast<GetExtensionAddress>(dlsym(handle, "clGetExtensionFunctionAddress"));
  auto get_platforms = get_address
                           ? reinterpret_cast<IcdGetPlatforms>(get_address("clIcdGetPlatformIDsKHR"))
                           : nullptr;
  if (!get_platforms) {
    *why = path + ": not an OpenCL ICD (no clIcdGetPlatformIDsKHR)";
    return false;
  }
  cl_uint count = 0;
  cl_int rc = get_platforms(0, nullptr, &count);
  if (rc != CL_SUCCESS || count == 0) {
    *why = path + ": no platform (" + error_name(rc) + ")";
    return false;
  }
  std::vector<cl_platform_id> platforms(count);
  get_platforms(count, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    // Every object of an ICD starts with a pointer to its dispatch table.
    cl = *reinterpret_cast<cl_icd_dispatch* const*>(p);
    cl_uint n = 0;
    if (cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> ids(n);
    cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr);
    if (max_devices > 0 && ids.size() > static_cast<std::size_t>(max_devices)) ids.resize(max_devices);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(p), 0};
    cl_context ctx = cl->clCreateContext(props, static_cast<cl_uint>(ids.size()), ids.data(), nullptr,
                                         nullptr, &rc);
    if (rc != CL_SUCCESS) {
      *why = path + ": clCreateContext failed: " + error_name(rc);
      continue;
    }
    g_driver.library = path;
    g_driver.platform = p;
    g_driver.platform_name = platform_string(p, CL_PLATFORM_NAME);
    g_driver.platform_version = platform_string(p, CL_PLATFORM_VERSION);
    g_driver.context = ctx;
    for (cl_device_id id : ids) {
      DeviceInfo info;
      info.id = id;
      info.name = device_string(id, CL_DEVICE_NAME);
      info.driver_version = device_string(id, CL_DRIVER_VERSION);
      info.version = device_string(id, CL_DEVICE_VERSION);
      cl->clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof info.global_mem, &info.global_mem, nullptr);
      cl->clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof info.max_alloc, &info.max_alloc, nullptr);
      if (cl->clGetDeviceInfo(id, CL_DEVICE_SVM_CAPABILITIES, sizeof info.svm, &info.svm, nullptr) != CL_SUCCESS)
        info.svm = 0;  // OpenCL 1.2 drivers have no SVM
      const std::string ext = device_string(id, CL_DEVICE_EXTENSIONS);
      info.fp64 = ext.find("cl_khr_fp64") != std::string::npos;
      info.fp16 = ext.find("cl_khr_fp16") != std::string::npos;
      g_driver.devices.push_back(info);
    }
    return true;
  }
  if (why->empty()) *why = path + ": no platform with devices";
  return false;
}

}  // namespace

bool load(int max_devices, std::string* error) {
  std::call_once(g_once, [max_devices] {
    std::vector<std::string> libs = candidate_libraries();
    if (libs.empty()) {
      g_error = "no OpenCL driver found: set OCL_DRIVER to an ICD library (libpocl.so, ...), "
                "install one under /etc/OpenCL/vendors, or `pip install pocl-binary-distribution`";
      return;
    }
    std::string tried;
    for (const auto& lib : libs) {
      std::string why;
      if (try_library(lib, max_devices, &why)) {
        g_ok = true;
        return;
      }
      tried += (tried.empty() ? "" : "; ") + why;
    }
    g_error = "no usable OpenCL driver: " + tried;
  });
  if (!g_ok && error) *error = g_error;
  return g_ok;
}

const Driver& get() { return g_driver; }

std::string error_name(cl_int code) {
  const char* name = "unknown OpenCL error";
  switch (code) {
#define OCL_ERR(x) case x: name = #x; break;
    OCL_ERR(CL_SUCCESS) OCL_ERR(CL_DEVICE_NOT_FOUND) OCL_ERR(CL_DEVICE_NOT_AVAILABLE)
    OCL_ERR(CL_COMPILER_NOT_AVAILABLE) OCL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    OCL_ERR(CL_OUT_OF_RESOURCES) OCL_ERR(CL_OUT_OF_HOST_MEMORY) OCL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
    OCL_ERR(CL_MEM_COPY_OVERLAP) OCL_ERR(CL_IMAGE_FORMAT_MISMATCH) OCL_ERR(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    OCL_ERR(CL_BUILD_PROGRAM_FAILURE) OCL_ERR(CL_MAP_FAILURE) OCL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    OCL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) OCL_ERR(CL_COMPILE_PROGRAM_FAILURE)
    OCL_ERR(CL_LINKER_NOT_AVAILABLE) OCL_ERR(CL_LINK_PROGRAM_FAILURE) OCL_ERR(CL_DEVICE_PARTITION_FAILED)
    OCL_ERR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) OCL_ERR(CL_INVALID_VALUE) OCL_ERR(CL_INVALID_DEVICE_TYPE)
    OCL_ERR(CL_INVALID_PLATFORM) OCL_ERR(CL_INVALID_DEVICE) OCL_ERR(CL_INVALID_CONTEXT)
    OCL_ERR(CL_INVALID_QUEUE_PROPERTIES) OCL_ERR(CL_INVALID_COMMAND_QUEUE) OCL_ERR(CL_INVALID_HOST_PTR)
    OCL_ERR(CL_INVALID_MEM_OBJECT) OCL_ERR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) OCL_ERR(CL_INVALID_IMAGE_SIZE)
    OCL_ERR(CL_INVALID_SAMPLER) OCL_ERR(CL_INVALID_BINARY) OCL_ERR(CL_INVALID_BUILD_OPTIONS)
    OCL_ERR(CL_INVALID_PROGRAM) OCL_ERR(CL_INVALID_PROGRAM_EXECUTABLE) OCL_ERR(CL_INVALID_KERNEL_NAME)
    OCL_ERR(CL_INVALID_KERNEL_DEFINITION) OCL_ERR(CL_INVALID_KERNEL) OCL_ERR(CL_INVALID_ARG_INDEX)
    OCL_ERR(CL_INVALID_ARG_VALUE) OCL_ERR(CL_INVALID_ARG_SIZE) OCL_ERR(CL_INVALID_KERNEL_ARGS)
    OCL_ERR(CL_INVALID_WORK_DIMENSION) OCL_ERR(CL_INVALID_WORK_GROUP_SIZE) OCL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    OCL_ERR(CL_INVALID_GLOBAL_OFFSET) OCL_ERR(CL_INVALID_EVENT_WAIT_LIST) OCL_ERR(CL_INVALID_EVENT)
    OCL_ERR(CL_INVALID_OPERATION) OCL_ERR(CL_INVALID_GL_OBJECT) OCL_ERR(CL_INVALID_BUFFER_SIZE)
    OCL_ERR(CL_INVALID_MIP_LEVEL) OCL_ERR(CL_INVALID_GLOBAL_WORK_SIZE) OCL_ERR(CL_INVALID_PROPERTY)
    OCL_ERR(CL_INVALID_IMAGE_DESCRIPTOR) OCL_ERR(CL_INVALID_COMPILER_OPTIONS) OCL_ERR(CL_INVALID_LINKER_OPTIONS)
    OCL_ERR(CL_INVALID_DEVICE_PARTITION_COUNT) OCL_ERR(CL_INVALID_PIPE_SIZE) OCL_ERR(CL_INVALID_DEVICE_QUEUE)
    OCL_ERR(CL_INVALID_SPEC_ID) OCL_ERR(CL_MAX_SIZE_RESTRICTION_EXCEEDED)
#undef OCL_ERR
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

}  // namespace ocl::runtime::driver
