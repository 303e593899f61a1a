// The simulated device's streams and events (simulator.h). Every stream, the
// default one of each device included, is a FIFO queue with a worker thread of
// its own that runs the queued work in order, as device work: while it runs,
// runtime::device_view answers and a host read of device memory would be a
// device read. Calls that queue return at once; the host waits only in the
// synchronize calls. The slow device holds every piece of work back before it
// runs, so a host that does not wait for a result reads stale bytes.
#include "simulator.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ocl::sim {
namespace {

using Clock = std::chrono::steady_clock;

struct Event {
  int device = 0;
  std::uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;  // generation of the latest record
  std::uint64_t reached = 0;   // highest generation its stream has reached
  Clock::time_point stamp;

  void reach(std::uint64_t gen) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (gen > reached) {
        reached = gen;
        stamp = Clock::now();
      }
    }
    cv.notify_all();
  }
  void wait(std::uint64_t gen) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached >= gen; });
  }
};

struct Work {
  std::function<void()> fn;  // empty for an event record
  const char* what = "";
  const runtime::OpInfo* queued_by = nullptr;
  std::shared_ptr<Event> record;  // reached once the work before it counts as done
  std::uint64_t generation = 0;
};

std::atomic<std::uint64_t> g_slow_us{0};
thread_local const RunningWork* t_running = nullptr;

struct StreamImpl {
  int device = 0;
  std::uint64_t id = 0;  // 0: the default stream
  pid_t pid = getpid();  // a forked child does not have this stream's worker
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::deque<Work> queue;
  std::uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::string error;             // first unreported failure of queued work
  std::uint64_t more_errors = 0;  // failures after it
  std::thread worker;

  void start() { worker = std::thread([this] { run(); }); }

  bool push(Work work) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop) return false;
      queue.push_back(std::move(work));
      ++enqueued;
    }
    cv_work.notify_one();
    return true;
  }

  void run() {
    for (;;) {
      Work work;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_work.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopped and drained
        work = std::move(queue.front());
        queue.pop_front();
      }
      if (const std::uint64_t us = g_slow_us.load(std::memory_order_relaxed))
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      std::string failure;
      if (work.fn) {
        const RunningWork running{device, id, work.what, work.queued_by};
        t_running = &running;
        try {  // queued work must never take the process down: report it later
          work.fn();
        } catch (const std::exception& e) {
          failure = e.what();
        } catch (...) {
          failure = "an exception not derived from std::exception";
        }
        t_running = nullptr;
        work.fn = nullptr;  // drop its captures before it counts as done
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ++completed;
        if (!failure.empty()) {
          if (error.empty()) {
            error = "ocl: " + std::string(work.what) + " on " + name() + " failed";
            if (work.queued_by) error += std::string(" (queued by ") + work.queued_by->op + ")";
            error += ": " + failure;
          } else {
            ++more_errors;
          }
        }
      }
      // After the count: once an event is complete, the work before it is done.
      if (work.record) work.record->reach(work.generation);
      cv_done.notify_all();
    }
  }

  std::string name() const {
    return (id ? "stream #" + std::to_string(id) : std::string("the default stream")) +
           " of device " + std::to_string(device);
  }

  bool on_worker() const { return worker.get_id() == std::this_thread::get_id(); }

  // Waits for everything queued so far; returns (and clears) the first error.
  std::string drain() {
    std::unique_lock<std::mutex> lock(mu);
    const std::uint64_t target = enqueued;
    cv_done.wait(lock, [&] { return completed >= target; });
    std::string e = std::move(error);
    if (!e.empty() && more_errors)
      e += " (and " + std::to_string(more_errors) + " later failure(s) on this stream)";
    error.clear();
    more_errors = 0;
    return e;
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mu);
    return completed == enqueued;
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_work.notify_all();
    if (worker.joinable()) worker.join();
  }
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<StreamImpl>> defaults;  // per device, started on first use
  std::unordered_map<void*, std::shared_ptr<StreamImpl>> streams;  // created ones
  std::unordered_map<void*, std::shared_ptr<Event>> events;
  std::vector<std::string> orphan_errors;  // per device: errors of destroyed streams
  std::uint64_t next_id = 1;
};

// Never destroyed: worker threads outlive static destruction at exit.
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// A parent's streams after fork(): their workers do not exist here. Kept alive
// forever (destroying a std::thread that names a missing thread aborts).
void keep_forever(std::shared_ptr<StreamImpl> s) {
  static auto* kept = new std::vector<std::shared_ptr<StreamImpl>>();
  kept->push_back(std::move(s));
}

Status default_stream(int device, std::shared_ptr<StreamImpl>* out) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.defaults.size() <= static_cast<std::size_t>(device)) r.defaults.resize(device + 1);
  auto& slot = r.defaults[static_cast<std::size_t>(device)];
  if (!slot || slot->pid != getpid()) {
    if (slot) keep_forever(slot);
    slot = std::make_shared<StreamImpl>();
    slot->device = device;
    slot->start();
  }
  *out = slot;
  return Status::Ok;
}

Status find_stream(int device, runtime::Stream stream, std::shared_ptr<StreamImpl>* out) {
  if (!stream) return default_stream(device, out);
  if (auto s = check_device(device); s != Status::Ok) return s;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.streams.find(stream);
    if (it != r.streams.end()) *out = it->second;
  }
  if (!*out)
    return fail(Status::InvalidValue, "ocl: " +
                                          std::to_string(reinterpret_cast<std::uintptr_t>(stream)) +
                                          " is not a live stream (destroyed?)");
  if ((*out)->pid != getpid())
    return fail(Status::Error, "ocl: " + (*out)->name() +
                                   " was created before fork(); its worker does not exist in "
                                   "this child process (create streams after forking)");
  if ((*out)->device != device)
    return fail(Status::InvalidValue, "ocl: " + (*out)->name() +
                                          " used as a stream of device " + std::to_string(device));
  return Status::Ok;
}

Status find_event(runtime::Event event, std::shared_ptr<Event>* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.events.find(event);
  if (it == r.events.end())
    return fail(Status::InvalidValue, "ocl: " +
                                          std::to_string(reinterpret_cast<std::uintptr_t>(event)) +
                                          " is not a live event (destroyed?)");
  *out = it->second;
  return Status::Ok;
}

Status queue(const std::shared_ptr<StreamImpl>& s, Work work) {
  if (!s->push(std::move(work)))
    return fail(Status::InvalidValue, "ocl: " + s->name() +
                                          " was destroyed while work was queued on it");
  return Status::Ok;
}

}  // namespace

Status streams_init(std::uint64_t slow_us) {
  g_slow_us = slow_us;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.orphan_errors.assign(static_cast<std::size_t>(device_count()), "");
  return Status::Ok;
}

void set_slow_device(std::uint64_t microseconds) { g_slow_us = microseconds; }
std::uint64_t slow_device() { return g_slow_us.load(); }

const RunningWork* running_work() { return t_running; }

Status enqueue(int device, runtime::Stream stream, const char* what, std::function<void()> work) {
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  return queue(s, Work{std::move(work), what, runtime::current_op(), nullptr, 0});
}

Status stream_create(int device, runtime::Stream* stream) {
  if (!stream) return fail(Status::InvalidValue, "ocl: stream_create: null output pointer");
  *stream = nullptr;
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto s = std::make_shared<StreamImpl>();
  s->device = device;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    s->id = r.next_id++;
    r.streams.emplace(s.get(), s);
  }
  s->start();
  *stream = s.get();
  return Status::Ok;
}

Status stream_destroy(int device, runtime::Stream stream) {
  if (!stream)
    return fail(Status::InvalidValue, "ocl: the default stream cannot be destroyed");
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  if (s->on_worker())
    return fail(Status::Error, "ocl: stream_destroy called from work running on " +
                                   s->name());
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.streams.erase(stream);
  }
  std::string error = s->drain();
  s->shutdown();
  if (!error.empty()) {
    std::lock_guard<std::mutex> lock(r.mu);
    auto& slot = r.orphan_errors[static_cast<std::size_t>(device)];
    if (slot.empty()) slot = error + " (its stream was destroyed before the error was reported)";
  }
  return Status::Ok;
}

Status stream_synchronize(int device, runtime::Stream stream) {
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  if (s->on_worker())
    return fail(Status::Error, "ocl: stream_synchronize called from work running on " +
                                   s->name() + " itself (it would wait for itself)");
  std::string error = s->drain();
  return error.empty() ? Status::Ok : fail(Status::Error, std::move(error));
}

Status stream_query(int device, runtime::Stream stream, bool* idle) {
  if (!idle) return fail(Status::InvalidValue, "ocl: stream_query: null output pointer");
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  *idle = s->idle();
  return Status::Ok;
}

Status stream_wait_event(int device, runtime::Stream stream, runtime::Event event) {
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ev->recorded;
  }
  if (gen == 0) return Status::Ok;  // never recorded: complete
  return queue(s, Work{[ev, gen] { ev->wait(gen); }, "wait for an event", runtime::current_op(),
                       nullptr, 0});
}

Status device_synchronize(int device) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  std::vector<std::shared_ptr<StreamImpl>> streams;
  std::string error;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (static_cast<std::size_t>(device) < r.defaults.size()) {
      auto& d = r.defaults[static_cast<std::size_t>(device)];
      if (d && d->pid == getpid()) streams.push_back(d);
    }
    for (auto& [handle, s] : r.streams)
      if (s->device == device && s->pid == getpid()) streams.push_back(s);
    if (static_cast<std::size_t>(device) < r.orphan_errors.size())
      std::swap(error, r.orphan_errors[static_cast<std::size_t>(device)]);
  }
  for (auto& s : streams) {
    if (s->on_worker())
      return fail(Status::Error, "ocl: device_synchronize called from work running on " +
                                     s->name() + " (it would wait for itself)");
  }
  for (auto& s : streams) {
    std::string e = s->drain();
    if (error.empty()) error = std::move(e);
  }
  return error.empty() ? Status::Ok : fail(Status::Error, std::move(error));
}

Status event_create(int device, runtime::Event* event) {
  if (!event) return fail(Status::InvalidValue, "ocl: event_create: null output pointer");
  *event = nullptr;
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto ev = std::make_shared<Event>();
  ev->device = device;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  ev->id = r.next_id++;
  r.events.emplace(ev.get(), ev);
  *event = ev.get();
  return Status::Ok;
}

// Event calls other than record take any valid device: the event knows its own,
// and PyTorch's guard may pass the current one.
Status event_destroy(int device, runtime::Event event) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // Queued records and waits hold their own reference: the event lives until they ran.
  if (r.events.erase(event) == 0)
    return fail(Status::InvalidValue, "ocl: event_destroy of an event that is not live");
  return Status::Ok;
}

Status event_record(int device, runtime::Event event, runtime::Stream stream) {
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  if (ev->device != device)
    return fail(Status::InvalidValue, "ocl: an event of device " +
                                          std::to_string(ev->device) + " recorded on device " +
                                          std::to_string(device));
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ++ev->recorded;
  }
  const Status status = queue(s, Work{nullptr, "event record", runtime::current_op(), ev, gen});
  if (status != Status::Ok) ev->reach(gen);  // nobody would reach it: do not leave waiters hanging
  return status;
}

Status event_synchronize(int device, runtime::Event event) {
  if (auto s = check_device(device); s != Status::Ok) return s;
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ev->recorded;
  }
  ev->wait(gen);
  return Status::Ok;
}

Status event_query(int device, runtime::Event event, bool* done) {
  if (!done) return fail(Status::InvalidValue, "ocl: event_query: null output pointer");
  if (auto s = check_device(device); s != Status::Ok) return s;
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  std::lock_guard<std::mutex> lock(ev->mu);
  *done = ev->reached >= ev->recorded;
  return Status::Ok;
}

Status event_elapsed_ms(runtime::Event start, runtime::Event end, float* ms) {
  if (!ms) return fail(Status::InvalidValue, "ocl: event_elapsed_ms: null output pointer");
  std::shared_ptr<Event> a, b;
  if (auto st = find_event(start, &a); st != Status::Ok) return st;
  if (auto st = find_event(end, &b); st != Status::Ok) return st;
  Clock::time_point stamps[2];
  const Event* events[2] = {a.get(), b.get()};
  for (int i = 0; i < 2; ++i) {
    auto* ev = const_cast<Event*>(events[i]);
    std::lock_guard<std::mutex> lock(ev->mu);
    const char* which = i == 0 ? "start" : "end";
    if (ev->recorded == 0)
      return fail(Status::Error, std::string("ocl: event_elapsed_ms: the ") + which +
                                     " event was never recorded");
    if (ev->reached < ev->recorded)
      return fail(Status::Error, std::string("ocl: event_elapsed_ms: the ") + which +
                                     " event has not completed (synchronize it first)");
    stamps[i] = ev->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(stamps[1] - stamps[0]).count();
  return Status::Ok;
}

}  // namespace ocl::sim
