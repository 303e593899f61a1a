// Checks of the runtime adapter (adapter_contract.h): each one exercises a
// promise of runtime_adapter.h / docs/runtime-adapter.md through the adapter's
// own calls, with no torch involved, and says which call broke it. The claim ids
// are the ones the doc lists under "What your generated tests check"
// (tests/scaffold/test_scaffold_docs.py keeps the two lists equal).
//
// The checks use their own buffers, streams and events, and synchronize the
// device before freeing anything, as the glue does.
#include "adapter_contract.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device_config.h"
#include "runtime_adapter.h"

namespace FLSDK_BACKEND_NS::adapter_contract {
namespace {

using runtime::CopyKind;
using runtime::Dtype;
using runtime::Status;

struct Failed {
  std::string why;
};
struct Skipped {
  std::string why;
};

const char* status_name(Status s) {
  switch (s) {
    case Status::Ok: return "Ok";
    case Status::OutOfMemory: return "OutOfMemory";
    case Status::InvalidDevice: return "InvalidDevice";
    case Status::InvalidValue: return "InvalidValue";
    case Status::Error: return "Error";
    case Status::Unsupported: return "Unsupported";
  }
  return "an unknown Status";
}

void expect(bool condition, const std::string& what) {
  if (!condition) throw Failed{what};
}

void ok(Status s, const std::string& call) {
  if (s != Status::Ok)
    throw Failed{call + " returned " + status_name(s) + ": " + runtime::last_error()};
}

// Host memory a copy may use: from host_alloc when the runtime lists pinned_host
// (the glue then passes no other host memory to memcpy), else the heap.
class HostBuffer {
 public:
  HostBuffer(int device, std::size_t bytes) : device_(device), bytes_(bytes) {
    if constexpr (config::kRuntimeHasPinnedHost) {
      ok(runtime::host_alloc(bytes, &p_), "host_alloc");
    } else {
      heap_.resize(bytes);
      p_ = heap_.data();
    }
    std::memset(p_, 0, bytes);
  }
  ~HostBuffer() {
    // Queued copies may still use it after a failed check.
    (void)runtime::device_synchronize(device_);
    if constexpr (config::kRuntimeHasPinnedHost) (void)runtime::host_free(p_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  std::size_t size() const { return bytes_; }

 private:
  int device_;
  std::size_t bytes_;
  void* p_ = nullptr;
  std::vector<unsigned char> heap_;
};

class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t bytes) : device_(device) {
    ok(runtime::malloc(device, bytes, &p_), "malloc(" + std::to_string(bytes) + ")");
    expect(p_ != nullptr, "malloc returned Ok and a null pointer");
  }
  ~DeviceBuffer() {
    (void)runtime::device_synchronize(device_);  // the glue frees only after this
    if (p_) (void)runtime::free(device_, p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  int device_;
  void* p_ = nullptr;
};

class OwnStream {
 public:
  explicit OwnStream(int device) : device_(device) {
    ok(runtime::stream_create(device, &s_), "stream_create");
  }
  ~OwnStream() {
    (void)runtime::stream_synchronize(device_, s_);
    (void)runtime::stream_destroy(device_, s_);
  }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  runtime::Stream get() const { return s_; }

 private:
  int device_;
  runtime::Stream s_ = nullptr;
};

class OwnEvent {
 public:
  explicit OwnEvent(int device) : device_(device) { ok(runtime::event_create(device, &e_), "event_create"); }
  ~OwnEvent() { (void)runtime::event_destroy(device_, e_); }
  OwnEvent(const OwnEvent&) = delete;
  OwnEvent& operator=(const OwnEvent&) = delete;
  runtime::Event get() const { return e_; }

 private:
  int device_;
  runtime::Event e_ = nullptr;
};

void fill_pattern(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131 + seed * 17 + 7) & 0xff);
}

bool same(const unsigned char* a, const unsigned char* b, std::size_t n) { return std::memcmp(a, b, n) == 0; }

void h2d(void* dst, const HostBuffer& src, int device, runtime::Stream stream) {
  ok(runtime::memcpy(dst, src.data(), src.size(), CopyKind::HostToDevice, device, stream),
     "memcpy HostToDevice");
}
void d2h(const HostBuffer& dst, const void* src, int device, runtime::Stream stream) {
  ok(runtime::memcpy(dst.data(), src, dst.size(), CopyKind::DeviceToHost, device, stream),
     "memcpy DeviceToHost");
}

constexpr std::size_t kBytes = 4096;

// ---- setup and memory ------------------------------------------------------------

void device_count_check(int) {
  const int n = runtime::device_count();
  expect(n >= 1, "device_count() is " + std::to_string(n) + " after init succeeded");
}

void malloc_alignment(int device) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
    DeviceBuffer b(device, bytes);
    const auto address = reinterpret_cast<std::uintptr_t>(b.get());
    expect(address % config::kMemoryAlignment == 0,
           "malloc(" + std::to_string(bytes) + ") returned an address not aligned to " +
               std::to_string(config::kMemoryAlignment) + " bytes (device.yaml memory.alignment)");
  }
}

void out_of_memory(int device) {
  std::size_t free_bytes = 0, total = 0;
  ok(runtime::memory_info(device, &free_bytes, &total), "memory_info");
  void* p = nullptr;
  const Status s = runtime::malloc(device, total + 1, &p);
  if (s == Status::Ok) (void)runtime::free(device, p);
  expect(s == Status::OutOfMemory, "malloc of more than the capacity (" + std::to_string(total + 1) +
                                       " bytes) returned " + status_name(s) + ", not OutOfMemory");
  expect(std::strlen(runtime::last_error()) > 0, "malloc's OutOfMemory left last_error() empty");
}

void memory_info_check(int device) {
  std::size_t free_before = 0, total = 0, free_after = 0, total_after = 0;
  ok(runtime::memory_info(device, &free_before, &total), "memory_info");
  expect(total > 0 && free_before <= total,
         "memory_info: free " + std::to_string(free_before) + " of total " + std::to_string(total));
  const std::size_t bytes = 1 << 20;
  if (free_before < 2 * bytes) throw Skipped{"less than 2 MiB free"};
  DeviceBuffer b(device, bytes);
  ok(runtime::memory_info(device, &free_after, &total_after), "memory_info");
  expect(total_after == total, "memory_info's total changed after a malloc");
  expect(free_after + bytes <= free_before,
         "memory_info's free fell by " + std::to_string(free_before - free_after) +
             " bytes after a malloc of " + std::to_string(bytes));
}

// ---- copies, streams, events -------------------------------------------------------

void copy_round_trip(int device) {
  HostBuffer in(device, kBytes), out(device, kBytes);
  fill_pattern(in.data(), kBytes, 1);
  DeviceBuffer x(device, kBytes);
  h2d(x.get(), in, device, nullptr);
  d2h(out, x.get(), device, nullptr);
  ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize (default stream)");
  expect(same(in.data(), out.data(), kBytes),
         "bytes copied to the device and back on the default stream differ after stream_synchronize");
}

void stream_order(int device) {
  OwnStream s(device);
  HostBuffer in(device, kBytes), out(device, kBytes);
  fill_pattern(in.data(), kBytes, 2);
  DeviceBuffer x(device, kBytes), y(device, kBytes);
  h2d(x.get(), in, device, s.get());
  ok(runtime::memcpy(y.get(), x.get(), kBytes, CopyKind::DeviceToDevice, device, s.get()),
     "memcpy DeviceToDevice");
  d2h(out, y.get(), device, s.get());
  ok(runtime::stream_synchronize(device, s.get()), "stream_synchronize");
  expect(same(in.data(), out.data(), kBytes),
         "three copies queued on one stream (host->X, X->Y, Y->host) did not run in order");
  bool idle = false;
  ok(runtime::stream_query(device, s.get(), &idle), "stream_query");
  expect(idle, "stream_query reports work pending after stream_synchronize returned");
}

void event_never_recorded(int device) {
  OwnEvent e(device);
  bool done = false;
  ok(runtime::event_query(device, e.get(), &done), "event_query");
  expect(done, "event_query of an event never recorded is not done");
  ok(runtime::event_synchronize(device, e.get()), "event_synchronize of an event never recorded");
  OwnStream s(device);
  ok(runtime::stream_wait_event(device, s.get(), e.get()), "stream_wait_event of an event never recorded");
  ok(runtime::stream_synchronize(device, s.get()), "stream_synchronize after waiting for an event never recorded");
}

void event_rerecord(int device) {
  OwnStream s1(device), s2(device);
  OwnEvent e(device);
  HostBuffer first(device, kBytes), second(device, kBytes), out(device, kBytes);
  fill_pattern(first.data(), kBytes, 3);
  fill_pattern(second.data(), kBytes, 4);
  DeviceBuffer x(device, kBytes);
  h2d(x.get(), first, device, s1.get());
  ok(runtime::event_record(device, e.get(), s1.get()), "event_record");
  ok(runtime::event_synchronize(device, e.get()), "event_synchronize");
  h2d(x.get(), second, device, s1.get());
  ok(runtime::event_record(device, e.get(), s1.get()), "event_record (again)");
  // waits refer to the latest record: after it, x holds the second bytes
  ok(runtime::event_synchronize(device, e.get()), "event_synchronize");
  bool idle = false;
  ok(runtime::stream_query(device, s1.get(), &idle), "stream_query");
  expect(idle, "after event_synchronize returned, stream_query of the recording stream still "
               "reports work queued before the record as pending");
  d2h(out, x.get(), device, s2.get());
  ok(runtime::stream_synchronize(device, s2.get()), "stream_synchronize");
  expect(same(second.data(), out.data(), kBytes),
         "event_synchronize of a re-recorded event returned before the work before its latest record");
}

void event_elapsed(int device) {
  OwnStream s(device);
  OwnEvent a(device), b(device);
  ok(runtime::event_record(device, a.get(), s.get()), "event_record");
  ok(runtime::event_record(device, b.get(), s.get()), "event_record");
  ok(runtime::stream_synchronize(device, s.get()), "stream_synchronize");
  bool done = false;
  ok(runtime::event_query(device, b.get(), &done), "event_query");
  expect(done, "event_query of an event recorded before stream_synchronize is not done");
  float ms = -1;
  ok(runtime::event_elapsed_ms(a.get(), b.get(), &ms), "event_elapsed_ms");
  expect(ms >= 0 && std::isfinite(ms), "event_elapsed_ms gave " + std::to_string(ms));
}

void stream_wait_event_check(int device) {
  OwnStream s1(device), s2(device);
  OwnEvent e(device);
  HostBuffer in(device, kBytes), out(device, kBytes);
  fill_pattern(in.data(), kBytes, 5);
  DeviceBuffer x(device, kBytes);
  h2d(x.get(), in, device, s1.get());
  ok(runtime::event_record(device, e.get(), s1.get()), "event_record");
  ok(runtime::stream_wait_event(device, s2.get(), e.get()), "stream_wait_event");
  d2h(out, x.get(), device, s2.get());
  ok(runtime::stream_synchronize(device, s2.get()), "stream_synchronize");
  expect(same(in.data(), out.data(), kBytes),
         "a copy queued on stream 2 after stream_wait_event(an event recorded after a copy on "
         "stream 1) read the bytes before stream 1's copy");
}

void device_synchronize_check(int device) {
  OwnStream s1(device), s2(device);
  HostBuffer a(device, kBytes), b(device, kBytes), out_a(device, kBytes), out_b(device, kBytes);
  fill_pattern(a.data(), kBytes, 6);
  fill_pattern(b.data(), kBytes, 7);
  DeviceBuffer x(device, kBytes), y(device, kBytes);
  h2d(x.get(), a, device, s1.get());
  d2h(out_a, x.get(), device, s1.get());
  h2d(y.get(), b, device, nullptr);
  d2h(out_b, y.get(), device, nullptr);
  ok(runtime::device_synchronize(device), "device_synchronize");
  expect(same(a.data(), out_a.data(), kBytes) && same(b.data(), out_b.data(), kBytes),
         "device_synchronize returned before the work of a created stream and the default stream");
}

void concurrent_calls(int device) {
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int round = 0; round < 8; ++round) stream_order(device);
      } catch (const Failed& f) {
        errors[t] = f.why;
      } catch (const std::exception& e) {
        errors[t] = std::string("threw: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) expect(e.empty(), "from 4 threads at once: " + e);
}

void memcpy_peer_check(int device) {
  if (runtime::device_count() < 2) throw Skipped{"one device"};
  const int other = device == 0 ? 1 : 0;
  HostBuffer in(device, kBytes), out(device, kBytes);
  fill_pattern(in.data(), kBytes, 8);
  DeviceBuffer x(device, kBytes), y(other, kBytes);
  h2d(x.get(), in, device, nullptr);
  ok(runtime::device_synchronize(device), "device_synchronize");
  ok(runtime::memcpy_peer(y.get(), other, x.get(), device, kBytes), "memcpy_peer");
  d2h(out, y.get(), other, nullptr);
  ok(runtime::stream_synchronize(other, nullptr), "stream_synchronize");
  expect(same(in.data(), out.data(), kBytes), "memcpy_peer's bytes differ on the other device");
}

// ---- options and errors -----------------------------------------------------------

void unknown_option(int) {
  const char* key = "flsdk_contract_no_such_option";
  const Status s = runtime::set_option(key, "1");
  expect(s == Status::InvalidValue, std::string("set_option of an unknown key returned ") +
                                        status_name(s) + ", not InvalidValue");
  expect(std::strstr(runtime::last_error(), key) != nullptr,
         std::string("set_option's message for an unknown key does not name it: '") +
             runtime::last_error() + "'");
  expect(runtime::get_option(key).empty(), "get_option of an unknown key is not \"\"");
}

// ---- optional primitives -----------------------------------------------------------

void memset_check(int device) {
  if constexpr (!config::kRuntimeHasMemset) {
    throw Skipped{"runtime_primitives lacks memset"};
  } else {
    HostBuffer out(device, kBytes);
    DeviceBuffer x(device, kBytes);
    const Status s = runtime::memset(x.get(), 0xab, kBytes, device, nullptr);
    if (s == Status::Unsupported) throw Skipped{"memset declined (Unsupported)"};
    ok(s, "memset");
    d2h(out, x.get(), device, nullptr);
    ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize");
    for (std::size_t i = 0; i < kBytes; ++i)
      expect(out.data()[i] == 0xab, "memset(0xab) left byte " + std::to_string(i) + " = " +
                                        std::to_string(out.data()[i]));
  }
}

struct Conversion {
  const char* what;  // the value, as the doc states it
  Dtype from;
  unsigned char src[8];
  Dtype to;
  unsigned char expected[8];
};

std::size_t size_of(Dtype t) {
  switch (t) {
    case Dtype::UInt8: case Dtype::Int8: case Dtype::Bool: return 1;
    case Dtype::Int16: case Dtype::Float16: case Dtype::BFloat16: return 2;
    case Dtype::Int32: case Dtype::Float32: return 4;
    case Dtype::Int64: case Dtype::Float64: return 8;
  }
  return 0;
}

template <class T>
Conversion conversion(const char* what, Dtype from, T value, Dtype to, std::uint64_t expected_bits) {
  Conversion c{what, from, {}, to, {}};
  std::memcpy(c.src, &value, sizeof value);
  std::memcpy(c.expected, &expected_bits, size_of(to));  // little endian, as every supported host
  return c;
}

// PyTorch's CPU .to() on x86-64 (runtime_adapter.h lists the rules); the first
// three are the values issue 36 found a runtime getting wrong.
std::vector<Conversion> conversions() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      conversion("3e9 float32 -> int32 INT32_MIN", Dtype::Float32, 3e9f, Dtype::Int32, 0x80000000u),
      conversion("3e9 float32 -> int16 0 (through int32)", Dtype::Float32, 3e9f, Dtype::Int16, 0),
      conversion("1.0004882812509095 float64 -> float16 1.0 (through float32)", Dtype::Float64,
                 1.0004882812509095, Dtype::Float16, 0x3c00),
      conversion("300.7 float32 -> int8 44", Dtype::Float32, 300.7f, Dtype::Int8, 44),
      conversion("-300.7 float64 -> uint8 212", Dtype::Float64, -300.7, Dtype::UInt8, 212),
      conversion("-129.9 float32 -> int8 127", Dtype::Float32, -129.9f, Dtype::Int8, 127),
      conversion("1e20 float64 -> int64 INT64_MIN", Dtype::Float64, 1e20, Dtype::Int64, 0x8000000000000000ull),
      conversion("NaN float64 -> int32 INT32_MIN", Dtype::Float64, nan, Dtype::Int32, 0x80000000u),
      conversion("NaN float32 -> bool true", Dtype::Float32, static_cast<float>(nan), Dtype::Bool, 1),
      conversion("-0.0 float32 -> bool false", Dtype::Float32, -0.0f, Dtype::Bool, 0),
      conversion("200 uint8 -> int8 -56", Dtype::UInt8, std::uint8_t{200}, Dtype::Int8, 0xc8),
      conversion("2^40+5 int64 -> int32 5", Dtype::Int64, std::int64_t{(1LL << 40) + 5}, Dtype::Int32, 5),
      conversion("true -> float16 1.0", Dtype::Bool, std::uint8_t{1}, Dtype::Float16, 0x3c00),
      conversion("70000 float32 -> float16 inf", Dtype::Float32, 70000.0f, Dtype::Float16, 0x7c00),
      conversion("2049 int64 -> float16 2048 (ties to even)", Dtype::Int64, std::int64_t{2049},
                 Dtype::Float16, 0x6800),
      conversion("65519 int32 -> bfloat16 65536", Dtype::Int32, std::int32_t{65519}, Dtype::BFloat16, 0x4780),
      conversion("1+2^-8+2^-30 float64 -> bfloat16 1.0 (through float32)", Dtype::Float64,
                 1.0 + 1.0 / 256 + 1.0 / (1 << 30), Dtype::BFloat16, 0x3f80),
      conversion("1.0048828125 float16 -> bfloat16 1.0078125", Dtype::Float16, std::uint16_t{0x3c05},
                 Dtype::BFloat16, 0x3f81),
      conversion("16777217 int64 -> float32 16777216", Dtype::Int64, std::int64_t{16777217},
                 Dtype::Float32, 0x4b800000u),
  };
}

runtime::StridedCopy strided(void* dst, const void* src, Dtype to, Dtype from) {
  runtime::StridedCopy c{};
  c.dst = dst;
  c.src = src;
  c.dst_dtype = to;
  c.src_dtype = from;
  c.ndim = 0;
  return c;
}

void copy_strided_conversions(int device) {
  if constexpr (!config::kRuntimeHasCopyStrided) {
    throw Skipped{"runtime_primitives lacks copy_strided"};
  } else {
    int declined = 0, checked = 0;
    std::string wrong;
    for (const Conversion& c : conversions()) {
      HostBuffer in(device, 8), out(device, 8);
      std::memcpy(in.data(), c.src, 8);
      DeviceBuffer x(device, 8), y(device, 8);
      h2d(x.get(), in, device, nullptr);
      const Status s = runtime::copy_strided(strided(y.get(), x.get(), c.to, c.from), device, nullptr);
      if (s == Status::Unsupported) {
        ++declined;
        continue;
      }
      ok(s, std::string("copy_strided (") + c.what + ")");
      d2h(out, y.get(), device, nullptr);
      ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize");
      ++checked;
      if (std::memcmp(out.data(), c.expected, size_of(c.to)) != 0) wrong += std::string("; ") + c.what;
    }
    if (!wrong.empty())
      throw Failed{"copy_strided converts differently from PyTorch's CPU: " + wrong.substr(2)};
    if (!checked) throw Skipped{"copy_strided declined every dtype change (Unsupported)"};
    (void)declined;
  }
}

void copy_strided_layouts(int device) {
  if constexpr (!config::kRuntimeHasCopyStrided) {
    throw Skipped{"runtime_primitives lacks copy_strided"};
  } else {
    // a 2x3 float32 matrix transposed into a 3x2, then one element broadcast (stride 0)
    HostBuffer in(device, 6 * 4), out(device, 6 * 4);
    float values[6] = {0, 1, 2, 3, 4, 5};
    std::memcpy(in.data(), values, sizeof values);
    DeviceBuffer x(device, sizeof values), y(device, sizeof values);
    h2d(x.get(), in, device, nullptr);
    runtime::StridedCopy t = strided(y.get(), x.get(), Dtype::Float32, Dtype::Float32);
    t.ndim = 2;
    t.sizes[0] = 3, t.sizes[1] = 2;
    t.dst_strides[0] = 2, t.dst_strides[1] = 1;  // y: contiguous 3x2
    t.src_strides[0] = 1, t.src_strides[1] = 3;  // x viewed as its transpose
    Status s = runtime::copy_strided(t, device, nullptr);
    if (s == Status::Unsupported) throw Skipped{"copy_strided declined a same-dtype transpose"};
    ok(s, "copy_strided (transpose)");
    d2h(out, y.get(), device, nullptr);
    ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize");
    const float transposed[6] = {0, 3, 1, 4, 2, 5};
    expect(std::memcmp(out.data(), transposed, sizeof transposed) == 0,
           "copy_strided of a transposed view put the elements elsewhere");
    runtime::StridedCopy fill = strided(y.get(), x.get(), Dtype::Float32, Dtype::Float32);
    fill.ndim = 1;
    fill.sizes[0] = 6;
    fill.dst_strides[0] = 1;
    fill.src_strides[0] = 0;  // a source stride of 0: one element everywhere
    s = runtime::copy_strided(fill, device, nullptr);
    if (s == Status::Unsupported) throw Skipped{"copy_strided declined a broadcast"};
    ok(s, "copy_strided (source stride 0)");
    d2h(out, y.get(), device, nullptr);
    ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize");
    const float zeros[6] = {0, 0, 0, 0, 0, 0};
    expect(std::memcmp(out.data(), zeros, sizeof zeros) == 0,
           "copy_strided with a source stride of 0 did not repeat the element");
  }
}

// Shared with the launched function of host_kernel_checks.
struct LaunchProbe {
  void* device_ptr;
  const void* host_ptr;
  bool saw_view = false;
  bool host_ptr_null = false;
};

// Launched work: what device_view answers there, and bytes written through it.
[[maybe_unused]] void probe_device_view(void* arg) {
  auto* p = static_cast<LaunchProbe*>(arg);
  auto* view = static_cast<unsigned char*>(runtime::device_view(p->device_ptr));
  p->saw_view = view != nullptr;
  p->host_ptr_null = runtime::device_view(p->host_ptr) == nullptr;
  if (view) std::memset(view, 0x5a, kBytes);
}

// Launched work that fails.
[[maybe_unused]] void throw_from_work(void*) { throw std::runtime_error("flsdk-contract-probe failure"); }

void host_kernel_checks(int device) {
  if constexpr (!config::kRuntimeHasHostKernels) {
    throw Skipped{"runtime_primitives lacks host_kernels"};
  } else {
    DeviceBuffer x(device, kBytes);
    HostBuffer out(device, kBytes);
    int host_value = 0;
    expect(runtime::device_view(x.get()) == nullptr,
           "device_view answered from host code (outside launched work)");
    LaunchProbe probe{x.get(), &host_value};
    ok(runtime::launch_host_kernel(device, nullptr, probe_device_view, &probe), "launch_host_kernel");
    d2h(out, x.get(), device, nullptr);
    ok(runtime::stream_synchronize(device, nullptr), "stream_synchronize");
    expect(probe.saw_view, "device_view of a device address inside launched work returned null");
    expect(probe.host_ptr_null, "device_view of a host address inside launched work did not return null");
    for (std::size_t i = 0; i < kBytes; ++i)
      expect(out.data()[i] == 0x5a, "bytes written through device_view inside launched work are not "
                                    "what a later copy on the same stream reads");
  }
}

void work_error_reported_once(int device) {
  if constexpr (!config::kRuntimeHasHostKernels) {
    throw Skipped{"runtime_primitives lacks host_kernels (no way to make queued work fail)"};
  } else {
    OwnStream s(device);
    ok(runtime::launch_host_kernel(device, s.get(), throw_from_work, nullptr), "launch_host_kernel");
    const Status first = runtime::stream_synchronize(device, s.get());
    expect(first != Status::Ok, "stream_synchronize returned Ok after queued work failed");
    expect(std::strstr(runtime::last_error(), "flsdk-contract-probe failure") != nullptr,
           std::string("stream_synchronize's message does not carry the failure of the work: '") +
               runtime::last_error() + "'");
    ok(runtime::stream_synchronize(device, s.get()),
       "a second stream_synchronize (the error was reported once already)");
  }
}

void pinned_host_check(int) {
  if constexpr (!config::kRuntimeHasPinnedHost) {
    throw Skipped{"runtime_primitives lacks pinned_host"};
  } else {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{1 << 20}}) {
      void* p = nullptr;
      ok(runtime::host_alloc(bytes, &p), "host_alloc(" + std::to_string(bytes) + ")");
      const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 64 == 0;
      if (p) std::memset(p, 1, bytes);  // host memory: the host reads and writes it
      ok(runtime::host_free(p), "host_free");
      expect(aligned, "host_alloc returned memory not aligned to 64 bytes");
    }
  }
}

struct Check {
  const char* claim;
  void (*run)(int device);
};

constexpr Check kChecks[] = {
    {"device_count", device_count_check},
    {"malloc_alignment", malloc_alignment},
    {"out_of_memory", out_of_memory},
    {"memory_info", memory_info_check},
    {"copy_round_trip", copy_round_trip},
    {"stream_order", stream_order},
    {"event_never_recorded", event_never_recorded},
    {"event_rerecord", event_rerecord},
    {"event_elapsed", event_elapsed},
    {"stream_wait_event", stream_wait_event_check},
    {"device_synchronize", device_synchronize_check},
    {"concurrent_calls", concurrent_calls},
    {"memcpy_peer", memcpy_peer_check},
    {"unknown_option", unknown_option},
    {"memset", memset_check},
    {"copy_strided_conversions", copy_strided_conversions},
    {"copy_strided_layouts", copy_strided_layouts},
    {"host_kernels", host_kernel_checks},
    {"work_error_reported_once", work_error_reported_once},
    {"pinned_host", pinned_host_check},
};

}  // namespace

std::vector<Result> run(int device) {
  std::vector<Result> results;
  for (const Check& check : kChecks) {
    Result r{check.claim, "ok", ""};
    try {
      check.run(device);
    } catch (const Failed& f) {
      r.status = "fail";
      r.detail = f.why;
    } catch (const Skipped& s) {
      r.status = "skip";
      r.detail = s.why;
    } catch (const std::exception& e) {
      r.status = "fail";
      r.detail = std::string("threw: ") + e.what();
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace FLSDK_BACKEND_NS::adapter_contract
