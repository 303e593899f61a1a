"""Streams and events on acme order work as on CUDA.

Every acme stream, the default one included, queues its kernels, copies and
event records on a worker thread of its own; the caller returns at once. The
tests make the queued work slow (large pinned copies) so a missing wait shows
up as wrong data rather than passing by luck.
"""


import pytest
import torch

MiB = 1 << 20


# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


def big_host(value, n=4 * MiB):
    return torch.full((n,), float(value)).pin_memory()


def test_copy_on_stream_a_compute_on_stream_b_after_wait_event():
    a = torch.Stream(device="acme")
    b = torch.Stream(device="acme")
    for i in range(5):
        host = big_host(i)
        done = torch.Event(device="acme")
        with a:
            x = host.to("acme", non_blocking=True)
            done.record()            # on a
        b.wait_event(done)
        with b:
            y = x * 2 + 1            # runs after b's queued wait, i.e. after the copy
        b.synchronize()
        assert torch.equal(y.cpu(), torch.full_like(host, 2.0 * i + 1)), i
        del x, y


def test_record_event_wait_stream_and_event_synchronize_order_a_readback():
    s = torch.Stream(device="acme")
    out = torch.empty(4 * MiB).pin_memory()
    x = torch.arange(4 * MiB, dtype=torch.float32, device="acme")  # queued on the default stream
    s.wait_stream(torch.accelerator.current_stream())  # as on CUDA: s must wait for x
    with s:
        out.copy_(x, non_blocking=True)   # device -> pinned host, queued
        ev = s.record_event()
    ev.synchronize()
    assert ev.query()
    assert torch.equal(out[:5], torch.arange(5.0)) and out[-1].item() == 4 * MiB - 1
    # wait_stream: the default stream waits for everything queued on s
    host = big_host(3)
    with s:
        y = host.to("acme", non_blocking=True)
    torch.accelerator.current_stream().wait_stream(s)
    assert torch.equal(y.sum().reshape(1).cpu(), torch.tensor([3.0 * 4 * MiB]))
    del x, y


def test_current_stream_and_set_stream():
    default = torch.accelerator.current_stream()
    assert default.device == torch.device("acme", 0)
    s = torch.Stream(device="acme")
    assert s != default
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream() == s
        x = big_host(5).to("acme", non_blocking=True)
        assert torch.equal((x + 0).cpu(), torch.full((4 * MiB,), 5.0))  # kernel waits for s
    finally:
        torch.accelerator.set_stream(default)
    assert torch.accelerator.current_stream() == default
    with s:
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream() == default
    # streams of device 1 are separate
    s1 = torch.Stream(device="acme:1")
    assert s1.device == torch.device("acme", 1)
    assert torch.accelerator.current_stream(1).device == torch.device("acme", 1)
    del x


def test_event_elapsed_time_and_query():
    s = torch.Stream(device="acme")
    start = torch.Event(device="acme", enable_timing=True)
    end = torch.Event(device="acme", enable_timing=True)
    host = big_host(1, n=16 * MiB)
    with s:
        start.record()
        x = host.to("acme", non_blocking=True)
        end.record()
    end.synchronize()
    assert start.query() and end.query()
    ms = start.elapsed_time(end)
    assert 0.0 < ms < 60_000, ms   # a 64 MiB copy takes some time, not forever
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        torch.Event(device="acme", enable_timing=True).elapsed_time(end)  # never recorded
    del x


def test_events_across_devices_order_a_peer_copy():
    s0 = torch.Stream(device="acme:0")
    s1 = torch.Stream(device="acme:1")
    for i in range(3):
        host = big_host(i + 10)
        ev = torch.Event(device="acme:0")
        with s0:
            x0 = host.to("acme:0", non_blocking=True)
            ev.record(s0)
        s1.wait_event(ev)
        with s1:
            x1 = x0.to("acme:1")          # peer copy after s1's wait
            y1 = x1 - 10
        s1.synchronize()
        assert torch.equal(y1.cpu(), torch.full_like(host, float(i))), i
        del x0, x1, y1


def test_pinned_source_freed_right_after_a_queued_copy():
    """A pinned buffer dropped just after a non_blocking copy must not be
    reused while the copy is queued (it used to be freed at once: garbage or
    SIGSEGV). Pageable sources are copied synchronously for the same reason."""
    s = torch.Stream(device="acme")
    results = []
    with s:
        for i in range(20):
            results.append(torch.full((MiB,), float(i)).pin_memory().to("acme", non_blocking=True))
            torch.full((MiB,), -1.0).pin_memory()       # would reuse the freed block
            results.append(torch.full((MiB,), float(i)).to("acme", non_blocking=True))
    s.synchronize()
    for k, r in enumerate(results):
        assert torch.equal(r.cpu(), torch.full((MiB,), float(k // 2))), k
    del results


def test_synchronize_apis():
    x = torch.ones(MiB, device="acme:1")
    s = torch.Stream(device="acme:1")
    with s:
        y = big_host(2).to("acme:1", non_blocking=True)
    torch.accelerator.synchronize(1)
    assert s.query()
    torch.accelerator.synchronize()
    torch.acme.synchronize("acme:1")
    assert torch.equal(y[:3].cpu(), torch.full((3,), 2.0))
    del x, y


def test_exit_with_queued_pinned_copies_is_clean():
    """Pinned blocks whose frees wait for queued copies are released at
    interpreter exit without a hang or a crash."""
    import os
    import subprocess
    import sys

    code = (
        "import torch\n"
        "s = torch.Stream(device='acme')\n"
        "h = torch.ones(1 << 22).pin_memory()\n"
        "with s:\n"
        "    d = h.to('acme', non_blocking=True)\n"
        "    o = torch.empty(1 << 22).pin_memory()\n"
        "    o.copy_(d, non_blocking=True)\n"
        "print('QUEUED', flush=True)\n"
    )
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and "QUEUED" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
