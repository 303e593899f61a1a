// acme sorting / selection kernels: sort, topk, kthvalue, median, mode.
// Each works on the lines of `dim`: the input (made contiguous) is viewed as
// [A, N, B] and every (a, b) line is copied out, ordered with a stable sort of
// (value, index) pairs and written back. NaN orders above every number, as in
// torch.
#include "common/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

template <class M>
bool isnan_m(M v) {
  if constexpr (std::is_floating_point_v<M>) return std::isnan(v);
  else return false;
}

// strict "a before b" for ascending order with NaN last
template <class M>
bool less_nan_last(M a, M b) {
  if (isnan_m(a)) return false;
  if (isnan_m(b)) return true;
  return a < b;
}

struct Lines {
  at::Tensor src;  // contiguous
  int64_t A = 1, N = 1, B = 1;
};

Lines lines_of(const char* op, const at::Tensor& self, int64_t dim) {
  Lines l;
  if (self.is_contiguous()) {
    l.src = self;
  } else {
    l.src = at::empty(self.sizes(), self.options());
    convert_into(op, l.src, self);
  }
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (k < dim) l.A *= self.size(k);
    else if (k == dim) l.N = self.size(k);
    else l.B *= self.size(k);
  }
  return l;
}

// Calls f(line, a, b) for every line, with line = vector<(value, index)>
// already filled; T is the element type.
template <class T, class F>
void for_lines(const Lines& l, F f) {
  using M = opmath_t<T>;
  const T* x = static_cast<const T*>(l.src.data_ptr());
  std::vector<std::pair<M, int64_t>> line(static_cast<size_t>(l.N));
  for (int64_t a = 0; a < l.A; ++a)
    for (int64_t b = 0; b < l.B; ++b) {
      for (int64_t i = 0; i < l.N; ++i) line[i] = {static_cast<M>(x[(a * l.N + i) * l.B + b]), i};
      f(line, a, b);
    }
}

template <class M>
void sort_line(std::vector<std::pair<M, int64_t>>& line, bool descending) {
  if (descending)
    std::stable_sort(line.begin(), line.end(),
                     [](const auto& p, const auto& q) { return less_nan_last(q.first, p.first); });
  else
    std::stable_sort(line.begin(), line.end(),
                     [](const auto& p, const auto& q) { return less_nan_last(p.first, q.first); });
}

// shape of self with `dim` resized to k (or removed when !keepdim and k == 1 means reduce)
std::vector<int64_t> shape_with(const at::Tensor& self, int64_t dim, int64_t k, bool remove) {
  std::vector<int64_t> s(self.sizes().begin(), self.sizes().end());
  if (self.dim() == 0) return s;
  if (remove) s.erase(s.begin() + dim);
  else s[dim] = k;
  return s;
}

// Sorted (first k of) every line into values/indices of shape [A, k, B].
std::tuple<at::Tensor, at::Tensor> sorted_prefix(const char* op, const at::Tensor& self, int64_t dim,
                                                 int64_t k, bool descending) {
  Lines l = lines_of(op, self, dim);
  auto shape = shape_with(self, dim, k, false);
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
    for_lines<T>(l, [&](auto& line, int64_t a, int64_t b) {
      sort_line(line, descending);
      for (int64_t i = 0; i < k; ++i) {
        v[(a * k + i) * l.B + b] = cvt<T>(line[i].first);
        ix[(a * k + i) * l.B + b] = line[i].second;
      }
    });
  });
  return {values, indices};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> k_sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                                 bool descending) {
  const char* op = "sort.stable";
  (void)stable;  // acme always sorts stably
  dim = wrap_dim(op, dim, self.dim());
  return sorted_prefix(op, self, dim, self.dim() == 0 ? 1 : self.size(dim), descending);
}

std::tuple<at::Tensor, at::Tensor> k_sort(const at::Tensor& self, int64_t dim, bool descending) {
  return k_sort_stable(self, false, dim, descending);
}

std::tuple<at::Tensor, at::Tensor> k_topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                          bool sorted) {
  const char* op = "topk";
  (void)sorted;  // results are always sorted, which satisfies both settings
  dim = wrap_dim(op, dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  ACME_CHECK_INDEX(k >= 0 && k <= n, op, "selected index k out of range");
  return sorted_prefix(op, self, dim, k, largest);
}

namespace {
// One selected element per line: values/indices with `dim` reduced.
template <class Pick>
std::tuple<at::Tensor, at::Tensor> select_per_line(const char* op, const at::Tensor& self, int64_t dim,
                                                   bool keepdim, Pick pick) {
  dim = wrap_dim(op, dim, self.dim());
  Lines l = lines_of(op, self, dim);
  ACME_CHECK_INDEX(l.N > 0 || l.A * l.B == 0, op, "cannot compute ", op, " on an empty dimension");
  auto shape = shape_with(self, dim, 1, !keepdim);
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
    for_lines<T>(l, [&](auto& line, int64_t a, int64_t b) {
      auto r = pick(line);
      v[a * l.B + b] = cvt<T>(r.first);
      ix[a * l.B + b] = r.second;
    });
  });
  return {values, indices};
}

// the lower median; NaN if the line holds a NaN (the first NaN's index)
template <class Line>
auto median_of(Line& line) {
  for (const auto& p : line)
    if (isnan_m(p.first)) return p;
  sort_line(line, false);
  return line[(line.size() - 1) / 2];
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> k_kthvalue(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  const char* op = "kthvalue";
  const int64_t wd = wrap_dim(op, dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(wd);
  ACME_CHECK_INDEX(k >= 1 && k <= n, op, "kthvalue(): selected number k out of range for dimension ", wd);
  return select_per_line(op, self, wd, keepdim, [k](auto& line) {
    sort_line(line, false);
    return line[k - 1];
  });
}

std::tuple<at::Tensor, at::Tensor> k_median_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return select_per_line("median.dim", self, dim, keepdim, [](auto& line) { return median_of(line); });
}

at::Tensor k_median(const at::Tensor& self) {
  const char* op = "median";
  if (self.numel() == 0) {
    // torch returns NaN for an empty input
    at::Tensor out = at::empty({}, self.options());
    dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
      using T = ACME_T(tag);
      *static_cast<T*>(out.data_ptr()) = cvt<T>(std::numeric_limits<float>::quiet_NaN());
    });
    return out;
  }
  at::Tensor flat = at::empty({self.numel()}, self.options());
  convert_into(op, flat.view(self.sizes()), self);
  return std::get<0>(select_per_line(op, flat, 0, false, [](auto& line) { return median_of(line); }));
}

std::tuple<at::Tensor, at::Tensor> k_mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  return select_per_line("mode", self, dim, keepdim, [](auto& line) {
    // most frequent value (the smallest among equally frequent ones), with
    // the last index at which it occurs
    sort_line(line, false);
    auto best = line[0];
    int64_t best_count = 0;
    size_t i = 0;
    while (i < line.size()) {
      size_t j = i;
      int64_t last = line[i].second;
      while (j < line.size() && (line[j].first == line[i].first ||
                                 (isnan_m(line[j].first) && isnan_m(line[i].first)))) {
        last = std::max(last, line[j].second);
        ++j;
      }
      const int64_t count = static_cast<int64_t>(j - i);
      if (count > best_count) {
        best_count = count;
        best = {line[i].first, last};
      }
      i = j;
    }
    return best;
  });
}

}  // namespace acme::kernels
