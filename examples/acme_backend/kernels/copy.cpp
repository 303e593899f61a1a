// acme copies and fills within one device (opspec/copy.yaml): the glue's
// _copy_from calls k_copy_ for copies that change dtype or layout (the source
// already expanded to self's shape, the two not overlapping), and fill_.Scalar
// replaces the glue's fill.
#include "kernels.h"

#include "kernel_lib/common.h"

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
    using T = FL_T(tag);
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
