// acme reduction and scan kernels.
//
// Every reduction is planned as "input viewed as contiguous [A, R, B], reduce
// over R": when the input is contiguous and the reduced dims form one block
// this is a view of the input; otherwise the input is copied once, with the
// kept dims first and the reduced dims last (B = 1). B == 1 reduces contiguous
// runs (several accumulator lanes, for speed and precision); B > 1 reduces
// rows element-wise (e.g. a bias gradient: sum over the batch of [N, C]).
// Accumulation: float for float32/float16/bfloat16, double for float64,
// int64 for integers.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// Reduced-dim mask from an optional dim list (None or [] = all dims).
std::vector<bool> dim_mask(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t nd = self.dim();
  std::vector<bool> mask(static_cast<size_t>(nd), false);
  if (!dims.has_value() || dims->empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  for (int64_t d : *dims) {
    const int64_t w = wrap_dim(op, d, nd);
    if (nd == 0) continue;
    FL_CHECK(!mask[w], op, "dim ", w, " appears multiple times in the list of dims");
    mask[w] = true;
  }
  return mask;
}

// What a device part knows of a plan: the [A, R, B] geometry and src as a
// DeviceTensor (Plan and ScanPlan give one with dev()).
struct DevPlan {
  DeviceTensor src;
  int64_t A = 1, R = 1, B = 1;
};

struct Plan {
  at::Tensor src;                  // contiguous tensor the [A, R, B] view refers to
  int64_t A = 1, R = 1, B = 1;
  std::vector<int64_t> out_shape;  // after keepdim
  DevPlan dev() const { return {DeviceTensor(src), A, R, B}; }
};

Plan make_plan(const char* op, const at::Tensor& self, const std::vector<bool>& mask, bool keepdim) {
  Plan p;
  const int64_t nd = self.dim();
  for (int64_t d = 0; d < nd; ++d) {
    if (!mask[d]) p.out_shape.push_back(self.size(d));
    else if (keepdim) p.out_shape.push_back(1);
  }
  // An empty reduced dim: R = 0, every output gets the identity (src unread).
  for (int64_t d = 0; d < nd; ++d) {
    if (mask[d] && self.size(d) == 0) {
      p.src = self;
      p.R = 0;
      for (int64_t k = 0; k < nd; ++k)
        if (!mask[k]) p.A *= self.size(k);
      return p;
    }
  }
  // Reduced dims of size > 1 must be adjacent (ignoring size-1 dims) for the
  // input to be viewed as [A, R, B] directly.
  int64_t lo = -1, hi = -1;
  bool block = true;
  for (int64_t d = 0; d < nd; ++d) {
    if (self.size(d) == 1) continue;
    if (mask[d]) {
      if (lo < 0) lo = d;
      else if (hi != d - 1) {
        // a kept dim of size > 1 lies between reduced dims?
        for (int64_t k = hi + 1; k < d; ++k)
          if (!mask[k] && self.size(k) != 1) block = false;
      }
      hi = d;
    }
  }
  if (block && self.is_contiguous()) {
    p.src = self;
    if (lo < 0) {  // nothing of size > 1 reduced: out[i] = in[i]
      p.A = self.numel();
      return p;
    }
    for (int64_t d = 0; d < lo; ++d) p.A *= self.size(d);
    for (int64_t d = lo; d <= hi; ++d) p.R *= self.size(d);
    for (int64_t d = hi + 1; d < nd; ++d) p.B *= self.size(d);
    return p;
  }
  // General case: copy with kept dims first, reduced dims last.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < nd; ++d)
    if (!mask[d]) perm.push_back(d);
  for (int64_t d = 0; d < nd; ++d)
    if (mask[d]) perm.push_back(d);
  at::Tensor permuted = self.permute(perm);
  p.src = at::empty(permuted.sizes(), self.options());
  convert_into(op, p.src, permuted);
  for (int64_t d = 0; d < nd; ++d) {
    if (mask[d]) p.R *= self.size(d);
    else p.A *= self.size(d);
  }
  p.B = 1;
  return p;
}

// Runs reducer `r` over the plan (device part). Reducer: Acc init(); void step(Acc&, In, int64_t idx);
// Acc merge(Acc, Acc) (only used when kLanes); store(int64_t out_index, const Acc&).
//
// Work is split over the compute units (kernel_lib/parallel.h) without changing any
// output's arithmetic: an output reduces its run in fixed 4096-element chunks
// (8 lanes each) merged in chunk order whichever unit computed them, so the
// result is bitwise the same for any number of units.
template <class In, class Red, class Store>
void run(const DevPlan& p, Red r, Store store) {
  using Acc = decltype(r.init());
  const In* data = static_cast<const In*>(p.src.data_ptr());
  const int64_t A = p.A, R = p.R, B = p.B;
  if (B == 1) {
    constexpr int64_t kChunk = 4096;  // bounded float error per chunk
    // partial of x[start, end), one chunk
    auto chunk = [&r](const In* x, int64_t start, int64_t end) {
      Acc lane[8];
      for (auto& l : lane) l = r.init();
      int64_t i = start;
      for (; i + 8 <= end; i += 8)
        for (int l = 0; l < 8; ++l) r.step(lane[l], x[i + l], i + l);
      for (; i < end; ++i) r.step(lane[0], x[i], i);
      Acc c = lane[0];
      for (int l = 1; l < 8; ++l) c = r.merge(c, lane[l]);
      return c;
    };
    auto reduce_one = [&](int64_t a) {
      const In* x = data + a * R;
      Acc total = r.init();
      if constexpr (Red::kLanes) {
        for (int64_t start = 0; start < R; start += kChunk)
          total = r.merge(total, chunk(x, start, std::min(R, start + kChunk)));
      } else {
        for (int64_t i = 0; i < R; ++i) r.step(total, x[i], i);
      }
      store(a, total);
    };
    if constexpr (Red::kLanes) {
      if (A == 1 && R > kChunk) {  // one long run (a full reduction): its chunks in parallel
        const int64_t nchunks = (R + kChunk - 1) / kChunk;
        // not std::vector: Acc may be bool, and chunks are written concurrently
        std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(nchunks)]);
        parallel_for(nchunks, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c)
            partial[c] = chunk(data, c * kChunk, std::min(R, (c + 1) * kChunk));
        });
        Acc total = r.init();
        for (int64_t c = 0; c < nchunks; ++c) total = r.merge(total, partial[c]);
        store(0, total);
        return;
      }
    }
    parallel_for(A, std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(R, 1)),
                 [&](int64_t a0, int64_t a1) {
                   for (int64_t a = a0; a < a1; ++a) reduce_one(a);
                 });
    return;
  }
  // B > 1: every column b of every a reduces over R in order; work items are
  // (a, block of columns), each with its own accumulators.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (B + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(R * std::min(B, kCols), 1));
  parallel_for(A * blocks, grain, [&](int64_t w0, int64_t w1) {
    Acc acc[kCols];  // not std::vector: Acc may be bool
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t a = w / blocks, b0 = (w % blocks) * kCols, nb = std::min(kCols, B - b0);
      for (int64_t b = 0; b < nb; ++b) acc[b] = r.init();
      for (int64_t i = 0; i < R; ++i) {
        const In* row = data + (a * R + i) * B + b0;
        for (int64_t b = 0; b < nb; ++b) r.step(acc[b], row[b], i);
      }
      for (int64_t b = 0; b < nb; ++b) store(a * B + b0 + b, acc[b]);
    }
  });
}

template <class T>
using racc_t = acc_t<T>;

// SkipNan is a template parameter (not a flag) so the plain sum's loops stay
// branch-free and vectorize.
template <class T, class Acc, bool SkipNan = false>
struct SumRed {
  static constexpr bool kLanes = true;
  Acc init() const { return Acc(0); }
  void step(Acc& a, T x, int64_t) const {
    if constexpr (SkipNan && is_floating_v<T>) {
      if (std::isnan(static_cast<Acc>(x))) return;
    }
    a += static_cast<Acc>(x);
  }
  Acc merge(Acc a, Acc b) const { return a + b; }
};

template <class T, class Acc>
using NanSumRed = SumRed<T, Acc, true>;
template <class T, class Acc>
using PlainSumRed = SumRed<T, Acc, false>;

template <class T, class Acc>
struct ProdRed {
  static constexpr bool kLanes = true;
  Acc init() const { return Acc(1); }
  void step(Acc& a, T x, int64_t) const { a *= static_cast<Acc>(x); }
  Acc merge(Acc a, Acc b) const { return a * b; }
};

template <class T>
bool is_nan_v(T x) {
  if constexpr (is_floating_v<T>) return std::isnan(static_cast<opmath_t<T>>(x));
  else return false;
}

// max / min with NaN propagation (the first NaN wins) and the index of the
// first extreme value.
template <class T, bool IsMax>
struct ExtremeRed {
  static constexpr bool kLanes = false;
  using M = opmath_t<T>;
  struct Acc {
    M v;
    int64_t i;
    bool nan;
  };
  Acc init() const {
    return {IsMax ? std::numeric_limits<M>::lowest() : std::numeric_limits<M>::max(), -1, false};
  }
  void step(Acc& a, T xt, int64_t idx) const {
    if (a.nan) return;
    const M x = static_cast<M>(xt);
    if (is_nan_v<M>(x)) {
      a = {x, idx, true};
      return;
    }
    if (a.i < 0 || (IsMax ? x > a.v : x < a.v)) a = {x, idx, false};
  }
  Acc merge(Acc a, Acc) const { return a; }
};

at::ScalarType sum_out_dtype(at::ScalarType in, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(in, /*includeBool=*/true) ? at::kLong : in;
}

constexpr unsigned kSumTypes = kAll;

// sum / nansum / prod: the input converts to the output dtype first (torch semantics).
template <template <class, class> class Red>
at::Tensor sum_like(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  const auto out_dt = sum_out_dtype(self.scalar_type(), dtype);
  dispatch<kSumTypes>(op, self.device(), self.scalar_type(), [](auto) {});
  const at::Tensor in = cast(op, self, out_dt);
  Plan p = make_plan(op, in, dim_mask(op, in, dims), keepdim);
  at::Tensor out = at::empty(p.out_shape, in.options());
  dispatch<kAllNoBool>(op, in.device(), out_dt, [&](auto tag) {
    using T = FL_T(tag);
    using Acc = racc_t<T>;
    launch(out, [p = p.dev(), out = DeviceTensor(out)] {
      T* o = static_cast<T*>(out.data_ptr());
      run<T>(p, Red<T, Acc>{}, [o](int64_t i, Acc a) { o[i] = cvt<T>(a); });
    });
  });
  return out;
}

}  // namespace

at::Tensor k_sum_dim_IntList(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                             std::optional<at::ScalarType> dtype) {
  return sum_like<PlainSumRed>("sum.dim_IntList", self, dim, keepdim, dtype);
}

at::Tensor k_sum(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return sum_like<PlainSumRed>("sum", self, std::nullopt, false, dtype);
}

at::Tensor k_nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  return sum_like<NanSumRed>("nansum", self, dim, keepdim, dtype);
}

at::Tensor k_prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return sum_like<ProdRed>("prod", self, std::nullopt, false, dtype);
}

at::Tensor k_prod_dim_int(const at::Tensor& self, int64_t dim, bool keepdim,
                          std::optional<at::ScalarType> dtype) {
  const int64_t d[1] = {dim};
  return sum_like<ProdRed>("prod.dim_int", self, at::IntArrayRef(d, 1), keepdim, dtype);
}

at::Tensor k_mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<at::ScalarType> dtype) {
  const char* op = "mean.dim";
  const auto dt = dtype ? *dtype : self.scalar_type();
  FL_CHECK_T(c10::isFloatingType(dt), op, self,
               "mean(): could not infer output dtype. Input dtype must be either a floating "
               "point or complex dtype. Got: ", dtype_name(dt));
  const at::Tensor in = cast(op, self, dt);
  Plan p = make_plan(op, in, dim_mask(op, in, dim), keepdim);
  at::Tensor out = at::empty(p.out_shape, in.options());
  dispatch<kFloating>(op, in.device(), dt, [&](auto tag) {
    using T = FL_T(tag);
    using Acc = racc_t<T>;
    const Acc n = static_cast<Acc>(p.R);
    launch(out, [n, p = p.dev(), out = DeviceTensor(out)] {
      T* o = static_cast<T*>(out.data_ptr());
      run<T>(p, SumRed<T, Acc>{}, [o, n](int64_t i, Acc a) { o[i] = cvt<T>(a / n); });
    });
  });
  return out;
}

at::Tensor k_mean(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return k_mean_dim(self, std::nullopt, false, dtype);
}

namespace {

void check_nonempty_reduction(const char* op, const at::Tensor& self, const Plan& p) {
  FL_CHECK_INDEX(p.R > 0 || p.A * p.B == 0, op,
                   "Expected reduction dim to be specified for input.numel() == 0. "
                   "Specify the reduction dim with the 'dim' argument.");
  (void)self;
}

// values (and optionally int64 indices) of max/min over the plan.
template <bool IsMax>
void extreme(const char* op, const at::Tensor& self, const Plan& p, at::Tensor* values,
             at::Tensor* indices) {
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using Red = ExtremeRed<T, IsMax>;
    launch(self, [p = p.dev(), values = values ? DeviceTensor(*values) : DeviceTensor(),
                  indices = indices ? DeviceTensor(*indices) : DeviceTensor()] {
      T* v = values.defined() ? static_cast<T*>(values.data_ptr()) : nullptr;
      int64_t* ix = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
      run<T>(p, Red{}, [v, ix](int64_t i, const typename Red::Acc& a) {
        if (v) v[i] = cvt<T>(a.v);
        if (ix) ix[i] = a.i;
      });
    });
  });
}

template <bool IsMax>
std::tuple<at::Tensor, at::Tensor> extreme_dim(const char* op, const at::Tensor& self, int64_t dim,
                                               bool keepdim) {
  const int64_t d[1] = {dim};
  Plan p = make_plan(op, self, dim_mask(op, self, at::IntArrayRef(d, 1)), keepdim);
  FL_CHECK_INDEX(p.R > 0 || p.A * p.B == 0, op,
                   "cannot compute on an empty dimension (dim ", dim, ") of a tensor of shape ",
                   self.sizes());
  at::Tensor values = at::empty(p.out_shape, self.options());
  at::Tensor indices = at::empty(p.out_shape, self.options().dtype(at::kLong));
  extreme<IsMax>(op, self, p, &values, &indices);
  return {values, indices};
}

template <bool IsMax>
at::Tensor extreme_dims(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  Plan p = make_plan(op, self, dim_mask(op, self, dims), keepdim);
  check_nonempty_reduction(op, self, p);
  at::Tensor values = at::empty(p.out_shape, self.options());
  extreme<IsMax>(op, self, p, &values, nullptr);
  return values;
}

template <bool IsMax>
at::Tensor arg_extreme(const char* op, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  FL_CHECK_T(self.scalar_type() != at::kBool, op, self, op, "(): does not support bool input");
  if (!dim.has_value()) {
    // over the flattened tensor; keepdim keeps every dim as size 1
    at::Tensor flat = self.contiguous().reshape({-1});
    FL_CHECK_INDEX(flat.numel() > 0, op,
                     "Expected reduction dim to be specified for input.numel() == 0.");
    auto res = extreme_dim<IsMax>(op, flat, 0, false);
    at::Tensor idx = std::get<1>(res);
    if (keepdim) idx = idx.reshape(std::vector<int64_t>(static_cast<size_t>(self.dim()), 1));
    return idx;
  }
  return std::get<1>(extreme_dim<IsMax>(op, self, *dim, keepdim));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> k_max_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extreme_dim<true>("max.dim", self, dim, keepdim);
}

std::tuple<at::Tensor, at::Tensor> k_min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return extreme_dim<false>("min.dim", self, dim, keepdim);
}

at::Tensor k_max(const at::Tensor& self) {
  FL_CHECK_T(self.numel() > 0, "max", self,
               "max(): Expected reduction dim to be specified for input.numel() == 0. Specify "
               "the reduction dim with the 'dim' argument.");
  return extreme_dims<true>("max", self, std::nullopt, false);
}

at::Tensor k_min(const at::Tensor& self) {
  FL_CHECK_T(self.numel() > 0, "min", self,
               "min(): Expected reduction dim to be specified for input.numel() == 0. Specify "
               "the reduction dim with the 'dim' argument.");
  return extreme_dims<false>("min", self, std::nullopt, false);
}

at::Tensor k_amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return extreme_dims<true>("amax", self, dim, keepdim);
}

at::Tensor k_amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return extreme_dims<false>("amin", self, dim, keepdim);
}

at::Tensor k_argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme<true>("argmax", self, dim, keepdim);
}

at::Tensor k_argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme<false>("argmin", self, dim, keepdim);
}

std::tuple<at::Tensor, at::Tensor> k_aminmax(const at::Tensor& self, std::optional<int64_t> dim,
                                             bool keepdim) {
  const char* op = "aminmax";
  at::Tensor mn, mx;
  if (dim.has_value()) {
    const int64_t d[1] = {*dim};
    mn = extreme_dims<false>(op, self, at::IntArrayRef(d, 1), keepdim);
    mx = extreme_dims<true>(op, self, at::IntArrayRef(d, 1), keepdim);
  } else {
    FL_CHECK_T(self.numel() > 0, op, self,
                 "cannot compute aminmax over an empty tensor without a dim");
    mn = extreme_dims<false>(op, self, std::nullopt, keepdim);
    mx = extreme_dims<true>(op, self, std::nullopt, keepdim);
    if (!keepdim) {
      mn = mn.reshape({});
      mx = mx.reshape({});
    }
  }
  return {mn, mx};
}

namespace {
template <class T>
struct AllAnyRed {
  static constexpr bool kLanes = true;
  bool all;
  bool init() const { return all; }
  void step(bool& a, T x, int64_t) const {
    const bool b = cvt<bool>(x);
    a = all ? (a && b) : (a || b);
  }
  bool merge(bool a, bool b) const { return all ? (a && b) : (a || b); }
};

template <class T>
struct CountRed {
  static constexpr bool kLanes = true;
  int64_t init() const { return 0; }
  void step(int64_t& a, T x, int64_t) const { a += cvt<bool>(x) ? 1 : 0; }
  int64_t merge(int64_t a, int64_t b) const { return a + b; }
};

// all / any: bool output (uint8 for uint8 input, as torch).
at::Tensor all_any(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                   bool is_all) {
  Plan p = make_plan(op, self, dim_mask(op, self, dims), keepdim);
  const auto out_dt = self.scalar_type() == at::kByte ? at::kByte : at::kBool;
  at::Tensor out = at::empty(p.out_shape, self.options().dtype(out_dt));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using Red = AllAnyRed<T>;
    launch(out, [out_dt, is_all, p = p.dev(), out = DeviceTensor(out)] {
      if (out_dt == at::kByte) {
        uint8_t* o = static_cast<uint8_t*>(out.data_ptr());
        run<T>(p, Red{is_all}, [o](int64_t i, bool a) { o[i] = a ? 1 : 0; });
      } else {
        bool* o = static_cast<bool*>(out.data_ptr());
        run<T>(p, Red{is_all}, [o](int64_t i, bool a) { o[i] = a; });
      }
    });
  });
  return out;
}
}  // namespace

at::Tensor k_all_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  const int64_t d[1] = {dim};
  return all_any("all.dim", self, at::IntArrayRef(d, 1), keepdim, true);
}

at::Tensor k_all(const at::Tensor& self) {
  return all_any("all", self, std::nullopt, false, true);
}

at::Tensor k_any_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  const int64_t d[1] = {dim};
  return all_any("any.dim", self, at::IntArrayRef(d, 1), keepdim, false);
}

at::Tensor k_any(const at::Tensor& self) {
  return all_any("any", self, std::nullopt, false, false);
}

at::Tensor k_count_nonzero_dim_IntList(const at::Tensor& self, at::IntArrayRef dim) {
  const char* op = "count_nonzero.dim_IntList";
  Plan p = make_plan(op, self, dim_mask(op, self, dim), false);
  at::Tensor out = at::empty(p.out_shape, self.options().dtype(at::kLong));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [p = p.dev(), out = DeviceTensor(out)] {
      int64_t* o = static_cast<int64_t*>(out.data_ptr());
      run<T>(p, CountRed<T>{}, [o](int64_t i, int64_t a) { o[i] = a; });
    });
  });
  return out;
}

namespace {
// Welford mean/variance in double (exact enough for every acme dtype).
struct Welford {
  double mean = 0, m2 = 0;
  int64_t n = 0;
};

template <class T>
struct WelfordRed {
  static constexpr bool kLanes = false;
  Welford init() const { return {}; }
  void step(Welford& w, T xt, int64_t) const {
    const double x = static_cast<double>(static_cast<opmath_t<T>>(xt));
    ++w.n;
    const double d = x - w.mean;
    w.mean += d / static_cast<double>(w.n);
    w.m2 += d * (x - w.mean);
  }
  Welford merge(Welford a, Welford) const { return a; }
};

// Computes var (or std) and mean; outputs in the input dtype.
std::tuple<at::Tensor, at::Tensor> var_mean_impl(const char* op, const at::Tensor& self,
                                                 at::OptionalIntArrayRef dim,
                                                 const std::optional<at::Scalar>& correction,
                                                 bool keepdim, bool take_sqrt) {
  FL_CHECK_T(c10::isFloatingType(self.scalar_type()), op, self,
               "std and var only support floating point and complex dtypes");
  Plan p = make_plan(op, self, dim_mask(op, self, dim), keepdim);
  const double corr = correction ? correction->to<double>() : 1.0;
  at::Tensor var = at::empty(p.out_shape, self.options());
  at::Tensor mean = at::empty(p.out_shape, self.options());
  dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(var, [corr, take_sqrt, p = p.dev(), var = DeviceTensor(var), mean = DeviceTensor(mean)] {
      T* v = static_cast<T*>(var.data_ptr());
      T* m = static_cast<T*>(mean.data_ptr());
      run<T>(p, WelfordRed<T>{}, [&](int64_t i, const Welford& w) {
        const double denom = std::max(0.0, static_cast<double>(w.n) - corr);
        double r = w.m2 / denom;  // 0/0 -> NaN, x/0 -> inf as in torch
        if (take_sqrt) r = std::sqrt(r);
        v[i] = cvt<T>(r);
        m[i] = cvt<T>(w.n ? w.mean : std::numeric_limits<double>::quiet_NaN());
      });
    });
  });
  return {var, mean};
}
}  // namespace

at::Tensor k_var_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                            const std::optional<at::Scalar>& correction, bool keepdim) {
  return std::get<0>(var_mean_impl("var.correction", self, dim, correction, keepdim, false));
}

at::Tensor k_std_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                            const std::optional<at::Scalar>& correction, bool keepdim) {
  return std::get<0>(var_mean_impl("std.correction", self, dim, correction, keepdim, true));
}

std::tuple<at::Tensor, at::Tensor> k_var_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                         const std::optional<at::Scalar>& correction,
                                                         bool keepdim) {
  return var_mean_impl("var_mean.correction", self, dim, correction, keepdim, false);
}

std::tuple<at::Tensor, at::Tensor> k_std_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                         const std::optional<at::Scalar>& correction,
                                                         bool keepdim) {
  return var_mean_impl("std_mean.correction", self, dim, correction, keepdim, true);
}

namespace {
// logsumexp online form: the running max m and the sum of exp(x - m)
template <class T, class Acc>
struct LSERed {
  struct LSE {
    Acc m, s;
  };
  static constexpr bool kLanes = false;
  LSE init() const { return {-std::numeric_limits<Acc>::infinity(), Acc(0)}; }
  void step(LSE& a, T xt, int64_t) const {
    const Acc x = static_cast<Acc>(xt);
    if (std::isnan(x)) { a.m = x; a.s = Acc(1); return; }
    if (std::isnan(a.m)) return;
    if (x == -std::numeric_limits<Acc>::infinity()) return;
    if (x > a.m) {
      a.s = (a.m == -std::numeric_limits<Acc>::infinity() ? Acc(0) : a.s * std::exp(a.m - x)) + Acc(1);
      a.m = x;
    } else {
      a.s += std::exp(x - a.m);
    }
  }
  LSE merge(LSE a, LSE) const { return a; }
};

template <class T, class Acc>
struct NormRed {
  static constexpr bool kLanes = true;
  int kind;  // 0: L2, 1: L1, 2: L0, 3: inf, 4: -inf, 5: general p
  Acc pw;
  Acc init() const { return kind == 4 ? std::numeric_limits<Acc>::infinity() : Acc(0); }
  void step(Acc& a, T xt, int64_t) const {
    const Acc x = std::abs(static_cast<Acc>(xt));
    switch (kind) {
      case 0: a += x * x; break;
      case 1: a += x; break;
      case 2: a += (x != Acc(0)) ? Acc(1) : Acc(0); break;
      case 3: a = (std::isnan(x) || x > a) ? x : a; break;
      case 4: a = (std::isnan(x) || x < a) ? x : a; break;
      default: a += std::pow(x, pw); break;
    }
  }
  Acc merge(Acc a, Acc b) const {
    if (kind == 3) return (std::isnan(b) || b > a) ? b : a;
    if (kind == 4) return (std::isnan(b) || b < a) ? b : a;
    return a + b;
  }
};
}  // namespace

at::Tensor k_logsumexp(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  const char* op = "logsumexp";
  const at::Tensor in = cast(op, self, float_compute(self.scalar_type()));
  Plan p = make_plan(op, in, dim_mask(op, in, dim), keepdim);
  at::Tensor out = at::empty(p.out_shape, in.options());
  dispatch<kFloating>(op, in.device(), in.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using Acc = racc_t<T>;
    using LSE = typename LSERed<T, Acc>::LSE;
    using Red = LSERed<T, Acc>;
    launch(out, [p = p.dev(), out = DeviceTensor(out)] {
      T* o = static_cast<T*>(out.data_ptr());
      run<T>(p, Red{}, [o](int64_t i, const LSE& a) {
        if (std::isinf(a.m)) o[i] = cvt<T>(a.m);
        else o[i] = cvt<T>(a.m + std::log(a.s));
      });
    });
  });
  return out;
}

namespace {
at::Tensor vector_norm(const char* op, const at::Tensor& self, double ord, at::OptionalIntArrayRef dim,
                       bool keepdim, std::optional<at::ScalarType> dtype) {
  FL_CHECK_T(c10::isFloatingType(self.scalar_type()), op, self,
               "linalg.vector_norm: Expected a floating point or complex tensor as input");
  const at::Tensor in = dtype ? cast(op, self, *dtype) : self;
  Plan p = make_plan(op, in, dim_mask(op, in, dim), keepdim);
  if (ord < 0 || std::isinf(ord)) {
    FL_CHECK_INDEX(p.R > 0 || p.A * p.B == 0, op,
                     "linalg.vector_norm cannot compute the ", ord,
                     " norm on an empty tensor because the operation does not have an identity");
  }
  at::Tensor out = at::empty(p.out_shape, in.options());
  dispatch<kFloating>(op, in.device(), in.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using Acc = racc_t<T>;
    const int kind = ord == 2.0 ? 0 : ord == 1.0 ? 1 : ord == 0.0 ? 2
                   : (std::isinf(ord) && ord > 0) ? 3 : (std::isinf(ord) && ord < 0) ? 4 : 5;
    const Acc pw = static_cast<Acc>(ord);
    using Red = NormRed<T, Acc>;
    launch(out, [kind, pw, p = p.dev(), out = DeviceTensor(out)] {
      T* o = static_cast<T*>(out.data_ptr());
      run<T>(p, Red{kind, pw}, [o, kind, pw](int64_t i, Acc a) {
        Acc r = a;
        if (kind == 0) r = std::sqrt(a);
        else if (kind == 5) r = std::pow(a, Acc(1) / pw);
        o[i] = cvt<T>(r);
      });
    });
  });
  return out;
}
}  // namespace

at::Tensor k_linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                                bool keepdim, std::optional<at::ScalarType> dtype) {
  return vector_norm("linalg_vector_norm", self, ord.to<double>(), dim, keepdim, dtype);
}

at::Tensor k_norm_ScalarOpt_dim(const at::Tensor& self, const std::optional<at::Scalar>& p,
                                at::IntArrayRef dim, bool keepdim) {
  return vector_norm("norm.ScalarOpt_dim", self, p ? p->to<double>() : 2.0, dim, keepdim, std::nullopt);
}

// ---- scans ---------------------------------------------------------------------------

namespace {
// Views `self` (made contiguous if needed) as [A, R, B] around `dim`.
struct ScanPlan {
  at::Tensor src;
  int64_t A = 1, R = 1, B = 1;
  DevPlan dev() const { return {DeviceTensor(src), A, R, B}; }
};

ScanPlan scan_plan(const char* op, const at::Tensor& self, int64_t dim) {
  ScanPlan s;
  const int64_t d = wrap_dim(op, dim, self.dim());
  if (self.is_contiguous()) {
    s.src = self;
  } else {
    s.src = at::empty(self.sizes(), self.options());
    convert_into(op, s.src, self);
  }
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (k < d) s.A *= self.size(k);
    else if (k == d) s.R = self.size(k);
    else s.B *= self.size(k);
  }
  return s;
}

template <bool IsProd>
at::Tensor cum_sum_prod(const char* op, const at::Tensor& self, int64_t dim,
                        std::optional<at::ScalarType> dtype) {
  const auto out_dt = sum_out_dtype(self.scalar_type(), dtype);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [](auto) {});
  const at::Tensor in = cast(op, self, out_dt);
  ScanPlan s = scan_plan(op, in, dim);
  at::Tensor out = at::empty(in.sizes(), in.options());
  dispatch<kAllNoBool>(op, in.device(), out_dt, [&](auto tag) {
    using T = FL_T(tag);
    using Acc = racc_t<T>;
    launch(out, [s = s.dev(), out = DeviceTensor(out)] {
      const T* x = static_cast<const T*>(s.src.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      std::vector<Acc> acc(static_cast<size_t>(s.B));
      for (int64_t a = 0; a < s.A; ++a) {
        std::fill(acc.begin(), acc.end(), IsProd ? Acc(1) : Acc(0));
        for (int64_t r = 0; r < s.R; ++r) {
          const int64_t base = (a * s.R + r) * s.B;
          for (int64_t b = 0; b < s.B; ++b) {
            if constexpr (IsProd) acc[b] *= static_cast<Acc>(x[base + b]);
            else acc[b] += static_cast<Acc>(x[base + b]);
            o[base + b] = cvt<T>(acc[b]);
          }
        }
      }
    });
  });
  return out;
}

template <bool IsMax>
std::tuple<at::Tensor, at::Tensor> cum_extreme(const char* op, const at::Tensor& self, int64_t dim) {
  ScanPlan s = scan_plan(op, self, dim);
  at::Tensor values = at::empty(self.sizes(), self.options());
  at::Tensor indices = at::empty(self.sizes(), self.options().dtype(at::kLong));
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(values, [s = s.dev(), values = DeviceTensor(values), indices = DeviceTensor(indices)] {
      const T* x = static_cast<const T*>(s.src.data_ptr());
      T* v = static_cast<T*>(values.data_ptr());
      int64_t* ix = static_cast<int64_t*>(indices.data_ptr());
      std::unique_ptr<M[]> best(new M[static_cast<size_t>(s.B)]);  // M may be bool
      std::unique_ptr<int64_t[]> bi(new int64_t[static_cast<size_t>(s.B)]);
      for (int64_t a = 0; a < s.A; ++a) {
        for (int64_t r = 0; r < s.R; ++r) {
          const int64_t base = (a * s.R + r) * s.B;
          for (int64_t b = 0; b < s.B; ++b) {
            const M cur = static_cast<M>(x[base + b]);
            // ties take the later index, NaN sticks (torch's cummax/cummin)
            if (r == 0 || is_nan_v<M>(cur) ||
                (!is_nan_v<M>(best[b]) && (IsMax ? cur >= best[b] : cur <= best[b]))) {
              best[b] = cur;
              bi[b] = r;
            }
            v[base + b] = cvt<T>(best[b]);
            ix[base + b] = bi[b];
          }
        }
      }
    });
  });
  return {values, indices};
}
}  // namespace

at::Tensor k_cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return cum_sum_prod<false>("cumsum", self, dim, dtype);
}

at::Tensor k_cumprod(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  return cum_sum_prod<true>("cumprod", self, dim, dtype);
}

std::tuple<at::Tensor, at::Tensor> k_cummax(const at::Tensor& self, int64_t dim) {
  return cum_extreme<true>("cummax", self, dim);
}

std::tuple<at::Tensor, at::Tensor> k_cummin(const at::Tensor& self, int64_t dim) {
  return cum_extreme<false>("cummin", self, dim);
}

// Sum of the main diagonal of a matrix. As torch's CPU kernel: integer and
// bool matrices give an int64 result, floats accumulate in double.
at::Tensor k_trace(const at::Tensor& self) {
  const char* op = "trace";
  FL_CHECK_T(self.dim() == 2, op, self, "trace: expected a matrix, but got tensor with dim ", self.dim());
  const auto st = self.scalar_type();
  const auto out_st = c10::isIntegralType(st, /*includeBool=*/true) ? at::kLong : st;
  at::Tensor out = at::empty({}, self.options().dtype(out_st));
  const int64_t n = std::min(self.size(0), self.size(1));
  const int64_t step = self.stride(0) + self.stride(1);
  dispatch<kAll>(op, self.device(), st, [&](auto tag) {
    using T = FL_T(tag);
    using A = std::conditional_t<is_floating_v<T>, double, int64_t>;
    launch(out, [n, step, self = DeviceTensor(self), out = DeviceTensor(out)] {
      const T* p = static_cast<const T*>(self.data_ptr());
      A sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += cvt<A>(p[i * step]);
      if constexpr (is_floating_v<T>) *static_cast<T*>(out.data_ptr()) = cvt<T>(sum);
      else *static_cast<int64_t*>(out.data_ptr()) = sum;
    });
  });
  return out;
}

// log(cumsum(exp(x))) along dim, one logaddexp per step. As torch's CPU
// kernel: float32 accumulates in double; equal infinities stay as they are
// (log(e^inf + e^inf) = inf, not NaN), NaN propagates.
at::Tensor k__logcumsumexp(const at::Tensor& self, int64_t dim) {
  const char* op = "_logcumsumexp";
  ScanPlan s = scan_plan(op, self, dim);
  at::Tensor out = at::empty(self.sizes(), self.options());
  dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using Acc = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double, float>;
    launch(out, [s = s.dev(), out = DeviceTensor(out)] {
      const T* x = static_cast<const T*>(s.src.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      auto log_add_exp = [](Acc a, Acc b) -> Acc {
        const Acc lo = std::isnan(b) ? b : std::min(a, b);
        const Acc hi = std::isnan(b) ? b : std::max(a, b);
        if (lo != hi || std::isfinite(lo)) return std::log1p(std::exp(lo - hi)) + hi;
        return a;
      };
      std::vector<Acc> acc(static_cast<size_t>(s.B));
      for (int64_t a = 0; a < s.A; ++a) {
        std::fill(acc.begin(), acc.end(), -std::numeric_limits<Acc>::infinity());
        for (int64_t r = 0; r < s.R; ++r) {
          const int64_t base = (a * s.R + r) * s.B;
          for (int64_t b = 0; b < s.B; ++b) {
            acc[b] = log_add_exp(static_cast<Acc>(static_cast<opmath_t<T>>(x[base + b])), acc[b]);
            o[base + b] = cvt<T>(acc[b]);
          }
        }
      }
    });
  });
  return out;
}

// ---- histc ----
//
// Floating dtypes compute each element's bin as CPU's histc does (the linear
// interpolation of ATen's histogram kernel, in the input dtype, without its
// local search), so the counts equal CPU's bit for bit. Integer dtypes, which
// CPU's histc refuses and CUDA's takes, follow CUDA: the range in int64, the
// bin by integer division. transformers' mixture-of-experts layers count
// tokens per expert this way on every device but CPU and MPS.

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
  FL_CHECK_T(bins > 0, op, self, "bins must be > 0, got ", bins);
  const at::Tensor x = self.contiguous();
  at::Tensor hist = at::empty({bins}, self.options());
  const int64_t n = x.numel();
  // The range checks: on the host when the range comes from min/max alone
  // (outer_edges reads no data then); when it comes from the data (min == max
  // on a non-empty input) they run in the device part, with the same message,
  // and are reported at the next synchronization.
  const std::string self_where = where(self);
  dispatch<kAllNoBool>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    if constexpr (std::is_integral_v<T>) {
      const int64_t mn = min.to<int64_t>(), mx = max.to<int64_t>();
      if (!(mn == mx && n > 0)) {
        const auto [lo, hi] = outer_edges<int64_t, T>(nullptr, 0, mn, mx);
        FL_CHECK_T(lo < hi, op, self, "max must be larger than min");
      }
      launch(hist, [op, n, bins, mn, mx, self_where, x = DeviceTensor(x), hist = DeviceTensor(hist)] {
        const T* data = static_cast<const T*>(x.data_ptr());
        T* out = static_cast<T*>(hist.data_ptr());
        const auto [lo, hi] = outer_edges<int64_t>(data, n, mn, mx);
        FL_CHECK(lo < hi, op, "max must be larger than min", self_where);
        count_integral(data, n, bins, lo, hi, out);
      });
    } else {
      const double mn = min.to<double>(), mx = max.to<double>();
      if (!(mn == mx && n > 0)) {
        const auto [lo, hi] = outer_edges<double, T>(nullptr, 0, mn, mx);
        FL_CHECK_T(std::isfinite(lo) && std::isfinite(hi), op, self, "range of [", lo, ", ", hi,
                   "] is not finite");
        FL_CHECK_T(lo < hi, op, self, "max must be larger than min");
      }
      launch(hist, [op, n, bins, mn, mx, self_where, x = DeviceTensor(x), hist = DeviceTensor(hist)] {
        const T* data = static_cast<const T*>(x.data_ptr());
        T* out = static_cast<T*>(hist.data_ptr());
        const auto [lo, hi] = outer_edges<double>(data, n, mn, mx);
        FL_CHECK(std::isfinite(lo) && std::isfinite(hi), op, "range of [", lo, ", ", hi,
                   "] is not finite", self_where);
        FL_CHECK(lo < hi, op, "max must be larger than min", self_where);
        count_floating(data, n, bins, lo, hi, out);
      });
    }
  });
  return hist;
}

}  // namespace acme::kernels
