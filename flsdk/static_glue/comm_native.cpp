// The native engine of the c10d process group (distributed.h): plans run
// through the vendor's collective library (ccl_adapter.h, device.yaml
// `collectives: native`), queued on the group's communication stream of the
// device from the calling thread; nothing waits. One communicator per device,
// created at the group's first collective on it (every rank calls it then):
// rank 0 asks the library for a unique id and hands it to the others through
// the group's c10d store.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <map>

#include "backend.h"
#include "distributed.h"

namespace FLSDK_BACKEND_NS::distributed {
namespace {

void check_ccl(runtime::Status status, const GroupInfo& info, const char* call,
               const char* what) {
  if (status == runtime::Status::Ok) return;
  const char* message = ccl::last_error();
  // `what` names the backend and the collective ("acmeccl all_reduce").
  TORCH_CHECK_WITH(DistBackendError, false, what, " on ", info.describe(), ": ccl::", call,
                   " failed: ",
                   (message && *message) ? message : "no message from the collective library");
}

ccl::Dtype ccl_dtype(c10::ScalarType type) {
  // runtime::Dtype is numbered as c10::ScalarType (the glue checks it in copies.cpp).
  return static_cast<ccl::Dtype>(static_cast<int>(type));
}

class NativeEngine final : public Engine {
 public:
  NativeEngine(const GroupInfo& info, c10::intrusive_ptr<c10d::Store> store,
               milliseconds timeout)
      : info_(info), store_(std::move(store)), timeout_(timeout) {}

  ~NativeEngine() override { shutdown(); }

  void submit(const c10::intrusive_ptr<Work>& work, Plan plan, runtime::Event ready) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (coalescing_) {
        pending_.push_back({work, std::move(plan), ready});
        return;
      }
    }
    std::vector<Pending> batch;
    batch.push_back({work, std::move(plan), ready});
    execute(batch, nullptr);
  }

  bool supports_coalescing() const override { return true; }

  void start_coalescing() override {
    std::lock_guard<std::mutex> lock(mutex_);
    coalescing_ = true;
    pending_.clear();
  }

  void end_coalescing(const c10::intrusive_ptr<Work>& group_work) override {
    std::vector<Pending> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      coalescing_ = false;
      batch.swap(pending_);
    }
    if (batch.empty()) {
      // Nothing was issued: complete at once, on the caller's stream.
      const auto device = group_work->device().index();
      runtime::Event end = nullptr;
      check_status(runtime::event_create(device, &end), "event_create");
      check_status(runtime::event_record(device, end, native_stream(current_stream(device))),
                   "event_record");
      group_work->host_done(end);
      return;
    }
    execute(batch, &group_work);
  }

  std::string async_error() override {
    std::vector<ccl::Comm> comms;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [device, comm] : comms_) comms.push_back(comm);
    }
    for (auto comm : comms) {
      std::string message;
      if (ccl::comm_get_async_error(comm, &message) != runtime::Status::Ok)
        return message.empty() ? std::string("the collective library reported an error")
                               : message;
    }
    return "";
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [device, comm] : comms_) ccl::comm_abort(comm);
    aborted_ = true;
  }

  void shutdown() override {
    std::map<c10::DeviceIndex, ccl::Comm> comms;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      comms.swap(comms_);
    }
    for (auto& [device, comm] : comms) {
      // comm_destroy only when nothing of it is queued: the group waited for its
      // outstanding work (ProcessGroup::shutdown), an aborted one ended its work.
      if (auto it = streams_.size() > static_cast<std::size_t>(device) ? streams_[device]
                                                                       : std::nullopt;
          it) {
        runtime::stream_synchronize(device, native_stream(*it));
      }
      ccl::comm_destroy(comm);
    }
  }

 private:
  struct Pending {
    c10::intrusive_ptr<Work> work;
    Plan plan;
    runtime::Event ready;
  };

  // The communicator of `device`, created on first use (collective: every rank
  // of the group gets here with its first collective).
  ccl::Comm communicator(c10::DeviceIndex device, const char* what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK_WITH(DistBackendError, !aborted_, what, " on ", info_.describe(),
                       ": the communicator was aborted");
      auto it = comms_.find(device);
      if (it != comms_.end()) return it->second;
      // A communicator is made by every rank together. A rank that reaches a
      // second device alone (the usual cause: object collectives such as
      // all_gather_object run on the current device, which the script never
      // set) would wait for peers that never come: name the mistake instead.
      if (!comms_.empty() && info_.size > 1) {
        const c10::Device bound(kDeviceType, comms_.begin()->first);
        TORCH_CHECK_WITH(DistBackendError, false, what, " on ", info_.describe(),
                         " got a tensor on ", c10::Device(kDeviceType, device),
                         ", but this rank's collectives run on ", bound,
                         " (its first collective did): one process group drives one device "
                         "per rank. Set the rank's device before the first collective, e.g. "
                         "torch.accelerator.set_device_index(local_rank) or "
                         "init_process_group(device_id=...); object collectives "
                         "(all_gather_object, broadcast_object_list, ...) use the current "
                         "device, here ", c10::Device(kDeviceType, current_device()), ".");
      }
    }
    ccl::UniqueId id{};
    const std::string key = "flsdk_ccl_unique_id/" + std::to_string(inits_++);
    if (info_.rank == 0) {
      check_ccl(ccl::get_unique_id(&id), info_, "get_unique_id", what);
      std::vector<uint8_t> bytes(id.bytes, id.bytes + ccl::kUniqueIdBytes);
      store_->set(key, bytes);
    } else {
      auto bytes = store_->get(key);  // waits (the store's timeout) for rank 0
      TORCH_CHECK(bytes.size() == ccl::kUniqueIdBytes, info_.backend_name,
                  ": the unique id in the store has ", bytes.size(), " bytes, expected ",
                  ccl::kUniqueIdBytes);
      std::memcpy(id.bytes, bytes.data(), ccl::kUniqueIdBytes);
    }
    ccl::Comm comm = nullptr;
    check_ccl(ccl::comm_init(&comm, info_.size, id, info_.rank, device, timeout_.count()), info_,
              "comm_init", what);
    std::lock_guard<std::mutex> lock(mutex_);
    comms_[device] = comm;
    return comm;
  }

  void issue(const CommOp& op, ccl::Comm comm, runtime::Stream stream, const char* what) {
    using K = CommOp::Kind;
    // Reductions move elements of their dtype; everything else moves bytes.
    const bool reduces = op.kind == K::AllReduce || op.kind == K::Reduce || op.kind == K::ReduceScatter;
    const at::Tensor& ref = op.send.defined() ? op.send : op.recv;
    const ccl::Dtype dtype = reduces ? ccl_dtype(ref.scalar_type()) : ccl::Dtype::UInt8;
    const std::size_t unit = reduces ? 1 : ref.element_size();
    auto count = [&](const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * unit; };
    const void* send = op.send.defined() ? op.send.const_data_ptr() : nullptr;
    void* recv = op.recv.defined() ? op.recv.data_ptr() : nullptr;
    const char* call = kind_name(op.kind);
    runtime::Status status = runtime::Status::Ok;
    switch (op.kind) {
      case K::AllReduce:
        status = ccl::all_reduce(send, recv, count(op.send), dtype, op.op, comm, stream);
        break;
      case K::Broadcast:
        status = ccl::broadcast(send, recv, count(op.recv), dtype, op.root, comm, stream);
        break;
      case K::Reduce:
        status = ccl::reduce(send, recv, count(op.send), dtype, op.op, op.root, comm, stream);
        break;
      case K::AllGather:
        status = ccl::all_gather(send, recv, count(op.send), dtype, comm, stream);
        break;
      case K::ReduceScatter:
        status = ccl::reduce_scatter(send, recv, count(op.recv), dtype, op.op, comm, stream);
        break;
      case K::AllToAll: {
        const std::size_t n = op.send_counts.size();
        std::vector<std::size_t> sc(n), so(n), rc(n), ro(n);
        std::size_t s_at = 0, r_at = 0;
        for (std::size_t p = 0; p < n; ++p) {
          sc[p] = static_cast<std::size_t>(op.send_counts[p]) * unit;
          rc[p] = static_cast<std::size_t>(op.recv_counts[p]) * unit;
          so[p] = s_at;
          ro[p] = r_at;
          s_at += sc[p];
          r_at += rc[p];
        }
        status = ccl::all_to_all(send, sc.data(), so.data(), recv, rc.data(), ro.data(), dtype,
                                 comm, stream);
        break;
      }
      case K::Send:
        status = ccl::send(send, count(op.send), dtype, op.root, comm, stream);
        break;
      case K::Recv:
        status = ccl::recv(recv, count(op.recv), dtype, op.root, comm, stream);
        break;
    }
    check_ccl(status, info_, call, what);
  }

  // Queues a batch (one plan, or the plans of a coalesced block) as one
  // operation of the library, on the communication stream of its device.
  void execute(std::vector<Pending>& batch, const c10::intrusive_ptr<Work>* group_work) {
    const c10::DeviceIndex device = batch[0].plan.device;
    const char* what = batch.size() == 1 ? batch[0].work->what().c_str() : "coalesced collectives";
    for (auto& p : batch)
      TORCH_CHECK(p.plan.device == device, info_.backend_name, ": coalesced collectives on two "
                  "devices (", device, " and ", p.plan.device, ")");
    ccl::Comm comm = communicator(device, what);
    c10::DeviceGuard device_guard(c10::Device(kDeviceType, device));
    const c10::Stream stream = comm_stream(streams_, streams_mutex_, device);
    c10::StreamGuard stream_guard(stream);
    const runtime::Stream native = native_stream(stream);
    for (auto& p : batch)
      check_status(runtime::stream_wait_event(device, native, p.ready), "stream_wait_event");
    for (auto& p : batch)
      if (p.plan.pre) p.plan.pre();
    // Several ops (a gather's sends and receives, coalesced collectives) are one
    // fused operation of the library; a single one goes as it is (and keeps its
    // own name in the library's records: a profile shows "all_reduce").
    std::size_t count = 0;
    for (auto& p : batch) count += p.plan.ops.size();
    const bool grouped = count > 1;
    if (grouped) check_ccl(ccl::group_start(), info_, "group_start", what);
    try {
      for (auto& p : batch)
        for (const auto& op : p.plan.ops) issue(op, comm, native, what);
    } catch (...) {
      if (grouped) ccl::group_end();
      throw;
    }
    if (grouped) check_ccl(ccl::group_end(), info_, "group_end", what);
    for (auto& p : batch)
      if (p.plan.post) p.plan.post();
    auto finish = [&](const c10::intrusive_ptr<Work>& work) {
      runtime::Event end = nullptr;
      check_status(runtime::event_create(device, &end), "event_create");
      check_status(runtime::event_record(device, end, native), "event_record");
      work->host_done(end);
    };
    for (auto& p : batch) finish(p.work);
    if (group_work) finish(*group_work);
  }

  GroupInfo info_;
  c10::intrusive_ptr<c10d::Store> store_;
  milliseconds timeout_;
  std::mutex mutex_;
  std::map<c10::DeviceIndex, ccl::Comm> comms_;
  int inits_ = 0;
  bool aborted_ = false;
  bool coalescing_ = false;
  std::vector<Pending> pending_;
  std::mutex streams_mutex_;
  std::vector<std::optional<c10::Stream>> streams_;
};

}  // namespace

std::unique_ptr<Engine> make_native_engine(const GroupInfo& group,
                                           c10::intrusive_ptr<c10d::Store> store,
                                           milliseconds timeout) {
  if constexpr (!config::kCollectivesNative) {
    TORCH_CHECK(false, group.backend_name, ": this backend has no collective library "
                "(device.yaml collectives: staged)");
  } else {
    return std::make_unique<NativeEngine>(group, std::move(store), timeout);
  }
}

}  // namespace FLSDK_BACKEND_NS::distributed
