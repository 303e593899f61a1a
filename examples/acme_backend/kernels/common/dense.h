// Staging buffers for acme's matrix and neural-network kernels (linalg, conv,
// pool, norm, softmax, loss, embedding): device-part helpers. They take the
// DeviceTensors a kernel's host part handed to its device part (common/device.h).
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
#include <type_traits>
#include <vector>

namespace acme::kernels::nn {

namespace cm = ::acme::common;

// Float dtypes every kernel in these families supports.
constexpr unsigned kNNFloat = cm::kFloating;

// The dtype check these kernels share: a defined tensor must be one of kNNFloat,
// or the acme dtype error naming op, device and dtype. (Devices are already
// checked by the generated wrapper: docs/architecture.md, "Wrapper -> kernel".)
template <class Tensor>
inline void check_float(const char* op, const Tensor& t) {
  if (t.defined() && !(cm::dtype_bit(t.scalar_type()) & kNNFloat))
    cm::fail_dtype(op, t.device(), t.scalar_type(), kNNFloat);
}

// Compute type of a float element type: double for float64, float otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

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
inline void load_into(const char* op, const cm::DeviceTensor& t, c10::IntArrayRef shape, Acc* dst) {
  const auto st = contiguous_strides(shape);
  cm::StridedIter it(shape);
  it.add_strided(reinterpret_cast<char*>(dst), shape, st, sizeof(Acc));
  it.add(t);
  it.build();
  cm::dispatch<kNNFloat>(op, t.device(), t.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    cm::map1<Acc, T>(it, [](T v) { return cm::cvt<Acc, T>(v); });
  });
}

// Dense view of `t` broadcast to `shape` (t's own shape when empty).
template <class Acc>
inline Dense<Acc> load(const char* op, const cm::DeviceTensor& t, c10::IntArrayRef shape) {
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
inline Dense<Acc> load(const char* op, const cm::DeviceTensor& t) {
  return load<Acc>(op, t, t.sizes());
}

// Writes the dense row-major array `src` (in dst's logical shape) into `dst`
// (any float dtype and strides), converting once.
template <class Acc>
inline void store(const char* op, const Acc* src, const cm::DeviceTensor& dst) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous() && dst.scalar_type() == c10::CppTypeToScalarType<Acc>::value) {
    Acc* o = dst.data_ptr<Acc>();
    if (o != src) std::copy(src, src + dst.numel(), o);
    return;
  }
  const auto st = contiguous_strides(dst.sizes());
  cm::StridedIter it(dst.sizes());
  it.add(dst);
  it.add_strided(reinterpret_cast<char*>(const_cast<Acc*>(src)), dst.sizes(), st, sizeof(Acc));
  it.build();
  cm::dispatch<kNNFloat>(op, dst.device(), dst.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    cm::map1<T, Acc>(it, [](Acc v) { return v; });
  });
}

// A writable dense Acc array for a fresh contiguous output: the output's own
// memory when its dtype is Acc, else a staging vector that `finish` stores.
template <class Acc>
struct OutBuf {
  cm::DeviceTensor out;
  std::vector<Acc> own;
  Acc* ptr = nullptr;
  OutBuf(const cm::DeviceTensor& o) : out(o) {
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

// Runs f(Tag<Acc>{}) with the compute type of a float dtype, or raises the
// acme dtype error naming op, device and dtype.
template <class Tensor, class F>
inline void dispatch_compute(const char* op, const Tensor& t, F&& f) {
  const auto st = t.scalar_type();
  if (st == c10::ScalarType::Double) {
    f(cm::Tag<double>{});
  } else if (st == c10::ScalarType::Float || st == c10::ScalarType::Half ||
             st == c10::ScalarType::BFloat16) {
    f(cm::Tag<float>{});
  } else {
    cm::fail_dtype(op, t.device(), st, kNNFloat);
  }
}

}  // namespace acme::kernels::nn
