// acme runtime tests: events. Record/query/synchronize, elapsed time, and
// stream_wait_event, on created streams and on the (asynchronous) default one.
#include "harness.h"

namespace {

constexpr int kFileOrder = 4;

TEST(events) {
  rtm::Stream s = nullptr;
  rtm::Event a = nullptr, b = nullptr, never = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::event_create(0, &a));
  CHECK_OK(rtm::event_create(0, &b));
  CHECK_OK(rtm::event_create(0, &never));
  bool done = false;
  CHECK_OK(rtm::event_query(0, never, &done));
  CHECK(done);  // never recorded counts as complete (nothing to wait for)
  CHECK_OK(rtm::event_synchronize(0, never));
  float ms = -1;
  CHECK_ST(rtm::event_elapsed_ms(a, never, &ms), Status::Error);
  CHECK(contains(last(), "never recorded"));

  CHECK_OK(rtm::event_record(0, a, s));
  CHECK_OK(rtm::launch(0, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  CHECK_OK(rtm::event_record(0, b, s));
  CHECK_OK(rtm::event_query(0, b, &done));
  CHECK(!done);
  CHECK_OK(rtm::event_synchronize(0, b));
  CHECK_OK(rtm::event_query(0, b, &done));
  CHECK(done);
  CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 19.0f && ms < 2000.0f);
  float back = 0;
  CHECK_OK(rtm::event_elapsed_ms(b, a, &back));
  CHECK(back < 0 && back == -ms);
  // Back-to-back events on an idle stream: elapsed is tiny but positive-or-zero.
  CHECK_OK(rtm::event_record(0, a, s));
  CHECK_OK(rtm::event_record(0, b, s));
  CHECK_OK(rtm::event_synchronize(0, b));
  CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 0.0f && ms < 100.0f);
  // Record: the event's device must be the stream's; other calls accept any index.
  rtm::Stream s1 = nullptr;
  CHECK_OK(rtm::stream_create(1, &s1));
  CHECK_ST(rtm::event_record(1, a, s1), Status::InvalidValue);
  CHECK(contains(last(), "belongs to device 0"));
  CHECK_ST(rtm::event_record(1, a, nullptr), Status::InvalidValue);
  CHECK_OK(rtm::event_query(1, a, &done));
  // Destroying an event with a marker still queued is safe.
  rtm::Event tmp = nullptr;
  CHECK_OK(rtm::event_create(0, &tmp));
  CHECK_OK(rtm::launch(0, s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }));
  CHECK_OK(rtm::event_record(0, tmp, s));
  CHECK_OK(rtm::event_destroy(0, tmp));
  CHECK_OK(rtm::stream_synchronize(0, s));
  CHECK_ST(rtm::event_query(0, tmp, &done), Status::InvalidValue);
  for (auto e : {a, b, never}) CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(1, s1));
  CHECK_OK(rtm::stream_destroy(0, s));
}

// The default stream queues its event markers like any stream: an event
// recorded behind pending work completes when that work is done.
TEST(events_on_default_stream) {
  rtm::Event a = nullptr, b = nullptr, e1 = nullptr;
  CHECK_OK(rtm::event_create(0, &a));
  CHECK_OK(rtm::event_create(0, &b));
  CHECK_OK(rtm::event_create(1, &e1));
  Gate gate;
  CHECK_OK(rtm::launch(0, nullptr, [gate] { gate.wait(); }));
  CHECK_OK(rtm::event_record(0, a, nullptr));
  bool done = true;
  CHECK_OK(rtm::event_query(0, a, &done));
  CHECK(!done);
  float ms = 0;
  CHECK_ST(rtm::event_elapsed_ms(a, a, &ms), Status::Error);
  CHECK(contains(last(), "not completed"));
  gate.open();
  CHECK_OK(rtm::event_synchronize(0, a));
  CHECK_OK(rtm::event_query(0, a, &done));
  CHECK(done);
  // Elapsed time across default-stream work.
  CHECK_OK(rtm::event_record(0, a, nullptr));
  CHECK_OK(rtm::launch(0, nullptr, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  CHECK_OK(rtm::event_record(0, b, nullptr));
  CHECK_OK(rtm::event_synchronize(0, b));
  CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 19.0f && ms < 2000.0f);
  // Device 1's default stream and a device-1 event.
  Gate gate1;
  CHECK_OK(rtm::launch(1, nullptr, [gate1] { gate1.wait(); }));
  CHECK_OK(rtm::event_record(1, e1, nullptr));
  CHECK_OK(rtm::event_query(1, e1, &done));
  CHECK(!done);
  CHECK_OK(rtm::event_synchronize(0, b));  // device 0 is not held up by device 1
  gate1.open();
  CHECK_OK(rtm::event_synchronize(1, e1));
  CHECK_OK(rtm::event_query(1, e1, &done));
  CHECK(done);
  for (auto e : {a, b}) CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::event_destroy(1, e1));
}

// Events stamp the time the stream reaches them; the slow device delays each
// marker; the latest record counts; elapsed needs both events completed.
TEST(event_elapsed) {
  rtm::Stream s = nullptr;
  rtm::Event a = nullptr, b = nullptr;
  CHECK_OK(rtm::stream_create(0, &s));
  CHECK_OK(rtm::event_create(0, &a));
  CHECK_OK(rtm::event_create(0, &b));
  float ms = 0;
  {
    constexpr int kSlowMs = 30;
    SlowDevice slow(kSlowMs * 1000);
    CHECK_OK(rtm::event_record(0, a, s));
    CHECK_OK(rtm::event_record(0, b, s));  // reached kSlowMs after `a`
    CHECK_OK(rtm::event_synchronize(0, b));
    CHECK_OK(rtm::event_elapsed_ms(a, b, &ms));
    CHECK(ms >= kSlowMs - 1 && ms < 2000.0f);
    // Re-recording `a` replaces its record: now it comes after `b`.
    CHECK_OK(rtm::event_record(0, a, s));
    CHECK_OK(rtm::event_synchronize(0, a));
    CHECK_OK(rtm::event_elapsed_ms(b, a, &ms));
    CHECK(ms >= kSlowMs - 1 && ms < 2000.0f);
  }
  // The start event still pending: the message names it.
  Gate gate;
  CHECK_OK(rtm::launch(0, s, [gate] { gate.wait(); }));
  CHECK_OK(rtm::event_record(0, a, s));
  CHECK_ST(rtm::event_elapsed_ms(a, b, &ms), Status::Error);
  CHECK(contains(last(), "start event has not completed"));
  gate.open();
  CHECK_OK(rtm::event_synchronize(0, a));
  CHECK_ST(rtm::event_elapsed_ms(a, b, nullptr), Status::InvalidValue);
  for (auto e : {a, b}) CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(0, s));
}

TEST(stream_wait_event) {
  rtm::Stream s1 = nullptr, s2 = nullptr;
  rtm::Event e = nullptr;
  CHECK_OK(rtm::stream_create(0, &s1));
  CHECK_OK(rtm::stream_create(0, &s2));
  CHECK_OK(rtm::event_create(0, &e));
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int zero = 0, host = -1;
  CHECK_ACME(acmeMemcpy(d, &zero, sizeof zero, acmeMemcpyHostToDevice, 0), acmeSuccess);

  // A never-recorded event: nothing to wait for, nothing queued.
  CHECK_OK(rtm::stream_wait_event(0, s2, e));
  bool idle = false;
  CHECK_OK(rtm::stream_query(0, s2, &idle));
  CHECK(idle);

  // s1: a producer held at a gate; s2 waits for s1's event, then reads.
  Gate gate;
  CHECK_OK(rtm::launch(0, s1, [d, gate] {
    gate.wait();
    *view<int>(d) = 7;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(0, s2, e));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, s2));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_OK(rtm::stream_query(0, s2, &idle));
  CHECK(!idle);  // s2 is blocked on s1's event
  CHECK(host == -1);
  gate.open();
  CHECK_OK(rtm::stream_synchronize(0, s2));
  CHECK(host == 7);

  // Cross-device: a device-1 stream waits on a device-0 event.
  rtm::Stream t1 = nullptr;
  CHECK_OK(rtm::stream_create(1, &t1));
  std::atomic<int> step{0};
  CHECK_OK(rtm::launch(0, s1, [&step] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    step = 1;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(1, t1, e));
  int seen = -1;
  CHECK_OK(rtm::launch(1, t1, [&] { seen = step.load(); }));
  CHECK_OK(rtm::stream_synchronize(1, t1));
  CHECK(seen == 1);

  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(1, t1));
  CHECK_OK(rtm::stream_destroy(0, s2));
  CHECK_OK(rtm::stream_destroy(0, s1));
  CHECK_OK(rtm::free(0, d));
}

// stream_wait_event on the null stream makes the default stream's worker
// wait; the caller returns at once. Created streams can wait for events
// recorded on the default stream.
TEST(wait_event_on_default_stream) {
  rtm::Stream s1 = nullptr;
  rtm::Event e = nullptr;
  CHECK_OK(rtm::stream_create(0, &s1));
  CHECK_OK(rtm::event_create(0, &e));
  std::atomic<int> step{0};
  Gate gate;
  CHECK_OK(rtm::launch(0, s1, [gate, &step] {
    gate.wait();
    step = 2;
  }));
  CHECK_OK(rtm::event_record(0, e, s1));
  CHECK_OK(rtm::stream_wait_event(0, nullptr, e));  // blocking here would time the gate out
  CHECK(step == 0);
  int seen = -1;
  CHECK_OK(rtm::launch(0, nullptr, [&] { seen = step.load(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  bool idle = true;
  CHECK_OK(rtm::stream_query(0, nullptr, &idle));
  CHECK(!idle);  // the default stream waits for s1's event
  CHECK(seen == -1);
  gate.open();
  CHECK_OK(rtm::stream_synchronize(0, nullptr));
  CHECK(seen == 2);

  // The other way: a created stream waits for an event on the default stream.
  void* d = nullptr;
  CHECK_OK(rtm::malloc(0, sizeof(int), &d));
  int host = -1;
  Gate gate2;
  CHECK_OK(rtm::launch(0, nullptr, [d, gate2] {
    gate2.wait();
    *view<int>(d) = 7;
  }));
  CHECK_OK(rtm::event_record(0, e, nullptr));
  CHECK_OK(rtm::stream_wait_event(0, s1, e));
  CHECK_OK(rtm::memcpy(&host, d, sizeof host, CopyKind::DeviceToHost, 0, s1));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_OK(rtm::stream_query(0, s1, &idle));
  CHECK(!idle);
  gate2.open();
  CHECK_OK(rtm::stream_synchronize(0, s1));
  CHECK(host == 7);

  // Device 1's default stream waits for an event of device 0's default stream.
  Gate gate3;
  std::atomic<int> step0{0};
  CHECK_OK(rtm::launch(0, nullptr, [gate3, &step0] {
    gate3.wait();
    step0 = 1;
  }));
  CHECK_OK(rtm::event_record(0, e, nullptr));
  CHECK_OK(rtm::stream_wait_event(1, nullptr, e));
  int seen1 = -1;
  CHECK_OK(rtm::launch(1, nullptr, [&] { seen1 = step0.load(); }));
  gate3.open();
  CHECK_OK(rtm::stream_synchronize(1, nullptr));
  CHECK(seen1 == 1);

  CHECK_OK(rtm::device_synchronize(0));
  CHECK_OK(rtm::event_destroy(0, e));
  CHECK_OK(rtm::stream_destroy(0, s1));
  CHECK_OK(rtm::free(0, d));
}

}  // namespace
