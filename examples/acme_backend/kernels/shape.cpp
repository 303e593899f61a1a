// acme shape kernels: cat, stack, flip, roll, repeat, tril/triu, padding,
// repeat_interleave, clone. All are data movement through acme's strided
// iterator: a destination "window" (pointer + sizes + strides into the
// output) receives a source tensor, with dtype conversion where cat promotes.
#include "common/common.h"

#include "kernels.h"

#include <ATen/core/IListRef.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <cstring>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// dst window (raw pointer, sizes, element strides, dtype) <- src (broadcast to
// the window's sizes), converting dtype when they differ.
void copy_window(const char* op, char* dst, at::IntArrayRef sizes, at::IntArrayRef strides,
                 at::ScalarType dst_dtype, c10::Device device, const at::Tensor& src,
                 at::IntArrayRef src_sizes = {}, at::IntArrayRef src_strides = {},
                 const char* src_ptr = nullptr) {
  StridedIter it(sizes);
  it.add_strided(dst, sizes, strides, static_cast<int64_t>(c10::elementSize(dst_dtype)));
  if (src_ptr) {
    it.add_strided(const_cast<char*>(src_ptr), src_sizes, src_strides,
                   static_cast<int64_t>(src.element_size()));
  } else {
    it.add(src);
  }
  it.build();
  dispatch<kAll>(op, device, dst_dtype, [&](auto to) {
    using To = ACME_T(to);
    if (src.scalar_type() == dst_dtype) {
      map1<To, To>(it, [](To v) { return v; });
    } else {
      dispatch<kAll>(op, src.device(), src.scalar_type(), [&](auto from) {
        using From = ACME_T(from);
        map1<To, From>(it, [](From v) { return v; });
      });
    }
  });
}

// Fills every element of `t` with `value`.
void fill_tensor(const char* op, at::Tensor& t, const at::Scalar& value) {
  StridedIter it(t.sizes());
  it.add(t);
  it.build();
  dispatch<kAll>(op, t.device(), t.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    const T v = value.to<T>();
    it.for_each([&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

}  // namespace

at::Tensor k_cat(const at::ITensorListRef& tensors, int64_t dim) {
  const char* op = "cat";
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) ts.push_back(t);
  ACME_CHECK(!ts.empty(), op, "torch.cat(): expected a non-empty list of Tensors");
  // legacy rule: 1-d empty tensors are skipped whatever the other shapes
  auto skipped = [](const at::Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  const at::Tensor* ref = nullptr;
  at::native::ResultTypeState rs;
  for (const at::Tensor& t : ts) {
    rs = at::native::update_result_type_state(t, rs);
    if (!ref && !skipped(t)) ref = &t;
  }
  const at::ScalarType dtype = at::native::result_type(rs);
  if (!ref) return at::empty({0}, ts[0].options().dtype(dtype));
  ACME_CHECK(ref->dim() > 0, op, "zero-dimensional tensor cannot be concatenated");
  dim = wrap_dim(op, dim, ref->dim());
  std::vector<int64_t> shape(ref->sizes().begin(), ref->sizes().end());
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const at::Tensor& t = ts[i];
    if (skipped(t)) continue;
    ACME_CHECK(t.dim() == ref->dim(), op, "Tensors must have same number of dimensions: got ",
               ref->dim(), " and ", t.dim());
    for (int64_t d = 0; d < t.dim(); ++d)
      ACME_CHECK(d == dim || t.size(d) == shape[d], op, "Sizes of tensors must match except in "
                 "dimension ", dim, ". Expected size ", shape[d], " but got size ", t.size(d),
                 " for tensor number ", i, " in the list.");
    total += t.size(dim);
  }
  shape[dim] = total;
  at::Tensor out = at::empty(shape, ref->options().dtype(dtype));
  char* base = static_cast<char*>(out.data_ptr());
  const int64_t esz = out.element_size();
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    if (skipped(t) || t.numel() == 0) {
      if (!skipped(t)) offset += t.size(dim);
      continue;
    }
    copy_window(op, base + offset * out.stride(dim) * esz, t.sizes(), out.strides(), dtype,
                out.device(), t);
    offset += t.size(dim);
  }
  return out;
}

at::Tensor k_stack(at::TensorList tensors, int64_t dim) {
  const char* op = "stack";
  ACME_CHECK(!tensors.empty(), op, "stack expects a non-empty TensorList");
  const at::Tensor& ref = tensors[0];
  dim = wrap_dim(op, dim, ref.dim() + 1);
  at::native::ResultTypeState rs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ACME_CHECK(tensors[i].sizes() == ref.sizes(), op, "stack expects each tensor to be equal size, "
               "but got ", ref.sizes(), " at entry 0 and ", tensors[i].sizes(), " at entry ", i);
    rs = at::native::update_result_type_state(tensors[i], rs);
  }
  const at::ScalarType dtype = at::native::result_type(rs);
  std::vector<int64_t> shape(ref.sizes().begin(), ref.sizes().end());
  shape.insert(shape.begin() + dim, static_cast<int64_t>(tensors.size()));
  at::Tensor out = at::empty(shape, ref.options().dtype(dtype));
  if (out.numel() == 0) return out;
  std::vector<int64_t> wstr(out.strides().begin(), out.strides().end());
  wstr.erase(wstr.begin() + dim);  // the window of entry i skips the stacked dim
  char* base = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < tensors.size(); ++i)
    copy_window(op, base + static_cast<int64_t>(i) * out.stride(dim) * out.element_size(), ref.sizes(),
                wstr, dtype, out.device(), tensors[i]);
  return out;
}

at::Tensor k_flip(const at::Tensor& self, at::IntArrayRef dims) {
  const char* op = "flip";
  std::vector<bool> flip(static_cast<size_t>(self.dim()), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, self.dim());
    if (self.dim() == 0) continue;
    ACME_CHECK(!flip[w], op, "dims has duplicates, original flip dims size=", dims.size());
    flip[w] = true;
  }
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  // source viewed from its last element backwards along the flipped dims
  std::vector<int64_t> str(self.strides().begin(), self.strides().end());
  const char* src = static_cast<const char*>(self.data_ptr());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!flip[d]) continue;
    src += (self.size(d) - 1) * str[d] * self.element_size();
    str[d] = -str[d];
  }
  copy_window(op, static_cast<char*>(out.data_ptr()), out.sizes(), out.strides(), out.scalar_type(),
              out.device(), self, self.sizes(), str, src);
  return out;
}

at::Tensor k_roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  const char* op = "roll";
  ACME_CHECK(!shifts.empty(), op, "`shifts` required");
  if (dims.empty()) {
    ACME_CHECK(shifts.size() == 1, op, "shifts and dimensions must align. shifts: ", shifts.size(),
               ", dims: 0");
    // roll of the flattened tensor
    at::Tensor flat = at::empty({self.numel()}, self.options());
    convert_into(op, flat.view(self.sizes()), self);
    const int64_t d0[1] = {0};
    return k_roll(flat, shifts, at::IntArrayRef(d0, 1)).view(self.sizes());
  }
  ACME_CHECK(shifts.size() == dims.size(), op, "shifts and dimensions must align. shifts: ",
             shifts.size(), ", dims:", dims.size());
  at::Tensor cur = self;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = wrap_dim(op, dims[k], self.dim());
    at::Tensor out = at::empty(self.sizes(), self.options());
    const int64_t n = self.dim() == 0 ? 1 : self.size(d);
    if (self.numel() == 0) return out;
    const int64_t s = ((shifts[k] % n) + n) % n;
    // out[s:] = cur[:n-s] ; out[:s] = cur[n-s:]
    std::vector<int64_t> sz(cur.sizes().begin(), cur.sizes().end());
    const int64_t oe = out.element_size();
    char* ob = static_cast<char*>(out.data_ptr());
    const char* cb = static_cast<const char*>(cur.data_ptr());
    if (n - s > 0) {
      sz[d] = n - s;
      copy_window(op, ob + s * out.stride(d) * oe, sz, out.strides(), out.scalar_type(), out.device(),
                  cur, sz, cur.strides(), cb);
    }
    if (s > 0) {
      sz[d] = s;
      copy_window(op, ob, sz, out.strides(), out.scalar_type(), out.device(), cur, sz, cur.strides(),
                  cb + (n - s) * cur.stride(d) * oe);
    }
    cur = out;
  }
  return cur;
}

at::Tensor k_repeat(const at::Tensor& self, at::IntArrayRef repeats) {
  const char* op = "repeat";
  ACME_CHECK(static_cast<int64_t>(repeats.size()) >= self.dim(), op,
             "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  const int64_t nd = static_cast<int64_t>(repeats.size());
  const int64_t pad = nd - self.dim();
  std::vector<int64_t> in_sz(static_cast<size_t>(nd), 1), in_st(static_cast<size_t>(nd), 0), out_sz(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) {
    ACME_CHECK(repeats[d] >= 0, op, "Trying to create tensor with negative dimension ", repeats[d]);
    if (d >= pad) {
      in_sz[d] = self.size(d - pad);
      in_st[d] = self.stride(d - pad);
    }
    out_sz[d] = in_sz[d] * repeats[d];
  }
  at::Tensor out = at::empty(out_sz, self.options());
  if (out.numel() == 0) return out;
  // out viewed as [r0, s0, r1, s1, ...]; the input has stride 0 on the r dims
  std::vector<int64_t> vsz, vout, vin;
  for (int64_t d = 0; d < nd; ++d) {
    vsz.push_back(repeats[d]);
    vsz.push_back(in_sz[d]);
    vout.push_back(in_sz[d] * out.stride(d));
    vout.push_back(out.stride(d));
    vin.push_back(0);
    vin.push_back(in_st[d]);
  }
  copy_window(op, static_cast<char*>(out.data_ptr()), vsz, vout, out.scalar_type(), out.device(), self,
              vsz, vin, static_cast<const char*>(self.data_ptr()));
  return out;
}

namespace {
// keep (i, j) of the last two dims when j - i <= diagonal (tril) or >= diagonal (triu)
at::Tensor tri(const char* op, const at::Tensor& self, int64_t diagonal, bool lower) {
  ACME_CHECK_T(self.dim() >= 2, op, self, "input tensor must have at least 2 dimensions");
  at::Tensor src = self;
  at::Tensor out = at::empty(self.sizes(), self.options());
  const int64_t R = self.size(-2), C = self.size(-1);
  const int64_t batch = R * C == 0 ? 0 : self.numel() / (R * C);
  if (self.numel() == 0) return out;
  at::Tensor in = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  if (!self.is_contiguous()) convert_into(op, in, self);
  const int64_t esz = self.element_size();
  const char* ip = static_cast<const char*>(in.data_ptr());
  char* op_ = static_cast<char*>(out.data_ptr());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < R; ++i) {
      const int64_t off = (b * R + i) * C * esz;
      // columns kept: tril j <= i + diagonal ; triu j >= i + diagonal
      int64_t lo = lower ? 0 : std::clamp<int64_t>(i + diagonal, 0, C);
      int64_t hi = lower ? std::clamp<int64_t>(i + diagonal + 1, 0, C) : C;
      if (lo > 0) std::memset(op_ + off, 0, static_cast<size_t>(lo * esz));  // zero bits are 0 in every dtype
      if (hi > lo) std::memcpy(op_ + off + lo * esz, ip + off + lo * esz, static_cast<size_t>((hi - lo) * esz));
      if (hi < C) std::memset(op_ + off + hi * esz, 0, static_cast<size_t>((C - hi) * esz));
    }
  }
  (void)src;
  return out;
}
}  // namespace

at::Tensor k_tril(const at::Tensor& self, int64_t diagonal) {
  return tri("tril", self, diagonal, true);
}

at::Tensor k_triu(const at::Tensor& self, int64_t diagonal) {
  return tri("triu", self, diagonal, false);
}

at::Tensor k_constant_pad_nd(const at::Tensor& self, at::IntArrayRef pad, const at::Scalar& value) {
  const char* op = "constant_pad_nd";
  ACME_CHECK(pad.size() % 2 == 0, op, "Length of pad must be even but instead it equals ", pad.size());
  const int64_t np = static_cast<int64_t>(pad.size()) / 2;
  ACME_CHECK(np <= self.dim(), op, "Length of pad should be no more than twice the number of "
             "dimensions of the input. Pad length is ", pad.size(), " while the input has ",
             self.dim(), " dimensions.");
  const int64_t nd = self.dim();
  std::vector<int64_t> out_sz(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> lpad(static_cast<size_t>(nd), 0), rpad(static_cast<size_t>(nd), 0);
  for (int64_t k = 0; k < np; ++k) {
    const int64_t d = nd - 1 - k;  // pad pairs start at the last dim
    lpad[d] = pad[2 * k];
    rpad[d] = pad[2 * k + 1];
    out_sz[d] = self.size(d) + lpad[d] + rpad[d];
    ACME_CHECK(out_sz[d] >= 0, op, "The input size ", self.size(d), ", plus negative padding ",
               lpad[d], " and ", rpad[d], " resulted in a negative output size, which is invalid. "
               "Check dimension ", d, " of your input.");
  }
  at::Tensor out = at::empty(out_sz, self.options());
  fill_tensor(op, out, value);
  // copy the part of the input that survives (negative pads crop)
  std::vector<int64_t> csz(static_cast<size_t>(nd));
  const char* ip = static_cast<const char*>(self.data_ptr());
  char* opp = static_cast<char*>(out.data_ptr());
  const int64_t esz = self.element_size();
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t in_lo = std::max<int64_t>(0, -lpad[d]);
    const int64_t in_hi = self.size(d) - std::max<int64_t>(0, -rpad[d]);
    csz[d] = std::max<int64_t>(0, in_hi - in_lo);
    ip += in_lo * self.stride(d) * esz;
    opp += std::max<int64_t>(0, lpad[d]) * out.stride(d) * esz;
  }
  int64_t cn = 1;
  for (int64_t s : csz) cn *= s;
  if (cn > 0)
    copy_window(op, opp, csz, out.strides(), out.scalar_type(), out.device(), self, csz, self.strides(), ip);
  return out;
}

namespace {
// Padding by index mapping on the last 1 or 2 dims: out[.., i, j] = in[.., map_h(i), map_w(j)].
at::Tensor pad_mapped(const char* op, const at::Tensor& self, at::IntArrayRef padding, int spatial,
                      bool reflect) {
  ACME_CHECK(static_cast<int>(padding.size()) == 2 * spatial, op, "padding size is expected to be ",
             2 * spatial, ", but got: ", padding.size());
  ACME_CHECK_T(self.dim() == spatial + 1 || self.dim() == spatial + 2, op, self,
               "expected ", spatial + 1, "D or ", spatial + 2, "D input, got shape ", self.sizes());
  const int64_t W = self.size(-1), H = spatial == 2 ? self.size(-2) : 1;
  const int64_t pl = padding[0], pr = padding[1];
  const int64_t pt = spatial == 2 ? padding[2] : 0, pb = spatial == 2 ? padding[3] : 0;
  if (reflect) {
    ACME_CHECK(pl < W && pr < W && (spatial == 1 || (pt < H && pb < H)),
               op, "Padding size should be less than the corresponding input dimension, but got: "
               "padding ", padding, " for input of shape ", self.sizes());
  }
  const int64_t Wo = W + pl + pr, Ho = H + pt + pb;
  ACME_CHECK(Wo >= 1 && Ho >= 1, op, "input (", self.sizes(), ") is too small for padding ", padding);
  std::vector<int64_t> osz(self.sizes().begin(), self.sizes().end());
  osz.back() = Wo;
  if (spatial == 2) osz[osz.size() - 2] = Ho;
  at::Tensor in = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  if (!self.is_contiguous()) convert_into(op, in, self);
  at::Tensor out = at::empty(osz, self.options());
  const int64_t batch = W * H == 0 ? 0 : in.numel() / (W * H);
  auto map = [reflect](int64_t o, int64_t p, int64_t n) {
    int64_t i = o - p;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::clamp<int64_t>(i, 0, n - 1);
    }
    return i;
  };
  std::vector<int64_t> wmap(static_cast<size_t>(Wo)), hmap(static_cast<size_t>(Ho));
  for (int64_t j = 0; j < Wo; ++j) wmap[j] = map(j, pl, W);
  for (int64_t i = 0; i < Ho; ++i) hmap[i] = spatial == 2 ? map(i, pt, H) : 0;
  const int64_t esz = self.element_size();
  const char* ip = static_cast<const char*>(in.data_ptr());
  char* opp = static_cast<char*>(out.data_ptr());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j)
        std::memcpy(opp + ((b * Ho + i) * Wo + j) * esz, ip + ((b * H + hmap[i]) * W + wmap[j]) * esz,
                    static_cast<size_t>(esz));
  return out;
}
}  // namespace

at::Tensor k_reflection_pad1d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("reflection_pad1d", self, padding, 1, true);
}

at::Tensor k_reflection_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("reflection_pad2d", self, padding, 2, true);
}

at::Tensor k_replication_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("replication_pad2d", self, padding, 2, false);
}

at::Tensor k_repeat_interleave_Tensor(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  const char* op = "repeat_interleave.Tensor";
  ACME_CHECK_T(repeats.dim() == 1, op, repeats, "repeat_interleave only accept 1D vector as repeat");
  ACME_CHECK_T(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt, op, repeats,
               "repeats has to be Long or Int tensor");
  at::Tensor r = repeats.is_contiguous() && repeats.scalar_type() == at::kLong
                     ? repeats : at::empty(repeats.sizes(), repeats.options().dtype(at::kLong));
  if (!r.is_same(repeats)) convert_into(op, r, repeats);
  const int64_t* rp = static_cast<const int64_t*>(r.data_ptr());
  int64_t total = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    ACME_CHECK(rp[i] >= 0, op, "repeats can not be negative");
    total += rp[i];
  }
  if (output_size) ACME_CHECK(*output_size == total, op, "output_size ", *output_size,
                              " does not match the sum of repeats ", total);
  at::Tensor out = at::empty({total}, repeats.options());
  dispatch<kI64 | kI32>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    T* o = static_cast<T*>(out.data_ptr());
    int64_t k = 0;
    for (int64_t i = 0; i < r.numel(); ++i)
      for (int64_t j = 0; j < rp[i]; ++j) o[k++] = static_cast<T>(i);
  });
  return out;
}

at::Tensor k_clone(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format) {
  const char* op = "clone";
  const auto mf = memory_format.value_or(at::MemoryFormat::Preserve);
  at::Tensor out;
  if (mf == at::MemoryFormat::Preserve) {
    // dense tensors keep their strides; others become contiguous (as torch)
    out = self.is_non_overlapping_and_dense() ? at::empty_strided(self.sizes(), self.strides(), self.options())
                                              : at::empty(self.sizes(), self.options());
  } else {
    out = at::empty(self.sizes(), self.options().memory_format(mf));
  }
  if (self.numel() == 0) return out;
  if (self.is_contiguous() && out.is_contiguous()) {
    std::memcpy(out.data_ptr(), self.data_ptr(), static_cast<size_t>(self.nbytes()));
    return out;
  }
  convert_into(op, out, self);
  return out;
}

}  // namespace acme::kernels
