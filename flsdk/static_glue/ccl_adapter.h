// The collective-library adapter: what a vendor implements over its collective
// communication library (an NCCL, HCCL or CNCL of its own) when device.yaml says
// `collectives: native`; the reference is the scaffold's docs/ccl-adapter.md.
// The generated c10d backend (process_group.cpp) calls nothing else to move
// bytes between ranks. Without a library (`collectives: staged`, the default)
// no function here is called or needs defining: the same c10d backend stages
// device tensors through pinned host memory over gloo.
//
// Keep this header free of torch includes, like runtime_adapter.h.
//
// The model, NCCL's:
// * A communicator joins `nranks` processes (one device each). Rank 0 of a new
//   group calls get_unique_id; the glue hands the id to every rank through the
//   c10d store; every rank then calls comm_init with it.
// * Every collective and point-to-point call is queued on `stream` (the glue's
//   communication stream of the device, after an event from the compute
//   stream) and returns at once: the bytes move as device work, in stream
//   order, never through host code. All ranks of a communicator issue its
//   collectives in the same order.
// * Pointers are device memory of the communicator's device, allocated until
//   the stream has run the call (the glue keeps the tensors alive). `send` and
//   `recv` buffers may alias (in place) where a call says so.
// * Counts are in elements of `dtype`. The glue passes reductions the tensor's
//   dtype (a Dtype the device lists in device.yaml `dtypes`) and moves every
//   other collective as bytes (Dtype::UInt8), so a library needs arithmetic
//   only for its device's dtypes.
// * A call that fails before queuing returns its Status and sets last_error().
//   A failure while the work runs (a peer that exited, an abort) ends that work
//   and every later work of the communicator with an error the stream reports,
//   and comm_get_async_error answers it from then on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "device_config.h"
#include "runtime_adapter.h"

namespace FLSDK_BACKEND_NS::ccl {

using runtime::Dtype;
using runtime::Status;
using runtime::Stream;

// This header's version, for an adapter written against an older one: a new
// minor adds optional calls or states behaviour the glue already relied on; a
// new major changes a declaration or a promise (an adapter must be revisited).
// As runtime_adapter.h, a source-level API compiled into the backend (no ABI);
// device.yaml's `adapter_versions: {ccl: "X.Y"}` records the version a backend's
// adapter was written for, and `flsdk gen` and `flsdk check` print the changes
// since (listed here, newest first).
//
// Changes:
//   1.0  the first version.
constexpr int kCclAdapterVersionMajor = 1;
constexpr int kCclAdapterVersionMinor = 0;

// Numbered as c10d's ReduceOp::RedOpType. Bool tensors are reduced by the glue
// as UInt8 with Max (sum, a logical or) or Min (product, a logical and).
enum class ReduceOp : int {
  Sum = 0,
  // Sum divided by nranks: floating types divide; integer types round toward
  // negative infinity (torch.div(..., rounding_mode="floor")).
  Avg = 1,
  Product = 2,
  Min = 3,
  Max = 4,
};

// Opaque bytes that let the ranks of one group find each other (an address,
// a random tag); all-zero is never a valid id.
constexpr std::size_t kUniqueIdBytes = 128;
struct UniqueId {
  unsigned char bytes[kUniqueIdBytes];
};

using Comm = void*;

// ---- communicators -----------------------------------------------------------

// Called on rank 0 of every new group (the default group, each new_group and
// DeviceMesh dimension); any thread.
Status get_unique_id(UniqueId* id);

// Joins rank `rank` of `nranks` to the group of `id`, on device `device`.
// Returns once every rank has joined, or Error after `timeout_ms` (> 0) naming
// the ranks that did not. A process may hold many communicators (one per group),
// some on the same device.
Status comm_init(Comm* comm, int nranks, const UniqueId& id, int rank, int device,
                 std::int64_t timeout_ms);

// Frees the communicator. The glue calls it only when no work of it is queued
// or running any more (after comm_abort, work that ended with an error counts
// as done).
Status comm_destroy(Comm comm);

// From any thread at any time, possibly while another thread is inside a call
// of this communicator: queued and running work of it ends with an error (the
// streams waiting on it move on), later calls fail at once. The glue aborts a
// communicator when a collective outlives the group's timeout or the library
// reports an asynchronous error.
Status comm_abort(Comm comm);

// Ok while the communicator is healthy; otherwise the error found while work
// ran (a peer process that exited, a broken link, an abort), with its message
// in *message. Cheap (the glue polls it from a watchdog thread and after host
// waits); thread-safe.
Status comm_get_async_error(Comm comm, std::string* message);

// ---- collectives (queued on `stream` of the communicator's device) ----------

// recv = op over all ranks of send; send == recv is allowed (in place).
Status all_reduce(const void* send, void* recv, std::size_t count, Dtype dtype, ReduceOp op,
                  Comm comm, Stream stream);
// recv = root's send on every rank (send is read on root only; send == recv
// there is allowed: in place).
Status broadcast(const void* send, void* recv, std::size_t count, Dtype dtype, int root,
                 Comm comm, Stream stream);
// recv on root = op over all ranks of send; recv is ignored on other ranks.
Status reduce(const void* send, void* recv, std::size_t count, Dtype dtype, ReduceOp op, int root,
              Comm comm, Stream stream);
// recv (nranks * send_count elements) = every rank's send, in rank order. send
// may be recv's own slot (recv + rank * send_count: in place).
Status all_gather(const void* send, void* recv, std::size_t send_count, Dtype dtype, Comm comm,
                  Stream stream);
// recv (recv_count elements) = op over all ranks of slot `rank` of send (nranks *
// recv_count elements). recv may be send's own slot (in place).
Status reduce_scatter(const void* send, void* recv, std::size_t recv_count, Dtype dtype,
                      ReduceOp op, Comm comm, Stream stream);
// For every peer p: send_counts[p] elements at send + send_offsets[p] go to p,
// which receives them at its recv + recv_offsets[this rank]; recv_counts[p] is
// what p sends here. The arrays (nranks entries each) are read before the call
// returns. send and recv do not overlap.
Status all_to_all(const void* send, const std::size_t* send_counts,
                  const std::size_t* send_offsets, void* recv, const std::size_t* recv_counts,
                  const std::size_t* recv_offsets, Dtype dtype, Comm comm, Stream stream);

// ---- point to point ----------------------------------------------------------

// One matched pair: `count` elements from this rank's send to `peer`'s recv from
// this rank. Matched in call order per (sender, receiver) pair.
Status send(const void* buf, std::size_t count, Dtype dtype, int peer, Comm comm, Stream stream);
Status recv(void* buf, std::size_t count, Dtype dtype, int peer, Comm comm, Stream stream);

// Calls on this thread between group_start and group_end are one operation:
// they progress together, so point-to-point calls may be issued in any order
// (both ranks sending first, as batch_isend_irecv and all-to-all patterns do)
// without deadlock, and collectives may be fused. Nested groups count as one.
// Within a group every call names the same communicator and stream (c10d's
// coalescing never mixes groups).
Status group_start();
Status group_end();

// Message of the last failed call on this thread.
const char* last_error();

}  // namespace FLSDK_BACKEND_NS::ccl
