// acme normalization kernels: native_batch_norm (+ backward),
// _native_batch_norm_legit, native_layer_norm (+ backward), native_group_norm
// (+ backward), renorm.
//
// Inputs are staged as dense compute-type arrays. Batch/group norm statistics
// accumulate in double (two passes: mean, then centred sum of squares: their
// reductions span whole batches); layer norm rows are short and use the
// vectorizable 8-lane sums of nn_math.h in the compute type, as PyTorch's
// CPU kernel accumulates in float. As in PyTorch, a
// float16/bfloat16 input with float32 parameters ("mixed type", the autocast
// case) keeps its statistics in float32; otherwise they have the input dtype.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/args.h"
#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "math/nn_math.h"
#include "kernels.h"

#include <array>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

bool is_reduced(c10::ScalarType st) {
  return st == c10::ScalarType::Half || st == c10::ScalarType::BFloat16;
}

// dtype of saved statistics: float32 for a reduced-float input with any
// float32 parameter, else the input's dtype.
c10::ScalarType stat_dtype(const at::Tensor& input, std::initializer_list<const at::Tensor*> params) {
  if (is_reduced(input.scalar_type())) {
    for (const at::Tensor* p : params) {
      if (p->defined() && p->scalar_type() == c10::ScalarType::Float) return c10::ScalarType::Float;
    }
  }
  return input.scalar_type();
}

// Host part of a per-channel vector (weight, bias, stats): checks its size and
// hands it to the device part as C elements (undefined stays undefined).
DeviceTensor chan(const char* op, const at::Tensor& t, int64_t C, const char* arg) {
  if (!t.defined()) return {};
  FL_CHECK_T(t.numel() == C, op, t, "expected ", arg, " with ", C, " elements, got ",
               t.sizes());
  return DeviceTensor(t.reshape({C}));
}

// Device part: the vector as dense Acc, or `dflt` if undefined.
template <class Acc>
std::vector<Acc> chan_vec(const char* op, const DeviceTensor& t, int64_t C, Acc dflt) {
  std::vector<Acc> v(static_cast<size_t>(C), dflt);
  if (t.defined() && C > 0) nn::load_into<Acc>(op, t, {C}, v.data());
  return v;
}

// (N, C, S) view sizes of a batch-norm input.
struct BNShape {
  int64_t N, C, S;
};
BNShape bn_shape(const char* op, const at::Tensor& input) {
  FL_CHECK_T(input.dim() >= 2, op, input, "expected at least 2-d input (N, C, ...), got ",
               input.sizes());
  BNShape s{input.size(0), input.size(1), 1};
  for (int64_t d = 2; d < input.dim(); ++d) s.S *= input.size(d);
  return s;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_impl(
    const char* op, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& running_mean, const at::Tensor& running_var, bool training,
    double momentum, double eps) {
  nn::check_float(op, input);
  nn::check_float(op, weight);
  nn::check_float(op, bias);
  nn::check_float(op, running_mean);
  nn::check_float(op, running_var);
  const BNShape sh = bn_shape(op, input);
  FL_CHECK_T(training || (running_mean.defined() && running_var.defined()), op, input,
               "running_mean and running_var must be defined in evaluation mode");
  const auto sdt = stat_dtype(input, {&weight, &bias, &running_mean, &running_var});
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor save_mean = at::empty({training ? sh.C : 0}, input.options().dtype(sdt));
  at::Tensor save_invstd = at::empty({training ? sh.C : 0}, input.options().dtype(sdt));
  const int64_t C = sh.C;
  auto wd = chan(op, weight, C, "weight"), bd = chan(op, bias, C, "bias");
  auto rmd = chan(op, running_mean, C, "running_mean");
  auto rvd = chan(op, running_var, C, "running_var");
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, sh, training, momentum, eps, wd, bd, rmd, rvd,
                 input = DeviceTensor(input), out = DeviceTensor(out),
                 save_mean = DeviceTensor(save_mean),
                 save_invstd = DeviceTensor(save_invstd)] {
    const int64_t C = sh.C, S = sh.S, N = sh.N;
    const int64_t count = N * S;
    const auto& running_mean = rmd;
    const auto& running_var = rvd;
    auto x = nn::load<Acc>(op, input);
    auto w = chan_vec<Acc>(op, wd, C, Acc(1));
    auto b = chan_vec<Acc>(op, bd, C, Acc(0));
    std::vector<Acc> mean(C), invstd(C);
    if (training) {
      std::vector<Acc> var_unbiased(C);
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          const Acc* p = x.data() + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) s += p[i];
        }
        const double mu = count ? s / count : 0.0;
        double ss = 0;
        for (int64_t n = 0; n < N; ++n) {
          const Acc* p = x.data() + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) {
            const double d = p[i] - mu;
            ss += d * d;
          }
        }
        const double var = count ? ss / count : 0.0;
        mean[c] = static_cast<Acc>(mu);
        invstd[c] = static_cast<Acc>(1.0 / std::sqrt(var + eps));
        var_unbiased[c] = static_cast<Acc>(count > 1 ? ss / (count - 1) : INFINITY);
      }
      if (running_mean.defined()) {
        auto rm = chan_vec<Acc>(op, running_mean, C, Acc(0));
        for (int64_t c = 0; c < C; ++c)
          rm[c] = static_cast<Acc>((1 - momentum) * rm[c] + momentum * mean[c]);
        nn::store<Acc>(op, rm.data(), running_mean);
      }
      if (running_var.defined()) {
        auto rv = chan_vec<Acc>(op, running_var, C, Acc(1));
        for (int64_t c = 0; c < C; ++c)
          rv[c] = static_cast<Acc>((1 - momentum) * rv[c] + momentum * var_unbiased[c]);
        nn::store<Acc>(op, rv.data(), running_var);
      }
      nn::store<Acc>(op, mean.data(), save_mean);
      nn::store<Acc>(op, invstd.data(), save_invstd);
    } else {
      mean = chan_vec<Acc>(op, running_mean, C, Acc(0));
      auto rv = chan_vec<Acc>(op, running_var, C, Acc(1));
      for (int64_t c = 0; c < C; ++c)
        invstd[c] = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
    if (out.numel() == 0) return;
    nn::OutBuf<Acc> ob(out);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        // y = x * scale + shift
        const Acc scale = invstd[c] * w[c];
        const Acc shift = b[c] - mean[c] * scale;
        const Acc* p = x.data() + (n * C + c) * S;
        Acc* o = ob.data() + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) o[i] = p[i] * scale + shift;
      }
    ob.finish(op);
    });
  });
  return {out, save_mean, save_invstd};
}

}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm(
    const at::Tensor& input, const ::std::optional<at::Tensor>& weight,
    const ::std::optional<at::Tensor>& bias, const ::std::optional<at::Tensor>& running_mean,
    const ::std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl("native_batch_norm", input, opt(weight), opt(bias), opt(running_mean),
                         opt(running_var), training, momentum, eps);
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k__native_batch_norm_legit(
    const at::Tensor& input, const ::std::optional<at::Tensor>& weight,
    const ::std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  return batch_norm_impl("_native_batch_norm_legit", input, opt(weight), opt(bias), running_mean,
                         running_var, training, momentum, eps);
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const ::std::optional<at::Tensor>& weight_,
    const ::std::optional<at::Tensor>& running_mean_, const ::std::optional<at::Tensor>& running_var_,
    const ::std::optional<at::Tensor>& save_mean_, const ::std::optional<at::Tensor>& save_invstd_,
    bool train, double eps, ::std::array<bool, 3> output_mask) {
  const char* op = "native_batch_norm_backward";
  const at::Tensor& weight = opt(weight_);
  const at::Tensor& running_mean = opt(running_mean_);
  const at::Tensor& running_var = opt(running_var_);
  const at::Tensor& save_mean = opt(save_mean_);
  const at::Tensor& save_invstd = opt(save_invstd_);
  nn::check_float(op, input);
  nn::check_float(op, grad_out);
  nn::check_float(op, weight);
  const BNShape sh = bn_shape(op, input);
  FL_CHECK_T(grad_out.sizes().equals(input.sizes()), op, grad_out, "grad_out has shape ",
               grad_out.sizes(), ", expected ", input.sizes());
  if (train) {
    FL_CHECK(save_mean.defined() && save_invstd.defined(), op,
               "save_mean and save_invstd must be defined in training mode");
  } else {
    FL_CHECK(running_mean.defined() && running_var.defined(), op,
               "running_mean and running_var must be defined in evaluation mode");
  }
  const auto sdt = stat_dtype(input, {&weight, &running_mean, &running_var});
  const auto param_opts = weight.defined() ? weight.options() : input.options().dtype(sdt);
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1]) gw = at::empty({sh.C}, param_opts);
  if (output_mask[2]) gb = at::empty({sh.C}, param_opts);
  const int64_t C = sh.C;
  auto wd = chan(op, weight, C, "weight");
  auto md = train ? chan(op, save_mean, C, "save_mean") : chan(op, running_mean, C, "running_mean");
  auto vd = train ? chan(op, save_invstd, C, "save_invstd") : chan(op, running_var, C, "running_var");
  const at::Tensor& on = input;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(on, [op, sh, train, eps, wd, md, vd, input = DeviceTensor(input),
                grad_out = DeviceTensor(grad_out), gi = DeviceTensor(gi),
                gw = DeviceTensor(gw), gb = DeviceTensor(gb)] {
    const int64_t C = sh.C, S = sh.S, N = sh.N;
    const int64_t count = N * S;
    auto x = nn::load<Acc>(op, input);
    auto dy = nn::load<Acc>(op, grad_out);
    auto w = chan_vec<Acc>(op, wd, C, Acc(1));
    std::vector<Acc> mean, invstd;
    if (train) {
      mean = chan_vec<Acc>(op, md, C, Acc(0));
      invstd = chan_vec<Acc>(op, vd, C, Acc(1));
    } else {
      mean = chan_vec<Acc>(op, md, C, Acc(0));
      auto rv = chan_vec<Acc>(op, vd, C, Acc(1));
      invstd.resize(C);
      for (int64_t c = 0; c < C; ++c)
        invstd[c] = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
    }
    // sum(dy) and sum(dy * (x - mean)) per channel
    std::vector<Acc> sum_dy(C), sum_dy_xmu(C);
    for (int64_t c = 0; c < C; ++c) {
      double s1 = 0, s2 = 0;
      const double mu = mean[c];
      for (int64_t n = 0; n < N; ++n) {
        const Acc* px = x.data() + (n * C + c) * S;
        const Acc* pd = dy.data() + (n * C + c) * S;
        for (int64_t i = 0; i < S; ++i) {
          s1 += pd[i];
          s2 += pd[i] * (px[i] - mu);
        }
      }
      sum_dy[c] = static_cast<Acc>(s1);
      sum_dy_xmu[c] = static_cast<Acc>(s2);
    }
    if (gi.defined() && gi.numel() > 0) {
      nn::OutBuf<Acc> ob(gi);
      for (int64_t c = 0; c < C; ++c) {
        const Acc is = invstd[c], wc = w[c], mu = mean[c];
        // train: dx = w*is*(dy - mean(dy) - (x-mu)*is^2*mean(dy*(x-mu)))
        const Acc k = train && count ? sum_dy_xmu[c] * is * is / Acc(count) : Acc(0);
        const Acc mdy = train && count ? sum_dy[c] / Acc(count) : Acc(0);
        const Acc ws = wc * is;
        for (int64_t n = 0; n < N; ++n) {
          const Acc* px = x.data() + (n * C + c) * S;
          const Acc* pd = dy.data() + (n * C + c) * S;
          Acc* o = ob.data() + (n * C + c) * S;
          if (train) {
            for (int64_t i = 0; i < S; ++i) o[i] = (pd[i] - mdy - (px[i] - mu) * k) * ws;
          } else {
            for (int64_t i = 0; i < S; ++i) o[i] = pd[i] * ws;
          }
        }
      }
      ob.finish(op);
    }
    if (gw.defined()) {
      std::vector<Acc> v(C);
      for (int64_t c = 0; c < C; ++c) v[c] = sum_dy_xmu[c] * invstd[c];
      nn::store<Acc>(op, v.data(), gw);
    }
    if (gb.defined()) nn::store<Acc>(op, sum_dy.data(), gb);
    });
  });
  return {gi, gw, gb};
}

// ---- layer norm ---------------------------------------------------------------

namespace {
struct LNShape {
  int64_t M, N, axis;
};
LNShape ln_shape(const char* op, const at::Tensor& input, at::IntArrayRef normalized_shape) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  FL_CHECK(nd >= 1, op, "normalized_shape must have at least one dimension");
  FL_CHECK_T(input.dim() >= nd &&
                   input.sizes().slice(input.dim() - nd).equals(normalized_shape),
               op, input, "input shape ", input.sizes(),
               " does not end with normalized_shape ", normalized_shape);
  LNShape s{1, 1, input.dim() - nd};
  for (int64_t d = 0; d < s.axis; ++d) s.M *= input.size(d);
  for (int64_t d = s.axis; d < input.dim(); ++d) s.N *= input.size(d);
  return s;
}
std::vector<int64_t> stat_shape(const at::Tensor& input, int64_t axis) {
  std::vector<int64_t> s(input.sizes().begin(), input.sizes().end());
  for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) s[d] = 1;
  return s;
}
}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_layer_norm(
    const at::Tensor& input, at::IntArrayRef normalized_shape,
    const ::std::optional<at::Tensor>& weight_, const ::std::optional<at::Tensor>& bias_,
    double eps) {
  const char* op = "native_layer_norm";
  const at::Tensor& weight = opt(weight_);
  const at::Tensor& bias = opt(bias_);
  nn::check_float(op, input);
  nn::check_float(op, weight);
  nn::check_float(op, bias);
  const LNShape sh = ln_shape(op, input, normalized_shape);
  if (weight.defined())
    FL_CHECK_T(weight.sizes().equals(normalized_shape), op, weight, "weight shape ",
                 weight.sizes(), " differs from normalized_shape ", normalized_shape);
  if (bias.defined())
    FL_CHECK_T(bias.sizes().equals(normalized_shape), op, bias, "bias shape ", bias.sizes(),
                 " differs from normalized_shape ", normalized_shape);
  const auto sdt = stat_dtype(input, {&weight, &bias});
  at::Tensor out = at::empty(input.sizes(), input.options());
  const auto ss = stat_shape(input, sh.axis);
  at::Tensor mean = at::empty(ss, input.options().dtype(sdt));
  at::Tensor rstd = at::empty(ss, input.options().dtype(sdt));
  if (sh.M == 0) return {out, mean, rstd};
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, sh, eps, input = DeviceTensor(input), weight = DeviceTensor(weight),
                 bias = DeviceTensor(bias), out = DeviceTensor(out),
                 mean = DeviceTensor(mean), rstd = DeviceTensor(rstd)] {
    const int64_t M = sh.M, N = sh.N;
    auto x = nn::load<Acc>(op, input);
    nn::Dense<Acc> w, b;
    if (weight.defined()) w = nn::load<Acc>(op, weight);
    if (bias.defined()) b = nn::load<Acc>(op, bias);
    std::vector<Acc> mv(M), rv(M);
    nn::OutBuf<Acc> ob(out);
    const Acc* wp = w.data();
    const Acc* bp = b.data();
    // Rows are independent: split over the compute units, each row's result
    // the same whatever the split. float32 rows take the vector unit's row
    // function (vec_math.h), the others the scalar loop below.
    vec::LayerNormRowFn vec_row = nullptr;
    if constexpr (std::is_same_v<Acc, float>) vec_row = vec::layer_norm_row_f32();
    const int64_t grain = std::max<int64_t>(1, kGrainMath / std::max<int64_t>(N, 1));
    parallel_for(M, grain, [&](int64_t r0, int64_t r1) {
      if constexpr (std::is_same_v<Acc, float>) {
        if (vec_row != nullptr) {
          for (int64_t r = r0; r < r1; ++r)
            vec_row(x.data() + r * N, wp, bp, ob.data() + r * N, N, eps, &mv[r], &rv[r]);
          return;
        }
      }
      std::vector<Acc> xc(N);
      for (int64_t r = r0; r < r1; ++r) {
        const Acc* p = x.data() + r * N;
        // two passes over the row: mean, then the centred sum of squares
        const Acc m = nn::lane_sum(p, N) / static_cast<Acc>(N);
        for (int64_t i = 0; i < N; ++i) xc[i] = p[i] - m;
        const Acc var = nn::lane_dot(xc.data(), xc.data(), N) / static_cast<Acc>(N);
        const Acc is = static_cast<Acc>(1.0 / std::sqrt(static_cast<double>(var) + eps));
        mv[r] = m;
        rv[r] = is;
        Acc* o = ob.data() + r * N;
        if (wp && bp) {
          for (int64_t i = 0; i < N; ++i) o[i] = xc[i] * is * wp[i] + bp[i];
        } else if (wp) {
          for (int64_t i = 0; i < N; ++i) o[i] = xc[i] * is * wp[i];
        } else if (bp) {
          for (int64_t i = 0; i < N; ++i) o[i] = xc[i] * is + bp[i];
        } else {
          for (int64_t i = 0; i < N; ++i) o[i] = xc[i] * is;
        }
      }
    });
    ob.finish(op);
    nn::store<Acc>(op, mv.data(), mean);
    nn::store<Acc>(op, rv.data(), rstd);
    });
  });
  return {out, mean, rstd};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const ::std::optional<at::Tensor>& weight_,
    const ::std::optional<at::Tensor>& bias_, ::std::array<bool, 3> output_mask) {
  const char* op = "native_layer_norm_backward";
  const at::Tensor& weight = opt(weight_);
  const at::Tensor& bias = opt(bias_);
  nn::check_float(op, input);
  nn::check_float(op, grad_out);
  nn::check_float(op, mean);
  nn::check_float(op, rstd);
  nn::check_float(op, weight);
  const LNShape sh = ln_shape(op, input, normalized_shape);
  FL_CHECK_T(grad_out.sizes().equals(input.sizes()), op, grad_out, "grad_out has shape ",
               grad_out.sizes(), ", expected ", input.sizes());
  FL_CHECK_T(mean.numel() == sh.M && rstd.numel() == sh.M, op, mean, "mean and rstd must have ",
               sh.M, " elements, got ", mean.numel(), " and ", rstd.numel());
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1] && weight.defined()) gw = at::empty(weight.sizes(), weight.options());
  if (output_mask[2] && bias.defined()) gb = at::empty(bias.sizes(), bias.options());
  if (sh.M == 0 && !gw.defined() && !gb.defined()) return {gi, gw, gb};
  const at::Tensor& on = input;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(on, [op, sh, input = DeviceTensor(input), grad_out = DeviceTensor(grad_out),
                mean = DeviceTensor(mean), rstd = DeviceTensor(rstd),
                weight = DeviceTensor(weight), gi = DeviceTensor(gi),
                gw = DeviceTensor(gw), gb = DeviceTensor(gb)] {
    const int64_t M = sh.M, N = sh.N;
    auto x = nn::load<Acc>(op, input);
    auto dy = nn::load<Acc>(op, grad_out);
    auto mu = nn::load<Acc>(op, mean);
    auto rs = nn::load<Acc>(op, rstd);
    nn::Dense<Acc> w;
    if (weight.defined()) w = nn::load<Acc>(op, weight);
    const Acc* wp = w.data();
    std::vector<Acc> dw(gw.defined() ? N : 0, Acc(0)), db(gb.defined() ? N : 0, Acc(0));
    std::optional<nn::OutBuf<Acc>> ob;
    if (gi.defined() && gi.numel() > 0) ob.emplace(gi);
    // float32 rows on the vector unit (vec_math.h). dweight and dbias sum over
    // the rows in row order, so rows are not split over units here.
    vec::LayerNormBackwardRowFn vec_row = nullptr;
    if constexpr (std::is_same_v<Acc, float>) vec_row = vec::layer_norm_backward_row_f32();
    if (vec_row != nullptr) {
      if constexpr (std::is_same_v<Acc, float>) {
        for (int64_t r = 0; r < M; ++r)
          vec_row(x.data() + r * N, dy.data() + r * N, wp, mu.data()[r], rs.data()[r],
                  ob ? ob->data() + r * N : nullptr, dw.empty() ? nullptr : dw.data(),
                  db.empty() ? nullptr : db.data(), N);
      }
    } else {
      std::vector<Acc> xh(N), g(N);
      for (int64_t r = 0; r < M; ++r) {
        const Acc* px = x.data() + r * N;
        const Acc* pd = dy.data() + r * N;
        const Acc m = mu.data()[r], is = rs.data()[r];
        for (int64_t i = 0; i < N; ++i) xh[i] = (px[i] - m) * is;
        if (!dw.empty())
          for (int64_t i = 0; i < N; ++i) dw[i] += pd[i] * xh[i];
        if (!db.empty())
          for (int64_t i = 0; i < N; ++i) db[i] += pd[i];
        if (ob) {
          // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
          if (wp) {
            for (int64_t i = 0; i < N; ++i) g[i] = pd[i] * wp[i];
          } else {
            std::copy(pd, pd + N, g.begin());
          }
          const Acc a = nn::lane_sum(g.data(), N) / static_cast<Acc>(N);
          const Acc c = nn::lane_dot(g.data(), xh.data(), N) / static_cast<Acc>(N);
          Acc* o = ob->data() + r * N;
          for (int64_t i = 0; i < N; ++i) o[i] = is * (g[i] - a - xh[i] * c);
        }
      }
    }
    if (ob) ob->finish(op);
    if (gw.defined()) nn::store<Acc>(op, dw.data(), gw);
    if (gb.defined()) nn::store<Acc>(op, db.data(), gb);
    });
  });
  return {gi, gw, gb};
}

// ---- group norm ---------------------------------------------------------------

namespace {
void check_group_args(const char* op, const at::Tensor& input, int64_t N, int64_t C, int64_t HxW,
                      int64_t group) {
  FL_CHECK(group > 0 && C % group == 0, op, "C = ", C, " must be divisible by group = ", group);
  FL_CHECK_T(input.numel() == N * C * HxW, op, input, "input has ", input.numel(),
               " elements, expected N * C * HxW = ", N, " * ", C, " * ", HxW);
}
}  // namespace

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_group_norm(
    const at::Tensor& input, const ::std::optional<at::Tensor>& weight_,
    const ::std::optional<at::Tensor>& bias_, int64_t N, int64_t C, int64_t HxW, int64_t group,
    double eps) {
  const char* op = "native_group_norm";
  const at::Tensor& weight = opt(weight_);
  const at::Tensor& bias = opt(bias_);
  nn::check_float(op, input);
  nn::check_float(op, weight);
  nn::check_float(op, bias);
  check_group_args(op, input, N, C, HxW, group);
  const auto sdt = stat_dtype(input, {&weight, &bias});
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor mean = at::empty({N, group}, input.options().dtype(sdt));
  at::Tensor rstd = at::empty({N, group}, input.options().dtype(sdt));
  if (N == 0) return {out, mean, rstd};
  auto wd = chan(op, weight, C, "weight"), bd = chan(op, bias, C, "bias");
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(mean, [op, N, C, HxW, group, eps, wd, bd, input = DeviceTensor(input),
                  out = DeviceTensor(out), mean = DeviceTensor(mean),
                  rstd = DeviceTensor(rstd)] {
    const int64_t Cg = C / group, D = Cg * HxW;
    auto x = nn::load<Acc>(op, input);
    auto w = chan_vec<Acc>(op, wd, C, Acc(1));
    auto b = chan_vec<Acc>(op, bd, C, Acc(0));
    std::vector<Acc> mv(N * group), rv(N * group);
    std::optional<nn::OutBuf<Acc>> ob;
    if (out.numel()) ob.emplace(out);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t gi = 0; gi < group; ++gi) {
        const Acc* p = x.data() + (n * group + gi) * D;
        double s = 0, q = 0;
        for (int64_t i = 0; i < D; ++i) s += p[i];
        const double mu = D ? s / D : 0.0;
        for (int64_t i = 0; i < D; ++i) q += (p[i] - mu) * (p[i] - mu);
        const double var = D ? q / D : 0.0;
        const Acc m = static_cast<Acc>(mu), is = static_cast<Acc>(1.0 / std::sqrt(var + eps));
        mv[n * group + gi] = m;
        rv[n * group + gi] = is;
        if (!ob) continue;
        Acc* o = ob->data() + (n * group + gi) * D;
        for (int64_t c = 0; c < Cg; ++c) {
          const int64_t ch = gi * Cg + c;
          const Acc scale = is * w[ch], shift = b[ch] - m * scale;
          for (int64_t i = 0; i < HxW; ++i) o[c * HxW + i] = p[c * HxW + i] * scale + shift;
        }
      }
    if (ob) ob->finish(op);
    nn::store<Acc>(op, mv.data(), mean);
    nn::store<Acc>(op, rv.data(), rstd);
    });
  });
  return {out, mean, rstd};
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& rstd, const ::std::optional<at::Tensor>& weight_, int64_t N, int64_t C,
    int64_t HxW, int64_t group, ::std::array<bool, 3> output_mask) {
  const char* op = "native_group_norm_backward";
  const at::Tensor& weight = opt(weight_);
  nn::check_float(op, input);
  nn::check_float(op, grad_out);
  nn::check_float(op, mean);
  nn::check_float(op, rstd);
  nn::check_float(op, weight);
  check_group_args(op, input, N, C, HxW, group);
  FL_CHECK_T(grad_out.numel() == input.numel(), op, grad_out, "grad_out must match input");
  FL_CHECK_T(mean.numel() == N * group && rstd.numel() == N * group, op, mean,
               "mean and rstd must have N * group = ", N * group, " elements");
  const auto sdt = stat_dtype(input, {&weight});
  const auto popts = weight.defined() ? weight.options() : input.options().dtype(sdt);
  at::Tensor gi, gw, gb;
  if (output_mask[0]) gi = at::empty(input.sizes(), input.options());
  if (output_mask[1]) gw = at::empty({C}, popts);
  if (output_mask[2]) gb = at::empty({C}, popts);
  auto wd = chan(op, weight, C, "weight");
  const at::Tensor& on = input;
  nn::dispatch_compute(op, input, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(on, [op, N, C, HxW, group, wd, input = DeviceTensor(input),
                grad_out = DeviceTensor(grad_out), mean = DeviceTensor(mean),
                rstd = DeviceTensor(rstd), gi = DeviceTensor(gi),
                gw = DeviceTensor(gw), gb = DeviceTensor(gb)] {
    const int64_t Cg = C / group, D = Cg * HxW;
    auto x = nn::load<Acc>(op, input);
    auto dy = nn::load<Acc>(op, grad_out);
    auto mu = nn::load<Acc>(op, mean);
    auto rs = nn::load<Acc>(op, rstd);
    auto w = chan_vec<Acc>(op, wd, C, Acc(1));
    std::vector<double> dw(C, 0.0), db(C, 0.0);
    std::optional<nn::OutBuf<Acc>> ob;
    if (gi.defined() && gi.numel()) ob.emplace(gi);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < group; ++g) {
        const int64_t base = (n * group + g) * D;
        const Acc m = mu.data()[n * group + g], is = rs.data()[n * group + g];
        double s1 = 0, s2 = 0;  // sum(dy*w), sum(dy*w*xhat) over the group
        for (int64_t c = 0; c < Cg; ++c) {
          const int64_t ch = g * Cg + c;
          const Acc* px = x.data() + base + c * HxW;
          const Acc* pd = dy.data() + base + c * HxW;
          double a = 0, bsum = 0;
          for (int64_t i = 0; i < HxW; ++i) {
            const double xh = (px[i] - m) * is;
            a += pd[i] * xh;
            bsum += pd[i];
          }
          dw[ch] += a;
          db[ch] += bsum;
          s1 += bsum * w[ch];
          s2 += a * w[ch];
        }
        if (!ob) continue;
        const Acc ma = static_cast<Acc>(D ? s1 / D : 0.0), mb = static_cast<Acc>(D ? s2 / D : 0.0);
        for (int64_t c = 0; c < Cg; ++c) {
          const int64_t ch = g * Cg + c;
          const Acc* px = x.data() + base + c * HxW;
          const Acc* pd = dy.data() + base + c * HxW;
          Acc* o = ob->data() + base + c * HxW;
          for (int64_t i = 0; i < HxW; ++i) {
            const Acc xh = (px[i] - m) * is;
            o[i] = is * (pd[i] * w[ch] - ma - xh * mb);
          }
        }
      }
    if (ob) ob->finish(op);
    if (gw.defined()) {
      std::vector<Acc> v(dw.begin(), dw.end());
      nn::store<Acc>(op, v.data(), gw);
    }
    if (gb.defined()) {
      std::vector<Acc> v(db.begin(), db.end());
      nn::store<Acc>(op, v.data(), gb);
    }
    });
  });
  return {gi, gw, gb};
}

// ---- renorm -------------------------------------------------------------------

at::Tensor k_renorm(const at::Tensor& self, const at::Scalar& p, int64_t dim,
                    const at::Scalar& maxnorm) {
  const char* op = "renorm";
  nn::check_float(op, self);
  const double pv = p.to<double>(), mx = maxnorm.to<double>();
  FL_CHECK(pv > 0, op, "non-positive norm not supported, got p = ", pv);
  FL_CHECK(mx >= 0, op, "maxnorm must be non-negative, got ", mx);
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  FL_CHECK(dim >= -nd && dim < nd, op, "dim ", dim, " out of range for a ", self.dim(),
             "-d tensor");
  if (dim < 0) dim += nd;
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (out.numel() == 0) return out;
  int64_t outer = 1, S = 1, inner = 1;
  if (self.dim() > 0) {
    for (int64_t d = 0; d < dim; ++d) outer *= self.size(d);
    S = self.size(dim);
    for (int64_t d = dim + 1; d < self.dim(); ++d) inner *= self.size(d);
  }
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, pv, mx, outer, S, inner, self = DeviceTensor(self),
                 out = DeviceTensor(out)] {
    auto x = nn::load<Acc>(op, self);
    // norm of each slice self.select(dim, s), over all other dims
    std::vector<double> norm(S, 0.0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t s = 0; s < S; ++s) {
        const Acc* q = x.data() + (o * S + s) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const double a = std::abs(static_cast<double>(q[i]));
          if (std::isinf(pv)) norm[s] = std::max(norm[s], a);
          else norm[s] += pv == 1 ? a : (pv == 2 ? a * a : std::pow(a, pv));
        }
      }
    std::vector<Acc> factor(S);
    for (int64_t s = 0; s < S; ++s) {
      const double n = std::isinf(pv) ? norm[s] : (pv == 1 ? norm[s] : (pv == 2 ? std::sqrt(norm[s]) : std::pow(norm[s], 1.0 / pv)));
      factor[s] = static_cast<Acc>(n > mx ? mx / (n + 1e-7) : 1.0);
    }
    nn::OutBuf<Acc> ob(out);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t base = (o * S + s) * inner;
        for (int64_t i = 0; i < inner; ++i) ob.data()[base + i] = x.data()[base + i] * factor[s];
      }
    ob.finish(op);
    });
  });
  return out;
}

}  // namespace acme::kernels
