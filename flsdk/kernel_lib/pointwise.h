// Drivers for elementwise kernels: prepare (promote, broadcast, allocate,
// convert inputs), dispatch on the compute dtype, run the typed loop.
// The op body is given as a *factory*: a generic lambda taking a Tag<T> of the
// compute dtype and returning the element functor, so it can convert Scalars
// to the compute type once, outside the loop:
//
//   return unary_kernel<kFloating>(op, self, float_compute(self.scalar_type()),
//       [](auto tag) { using M = opmath_t<FL_T(tag)>;
//                      return [](M x) { return std::exp(x); }; });
//
// Element functors get values in opmath_t<T> (float for float16/bfloat16) and
// their result is rounded once into the output dtype. Loops are split over
// the compute units (parallel.h): element functors must be pure.
//
// The host part (promotion, broadcasting, allocation, calling the factory)
// runs in the caller; the loop is the device part, queued on the stream
// (device.h). So the factory runs on the host and the element functor it
// returns travels with the work: it must hold values, not references.
#pragma once

#include "device_config.h"  // FLSDK_BACKEND_NS

#include <c10/core/DefaultDtype.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>

#include "alloc.h"
#include "device.h"

#include <array>
#include <optional>

namespace FLSDK_BACKEND_NS::common {

// Dtype that float-valued ops (exp, div, mean...) compute in: integral and
// bool inputs promote to the default float dtype, as in torch.
inline at::ScalarType float_compute(at::ScalarType st) {
  if (c10::isIntegralType(st, /*includeBool=*/true))
    return c10::typeMetaToScalarType(c10::get_default_dtype());
  return st;
}

// Output element type: `void` = the compute type, or a fixed type (bool for
// predicates). Fixing it at compile time keeps instantiations to one loop per
// compute dtype.
template <class OutT, class T>
using out_t = std::conditional_t<std::is_void_v<OutT>, T, OutT>;

template <class OutT>
inline at::ScalarType out_dtype_for(at::ScalarType compute) {
  if constexpr (std::is_void_v<OutT>) return compute;
  else return c10::CppTypeToScalarType<OutT>::value;
}

// Fast path shared by the drivers: every input already has the compute dtype,
// the same shape and a contiguous layout on the same device. Skips promotion,
// broadcasting and the iterator, which dominate the cost of tiny tensors.
inline bool all_plain(at::ScalarType compute, std::initializer_list<const at::Tensor*> ins) {
  const at::Tensor& first = **ins.begin();
  for (const at::Tensor* t : ins) {
    if (t->scalar_type() != compute || !t->is_contiguous() || t->sizes() != first.sizes() ||
        t->device() != first.device())
      return false;
  }
  return true;
}

// The fast path's iterator: every operand plain (the compute dtype, the output's
// shape, contiguous, on the device) or a wrapped number (`value`: a CPU 0-dim
// tensor already cast to the compute dtype, as prepare() casts it, read as a
// broadcast value). A few stores instead of promotion, broadcasting and dims
// merging: what the host pays for a tiny op. Its device part is the iterator
// path's own (launch_map* below), so each op's loops are compiled once.
inline StridedIter plain_iter(const at::Tensor& out, std::initializer_list<const at::Tensor*> ins,
                              const at::Tensor* value = nullptr) {
  const int64_t n = out.numel();
  const int64_t shape[1] = {n};
  const int64_t unit[1] = {1};
  StridedIter it{c10::IntArrayRef(shape)};
  it.add_strided(static_cast<char*>(out.data_ptr()), shape, unit, out.element_size());
  for (const at::Tensor* t : ins)
    it.add_strided(static_cast<char*>(const_cast<void*>(t->const_data_ptr())), shape, unit,
                   t->element_size());
  if (value != nullptr) it.add(DeviceTensor(*value));
  it.build();
  return it;
}

// The device parts of the drivers: the element functor `f` (from the op's factory)
// gets values in M = opmath_t<T>; its result is rounded once into O. `f` is
// captured first, next to the iterator's used head (see StridedIter's layout).
template <class O, class T, class M, class F>
inline void launch_map1(const at::Tensor& on, const StridedIter& it, F f) {
  launch(on, [f, it] { map1<O, T>(it, [&](T a) { return f(static_cast<M>(a)); }); });
}

template <class O, class T, class M, class F>
inline void launch_map2(const at::Tensor& on, const StridedIter& it, F f) {
  launch(on, [f, it] {
    map2<O, T, T>(it, [&](T a, T b) { return f(static_cast<M>(a), static_cast<M>(b)); });
  });
}

template <class O, class T, class M, class F>
inline void launch_map3(const at::Tensor& on, const StridedIter& it, F f) {
  launch(on, [f, it] {
    map3<O, T, T, T>(it, [&](T a, T b, T c) {
      return f(static_cast<M>(a), static_cast<M>(b), static_cast<M>(c));
    });
  });
}

// The drivers build the iterator in the branch that knows how (no
// std::optional<StridedIter>: GCC zero-filled its 1.3 KB on every call, a
// measurable part of a tiny op's host time) and hand it to `run`.
template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor unary_kernel(const char* op, const at::Tensor& self, at::ScalarType compute,
                               Factory factory) {
  const at::ScalarType out_dtype = out_dtype_for<OutT>(compute);
  auto run = [&](const at::Tensor& out, const StridedIter& it) {
    dispatch<Set>(op, out.device(), compute, [&](auto tag) {
      using T = FL_T(tag);
      launch_map1<out_t<OutT, T>, T, opmath_t<T>>(out, it, factory(tag));
    });
  };
  if (all_plain(compute, {&self})) {
    at::Tensor out = ::FLSDK_BACKEND_NS::empty_device(self.sizes(), out_dtype, self.device());
    if (out.numel() != 0) run(out, plain_iter(out, {&self}));
    return out;
  }
  Elementwise e = prepare(op, {&self}, compute, out_dtype);
  if (e.out.numel() != 0) run(e.out, make_iter(e));
  return e.out;
}

template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor binary_kernel(const char* op, const at::Tensor& a, const at::Tensor& b,
                                at::ScalarType compute, Factory factory) {
  const at::ScalarType out_dtype = out_dtype_for<OutT>(compute);
  auto run = [&](const at::Tensor& out, const StridedIter& it) {
    dispatch<Set>(op, out.device(), compute, [&](auto tag) {
      using T = FL_T(tag);
      launch_map2<out_t<OutT, T>, T, opmath_t<T>>(out, it, factory(tag));
    });
  };
  if (is_cpu_scalar(b) && all_plain(compute, {&a})) {
    // x * 1.5 from Python: a wrapped number, read as a broadcast value.
    const at::Tensor value = cast(op, b, compute);
    at::Tensor out = ::FLSDK_BACKEND_NS::empty_device(a.sizes(), out_dtype, a.device());
    if (out.numel() != 0) run(out, plain_iter(out, {&a}, &value));
    return out;
  }
  if (all_plain(compute, {&a, &b})) {
    at::Tensor out = ::FLSDK_BACKEND_NS::empty_device(a.sizes(), out_dtype, a.device());
    if (out.numel() != 0) run(out, plain_iter(out, {&a, &b}));
    return out;
  }
  Elementwise e = prepare(op, {&a, &b}, compute, out_dtype);
  if (e.out.numel() != 0) run(e.out, make_iter(e));
  return e.out;
}

template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor ternary_kernel(const char* op, const at::Tensor& a, const at::Tensor& b,
                                 const at::Tensor& c, at::ScalarType compute, Factory factory) {
  Elementwise e = prepare(op, {&a, &b, &c}, compute, out_dtype_for<OutT>(compute));
  if (e.out.numel() == 0) return e.out;
  const StridedIter it = make_iter(e);
  dispatch<Set>(op, e.out.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    launch_map3<out_t<OutT, T>, T, opmath_t<T>>(e.out, it, factory(tag));
  });
  return e.out;
}

// ---- in-place drivers ------------------------------------------------------------
// For the optional in-place kernels (`bool k_mul__Tensor(...)`: the in-place
// overload's signature returning bool, declared in generated/kernels.h): write `self` directly and return true when the call is
// plain, else return false and the generated wrapper computes with the functional
// kernel and copies. Plain: `self` has the compute dtype and is contiguous, every
// other input has self's dtype, shape, layout and device, and none overlaps `self`
// partly (the very same memory is fine: element i is read before it is written).
// So the result dtype and shape are self's, as the wrapper's copy would require.
inline bool inplace_plain(at::ScalarType compute, const at::Tensor& self,
                          std::initializer_list<const at::Tensor*> others) {
  if (self.scalar_type() != compute || !self.is_contiguous()) return false;
  for (const at::Tensor* t : others) {
    if (t->scalar_type() != compute || !t->is_contiguous() || t->sizes() != self.sizes() ||
        t->device() != self.device())
      return false;
    const at::MemOverlapStatus overlap = at::get_overlap_status(self, *t);
    if (overlap != at::MemOverlapStatus::No && overlap != at::MemOverlapStatus::Full) return false;
  }
  return true;
}

// A binary op's factory with its second operand fixed to a wrapped number: a unary
// factory, for the in-place drivers. `value` is the CPU 0-dim tensor already cast
// to the compute dtype (as prepare() casts it), so this path and the functional
// one agree bit for bit.
template <class Factory>
inline auto bind_second(Factory factory, const at::Tensor& value) {
  return [factory, &value](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    const M y = static_cast<M>(*static_cast<const T*>(value.data_ptr()));
    return [f, y](M x) { return f(x, y); };
  };
}

// The device part of the in-place drivers: s[i] = f(s[i], others[k][i]...).
template <class T, class M, class F, size_t N>
inline void launch_inplace(const at::Tensor& self, std::array<const T*, N> others, F f) {
  T* self_ptr = static_cast<T*>(self.data_ptr());
  launch(self, [self_ptr, others, n = self.numel(), f] {
    T* s = static_cast<T*>(device_view(self_ptr));
    std::array<const T*, N> x{};
    for (size_t k = 0; k < N; ++k) x[k] = static_cast<const T*>(device_view(others[k]));
    parallel_for(n, kGrainCheap, [&](int64_t begin, int64_t end) {
      const auto g = f;  // a local copy: stores to s[i] cannot alias its constants
      for (int64_t i = begin; i < end; ++i) {
        if constexpr (N == 0) {
          auto r = g(static_cast<M>(s[i]));
          s[i] = cvt<T, decltype(r)>(r);
        } else if constexpr (N == 1) {
          auto r = g(static_cast<M>(s[i]), static_cast<M>(x[0][i]));
          s[i] = cvt<T, decltype(r)>(r);
        } else {
          auto r = g(static_cast<M>(s[i]), static_cast<M>(x[0][i]), static_cast<M>(x[1][i]));
          s[i] = cvt<T, decltype(r)>(r);
        }
      }
    });
  });
}

template <unsigned Set, class Factory>
inline bool unary_inplace(const char* op, at::Tensor& self, at::ScalarType compute,
                          Factory factory) {
  if (!inplace_plain(compute, self, {})) return false;
  if (self.numel() == 0) return true;
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    launch_inplace<T, opmath_t<T>>(self, std::array<const T*, 0>{}, factory(tag));
  });
  return true;
}

template <unsigned Set, class Factory>
inline bool binary_inplace(const char* op, at::Tensor& self, const at::Tensor& other,
                           at::ScalarType compute, Factory factory) {
  if (is_cpu_scalar(other)) {
    // x.mul_(0.9) from Python: a wrapped number, bound as the functional kernel binds it.
    if (!inplace_plain(compute, self, {})) return false;
    const at::Tensor value = cast(op, other, compute);
    return unary_inplace<Set>(op, self, compute, bind_second(factory, value));
  }
  if (!inplace_plain(compute, self, {&other})) return false;
  if (self.numel() == 0) return true;
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    launch_inplace<T, opmath_t<T>>(
        self, std::array<const T*, 1>{static_cast<const T*>(other.const_data_ptr())}, factory(tag));
  });
  return true;
}

template <unsigned Set, class Factory>
inline bool ternary_inplace(const char* op, at::Tensor& self, const at::Tensor& b,
                            const at::Tensor& c, at::ScalarType compute, Factory factory) {
  if (!inplace_plain(compute, self, {&b, &c})) return false;
  if (self.numel() == 0) return true;
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    launch_inplace<T, opmath_t<T>>(
        self,
        std::array<const T*, 2>{static_cast<const T*>(b.const_data_ptr()),
                                static_cast<const T*>(c.const_data_ptr())},
        factory(tag));
  });
  return true;
}

}  // namespace FLSDK_BACKEND_NS::common
