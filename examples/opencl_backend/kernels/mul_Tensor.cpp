// Kernel of aten::mul.Tensor on the ocl device. Created once by `flsdk gen`; this file
// is yours and flsdk never rewrites it. Until you delete the marker line below,
// the file is not compiled and mul.Tensor runs on the CPU fallback.
// flsdk:stub k_mul_Tensor
#include "kernels.h"

#include <c10/util/Exception.h>

namespace ocl::kernels {

// mul.Tensor(Tensor self, Tensor other) -> Tensor
at::Tensor k_mul_Tensor(const at::Tensor & self, const at::Tensor & other) {
  TORCH_CHECK(false, "ocl: mul.Tensor: kernel body not written yet");
}

}  // namespace ocl::kernels
