// Building OpenCL C programs at run time, caching the binaries on disk, and
// launching their kernels on a stream.
#include "device_code.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>

#include "device_sources.h"
#include "state.h"

namespace ocl::runtime {
namespace {

using namespace detail;

// Every program starts with this embedded source (its helpers and Layout).
constexpr const char* kPrelude = "kernels/prelude.cl";
// OpenCL C 1.2: what every OpenCL 1.2+ driver compiles.
// Correctly rounded float division and sqrt, as the CPU computes them (OpenCL
// allows 2.5 ulp otherwise).
constexpr const char* kBuildOptions = "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt";

struct Kernel {
  std::mutex mutex;  // clSetKernelArg + enqueue are one step per kernel object
  cl_kernel kernel = nullptr;
};

struct Program {
  cl_program program = nullptr;
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

std::mutex g_programs_mutex;
// (device, program name) -> built program
std::map<std::pair<int, std::string>, std::unique_ptr<Program>> g_programs;

std::uint64_t fnv1a(const std::string& s, std::uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// The cache key names everything a binary depends on: the driver, the device,
// the build options and the source text.
std::string cache_key(int device, const std::string& text) {
  const driver::Driver& drv = driver::get();
  const driver::DeviceInfo& info = drv.devices[device];
  std::ostringstream key;
  key << drv.platform_name << '|' << drv.platform_version << '|' << info.name << '|'
      << info.driver_version << '|' << kBuildOptions << '|';
  const std::string head = key.str();
  char name[40];
  std::snprintf(name, sizeof name, "%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(head + text, 14695981039346656037ULL)),
                static_cast<unsigned long long>(fnv1a(text + head, 0x9e3779b97f4a7c15ULL)));
  return name;
}

bool make_dirs(const std::string& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

std::vector<unsigned char> read_cached(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// Written to a temporary file and renamed: a reader never sees half a binary,
// and processes building the same program at once do not collide.
void write_cached(const std::string& dir, const std::string& file, const std::vector<unsigned char>& bin) {
  if (!make_dirs(dir)) return;
  const std::string tmp = file + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bin.data()), static_cast<std::streamsize>(bin.size()));
    if (!out) return;
  }
  std::rename(tmp.c_str(), file.c_str());
}

std::string build_log(cl_program program, cl_device_id id) {
  std::size_t n = 0;
  driver::cl->clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) driver::cl->clGetProgramBuildInfo(program, id, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (log.size() > 4000) log = log.substr(0, 4000) + "\n...";
  return log;
}

// Builds (or loads from the cache) the program `name` with `text` for `device`.
Status build(int device, const std::string& name, const std::string& text, cl_program* out) {
  const driver::Driver& drv = driver::get();
  cl_device_id id = drv.devices[device].id;
  const std::string dir = kernel_cache_dir();
  const std::string file = dir.empty() ? "" : dir + "/" + cache_key(device, text) + ".bin";
  cl_int rc = CL_SUCCESS;
  if (!file.empty()) {
    std::vector<unsigned char> bin = read_cached(file);
    if (!bin.empty()) {
      const unsigned char* data = bin.data();
      const std::size_t size = bin.size();
      cl_int bin_status = CL_SUCCESS;
      cl_program p = driver::cl->clCreateProgramWithBinary(drv.context, 1, &id, &size, &data, &bin_status, &rc);
      if (rc == CL_SUCCESS && bin_status == CL_SUCCESS &&
          driver::cl->clBuildProgram(p, 1, &id, kBuildOptions, nullptr, nullptr) == CL_SUCCESS) {
        *out = p;
        return Status::Ok;
      }
      if (p) driver::cl->clReleaseProgram(p);  // a binary the driver refuses: build again
    }
  }
  const char* src = text.c_str();
  const std::size_t len = text.size();
  cl_program p = driver::cl->clCreateProgramWithSource(drv.context, 1, &src, &len, &rc);
  if (rc != CL_SUCCESS) return cl_fail("clCreateProgramWithSource", rc, device);
  rc = driver::cl->clBuildProgram(p, 1, &id, kBuildOptions, nullptr, nullptr);
  if (rc != CL_SUCCESS) {
    const std::string log = build_log(p, id);
    driver::cl->clReleaseProgram(p);
    return fail(Status::Error, "building " + name + " for ocl:" + std::to_string(device) + " (" +
                                   drv.devices[device].name + ") failed: " + driver::error_name(rc) +
                                   "\n" + log);
  }
  if (!file.empty()) {
    std::size_t size = 0;
    if (driver::cl->clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) == CL_SUCCESS &&
        size) {
      std::vector<unsigned char> bin(size);
      unsigned char* data = bin.data();
      if (driver::cl->clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr) == CL_SUCCESS)
        write_cached(dir, file, bin);
    }
  }
  *out = p;
  return Status::Ok;
}

std::string prelude_text() {
  const device_sources::DeviceSource* prelude = device_sources::find(kPrelude);
  return prelude ? std::string(prelude->text, prelude->size) + "\n" : std::string();
}

Status find_kernel(int device, const std::string& name, const std::string* generated_text,
                   const char* kernel_name, Kernel** out) {
  Program* program = nullptr;
  {
    std::lock_guard lock(g_programs_mutex);
    auto& slot = g_programs[{device, name}];
    if (!slot) {
      std::string text;
      if (generated_text) {
        text = prelude_text() + *generated_text;
      } else {
        const device_sources::DeviceSource* src = device_sources::find(name.c_str());
        if (!src)
          return fail(Status::InvalidValue, "no embedded OpenCL source " + name +
                                                " (kernels/*.cl: run `flsdk gen` and rebuild)");
        text = (name == kPrelude ? std::string() : prelude_text()) + std::string(src->text, src->size);
      }
      auto built = std::make_unique<Program>();
      // Built under the lock: the first launch of a program pays for it once.
      if (Status s = build(device, name, text, &built->program); s != Status::Ok) {
        g_programs.erase({device, name});
        return s;
      }
      slot = std::move(built);
    }
    program = slot.get();
  }
  std::lock_guard lock(program->mutex);
  auto& k = program->kernels[kernel_name];
  if (!k) {
    cl_int rc = CL_SUCCESS;
    cl_kernel kernel = driver::cl->clCreateKernel(program->program, kernel_name, &rc);
    if (rc != CL_SUCCESS) {
      program->kernels.erase(kernel_name);
      return fail(Status::Error, std::string("clCreateKernel(") + kernel_name + ") of " + name +
                                     " failed on ocl:" + std::to_string(device) + ": " +
                                     driver::error_name(rc));
    }
    k = std::make_unique<Kernel>();
    k->kernel = kernel;
  }
  *out = k.get();
  return Status::Ok;
}

// One small buffer per device, for the buffer arguments of empty tensors.
Status dummy_buffer(int device, cl_mem* out) {
  static std::mutex mutex;
  static std::map<int, cl_mem> buffers;
  std::lock_guard lock(mutex);
  cl_mem& mem = buffers[device];
  if (!mem) {
    cl_int rc = CL_SUCCESS;
    mem = driver::cl->clCreateBuffer(driver::get().context, CL_MEM_READ_WRITE, 64, nullptr, &rc);
    if (rc != CL_SUCCESS) {
      mem = nullptr;
      return cl_fail("clCreateBuffer", rc, device);
    }
  }
  *out = mem;
  return Status::Ok;
}

Status launch(int device, Stream stream, const std::string& name, const std::string* generated_text,
              const char* kernel_name, const Range& range, std::initializer_list<KernelArg> args) {
  if (Status s = check_device(device); s != Status::Ok) return s;
  Kernel* kernel = nullptr;
  if (Status s = find_kernel(device, name, generated_text, kernel_name, &kernel); s != Status::Ok) return s;
  // Resolve every address before touching the kernel object.
  struct Resolved {
    cl_mem mem;
    cl_ulong offset;
  };
  std::vector<Resolved> resolved;
  for (const KernelArg& a : args) {
    if (!a.buffer) continue;
    cl_mem mem = nullptr;
    std::size_t offset = 0;
    if (!a.address) {
      // An empty tensor has no storage (data_ptr() is null): the kernel reads none
      // of it, but OpenCL wants a buffer there, so it gets the device's dummy one.
      if (Status s = dummy_buffer(device, &mem); s != Status::Ok) return s;
      resolved.push_back({mem, 0});
      continue;
    }
    // One byte must lie inside the allocation; the kernel's own bounds do the rest.
    if (!resolve(device, a.address, 1, (std::string(kernel_name) + ": a buffer argument").c_str(), &mem, &offset))
      return Status::InvalidValue;
    resolved.push_back({mem, static_cast<cl_ulong>(offset)});
  }
  std::size_t global[3], local[3];
  bool has_local = false;
  for (unsigned d = 0; d < range.dims; ++d) {
    local[d] = range.local[d];
    global[d] = range.global[d];
    if (local[d]) {
      has_local = true;
      global[d] = (global[d] + local[d] - 1) / local[d] * local[d];
    }
  }
  Queue* queue = queue_of(device, stream);
  std::lock_guard lock(kernel->mutex);
  cl_uint index = 0;
  std::size_t next_buffer = 0;
  cl_int rc = CL_SUCCESS;
  for (const KernelArg& a : args) {
    if (a.buffer) {
      const Resolved& r = resolved[next_buffer++];
      rc = driver::cl->clSetKernelArg(kernel->kernel, index++, sizeof(cl_mem), &r.mem);
      if (rc == CL_SUCCESS) rc = driver::cl->clSetKernelArg(kernel->kernel, index++, sizeof(cl_ulong), &r.offset);
    } else {
      rc = driver::cl->clSetKernelArg(kernel->kernel, index++, a.value.size(), a.value.data());
    }
    if (rc != CL_SUCCESS)
      return fail(Status::InvalidValue, std::string("clSetKernelArg(") + kernel_name + ", " +
                                            std::to_string(index - 1) + ") failed: " + driver::error_name(rc));
  }
  cl_event done = nullptr;
  hold_back(queue);
  rc = driver::cl->clEnqueueNDRangeKernel(queue->queue, kernel->kernel, range.dims, nullptr, global,
                                          has_local ? local : nullptr, 0, nullptr, &done);
  if (rc != CL_SUCCESS)
    return fail(rc == CL_OUT_OF_RESOURCES || rc == CL_MEM_OBJECT_ALLOCATION_FAILURE ? Status::OutOfMemory
                                                                                    : Status::Error,
                std::string("clEnqueueNDRangeKernel(") + kernel_name + ") failed on ocl:" +
                    std::to_string(device) + ": " + driver::error_name(rc));
  queued(queue, done);
  return Status::Ok;
}

}  // namespace

static_assert(sizeof(Layout) == 8 + 8 * kLayoutDims * 4, "Layout must match prelude.cl");

Status launch_kernel(int device, Stream stream, const char* source_path, const char* kernel,
                     const Range& range, std::initializer_list<KernelArg> args) {
  return launch(device, stream, source_path, nullptr, kernel, range, args);
}

Status launch_generated_kernel(int device, Stream stream, const std::string& name,
                               const std::string& source, const char* kernel, const Range& range,
                               std::initializer_list<KernelArg> args) {
  return launch(device, stream, name, &source, kernel, range, args);
}

std::string kernel_cache_dir() {
  if (const char* env = std::getenv("OCL_KERNEL_CACHE"); env && *env)
    return std::string(env) == "off" ? std::string() : std::string(env);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/torch_fl_ocl/kernels";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/torch_fl_ocl/kernels";
  return "";
}

bool device_has_fp64(int device) { return driver::get().devices[device].fp64; }

}  // namespace ocl::runtime
