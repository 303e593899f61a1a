// acme comparison, logical and classification kernels; all produce bool.
#include "kernel_lib/common.h"

#include "kernels.h"

#include <cmath>

namespace acme::kernels {
using namespace acme::common;

// Comparisons run in the promoted dtype of both operands (so int vs float
// compares as float) and write bool.
at::Tensor k_eq_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("eq.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x == y; };
  });
}
at::Tensor k_eq_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("eq.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x == y; };
  });
}

at::Tensor k_ne_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("ne.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x != y; };
  });
}
at::Tensor k_ne_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("ne.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x != y; };
  });
}

at::Tensor k_lt_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("lt.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x < y; };
  });
}
at::Tensor k_lt_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("lt.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x < y; };
  });
}

at::Tensor k_le_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("le.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x <= y; };
  });
}
at::Tensor k_le_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("le.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x <= y; };
  });
}

at::Tensor k_gt_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("gt.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x > y; };
  });
}
at::Tensor k_gt_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("gt.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x > y; };
  });
}

at::Tensor k_ge_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kAll, bool>("ge.Tensor", self, other, promote({&self, &other}),
                                   [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x, M y) -> bool { return x >= y; };
  });
}
at::Tensor k_ge_Scalar(const at::Tensor& self, const at::Scalar& other) {
  return unary_kernel<kAll, bool>("ge.Scalar", self, promote({&self}, {&other}),
                                  [&other](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    const M y = other.to<M>();
    return [y](M x) -> bool { return x >= y; };
  });
}

// Logical ops read any dtype as "!= 0" (the conversion to bool) and write bool.
at::Tensor k_logical_and(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kBool, bool>("logical_and", self, other, at::kBool, [](auto) {
    return [](bool x, bool y) -> bool { return x && y; };
  });
}

at::Tensor k_logical_or(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kBool, bool>("logical_or", self, other, at::kBool, [](auto) {
    return [](bool x, bool y) -> bool { return x || y; };
  });
}

at::Tensor k_logical_xor(const at::Tensor& self, const at::Tensor& other) {
  return binary_kernel<kBool, bool>("logical_xor", self, other, at::kBool, [](auto) {
    return [](bool x, bool y) -> bool { return x != y; };
  });
}

at::Tensor k_logical_not(const at::Tensor& self) {
  return unary_kernel<kBool, bool>("logical_not", self, at::kBool, [](auto) {
    return [](bool x) -> bool { return !x; };
  });
}

// Classification: integers are never NaN/inf; they are still checked for
// support (any acme dtype) and produce all-false / all-true.
at::Tensor k_isnan(const at::Tensor& self) {
  return unary_kernel<kAll, bool>("isnan", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> bool {
      if constexpr (std::is_floating_point_v<M>) return std::isnan(x);
      else { (void)x; return false; }
    };
  });
}

at::Tensor k_isinf(const at::Tensor& self) {
  return unary_kernel<kAll, bool>("isinf", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> bool {
      if constexpr (std::is_floating_point_v<M>) return std::isinf(x);
      else { (void)x; return false; }
    };
  });
}

at::Tensor k_isposinf(const at::Tensor& self) {
  return unary_kernel<kAll, bool>("isposinf", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> bool {
      if constexpr (std::is_floating_point_v<M>) return std::isinf(x) && x > M(0);
      else { (void)x; return false; }
    };
  });
}

at::Tensor k_isneginf(const at::Tensor& self) {
  return unary_kernel<kAll, bool>("isneginf", self, self.scalar_type(), [](auto tag) {
    using M = opmath_t<FL_T(tag)>;
    return [](M x) -> bool {
      if constexpr (std::is_floating_point_v<M>) return std::isinf(x) && x < M(0);
      else { (void)x; return false; }
    };
  });
}

// equal: same shape and every element equal (compared in the promoted dtype;
// NaN is never equal).
bool k_equal(const at::Tensor& self, const at::Tensor& other) {
  const char* op = "equal";
  if (self.sizes() != other.sizes()) return false;
  const auto compute = promote({&self, &other});
  const at::Tensor a = cast(op, self, compute);
  const at::Tensor b = cast(op, other, compute);
  StridedIter it(a.sizes());
  it.add(a);
  it.add(b);
  it.build();
  // The answer is a bool on the host: computed on the device into one byte,
  // then read (the host waits, as for CUDA's torch.equal).
  at::Tensor answer = at::empty({}, self.options().dtype(at::kBool));
  dispatch<kAll>(op, self.device(), compute, [&](auto tag) {
    using T = FL_T(tag);
    using M = opmath_t<T>;
    launch(answer, [it, result = answer.data_ptr()] {
      bool same = true;
      it.for_each([&](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n && same; ++i)
          same = static_cast<M>(*reinterpret_cast<const T*>(p[0] + i * s[0])) ==
                 static_cast<M>(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      });
      *static_cast<bool*>(device_view(result)) = same;
    });
  });
  bool same = false;
  read_on_host(op, answer, answer.const_data_ptr(), &same, 1);
  return same;
}

}  // namespace acme::kernels
