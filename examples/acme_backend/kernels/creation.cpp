// acme creation kernels: arange, linspace, eye (out= forms, resizing `out`),
// tril/triu_indices, fill.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <cmath>

namespace acme::kernels {
using namespace acme::common;

namespace {
// Writes f(tag, i) to every element of 1-d `out` (any stride), in out's dtype,
// on the device: f travels with the work (it must hold values).
template <class F>
void fill_1d(const char* op, at::Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t st = out.stride(0);
  dispatch<kAll>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [addr = out.data_ptr(), n, st, f, tag] {
      T* o = static_cast<T*>(device_view(addr));
      for (int64_t i = 0; i < n; ++i) o[i * st] = f(tag, i);
    });
  });
}

void resize_out(at::Tensor& out, at::IntArrayRef shape) {
  if (out.sizes() != shape) out.resize_(shape);
}
}  // namespace

at::Tensor& k_arange_start_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                               at::Tensor& out) {
  const char* op = "arange.start_out";
  const double s = start.to<double>(), e = end.to<double>(), d = step.to<double>();
  FL_CHECK(d != 0, op, "step must be nonzero");
  FL_CHECK(std::isfinite(s) && std::isfinite(e), op, "unsupported range: ", s, " -> ", e);
  FL_CHECK((d > 0 && e >= s) || (d < 0 && e <= s), op,
             "upper bound and larger bound inconsistent with step sign");
  int64_t n;
  if (out.scalar_type() == at::kLong) {
    // torch's rule for int64 (its precision exceeds double's): start, end and
    // step are truncated to int64 first and the size is an integer division,
    // so arange(0, 3.1, dtype=long) is [0, 1, 2] while other dtypes get 4 values
    const int64_t si = start.to<int64_t>(), ei = end.to<int64_t>(), di = step.to<int64_t>();
    FL_CHECK_VALUE(di != 0, op, "step must be nonzero");  // a ValueError, as CPU's
    const int64_t sgn = (di > 0) - (di < 0);
    n = (ei - si + di - sgn) / di;
  } else {
    n = static_cast<int64_t>(std::ceil((e - s) / d));
  }
  FL_CHECK(n >= 0, op, "invalid size ", n);
  resize_out(out, {n});
  fill_1d(op, out, [=](auto tag, int64_t i) {
    using T = FL_T(tag);
    if constexpr (is_floating_v<T>) return cvt<T>(s + d * static_cast<double>(i));
    else return cvt<T>(start.toLong() + step.toLong() * i);
  });
  return out;
}

at::Tensor& k_linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  const char* op = "linspace.out";
  FL_CHECK(steps >= 0, op, "number of steps must be non-negative");
  resize_out(out, {steps});
  const double s = start.to<double>(), e = end.to<double>();
  const double step = steps > 1 ? (e - s) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps / 2;
  fill_1d(op, out, [=](auto tag, int64_t i) {
    using T = FL_T(tag);
    // symmetric formula (from both ends) so the last value is exactly `end`;
    // a single step is `start`, as in torch
    const double v = steps == 1 ? s
                     : i < half ? s + step * static_cast<double>(i)
                                : e - step * static_cast<double>(steps - 1 - i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return static_cast<T>(static_cast<int64_t>(v));
    else return cvt<T>(v);
  });
  return out;
}

// base ** linspace(start, end, steps), with torch's CPU arithmetic, so that the
// results are bit-equal to CPU's in every dtype: end - start in the output
// dtype, the step and the exponent (from both ends) in double, the power in
// double, rounded once to the output dtype. (CUDA computes the exponent in the
// output dtype, which is a rounding worse in float16/bfloat16: logspace(0, 4, 4)
// in bfloat16 would give 21.625 for 10 ** (4/3) = 21.54.) A single step is
// base ** start.
at::Tensor& k_logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base,
                           at::Tensor& out) {
  const char* op = "logspace.out";
  FL_CHECK(steps >= 0, op, "number of steps must be non-negative");
  resize_out(out, {steps});
  const int64_t half = steps / 2;
  fill_1d(op, out, [=](auto tag, int64_t i) {
    using T = FL_T(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return cvt<T>(std::pow(base, steps == 1 ? start.to<double>() : 0.0));
    } else {
      double v;
      if (steps == 1) {
        v = std::pow(base, start.to<double>());
      } else {
        const T st = start.to<T>(), en = end.to<T>();
        const double step = static_cast<double>(en - st) / static_cast<double>(steps - 1);
        const double e = i < half ? static_cast<double>(st) + step * static_cast<double>(i)
                                  : static_cast<double>(en) - step * static_cast<double>(steps - i - 1);
        v = std::pow(base, e);
      }
      if constexpr (std::is_integral_v<T>) return static_cast<T>(v);
      else return cvt<T>(v);
    }
  });
  return out;
}

at::Tensor& k_eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  const char* op = "eye.m_out";
  FL_CHECK(n >= 0, op, "n must be greater or equal to 0, got ", n);
  FL_CHECK(m >= 0, op, "m must be greater or equal to 0, got ", m);
  resize_out(out, {n, m});
  if (out.numel() == 0) return out;
  dispatch<kAll>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [addr = out.data_ptr(), n, m, s0 = out.stride(0), s1 = out.stride(1)] {
      T* o = static_cast<T*>(device_view(addr));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) o[i * s0 + j * s1] = cvt<T>(i == j ? 1 : 0);
    });
  });
  return out;
}

namespace {
// tril_indices / triu_indices (lower or upper). layout and pin_memory change
// nothing here: the layout reaching an acme kernel is strided, and pinning
// concerns host tensors.
at::Tensor tri_indices(const char* op, int64_t row, int64_t col, int64_t offset, bool lower,
                       std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                       std::optional<at::Device> device, std::optional<bool> pin_memory) {
  (void)layout;
  (void)pin_memory;
  FL_CHECK(row >= 0, op, "row must be non-negative, got", row);
  FL_CHECK(col >= 0, op, "col must be non-negative, got", col);
  FL_CHECK(device.has_value(), op, "a device is required");
  // count first, then write row-major coordinates
  auto lo_hi = [lower, offset, col](int64_t i, int64_t& lo, int64_t& hi) {
    if (lower) { lo = 0; hi = std::clamp<int64_t>(i + offset + 1, 0, col); }
    else { lo = std::clamp<int64_t>(i + offset, 0, col); hi = col; }
  };
  int64_t n = 0;
  for (int64_t i = 0; i < row; ++i) {
    int64_t lo, hi;
    lo_hi(i, lo, hi);
    n += std::max<int64_t>(0, hi - lo);
  }
  at::Tensor out = at::empty({2, n}, at::TensorOptions().dtype(dtype.value_or(at::kLong)).device(*device));
  if (n == 0) return out;
  dispatch<kI64 | kI32>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [addr = out.data_ptr(), n, row, lo_hi] {
      T* r = static_cast<T*>(device_view(addr));
      T* c = r + n;
      int64_t k = 0;
      for (int64_t i = 0; i < row; ++i) {
        int64_t lo, hi;
        lo_hi(i, lo, hi);
        for (int64_t j = lo; j < hi; ++j, ++k) {
          r[k] = static_cast<T>(i);
          c[k] = static_cast<T>(j);
        }
      }
    });
  });
  return out;
}
}  // namespace

at::Tensor k_tril_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                          std::optional<at::Layout> layout, std::optional<at::Device> device,
                          std::optional<bool> pin_memory) {
  return tri_indices("tril_indices", row, col, offset, true, dtype, layout, device, pin_memory);
}

at::Tensor k_triu_indices(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
                          std::optional<at::Layout> layout, std::optional<at::Device> device,
                          std::optional<bool> pin_memory) {
  return tri_indices("triu_indices", row, col, offset, false, dtype, layout, device, pin_memory);
}

at::Tensor k_fill_Tensor(const at::Tensor& self, const at::Tensor& value) {
  const char* op = "fill.Tensor";
  FL_CHECK_T(value.dim() == 0, op, value,
               "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
               " dimensions.");
  at::Tensor out = alloc_output(op, {&self}, self.sizes(), self.scalar_type());
  // The value is read where it lives, by the device part: no host wait.
  convert_into(op, out, value.expand(out.sizes()));
  return out;
}

}  // namespace acme::kernels
