// Asynchronous Work of the c10d process group (distributed.h): completion is an
// event on the group's communication stream; wait() makes the caller's current
// stream wait for it, the host blocks only for a barrier, for the host part of a
// staged collective, and when asked to (wait with a timeout on a failed group).
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <sstream>
#include <thread>

#include "backend.h"
#include "distributed.h"

namespace FLSDK_BACKEND_NS::distributed {

namespace {
std::atomic<bool> g_exiting{false};
}  // namespace

void set_exiting() { g_exiting.store(true); }
bool exiting() { return g_exiting.load(std::memory_order_relaxed); }

void dispose(std::vector<at::Tensor>&& tensors) {
  if (exiting()) {
    new std::vector<at::Tensor>(std::move(tensors));  // leaked on purpose (distributed.h)
    return;
  }
  std::vector<at::Tensor> gone(std::move(tensors));
}

void dispose(c10::intrusive_ptr<c10d::Work>&& work) {
  if (exiting()) {
    work.release();  // leaked on purpose (distributed.h)
    return;
  }
  c10::intrusive_ptr<c10d::Work> gone(std::move(work));
}

std::string GroupInfo::describe() const {
  std::ostringstream out;
  out << "group " << (group_name.empty() ? "?" : group_name);
  if (!group_desc.empty() && group_desc != group_name) out << " '" << group_desc << "'";
  out << " (" << size << " rank" << (size == 1 ? "" : "s") << ": ";
  for (int r = 0; r < size; ++r) {
    if (r) out << ", ";
    if (r >= 8 && size > 10) {
      out << "..., " << (global_ranks.empty() ? size - 1 : global_ranks.back());
      break;
    }
    out << (global_ranks.empty() ? r : global_ranks[static_cast<std::size_t>(r)]);
  }
  out << "; this process is rank " << (global_ranks.empty() ? rank : global_ranks[rank]) << ")";
  return out.str();
}

const char* kind_name(CommOp::Kind kind) {
  switch (kind) {
    case CommOp::Kind::AllReduce: return "all_reduce";
    case CommOp::Kind::Broadcast: return "broadcast";
    case CommOp::Kind::Reduce: return "reduce";
    case CommOp::Kind::AllGather: return "all_gather";
    case CommOp::Kind::ReduceScatter: return "reduce_scatter";
    case CommOp::Kind::AllToAll: return "all_to_all";
    case CommOp::Kind::Send: return "send";
    case CommOp::Kind::Recv: return "recv";
  }
  return "?";
}

bool Plan::point_to_point() const {
  for (const auto& op : ops)
    if (op.kind != CommOp::Kind::Send && op.kind != CommOp::Kind::Recv) return false;
  return !ops.empty();
}

c10::Stream comm_stream(std::vector<std::optional<c10::Stream>>& streams, std::mutex& mutex,
                        c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(mutex);
  auto slot = static_cast<std::size_t>(device);
  if (streams.size() <= slot) streams.resize(slot + 1);
  if (!streams[slot]) streams[slot] = new_stream(device);
  return *streams[slot];
}

Work::Work(int rank, c10d::OpType type, std::string what, c10::Device device,
           std::vector<at::Tensor> outputs, milliseconds timeout, bool blocking)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      device_(device),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      blocking_(blocking),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device})) {}

Work::~Work() {
  // Events of a collective that never finished (an aborted group) stay: the
  // stream may still reach them, and destroying one under it is not allowed.
  if (!device_done_ && host_done_) return;
  for (auto event : kept_events_) runtime::event_destroy(device_.index(), event);
  if (end_event_) runtime::event_destroy(device_.index(), end_event_);
}

void Work::keep(std::vector<at::Tensor> tensors) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& t : tensors)
    if (t.defined()) kept_.push_back(std::move(t));
}

void Work::keep_event(runtime::Event event) {
  if (!event) return;
  std::lock_guard<std::mutex> lock(mutex_);
  kept_events_.push_back(event);
}

void Work::host_done(runtime::Event end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_event_ = end;
    host_done_ = true;
  }
  cv_.notify_all();
  // Completed with events on the current (communication) stream: a comm hook's
  // then() and DDP's wait run after the bytes landed.
  future_->markCompleted(c10::IValue(outputs_));
}

void Work::fail(const std::string& message) {
  bool mark_future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) return;
    error_ = message;
    exception_ = std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message));
    mark_future = !future_->completed();
  }
  cv_.notify_all();
  if (mark_future) future_->setErrorIfNeeded(exception_);
}

bool Work::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !error_.empty();
}

bool Work::poll_device_done() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (device_done_) return true;
  if (!host_done_) {
    if (error_.empty()) return false;
    // Failed before anything was queued: nothing on the device to wait for.
    device_done_ = true;
    kept_.clear();
    return true;
  }
  bool done = false;
  if (runtime::event_query(device_.index(), end_event_, &done) != runtime::Status::Ok) done = true;
  if (!done) return false;
  device_done_ = true;
  completed_ = true;
  // Dropped outside the lock: freeing may call into the allocator.
  auto kept = std::move(kept_);
  kept_.clear();
  lock.unlock();
  dispose(std::move(kept));
  return true;
}

bool Work::overdue(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !device_done_ && error_.empty() && now - start_ > timeout_;
}

std::string Work::age(Clock::time_point now) const {
  auto ms = std::chrono::duration_cast<milliseconds>(now - start_).count();
  return std::to_string(ms) + " ms";
}

void Work::rethrow_locked() const {
  if (exception_) std::rethrow_exception(exception_);
}

bool Work::isCompleted() {
  if (failed()) return true;
  return poll_device_done();
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_.empty() && device_done_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> Work::result() { return outputs_; }

void Work::wait_host_done(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto limit = timeout == kNoTimeout ? timeout_ : timeout;
  // The group's watchdog fails an overdue collective; this bound is a backstop.
  bool ok = cv_.wait_for(lock, limit + milliseconds(5000),
                         [&] { return host_done_ || !error_.empty(); });
  rethrow_locked();
  TORCH_CHECK(ok, what_, " did not finish within ", limit.count(), " ms");
}

void Work::synchronize() {
  wait_host_done(kNoTimeout);
  std::lock_guard<std::mutex> lock(mutex_);
  auto stream = current_stream(device_.index());
  check_status(runtime::stream_wait_event(device_.index(), native_stream(stream), end_event_),
               "stream_wait_event");
}

void Work::blockCurrentStream() { synchronize(); }

bool Work::wait(milliseconds timeout) {
  synchronize();
  if (blocking_ || timeout != kNoTimeout) {
    // The host waits too: poll so that a failure the watchdog finds meanwhile
    // ends the wait with its message instead of a hang.
    auto limit = timeout == kNoTimeout ? timeout_ : timeout;
    auto deadline = Clock::now() + limit + milliseconds(5000);
    while (!poll_device_done()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        rethrow_locked();
      }
      TORCH_CHECK(Clock::now() < deadline, what_, " did not finish within ", limit.count(),
                  " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  rethrow_locked();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return future_; }

float Work::getDuration() const {
  TORCH_CHECK(false, what_, ": duration is not recorded (enable_timing is not supported)");
}

}  // namespace FLSDK_BACKEND_NS::distributed
