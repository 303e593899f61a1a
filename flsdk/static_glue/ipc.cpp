// Device storages shared with other processes (torch.multiprocessing), as CUDA's
// are: the producer hands out a handle of the runtime allocation a storage lies
// in (runtime ipc primitives, device.yaml runtime_primitives: ipc) and an event
// recorded after its last write; the consumer opens the allocation in place
// (the child writes, the parent reads the same bytes) and its current stream
// waits for the event. The Python side (backend_glue/multiprocessing.py)
// registers the pickling reductions that call these.
//
// Lifetime, as CUDA's: the producer keeps every storage it shared alive while a
// consumer holds it. Each share takes a slot of a small shared-memory counter
// block of the producer (1: a consumer may hold it); the consumer's storage
// deleter sets it to 0 after closing its mapping, and the producer drops the
// storages whose slots are 0 at its next share and in collect()
// (torch.<device>.ipc_collect()). A producer that exits takes the memory with it:
// keep it alive while consumers use what it sent (CUDA's rule too).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <c10/core/Storage.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Storage.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "allocator.h"
#include "backend.h"
#include "ipc.h"

namespace FLSDK_BACKEND_NS::ipc {
namespace py = pybind11;
namespace {

constexpr std::size_t kSlots = 4096;  // counters per block (32 KiB)

// One block of consumer counters in POSIX shared memory.
struct CounterBlock {
  std::string name;
  std::atomic<std::int64_t>* slots = nullptr;

  static CounterBlock* create(const std::string& name) {
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    TORCH_CHECK(fd >= 0, kBackendName, ": sharing a device tensor: shm_open(", name, ") failed: ",
                std::strerror(errno));
    const auto bytes = kSlots * sizeof(std::int64_t);
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      TORCH_CHECK(false, kBackendName, ": sharing a device tensor: ftruncate failed: ",
                  std::strerror(errno));
    }
    return map(name, fd);
  }

  static CounterBlock* open_existing(const std::string& name) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    TORCH_CHECK(fd >= 0, kBackendName, ": opening a shared device tensor: its producer's counter "
                "block ", name, " is gone (", std::strerror(errno), "): the producing process "
                "exited; it must stay alive while consumers use what it sent");
    return map(name, fd);
  }

  static CounterBlock* map(const std::string& name, int fd) {
    void* m = mmap(nullptr, kSlots * sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    TORCH_CHECK(m != MAP_FAILED, kBackendName, ": mmap of ", name, " failed: ", std::strerror(errno));
    auto* block = new CounterBlock();
    block->name = name;
    block->slots = static_cast<std::atomic<std::int64_t>*>(m);
    return block;
  }
};

// ---- producer side ------------------------------------------------------------

struct Sent {
  c10::Storage storage;  // kept alive while a consumer may hold it
  runtime::Event event = nullptr;
  int device = 0;
  CounterBlock* block = nullptr;
  std::size_t slot = 0;
};

std::mutex g_mutex;
std::vector<CounterBlock*> g_blocks;  // this process's counter blocks (producer)
std::vector<std::size_t> g_next_slot;
std::map<std::uint64_t, Sent> g_sent;  // by share key
std::uint64_t g_next_key = 1;

// Consumer side: the mappings opened in this process, by handle (one per
// producer allocation, however many storages of it arrive), and counter blocks.
struct Opened {
  void* ptr = nullptr;
  int device = 0;
  int users = 0;
};
std::map<std::string, Opened> g_opened;
std::map<std::string, CounterBlock*> g_peer_blocks;

void unlink_blocks_at_exit() {
  for (auto* block : g_blocks) shm_unlink(block->name.c_str());
}

std::pair<CounterBlock*, std::size_t> take_slot_locked() {
  for (std::size_t b = 0; b < g_blocks.size(); ++b) {
    for (std::size_t n = 0; n < kSlots; ++n) {
      std::size_t slot = (g_next_slot[b] + n) % kSlots;
      if (g_blocks[b]->slots[slot].load() == 0) {
        g_next_slot[b] = slot + 1;
        return {g_blocks[b], slot};
      }
    }
  }
  static bool registered = (std::atexit(unlink_blocks_at_exit), true);
  (void)registered;
  auto name = "/flsdk-" + std::string(kBackendName) + "-ipc-" + std::to_string(getpid()) + "-" +
              std::to_string(g_blocks.size());
  g_blocks.push_back(CounterBlock::create(name));
  g_next_slot.push_back(1);
  return {g_blocks.back(), 0};
}

std::size_t collect_locked() {
  for (auto it = g_sent.begin(); it != g_sent.end();) {
    if (it->second.block->slots[it->second.slot].load() == 0) {
      if (it->second.event) runtime::event_destroy(it->second.device, it->second.event);
      it = g_sent.erase(it);
    } else {
      ++it;
    }
  }
  return g_sent.size();
}

std::string bytes_of(const void* p, std::size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

void require_ipc(const char* what) {
  TORCH_CHECK(config::kRuntimeHasIpc, kBackendName, ": ", what, ": this backend's runtime does "
              "not share device memory between processes (device.yaml runtime_primitives does "
              "not list ipc), so a tensor on ", kBackendName, " cannot be passed to another "
              "process; move it to the CPU first (tensor.cpu()), or implement the runtime's "
              "ipc_* calls");
}

// The storage deleter of a consumer: closes the mapping when its last storage
// goes, then frees the producer's slot.
struct ImportContext {
  std::string handle;
  CounterBlock* block;
  std::size_t slot;
  runtime::Event event;
  int device;
  void* base;               // this process's mapping of the producer's allocation
  std::int64_t origin_pid;  // the process that allocated it, and its share key there
  std::uint64_t origin_key;
};

void release_import(void* context) {
  auto* ctx = static_cast<ImportContext*>(context);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_opened.find(ctx->handle);
    if (it != g_opened.end() && --it->second.users == 0) {
      if constexpr (config::kRuntimeHasIpc) {
        // Work of this process still queued on the memory must finish first.
        runtime::device_synchronize(ctx->device);
        runtime::ipc_close_mem_handle(ctx->device, it->second.ptr);
      }
      g_opened.erase(it);
    }
    if (ctx->event) runtime::event_destroy(ctx->device, ctx->event);
  }
  ctx->block->slots[ctx->slot].store(0);
  delete ctx;
}

}  // namespace

py::tuple share(const c10::Storage& storage) {
  require_ipc("sharing a tensor with another process");
  const auto& data = storage.data_ptr();
  TORCH_CHECK(data.device().type() == kDeviceType, kBackendName, ": share: not a ", kBackendName,
              " storage (", data.device(), ")");
  const int device = data.device().index();
  void* base = nullptr;
  std::size_t allocation = 0;
  // A storage this process received from another is passed on with the handle of
  // its producer's allocation (and who that is: a tensor going back to its
  // producer comes back as the producer's own storage).
  const auto* imported = data.get_deleter() == &release_import
                             ? static_cast<const ImportContext*>(data.get_context())
                             : nullptr;
  TORCH_CHECK(storage.nbytes() == 0 || imported ||
                  allocator::allocation_of(data.get_context(), data.get_deleter(), &base,
                                           &allocation),
              kBackendName, ": share: this ", data.device(), " storage was not made by the "
              "caching allocator (it wraps memory allocated elsewhere), so it has no "
              "allocation to share; clone() it first");
  runtime::IpcMemHandle mem{};
  runtime::IpcEventHandle ev{};
  runtime::Event event = nullptr;
  if (imported) {
    base = imported->base;
    std::memcpy(mem.bytes, imported->handle.data(), sizeof mem.bytes);
  }
  if constexpr (config::kRuntimeHasIpc) {
    if (storage.nbytes() > 0) {
      if (!imported)
        check_status(runtime::ipc_get_mem_handle(device, base, &mem), "ipc_get_mem_handle");
      // The consumer's stream waits for what this process queued so far.
      check_status(runtime::event_create(device, &event), "event_create");
      check_status(runtime::event_record(device, event, native_stream(current_stream(device))),
                   "event_record");
      check_status(runtime::ipc_get_event_handle(device, event, &ev), "ipc_get_event_handle");
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  collect_locked();
  auto [block, slot] = take_slot_locked();
  block->slots[slot].store(1);
  const std::uint64_t key = g_next_key++;
  g_sent[key] = Sent{storage, event, device, block, slot};
  const auto offset = static_cast<std::size_t>(static_cast<const char*>(data.get()) -
                                               static_cast<const char*>(base));
  const std::int64_t origin_pid = imported ? imported->origin_pid : getpid();
  const std::uint64_t origin_key = imported ? imported->origin_key : key;
  return py::make_tuple(device, py::bytes(bytes_of(mem.bytes, sizeof mem.bytes)), offset,
                        storage.nbytes(), py::bytes(bytes_of(ev.bytes, sizeof ev.bytes)),
                        block->name, slot, origin_pid, origin_key);
}

PyObject* open(int device, const std::string& mem_handle, std::size_t offset, std::size_t nbytes,
               const std::string& event_handle, const std::string& counter_block,
               std::size_t slot, std::int64_t origin_pid, std::uint64_t origin_key) {
  require_ipc("receiving a tensor from another process");
  check_device_index(device);
  TORCH_CHECK(mem_handle.size() == runtime::kIpcHandleBytes &&
                  event_handle.size() == runtime::kIpcHandleBytes,
              kBackendName, ": a shared tensor's handle has the wrong size (another backend "
              "version on the other side?)");
  auto* ctx = new ImportContext{mem_handle, nullptr,   slot,       nullptr,
                                device,     nullptr,   origin_pid, origin_key};
  void* base = nullptr;
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto peer = g_peer_blocks.find(counter_block);
    if (peer == g_peer_blocks.end())
      peer = g_peer_blocks.emplace(counter_block, CounterBlock::open_existing(counter_block)).first;
    ctx->block = peer->second;
    if constexpr (config::kRuntimeHasIpc) {
      if (nbytes > 0) {
        auto opened = g_opened.find(mem_handle);
        if (opened == g_opened.end()) {
          runtime::IpcMemHandle mem{};
          std::memcpy(mem.bytes, mem_handle.data(), sizeof mem.bytes);
          void* ptr = nullptr;
          check_status(runtime::ipc_open_mem_handle(device, mem, &ptr), "ipc_open_mem_handle");
          opened = g_opened.emplace(mem_handle, Opened{ptr, device, 0}).first;
        }
        opened->second.users += 1;
        base = opened->second.ptr;
        ctx->base = base;
        runtime::IpcEventHandle ev{};
        std::memcpy(ev.bytes, event_handle.data(), sizeof ev.bytes);
        check_status(runtime::ipc_open_event_handle(device, ev, &ctx->event),
                     "ipc_open_event_handle");
        check_status(runtime::stream_wait_event(device, native_stream(current_stream(device)),
                                                ctx->event),
                     "stream_wait_event");
      }
    }
  } catch (...) {
    delete ctx;
    throw;
  }
  c10::DataPtr data(static_cast<char*>(base) + offset, ctx, &release_import,
                    c10::Device(kDeviceType, static_cast<c10::DeviceIndex>(device)));
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return THPStorage_Wrap(std::move(storage));
}

PyObject* lookup(std::uint64_t key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_sent.find(key);
  TORCH_CHECK(it != g_sent.end(), kBackendName, ": a tensor shared by this process is no longer "
              "held (share key ", key, ")");
  return THPStorage_Wrap(it->second.storage);
}

std::size_t collect() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return collect_locked();
}

void bind(py::module_& m) {
  m.def("_ipc_share", [](py::handle storage) {
    TORCH_CHECK(THPStorage_Check(storage.ptr()), kBackendName, ": _ipc_share takes an "
                "UntypedStorage");
    return share(THPStorage_Unpack(storage.ptr()));
  });
  m.def("_ipc_open", [](int device, const py::bytes& mem, std::size_t offset, std::size_t nbytes,
                        const py::bytes& event, const std::string& counter_block,
                        std::size_t slot, std::int64_t origin_pid, std::uint64_t origin_key) {
    return py::reinterpret_steal<py::object>(open(device, mem, offset, nbytes, event,
                                                  counter_block, slot, origin_pid, origin_key));
  });
  m.def("_ipc_lookup", [](std::uint64_t key) {
    return py::reinterpret_steal<py::object>(lookup(key));
  });
  m.def("ipc_collect", &collect,
        "Drops the storages this process shared that no consumer holds any more; returns how "
        "many are still held (torch.cuda.ipc_collect's counterpart).");
}

}  // namespace FLSDK_BACKEND_NS::ipc
