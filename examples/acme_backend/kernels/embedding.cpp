// acme embedding kernels: embedding_dense_backward, _embedding_bag (+ its
// dense backward) and embedding_renorm_. The embedding forward itself is
// index_select (an indexing kernel).
//
// Gradients accumulate rows in the compute type (float for float16/bfloat16)
// and round once into the output.
//
// The host part checks the arguments and allocates the outputs; the index
// values are read (and checked against the table's size) by the device part,
// queued with launch (kernel_lib/device.h): an out-of-range index is reported at
// the next synchronize, as on CUDA.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernel_lib/dense.h"
#include "kernel_lib/device.h"
#include "kernel_lib/iter.h"
#include "kernels.h"

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

enum BagMode : int64_t { kSum = 0, kMean = 1, kMax = 2 };

// Host part: index tensors must be int64 or int32.
void check_index(const char* op, const at::Tensor& t, const char* arg) {
  const auto st = t.scalar_type();
  FL_CHECK_T(st == c10::ScalarType::Long || st == c10::ScalarType::Int, op, t, arg,
               " must be int64 or int32");
}

// Device part: an index tensor (int64 or int32, checked by check_index) as a
// dense int64 vector.
std::vector<int64_t> load_index(const DeviceTensor& t) {
  const auto st = t.scalar_type();
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (v.empty()) return v;
  const auto shape = t.sizes();
  const auto strides = nn::contiguous_strides(shape);
  StridedIter it(shape);
  it.add_strided(reinterpret_cast<char*>(v.data()), shape, strides, sizeof(int64_t));
  it.add(t);
  it.build();
  if (st == c10::ScalarType::Long) {
    map1<int64_t, int64_t>(it, [](int64_t x) { return x; });
  } else {
    map1<int64_t, int32_t>(it, [](int32_t x) { return static_cast<int64_t>(x); });
  }
  return v;
}

std::unordered_map<int64_t, int64_t> index_counts(const std::vector<int64_t>& idx) {
  std::unordered_map<int64_t, int64_t> c;
  for (int64_t i : idx) ++c[i];
  return c;
}

}  // namespace

at::Tensor k_embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                      int64_t num_weights, int64_t padding_idx,
                                      bool scale_grad_by_freq) {
  const char* op = "embedding_dense_backward";
  nn::check_float(op, grad_output);
  FL_CHECK(num_weights >= 0, op, "num_weights must be non-negative, got ", num_weights);
  check_index(op, indices, "indices");
  const int64_t n = indices.numel();
  FL_CHECK_T(grad_output.dim() >= 1, op, grad_output, "grad_output must have an embedding dim");
  const int64_t D = grad_output.size(-1);
  FL_CHECK_T(grad_output.numel() == n * D, op, grad_output, "grad_output ", grad_output.sizes(),
               " does not match indices ", indices.sizes(), " x embedding dim ", D);
  at::Tensor gw = at::empty({num_weights, D}, grad_output.options());
  if (gw.numel() == 0) return gw;
  nn::dispatch_compute(op, grad_output, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gw, [op, n, D, num_weights, padding_idx, scale_grad_by_freq,
                indices = DeviceTensor(indices), grad_output = DeviceTensor(grad_output),
                gw = DeviceTensor(gw)] {
      const auto idx = load_index(indices);
      auto g = nn::load<Acc>(op, grad_output);
      nn::OutBuf<Acc> ob(gw);
      Acc* out = ob.data();
      std::fill(out, out + gw.numel(), Acc(0));
      std::unordered_map<int64_t, int64_t> counts;
      if (scale_grad_by_freq) counts = index_counts(idx);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = idx[i];
        if (k == padding_idx) continue;
        FL_CHECK_INDEX(k >= 0 && k < num_weights, op, "index ", k, " out of range [0, ",
                         num_weights, ")");
        const Acc scale = scale_grad_by_freq ? Acc(1) / static_cast<Acc>(counts[k]) : Acc(1);
        const Acc* src = g.data() + i * D;
        Acc* dst = out + k * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += src[d] * scale;
      }
      ob.finish(op);
    });
  });
  return gw;
}

::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k__embedding_bag(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const ::std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  const char* op = "_embedding_bag";
  (void)scale_grad_by_freq;  // only affects the backward
  (void)sparse;
  nn::check_float(op, weight);
  FL_CHECK_T(weight.dim() == 2, op, weight, "weight must be 2-d, got ", weight.sizes());
  FL_CHECK(mode >= kSum && mode <= kMax, op, "mode must be 0 (sum), 1 (mean) or 2 (max), got ",
             mode);
  FL_CHECK_T(indices.dim() == 1 && offsets.dim() == 1, op, indices,
               "indices and offsets must be 1-d (2-d input is flattened by embedding_bag)");
  const bool has_psw = per_sample_weights.has_value() && per_sample_weights->defined();
  if (has_psw) {
    nn::check_float(op, *per_sample_weights);
    FL_CHECK(mode == kSum, op, "per_sample_weights are only supported for mode 'sum'");
    FL_CHECK_T(per_sample_weights->numel() == indices.numel(), op, *per_sample_weights,
                 "per_sample_weights must have one weight per index");
  }
  const int64_t V = weight.size(0), D = weight.size(1);
  check_index(op, indices, "indices");
  check_index(op, offsets, "offsets");
  const int64_t n = indices.numel();
  const int64_t B = include_last_offset ? std::max<int64_t>(0, offsets.numel() - 1) : offsets.numel();
  // padding_idx < 0 means "none" here (F.embedding_bag already wrapped negatives).
  const auto lopt = weight.options().dtype(c10::ScalarType::Long);
  at::Tensor out = at::empty({B, D}, weight.options());
  // Outputs match PyTorch's observable ones: the sum mode reports zero bag
  // sizes, and no offset2bag at all for a contiguous float32/16/bf16 weight
  // without padding_idx (PyTorch's fast path); otherwise offset2bag holds the
  // bag of every index.
  const bool sum_fast = mode == kSum && padding_idx < 0 && weight.is_contiguous() &&
                        weight.scalar_type() != c10::ScalarType::Double;
  at::Tensor offset2bag = at::empty({sum_fast ? 0 : n}, lopt);
  at::Tensor bag_size = at::empty({B}, lopt);
  at::Tensor max_indices = mode == kMax ? at::empty({B, D}, lopt) : at::empty({B}, lopt);
  nn::dispatch_compute(op, weight, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(out, [op, V, D, n, B, mode, has_psw, padding_idx, weight = DeviceTensor(weight),
                 indices = DeviceTensor(indices), offsets = DeviceTensor(offsets),
                 per_sample_weights = DeviceTensor(per_sample_weights),
                 out = DeviceTensor(out), offset2bag = DeviceTensor(offset2bag),
                 bag_size = DeviceTensor(bag_size), max_indices = DeviceTensor(max_indices)] {
      const auto idx = load_index(indices);
      const auto offs = load_index(offsets);
      // bag b covers indices [start(b), end(b))
      auto start = [&](int64_t b) { return std::min(std::max<int64_t>(offs[b], 0), n); };
      auto end = [&](int64_t b) {
        return b + 1 < static_cast<int64_t>(offs.size()) ? std::min(std::max<int64_t>(offs[b + 1], 0), n) : n;
      };
      // a check on the offsets' values: reported at the next synchronize
      if (B > 0) FL_CHECK(offs[0] == 0, op, "offsets[0] has to be 0, got ", offs[0]);
      auto w = nn::load<Acc>(op, weight);
      nn::Dense<Acc> psw;
      if (has_psw) psw = nn::load<Acc>(op, per_sample_weights);
      std::vector<Acc> o(static_cast<size_t>(B * D), Acc(0));
      std::vector<int64_t> o2b(static_cast<size_t>(n), 0), bs(static_cast<size_t>(B), 0);
      // max mode: an empty bag reports index 0 (as PyTorch); the backward skips
      // it through bag_size
      std::vector<int64_t> mi(static_cast<size_t>(mode == kMax ? B * D : B), 0);
      for (int64_t b = 0; b < B; ++b) {
        Acc* dst = o.data() + b * D;
        int64_t cnt = 0;
        for (int64_t i = start(b); i < end(b); ++i) {
          o2b[i] = b;
          const int64_t k = idx[i];
          FL_CHECK_INDEX(k >= 0 && k < V, op, "index ", k, " out of range [0, ", V, ")");
          if (k == padding_idx) continue;
          const Acc* row = w.data() + k * D;
          if (mode == kMax) {
            for (int64_t d = 0; d < D; ++d) {
              if (cnt == 0 || row[d] > dst[d]) {
                dst[d] = row[d];
                mi[b * D + d] = k;
              }
            }
          } else {
            const Acc s = has_psw ? psw.data()[i] : Acc(1);
            for (int64_t d = 0; d < D; ++d) dst[d] += row[d] * s;
          }
          ++cnt;
        }
        if (mode == kMean && cnt > 0)
          for (int64_t d = 0; d < D; ++d) dst[d] /= static_cast<Acc>(cnt);
        bs[b] = cnt;
        if (mode == kMean) mi[b] = cnt;
      }
      if (out.numel()) nn::store<Acc>(op, o.data(), out);
      auto put_long = [](const std::vector<int64_t>& v, const DeviceTensor& t) {
        if (t.numel()) std::copy(v.begin(), v.begin() + t.numel(), t.data_ptr<int64_t>());
      };
      if (mode == kSum) std::fill(bs.begin(), bs.end(), 0);
      put_long(o2b, offset2bag);
      put_long(bs, bag_size);
      put_long(mi, max_indices);
    });
  });
  return {out, offset2bag, bag_size, max_indices};
}

at::Tensor k__embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                           const at::Tensor& offset2bag,
                                           const at::Tensor& bag_size,
                                           const at::Tensor& maximum_indices, int64_t num_weights,
                                           bool scale_grad_by_freq, int64_t mode,
                                           const ::std::optional<at::Tensor>& per_sample_weights,
                                           int64_t padding_idx) {
  const char* op = "_embedding_bag_dense_backward";
  nn::check_float(op, grad);
  FL_CHECK_T(grad.dim() == 2, op, grad, "grad must be 2-d (bags, dim), got ", grad.sizes());
  FL_CHECK(mode >= kSum && mode <= kMax, op, "mode must be 0, 1 or 2, got ", mode);
  const int64_t B = grad.size(0), D = grad.size(1);
  check_index(op, indices, "indices");
  check_index(op, offset2bag, "offset2bag");
  check_index(op, bag_size, "bag_size");
  const int64_t n = indices.numel();
  FL_CHECK(mode == kMax || offset2bag.numel() == n, op,
             "offset2bag must have one entry per index (", n, "), got ", offset2bag.numel());
  const bool has_psw = per_sample_weights.has_value() && per_sample_weights->defined();
  // padding_idx < 0 means "none" here (F.embedding_bag already wrapped negatives).
  at::Tensor gw = at::empty({num_weights, D}, grad.options());
  if (gw.numel() == 0) return gw;
  if (mode == kMax) {
    check_index(op, maximum_indices, "maximum_indices");
    FL_CHECK(maximum_indices.numel() == B * D, op, "maximum_indices must be (bags, dim)");
  }
  nn::dispatch_compute(op, grad, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(gw, [op, B, D, n, num_weights, scale_grad_by_freq, mode, has_psw, padding_idx,
                grad = DeviceTensor(grad), indices = DeviceTensor(indices),
                offset2bag = DeviceTensor(offset2bag), bag_size = DeviceTensor(bag_size),
                maximum_indices = DeviceTensor(maximum_indices),
                per_sample_weights = DeviceTensor(per_sample_weights), gw = DeviceTensor(gw)] {
      const auto idx = load_index(indices);
      const auto o2b = load_index(offset2bag);
      const auto bs = load_index(bag_size);
      auto g = nn::load<Acc>(op, grad);
      nn::Dense<Acc> psw;
      if (has_psw) psw = nn::load<Acc>(op, per_sample_weights);
      nn::OutBuf<Acc> ob(gw);
      Acc* out = ob.data();
      std::fill(out, out + gw.numel(), Acc(0));
      std::unordered_map<int64_t, int64_t> counts;
      if (scale_grad_by_freq) counts = index_counts(idx);
      auto freq = [&](int64_t k) {
        return scale_grad_by_freq ? Acc(1) / static_cast<Acc>(counts[k]) : Acc(1);
      };
      if (mode == kMax) {
        const auto mi = load_index(maximum_indices);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t d = 0; d < D; ++d) {
            if (b < static_cast<int64_t>(bs.size()) && bs[b] == 0) continue;  // empty bag
            const int64_t k = mi[b * D + d];
            if (k < 0 || k == padding_idx) continue;
            FL_CHECK_INDEX(k < num_weights, op, "index ", k, " out of range");
            out[k * D + d] += g.data()[b * D + d] * freq(k);
          }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = idx[i];
          if (k == padding_idx) continue;
          FL_CHECK_INDEX(k >= 0 && k < num_weights, op, "index ", k, " out of range [0, ",
                           num_weights, ")");
          const int64_t b = o2b[i];
          FL_CHECK_INDEX(b >= 0 && b < B, op, "offset2bag entry ", b, " out of range");
          Acc s = freq(k);
          if (mode == kMean) {
            const int64_t c = b < static_cast<int64_t>(bs.size()) ? bs[b] : 0;
            if (c == 0) continue;
            s /= static_cast<Acc>(c);
          }
          if (has_psw) s *= psw.data()[i];
          const Acc* src = g.data() + b * D;
          Acc* dst = out + k * D;
          for (int64_t d = 0; d < D; ++d) dst[d] += src[d] * s;
        }
      }
      ob.finish(op);
    });
  });
  return gw;
}

at::Tensor& k_embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm,
                                double norm_type) {
  const char* op = "embedding_renorm_";
  nn::check_float(op, self);
  FL_CHECK_T(self.dim() == 2, op, self, "self must be 2-d, got ", self.sizes());
  check_index(op, indices, "indices");
  const int64_t V = self.size(0), D = self.size(1);
  if (indices.numel() == 0 || self.numel() == 0) return self;
  nn::dispatch_compute(op, self, [&](auto tag) {
    using Acc = FL_T(tag);
    launch(self, [op, V, D, max_norm, norm_type, indices = DeviceTensor(indices),
                  self = DeviceTensor(self)] {
      const auto idx = load_index(indices);
      auto w = nn::load<Acc>(op, self);
      std::vector<Acc> rows(w.data(), w.data() + self.numel());
      std::unordered_set<int64_t> seen;
      for (int64_t k : idx) {
        FL_CHECK_INDEX(k >= 0 && k < V, op, "index ", k, " out of range [0, ", V, ")");
        if (!seen.insert(k).second) continue;
        Acc* r = rows.data() + k * D;
        double norm = 0;
        if (norm_type == 1) {
          for (int64_t d = 0; d < D; ++d) norm += std::abs(r[d]);
        } else if (norm_type == 2) {
          for (int64_t d = 0; d < D; ++d) norm += static_cast<double>(r[d]) * r[d];
          norm = std::sqrt(norm);
        } else if (std::isinf(norm_type)) {
          for (int64_t d = 0; d < D; ++d) norm = std::max(norm, static_cast<double>(std::abs(r[d])));
        } else {
          for (int64_t d = 0; d < D; ++d) norm += std::pow(std::abs(static_cast<double>(r[d])), norm_type);
          norm = std::pow(norm, 1.0 / norm_type);
        }
        if (norm > max_norm) {
          const Acc scale = static_cast<Acc>(max_norm / (norm + 1e-7));
          for (int64_t d = 0; d < D; ++d) r[d] *= scale;
        }
      }
      nn::store<Acc>(op, rows.data(), self);
    });
  });
  return self;
}

// What F.embedding_bag calls when no gradient is needed: the same bags.
::std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k__embedding_bag_forward_only(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse,
    const ::std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  return k__embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx);
}

}  // namespace acme::kernels
