// The conversions every kernel uses (alloc.h: convert_into, cast), compiled
// once, with the glue of a backend whose device parts run as host code
// (runtime_primitives: host_kernels), rather than in every kernel file.
#include "common.h"

#include <ATen/ops/empty.h>

namespace FLSDK_BACKEND_NS::common {

namespace {
// The device part of a conversion: out <- in over `it` (out first).
template <class To, class From>
void convert_loop(const StridedIter& it) {
  map1<To, From>(it, [](From v) { return v; });
}
}  // namespace

// Declared in alloc.h, which says what it does.
void convert_into(const char* op, const at::Tensor& out, const at::Tensor& in) {
  if (out.numel() == 0) return;
  StridedIter it(out.sizes());
  it.add(out);
  it.add(in);
  it.build();
  dispatch<kAll>(op, out.device(), out.scalar_type(), [&](auto to) {
    using To = FL_T(to);
    dispatch<kAll>(op, in.device(), in.scalar_type(), [&](auto from) {
      using From = FL_T(from);
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
      using To = FL_T(to);
      dispatch<kAll>(op, t.device(), t.scalar_type(), [&](auto from) {
        using From = FL_T(from);
        *static_cast<To*>(out.data_ptr()) = cvt<To>(*static_cast<const From*>(t.const_data_ptr()));
      });
    });
    return out;
  }
  at::Tensor out = ::FLSDK_BACKEND_NS::empty_device(t.sizes(), st, t.device());
  convert_into(op, out, t);
  return out;
}

}  // namespace FLSDK_BACKEND_NS::common
