// Helpers of the kernels' host parts: the shapes and strides of tensors as the
// OpenCL kernels read them (runtime/device_code.h's Layout), and a launch that
// turns a failed call into an error naming the op.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <map>
#include <mutex>
#include <string>

#include "device_code.h"
#include "device_sources.h"
#include "kernel_api.h"

namespace ocl::kernels {
namespace {

// Layout of a contiguous output of `shape` and up to two inputs broadcast to it
// (stride 0 where an input has size 1 or lacks the dim). Fails, naming the op,
// above runtime::kLayoutDims dims.
inline runtime::Layout broadcast_layout(const char* op, at::IntArrayRef shape,
                                        std::initializer_list<const at::Tensor*> inputs) {
  runtime::Layout L;
  const int nd = static_cast<int>(shape.size());
  TORCH_CHECK(nd <= runtime::kLayoutDims, "ocl: ", op, ": tensors of ", nd,
              " dims are not supported by the OpenCL kernel (at most ", runtime::kLayoutDims, ")");
  L.ndim = nd;
  std::int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    L.sizes[d] = shape[d];
    L.strides[0][d] = stride;
    stride *= shape[d];
  }
  int slot = 1;
  for (const at::Tensor* t : inputs) {
    const int td = static_cast<int>(t->dim());
    for (int d = 0; d < nd; ++d) {
      const int src = d - (nd - td);
      L.strides[slot][d] = (src < 0 || t->size(src) == 1) ? 0 : t->stride(src);
    }
    ++slot;
  }
  return L;
}

inline void launch(const char* op, int device, const char* source, const char* kernel,
                   const runtime::Range& range, std::initializer_list<runtime::KernelArg> args) {
  check_status(runtime::launch_kernel(device, launch_stream(device), source, kernel, range, args), op);
}

// The text of the embedded source `path` (a kernels/*.cl file) specialised by
// `defines` (prepended), made once per distinct `defines` and kept for the
// process's life: launch_generated_kernel caches its program by this text.
inline const std::string& specialised_source(const char* path, const std::string& defines) {
  static std::mutex mutex;
  static std::map<std::string, std::string> texts;
  const std::string key = std::string(path) + "\n" + defines;
  std::lock_guard lock(mutex);
  auto it = texts.find(key);
  if (it != texts.end()) return it->second;
  const device_sources::DeviceSource* s = device_sources::find(path);
  TORCH_CHECK(s, "ocl: no embedded OpenCL source ", path, " (run `flsdk gen` and rebuild)");
  return texts.emplace(key, defines + std::string(s->text, s->size)).first->second;
}

// Queues `kernel` of `path` specialised by `defines` (specialised_source).
inline void launch_specialised(const char* op, int device, const char* path, const std::string& defines,
                               const char* kernel, const runtime::Range& range,
                               std::initializer_list<runtime::KernelArg> args) {
  check_status(runtime::launch_generated_kernel(device, launch_stream(device), std::string(path) + "\n" + defines,
                                                specialised_source(path, defines), kernel, range, args),
               op);
}

}  // namespace
}  // namespace ocl::kernels
