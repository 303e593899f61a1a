// acmeccl: the collective communication library of the simulated acme chip,
// what NCCL is to CUDA. A C API of its own, over the acme runtime
// (../runtime/acme_runtime.h); the flsdk collective-library adapter
// (ccl_adapter.cpp) maps acme::ccl::* onto it 1:1.
//
// The model simulated (README.md says more):
// * A communicator joins `nranks` processes, one acme device each. Rank 0
//   makes a unique id (acmecclGetUniqueId: an address to rendezvous at and a
//   random tag), the application hands it to every rank, every rank calls
//   acmecclCommInitRank with it.
// * Ranks whose ACME_HOST_ID (default: the machine's host name) is equal are
//   on one host: their devices reach each other's memory directly (a
//   peer-to-peer link: each rank maps its peers' device memory once), and a
//   small control block per rank in shared memory synchronises them (futexes).
//   Ranks on different hosts move bytes over TCP, hierarchically: within each
//   host first, then between the hosts, one rank per host on the network.
// * Every collective and point-to-point call is queued on an acme stream as
//   device work and returns at once; the bytes move when the stream gets
//   there, never through the host copy path. All ranks of a communicator issue
//   its collectives in the same order.
// * A failure while work runs (a peer process that exited, a broken link, an
//   abort) ends that work, and every later work of the communicator, with an
//   error the stream reports at its next synchronize, naming the operation,
//   the communicator and the rank; acmecclCommGetAsyncError answers it from
//   then on. Waits never block without checking for abort and for the peers'
//   liveness, so nothing hangs on a dead peer.
// * The link-speed option (acme runtime option "link_gbps", env
//   ACME_LINK_GBPS): bytes crossing a link take at least bytes / bandwidth.
//
// Every call may come from any thread. A failed call returns its code and sets
// acmecclGetLastError() for the calling thread.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "acme_runtime.h"

#define ACMECCL_VERSION "1.0.0"

extern "C" {

// Numbered as acmeError_t / flsdk's Status, so the adapter maps them 1:1.
typedef enum acmecclResult {
  acmecclSuccess = 0,
  acmecclOutOfMemory = 1,
  acmecclInvalidDevice = 2,
  acmecclInvalidArgument = 3,
  acmecclError = 4,  // a system call, a peer, an abort, a communicator that failed
} acmecclResult_t;

// Numbered as PyTorch's ScalarType (and acme's runtime Dtype).
typedef enum acmecclDataType {
  acmecclUint8 = 0,
  acmecclInt8 = 1,
  acmecclInt16 = 2,
  acmecclInt32 = 3,
  acmecclInt64 = 4,
  acmecclFloat16 = 5,
  acmecclFloat32 = 6,
  acmecclFloat64 = 7,
  acmecclBool = 11,  // moved as bytes; reduced as uint8
  acmecclBfloat16 = 15,
} acmecclDataType_t;

// Numbered as c10d's ReduceOp. Avg is the sum divided by nranks: floating
// types divide, integer types round toward negative infinity. float16 and
// bfloat16 are reduced in float and rounded to nearest even once.
typedef enum acmecclRedOp {
  acmecclSum = 0,
  acmecclAvg = 1,
  acmecclProd = 2,
  acmecclMin = 3,
  acmecclMax = 4,
} acmecclRedOp_t;

#define ACMECCL_UNIQUE_ID_BYTES 128
typedef struct acmecclUniqueId {
  unsigned char internal[ACMECCL_UNIQUE_ID_BYTES];
} acmecclUniqueId;

typedef struct acmecclComm* acmecclComm_t;

// ---- communicators ------------------------------------------------------------------
// On rank 0's process: opens the socket the ranks rendezvous at (kept until
// rank 0's acmecclCommInitRank with this id returns) and names it in *id.
acmecclResult_t acmecclGetUniqueId(acmecclUniqueId* id);
// Joins rank `rank` of `nranks` on acme device `device` of this process.
// Returns once every rank joined, or acmecclError after timeout_ms naming the
// ranks that did not (on rank 0; the others name rank 0 when it is the one
// missing). Several communicators per process, and per device, are fine.
acmecclResult_t acmecclCommInitRank(acmecclComm_t* comm, int nranks, acmecclUniqueId id,
                                    int rank, int device, int64_t timeout_ms);
// Frees the communicator (its queued work must have run: after an abort,
// work that ended with an error counts as run).
acmecclResult_t acmecclCommDestroy(acmecclComm_t comm);
// Any thread, any time: queued and running work ends with an error, later
// calls fail at once. Peers on this host see it at once (the rank marks
// itself failed); peers on other hosts when the links close.
acmecclResult_t acmecclCommAbort(acmecclComm_t comm);
// *async_error = acmecclSuccess while healthy; otherwise the error found while
// work ran, its message copied into `message` (NUL-terminated, truncated to
// message_len; may be null). Cheap and thread-safe.
acmecclResult_t acmecclCommGetAsyncError(acmecclComm_t comm, acmecclResult_t* async_error,
                                         char* message, size_t message_len);
acmecclResult_t acmecclCommCount(acmecclComm_t comm, int* nranks);
acmecclResult_t acmecclCommUserRank(acmecclComm_t comm, int* rank);
acmecclResult_t acmecclCommDevice(acmecclComm_t comm, int* device);
// The hosts the ranks are on (distinct ACME_HOST_ID values) and how many ranks
// share this rank's host.
acmecclResult_t acmecclCommTopology(acmecclComm_t comm, int* nhosts, int* local_ranks);

// ---- collectives (queued on `stream` of the communicator's device) ----------------
// Buffers are device memory of the communicator's device allocated by this
// process, live until the stream has run the call. Counts are elements.
acmecclResult_t acmecclAllReduce(const void* send, void* recv, size_t count,
                                 acmecclDataType_t dtype, acmecclRedOp_t op, acmecclComm_t comm,
                                 acmeStream_t stream);  // send == recv: in place
acmecclResult_t acmecclBroadcast(const void* send, void* recv, size_t count,
                                 acmecclDataType_t dtype, int root, acmecclComm_t comm,
                                 acmeStream_t stream);  // send read on root only
acmecclResult_t acmecclReduce(const void* send, void* recv, size_t count,
                              acmecclDataType_t dtype, acmecclRedOp_t op, int root,
                              acmecclComm_t comm, acmeStream_t stream);  // recv on root only
acmecclResult_t acmecclAllGather(const void* send, void* recv, size_t send_count,
                                 acmecclDataType_t dtype, acmecclComm_t comm,
                                 acmeStream_t stream);  // send may be recv + rank * send_count
acmecclResult_t acmecclReduceScatter(const void* send, void* recv, size_t recv_count,
                                     acmecclDataType_t dtype, acmecclRedOp_t op,
                                     acmecclComm_t comm,
                                     acmeStream_t stream);  // recv may be send + rank * recv_count
// send_counts[p] elements at send + send_offsets[p] go to rank p, which
// receives them at recv + recv_offsets[this rank] (recv_counts[p]: what p sends
// here; both must agree). The arrays are read before the call returns.
acmecclResult_t acmecclAllToAllv(const void* send, const size_t* send_counts,
                                 const size_t* send_offsets, void* recv, const size_t* recv_counts,
                                 const size_t* recv_offsets, acmecclDataType_t dtype,
                                 acmecclComm_t comm, acmeStream_t stream);

// ---- point to point -------------------------------------------------------------------
// Matched in call order per (sender, receiver) pair; sizes must agree.
acmecclResult_t acmecclSend(const void* buf, size_t count, acmecclDataType_t dtype, int peer,
                            acmecclComm_t comm, acmeStream_t stream);
acmecclResult_t acmecclRecv(void* buf, size_t count, acmecclDataType_t dtype, int peer,
                            acmecclComm_t comm, acmeStream_t stream);
// Calls of this thread between GroupStart and GroupEnd are one piece of device
// work per communicator (queued at GroupEnd on the stream they name): sends
// and receives progress together, in any order, without deadlock; collectives
// run in call order. Nested groups count as one.
acmecclResult_t acmecclGroupStart(void);
acmecclResult_t acmecclGroupEnd(void);

// ---- errors -------------------------------------------------------------------------------
const char* acmecclGetLastError(void);
const char* acmecclGetErrorString(acmecclResult_t result);

}  // extern "C"
