// The c10d process group of the backend (distributed.h): every entry point DDP,
// FSDP2, DeviceMesh/DTensor, tensor parallel, the functional collectives and
// pipelining call, each turned into a Plan (the copies it needs on the
// communication stream around a few primitive CommOps) that the group's engine
// runs; a watchdog thread that fails an overdue collective on every surviving
// rank (naming the op, the group and the ranks) and aborts the communicator;
// the errors the engines find asynchronously, raised by the next host wait.
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "backend.h"
#include "distributed.h"

namespace FLSDK_BACKEND_NS::distributed {
namespace {

using c10d::OpType;

// ---- live groups, for the async-error poll of host waits -----------------------

std::mutex g_groups_mutex;
std::set<ProcessGroup*> g_groups;

void poll_all_groups() {
  std::vector<ProcessGroup*> groups;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    groups.assign(g_groups.begin(), g_groups.end());
  }
  for (auto* group : groups) group->poll_async_error();
}

void register_group(ProcessGroup* group) {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  g_groups.insert(group);
  set_async_error_poll(&poll_all_groups);
}

void unregister_group(ProcessGroup* group) {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  g_groups.erase(group);
  if (g_groups.empty()) set_async_error_poll(nullptr);
}

// ---- argument checks ------------------------------------------------------------

bool device_computes(c10::ScalarType type) {
  const char* name = c10::toString(type);
  for (const char* const* d = config::kDtypes; *d; ++d)
    if (std::strcmp(*d, name) == 0) return true;
  return false;
}

class Checker {
 public:
  Checker(const GroupInfo& info, const char* what) : info_(info), what_(what) {}

  void tensor(const at::Tensor& t) const {
    TORCH_CHECK(t.defined(), info_.backend_name, ": ", what_, " got an undefined tensor");
    TORCH_CHECK(t.device().type() == kDeviceType, info_.backend_name, ": ", what_,
                " got a tensor on ", t.device(), "; ", info_.backend_name, " moves ",
                kBackendName, " tensors (for CPU tensors too, initialize the group with backend "
                "\"cpu:gloo,", kBackendName, ":", info_.backend_name, "\")");
    TORCH_CHECK(t.layout() == c10::kStrided, info_.backend_name, ": ", what_, " got a ",
                t.layout(), " tensor on ", t.device(), "; only dense tensors are supported");
    if (device_) {
      TORCH_CHECK(t.device() == *device_, info_.backend_name, ": ", what_,
                  " got tensors on two devices, ", *device_, " and ", t.device(),
                  "; one process drives one device per call");
    } else {
      device_ = t.device();
    }
  }
  void tensors(const std::vector<at::Tensor>& list) const {
    for (const auto& t : list) tensor(t);
  }
  const at::Tensor& single(const std::vector<at::Tensor>& list) const {
    TORCH_CHECK(list.size() == 1, info_.backend_name, ": ", what_,
                " takes one tensor per process, got ", list.size());
    tensor(list[0]);
    return list[0];
  }
  void same(const at::Tensor& a, const at::Tensor& b, const char* relation) const {
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), info_.backend_name, ": ", what_, ": ",
                relation, " must have one dtype, got ", a.scalar_type(), " and ",
                b.scalar_type(), " (", a.device(), ")");
  }
  void numel(const at::Tensor& t, std::int64_t expected, const char* role) const {
    TORCH_CHECK(t.numel() == expected, info_.backend_name, ": ", what_, ": ", role, " has ",
                t.numel(), " elements, expected ", expected, " (", t.device(), ", ",
                t.scalar_type(), ", group of ", info_.size, " ranks)");
  }
  void rank(std::int64_t r, const char* role) const {
    TORCH_CHECK(r >= 0 && r < info_.size, info_.backend_name, ": ", what_, ": ", role, " ", r,
                " is not a rank of ", info_.describe());
  }
  c10::Device device() const { return *device_; }

 private:
  const GroupInfo& info_;
  const char* what_;
  mutable std::optional<c10::Device> device_;
};

// The tensor a reduction moves and its library op: bool is reduced as uint8 with
// Max (sum: a logical or) or Min (product: a logical and), as CUDA's NCCL group
// does; other dtypes must be ones the device computes.
std::pair<at::Tensor, ccl::ReduceOp> reduction(const at::Tensor& t, const c10d::ReduceOp& op,
                                               const GroupInfo& info, const char* what,
                                               bool native) {
  using R = c10d::ReduceOp::RedOpType;
  ccl::ReduceOp kind;
  switch (op.op_) {
    case R::SUM: kind = ccl::ReduceOp::Sum; break;
    case R::AVG: kind = ccl::ReduceOp::Avg; break;
    case R::PRODUCT: kind = ccl::ReduceOp::Product; break;
    case R::MIN: kind = ccl::ReduceOp::Min; break;
    case R::MAX: kind = ccl::ReduceOp::Max; break;
    default:
      TORCH_CHECK(false, info.backend_name, ": ", what, " does not support reduce op ",
                  static_cast<int>(op.op_), " (PREMUL_SUM and the bitwise ops); use SUM, AVG, "
                  "PRODUCT, MIN or MAX (", t.device(), ", ", t.scalar_type(), ")");
  }
  if (t.scalar_type() == c10::kBool) {
    TORCH_CHECK(kind != ccl::ReduceOp::Avg, info.backend_name, ": ", what,
                ": AVG of a bool tensor is undefined (", t.device(), ")");
    auto as_bytes = t.view(c10::kByte);
    if (kind == ccl::ReduceOp::Sum) kind = ccl::ReduceOp::Max;
    if (kind == ccl::ReduceOp::Product) kind = ccl::ReduceOp::Min;
    return {as_bytes, kind};
  }
  if (native) {
    TORCH_CHECK(device_computes(t.scalar_type()), info.backend_name, ": ", what, " of a ",
                t.scalar_type(), " tensor on ", t.device(), ": the collective library reduces "
                "only the dtypes the device computes (device.yaml dtypes)");
  } else {
    TORCH_CHECK(!c10::isComplexType(t.scalar_type()) && t.scalar_type() != c10::kUInt16 &&
                    t.scalar_type() != c10::kUInt32 && t.scalar_type() != c10::kUInt64 &&
                    !c10::isFloat8Type(t.scalar_type()),
                info.backend_name, ": ", what, " of a ", t.scalar_type(), " tensor on ",
                t.device(), " is not supported (gloo reduces float, double, half, bfloat16 "
                "and the signed integer and uint8 types)");
  }
  return {t, kind};
}

// A contiguous tensor with t's elements: t itself, or a fresh one that `pre`
// fills from t (load) and `post` writes back into t (store).
struct Dense {
  at::Tensor original;
  at::Tensor dense;
  bool copied = false;
};

Dense dense(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, t, false};
  return {t, at::empty(t.sizes(), t.options().memory_format(c10::MemoryFormat::Contiguous)), true};
}

at::Tensor flat_empty(std::int64_t numel, const at::Tensor& like) {
  return at::empty({numel}, like.options().memory_format(c10::MemoryFormat::Contiguous));
}

CommOp op_of(CommOp::Kind kind, at::Tensor send, at::Tensor recv) {
  CommOp op{kind};
  op.send = std::move(send);
  op.recv = std::move(recv);
  return op;
}

}  // namespace

// =================================================================== the group

ProcessGroup::ProcessGroup(int rank, int size, Options options)
    : c10d::Backend(rank, size),
      native_(options.native),
      timeout_ms_(options.timeout.count()) {
  info_.backend_name = options.backend_name;
  info_.group_name = options.group_name;
  info_.rank = rank;
  info_.size = size;
  info_.global_ranks = options.global_ranks;
  if (native_) {
    engine_ = make_native_engine(info_, options.store, options.timeout);
  } else {
    TORCH_CHECK(options.gloo, info_.backend_name, ": the staged engine needs a gloo group");
    engine_ = make_staged_engine(info_, options.gloo);
  }
  register_group(this);
  watchdog_ = std::thread([this] { watchdog(); });
}

void stop_all_watchdogs() {
  std::vector<ProcessGroup*> groups;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    groups.assign(g_groups.begin(), g_groups.end());
  }
  for (auto* group : groups) group->stop_watchdog();
}

void ProcessGroup::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
}

ProcessGroup::~ProcessGroup() {
  stop_watchdog();
  unregister_group(this);
  try {
    engine_->shutdown();
  } catch (...) {
    // A destructor never throws; the process is tearing the group down.
  }
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroup::getBackendOptions() {
  auto options = c10::make_intrusive<c10d::Backend::Options>(info_.backend_name,
                                                             milliseconds(timeout_ms_.load()));
  options->group_name = info_.group_name;
  for (auto r : info_.global_ranks) options->global_ranks_in_group.push_back(static_cast<uint64_t>(r));
  return options;
}

bool ProcessGroup::supportsCoalescing() const { return engine_->supports_coalescing(); }

void ProcessGroup::setTimeout(milliseconds timeout) { timeout_ms_.store(timeout.count()); }

void ProcessGroup::setGroupUid(const std::string& uid) {
  c10d::Backend::setGroupUid(uid);
  std::lock_guard<std::mutex> lock(mutex_);
  info_.group_name = uid;
}

milliseconds ProcessGroup::timeout_of(milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? milliseconds(timeout_ms_.load()) : requested;
}

void ProcessGroup::check_healthy(const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK_WITH(DistBackendError, error_.empty(), info_.backend_name, " ", what, " on ",
                   info_.describe(), " refused: the group failed earlier: ", error_);
}

c10d::ErrorType ProcessGroup::getError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_.empty() ? c10d::ErrorType::SUCCESS : c10d::ErrorType::COMM_ERROR;
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::run(OpType type, const char* what,
                                                 const std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor> keep, Plan plan,
                                                 milliseconds timeout, bool blocking) {
  check_healthy(what);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info_.group_desc = getGroupDesc();
  }
  sequence_.fetch_add(1);
  const c10::DeviceIndex device = plan.device;
  auto work = c10::make_intrusive<Work>(rank_, type, info_.backend_name + " " + what,
                                        c10::Device(kDeviceType, device), outputs, timeout,
                                        blocking);
  for (auto& op : plan.ops) keep.insert(keep.end(), {op.send, op.recv});
  work->keep(std::move(keep));
  // The communication stream starts after what the caller queued so far.
  runtime::Event ready = nullptr;
  check_status(runtime::event_create(device, &ready), "event_create");
  work->keep_event(ready);
  check_status(runtime::event_record(device, ready, native_stream(current_stream(device))),
               "event_record");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outstanding_.push_back(work);
    if (coalescing_) coalesced_.push_back(work);
  }
  try {
    engine_->submit(work, std::move(plan), ready);
  } catch (const c10::Error& e) {
    work->fail(e.what_without_backtrace());
    throw;
  }
  return work;
}

void ProcessGroup::startCoalescing() {
  TORCH_CHECK(engine_->supports_coalescing(), info_.backend_name, " does not coalesce");
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!coalescing_, info_.backend_name, ": startCoalescing called twice");
  coalescing_ = true;
  coalesced_.clear();
  engine_->start_coalescing();
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::endCoalescing() {
  std::vector<c10::intrusive_ptr<Work>> works;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(coalescing_, info_.backend_name, ": endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
  }
  const c10::DeviceIndex device = works.empty() ? current_device() : works[0]->device().index();
  std::vector<at::Tensor> outputs;
  for (auto& w : works) {
    auto r = w->result();
    outputs.insert(outputs.end(), r.begin(), r.end());
  }
  auto group_work = c10::make_intrusive<Work>(
      rank_, OpType::COALESCED, info_.backend_name + " coalesced collectives",
      c10::Device(kDeviceType, device), outputs, milliseconds(timeout_ms_.load()), false);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outstanding_.push_back(group_work);
  }
  try {
    engine_->end_coalescing(group_work);
  } catch (const c10::Error& e) {
    group_work->fail(e.what_without_backtrace());
    for (auto& w : works) w->fail(e.what_without_backtrace());
    throw;
  }
  return group_work;
}

// ---------------------------------------------------------------- collectives

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  Checker check(info_, "all_reduce");
  const auto& t = check.single(tensors);
  auto [moved, op] = reduction(t, opts.reduceOp, info_, "all_reduce", native_);
  auto d = dense(moved);
  Plan plan;
  plan.device = t.device().index();
  if (d.copied) {
    plan.pre = [d] { d.dense.copy_(d.original); };
    plan.post = [d] { d.original.copy_(d.dense); };
  }
  auto o = op_of(CommOp::Kind::AllReduce, d.dense, d.dense);
  o.op = op;
  plan.ops.push_back(std::move(o));
  return run(OpType::ALLREDUCE, "all_reduce", tensors, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Checker check(info_, "all_reduce_coalesced");
  TORCH_CHECK(!tensors.empty(), info_.backend_name, ": all_reduce_coalesced got no tensors");
  check.tensors(tensors);
  Plan plan;
  plan.device = check.device().index();
  std::vector<Dense> copies;
  for (const auto& t : tensors) {
    auto [moved, op] = reduction(t, opts.reduceOp, info_, "all_reduce_coalesced", native_);
    auto d = dense(moved);
    if (d.copied) copies.push_back(d);
    auto o = op_of(CommOp::Kind::AllReduce, d.dense, d.dense);
    o.op = op;
    plan.ops.push_back(std::move(o));
  }
  if (!copies.empty()) {
    plan.pre = [copies] { for (auto& d : copies) d.dense.copy_(d.original); };
    plan.post = [copies] { for (auto& d : copies) d.original.copy_(d.dense); };
  }
  return run(OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  Checker check(info_, "broadcast");
  const auto& t = check.single(tensors);
  check.rank(opts.rootRank, "root");
  auto d = dense(t);
  Plan plan;
  plan.device = t.device().index();
  if (d.copied) {
    plan.pre = [d] { d.dense.copy_(d.original); };
    plan.post = [d] { d.original.copy_(d.dense); };
  }
  auto o = op_of(CommOp::Kind::Broadcast, d.dense, d.dense);
  o.root = static_cast<int>(opts.rootRank);
  plan.ops.push_back(std::move(o));
  return run(OpType::BROADCAST, "broadcast", tensors, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  Checker check(info_, "reduce");
  const auto& t = check.single(tensors);
  check.rank(opts.rootRank, "root");
  auto [moved, op] = reduction(t, opts.reduceOp, info_, "reduce", native_);
  auto d = dense(moved);
  const bool root = opts.rootRank == rank_;
  Plan plan;
  plan.device = t.device().index();
  if (d.copied) {
    plan.pre = [d] { d.dense.copy_(d.original); };
    if (root) plan.post = [d] { d.original.copy_(d.dense); };
  }
  auto o = op_of(CommOp::Kind::Reduce, d.dense, d.dense);
  o.op = op;
  o.root = static_cast<int>(opts.rootRank);
  plan.ops.push_back(std::move(o));
  return run(OpType::REDUCE, "reduce", tensors, {}, std::move(plan), timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_allgather_base(at::Tensor& output,
                                                             at::Tensor& input,
                                                             const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Checker check(info_, "all_gather_into_tensor");
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), info_.backend_name,
              ": all_gather_into_tensor needs as many outputs as inputs, got ", outputs.size(),
              " and ", inputs.size());
  check.tensors(inputs);
  check.tensors(outputs);
  Plan plan;
  plan.device = check.device().index();
  std::vector<Dense> loads, stores;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check.same(inputs[i], outputs[i], "input and output");
    check.numel(outputs[i], inputs[i].numel() * size_, "the output");
    auto in = dense(inputs[i]);
    auto out = dense(outputs[i]);
    if (in.copied) loads.push_back(in);
    if (out.copied) stores.push_back(out);
    plan.ops.push_back(op_of(CommOp::Kind::AllGather, in.dense, out.dense));
  }
  if (!loads.empty()) plan.pre = [loads] { for (auto& d : loads) d.dense.copy_(d.original); };
  if (!stores.empty()) plan.post = [stores] { for (auto& d : stores) d.original.copy_(d.dense); };
  const bool single = inputs.size() == 1;
  return run(single ? OpType::_ALLGATHER_BASE : OpType::COALESCED,
             single ? "all_gather_into_tensor" : "all_gather_into_tensor_coalesced", outputs, {},
             std::move(plan), timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Checker check(info_, "all_gather");
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), info_.backend_name,
              ": all_gather needs one output list per input, got ", outputs.size(), " and ",
              inputs.size());
  check.tensors(inputs);
  Plan plan;
  plan.device = check.device().index();
  std::vector<Dense> loads;
  std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> unpack;  // flat -> list
  std::vector<at::Tensor> all_outputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int>(outputs[i].size()) == size_, info_.backend_name,
                ": all_gather needs ", size_, " output tensors (one per rank of ",
                info_.describe(), "), got ", outputs[i].size());
    for (const auto& o : outputs[i]) {
      check.tensor(o);
      check.same(inputs[i], o, "input and outputs");
      check.numel(o, inputs[i].numel(), "an output");
      all_outputs.push_back(o);
    }
    auto in = dense(inputs[i]);
    if (in.copied) loads.push_back(in);
    auto flat = flat_empty(inputs[i].numel() * size_, inputs[i]);
    plan.ops.push_back(op_of(CommOp::Kind::AllGather, in.dense, flat));
    unpack.emplace_back(flat, outputs[i]);
  }
  if (!loads.empty()) plan.pre = [loads] { for (auto& d : loads) d.dense.copy_(d.original); };
  plan.post = [unpack] {
    for (const auto& [flat, list] : unpack) {
      const auto n = list.empty() ? 0 : list[0].numel();
      for (std::size_t r = 0; r < list.size(); ++r)
        list[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(list[r].sizes()));
    }
  };
  return run(OpType::ALLGATHER, "all_gather", all_outputs, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Checker check(info_, "reduce_scatter_tensor");
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(), info_.backend_name,
              ": reduce_scatter_tensor needs as many outputs as inputs, got ", outputs.size(),
              " and ", inputs.size());
  check.tensors(inputs);
  check.tensors(outputs);
  Plan plan;
  plan.device = check.device().index();
  std::vector<Dense> loads, stores;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check.same(inputs[i], outputs[i], "input and output");
    check.numel(inputs[i], outputs[i].numel() * size_, "the input");
    auto [in_moved, op] = reduction(inputs[i], opts.reduceOp, info_, "reduce_scatter", native_);
    auto out_moved = reduction(outputs[i], opts.reduceOp, info_, "reduce_scatter", native_).first;
    auto in = dense(in_moved);
    auto out = dense(out_moved);
    if (in.copied) loads.push_back(in);
    if (out.copied) stores.push_back(out);
    auto o = op_of(CommOp::Kind::ReduceScatter, in.dense, out.dense);
    o.op = op;
    plan.ops.push_back(std::move(o));
  }
  if (!loads.empty()) plan.pre = [loads] { for (auto& d : loads) d.dense.copy_(d.original); };
  if (!stores.empty()) plan.post = [stores] { for (auto& d : stores) d.original.copy_(d.dense); };
  const bool single = inputs.size() == 1;
  return run(single ? OpType::_REDUCE_SCATTER_BASE : OpType::REDUCE_SCATTER_TENSOR_COALESCED,
             single ? "reduce_scatter_tensor" : "reduce_scatter_tensor_coalesced", outputs, {},
             std::move(plan), timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Checker check(info_, "reduce_scatter");
  const auto& out = check.single(outputs);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              info_.backend_name, ": reduce_scatter needs one list of ", size_,
              " input tensors (one per rank of ", info_.describe(), ")");
  for (const auto& in : inputs[0]) {
    check.tensor(in);
    check.same(in, out, "inputs and output");
    check.numel(in, out.numel(), "an input");
  }
  auto [out_moved, op] = reduction(out, opts.reduceOp, info_, "reduce_scatter", native_);
  auto flat = flat_empty(out.numel() * size_, out_moved);
  auto d = dense(out_moved);
  Plan plan;
  plan.device = out.device().index();
  auto pieces = inputs[0];
  const bool is_bool = out.scalar_type() == c10::kBool;
  plan.pre = [flat, pieces, is_bool] {
    const auto n = pieces[0].numel();
    for (std::size_t r = 0; r < pieces.size(); ++r) {
      auto piece = is_bool ? pieces[r].view(c10::kByte) : pieces[r];
      flat.narrow(0, static_cast<int64_t>(r) * n, n).view(piece.sizes()).copy_(piece);
    }
  };
  if (d.copied) plan.post = [d] { d.original.copy_(d.dense); };
  auto o = op_of(CommOp::Kind::ReduceScatter, flat, d.dense);
  o.op = op;
  plan.ops.push_back(std::move(o));
  return run(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  Checker check(info_, "all_to_all_single");
  check.tensor(input);
  check.tensor(output);
  check.same(input, output, "input and output");
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* role) {
    std::vector<std::int64_t> out(static_cast<std::size_t>(size_));
    if (t.dim() == 0 || splits.empty()) {
      TORCH_CHECK(t.dim() > 0 ? t.size(0) % size_ == 0 : size_ == 1, info_.backend_name,
                  ": all_to_all_single: the ", role, "'s first dimension (",
                  t.dim() > 0 ? t.size(0) : 0, ") does not split evenly over ", size_, " ranks");
      std::fill(out.begin(), out.end(), t.numel() / size_);
      return out;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, info_.backend_name,
                ": all_to_all_single: ", role, " split sizes has ", splits.size(),
                " entries, expected ", size_);
    const std::int64_t row = t.size(0) == 0 ? 0 : t.numel() / t.size(0);
    std::int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK(splits[r] >= 0, info_.backend_name, ": all_to_all_single: negative split");
      out[r] = splits[r] * row;
      total += splits[r];
    }
    TORCH_CHECK(total == t.size(0), info_.backend_name, ": all_to_all_single: the ", role,
                " split sizes add up to ", total, ", but its first dimension is ", t.size(0));
    return out;
  };
  auto in = dense(input);
  auto out = dense(output);
  Plan plan;
  plan.device = input.device().index();
  if (in.copied) plan.pre = [in] { in.dense.copy_(in.original); };
  if (out.copied) plan.post = [out] { out.original.copy_(out.dense); };
  auto o = op_of(CommOp::Kind::AllToAll, in.dense, out.dense);
  o.send_counts = counts(input, input_split_sizes, "input");
  o.recv_counts = counts(output, output_split_sizes, "output");
  plan.ops.push_back(std::move(o));
  std::vector<at::Tensor> outputs{output};
  return run(OpType::ALLTOALL_BASE, "all_to_all_single", outputs, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  Checker check(info_, "all_to_all");
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              info_.backend_name, ": all_to_all needs ", size_, " inputs and ", size_,
              " outputs (one per rank of ", info_.describe(), "), got ", inputs.size(), " and ",
              outputs.size());
  check.tensors(inputs);
  check.tensors(outputs);
  CommOp o{CommOp::Kind::AllToAll};
  std::int64_t in_total = 0, out_total = 0;
  for (int r = 0; r < size_; ++r) {
    check.same(inputs[0], inputs[r], "inputs");
    check.same(inputs[0], outputs[r], "inputs and outputs");
    o.send_counts.push_back(inputs[r].numel());
    o.recv_counts.push_back(outputs[r].numel());
    in_total += inputs[r].numel();
    out_total += outputs[r].numel();
  }
  o.send = flat_empty(in_total, inputs[0]);
  o.recv = flat_empty(out_total, inputs[0]);
  Plan plan;
  plan.device = check.device().index();
  plan.pre = [flat = o.send, inputs] {
    std::int64_t at = 0;
    for (const auto& t : inputs) {
      flat.narrow(0, at, t.numel()).view(t.sizes()).copy_(t);
      at += t.numel();
    }
  };
  plan.post = [flat = o.recv, outputs] {
    std::int64_t at = 0;
    for (const auto& t : outputs) {
      t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  };
  plan.ops.push_back(std::move(o));
  return run(OpType::ALLTOALL, "all_to_all", outputs, {}, std::move(plan),
             timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::GatherOptions& opts) {
  Checker check(info_, "gather");
  const auto& in = check.single(inputs);
  check.rank(opts.rootRank, "root");
  const int root = static_cast<int>(opts.rootRank);
  Plan plan;
  plan.device = in.device().index();
  std::vector<at::Tensor> results;
  auto src = dense(in);
  if (rank_ != root) {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), info_.backend_name,
                ": gather: only the root rank passes output tensors");
    if (src.copied) plan.pre = [src] { src.dense.copy_(src.original); };
    auto o = op_of(CommOp::Kind::Send, src.dense, at::Tensor());
    o.root = root;
    plan.ops.push_back(std::move(o));
  } else {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                info_.backend_name, ": gather: the root passes one list of ", size_,
                " output tensors");
    std::vector<Dense> stores;
    for (int r = 0; r < size_; ++r) {
      auto& out = outputs[0][r];
      check.tensor(out);
      check.same(in, out, "input and outputs");
      check.numel(out, in.numel(), "an output");
      results.push_back(out);
      if (r == root) continue;
      auto d = dense(out);
      if (d.copied) stores.push_back(d);
      auto o = op_of(CommOp::Kind::Recv, at::Tensor(), d.dense);
      o.root = r;
      plan.ops.push_back(std::move(o));
    }
    auto own = outputs[0][root];
    plan.post = [stores, own, in] {
      own.copy_(in.view(own.sizes()));
      for (auto& d : stores) d.original.copy_(d.dense);
    };
  }
  if (plan.ops.empty()) {  // a group of one: only the root's own copy
    plan.ops.push_back(op_of(CommOp::Kind::Broadcast, src.dense, src.dense));
  }
  return run(OpType::GATHER, "gather", results, {}, std::move(plan), timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  Checker check(info_, "scatter");
  const auto& out = check.single(outputs);
  check.rank(opts.rootRank, "root");
  const int root = static_cast<int>(opts.rootRank);
  Plan plan;
  plan.device = out.device().index();
  auto dst = dense(out);
  if (rank_ != root) {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), info_.backend_name,
                ": scatter: only the root rank passes input tensors");
    if (dst.copied) plan.post = [dst] { dst.original.copy_(dst.dense); };
    auto o = op_of(CommOp::Kind::Recv, at::Tensor(), dst.dense);
    o.root = root;
    plan.ops.push_back(std::move(o));
  } else {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                info_.backend_name, ": scatter: the root passes one list of ", size_,
                " input tensors");
    std::vector<Dense> loads;
    for (int r = 0; r < size_; ++r) {
      const auto& in = inputs[0][r];
      check.tensor(in);
      check.same(in, out, "inputs and output");
      check.numel(in, out.numel(), "an input");
      if (r == root) continue;
      auto d = dense(in);
      if (d.copied) loads.push_back(d);
      auto o = op_of(CommOp::Kind::Send, d.dense, at::Tensor());
      o.root = r;
      plan.ops.push_back(std::move(o));
    }
    auto own = inputs[0][root];
    plan.pre = [loads, own, out] {
      for (auto& d : loads) d.dense.copy_(d.original);
      out.copy_(own.view(out.sizes()));
    };
  }
  if (plan.ops.empty()) plan.ops.push_back(op_of(CommOp::Kind::Broadcast, dst.dense, dst.dense));
  return run(OpType::SCATTER, "scatter", outputs, {}, std::move(plan), timeout_of(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::send(std::vector<at::Tensor>& tensors, int dst,
                                                  int tag) {
  Checker check(info_, "send");
  const auto& t = check.single(tensors);
  check.rank(dst, "destination");
  TORCH_CHECK(dst != rank_, info_.backend_name, ": send to itself (rank ", dst, ")");
  auto d = dense(t);
  Plan plan;
  plan.device = t.device().index();
  if (d.copied) plan.pre = [d] { d.dense.copy_(d.original); };
  auto o = op_of(CommOp::Kind::Send, d.dense, at::Tensor());
  o.root = dst;
  o.tag = tag;
  plan.ops.push_back(std::move(o));
  return run(OpType::SEND, "send", tensors, {}, std::move(plan),
             milliseconds(timeout_ms_.load()));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::recv(std::vector<at::Tensor>& tensors, int src,
                                                  int tag) {
  Checker check(info_, "recv");
  const auto& t = check.single(tensors);
  check.rank(src, "source");
  TORCH_CHECK(src != rank_, info_.backend_name, ": recv from itself (rank ", src, ")");
  auto d = dense(t);
  Plan plan;
  plan.device = t.device().index();
  if (d.copied) plan.post = [d] { d.original.copy_(d.dense); };
  auto o = op_of(CommOp::Kind::Recv, at::Tensor(), d.dense);
  o.root = src;
  o.tag = tag;
  plan.ops.push_back(std::move(o));
  return run(OpType::RECV, "recv", tensors, {}, std::move(plan),
             milliseconds(timeout_ms_.load()));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors,
                                                           int) {
  TORCH_CHECK(false, info_.backend_name, ": recv from any source is not supported; name the "
              "source rank (", tensors.empty() ? "no tensor" : c10::str(tensors[0].device()),
              ")");
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  c10::DeviceIndex device = current_device();
  if (opts.device && opts.device->type() == kDeviceType && opts.device->has_index()) {
    device = opts.device->index();
  } else if (auto bound = getBoundDeviceId(); bound && bound->type() == kDeviceType) {
    device = bound->index();
  } else if (!opts.device_ids.empty()) {
    device = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  }
  c10::DeviceGuard guard(c10::Device(kDeviceType, device));
  auto one = at::empty({1}, at::TensorOptions().dtype(c10::kFloat).device(kDeviceType, device));
  one.zero_();
  Plan plan;
  plan.device = device;
  plan.ops.push_back(op_of(CommOp::Kind::AllReduce, one, one));
  return run(OpType::BARRIER, "barrier", {one}, {}, std::move(plan), timeout_of(opts.timeout),
             /*blocking=*/true);
}

// ------------------------------------------------------------ failure handling

void ProcessGroup::fail_all(const std::string& message) {
  std::vector<c10::intrusive_ptr<Work>> works;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) return;
    error_ = message;
    works.assign(outstanding_.begin(), outstanding_.end());
  }
  for (auto& w : works) w->fail(message);
  report_async_error(message);
  try {
    engine_->abort();
  } catch (...) {
    // The group is failed already; an abort that fails changes nothing.
  }
}

void ProcessGroup::poll_async_error() {
  auto message = engine_->async_error();
  if (message.empty()) return;
  std::string where;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    where = info_.describe();
  }
  fail_all(info_.backend_name + ": " + where + " failed: " + message);
}

void ProcessGroup::abort() { fail_all(info_.backend_name + ": " + info_.describe() + " aborted"); }

void ProcessGroup::shutdown() {
  // Give queued collectives a moment to finish; the engine frees what it holds.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::vector<c10::intrusive_ptr<Work>> works;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      works.assign(outstanding_.begin(), outstanding_.end());
    }
    bool busy = false;
    for (auto& w : works) busy |= !w->poll_device_done();
    if (!busy || Clock::now() > deadline) break;
    std::this_thread::sleep_for(milliseconds(1));
  }
  engine_->shutdown();
}

void ProcessGroup::watchdog() {
  for (;;) {
    std::vector<c10::intrusive_ptr<Work>> works;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, milliseconds(50), [&] { return stop_; });
      if (stop_) return;
      works.assign(outstanding_.begin(), outstanding_.end());
    }
    const auto now = Clock::now();
    std::vector<Work*> done;
    for (auto& w : works) {
      if (w->poll_device_done()) {
        done.push_back(w.get());
      } else if (w->overdue(now)) {
        std::string where;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          where = info_.describe();
        }
        fail_all(w->what() + " on " + where + " did not finish within " +
                 std::to_string(w->timeout().count()) + " ms (started " + w->age(now) +
                 " ago): a rank of the group did not join it (it exited, hangs, or called "
                 "another collective). The group was aborted; its later collectives fail.");
      }
    }
    if (!done.empty()) {
      std::vector<c10::intrusive_ptr<Work>> released;  // freed outside the lock
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = outstanding_.begin(); it != outstanding_.end();) {
          if (std::find(done.begin(), done.end(), it->get()) != done.end()) {
            released.push_back(std::move(*it));
            it = outstanding_.erase(it);
          } else {
            ++it;
          }
        }
      }
      works.clear();
      for (auto& w : released) dispose(std::move(w));
    }
    try {
      poll_async_error();
    } catch (...) {
      // Never let the watchdog die: it is what turns hangs into errors.
    }
  }
}

}  // namespace FLSDK_BACKEND_NS::distributed
