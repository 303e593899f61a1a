// acme indexing kernels: index_select, gather/scatter family, advanced
// indexing (index.Tensor / index_put), masked ops, nonzero, take/put.
// Pure data movement is dispatched on the element *size* (1/2/4/8 bytes), not
// the dtype, so it works for every acme dtype with four instantiations; ops
// that do arithmetic (scatter_add, index_add, accumulate) dispatch on dtype.
//
// Host part / device part (kernel_lib/device.h): index values are read by the
// device part, which also checks them against the bounds (reported at the
// next synchronize, as CUDA's device asserts). Ops whose output size depends
// on data (nonzero, masked_select, indexing with a boolean mask) count on the
// device and read the count on the host: one host wait per op.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// Calls f(Tag<U>) with an unsigned integer type of the element size.
template <class F>
void by_elsize(const char* op, int64_t elsize, F&& f) {
  switch (elsize) {
    case 1: f(Tag<uint8_t>{}); return;
    case 2: f(Tag<uint16_t>{}); return;
    case 4: f(Tag<uint32_t>{}); return;
    case 8: f(Tag<uint64_t>{}); return;
    default: TORCH_CHECK(false, "acme: ", op, ": unsupported element size ", elsize);
  }
}

// Contiguous copy of `t` in dtype `st` (always a fresh tensor when `fresh`).
at::Tensor contiguous_as(const char* op, const at::Tensor& t, at::ScalarType st, bool fresh = false) {
  if (!fresh && t.scalar_type() == st && t.is_contiguous()) return t;
  at::Tensor out = at::empty(t.sizes(), t.options().dtype(st));
  convert_into(op, out, t);
  return out;
}

// Index tensor as contiguous int64 (int32 indices accepted, as in torch).
at::Tensor index_as_long(const char* op, const at::Tensor& index, const char* what = "index") {
  FL_CHECK_T(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op, index,
               what, " must be an int64 or int32 tensor");
  return contiguous_as(op, index, at::kLong);
}

// Device part: an index value checked against the size (wrapping negatives).
int64_t checked_index(const char* op, int64_t i, int64_t size) {
  FL_CHECK_INDEX(i >= -size && i < size, op, "index ", i,
                   " is out of bounds for dimension with size ", size);
  return i < 0 ? i + size : i;
}

// Fresh contiguous copy of self: the functional form of an in-place op.
at::Tensor clone_contig(const char* op, const at::Tensor& self) {
  return contiguous_as(op, self, self.scalar_type(), /*fresh=*/true);
}

// [A, N, B] view sizes of a contiguous tensor around dim.
void split_at(const at::Tensor& t, int64_t dim, int64_t& A, int64_t& N, int64_t& B) {
  A = 1;
  B = 1;
  N = t.dim() == 0 ? 1 : t.size(dim);
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (k < dim) A *= t.size(k);
    else if (k > dim) B *= t.size(k);
  }
}

// The operands of index_add, index_reduce and index_copy, checked: out (a
// contiguous copy of self, to write into), idx (int64) and src (contiguous),
// with self seen as (A, N, B) around dim and source as (A, K, B), K indices.
struct IndexedSource {
  at::Tensor out, idx, src;
  int64_t A, N, B, K;
};
IndexedSource indexed_source(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             const at::Tensor& source) {
  IndexedSource x{clone_contig(op, self), index_as_long(op, index),
                  contiguous_as(op, source, source.scalar_type()), 1, 1, 1, 0};
  split_at(x.out, dim, x.A, x.N, x.B);
  x.K = x.idx.numel();
  FL_CHECK(x.src.numel() == x.A * x.K * x.B, op, "source of shape ", source.sizes(),
             " does not match self ", self.sizes(), " with ", x.K, " indices along dim ", dim);
  return x;
}

// Device part: the value of the 0-dim tensor `v` (on the device or a CPU
// scalar) as T, through the same Scalar as the host's v.item() (so the same
// checked conversion Scalar::to<T> makes).
template <class T>
T value_on_device(const char* op, const DeviceTensor& v) {
  at::Scalar s;
  dispatch<kAll>(op, v.device(), v.scalar_type(), [&](auto tag) {
    using V = FL_T(tag);
    const V x = *v.const_data_ptr<V>();
    if constexpr (std::is_same_v<V, bool>) s = at::Scalar(x);
    else if constexpr (is_floating_v<V>) s = at::Scalar(static_cast<double>(x));
    else s = at::Scalar(static_cast<int64_t>(x));
  });
  return s.to<T>();
}

}  // namespace

at::Tensor k_index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  const char* op = "index_select";
  dim = wrap_dim(op, dim, self.dim());
  FL_CHECK_T(index.dim() <= 1, op, index, "index_select(): Index is supposed to be a vector");
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, self, self.scalar_type());
  int64_t A, N, B;
  split_at(src, dim, A, N, B);
  const int64_t K = idx.numel();
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[dim] = K;
  at::Tensor out = at::empty(shape, self.options());
  const int64_t row = B * static_cast<int64_t>(self.element_size());
  launch(out, [op, A, N, K, row, idx = DeviceTensor(idx), src = DeviceTensor(src),
               out = DeviceTensor(out)] {
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    for (int64_t k = 0; k < K; ++k)
      FL_CHECK_INDEX(ip[k] >= 0 && ip[k] < N, op, "index out of range in self (index ", ip[k],
                       ", size ", N, ")");
    const char* s = static_cast<const char*>(src.const_data_ptr());
    char* o = static_cast<char*>(out.data_ptr());
    for (int64_t a = 0; a < A; ++a)
      for (int64_t k = 0; k < K; ++k)
        std::memcpy(o + (a * K + k) * row, s + (a * N + ip[k]) * row, static_cast<size_t>(row));
  });
  return out;
}

namespace {

// Host part of the walk over the positions of `index` (gather/scatter
// convention): an iterator over idx, self viewed with index's sizes and dim's
// stride zeroed, and `other` (if given).
StridedIter index_positions(const at::Tensor& self, int64_t dim, const at::Tensor& idx,
                            const at::Tensor* other) {
  // self viewed with index's sizes and dim's stride zeroed
  std::vector<int64_t> sstr(self.strides().begin(), self.strides().end());
  if (self.dim() > 0) sstr[dim] = 0;
  StridedIter it(idx.sizes());
  it.add(idx);
  // a 0-dim self or other has no dims to walk: it broadcasts (sizes and strides empty)
  if (self.dim() == 0) {
    it.add(DeviceTensor(self));
  } else {
    it.add_strided(static_cast<char*>(self.data_ptr()), idx.sizes(), sstr,
                   static_cast<int64_t>(self.element_size()));
  }
  if (other) {
    if (other->dim() == 0) {
      it.add(DeviceTensor(*other));  // a CPU scalar's value travels with the iterator
    } else {
      std::vector<int64_t> ostr(other->strides().begin(), other->strides().end());
      it.add_strided(static_cast<char*>(other->data_ptr()), idx.sizes(), ostr,
                     static_cast<int64_t>(other->element_size()));
    }
  }
  it.build(/*order_by_first=*/false);
  return it;
}

// Device part of the walk: calls body(char* self_at_dim0, const int64_t idx,
// char* other) where self_at_dim0 points at self[..., 0 (along dim), ...] for
// that position; `dsize` is self's size along dim.
template <class F>
void for_index_positions(const char* op, const StridedIter& it, int64_t dim, int64_t dsize,
                         bool has_other, F&& body) {
  it.for_each([&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = *reinterpret_cast<const int64_t*>(p[0] + i * s[0]);
      FL_CHECK_INDEX(v >= 0 && v < dsize, op, "index ", v,
                       " is out of bounds for dimension ", dim, " with size ", dsize);
      body(p[1] + i * s[1], v, has_other ? p[2] + i * s[2] : nullptr);
    }
  });
}

void check_gather_shapes(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor* src) {
  FL_CHECK(index.dim() == self.dim() || (index.dim() <= 1 && self.dim() <= 1), op,
             "Index tensor must have the same number of dimensions as input tensor");
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim)
      FL_CHECK(index.size(d) <= self.size(d), op, "Size does not match at dimension ", d,
                 " expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                 " apart from dimension ", dim);
    if (src && src->dim() > 0)
      FL_CHECK(index.size(d) <= src->size(d), op, "Expected index ", index.sizes(),
                 " to be no larger than src ", src->sizes());
  }
}

}  // namespace

at::Tensor k_gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
  const char* op = "gather";
  (void)sparse_grad;
  dim = wrap_dim(op, dim, self.dim());
  // torch checks the index (dtype, rank, sizes) only when there is something to gather
  if (index.numel() == 0) return at::empty(index.sizes(), self.options());
  check_gather_shapes(op, self, dim, index, nullptr);
  at::Tensor out = at::empty(index.sizes(), self.options());
  at::Tensor idx = index_as_long(op, index);
  const int64_t dstride = self.dim() == 0 ? 0 : self.stride(dim) * self.element_size();
  const int64_t dsize = self.dim() == 0 ? 1 : self.size(dim);
  const StridedIter it = index_positions(self, dim, idx, nullptr);
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = FL_T(tag);
    launch(out, [op, it, dim, dsize, dstride, out = DeviceTensor(out)] {
      U* o = out.data_ptr<U>();
      int64_t k = 0;  // out and idx are contiguous with the same shape
      for_index_positions(op, it, dim, dsize, false, [&](char* s0, int64_t v, char*) {
        o[k++] = *reinterpret_cast<const U*>(s0 + v * dstride);
      });
    });
  });
  return out;
}

namespace {
enum class ScatterMode { Set, Add, Mul };

// integer mean of scatter_reduce rounds toward -inf, as torch does
template <class M>
M floor_divide_i(M a, M b) {
  M q = a / b;
  if constexpr (std::is_signed_v<M>) {
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
  }
  return q;
}

at::Tensor scatter_impl(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor* src, const at::Scalar* value, ScatterMode mode) {
  dim = wrap_dim(op, dim, self.dim());
  if (src)
    FL_CHECK_T(src->scalar_type() == self.scalar_type(), op, *src, "Expected self.dtype (",
                 dtype_name(self.scalar_type()), ") to be equal to src.dtype");
  // as torch: an empty index scatters nothing and is not checked (gather's backward sends one)
  if (index.numel() == 0) return clone_contig(op, self);
  check_gather_shapes(op, self, dim, index, src);
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  const int64_t dstride = out.dim() == 0 ? 0 : out.stride(dim) * out.element_size();
  const int64_t dsize = out.dim() == 0 ? 1 : out.size(dim);
  const StridedIter it = index_positions(out, dim, idx, src);
  const bool has_src = src != nullptr;
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    const T cv = value ? value->to<T>() : T();
    launch(out, [op, it, dim, dsize, dstride, has_src, cv, mode] {
      for_index_positions(op, it, dim, dsize, has_src, [&](char* o0, int64_t v, char* sp) {
        T* dst = reinterpret_cast<T*>(o0 + v * dstride);
        const T x = sp ? *reinterpret_cast<const T*>(sp) : cv;
        if (mode == ScatterMode::Set) {
          *dst = x;
        } else if (mode == ScatterMode::Add) {
          if constexpr (std::is_same_v<T, bool>) *dst = *dst || x;
          else *dst = cvt<T>(static_cast<opmath_t<T>>(*dst) + static_cast<opmath_t<T>>(x));
        } else {
          if constexpr (std::is_same_v<T, bool>) *dst = *dst && x;
          else *dst = cvt<T>(static_cast<opmath_t<T>>(*dst) * static_cast<opmath_t<T>>(x));
        }
      });
    });
  });
  return out;
}
}  // namespace

at::Tensor k_scatter_src(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_impl("scatter.src", self, dim, index, &src, nullptr, ScatterMode::Set);
}

at::Tensor k_scatter_value(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Scalar& value) {
  return scatter_impl("scatter.value", self, dim, index, nullptr, &value, ScatterMode::Set);
}

namespace {
// the deprecated `reduce=` of scatter: "add" or "multiply"
ScatterMode scatter_reduce_mode(const char* op, c10::string_view reduce) {
  if (reduce == "add") return ScatterMode::Add;
  FL_CHECK(reduce == "multiply", op, "reduce argument must be either add or multiply., got ",
             std::string(reduce));
  return ScatterMode::Mul;
}
}  // namespace

at::Tensor k_scatter_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            c10::string_view reduce) {
  const char* op = "scatter.reduce";
  return scatter_impl(op, self, dim, index, &src, nullptr, scatter_reduce_mode(op, reduce));
}

at::Tensor k_scatter_value_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                  const at::Scalar& value, c10::string_view reduce) {
  const char* op = "scatter.value_reduce";
  return scatter_impl(op, self, dim, index, nullptr, &value, scatter_reduce_mode(op, reduce));
}

at::Tensor k_scatter_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  return scatter_impl("scatter_add", self, dim, index, &src, nullptr, ScatterMode::Add);
}

at::Tensor k_scatter_reduce_two(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& src, c10::string_view reduce, bool include_self) {
  const char* op = "scatter_reduce.two";
  const int kind = reduce == "sum" ? 0 : reduce == "prod" ? 1 : reduce == "mean" ? 2
                 : reduce == "amax" ? 3 : reduce == "amin" ? 4 : -1;
  FL_CHECK(kind >= 0, op, "reduce argument must be either sum, prod, mean, amax or amin, got ",
             std::string(reduce));
  dim = wrap_dim(op, dim, self.dim());
  FL_CHECK_T(src.scalar_type() == self.scalar_type(), op, src, "Expected self.dtype (",
               dtype_name(self.scalar_type()), ") to be equal to src.dtype");
  if (index.numel() == 0) return clone_contig(op, self);  // as scatter_impl
  check_gather_shapes(op, self, dim, index, &src);
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  const int64_t dstride = out.dim() == 0 ? 0 : out.stride(dim) * out.element_size();
  const int64_t esz = out.element_size();
  const int64_t dsize = out.dim() == 0 ? 1 : out.size(dim);
  const StridedIter it = index_positions(out, dim, idx, &src);
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [op, it, dim, dsize, dstride, esz, kind, include_self, out = DeviceTensor(out)] {
      // per output element: number of scattered values (and whether it was touched)
      std::vector<int64_t> count(static_cast<size_t>(out.numel()), include_self ? 1 : 0);
      char* base = static_cast<char*>(out.data_ptr());
      // accumulate in opmath (float for float16/bfloat16) and round once at the end
      T* o = out.data_ptr<T>();
      std::vector<M> acc(static_cast<size_t>(out.numel()));
      for (int64_t i = 0; i < out.numel(); ++i) acc[i] = static_cast<M>(o[i]);
      for_index_positions(op, it, dim, dsize, true, [&](char* o0, int64_t v, char* sp) {
        const size_t at_ = static_cast<size_t>((o0 + v * dstride - base) / esz);
        const M x = static_cast<M>(*reinterpret_cast<const T*>(sp));
        int64_t& c = count[at_];
        const M cur = acc[at_];
        M r;
        if (c == 0) {
          r = x;  // the first value replaces self when include_self is false
        } else {
          switch (kind) {
            case 0: case 2: r = cur + x; break;
            case 1: r = cur * x; break;
            case 3: r = (x > cur || x != x) ? x : cur; break;
            default: r = (x < cur || x != x) ? x : cur; break;
          }
        }
        ++c;
        acc[at_] = r;
      });
      for (int64_t i = 0; i < out.numel(); ++i) {
        M r = acc[i];
        if (kind == 2 && count[i] > 1) {
          if constexpr (std::is_integral_v<M>) r = floor_divide_i(r, static_cast<M>(count[i]));
          else r = static_cast<M>(cvt<T>(r)) / static_cast<M>(count[i]);  // torch divides the stored sum
        }
        o[i] = cvt<T>(r);
      }
    });
  });
  return out;
}

at::Tensor k_index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha) {
  const char* op = "index_add";
  dim = wrap_dim(op, dim, self.dim());
  FL_CHECK_T(index.dim() <= 1, op, index, "index_add_(): Index is supposed to be a vector");
  FL_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "index_add_(): self (", dtype_name(self.scalar_type()), ") and source (",
               dtype_name(source.scalar_type()), ") must have the same scalar type");
  const int64_t nk = index.numel();
  FL_CHECK(source.dim() == 0 ? nk == 1 : (source.dim() == std::max<int64_t>(self.dim(), 1) &&
                                            source.size(self.dim() == 0 ? 0 : dim) == nk), op,
             "source of shape ", source.sizes(), " does not match index of ", nk, " elements");
  auto [out, idx, src, A, N, B, K] = indexed_source(op, self, dim, index, source);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    const M al = alpha.to<M>();
    launch(out, [op, A, N, B, K, al, idx = DeviceTensor(idx), src = DeviceTensor(src),
                 out = DeviceTensor(out)] {
      const int64_t* ip = idx.const_data_ptr<int64_t>();
      T* o = out.data_ptr<T>();
      const T* s = src.const_data_ptr<T>();
      for (int64_t k = 0; k < K; ++k) {
        const int64_t j = checked_index(op, ip[k], N);
        for (int64_t a = 0; a < A; ++a) {
          T* orow = o + (a * N + j) * B;
          const T* srow = s + (a * K + k) * B;
          for (int64_t b = 0; b < B; ++b) {
            if constexpr (std::is_same_v<T, bool>) orow[b] = orow[b] || (al && srow[b]);
            else orow[b] = cvt<T>(static_cast<M>(orow[b]) + al * static_cast<M>(srow[b]));
          }
        }
      }
    });
  });
  return out;
}

namespace {
template <class M>
bool nan_of(M v) {
  if constexpr (std::is_floating_point_v<M>) return std::isnan(v);
  else return false;
}
}  // namespace

// index_reduce: slices of source combined into self at index along dim
// with prod, mean, amax or amin, in index order (torch's CPU order, each step
// rounded to the dtype). Without include_self, the indexed slices start from
// the reduction's identity; mean divides by the number of contributions
// (floor division for integers).
at::Tensor k_index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          c10::string_view reduce, bool include_self) {
  const char* op = "index_reduce";
  dim = wrap_dim(op, dim, self.dim());
  enum class R { Prod, Mean, Amax, Amin } r;
  if (reduce == "prod") r = R::Prod;
  else if (reduce == "mean") r = R::Mean;
  else if (reduce == "amax") r = R::Amax;
  else if (reduce == "amin") r = R::Amin;
  else FL_CHECK(false, op, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ",
                  reduce, ".");
  FL_CHECK_T(index.dim() <= 1, op, index, "index_reduce_(): Index is supposed to be a vector");
  FL_CHECK_T(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op, index,
               "index_reduce_(): Expected dtype int32/int64 for index");
  FL_CHECK_T(source.scalar_type() == self.scalar_type(), op, source, "index_reduce_(): self (",
               dtype_name(self.scalar_type()), ") and source (", dtype_name(source.scalar_type()),
               ") must have the same scalar type");
  auto [out, idx, src, A, N, B, K] = indexed_source(op, self, dim, index, source);
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [op, r, include_self, A, N, B, K, idx = DeviceTensor(idx), src = DeviceTensor(src),
                 out = DeviceTensor(out)] {
      const int64_t* ip = idx.const_data_ptr<int64_t>();
      // every index is checked before anything is written
      for (int64_t k = 0; k < K; ++k) checked_index(op, ip[k], N);
      T* o = out.data_ptr<T>();
      const T* sp = src.const_data_ptr<T>();
      std::vector<int64_t> counts(r == R::Mean ? static_cast<size_t>(N) : 0, include_self ? 1 : 0);
      if (!include_self) {
        M init = M(0);
        if (r == R::Prod) init = M(1);
        if (r == R::Amax)
          init = std::numeric_limits<M>::has_infinity ? -std::numeric_limits<M>::infinity()
                                                      : std::numeric_limits<M>::lowest();
        if (r == R::Amin)
          init = std::numeric_limits<M>::has_infinity ? std::numeric_limits<M>::infinity()
                                                      : std::numeric_limits<M>::max();
        for (int64_t k = 0; k < K; ++k) {
          const int64_t j = checked_index(op, ip[k], N);
          for (int64_t a = 0; a < A; ++a)
            for (int64_t b = 0; b < B; ++b) o[(a * N + j) * B + b] = cvt<T>(init);
        }
      }
      for (int64_t k = 0; k < K; ++k) {
        const int64_t j = checked_index(op, ip[k], N);
        if (r == R::Mean) ++counts[j];
        for (int64_t a = 0; a < A; ++a) {
          T* orow = o + (a * N + j) * B;
          const T* srow = sp + (a * K + k) * B;
          for (int64_t b = 0; b < B; ++b) {
            const M x = static_cast<M>(orow[b]), y = static_cast<M>(srow[b]);
            M v;
            switch (r) {
              case R::Prod: v = x * y; break;
              case R::Mean: v = x + y; break;
              case R::Amax: v = nan_of(y) ? y : std::max(x, y); break;
              default: v = nan_of(y) ? y : std::min(x, y); break;
            }
            orow[b] = cvt<T>(v);
          }
        }
      }
      if (r == R::Mean) {
        for (int64_t j = 0; j < N; ++j) {
          const int64_t c = counts[j] == 0 ? 1 : counts[j];
          for (int64_t a = 0; a < A; ++a)
            for (int64_t b = 0; b < B; ++b) {
              T& e = o[(a * N + j) * B + b];
              if constexpr (is_floating_v<T>) {
                e = cvt<T>(static_cast<M>(e) / static_cast<M>(c));
              } else {
                const M q = static_cast<M>(e) / static_cast<M>(c), rem = static_cast<M>(e) % static_cast<M>(c);
                e = static_cast<T>((rem != 0 && ((rem < 0) != (c < 0))) ? q - 1 : q);
              }
            }
        }
      }
    });
  });
  return out;
}

at::Tensor k_index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  const char* op = "index_copy";
  dim = wrap_dim(op, dim, self.dim());
  FL_CHECK_T(index.scalar_type() == at::kLong, op, index, "index_copy_(): Expected a long tensor for index");
  FL_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "index_copy_(): self and source expected to have the same dtype");
  auto [out, idx, src, A, N, B, K] = indexed_source(op, self, dim, index, source);
  const int64_t row = B * static_cast<int64_t>(out.element_size());
  launch(out, [op, A, N, K, row, idx = DeviceTensor(idx), src = DeviceTensor(src),
               out = DeviceTensor(out)] {
    const int64_t* ip = idx.const_data_ptr<int64_t>();
    char* o = static_cast<char*>(out.data_ptr());
    const char* s = static_cast<const char*>(src.const_data_ptr());
    for (int64_t k = 0; k < K; ++k) {
      const int64_t j = checked_index(op, ip[k], N);
      for (int64_t a = 0; a < A; ++a)
        std::memcpy(o + (a * N + j) * row, s + (a * K + k) * row, static_cast<size_t>(row));
    }
  });
  return out;
}

namespace {
// index_fill with the value as a Scalar (converted on the host) or as a 0-dim
// tensor `value_t` (read and converted by the device part: no host wait).
at::Tensor index_fill_impl(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Scalar* value, const at::Tensor* value_t) {
  dim = wrap_dim(op, dim, self.dim());
  FL_CHECK_T(index.scalar_type() == at::kLong, op, index, "index_fill_(): Expected dtype int64 for index");
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  int64_t A, N, B;
  split_at(out, dim, A, N, B);
  const DeviceTensor vt = value_t ? DeviceTensor(*value_t) : DeviceTensor();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    const T hv = value ? value->to<T>() : T();
    launch(out, [op, A, N, B, hv, vt, idx = DeviceTensor(idx), out = DeviceTensor(out)] {
      const T v = vt.defined() ? value_on_device<T>(op, vt) : hv;
      const int64_t* ip = idx.const_data_ptr<int64_t>();
      T* o = out.data_ptr<T>();
      for (int64_t k = 0; k < idx.numel(); ++k) {
        const int64_t j = checked_index(op, ip[k], N);
        for (int64_t a = 0; a < A; ++a)
          for (int64_t b = 0; b < B; ++b) o[(a * N + j) * B + b] = v;
      }
    });
  });
  return out;
}
}  // namespace

at::Tensor k_index_fill_int_Scalar(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Scalar& value) {
  return index_fill_impl("index_fill.int_Scalar", self, dim, index, &value, nullptr);
}

// The value is a 0-dim tensor (on the device or a CPU scalar): read by the
// device part, converted as value.item() would be. (Messages name the Scalar
// overload, as before, when this called k_index_fill_int_Scalar.)
at::Tensor k_index_fill_int_Tensor(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& value) {
  const char* op = "index_fill.int_Tensor";
  FL_CHECK_T(value.dim() == 0, op, value,
               "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
               value.dim(), " dimension(s).");
  return index_fill_impl("index_fill.int_Scalar", self, dim, index, nullptr, &value);
}

// ---- masked ops ----------------------------------------------------------------------

namespace {
void check_mask(const char* op, const at::Tensor& mask) {
  FL_CHECK_T(mask.scalar_type() == at::kBool, op, mask, "expected mask dtype to be Bool but got ",
               dtype_name(mask.scalar_type()));
}

// The value is a Scalar (converted on the host) or a 0-dim tensor `value_t`
// (read and converted by the device part, as value.item() would be: no host wait).
at::Tensor masked_fill_impl(const char* op, const at::Tensor& self, const at::Tensor& mask,
                            const at::Scalar* value, const at::Tensor* value_t) {
  check_mask(op, mask);
  // self and mask broadcast together, as in torch's masked_fill (a mask larger
  // than self gives a larger result; the in-place form then refuses it)
  auto shape = broadcast_shape(op, {&self, &mask});
  at::Tensor out = alloc_output(op, {&self}, shape, self.scalar_type());
  StridedIter it(out.sizes());
  it.add(out);
  it.add(mask);
  it.add(self);
  it.build();
  const DeviceTensor vt = value_t ? DeviceTensor(*value_t) : DeviceTensor();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    const T hv = value ? value->to<T>() : T();
    launch(out, [op, it, hv, vt] {
      const T v = vt.defined() ? value_on_device<T>(op, vt) : hv;
      map2<T, bool, T>(it, [v](bool m, T x) { return m ? v : x; });
    });
  });
  return out;
}

// Device part: counts[j] = the number of true elements of the contiguous bool
// tensor bs[j].
void launch_count_true(const at::Tensor& counts, std::vector<DeviceTensor> bs) {
  launch(counts, [bs, counts = DeviceTensor(counts)] {
    int64_t* c = counts.data_ptr<int64_t>();
    for (size_t j = 0; j < bs.size(); ++j) {
      const bool* p = bs[j].const_data_ptr<bool>();
      int64_t n = 0;
      for (int64_t i = 0; i < bs[j].numel(); ++i) n += p[i] ? 1 : 0;
      c[j] = n;
    }
  });
}

// Device part of nonzero: the coordinates of the true elements of the
// contiguous bool tensor b, row-major, into out [n, b.dim()] (int64).
void launch_nonzero_fill(const at::Tensor& out, const at::Tensor& b) {
  launch(out, [b = DeviceTensor(b), out = DeviceTensor(out)] {
    const bool* p = b.const_data_ptr<bool>();
    const int64_t nd = b.dim();
    int64_t* o = out.data_ptr<int64_t>();
    std::vector<int64_t> coord(static_cast<size_t>(nd), 0);
    for (int64_t i = 0; i < b.numel(); ++i) {
      if (p[i]) {
        for (int64_t d = 0; d < nd; ++d) *o++ = coord[d];
      }
      for (int64_t d = nd - 1; d >= 0; --d) {  // row-major increment
        if (++coord[d] < b.size(d)) break;
        coord[d] = 0;
      }
    }
  });
}

// The number of true elements of each contiguous bool tensor of `bs`, on the
// host: counted by the device, then read with one host wait for all of them
// (none when they are all empty).
std::vector<int64_t> count_true_on_host(const char* op, const std::vector<at::Tensor>& bs) {
  std::vector<int64_t> n(bs.size(), 0);
  std::vector<DeviceTensor> dbs;
  int64_t total = 0;
  for (const at::Tensor& b : bs) {
    dbs.emplace_back(b);
    total += b.numel();
  }
  if (bs.empty() || total == 0) return n;
  at::Tensor counts = at::empty({static_cast<int64_t>(bs.size())}, bs[0].options().dtype(at::kLong));
  launch_count_true(counts, std::move(dbs));
  read_on_host(op, counts, counts.const_data_ptr(), n.data(), n.size());
  return n;
}
}  // namespace

at::Tensor k_masked_fill_Scalar(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  return masked_fill_impl("masked_fill.Scalar", self, mask, &value, nullptr);
}

at::Tensor k_masked_fill_Tensor(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  const char* op = "masked_fill.Tensor";
  FL_CHECK_T(value.dim() == 0, op, value,
               "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
               value.dim(), " dimension(s).");
  return masked_fill_impl(op, self, mask, nullptr, &value);
}

at::Tensor k_masked_select(const at::Tensor& self, const at::Tensor& mask) {
  const char* op = "masked_select";
  check_mask(op, mask);
  auto shape = broadcast_shape(op, {&self, &mask});
  // both expanded to the broadcast shape, walked in row-major order
  at::Tensor m = at::empty(shape, mask.options());
  convert_into(op, m, mask);
  at::Tensor s = at::empty(shape, self.options());
  convert_into(op, s, self);
  // the output's length is the number of true elements: a host wait
  const int64_t n = count_true_on_host(op, {m})[0];
  at::Tensor out = at::empty({n}, self.options());
  if (n == 0) return out;
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = FL_T(tag);
    launch(out, [m = DeviceTensor(m), s = DeviceTensor(s), out = DeviceTensor(out)] {
      const bool* mp = m.const_data_ptr<bool>();
      const U* sp = s.const_data_ptr<U>();
      U* o = out.data_ptr<U>();
      int64_t k = 0;
      for (int64_t i = 0; i < m.numel(); ++i)
        if (mp[i]) o[k++] = sp[i];
    });
  });
  return out;
}

at::Tensor k_masked_scatter(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  const char* op = "masked_scatter";
  check_mask(op, mask);
  FL_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "masked_scatter: expected self and source to have same dtypes but got ",
               dtype_name(self.scalar_type()), " and ", dtype_name(source.scalar_type()));
  // self and mask broadcast together, as in torch's masked_scatter
  auto shape = broadcast_shape(op, {&self, &mask});
  at::Tensor out = at::empty(shape, self.options());
  convert_into(op, out, self);
  at::Tensor m = at::empty(shape, mask.options());
  convert_into(op, m, mask);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = FL_T(tag);
    launch(out, [op, m = DeviceTensor(m), src = DeviceTensor(src), out = DeviceTensor(out)] {
      const bool* mp = m.const_data_ptr<bool>();
      const U* sp = src.const_data_ptr<U>();
      U* o = out.data_ptr<U>();
      int64_t k = 0;
      for (int64_t i = 0; i < m.numel(); ++i) {
        if (!mp[i]) continue;
        // a check on the mask's values: reported at the next synchronize
        FL_CHECK(k < src.numel(), op, "Number of elements of source < number of ones in mask");
        o[i] = sp[k++];
      }
    });
  });
  return out;
}

at::Tensor k_nonzero(const at::Tensor& self) {
  const char* op = "nonzero";
  at::Tensor b = contiguous_as(op, self, at::kBool);
  const int64_t nd = self.dim();
  // the output's length is the number of true elements: a host wait
  const int64_t n = count_true_on_host(op, {b})[0];
  at::Tensor out = at::empty({n, nd}, self.options().dtype(at::kLong));
  if (out.numel() > 0) launch_nonzero_fill(out, b);
  return out;
}

at::Tensor k_take(const at::Tensor& self, const at::Tensor& index) {
  const char* op = "take";
  FL_CHECK_T(index.scalar_type() == at::kLong, op, index, "take(): Expected a long tensor for index");
  at::Tensor src = contiguous_as(op, self, self.scalar_type());
  at::Tensor idx = index_as_long(op, index);
  at::Tensor out = at::empty(index.sizes(), self.options());
  const int64_t n = self.numel();
  FL_CHECK_INDEX(n > 0 || idx.numel() == 0, op, "cannot take from an empty tensor");
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = FL_T(tag);
    launch(out, [op, n, idx = DeviceTensor(idx), src = DeviceTensor(src), out = DeviceTensor(out)] {
      const int64_t* ip = idx.const_data_ptr<int64_t>();
      const U* sp = src.const_data_ptr<U>();
      U* o = out.data_ptr<U>();
      for (int64_t i = 0; i < idx.numel(); ++i) o[i] = sp[checked_index(op, ip[i], n)];
    });
  });
  return out;
}

at::Tensor k_put(const at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  const char* op = "put";
  FL_CHECK_T(index.scalar_type() == at::kLong, op, index, "put(): Expected a long tensor for index");
  FL_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "put(): self and source expected to have the same dtype");
  FL_CHECK(index.numel() == source.numel(), op, "put(): Expected source and index to have the same "
             "number of elements, but got source.numel() = ", source.numel(), ", index.numel() = ",
             index.numel());
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  const int64_t n = out.numel();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [op, n, accumulate, idx = DeviceTensor(idx), src = DeviceTensor(src),
                 out = DeviceTensor(out)] {
      const int64_t* ip = idx.const_data_ptr<int64_t>();
      T* o = out.data_ptr<T>();
      const T* s = src.const_data_ptr<T>();
      for (int64_t i = 0; i < idx.numel(); ++i) {
        T& d = o[checked_index(op, ip[i], n)];
        if (!accumulate) d = s[i];
        else if constexpr (std::is_same_v<T, bool>) d = d || s[i];
        else d = cvt<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(s[i]));
      }
    });
  });
  return out;
}

// ---- advanced indexing ---------------------------------------------------------------
//
// self[indices] with index tensors on some dims: bool masks become their
// nonzero coordinates; the index tensors broadcast to shape I. If the indexed
// dims are adjacent the result is [dims before, I, dims after], otherwise
// [I, all non-indexed dims]. Both are written as pre x I x post where every
// element's source offset is pre_off + idx_off + post_off, computed once per
// factor, so the inner loops are plain offset lookups. pre_off and post_off
// come from self's sizes and strides (host part); idx_off from the index
// values, so the device part computes it (mid_offsets).

namespace {
// One index tensor, broadcast to shape I as contiguous int64, and the dim of
// self it indexes.
struct IndexOperand {
  DeviceTensor e;
  int64_t dim = 0, size = 0, stride = 0;  // self's dim, its size and stride
};

struct AdvIndex {
  std::vector<int64_t> pre_off, post_off;  // element offsets into self
  std::vector<IndexOperand> index;         // read by the device part (mid_offsets)
  int64_t ni = 1;                          // elements of I
  std::vector<int64_t> result_shape;
};

// Device part: the offsets (in elements) into self of every position of I,
// each index value checked against its dim's size.
std::vector<int64_t> mid_offsets(const char* op, const AdvIndex& p) {
  std::vector<int64_t> mid_off(static_cast<size_t>(p.ni), 0);
  for (const IndexOperand& x : p.index) {
    const int64_t* ep = x.e.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < p.ni; ++i) {
      FL_CHECK_INDEX(ep[i] >= -x.size && ep[i] < x.size, op, "index ", ep[i],
                       " is out of bounds for dimension ", x.dim, " with size ", x.size);
      const int64_t v = ep[i] < 0 ? ep[i] + x.size : ep[i];
      mid_off[i] += v * x.stride;
    }
  }
  return mid_off;
}

// Offsets (in elements) of every position of the given dims of self, row-major.
std::vector<int64_t> dim_offsets(const at::Tensor& self, const std::vector<int64_t>& dims) {
  std::vector<int64_t> offs{0};
  for (int64_t d : dims) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(self.size(d)));
    for (int64_t o : offs)
      for (int64_t i = 0; i < self.size(d); ++i) next.push_back(o + i * self.stride(d));
    offs.swap(next);
  }
  return offs;
}

// `keep` receives the broadcast index tensors AdvIndex::index describes: the
// caller holds them until it has queued the device part that reads them (so
// their memory is not handed to a tensor allocated in between).
AdvIndex plan_index(const char* op, const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                    std::vector<at::Tensor>& keep) {
  // 1. expand bool/uint8 masks into one long index per masked dim
  std::vector<at::Tensor> idx;  // per self dim; undefined = full slice
  // masks (as contiguous bool) and where their columns go in idx, filled in below
  std::vector<at::Tensor> masks;
  std::vector<size_t> mask_pos;
  for (size_t k = 0; k < indices.size(); ++k) {
    std::optional<at::Tensor> t = indices.get(k);
    if (!t.has_value() || !t->defined()) {
      idx.emplace_back();
      continue;
    }
    if (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte) {
      const int64_t start = static_cast<int64_t>(idx.size());
      FL_CHECK_INDEX(start + t->dim() <= self.dim(), op, "too many indices for tensor of dimension ",
                       self.dim());
      for (int64_t d = 0; d < t->dim(); ++d)
        FL_CHECK_INDEX(t->size(d) == self.size(start + d), op, "The shape of the mask ", t->sizes(),
                         " at index ", d, " does not match the shape of the indexed tensor ",
                         self.sizes(), " at index ", start + d);
      if (t->dim() > 0) {  // a 0-dim mask gives no index column
        masks.push_back(contiguous_as("nonzero", *t, at::kBool));
        mask_pos.push_back(idx.size());
        idx.resize(idx.size() + static_cast<size_t>(t->dim()));
      }
    } else {
      FL_CHECK_T(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, op, *t,
                   "tensors used as indices must be long, int, byte or bool tensors");
      idx.push_back(*t);
    }
  }
  // The masks' nonzero coordinates [n, mask.dim()]: their counts decide the
  // result's shape, so they are read by the host (one wait for all masks); the
  // coordinates are written by the device, and column d indexes dim start + d.
  if (!masks.empty()) {
    const std::vector<int64_t> counts = count_true_on_host(op, masks);
    for (size_t j = 0; j < masks.size(); ++j) {
      const at::Tensor& b = masks[j];
      at::Tensor nz = at::empty({counts[j], b.dim()}, b.options().dtype(at::kLong));
      if (nz.numel() > 0) launch_nonzero_fill(nz, b);
      for (int64_t d = 0; d < b.dim(); ++d) idx[mask_pos[j] + static_cast<size_t>(d)] = nz.select(1, d);
    }
  }
  FL_CHECK_INDEX(static_cast<int64_t>(idx.size()) <= self.dim(), op, "too many indices for tensor of dimension ",
                   self.dim(), " (got ", idx.size(), ")");
  idx.resize(static_cast<size_t>(self.dim()));
  // 2. broadcast the index tensors
  std::vector<const at::Tensor*> defined;
  std::vector<int64_t> idims, other_dims;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (idx[d].defined()) {
      defined.push_back(&idx[d]);
      idims.push_back(d);
    } else {
      other_dims.push_back(d);
    }
  }
  FL_CHECK(!idims.empty(), op, "at least one index tensor is required");
  std::vector<int64_t> ishape;
  for (const at::Tensor* t : defined) {
    auto s = t->sizes();
    if (s.size() > ishape.size()) ishape.insert(ishape.begin(), s.size() - ishape.size(), 1);
    const size_t off = ishape.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = ishape[off + i];
      FL_CHECK_INDEX(o == s[i] || o == 1 || s[i] == 1, op, "shape mismatch: indexing tensors could "
                       "not be broadcast together");
      if (o == 1) o = s[i];
    }
  }
  int64_t ni = 1;
  for (int64_t s : ishape) ni *= s;
  AdvIndex r;
  r.ni = ni;
  for (size_t k = 0; k < defined.size(); ++k) {
    at::Tensor e = at::empty(ishape, defined[k]->options().dtype(at::kLong));
    convert_into(op, e, *defined[k]);  // broadcast + int64
    const int64_t d = idims[k];
    r.index.push_back(IndexOperand{DeviceTensor(e), d, self.size(d), self.stride(d)});
    keep.push_back(e);
  }
  // 3. adjacency decides where the index dims go in the result
  bool adjacent = true;
  for (size_t k = 1; k < idims.size(); ++k)
    if (idims[k] != idims[k - 1] + 1) adjacent = false;
  std::vector<int64_t> pre, post;
  for (int64_t d : other_dims) {
    if (adjacent && d < idims.front()) pre.push_back(d);
    else post.push_back(d);
  }
  r.pre_off = dim_offsets(self, pre);
  r.post_off = dim_offsets(self, post);
  for (int64_t d : pre) r.result_shape.push_back(self.size(d));
  r.result_shape.insert(r.result_shape.end(), ishape.begin(), ishape.end());
  for (int64_t d : post) r.result_shape.push_back(self.size(d));
  return r;
}
}  // namespace

at::Tensor k_index_Tensor(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  const char* op = "index.Tensor";
  std::vector<at::Tensor> keep;
  AdvIndex p = plan_index(op, self, indices, keep);
  at::Tensor out = at::empty(p.result_shape, self.options());
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = FL_T(tag);
    launch(out, [op, p, self = DeviceTensor(self), out = DeviceTensor(out)] {
      const std::vector<int64_t> mid_off = mid_offsets(op, p);
      const U* s = self.const_data_ptr<U>();
      U* o = out.data_ptr<U>();
      int64_t k = 0;
      for (int64_t a : p.pre_off)
        for (int64_t m : mid_off)
          for (int64_t b : p.post_off) o[k++] = s[a + m + b];
    });
  });
  return out;
}

namespace {
// self[indices] = values (or += with accumulate), written into self in place
// through self's strides; values broadcast to the indexing result's shape.
void index_put_into(const char* op, const at::Tensor& self,
                    const c10::List<std::optional<at::Tensor>>& indices, const at::Tensor& values,
                    bool accumulate) {
  FL_CHECK_T(values.scalar_type() == self.scalar_type(), op, values,
               "Index put requires the source and destination dtypes match, got ",
               dtype_name(self.scalar_type()), " for the destination and ",
               dtype_name(values.scalar_type()), " for the source.");
  FL_CHECK_T(at::has_internal_overlap(self) != at::MemOverlap::Yes, op, self,
               "unsupported operation: some elements of the input tensor and the written-to tensor "
               "refer to a single memory location. Please clone() the tensor before performing the "
               "operation.");
  std::vector<at::Tensor> keep;
  AdvIndex p = plan_index(op, self, indices, keep);
  // a fresh copy of values at the result's shape: also safe when values aliases self
  at::Tensor v = at::empty(p.result_shape, self.options());
  {
    auto bs = broadcast_shape(op, {&v, &values});
    FL_CHECK(bs == at::IntArrayRef(p.result_shape), op, "shape mismatch: value tensor of shape ",
               values.sizes(), " cannot be broadcast to indexing result of shape ",
               at::IntArrayRef(p.result_shape));
  }
  convert_into(op, v, values);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [op, p, accumulate, self = DeviceTensor(self), v = DeviceTensor(v)] {
      const std::vector<int64_t> mid_off = mid_offsets(op, p);
      T* o = self.data_ptr<T>();
      const T* vp = v.const_data_ptr<T>();
      int64_t k = 0;
      for (int64_t a : p.pre_off)
        for (int64_t m : mid_off)
          for (int64_t b : p.post_off) {
            T& d = o[a + m + b];
            const T x = vp[k++];
            if (!accumulate) d = x;
            else if constexpr (std::is_same_v<T, bool>) d = d || x;
            else d = cvt<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(x));
          }
    });
  });
}
}  // namespace

at::Tensor k_index_put(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                       const at::Tensor& values, bool accumulate) {
  at::Tensor out = clone_contig("index_put", self);
  index_put_into("index_put", out, indices, values, accumulate);
  return out;
}

// What index_put_ and the backward of self[indices] (accumulate=True) call.
// `unsafe` only lets CUDA skip its bounds checks; acme always checks.
at::Tensor& k__index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                               const at::Tensor& values, bool accumulate, bool unsafe) {
  (void)unsafe;
  index_put_into("_index_put_impl_", self, indices, values, accumulate);
  return self;
}

}  // namespace acme::kernels
