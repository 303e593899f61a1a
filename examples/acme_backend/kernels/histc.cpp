// Kernel of aten::histc on the acme device.
//
// Floating dtypes compute each element's bin as CPU's histc does (the linear
// interpolation of ATen's histogram kernel, in the input dtype, without its
// local search), so the counts equal CPU's bit for bit. Integer dtypes, which
// CPU's histc refuses and CUDA's takes, follow CUDA: the range in int64, the
// bin by integer division. transformers' mixture-of-experts layers count
// tokens per expert this way on every device but CPU and MPS.
#include "kernels.h"

#include "common/common.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

namespace acme::kernels {

using namespace acme::common;

namespace {

// The histogram's outer edges from `min`/`max`, as torch.histc defines them:
// both equal (the default 0, 0) means the data's own range; an empty range
// widens by one each side. `Acc` is double for floating dtypes (NaN in the data
// poisons the range, as aminmax does, and the caller refuses it) and int64 for
// integers (CUDA's accumulate type).
template <class Acc, class T>
std::pair<Acc, Acc> outer_edges(const T* x, int64_t n, Acc lo, Acc hi) {
  if (lo == hi && n > 0) {
    lo = hi = static_cast<Acc>(x[0]);
    for (int64_t i = 1; i < n; ++i) {
      const Acc v = static_cast<Acc>(x[i]);
      if constexpr (std::is_floating_point_v<Acc>) {
        if (std::isnan(v) || std::isnan(lo)) {
          lo = hi = v + lo;  // NaN
          break;
        }
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  return {lo, hi};
}

template <class T>
void count_floating(const T* x, int64_t n, int64_t bins, double lo, double hi, T* hist) {
  // CPU builds the edges with linspace in T: its first and last are T(lo), T(hi)
  const T left = static_cast<T>(lo), right = static_cast<T>(hi);
  std::vector<int64_t> counts(bins, 0);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    if (!(v >= left && v <= right)) continue;  // outside, or NaN
    auto pos = static_cast<int64_t>((v - left) * static_cast<T>(bins) / (right - left));
    if (pos == bins) pos -= 1;  // the last bin includes its right edge
    counts[pos] += 1;
  }
  for (int64_t b = 0; b < bins; ++b) hist[b] = static_cast<T>(counts[b]);
}

template <class T>
void count_integral(const T* x, int64_t n, int64_t bins, int64_t lo, int64_t hi, T* hist) {
  std::vector<int64_t> counts(bins, 0);
  const __int128 width = static_cast<__int128>(hi) - lo;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(x[i]);
    if (v < lo || v > hi) continue;
    auto pos = static_cast<int64_t>((static_cast<__int128>(v) - lo) * bins / width);
    if (pos == bins) pos -= 1;
    counts[pos] += 1;
  }
  for (int64_t b = 0; b < bins; ++b) hist[b] = static_cast<T>(counts[b]);
}

}  // namespace

// histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor
at::Tensor k_histc(const at::Tensor & self, int64_t bins, const at::Scalar & min, const at::Scalar & max) {
  const char* op = "histc";
  ACME_CHECK_T(bins > 0, op, self, "bins must be > 0, got ", bins);
  const at::Tensor x = self.contiguous();
  at::Tensor hist = at::empty({bins}, self.options());
  const int64_t n = x.numel();
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    const T* data = static_cast<const T*>(x.data_ptr());
    T* out = static_cast<T*>(hist.data_ptr());
    if constexpr (std::is_integral_v<T>) {
      const auto [lo, hi] = outer_edges<int64_t>(data, n, min.to<int64_t>(), max.to<int64_t>());
      ACME_CHECK_T(lo < hi, op, self, "max must be larger than min");
      count_integral(data, n, bins, lo, hi, out);
    } else {
      const auto [lo, hi] = outer_edges<double>(data, n, min.to<double>(), max.to<double>());
      ACME_CHECK_T(std::isfinite(lo) && std::isfinite(hi), op, self, "range of [", lo, ", ", hi,
                 "] is not finite");
      ACME_CHECK_T(lo < hi, op, self, "max must be larger than min");
      count_floating(data, n, bins, lo, hi, out);
    }
  });
  return hist;
}

}  // namespace acme::kernels
