"""Injected runtime failures surface as Python exceptions, never as crashes,
wrong results or leaked device memory.

The acme runtime fails malloc / memcpy calls on demand (ACME_FAULT_MALLOC,
ACME_FAULT_MEMCPY rates, ACME_FAULT_SEED; or the runtime options of the same
names). Each scenario runs in a fresh interpreter: a crash shows up as a
negative return code, a hang as a timeout.
"""

import os
import subprocess
import sys
import textwrap

import pytest


def run_child(code, env=None, timeout=180):
    full_env = dict(os.environ, ACME_MEMORY_CAPACITY="256MiB", **(env or {}))
    script = WORKLOAD + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def assert_child_ok(proc, marker="CHILD OK"):
    assert proc.returncode == 0 and marker in proc.stdout, (
        f"child failed (rc={proc.returncode})\nstdout:\n{proc.stdout[-3000:]}\n"
        f"stderr:\n{proc.stderr[-3000:]}")


# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


# A mixed workload: allocations, host<->device and peer copies, native ops,
# a CPU-fallback op, queued copies on a created stream. Every step checks its
# result against the CPU when it succeeds; a failure must be a RuntimeError
# (OutOfMemoryError is one) that names acme.
WORKLOAD = """
import gc, json, random, torch
import torch_fl_acme._C as native

def step(rng, streams):
    dev = rng.randrange(2)
    d = f"acme:{dev}"
    n = rng.choice([7, 64, 1000, 40000, 300000])
    host = torch.arange(n, dtype=torch.float32) % 97
    kind = rng.randrange(8)
    if kind == 0:
        t = torch.empty(n, device=d)
        t.fill_(3.0)
        assert torch.equal(t.cpu(), torch.full((n,), 3.0))
    elif kind == 1:
        assert torch.equal(host.to(d).cpu(), host)
    elif kind == 2:
        other = f"acme:{1 - dev}"
        assert torch.equal(host.to(d).to(other).cpu(), host)
    elif kind == 3:
        x = host.to(d)
        assert torch.equal((x * 2 + x).cpu(), host * 3)
        assert (x.sum().item() - host.sum().item()) <= 1e-3 * abs(host.sum().item()) + 1
    elif kind == 4:
        a = (host[: 32 * 32] if n >= 1024 else torch.ones(32 * 32)).reshape(32, 32)
        r = (a.to(d) @ a.to(d)).cpu()
        torch.testing.assert_close(r, a @ a)
    elif kind == 5:
        x = host.to(d)
        torch.testing.assert_close(torch.special.i0e(x).cpu(), torch.special.i0e(host))  # CPU fallback
    elif kind == 6:
        s = streams[dev]
        pinned = host.pin_memory()
        with s:
            x = pinned.to(d, non_blocking=True)
            y = x.t().contiguous() if x.dim() > 1 else x.clone()
        s.synchronize()
        assert torch.equal(y.cpu(), host)
    else:
        x = host.to(d)
        x.resize_(n * 3)            # grows the storage: device-to-device copy
        assert torch.equal(x[:n].cpu(), host)

def run(iterations, seed):
    rng = random.Random(seed)
    streams = [torch.Stream(device=f"acme:{i}") for i in range(2)]
    ok = failed = 0
    messages = []
    for i in range(iterations):
        try:
            if i % 4 == 0:
                torch.acme.empty_cache()   # so allocations reach the runtime's malloc
            step(rng, streams)
            ok += 1
        except RuntimeError as e:   # OutOfMemoryError derives from RuntimeError
            failed += 1
            msg = str(e)
            assert "acme" in msg, msg
            messages.append(type(e).__name__ + ": " + msg.splitlines()[0])
    for s in streams:
        s.synchronize()
    return ok, failed, messages

def assert_clean():
    gc.collect()
    torch.acme.empty_cache()
    stats = json.loads(native.runtime_get_option("stats"))
    for dev in stats["devices"]:
        i = dev["index"]
        assert torch.accelerator.memory_allocated(i) == 0, (i, torch.accelerator.memory_allocated(i))
        assert torch.accelerator.memory_reserved(i) == 0, (i, torch.accelerator.memory_reserved(i))
        assert dev["live_allocations"] == 0 and dev["used"] == 0, dev
        assert dev["free"] == dev["capacity"] == dev["largest_free_block"], dev
        free, total = torch.acme.mem_get_info(i)
        assert free == total == dev["capacity"], (free, total)
    assert stats["mallocs"] == stats["frees"], stats
    return stats
"""


def test_faults_from_environment_surface_as_exceptions():
    proc = run_child("""
    ok, failed, messages = run(300, seed=7)
    native.runtime_set_option("fault_malloc", "0")
    native.runtime_set_option("fault_memcpy", "0")
    stats = assert_clean()
    assert stats["injected_malloc_faults"] > 0 and stats["injected_memcpy_faults"] > 0, stats
    assert failed > 0 and ok > 0, (ok, failed)
    # every injected fault that reached the user says so (the runtime's message)
    kinds = {m.split(":")[0] for m in messages}
    assert kinds <= {"RuntimeError", "OutOfMemoryError"}, kinds
    assert any("injected memcpy fault" in m for m in messages), messages[:5]
    # after faults are off, the same workload runs clean
    ok2, failed2, messages2 = run(120, seed=8)
    assert failed2 == 0, messages2[:3]
    assert_clean()
    print("CHILD OK", ok, failed)
    """, env={"ACME_FAULT_MALLOC": "0.05", "ACME_FAULT_MEMCPY": "0.05", "ACME_FAULT_SEED": "1234"})
    assert_child_ok(proc)


def test_injected_malloc_fault_names_the_injection():
    """An injected malloc failure is reported as torch.OutOfMemoryError, and the
    message must not pretend the device is full: it carries the runtime's reason."""
    proc = run_child("""
    native.runtime_set_option("fault_seed", "3")
    native.runtime_set_option("fault_malloc", "1")
    try:
        torch.empty(1000, device="acme")
    except torch.OutOfMemoryError as e:
        msg = str(e)
    else:
        raise AssertionError("fault_malloc=1 but the allocation succeeded")
    native.runtime_set_option("fault_malloc", "0")
    assert "injected" in msg, msg
    assert torch.empty(1000, device="acme").numel() == 1000
    assert_clean()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_faults_switched_at_runtime_are_replayable():
    """The runtime options inject faults mid-process; the same seed replays the
    same failures, and turning them off leaves consistent stats."""
    proc = run_child("""
    def session():
        native.runtime_set_option("fault_seed", "99")
        native.runtime_set_option("fault_malloc", "0.1")
        native.runtime_set_option("fault_memcpy", "0.1")
        out = run(120, seed=5)
        native.runtime_set_option("fault_malloc", "0")
        native.runtime_set_option("fault_memcpy", "0")
        assert_clean()
        return out
    first = session()
    second = session()
    assert first[1] > 0, first
    assert first == second, (first[:2], second[:2])
    assert native.runtime_get_option("fault_malloc") == "0"
    print("CHILD OK", first[:2])
    """)
    assert_child_ok(proc)


def test_bad_fault_options_are_refused_clearly():
    import torch_fl_acme._C as native

    for key, value in [("fault_malloc", "2"), ("fault_memcpy", "-0.5"), ("fault_seed", "abc"),
                       ("no_such_option", "1")]:
        with pytest.raises(RuntimeError) as info:
            native.runtime_set_option(key, value)
        assert key in str(info.value), str(info.value)
    assert native.runtime_get_option("fault_malloc") == "0"
    assert native.runtime_get_option("fault_memcpy") == "0"


def test_faults_under_threads_and_streams():
    """Faults hit while four threads copy through created streams and between
    devices: every failure is an exception in its thread, every success is
    right, and nothing leaks."""
    proc = run_child("""
    import threading, time
    native.runtime_set_option("fault_seed", "5")
    native.runtime_set_option("fault_malloc", "0.05")
    native.runtime_set_option("fault_memcpy", "0.05")
    errors, wrong, unexpected, done = [], [], [], []

    def worker(seed):
        rng = random.Random(seed)
        dev = seed % 2
        s = torch.Stream(device=f"acme:{dev}")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                if rng.random() < 0.2:
                    torch.acme.empty_cache()
                h = torch.arange(rng.choice([10, 5000, 100000]), dtype=torch.float32)
                d = h.to(f"acme:{dev}")
                with s:
                    p = h.pin_memory().to(f"acme:{dev}", non_blocking=True)
                    q = (p + d).to(f"acme:{1 - dev}")
                s.synchronize()
                if not torch.equal(q.cpu(), h * 2):
                    wrong.append(seed)
                done.append(seed)
            except RuntimeError as e:
                # Whole message: an OOM names the injection only at its end.
                (errors if "acme" in str(e) else unexpected).append(str(e))
            except BaseException as e:  # noqa: BLE001
                unexpected.append(repr(e)[:200])
        s.synchronize()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "hung"
    native.runtime_set_option("fault_malloc", "0")
    native.runtime_set_option("fault_memcpy", "0")
    assert not wrong and not unexpected, (wrong[:3], unexpected[:3])
    assert errors and done, (len(errors), len(done))
    assert all("injected" in e for e in errors), [e for e in errors if "injected" not in e][:3]
    assert_clean()
    print("CHILD OK", len(done), len(errors), "oom:", sum("out of memory" in e for e in errors))
    """)
    assert_child_ok(proc)
