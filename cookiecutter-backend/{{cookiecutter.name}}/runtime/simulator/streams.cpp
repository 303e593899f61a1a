// The simulated device's streams and events (simulator.h). Every stream, the
// default one of each device included, is a FIFO queue of device work run in
// order, one piece at a time, as device work: while a piece runs,
// runtime::device_view answers and a host read of device memory would be a
// device read. Calls that queue return at once; the host waits only in the
// synchronize calls. The slow device holds every piece of work back before it
// runs, so a host that does not wait for a result reads stale bytes.
//
// Who runs the work: the stream's worker thread, or a host thread that
// synchronizes the stream while the worker is not running a piece. A real
// device picks queued work up within microseconds; a simulated one whose worker
// sleeps, or is not scheduled because another process has the core, would make
// every synchronize wait for the operating system (tens of microseconds per
// wake-up on a VM, twice per round trip of a few tiny ops and an .item()).
// The work and its order are the same either way.
//
// What queueing costs the host: no lock. A queue is a linked list that any
// host thread appends to with one atomic exchange, and that one thread at a
// time (the holder of the consumer token: the worker or a synchronizing host)
// takes from. A mutex shared with the worker would be taken three times per
// piece of work (push, pop, count), and on a busy machine a contended one puts
// the loser to sleep in the kernel.
//
// Sleeping and waking without a lost wake-up: a sleeper publishes that it
// sleeps, then checks once more for what it waits for; the other side
// publishes what it produced, then checks for a sleeper (all sequentially
// consistent) and wakes it through the futex word the sleeper read before it
// looked. Either the sleeper sees the work or the producer sees the sleeper.
#include "simulator.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {{ cookiecutter.name }}::sim {
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

// fork()s so far, counted in the child: a stream made before the last one has no
// worker in this process. (Comparing getpid() would cost a system call per launch.)
std::atomic<std::uint64_t> g_fork_epoch{0};

// How long a thread that waits (the worker for work, a synchronizing host for
// the worker's current piece) polls before it sleeps: the next launch or the
// piece's end usually follows within microseconds, and a sleep costs a wake-up.
// Each poll yields the core: on a loaded 2-core machine a poll with a pause
// instruction instead takes the core from the very thread it waits for (acme
// measured round trips 1.2-4x slower that way). Bounded, so an idle device costs
// one short poll, not a busy core.
constexpr auto kPoll = std::chrono::microseconds(50);

// Polls `done()` until it holds (true) or kPoll has passed (false).
template <class Done>
bool poll_until(Done done) {
  if (done()) return true;
  const auto deadline = Clock::now() + kPoll;
  do {
    std::this_thread::yield();
    if (done()) return true;
  } while (Clock::now() < deadline);
  return false;
}

struct Node {
  std::atomic<Node*> next{nullptr};
  Work work;
};

// List nodes are recycled, for all streams: whoever takes work off a list gives
// the node it moved past to `returned`; a queueing thread takes that whole stack
// into a cache of its own when its cache is empty. (A node the host allocates and
// the worker frees would make every launch a cross-thread free in the C heap;
// taking the whole stack at once, never single nodes, leaves no ABA problem.)
std::atomic<Node*> g_returned{nullptr};

struct NodeCache {
  Node* head = nullptr;
  ~NodeCache() {
    while (Node* n = head) {
      head = n->next.load(std::memory_order_relaxed);
      delete n;
    }
  }
};

Node* take_node() {
  thread_local NodeCache cache;
  if (!cache.head) cache.head = g_returned.exchange(nullptr, std::memory_order_acquire);
  if (Node* n = cache.head) {
    cache.head = n->next.load(std::memory_order_relaxed);
    n->next.store(nullptr, std::memory_order_relaxed);
    return n;
  }
  return new Node;
}

void give_node(Node* n) {
  Node* top = g_returned.load(std::memory_order_relaxed);
  do {
    n->next.store(top, std::memory_order_relaxed);
  } while (!g_returned.compare_exchange_weak(top, n, std::memory_order_release,
                                             std::memory_order_relaxed));
}

class StreamImpl;
// The stream whose work this thread is running now (its worker, or a host that
// synchronizes it), so that work which synchronizes its own stream is refused
// instead of waiting for itself.
thread_local const StreamImpl* t_stream = nullptr;

class StreamImpl {
 public:
  int device = 0;
  std::uint64_t id = 0;  // 0: the default stream
  std::uint64_t fork_epoch = g_fork_epoch.load();

  StreamImpl() : head_(new Node), tail_(head_.load()) {}
  StreamImpl(const StreamImpl&) = delete;
  StreamImpl& operator=(const StreamImpl&) = delete;
  ~StreamImpl() {  // after shutdown (or never started): only the list's stub is left
    for (Node* n = head_.load(); n;) {
      Node* next = n->next.load(std::memory_order_relaxed);
      delete n;
      n = next;
    }
  }

  bool start() {
    try {
      worker_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }

  // False once the stream is shutting down: a push racing a destroy must not
  // leave work queued that nobody will run.
  bool push(Work work) {
    // Counted before it is linked, so that a drain reading the count waits for
    // it; the same word holds the stop flag, so a push and a shutdown agree on
    // whether this work runs.
    if (state_.fetch_add(1, std::memory_order_seq_cst) & kStopped) {
      state_.fetch_sub(1, std::memory_order_seq_cst);
      wake_worker();  // a stopping worker waits for the count to settle
      return false;
    }
    Node* n = take_node();
    n->work = std::move(work);
    // The exchange publishes the work to a worker about to sleep (tail_ moved
    // past head_) and is a full barrier: the check for a sleeper stays after it.
    Node* prev = tail_.exchange(n, std::memory_order_seq_cst);
    prev->next.store(n, std::memory_order_release);
    if (worker_sleeping_.load(std::memory_order_seq_cst)) wake_worker();
    return true;
  }

  // Waits for everything queued so far, running it on this thread while the
  // worker is not running a piece; returns (and clears) the first error.
  std::string drain() {
    const std::uint64_t target = state_.load(std::memory_order_acquire) & ~kStopped;
    auto reached = [&] { return completed_.load(std::memory_order_acquire) >= target; };
    if (!reached()) {
      while (!reached()) {
        if (run_one() > 0) continue;
        // The worker runs a piece (or a push counted in the target is still
        // linking it): poll a little, then sleep until a piece completes.
        auto go_on = [&] { return reached() || !consumer_.load(std::memory_order_seq_cst); };
        if (poll_until(go_on)) continue;
        drainers_.fetch_add(1, std::memory_order_seq_cst);
        for (;;) {
          const std::uint32_t signal = done_signal_.load(std::memory_order_acquire);
          if (go_on()) break;
          done_signal_.wait(signal, std::memory_order_acquire);
        }
        drainers_.fetch_sub(1, std::memory_order_relaxed);
      }
      // Work queued after the target is the worker's: it may have gone to sleep
      // while this thread held the token.
      if (worker_sleeping_.load(std::memory_order_seq_cst) && has_work()) wake_worker();
    }
    std::lock_guard<std::mutex> lock(error_mu_);
    std::string e = std::move(error_);
    if (!e.empty() && more_errors_)
      e += " (and " + std::to_string(more_errors_) + " later failure(s) on this stream)";
    error_.clear();
    more_errors_ = 0;
    return e;
  }

  bool idle() const {
    return completed_.load(std::memory_order_acquire) ==
           (state_.load(std::memory_order_acquire) & ~kStopped);
  }

  // Work counted before this still runs (the worker waits for its link); pushes
  // after it fail.
  void shutdown() {
    state_.fetch_or(kStopped, std::memory_order_seq_cst);
    wake_worker();  // unconditionally: it may be about to sleep
    if (worker_.joinable()) worker_.join();
  }

  bool on_worker() const {
    return t_stream == this || worker_.get_id() == std::this_thread::get_id();
  }

  std::string name() const {
    return (id ? "stream #" + std::to_string(id) : std::string("the default stream")) +
           " of device " + std::to_string(device);
  }

 private:
  static constexpr std::uint64_t kStopped = std::uint64_t{1} << 63;

  void run() {
    for (;;) {
      const int r = run_one();
      if (r > 0) continue;
      // Stopped and drained: every push counted before the stop has run.
      if (r == 0 && state_.load(std::memory_order_seq_cst) ==
                        (kStopped | completed_.load(std::memory_order_relaxed)))
        return;
      wait_for_work();
    }
  }

  // Takes the consumer token and runs the next piece: 1 ran one, 0 the list is
  // empty (or its next piece is still being linked), -1 another thread holds
  // the token.
  int run_one() {
    if (consumer_.exchange(true, std::memory_order_acquire)) return -1;
    Node* head = head_.load(std::memory_order_relaxed);
    Node* next = head->next.load(std::memory_order_acquire);
    if (!next) {
      consumer_.store(false, std::memory_order_seq_cst);
      return 0;
    }
    Work work = std::move(next->work);
    head_.store(next, std::memory_order_seq_cst);  // `next`, its work moved out, is the new stub
    give_node(head);
    run_piece(work);
    // Only the token's holder writes the count.
    completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    // After the count: once an event is complete, the work before it is done.
    if (work.record) work.record->reach(work.generation);
    consumer_.store(false, std::memory_order_seq_cst);
    if (drainers_.load(std::memory_order_seq_cst) > 0) {
      done_signal_.fetch_add(1, std::memory_order_release);
      done_signal_.notify_all();
    }
    return 1;
  }

  void run_piece(Work& work) {
    if (const std::uint64_t us = g_slow_us.load(std::memory_order_relaxed))
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    if (!work.fn) return;
    const RunningWork running{device, id, work.what, work.queued_by};
    const RunningWork* outer_running = t_running;  // a host running work inside work
    const StreamImpl* outer_stream = t_stream;
    t_running = &running;
    t_stream = this;
    std::string failure;
    try {  // queued work must never take the process down: report it later
      work.fn();
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an exception not derived from std::exception";
    }
    t_running = outer_running;
    t_stream = outer_stream;
    work.fn = nullptr;  // drop its captures before it counts as done
    if (failure.empty()) return;
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.empty()) {
      error_ = "{{ cookiecutter.name }}: " + std::string(work.what) + " on " + name() + " failed";
      if (work.queued_by) error_ += std::string(" (queued by ") + work.queued_by->op + ")";
      error_ += ": " + failure;
    } else {
      ++more_errors_;
    }
  }

  // Work is queued that nobody took yet (its link may still be on the way).
  bool has_work() const {
    return tail_.load(std::memory_order_seq_cst) != head_.load(std::memory_order_seq_cst);
  }

  void wake_worker() {
    work_signal_.fetch_add(1, std::memory_order_seq_cst);
    work_signal_.notify_one();
  }

  // Polls briefly, then sleeps until a push, a synchronizing host handing the
  // list back, or the shutdown wakes it.
  void wait_for_work() {
    auto ready = [&] {
      return (has_work() && !consumer_.load(std::memory_order_seq_cst)) ||
             (state_.load(std::memory_order_seq_cst) & kStopped);
    };
    if (poll_until(ready)) return;
    const std::uint32_t signal = work_signal_.load(std::memory_order_acquire);
    worker_sleeping_.store(true, std::memory_order_seq_cst);
    if (!ready()) work_signal_.wait(signal, std::memory_order_acquire);
    worker_sleeping_.store(false, std::memory_order_relaxed);
  }

  std::thread worker_;
  // The consumer's side: head_ is a stub whose successors are the queued work.
  std::atomic<Node*> head_;
  std::atomic<bool> consumer_{false};  // the token: held while taking and running a piece
  // The producers' side, on a cache line of its own.
  alignas(64) std::atomic<Node*> tail_;
  std::atomic<std::uint64_t> state_{0};  // pushes counted, | kStopped once shutdown began
  // Futex words: bumped to wake the worker / the synchronizing hosts.
  alignas(64) std::atomic<bool> worker_sleeping_{false};
  std::atomic<std::uint32_t> work_signal_{0};
  alignas(64) std::atomic<std::uint64_t> completed_{0};
  std::atomic<int> drainers_{0};
  std::atomic<std::uint32_t> done_signal_{0};
  std::mutex error_mu_;       // taken only when work failed, or to report it
  std::string error_;         // first unreported failure of queued work
  std::uint64_t more_errors_ = 0;  // failures after it
};

// Default streams, for the launch path: read without a lock. They are never
// destroyed (one replaced after fork() is kept forever), so a raw pointer stays
// valid; devices beyond kFastDevices take the registry's lock.
constexpr int kFastDevices = 64;
std::atomic<StreamImpl*> g_defaults[kFastDevices];

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

bool current(const StreamImpl& s) {
  return s.fork_epoch == g_fork_epoch.load(std::memory_order_relaxed);
}

Status no_worker(const char* what) {
  return fail(Status::Error, std::string("{{ cookiecutter.name }}: cannot start the worker thread of ") + what);
}

Status default_stream(int device, std::shared_ptr<StreamImpl>* out) {
  // The launch path: no lock, no allocation. A slot is filled only for a valid
  // device, and the aliasing pointer owns nothing (default streams live forever).
  if (device >= 0 && device < kFastDevices) {
    StreamImpl* s = g_defaults[device].load(std::memory_order_acquire);
    if (s && current(*s)) {
      *out = std::shared_ptr<StreamImpl>(std::shared_ptr<StreamImpl>(), s);
      return Status::Ok;
    }
  }
  if (auto s = check_device(device); s != Status::Ok) return s;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.defaults.size() <= static_cast<std::size_t>(device)) r.defaults.resize(device + 1);
  auto& slot = r.defaults[static_cast<std::size_t>(device)];
  if (!slot || !current(*slot)) {
    auto fresh = std::make_shared<StreamImpl>();
    fresh->device = device;
    if (!fresh->start()) return no_worker("a default stream");
    if (slot) keep_forever(slot);
    slot = std::move(fresh);
    if (device < kFastDevices) g_defaults[device].store(slot.get(), std::memory_order_release);
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
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: " +
                                          std::to_string(reinterpret_cast<std::uintptr_t>(stream)) +
                                          " is not a live stream (destroyed?)");
  if (!current(**out))
    return fail(Status::Error, "{{ cookiecutter.name }}: " + (*out)->name() +
                                   " was created before fork(); its worker does not exist in "
                                   "this child process (create streams after forking)");
  if ((*out)->device != device)
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: " + (*out)->name() +
                                          " used as a stream of device " + std::to_string(device));
  return Status::Ok;
}

Status find_event(runtime::Event event, std::shared_ptr<Event>* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.events.find(event);
  if (it == r.events.end())
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: " +
                                          std::to_string(reinterpret_cast<std::uintptr_t>(event)) +
                                          " is not a live event (destroyed?)");
  *out = it->second;
  return Status::Ok;
}

Status queue(const std::shared_ptr<StreamImpl>& s, Work work) {
  if (!s->push(std::move(work)))
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: " + s->name() +
                                          " was destroyed while work was queued on it");
  return Status::Ok;
}

}  // namespace

Status streams_init(std::uint64_t slow_us) {
  g_slow_us = slow_us;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    pthread_atfork(nullptr, nullptr, [] { g_fork_epoch.fetch_add(1); });
  });
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
  if (!stream) return fail(Status::InvalidValue, "{{ cookiecutter.name }}: stream_create: null output pointer");
  *stream = nullptr;
  if (auto s = check_device(device); s != Status::Ok) return s;
  auto s = std::make_shared<StreamImpl>();
  s->device = device;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    s->id = r.next_id++;
  }
  if (!s->start()) return no_worker(s->name().c_str());
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.streams.emplace(s.get(), s);
  }
  *stream = s.get();
  return Status::Ok;
}

Status stream_destroy(int device, runtime::Stream stream) {
  if (!stream)
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: the default stream cannot be destroyed");
  std::shared_ptr<StreamImpl> s;
  if (auto st = find_stream(device, stream, &s); st != Status::Ok) return st;
  if (s->on_worker())
    return fail(Status::Error, "{{ cookiecutter.name }}: stream_destroy called from work running on " +
                                   s->name());
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.streams.erase(stream) == 0)  // lost a race with another destroy
      return fail(Status::InvalidValue, "{{ cookiecutter.name }}: " + s->name() + " is not live (destroyed?)");
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
    return fail(Status::Error, "{{ cookiecutter.name }}: stream_synchronize called from work running on " +
                                   s->name() + " itself (it would wait for itself)");
  std::string error = s->drain();
  return error.empty() ? Status::Ok : fail(Status::Error, std::move(error));
}

Status stream_query(int device, runtime::Stream stream, bool* idle) {
  if (!idle) return fail(Status::InvalidValue, "{{ cookiecutter.name }}: stream_query: null output pointer");
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
      if (d && current(*d)) streams.push_back(d);
    }
    for (auto& [handle, s] : r.streams)
      if (s->device == device && current(*s)) streams.push_back(s);
    if (static_cast<std::size_t>(device) < r.orphan_errors.size())
      std::swap(error, r.orphan_errors[static_cast<std::size_t>(device)]);
  }
  for (auto& s : streams) {
    if (s->on_worker())
      return fail(Status::Error, "{{ cookiecutter.name }}: device_synchronize called from work running on " +
                                     s->name() + " (it would wait for itself)");
  }
  for (auto& s : streams) {
    std::string e = s->drain();
    if (error.empty()) error = std::move(e);
  }
  return error.empty() ? Status::Ok : fail(Status::Error, std::move(error));
}

Status event_create(int device, runtime::Event* event) {
  if (!event) return fail(Status::InvalidValue, "{{ cookiecutter.name }}: event_create: null output pointer");
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
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: event_destroy of an event that is not live");
  return Status::Ok;
}

Status event_record(int device, runtime::Event event, runtime::Stream stream) {
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  if (ev->device != device)
    return fail(Status::InvalidValue, "{{ cookiecutter.name }}: an event of device " +
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
  if (!done) return fail(Status::InvalidValue, "{{ cookiecutter.name }}: event_query: null output pointer");
  if (auto s = check_device(device); s != Status::Ok) return s;
  std::shared_ptr<Event> ev;
  if (auto st = find_event(event, &ev); st != Status::Ok) return st;
  std::lock_guard<std::mutex> lock(ev->mu);
  *done = ev->reached >= ev->recorded;
  return Status::Ok;
}

Status event_elapsed_ms(runtime::Event start, runtime::Event end, float* ms) {
  if (!ms) return fail(Status::InvalidValue, "{{ cookiecutter.name }}: event_elapsed_ms: null output pointer");
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
      return fail(Status::Error, std::string("{{ cookiecutter.name }}: event_elapsed_ms: the ") + which +
                                     " event was never recorded");
    if (ev->reached < ev->recorded)
      return fail(Status::Error, std::string("{{ cookiecutter.name }}: event_elapsed_ms: the ") + which +
                                     " event has not completed (synchronize it first)");
    stamps[i] = ev->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(stamps[1] - stamps[0]).count();
  return Status::Ok;
}

}  // namespace {{ cookiecutter.name }}::sim
