// acme CTC loss kernels: _ctc_loss and _ctc_loss_backward, with the lengths as
// int lists or as tensors (the .Tensor overloads).
//
// The forward-backward algorithm of Graves et al. (2006), in log space, with
// the semantics of PyTorch's CPU kernel (aten/src/ATen/native/LossCTC.cpp):
// * log_probs (T, N, C); targets (N, S) padded, or 1-d concatenated (the
//   sequences one after the other, target_lengths long each); int64 or int32.
// * the extended target l' of a sequence puts `blank` before, between and after
//   its labels: 2 * target_length + 1 states. log_alpha[n, t, s] is the log
//   probability of the paths through l'[0..s] at time t; the loss is
//   -logsumexp of the last two states at t = input_length - 1 (only the last
//   one when the target is empty); an empty input has loss 0 for an empty
//   target and +inf otherwise.
// * the backward computes log_beta the same way from the end, collects
//   logsumexp(alpha + beta) per (t, label) and returns
//   (exp(log_probs) - exp(collected + nll - log_probs)) * grad, zero after each
//   input_length and for a whole sequence whose loss is +inf under zero_infinity
//   (the forward ignores zero_infinity: ctc_loss applies it to the loss).
// Each sum of three terms is computed as CPU does (max shifted, -inf guarded),
// so results agree to rounding. log_alpha entries past a sequence's lengths
// are -inf (CPU leaves them unwritten, CUDA writes -inf).
//
// Sequences are independent: the device part runs them in parallel, one per
// task, each over its own slice of the outputs.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/alloc.h"
#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// What the host part works out from the arguments and the lengths, for the
// device part: sizes, per-sequence lengths and where each target sequence
// starts in `targets` (in elements, strides applied).
struct CtcPlan {
  int64_t T = 0, N = 0, C = 0, blank = 0;
  int64_t max_target = 0;
  int64_t tg_stride = 1;
  std::vector<int64_t> input_lengths, target_lengths, tg_offset;
};

CtcPlan plan_ctc(const char* op, const at::Tensor& log_probs, const at::Tensor& targets,
                 c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths, int64_t blank) {
  FL_CHECK_T(log_probs.dim() == 3, op, log_probs,
               "expected log_probs of shape (T, N, C) (input length, batch, classes), got ",
               log_probs.sizes());
  FL_CHECK_T(targets.dim() == 1 || targets.dim() == 2, op, targets,
               "expected targets of shape (N, S) or 1-d concatenated targets, got ",
               targets.sizes());
  FL_CHECK_T(targets.scalar_type() == c10::ScalarType::Long ||
                   targets.scalar_type() == c10::ScalarType::Int,
               op, targets, "targets must be int64 or int32");
  CtcPlan p;
  p.T = log_probs.size(0);
  p.N = log_probs.size(1);
  p.C = log_probs.size(2);
  p.blank = blank;
  FL_CHECK_T(blank >= 0 && blank < p.C, op, log_probs, "blank must be in label range [0, ", p.C,
               "), got ", blank);
  FL_CHECK(static_cast<int64_t>(input_lengths.size()) == p.N, op,
             "input_lengths must have one entry per batch element (", p.N, "), got ",
             input_lengths.size());
  FL_CHECK(static_cast<int64_t>(target_lengths.size()) == p.N, op,
             "target_lengths must have one entry per batch element (", p.N, "), got ",
             target_lengths.size());
  p.input_lengths.assign(input_lengths.begin(), input_lengths.end());
  p.target_lengths.assign(target_lengths.begin(), target_lengths.end());
  p.tg_offset.resize(static_cast<size_t>(p.N));
  int64_t pos = 0;
  for (int64_t b = 0; b < p.N; ++b) {
    const int64_t il = input_lengths[b], tl = target_lengths[b];
    FL_CHECK(il >= 0 && il <= p.T, op, "input_lengths[", b, "] = ", il,
               " is outside [0, ", p.T, "] (log_probs has ", p.T, " time steps)");
    FL_CHECK(tl >= 0, op, "target_lengths[", b, "] = ", tl, " is negative");
    p.max_target = std::max(p.max_target, tl);
    if (targets.dim() == 1) {
      p.tg_offset[b] = pos * targets.stride(0);
      pos += tl;
    } else {
      p.tg_offset[b] = b * targets.stride(0);
    }
  }
  if (targets.dim() == 1) {
    FL_CHECK_T(targets.size(0) == pos, op, targets,
                 "1-d (concatenated) targets must have sum(target_lengths) = ", pos,
                 " elements, got ", targets.size(0));
    p.tg_stride = targets.stride(0);
  } else {
    FL_CHECK_T(targets.size(0) == p.N && targets.size(1) >= p.max_target, op, targets,
                 "expected targets of shape (", p.N, ", S) with S >= max(target_lengths) = ",
                 p.max_target, ", got ", targets.sizes());
    p.tg_stride = targets.stride(1);
  }
  return p;
}

// The lengths of a .Tensor overload. They decide log_alpha's shape and are
// checked against the sizes, so the host needs their values: they are
// converted to int64 on the stream and copied to the host after the work queued
// before them (read_on_host: a counted host wait), as CPU's and CUDA's
// ctc_loss_tensor do with .to(kCPU).
std::vector<int64_t> lengths_on_host(const char* op, const at::Tensor& t, const char* arg) {
  FL_CHECK_T(c10::isIntegralType(t.scalar_type(), /*includeBool=*/false), op, t, arg,
               " must be integral");
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (out.empty()) return out;
  if (t.device().is_cpu()) {  // a 0-dim CPU tensor (wrapped number) is a host value
    out[0] = t.item<int64_t>();
    return out;
  }
  at::Tensor l = cast(op, t, c10::ScalarType::Long);
  if (!l.is_contiguous()) l = l.contiguous();
  read_on_host(op, l, l.const_data_ptr(), out.data(), out.size());
  return out;
}

// Device part: the extended target l' of sequence b (blank at even states),
// its labels checked against the class count (the host never sees them).
template <class Tgt>
void extended_target(const char* op, const CtcPlan& p, const Tgt* tg, int64_t b,
                     std::vector<int64_t>& ext) {
  const int64_t L = p.target_lengths[b];
  ext.assign(static_cast<size_t>(2 * L + 1), p.blank);
  for (int64_t k = 0; k < L; ++k) {
    const int64_t label = static_cast<int64_t>(tg[p.tg_offset[b] + p.tg_stride * k]);
    FL_CHECK_INDEX(label >= 0 && label < p.C, op, "target ", label, " of sequence ", b,
                     " is out of the label range [0, ", p.C, ")");
    ext[static_cast<size_t>(2 * k + 1)] = label;
  }
}

// log(exp(a - m) + exp(b - m) + exp(c - m)) + m with m their max (0 when all
// are -inf: -inf - -inf would be NaN), CPU's order of operations.
template <class Acc>
inline Acc log_sum3(Acc a, Acc b, Acc c) {
  constexpr Acc neginf = -std::numeric_limits<Acc>::infinity();
  Acc m = a;
  if (b > m) m = b;
  if (c > m) m = c;
  if (m == neginf) m = 0;
  return std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m)) + m;
}

// Device part of the forward. lp: dense (T, N, C); alpha: (N, T, W) written
// whole; nll: N values.
template <class Acc, class Tgt>
void ctc_forward(const char* op, const CtcPlan& p, const Acc* lp, const Tgt* tg, Acc* alpha,
                 Acc* nll) {
  constexpr Acc neginf = -std::numeric_limits<Acc>::infinity();
  const int64_t T = p.T, N = p.N, C = p.C, W = 2 * p.max_target + 1;
  parallel_for(N, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> ext;
    for (int64_t b = b0; b < b1; ++b) {
      extended_target(op, p, tg, b, ext);
      const int64_t il = p.input_lengths[b], L = p.target_lengths[b], S = 2 * L + 1;
      Acc* a = alpha + b * T * W;
      std::fill(a, a + T * W, neginf);
      auto logp = [&](int64_t t, int64_t c) { return lp[(t * N + b) * C + c]; };
      if (il == 0) {
        nll[b] = -(L == 0 ? Acc(0) : neginf);
        continue;
      }
      a[0] = logp(0, p.blank);
      if (L > 0) a[1] = logp(0, ext[1]);
      for (int64_t t = 1; t < il; ++t) {
        const Acc* prev = a + (t - 1) * W;
        Acc* cur = a + t * W;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t label = ext[s];
          const Acc la1 = prev[s];
          const Acc la2 = s > 0 ? prev[s - 1] : neginf;
          // skipping the blank between two labels is allowed unless they repeat
          const Acc la3 = (s > 1 && ext[s - 2] != label) ? prev[s - 2] : neginf;
          cur[s] = log_sum3(la1, la2, la3) + logp(t, label);
        }
      }
      const Acc* last = a + (il - 1) * W;
      if (L == 0) {
        nll[b] = -last[0];
      } else {
        const Acc l1 = last[2 * L], l2 = last[2 * L - 1];
        Acc m = std::max(l1, l2);
        m = m == neginf ? Acc(0) : m;
        nll[b] = -(std::log(std::exp(l1 - m) + std::exp(l2 - m)) + m);
      }
    }
  });
}

// Device part of the backward. lp: dense (T, N, C); alpha: dense (N, T, W);
// grad: (T, N, C) written whole.
template <class Acc, class Tgt>
void ctc_backward(const char* op, const CtcPlan& p, int64_t W, bool zero_infinity,
                  const Acc* grad_out, const Acc* lp, const Tgt* tg, const Acc* nll,
                  const Acc* alpha, Acc* grad) {
  constexpr Acc neginf = -std::numeric_limits<Acc>::infinity();
  const int64_t T = p.T, N = p.N, C = p.C;
  parallel_for(N, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> ext;
    std::vector<Acc> beta;
    for (int64_t b = b0; b < b1; ++b) {
      auto g = [&](int64_t t, int64_t c) -> Acc& { return grad[(t * N + b) * C + c]; };
      auto logp = [&](int64_t t, int64_t c) { return lp[(t * N + b) * C + c]; };
      const Acc nllb = nll[b];
      if (zero_infinity && nllb == std::numeric_limits<Acc>::infinity()) {
        for (int64_t t = 0; t < T; ++t) std::fill(&g(t, 0), &g(t, 0) + C, Acc(0));
        continue;
      }
      extended_target(op, p, tg, b, ext);
      const int64_t il = p.input_lengths[b], L = p.target_lengths[b], S = 2 * L + 1;
      const Acc* a = alpha + b * T * W;
      // grad holds log(sum of alpha * beta) per (t, label) until the last loop;
      // an empty sum is -inf
      for (int64_t t = 0; t < il; ++t) std::fill(&g(t, 0), &g(t, 0) + C, neginf);
      if (il > 0) {
        beta.assign(static_cast<size_t>(il * S), neginf);
        const int64_t t = il - 1;
        Acc* bt = beta.data() + t * S;
        bt[2 * L] = logp(t, p.blank);
        g(t, p.blank) = a[t * W + 2 * L] + bt[2 * L];
        if (L > 0) {
          const int64_t label = ext[2 * L - 1];
          bt[2 * L - 1] = logp(t, label);
          // a blank and a label: two different entries, no log-add needed
          g(t, label) = a[t * W + 2 * L - 1] + bt[2 * L - 1];
        }
      }
      for (int64_t t = il - 2; t >= 0; --t) {
        const Acc* next = beta.data() + (t + 1) * S;
        Acc* bt = beta.data() + t * S;
        for (int64_t s = 2 * L; s >= 0; --s) {
          const int64_t label = ext[s];
          const Acc lb1 = next[s];
          const Acc lb2 = s < 2 * L ? next[s + 1] : neginf;
          const Acc lb3 = (s < 2 * L - 1 && ext[s + 2] != label) ? next[s + 2] : neginf;
          bt[s] = log_sum3(lb1, lb2, lb3) + logp(t, label);
          // collected[t, l'[s]] log+= alpha[t, s] + beta[t, s]
          const Acc ab = a[t * W + s] + bt[s];
          Acc& lcab = g(t, label);
          if (lcab == neginf) {
            lcab = ab;
          } else {
            const Acc m = std::max(lcab, ab);
            lcab = std::log(std::exp(lcab - m) + std::exp(ab - m)) + m;
          }
        }
      }
      // nll is -log Z of Graves' eq. (16)
      const Acc gr = grad_out[b];
      for (int64_t t = 0; t < il; ++t)
        for (int64_t c = 0; c < C; ++c) {
          Acc& res = g(t, c);
          const Acc l = logp(t, c);
          res = (std::exp(l) - std::exp(res + nllb - l)) * gr;
        }
      for (int64_t t = il; t < T; ++t) std::fill(&g(t, 0), &g(t, 0) + C, Acc(0));
    }
  });
}

// Runs f(Tag<Acc>{}, Tag<Tgt>{}) for log_probs' float type and targets' index
// type (acme's dtype error naming op, device and dtype otherwise).
template <class F>
void dispatch_ctc(const char* op, const at::Tensor& log_probs, const at::Tensor& targets, F&& f) {
  dispatch<kF32 | kF64>(op, log_probs.device(), log_probs.scalar_type(), [&](auto acc) {
    dispatch<kI64 | kI32>(op, targets.device(), targets.scalar_type(),
                          [&](auto tgt) { f(acc, tgt); });
  });
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_impl(const char* op, const at::Tensor& log_probs,
                                                 const at::Tensor& targets,
                                                 c10::IntArrayRef input_lengths,
                                                 c10::IntArrayRef target_lengths, int64_t blank) {
  const CtcPlan p = plan_ctc(op, log_probs, targets, input_lengths, target_lengths, blank);
  at::Tensor log_alpha = at::empty({p.N, p.T, 2 * p.max_target + 1}, log_probs.options());
  at::Tensor nll = at::empty({p.N}, log_probs.options());
  if (p.N == 0) return {nll, log_alpha};
  dispatch_ctc(op, log_probs, targets, [&](auto acc, auto tgt) {
    using Acc = FL_T(acc);
    using Tgt = FL_T(tgt);
    launch(nll, [op, p, lp = DeviceTensor(log_probs), tg = DeviceTensor(targets),
                 nll = DeviceTensor(nll), la = DeviceTensor(log_alpha)] {
      auto x = nn::load<Acc>(op, lp);
      // both outputs are fresh contiguous tensors of type Acc
      ctc_forward<Acc, Tgt>(op, p, x.data(), tg.numel() ? tg.const_data_ptr<Tgt>() : nullptr,
                            la.data_ptr<Acc>(), nll.data_ptr<Acc>());
    });
  });
  return {nll, log_alpha};
}

at::Tensor ctc_loss_backward_impl(const char* op, const at::Tensor& grad,
                                  const at::Tensor& log_probs, const at::Tensor& targets,
                                  c10::IntArrayRef input_lengths, c10::IntArrayRef target_lengths,
                                  const at::Tensor& neg_log_likelihood,
                                  const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  const CtcPlan p = plan_ctc(op, log_probs, targets, input_lengths, target_lengths, blank);
  for (const auto* t : {&grad, &neg_log_likelihood, &log_alpha})
    FL_CHECK_T(t->scalar_type() == log_probs.scalar_type(), op, *t,
                 "expected grad, neg_log_likelihood and log_alpha of log_probs' dtype ",
                 dtype_name(log_probs.scalar_type()));
  FL_CHECK_T(grad.numel() == p.N, op, grad, "expected grad with one value per batch element (",
               p.N, "), got shape ", grad.sizes());
  FL_CHECK_T(neg_log_likelihood.numel() == p.N, op, neg_log_likelihood,
               "expected neg_log_likelihood with one value per batch element (", p.N,
               "), got shape ", neg_log_likelihood.sizes());
  FL_CHECK_T(log_alpha.dim() == 3 && log_alpha.size(0) == p.N && log_alpha.size(1) == p.T &&
                   log_alpha.size(2) >= 2 * p.max_target + 1,
               op, log_alpha, "expected log_alpha of shape (", p.N, ", ", p.T, ", >= ",
               2 * p.max_target + 1, ") as _ctc_loss returns it, got ", log_alpha.sizes());
  at::Tensor out = at::empty(log_probs.sizes(), log_probs.options());  // contiguous, as CPU's
  if (out.numel() == 0) return out;
  const int64_t W = log_alpha.size(2);
  dispatch_ctc(op, log_probs, targets, [&](auto acc, auto tgt) {
    using Acc = FL_T(acc);
    using Tgt = FL_T(tgt);
    launch(out, [op, p, W, zero_infinity, gr = DeviceTensor(grad.reshape({p.N})),
                 lp = DeviceTensor(log_probs), tg = DeviceTensor(targets),
                 nll = DeviceTensor(neg_log_likelihood.reshape({p.N})),
                 la = DeviceTensor(log_alpha), out = DeviceTensor(out)] {
      auto x = nn::load<Acc>(op, lp);
      auto g = nn::load<Acc>(op, gr);
      auto n = nn::load<Acc>(op, nll);
      auto a = nn::load<Acc>(op, la);
      ctc_backward<Acc, Tgt>(op, p, W, zero_infinity, g.data(), x.data(),
                             tg.numel() ? tg.const_data_ptr<Tgt>() : nullptr, n.data(), a.data(),
                             out.data_ptr<Acc>());
    });
  });
  return out;
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor> k__ctc_loss(const at::Tensor& log_probs,
                                                 const at::Tensor& targets,
                                                 at::IntArrayRef input_lengths,
                                                 at::IntArrayRef target_lengths, int64_t blank,
                                                 bool zero_infinity) {
  (void)zero_infinity;  // the forward's loss keeps +inf; ctc_loss and the backward use it
  return ctc_loss_impl("_ctc_loss", log_probs, targets, input_lengths, target_lengths, blank);
}

::std::tuple<at::Tensor, at::Tensor> k__ctc_loss_Tensor(const at::Tensor& log_probs,
                                                        const at::Tensor& targets,
                                                        const at::Tensor& input_lengths,
                                                        const at::Tensor& target_lengths,
                                                        int64_t blank, bool zero_infinity) {
  (void)zero_infinity;
  const char* op = "_ctc_loss.Tensor";
  const auto il = lengths_on_host(op, input_lengths, "input_lengths");
  const auto tl = lengths_on_host(op, target_lengths, "target_lengths");
  return ctc_loss_impl(op, log_probs, targets, il, tl, blank);
}

at::Tensor k__ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs,
                                const at::Tensor& targets, at::IntArrayRef input_lengths,
                                at::IntArrayRef target_lengths,
                                const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha,
                                int64_t blank, bool zero_infinity) {
  return ctc_loss_backward_impl("_ctc_loss_backward", grad, log_probs, targets, input_lengths,
                                target_lengths, neg_log_likelihood, log_alpha, blank,
                                zero_infinity);
}

at::Tensor k__ctc_loss_backward_Tensor(const at::Tensor& grad, const at::Tensor& log_probs,
                                       const at::Tensor& targets, const at::Tensor& input_lengths,
                                       const at::Tensor& target_lengths,
                                       const at::Tensor& neg_log_likelihood,
                                       const at::Tensor& log_alpha, int64_t blank,
                                       bool zero_infinity) {
  const char* op = "_ctc_loss_backward.Tensor";
  const auto il = lengths_on_host(op, input_lengths, "input_lengths");
  const auto tl = lengths_on_host(op, target_lengths, "target_lengths");
  return ctc_loss_backward_impl(op, grad, log_probs, targets, il, tl, neg_log_likelihood,
                                log_alpha, blank, zero_infinity);
}

}  // namespace acme::kernels
