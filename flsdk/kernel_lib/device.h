// The two parts of a kernel, as on any discrete accelerator:
//
// * the host part runs in the caller's thread: it checks the arguments,
//   allocates the outputs (at::empty on the device) and describes the tensors
//   it hands on (DeviceTensor: a device address and a layout, no reference to
//   the at::Tensor). It never reads device memory: on a discrete device the
//   host cannot, and the simulators stop a host read with a report.
// * the device part runs on the current stream, after the work queued before
//   it (launch). Inside it DeviceTensor::data_ptr gives the device's view of
//   the bytes. It may run after the kernel returned: it captures by value,
//   and owns no PyTorch object (the caching allocator keeps memory valid for
//   work queued on the stream it was freed on, as CUDA's does).
//
//   at::Tensor k_relu(const at::Tensor& self) {
//     at::Tensor out = at::empty(self.sizes(), self.options());   // host part
//     launch(out, [in = DeviceTensor(self), o = DeviceTensor(out)] {
//       const float* x = in.data_ptr<float>();                    // device part
//       ...
//     });
//     return out;
//   }
//
// A kernel whose output size depends on data (nonzero, unique) copies the count
// to the host on the stream and waits for it (read_on_host below), as CUDA's do.
//
// The device part runs as host code (a simulator, a CPU-like chip): the backend
// queues it through its port (port.h, kernels/kernel_port.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include "dtype.h"
#include "kernel_api.h"
#include "parallel.h"
#include "port.h"
#include "queued_work.h"

#include <cstdint>
#include <cstring>
#include <utility>

namespace FLSDK_BACKEND_NS::common {

// The device's view of device address `p`, inside device work; a host pointer
// (scratch memory of the device part) comes back as it is. Throws on the host:
// host code never reaches device memory.
inline void* device_view(const void* p) {
  if (p == nullptr) return nullptr;
  void* v = port::device_or_host_view(p);
  TORCH_CHECK(v != nullptr, kBackend, ": a kernel's host part read device memory (", p,
              "): only its device part, queued with launch(), reaches it");
  return v;
}

// What a kernel's device part knows of one tensor: its device address, dtype,
// sizes and strides. Copying it copies no data and holds no reference.
class DeviceTensor {
 public:
  DeviceTensor() = default;  // an undefined tensor (optional arguments)
  // Implicit, so device-part helpers (nn::load, StridedIter::add...) take either;
  // a host part that hands them an at::Tensor fails at run time in data_ptr().
  DeviceTensor(const at::Tensor& t) {  // NOLINT(google-explicit-constructor)
    if (!t.defined()) return;
    defined_ = true;
    dtype_ = t.scalar_type();
    device_ = t.device();
    itemsize_ = static_cast<int64_t>(t.element_size());
    sizes_.assign(t.sizes().begin(), t.sizes().end());
    strides_.assign(t.strides().begin(), t.strides().end());
    numel_ = t.numel();
    contiguous_ = t.is_contiguous();
    if (t.device().is_cpu()) {
      // A wrapped Python number (0-dim CPU tensor): its value travels with the
      // work, the tensor may be gone when the device runs.
      TORCH_CHECK(t.numel() == 1 && static_cast<size_t>(t.element_size()) <= sizeof(value_),
                  kBackend, ": only 0-dim CPU tensors may be handed to a kernel's device part");
      std::memcpy(value_, t.const_data_ptr(), static_cast<size_t>(t.element_size()));
      on_host_ = true;
    } else {
      address_ = t.storage().data_ptr().get() == nullptr ? nullptr : t.const_data_ptr();
    }
  }
  DeviceTensor(const std::optional<at::Tensor>& t)  // NOLINT(google-explicit-constructor)
      : DeviceTensor(t.has_value() ? *t : at::Tensor()) {}

  bool defined() const { return defined_; }
  c10::ScalarType scalar_type() const { return dtype_; }
  c10::Device device() const { return device_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  c10::IntArrayRef sizes() const { return sizes_; }
  c10::IntArrayRef strides() const { return strides_; }
  int64_t size(int64_t d) const { return sizes_[static_cast<size_t>(d < 0 ? d + dim() : d)]; }
  int64_t stride(int64_t d) const { return strides_[static_cast<size_t>(d < 0 ? d + dim() : d)]; }
  int64_t numel() const { return numel_; }
  int64_t element_size() const { return itemsize_; }
  bool is_contiguous() const { return contiguous_; }
  bool is_cpu_scalar() const { return on_host_; }

  // The bytes: device work only (the device's view of the address).
  void* data_ptr() const {
    if (on_host_) return const_cast<char*>(value_);
    return device_view(address_);
  }
  template <class T>
  T* data_ptr() const { return static_cast<T*>(data_ptr()); }
  template <class T>
  const T* const_data_ptr() const { return static_cast<const T*>(data_ptr()); }
  const void* const_data_ptr() const { return data_ptr(); }
  // The device address itself (never dereferenced by the host).
  const void* address() const { return address_; }

  // The same bytes seen with another shape; the tensor must be contiguous.
  DeviceTensor reshape(c10::IntArrayRef sizes) const {
    TORCH_CHECK(contiguous_, kBackend, ": DeviceTensor::reshape of a non-contiguous tensor");
    DeviceTensor out = *this;
    out.sizes_.assign(sizes.begin(), sizes.end());
    out.strides_.resize(sizes.size());
    int64_t stride = 1;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      out.strides_[static_cast<size_t>(d)] = stride;
      stride *= std::max<int64_t>(sizes[static_cast<size_t>(d)], 1);
    }
    return out;
  }

 private:
  const void* address_ = nullptr;
  c10::SmallVector<int64_t, 6> sizes_, strides_;
  int64_t numel_ = 0;
  int64_t itemsize_ = 0;
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  c10::Device device_{c10::DeviceType::CPU};
  bool defined_ = false;
  bool contiguous_ = true;
  bool on_host_ = false;
  alignas(8) char value_[16] = {};
};

// Fault injection (runtime option "wrong_kernel"): adds 1 to the first element
// of `t` (device work only), the deliberately wrong result of a named kernel.
inline void spoil_first_element(const DeviceTensor& t) {
  if (t.numel() == 0 || !t.defined()) return;
  void* p = t.data_ptr();
  switch (t.scalar_type()) {
    case c10::ScalarType::Float: *static_cast<float*>(p) += 1.0f; break;
    case c10::ScalarType::Double: *static_cast<double*>(p) += 1.0; break;
    case c10::ScalarType::Half: *static_cast<c10::Half*>(p) += 1.0f; break;
    case c10::ScalarType::BFloat16: *static_cast<c10::BFloat16*>(p) += 1.0f; break;
    case c10::ScalarType::Int: *static_cast<int32_t*>(p) += 1; break;
    case c10::ScalarType::Long: *static_cast<int64_t*>(p) += 1; break;
    default: break;
  }
}

// A device part as queued: it runs with the intra-op thread count of the
// call that launched it (parallel.h).
template <class Body>
struct LaunchedBody {
  int threads;
  Body body;
  void operator()() {
    LaunchedThreads scope(threads);
    body();
  }
};

// Queues `body` (the device part) on the current stream of `on`'s device and
// returns at once. `body` must capture by value and hold no at::Tensor.
// The device part runs with the caller's intra-op thread count (parallel.h).
// The work is named after the kernel the generated wrapper is running (what a
// profile shows on the device lane); `kind` says what it is (a fill is a Memset).
template <class Body>
inline void launch(const at::Tensor& on, Body&& body,
                   runtime::ActivityKind kind = runtime::ActivityKind::Kernel) {
  const int device = on.device().index();
  const char* name = ::FLSDK_BACKEND_NS::current_kernel();
  QueuedWork work;
  if (port::kernel_is_wrong(name)) {
    // The port's fault injection names this kernel: its result is spoiled on purpose
    // (`on` is the output of nearly every kernel).
    work = make_queued_work([threads = intra_op_threads(), body = std::forward<Body>(body),
                             spoiled = DeviceTensor(on)] {
      LaunchedThreads scope(threads);
      body();
      spoil_first_element(spoiled);
    });
  } else {
    work = emplace_queued_work<LaunchedBody<std::decay_t<Body>>>(intra_op_threads(),
                                                                 std::forward<Body>(body));
  }
  const auto status = port::queue(device, ::FLSDK_BACKEND_NS::launch_stream(device), work.run,
                                  work.arg, name, kind);
  if (status != runtime::Status::Ok) work.discard(work.arg);
  ::FLSDK_BACKEND_NS::check_status(status, "launch");
}

// The `n` elements of type T at device address `p`, copied to the host after
// the work queued on the current stream: the host waits (a kernel whose output
// shape depends on data, counted by torch_fl.host_syncs() as "kernel"). With
// runtime_primitives: pinned_host the copy lands in page-locked memory from the
// runtime (the DMA engine reaches no other host memory) and is moved to `out`.
template <class T>
inline void read_on_host(const char* op, const at::Tensor& on, const void* p, T* out, size_t n) {
  if (n == 0) return;
  const int device = on.device().index();
  const size_t bytes = n * sizeof(T);
  // Freed once the copy is known to be done; after a failed wait the copy may
  // still be queued, so the block is left to it (a leak, not a corruption).
  struct Staging {
    void* ptr = nullptr;
    bool copied = false;
    ~Staging() {
      if constexpr (::FLSDK_BACKEND_NS::config::kRuntimeHasPinnedHost) {
        if (ptr != nullptr && copied) (void)runtime::host_free(ptr);
      }
    }
  } staging;
  void* dst = out;
  if constexpr (::FLSDK_BACKEND_NS::config::kRuntimeHasPinnedHost) {
    ::FLSDK_BACKEND_NS::check_status(runtime::host_alloc(bytes, &staging.ptr), "host_alloc");
    dst = staging.ptr;
  }
  ::FLSDK_BACKEND_NS::check_status(
      runtime::memcpy(dst, p, bytes, runtime::CopyKind::DeviceToHost, device,
                      ::FLSDK_BACKEND_NS::launch_stream(device)),
      "memcpy");
  ::FLSDK_BACKEND_NS::wait_for_device_results(static_cast<c10::DeviceIndex>(device), op);
  staging.copied = true;
  if (dst != out) std::memcpy(out, dst, bytes);
}

}  // namespace FLSDK_BACKEND_NS::common
