// Host parts of every op of the unary, binary, compare and pointwise op spec
// families (device.yaml selects the families whole), in every dtype: one
// template kernel (kernels/elementwise.cl) specialised per op and dtypes by
// defines, with the op's expression from the family's table (kernels/ew_*.cl).
//
// Each kernel below is one line naming the op; ew() does the rest: the result
// dtype by torch's promotion rules, the compute type (float for
// float32/float16/bfloat16, double for float64, long for integers and bool), the
// broadcast layout, numbers from the host as kernel arguments (never a copy to
// the device, so nobody waits), and the launch.
#include "kernels.h"

#include <ATen/native/RangeUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "device_sources.h"
#include "ocl_kernel.h"

namespace ocl::kernels {
namespace {

// A tensor on the device, or a number: a Scalar, or a 0-dim CPU tensor (a wrapped
// Python number) whose value goes to the kernel as an argument.
struct Arg {
  const at::Tensor* tensor = nullptr;     // on the device
  std::optional<at::Scalar> number;
  const at::Tensor* cpu_scalar = nullptr;  // the 0-dim CPU tensor `number` came from (type promotion)
  Arg() = default;
  Arg(const at::Tensor& t) {  // NOLINT: implicit on purpose, the one-liners read naturally
    if (t.device().is_cpu() && t.dim() == 0) {
      number = t.item();
      cpu_scalar = &t;
    } else {
      tensor = &t;
    }
  }
  Arg(const at::Scalar& s) : number(s) {}  // NOLINT
  bool present() const { return tensor || number; }
};

enum class Result {
  Common,      // the operands' common dtype (torch's result_type)
  Float,       // the common dtype, integers and bool promoted to the default float dtype
  Bool,        // bool (comparisons, predicates)
};

struct DtypeInfo {
  const char* storage;  // OpenCL C type of an element
  const char* load;     // LOAD<k>(p, o) body
  const char* store;    // STORE(p, i, v) body
  int bits;
};

DtypeInfo dtype_info(const char* op, at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {"float", "((CT)(p)[o])", "(p)[i] = (float)(v)", 32};
    case at::kDouble: return {"double", "((CT)(p)[o])", "(p)[i] = (double)(v)", 64};
    case at::kHalf: return {"half", "((CT)vload_half((o), (p)))", "vstore_half_rte((float)(v), (i), (p))", 16};
    case at::kBFloat16:
      return {"ushort", "((CT)as_float(((uint)(p)[o]) << 16))", "(p)[i] = ew_to_bf16((float)(v))", 16};
    case at::kBool: return {"uchar", "((CT)((p)[o] != 0))", "(p)[i] = (uchar)((v) != 0)", 8};
    case at::kByte: return {"uchar", "((CT)(p)[o])", "(p)[i] = (uchar)(ulong)(long)(v)", 8};
    case at::kChar: return {"char", "((CT)(p)[o])", "(p)[i] = (char)(uchar)(ulong)(long)(v)", 8};
    case at::kShort: return {"short", "((CT)(p)[o])", "(p)[i] = (short)(ushort)(ulong)(long)(v)", 16};
    case at::kInt: return {"int", "((CT)(p)[o])", "(p)[i] = (int)(uint)(ulong)(long)(v)", 32};
    case at::kLong: return {"long", "((CT)(p)[o])", "(p)[i] = (long)(v)", 64};
    default: break;
  }
  TORCH_CHECK(false, "ocl: ", op, ": dtype ", t, " is not computed by the OpenCL kernels");
}

bool is_float(at::ScalarType t) { return at::isFloatingType(t); }

// The compute type of a dtype: float (float32, float16, bfloat16), double, long.
const char* compute_type(at::ScalarType t) {
  if (t == at::kDouble) return "double";
  if (is_float(t)) return "float";
  return "long";
}

// The op's numbers (alpha, bounds, eps) and operand values, as CT kernel arguments.
runtime::KernelArg ct_arg(const std::string& ct, const at::Scalar& s) {
  TORCH_CHECK(!s.isComplex(), "ocl: complex numbers are not computed by the OpenCL kernels");
  if (ct == "float") return runtime::value_arg(static_cast<float>(s.toDouble()));
  if (ct == "double") return runtime::value_arg(s.toDouble());
  return runtime::value_arg<std::int64_t>(s.isFloatingPoint() ? static_cast<std::int64_t>(s.toDouble()) : s.toLong());
}

// A number operand takes the computation's dtype first, as the CPU casts a
// wrapped number to the common dtype (x == 0.1 on float16 compares with half(0.1)).
at::Scalar as_dtype(const at::Scalar& s, at::ScalarType t) {
  if (s.isBoolean()) return s;
  switch (t) {
    case at::kBool: return at::Scalar(s.toDouble() != 0.0);  // 0.5 is true, as the CPU's cast
    case at::kHalf: return at::Scalar(static_cast<double>(static_cast<float>(c10::Half(static_cast<float>(s.toDouble())))));
    case at::kBFloat16:
      return at::Scalar(static_cast<double>(static_cast<float>(c10::BFloat16(static_cast<float>(s.toDouble())))));
    case at::kFloat: return at::Scalar(static_cast<double>(static_cast<float>(s.toDouble())));
    default: return s;
  }
}

// The template's text for one (family, defines): built once, then the program
// cache (runtime/device_code.cpp) keys it by the text.
const std::string& program_text(const std::string& family, const std::string& defines) {
  static std::mutex mutex;
  static std::map<std::string, std::string> texts;
  std::lock_guard lock(mutex);
  const std::string key = family + "\n" + defines;
  auto it = texts.find(key);
  if (it != texts.end()) return it->second;
  auto source = [](const std::string& path) {
    const device_sources::DeviceSource* s = device_sources::find(path.c_str());
    TORCH_CHECK(s, "ocl: no embedded OpenCL source ", path, " (run `flsdk gen` and rebuild)");
    return std::string(s->text, s->size) + "\n";
  };
  std::string text = defines + source("kernels/ew_" + family + ".cl") + source("kernels/elementwise.cl");
  return texts.emplace(key, std::move(text)).first->second;
}

struct Options {
  const at::Tensor* like = nullptr;       // shape and device when no operand is a device tensor
  std::string defines;                    // op-specific switches (HAS_ALPHA 1, ...)
  std::vector<at::Scalar> params;         // p0..p2
  std::optional<at::ScalarType> compute;  // overrides the common dtype
  std::optional<at::ScalarType> out;      // overrides the result rule
};

// Runs op `op` of `family` over `args` (up to three; absent ones allowed after
// the first) into a new contiguous tensor of the broadcast shape.
at::Tensor ew(const char* name, const char* family, const char* op, Result rule, std::vector<Arg> args,
              Options opt = {}) {
  TORCH_CHECK(args.size() <= 3, "ocl: ", name, ": at most three operands");
  // result dtype by torch's promotion rules over tensors and numbers
  at::native::ResultTypeState state;
  const at::Tensor* first = nullptr;
  for (const Arg& a : args) {
    if (a.tensor || a.cpu_scalar) {
      state = at::native::update_result_type_state(a.tensor ? *a.tensor : *a.cpu_scalar, state);
      if (!first && a.tensor) first = a.tensor;
    } else if (a.number) {
      state = at::native::update_result_type_state(*a.number, state);
    }
  }
  if (!first) first = opt.like;
  TORCH_CHECK(first, "ocl: ", name, ": expected a tensor operand on the device");
  const at::ScalarType common = opt.compute ? *opt.compute : at::native::result_type(state);
  at::ScalarType out_dtype = common;
  at::ScalarType compute = common;
  if (rule == Result::Float && !is_float(common)) out_dtype = compute = at::typeMetaToScalarType(at::get_default_dtype());
  if (rule == Result::Bool) out_dtype = at::kBool;
  if (opt.out) out_dtype = *opt.out;
  TORCH_CHECK(!at::isComplexType(compute), "ocl: ", name, ": complex tensors are not computed by the OpenCL kernels");
  const std::string ct = compute_type(compute);
  const int device = first->device().index();
  TORCH_CHECK(ct != "double" || runtime::device_has_fp64(device), "ocl: ", name,
              ": float64 needs cl_khr_fp64, which ocl:", device, " does not report");

  std::vector<int64_t> shape = first->sizes().vec();
  for (const Arg& a : args)
    if (a.tensor && a.tensor != first) shape = at::infer_size(shape, a.tensor->sizes());
  at::Tensor out = at::empty(shape, first->options().dtype(out_dtype));
  const int64_t n = out.numel();
  if (n == 0) return out;

  // defines of this specialisation
  std::string d;
  if (ct == "double") d += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  d += "#define CT " + ct + "\n#define CT_FLOAT " + (ct == "long" ? "0" : "1") + "\n#define CT_DOUBLE " +
       (ct == "double" ? "1" : "0") + "\n";
  d += ct == "float" ? "#define K(x) x##f\n" : ct == "double" ? "#define K(x) x\n" : "#define K(x) ((long)(x))\n";
  d += std::string("#define RT ") + (rule == Result::Bool ? "long" : "CT") + "\n";
  d += "#define NIN " + std::to_string(args.size()) + "\n";
  for (std::size_t k = 0; k < 3; ++k) {
    const std::string K = std::to_string(k);
    const bool tensor = k < args.size() && args[k].tensor;
    d += "#define IN" + K + "_SCALAR " + (tensor ? "0" : "1") + "\n";
    if (tensor) {
      const at::ScalarType t = args[k].tensor->scalar_type();
      TORCH_CHECK(t != at::kDouble || runtime::device_has_fp64(device), "ocl: ", name,
                  ": float64 needs cl_khr_fp64, which ocl:", device, " does not report");
      const DtypeInfo info = dtype_info(name, t);
      d += "#define IN" + K + "_T " + info.storage + "\n#define LOAD" + K + "(p, o) " + info.load + "\n";
      d += "#define IN" + K + "_BOOL " + (t == at::kBool ? "1" : "0") + "\n";
      if (t == at::kDouble && ct != "double") d = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + d;
    }
  }
  const DtypeInfo o = dtype_info(name, out_dtype);
  if (out_dtype == at::kDouble && ct != "double") d = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + d;
  d += std::string("#define OUT_T ") + o.storage + "\n#define STORE(p, i, v) " + o.store + "\n#define OUT_BITS " +
       std::to_string(o.bits) + "\n";
  d += std::string("#define OP_") + op + "\n" + opt.defines;

  const std::string& text = program_text(family, d);
  // layout: rows 0..2 are the operands' strides over the output's shape
  runtime::Layout L;
  const int nd = static_cast<int>(shape.size());
  TORCH_CHECK(nd <= runtime::kLayoutDims, "ocl: ", name, ": tensors of ", nd,
              " dims are not supported by the OpenCL kernel (at most ", runtime::kLayoutDims, ")");
  L.ndim = nd;
  for (int dd = 0; dd < nd; ++dd) L.sizes[dd] = shape[dd];
  for (std::size_t k = 0; k < args.size(); ++k) {
    if (!args[k].tensor) continue;
    const at::Tensor& t = *args[k].tensor;
    const int td = static_cast<int>(t.dim());
    for (int dd = 0; dd < nd; ++dd) {
      const int src = dd - (nd - td);
      L.strides[k][dd] = (src < 0 || t.size(src) == 1) ? 0 : t.stride(src);
    }
  }
  auto buf = [&](std::size_t k) {
    return runtime::buffer_arg(k < args.size() && args[k].tensor ? args[k].tensor->const_data_ptr() : nullptr);
  };
  auto val = [&](std::size_t k) {
    return ct_arg(ct, k < args.size() && args[k].number ? as_dtype(*args[k].number, compute) : at::Scalar(0));
  };
  auto par = [&](std::size_t k) { return ct_arg(ct, k < opt.params.size() ? opt.params[k] : at::Scalar(0)); };
  const std::string program = std::string("kernels/ew_") + family + ".cl[" + op + "]";
  check_status(runtime::launch_generated_kernel(device, launch_stream(device), program + "\n" + d, text, "ew",
                                                runtime::Range1D(n),
                                                {runtime::buffer_arg(out.data_ptr()), buf(0), buf(1), buf(2),
                                                 runtime::value_arg(L), runtime::value_arg<std::uint64_t>(n),
                                                 val(0), val(1), val(2), par(0), par(1), par(2)}),
               name);
  return out;
}

at::Tensor unary_float(const char* op, const at::Tensor& self) { return ew(op, "unary", op, Result::Float, {self}); }
at::Tensor unary_same(const char* op, const at::Tensor& self) { return ew(op, "unary", op, Result::Common, {self}); }
at::Tensor binary(const char* name, const char* op, Result rule, Arg a, Arg b) {
  return ew(name, "binary", op, rule, {a, b});
}
at::Tensor compare(const char* name, const char* op, Arg a, Arg b) {
  return ew(name, "compare", op, Result::Bool, {a, b});
}
at::Tensor predicate(const char* op, const at::Tensor& self) {
  return ew(op, "compare", op, Result::Bool, {self});
}

// add/sub/rsub with alpha (ints reject a floating alpha, as the CPU)
at::Tensor with_alpha(const char* name, const char* op, Arg a, Arg b, const at::Scalar& alpha) {
  Options o;
  TORCH_CHECK(!alpha.isFloatingPoint() || (a.tensor ? is_float(a.tensor->scalar_type()) : true) ||
                  (b.tensor && is_float(b.tensor->scalar_type())) || (a.number && a.number->isFloatingPoint()) ||
                  (b.number && b.number->isFloatingPoint()),
              "For integral input tensors, argument alpha must not be a floating point number.");
  if (!(alpha.isIntegral(true) && alpha.toLong() == 1) && !(alpha.isFloatingPoint() && alpha.toDouble() == 1.0)) {
    o.defines = "#define HAS_ALPHA 1\n";
    o.params = {alpha};
  } else {
    o.defines = "#define HAS_ALPHA 0\n";
  }
  return ew(name, "binary", op, Result::Common, {a, b}, o);
}

}  // namespace

// ---- unary (opspec/unary.yaml) ----
at::Tensor k_abs(const at::Tensor & self) { return unary_same("abs", self); }
at::Tensor k_neg(const at::Tensor & self) { return unary_same("neg", self); }
at::Tensor k_sign(const at::Tensor & self) { return unary_same("sign", self); }
at::Tensor k_sgn(const at::Tensor & self) { return unary_same("sgn", self); }
at::Tensor k_exp(const at::Tensor & self) { return unary_float("exp", self); }
at::Tensor k_exp2(const at::Tensor & self) { return unary_float("exp2", self); }
at::Tensor k_expm1(const at::Tensor & self) { return unary_float("expm1", self); }
at::Tensor k_log(const at::Tensor & self) { return unary_float("log", self); }
at::Tensor k_log2(const at::Tensor & self) { return unary_float("log2", self); }
at::Tensor k_log10(const at::Tensor & self) { return unary_float("log10", self); }
at::Tensor k_log1p(const at::Tensor & self) { return unary_float("log1p", self); }
at::Tensor k_sqrt(const at::Tensor & self) { return unary_float("sqrt", self); }
at::Tensor k_rsqrt(const at::Tensor & self) { return unary_float("rsqrt", self); }
at::Tensor k_reciprocal(const at::Tensor & self) { return unary_float("reciprocal", self); }
at::Tensor k_sin(const at::Tensor & self) { return unary_float("sin", self); }
at::Tensor k_cos(const at::Tensor & self) { return unary_float("cos", self); }
at::Tensor k_tan(const at::Tensor & self) { return unary_float("tan", self); }
at::Tensor k_asin(const at::Tensor & self) { return unary_float("asin", self); }
at::Tensor k_acos(const at::Tensor & self) { return unary_float("acos", self); }
at::Tensor k_atan(const at::Tensor & self) { return unary_float("atan", self); }
at::Tensor k_sinh(const at::Tensor & self) { return unary_float("sinh", self); }
at::Tensor k_cosh(const at::Tensor & self) { return unary_float("cosh", self); }
at::Tensor k_asinh(const at::Tensor & self) { return unary_float("asinh", self); }
at::Tensor k_acosh(const at::Tensor & self) { return unary_float("acosh", self); }
at::Tensor k_atanh(const at::Tensor & self) { return unary_float("atanh", self); }
at::Tensor k_erf(const at::Tensor & self) { return unary_float("erf", self); }
at::Tensor k_erfc(const at::Tensor & self) { return unary_float("erfc", self); }
at::Tensor k_erfinv(const at::Tensor & self) { return unary_float("erfinv", self); }
at::Tensor k_ceil(const at::Tensor & self) { return unary_same("ceil", self); }
at::Tensor k_floor(const at::Tensor & self) { return unary_same("floor", self); }
at::Tensor k_round(const at::Tensor & self) { return unary_same("round", self); }
at::Tensor k_trunc(const at::Tensor & self) { return unary_same("trunc", self); }
at::Tensor k_frac(const at::Tensor & self) { return unary_same("frac", self); }
at::Tensor k_bitwise_not(const at::Tensor & self) { return unary_same("bitwise_not", self); }
at::Tensor k_signbit(const at::Tensor & self) { return ew("signbit", "unary", "signbit", Result::Bool, {self}); }
at::Tensor k_lgamma(const at::Tensor & self) { return unary_float("lgamma", self); }
at::Tensor k_digamma(const at::Tensor & self) { return unary_float("digamma", self); }
at::Tensor k_sinc(const at::Tensor & self) { return unary_float("sinc", self); }
at::Tensor k_deg2rad(const at::Tensor & self) { return unary_float("deg2rad", self); }
at::Tensor k_rad2deg(const at::Tensor & self) { return unary_float("rad2deg", self); }
at::Tensor k_angle(const at::Tensor & self) { return unary_float("angle", self); }

at::Tensor k_round_decimals(const at::Tensor & self, int64_t decimals) {
  const double ten_pow = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  Options o;
  o.params = {ten_pow, decimals < 0 ? 1.0 : 0.0};
  return ew("round.decimals", "unary", "round_decimals", Result::Common, {self}, o);
}

at::Tensor k_logit(const at::Tensor & self, ::std::optional<double> eps) {
  Options o;
  o.params = {eps.value_or(-1.0), eps ? 1.0 : 0.0};
  return ew("logit", "unary", "logit", Result::Float, {self}, o);
}

// ---- binary (opspec/binary.yaml) ----
at::Tensor k_add_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  return with_alpha("add.Tensor", "add", self, other, alpha);
}
at::Tensor k_sub_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  return with_alpha("sub.Tensor", "sub", self, other, alpha);
}
at::Tensor k_rsub_Tensor(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha) {
  return with_alpha("rsub.Tensor", "rsub", self, other, alpha);
}
at::Tensor k_add_Scalar(const at::Tensor & self, const at::Scalar & other, const at::Scalar & alpha) {
  return with_alpha("add.Scalar", "add", self, other, alpha);
}
at::Tensor k_sub_Scalar(const at::Tensor & self, const at::Scalar & other, const at::Scalar & alpha) {
  return with_alpha("sub.Scalar", "sub", self, other, alpha);
}
at::Tensor k_mul_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("mul.Tensor", "mul", Result::Common, self, other);
}
at::Tensor k_mul_Scalar(const at::Tensor & self, const at::Scalar & other) {
  return binary("mul.Scalar", "mul", Result::Common, self, other);
}
at::Tensor k_div_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("div.Tensor", "div", Result::Float, self, other);
}
at::Tensor k_div_Scalar(const at::Tensor & self, const at::Scalar & other) {
  return binary("div.Scalar", "div", Result::Float, self, other);
}
at::Tensor k_div_Tensor_mode(const at::Tensor & self, const at::Tensor & other,
                             ::std::optional<c10::string_view> rounding_mode) {
  if (!rounding_mode) return binary("div.Tensor_mode", "div", Result::Float, self, other);
  TORCH_CHECK(*rounding_mode == "trunc" || *rounding_mode == "floor",
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
              std::string(*rounding_mode), "'");
  return binary("div.Tensor_mode", *rounding_mode == "trunc" ? "div_trunc" : "div_floor", Result::Common, self, other);
}
at::Tensor k_floor_divide(const at::Tensor & self, const at::Tensor & other) {
  return binary("floor_divide", "floor_divide", Result::Common, self, other);
}
at::Tensor k_remainder_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("remainder.Tensor", "remainder", Result::Common, self, other);
}
at::Tensor k_remainder_Scalar(const at::Tensor & self, const at::Scalar & other) {
  return binary("remainder.Scalar", "remainder", Result::Common, self, other);
}
at::Tensor k_fmod_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("fmod.Tensor", "fmod", Result::Common, self, other);
}
at::Tensor k_fmod_Scalar(const at::Tensor & self, const at::Scalar & other) {
  return binary("fmod.Scalar", "fmod", Result::Common, self, other);
}
at::Tensor k_pow_Tensor_Tensor(const at::Tensor & self, const at::Tensor & exponent) {
  Options o;
  o.defines = "#define POW_TENSOR_EXP 1\n";
  return ew("pow.Tensor_Tensor", "binary", "pow", Result::Common, {self, exponent}, o);
}
at::Tensor k_pow_Tensor_Scalar(const at::Tensor & self, const at::Scalar & exponent) {
  Options o;
  o.defines = "#define POW_TENSOR_EXP 0\n";
  return ew("pow.Tensor_Scalar", "binary", "pow", Result::Common, {self, exponent}, o);
}
at::Tensor k_pow_Scalar(const at::Scalar & self, const at::Tensor & exponent) {
  Options o;
  o.defines = "#define POW_TENSOR_EXP 1\n";
  return ew("pow.Scalar", "binary", "pow", Result::Common, {self, exponent}, o);
}
at::Tensor k_atan2(const at::Tensor & self, const at::Tensor & other) {
  return binary("atan2", "atan2", Result::Float, self, other);
}
at::Tensor k_maximum(const at::Tensor & self, const at::Tensor & other) {
  return binary("maximum", "maximum", Result::Common, self, other);
}
at::Tensor k_minimum(const at::Tensor & self, const at::Tensor & other) {
  return binary("minimum", "minimum", Result::Common, self, other);
}
at::Tensor k_fmax(const at::Tensor & self, const at::Tensor & other) {
  return binary("fmax", "fmax", Result::Common, self, other);
}
at::Tensor k_fmin(const at::Tensor & self, const at::Tensor & other) {
  return binary("fmin", "fmin", Result::Common, self, other);
}
at::Tensor k_hypot(const at::Tensor & self, const at::Tensor & other) {
  return binary("hypot", "hypot", Result::Float, self, other);
}
at::Tensor k_copysign_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("copysign.Tensor", "copysign", Result::Float, self, other);
}
at::Tensor k_bitwise_and_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("bitwise_and.Tensor", "bitwise_and", Result::Common, self, other);
}
at::Tensor k_bitwise_or_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("bitwise_or.Tensor", "bitwise_or", Result::Common, self, other);
}
at::Tensor k_bitwise_xor_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("bitwise_xor.Tensor", "bitwise_xor", Result::Common, self, other);
}
at::Tensor k_bitwise_left_shift_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("bitwise_left_shift.Tensor", "bitwise_left_shift", Result::Common, self, other);
}
at::Tensor k_bitwise_right_shift_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("bitwise_right_shift.Tensor", "bitwise_right_shift", Result::Common, self, other);
}
at::Tensor k_xlogy_Tensor(const at::Tensor & self, const at::Tensor & other) {
  return binary("xlogy.Tensor", "xlogy", Result::Float, self, other);
}
at::Tensor k_logaddexp(const at::Tensor & self, const at::Tensor & other) {
  return binary("logaddexp", "logaddexp", Result::Float, self, other);
}
at::Tensor k_logaddexp2(const at::Tensor & self, const at::Tensor & other) {
  return binary("logaddexp2", "logaddexp2", Result::Float, self, other);
}
at::Tensor k_nextafter(const at::Tensor & self, const at::Tensor & other) {
  return binary("nextafter", "nextafter", Result::Common, self, other);
}
at::Tensor k_heaviside(const at::Tensor & self, const at::Tensor & values) {
  TORCH_CHECK(self.scalar_type() == values.scalar_type(),
              "heaviside is not yet implemented for tensors with different dtypes");
  return binary("heaviside", "heaviside", Result::Common, self, values);
}
at::Tensor k_gcd(const at::Tensor & self, const at::Tensor & other) {
  return binary("gcd", "gcd", Result::Common, self, other);
}
at::Tensor k_lcm(const at::Tensor & self, const at::Tensor & other) {
  return binary("lcm", "lcm", Result::Common, self, other);
}

// ---- compare (opspec/compare.yaml) ----
at::Tensor k_eq_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("eq.Tensor", "eq", self, other); }
at::Tensor k_eq_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("eq.Scalar", "eq", self, other); }
at::Tensor k_ne_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("ne.Tensor", "ne", self, other); }
at::Tensor k_ne_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("ne.Scalar", "ne", self, other); }
at::Tensor k_lt_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("lt.Tensor", "lt", self, other); }
at::Tensor k_lt_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("lt.Scalar", "lt", self, other); }
at::Tensor k_le_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("le.Tensor", "le", self, other); }
at::Tensor k_le_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("le.Scalar", "le", self, other); }
at::Tensor k_gt_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("gt.Tensor", "gt", self, other); }
at::Tensor k_gt_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("gt.Scalar", "gt", self, other); }
at::Tensor k_ge_Tensor(const at::Tensor & self, const at::Tensor & other) { return compare("ge.Tensor", "ge", self, other); }
at::Tensor k_ge_Scalar(const at::Tensor & self, const at::Scalar & other) { return compare("ge.Scalar", "ge", self, other); }
at::Tensor k_logical_and(const at::Tensor & self, const at::Tensor & other) {
  return compare("logical_and", "logical_and", self, other);
}
at::Tensor k_logical_or(const at::Tensor & self, const at::Tensor & other) {
  return compare("logical_or", "logical_or", self, other);
}
at::Tensor k_logical_xor(const at::Tensor & self, const at::Tensor & other) {
  return compare("logical_xor", "logical_xor", self, other);
}
at::Tensor k_logical_not(const at::Tensor & self) { return predicate("logical_not", self); }
at::Tensor k_isnan(const at::Tensor & self) { return predicate("isnan", self); }
at::Tensor k_isinf(const at::Tensor & self) { return predicate("isinf", self); }
at::Tensor k_isneginf(const at::Tensor & self) { return predicate("isneginf", self); }
at::Tensor k_isposinf(const at::Tensor & self) { return predicate("isposinf", self); }

bool k_equal(const at::Tensor & self, const at::Tensor & other) {
  // the same sizes and no element unequal (NaN is unequal): one ne pass on the
  // device, then the host reads whether any was set (equal returns a bool, so
  // the host waits, as it does on the CPU and CUDA)
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  at::Tensor differ = compare("equal", "ne", self, other);
  return !differ.any().item().toBool();
}

// ---- pointwise (opspec/pointwise.yaml) ----
at::Tensor k_addcmul(const at::Tensor & self, const at::Tensor & tensor1, const at::Tensor & tensor2,
                     const at::Scalar & value) {
  Options o;
  o.params = {value};
  return ew("addcmul", "pointwise", "addcmul", Result::Common, {self, tensor1, tensor2}, o);
}
at::Tensor k_addcdiv(const at::Tensor & self, const at::Tensor & tensor1, const at::Tensor & tensor2,
                     const at::Scalar & value) {
  Options o;
  o.params = {value};
  return ew("addcdiv", "pointwise", "addcdiv", Result::Common, {self, tensor1, tensor2}, o);
}
at::Tensor k_lerp_Scalar(const at::Tensor & self, const at::Tensor & end, const at::Scalar & weight) {
  Options o;
  o.params = {weight};
  o.defines = "#define LERP_SCALAR 1\n";
  o.compute = at::promote_types(self.scalar_type(), end.scalar_type());
  return ew("lerp.Scalar", "pointwise", "lerp", Result::Common, {self, end}, o);
}
at::Tensor k_lerp_Tensor(const at::Tensor & self, const at::Tensor & end, const at::Tensor & weight) {
  Options o;
  o.defines = "#define LERP_SCALAR 0\n";
  o.compute = at::promote_types(self.scalar_type(), end.scalar_type());
  return ew("lerp.Tensor", "pointwise", "lerp", Result::Common, {self, end, weight}, o);
}
at::Tensor k_where_self(const at::Tensor & condition, const at::Tensor & self, const at::Tensor & other) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  // the result type is self's and other's; the condition only selects
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(self, state);
  state = at::native::update_result_type_state(other, state);
  Options o;
  o.compute = at::native::result_type(state);
  if (condition.device().is_cpu()) {
    // a 0-dim CPU condition: one or the other, broadcast to all three shapes
    at::Tensor cond = condition.to(self.device());
    return ew("where.self", "pointwise", "where", Result::Common, {cond, self, other}, o);
  }
  return ew("where.self", "pointwise", "where", Result::Common, {condition, self, other}, o);
}

namespace {
// clamp's result dtype: self's, or the default float dtype when an integer
// tensor is clamped by a floating bound (torch's promotion with the bounds)
at::Tensor clamp_impl(const char* name, const at::Tensor& self, Arg lo, Arg hi) {
  TORCH_CHECK(lo.present() || hi.present(), "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(self, state);
  for (const Arg* a : {&lo, &hi}) {
    if (a->tensor) state = at::native::update_result_type_state(*a->tensor, state);
    else if (a->number) state = at::native::update_result_type_state(*a->number, state);
  }
  Options o;
  o.compute = at::native::result_type(state);
  o.defines = std::string("#define HAS_MIN ") + (lo.present() ? "1" : "0") + "\n#define HAS_MAX " +
              (hi.present() ? "1" : "0") + "\n";
  if (!lo.present()) lo = Arg(at::Scalar(0));
  if (!hi.present()) hi = Arg(at::Scalar(0));
  return ew(name, "pointwise", "clamp", Result::Common, {self, lo, hi}, o);
}
Arg opt_arg(const ::std::optional<at::Scalar>& s) { return s ? Arg(*s) : Arg(); }
Arg opt_arg(const ::std::optional<at::Tensor>& t) { return t && t->defined() ? Arg(*t) : Arg(); }
}  // namespace

at::Tensor k_clamp(const at::Tensor & self, const ::std::optional<at::Scalar> & min,
                   const ::std::optional<at::Scalar> & max) {
  return clamp_impl("clamp", self, opt_arg(min), opt_arg(max));
}
at::Tensor k_clamp_Tensor(const at::Tensor & self, const ::std::optional<at::Tensor> & min,
                          const ::std::optional<at::Tensor> & max) {
  return clamp_impl("clamp.Tensor", self, opt_arg(min), opt_arg(max));
}
at::Tensor k_clamp_min(const at::Tensor & self, const at::Scalar & min) {
  return clamp_impl("clamp_min", self, Arg(min), Arg());
}
at::Tensor k_clamp_max(const at::Tensor & self, const at::Scalar & max) {
  return clamp_impl("clamp_max", self, Arg(), Arg(max));
}
at::Tensor k_clamp_min_Tensor(const at::Tensor & self, const at::Tensor & min) {
  return clamp_impl("clamp_min.Tensor", self, Arg(min), Arg());
}
at::Tensor k_clamp_max_Tensor(const at::Tensor & self, const at::Tensor & max) {
  return clamp_impl("clamp_max.Tensor", self, Arg(), Arg(max));
}

at::Tensor k_nan_to_num(const at::Tensor & self, ::std::optional<double> nan, ::std::optional<double> posinf,
                        ::std::optional<double> neginf) {
  const at::ScalarType t = self.scalar_type();
  TORCH_CHECK(is_float(t), "ocl: nan_to_num: expected a floating tensor, got ", t);
  double hi = 0, lo = 0;
  switch (t) {
    case at::kHalf: hi = 65504.0; break;
    case at::kBFloat16: hi = static_cast<double>(std::numeric_limits<c10::BFloat16>::max()); break;
    case at::kDouble: hi = std::numeric_limits<double>::max(); break;
    default: hi = std::numeric_limits<float>::max(); break;
  }
  lo = -hi;
  Options o;
  o.params = {nan.value_or(0.0), posinf.value_or(hi), neginf.value_or(lo)};
  return ew("nan_to_num", "pointwise", "nan_to_num", Result::Common, {self}, o);
}

// ---- creation (opspec/creation.yaml) ----
at::Tensor k_fill_Tensor(const at::Tensor & self, const at::Tensor & value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  // value (a device tensor, or a number) converted to self's dtype, at every element
  Options o;
  o.compute = self.scalar_type();
  o.like = &self;
  if (value.device().is_cpu()) return ew("fill.Tensor", "unary", "copy", Result::Common, {value.item()}, o);
  return ew("fill.Tensor", "unary", "copy", Result::Common, {value.expand(self.sizes())}, o);
}

}  // namespace ocl::kernels

// ---- activation (opspec/activation.yaml) ----
namespace ocl::kernels {
namespace {
at::Tensor act(const char* name, const char* op, std::vector<Arg> args, std::vector<at::Scalar> params = {},
               std::string defines = "", Result rule = Result::Common) {
  Options o;
  o.params = std::move(params);
  o.defines = std::move(defines);
  return ew(name, "activation", op, rule, std::move(args), o);
}
}  // namespace

at::Tensor k_relu(const at::Tensor & self) { return act("relu", "relu", {self}); }
at::Tensor k_sigmoid(const at::Tensor & self) { return act("sigmoid", "sigmoid", {self}, {}, "", Result::Float); }
at::Tensor k_tanh(const at::Tensor & self) { return act("tanh", "tanh", {self}, {}, "", Result::Float); }
at::Tensor k_sigmoid_backward(const at::Tensor & grad_output, const at::Tensor & output) {
  return act("sigmoid_backward", "sigmoid_backward", {grad_output, output});
}
at::Tensor k_tanh_backward(const at::Tensor & grad_output, const at::Tensor & output) {
  return act("tanh_backward", "tanh_backward", {grad_output, output});
}
at::Tensor k_threshold(const at::Tensor & self, const at::Scalar & threshold, const at::Scalar & value) {
  return act("threshold", "threshold", {self}, {threshold, value});
}
at::Tensor k_threshold_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                const at::Scalar & threshold) {
  return act("threshold_backward", "threshold_backward", {grad_output, self}, {threshold});
}
namespace {
std::string gelu_defines(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "ocl: gelu: approximate must be 'none' or 'tanh', got '",
              std::string(approximate), "'");
  return std::string("#define GELU_TANH ") + (approximate == "tanh" ? "1" : "0") + "\n";
}
}  // namespace

at::Tensor k_gelu(const at::Tensor & self, c10::string_view approximate) {
  return act("gelu", "gelu", {self}, {}, gelu_defines(approximate));
}
at::Tensor k_gelu_backward(const at::Tensor & grad_output, const at::Tensor & self, c10::string_view approximate) {
  return act("gelu_backward", "gelu_backward", {grad_output, self}, {}, gelu_defines(approximate));
}
at::Tensor k_silu(const at::Tensor & self) { return act("silu", "silu", {self}); }
at::Tensor k_silu_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  return act("silu_backward", "silu_backward", {grad_output, self});
}
at::Tensor k_leaky_relu(const at::Tensor & self, const at::Scalar & negative_slope) {
  return act("leaky_relu", "leaky_relu", {self}, {negative_slope});
}
at::Tensor k_leaky_relu_backward(const at::Tensor & grad_output, const at::Tensor & self,
                                 const at::Scalar & negative_slope, bool self_is_result) {
  TORCH_CHECK(!self_is_result || negative_slope.toDouble() >= 0.0,
              "In-place leakyReLu backward calculation is triggered with a negative slope which is not supported. "
              "This is caused by calling in-place forward function with a negative slope, please call out-of-place "
              "version instead. File an issue at https://github.com/pytorch/pytorch if you do require supporting "
              "in-place leakRelu backward calculation with negative slope");
  return act("leaky_relu_backward", "leaky_relu_backward", {grad_output, self}, {negative_slope});
}
at::Tensor k_elu(const at::Tensor & self, const at::Scalar & alpha, const at::Scalar & scale,
                 const at::Scalar & input_scale) {
  return act("elu", "elu", {self}, {alpha.toDouble() * scale.toDouble(), scale, input_scale});
}
at::Tensor k_elu_backward(const at::Tensor & grad_output, const at::Scalar & alpha, const at::Scalar & scale,
                          const at::Scalar & input_scale, bool is_result, const at::Tensor & self_or_result) {
  TORCH_CHECK(!is_result || alpha.toDouble() >= 0.0,
              "In-place elu backward calculation is triggered with a negative slope which is not supported. This is "
              "caused by calling in-place forward function with a negative slope, please call out-of-place version "
              "instead.");
  return act("elu_backward", "elu_backward", {grad_output, self_or_result},
             {alpha.toDouble() * scale.toDouble(), scale, input_scale},
             std::string("#define ELU_IS_RESULT ") + (is_result ? "1" : "0") + "\n");
}
at::Tensor k_hardtanh(const at::Tensor & self, const at::Scalar & min_val, const at::Scalar & max_val) {
  return act("hardtanh", "hardtanh", {self}, {min_val, max_val});
}
at::Tensor k_hardtanh_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Scalar & min_val,
                               const at::Scalar & max_val) {
  return act("hardtanh_backward", "hardtanh_backward", {grad_output, self}, {min_val, max_val});
}
at::Tensor k_hardsigmoid(const at::Tensor & self) { return act("hardsigmoid", "hardsigmoid", {self}); }
at::Tensor k_hardsigmoid_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  return act("hardsigmoid_backward", "hardsigmoid_backward", {grad_output, self});
}
at::Tensor k_hardswish(const at::Tensor & self) { return act("hardswish", "hardswish", {self}); }
at::Tensor k_hardswish_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  return act("hardswish_backward", "hardswish_backward", {grad_output, self});
}
at::Tensor k_softplus(const at::Tensor & self, const at::Scalar & beta, const at::Scalar & threshold) {
  return act("softplus", "softplus", {self}, {beta, threshold});
}
at::Tensor k_softplus_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Scalar & beta,
                               const at::Scalar & threshold) {
  return act("softplus_backward", "softplus_backward", {grad_output, self}, {beta, threshold});
}
at::Tensor k_mish(const at::Tensor & self) { return act("mish", "mish", {self}); }
at::Tensor k_mish_backward(const at::Tensor & grad_output, const at::Tensor & self) {
  return act("mish_backward", "mish_backward", {grad_output, self});
}
at::Tensor k_logit_backward(const at::Tensor & grad_output, const at::Tensor & self, ::std::optional<double> eps) {
  return act("logit_backward", "logit_backward", {grad_output, self}, {eps.value_or(-1.0)});
}
at::Tensor k_hardshrink(const at::Tensor & self, const at::Scalar & lambd) {
  return act("hardshrink", "hardshrink", {self}, {lambd});
}
at::Tensor k_softshrink(const at::Tensor & self, const at::Scalar & lambd) {
  TORCH_CHECK(lambd.toDouble() >= 0, "lambda must be greater or equal to 0, but found to be ", lambd.toDouble(), ".");
  return act("softshrink", "softshrink", {self}, {lambd});
}
at::Tensor k_hardshrink_backward(const at::Tensor & grad_out, const at::Tensor & self, const at::Scalar & lambd) {
  return act("hardshrink_backward", "shrink_backward", {grad_out, self}, {lambd});
}
at::Tensor k_softshrink_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Scalar & lambd) {
  return act("softshrink_backward", "shrink_backward", {grad_output, self}, {lambd});
}
::std::tuple<at::Tensor,at::Tensor> k_log_sigmoid_forward(const at::Tensor & self) {
  // the buffer holds exp(-|x|), as the CPU's (this backward recomputes it from the input)
  return {act("log_sigmoid_forward", "log_sigmoid", {self}),
          act("log_sigmoid_forward", "log_sigmoid_buffer", {self})};
}
at::Tensor k_log_sigmoid_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & buffer) {
  return act("log_sigmoid_backward", "log_sigmoid_backward", {grad_output, self, buffer});
}
namespace {
int64_t glu_half(const at::Tensor& self, int64_t dim, int64_t* d) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  *d = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(*d);
  TORCH_CHECK(n % 2 == 0, "Halving dimension must be even, but dimension ", *d, " is size ", n);
  return n / 2;
}
}  // namespace

at::Tensor k_glu(const at::Tensor & self, int64_t dim) {
  int64_t d = 0;
  const int64_t h = glu_half(self, dim, &d);
  const at::Tensor first = self.narrow(d, 0, h), second = self.narrow(d, h, h);
  return act("glu", "glu", {first, second});
}
at::Tensor k_glu_backward(const at::Tensor & grad_output, const at::Tensor & self, int64_t dim) {
  int64_t d = 0;
  const int64_t h = glu_half(self, dim, &d);
  const at::Tensor first = self.narrow(d, 0, h), second = self.narrow(d, h, h);
  at::Tensor out = at::empty(self.sizes(), grad_output.options());
  if (out.numel() == 0) return out;
  out.narrow(d, 0, h).copy_(act("glu_backward", "glu_backward_first", {grad_output, second}));
  out.narrow(d, h, h).copy_(act("glu_backward", "glu_backward_second", {grad_output, first, second}));
  return out;
}

}  // namespace ocl::kernels

// ---- masked_fill (opspec/index.yaml): where(mask, value, self) in self's dtype ----
namespace ocl::kernels {
namespace {
at::Tensor masked_fill_impl(const char* name, const at::Tensor& self, const at::Tensor& mask, Arg value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  Options o;
  o.compute = self.scalar_type();
  return ew(name, "pointwise", "where", Result::Common, {mask, value, self}, o);
}
}  // namespace

at::Tensor k_masked_fill_Scalar(const at::Tensor & self, const at::Tensor & mask, const at::Scalar & value) {
  return masked_fill_impl("masked_fill.Scalar", self, mask, value);
}
at::Tensor k_masked_fill_Tensor(const at::Tensor & self, const at::Tensor & mask, const at::Tensor & value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_impl("masked_fill.Tensor", self, mask, value);
}

}  // namespace ocl::kernels
