// Kernels in OpenCL C: built by the driver at run time, cached on disk, launched
// on a stream. What kernels/*.cpp (the host parts) call; no torch, no OpenCL
// headers here, so the host parts stay plain C++.
//
//   launch_kernel(device, launch_stream(device), "kernels/pointwise.cl", "relu_f32",
//                 Range1D(n), {buffer_arg(out), buffer_arg(in), value_arg<cl_ulong>(n)});
//
// A device address (data_ptr()) is not a pointer the device can use: OpenCL
// memory is a buffer handle (README.md, "Device memory"). buffer_arg() therefore
// becomes *two* kernel arguments, the buffer holding that address and the byte
// offset into it: a kernel declares them as `__global T* x_base, ulong x_off`
// (prelude.cl's BUF(T, x) / AT(T, x) macros).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime_adapter.h"

namespace ocl::runtime {

struct KernelArg {
  bool buffer = false;
  const void* address = nullptr;     // buffer: a device address
  std::vector<unsigned char> value;  // otherwise: the bytes of a value argument
};

inline KernelArg buffer_arg(const void* device_address) {
  KernelArg a;
  a.buffer = true;
  a.address = device_address;
  return a;
}

template <class T>
KernelArg value_arg(const T& v) {
  KernelArg a;
  a.value.resize(sizeof(T));
  std::memcpy(a.value.data(), &v, sizeof(T));
  return a;
}

// Work sizes; local 0: the driver picks. Global sizes are rounded up to a
// multiple of local ones: kernels check their bounds.
struct Range {
  unsigned dims = 1;
  std::size_t global[3] = {1, 1, 1};
  std::size_t local[3] = {0, 0, 0};
};
inline Range Range1D(std::size_t n) {
  Range r;
  r.global[0] = n ? n : 1;
  return r;
}
inline Range Range2D(std::size_t x, std::size_t y, std::size_t lx, std::size_t ly) {
  Range r;
  r.dims = 2;
  r.global[0] = x ? x : 1;
  r.global[1] = y ? y : 1;
  r.local[0] = lx;
  r.local[1] = ly;
  return r;
}

// Queues kernel `kernel` of the embedded source `source_path` (a kernels/*.cl
// file, generated/device_sources.h) on `stream` of `device`, after the work
// already there, and returns. The program is built on first use (from the disk
// cache when a build of the same source, options and driver is there).
Status launch_kernel(int device, Stream stream, const char* source_path, const char* kernel,
                     const Range& range, std::initializer_list<KernelArg> args);

// The same for a source the runtime writes itself (copy_strided's conversions):
// `name` identifies it in errors and the cache key includes the text.
Status launch_generated_kernel(int device, Stream stream, const std::string& name,
                               const std::string& source, const char* kernel, const Range& range,
                               std::initializer_list<KernelArg> args);

// Where compiled programs are cached: OCL_KERNEL_CACHE, else
// $XDG_CACHE_HOME/torch_fl_ocl/kernels, else ~/.cache/torch_fl_ocl/kernels;
// OCL_KERNEL_CACHE=off disables it.
std::string kernel_cache_dir();

// Whether `device` computes in double precision (cl_khr_fp64).
bool device_has_fp64(int device);

// Layout of a strided operand, as prelude.cl's `Layout` (kept in sync by the
// static_assert in device_code.cpp): up to kLayoutDims dims, element strides of
// up to three operands (0: broadcast).
constexpr int kLayoutDims = 8;
struct Layout {
  std::int32_t ndim = 0;
  std::int32_t pad = 0;
  std::int64_t sizes[kLayoutDims] = {};
  std::int64_t strides[3][kLayoutDims] = {};
};

}  // namespace ocl::runtime
