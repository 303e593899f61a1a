// Kernels in the device's own language (device.yaml `device_code`, e.g. OpenCL C),
// which the driver compiles at run time instead of the C++ compiler at build time.
// `flsdk gen` embeds every kernels/ file with one of device_code's suffixes into
// generated/device_sources.cpp; the runtime adapter (which needs no torch headers:
// neither does this) looks a source up by path, hands its text to the driver's
// compiler, and may key a cache of compiled binaries on `sha256` (plus the driver's
// identity and the build options). Editing such a file and rebuilding after
// `flsdk gen` is all it takes: the build record tracks the files, so a stale
// installed build is refused as for any C++ source.
#pragma once

#include <cstddef>

#include "device_config.h"

namespace FLSDK_BACKEND_NS::device_sources {

struct DeviceSource {
  const char* path;    // relative to the backend root: "kernels/pointwise.cl"
  const char* text;    // the file's bytes (UTF-8), null-terminated
  std::size_t size;    // bytes of text, without the terminator
  const char* sha256;  // hex SHA-256 of the file's bytes
};

// All of them, sorted by path.
const DeviceSource* all(std::size_t* count);
// The one at `path`, or null.
const DeviceSource* find(const char* path);

}  // namespace FLSDK_BACKEND_NS::device_sources
