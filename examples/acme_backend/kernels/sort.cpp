// acme sorting / selection kernels: sort, topk, kthvalue, median, mode.
// Each works on the lines of `dim`: the input (made contiguous) is viewed as
// [A, N, B] and every (a, b) line is copied out, ordered with a stable sort of
// (value, index) pairs and written back. NaN orders above every number, as in
// torch.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/native/TopKImpl.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// What the device part knows of Lines: the same geometry, src as a DeviceTensor.
struct DevLines {
  DeviceTensor src;  // contiguous
  int64_t A = 1, N = 1, B = 1;
};

struct Lines {
  at::Tensor src;  // contiguous
  int64_t A = 1, N = 1, B = 1;
  DevLines dev() const { return {DeviceTensor(src), A, N, B}; }
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
// already filled; T is the element type. Device part.
template <class T, class F>
void for_lines(const DevLines& l, F f) {
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
    using T = FL_T(tag);
    launch(values, [k, descending, l = l.dev(), values = DeviceTensor(values),
                    indices = DeviceTensor(indices)] {
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

// topk selects and orders exactly as CPU's kernel does, ties included: it runs
// PyTorch's own header-only selection loop (ATen/native/TopKImpl.h: a partial
// sort, or nth_element then a sort, of (value, index) pairs). Which of several
// equal values topk returns is unspecified, but MoE routers hit it: bf16 router
// logits tie at the k-th expert (minimax_m2: 7 of 64 tokens), and a different
// choice than CPU's routes those tokens to other experts.
std::tuple<at::Tensor, at::Tensor> k_topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                          bool sorted) {
  const char* op = "topk";
  dim = wrap_dim(op, dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  FL_CHECK_INDEX(k >= 0 && k <= n, op, "selected index k out of range");
  if (self.scalar_type() == at::kBool) return sorted_prefix(op, self, dim, k, largest);
  Lines l = lines_of(op, self, dim);
  auto shape = shape_with(self, dim, k, false);
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  if (values.numel() == 0) return {values, indices};
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      launch(values, [k, largest, sorted, l = l.dev(), values = DeviceTensor(values),
                      indices = DeviceTensor(indices)] {
        const T* x = static_cast<const T*>(l.src.data_ptr());
        T* v = static_cast<T*>(values.data_ptr());
        int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
        // the B lines of one `a` at once: consecutive lines are one element apart
        const int64_t strides[3] = {sizeof(T), sizeof(int64_t), sizeof(T)};
        for (int64_t a = 0; a < l.A; ++a) {
          char* data[3] = {reinterpret_cast<char*>(v + a * k * l.B), reinterpret_cast<char*>(ix + a * k * l.B),
                           reinterpret_cast<char*>(const_cast<T*>(x + a * l.N * l.B))};
          at::native::topk_impl_loop<T, opmath_t<T>>(l.B, l.B, l.B, k, l.N, largest, sorted, data, strides,
                                                      l.B);
        }
      });
    }
  });
  return {values, indices};
}

namespace {
// One selected element per line: values/indices with `dim` reduced.
template <class Pick>
std::tuple<at::Tensor, at::Tensor> select_per_line(const char* op, const at::Tensor& self, int64_t dim,
                                                   bool keepdim, Pick pick) {
  dim = wrap_dim(op, dim, self.dim());
  Lines l = lines_of(op, self, dim);
  FL_CHECK_INDEX(l.N > 0 || l.A * l.B == 0, op, "cannot compute ", op, " on an empty dimension");
  auto shape = shape_with(self, dim, 1, !keepdim);
  at::Tensor values = at::empty(shape, self.options());
  at::Tensor indices = at::empty(shape, self.options().dtype(at::kLong));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(values, [pick, l = l.dev(), values = DeviceTensor(values), indices = DeviceTensor(indices)] {
      T* v = static_cast<T*>(values.data_ptr());
      int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
      for_lines<T>(l, [&](auto& line, int64_t a, int64_t b) {
        auto r = pick(line);
        v[a * l.B + b] = cvt<T>(r.first);
        ix[a * l.B + b] = r.second;
      });
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

// median / nanmedian of all elements: `pick` selects over the one flat line;
// an empty input gives NaN, as torch.
template <class Pick>
at::Tensor median_of_all(const char* op, const at::Tensor& self, Pick pick) {
  if (self.numel() == 0) {
    at::Tensor out = at::empty({}, self.options());
    dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
      using T = FL_T(tag);
      launch(out, [out = DeviceTensor(out)] {
        *static_cast<T*>(out.data_ptr()) = cvt<T>(std::numeric_limits<float>::quiet_NaN());
      });
    });
    return out;
  }
  at::Tensor flat = at::empty({self.numel()}, self.options());
  convert_into(op, flat.view(self.sizes()), self);
  return std::get<0>(select_per_line(op, flat, 0, false, pick));
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> k_kthvalue(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  const char* op = "kthvalue";
  const int64_t wd = wrap_dim(op, dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(wd);
  FL_CHECK_INDEX(k >= 1 && k <= n, op, "kthvalue(): selected number k out of range for dimension ", wd);
  return select_per_line(op, self, wd, keepdim, [k](auto& line) {
    sort_line(line, false);
    return line[k - 1];
  });
}

std::tuple<at::Tensor, at::Tensor> k_median_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return select_per_line("median.dim", self, dim, keepdim, [](auto& line) { return median_of(line); });
}

at::Tensor k_median(const at::Tensor& self) {
  return median_of_all("median", self, [](auto& line) { return median_of(line); });
}

namespace {
// the lower median of the non-NaN values (sort puts NaNs last); NaN when the
// line holds nothing else
template <class Line>
auto nanmedian_of(Line& line) {
  int64_t finite = 0;
  for (const auto& p : line)
    if (!isnan_m(p.first)) ++finite;
  sort_line(line, false);
  return line[finite == 0 ? 0 : (finite - 1) / 2];
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> k_nanmedian_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return select_per_line("nanmedian.dim", self, dim, keepdim,
                         [](auto& line) { return nanmedian_of(line); });
}

at::Tensor k_nanmedian(const at::Tensor& self) {
  return median_of_all("nanmedian", self, [](auto& line) { return nanmedian_of(line); });
}

namespace {
// searchsorted / bucketize: for each value, the insertion index into the
// last dim of `boundaries` (one 1-d boundary row for all values, or one row
// per leading index of `values`), lower bound (left) or upper bound (right).
// Comparisons are torch's: !(b >= v) moves right (left side), !(b > v)
// (right side), so NaNs sort last. `sorter` (optional) orders each row.
at::Tensor search_sorted(const char* op, const at::Tensor& boundaries, const at::Tensor& values,
                         bool out_int32, bool right, const std::optional<at::Tensor>& sorter) {
  const bool is_1d = boundaries.dim() == 1;
  FL_CHECK_T(boundaries.dim() >= 1, op, boundaries,
               "boundaries tensor should have positive dimension, but got 0 dimension");
  if (!is_1d) {
    FL_CHECK_T(boundaries.dim() == values.dim() &&
                     boundaries.sizes().slice(0, boundaries.dim() - 1).equals(
                         values.sizes().slice(0, values.dim() - 1)),
                 op, boundaries,
                 "boundaries and input value tensors should have same size for all but the last "
                 "dimension, or boundaries should be 1-D; got boundaries ", boundaries.sizes(),
                 " and input value ", values.sizes());
  }
  const bool has_sorter = sorter.has_value() && sorter->defined();
  at::Tensor st;
  if (has_sorter) {
    FL_CHECK_T(sorter->scalar_type() == at::kLong, op, *sorter, "sorter must be a tensor of long dtype, but got ",
                 dtype_name(sorter->scalar_type()));
    FL_CHECK_T(sorter->sizes().equals(boundaries.sizes()), op, *sorter,
                 "boundary and sorter must have the same size, but got boundary tensor ", boundaries.sizes(),
                 " and sorter tensor ", sorter->sizes());
    st = sorter->contiguous();
  }
  const auto common = promote({&boundaries, &values});
  at::Tensor bd = cast(op, boundaries, common).contiguous();
  at::Tensor in = cast(op, values, common).contiguous();
  const int64_t nb = boundaries.size(-1);
  const int64_t row_in = values.dim() == 0 ? 1 : values.size(-1);
  if (out_int32) {
    FL_CHECK(nb < std::numeric_limits<int32_t>::max(), op,
               "the size of boundaries must be less than ", std::numeric_limits<int32_t>::max(),
               ", but got ", nb);
  }
  at::Tensor out = at::empty(values.sizes(), values.options().dtype(out_int32 ? at::kInt : at::kLong));
  dispatch<kAllNoBool>(op, values.device(), common, [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [op, has_sorter, is_1d, right, out_int32, nb, row_in, st = DeviceTensor(st),
                 bd = DeviceTensor(bd), in = DeviceTensor(in), out = DeviceTensor(out)] {
      // the sorter's indices are data: checked here, on the device (reported
      // at the next synchronization)
      const int64_t* sp = has_sorter ? static_cast<const int64_t*>(st.data_ptr()) : nullptr;
      if (sp) {
        for (int64_t k = 0; k < st.numel(); ++k)
          FL_CHECK_INDEX(sp[k] >= 0 && sp[k] < nb, op, "sorter index out of range");
      }
      const T* b = static_cast<const T*>(bd.data_ptr());
      const T* v = static_cast<const T*>(in.data_ptr());
      for (int64_t i = 0; i < in.numel(); ++i) {
        const int64_t row = is_1d ? 0 : (i / row_in) * nb;
        const M val = static_cast<M>(v[i]);
        int64_t lo = row, hi = row + nb;
        while (lo < hi) {
          const int64_t mid = lo + ((hi - lo) >> 1);
          const M m = static_cast<M>(sp ? b[sp[mid] + row] : b[mid]);
          const bool go_right = right ? !(m > val) : !(m >= val);
          if (go_right) lo = mid + 1;
          else hi = mid;
        }
        const int64_t pos = lo - row;
        if (out_int32) static_cast<int32_t*>(out.data_ptr())[i] = static_cast<int32_t>(pos);
        else static_cast<int64_t*>(out.data_ptr())[i] = pos;
      }
    });
  });
  return out;
}

bool search_side(const char* op, bool right, const std::optional<c10::string_view>& side) {
  if (!side.has_value()) return right;
  FL_CHECK(*side == "left" || *side == "right", op, "side can only be 'left' or 'right' but got ", *side);
  const bool side_right = *side == "right";
  FL_CHECK(!right || side_right, op, "side and right can't be set to opposites, got side of ", *side,
             " while right was True");
  return side_right;
}
}  // namespace

at::Tensor k_searchsorted_Tensor(const at::Tensor& sorted_sequence, const at::Tensor& self, bool out_int32,
                                 bool right, std::optional<c10::string_view> side,
                                 const std::optional<at::Tensor>& sorter) {
  const char* op = "searchsorted.Tensor";
  return search_sorted(op, sorted_sequence, self, out_int32, search_side(op, right, side), sorter);
}

at::Tensor k_searchsorted_Scalar(const at::Tensor& sorted_sequence, const at::Scalar& self, bool out_int32,
                                 bool right, std::optional<c10::string_view> side,
                                 const std::optional<at::Tensor>& sorter) {
  const char* op = "searchsorted.Scalar";
  // the scalar as a 0-dim tensor of its own type (a wrapped number: the boundaries' dtype wins)
  at::Tensor v = at::empty({}, sorted_sequence.options().dtype(self.type()));
  dispatch<kAllNoBool>(op, sorted_sequence.device(), v.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(v, [x = self.to<T>(), v = DeviceTensor(v)] { *static_cast<T*>(v.data_ptr()) = x; });
  });
  v.unsafeGetTensorImpl()->set_wrapped_number(true);
  return search_sorted(op, sorted_sequence, v, out_int32, search_side(op, right, side), sorter);
}

at::Tensor k_bucketize_Tensor(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32,
                              bool right) {
  const char* op = "bucketize.Tensor";
  FL_CHECK_T(boundaries.dim() == 1, op, boundaries, "boundaries tensor must be 1 dimension, but got dim(",
               boundaries.dim(), ")");
  return search_sorted(op, boundaries, self, out_int32, right, std::nullopt);
}

// isin: whether each element equals one of test_elements (NaN equals
// nothing), both promoted to their common dtype; `invert` negates.
at::Tensor k_isin_Tensor_Tensor(const at::Tensor& elements, const at::Tensor& test_elements,
                                bool assume_unique, bool invert) {
  const char* op = "isin.Tensor_Tensor";
  (void)assume_unique;  // only a hint for torch's sorting algorithm
  const auto common = promote({&elements, &test_elements});
  at::Tensor el = cast(op, elements, common).contiguous();
  at::Tensor te = cast(op, test_elements, common).contiguous();
  at::Tensor out = at::empty(elements.sizes(), elements.options().dtype(at::kBool));
  dispatch<kAllNoBool>(op, elements.device(), common, [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [invert, el = DeviceTensor(el), te = DeviceTensor(te), out = DeviceTensor(out)] {
      const T* tp = static_cast<const T*>(te.data_ptr());
      std::vector<M> tests;
      tests.reserve(static_cast<size_t>(te.numel()));
      for (int64_t i = 0; i < te.numel(); ++i) {
        const M v = static_cast<M>(tp[i]);
        if (!isnan_m(v)) tests.push_back(v);
      }
      std::sort(tests.begin(), tests.end());
      const T* ep = static_cast<const T*>(el.data_ptr());
      bool* o = static_cast<bool*>(out.data_ptr());
      for (int64_t i = 0; i < el.numel(); ++i) {
        const M v = static_cast<M>(ep[i]);
        const bool found = !isnan_m(v) && std::binary_search(tests.begin(), tests.end(), v);
        o[i] = found != invert;
      }
    });
  });
  return out;
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
