// acme indexing kernels: index_select, gather/scatter family, advanced
// indexing (index.Tensor / index_put), masked ops, nonzero, take/put.
// Pure data movement is dispatched on the element *size* (1/2/4/8 bytes), not
// the dtype, so it works for every acme dtype with four instantiations; ops
// that do arithmetic (scatter_add, index_add, accumulate) dispatch on dtype.
#include "common/common.h"

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
  ACME_CHECK_T(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op, index,
               what, " must be an int64 or int32 tensor");
  return contiguous_as(op, index, at::kLong);
}

int64_t checked_index(const char* op, int64_t i, int64_t size) {
  ACME_CHECK_INDEX(i >= -size && i < size, op, "index ", i,
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

}  // namespace

at::Tensor k_index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  const char* op = "index_select";
  dim = wrap_dim(op, dim, self.dim());
  ACME_CHECK_T(index.dim() <= 1, op, index, "index_select(): Index is supposed to be a vector");
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, self, self.scalar_type());
  int64_t A, N, B;
  split_at(src, dim, A, N, B);
  const int64_t K = idx.numel();
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[dim] = K;
  at::Tensor out = at::empty(shape, self.options());
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  for (int64_t k = 0; k < K; ++k)
    ACME_CHECK_INDEX(ip[k] >= 0 && ip[k] < N, op, "index out of range in self (index ", ip[k],
                     ", size ", N, ")");
  const int64_t row = B * static_cast<int64_t>(self.element_size());
  const char* s = static_cast<const char*>(src.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  for (int64_t a = 0; a < A; ++a)
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(o + (a * K + k) * row, s + (a * N + ip[k]) * row, static_cast<size_t>(row));
  return out;
}

namespace {

// Iterates over the positions of `index` (gather/scatter convention): calls
// body(char* self_at_dim0, const int64_t idx, char* other) where self_at_dim0
// points at self[..., 0 (along dim), ...] for that position.
template <class F>
void for_index_positions(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& idx,
                         const at::Tensor* other, F&& body) {
  // self viewed with index's sizes and dim's stride zeroed
  std::vector<int64_t> sstr(self.strides().begin(), self.strides().end());
  if (self.dim() > 0) sstr[dim] = 0;
  // a 0-dim self or other has no dims to walk: it broadcasts (sizes and strides empty)
  auto sizes_of = [&](const at::Tensor& t) { return t.dim() == 0 ? at::IntArrayRef() : idx.sizes(); };
  StridedIter it(idx.sizes());
  it.add(idx);
  it.add_strided(static_cast<char*>(self.data_ptr()), sizes_of(self),
                 self.dim() == 0 ? at::IntArrayRef() : at::IntArrayRef(sstr),
                 static_cast<int64_t>(self.element_size()));
  if (other) {
    std::vector<int64_t> ostr(other->strides().begin(), other->strides().end());
    it.add_strided(static_cast<char*>(other->data_ptr()), sizes_of(*other),
                   other->dim() == 0 ? at::IntArrayRef() : at::IntArrayRef(ostr),
                   static_cast<int64_t>(other->element_size()));
  }
  it.build(/*order_by_first=*/false);
  const int64_t dsize = self.dim() == 0 ? 1 : self.size(dim);
  it.for_each([&](char* const* p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = *reinterpret_cast<const int64_t*>(p[0] + i * s[0]);
      ACME_CHECK_INDEX(v >= 0 && v < dsize, op, "index ", v,
                       " is out of bounds for dimension ", dim, " with size ", dsize);
      body(p[1] + i * s[1], v, other ? p[2] + i * s[2] : nullptr);
    }
  });
}

void check_gather_shapes(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor* src) {
  ACME_CHECK(index.dim() == self.dim() || (index.dim() <= 1 && self.dim() <= 1), op,
             "Index tensor must have the same number of dimensions as input tensor");
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim)
      ACME_CHECK(index.size(d) <= self.size(d), op, "Size does not match at dimension ", d,
                 " expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                 " apart from dimension ", dim);
    if (src && src->dim() > 0)
      ACME_CHECK(index.size(d) <= src->size(d), op, "Expected index ", index.sizes(),
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
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = ACME_T(tag);
    U* o = static_cast<U*>(out.data_ptr());
    int64_t k = 0;  // out and idx are contiguous with the same shape
    for_index_positions(op, self, dim, idx, nullptr, [&](char* s0, int64_t v, char*) {
      o[k++] = *reinterpret_cast<const U*>(s0 + v * dstride);
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
    ACME_CHECK_T(src->scalar_type() == self.scalar_type(), op, *src, "Expected self.dtype (",
                 dtype_name(self.scalar_type()), ") to be equal to src.dtype");
  // as torch: an empty index scatters nothing and is not checked (gather's backward sends one)
  if (index.numel() == 0) return clone_contig(op, self);
  check_gather_shapes(op, self, dim, index, src);
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  const int64_t dstride = out.dim() == 0 ? 0 : out.stride(dim) * out.element_size();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    const T cv = value ? value->to<T>() : T();
    for_index_positions(op, out, dim, idx, src, [&](char* o0, int64_t v, char* sp) {
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
  ACME_CHECK(reduce == "multiply", op, "reduce argument must be either add or multiply., got ",
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
  ACME_CHECK(kind >= 0, op, "reduce argument must be either sum, prod, mean, amax or amin, got ",
             std::string(reduce));
  dim = wrap_dim(op, dim, self.dim());
  ACME_CHECK_T(src.scalar_type() == self.scalar_type(), op, src, "Expected self.dtype (",
               dtype_name(self.scalar_type()), ") to be equal to src.dtype");
  if (index.numel() == 0) return clone_contig(op, self);  // as scatter_impl
  check_gather_shapes(op, self, dim, index, &src);
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  const int64_t dstride = out.dim() == 0 ? 0 : out.stride(dim) * out.element_size();
  const int64_t esz = out.element_size();
  // per output element: number of scattered values (and whether it was touched)
  std::vector<int64_t> count(static_cast<size_t>(out.numel()), include_self ? 1 : 0);
  char* base = static_cast<char*>(out.data_ptr());
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    // accumulate in opmath (float for float16/bfloat16) and round once at the end
    T* o = static_cast<T*>(out.data_ptr());
    std::vector<M> acc(static_cast<size_t>(out.numel()));
    for (int64_t i = 0; i < out.numel(); ++i) acc[i] = static_cast<M>(o[i]);
    for_index_positions(op, out, dim, idx, &src, [&](char* o0, int64_t v, char* sp) {
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
  return out;
}

at::Tensor k_index_add(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                       const at::Scalar& alpha) {
  const char* op = "index_add";
  dim = wrap_dim(op, dim, self.dim());
  ACME_CHECK_T(index.dim() <= 1, op, index, "index_add_(): Index is supposed to be a vector");
  ACME_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "index_add_(): self (", dtype_name(self.scalar_type()), ") and source (",
               dtype_name(source.scalar_type()), ") must have the same scalar type");
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  int64_t A, N, B;
  split_at(out, dim, A, N, B);
  const int64_t K = idx.numel();
  ACME_CHECK(source.dim() == 0 ? K == 1 : (source.dim() == std::max<int64_t>(self.dim(), 1) &&
                                           source.size(self.dim() == 0 ? 0 : dim) == K), op,
             "source of shape ", source.sizes(), " does not match index of ", K, " elements");
  ACME_CHECK(src.numel() == A * K * B, op, "source of shape ", source.sizes(),
             " does not match self ", self.sizes(), " with ", K, " indices along dim ", dim);
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    const M al = alpha.to<M>();
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
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
  else ACME_CHECK(false, op, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ",
                  reduce, ".");
  ACME_CHECK_T(index.dim() <= 1, op, index, "index_reduce_(): Index is supposed to be a vector");
  ACME_CHECK_T(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op, index,
               "index_reduce_(): Expected dtype int32/int64 for index");
  ACME_CHECK_T(source.scalar_type() == self.scalar_type(), op, source, "index_reduce_(): self (",
               dtype_name(self.scalar_type()), ") and source (", dtype_name(source.scalar_type()),
               ") must have the same scalar type");
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  int64_t A, N, B;
  split_at(out, dim, A, N, B);
  const int64_t K = idx.numel();
  ACME_CHECK(src.numel() == A * K * B, op, "source of shape ", source.sizes(), " does not match self ",
             self.sizes(), " with ", K, " indices along dim ", dim);
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  for (int64_t k = 0; k < K; ++k) checked_index(op, ip[k], N);
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    using M = opmath_t<T>;
    T* o = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
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
  return out;
}

at::Tensor k_index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  const char* op = "index_copy";
  dim = wrap_dim(op, dim, self.dim());
  ACME_CHECK_T(index.scalar_type() == at::kLong, op, index, "index_copy_(): Expected a long tensor for index");
  ACME_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "index_copy_(): self and source expected to have the same dtype");
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  int64_t A, N, B;
  split_at(out, dim, A, N, B);
  const int64_t K = idx.numel();
  ACME_CHECK(src.numel() == A * K * B, op, "source of shape ", source.sizes(),
             " does not match self ", self.sizes(), " with ", K, " indices along dim ", dim);
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  const int64_t row = B * static_cast<int64_t>(out.element_size());
  char* o = static_cast<char*>(out.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  for (int64_t k = 0; k < K; ++k) {
    const int64_t j = checked_index(op, ip[k], N);
    for (int64_t a = 0; a < A; ++a)
      std::memcpy(o + (a * N + j) * row, s + (a * K + k) * row, static_cast<size_t>(row));
  }
  return out;
}

at::Tensor k_index_fill_int_Scalar(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Scalar& value) {
  const char* op = "index_fill.int_Scalar";
  dim = wrap_dim(op, dim, self.dim());
  ACME_CHECK_T(index.scalar_type() == at::kLong, op, index, "index_fill_(): Expected dtype int64 for index");
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  int64_t A, N, B;
  split_at(out, dim, A, N, B);
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    const T v = value.to<T>();
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t k = 0; k < idx.numel(); ++k) {
      const int64_t j = checked_index(op, ip[k], N);
      for (int64_t a = 0; a < A; ++a)
        for (int64_t b = 0; b < B; ++b) o[(a * N + j) * B + b] = v;
    }
  });
  return out;
}

// The value is a 0-dim tensor (on the device or a CPU scalar): read once on
// the host, then the Scalar kernel above.
at::Tensor k_index_fill_int_Tensor(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& value) {
  const char* op = "index_fill.int_Tensor";
  ACME_CHECK_T(value.dim() == 0, op, value,
               "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
               value.dim(), " dimension(s).");
  return k_index_fill_int_Scalar(self, dim, index, value.item());
}

// ---- masked ops ----------------------------------------------------------------------

namespace {
void check_mask(const char* op, const at::Tensor& mask) {
  ACME_CHECK_T(mask.scalar_type() == at::kBool, op, mask, "expected mask dtype to be Bool but got ",
               dtype_name(mask.scalar_type()));
}

at::Tensor masked_fill_impl(const char* op, const at::Tensor& self, const at::Tensor& mask,
                            const at::Scalar& value) {
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
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    const T v = value.to<T>();
    map2<T, bool, T>(it, [v](bool m, T x) { return m ? v : x; });
  });
  return out;
}
}  // namespace

at::Tensor k_masked_fill_Scalar(const at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  return masked_fill_impl("masked_fill.Scalar", self, mask, value);
}

at::Tensor k_masked_fill_Tensor(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  const char* op = "masked_fill.Tensor";
  ACME_CHECK_T(value.dim() == 0, op, value,
               "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
               value.dim(), " dimension(s).");
  return masked_fill_impl(op, self, mask, tensor_to_scalar(op, value));
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
  const bool* mp = static_cast<const bool*>(m.data_ptr());
  int64_t n = 0;
  for (int64_t i = 0; i < m.numel(); ++i) n += mp[i] ? 1 : 0;
  at::Tensor out = at::empty({n}, self.options());
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = ACME_T(tag);
    const U* sp = static_cast<const U*>(s.data_ptr());
    U* o = static_cast<U*>(out.data_ptr());
    int64_t k = 0;
    for (int64_t i = 0; i < m.numel(); ++i)
      if (mp[i]) o[k++] = sp[i];
  });
  return out;
}

at::Tensor k_masked_scatter(const at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  const char* op = "masked_scatter";
  check_mask(op, mask);
  ACME_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "masked_scatter: expected self and source to have same dtypes but got ",
               dtype_name(self.scalar_type()), " and ", dtype_name(source.scalar_type()));
  // self and mask broadcast together, as in torch's masked_scatter
  auto shape = broadcast_shape(op, {&self, &mask});
  at::Tensor out = at::empty(shape, self.options());
  convert_into(op, out, self);
  at::Tensor m = at::empty(shape, mask.options());
  convert_into(op, m, mask);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  const bool* mp = static_cast<const bool*>(m.data_ptr());
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = ACME_T(tag);
    const U* sp = static_cast<const U*>(src.data_ptr());
    U* o = static_cast<U*>(out.data_ptr());
    int64_t k = 0;
    for (int64_t i = 0; i < m.numel(); ++i) {
      if (!mp[i]) continue;
      ACME_CHECK(k < src.numel(), op, "Number of elements of source < number of ones in mask");
      o[i] = sp[k++];
    }
  });
  return out;
}

at::Tensor k_nonzero(const at::Tensor& self) {
  const char* op = "nonzero";
  at::Tensor b = contiguous_as(op, self, at::kBool);
  const bool* p = static_cast<const bool*>(b.data_ptr());
  const int64_t nd = self.dim();
  int64_t n = 0;
  for (int64_t i = 0; i < b.numel(); ++i) n += p[i] ? 1 : 0;
  at::Tensor out = at::empty({n, nd}, self.options().dtype(at::kLong));
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  std::vector<int64_t> coord(static_cast<size_t>(nd), 0);
  for (int64_t i = 0; i < b.numel(); ++i) {
    if (p[i]) {
      for (int64_t d = 0; d < nd; ++d) *o++ = coord[d];
    }
    for (int64_t d = nd - 1; d >= 0; --d) {  // row-major increment
      if (++coord[d] < self.size(d)) break;
      coord[d] = 0;
    }
  }
  return out;
}

at::Tensor k_take(const at::Tensor& self, const at::Tensor& index) {
  const char* op = "take";
  ACME_CHECK_T(index.scalar_type() == at::kLong, op, index, "take(): Expected a long tensor for index");
  at::Tensor src = contiguous_as(op, self, self.scalar_type());
  at::Tensor idx = index_as_long(op, index);
  at::Tensor out = at::empty(index.sizes(), self.options());
  const int64_t n = self.numel();
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  ACME_CHECK_INDEX(n > 0 || idx.numel() == 0, op, "cannot take from an empty tensor");
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = ACME_T(tag);
    const U* sp = static_cast<const U*>(src.data_ptr());
    U* o = static_cast<U*>(out.data_ptr());
    for (int64_t i = 0; i < idx.numel(); ++i) o[i] = sp[checked_index(op, ip[i], n)];
  });
  return out;
}

at::Tensor k_put(const at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  const char* op = "put";
  ACME_CHECK_T(index.scalar_type() == at::kLong, op, index, "put(): Expected a long tensor for index");
  ACME_CHECK_T(source.scalar_type() == self.scalar_type(), op, source,
               "put(): self and source expected to have the same dtype");
  ACME_CHECK(index.numel() == source.numel(), op, "put(): Expected source and index to have the same "
             "number of elements, but got source.numel() = ", source.numel(), ", index.numel() = ",
             index.numel());
  at::Tensor out = clone_contig(op, self);
  at::Tensor idx = index_as_long(op, index);
  at::Tensor src = contiguous_as(op, source, source.scalar_type());
  const int64_t n = out.numel();
  const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
    for (int64_t i = 0; i < idx.numel(); ++i) {
      T& d = o[checked_index(op, ip[i], n)];
      if (!accumulate) d = s[i];
      else if constexpr (std::is_same_v<T, bool>) d = d || s[i];
      else d = cvt<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(s[i]));
    }
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
// factor, so the inner loops are plain offset lookups.

namespace {
struct AdvIndex {
  std::vector<int64_t> pre_off, mid_off, post_off;  // element offsets into self
  std::vector<int64_t> result_shape;
};

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

AdvIndex plan_index(const char* op, const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  // 1. expand bool/uint8 masks into one long index per masked dim
  std::vector<at::Tensor> idx;  // per self dim; undefined = full slice
  for (size_t k = 0; k < indices.size(); ++k) {
    std::optional<at::Tensor> t = indices.get(k);
    if (!t.has_value() || !t->defined()) {
      idx.emplace_back();
      continue;
    }
    if (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte) {
      const int64_t start = static_cast<int64_t>(idx.size());
      ACME_CHECK_INDEX(start + t->dim() <= self.dim(), op, "too many indices for tensor of dimension ",
                       self.dim());
      for (int64_t d = 0; d < t->dim(); ++d)
        ACME_CHECK_INDEX(t->size(d) == self.size(start + d), op, "The shape of the mask ", t->sizes(),
                         " at index ", d, " does not match the shape of the indexed tensor ",
                         self.sizes(), " at index ", start + d);
      at::Tensor nz = k_nonzero(*t);  // [n, t.dim()]
      for (int64_t d = 0; d < t->dim(); ++d) {
        at::Tensor col = at::empty({nz.size(0)}, nz.options());
        const int64_t* np = static_cast<const int64_t*>(nz.data_ptr());
        int64_t* cp = static_cast<int64_t*>(col.data_ptr());
        for (int64_t r = 0; r < nz.size(0); ++r) cp[r] = np[r * t->dim() + d];
        idx.push_back(col);
      }
    } else {
      ACME_CHECK_T(t->scalar_type() == at::kLong || t->scalar_type() == at::kInt, op, *t,
                   "tensors used as indices must be long, int, byte or bool tensors");
      idx.push_back(*t);
    }
  }
  ACME_CHECK_INDEX(static_cast<int64_t>(idx.size()) <= self.dim(), op, "too many indices for tensor of dimension ",
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
  ACME_CHECK(!idims.empty(), op, "at least one index tensor is required");
  std::vector<int64_t> ishape;
  for (const at::Tensor* t : defined) {
    auto s = t->sizes();
    if (s.size() > ishape.size()) ishape.insert(ishape.begin(), s.size() - ishape.size(), 1);
    const size_t off = ishape.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = ishape[off + i];
      ACME_CHECK_INDEX(o == s[i] || o == 1 || s[i] == 1, op, "shape mismatch: indexing tensors could "
                       "not be broadcast together");
      if (o == 1) o = s[i];
    }
  }
  int64_t ni = 1;
  for (int64_t s : ishape) ni *= s;
  AdvIndex r;
  r.mid_off.assign(static_cast<size_t>(ni), 0);
  for (size_t k = 0; k < defined.size(); ++k) {
    at::Tensor e = at::empty(ishape, defined[k]->options().dtype(at::kLong));
    convert_into(op, e, *defined[k]);  // broadcast + int64
    const int64_t* ep = static_cast<const int64_t*>(e.data_ptr());
    const int64_t d = idims[k];
    for (int64_t i = 0; i < ni; ++i) {
      ACME_CHECK_INDEX(ep[i] >= -self.size(d) && ep[i] < self.size(d), op, "index ", ep[i],
                       " is out of bounds for dimension ", d, " with size ", self.size(d));
      const int64_t v = ep[i] < 0 ? ep[i] + self.size(d) : ep[i];
      r.mid_off[i] += v * self.stride(d);
    }
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
  AdvIndex p = plan_index(op, self, indices);
  at::Tensor out = at::empty(p.result_shape, self.options());
  by_elsize(op, self.element_size(), [&](auto tag) {
    using U = ACME_T(tag);
    const U* s = static_cast<const U*>(self.data_ptr());
    U* o = static_cast<U*>(out.data_ptr());
    int64_t k = 0;
    for (int64_t a : p.pre_off)
      for (int64_t m : p.mid_off)
        for (int64_t b : p.post_off) o[k++] = s[a + m + b];
  });
  return out;
}

namespace {
// self[indices] = values (or += with accumulate), written into self in place
// through self's strides; values broadcast to the indexing result's shape.
void index_put_into(const char* op, const at::Tensor& self,
                    const c10::List<std::optional<at::Tensor>>& indices, const at::Tensor& values,
                    bool accumulate) {
  ACME_CHECK_T(values.scalar_type() == self.scalar_type(), op, values,
               "Index put requires the source and destination dtypes match, got ",
               dtype_name(self.scalar_type()), " for the destination and ",
               dtype_name(values.scalar_type()), " for the source.");
  ACME_CHECK_T(at::has_internal_overlap(self) != at::MemOverlap::Yes, op, self,
               "unsupported operation: some elements of the input tensor and the written-to tensor "
               "refer to a single memory location. Please clone() the tensor before performing the "
               "operation.");
  AdvIndex p = plan_index(op, self, indices);
  // a fresh copy of values at the result's shape: also safe when values aliases self
  at::Tensor v = at::empty(p.result_shape, self.options());
  {
    auto bs = broadcast_shape(op, {&v, &values});
    ACME_CHECK(bs == at::IntArrayRef(p.result_shape), op, "shape mismatch: value tensor of shape ",
               values.sizes(), " cannot be broadcast to indexing result of shape ",
               at::IntArrayRef(p.result_shape));
  }
  convert_into(op, v, values);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    T* o = static_cast<T*>(self.data_ptr());
    const T* vp = static_cast<const T*>(v.data_ptr());
    int64_t k = 0;
    for (int64_t a : p.pre_off)
      for (int64_t m : p.mid_off)
        for (int64_t b : p.post_off) {
          T& d = o[a + m + b];
          const T x = vp[k++];
          if (!accumulate) d = x;
          else if constexpr (std::is_same_v<T, bool>) d = d || x;
          else d = cvt<T>(static_cast<opmath_t<T>>(d) + static_cast<opmath_t<T>>(x));
        }
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
