// Ops this backend composes from its own native ops instead of writing a kernel
// (no OpenCL C of their own): shape ops from views, device copies, cat,
// index_select and masks; matrix-vector ops from mm/bmm; losses from the
// elementwise ops and reductions. Every op called here dispatches to this
// backend again (a dtype without a native kernel there reaches the CPU fallback
// at that inner op), and each composite checks its arguments as torch does.
#include "kernels.h"

#include <ATen/ops/abs.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/le.h>
#include <ATen/ops/log.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/log_sigmoid.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/WrapDimMinimal.h>

#include <vector>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

bool is_one(const at::Scalar& s) { return s.isIntegral(true) ? s.toLong() == 1 : s.toDouble() == 1.0; }
bool is_zero(const at::Scalar& s) { return s.isIntegral(true) ? s.toLong() == 0 : s.toDouble() == 0.0; }

// beta * self + alpha * product, self ignored when beta is 0 (as torch: NaN in self does not propagate)
at::Tensor blend(const at::Tensor& self, const at::Tensor& product, const at::Scalar& beta, const at::Scalar& alpha) {
  at::Tensor r = is_one(alpha) ? product : at::mul(product, alpha);
  if (is_zero(beta)) return r;
  return at::add(is_one(beta) ? self : at::mul(self, beta), r);
}

at::Tensor reduce_loss(const at::Tensor& loss, int64_t reduction) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2, "ocl: unknown loss reduction ", reduction);
  if (reduction == 1) return at::mean(loss);
  if (reduction == 2) return at::sum(loss);
  return loss;
}

// gradient scale of a loss reduction: 1/N for mean
at::Tensor scale_grad(const at::Tensor& g, const at::Tensor& self, int64_t reduction) {
  return reduction == 1 ? at::div(g, static_cast<double>(self.numel())) : g;
}

// index_select along `dim` by indices computed on the host (pads)
at::Tensor select_host(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& idx) {
  return at::index_select(x, dim, at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(x.device()));
}

std::vector<int64_t> pad_index(int64_t n, int64_t left, int64_t right, bool reflect, const char* name) {
  if (reflect)
    TORCH_CHECK(left < n && right < n, name, ": Padding size should be less than the corresponding input dimension, "
                "but got: padding (", left, ", ", right, ") at dimension of size ", n);
  TORCH_CHECK(n > 0 || (left == 0 && right == 0), name, ": input dimension of size 0 cannot be padded");
  std::vector<int64_t> idx;
  for (int64_t j = -left; j < n + right; ++j) {
    int64_t v = j;
    if (reflect) {
      if (v < 0) v = -v;
      if (v >= n) v = 2 * (n - 1) - v;
    } else {
      v = v < 0 ? 0 : (v >= n ? n - 1 : v);
    }
    idx.push_back(v);
  }
  return idx;
}

at::Tensor pad(const char* name, const at::Tensor& self, at::IntArrayRef padding, int64_t dims, bool reflect) {
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * dims, name, ": padding size is expected to be ", 2 * dims,
              ", but got: ", padding.size());
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, ": Expected ", dims + 1, "D or ", dims + 2,
              "D tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
              self.sizes());
  at::Tensor x = self;
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t d = self.dim() - 1 - i;
    x = select_host(x, d, pad_index(self.size(d), padding[2 * i], padding[2 * i + 1], reflect, name));
  }
  return x;
}

at::Tensor pad_backward(const char* name, const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef padding,
                        int64_t dims, bool reflect) {
  // the forward selected along the last dims in turn; undo them in reverse order, adding
  std::vector<std::vector<int64_t>> idx;
  std::vector<int64_t> shape = grad.sizes().vec();
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t d = self.dim() - 1 - i;
    idx.push_back(pad_index(self.size(d), padding[2 * i], padding[2 * i + 1], reflect, name));
  }
  // float16/bfloat16 gradients add up in float32, rounded once at the end (as the CPU accumulates)
  const bool narrow = grad.scalar_type() == at::kHalf || grad.scalar_type() == at::kBFloat16;
  at::Tensor g = narrow ? grad.to(at::kFloat) : grad;
  for (int64_t i = dims - 1; i >= 0; --i) {
    const int64_t d = self.dim() - 1 - i;
    std::vector<int64_t> s = g.sizes().vec();
    s[d] = self.size(d);
    const at::Tensor index = at::tensor(idx[i], at::TensorOptions().dtype(at::kLong)).to(g.device());
    g = at::index_add(at::zeros(s, g.options()), d, index, g);
  }
  return narrow ? g.to(grad.scalar_type()) : g;
}

}  // namespace

// ---- shape (opspec/shape.yaml) ----
at::Tensor k_stack(at::TensorList tensors, int64_t dim) {
  TORCH_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  const int64_t d = c10::maybe_wrap_dim(dim, tensors[0].dim() + 1);
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.sizes().equals(tensors[0].sizes()), "stack expects each tensor to be equal size, but got ",
                tensors[0].sizes(), " at entry 0 and ", t.sizes(), " at entry ", parts.size());
    parts.push_back(t.unsqueeze(d));
  }
  return at::cat(parts, d);
}

at::Tensor k_flip(const at::Tensor & self, at::IntArrayRef dims) {
  at::Tensor x = self;
  std::vector<bool> seen(static_cast<std::size_t>(std::max<int64_t>(self.dim(), 1)), false);
  for (int64_t dim : dims) {
    const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    TORCH_CHECK(!seen[d], "dim ", d, " appears multiple times in the list of dims");
    seen[d] = true;
    if (self.dim() == 0 || self.size(d) <= 1) continue;
    const at::Tensor rev = at::arange(self.size(d) - 1, -1, -1, self.options().dtype(at::kLong));
    x = at::index_select(x, d, rev);
  }
  return x.is_same(self) ? self.clone() : x;
}

at::Tensor k_roll(const at::Tensor & self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:0");
    const int64_t zero = 0;
    return k_roll(self.reshape({-1}), shifts, at::IntArrayRef(zero)).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  at::Tensor x = self;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = c10::maybe_wrap_dim(dims[k], self.dim());
    const int64_t n = self.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    x = at::cat({x.narrow(d, n - s, s), x.narrow(d, 0, n - s)}, d);
  }
  return x.is_same(self) ? self.clone() : x;
}

at::Tensor k_repeat(const at::Tensor & self, at::IntArrayRef repeats) {
  TORCH_CHECK(static_cast<int64_t>(repeats.size()) >= self.dim(), "Number of dimensions of repeat dims can not be "
              "smaller than number of dimensions of tensor");
  const int64_t nd = static_cast<int64_t>(repeats.size());
  std::vector<int64_t> padded(static_cast<std::size_t>(nd - self.dim()), 1);
  for (int64_t s : self.sizes()) padded.push_back(s);
  std::vector<int64_t> out_shape, pair_shape, view_shape;
  for (int64_t i = 0; i < nd; ++i) {
    TORCH_CHECK(repeats[i] >= 0, "Trying to create tensor with negative dimension ", repeats[i]);
    out_shape.push_back(repeats[i] * padded[i]);
    pair_shape.push_back(repeats[i]);
    pair_shape.push_back(padded[i]);
    view_shape.push_back(1);
    view_shape.push_back(padded[i]);
  }
  at::Tensor out = at::empty(out_shape, self.options());
  if (out.numel() == 0) return out;
  out.view(pair_shape).copy_(self.reshape(view_shape).expand(pair_shape));
  return out;
}

namespace {
at::Tensor triangle(const char* name, const at::Tensor& self, int64_t diagonal, bool lower) {
  TORCH_CHECK(self.dim() >= 2, name, ": input tensor must have at least 2 dimensions");
  const int64_t rows = self.size(-2), cols = self.size(-1);
  if (self.numel() == 0) return self.clone();
  const at::TensorOptions lopt = self.options().dtype(at::kLong);
  const at::Tensor diff = at::sub(at::arange(cols, lopt).unsqueeze(0), at::arange(rows, lopt).unsqueeze(1));
  // keep col - row <= k (tril) or >= k (triu); zero the rest
  const at::Tensor drop = lower ? at::gt(diff, diagonal) : at::lt(diff, diagonal);
  return at::masked_fill(self, drop, 0);
}
}  // namespace

at::Tensor k_tril(const at::Tensor & self, int64_t diagonal) { return triangle("tril", self, diagonal, true); }
at::Tensor k_triu(const at::Tensor & self, int64_t diagonal) { return triangle("triu", self, diagonal, false); }

at::Tensor k_constant_pad_nd(const at::Tensor & self, at::IntArrayRef pad, const at::Scalar & value) {
  TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  const int64_t n = static_cast<int64_t>(pad.size()) / 2;
  TORCH_CHECK(n <= self.dim(), "Length of pad should be no more than twice the number of dimensions of the input. "
              "Pad length is ", pad.size(), " while the input has ", self.dim(), " dimensions.");
  std::vector<int64_t> shape = self.sizes().vec();
  at::Tensor src = self;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = self.dim() - 1 - i;
    const int64_t l = pad[2 * i], r = pad[2 * i + 1];
    const int64_t size = self.size(d) + l + r;
    TORCH_CHECK(size >= 0, "The input size ", self.size(d), ", plus negative padding ", l, " and ", r,
                " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input.");
    shape[d] = size;
    // negative pads crop the input
    const int64_t from = l < 0 ? -l : 0, to = self.size(d) - (r < 0 ? -r : 0);
    src = src.narrow(d, from, std::max<int64_t>(to - from, 0));
  }
  at::Tensor out = k_fill_Tensor(at::empty(shape, self.options()), at::scalar_tensor(value, value.type()));
  if (src.numel() == 0) return out;
  at::Tensor dst = out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = self.dim() - 1 - i;
    dst = dst.narrow(d, std::max<int64_t>(pad[2 * i], 0), src.size(d));
  }
  dst.copy_(src);
  return out;
}

at::Tensor k_unfold(const at::Tensor & self, int64_t dimension, int64_t size, int64_t step) {
  const int64_t nd = self.dim();
  const int64_t d = c10::maybe_wrap_dim(dimension, std::max<int64_t>(nd, 1));
  const int64_t max_size = nd == 0 ? 1 : self.size(d);
  TORCH_CHECK(size <= max_size, "maximum size for tensor at dimension ", d, " is ", max_size, " but size is ", size);
  TORCH_CHECK(step > 0, "step is ", step, " but must be > 0");
  std::vector<int64_t> sizes = self.sizes().vec(), strides = self.strides().vec();
  if (nd == 0) return self.as_strided({size}, {1});
  sizes[d] = (self.size(d) - size) / step + 1;
  strides[d] = self.stride(d) * step;
  sizes.push_back(size);
  strides.push_back(self.stride(d));
  return self.as_strided(sizes, strides);
}

at::Tensor k_channel_shuffle(const at::Tensor & self, int64_t groups) {
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with "
              "sizes ", self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive. Value of groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  std::vector<int64_t> shape = self.sizes().vec();
  shape[1] = c / groups;
  shape.insert(shape.begin() + 1, groups);
  return self.reshape(shape).transpose(1, 2).contiguous().view(self.sizes());
}

at::Tensor k_reflection_pad1d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("reflection_pad1d", self, padding, 1, true);
}
at::Tensor k_reflection_pad2d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("reflection_pad2d", self, padding, 2, true);
}
at::Tensor k_reflection_pad3d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("reflection_pad3d", self, padding, 3, true);
}
at::Tensor k_replication_pad1d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("replication_pad1d", self, padding, 1, false);
}
at::Tensor k_replication_pad2d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("replication_pad2d", self, padding, 2, false);
}
at::Tensor k_replication_pad3d(const at::Tensor & self, at::IntArrayRef padding) {
  return pad("replication_pad3d", self, padding, 3, false);
}
at::Tensor k_reflection_pad1d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                       at::IntArrayRef padding) {
  return pad_backward("reflection_pad1d_backward", grad_output, self, padding, 1, true);
}
at::Tensor k_reflection_pad2d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                       at::IntArrayRef padding) {
  return pad_backward("reflection_pad2d_backward", grad_output, self, padding, 2, true);
}
at::Tensor k_reflection_pad3d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                       at::IntArrayRef padding) {
  return pad_backward("reflection_pad3d_backward", grad_output, self, padding, 3, true);
}
at::Tensor k_replication_pad1d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                        at::IntArrayRef padding) {
  return pad_backward("replication_pad1d_backward", grad_output, self, padding, 1, false);
}
at::Tensor k_replication_pad2d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                        at::IntArrayRef padding) {
  return pad_backward("replication_pad2d_backward", grad_output, self, padding, 2, false);
}
at::Tensor k_replication_pad3d_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                        at::IntArrayRef padding) {
  return pad_backward("replication_pad3d_backward", grad_output, self, padding, 3, false);
}

// ---- linalg (opspec/linalg.yaml) ----
at::Tensor k_dot(const at::Tensor & self, const at::Tensor & tensor) {
  TORCH_CHECK(self.dim() == 1 && tensor.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              tensor.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == tensor.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", tensor.scalar_type());
  TORCH_CHECK(self.numel() == tensor.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", tensor.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              tensor.numel(), " elements respectively");
  return at::sum(at::mul(self, tensor));
}
at::Tensor k_vdot(const at::Tensor & self, const at::Tensor & other) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              other.dim(), "D tensors");
  return k_dot(self, other);  // real tensors: no conjugation
}
at::Tensor k_mv(const at::Tensor & self, const at::Tensor & vec) {
  TORCH_CHECK(self.dim() == 2 && vec.dim() == 1, "vector + matrix @ vector expected, got ", self.dim(), ", ",
              vec.dim());
  TORCH_CHECK(self.size(1) == vec.size(0), "size mismatch, got input (", self.size(0), "), mat (", self.size(0),
              "x", self.size(1), "), vec (", vec.size(0), ")");
  return at::mm(self, vec.unsqueeze(1)).squeeze(1);
}
at::Tensor k_addmv(const at::Tensor & self, const at::Tensor & mat, const at::Tensor & vec, const at::Scalar & beta,
                   const at::Scalar & alpha) {
  at::Tensor r = blend(self, k_mv(mat, vec), beta, alpha);
  return r.sizes().equals({mat.size(0)}) ? r : r.expand({mat.size(0)}).contiguous();
}
at::Tensor k_addr(const at::Tensor & self, const at::Tensor & vec1, const at::Tensor & vec2, const at::Scalar & beta,
                  const at::Scalar & alpha) {
  TORCH_CHECK(vec1.dim() == 1 && vec2.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  const at::Tensor outer = at::mul(vec1.unsqueeze(1), vec2.unsqueeze(0));
  at::Tensor r;
  if (self.scalar_type() == at::kBool) {
    // bool: (beta and self) or (alpha and outer)
    r = alpha.toBool() ? outer : at::zeros(outer.sizes(), outer.options());
    if (beta.toBool()) r = at::add(r, self);
  } else {
    r = blend(self, outer, beta, alpha);
  }
  return r.sizes().equals(outer.sizes()) ? r : r.expand(outer.sizes()).contiguous();
}
at::Tensor k_baddbmm(const at::Tensor & self, const at::Tensor & batch1, const at::Tensor & batch2,
                     const at::Scalar & beta, const at::Scalar & alpha) {
  const at::Tensor p = at::bmm(batch1, batch2);
  at::Tensor r = blend(self, p, beta, alpha);
  return r.sizes().equals(p.sizes()) ? r : r.expand(p.sizes()).contiguous();
}
at::Tensor k_addbmm(const at::Tensor & self, const at::Tensor & batch1, const at::Tensor & batch2,
                    const at::Scalar & beta, const at::Scalar & alpha) {
  const at::Tensor p = at::sum(at::bmm(batch1, batch2), 0);
  at::Tensor r = blend(self, p, beta, alpha);
  return r.sizes().equals(p.sizes()) ? r : r.expand(p.sizes()).contiguous();
}
at::Tensor k_linalg_cross(const at::Tensor & self, const at::Tensor & other, int64_t dim) {
  TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), other.sizes());
  const at::Tensor a = self.expand(shape), b = other.expand(shape);
  const int64_t d = c10::maybe_wrap_dim(dim, static_cast<int64_t>(shape.size()));
  TORCH_CHECK(shape[d] == 3, "linalg.cross: inputs dimension ", d, " must have length 3. Got ", self.size(d), " and ",
              other.size(d));
  const at::Tensor a1 = select_host(a, d, {1, 2, 0}), a2 = select_host(a, d, {2, 0, 1});
  const at::Tensor b1 = select_host(b, d, {1, 2, 0}), b2 = select_host(b, d, {2, 0, 1});
  return at::sub(at::mul(a1, b2), at::mul(a2, b1));
}

// ---- loss (opspec/loss.yaml) ----
at::Tensor k_mse_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction) {
  const at::Tensor d = at::sub(self, target);
  return reduce_loss(at::mul(d, d), reduction);
}
at::Tensor k_mse_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target,
                               int64_t reduction) {
  const double norm = reduction == 1 ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  return at::mul(at::mul(at::sub(self, target), norm), grad_output);
}
at::Tensor k_soft_margin_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction) {
  return reduce_loss(at::log1p(at::exp(at::neg(at::mul(target, self)))), reduction);
}
at::Tensor k_soft_margin_loss_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                       const at::Tensor & target, int64_t reduction) {
  const at::Tensor z = at::exp(at::neg(at::mul(target, self)));
  const at::Tensor g = at::mul(at::neg(at::mul(target, at::div(z, at::add(z, 1)))), grad_output);
  return scale_grad(g, self, reduction);
}
at::Tensor k_smooth_l1_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction, double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  const at::Tensor z = at::abs(at::sub(self, target));
  if (beta == 0) return reduce_loss(z, reduction);
  const at::Tensor l = at::where(at::lt(z, beta), at::div(at::mul(at::mul(z, z), 0.5), beta), at::sub(z, 0.5 * beta));
  return reduce_loss(l, reduction);
}
at::Tensor k_smooth_l1_loss_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                     const at::Tensor & target, int64_t reduction, double beta) {
  const at::Tensor x = at::sub(self, target);
  at::Tensor g;
  if (beta == 0) {
    g = at::mul(at::sign(x), grad_output);
  } else {
    const at::Tensor inner = at::div(x, beta);
    g = at::mul(at::where(at::le(x, -beta), at::scalar_tensor(-1.0, at::TensorOptions().dtype(x.scalar_type())),
                          at::where(at::ge(x, beta), at::scalar_tensor(1.0, at::TensorOptions().dtype(x.scalar_type())), inner)),
                grad_output);
  }
  return scale_grad(g, self, reduction);
}
at::Tensor k_huber_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  const at::Tensor z = at::abs(at::sub(self, target));
  const at::Tensor l = at::where(at::lt(z, delta), at::mul(at::mul(z, z), 0.5), at::mul(at::sub(z, 0.5 * delta), delta));
  return reduce_loss(l, reduction);
}
at::Tensor k_huber_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target,
                                 int64_t reduction, double delta) {
  const at::Tensor x = at::sub(self, target);
  const at::Tensor g = at::mul(at::where(at::le(x, -delta), at::scalar_tensor(-delta, at::TensorOptions().dtype(x.scalar_type())),
                                         at::where(at::ge(x, delta), at::scalar_tensor(delta, at::TensorOptions().dtype(x.scalar_type())), x)),
                               grad_output);
  return scale_grad(g, self, reduction);
}
at::Tensor k_binary_cross_entropy(const at::Tensor & self, const at::Tensor & target,
                                  const ::std::optional<at::Tensor> & weight, int64_t reduction) {
  TORCH_CHECK(self.sizes().equals(target.sizes()), "Using a target size (", target.sizes(), ") that is different to "
              "the input size (", self.sizes(), ") is deprecated. Please ensure they have the same size.");
  // (target - 1) * max(log(1 - x), -100) - target * max(log(x), -100)
  const at::Tensor lo = at::maximum(at::log1p(at::neg(self)), at::scalar_tensor(-100.0, at::TensorOptions().dtype(self.scalar_type())));
  const at::Tensor lx = at::maximum(at::log(self), at::scalar_tensor(-100.0, at::TensorOptions().dtype(self.scalar_type())));
  at::Tensor l = at::sub(at::mul(at::sub(target, 1), lo), at::mul(target, lx));
  if (weight && weight->defined()) l = at::mul(l, *weight);
  return reduce_loss(l, reduction);
}
at::Tensor k_binary_cross_entropy_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                           const at::Tensor & target, const ::std::optional<at::Tensor> & weight,
                                           int64_t reduction) {
  // grad * (x - target) / max((1 - x) * x, 1e-12)
  const at::Tensor denom = at::maximum(at::mul(at::rsub(self, 1), self), at::scalar_tensor(1e-12, at::TensorOptions().dtype(self.scalar_type())));
  at::Tensor g = at::mul(at::div(at::sub(self, target), denom), grad_output);
  if (weight && weight->defined()) g = at::mul(g, *weight);
  return scale_grad(g, self, reduction);
}
at::Tensor k_binary_cross_entropy_with_logits(const at::Tensor & self, const at::Tensor & target,
                                              const ::std::optional<at::Tensor> & weight,
                                              const ::std::optional<at::Tensor> & pos_weight, int64_t reduction) {
  // (1 - target) * x - w * log_sigmoid(x), w = (pos_weight - 1) * target + 1
  const at::Tensor ls = at::log_sigmoid(self);
  at::Tensor l;
  if (pos_weight && pos_weight->defined()) {
    const at::Tensor w = at::add(at::mul(at::sub(*pos_weight, 1), target), 1);
    l = at::sub(at::mul(at::rsub(target, 1), self), at::mul(w, ls));
  } else {
    l = at::sub(at::mul(at::rsub(target, 1), self), ls);
  }
  if (weight && weight->defined()) l = at::mul(l, *weight);
  return reduce_loss(l, reduction);
}

namespace {
// [N, C, d...] as [N * prod(d), C] and the target [N, d...] as [N * prod(d)]
at::Tensor rows_of(const at::Tensor& x) {
  std::vector<int64_t> perm{0};
  for (int64_t j = 2; j < x.dim(); ++j) perm.push_back(j);
  perm.push_back(1);
  return x.permute(perm).reshape({-1, x.size(1)});
}
void check_2d(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.dim() == 4 && target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got "
              "targets of dimension: ", target.dim());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
}
}  // namespace

::std::tuple<at::Tensor,at::Tensor> k_nll_loss2d_forward(const at::Tensor & self, const at::Tensor & target,
                                                        const ::std::optional<at::Tensor> & weight,
                                                        int64_t reduction, int64_t ignore_index) {
  check_2d(self, target);
  auto [out, total] = at::nll_loss_forward(rows_of(self), target.reshape({-1}), weight, reduction, ignore_index);
  if (reduction == 0) out = out.reshape(target.sizes());
  return {out, total};
}

at::Tensor k_nll_loss2d_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target,
                                 const ::std::optional<at::Tensor> & weight, int64_t reduction, int64_t ignore_index,
                                 const at::Tensor & total_weight) {
  check_2d(self, target);
  const at::Tensor g = reduction == 0 ? grad_output.reshape({-1}) : grad_output;
  const at::Tensor rows = at::nll_loss_backward(g, rows_of(self), target.reshape({-1}), weight, reduction,
                                                ignore_index, total_weight);
  // back from [N * H * W, C] to [N, C, H, W]
  return rows.reshape({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2}).contiguous();
}

}  // namespace ocl::kernels
