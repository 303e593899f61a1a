// acme's implementation of flsdk's collective-library adapter
// (generated/ccl_adapter.h): acme::ccl::* mapped 1:1 onto acmeccl's C API
// (acmeccl.h). No logic of its own: every check and message comes from
// acmeccl, so the generated c10d backend and direct users see the same.
#include "acmeccl.h"

#include "../generated/ccl_adapter.h"

#include <cstring>
#include <string>

namespace acme::ccl {
namespace {

// acmeccl's numbering is flsdk's; these keep it so.
static_assert(static_cast<int>(Status::Ok) == acmecclSuccess);
static_assert(static_cast<int>(Status::OutOfMemory) == acmecclOutOfMemory);
static_assert(static_cast<int>(Status::InvalidDevice) == acmecclInvalidDevice);
static_assert(static_cast<int>(Status::InvalidValue) == acmecclInvalidArgument);
static_assert(static_cast<int>(Status::Error) == acmecclError);
static_assert(static_cast<int>(ReduceOp::Sum) == acmecclSum);
static_assert(static_cast<int>(ReduceOp::Avg) == acmecclAvg);
static_assert(static_cast<int>(ReduceOp::Product) == acmecclProd);
static_assert(static_cast<int>(ReduceOp::Min) == acmecclMin);
static_assert(static_cast<int>(ReduceOp::Max) == acmecclMax);
static_assert(static_cast<int>(Dtype::UInt8) == acmecclUint8);
static_assert(static_cast<int>(Dtype::Int8) == acmecclInt8);
static_assert(static_cast<int>(Dtype::Int16) == acmecclInt16);
static_assert(static_cast<int>(Dtype::Int32) == acmecclInt32);
static_assert(static_cast<int>(Dtype::Int64) == acmecclInt64);
static_assert(static_cast<int>(Dtype::Float16) == acmecclFloat16);
static_assert(static_cast<int>(Dtype::Float32) == acmecclFloat32);
static_assert(static_cast<int>(Dtype::Float64) == acmecclFloat64);
static_assert(static_cast<int>(Dtype::Bool) == acmecclBool);
static_assert(static_cast<int>(Dtype::BFloat16) == acmecclBfloat16);
static_assert(kUniqueIdBytes == ACMECCL_UNIQUE_ID_BYTES);

Status st(acmecclResult_t r) { return static_cast<Status>(r); }
acmecclComm_t as_comm(Comm c) { return static_cast<acmecclComm_t>(c); }
acmeStream_t as_stream(Stream s) { return static_cast<acmeStream_t>(s); }
acmecclDataType_t as_dtype(Dtype d) { return static_cast<acmecclDataType_t>(d); }
acmecclRedOp_t as_op(ReduceOp op) { return static_cast<acmecclRedOp_t>(op); }

}  // namespace

Status get_unique_id(UniqueId* id) {
  if (!id) return st(acmecclGetUniqueId(nullptr));
  acmecclUniqueId u;
  const Status r = st(acmecclGetUniqueId(&u));
  std::memcpy(id->bytes, u.internal, sizeof u.internal);
  return r;
}

Status comm_init(Comm* comm, int nranks, const UniqueId& id, int rank, int device,
                 std::int64_t timeout_ms) {
  acmecclUniqueId u;
  std::memcpy(u.internal, id.bytes, sizeof u.internal);
  acmecclComm_t c = nullptr;
  const Status r = st(acmecclCommInitRank(comm ? &c : nullptr, nranks, u, rank, device, timeout_ms));
  if (comm) *comm = c;
  return r;
}

Status comm_destroy(Comm comm) { return st(acmecclCommDestroy(as_comm(comm))); }

Status comm_abort(Comm comm) { return st(acmecclCommAbort(as_comm(comm))); }

Status comm_get_async_error(Comm comm, std::string* message) {
  acmecclResult_t async = acmecclSuccess;
  char buf[4096];
  const acmecclResult_t r = acmecclCommGetAsyncError(as_comm(comm), &async, buf, sizeof buf);
  if (r != acmecclSuccess) return st(r);
  if (async != acmecclSuccess && message) *message = buf;
  return st(async);
}

Status all_reduce(const void* send, void* recv, std::size_t count, Dtype dtype, ReduceOp op,
                  Comm comm, Stream stream) {
  return st(acmecclAllReduce(send, recv, count, as_dtype(dtype), as_op(op), as_comm(comm),
                             as_stream(stream)));
}

Status broadcast(const void* send, void* recv, std::size_t count, Dtype dtype, int root,
                 Comm comm, Stream stream) {
  return st(acmecclBroadcast(send, recv, count, as_dtype(dtype), root, as_comm(comm),
                             as_stream(stream)));
}

Status reduce(const void* send, void* recv, std::size_t count, Dtype dtype, ReduceOp op, int root,
              Comm comm, Stream stream) {
  return st(acmecclReduce(send, recv, count, as_dtype(dtype), as_op(op), root, as_comm(comm),
                          as_stream(stream)));
}

Status all_gather(const void* send, void* recv, std::size_t send_count, Dtype dtype, Comm comm,
                  Stream stream) {
  return st(acmecclAllGather(send, recv, send_count, as_dtype(dtype), as_comm(comm),
                             as_stream(stream)));
}

Status reduce_scatter(const void* send, void* recv, std::size_t recv_count, Dtype dtype,
                      ReduceOp op, Comm comm, Stream stream) {
  return st(acmecclReduceScatter(send, recv, recv_count, as_dtype(dtype), as_op(op),
                                 as_comm(comm), as_stream(stream)));
}

Status all_to_all(const void* send, const std::size_t* send_counts,
                  const std::size_t* send_offsets, void* recv, const std::size_t* recv_counts,
                  const std::size_t* recv_offsets, Dtype dtype, Comm comm, Stream stream) {
  return st(acmecclAllToAllv(send, send_counts, send_offsets, recv, recv_counts, recv_offsets,
                             as_dtype(dtype), as_comm(comm), as_stream(stream)));
}

Status send(const void* buf, std::size_t count, Dtype dtype, int peer, Comm comm, Stream stream) {
  return st(acmecclSend(buf, count, as_dtype(dtype), peer, as_comm(comm), as_stream(stream)));
}

Status recv(void* buf, std::size_t count, Dtype dtype, int peer, Comm comm, Stream stream) {
  return st(acmecclRecv(buf, count, as_dtype(dtype), peer, as_comm(comm), as_stream(stream)));
}

Status group_start() { return st(acmecclGroupStart()); }

Status group_end() { return st(acmecclGroupEnd()); }

const char* last_error() { return acmecclGetLastError(); }

}  // namespace acme::ccl
