// Host parts of arange, linspace, logspace and eye (device part:
// kernels/creation.cl), every dtype their op specs list. Values are computed as
// the CPU does: arange and the float sequences in double where the device has
// cl_khr_fp64 (the CPU's accumulate type), integers in int64.
#include "kernels.h"

#include <ATen/native/RangeUtils.h>
#include <ATen/ops/empty.h>

#include <string>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

const char* storage(at::ScalarType t, const char** store) {
  switch (t) {
    case at::kFloat: *store = "(p)[i] = (float)(v)"; return "float";
    case at::kDouble: *store = "(p)[i] = (double)(v)"; return "double";
    case at::kHalf: *store = "vstore_half_rte((float)(v), (i), (p))"; return "half";
    case at::kBFloat16:
      *store = "{ float f_ = (float)(v); uint b_ = as_uint(f_); (p)[i] = isnan(f_) ? (ushort)0x7fc0 : "
               "(ushort)((b_ + 0x7fffu + ((b_ >> 16) & 1u)) >> 16); }";
      return "ushort";
    case at::kBool: *store = "(p)[i] = (uchar)((v) != 0)"; return "uchar";
    case at::kByte: *store = "(p)[i] = (uchar)(long)(v)"; return "uchar";
    case at::kChar: *store = "(p)[i] = (char)(long)(v)"; return "char";
    case at::kShort: *store = "(p)[i] = (short)(long)(v)"; return "short";
    case at::kInt: *store = "(p)[i] = (int)(long)(v)"; return "int";
    case at::kLong: *store = "(p)[i] = (long)(v)"; return "long";
    default: break;
  }
  TORCH_CHECK(false, "ocl: dtype ", t, " is not computed by the OpenCL kernels");
}

// Fills `out` (resized to `count` elements of `shape`) with sequence `seq`.
at::Tensor& sequence(const char* name, const char* seq, at::Tensor& out, at::IntArrayRef shape, int64_t n,
                     bool float_math, double p0, double p1, double p2, double p3) {
  if (!out.sizes().equals(shape)) out.resize_(shape);
  const int64_t count = out.numel();
  if (count == 0) return out;
  at::Tensor dst = out.is_contiguous() ? out : at::empty(shape, out.options());
  const int device = out.device().index();
  const bool fp64 = runtime::device_has_fp64(device);
  TORCH_CHECK(out.scalar_type() != at::kDouble || fp64, "ocl: ", name, ": float64 needs cl_khr_fp64, which ocl:",
              device, " does not report");
  const std::string ct = !float_math ? "long" : fp64 ? "double" : "float";
  const char* store = nullptr;
  const char* st = storage(out.scalar_type(), &store);
  std::string d = fp64 ? "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" : "";
  d += "#define CT " + ct + "\n#define OUT_T " + st + "\n#define STORE(p, i, v) " + store + "\n#define SEQ_" + seq + "\n";
  auto arg = [&](double v) {
    return ct == "double" ? runtime::value_arg(v)
           : ct == "float" ? runtime::value_arg(static_cast<float>(v))
                           : runtime::value_arg(static_cast<std::int64_t>(v));
  };
  launch_specialised(name, device, "kernels/creation.cl", d, "seq", runtime::Range1D(static_cast<std::size_t>(count)),
                     {runtime::buffer_arg(dst.data_ptr()), runtime::value_arg<std::uint64_t>(count),
                      runtime::value_arg<std::int64_t>(n), arg(p0), arg(p1), arg(p2), arg(p3)});
  if (!dst.is_same(out)) out.copy_(dst);
  return out;
}

}  // namespace

at::Tensor & k_arange_start_out(const at::Scalar & start, const at::Scalar & end, const at::Scalar & step,
                                at::Tensor & out) {
  const at::ScalarType t = out.scalar_type();
  const bool integral = at::isIntegralType(t, true);
  const int64_t size = t == at::kLong ? at::native::compute_arange_size<int64_t>(start, end, step)
                                      : at::native::compute_arange_size<double>(start, end, step);
  if (integral) {
    // int64 math (start and step as integers, as the CPU's integer arange)
    return sequence("arange.start_out", "arange", out, {size}, 0, false, static_cast<double>(start.toLong()),
                    static_cast<double>(step.toLong()), 0, 0);
  }
  return sequence("arange.start_out", "arange", out, {size}, 0, true, start.toDouble(), step.toDouble(), 0, 0);
}

at::Tensor & k_linspace_out(const at::Scalar & start, const at::Scalar & end, int64_t steps, at::Tensor & out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  const double s = start.toDouble(), e = end.toDouble();
  const double step = steps > 1 ? (e - s) / static_cast<double>(steps - 1) : 0.0;
  return sequence("linspace.out", "linspace", out, {steps}, steps, true, s, e, step, 0);
}

at::Tensor & k_logspace_out(const at::Scalar & start, const at::Scalar & end, int64_t steps, double base,
                            at::Tensor & out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  const double s = start.toDouble(), e = end.toDouble();
  const double step = steps > 1 ? (e - s) / static_cast<double>(steps - 1) : 0.0;
  return sequence("logspace.out", "logspace", out, {steps}, steps, true, s, e, step, base);
}

at::Tensor & k_eye_m_out(int64_t n, int64_t m, at::Tensor & out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  return sequence("eye.m_out", "eye", out, {n, m}, m, false, 0, 0, 0, 0);
}

}  // namespace ocl::kernels
