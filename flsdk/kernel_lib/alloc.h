// Output allocation and input preparation for elementwise kernels: broadcast
// shapes, PyTorch type promotion (at::result_type rules, including wrapped
// Python scalars), output allocation on the backend's device, and the library's
// dtype conversion loop (used when inputs differ from the compute dtype).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Scalar.h>

#include "device.h"
#include "dtype.h"
#include "errors.h"
#include "iter.h"

#include <initializer_list>
#include <vector>

namespace FLSDK_BACKEND_NS::common {

using TensorList = std::initializer_list<const at::Tensor*>;

// Broadcast shape of all defined tensors (numpy rules), or a clear error.
inline std::vector<int64_t> broadcast_shape(const char* op, TensorList ins) {
  std::vector<int64_t> out;
  for (const at::Tensor* t : ins) {
    if (!t || !t->defined()) continue;
    auto s = t->sizes();
    if (s.size() > out.size()) out.insert(out.begin(), s.size() - out.size(), 1);
    const size_t off = out.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (o == s[i] || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::ostringstream msg;
      msg << kBackend << ": " << op << ": shapes are not broadcastable:";
      for (const at::Tensor* u : ins)
        if (u && u->defined()) msg << " " << u->sizes();
      TORCH_CHECK(false, msg.str());
    }
  }
  return out;
}

// PyTorch's promotion of the defined tensors (and optional Scalars), the same
// rules as at::result_type: dimensioned tensors win over 0-dim ones, which win
// over wrapped numbers, within the same category.
inline at::ScalarType promote(TensorList ins, std::initializer_list<const at::Scalar*> scalars = {}) {
  at::native::ResultTypeState st;
  for (const at::Tensor* t : ins)
    if (t && t->defined()) st = at::native::update_result_type_state(*t, st);
  for (const at::Scalar* s : scalars)
    if (s) st = at::native::update_result_type_state(*s, st);
  return at::native::result_type(st);
}

// The device the op runs on: the first tensor that is not a CPU scalar
// (the generated wrapper has checked that all of them share it).
inline const at::Tensor& device_tensor(const char* op, TensorList ins) {
  const at::Tensor* first = nullptr;
  for (const at::Tensor* t : ins) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    if (!is_cpu_scalar(*t)) return *t;
  }
  TORCH_CHECK(first != nullptr, kBackend, ": ", op, ": no tensor arguments");
  return *first;
}

// Output of broadcast shape `shape` and dtype `dtype` on the inputs' device.
// If an input already has the full shape and is dense (e.g. channels_last or
// transposed), the output copies its strides, as PyTorch's CPU kernels do;
// otherwise it is contiguous.
inline at::Tensor alloc_output(const char* op, TensorList ins, c10::IntArrayRef shape,
                               at::ScalarType dtype) {
  const at::Tensor& dev = device_tensor(op, ins);
  if (dev.device().type() != c10::DeviceType::PrivateUse1)
    return at::empty(shape, dev.options().dtype(dtype));
  for (const at::Tensor* t : ins) {
    if (!t || !t->defined() || is_cpu_scalar(*t)) continue;
    if (t->sizes() == shape && !t->is_contiguous() && t->is_non_overlapping_and_dense()) {
      return ::FLSDK_BACKEND_NS::empty_strided_device(shape, t->strides(), dtype, dev.device());
    }
  }
  return ::FLSDK_BACKEND_NS::empty_device(shape, dtype, dev.device());
}

// out <- in with dtype conversion, queued on the stream; shapes must be
// broadcast-compatible with out (out's shape is the iteration shape). Any
// layout on either side. Defined once, in convert.cpp (compiled with the glue
// of a backend whose device parts run as host code, runtime_primitives:
// host_kernels): its 100 dtype-pair loops would otherwise be compiled again in
// every kernel file that converts.
void convert_into(const char* op, const at::Tensor& out, const at::Tensor& in);

// `t` converted to dtype `st` (same device, contiguous), or `t` itself if it
// already has that dtype. A CPU scalar stays a CPU scalar (converted on the
// host, in its own memory). Defined in convert.cpp, as convert_into.
at::Tensor cast(const char* op, const at::Tensor& t, at::ScalarType st);

// A CPU scalar or 1-element device tensor as a Scalar (a tensor argument torch
// treats as a value, e.g. masked_fill's). A device tensor's value is copied to
// the host after the work queued before: the host waits, as CUDA's item() does.
inline at::Scalar tensor_to_scalar(const char* op, const at::Tensor& t) {
  FL_CHECK_T(t.numel() == 1, op, t, "expected a 1-element tensor, got shape ", t.sizes());
  if (!t.device().is_cpu()) return t.item();
  at::Scalar r;
  dispatch<kAll>(op, t.device(), t.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    const T v = *static_cast<const T*>(t.const_data_ptr());
    if constexpr (std::is_same_v<T, bool>) r = at::Scalar(v);
    else if constexpr (is_floating_v<T>) r = at::Scalar(static_cast<double>(v));
    else r = at::Scalar(static_cast<int64_t>(v));
  });
  return r;
}

// Everything an elementwise kernel needs: the output (allocated), and the
// inputs converted to the compute dtype.
struct Elementwise {
  at::Tensor out;
  at::ScalarType compute;
  std::vector<at::Tensor> in;
};

// Prepares an elementwise op: compute dtype = promotion of the inputs (or
// `compute` if given), output dtype = compute dtype (or `out_dtype`).
inline Elementwise prepare(const char* op, TensorList ins,
                           std::optional<at::ScalarType> compute = std::nullopt,
                           std::optional<at::ScalarType> out_dtype = std::nullopt) {
  Elementwise e;
  e.compute = compute ? *compute : promote(ins);
  auto shape = broadcast_shape(op, ins);
  e.out = alloc_output(op, ins, shape, out_dtype ? *out_dtype : e.compute);
  for (const at::Tensor* t : ins) e.in.push_back(cast(op, *t, e.compute));
  return e;
}

// Iterator over out and the prepared inputs.
inline StridedIter make_iter(const Elementwise& e) {
  StridedIter it(e.out.sizes());
  it.add(e.out);
  for (const auto& t : e.in) it.add(t);
  it.build();
  return it;
}

}  // namespace FLSDK_BACKEND_NS::common
