// acme loss kernels: nll_loss / nll_loss2d (+ backward), the elementwise
// losses (mse, smooth_l1, huber, binary_cross_entropy[_with_logits],
// soft_margin) with their backwards, multi_margin_loss and
// multilabel_margin_loss_forward.
//
// Reductions follow at::Reduction: 0 none, 1 mean, 2 sum. Values are staged as
// dense compute-type arrays; sums accumulate in double.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/alloc.h"
#include "kernel_lib/args.h"
#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernel_lib/iter.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

enum Red : int64_t { kNone = 0, kMean = 1, kSum = 2 };

void check_reduction(const char* op, int64_t reduction) {
  FL_CHECK(reduction >= kNone && reduction <= kSum, op, "reduction must be 0 (none), 1 (mean) ",
             "or 2 (sum), got ", reduction);
}

// Dense int64 view of an index tensor: the host part checks it and makes it
// contiguous (long_input, a queued copy when strided), the device part reads it
// (load_long).
struct Longs {
  const int64_t* p = nullptr;
};
at::Tensor long_input(const char* op, const at::Tensor& t, const char* arg) {
  FL_CHECK_T(t.scalar_type() == c10::ScalarType::Long, op, t, arg, " must be int64");
  return t.is_contiguous() ? t : t.contiguous();
}
Longs load_long(const DeviceTensor& t) {
  Longs l;
  l.p = t.numel() ? t.const_data_ptr<int64_t>() : nullptr;
  return l;
}

// The shape checks nn::load<Acc>(op, t, shape) makes (the same errors), done in
// the host part: the load itself runs in the device part. A tensor of the shape
// itself always loads.
void check_loadable(const at::Tensor& t, c10::IntArrayRef shape) {
  if (!t.defined() || t.sizes().equals(shape)) return;
  StridedIter it(shape);
  it.add(t);
}

void check_pair(const char* op, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  nn::check_float(op, self);
  nn::check_float(op, target);
  check_reduction(op, reduction);
}

// ---- elementwise losses ---------------------------------------------------------
// One host part and one device part serve them all; a loss gives only its
// per-element function, a generic lambda f(x, y, pw) -> the loss of an element
// (for the backward d loss / dx), where pw is the element's pos_weight or null.
// It travels to the device part (it holds values only). A weight, broadcast to
// the loss shape, multiplies each element's result.

template <class F>
at::Tensor elementwise_loss(const char* op, const at::Tensor& self, const at::Tensor& target,
                            int64_t reduction, const std::vector<int64_t>& shape, F f,
                            const at::Tensor& weight = at::Tensor(),
                            const at::Tensor& pos_weight = at::Tensor()) {
  check_pair(op, self, target, reduction);
  nn::check_float(op, weight);
  nn::check_float(op, pos_weight);
  at::Tensor out = reduction == kNone ? at::empty(shape, self.options())
                                      : at::empty({}, self.options());
  check_loadable(weight, shape);
  check_loadable(pos_weight, shape);
  check_loadable(self, shape);
  check_loadable(target, shape);
  const int64_t n = nn::shape_numel(shape);
  if (reduction == kNone && n == 0) return out;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    // the reduced value is written into the 0-dim `out` on the device: no host wait
    launch(out, [op, reduction, shape, n, f, self = DeviceTensor(self),
                 target = DeviceTensor(target), weight = DeviceTensor(weight),
                 pos_weight = DeviceTensor(pos_weight), out = DeviceTensor(out)] {
      nn::Dense<Acc> w, pw;
      if (weight.defined()) w = nn::load<Acc>(op, weight, shape);
      if (pos_weight.defined()) pw = nn::load<Acc>(op, pos_weight, shape);
      auto x = nn::load<Acc>(op, self, shape);
      auto y = nn::load<Acc>(op, target, shape);
      auto loss = [&](int64_t i) -> Acc {
        const Acc l = f(x.data()[i], y.data()[i], pw.data() ? pw.data() + i : nullptr);
        return w.data() ? l * w.data()[i] : l;
      };
      if (reduction == kNone) {
        nn::OutBuf<Acc> ob(out);
        for (int64_t i = 0; i < n; ++i) ob.data()[i] = loss(i);
        ob.finish(op);
      } else {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += loss(i);
        // mean of nothing is NaN, as in PyTorch
        Acc v = static_cast<Acc>(reduction == kMean ? s / static_cast<double>(n) : s);
        nn::store<Acc>(op, &v, out);
      }
    });
  });
  return out;
}

template <class F>
at::Tensor elementwise_loss_backward(const char* op, const at::Tensor& grad_output,
                                     const at::Tensor& self, const at::Tensor& target,
                                     int64_t reduction, F df,
                                     const at::Tensor& weight = at::Tensor()) {
  check_pair(op, self, target, reduction);
  nn::check_float(op, grad_output);
  nn::check_float(op, weight);
  const auto shape = self.sizes().vec();
  check_loadable(weight, shape);
  at::Tensor gi = at::empty(shape, self.options());
  const int64_t n = self.numel();
  if (n == 0) return gi;
  check_loadable(target, shape);
  check_loadable(grad_output, shape);
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gi, [op, reduction, shape, n, df, grad_output = DeviceTensor(grad_output),
                self = DeviceTensor(self), target = DeviceTensor(target),
                weight = DeviceTensor(weight), gi = DeviceTensor(gi)] {
      nn::Dense<Acc> w;
      if (weight.defined()) w = nn::load<Acc>(op, weight, shape);
      auto x = nn::load<Acc>(op, self);
      auto y = nn::load<Acc>(op, target, shape);
      auto g = nn::load<Acc>(op, grad_output, shape);
      const Acc norm = reduction == kMean ? Acc(1) / static_cast<Acc>(n) : Acc(1);
      nn::OutBuf<Acc> ob(gi);
      for (int64_t i = 0; i < n; ++i) {
        const Acc d = df(x.data()[i], y.data()[i], static_cast<const Acc*>(nullptr));
        ob.data()[i] = norm * g.data()[i] * (w.data() ? d * w.data()[i] : d);
      }
      ob.finish(op);
    });
  });
  return gi;
}

// The loss shape of self and target (and any per-element weights): their broadcast.
std::vector<int64_t> loss_shape(const char* op, const at::Tensor& self, const at::Tensor& target,
                                const at::Tensor& weight = at::Tensor(),
                                const at::Tensor& pos_weight = at::Tensor()) {
  return broadcast_shape(op, {&self, &target, &weight, &pos_weight});
}

// The margin losses' output: the per-sample losses as they are (no reduction
// of a batch), else their sum or mean, summed in double in sample order.
template <class Acc>
void store_per_sample(const char* op, const std::vector<Acc>& per, int64_t reduction, bool batch,
                      const DeviceTensor& out) {
  if (reduction == kNone && batch) {
    nn::store<Acc>(op, per.data(), out);
    return;
  }
  double total = 0;
  for (const Acc v : per) total += v;
  Acc v = static_cast<Acc>(reduction == kMean ? total / static_cast<double>(per.size()) : total);
  nn::store<Acc>(op, &v, out);
}

template <class T>
inline T sgn(T v) {
  return static_cast<T>((v > T(0)) - (v < T(0)));
}

// ---- nll ------------------------------------------------------------------------
// self viewed as (N, C, S) with target (N, S); 1-d self is N = 1 and an
// output without the N dimension.
struct NllShape {
  int64_t N, C, S;
};

NllShape nll_shape(const char* op, const at::Tensor& self, const at::Tensor& target, bool two_d) {
  if (two_d) {
    FL_CHECK_T(self.dim() == 4, op, self, "expected 4-d input (N, C, H, W), got ", self.sizes());
    FL_CHECK_T(target.dim() == 3 && target.size(0) == self.size(0) &&
                     target.size(1) == self.size(2) && target.size(2) == self.size(3),
                 op, target, "expected target of shape (N, H, W) = (", self.size(0), ", ",
                 self.size(2), ", ", self.size(3), "), got ", target.sizes());
    return {self.size(0), self.size(1), self.size(2) * self.size(3)};
  }
  FL_CHECK_T(self.dim() == 1 || self.dim() == 2, op, self, "expected 1-d or 2-d input, got ",
               self.sizes());
  if (self.dim() == 1) {
    FL_CHECK_T(target.dim() <= 1 && target.numel() == 1, op, target,
                 "expected a 0-d or single-element target for 1-d input, got ", target.sizes());
    return {1, self.size(0), 1};
  }
  FL_CHECK_T(target.dim() == 1 && target.size(0) == self.size(0), op, target,
               "expected target of shape (", self.size(0), "), got ", target.sizes());
  return {self.size(0), self.size(1), 1};
}

std::tuple<at::Tensor, at::Tensor> nll_forward(const char* op, const at::Tensor& self,
                                               const at::Tensor& target, const at::Tensor& weight,
                                               int64_t reduction, int64_t ignore_index,
                                               bool two_d) {
  nn::check_float(op, self);
  nn::check_float(op, weight);
  check_reduction(op, reduction);
  const NllShape sh = nll_shape(op, self, target, two_d);
  if (weight.defined())
    FL_CHECK_T(weight.numel() == sh.C, op, weight, "weight must have ", sh.C,
                 " elements (one per class), got ", weight.sizes());
  at::Tensor out;
  if (reduction == kNone) {
    out = at::empty(two_d ? at::IntArrayRef(target.sizes())
                          : (self.dim() == 1 ? at::IntArrayRef() : at::IntArrayRef(target.sizes())),
                    self.options());
  } else {
    out = at::empty({}, self.options());
  }
  at::Tensor total_weight = at::empty({}, self.options());
  const at::Tensor target_c = long_input(op, target, "target");
  check_loadable(weight, {sh.C});
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    // the loss and total_weight are written on the device: no host wait
    launch(out, [op, sh, reduction, ignore_index, two_d, self = DeviceTensor(self),
                 target = DeviceTensor(target_c), weight = DeviceTensor(weight),
                 out = DeviceTensor(out), total_weight = DeviceTensor(total_weight)] {
      auto x = nn::load<Acc>(op, self);
      auto t = load_long(target);
      nn::Dense<Acc> w;
      if (weight.defined()) w = nn::load<Acc>(op, weight, {sh.C});
      std::vector<Acc> per(static_cast<size_t>(sh.N * sh.S), Acc(0));
      double sum = 0, tw = 0;
      for (int64_t n = 0; n < sh.N; ++n)
        for (int64_t s = 0; s < sh.S; ++s) {
          const int64_t cls = t.p[n * sh.S + s];
          if (cls == ignore_index) continue;
          FL_CHECK_INDEX(cls >= 0 && cls < sh.C, op, "Target ", cls, " is out of bounds.");
          const Acc wc = w.data() ? w.data()[cls] : Acc(1);
          const Acc v = -x.data()[(n * sh.C + cls) * sh.S + s] * wc;
          per[n * sh.S + s] = v;
          sum += v;
          tw += wc;
        }
      // PyTorch reports total_weight 0 for unreduced batched input only.
      Acc twv = (reduction == kNone && (two_d || self.dim() == 2)) ? Acc(0) : static_cast<Acc>(tw);
      nn::store<Acc>(op, &twv, total_weight);
      if (reduction == kNone) {
        nn::store<Acc>(op, per.data(), out);
      } else {
        Acc v = static_cast<Acc>(reduction == kMean ? sum / tw : sum);
        nn::store<Acc>(op, &v, out);
      }
    });
  });
  return {out, total_weight};
}

at::Tensor nll_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& self,
                        const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                        int64_t ignore_index, const at::Tensor& total_weight, bool two_d) {
  nn::check_float(op, self);
  nn::check_float(op, grad_output);
  nn::check_float(op, weight);
  nn::check_float(op, total_weight);
  check_reduction(op, reduction);
  const NllShape sh = nll_shape(op, self, target, two_d);
  if (reduction == kNone) {
    FL_CHECK_T(grad_output.numel() == sh.N * sh.S, op, grad_output,
                 "grad_output must have one element per target, got ", grad_output.sizes());
  } else {
    FL_CHECK_T(grad_output.numel() == 1, op, grad_output,
                 "grad_output must have a single element, got ", grad_output.sizes());
  }
  at::Tensor gi = at::empty(self.sizes(), self.options());
  if (gi.numel() == 0) return gi;
  const at::Tensor target_c = long_input(op, target, "target");
  check_loadable(weight, {sh.C});
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    // total_weight is read by the device part (only for the mean): no host wait
    launch(gi, [op, sh, reduction, ignore_index, target = DeviceTensor(target_c),
                grad_output = DeviceTensor(grad_output), weight = DeviceTensor(weight),
                total_weight = reduction == kMean ? DeviceTensor(total_weight)
                                                      : DeviceTensor(),
                gi = DeviceTensor(gi)] {
      auto t = load_long(target);
      auto g = nn::load<Acc>(op, grad_output);
      nn::Dense<Acc> w;
      if (weight.defined()) w = nn::load<Acc>(op, weight, {sh.C});
      Acc scale = Acc(1);
      if (reduction == kMean) {
        auto tw = nn::load<Acc>(op, total_weight);
        scale = Acc(1) / tw.data()[0];
      }
      nn::OutBuf<Acc> ob(gi);
      std::fill(ob.data(), ob.data() + gi.numel(), Acc(0));
      for (int64_t n = 0; n < sh.N; ++n)
        for (int64_t s = 0; s < sh.S; ++s) {
          const int64_t cls = t.p[n * sh.S + s];
          if (cls == ignore_index) continue;
          FL_CHECK_INDEX(cls >= 0 && cls < sh.C, op, "Target ", cls, " is out of bounds.");
          const Acc wc = w.data() ? w.data()[cls] : Acc(1);
          const Acc gv = reduction == kNone ? g.data()[n * sh.S + s] : g.data()[0];
          ob.data()[(n * sh.C + cls) * sh.S + s] = -wc * gv * scale;
        }
      ob.finish(op);
    });
  });
  return gi;
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor> k_nll_loss_forward(const at::Tensor& self,
                                                        const at::Tensor& target,
                                                        const ::std::optional<at::Tensor>& weight,
                                                        int64_t reduction, int64_t ignore_index) {
  return nll_forward("nll_loss_forward", self, target, opt(weight), reduction, ignore_index, false);
}

at::Tensor k_nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, const ::std::optional<at::Tensor>& weight,
                               int64_t reduction, int64_t ignore_index,
                               const at::Tensor& total_weight) {
  return nll_backward("nll_loss_backward", grad_output, self, target, opt(weight), reduction,
                      ignore_index, total_weight, false);
}

::std::tuple<at::Tensor, at::Tensor> k_nll_loss2d_forward(const at::Tensor& self,
                                                          const at::Tensor& target,
                                                          const ::std::optional<at::Tensor>& weight,
                                                          int64_t reduction, int64_t ignore_index) {
  return nll_forward("nll_loss2d_forward", self, target, opt(weight), reduction, ignore_index, true);
}

at::Tensor k_nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 const at::Tensor& target,
                                 const ::std::optional<at::Tensor>& weight, int64_t reduction,
                                 int64_t ignore_index, const at::Tensor& total_weight) {
  return nll_backward("nll_loss2d_backward", grad_output, self, target, opt(weight), reduction,
                      ignore_index, total_weight, true);
}

// ---- mse, smooth_l1, huber, soft margin ---------------------------------------------

at::Tensor k_mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  const char* op = "mse_loss";
  return elementwise_loss(op, self, target, reduction, loss_shape(op, self, target),
                          [](auto x, auto y, auto) { return (x - y) * (x - y); });
}

at::Tensor k_mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, int64_t reduction) {
  return elementwise_loss_backward("mse_loss_backward", grad_output, self, target, reduction,
                                   [](auto x, auto y, auto) { return decltype(x)(2) * (x - y); });
}

at::Tensor k_smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                            double beta) {
  const char* op = "smooth_l1_loss";
  FL_CHECK(beta >= 0, op, "beta must be non-negative, got ", beta);
  return elementwise_loss(op, self, target, reduction, loss_shape(op, self, target),
                          [beta](auto x, auto y, auto) {
                            using Acc = decltype(x);
                            const Acc b = static_cast<Acc>(beta), z = std::abs(x - y);
                            return z < b ? Acc(0.5) * z * z / b : z - Acc(0.5) * b;
                          });
}

at::Tensor k_smooth_l1_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                     const at::Tensor& target, int64_t reduction, double beta) {
  return elementwise_loss_backward("smooth_l1_loss_backward", grad_output, self, target, reduction,
                                   [beta](auto x, auto y, auto) {
                                     using Acc = decltype(x);
                                     const Acc b = static_cast<Acc>(beta), d = x - y;
                                     return std::abs(d) < b ? d / b : sgn(d);
                                   });
}

at::Tensor k_huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                        double delta) {
  const char* op = "huber_loss";
  FL_CHECK(delta > 0, op, "delta must be positive, got ", delta);
  return elementwise_loss(op, self, target, reduction, loss_shape(op, self, target),
                          [delta](auto x, auto y, auto) {
                            using Acc = decltype(x);
                            const Acc dl = static_cast<Acc>(delta), z = std::abs(x - y);
                            return z < dl ? Acc(0.5) * z * z : dl * (z - Acc(0.5) * dl);
                          });
}

at::Tensor k_huber_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                 const at::Tensor& target, int64_t reduction, double delta) {
  return elementwise_loss_backward("huber_loss_backward", grad_output, self, target, reduction,
                                   [delta](auto x, auto y, auto) {
                                     using Acc = decltype(x);
                                     const Acc dl = static_cast<Acc>(delta), d = x - y;
                                     return d <= -dl ? -dl : (d >= dl ? dl : d);
                                   });
}

at::Tensor k_soft_margin_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  const char* op = "soft_margin_loss";
  return elementwise_loss(op, self, target, reduction, loss_shape(op, self, target),
                          [](auto x, auto y, auto) { return std::log1p(std::exp(-y * x)); });
}

at::Tensor k_soft_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                       const at::Tensor& target, int64_t reduction) {
  return elementwise_loss_backward("soft_margin_loss_backward", grad_output, self, target, reduction,
                                   [](auto x, auto y, auto) {
                                     const auto z = std::exp(-y * x);
                                     return -y * z / (decltype(x)(1) + z);
                                   });
}

// ---- binary cross entropy ------------------------------------------------------------

at::Tensor k_binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                  const ::std::optional<at::Tensor>& weight, int64_t reduction) {
  const char* op = "binary_cross_entropy";
  FL_CHECK_T(self.sizes().equals(target.sizes()), op, target, "target shape ", target.sizes(),
               " differs from input shape ", self.sizes());
  // log terms clamped at -100 as PyTorch does, so x = 0 or 1 stays finite; the
  // range check reads the data, so it runs in the device part (reported at the
  // next synchronization)
  return elementwise_loss(op, self, target, reduction, self.sizes().vec(),
                          [op](auto x, auto y, auto) {
                            using Acc = decltype(x);
                            FL_CHECK(x >= Acc(0) && x <= Acc(1), op,
                                       "all elements of input should be between 0 and 1");
                            const Acc lx = std::max(std::log(x), Acc(-100));
                            const Acc l1x = std::max(std::log1p(-x), Acc(-100));
                            return (y - Acc(1)) * l1x - y * lx;
                          },
                          opt(weight));
}

at::Tensor k_binary_cross_entropy_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target,
                                           const ::std::optional<at::Tensor>& weight,
                                           int64_t reduction) {
  return elementwise_loss_backward("binary_cross_entropy_backward", grad_output, self, target, reduction,
                                   [](auto x, auto y, auto) {
                                     using Acc = decltype(x);
                                     constexpr Acc eps = Acc(1e-12);
                                     return (x - y) / std::max((Acc(1) - x) * x, eps);
                                   },
                                   opt(weight));
}

at::Tensor k_binary_cross_entropy_with_logits(const at::Tensor& self, const at::Tensor& target,
                                              const ::std::optional<at::Tensor>& weight_,
                                              const ::std::optional<at::Tensor>& pos_weight_,
                                              int64_t reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const at::Tensor& weight = opt(weight_);
  const at::Tensor& pos_weight = opt(pos_weight_);
  return elementwise_loss(op, self, target, reduction, loss_shape(op, self, target, weight, pos_weight),
                          [](auto x, auto y, auto pw) {
                            // (1 - y) x + lw * log(1 + exp(-x)), computed stably as
                            // lw * (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0)
                            using Acc = decltype(x);
                            const Acc m = std::max(-x, Acc(0));
                            const Acc lw = pw ? (*pw - Acc(1)) * y + Acc(1) : Acc(1);
                            return (Acc(1) - y) * x + lw * (std::log(std::exp(-m) + std::exp(-x - m)) + m);
                          },
                          weight, pos_weight);
}

// ---- margin losses over classes ---------------------------------------------------------

at::Tensor k_multi_margin_loss(const at::Tensor& self, const at::Tensor& target,
                               const at::Scalar& p, const at::Scalar& margin,
                               const ::std::optional<at::Tensor>& weight_, int64_t reduction) {
  const char* op = "multi_margin_loss";
  const at::Tensor& weight = opt(weight_);
  nn::check_float(op, self);
  nn::check_float(op, weight);
  check_reduction(op, reduction);
  const int64_t pv = p.to<int64_t>();
  FL_CHECK(pv == 1 || pv == 2, op, "only p == 1 and p == 2 supported, got ", pv);
  FL_CHECK_T(self.dim() <= 2 && self.numel() > 0, op, self,
               "expected non-empty 1-d or 2-d input, got ", self.sizes());
  const int64_t N = self.dim() == 2 ? self.size(0) : 1;
  const int64_t C = self.dim() == 0 ? 1 : self.size(-1);
  FL_CHECK_T(target.numel() == N, op, target, "expected ", N, " targets, got ", target.sizes());
  if (weight.defined())
    FL_CHECK_T(weight.numel() == C, op, weight, "weight must have ", C, " elements");
  at::Tensor out = reduction == kNone && self.dim() == 2 ? at::empty({N}, self.options())
                                                         : at::empty({}, self.options());
  const at::Tensor target_c = long_input(op, target, "target");
  check_loadable(weight, {C});
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    const Acc mg = margin.to<Acc>();
    // the loss (0-dim when reduced) is written on the device: no host wait
    launch(out, [op, N, C, pv, mg, reduction, self = DeviceTensor(self),
                 target = DeviceTensor(target_c), weight = DeviceTensor(weight),
                 out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, self);
      auto t = load_long(target);
      nn::Dense<Acc> w;
      if (weight.defined()) w = nn::load<Acc>(op, weight, {C});
      std::vector<Acc> per(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) {
        const int64_t y = t.p[n];
        FL_CHECK_INDEX(y >= 0 && y < C, op, "target ", y, " out of range [0, ", C, ")");
        const Acc* row = x.data() + n * C;
        double s = 0;
        for (int64_t c = 0; c < C; ++c) {
          if (c == y) continue;
          Acc z = mg - row[y] + row[c];
          if (z <= Acc(0)) continue;
          if (pv == 2) z = z * z;
          if (w.data()) z *= w.data()[y];
          s += z;
        }
        per[n] = static_cast<Acc>(s / C);
      }
      store_per_sample(op, per, reduction, /*batch=*/self.dim() == 2, out);
    });
  });
  return out;
}

::std::tuple<at::Tensor, at::Tensor> k_multilabel_margin_loss_forward(const at::Tensor& self,
                                                                      const at::Tensor& target,
                                                                      int64_t reduction) {
  const char* op = "multilabel_margin_loss_forward";
  nn::check_float(op, self);
  check_reduction(op, reduction);
  FL_CHECK_T(self.dim() <= 2, op, self, "expected 0-d, 1-d or 2-d input, got ", self.sizes());
  FL_CHECK_T(target.sizes().equals(self.sizes()), op, target, "target shape ", target.sizes(),
               " differs from input shape ", self.sizes());
  const int64_t N = self.dim() == 2 ? self.size(0) : 1;
  const int64_t C = self.dim() == 0 ? 1 : self.size(-1);
  at::Tensor out = reduction == kNone && self.dim() == 2 ? at::empty({N}, self.options())
                                                         : at::empty({}, self.options());
  at::Tensor is_target = at::empty(self.sizes(), self.options());
  const at::Tensor target_c = long_input(op, target, "target");
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    // the loss (0-dim when reduced) and is_target are written on the device: no host wait
    launch(out, [op, N, C, reduction, self = DeviceTensor(self),
                 target = DeviceTensor(target_c), out = DeviceTensor(out),
                 is_target = DeviceTensor(is_target)] {
      auto x = nn::load<Acc>(op, self);
      auto t = load_long(target);
      std::vector<Acc> ist(static_cast<size_t>(N * C), Acc(0));
      std::vector<Acc> per(static_cast<size_t>(N));
      for (int64_t n = 0; n < N; ++n) {
        const int64_t* tr = t.p + n * C;
        Acc* is = ist.data() + n * C;
        // targets are the labels before the first -1
        int64_t nt = 0;
        for (; nt < C && tr[nt] >= 0; ++nt) {
          FL_CHECK_INDEX(tr[nt] < C, op, "target ", tr[nt], " out of range [0, ", C, ")");
          is[tr[nt]] = Acc(1);
        }
        const Acc* row = x.data() + n * C;
        double s = 0;
        for (int64_t j = 0; j < nt; ++j) {
          const Acc xj = row[tr[j]];
          for (int64_t k = 0; k < C; ++k) {
            if (is[k] != Acc(0)) continue;
            const Acc z = Acc(1) - xj + row[k];
            if (z > Acc(0)) s += z;
          }
        }
        per[n] = static_cast<Acc>(s / C);
      }
      store_per_sample(op, per, reduction, /*batch=*/self.dim() == 2, out);
      nn::store<Acc>(op, ist.data(), is_target);
    });
  });
  return {out, is_target};
}

}  // namespace acme::kernels
