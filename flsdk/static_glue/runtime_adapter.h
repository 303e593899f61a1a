// The device-runtime adapter: the only device-facing code the vendor writes
// (in runtime/adapter.cpp). Everything that touches PyTorch's C++ API is
// generated on top of these calls. Keep this header free of torch includes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::runtime {

enum class Status : int {
  Ok = 0,
  OutOfMemory = 1,
  InvalidDevice = 2,
  InvalidValue = 3,
  Error = 4,
};

enum class CopyKind : int {
  HostToHost = 0,
  HostToDevice = 1,
  DeviceToHost = 2,
  DeviceToDevice = 3,
};

// Opaque handles owned by the vendor runtime. A null Stream is the device's
// default stream, on which work runs in the calling thread.
using Stream = void*;
using Event = void*;

// Facts from device.yaml, after environment overrides, handed to init().
struct DeviceConfig {
  int device_count;
  std::size_t memory_capacity;   // bytes per device
  std::size_t memory_alignment;  // bytes
  int compute_units = 1;         // per device, >= 1; 0 = auto (the host's hardware threads)
};

Status init(const DeviceConfig& config);
int device_count();

Status malloc(int device, std::size_t bytes, void** ptr);
Status free(int device, void* ptr);
// `device` is the device of the device-side pointer (the destination for
// DeviceToDevice); `stream` orders the copy after earlier work on it.
Status memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind,
              int device, Stream stream);
Status memcpy_peer(void* dst, int dst_device, const void* src, int src_device,
                   std::size_t bytes);
Status memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes);

Status stream_create(int device, Stream* stream);
Status stream_destroy(int device, Stream stream);
Status stream_synchronize(int device, Stream stream);
Status stream_query(int device, Stream stream, bool* idle);
Status stream_wait_event(int device, Stream stream, Event event);

Status event_create(int device, Event* event);
Status event_destroy(int device, Event event);
Status event_record(int device, Event event, Stream stream);
Status event_synchronize(int device, Event event);
Status event_query(int device, Event event, bool* done);
Status event_elapsed_ms(Event start, Event end, float* ms);

Status device_synchronize(int device);

// Bracket every native kernel (nested calls allowed). A runtime that guards
// device memory from the host (acme's protect mode) opens it here.
void kernel_begin();
void kernel_end();

// Vendor-defined options (fault injection, debug modes), settable from Python.
Status set_option(const char* key, const char* value);
std::string get_option(const char* key);

// Message of the last failed call on this thread.
const char* last_error();

}  // namespace FLSDK_BACKEND_NS::runtime
