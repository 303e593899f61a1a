// Every op of the glue that moves or sets bytes: copies (host to device,
// device to host, within a device, between devices), .item(), fill_ and
// zero_. None of them reads or writes device memory from the host: bytes move
// through the runtime adapter (memcpy, and the optional memset / copy_strided)
// or through the backend's own kernels. Which path each op takes, in order:
//
// * within a device, same dtype and the same dense layout: runtime memcpy;
//   otherwise the backend's copy_ kernel (op specs), else the runtime's
//   copy_strided (device.yaml `runtime_primitives:`), else staged through host memory
//   (the bytes to the host, PyTorch's CPU copy, the bytes back);
// * host to device: the host converts (dtype, layout) in host memory, the
//   bytes go through a pinned staging block (not reused before the copy is
//   done), and a strided destination is written from a contiguous device
//   buffer as above. Without non_blocking the host then waits for the copy
//   (HostWait::CopyToDevice), as CUDA's does: the result is ready for any
//   stream, which code written for CUDA relies on;
// * device to host: a contiguous copy on the device if needed, the bytes to
//   host memory, and the host waits for them (HostWait::CopyToHost), except a
//   non_blocking copy into pinned memory, which the user synchronizes. With
//   runtime_primitives pinned_host the bytes land in a pinned block (the
//   user's pinned tensor, or a staging block copied on the host into pageable
//   memory): the runtime's memcpy only ever sees host_alloc's memory;
// * between devices: contiguous on the source device, a peer copy, then as
//   within a device on the destination;
// * fill_ / zero_ (unless the backend's fill_ kernel replaces the glue's):
//   runtime memset when the value's bytes are all equal, else copy_strided
//   from one element, else the filled bytes written from host memory.
//
// Everything else queues on the current stream and returns: the host waits
// only where a result must be on the host (host_sync.h counts each wait).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_copy_from.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/conj.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/select.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/fill.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "backend.h"
#include "glue_hooks.h"

namespace FLSDK_BACKEND_NS {
namespace {

// runtime::Dtype numbers its types as c10::ScalarType does.
static_assert(static_cast<int>(runtime::Dtype::UInt8) == static_cast<int>(c10::ScalarType::Byte));
static_assert(static_cast<int>(runtime::Dtype::Int8) == static_cast<int>(c10::ScalarType::Char));
static_assert(static_cast<int>(runtime::Dtype::Int16) == static_cast<int>(c10::ScalarType::Short));
static_assert(static_cast<int>(runtime::Dtype::Int32) == static_cast<int>(c10::ScalarType::Int));
static_assert(static_cast<int>(runtime::Dtype::Int64) == static_cast<int>(c10::ScalarType::Long));
static_assert(static_cast<int>(runtime::Dtype::Float16) == static_cast<int>(c10::ScalarType::Half));
static_assert(static_cast<int>(runtime::Dtype::Float32) == static_cast<int>(c10::ScalarType::Float));
static_assert(static_cast<int>(runtime::Dtype::Float64) == static_cast<int>(c10::ScalarType::Double));
static_assert(static_cast<int>(runtime::Dtype::Bool) == static_cast<int>(c10::ScalarType::Bool));
static_assert(static_cast<int>(runtime::Dtype::BFloat16) == static_cast<int>(c10::ScalarType::BFloat16));

bool is_device(const at::Tensor& t) { return t.device().type() == kDeviceType; }

runtime::Stream stream_of(c10::DeviceIndex device) {
  return native_stream(current_stream(device));
}

at::HostAllocator* host_allocator() { return at::getHostAllocator(kDeviceType); }

// The bytes a strided tensor spans in its storage, from its first element:
// [data_ptr, data_ptr + span) (strides are never negative in PyTorch).
std::size_t span_bytes(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return static_cast<std::size_t>(last + 1) * t.element_size();
}

// Host bytes to the device on `device`'s current stream, without making the
// host wait. `src` is copied into a pinned staging block first, unless it is
// `pinned` (the base of a pinned block the caller keeps alive and does not
// write to before the copy is done: a non_blocking copy, the user's contract).
// Either way the block is not reused before the copy is done.
void host_to_device_bytes(void* dst, const void* src, std::size_t bytes,
                          c10::DeviceIndex device, const c10::DataPtr* pinned = nullptr) {
  if (bytes == 0) return;
  auto stream = current_stream(device);
  if (pinned) {
    check_status(runtime::memcpy(dst, src, bytes, runtime::CopyKind::HostToDevice, device,
                                 native_stream(stream)),
                 "memcpy");
    if (!host_allocator()->record_event(pinned->get(), pinned->get_context(), stream))
      host_wait_stream(device, native_stream(stream), HostWait::CopyToHost, "a copy to the device");
    return;
  }
  c10::DataPtr staging = host_allocator()->allocate(bytes);
  std::memcpy(staging.get(), src, bytes);
  check_status(runtime::memcpy(dst, staging.get(), bytes, runtime::CopyKind::HostToDevice, device,
                               native_stream(stream)),
               "memcpy");
  if (!host_allocator()->record_event(staging.get(), staging.get_context(), stream))
    host_wait_stream(device, native_stream(stream), HostWait::CopyToHost, "a copy to the device");
}

// Device bytes into host memory, queued; the caller waits before reading.
void queue_device_to_host(void* dst, const void* src, std::size_t bytes, c10::DeviceIndex device) {
  if (bytes == 0) return;
  check_status(runtime::memcpy(dst, src, bytes, runtime::CopyKind::DeviceToHost, device,
                               stream_of(device)),
               "memcpy");
}

// A CPU tensor with `t`'s sizes, strides and dtype over `bytes` of host memory
// that hold t's span (host_span_of / read_span below).
at::Tensor host_alias(const at::Tensor& t, void* bytes) {
  return at::from_blob(bytes, t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(c10::kCPU));
}

// Host memory the runtime's memcpy may write: with pinned_host (a DMA engine that
// reaches registered host memory only) a block of the pinned-memory allocator,
// which takes it from host_alloc; else pageable memory. Every copy into host
// memory lands in such a tensor first (runtime_adapter.h's promise).
at::TensorOptions host_landing(c10::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(c10::kCPU).pinned_memory(config::kRuntimeHasPinnedHost);
}

// A host buffer holding a copy of t's span, read now (the host waits).
at::Tensor read_span(const at::Tensor& t, HostWait why, const char* what) {
  at::Tensor buffer = at::empty({static_cast<int64_t>(span_bytes(t))}, host_landing(at::kByte));
  queue_device_to_host(buffer.data_ptr(), t.const_data_ptr(), span_bytes(t), t.device().index());
  host_wait_stream(t.device().index(), stream_of(t.device().index()), why, what);
  return buffer;
}

// Whether the bytes of a and b may share memory: the same storage and
// intersecting spans (at::get_overlap_status answers "too hard" for every
// strided or expanded tensor).
bool may_overlap(const at::Tensor& a, const at::Tensor& b) {
  if (!a.storage().is_alias_of(b.storage())) return false;
  const auto* a0 = static_cast<const char*>(a.const_data_ptr());
  const auto* b0 = static_cast<const char*>(b.const_data_ptr());
  return a0 < b0 + span_bytes(b) && b0 < a0 + span_bytes(a);
}

bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.is_non_overlapping_and_dense();
}

std::optional<runtime::Dtype> runtime_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Byte: case c10::ScalarType::Char: case c10::ScalarType::Short:
    case c10::ScalarType::Int: case c10::ScalarType::Long: case c10::ScalarType::Half:
    case c10::ScalarType::Float: case c10::ScalarType::Double: case c10::ScalarType::Bool:
    case c10::ScalarType::BFloat16:
      return static_cast<runtime::Dtype>(static_cast<int>(t));
    default:
      return std::nullopt;
  }
}

// The runtime's copy_strided, when device.yaml lists it and it takes the call.
bool runtime_strided_copy(const at::Tensor& dst, const at::Tensor& src) {
  if constexpr (!config::kRuntimeHasCopyStrided) {
    return false;
  } else {
    auto dst_dtype = runtime_dtype(dst.scalar_type());
    auto src_dtype = runtime_dtype(src.scalar_type());
    if (!dst_dtype || !src_dtype || dst.dim() > runtime::kMaxCopyDims) return false;
    runtime::StridedCopy c{};
    c.dst = dst.data_ptr();
    c.src = src.const_data_ptr();
    c.dst_dtype = *dst_dtype;
    c.src_dtype = *src_dtype;
    c.ndim = static_cast<int>(dst.dim());
    for (int d = 0; d < c.ndim; ++d) {
      c.sizes[d] = dst.size(d);
      c.dst_strides[d] = dst.stride(d);
      c.src_strides[d] = src.stride(d);
    }
    auto device = dst.device().index();
    auto status = runtime::copy_strided(c, device, stream_of(device));
    if (status == runtime::Status::Unsupported) return false;
    check_status(status, "copy_strided");
    return true;
  }
}

// Through host memory: src's bytes to the host, PyTorch's CPU copy into dst's
// bytes, those back. A destination with gaps between its elements (a column of
// a matrix) is read first so the gaps are written back unchanged: work on
// another stream writing those gaps meanwhile would be lost, which a backend
// with a copy_ kernel or the runtime's copy_strided never risks.
void staged_copy(const at::Tensor& dst, const at::Tensor& src) {
  auto device = dst.device().index();
  at::Tensor src_bytes = read_span(src, HostWait::Staging, "a copy within the device");
  at::Tensor dst_bytes = dst.is_non_overlapping_and_dense()
      ? at::empty({static_cast<int64_t>(span_bytes(dst))},
                  at::TensorOptions().dtype(at::kByte).device(c10::kCPU))
      : read_span(dst, HostWait::Staging, "a copy within the device");
  host_alias(dst, dst_bytes.data_ptr()).copy_(host_alias(src, src_bytes.data_ptr()));
  host_to_device_bytes(dst.data_ptr(), dst_bytes.const_data_ptr(), span_bytes(dst), device);
}

void same_device_copy(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  c10::DeviceGuard guard(dst.device());
  at::Tensor src = src_in.sizes() == dst.sizes() ? src_in : src_in.expand(dst.sizes());
  if (dst.numel() == 0 || src.is_same(dst)) return;
  auto device = dst.device().index();
  if (same_dense_layout(dst, src)) {
    check_status(runtime::memcpy(dst.data_ptr(), src.const_data_ptr(), span_bytes(dst),
                                 runtime::CopyKind::DeviceToDevice, device, stream_of(device)),
                 "memcpy");
    return;
  }
  if (may_overlap(dst, src)) {
    // Partly the same memory (x[1:] = x[:-1]): copy from a snapshot of src.
    at::Tensor snapshot = at::empty(src.sizes(), src.options());
    same_device_copy(snapshot, src, non_blocking);
    same_device_copy(dst, snapshot, non_blocking);
    return;
  }
  if (hooks::native_copy(dst, src, non_blocking)) return;
  if (runtime_strided_copy(dst, src)) return;
  staged_copy(dst, src);
}

at::Tensor contiguous_on_device(const at::Tensor& src) {
  if (src.is_contiguous()) return src;
  at::Tensor out = at::empty(src.sizes(), src.options());
  same_device_copy(out, src, false);
  return out;
}

bool pinned_storage(const at::Tensor& host) {
  const auto& data = host.storage().data_ptr();
  return data.get() != nullptr && at::detail::getPrivateUse1Hooks().isPinnedPtr(data.get());
}

void host_to_device_copy(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  c10::DeviceGuard guard(dst.device());
  at::Tensor src = src_in.sizes() == dst.sizes() ? src_in : src_in.expand(dst.sizes());
  // Conversion and layout are host work, on host memory.
  at::Tensor staged = src.to(dst.scalar_type()).contiguous();
  at::Tensor target = dst.is_contiguous() ? dst : at::empty(dst.sizes(), dst.options());
  // The user's own pinned buffer goes as it is only for a non_blocking copy:
  // after a blocking one the user may overwrite it at once.
  const bool direct = non_blocking && staged.is_same(src) && pinned_storage(src);
  host_to_device_bytes(target.data_ptr(), staged.const_data_ptr(),
                       static_cast<std::size_t>(staged.nbytes()), dst.device().index(),
                       direct ? &src.storage().data_ptr() : nullptr);
  if (!target.is_same(dst)) same_device_copy(dst, target, non_blocking);
  if (!non_blocking)
    host_wait_stream(dst.device().index(), stream_of(dst.device().index()), HostWait::CopyToDevice,
                     "a copy to the device (non_blocking=False)");
}

void device_to_host_copy(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  c10::DeviceGuard guard(src_in.device());
  auto device = src_in.device().index();
  at::Tensor src = contiguous_on_device(
      src_in.sizes() == dst.sizes() ? src_in : src_in.expand(dst.sizes()));
  const bool pinned_dst = pinned_storage(dst);
  // With pinned_host a pageable dst gets the bytes through a pinned block.
  const bool into_dst = dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
                        (pinned_dst || !config::kRuntimeHasPinnedHost);
  if (into_dst && non_blocking && pinned_dst) {
    // The user synchronizes (an event, the stream) before reading dst.
    queue_device_to_host(dst.data_ptr(), src.const_data_ptr(), src.nbytes(), device);
    const auto& data = dst.storage().data_ptr();
    if (host_allocator()->record_event(data.get(), data.get_context(), current_stream(device)))
      return;
    host_wait_stream(device, stream_of(device), HostWait::CopyToHost, "a copy to the host");
    return;
  }
  at::Tensor host = into_dst ? dst : at::empty(src.sizes(), host_landing(src.scalar_type()));
  queue_device_to_host(host.data_ptr(), src.const_data_ptr(), src.nbytes(), device);
  host_wait_stream(device, stream_of(device), HostWait::CopyToHost, "a copy to the host");
  if (!into_dst) const_cast<at::Tensor&>(dst).copy_(host);
}

void peer_copy(const at::Tensor& dst, const at::Tensor& src_in) {
  at::Tensor src;
  {
    c10::DeviceGuard guard(src_in.device());
    src = contiguous_on_device(src_in.sizes() == dst.sizes() ? src_in : src_in.expand(dst.sizes()));
  }
  c10::DeviceGuard guard(dst.device());
  at::Tensor moved = at::empty(src.sizes(), src.options().device(dst.device()));
  // The peer copy runs now, outside any stream: the work queued on both
  // devices (src's producers, dst's earlier readers) finishes first.
  host_wait_stream(src.device().index(), stream_of(src.device().index()), HostWait::PeerCopy,
                   "a copy between devices");
  host_wait_stream(dst.device().index(), stream_of(dst.device().index()), HostWait::PeerCopy,
                   "a copy between devices");
  check_status(runtime::memcpy_peer(moved.data_ptr(), dst.device().index(), src.const_data_ptr(),
                                    src.device().index(), src.nbytes()),
               "memcpy_peer");
  same_device_copy(dst, moved, false);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(is_device(self) || is_device(dst), kBackendName, ": _copy_from without a ",
              kBackendName, " tensor");
  if (dst.numel() == 0) return dst;
  if (is_device(self) && is_device(dst)) {
    if (self.device() == dst.device()) same_device_copy(dst, self, non_blocking);
    else peer_copy(dst, self);
  } else if (is_device(dst)) {
    host_to_device_copy(dst, self, non_blocking);
  } else {
    device_to_host_copy(dst, self, non_blocking);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) const_cast<at::Tensor&>(dst).resize_(self.sizes());
  return copy_from(self, dst, false);
}

// A lazy conjugate or negative view (`x.conj()`, `_neg_view`) on either side of
// a copy. PyTorch's math-bit fallback would resolve the view with clone(), and
// clone() of a view of this device, unless the backend has a native clone,
// copies through _copy_from again: that recursed until the stack overflowed.
// So the glue copies the bytes as stored (both sides as plain views) and
// applies the bits that differ to the destination in place: on the device that
// queues after the copy; on the host it must wait for the copy first.
at::Tensor stored_view(const at::Tensor& t) {
  at::Tensor plain = t.is_conj() ? t.conj() : t;  // conj() of a conjugate view clears the bit
  return plain.is_neg() ? plain._neg_view() : plain;
}

at::Tensor copy_from_math_view(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool conj = self.is_conj() != dst.is_conj(), neg = self.is_neg() != dst.is_neg();
  at::Tensor into = stored_view(dst);
  const bool fix_on_host = (conj || neg) && !is_device(into);
  at::_copy_from(stored_view(self), into, non_blocking && !fix_on_host);
  // As real arithmetic (conj_physical_ would reach a DispatchStub a device
  // lacks): a conjugate negates the imaginary parts. Only complex tensors carry
  // the conjugate bit.
  at::Tensor parts = into.is_complex() ? at::view_as_real(into) : into;
  if (conj) parts.select(-1, 1).neg_();
  if (neg) parts.neg_();
  return dst;
}

at::Tensor copy_from_and_resize_math_view(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) const_cast<at::Tensor&>(dst).resize_(self.sizes());
  return copy_from_math_view(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, kBackendName, ": a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  c10::DeviceGuard guard(self.device());
  auto device = self.device().index();
  at::Tensor host = at::empty({}, host_landing(self.scalar_type()));
  queue_device_to_host(host.data_ptr(), self.const_data_ptr(), self.element_size(), device);
  host_wait_stream(device, stream_of(device), HostWait::Item, "Tensor.item()");
  return at::_local_scalar_dense(host);
}

// The value as one element of self's dtype, in host memory.
at::Tensor host_element(const at::Tensor& self, const c10::Scalar& value) {
  at::Tensor one = at::empty({}, at::TensorOptions().dtype(self.scalar_type()).device(c10::kCPU));
  one.fill_(value);
  return one;
}

// The byte every byte of `element` equals, or -1.
int uniform_byte(const at::Tensor& element) {
  const auto* bytes = static_cast<const unsigned char*>(element.const_data_ptr());
  for (std::size_t i = 1; i < element.nbytes(); ++i)
    if (bytes[i] != bytes[0]) return -1;
  return bytes[0];
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() == 0) return self;
  c10::DeviceGuard guard(self.device());
  auto device = self.device().index();
  at::Tensor element = host_element(self, value);
  const bool dense = self.is_non_overlapping_and_dense();
  if constexpr (config::kRuntimeHasMemset) {
    const int byte = uniform_byte(element);
    if (dense && byte >= 0) {
      auto status = runtime::memset(self.data_ptr(), byte, span_bytes(self), device,
                                    stream_of(device));
      if (status != runtime::Status::Unsupported) {
        check_status(status, "memset");
        return self;
      }
    }
  }
  if constexpr (config::kRuntimeHasCopyStrided) {
    at::Tensor one = at::empty({}, self.options());
    host_to_device_bytes(one.data_ptr(), element.const_data_ptr(), element.nbytes(), device);
    if (runtime_strided_copy(self, one.expand(self.sizes()))) return self;
  }
  // Filled in host memory, written back (a tensor with gaps: read first).
  at::Tensor bytes = dense ? at::empty({static_cast<int64_t>(span_bytes(self))},
                                       at::TensorOptions().dtype(at::kByte).device(c10::kCPU))
                           : read_span(self, HostWait::Staging, "fill_");
  host_alias(self, bytes.data_ptr()).fill_(value);
  host_to_device_bytes(self.data_ptr(), bytes.const_data_ptr(), span_bytes(self), device);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, kBackendName, ": fill_ only supports 0-dimension value tensor "
              "but got tensor with ", value.dim(), " dimensions");
  if (is_device(value)) {
    // A device value stays on the device: a copy from it, broadcast.
    TORCH_CHECK(value.device() == self.device(), kBackendName, ": fill_: the value is on ",
                value.device(), " but the tensor on ", self.device());
    same_device_copy(self, value.expand(self.sizes()), false);
    return self;
  }
  return at::fill_(self, value.item());
}

at::Tensor& zero(at::Tensor& self) { return at::fill_(self, 0); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  // A backend whose op specs list fill_.Scalar registers its kernel instead.
  if (!hooks::kNativeFill) m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero));
}

// Only copies reach _copy_from with a math bit set (the devices PyTorch's own
// copy_ does not handle: this one, XLA, lazy), and a process holds one flsdk
// backend, so these kernels serve this device's copies.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", TORCH_FN(copy_from_math_view));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize_math_view));
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", TORCH_FN(copy_from_math_view));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize_math_view));
}

}  // namespace FLSDK_BACKEND_NS
