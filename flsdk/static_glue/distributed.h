// The backend's c10d process group (what ProcessGroupNCCL is to CUDA): what
// process_group.cpp (the c10d entry points), comm_work.cpp (asynchronous Work),
// comm_native.cpp (bytes over the vendor's collective library, ccl_adapter.h),
// comm_staged.cpp (bytes staged through pinned host memory over gloo) and
// python_distributed.cpp (the Python binding) share.
//
// How a collective runs, on either engine:
//   1. the caller's current stream records a "ready" event; the group's
//      communication stream of that device waits for it, so the caller's later
//      work overlaps the collective;
//   2. the collective's plan runs with the communication stream current: its
//      copies (flattening lists, non-contiguous tensors) are device work on that
//      stream, and the engine moves the bytes;
//   3. the communication stream records an end event; Work::wait() makes the
//      caller's current stream wait for it (the host does not block);
//   4. the Work keeps every tensor the collective touches alive until the end
//      event has completed (the group's watchdog checks), so the caching
//      allocator cannot hand that memory out meanwhile.
// The native engine queues all of it from the calling thread. The staged engine
// runs plans in order on a thread of the group: a host step (gloo) sits in the
// middle of every collective, and a stream cannot wait for the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "ccl_adapter.h"

namespace FLSDK_BACKEND_NS::distributed {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What the engines and messages know about a group.
struct GroupInfo {
  std::string backend_name;  // the c10d backend name ("acmeccl", "gloo_acme")
  std::string group_name;    // c10d's name of the group ("0", "1", ...), set after creation
  std::string group_desc;    // c10d's description ("default_pg", a mesh dimension ...)
  int rank = 0;
  int size = 1;
  std::vector<std::int64_t> global_ranks;  // global rank of each group rank (empty: the same)
  // "group 0 'default_pg' (2 ranks: 0, 1)" for messages.
  std::string describe() const;
};

// One primitive on contiguous device tensors of one device.
struct CommOp {
  enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send, Recv };
  Kind kind;
  at::Tensor send;  // what this rank contributes (may be `recv` itself: in place)
  at::Tensor recv;  // where the result lands (undefined for Send)
  ccl::ReduceOp op = ccl::ReduceOp::Sum;
  int root = 0;  // Broadcast, Reduce: the root rank; Send, Recv: the peer
  int tag = 0;   // Send, Recv
  // AllToAll: elements to each peer and from each peer, in rank order.
  std::vector<std::int64_t> send_counts, recv_counts;
};
const char* kind_name(CommOp::Kind kind);

// A collective as the engines run it: device work before, the bytes, device
// work after (all on the communication stream).
struct Plan {
  c10::DeviceIndex device = 0;
  std::function<void()> pre;   // may be empty
  std::vector<CommOp> ops;
  std::function<void()> post;  // may be empty
  bool point_to_point() const;
};

// Asynchronous Work of this backend (comm_work.cpp).
class Work final : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, std::string what, c10::Device device,
       std::vector<at::Tensor> outputs, milliseconds timeout, bool blocking);
  ~Work() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(milliseconds timeout) override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  float getDuration() const override;

  // ---- for the engines and the watchdog -------------------------------------
  const std::string& what() const { return what_; }
  c10::Device device() const { return device_; }
  // Tensors and events that must live until the collective is done.
  void keep(std::vector<at::Tensor> tensors);
  void keep_event(runtime::Event event);
  // The engine queued everything; `end` is recorded on the communication
  // stream, which is current: the future completes with events on it.
  void host_done(runtime::Event end);
  // The collective failed: wait(), the future and isSuccess() say so.
  void fail(const std::string& message);
  bool failed() const;
  // True once the end event has completed (the kept tensors are dropped then),
  // or the work failed before queuing anything.
  bool poll_device_done();
  bool overdue(Clock::time_point now) const;
  milliseconds timeout() const { return timeout_; }
  std::string age(Clock::time_point now) const;

 private:
  void wait_host_done(milliseconds timeout);
  void rethrow_locked() const;

  std::string what_;
  c10::Device device_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> kept_;
  std::vector<runtime::Event> kept_events_;
  milliseconds timeout_;
  bool blocking_;  // barrier: wait() blocks the host, as c10d's barrier promises
  Clock::time_point start_ = Clock::now();
  bool host_done_ = false;
  bool device_done_ = false;
  runtime::Event end_event_ = nullptr;
  std::string error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Moves the bytes of plans. One engine per group.
class Engine {
 public:
  virtual ~Engine() = default;
  // `ready` was recorded on the caller's current stream of plan.device; the
  // engine makes the communication stream wait for it first and hands it to the
  // Work to destroy. Ends with work->host_done(...) or work->fail(...).
  virtual void submit(const c10::intrusive_ptr<Work>& work, Plan plan, runtime::Event ready) = 0;
  // Native engines: the plans submitted between start and end become one
  // fused operation of the library (ccl::group_start/group_end).
  virtual bool supports_coalescing() const { return false; }
  virtual void start_coalescing() {}
  virtual void end_coalescing(const c10::intrusive_ptr<Work>& group_work) {}
  // An error found asynchronously (a dead peer, an abort), or "" while healthy.
  virtual std::string async_error() = 0;
  virtual void abort() = 0;
  // Waits (bounded) for queued plans, then frees what the engine holds.
  virtual void shutdown() = 0;
};

std::unique_ptr<Engine> make_native_engine(const GroupInfo& group,
                                           c10::intrusive_ptr<c10d::Store> store,
                                           milliseconds timeout);
std::unique_ptr<Engine> make_staged_engine(const GroupInfo& group,
                                           c10::intrusive_ptr<c10d::Backend> gloo);

// At interpreter exit: a tensor whose Python object C++ still owns needs the GIL
// to be freed, and a thread taking the GIL during finalization is killed
// mid-unwind (the process aborts). From set_exiting() on (the Python glue calls
// it from an atexit hook, before finalization) the threads of every group leak
// what they would free instead: the process is about to end.
void set_exiting();
bool exiting();
void dispose(std::vector<at::Tensor>&& tensors);
void dispose(c10::intrusive_ptr<c10d::Work>&& work);
// Stops the watchdog of every live group (the atexit hook, GIL released).
void stop_all_watchdogs();

// The communication stream of `device` in `streams` (one per device and group,
// like ProcessGroupNCCL's), created on first use.
c10::Stream comm_stream(std::vector<std::optional<c10::Stream>>& streams, std::mutex& mutex,
                        c10::DeviceIndex device);

// The process group. Registered with torch.distributed under the backend's
// comm_backend name when the backend loads (python_distributed.cpp).
class ProcessGroup final : public c10d::Backend {
 public:
  struct Options {
    std::string backend_name;
    bool native = false;  // the collective library; else staged over `gloo`
    milliseconds timeout{1800000};
    std::string group_name;
    std::vector<std::int64_t> global_ranks;
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::Backend> gloo;  // staged only
  };
  ProcessGroup(int rank, int size, Options options);
  ~ProcessGroup() override;

  const std::string getBackendName() const override { return info_.backend_name; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  bool supportsCoalescing() const override;
  void setTimeout(milliseconds timeout) override;
  void setGroupUid(const std::string& uid) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // For the async-error poll of host waits (host_sync.h).
  void poll_async_error();
  bool native() const { return native_; }
  void stop_watchdog();

 private:
  // Checks, then hands `plan` to the engine with a Work for it.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char* what,
                                     const std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor> keep, Plan plan,
                                     milliseconds timeout, bool blocking = false);
  milliseconds timeout_of(milliseconds requested) const;
  void check_healthy(const char* what);
  void watchdog();
  void fail_all(const std::string& message);

  GroupInfo info_;
  bool native_;
  std::atomic<std::int64_t> timeout_ms_;
  std::unique_ptr<Engine> engine_;
  std::atomic<std::uint64_t> sequence_{0};

  std::mutex mutex_;  // guards the members below
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<Work>> outstanding_;
  std::vector<c10::intrusive_ptr<Work>> coalesced_;
  bool coalescing_ = false;
  std::string error_;  // the first fatal error: later collectives fail with it
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace FLSDK_BACKEND_NS::distributed
