// acme's vector math (vec_math.h) applied to tensors: float32 tensors in any
// dense layout (contiguous, channels_last, transposed) are processed as flat
// arrays, split over the compute units. The functions return an undefined
// tensor when they do not apply (other dtypes, strided views, mismatched
// layouts, a host without a vector unit): callers then take their scalar loop.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include "kernel_lib/device.h"
#include "kernel_lib/parallel.h"
#include "vec_math.h"

namespace acme::kernels {

inline at::Tensor empty_like_dense(const at::Tensor& t) {
  return t.is_contiguous()
             ? empty_device(t.sizes(), t.scalar_type(), t.device())
             : empty_strided_device(t.sizes(), t.strides(), t.scalar_type(), t.device());
}

inline at::Tensor vec_unary_f32(const at::Tensor& self, vec::Unary v, float p0 = 0.f, float p1 = 0.f) {
  auto fn = vec::unary_f32();
  if (!fn || self.scalar_type() != at::kFloat || !self.is_non_overlapping_and_dense()) return {};
  at::Tensor out = empty_like_dense(self);
  if (out.numel() == 0) return out;
  common::launch(out, [fn, v, p0, p1, n = self.numel(), in_addr = self.const_data_ptr(),
                        out_addr = out.data_ptr()] {
    const auto* in = static_cast<const float*>(common::device_view(in_addr));
    auto* o = static_cast<float*>(common::device_view(out_addr));
    common::parallel_for(n, common::kGrainMath, [&](int64_t begin, int64_t end) {
      fn(v, in + begin, o + begin, end - begin, p0, p1);
    });
  });
  return out;
}

// In place, self = op(self), for a dense float32 self: the plain in-place loops
// are compiled for SSE2 only. False when it does not apply (the caller's loop runs).
inline bool vec_unary_f32_inplace(at::Tensor& self, vec::Unary v, float p0 = 0.f, float p1 = 0.f) {
  auto fn = vec::unary_f32();
  if (!fn || self.scalar_type() != at::kFloat || !self.is_non_overlapping_and_dense()) return false;
  if (self.numel() == 0) return true;
  common::launch(self, [fn, v, p0, p1, n = self.numel(), addr = self.data_ptr()] {
    auto* s = static_cast<float*>(common::device_view(addr));
    common::parallel_for(n, common::kGrainCheap, [&](int64_t begin, int64_t end) {
      fn(v, s + begin, s + begin, end - begin, p0, p1);
    });
  });
  return true;
}

// Both inputs float32, same sizes and strides, dense.
inline at::Tensor vec_binary_f32(const at::Tensor& a, const at::Tensor& b, vec::Binary v) {
  auto fn = vec::binary_f32();
  if (!fn || a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat ||
      a.sizes() != b.sizes() || a.strides() != b.strides() || a.device() != b.device() ||
      !a.is_non_overlapping_and_dense())
    return {};
  at::Tensor out = empty_like_dense(a);
  if (out.numel() == 0) return out;
  common::launch(out, [fn, v, n = a.numel(), xa = a.const_data_ptr(), ya = b.const_data_ptr(),
                        oa = out.data_ptr()] {
    const auto* x = static_cast<const float*>(common::device_view(xa));
    const auto* y = static_cast<const float*>(common::device_view(ya));
    auto* o = static_cast<float*>(common::device_view(oa));
    common::parallel_for(n, common::kGrainMath, [&](int64_t begin, int64_t end) {
      fn(v, x + begin, y + begin, o + begin, end - begin);
    });
  });
  return out;
}

}  // namespace acme::kernels
