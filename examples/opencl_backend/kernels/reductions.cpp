// Host parts of the reduce op spec family (device part: the template
// kernels/reduction.cl, specialised per op and dtype by defines). The reduced
// dims are moved last and made contiguous on the device (the glue's copy,
// through runtime copy_strided), so every kernel folds rows of a
// [kept, reduced] matrix; scans run along rows of [others, dim].
#include "kernels.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

struct Type {
  const char* storage;
  const char* load;   // LOAD(p, o) as CT
  const char* store;  // STORE(p, i, v)
};

Type type_of(const char* op, at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {"float", "((CT)(p)[o])", "(p)[i] = (float)(v)"};
    case at::kDouble: return {"double", "((CT)(p)[o])", "(p)[i] = (double)(v)"};
    case at::kHalf: return {"half", "((CT)vload_half((o), (p)))", "vstore_half_rte((float)(v), (i), (p))"};
    case at::kBFloat16:
      return {"ushort", "((CT)as_float(((uint)(p)[o]) << 16))",
              "{ float f_ = (float)(v); uint b_ = as_uint(f_); (p)[i] = isnan(f_) ? (ushort)0x7fc0 : "
              "(ushort)((b_ + 0x7fffu + ((b_ >> 16) & 1u)) >> 16); }"};
    case at::kBool: return {"uchar", "((CT)((p)[o] != 0))", "(p)[i] = (uchar)((v) != 0)"};
    case at::kByte: return {"uchar", "((CT)(p)[o])", "(p)[i] = (uchar)(ulong)(long)(v)"};
    case at::kChar: return {"char", "((CT)(p)[o])", "(p)[i] = (char)(uchar)(ulong)(long)(v)"};
    case at::kShort: return {"short", "((CT)(p)[o])", "(p)[i] = (short)(ushort)(ulong)(long)(v)"};
    case at::kInt: return {"int", "((CT)(p)[o])", "(p)[i] = (int)(uint)(ulong)(long)(v)"};
    case at::kLong: return {"long", "((CT)(p)[o])", "(p)[i] = (long)(v)"};
    default: break;
  }
  TORCH_CHECK(false, "ocl: ", op, ": dtype ", t, " is not computed by the OpenCL kernels");
}

const char* ct_of(at::ScalarType t) {
  if (t == at::kDouble) return "double";
  if (at::isFloatingType(t)) return "float";
  return "long";
}

struct Spec {
  const char* name;          // for errors: the op
  const char* red;           // RED_<red>
  at::ScalarType out;        // first output's dtype
  std::optional<at::ScalarType> out2;  // second output (index or mean)
  std::string defines;       // op switches
  double p0 = 0;
};

// The dims of `self` a reduction folds: `dims` (none or empty: all).
std::vector<bool> reduced_dims(const char* op, const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t nd = self.dim();
  std::vector<bool> reduced(static_cast<std::size_t>(std::max<int64_t>(nd, 1)), false);
  if (!dims || dims->empty()) {
    std::fill(reduced.begin(), reduced.end(), true);
    return reduced;
  }
  for (int64_t d : *dims) {
    const int64_t w = c10::maybe_wrap_dim(d, std::max<int64_t>(nd, 1));
    TORCH_CHECK(!reduced[w], op, ": dim ", w, " appears multiple times in the list of dims");
    reduced[w] = true;
  }
  return reduced;
}

// Folds the `reduced` dims of `self` with spec.red; returns the outputs (second
// one undefined unless spec.out2).
std::pair<at::Tensor, at::Tensor> reduce(const Spec& spec, const at::Tensor& self, const std::vector<bool>& reduced,
                                         bool keepdim, bool nonempty = false) {
  const int64_t nd = self.dim();
  std::vector<int64_t> perm, out_shape;
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) {
      perm.push_back(d);
      rows *= self.size(d);
      out_shape.push_back(self.size(d));
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) {
      perm.push_back(d);
      cols *= self.size(d);
      TORCH_CHECK(!nonempty || self.size(d) != 0, spec.name, "(): Expected reduction dim ", d,
                  " to have non-zero size.");
    }
  TORCH_CHECK(!nonempty || nd > 0 || self.numel() > 0, spec.name, "(): Expected reduction dim to be specified for "
              "input.numel() == 0.");
  at::Tensor out = at::empty(out_shape, self.options().dtype(spec.out));
  at::Tensor out2 = spec.out2 ? at::empty(out_shape, self.options().dtype(*spec.out2)) : at::Tensor();
  if (rows == 0) return {out, out2};
  const at::Tensor in = (nd ? self.permute(perm) : self).contiguous();
  const int device = self.device().index();
  const std::string ct = ct_of(self.scalar_type() == at::kBool ? at::kLong : self.scalar_type());
  TORCH_CHECK(ct != "double" || runtime::device_has_fp64(device), "ocl: ", spec.name,
              ": float64 needs cl_khr_fp64, which ocl:", device, " does not report");
  std::string d;
  if (ct == "double" || spec.out == at::kDouble) d += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  d += "#define CT " + ct + "\n#define CT_FLOAT " + (ct == "long" ? "0" : "1") + "\n";
  d += ct == "float" ? "#define K(x) x##f\n" : ct == "double" ? "#define K(x) x\n" : "#define K(x) ((long)(x))\n";
  const Type in_t = type_of(spec.name, self.scalar_type());
  const Type out_t = type_of(spec.name, spec.out);
  d += std::string("#define IN_T ") + in_t.storage + "\n#define LOAD(p, o) " + in_t.load + "\n";
  d += std::string("#define OUT_T ") + out_t.storage + "\n#define STORE(p, i, v) " + out_t.store + "\n";
  if (spec.out2) {
    const Type o2 = type_of(spec.name, *spec.out2);
    d += std::string("#define OUT2_T ") + o2.storage + "\n#define STORE2(p, i, v) " + o2.store + "\n";
  }
  d += std::string("#define RED_") + spec.red + "\n" + spec.defines;
  const std::string& text = specialised_source("kernels/reduction.cl", d);
  const runtime::KernelArg p0 = ct == "float" ? runtime::value_arg(static_cast<float>(spec.p0))
                                : ct == "double" ? runtime::value_arg(spec.p0)
                                                 : runtime::value_arg(static_cast<std::int64_t>(spec.p0));
  runtime::Range range;
  constexpr std::size_t kGroup = 64;  // REDUCE_GROUP of reduction.cl
  range.global[0] = static_cast<std::size_t>(rows) * kGroup;
  range.local[0] = kGroup;
  check_status(runtime::launch_generated_kernel(
                   device, launch_stream(device), std::string("kernels/reduction.cl[") + spec.red + "]\n" + d, text,
                   "reduce_rows", range,
                   {runtime::buffer_arg(out.data_ptr()), runtime::buffer_arg(out2.defined() ? out2.data_ptr() : nullptr),
                    runtime::buffer_arg(in.const_data_ptr()), runtime::value_arg<std::uint64_t>(rows),
                    runtime::value_arg<std::uint64_t>(cols), p0}),
               spec.name);
  return {out, out2};
}

at::ScalarType sum_type(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}

// input converted to `dtype` first (on the device), as torch's dtype= does
at::Tensor as_type(const at::Tensor& self, at::ScalarType t) { return self.scalar_type() == t ? self : self.to(t); }

at::Tensor sum_like(const char* name, const char* red, const at::Tensor& self, at::OptionalIntArrayRef dim,
                    bool keepdim, std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = sum_type(self, dtype);
  Spec s{name, red};
  s.out = t;
  return reduce(s, as_type(self, t), reduced_dims(name, self, dim), keepdim).first;
}

at::Tensor extremum(const char* name, const char* red, const at::Tensor& self, at::OptionalIntArrayRef dim,
                    bool keepdim) {
  Spec s{name, red};
  s.out = self.scalar_type();
  return reduce(s, self, reduced_dims(name, self, dim), keepdim, true).first;
}

std::tuple<at::Tensor, at::Tensor> extremum_dim(const char* name, const char* red, const at::Tensor& self,
                                                int64_t dim, bool keepdim) {
  Spec s{name, red};
  s.out = self.scalar_type();
  s.out2 = at::kLong;
  const int64_t d = dim;
  auto [v, i] = reduce(s, self, reduced_dims(name, self, at::IntArrayRef(d)), keepdim, true);
  return {v, i};
}

at::Tensor arg_extremum(const char* name, const char* red, const at::Tensor& self, std::optional<int64_t> dim,
                        bool keepdim) {
  Spec s{name, red};
  s.out = at::kLong;
  if (!dim) {
    at::Tensor r = reduce(s, self.reshape({-1}), {true}, false, true).first;
    if (keepdim) r = r.reshape(std::vector<int64_t>(static_cast<std::size_t>(self.dim()), 1));
    return r;
  }
  const int64_t d = *dim;
  return reduce(s, self, reduced_dims(name, self, at::IntArrayRef(d)), keepdim, true).first;
}

at::Tensor bool_fold(const char* name, const char* red, const at::Tensor& self, at::OptionalIntArrayRef dim,
                     bool keepdim) {
  Spec s{name, red};
  s.out = self.scalar_type() == at::kByte ? at::kByte : at::kBool;
  return reduce(s, self, reduced_dims(name, self, dim), keepdim).first;
}

std::pair<at::Tensor, at::Tensor> var_impl(const char* name, const at::Tensor& self, at::OptionalIntArrayRef dim,
                                           const std::optional<at::Scalar>& correction, bool keepdim, bool std_dev,
                                           bool with_mean) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), name, ": expected a floating tensor, got ", self.scalar_type());
  Spec s{name, "var"};
  s.out = self.scalar_type();
  if (with_mean) s.out2 = self.scalar_type();
  s.p0 = correction ? correction->toDouble() : 1.0;
  s.defines = std::string("#define STD ") + (std_dev ? "1" : "0") + "\n";
  return reduce(s, self, reduced_dims(name, self, dim), keepdim);
}

at::Tensor norm_impl(const char* name, const at::Tensor& self, double ord, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  const at::Tensor in = dtype ? as_type(self, *dtype) : self;
  TORCH_CHECK(at::isFloatingType(in.scalar_type()), name, ": expected a floating tensor, got ", in.scalar_type());
  Spec s{name, "norm"};
  s.out = in.scalar_type();
  s.p0 = ord;
  const int kind = std::isinf(ord) ? (ord > 0 ? 1 : 2) : ord == 0 ? 3 : ord == 1 ? 4 : ord == 2 ? 5 : 0;
  if (kind == 2 || kind == 1) {
    // an empty reduction has no max/min of |x|, as on the CPU
    for (int64_t d = 0; d < in.dim(); ++d) {
      const auto r = reduced_dims(name, in, dim);
      TORCH_CHECK(!r[d] || in.size(d) != 0, name, ": Expected reduction dim ", d, " to have non-zero size.");
    }
  }
  s.defines = "#define NORM_KIND " + std::to_string(kind) + "\n";
  return reduce(s, in, reduced_dims(name, in, dim), keepdim).first;
}

at::Tensor scan(const char* name, const char* red, const at::Tensor& self, int64_t dim, at::ScalarType out,
                at::Tensor* indices = nullptr) {
  const int64_t nd = self.dim();
  const int64_t d = c10::maybe_wrap_dim(dim, std::max<int64_t>(nd, 1));
  if (nd == 0) {
    at::Tensor v = scan(name, red, self.reshape({1}), 0, out, indices);
    if (indices) *indices = indices->reshape({});
    return v.reshape({});
  }
  // move dim last: a [others, dim] matrix whose rows are scanned
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < nd; ++k)
    if (k != d) perm.push_back(k);
  perm.push_back(d);
  const at::Tensor in = self.permute(perm).contiguous();
  const int64_t cols = self.size(d);
  const int64_t rows = cols ? self.numel() / cols : 0;
  at::Tensor o = at::empty(in.sizes(), self.options().dtype(out));
  at::Tensor oi = indices ? at::empty(in.sizes(), self.options().dtype(at::kLong)) : at::Tensor();
  std::vector<int64_t> inverse(static_cast<std::size_t>(nd));
  for (int64_t k = 0; k < nd; ++k) inverse[perm[k]] = k;
  auto back = [&](const at::Tensor& t) { return t.permute(inverse).contiguous(); };
  if (rows == 0 || cols == 0) {
    if (indices) *indices = back(oi);
    return back(o);
  }
  const int device = self.device().index();
  const std::string ct = ct_of(self.scalar_type() == at::kBool ? at::kLong : self.scalar_type());
  TORCH_CHECK(ct != "double" || runtime::device_has_fp64(device), "ocl: ", name,
              ": float64 needs cl_khr_fp64, which ocl:", device, " does not report");
  const bool fp64 = runtime::device_has_fp64(device);  // scans accumulate floats in double, as the CPU
  std::string dd;
  if (ct == "double" || out == at::kDouble || (ct == "float" && fp64)) dd += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  dd += "#define CT " + ct + "\n#define CT_FLOAT " + (ct == "long" ? "0" : "1") + "\n";
  dd += ct == "float" ? "#define K(x) x##f\n" : ct == "double" ? "#define K(x) x\n" : "#define K(x) ((long)(x))\n";
  const Type in_t = type_of(name, self.scalar_type());
  const Type out_t = type_of(name, out);
  dd += std::string("#define IN_T ") + in_t.storage + "\n#define LOAD(p, o) " + in_t.load + "\n";
  dd += std::string("#define OUT_T ") + out_t.storage + "\n#define STORE(p, i, v) " + out_t.store + "\n";
  dd += std::string("#define SCAN_T ") + (ct == "long" ? "long" : fp64 ? "double" : "float") + "\n";
  dd += std::string("#define SCAN_") + red + "\n";
  const std::string& text = specialised_source("kernels/reduction.cl", dd);
  const runtime::KernelArg p0 = ct == "float" ? runtime::value_arg(0.0f)
                                : ct == "double" ? runtime::value_arg(0.0)
                                                 : runtime::value_arg<std::int64_t>(0);
  check_status(runtime::launch_generated_kernel(
                   device, launch_stream(device), std::string("kernels/reduction.cl[") + red + "]\n" + dd, text,
                   "scan_rows", runtime::Range1D(static_cast<std::size_t>(rows)),
                   {runtime::buffer_arg(o.data_ptr()), runtime::buffer_arg(oi.defined() ? oi.data_ptr() : nullptr),
                    runtime::buffer_arg(in.const_data_ptr()), runtime::value_arg<std::uint64_t>(rows),
                    runtime::value_arg<std::uint64_t>(cols), p0}),
               name);
  if (indices) *indices = back(oi);
  return back(o);
}

}  // namespace

at::Tensor k_sum_dim_IntList(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim,
                             ::std::optional<at::ScalarType> dtype) {
  return sum_like("sum.dim_IntList", "sum", self, dim, keepdim, dtype);
}
at::Tensor k_sum(const at::Tensor & self, ::std::optional<at::ScalarType> dtype) {
  return sum_like("sum", "sum", self, std::nullopt, false, dtype);
}
at::Tensor k_nansum(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim,
                    ::std::optional<at::ScalarType> dtype) {
  return sum_like("nansum", "nansum", self, dim, keepdim, dtype);
}
at::Tensor k_mean_dim(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim,
                      ::std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = dtype ? *dtype : self.scalar_type();
  TORCH_CHECK(at::isFloatingType(t), "mean(): could not infer output dtype. Input dtype must be either a floating "
              "point or complex dtype. Got: ", t);
  Spec s{"mean.dim", "mean"};
  s.out = t;
  return reduce(s, as_type(self, t), reduced_dims("mean.dim", self, dim), keepdim).first;
}
at::Tensor k_mean(const at::Tensor & self, ::std::optional<at::ScalarType> dtype) {
  return k_mean_dim(self, std::nullopt, false, dtype);
}
at::Tensor k_prod(const at::Tensor & self, ::std::optional<at::ScalarType> dtype) {
  return sum_like("prod", "prod", self, std::nullopt, false, dtype);
}
at::Tensor k_prod_dim_int(const at::Tensor & self, int64_t dim, bool keepdim, ::std::optional<at::ScalarType> dtype) {
  const int64_t d = dim;
  return sum_like("prod.dim_int", "prod", self, at::IntArrayRef(d), keepdim, dtype);
}
::std::tuple<at::Tensor,at::Tensor> k_max_dim(const at::Tensor & self, int64_t dim, bool keepdim) {
  return extremum_dim("max.dim", "max", self, dim, keepdim);
}
::std::tuple<at::Tensor,at::Tensor> k_min_dim(const at::Tensor & self, int64_t dim, bool keepdim) {
  return extremum_dim("min.dim", "min", self, dim, keepdim);
}
at::Tensor k_max(const at::Tensor & self) { return extremum("max", "max", self, std::nullopt, false); }
at::Tensor k_min(const at::Tensor & self) { return extremum("min", "min", self, std::nullopt, false); }
at::Tensor k_amax(const at::Tensor & self, at::IntArrayRef dim, bool keepdim) {
  return extremum("amax", "max", self, dim, keepdim);
}
at::Tensor k_amin(const at::Tensor & self, at::IntArrayRef dim, bool keepdim) {
  return extremum("amin", "min", self, dim, keepdim);
}
at::Tensor k_argmax(const at::Tensor & self, ::std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum("argmax", "argmax", self, dim, keepdim);
}
at::Tensor k_argmin(const at::Tensor & self, ::std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum("argmin", "argmin", self, dim, keepdim);
}
::std::tuple<at::Tensor,at::Tensor> k_aminmax(const at::Tensor & self, ::std::optional<int64_t> dim, bool keepdim) {
  if (!dim) {
    at::Tensor lo = extremum("aminmax", "min", self, std::nullopt, false);
    at::Tensor hi = extremum("aminmax", "max", self, std::nullopt, false);
    if (keepdim) {
      const std::vector<int64_t> ones(static_cast<std::size_t>(self.dim()), 1);
      return {lo.reshape(ones), hi.reshape(ones)};
    }
    return {lo, hi};
  }
  const int64_t d = *dim;
  return {extremum("aminmax", "min", self, at::IntArrayRef(d), keepdim),
          extremum("aminmax", "max", self, at::IntArrayRef(d), keepdim)};
}
at::Tensor k_all_dim(const at::Tensor & self, int64_t dim, bool keepdim) {
  const int64_t d = dim;
  return bool_fold("all.dim", "all", self, at::IntArrayRef(d), keepdim);
}
at::Tensor k_all(const at::Tensor & self) { return bool_fold("all", "all", self, std::nullopt, false); }
at::Tensor k_any_dim(const at::Tensor & self, int64_t dim, bool keepdim) {
  const int64_t d = dim;
  return bool_fold("any.dim", "any", self, at::IntArrayRef(d), keepdim);
}
at::Tensor k_any(const at::Tensor & self) { return bool_fold("any", "any", self, std::nullopt, false); }
at::Tensor k_count_nonzero_dim_IntList(const at::Tensor & self, at::IntArrayRef dim) {
  Spec s{"count_nonzero.dim_IntList", "count_nonzero"};
  s.out = at::kLong;
  return reduce(s, self, reduced_dims(s.name, self, dim), false).first;
}
at::Tensor k_std_correction(const at::Tensor & self, at::OptionalIntArrayRef dim,
                            const ::std::optional<at::Scalar> & correction, bool keepdim) {
  return var_impl("std.correction", self, dim, correction, keepdim, true, false).first;
}
at::Tensor k_var_correction(const at::Tensor & self, at::OptionalIntArrayRef dim,
                            const ::std::optional<at::Scalar> & correction, bool keepdim) {
  return var_impl("var.correction", self, dim, correction, keepdim, false, false).first;
}
::std::tuple<at::Tensor,at::Tensor> k_var_mean_correction(const at::Tensor & self, at::OptionalIntArrayRef dim,
                                                          const ::std::optional<at::Scalar> & correction,
                                                          bool keepdim) {
  auto [v, m] = var_impl("var_mean.correction", self, dim, correction, keepdim, false, true);
  return {v, m};
}
::std::tuple<at::Tensor,at::Tensor> k_std_mean_correction(const at::Tensor & self, at::OptionalIntArrayRef dim,
                                                          const ::std::optional<at::Scalar> & correction,
                                                          bool keepdim) {
  auto [v, m] = var_impl("std_mean.correction", self, dim, correction, keepdim, true, true);
  return {v, m};
}
at::Tensor k_logsumexp(const at::Tensor & self, at::IntArrayRef dim, bool keepdim) {
  const at::Tensor in = at::isIntegralType(self.scalar_type(), true)
                            ? self.to(at::typeMetaToScalarType(at::get_default_dtype())) : self;
  Spec s{"logsumexp", "logsumexp"};
  s.out = in.scalar_type();
  return reduce(s, in, reduced_dims(s.name, in, dim), keepdim).first;
}
at::Tensor k_linalg_vector_norm(const at::Tensor & self, const at::Scalar & ord, at::OptionalIntArrayRef dim,
                                bool keepdim, ::std::optional<at::ScalarType> dtype) {
  return norm_impl("linalg_vector_norm", self, ord.toDouble(), dim, keepdim, dtype);
}
at::Tensor k_norm_ScalarOpt_dim(const at::Tensor & self, const ::std::optional<at::Scalar> & p, at::IntArrayRef dim,
                                bool keepdim) {
  return norm_impl("norm.ScalarOpt_dim", self, p ? p->toDouble() : 2.0, dim, keepdim, std::nullopt);
}
at::Tensor k_cumsum(const at::Tensor & self, int64_t dim, ::std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = sum_type(self, dtype);
  return scan("cumsum", "cumsum", as_type(self, t), dim, t);
}
at::Tensor k_cumprod(const at::Tensor & self, int64_t dim, ::std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = sum_type(self, dtype);
  return scan("cumprod", "cumprod", as_type(self, t), dim, t);
}
::std::tuple<at::Tensor,at::Tensor> k_cummax(const at::Tensor & self, int64_t dim) {
  at::Tensor idx;
  at::Tensor v = scan("cummax", "cummax", self, dim, self.scalar_type(), &idx);
  return {v, idx};
}
::std::tuple<at::Tensor,at::Tensor> k_cummin(const at::Tensor & self, int64_t dim) {
  at::Tensor idx;
  at::Tensor v = scan("cummin", "cummin", self, dim, self.scalar_type(), &idx);
  return {v, idx};
}
at::Tensor k__logcumsumexp(const at::Tensor & self, int64_t dim) {
  return scan("_logcumsumexp", "logcumsumexp", self, dim, self.scalar_type());
}
at::Tensor k_trace(const at::Tensor & self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  return k_sum(self.diagonal(), std::nullopt);
}

}  // namespace ocl::kernels
