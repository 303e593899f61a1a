// Kernel of aten::add.Tensor on the ocl device. Created once by `flsdk gen`; this file
// is yours and flsdk never rewrites it. Until you delete the marker line below,
// the file is not compiled and add.Tensor runs on the CPU fallback.
// flsdk:stub k_add_Tensor
#include "kernels.h"

#include <c10/util/Exception.h>

namespace ocl::kernels {

// add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
at::Tensor k_add_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  TORCH_CHECK(false, "ocl: add.Tensor: kernel body not written yet");
}

}  // namespace ocl::kernels
