// Drivers for elementwise kernels: prepare (promote, broadcast, allocate,
// convert inputs), dispatch on the compute dtype, run the typed loop.
// The op body is given as a *factory*: a generic lambda taking a Tag<T> of the
// compute dtype and returning the element functor, so it can convert Scalars
// to the compute type once, outside the loop:
//
//   return unary_kernel<kFloating>(op, self, float_compute(self.scalar_type()),
//       [](auto tag) { using M = opmath_t<ACME_T(tag)>;
//                      return [](M x) { return std::exp(x); }; });
//
// Element functors get values in opmath_t<T> (float for float16/bfloat16) and
// their result is rounded once into the output dtype. Loops are split over
// the compute units (parallel.h): element functors must be pure.
#pragma once

#include <c10/core/DefaultDtype.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>

#include "alloc.h"

namespace acme::common {

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

// A binary op's factory with its second operand fixed to a wrapped number: a unary
// factory. `value` is the CPU 0-dim tensor already cast to the compute dtype (as
// prepare() casts it), so this path and the iterator's agree bit for bit.
template <class Factory>
inline auto bind_second(Factory factory, const at::Tensor& value) {
  return [factory, &value](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    const M y = static_cast<M>(*static_cast<const T*>(value.data_ptr()));
    return [f, y](M x) { return f(x, y); };
  };
}

template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor unary_kernel(const char* op, const at::Tensor& self, at::ScalarType compute,
                               Factory factory) {
  if (all_plain(compute, {&self})) {
    at::Tensor out = at::empty(self.sizes(), self.options().dtype(out_dtype_for<OutT>(compute)));
    dispatch<Set>(op, self.device(), compute, [&](auto tag) {
      using T = ACME_T(tag);
      using M = opmath_t<T>;
      using O = out_t<OutT, T>;
      auto f = factory(tag);
      const T* a = static_cast<const T*>(self.data_ptr());
      O* o = static_cast<O*>(out.data_ptr());
      parallel_for(self.numel(), kGrainCheap, [&](int64_t begin, int64_t end) {
        const T* __restrict ca = a + begin;
        O* __restrict co = o + begin;
        const int64_t n = end - begin;
        for (int64_t i = 0; i < n; ++i) {
          auto r = f(static_cast<M>(ca[i]));
          co[i] = cvt<O, decltype(r)>(r);
        }
      });
    });
    return out;
  }
  Elementwise e = prepare(op, {&self}, compute, out_dtype_for<OutT>(compute));
  StridedIter it = make_iter(e);
  dispatch<Set>(op, e.out.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    map1<out_t<OutT, T>, T>(it, [&](T a) { return f(static_cast<M>(a)); });
  });
  return e.out;
}

template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor binary_kernel(const char* op, const at::Tensor& a, const at::Tensor& b,
                                at::ScalarType compute, Factory factory) {
  if (is_cpu_scalar(b)) {
    // x * 1.5 from Python: a wrapped number; a unary loop instead of the iterator.
    const at::Tensor value = cast(op, b, compute);
    return unary_kernel<Set, OutT>(op, a, compute, bind_second(factory, value));
  }
  if (all_plain(compute, {&a, &b})) {
    at::Tensor out = at::empty(a.sizes(), a.options().dtype(out_dtype_for<OutT>(compute)));
    dispatch<Set>(op, a.device(), compute, [&](auto tag) {
      using T = ACME_T(tag);
      using M = opmath_t<T>;
      using O = out_t<OutT, T>;
      auto f = factory(tag);
      const T* x = static_cast<const T*>(a.data_ptr());
      const T* y = static_cast<const T*>(b.data_ptr());
      O* o = static_cast<O*>(out.data_ptr());
      parallel_for(a.numel(), kGrainCheap, [&](int64_t begin, int64_t end) {
        const T* __restrict cx = x + begin;
        const T* __restrict cy = y + begin;
        O* __restrict co = o + begin;
        const int64_t n = end - begin;
        for (int64_t i = 0; i < n; ++i) {
          auto r = f(static_cast<M>(cx[i]), static_cast<M>(cy[i]));
          co[i] = cvt<O, decltype(r)>(r);
        }
      });
    });
    return out;
  }
  Elementwise e = prepare(op, {&a, &b}, compute, out_dtype_for<OutT>(compute));
  StridedIter it = make_iter(e);
  dispatch<Set>(op, e.out.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    map2<out_t<OutT, T>, T, T>(
        it, [&](T x, T y) { return f(static_cast<M>(x), static_cast<M>(y)); });
  });
  return e.out;
}

template <unsigned Set, class OutT = void, class Factory>
inline at::Tensor ternary_kernel(const char* op, const at::Tensor& a, const at::Tensor& b,
                                 const at::Tensor& c, at::ScalarType compute, Factory factory) {
  Elementwise e = prepare(op, {&a, &b, &c}, compute, out_dtype_for<OutT>(compute));
  StridedIter it = make_iter(e);
  dispatch<Set>(op, e.out.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    map3<out_t<OutT, T>, T, T, T>(it, [&](T x, T y, T z) {
      return f(static_cast<M>(x), static_cast<M>(y), static_cast<M>(z));
    });
  });
  return e.out;
}

// ---- in-place drivers ------------------------------------------------------------
// For the optional in-place kernels (`bool k_mul__Tensor(...)`, see
// docs/architecture.md): write `self` directly and return true when the call is
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

template <unsigned Set, class Factory>
inline bool unary_inplace(const char* op, at::Tensor& self, at::ScalarType compute,
                          Factory factory) {
  if (!inplace_plain(compute, self, {})) return false;
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    T* s = static_cast<T*>(self.data_ptr());
    parallel_for(self.numel(), kGrainCheap, [&](int64_t begin, int64_t end) {
      const auto g = f;  // a local copy: stores to s[i] cannot alias its constants
      for (int64_t i = begin; i < end; ++i) {
        auto r = g(static_cast<M>(s[i]));
        s[i] = cvt<T, decltype(r)>(r);
      }
    });
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
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    T* s = static_cast<T*>(self.data_ptr());
    const T* y = static_cast<const T*>(other.data_ptr());
    parallel_for(self.numel(), kGrainCheap, [&](int64_t begin, int64_t end) {
      const auto g = f;
      for (int64_t i = begin; i < end; ++i) {
        auto r = g(static_cast<M>(s[i]), static_cast<M>(y[i]));
        s[i] = cvt<T, decltype(r)>(r);
      }
    });
  });
  return true;
}

template <unsigned Set, class Factory>
inline bool ternary_inplace(const char* op, at::Tensor& self, const at::Tensor& b,
                            const at::Tensor& c, at::ScalarType compute, Factory factory) {
  if (!inplace_plain(compute, self, {&b, &c})) return false;
  dispatch<Set>(op, self.device(), compute, [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    auto f = factory(tag);
    T* s = static_cast<T*>(self.data_ptr());
    const T* y = static_cast<const T*>(b.data_ptr());
    const T* z = static_cast<const T*>(c.data_ptr());
    parallel_for(self.numel(), kGrainCheap, [&](int64_t begin, int64_t end) {
      const auto g = f;
      for (int64_t i = begin; i < end; ++i) {
        auto r = g(static_cast<M>(s[i]), static_cast<M>(y[i]), static_cast<M>(z[i]));
        s[i] = cvt<T, decltype(r)>(r);
      }
    });
  });
  return true;
}

}  // namespace acme::common
