// acme vendor runtime: how its source files report errors (internal, see internal.h).
#pragma once

#include "acme_runtime.h"

#include <cstddef>
#include <string>

namespace acme_internal {

// A thread-local message per failed call, like cudaGetLastError's text.
// fail() records the message and returns `code`.
extern thread_local std::string t_last_error;
[[gnu::format(printf, 2, 3)]] acmeError_t fail(acmeError_t code, const char* fmt, ...);
acmeError_t fail_str(acmeError_t code, std::string msg);
std::string human_bytes(size_t n);

}  // namespace acme_internal
