// Host part of histc (device part: kernels/histc.cl) for float32, float64 and
// the integer dtypes (device.yaml; float16/bfloat16 run on the CPU fallback).
// Floating inputs are binned as CPU's histc bins them, integers as CUDA's: the
// range in int64, the bin by integer division (CPU's histc refuses integers;
// transformers' mixture-of-experts routers count tokens per expert this way on
// every device but CPU and MPS). When min == max the range is the data's own:
// like CUDA's histc, that reads the data's min and max back to the host (one
// wait), so a NaN or an empty range is reported here, naming the op.
#include "kernels.h"

#include <ATen/ops/aminmax.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <limits>
#include <string>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

const char* element_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float";
    case at::kDouble: return "double";
    case at::kLong: return "long";
    case at::kInt: return "int";
    case at::kShort: return "short";
    case at::kChar: return "char";
    case at::kByte: return "uchar";
    default: return nullptr;
  }
}

// The histogram's outer edges as torch.histc defines them: min == max (the
// default 0, 0) on a non-empty input means the data's range; an empty range
// widens by one on each side.
template <class Edge>
std::pair<Edge, Edge> outer_edges(const at::Tensor& x, Edge lo, Edge hi) {
  if (lo == hi && x.numel() > 0) {
    const auto [mn, mx] = at::aminmax(x);
    lo = mn.item<Edge>();
    hi = mx.item<Edge>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  return {lo, hi};
}

}  // namespace

// histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor
at::Tensor k_histc(const at::Tensor & self, int64_t bins, const at::Scalar & min, const at::Scalar & max) {
  const char* op = "histc";
  const int device = self.device().index();
  const at::ScalarType dtype = self.scalar_type();
  const char* type = element_type(dtype);
  TORCH_CHECK(type, "ocl: histc: dtype ", dtype, " is not counted by the OpenCL kernel (", self.device(), ")");
  TORCH_CHECK(bins > 0, "ocl: histc: bins must be > 0, got ", bins, " (", self.device(), ", ", dtype, ")");
  const at::Tensor x = self.contiguous();
  const int64_t n = x.numel();
  TORCH_CHECK(n < std::numeric_limits<std::int32_t>::max(), "ocl: histc: ", n,
              " elements: the OpenCL kernel counts in 32 bits (at most 2^31 - 1 elements; ", self.device(), ", ",
              dtype, ")");
  at::Tensor counts = at::zeros({bins}, self.options().dtype(at::kInt));
  std::string defines = "#define T " + std::string(type) + "\n";
  runtime::KernelArg lo_arg, hi_arg;
  if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    const auto [lo, hi] = outer_edges<int64_t>(x, min.to<int64_t>(), max.to<int64_t>());
    TORCH_CHECK(lo < hi, "ocl: histc: max must be larger than min (", self.device(), ", ", dtype, ")");
    defines += "#define HIST_INT 1\n";
    lo_arg = runtime::value_arg<std::int64_t>(lo);
    hi_arg = runtime::value_arg<std::int64_t>(hi);
  } else {
    const auto [lo, hi] = outer_edges<double>(x, min.to<double>(), max.to<double>());
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "ocl: histc: range of [", lo, ", ", hi,
                "] is not finite (", self.device(), ", ", dtype, ")");
    TORCH_CHECK(lo < hi, "ocl: histc: max must be larger than min (", self.device(), ", ", dtype, ")");
    if (dtype == at::kDouble) {
      TORCH_CHECK(runtime::device_has_fp64(device), "ocl: histc: float64 needs cl_khr_fp64, which ocl:", device,
                  " does not report");
      defines = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + defines;
      lo_arg = runtime::value_arg(lo);
      hi_arg = runtime::value_arg(hi);
    } else {  // CPU's edges are a linspace in the input dtype: its ends are float(lo), float(hi)
      lo_arg = runtime::value_arg(static_cast<float>(lo));
      hi_arg = runtime::value_arg(static_cast<float>(hi));
    }
  }
  if (n > 0) {
    launch_specialised(op, device, "kernels/histc.cl", defines, "histc_count",
                       runtime::Range1D(static_cast<std::size_t>(n)),
                       {runtime::buffer_arg(counts.data_ptr()), runtime::buffer_arg(x.const_data_ptr()),
                        runtime::value_arg<std::uint64_t>(n), runtime::value_arg<std::int64_t>(bins), lo_arg,
                        hi_arg});
  }
  return counts.to(dtype);
}

}  // namespace ocl::kernels
