"""Device activity in torch.profiler (issue 37): acme's runtime records every piece
of work its streams run (runtime_primitives: profiling) and the generated glue hands
it to Kineto. What a user sees, checked on a trace and on key_averages():

* kernels, copies and fills on a lane per device and stream (pid = device index,
  tid = stream id), with CUDA's categories (kernel, gpu_memcpy, gpu_memset);
* every device event linked to the op that queued it ("External id" = the op's
  correlation id) and a flow arrow from a launch event inside that op, every arrow
  paired (an "s" and an "f" half with the same id);
* device time per op in key_averages() that reconciles with the trace's device
  events, and record_function ranges with device time and a span on the device lane;
* the legacy path (use_kineto=False) timing ops with events;
* nothing recorded outside a profile.
"""

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def _trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]  # valid JSON, or this raises


def _profile(fn, tmp_path, **kwargs):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], **kwargs) as prof:
        fn()
    return prof, _trace(prof, tmp_path)


def _device_events(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]


def test_matmul_kernel_is_on_the_device_lane_linked_to_aten_mm(tmp_path):
    a = torch.randn(128, 128, device="acme")
    b = torch.randn(128, 128, device="acme")
    torch.acme.synchronize()
    prof, events = _profile(lambda: (a @ b).sum().item(), tmp_path)
    device = _device_events(events)
    kernels = [e for e in device if e["cat"] == "kernel"]
    assert [e["name"] for e in kernels][:2] == ["k_mm", "k_sum"], kernels
    mm = kernels[0]
    assert mm["pid"] == 0 and mm["tid"] == 0 and mm["dur"] > 0, mm  # device 0, default stream
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    assert ops[mm["args"]["External id"]]["name"] == "aten::mm"
    # the kernel ran while (or after) aten::mm queued it, never before
    assert mm["ts"] >= ops[mm["args"]["External id"]]["ts"]
    # .item() copies the result to the host
    copies = [e for e in device if e["cat"] == "gpu_memcpy"]
    assert any(e["name"] == "Memcpy DtoH" for e in copies), copies
    # lanes are named after the device and the stream
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert processes[0] == "acme:0" and threads[(0, 0)] == "stream 0 (default)", (processes, threads)


def test_every_flow_arrow_is_paired_and_starts_in_the_launching_op(tmp_path):
    x = torch.randn(64, 64, device="acme")
    torch.acme.synchronize()
    prof, events = _profile(lambda: torch.relu(x @ x + 1).cpu(), tmp_path)
    flows = [e for e in events if e.get("cat") == "ac2g"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert starts and set(starts) == set(ends), (sorted(starts), sorted(ends))
    device = {(e["pid"], e["tid"], e["ts"]) for e in _device_events(events)}
    for fid, end in ends.items():
        assert (end["pid"], end["tid"], end["ts"]) in device  # the arrow ends on device work
        start = starts[fid]
        launch = [e for e in events if e.get("cat") == "privateuse1_runtime"
                  and e["ts"] == start["ts"] and e["tid"] == start["tid"]]
        assert launch and launch[0]["name"].startswith("acme::"), start


def test_device_time_per_op_reconciles_with_the_trace(tmp_path):
    a = torch.randn(256, 256, device="acme")
    torch.acme.synchronize()

    def work():
        for _ in range(3):
            a @ a
        torch.acme.synchronize()

    prof, events = _profile(work, tmp_path)
    averages = {e.key: e for e in prof.key_averages()}
    mm = averages["aten::mm"]
    assert mm.count == 3
    assert mm.self_device_time_total > 0 and mm.device_time_total >= mm.self_device_time_total
    # matmul calls mm: its device time includes mm's
    assert averages["aten::matmul"].device_time_total == pytest.approx(mm.device_time_total)
    ids = {e["args"]["External id"] for e in events
           if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"}
    in_trace = sum(e["dur"] for e in _device_events(events) if e["args"].get("External id") in ids)
    assert mm.self_device_time_total == pytest.approx(in_trace, rel=0.02, abs=2.0)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "Self ACME" in table or "Self Device" in table or "ACME" in table.upper(), table


def test_record_function_range_gets_device_time_and_a_span_on_the_device_lane(tmp_path):
    x = torch.randn(128, 128, device="acme")
    torch.acme.synchronize()

    def work():
        with record_function("my_block"):
            y = x @ x
            y = torch.tanh(y)
        torch.acme.synchronize()
        return y

    prof, events = _profile(work, tmp_path)
    spans = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert [s["name"] for s in spans] == ["my_block"], spans
    kernels = [e for e in _device_events(events) if e["name"] in ("k_mm", "k_tanh")]
    span = spans[0]
    assert span["pid"] == 0 and span["tid"] == 0
    for k in kernels:  # the span covers the range's kernels
        assert span["ts"] <= k["ts"] + 0.01 and k["ts"] + k["dur"] <= span["ts"] + span["dur"] + 0.01
    user = next(e for e in prof.key_averages() if e.key == "my_block" and e.device_time_total > 0)
    assert user.device_time_total > 0


def test_kernels_on_a_created_stream_get_their_own_lane(tmp_path):
    x = torch.randn(64, 64, device="acme")
    s = torch.Stream(device="acme")
    torch.acme.synchronize()

    def work():
        with s:
            y = x * 2
        s.synchronize()
        return y

    prof, events = _profile(work, tmp_path)
    mul = [e for e in _device_events(events) if e["name"] == "k_mul_Tensor"]
    assert mul and mul[0]["tid"] == s.stream_id != 0, (mul, s.stream_id)
    assert any(e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0
               and e["tid"] == s.stream_id and e["args"]["name"] == f"stream {s.stream_id}"
               for e in events)


def test_fills_show_as_memsets_and_host_copies_as_memcpys(tmp_path):
    prof, events = _profile(lambda: torch.zeros(1000, device="acme").cpu(), tmp_path)
    device = _device_events(events)
    fills = [e for e in device if e["cat"] == "gpu_memset"]
    assert fills and fills[0]["name"] == "k_fill__Scalar", device
    assert fills[0]["args"]["kind"] == "memset"
    x = torch.ones(1000)
    prof, events = _profile(lambda: x.to("acme"), tmp_path)
    h2d = [e for e in _device_events(events) if e["name"] == "Memcpy HtoD"]
    assert h2d and h2d[0]["args"]["bytes"] == 4000, _device_events(events)


def test_device_events_lie_inside_the_profile(tmp_path):
    x = torch.randn(64, 64, device="acme")
    for _ in range(5):
        x = x @ x / 64  # queued before the profile: never recorded
    prof, events = _profile(lambda: (x + 1).sum().item(), tmp_path)
    device = _device_events(events)
    assert [e["name"] for e in device if e["cat"] == "kernel"][0] == "k_add_Tensor", device
    cpu = [e for e in events if e.get("cat") == "cpu_op"]
    lo = min(e["ts"] for e in cpu)
    hi = max(e["ts"] + e["dur"] for e in cpu)
    for e in device:
        assert lo - 1 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1000, (e, lo, hi)


def test_nothing_is_recorded_with_the_profiler_off_or_cpu_only(tmp_path):
    x = torch.randn(64, 64, device="acme")
    (x @ x).cpu()  # outside any profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).cpu()
    events = _trace(prof, tmp_path)
    assert not _device_events(events)
    assert any(e.get("name") == "aten::mm" for e in events)


def test_legacy_use_device_path_times_each_op_with_events():
    x = torch.randn(256, 256, device="acme")
    torch.acme.synchronize()
    with torch.autograd.profiler.profile(use_device="acme", use_kineto=False) as prof:
        for _ in range(2):
            x @ x
        torch.acme.synchronize()
    mm = next(e for e in prof.key_averages() if e.key == "aten::mm")
    assert mm.count == 2 and mm.device_time_total > 0


def test_a_training_step_trace_has_host_and_device_lanes(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 10)).to("acme")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 3, 8, 8, device="acme")

    def step():
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.acme.synchronize()

    step()
    prof, events = _profile(step, tmp_path)
    kernels = {e["name"] for e in _device_events(events)}
    assert {"k_convolution_overrideable", "k_convolution_backward_overrideable", "k_addmm"} <= kernels
    # backward ops run on autograd's thread: their kernels are linked too
    linked = [e for e in _device_events(events) if "External id" in e["args"]]
    assert len(linked) == len(_device_events(events)), "a device event without its op"
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::convolution_backward"].device_time_total > 0


def test_each_device_has_its_own_lanes_and_peer_copies_show(tmp_path):
    if torch.acme.device_count() < 2:
        pytest.skip("needs two acme devices")
    x0 = torch.randn(64, 64, device="acme:0")
    x1 = torch.randn(64, 64, device="acme:1")
    for i in range(2):
        torch.acme.synchronize(i)
    prof, events = _profile(lambda: ((x0 @ x0).cpu(), (x1 @ x1).cpu(), x1.to("acme:0")), tmp_path)
    work = {(e["pid"], e["name"]) for e in _device_events(events)}
    assert {(0, "k_mm"), (1, "k_mm"), (0, "Memcpy PtoP")} <= work, work
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert processes[0] == "acme:0" and processes[1] == "acme:1"
