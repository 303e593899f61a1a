"""Several Python threads use both acme devices at once: allocation, host <->
device and device <-> device copies, compute, created streams. Nothing may
crash or deadlock, every result must be right, and the allocator's books must
agree with the runtime's afterwards.

The default run is ~3 s; `--run-slow` adds a 30 s run.
"""

import gc
import json
import random
import threading
import time

import pytest
import torch

import torch_fl_acme._C as native

# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


def worker(seed, deadline, counts, errors):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    streams = {}
    try:
        while time.monotonic() < deadline:
            dev = rng.randrange(2)
            # the current device is per thread: other threads switch theirs meanwhile
            torch.accelerator.set_device_index(dev)
            n = rng.choice([1, 17, 256, 4096, 65536])
            host = torch.randint(-50, 50, (n,), generator=gen).float()
            kind = rng.randrange(6)
            x = host.to("acme")
            assert x.device == torch.device("acme", dev), x.device
            if kind == 0:
                assert torch.equal((x + x * 3).cpu(), host * 4)
                assert (x * 2).sum().item() == (host * 2).sum().item()  # small ints: exact
            elif kind == 1:
                a = torch.randint(-4, 4, (24, 24), generator=gen).float()
                assert torch.equal((a.to("acme") @ a.to("acme")).cpu(), a @ a)
            elif kind == 2:
                other = torch.device("acme", 1 - dev)
                y = x.to(other)
                assert y.device == other
                assert torch.equal((y + 1).to(f"acme:{dev}").cpu(), host + 1)
            elif kind == 3:
                s = streams.get(dev) or streams.setdefault(dev, torch.Stream(device=f"acme:{dev}"))
                pinned = host.pin_memory()
                with s:
                    z = pinned.to("acme", non_blocking=True)
                    out = torch.empty_like(host).pin_memory()
                    out.copy_(z * 2, non_blocking=True)
                s.synchronize()
                assert torch.equal(out, host * 2)
            elif kind == 4:
                t = torch.empty(n, device="acme")
                t.fill_(7)
                t[: n // 2] = x[: n // 2]
                expected = torch.full((n,), 7.0)
                expected[: n // 2] = host[: n // 2]
                assert torch.equal(t.cpu(), expected)
            else:
                m = x.reshape(-1, 1) if n % 2 else x.reshape(2, -1)
                torch.testing.assert_close(m.t().contiguous().cpu(), m.cpu().t().contiguous())
            counts[seed] = counts.get(seed, 0) + 1
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        errors.append(f"thread {seed}: {type(e).__name__}: {e}")
    finally:
        for s in streams.values():
            s.synchronize()
        torch.accelerator.set_device_index(0)


def hammer(seconds, threads=4):
    deadline = time.monotonic() + seconds
    counts, errors = {}, []
    pool = [threading.Thread(target=worker, args=(seed, deadline, counts, errors), daemon=True)
            for seed in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=seconds + 60)
    assert not any(t.is_alive() for t in pool), "a worker thread hung (deadlock?)"
    assert not errors, "\n".join(errors[:5])
    assert sorted(counts) == list(range(threads)) and all(c > 0 for c in counts.values()), counts
    torch.accelerator.synchronize(0)
    torch.accelerator.synchronize(1)
    gc.collect()
    # the allocator's reserved bytes are exactly what the runtime has handed out
    stats = json.loads(native.runtime_get_option("stats"))
    for dev in stats["devices"]:
        assert dev["used"] == torch.accelerator.memory_reserved(dev["index"]), (
            dev, torch.accelerator.memory_reserved(dev["index"]))
        assert dev["capacity"] - dev["free"] == dev["used"], dev
    return counts


def test_threads_on_both_devices_short():
    counts = hammer(3.0)
    assert sum(counts.values()) > 40, counts


@pytest.mark.slow
def test_threads_on_both_devices_long():
    hammer(30.0, threads=6)


def test_current_device_is_per_thread():
    seen = {}

    def pick(index):
        torch.accelerator.set_device_index(index)
        time.sleep(0.05)  # the other thread sets its own meanwhile
        seen[index] = (torch.accelerator.current_device_index(),
                       torch.ones(1, device="acme").device.index)

    threads = [threading.Thread(target=pick, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {0: (0, 0), 1: (1, 1)}, seen
    assert torch.accelerator.current_device_index() == 0


def test_many_streams_do_not_pile_up_threads():
    """torch.Stream() draws from a pool, as on CUDA: a loop that creates a
    stream per step must not leave a worker thread per step behind."""
    before = json.loads(native.runtime_get_option("stats"))["live_streams"]
    for _ in range(40):
        s = torch.Stream(device="acme")
        with s:
            torch.ones(4, device="acme").add_(1)
        s.synchronize()
    after = json.loads(native.runtime_get_option("stats"))["live_streams"]
    assert after - before <= 32, f"{after - before} runtime streams (threads) for 40 torch.Stream()s"
