// acme shape kernels: cat, stack, flip, roll, repeat, tril/triu, padding,
// repeat_interleave, clone. All are data movement through acme's strided
// iterator: a destination "window" (pointer + sizes + strides into the
// output) receives a source tensor, with dtype conversion where cat promotes.
// The host part computes shapes, allocates and builds the iterators (device
// addresses, sizes and strides: no data); the loops are the device parts,
// queued with launch (kernel_lib/device.h).
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/core/IListRef.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// dst window (device address, sizes, element strides, dtype) <- src (broadcast
// to the window's sizes), converting dtype when they differ. The window lies in
// `on` (the output), whose stream runs the copy. src_ptr, when given, is a
// device address into src.
void copy_window(const char* op, const at::Tensor& on, char* dst, at::IntArrayRef sizes,
                 at::IntArrayRef strides, at::ScalarType dst_dtype, const at::Tensor& src,
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
  dispatch<kAll>(op, on.device(), dst_dtype, [&](auto to) {
    using To = FL_T(to);
    if (src.scalar_type() == dst_dtype) {
      launch(on, [it] { map1<To, To>(it, [](To v) { return v; }); });
    } else {
      dispatch<kAll>(op, src.device(), src.scalar_type(), [&](auto from) {
        using From = FL_T(from);
        launch(on, [it] { map1<To, From>(it, [](From v) { return v; }); });
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
    using T = FL_T(tag);
    const T v = value.to<T>();
    launch(t, [it, v] {
      it.for_each([&](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      });
    });
  });
}

}  // namespace

at::Tensor k_cat(const at::ITensorListRef& tensors, int64_t dim) {
  const char* op = "cat";
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) ts.push_back(t);
  FL_CHECK(!ts.empty(), op, "torch.cat(): expected a non-empty list of Tensors");
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
  FL_CHECK(ref->dim() > 0, op, "zero-dimensional tensor cannot be concatenated");
  dim = wrap_dim(op, dim, ref->dim());
  std::vector<int64_t> shape(ref->sizes().begin(), ref->sizes().end());
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const at::Tensor& t = ts[i];
    if (skipped(t)) continue;
    FL_CHECK(t.dim() == ref->dim(), op, "Tensors must have same number of dimensions: got ",
               ref->dim(), " and ", t.dim());
    for (int64_t d = 0; d < t.dim(); ++d)
      FL_CHECK(d == dim || t.size(d) == shape[d], op, "Sizes of tensors must match except in "
                 "dimension ", dim, ". Expected size ", shape[d], " but got size ", t.size(d),
                 " for tensor number ", i, " in the list.");
    total += t.size(dim);
  }
  shape[dim] = total;
  at::Tensor out = at::empty(shape, ref->options().dtype(dtype));
  char* base = static_cast<char*>(out.data_ptr());  // device address: windows are offsets from it
  const int64_t esz = out.element_size();
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    if (skipped(t) || t.numel() == 0) {
      if (!skipped(t)) offset += t.size(dim);
      continue;
    }
    copy_window(op, out, base + offset * out.stride(dim) * esz, t.sizes(), out.strides(), dtype, t);
    offset += t.size(dim);
  }
  return out;
}

at::Tensor k_stack(at::TensorList tensors, int64_t dim) {
  const char* op = "stack";
  FL_CHECK(!tensors.empty(), op, "stack expects a non-empty TensorList");
  const at::Tensor& ref = tensors[0];
  dim = wrap_dim(op, dim, ref.dim() + 1);
  at::native::ResultTypeState rs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    FL_CHECK(tensors[i].sizes() == ref.sizes(), op, "stack expects each tensor to be equal size, "
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
  char* base = static_cast<char*>(out.data_ptr());  // device address
  for (size_t i = 0; i < tensors.size(); ++i)
    copy_window(op, out, base + static_cast<int64_t>(i) * out.stride(dim) * out.element_size(), ref.sizes(),
                wstr, dtype, tensors[i]);
  return out;
}

at::Tensor k_flip(const at::Tensor& self, at::IntArrayRef dims) {
  const char* op = "flip";
  std::vector<bool> flip(static_cast<size_t>(self.dim()), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, self.dim());
    if (self.dim() == 0) continue;
    FL_CHECK(!flip[w], op, "dims has duplicates, original flip dims size=", dims.size());
    flip[w] = true;
  }
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) return out;
  // source viewed from its last element backwards along the flipped dims
  // (device addresses: only the copy's device part reads through them)
  std::vector<int64_t> str(self.strides().begin(), self.strides().end());
  const char* src = static_cast<const char*>(self.data_ptr());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!flip[d]) continue;
    src += (self.size(d) - 1) * str[d] * self.element_size();
    str[d] = -str[d];
  }
  copy_window(op, out, static_cast<char*>(out.data_ptr()), out.sizes(), out.strides(), out.scalar_type(),
              self, self.sizes(), str, src);
  return out;
}

at::Tensor k_roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  const char* op = "roll";
  FL_CHECK(!shifts.empty(), op, "`shifts` required");
  if (dims.empty()) {
    FL_CHECK(shifts.size() == 1, op, "shifts and dimensions must align. shifts: ", shifts.size(),
               ", dims: 0");
    // roll of the flattened tensor
    at::Tensor flat = at::empty({self.numel()}, self.options());
    convert_into(op, flat.view(self.sizes()), self);
    const int64_t d0[1] = {0};
    return k_roll(flat, shifts, at::IntArrayRef(d0, 1)).view(self.sizes());
  }
  FL_CHECK(shifts.size() == dims.size(), op, "shifts and dimensions must align. shifts: ",
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
    char* ob = static_cast<char*>(out.data_ptr());  // device addresses
    const char* cb = static_cast<const char*>(cur.data_ptr());
    if (n - s > 0) {
      sz[d] = n - s;
      copy_window(op, out, ob + s * out.stride(d) * oe, sz, out.strides(), out.scalar_type(),
                  cur, sz, cur.strides(), cb);
    }
    if (s > 0) {
      sz[d] = s;
      copy_window(op, out, ob, sz, out.strides(), out.scalar_type(), cur, sz, cur.strides(),
                  cb + (n - s) * cur.stride(d) * oe);
    }
    cur = out;
  }
  return cur;
}

at::Tensor k_repeat(const at::Tensor& self, at::IntArrayRef repeats) {
  const char* op = "repeat";
  FL_CHECK(static_cast<int64_t>(repeats.size()) >= self.dim(), op,
             "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  const int64_t nd = static_cast<int64_t>(repeats.size());
  const int64_t pad = nd - self.dim();
  std::vector<int64_t> in_sz(static_cast<size_t>(nd), 1), in_st(static_cast<size_t>(nd), 0), out_sz(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) {
    FL_CHECK(repeats[d] >= 0, op, "Trying to create tensor with negative dimension ", repeats[d]);
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
  copy_window(op, out, static_cast<char*>(out.data_ptr()), vsz, vout, out.scalar_type(), self,
              vsz, vin, static_cast<const char*>(self.data_ptr()));
  return out;
}

namespace {
// keep (i, j) of the last two dims when j - i <= diagonal (tril) or >= diagonal (triu)
at::Tensor tri(const char* op, const at::Tensor& self, int64_t diagonal, bool lower) {
  FL_CHECK_T(self.dim() >= 2, op, self, "input tensor must have at least 2 dimensions");
  at::Tensor src = self;
  at::Tensor out = at::empty(self.sizes(), self.options());
  const int64_t R = self.size(-2), C = self.size(-1);
  const int64_t batch = R * C == 0 ? 0 : self.numel() / (R * C);
  if (self.numel() == 0) return out;
  at::Tensor in = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  if (!self.is_contiguous()) convert_into(op, in, self);
  const int64_t esz = self.element_size();
  launch(out, [batch, R, C, esz, diagonal, lower, in = DeviceTensor(in), out = DeviceTensor(out)] {
    const char* ip = static_cast<const char*>(in.const_data_ptr());
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
  });
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
  FL_CHECK(pad.size() % 2 == 0, op, "Length of pad must be even but instead it equals ", pad.size());
  const int64_t np = static_cast<int64_t>(pad.size()) / 2;
  FL_CHECK(np <= self.dim(), op, "Length of pad should be no more than twice the number of "
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
    FL_CHECK(out_sz[d] >= 0, op, "The input size ", self.size(d), ", plus negative padding ",
               lpad[d], " and ", rpad[d], " resulted in a negative output size, which is invalid. "
               "Check dimension ", d, " of your input.");
  }
  at::Tensor out = at::empty(out_sz, self.options());
  fill_tensor(op, out, value);
  // copy the part of the input that survives (negative pads crop)
  std::vector<int64_t> csz(static_cast<size_t>(nd));
  const char* ip = static_cast<const char*>(self.data_ptr());  // device addresses
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
    copy_window(op, out, opp, csz, out.strides(), out.scalar_type(), self, csz, self.strides(), ip);
  return out;
}

namespace {
// Padding by index mapping on the last 1, 2 or 3 dims:
// out[.., i, j, k] = in[.., map_d(i), map_h(j), map_w(k)], reflecting or
// replicating the border. padding is (left, right[, top, bottom[, front, back]]).
struct PadGeom {
  int64_t batch = 0, D = 1, H = 1, W = 1, Do = 1, Ho = 1, Wo = 1;
  std::vector<int64_t> dmap, hmap, wmap;  // output index -> input index, per dim
  std::vector<int64_t> out_sizes;
};

PadGeom pad_geometry(const char* op, at::IntArrayRef in_sizes, at::IntArrayRef padding, int spatial,
                     bool reflect) {
  const int64_t ndim = static_cast<int64_t>(in_sizes.size());
  FL_CHECK(static_cast<int>(padding.size()) == 2 * spatial, op, "padding size is expected to be ",
             2 * spatial, ", but got: ", padding.size());
  FL_CHECK(ndim == spatial + 1 || ndim == spatial + 2, op, "expected ", spatial + 1, "D or ",
             spatial + 2, "D input, got shape ", in_sizes);
  PadGeom g;
  int64_t* in_dims[3] = {&g.W, &g.H, &g.D};
  int64_t* out_dims[3] = {&g.Wo, &g.Ho, &g.Do};
  std::vector<int64_t>* maps[3] = {&g.wmap, &g.hmap, &g.dmap};
  for (int k = 0; k < 3; ++k) {
    if (k >= spatial) {
      maps[k]->assign(1, 0);
      continue;
    }
    const int64_t n = in_sizes[ndim - 1 - k], lo = padding[2 * k], hi = padding[2 * k + 1];
    if (reflect) {
      FL_CHECK(lo < n && hi < n, op, "Padding size should be less than the corresponding input "
                 "dimension, but got: padding ", padding, " for input of shape ", in_sizes);
    } else {
      FL_CHECK(n > 0, op, "input (", in_sizes, ") is empty along a padded dimension");
    }
    const int64_t no = n + lo + hi;
    FL_CHECK(no >= 1, op, "input (", in_sizes, ") is too small for padding ", padding);
    *in_dims[k] = n;
    *out_dims[k] = no;
    maps[k]->resize(static_cast<size_t>(no));
    for (int64_t o = 0; o < no; ++o) {
      int64_t i = o - lo;
      if (reflect) {
        if (i < 0) i = -i;
        if (i >= n) i = 2 * (n - 1) - i;
      } else {
        i = std::clamp<int64_t>(i, 0, n - 1);
      }
      (*maps[k])[o] = i;
    }
  }
  g.out_sizes.assign(in_sizes.begin(), in_sizes.end());
  for (int k = 0; k < spatial; ++k) g.out_sizes[ndim - 1 - k] = *out_dims[k];
  const int64_t plane = g.D * g.H * g.W;
  int64_t numel = 1;
  for (int64_t v : in_sizes) numel *= v;
  g.batch = plane == 0 ? 0 : numel / plane;
  return g;
}

at::Tensor contiguous_copy(const char* op, const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor c = at::empty(t.sizes(), t.options());
  convert_into(op, c, t);
  return c;
}

at::Tensor pad_mapped(const char* op, const at::Tensor& self, at::IntArrayRef padding, int spatial,
                      bool reflect) {
  const PadGeom g = pad_geometry(op, self.sizes(), padding, spatial, reflect);
  at::Tensor in = contiguous_copy(op, self);
  at::Tensor out = at::empty(g.out_sizes, self.options());
  const int64_t esz = self.element_size();
  launch(out, [g, esz, in = DeviceTensor(in), out = DeviceTensor(out)] {
    const char* ip = static_cast<const char*>(in.const_data_ptr());
    char* opp = static_cast<char*>(out.data_ptr());
    int64_t o = 0;
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t d = 0; d < g.Do; ++d)
        for (int64_t i = 0; i < g.Ho; ++i)
          for (int64_t j = 0; j < g.Wo; ++j, ++o)
            std::memcpy(opp + o * esz, ip + (((b * g.D + g.dmap[d]) * g.H + g.hmap[i]) * g.W + g.wmap[j]) * esz,
                        static_cast<size_t>(esz));
  });
  return out;
}

// Gradient of a mapped padding: each output gradient added to the input
// element it was read from, in output order (as torch's CPU kernel).
at::Tensor pad_mapped_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& self,
                               at::IntArrayRef padding, int spatial, bool reflect) {
  const PadGeom g = pad_geometry(op, self.sizes(), padding, spatial, reflect);
  FL_CHECK_T(grad_output.sizes().equals(g.out_sizes), op, grad_output, "grad_output has shape ",
               grad_output.sizes(), ", expected ", g.out_sizes);
  at::Tensor go = contiguous_copy(op, grad_output);
  at::Tensor gi = at::empty(self.sizes(), grad_output.options());
  dispatch<kFloating>(op, grad_output.device(), grad_output.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(gi, [g, go = DeviceTensor(go), gi = DeviceTensor(gi)] {
      std::vector<M> acc(static_cast<size_t>(gi.numel()), M(0));
      const T* gp = go.const_data_ptr<T>();
      int64_t o = 0;
      for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t d = 0; d < g.Do; ++d)
          for (int64_t i = 0; i < g.Ho; ++i)
            for (int64_t j = 0; j < g.Wo; ++j, ++o)
              acc[((b * g.D + g.dmap[d]) * g.H + g.hmap[i]) * g.W + g.wmap[j]] += static_cast<M>(gp[o]);
      T* out = gi.data_ptr<T>();
      for (size_t k = 0; k < acc.size(); ++k) out[k] = cvt<T>(acc[k]);
    });
  });
  return gi;
}
}  // namespace

at::Tensor k_reflection_pad1d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("reflection_pad1d", self, padding, 1, true);
}

at::Tensor k_reflection_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("reflection_pad2d", self, padding, 2, true);
}

at::Tensor k_reflection_pad3d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("reflection_pad3d", self, padding, 3, true);
}

at::Tensor k_replication_pad1d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("replication_pad1d", self, padding, 1, false);
}

at::Tensor k_replication_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("replication_pad2d", self, padding, 2, false);
}

at::Tensor k_replication_pad3d(const at::Tensor& self, at::IntArrayRef padding) {
  return pad_mapped("replication_pad3d", self, padding, 3, false);
}

at::Tensor k_reflection_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                       at::IntArrayRef padding) {
  return pad_mapped_backward("reflection_pad1d_backward", grad_output, self, padding, 1, true);
}

at::Tensor k_reflection_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                       at::IntArrayRef padding) {
  return pad_mapped_backward("reflection_pad2d_backward", grad_output, self, padding, 2, true);
}

at::Tensor k_reflection_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                       at::IntArrayRef padding) {
  return pad_mapped_backward("reflection_pad3d_backward", grad_output, self, padding, 3, true);
}

at::Tensor k_replication_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef padding) {
  return pad_mapped_backward("replication_pad1d_backward", grad_output, self, padding, 1, false);
}

at::Tensor k_replication_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef padding) {
  return pad_mapped_backward("replication_pad2d_backward", grad_output, self, padding, 2, false);
}

at::Tensor k_replication_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef padding) {
  return pad_mapped_backward("replication_pad3d_backward", grad_output, self, padding, 3, false);
}

at::Tensor k_repeat_interleave_Tensor(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  const char* op = "repeat_interleave.Tensor";
  FL_CHECK_T(repeats.dim() == 1, op, repeats, "repeat_interleave only accept 1D vector as repeat");
  FL_CHECK_T(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt, op, repeats,
               "repeats has to be Long or Int tensor");
  at::Tensor r = repeats.is_contiguous() && repeats.scalar_type() == at::kLong
                     ? repeats : at::empty(repeats.sizes(), repeats.options().dtype(at::kLong));
  if (!r.is_same(repeats)) convert_into(op, r, repeats);
  // With a (non-negative) output_size the output's length is known: the device
  // part checks the repeats against it before writing (reported at the next
  // synchronize). Otherwise the length is the sum of the repeats: summed on the
  // device, with a flag for a negative repeat, and read by the host (a host
  // wait, as CUDA's repeat_interleave without output_size).
  const bool check_on_device = output_size.has_value() && *output_size >= 0;
  int64_t total = 0;
  if (check_on_device) {
    total = *output_size;
  } else if (r.numel() > 0) {
    at::Tensor sum = at::empty({2}, repeats.options().dtype(at::kLong));  // {sum, any negative}
    launch(sum, [r = DeviceTensor(r), sum = DeviceTensor(sum)] {
      const int64_t* rp = r.const_data_ptr<int64_t>();
      int64_t acc = 0, negative = 0;
      for (int64_t i = 0; i < r.numel(); ++i) {
        if (rp[i] < 0) {
          negative = 1;
          break;
        }
        acc += rp[i];
      }
      int64_t* res = sum.data_ptr<int64_t>();
      res[0] = acc;
      res[1] = negative;
    });
    int64_t res[2] = {0, 0};
    read_on_host(op, sum, sum.const_data_ptr(), res, 2);
    FL_CHECK(res[1] == 0, op, "repeats can not be negative");
    total = res[0];
  }
  if (output_size && !check_on_device)
    FL_CHECK(*output_size == total, op, "output_size ", *output_size,
               " does not match the sum of repeats ", total);
  at::Tensor out = at::empty({total}, repeats.options());
  dispatch<kI64 | kI32>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [op, check_on_device, total, r = DeviceTensor(r), out = DeviceTensor(out)] {
      const int64_t* rp = r.const_data_ptr<int64_t>();
      if (check_on_device) {
        int64_t sum = 0;
        for (int64_t i = 0; i < r.numel(); ++i) {
          FL_CHECK(rp[i] >= 0, op, "repeats can not be negative");
          sum += rp[i];
        }
        FL_CHECK(total == sum, op, "output_size ", total, " does not match the sum of repeats ", sum);
      }
      T* o = out.data_ptr<T>();
      int64_t k = 0;
      for (int64_t i = 0; i < r.numel(); ++i)
        for (int64_t j = 0; j < rp[i]; ++j) o[k++] = static_cast<T>(i);
    });
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
    launch(out, [nbytes = static_cast<size_t>(self.nbytes()), self = DeviceTensor(self), out = DeviceTensor(out)] {
      std::memcpy(out.data_ptr(), self.const_data_ptr(), nbytes);
    });
    return out;
  }
  convert_into(op, out, self);
  return out;
}

// unfold: a view with one window of `size` elements (every `step`) of dim `d`
// per position of d, windows on a new last dim. A 0-dim tensor unfolds as one
// element (torch's rule).
at::Tensor k_unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  const char* op = "unfold";
  const int64_t ndim = self.dim();
  const int64_t d = wrap_dim(op, dimension, std::max<int64_t>(ndim, 1));
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
  const int64_t max_size = ndim == 0 ? 1 : sizes[d];
  FL_CHECK_INDEX(size <= max_size, op, "maximum size for tensor at dimension ", d, " is ", max_size,
                   " but size is ", size);
  FL_CHECK(size >= 0, op, "size is ", size, " but must be >= 0");
  FL_CHECK(step > 0, op, "step is ", step, " but must be > 0");
  sizes.push_back(size);
  strides.push_back(ndim == 0 ? 1 : strides[d]);
  if (d < ndim) {
    sizes[d] = (sizes[d] - size) / step + 1;
    strides[d] *= step;
  }
  return self.as_strided(sizes, strides);
}

// Gradient of unfold: every window's gradient added back at its place
// (windows overlap when step < size).
at::Tensor k_unfold_backward(const at::Tensor& grad_in, at::IntArrayRef input_sizes, int64_t dim,
                             int64_t size, int64_t step) {
  const char* op = "unfold_backward";
  const int64_t ndim = static_cast<int64_t>(input_sizes.size());
  const int64_t d = wrap_dim(op, dim, std::max<int64_t>(ndim, 1));
  FL_CHECK(step > 0, op, "step is ", step, " but must be > 0");
  int64_t A = 1, N = ndim == 0 ? 1 : input_sizes[d], B = 1;
  for (int64_t k = 0; k < ndim; ++k) {
    if (k < d) A *= input_sizes[k];
    else if (k > d) B *= input_sizes[k];
  }
  const int64_t nwin = N >= size ? (N - size) / step + 1 : 0;
  FL_CHECK_T(grad_in.numel() == A * nwin * B * size, op, grad_in, "grad of shape ", grad_in.sizes(),
               " does not match unfolding input of shape ", input_sizes, " (dim ", d, ", size ", size,
               ", step ", step, ")");
  at::Tensor g = grad_in.is_contiguous() ? grad_in : at::empty(grad_in.sizes(), grad_in.options());
  if (!grad_in.is_contiguous()) convert_into(op, g, grad_in);
  at::Tensor out = at::empty(input_sizes, grad_in.options());
  dispatch<kFloating>(op, grad_in.device(), grad_in.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [A, N, B, nwin, size, step, g = DeviceTensor(g), out = DeviceTensor(out)] {
      std::vector<M> acc(static_cast<size_t>(A * N * B), M(0));
      const T* gp = g.const_data_ptr<T>();
      for (int64_t a = 0; a < A; ++a)
        for (int64_t w = 0; w < nwin; ++w)
          for (int64_t b = 0; b < B; ++b)
            for (int64_t k = 0; k < size; ++k)
              acc[(a * N + w * step + k) * B + b] += static_cast<M>(gp[((a * nwin + w) * B + b) * size + k]);
      T* o = out.data_ptr<T>();
      for (size_t i = 0; i < acc.size(); ++i) o[i] = cvt<T>(acc[i]);
    });
  });
  return out;
}

// channel_shuffle: channels seen as [groups, C / groups] and transposed.
at::Tensor k_channel_shuffle(const at::Tensor& self, int64_t groups) {
  const char* op = "channel_shuffle";
  FL_CHECK(groups > 0, op, "Number of groups to divide channels in must be positive. Value of groups:",
             groups);
  FL_CHECK_T(self.dim() > 2, op, self,
               "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes ",
               self.sizes());
  const int64_t N = self.size(0), C = self.size(1);
  FL_CHECK(C % groups == 0, op, "Number of channels must be divisible by groups. Got ", C,
             " channels and ", groups, " groups.");
  at::Tensor in = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  if (!self.is_contiguous()) convert_into(op, in, self);
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  const int64_t per = C / groups, inner = self.numel() / (N * C);
  const size_t row = static_cast<size_t>(inner * self.element_size());
  launch(out, [N, C, per, groups, row, in = DeviceTensor(in), out = DeviceTensor(out)] {
    const char* ip = static_cast<const char*>(in.const_data_ptr());
    char* opp = static_cast<char*>(out.data_ptr());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < per; ++i)
        for (int64_t j = 0; j < groups; ++j)
          std::memcpy(opp + (n * C + i * groups + j) * row, ip + (n * C + j * per + i) * row, row);
  });
  return out;
}

}  // namespace acme::kernels
