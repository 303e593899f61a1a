// acme copies and fills within one device (opspec/copy.yaml): the glue's
// _copy_from calls k_copy_ for copies that change dtype or layout (the source
// already expanded to self's shape, the two not overlapping), and fill_.Scalar
// replaces the glue's fill.
#include "kernels.h"

#include "common/common.h"

namespace acme::kernels {

using namespace ::acme::common;

at::Tensor& k_copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  (void)non_blocking;  // within a device every copy is ordered on the stream
  convert_into("copy_", self, src);
  return self;
}

at::Tensor& k_fill__Scalar(at::Tensor& self, const at::Scalar& value) {
  const char* op = "fill_.Scalar";
  if (self.numel() == 0) return self;
  StridedIter it(self.sizes());
  it.add(self);
  it.build();
  dispatch<kAll>(op, self.device(), self.scalar_type(), [&](auto tag) {
    using T = ACME_T(tag);
    launch(self, [it, x = value.to<T>()] {
      it.parallel_for_each(kGrainCheap, [&](char* const* p, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(T)) {
          T* o = reinterpret_cast<T*>(p[0]);
          for (int64_t i = 0; i < n; ++i) o[i] = x;
        } else {
          for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = x;
        }
      });
    }, ::acme::runtime::ActivityKind::Memset);  // a fill: profiles show it as a memset
  });
  return self;
}

}  // namespace acme::kernels

// The conversions every kernel file uses (common/alloc.h), compiled once here.
namespace acme::common {

namespace {
// The device part of a conversion: out <- in over `it` (out first).
template <class To, class From>
void convert_loop(const StridedIter& it) {
  map1<To, From>(it, [](From v) { return v; });
}
}  // namespace

// Declared in common/alloc.h, which says what it does.
void convert_into(const char* op, const at::Tensor& out, const at::Tensor& in) {
  if (out.numel() == 0) return;
  StridedIter it(out.sizes());
  it.add(out);
  it.add(in);
  it.build();
  dispatch<kAll>(op, out.device(), out.scalar_type(), [&](auto to) {
    using To = ACME_T(to);
    dispatch<kAll>(op, in.device(), in.scalar_type(), [&](auto from) {
      using From = ACME_T(from);
      launch(out, [it] { convert_loop<To, From>(it); });
    });
  });
}

at::Tensor cast(const char* op, const at::Tensor& t, at::ScalarType st) {
  if (!t.defined() || t.scalar_type() == st) return t;
  if (t.device().is_cpu()) {
    // Wrapped Python numbers (0-dim): converted here, element by element as the
    // device converts, without an aten::to (a copy_ the in-place tests count).
    if (t.dim() != 0) return t.to(st);
    at::Tensor out = at::empty({}, t.options().dtype(st));
    dispatch<kAll>(op, out.device(), st, [&](auto to) {
      using To = ACME_T(to);
      dispatch<kAll>(op, t.device(), t.scalar_type(), [&](auto from) {
        using From = ACME_T(from);
        *static_cast<To*>(out.data_ptr()) = cvt<To>(*static_cast<const From*>(t.const_data_ptr()));
      });
    });
    return out;
  }
  at::Tensor out = at::empty(t.sizes(), t.options().dtype(st));
  convert_into(op, out, t);
  return out;
}

}  // namespace acme::common
