// Host parts of the indexing ops, every dtype (device part: kernels/indexing.cl's
// `indexed` kernel). Each op describes an iteration shape, the dense operand A,
// the indexed operand B and up to four index tensors; elements move by their
// size, so one program per element size serves every dtype. Accumulating
// scatters add with atomics on float32, float64, int32 and int64 and compute the
// other dtypes in a wider one.
#include "kernels.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sub.h>
#include <c10/core/WrapDimMinimal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

constexpr int kMaxIndices = 4;
struct IndexLayout {
  std::int32_t ndim = 0;
  std::int32_t nidx = 0;
  std::int64_t sizes[runtime::kLayoutDims] = {};
  std::int64_t a[runtime::kLayoutDims] = {};
  std::int64_t b[runtime::kLayoutDims] = {};
  std::int64_t idx[kMaxIndices][runtime::kLayoutDims] = {};
  std::int64_t dim_size[kMaxIndices] = {};
  std::int64_t dim_stride[kMaxIndices] = {};
};

bool atomic_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kInt || t == at::kLong;
}

// Moves elements between A (dense) and B (indexed) as L describes.
void run(const char* name, bool scatter, bool accumulate, const at::Tensor& A, const at::Tensor& B,
         const std::vector<at::Tensor>& idx, IndexLayout L) {
  TORCH_CHECK(L.ndim <= runtime::kLayoutDims, "ocl: ", name, ": tensors of ", L.ndim,
              " dims are not supported by the OpenCL kernel (at most ", runtime::kLayoutDims, ")");
  TORCH_CHECK(static_cast<int>(idx.size()) <= kMaxIndices, "ocl: ", name, ": at most ", kMaxIndices,
              " index tensors are supported by the OpenCL kernel, got ", idx.size());
  L.nidx = static_cast<std::int32_t>(idx.size());
  std::int64_t n = 1;
  for (int d = 0; d < L.ndim; ++d) n *= L.sizes[d];
  if (n == 0) return;
  const at::ScalarType t = B.scalar_type();
  std::string d = std::string("#define SCATTER ") + (scatter ? "1" : "0") + "\n#define ACCUMULATE " +
                  (accumulate ? "1" : "0") + "\n";
  if (accumulate) {
    switch (t) {
      case at::kFloat: d += "#define ET float\n#define ACC_FLOAT\n"; break;
      case at::kDouble: d += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#define ET double\n#define ACC_DOUBLE\n"; break;
      case at::kInt: d += "#define ET int\n#define ACC_INT\n"; break;
      default: d += "#define ET long\n#define ACC_LONG\n"; break;
    }
  } else {
    switch (B.element_size()) {
      case 1: d += "#define ET uchar\n"; break;
      case 2: d += "#define ET ushort\n"; break;
      case 4: d += "#define ET uint\n"; break;
      case 8: d += "#define ET ulong\n"; break;
      default: TORCH_CHECK(false, "ocl: ", name, ": elements of ", B.element_size(), " bytes (", t,
                           ") are not moved by the OpenCL kernel");
    }
  }
  const int device = B.device().index();
  auto ibuf = [&](std::size_t k) { return runtime::buffer_arg(k < idx.size() ? idx[k].const_data_ptr() : nullptr); };
  launch_specialised(name, device, "kernels/indexing.cl", d, "indexed",
                     runtime::Range1D(static_cast<std::size_t>(n)),
                     {runtime::buffer_arg(A.const_data_ptr()), runtime::buffer_arg(B.const_data_ptr()), ibuf(0), ibuf(1),
                      ibuf(2), ibuf(3), runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n)});
}

// An index tensor on the device as int64 (int32 and CPU indices converted).
at::Tensor long_index(const char* name, const at::Tensor& index, const at::Tensor& like) {
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, name,
              "(): Expected dtype int32/int64 for index, got ", index.scalar_type());
  return index.to(like.device(), at::kLong);
}

// A 0-dim device tensor holding `value` in `like`'s dtype, written by a kernel
// (no copy from the host, so no wait).
at::Tensor device_scalar(const at::Tensor& like, const at::Scalar& value) {
  return k_fill_Tensor(at::empty({}, like.options()), at::scalar_tensor(value, value.type()));
}

at::Tensor as_1d(const at::Tensor& t) { return t.dim() ? t : t.reshape({1}); }

void set_sizes(IndexLayout& L, at::IntArrayRef sizes) {
  L.ndim = static_cast<std::int32_t>(sizes.size());
  TORCH_CHECK(L.ndim <= runtime::kLayoutDims, "ocl: tensors of ", L.ndim,
              " dims are not supported by the OpenCL indexing kernel (at most ", runtime::kLayoutDims, ")");
  for (int d = 0; d < L.ndim; ++d) L.sizes[d] = sizes[d];
}

// Adds (accumulate) or writes `src` into `dst` at `dim` along `index` (the
// scatter and index_copy/index_add shapes): one function for dim-wise scatters.
// along_dim: index is 1-D and selects slices along dim (index_copy/add/fill);
// else it has src's dims (scatter).
void scatter_into(const char* name, at::Tensor& dst, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  bool along_dim, bool accumulate) {
  if (accumulate && !atomic_type(dst.scalar_type())) {
    // add in a type with atomics, then convert back (exact for integers and bool)
    const at::ScalarType wide = at::isFloatingType(dst.scalar_type()) ? at::kFloat : at::kLong;
    at::Tensor w = dst.to(wide);
    scatter_into(name, w, dim, index, src.to(wide), along_dim, true);
    dst.copy_(w);
    return;
  }
  at::Tensor out = as_1d(dst);
  const at::Tensor s = as_1d(src.scalar_type() == dst.scalar_type() ? src : src.to(dst.scalar_type()));
  const at::Tensor i = as_1d(long_index(name, index, dst));
  const int64_t d = c10::maybe_wrap_dim(dim, out.dim());
  IndexLayout L;
  if (along_dim) {
    std::vector<int64_t> shape = out.sizes().vec();
    shape[d] = i.numel();
    set_sizes(L, shape);
    const at::Tensor se = s.expand(shape);
    for (int j = 0; j < L.ndim; ++j) {
      L.a[j] = se.stride(j);
      L.b[j] = j == d ? 0 : out.stride(j);
      L.idx[0][j] = j == d ? i.stride(0) : 0;
    }
  } else {
    set_sizes(L, i.sizes());
    for (int j = 0; j < L.ndim; ++j) {
      L.a[j] = s.stride(j);
      L.b[j] = j == d ? 0 : out.stride(j);
      L.idx[0][j] = i.stride(j);
    }
  }
  L.dim_size[0] = out.size(d);
  L.dim_stride[0] = out.stride(d);
  run(name, true, accumulate, s, out, {i}, L);
}

}  // namespace

at::Tensor k_gather(const at::Tensor & self, int64_t dim, const at::Tensor & index, bool sparse_grad) {
  (void)sparse_grad;
  TORCH_CHECK(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "gather(): Expected dtype int32/int64 for index");
  const at::Tensor s = as_1d(self);
  const at::Tensor i = as_1d(index.numel() ? long_index("gather", index, self) : index.to(self.device(), at::kLong));
  const int64_t d = c10::maybe_wrap_dim(dim, s.dim());
  TORCH_CHECK(i.dim() == s.dim() || index.numel() == 0, "Index tensor must have the same number of dimensions as "
              "input tensor");
  for (int64_t j = 0; j < i.dim() && index.numel(); ++j)
    TORCH_CHECK(j == d || i.size(j) <= s.size(j), "Size does not match at dimension ", j, " expected index ",
                index.sizes(), " to be no larger than self ", self.sizes(), " apart from dimension ", d);
  at::Tensor out = at::empty(index.sizes(), self.options());
  if (out.numel() == 0) return out;
  const at::Tensor o = as_1d(out);
  IndexLayout L;
  set_sizes(L, i.sizes());
  for (int j = 0; j < L.ndim; ++j) {
    L.a[j] = o.stride(j);
    L.b[j] = j == d ? 0 : s.stride(j);
    L.idx[0][j] = i.stride(j);
  }
  L.dim_size[0] = s.size(d);
  L.dim_stride[0] = s.stride(d);
  run("gather", false, false, o, s, {i}, L);
  return out;
}

at::Tensor k_scatter_src(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Tensor & src) {
  TORCH_CHECK(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "scatter(): Expected dtype int32/int64 for index");
  TORCH_CHECK(src.scalar_type() == self.scalar_type(), "scatter(): Expected self.dtype to be equal to src.dtype");
  at::Tensor out = self.clone();
  if (index.numel()) scatter_into("scatter.src", out, dim, index, src, false, false);
  return out;
}

at::Tensor k_scatter_value(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Scalar & value) {
  TORCH_CHECK(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "scatter(): Expected dtype int32/int64 for index");
  at::Tensor out = self.clone();
  if (index.numel())
    scatter_into("scatter.value", out, dim, index, device_scalar(self, value).expand(as_1d(index).sizes()), false,
                 false);
  return out;
}

at::Tensor k_scatter_add(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Tensor & src) {
  TORCH_CHECK(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "scatter_add(): Expected dtype int32/int64 for index");
  TORCH_CHECK(src.scalar_type() == self.scalar_type(), "scatter_add(): Expected self.dtype to be equal to src.dtype");
  at::Tensor out = self.clone();
  if (index.numel()) scatter_into("scatter_add", out, dim, index, src, false, true);
  return out;
}

at::Tensor k_index_select(const at::Tensor & self, int64_t dim, const at::Tensor & index) {
  TORCH_CHECK(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  const at::Tensor s = as_1d(self);
  const at::Tensor i = as_1d(long_index("index_select", index, self));
  const int64_t d = c10::maybe_wrap_dim(dim, s.dim());
  std::vector<int64_t> shape = s.sizes().vec();
  shape[d] = i.numel();
  at::Tensor out = at::empty(shape, self.options());
  if (out.numel()) {
    IndexLayout L;
    set_sizes(L, shape);
    for (int j = 0; j < L.ndim; ++j) {
      L.a[j] = out.stride(j);
      L.b[j] = j == d ? 0 : s.stride(j);
      L.idx[0][j] = j == d ? i.stride(0) : 0;
    }
    L.dim_size[0] = s.size(d);
    L.dim_stride[0] = s.stride(d);
    run("index_select", false, false, out, s, {i}, L);
  }
  return self.dim() ? out : out.reshape({});  // a 0-dim input gives a 0-dim result, as on the CPU
}

at::Tensor k_index_copy(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Tensor & source) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(source.scalar_type() == self.scalar_type(), "index_copy_(): self and source expected to have the same "
              "dtype, but got (self) ", self.scalar_type(), " and (source) ", source.scalar_type());
  at::Tensor out = self.clone();
  if (index.numel()) scatter_into("index_copy", out, dim, index, source, true, false);
  return out;
}

at::Tensor k_index_add(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Tensor & source,
                       const at::Scalar & alpha) {
  at::Tensor out = self.clone();
  if (!index.numel()) return out;
  const bool one = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  scatter_into("index_add", out, dim, index, one ? source : k_mul_Scalar(source, alpha), true, true);
  return out;
}

at::Tensor k_index_fill_int_Scalar(const at::Tensor & self, int64_t dim, const at::Tensor & index,
                                   const at::Scalar & value) {
  at::Tensor out = self.clone();
  if (index.numel()) scatter_into("index_fill.int_Scalar", out, dim, index, device_scalar(self, value), true, false);
  return out;
}

at::Tensor k_index_fill_int_Tensor(const at::Tensor & self, int64_t dim, const at::Tensor & index,
                                   const at::Tensor & value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  at::Tensor out = self.clone();
  const at::Tensor v = value.device().is_cpu() ? device_scalar(self, value.item()) : value.to(self.scalar_type());
  if (index.numel()) scatter_into("index_fill.int_Tensor", out, dim, index, v, true, false);
  return out;
}

at::Tensor k_take(const at::Tensor & self, const at::Tensor & index) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  at::Tensor out = at::empty(index.sizes(), self.options());
  if (out.numel() == 0) return out;
  TORCH_CHECK(self.numel() > 0, "take(): tried to take from an empty tensor");
  const at::Tensor flat = self.contiguous().reshape({-1});
  const at::Tensor i = as_1d(index.to(self.device()));
  const at::Tensor o = as_1d(out);
  IndexLayout L;
  set_sizes(L, i.sizes());
  for (int j = 0; j < L.ndim; ++j) {
    L.a[j] = o.stride(j);
    L.idx[0][j] = i.stride(j);
  }
  L.dim_size[0] = flat.numel();
  L.dim_stride[0] = 1;
  run("take", false, false, o, flat, {i}, L);
  return out;
}

at::Tensor k_put(const at::Tensor & self, const at::Tensor & index, const at::Tensor & source, bool accumulate) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "put(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(index.numel() == source.numel(), "put(): Expected source and index to have the same number of "
              "elements, but got source.numel() = ", source.numel(), ", index.numel() = ", index.numel());
  at::Tensor out = self.clone(at::MemoryFormat::Contiguous);
  if (index.numel() == 0) return out;
  at::Tensor flat = out.view({-1});
  scatter_into("put", flat, 0, index.reshape({-1}), source.reshape({-1}), false, accumulate);
  return out;
}

namespace {

// x[indices]: the shapes of advanced indexing (indexed dims broadcast together;
// their result dims replace them in place when adjacent, else go first).
struct Advanced {
  std::vector<at::Tensor> idx;   // int64 on the device, expanded to `broadcast`
  std::vector<int64_t> pos;      // the self dim each indexes
  std::vector<int64_t> broadcast;
  std::vector<int64_t> out_shape;
  std::vector<int64_t> self_dim;  // per out dim: the self dim, or -1 for a broadcast dim
  std::vector<int64_t> bcast_dim;  // per out dim: the broadcast dim, or -1
};

Advanced advanced(const char* name, const at::Tensor& self, const c10::List<::std::optional<at::Tensor>>& indices) {
  Advanced r;
  int64_t dimpos = 0;
  for (const ::std::optional<at::Tensor>& opt : indices) {
    if (!opt.has_value() || !opt->defined()) {
      ++dimpos;
      continue;
    }
    const at::Tensor& t = *opt;
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
      for (int64_t j = 0; j < t.dim(); ++j)
        TORCH_CHECK(dimpos + j < self.dim() && t.size(j) == self.size(dimpos + j), "The shape of the mask ",
                    t.sizes(), " at index ", j, " does not match the shape of the indexed tensor ", self.sizes(),
                    " at index ", dimpos + j);
      // a mask's positions (nonzero: the host waits for the count, as on CUDA)
      const at::Tensor nz = at::nonzero(t.to(self.device()));
      for (int64_t j = 0; j < t.dim(); ++j) {
        r.idx.push_back(nz.select(1, j));
        r.pos.push_back(dimpos + j);
      }
      dimpos += t.dim();
    } else {
      r.idx.push_back(long_index(name, t, self));
      r.pos.push_back(dimpos++);
    }
  }
  TORCH_CHECK(dimpos <= self.dim(), "too many indices for tensor of dimension ", self.dim(), " (got ", dimpos, ")");
  for (const at::Tensor& t : r.idx)
    r.broadcast = r.broadcast.empty() && &t == &r.idx.front() ? t.sizes().vec() : at::infer_size(r.broadcast, t.sizes());
  for (at::Tensor& t : r.idx) t = t.expand(r.broadcast);
  bool adjacent = true;
  for (std::size_t k = 1; k < r.pos.size(); ++k) adjacent = adjacent && r.pos[k] == r.pos[k - 1] + 1;
  auto push_self = [&](int64_t d) {
    r.out_shape.push_back(self.size(d));
    r.self_dim.push_back(d);
    r.bcast_dim.push_back(-1);
  };
  auto push_bcast = [&]() {
    for (std::size_t b = 0; b < r.broadcast.size(); ++b) {
      r.out_shape.push_back(r.broadcast[b]);
      r.self_dim.push_back(-1);
      r.bcast_dim.push_back(static_cast<int64_t>(b));
    }
  };
  if (adjacent) {
    for (int64_t d = 0; d < r.pos.front(); ++d) push_self(d);
    push_bcast();
    for (int64_t d = r.pos.back() + 1; d < self.dim(); ++d) push_self(d);
  } else {
    push_bcast();
    for (int64_t d = 0; d < self.dim(); ++d)
      if (std::find(r.pos.begin(), r.pos.end(), d) == r.pos.end()) push_self(d);
  }
  return r;
}

IndexLayout advanced_layout(const Advanced& r, const at::Tensor& self, const at::Tensor& dense) {
  IndexLayout L;
  set_sizes(L, r.out_shape);
  for (int j = 0; j < L.ndim; ++j) {
    L.a[j] = dense.stride(j);
    L.b[j] = r.self_dim[j] >= 0 ? self.stride(r.self_dim[j]) : 0;
    for (std::size_t k = 0; k < r.idx.size(); ++k)
      L.idx[k][j] = r.bcast_dim[j] >= 0 ? r.idx[k].stride(r.bcast_dim[j]) : 0;
  }
  for (std::size_t k = 0; k < r.idx.size() && k < static_cast<std::size_t>(kMaxIndices); ++k) {
    L.dim_size[k] = self.size(r.pos[k]);
    L.dim_stride[k] = self.stride(r.pos[k]);
  }
  return L;
}

}  // namespace

at::Tensor k_index_Tensor(const at::Tensor & self, const c10::List<::std::optional<at::Tensor>> & indices) {
  const Advanced r = advanced("index.Tensor", self, indices);
  if (r.idx.empty()) return self.clone();
  at::Tensor out = at::empty(r.out_shape, self.options());
  if (out.numel() == 0) return out;
  TORCH_CHECK(self.numel() > 0, "index is out of bounds for dimension with size 0");
  run("index.Tensor", false, false, out, self, r.idx, advanced_layout(r, self, out));
  return out;
}

at::Tensor & k__index_put_impl_(at::Tensor & self, const c10::List<::std::optional<at::Tensor>> & indices,
                                const at::Tensor & values, bool accumulate, bool unsafe) {
  (void)unsafe;
  const Advanced r = advanced("index_put", self, indices);
  if (r.idx.empty()) {
    self.copy_(values);
    return self;
  }
  int64_t n = 1;
  for (int64_t s : r.out_shape) n *= s;
  if (n == 0) return self;
  if (accumulate && !atomic_type(self.scalar_type())) {
    const at::ScalarType wide = at::isFloatingType(self.scalar_type()) ? at::kFloat : at::kLong;
    at::Tensor w = self.to(wide);
    k__index_put_impl_(w, indices, values.to(wide), true, unsafe);
    self.copy_(w);
    return self;
  }
  const at::Tensor v = (values.scalar_type() == self.scalar_type() ? values : values.to(self.scalar_type()))
                           .to(self.device()).expand(r.out_shape);
  run("index_put", true, accumulate, v, self, r.idx, advanced_layout(r, self, v));
  return self;
}

at::Tensor k_index_put(const at::Tensor & self, const c10::List<::std::optional<at::Tensor>> & indices,
                       const at::Tensor & values, bool accumulate) {
  at::Tensor out = self.clone();
  k__index_put_impl_(out, indices, values, accumulate, false);
  return out;
}

at::Tensor k_nonzero(const at::Tensor & self) {
  // positions of the nonzero elements in order: their count (the host waits for
  // it: the result's shape depends on the data, as on CUDA), each one's slot from
  // a running count, the flat indices put into their slots, then unravelled
  const int64_t nd = self.dim();
  const int64_t n = self.numel();
  const at::TensorOptions lopt = self.options().dtype(at::kLong);
  if (n == 0) return at::empty({0, nd}, lopt);
  const at::Tensor mask = at::ne(self.reshape({-1}), 0);
  const at::Tensor slot = at::cumsum(mask, 0, at::kLong);
  const int64_t count = slot[n - 1].item().toLong();
  // the slots of zeros go to a spare last element
  const at::Tensor where_to = at::where(mask, at::sub(slot, 1), at::scalar_tensor(count, at::kLong));
  at::Tensor flat = at::empty({count + 1}, lopt);
  flat = k_put(flat, where_to, at::arange(n, lopt), false).narrow(0, 0, count);
  if (nd == 0) return at::empty({count, 0}, lopt);
  std::vector<at::Tensor> coords;
  int64_t stride = 1;
  std::vector<int64_t> strides(static_cast<std::size_t>(nd));
  for (int64_t d = nd - 1; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = stride;
    stride *= self.size(d);
  }
  for (int64_t d = 0; d < nd; ++d)
    coords.push_back(at::remainder(at::floor_divide(flat, strides[static_cast<std::size_t>(d)]), self.size(d)));
  return at::stack(coords, 1);
}

at::Tensor k_masked_select(const at::Tensor & self, const at::Tensor & mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  const at::Tensor m = mask.to(self.device()).expand(shape).reshape({-1});
  const at::Tensor at_ = k_nonzero(m).reshape({-1});
  return k_take(self.expand(shape), at_);
}

}  // namespace ocl::kernels
