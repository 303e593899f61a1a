// The library's strided N-d iterator: walks up to kMaxOperands tensors of one
// broadcast iteration shape, calling a loop body on the innermost dimension.
// Setup merges ("coalesces") dimensions that are contiguous across all
// operands, so same-shape contiguous tensors become one flat loop and the
// typed loops below take their plain-pointer (vectorizable) fast path.
//
// Built in a kernel's host part (it records device addresses, sizes and
// strides: no data), walked in its device part: for_each translates each
// device address to the device's view there. A wrapped Python number (a 0-dim
// CPU tensor) is copied into the iterator, so it outlives the tensor.
#pragma once
#include <c10/util/FunctionRef.h>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "device.h"
#include "dtype.h"
#include "parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace FLSDK_BACKEND_NS::common {

constexpr int kMaxOperands = 5;
constexpr int kMaxDims = 25;

class StridedIter {
 public:
  // `shape` is the iteration shape (for elementwise ops: the broadcast shape).
  explicit StridedIter(c10::IntArrayRef shape) : ndim_(static_cast<int>(shape.size())) {
    TORCH_CHECK(ndim_ <= kMaxDims, kBackend, ": tensors with more than ", kMaxDims,
                " dimensions are not supported");
    numel_ = 1;
    for (int d = 0; d < ndim_; ++d) {
      dims_[d].size = shape[d];
      numel_ *= shape[d];
    }
  }

  // Adds an operand; its shape must broadcast to the iteration shape
  // (right-aligned, size-1 or missing dims get stride 0). Returns its index.
  int add(const at::Tensor& t) { return add(DeviceTensor(t)); }
  int add(const DeviceTensor& t) {
    const int k = add_strided(static_cast<char*>(const_cast<void*>(t.address())), t.sizes(),
                              t.strides(), t.element_size());
    if (t.is_cpu_scalar()) {
      inline_[k] = true;
      std::memcpy(values_[k], t.data_ptr(), static_cast<size_t>(t.element_size()));
    }
    return k;
  }

  // Adds an operand from raw data, sizes and element strides (e.g. a view with
  // permuted dims, or a host scalar with empty sizes).
  int add_strided(char* data, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                  int64_t elsize) {
    TORCH_CHECK(nops_ < kMaxOperands, kBackend, ": iterator supports at most ", kMaxOperands,
                " operands");
    const int k = nops_++;
    base_[k] = data;
    const int off = ndim_ - static_cast<int>(sizes.size());
    TORCH_CHECK(off >= 0, kBackend, ": operand has more dims than the iteration shape");
    for (int d = 0; d < ndim_; ++d) {
      int64_t st = 0;
      if (d >= off) {
        const int64_t sz = sizes[d - off];
        TORCH_CHECK(sz == dims_[d].size || sz == 1, kBackend, ": operand of shape ", sizes,
                    " does not broadcast to ", shape_vector());
        st = (sz == 1 && dims_[d].size != 1) ? 0 : strides[d - off] * elsize;
      }
      dims_[d].stride[k] = st;
    }
    return k;
  }

  // Drops size-1 dims, optionally orders dims so operand 0 (the output) is
  // walked in memory order, and merges dims that are contiguous for every
  // operand. Call once after adding all operands.
  void build(bool order_by_first = true) {
    // 1. drop size-1 dims
    int nd = 0;
    for (int d = 0; d < ndim_; ++d) {
      if (dims_[d].size == 1) continue;
      dims_[nd].size = dims_[d].size;
      for (int k = 0; k < nops_; ++k) dims_[nd].stride[k] = dims_[d].stride[k];
      ++nd;
    }
    ndim_ = nd;
    // 2. stable insertion sort of dims by |stride of operand 0|, descending,
    // so a permuted-dense output (e.g. channels_last) is written sequentially.
    if (order_by_first && nops_ > 0) {
      for (int i = 1; i < ndim_; ++i) {
        for (int j = i; j > 0; --j) {
          const int64_t a = std::abs(dims_[j - 1].stride[0]);
          const int64_t b = std::abs(dims_[j].stride[0]);
          if (a >= b) break;
          std::swap(dims_[j - 1].size, dims_[j].size);
          for (int k = 0; k < nops_; ++k) std::swap(dims_[j - 1].stride[k], dims_[j].stride[k]);
        }
      }
    }
    // 3. merge dim d (outer) into d+1 (inner) when contiguous for all operands
    if (ndim_ > 1) {
      int out = ndim_ - 1;  // write position, from the innermost dim outwards
      for (int d = ndim_ - 2; d >= 0; --d) {
        bool can = true;
        for (int k = 0; k < nops_; ++k) {
          if (dims_[d].stride[k] != dims_[out].stride[k] * dims_[out].size) { can = false; break; }
        }
        if (can) {
          dims_[out].size *= dims_[d].size;
        } else {
          --out;
          dims_[out].size = dims_[d].size;
          for (int k = 0; k < nops_; ++k) dims_[out].stride[k] = dims_[d].stride[k];
        }
      }
      // shift dims [out, ndim_) to [0, ndim_-out)
      const int newnd = ndim_ - out;
      for (int d = 0; d < newnd; ++d) {
        dims_[d].size = dims_[d + out].size;
        for (int k = 0; k < nops_; ++k) dims_[d].stride[k] = dims_[d + out].stride[k];
      }
      ndim_ = newnd;
    }
  }

  // Copies carry only what is in use. A kernel's iterator is copied three times
  // on its way to the stream (into the device part's closure, into the queued
  // work, into its block of memory), and the whole arrays are 1.3 KB: for a tiny
  // op those copies and the cache lines they write were a tenth of the host's
  // time (issue 39). Entries past ndim_ / nops_ are never read (add_strided
  // writes every dim of a new operand), so they are left unset here.
  StridedIter(const StridedIter& other) { copy_used(other); }
  StridedIter& operator=(const StridedIter& other) {
    if (this != &other) copy_used(other);
    return *this;
  }

  int64_t numel() const { return numel_; }
  int ndim() const { return ndim_; }
  int nops() const { return nops_; }
  int64_t shape(int d) const { return dims_[d].size; }
  int64_t stride(int k, int d) const { return dims_[d].stride[k]; }

  // Calls body(char* const* ptrs, const int64_t* strides_bytes, int64_t n) for
  // every innermost run; ptrs[k] points at operand k's first element of the run.
  // The whole range of for_each_range: one walk to compile and keep correct.
  // The body is reached through a function_ref (one indirect call per run: per
  // chunk for contiguous operands), so the walk is compiled once per file, not
  // once per loop body: instantiated per body it was about 40% of the compile
  // time of acme's pointwise files (binary.cpp 59 -> 33 s).
  using RunFn = c10::function_ref<void(char* const*, const int64_t*, int64_t)>;
  void for_each(RunFn body) const { for_each_range(0, numel_, body); }

  // for_each restricted to the elements at linear positions [begin, end) of
  // the (built) iteration order: runs are cut at begin and end, so disjoint
  // ranges visit disjoint elements (used to split a loop over compute units).
  void for_each_range(int64_t begin, int64_t end, RunFn body) const {
    end = std::min(end, numel_);
    if (begin >= end) return;
    char* ptrs[kMaxOperands];
    if (ndim_ == 0) {
      for (int k = 0; k < nops_; ++k) ptrs[k] = base(k);
      const int64_t zero[kMaxOperands] = {0, 0, 0, 0, 0};
      body(static_cast<char* const*>(ptrs), zero, int64_t(1));
      return;
    }
    const int inner = ndim_ - 1;
    int64_t counter[kMaxDims] = {0};
    int64_t rest = begin;
    for (int d = inner; d >= 0; --d) {
      counter[d] = rest % dims_[d].size;
      rest /= dims_[d].size;
    }
    int64_t s[kMaxOperands];
    for (int k = 0; k < nops_; ++k) {
      s[k] = dims_[inner].stride[k];
      ptrs[k] = base(k);
      for (int d = 0; d < ndim_; ++d) ptrs[k] += counter[d] * dims_[d].stride[k];
    }
    int64_t left = end - begin;
    while (true) {
      const int64_t run = std::min(dims_[inner].size - counter[inner], left);
      body(static_cast<char* const*>(ptrs), static_cast<const int64_t*>(s), run);
      left -= run;
      if (left == 0) return;
      // back to the start of the inner dim, then carry into the outer dims
      for (int k = 0; k < nops_; ++k) ptrs[k] -= counter[inner] * s[k];
      counter[inner] = 0;
      int d = inner - 1;
      for (; d >= 0; --d) {
        for (int k = 0; k < nops_; ++k) ptrs[k] += dims_[d].stride[k];
        if (++counter[d] < dims_[d].size) break;
        for (int k = 0; k < nops_; ++k) ptrs[k] -= dims_[d].stride[k] * dims_[d].size;
        counter[d] = 0;
      }
      if (d < 0) return;
    }
  }

  // for_each split over the compute units in chunks of `grain` elements. The
  // body must only touch the elements of the run it is given. A single walk
  // (for_each_range), whatever the size: the body is compiled once.
  void parallel_for_each(int64_t grain, RunFn body) const {
    parallel_for(numel_, grain, [this, body](int64_t begin, int64_t end) { for_each_range(begin, end, body); });
  }

 private:
  // Where the device part reaches operand k's first element.
  char* base(int k) const {
    if (inline_[k]) return const_cast<char*>(values_[k]);
    return static_cast<char*>(device_view(base_[k]));
  }

  void copy_used(const StridedIter& other) {
    ndim_ = other.ndim_;
    nops_ = other.nops_;
    numel_ = other.numel_;
    std::copy_n(other.inline_, kMaxOperands, inline_);
    std::copy_n(other.base_, nops_, base_);
    for (int d = 0; d < ndim_; ++d) {
      dims_[d].size = other.dims_[d].size;
      std::copy_n(other.dims_[d].stride, nops_, dims_[d].stride);
    }
    for (int k = 0; k < nops_; ++k)
      if (inline_[k]) std::memcpy(values_[k], other.values_[k], sizeof values_[k]);
  }

  std::vector<int64_t> shape_vector() const {
    std::vector<int64_t> shape(static_cast<size_t>(ndim_));
    for (int d = 0; d < ndim_; ++d) shape[static_cast<size_t>(d)] = dims_[d].size;
    return shape;
  }

  // A dimension: its size and each operand's byte stride along it.
  struct Dim {
    int64_t size;
    int64_t stride[kMaxOperands];
  };

  // What a walk reads first comes first, and a dim's size and strides sit
  // together, so the few dims a built iterator keeps take a cache line or two
  // of the queued closure's memory, not lines spread over its 1.3 KB (issue 39).
  // No default initializers on the arrays: the copy constructor would run them,
  // writing all of it (see copy_used). Only inline_ must start false.
  int ndim_ = 0;
  int nops_ = 0;
  int64_t numel_ = 1;
  char* base_[kMaxOperands];  // device addresses (or host scratch memory)
  bool inline_[kMaxOperands] = {};
  Dim dims_[kMaxDims];
  alignas(8) char values_[kMaxOperands][16];  // wrapped numbers, by value
};

// ---- typed elementwise loops ------------------------------------------------
// Operand 0 is the output. `f` gets the input element values and returns a
// value that is converted to Out with cvt<Out>. Contiguous runs and the
// "one input is a broadcast scalar" runs use plain indexed loops the compiler
// can vectorize; other runs use byte strides. The loops are split over the
// compute units (parallel.h), so `f` must be a pure function of its inputs.

template <class Out, class A, class F>
inline void map1(const StridedIter& it, F f) {
  it.parallel_for_each(kGrainCheap, [&](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(A)) {
      Out* __restrict o = reinterpret_cast<Out*>(p[0]);
      const A* __restrict a = reinterpret_cast<const A*>(p[1]);
      for (int64_t i = 0; i < n; ++i) {
        auto r = f(a[i]);
        o[i] = cvt<Out, decltype(r)>(r);
      }
    } else {
      char* o = p[0];
      const char* a = p[1];
      for (int64_t i = 0; i < n; ++i) {
        auto r = f(*reinterpret_cast<const A*>(a + i * s[1]));
        *reinterpret_cast<Out*>(o + i * s[0]) = cvt<Out, decltype(r)>(r);
      }
    }
  });
}

template <class Out, class A, class B, class F>
inline void map2(const StridedIter& it, F f) {
  it.parallel_for_each(kGrainCheap, [&](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out)) {
      Out* __restrict o = reinterpret_cast<Out*>(p[0]);
      const A* __restrict a = reinterpret_cast<const A*>(p[1]);
      const B* __restrict b = reinterpret_cast<const B*>(p[2]);
      if (s[1] == sizeof(A) && s[2] == sizeof(B)) {
        for (int64_t i = 0; i < n; ++i) {
          auto r = f(a[i], b[i]);
          o[i] = cvt<Out, decltype(r)>(r);
        }
        return;
      }
      if (s[1] == sizeof(A) && s[2] == 0) {
        const B bv = *b;
        for (int64_t i = 0; i < n; ++i) {
          auto r = f(a[i], bv);
          o[i] = cvt<Out, decltype(r)>(r);
        }
        return;
      }
      if (s[1] == 0 && s[2] == sizeof(B)) {
        const A av = *a;
        for (int64_t i = 0; i < n; ++i) {
          auto r = f(av, b[i]);
          o[i] = cvt<Out, decltype(r)>(r);
        }
        return;
      }
    }
    char* o = p[0];
    const char* a = p[1];
    const char* b = p[2];
    for (int64_t i = 0; i < n; ++i) {
      auto r = f(*reinterpret_cast<const A*>(a + i * s[1]),
                 *reinterpret_cast<const B*>(b + i * s[2]));
      *reinterpret_cast<Out*>(o + i * s[0]) = cvt<Out, decltype(r)>(r);
    }
  });
}

template <class Out, class A, class B, class C, class F>
inline void map3(const StridedIter& it, F f) {
  it.parallel_for_each(kGrainCheap, [&](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B) && s[3] == sizeof(C)) {
      Out* __restrict o = reinterpret_cast<Out*>(p[0]);
      const A* __restrict a = reinterpret_cast<const A*>(p[1]);
      const B* __restrict b = reinterpret_cast<const B*>(p[2]);
      const C* __restrict c = reinterpret_cast<const C*>(p[3]);
      for (int64_t i = 0; i < n; ++i) {
        auto r = f(a[i], b[i], c[i]);
        o[i] = cvt<Out, decltype(r)>(r);
      }
      return;
    }
    char* o = p[0];
    const char* a = p[1];
    const char* b = p[2];
    const char* c = p[3];
    for (int64_t i = 0; i < n; ++i) {
      auto r = f(*reinterpret_cast<const A*>(a + i * s[1]),
                 *reinterpret_cast<const B*>(b + i * s[2]),
                 *reinterpret_cast<const C*>(c + i * s[3]));
      *reinterpret_cast<Out*>(o + i * s[0]) = cvt<Out, decltype(r)>(r);
    }
  });
}

}  // namespace FLSDK_BACKEND_NS::common
