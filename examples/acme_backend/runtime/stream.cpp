// acme vendor runtime: streams, events and kernel launch. Every stream, the
// default one (a null acmeStream_t) included, queues its work on a worker
// thread of its own (stream.h) that runs it as device work, in order.
#include "internal.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace acme_internal {

std::atomic<uint64_t> g_fork_epoch{0};

// A new stream of `device` with its worker running (its id and registration
// are the caller's).
acmeError_t start_stream(int device, std::shared_ptr<acmeStream_st>* out) {
  auto s = std::make_shared<acmeStream_st>();
  s->device = device;
  s->fork_epoch = g_fork_epoch.load();
  s->slow_us = &rt().slow_device_us;
  try {
    s->worker = std::thread([p = s.get()] {
      DeviceWork on_device;  // the worker only ever runs queued device work
      p->run();
    });
  } catch (const std::system_error& ex) {
    return fail(acmeErrorRuntime, "acme: cannot start a stream's worker thread: %s", ex.what());
  }
  *out = std::move(s);
  return acmeSuccess;
}

// The default stream of `device`, started on first use (again in a forked
// child, where the parent's worker threads do not exist).
acmeError_t default_stream(int device, std::shared_ptr<acmeStream_st>* out) {
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.reg_mu);
  auto& slot = r.default_streams[static_cast<size_t>(device)];
  if (!slot || slot->fork_epoch != g_fork_epoch.load(std::memory_order_relaxed)) {
    if (slot) {
      // A parent's stream: its std::thread names a thread that is not in this
      // process; keep the object forever rather than destroying a joinable thread.
      static auto* inherited = new std::vector<std::shared_ptr<acmeStream_st>>();
      inherited->push_back(slot);
    }
    std::shared_ptr<acmeStream_st> fresh;
    if (auto e = start_stream(device, &fresh)) return e;
    fresh->id = 0;
    slot = std::move(fresh);
  }
  *out = slot;
  return acmeSuccess;
}

// The default stream of `device` for a launch from this thread, without the
// registry's lock: each thread keeps the default streams it used, valid until
// acmeInit replaces them or the process forks. A launch is the hot path of
// every tiny op (issue 39: the lock and the shared_ptr copy per launch were
// among the host's extra costs). The cache holds references, so a stream that
// acmeInit shuts down meanwhile stays a valid object that refuses the work.
acmeStream_st* launch_default_stream(int device, acmeError_t* error) {
  struct Cache {
    uint64_t generation = ~uint64_t{0};
    uint64_t fork_epoch = ~uint64_t{0};
    std::vector<std::shared_ptr<acmeStream_st>> streams;
  };
  thread_local Cache cache;
  const uint64_t generation = rt().default_streams_generation.load(std::memory_order_acquire);
  const uint64_t epoch = g_fork_epoch.load(std::memory_order_relaxed);
  if (cache.generation != generation || cache.fork_epoch != epoch) {
    cache.streams.clear();
    cache.generation = generation;
    cache.fork_epoch = epoch;
  }
  const auto slot = static_cast<size_t>(device);
  if (slot < cache.streams.size() && cache.streams[slot]) return cache.streams[slot].get();
  std::shared_ptr<acmeStream_st> s;
  if ((*error = default_stream(device, &s))) return nullptr;
  if (cache.streams.size() <= slot) cache.streams.resize(slot + 1);
  cache.streams[slot] = std::move(s);
  return cache.streams[slot].get();
}

acmeError_t find_stream(int device, acmeStream_t s, std::shared_ptr<acmeStream_st>* out) {
  if (!s) return default_stream(device, out);
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    auto it = r.streams.find(s);
    if (it != r.streams.end()) *out = it->second;
  }
  if (!*out)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme stream (destroyed?)",
                static_cast<void*>(s));
  if ((*out)->fork_epoch != g_fork_epoch.load(std::memory_order_relaxed))
    return fail(acmeErrorRuntime,
                "acme: stream #%llu was created before fork(); its worker thread does not "
                "exist in this child process (create new streams after forking)",
                static_cast<unsigned long long>((*out)->id));
  if ((*out)->device != device)
    return fail(acmeErrorInvalidValue, "acme: stream #%llu belongs to device %d, not device %d",
                static_cast<unsigned long long>((*out)->id), (*out)->device, device);
  return acmeSuccess;
}

acmeError_t find_event(acmeEvent_t e, std::shared_ptr<acmeEvent_st>* out) {
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    auto it = r.events.find(e);
    if (it != r.events.end()) *out = it->second;
  }
  if (!*out)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme event (destroyed?)",
                static_cast<void*>(e));
  return acmeSuccess;
}

acmeError_t destroyed(const std::shared_ptr<acmeStream_st>& s) {
  return fail(acmeErrorInvalidValue, "acme: stream #%llu was destroyed while work was being queued on it",
              static_cast<unsigned long long>(s->id));
}


}  // namespace acme_internal

using namespace acme_internal;

extern "C" {

// ---- streams ----------------------------------------------------------------

acmeError_t acmeStreamCreate(int device, acmeStream_t* stream) {
  if (!stream) return fail(acmeErrorInvalidValue, "acme: stream_create: null output pointer");
  *stream = nullptr;
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  std::shared_ptr<acmeStream_st> s;
  if (auto e = start_stream(device, &s)) return e;
  std::lock_guard<std::mutex> lk(r.reg_mu);
  s->id = r.next_id++;
  r.streams.emplace(s.get(), s);
  *stream = s.get();
  return acmeSuccess;
}

acmeError_t acmeStreamDestroy(int device, acmeStream_t stream) {
  if (auto e = check_device(device)) return e;
  if (!stream) return fail(acmeErrorInvalidValue, "acme: stream_destroy: the default stream cannot be destroyed");
  Runtime& r = rt();
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  if (s->on_worker())
    return fail(acmeErrorRuntime, "acme: stream_destroy: called from work running on stream #%llu",
                static_cast<unsigned long long>(s->id));
  {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    if (r.streams.erase(stream) == 0)  // lost a race with another destroy
      return fail(acmeErrorInvalidValue, "acme: %p is not a live acme stream (destroyed?)",
                  static_cast<void*>(stream));
  }
  std::string err = s->drain<acme_internal::DeviceWork>();
  s->shutdown();
  if (!err.empty()) {
    std::lock_guard<std::mutex> lk(r.reg_mu);
    if (r.orphan_errors[device].empty())
      r.orphan_errors[device] = err + " (stream destroyed before the error was reported)";
  }
  return acmeSuccess;
}

acmeError_t acmeStreamSynchronize(int device, acmeStream_t stream) {
  if (auto e = check_alive(device)) return e;
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  if (s->on_worker())
    return fail(acmeErrorRuntime,
                "acme: stream_synchronize called from work running on stream #%llu itself "
                "(would deadlock)",
                static_cast<unsigned long long>(s->id));
  rt().stats.host_waits++;
  std::string err = s->drain<acme_internal::DeviceWork>();
  if (!err.empty()) return fail_str(acmeErrorRuntime, std::move(err));
  return acmeSuccess;
}

acmeError_t acmeStreamQuery(int device, acmeStream_t stream, int* idle) {
  if (!idle) return fail(acmeErrorInvalidValue, "acme: stream_query: null output pointer");
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  *idle = s->idle() ? 1 : 0;
  return acmeSuccess;
}

acmeError_t acmeStreamWaitEvent(int device, acmeStream_t stream, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ev->recorded;
  }
  if (gen == 0) return acmeSuccess;  // never recorded: nothing to wait for
  auto wait = [ev, gen] {
    std::string why = ev->wait(gen);
    if (!why.empty()) throw std::runtime_error(why);
  };
  if (!s->push(std::move(wait), "wait for event")) return destroyed(s);
  return acmeSuccess;
}

// ---- events -----------------------------------------------------------------

acmeError_t acmeEventCreate(int device, acmeEvent_t* event) {
  if (!event) return fail(acmeErrorInvalidValue, "acme: event_create: null output pointer");
  *event = nullptr;
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  auto ev = std::make_shared<acmeEvent_st>();
  ev->device = device;
  std::lock_guard<std::mutex> lk(r.reg_mu);
  ev->id = r.next_id++;
  r.events.emplace(ev.get(), ev);
  *event = ev.get();
  return acmeSuccess;
}

// Event calls other than record accept any valid device index: the event
// knows its device, and callers (PyTorch's guard) may only know the current one.
acmeError_t acmeEventDestroy(int device, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lk(r.reg_mu);
  // Queued markers/waits hold their own reference; the event lives until they ran.
  if (r.events.erase(event) == 0)
    return fail(acmeErrorInvalidValue, "acme: %p is not a live acme event (destroyed?)",
                static_cast<void*>(event));
  return acmeSuccess;
}

acmeError_t acmeEventRecord(int device, acmeEvent_t event, acmeStream_t stream) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  if (ev->device != device)
    return fail(acmeErrorInvalidValue, "acme: event #%llu belongs to device %d, not device %d",
                static_cast<unsigned long long>(ev->id), ev->device, device);
  if (ev->remote)
    return fail(acmeErrorInvalidValue,
                "acme: event #%llu was opened from another process's IPC handle: only that "
                "process records it",
                static_cast<unsigned long long>(ev->id));
  std::shared_ptr<acmeStream_st> s;
  if (auto e = find_stream(device, stream, &s)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ++ev->recorded;
  }
  // reached once the worker has counted the marker done (stream.h, t_after_completed)
  if (!s->push([ev, gen] { t_after_completed = [ev, gen] { ev->reach(gen); }; }, "event marker")) {
    ev->reach(gen);  // nobody would complete this record: do not leave waiters hanging
    return destroyed(s);
  }
  return acmeSuccess;
}

acmeError_t acmeEventSynchronize(int device, acmeEvent_t event) {
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(ev->mu);
    gen = ev->recorded;
  }
  rt().stats.host_waits++;
  std::string why = ev->wait(gen);
  if (!why.empty()) return fail_str(acmeErrorRuntime, std::move(why));
  return acmeSuccess;
}

acmeError_t acmeEventQuery(int device, acmeEvent_t event, int* done) {
  if (!done) return fail(acmeErrorInvalidValue, "acme: event_query: null output pointer");
  if (auto e = check_device(device)) return e;
  std::shared_ptr<acmeEvent_st> ev;
  if (auto e = find_event(event, &ev)) return e;
  *done = ev->done() ? 1 : 0;
  return acmeSuccess;
}

acmeError_t acmeEventElapsedTime(float* ms, acmeEvent_t start, acmeEvent_t end) {
  if (!ms) return fail(acmeErrorInvalidValue, "acme: event_elapsed_ms: null output pointer");
  std::shared_ptr<acmeEvent_st> a, b;
  if (auto e = find_event(start, &a)) return e;
  if (auto e = find_event(end, &b)) return e;
  Clock::time_point ta, tb;
  for (auto [ev, t, name] : {std::tuple{a.get(), &ta, "start"}, std::tuple{b.get(), &tb, "end"}}) {
    if (ev->remote)
      return fail(acmeErrorInvalidValue,
                  "acme: event_elapsed_ms: the %s event was opened from another process's IPC "
                  "handle (it has no time stamp here)",
                  name);
    std::lock_guard<std::mutex> lk(ev->mu);
    if (ev->recorded == 0)
      return fail(acmeErrorRuntime, "acme: event_elapsed_ms: the %s event was never recorded",
                  name);
    if (ev->reached < ev->recorded)
      return fail(acmeErrorRuntime,
                  "acme: event_elapsed_ms: the %s event has not completed yet (synchronize it "
                  "first)",
                  name);
    *t = ev->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return acmeSuccess;
}

acmeError_t acmeLaunchHostFunc(int device, acmeStream_t stream, void (*fn)(void*), void* arg) {
  if (!fn) return fail(acmeErrorInvalidValue, "acme: launch: null function");
  return acmeLaunch(device, stream, [fn, arg] { fn(arg); }, "host kernel");
}

}  // extern "C"

acmeError_t acmeLaunch(int device, acmeStream_t stream, std::function<void()> fn, const char* name,
                       acmeActivityKind kind) {
  const int64_t called = launch_clock();
  if (auto e = check_alive(device)) return e;
  if (!fn) return fail(acmeErrorInvalidValue, "acme: launch: empty function");
  // The default stream comes from the launching thread's cache (no registry lock);
  // a created stream from the registry, kept alive by `held` while work is pushed.
  std::shared_ptr<acmeStream_st> held;
  acmeStream_st* s = nullptr;
  if (!stream) {
    acmeError_t e = acmeSuccess;
    if (!(s = launch_default_stream(device, &e))) return e;
  } else {
    if (auto e = find_stream(device, stream, &held)) return e;
    s = held.get();
  }
  rt().stats.launches++;
  if (!s->push(std::move(fn), "kernel", tag(kind, name ? name : "kernel", called))) {
    if (held) return destroyed(held);
    return fail(acmeErrorInvalidValue,
                "acme: the default stream of device %d was shut down (acmeInit) while work "
                "was being queued on it",
                device);
  }
  return acmeSuccess;
}
