// acme random kernels. As on GPUs, the random bits are made on the device by a
// counter-based generator (Philox-4x32-10): element i of an op's output comes
// from the counter i under a key, so the device part needs no state and splits
// over the compute units with the same bits. The key is drawn on the host from
// the device's generator (a CPUGeneratorImpl, Mersenne Twister, bound to the
// acme device): one 64-bit draw per op, so a seed (manual_seed, the rng state)
// reproduces every op's stream. The transforms from bits to distributions are
// acme's own.
#include "kernel_lib/common.h"
#include "kernel_lib/random_key.h"

#include "kernels.h"

#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace acme::kernels {
using namespace acme::common;

namespace {

// The random bits of counter `i` under `key` (device part): four 32-bit words.
struct Bits {
  uint32_t w[4];
  Bits(uint64_t key, uint64_t i) {
    at::Philox4_32 engine(key, i, 0);
    for (auto& x : w) x = engine();
  }
  // Uniform in [0, 1): 53 bits for double (words j, j+1), 24 for float.
  double uniform_double(int j = 0) const {
    const uint64_t r = (static_cast<uint64_t>(w[j]) << 32) | w[j + 1];
    return static_cast<double>(r >> 11) * 0x1.0p-53;
  }
  float uniform_float(int j = 0) const { return static_cast<float>(w[j] >> 8) * 0x1.0p-24f; }
  uint64_t u64() const { return (static_cast<uint64_t>(w[0]) << 32) | w[1]; }
};

// Uniform floats in [0, 1) for counters i = 0, 1, 2, ...: counter i takes word
// i % 4 of the Philox block i / 4, so one Philox call (10 rounds) serves four
// elements instead of one (dropout's mask is most of a GPT step's device time
// otherwise). The value of counter i depends on the key and i only: any split
// over compute units draws the same numbers. Walk counters in increasing order
// for the cache to help.
class UniformFloats {
 public:
  explicit UniformFloats(uint64_t key) : key_(key) {}
  float at(int64_t i) {
    const int64_t block = i >> 2;
    if (block != block_) {
      bits_ = Bits(key_, static_cast<uint64_t>(block));
      block_ = block;
    }
    return bits_.uniform_float(static_cast<int>(i & 3));
  }

 private:
  uint64_t key_;
  int64_t block_ = -1;
  Bits bits_{0, 0};
};

// Device part: writes f(i) to every element of `self`, i its position in the
// iterator's order, split over the compute units (f is pure).
template <class T, class F>
void generate(const StridedIter& it, F f) {
  parallel_for(it.numel(), kGrainHeavy, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    it.for_each_range(begin, end, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t j = 0; j < n; ++j, ++i) *reinterpret_cast<T*>(p[0] + j * s[0]) = f(i);
    });
  });
}

StridedIter iter_of(const at::Tensor& self) {
  StridedIter it(self.sizes());
  it.add(self);
  it.build();
  return it;
}

}  // namespace

at::Tensor& k_uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> generator) {
  const char* op = "uniform_";
  FL_CHECK_T(from <= to, op, self, "uniform_ expects to return a [from, to) range, but found from=",
               from, " > to=", to);
  const uint64_t key = draw_key(op, generator, self);
  if (self.numel() == 0) return self;
  const StridedIter it = iter_of(self);
  dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [it, key, from, to] {
      const double range = to - from;
      generate<T>(it, [=](int64_t i) {
        const Bits bits(key, static_cast<uint64_t>(i));
        if constexpr (std::is_same_v<T, double>) return from + range * bits.uniform_double();
        else {
          // round once to T; never return `to` itself after rounding
          T v = cvt<T>(static_cast<float>(from + range * static_cast<double>(bits.uniform_float())));
          if (static_cast<double>(static_cast<float>(v)) >= to && to > from) v = cvt<T>(static_cast<float>(from));
          return v;
        }
      });
    });
  });
  return self;
}

at::Tensor& k_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  const char* op = "normal_";
  FL_CHECK_T(std >= 0.0, op, self, "normal expects std >= 0.0, but found std ", std);
  const uint64_t key = draw_key(op, generator, self);
  if (self.numel() == 0) return self;
  const StridedIter it = iter_of(self);
  dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [it, key, mean, std] {
      // Box-Muller: the pair of uniforms of counter i / 2 gives the normals of
      // elements i (cosine) and i ^ 1 (sine)
      generate<T>(it, [=](int64_t i) {
        const Bits bits(key, static_cast<uint64_t>(i / 2));
        const double u1 = 1.0 - bits.uniform_double(0);  // (0, 1]: log is finite
        const double u2 = bits.uniform_double(2);
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double z = (i % 2 == 0) ? r * std::cos(2.0 * M_PI * u2) : r * std::sin(2.0 * M_PI * u2);
        return cvt<T>(mean + std * z);
      });
    });
  });
  return self;
}

at::Tensor& k_exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> generator) {
  const char* op = "exponential_";
  FL_CHECK_T(lambd > 0.0, op, self, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  const uint64_t key = draw_key(op, generator, self);
  if (self.numel() == 0) return self;
  const StridedIter it = iter_of(self);
  dispatch<kFloating>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [it, key, lambd] {
      generate<T>(it, [=](int64_t i) {
        const double u = Bits(key, static_cast<uint64_t>(i)).uniform_double();
        double v = -std::log1p(-u) / lambd;
        // keep strictly positive after rounding to T, as torch's exponential_
        T t = cvt<T>(v);
        if (!(static_cast<double>(static_cast<opmath_t<T>>(t)) > 0.0))
          t = cvt<T>(static_cast<double>(std::numeric_limits<opmath_t<T>>::min()));
        return t;
      });
    });
  });
  return self;
}

namespace {
// Largest value random_ draws when `to` is not given: the dtype's max for
// integers, 2^mantissa_digits for floats (every integer below is exact).
int64_t random_upper(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return int64_t(1) << 24;
    case at::kDouble: return int64_t(1) << 53;
    case at::kHalf: return int64_t(1) << 11;
    case at::kBFloat16: return int64_t(1) << 8;
    case at::kLong: return std::numeric_limits<int64_t>::max();
    case at::kInt: return std::numeric_limits<int32_t>::max();
    case at::kShort: return std::numeric_limits<int16_t>::max();
    case at::kChar: return std::numeric_limits<int8_t>::max();
    case at::kByte: return std::numeric_limits<uint8_t>::max();
    case at::kBool: return 1;
    default: return 0;
  }
}

at::Tensor& random_range(const char* op, at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> generator) {
  // [from, to) or [from, upper] when to is None
  const uint64_t range = to.has_value() ? static_cast<uint64_t>(*to - from)
                                        : static_cast<uint64_t>(random_upper(self.scalar_type()) - from) + 1;
  FL_CHECK_T(!to.has_value() || from < *to, op, self,
               "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
  const uint64_t key = draw_key(op, generator, self);
  if (self.numel() == 0) return self;
  const StridedIter it = iter_of(self);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [it, key, from, range] {
      generate<T>(it, [=](int64_t i) {
        const Bits bits(key, static_cast<uint64_t>(i));
        const uint64_t r = range <= (uint64_t(1) << 32) ? static_cast<uint64_t>(bits.w[0]) : bits.u64();
        const int64_t v = from + static_cast<int64_t>(range == 0 ? r : r % range);
        return cvt<T>(v);
      });
    });
  });
  return self;
}
}  // namespace

at::Tensor& k_random__from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                           std::optional<at::Generator> generator) {
  return random_range("random_.from", self, from, to, generator);
}

at::Tensor& k_random__to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return random_range("random_.to", self, 0, to, generator);
}

at::Tensor k_bernoulli_p(const at::Tensor& self, double p, std::optional<at::Generator> generator) {
  const char* op = "bernoulli.p";
  FL_CHECK_T(p >= 0.0 && p <= 1.0, op, self, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  at::Tensor out = at::empty(self.sizes(), self.options());
  const uint64_t key = draw_key(op, generator, self);
  if (out.numel() == 0) return out;
  const StridedIter it = iter_of(out);
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [it, key, p] {
      generate<T>(it, [=](int64_t i) {
        return cvt<T>(Bits(key, static_cast<uint64_t>(i)).uniform_double() < p ? 1 : 0);
      });
    });
  });
  return out;
}

at::Tensor& k_bernoulli__Tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator) {
  const char* op = "bernoulli_.Tensor";
  // probabilities broadcast to self, read as double
  at::Tensor pp = at::empty(self.sizes(), self.options().dtype(at::kDouble));
  {
    auto bs = broadcast_shape(op, {&self, &p});
    FL_CHECK(bs == self.sizes(), op, "p of shape ", p.sizes(), " cannot be broadcast to self of shape ",
               self.sizes());
  }
  convert_into(op, pp, p);
  const uint64_t key = draw_key(op, generator, self);
  if (self.numel() == 0) return self;
  StridedIter it(self.sizes());
  it.add(self);
  it.add(pp);
  it.build();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(self, [op, it, key] {
      bool bad = false;
      int64_t i = 0;
      it.for_each([&](char* const* ptr, const int64_t* s, int64_t n) {
        for (int64_t j = 0; j < n; ++j, ++i) {
          const double pr = *reinterpret_cast<const double*>(ptr[1] + j * s[1]);
          if (!(pr >= 0.0 && pr <= 1.0)) bad = true;
          const double u = Bits(key, static_cast<uint64_t>(i)).uniform_double();
          *reinterpret_cast<T*>(ptr[0] + j * s[0]) = cvt<T>(u < pr ? 1 : 0);
        }
      });
      // a value check on the device: reported by the next synchronize, as CUDA's
      FL_CHECK(!bad, op, "bernoulli_ expects all elements of p to be in [0, 1]");
    });
  });
  return self;
}

at::Tensor k_multinomial(const at::Tensor& self, int64_t num_samples, bool replacement,
                         std::optional<at::Generator> generator) {
  const char* op = "multinomial";
  FL_CHECK_T(self.dim() == 1 || self.dim() == 2, op, self, "prob_dist must be 1 or 2 dim");
  FL_CHECK_T(c10::isFloatingType(self.scalar_type()), op, self,
               "multinomial only supports floating-point dtypes for input");
  FL_CHECK(num_samples > 0, op, "cannot sample n_sample <= 0 samples");
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  const int64_t k = self.size(-1);
  FL_CHECK(replacement || num_samples <= k, op,
             "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  at::Tensor probs = at::empty(self.sizes(), self.options().dtype(at::kDouble));
  convert_into(op, probs, self);
  std::vector<int64_t> shape = self.dim() == 1 ? std::vector<int64_t>{num_samples}
                                               : std::vector<int64_t>{rows, num_samples};
  at::Tensor out = at::empty(shape, self.options().dtype(at::kLong));
  const uint64_t key = draw_key(op, generator, self);
  // The draws depend on the values of every earlier draw of a row (without
  // replacement): one sequential pass per row on the device. Invalid
  // probabilities are found there and reported by the next synchronize.
  launch(out, [op, key, rows, k, num_samples, replacement, probs_addr = probs.const_data_ptr(),
               out_addr = out.data_ptr()] {
  const double* pp = static_cast<const double*>(device_view(probs_addr));
  int64_t* o = static_cast<int64_t*>(device_view(out_addr));
  std::vector<double> w(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    int64_t nonzero = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double v = pp[r * k + j];
      FL_CHECK(std::isfinite(v) && v >= 0, op, "probability tensor contains either `inf`, `nan` or element < 0");
      w[j] = v;
      total += v;
      nonzero += v > 0 ? 1 : 0;
    }
    FL_CHECK(total > 0, op, "invalid multinomial distribution (sum of probabilities <= 0)");
    FL_CHECK(replacement || num_samples <= nonzero, op,
               "invalid multinomial distribution (with replacement=False, not enough non-negative "
               "category to sample)");
    for (int64_t s = 0; s < num_samples; ++s) {
      const double u = Bits(key, static_cast<uint64_t>(r * num_samples + s)).uniform_double() * total;
      double acc = 0;
      int64_t pick = -1;
      for (int64_t j = 0; j < k; ++j) {
        if (w[j] <= 0) continue;
        acc += w[j];
        pick = j;
        if (u < acc) break;
      }
      o[r * num_samples + s] = pick;
      if (!replacement) {
        total -= w[pick];
        w[pick] = 0;
      }
    }
  }
  });
  return out;
}

at::Tensor& k_randperm_generator_out(int64_t n, std::optional<at::Generator> generator, at::Tensor& out) {
  const char* op = "randperm.generator_out";
  FL_CHECK(n >= 0, op, "n must be non-negative, got", n);
  if (out.sizes() != at::IntArrayRef({n})) out.resize_({n});
  const uint64_t key = draw_key(op, generator, out);
  if (n == 0) return out;
  dispatch<kAllNoBool>(op, out.device(), out.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    launch(out, [key, n, addr = out.data_ptr(), st = out.stride(0)] {
      std::vector<int64_t> perm(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) perm[i] = i;
      for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
        const int64_t j = static_cast<int64_t>(Bits(key, static_cast<uint64_t>(i)).u64() %
                                               static_cast<uint64_t>(i + 1));
        std::swap(perm[i], perm[j]);
      }
      T* o = static_cast<T*>(device_view(addr));
      for (int64_t i = 0; i < n; ++i) o[i * st] = cvt<T>(perm[i]);
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> k_native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  const char* op = "native_dropout";
  FL_CHECK_T(p >= 0.0 && p <= 1.0, op, input, "dropout probability has to be between 0 and 1, but got ", p);
  at::Tensor out = at::empty(input.sizes(), input.options());
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  const bool active = train.value_or(false) && p > 0.0;
  const double keep = 1.0 - p;
  const double scale = keep > 0.0 ? 1.0 / keep : 0.0;
  if (out.numel() == 0) return {out, mask};
  StridedIter it(input.sizes());
  it.add(out);
  it.add(mask);
  it.add(input);
  it.build();
  const uint64_t key = active ? draw_key(op, std::nullopt, input) : 0;
  dispatch<kFloating>(op, input.device(), input.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [it, key, active, keep, sc = static_cast<M>(scale)] {
      parallel_for(it.numel(), kGrainHeavy, [&](int64_t begin, int64_t end) {
        int64_t i = begin;
        UniformFloats uniform(key);
        it.for_each_range(begin, end, [&](char* const* ptr, const int64_t* s, int64_t n) {
          for (int64_t j = 0; j < n; ++j, ++i) {
            const M x = static_cast<M>(*reinterpret_cast<const T*>(ptr[2] + j * s[2]));
            // eval mode (or p == 0): identity with an all-true mask
            const bool k = !active || (keep > 0.0 && uniform.at(i) < static_cast<float>(keep));
            *reinterpret_cast<bool*>(ptr[1] + j * s[1]) = k;
            *reinterpret_cast<T*>(ptr[0] + j * s[0]) = cvt<T>(!active ? x : (k ? x * sc : M(0)));
          }
        });
      });
    });
  });
  return {out, mask};
}

at::Tensor k_native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  const char* op = "native_dropout_backward";
  FL_CHECK_T(mask.scalar_type() == at::kBool, op, mask, "Mask should be Bool Scalar Type");
  auto shape = broadcast_shape(op, {&grad_output, &mask});
  at::Tensor out = alloc_output(op, {&grad_output}, shape, grad_output.scalar_type());
  StridedIter it(out.sizes());
  it.add(out);
  it.add(grad_output);
  it.add(mask);
  it.build();
  if (out.numel() == 0) return out;
  dispatch<kFloating>(op, grad_output.device(), grad_output.scalar_type(), [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(out, [it, sc = static_cast<M>(scale)] {
      map2<T, T, bool>(it, [sc](T g, bool m) { return m ? static_cast<M>(g) * sc : M(0); });
    });
  });
  return out;
}

}  // namespace acme::kernels
