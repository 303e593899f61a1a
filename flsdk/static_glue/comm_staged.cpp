// The staged engine of the c10d process group (distributed.h), for a backend
// without a collective library (device.yaml `collectives: staged`, a backend's
// first day): the bytes of a collective go to pinned host memory on the
// group's communication stream, through gloo, and back on that stream.
//
// A thread of the group runs the plans in submission order, each with the
// communication stream current: wait for the caller's ready event, the plan's
// copies, stage in (device -> pinned host), gloo, stage out (pinned host ->
// device), the end event. The thread, not the caller, waits for gloo, so the
// caller's host returns at once; Work::wait() blocks the host only until the
// thread has queued the stage-out, then makes the current stream wait.
//
// Point-to-point plans (send, recv, batch_isend_irecv without coalescing) are
// started and left running: the thread goes on to the next plan, so two ranks
// that both send before they receive do not deadlock. A later collective, or a
// send reading a tensor a pending recv writes, first finishes them.
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/InlineStreamGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "backend.h"
#include "distributed.h"

namespace FLSDK_BACKEND_NS::distributed {
namespace {

at::Tensor pinned_empty(std::int64_t numel, c10::ScalarType dtype) {
  return at::empty({numel}, at::TensorOptions().dtype(dtype).pinned_memory(true));
}

// The host copy of a contiguous device tensor, queued on the current stream.
at::Tensor stage_in(const at::Tensor& device_tensor) {
  auto host = pinned_empty(device_tensor.numel(), device_tensor.scalar_type());
  host.copy_(device_tensor.view({-1}), /*non_blocking=*/true);
  return host;
}

c10d::ReduceOp gloo_op(ccl::ReduceOp op) {
  switch (op) {
    case ccl::ReduceOp::Sum:
    case ccl::ReduceOp::Avg: return c10d::ReduceOp::SUM;  // gloo has no AVG: sum, then divide
    case ccl::ReduceOp::Product: return c10d::ReduceOp::PRODUCT;
    case ccl::ReduceOp::Min: return c10d::ReduceOp::MIN;
    case ccl::ReduceOp::Max: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

void divide_for_average(at::Tensor& host, int size) {
  if (at::isFloatingType(host.scalar_type())) {
    host.div_(size);
  } else {
    host.copy_(at::div(host, size, "floor"));  // an integer mean stays an integer
  }
}

bool reduces(CommOp::Kind kind) {
  return kind == CommOp::Kind::AllReduce || kind == CommOp::Kind::Reduce ||
         kind == CommOp::Kind::ReduceScatter;
}

bool shares_memory(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined()) return false;
  return a.storage().is_alias_of(b.storage());
}

class StagedEngine final : public Engine {
 public:
  StagedEngine(const GroupInfo& info, c10::intrusive_ptr<c10d::Backend> gloo)
      : info_(info), gloo_(std::move(gloo)) {
    thread_ = std::thread([this] { loop(); });
    waiter_ = std::thread([this] { waiter_loop(); });
  }

  ~StagedEngine() override { shutdown(); }

  void submit(const c10::intrusive_ptr<Work>& work, Plan plan, runtime::Event ready) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(!stop_, info_.backend_name, ": the group was shut down");
      queue_.push_back({work, std::move(plan), ready});
    }
    wake_.notify_one();
  }

  std::string async_error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiter_stop_ = true;
    }
    waiter_wake_.notify_all();
    if (waiter_.joinable()) waiter_.join();
  }

 private:
  struct Task {
    c10::intrusive_ptr<Work> work;
    Plan plan;
    runtime::Event ready;
  };
  // Set by the waiter thread when the gloo work of a running plan is over.
  struct GlooDone {
    bool done = false;
    std::exception_ptr error;
  };
  // A point-to-point plan whose gloo work is running.
  struct Running {
    Task task;
    std::vector<c10::intrusive_ptr<c10d::Work>> gloo_works;
    std::vector<std::pair<at::Tensor, at::Tensor>> landing;  // (host, device recv)
    std::vector<at::Tensor> keep;                            // host buffers of sends
    std::shared_ptr<GlooDone> state = std::make_shared<GlooDone>();
  };

  // gloo's send and recv works say they are complete only once waited for, so a
  // thread of their own waits (in start order) and tells the worker.
  void waiter_loop() {
    for (;;) {
      std::pair<std::vector<c10::intrusive_ptr<c10d::Work>>, std::shared_ptr<GlooDone>> item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        waiter_wake_.wait(lock, [&] { return waiter_stop_ || !waiting_.empty(); });
        if (waiting_.empty()) return;
        item = std::move(waiting_.front());
        waiting_.pop_front();
      }
      std::exception_ptr error;
      for (auto& w : item.first) {
        try {
          w->wait();
        } catch (...) {
          if (!error) error = std::current_exception();
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        item.second->done = true;
        item.second->error = error;
      }
      wake_.notify_all();
    }
  }

  void loop() {
    for (;;) {
      std::optional<Task> next;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Wakes for a new plan, or for running point-to-point work that ended.
        auto ready = [&] {
          return stop_ || !queue_.empty() || (!running_.empty() && running_.front().state->done);
        };
        wake_.wait(lock, ready);
        if (!queue_.empty()) {
          next = std::move(queue_.front());
          queue_.pop_front();
        } else if (stop_ && running_.empty()) {
          return;
        }
      }
      if (next) {
        handle(std::move(*next));
      } else {
        finish_running(/*block=*/stop_);
      }
    }
  }

  // Frees a finished plan (its tensors, its Work), or leaks it at exit (distributed.h).
  static void dispose_task(Task&& task) {
    if (exiting()) {
      new Task(std::move(task));
      return;
    }
    Task gone(std::move(task));
  }

  void handle(Task task) {
    handle_task(task);
    if (task.work) dispose_task(std::move(task));
  }

  void handle_task(Task& task) {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failure = error_;
      if (failure.empty() && aborted_) failure = "the group was aborted";
    }
    if (!failure.empty()) {
      task.work->fail(task.work->what() + " on " + info_.describe() +
                      " refused: the group failed earlier: " + failure);
      return;
    }
    const auto work = task.work;
    try {
      if (task.plan.point_to_point()) {
        // A send must not read what a pending recv has still to write.
        bool reads_pending = false;
        for (const auto& op : task.plan.ops)
          for (const auto& r : running_)
            for (const auto& [host, target] : r.landing)
              reads_pending |= shares_memory(op.send, target);
        if (reads_pending) finish_running(/*block=*/true);
        start(std::move(task));
        task.work.reset();  // moved: nothing left to dispose
      } else {
        finish_running(/*block=*/true);
        execute(task);
      }
    } catch (const std::exception& e) {
      fail(work, e);
    }
  }

  // A collective whose gloo work failed (a peer gone, gloo's timeout) leaves the
  // ranks out of step: the group fails for good. One refused before gloo ran
  // (an argument gloo does not take) fails alone.
  void fail(const c10::intrusive_ptr<Work>& work, const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::string message = c10_error ? c10_error->what_without_backtrace() : e.what();
    const bool fatal = gloo_failed_;
    gloo_failed_ = false;
    work->fail(work->what() + " on " + info_.describe() + " failed: " + message);
    if (!fatal) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = work->what() + " failed: " + message;
  }

  // Waits for a gloo work; an error there is a failure of the group.
  void wait_gloo(const c10::intrusive_ptr<c10d::Work>& work) {
    try {
      work->wait();
    } catch (...) {
      gloo_failed_ = true;
      throw;
    }
  }

  // Makes the communication stream current and waits for the caller's event.
  struct OnCommStream {
    OnCommStream(StagedEngine& engine, const Task& task)
        : device(c10::Device(kDeviceType, task.plan.device)),
          stream(comm_stream(engine.streams_, engine.streams_mutex_, task.plan.device)),
          stream_guard(stream) {
      check_status(runtime::stream_wait_event(task.plan.device, native_stream(stream), task.ready),
                   "stream_wait_event");
    }
    c10::DeviceGuard device{c10::Device(kDeviceType, 0)};
    c10::Stream stream;
    c10::StreamGuard stream_guard;
  };

  // Waits (on this thread) for what the communication stream queued so far.
  static void wait_for_stream(const c10::Stream& stream) {
    runtime::Event event = nullptr;
    check_status(runtime::event_create(stream.device_index(), &event), "event_create");
    auto status = runtime::event_record(stream.device_index(), event, native_stream(stream));
    if (status == runtime::Status::Ok) status = runtime::event_synchronize(stream.device_index(), event);
    runtime::event_destroy(stream.device_index(), event);
    check_status(status, "event_synchronize");
  }

  void done(const c10::intrusive_ptr<Work>& work, const c10::Stream& stream) {
    runtime::Event end = nullptr;
    check_status(runtime::event_create(stream.device_index(), &end), "event_create");
    check_status(runtime::event_record(stream.device_index(), end, native_stream(stream)),
                 "event_record");
    work->host_done(end);
  }

  void execute(Task& task) {
    at::AutoDispatchBelowADInplaceOrView no_autograd;
    OnCommStream on(*this, task);
    if (task.plan.pre) task.plan.pre();
    std::vector<at::Tensor> hosts;
    for (const auto& op : task.plan.ops) hosts.push_back(stage_in(op.send));
    wait_for_stream(on.stream);
    std::vector<std::pair<at::Tensor, at::Tensor>> landing;
    for (std::size_t i = 0; i < task.plan.ops.size(); ++i) {
      const auto& op = task.plan.ops[i];
      auto result = run_gloo(op, hosts[i]);
      if (result.defined()) landing.emplace_back(result, op.recv);
    }
    for (auto& [host, target] : landing) target.view({-1}).copy_(host, /*non_blocking=*/true);
    if (task.plan.post) task.plan.post();
    done(task.work, on.stream);
  }

  // Runs one collective on host memory; the host tensor to write back to
  // op.recv, or an undefined tensor when this rank receives nothing.
  at::Tensor run_gloo(const CommOp& op, at::Tensor& host) {
    if (host.scalar_type() == c10::kShort && reduces(op.kind)) {
      // gloo has no int16: reduce in int32 (sums and products wrap the same way
      // once narrowed back) and narrow back.
      at::Tensor wide = host.to(c10::kInt);
      at::Tensor result = run_gloo(op, wide);
      return result.defined() ? result.to(c10::kShort) : result;
    }
    using K = CommOp::Kind;
    std::vector<at::Tensor> one{host};
    switch (op.kind) {
      case K::AllReduce: {
        c10d::AllreduceOptions opts;
        opts.reduceOp = gloo_op(op.op);
        wait_gloo(gloo_->allreduce(one, opts));
        if (op.op == ccl::ReduceOp::Avg) divide_for_average(host, info_.size);
        return host;
      }
      case K::Broadcast: {
        c10d::BroadcastOptions opts;
        opts.rootRank = op.root;
        wait_gloo(gloo_->broadcast(one, opts));
        return host;
      }
      case K::Reduce: {
        if (op.op == ccl::ReduceOp::Avg) {  // gloo has no AVG: every rank gets the mean
          c10d::AllreduceOptions opts;
          wait_gloo(gloo_->allreduce(one, opts));
          divide_for_average(host, info_.size);
        } else {
          c10d::ReduceOptions opts;
          opts.reduceOp = gloo_op(op.op);
          opts.rootRank = op.root;
          wait_gloo(gloo_->reduce(one, opts));
        }
        return info_.rank == op.root ? host : at::Tensor();
      }
      case K::AllGather: {
        auto out = pinned_empty(op.recv.numel(), op.recv.scalar_type());
        c10d::AllgatherOptions opts;
        wait_gloo(gloo_->_allgather_base(out, host, opts));
        return out;
      }
      case K::ReduceScatter: {
        // All-reduce of the whole input, then this rank's slot: gloo's own
        // reduce_scatter lacks AVG and some dtypes, and the bytes are on the host.
        c10d::AllreduceOptions opts;
        opts.reduceOp = gloo_op(op.op);
        wait_gloo(gloo_->allreduce(one, opts));
        if (op.op == ccl::ReduceOp::Avg) divide_for_average(host, info_.size);
        const auto n = op.recv.numel();
        return host.narrow(0, static_cast<int64_t>(info_.rank) * n, n);
      }
      case K::AllToAll: {
        auto out = pinned_empty(op.recv.numel(), op.recv.scalar_type());
        std::vector<int64_t> out_splits(op.recv_counts.begin(), op.recv_counts.end());
        std::vector<int64_t> in_splits(op.send_counts.begin(), op.send_counts.end());
        c10d::AllToAllOptions opts;
        wait_gloo(gloo_->alltoall_base(out, host, out_splits, in_splits, opts));
        return out;
      }
      case K::Send:
      case K::Recv: break;
    }
    TORCH_CHECK(false, info_.backend_name, ": point-to-point op in a collective plan");
  }

  // A point-to-point plan: staged in, gloo work started, left running.
  void start(Task task) {
    at::AutoDispatchBelowADInplaceOrView no_autograd;
    OnCommStream on(*this, task);
    if (task.plan.pre) task.plan.pre();
    Running running{std::move(task), {}, {}, {}};
    std::vector<at::Tensor> sends;
    for (const auto& op : running.task.plan.ops)
      if (op.kind == CommOp::Kind::Send) sends.push_back(stage_in(op.send));
    if (!sends.empty()) wait_for_stream(on.stream);
    std::size_t next_send = 0;
    for (const auto& op : running.task.plan.ops) {
      if (op.kind == CommOp::Kind::Send) {
        std::vector<at::Tensor> buffer{sends[next_send++]};
        running.gloo_works.push_back(gloo_->send(buffer, op.root, op.tag));
        running.keep.push_back(buffer[0]);
      } else {
        std::vector<at::Tensor> buffer{pinned_empty(op.recv.numel(), op.recv.scalar_type())};
        running.gloo_works.push_back(gloo_->recv(buffer, op.root, op.tag));
        running.landing.emplace_back(buffer[0], op.recv);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_.emplace_back(running.gloo_works, running.state);
    }
    waiter_wake_.notify_one();
    running_.push_back(std::move(running));
  }

  // Completes the running point-to-point plans whose gloo work is done (all of
  // them, waiting, when `block`), in the order they started.
  void finish_running(bool block) {
    while (!running_.empty()) {
      auto& r = running_.front();
      try {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!block && !r.state->done) return;
          wake_.wait(lock, [&] { return r.state->done; });
          if (r.state->error) {
            gloo_failed_ = true;
            std::rethrow_exception(r.state->error);
          }
        }
        at::AutoDispatchBelowADInplaceOrView no_autograd;
        OnCommStream on(*this, r.task);
        for (auto& [host, target] : r.landing) target.view({-1}).copy_(host, /*non_blocking=*/true);
        if (r.task.plan.post) r.task.plan.post();
        done(r.task.work, on.stream);
      } catch (const std::exception& e) {
        fail(r.task.work, e);
      }
      Task finished = std::move(r.task);
      running_.pop_front();
      dispose_task(std::move(finished));
    }
  }

  GroupInfo info_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  std::string error_;
  bool aborted_ = false;
  bool stop_ = false;
  std::deque<Running> running_;  // the worker thread only (its `state` under mutex_)
  bool gloo_failed_ = false;     // the worker thread only: the error came from gloo's wait
  std::condition_variable waiter_wake_;
  std::deque<std::pair<std::vector<c10::intrusive_ptr<c10d::Work>>, std::shared_ptr<GlooDone>>>
      waiting_;
  bool waiter_stop_ = false;
  std::thread waiter_;
  std::mutex streams_mutex_;
  std::vector<std::optional<c10::Stream>> streams_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Engine> make_staged_engine(const GroupInfo& group,
                                           c10::intrusive_ptr<c10d::Backend> gloo) {
  return std::make_unique<StagedEngine>(group, std::move(gloo));
}

}  // namespace FLSDK_BACKEND_NS::distributed
