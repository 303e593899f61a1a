// acme vendor runtime: the interconnect's hooks into the driver (internal; not
// part of acme_runtime.h). acmeccl (../ccl), the collective library, links
// devices of processes on one host through these: it maps each peer's device
// memory once (the peer's arena file) and addresses buffers by their offset in
// it, as a real interconnect's driver maps peer BARs. Implemented in ipc.cpp,
// beside the IPC handles that use the same machinery.
#pragma once

#include "acme_runtime.h"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace acme_internal {

// A process of this machine, as its IPC server knows itself: the pid and a
// random nonce (a reused pid never names a new process).
struct ProcessRef {
  int32_t pid = 0;
  uint64_t nonce = 0;
};

// One device's memory as a peer may map it: the arena's file, named by the
// process serving it and the arena's uid; `len` bytes.
struct ArenaRef {
  ProcessRef proc;
  uint64_t uid = 0;
  uint64_t len = 0;
};

// This process (starts its IPC server on first use).
acmeError_t ipc_self(ProcessRef* out);

// Device `device`'s memory as peers map it. acmeErrorRuntime (and the last
// error) when it cannot be shared.
acmeError_t ipc_export_arena(int device, ArenaRef* out);

// Maps a peer's device memory whole (read/write, shared): *view is file offset
// 0. Mapped once per process and counted; ipc_unmap_arena drops one use. The
// device memory of this very process maps to its own view.
acmeError_t ipc_map_arena(const ArenaRef& ref, char** view);
void ipc_unmap_arena(const ArenaRef& ref);

// The file offset of [p, p + n) in device `device`'s memory, which must lie in
// one live allocation of that device (InvalidValue and the last error naming
// `what` otherwise).
acmeError_t ipc_arena_offset(int device, const void* p, size_t n, const char* what,
                             uint64_t* off);

// Where [p, p + n) of device `device` lives for peers: the arena (this
// process's device memory, or the process's whose memory was opened here from
// an IPC handle) and the file offset. It must lie in one live allocation (or
// opened region); InvalidValue and the last error naming `what` otherwise.
acmeError_t ipc_locate(int device, const void* p, size_t n, const char* what, ArenaRef* ref,
                       uint64_t* off);

// Files a peer may fetch from this process's IPC server by key (acmeccl's
// control blocks), and fetching one from a peer (the fd is the caller's).
acmeError_t ipc_register_fd(uint64_t key, int fd, size_t len);
void ipc_unregister_fd(uint64_t key);
acmeError_t ipc_fetch_fd(const ProcessRef& peer, uint64_t key, int* fd, size_t* len);

// False once process `pid` has exited (gone, or a zombie nobody reaped yet).
bool process_alive(pid_t pid);

// The link-speed option (GB/s; 0 = unlimited).
double link_gbps();

// A random 64-bit number.
uint64_t random_u64();

}  // namespace acme_internal
