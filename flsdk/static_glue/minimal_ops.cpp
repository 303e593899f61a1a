// The minimal op set every backend needs: allocation, views, resize, storage
// swaps, record_stream, the SDPA backend choice, complex views and sparse
// bookkeeping. The ops that move or set bytes (copies, .item(), fill_, zero_)
// are in copies.cpp.
//
// Storage is bytes: tensors of every dtype live on the device, also dtypes
// device.yaml does not list (those it cannot compute; their ops run on the
// CPU fallback, see register_kernels.cpp).
//
// Deterministic mode (torch.use_deterministic_algorithms(True) with
// torch.utils.deterministic.fill_uninitialized_memory, its default) fills new
// memory as CPU and CUDA do: NaN for floating and complex dtypes, the dtype's
// largest value for integers and bool, through the device's fill_ path.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zero_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "backend.h"
#include "glue_hooks.h"
#include "kernel_api.h"

namespace FLSDK_BACKEND_NS {
namespace {

const c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};

// Set while this thread fills: the fill path's own scratch tensors (a
// one-element source on the device) are written at once and need no fill; a
// fill of them would recurse.
thread_local bool t_filling = false;

bool fill_uninitialized() {
  auto& ctx = at::globalContext();
  return !t_filling && ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory();
}

struct Filling {
  Filling() { t_filling = true; }
  ~Filling() { t_filling = false; }
};

// What CPU and CUDA write into uninitialized memory in deterministic mode.
c10::Scalar uninitialized_value(c10::ScalarType type) {
  if (c10::isFloatingType(type)) return std::numeric_limits<double>::quiet_NaN();
  if (c10::isComplexType(type)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return c10::complex<double>(nan, nan);
  }
  switch (type) {
    case c10::ScalarType::Bool: return true;
    case c10::ScalarType::Byte: return std::numeric_limits<uint8_t>::max();
    case c10::ScalarType::Char: return std::numeric_limits<int8_t>::max();
    case c10::ScalarType::Short: return std::numeric_limits<int16_t>::max();
    case c10::ScalarType::Int: return std::numeric_limits<int32_t>::max();
    case c10::ScalarType::Long: return std::numeric_limits<int64_t>::max();
    case c10::ScalarType::UInt16: return std::numeric_limits<uint16_t>::max();
    case c10::ScalarType::UInt32: return std::numeric_limits<uint32_t>::max();
    case c10::ScalarType::UInt64: return std::numeric_limits<uint64_t>::max();
    default: break;
  }
  TORCH_CHECK(false, kBackendName, ": deterministic mode cannot fill uninitialized memory of dtype ",
              type);
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (C10_UNLIKELY(fill_uninitialized()) && t.numel() > 0) {
    Filling filling;
    t.fill_(uninitialized_value(t.scalar_type()));
  }
  return t;
}

c10::Device target_device(std::optional<c10::Device> device) {
  c10::DeviceIndex index = current_device();
  if (device.has_value() && device->has_index()) index = device->index();
  check_device_index(index);
  return c10::Device(kDeviceType, index);
}

// `device` made current for an allocation, unless it already is: a kernel's
// wrapper has made the op's device current, the usual case for kernel_api.h's
// allocation, and a guard costs two runtime calls. A device without an index
// means the current one (target_device checks an index it is given).
std::optional<c10::Device> device_to_enter(std::optional<c10::Device> device) {
  if (device && device->has_index() && device->index() == current_device()) return std::nullopt;
  return target_device(device);
}

// What the factories below and the kernels' allocation (kernel_api.h) share.
at::Tensor empty_on(c10::IntArrayRef sizes, c10::ScalarType dtype,
                    std::optional<c10::Device> device,
                    std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device_to_enter(device));
  return filled_if_deterministic(at::detail::empty_generic(
      sizes, c10::GetAllocator(kDeviceType), kKeys, dtype, memory_format));
}

at::Tensor empty_strided_on(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                            c10::ScalarType dtype, std::optional<c10::Device> device) {
  c10::OptionalDeviceGuard guard(device_to_enter(device));
  return filled_if_deterministic(at::detail::empty_strided_generic(
      sizes, strides, c10::GetAllocator(kDeviceType), kKeys, dtype));
}

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool>,
                               std::optional<c10::MemoryFormat> memory_format) {
  auto scalar_type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  TORCH_CHECK(!layout.has_value() || *layout == c10::Layout::Strided, kBackendName,
              ": only strided tensors are supported, got layout ", *layout);
  return empty_on(C10_AS_INTARRAYREF_SLOW(size), scalar_type, device, memory_format);
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool>) {
  auto scalar_type = dtype.value_or(c10::get_default_dtype_as_scalartype());
  TORCH_CHECK(!layout.has_value() || *layout == c10::Layout::Strided, kBackendName,
              ": only strided tensors are supported, got layout ", *layout);
  return empty_strided_on(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                          scalar_type, device);
}

}  // namespace

at::Tensor empty_device(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::Device device) {
  return empty_on(sizes, dtype, device, std::nullopt);
}

at::Tensor empty_strided_device(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                c10::ScalarType dtype, c10::Device device) {
  return empty_strided_on(sizes, strides, dtype, device);
}

namespace {

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) offset = storage_offset->guard_int(__FILE__, __LINE__);
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

void grow_storage(const at::Tensor& self, std::size_t needed_bytes) {
  auto storage = self.storage();
  if (needed_bytes <= storage.nbytes()) return;
  TORCH_CHECK(storage.resizable(), kBackendName, ": trying to resize storage that is not resizable");
  c10::DeviceGuard guard(self.device());
  at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(storage, needed_bytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (auto s : sizes)
    TORCH_CHECK(s >= 0, kBackendName, ": resize_: negative size ", s, " in ", sizes);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != sizes) impl->set_sizes_contiguous(sizes);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  std::size_t needed = (static_cast<std::size_t>(impl->storage_offset()) +
                        static_cast<std::size_t>(c10::multiply_integers(sizes))) *
                       self.dtype().itemsize();
  if (self.numel() > 0) {
    const std::size_t before = self.storage().nbytes();
    grow_storage(self, needed);
    if (C10_UNLIKELY(fill_uninitialized()) && self.storage().nbytes() > before) {
      // As CUDA's resize_: only the bytes that grew, as elements of self's dtype.
      const std::size_t itemsize = self.dtype().itemsize();
      const int64_t first = static_cast<int64_t>((before + itemsize - 1) / itemsize);
      const int64_t count = static_cast<int64_t>(self.storage().nbytes() / itemsize) - first;
      if (count > 0) {
        Filling filling;
        at::Tensor grown = at::empty({0}, self.options());
        grown.set_(self.storage(), first, {count}, {1});
        grown.fill_(uninitialized_value(self.scalar_type()));
      }
    }
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt storage_offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  auto offset = storage_offset.guard_int(__FILE__, __LINE__);
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto strides = C10_AS_INTARRAYREF_SLOW(stride);
  TORCH_CHECK(offset >= 0, kBackendName, ": set_: negative storage offset ", offset);
  TORCH_CHECK(source.device().type() == kDeviceType || source.nbytes() == 0, kBackendName,
              ": set_: storage is on ", source.device(), ", expected ", kBackendName);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (strides.empty()) {
    impl->set_sizes_contiguous(sizes);
  } else {
    TORCH_CHECK(strides.size() == sizes.size(), kBackendName, ": set_: ", sizes.size(),
                " sizes but ", strides.size(), " strides");
    impl->set_sizes_and_strides(sizes, strides);
  }
  if (self.numel() > 0) {
    std::size_t needed = at::detail::computeStorageNbytes(sizes, self.strides(),
                                                          self.dtype().itemsize(), offset);
    grow_storage(self, needed);
  }
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  auto elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  std::vector<c10::SymInt> size = {c10::SymInt(elements)};
  return set_storage(self, std::move(source), 0, size, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(),
                     source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kDeviceType), true);
  std::vector<c10::SymInt> size = {c10::SymInt(0)};
  return set_storage(self, std::move(empty), 0, size, {});
}

// Tensor.record_stream: the caching allocator keeps the tensor's block until
// the work queued on `stream` when the block is freed has finished (the guard
// forwards to the allocator, as for CUDA).
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kDeviceType, kBackendName, ": record_stream: ", stream,
              " is not a ", kBackendName, " stream");
  TORCH_CHECK(self.device() == stream.device(), kBackendName, ": record_stream: the tensor is on ",
              self.device(), " but the stream on ", stream.device());
  c10::impl::getDeviceGuardImpl(kDeviceType)
      ->recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

// Module.to(device) keeps parameters (and weights tied between modules) only
// when PyTorch may swap a CPU tensor's data for the device tensor in place.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto strided_on_cpu_or_device = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided &&
           (t.device().is_cpu() || t.device().type() == kDeviceType);
  };
  return strided_on_cpu_or_device(self) && strided_on_cpu_or_device(from);
}

// Scaled-dot-product attention asks the backend which fused kernel to use
// (through the dispatch stub registered at the end of this file, and the op).
// With the vendor's fused kernels (forward and backward) native, attention
// without dropout goes to them (SDPBackend::overrideable); otherwise the math
// path, composed of ops this backend implements.
int64_t fused_sdp_choice(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, double dropout_p, bool, std::optional<double>,
                         bool enable_gqa) {
  if (hooks::kFusedAttention && dropout_p == 0.0 && !enable_gqa &&
      at::globalContext().userEnabledOverrideableSDP())
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  return static_cast<int64_t>(at::SDPBackend::math);
}

// Complex <-> real pairs are views of the same bytes, whatever the device
// computes (the CPU fallback cannot return views): ATen's own view kernels.
at::Tensor view_as_complex_view(const at::Tensor& self) { return at::native::view_as_complex(self); }
at::Tensor view_as_real_view(const at::Tensor& self) { return at::native::view_as_real(self); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("view_as_complex", TORCH_FN(view_as_complex_view));
  m.impl("view_as_real", TORCH_FN(view_as_real_view));
}

// Sparse COO tensors on the device: a sparse tensor is bookkeeping over two
// dense device tensors (indices, values), so ATen's own layout kernels serve
// any backend. Every other op on a sparse device tensor runs on the CPU
// fallback (fallback.cpp registers it for SparsePrivateUse1 too).
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_symint));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  // Copies, clones, zeroing and resizing are bookkeeping too (dense copies of the
  // indices and values): on the fallback, clone's CPU result could not come back.
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
}

// Sparse compressed (CSR/CSC/BSR/BSC) device tensors: bookkeeping over dense
// device tensors as well, read by ATen's own accessors (without them the
// CompositeExplicitAutograd defaults run and refuse the layout, so such a
// tensor could not even be copied to the CPU). Other ops on them run on the CPU
// through the glue's own fallback for these layouts (fallback.cpp).
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  // Making, copying and resizing one: member by member, on the device.
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed_symint));
  m.impl("clone", TORCH_FN(at::native::clone_sparse_compressed));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
}

}  // namespace FLSDK_BACKEND_NS

// ATen's scaled_dot_product_attention asks a PrivateUse1 device for its choice
// through this dispatch stub, not through the _fused_sdp_choice op registered
// above (which torch.compile and direct callers use): without it the math path
// ran even with the vendor's fused kernels native.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &FLSDK_BACKEND_NS::fused_sdp_choice)
}  // namespace at::native
