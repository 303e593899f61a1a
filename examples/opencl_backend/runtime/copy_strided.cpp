// copy_strided: a strided copy within a device converting the element type, as
// an OpenCL C kernel written here per (source, destination) dtype pair and
// built through the program cache. The conversions follow PyTorch's CPU .to()
// exactly (generated/runtime_adapter.h lists the rules); each rule is spelled
// out below because OpenCL C leaves out-of-range float-to-int conversions
// undefined, as C does.
#include <string>

#include "device_code.h"
#include "state.h"

namespace ocl::runtime {
namespace {

struct TypeInfo {
  const char* storage;  // OpenCL C type the bytes are read/written as
  const char* value;    // what a load yields: float, double or long
  const char* load;     // expression over `p` (a pointer to storage) giving value
};

bool type_info(Dtype t, TypeInfo* out) {
  switch (t) {
    case Dtype::UInt8: *out = {"uchar", "long", "(long)(*p)"}; return true;
    case Dtype::Int8: *out = {"char", "long", "(long)(*p)"}; return true;
    case Dtype::Int16: *out = {"short", "long", "(long)(*p)"}; return true;
    case Dtype::Int32: *out = {"int", "long", "(long)(*p)"}; return true;
    case Dtype::Int64: *out = {"long", "long", "(*p)"}; return true;
    case Dtype::Bool: *out = {"uchar", "long", "(long)(*p != 0)"}; return true;
    case Dtype::Float16: *out = {"half", "float", "vload_half(0, p)"}; return true;
    case Dtype::BFloat16: *out = {"ushort", "float", "as_float(((uint)(*p)) << 16)"}; return true;
    case Dtype::Float32: *out = {"float", "float", "(*p)"}; return true;
    case Dtype::Float64: *out = {"double", "double", "(*p)"}; return true;
  }
  return false;
}

// Statement storing value `v` (of type `from`: float, double or long) at `q`.
std::string store(Dtype to, const std::string& from) {
  const bool fl = from != "long";
  const std::string f32 = from == "float" ? "v" : "convert_float_rte(v)";  // to float32, rounded
  // Floating to int32 through CPU's rule: out of range, inf and NaN give INT_MIN.
  const std::string range32 = from == "double" ? "0x1p31" : "0x1p31f";
  const std::string to_i32 = "(isnan(v) || v >= " + range32 + " || v < -" + range32 + " ? INT_MIN : (int)v)";
  switch (to) {
    case Dtype::Float32: return "*q = " + f32 + ";";
    case Dtype::Float64: return "*q = " + std::string(from == "double" ? "v" : "convert_double_rte(v)") + ";";
    case Dtype::Float16: return "vstore_half_rte(" + f32 + ", 0, q);";
    case Dtype::BFloat16:
      return "{ float f = " + f32 + "; uint b = as_uint(f); "
             "*q = isnan(f) ? (ushort)0x7fc0 : (ushort)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16); }";
    case Dtype::Bool: return "*q = (uchar)(v != 0);";
    case Dtype::Int64:
      if (!fl) return "*q = v;";
      return std::string("*q = (isnan(v) || v >= ") + (from == "double" ? "0x1p63" : "0x1p63f") + " || v < -" +
             (from == "double" ? "0x1p63" : "0x1p63f") + ") ? LONG_MIN : (long)v;";
    case Dtype::Int32:
      return fl ? "*q = " + to_i32 + ";" : "*q = (int)(uint)(ulong)v;";
    case Dtype::Int16:
      return fl ? "*q = (short)(ushort)(uint)" + to_i32 + ";" : "*q = (short)(ushort)(ulong)v;";
    case Dtype::Int8:
      return fl ? "*q = (char)(uchar)(uint)" + to_i32 + ";" : "*q = (char)(uchar)(ulong)v;";
    case Dtype::UInt8:
      return fl ? "*q = (uchar)(uint)" + to_i32 + ";" : "*q = (uchar)(ulong)v;";
  }
  return "";
}

std::string source_for(const TypeInfo& src, const TypeInfo& dst, Dtype dst_type) {
  const bool fp64 = std::string(src.storage) == "double" || std::string(dst.storage) == "double";
  std::string s;
  if (fp64) s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  s += "__kernel void copy(BUF(uchar, dst), BUF(const uchar, src), Layout L, ulong n) {\n"
       "  const ulong i = get_global_id(0);\n"
       "  if (i >= n) return;\n"
       "  long od, os, unused;\n"
       "  layout_offsets(&L, i, &od, &os, &unused);\n";
  s += std::string("  __global const ") + src.storage + "* p = (__global const " + src.storage +
       "*)AT(const uchar, src) + os;\n";
  s += std::string("  __global ") + dst.storage + "* q = (__global " + dst.storage + "*)AT(uchar, dst) + od;\n";
  s += std::string("  const ") + src.value + " v = " + src.load + ";\n";
  s += "  " + store(dst_type, src.value) + "\n}\n";
  return s;
}

// Merges dims that are contiguous in both operands, so that up to kLayoutDims
// dims reach the kernel from any copy PyTorch makes of a <= 8-d tensor.
bool make_layout(const StridedCopy& c, Layout* L) {
  std::int64_t sizes[kMaxCopyDims], ds[kMaxCopyDims], ss[kMaxCopyDims];
  int n = 0;
  for (int d = 0; d < c.ndim; ++d) {
    if (c.sizes[d] == 1) continue;
    if (n > 0 && ds[n - 1] == c.dst_strides[d] * c.sizes[d] && ss[n - 1] == c.src_strides[d] * c.sizes[d]) {
      sizes[n - 1] *= c.sizes[d];
      ds[n - 1] = c.dst_strides[d];
      ss[n - 1] = c.src_strides[d];
      continue;
    }
    sizes[n] = c.sizes[d];
    ds[n] = c.dst_strides[d];
    ss[n] = c.src_strides[d];
    ++n;
  }
  if (n > kLayoutDims) return false;
  L->ndim = n;
  for (int d = 0; d < n; ++d) {
    L->sizes[d] = sizes[d];
    L->strides[0][d] = ds[d];
    L->strides[1][d] = ss[d];
  }
  return true;
}

}  // namespace

Status copy_strided(const StridedCopy& copy, int device, Stream stream) {
  if (Status s = detail::check_device(device); s != Status::Ok) return s;
  TypeInfo src, dst;
  if (!type_info(copy.src_dtype, &src) || !type_info(copy.dst_dtype, &dst)) return Status::Unsupported;
  if ((copy.src_dtype == Dtype::Float64 || copy.dst_dtype == Dtype::Float64) && !device_has_fp64(device))
    return Status::Unsupported;  // the glue stages it through host memory
  std::uint64_t n = 1;
  for (int d = 0; d < copy.ndim; ++d) n *= static_cast<std::uint64_t>(copy.sizes[d]);
  if (n == 0) return Status::Ok;
  Layout L;
  if (!make_layout(copy, &L)) return Status::Unsupported;
  const std::string name = "copy_strided<" + std::to_string(static_cast<int>(copy.src_dtype)) + "," +
                           std::to_string(static_cast<int>(copy.dst_dtype)) + ">";
  return launch_generated_kernel(device, stream, name, source_for(src, dst, copy.dst_dtype), "copy",
                                 Range1D(n),
                                 {buffer_arg(copy.dst), buffer_arg(copy.src), value_arg(L),
                                  value_arg<std::uint64_t>(n)});
}

}  // namespace ocl::runtime
