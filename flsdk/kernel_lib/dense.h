// Staging buffers for matrix and neural-network kernels (linalg, conv,
// pool, norm, softmax, loss, embedding): device-part helpers. They take the
// DeviceTensors a kernel's host part handed to its device part (device.h).
//
// Those kernels do their math on dense row-major arrays of the compute type
// (float for float32/float16/bfloat16, double for float64): BLAS needs dense
// operands, and reductions are simpler and faster on them. `load` gives such an
// array for any input (zero-copy when the input already is one), `store` writes
// a dense array into an output of any dtype and strides, rounding once.
#pragma once

#include <ATen/core/Tensor.h>

#include "device.h"
#include "dtype.h"
#include "errors.h"
#include "iter.h"

#include <cstdint>
#include <vector>

namespace FLSDK_BACKEND_NS::kernels::nn {

// The vocabulary of the library these helpers speak: the same dtype sets, Tag and
// dispatch, iterator and DeviceTensor as the elementwise kernels.
using ::FLSDK_BACKEND_NS::common::DeviceTensor;
using ::FLSDK_BACKEND_NS::common::StridedIter;
using ::FLSDK_BACKEND_NS::common::Tag;
using ::FLSDK_BACKEND_NS::common::check_dtype;
using ::FLSDK_BACKEND_NS::common::cvt;
using ::FLSDK_BACKEND_NS::common::dispatch;
using ::FLSDK_BACKEND_NS::common::map1;
using ::FLSDK_BACKEND_NS::common::opmath_t;

// Float dtypes every kernel in these families supports: common's kFloating set.
constexpr unsigned kNNFloat = ::FLSDK_BACKEND_NS::common::kFloating;

// The dtype check these kernels share: a defined tensor must be one of kNNFloat,
// or the library's dtype error naming op, device and dtype. (Devices are already
// checked by the generated wrapper: generated/register_kernels.h says what it checks.)
template <class Tensor>
inline void check_float(const char* op, const Tensor& t) {
  if (t.defined()) check_dtype<kNNFloat>(op, t.device(), t.scalar_type());
}

// A dense, row-major array of Acc holding a tensor's values in its logical
// shape (or a broadcast of it). `ptr` points either into the tensor itself or
// into `own`.
template <class Acc>
struct Dense {
  const Acc* ptr = nullptr;
  std::vector<Acc> own;
  const Acc* data() const { return ptr; }
};

inline std::vector<int64_t> contiguous_strides(c10::IntArrayRef shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    st[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

inline int64_t shape_numel(c10::IntArrayRef shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

// Converts `t` (any float dtype, any strides, broadcastable to `shape`) into
// a dense Acc array of `shape` written at `dst`.
template <class Acc>
inline void load_into(const char* op, const DeviceTensor& t, c10::IntArrayRef shape, Acc* dst) {
  const auto st = contiguous_strides(shape);
  StridedIter it(shape);
  it.add_strided(reinterpret_cast<char*>(dst), shape, st, sizeof(Acc));
  it.add(t);
  it.build();
  dispatch<kNNFloat>(op, t.device(), t.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    map1<Acc, T>(it, [](T v) { return cvt<Acc, T>(v); });
  });
}

// Dense view of `t` broadcast to `shape` (t's own shape when empty).
template <class Acc>
inline Dense<Acc> load(const char* op, const DeviceTensor& t, c10::IntArrayRef shape) {
  Dense<Acc> d;
  const bool same_shape = t.sizes().equals(shape);
  if (same_shape && t.is_contiguous() &&
      t.scalar_type() == c10::CppTypeToScalarType<Acc>::value) {
    d.ptr = t.const_data_ptr<Acc>();
    return d;
  }
  d.own.resize(static_cast<size_t>(shape_numel(shape)));
  if (!d.own.empty()) load_into<Acc>(op, t, shape, d.own.data());
  d.ptr = d.own.data();
  return d;
}

template <class Acc>
inline Dense<Acc> load(const char* op, const DeviceTensor& t) {
  return load<Acc>(op, t, t.sizes());
}

// Writes the dense row-major array `src` (in dst's logical shape) into `dst`
// (any float dtype and strides), converting once.
template <class Acc>
inline void store(const char* op, const Acc* src, const DeviceTensor& dst) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && dst.scalar_type() == c10::CppTypeToScalarType<Acc>::value) {
    Acc* o = dst.data_ptr<Acc>();
    if (o != src) std::copy(src, src + dst.numel(), o);
    return;
  }
  const auto st = contiguous_strides(dst.sizes());
  StridedIter it(dst.sizes());
  it.add(dst);
  it.add_strided(reinterpret_cast<char*>(const_cast<Acc*>(src)), dst.sizes(), st, sizeof(Acc));
  it.build();
  dispatch<kNNFloat>(op, dst.device(), dst.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    map1<T, Acc>(it, [](Acc v) { return v; });
  });
}

// A writable dense Acc array for a fresh contiguous output: the output's own
// memory when its dtype is Acc, else a staging vector that `finish` stores.
template <class Acc>
struct OutBuf {
  DeviceTensor out;
  std::vector<Acc> own;
  Acc* ptr = nullptr;
  OutBuf(const DeviceTensor& o) : out(o) {
    if (o.is_contiguous() && o.scalar_type() == c10::CppTypeToScalarType<Acc>::value) {
      ptr = o.numel() ? o.data_ptr<Acc>() : nullptr;
    } else {
      own.resize(static_cast<size_t>(o.numel()));
      ptr = own.data();
    }
  }
  Acc* data() { return ptr; }
  void finish(const char* op) {
    if (!own.empty()) store<Acc>(op, own.data(), out);
  }
};

// dispatch<kNNFloat> by compute type: f(Tag<Acc>{}) with Acc = opmath_t of t's
// dtype (double for float64, float for float32/float16/bfloat16), so a kernel
// that works on Dense<Acc> arrays is compiled twice, not once per dtype; other
// dtypes raise dispatch's error naming op, device and dtype.
template <class Tensor, class F>
inline void dispatch_compute(const char* op, const Tensor& t, F&& f) {
  dispatch<kNNFloat>(op, t.device(), t.scalar_type(),
                     [&](auto tag) { f(Tag<opmath_t<FL_T(tag)>>{}); });
}

}  // namespace FLSDK_BACKEND_NS::kernels::nn
