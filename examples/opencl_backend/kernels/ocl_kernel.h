// Helpers of the kernels' host parts: the shapes and strides of tensors as the
// OpenCL kernels read them (runtime/device_code.h's Layout), and a launch that
// turns a failed call into an error naming the op.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include "device_code.h"
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

}  // namespace
}  // namespace ocl::kernels
