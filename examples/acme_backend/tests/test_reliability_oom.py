"""Out-of-memory on acme is a real, recoverable Python error.

acme devices have fixed-capacity arenas, so running out of device memory is
real. The capacity is read when the backend starts, so each scenario runs in a
fresh interpreter with ACME_MEMORY_CAPACITY=64MiB; the scenario asserts inside
the child and prints a marker the parent checks, so a crash (negative return
code) or a hang (timeout) fails the test too.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

CAPACITY = 64 << 20


def run_child(code, env=None, timeout=120):
    full_env = dict(os.environ, ACME_MEMORY_CAPACITY="64MiB", **(env or {}))
    script = CHILD_PRELUDE + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def assert_child_ok(proc, marker="CHILD OK"):
    assert proc.returncode == 0 and marker in proc.stdout, (
        f"child failed (rc={proc.returncode})\nstdout:\n{proc.stdout[-3000:]}\n"
        f"stderr:\n{proc.stderr[-3000:]}")


# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


# Shared by the child scripts: baseline checks after a scenario.
CHILD_PRELUDE = """
import gc, json, torch
import torch_fl_acme._C as native
CAP = 64 << 20
MiB = 1 << 20

def assert_baseline():
    gc.collect()
    torch.acme.empty_cache()
    for d in range(torch.accelerator.device_count()):
        assert torch.accelerator.memory_allocated(d) == 0, torch.accelerator.memory_allocated(d)
        assert torch.accelerator.memory_reserved(d) == 0, torch.accelerator.memory_reserved(d)
        assert torch.acme.mem_get_info(d) == (CAP, CAP), torch.acme.mem_get_info(d)
    stats = json.loads(native.runtime_get_option("stats"))
    for dev in stats["devices"]:
        assert dev["live_allocations"] == 0 and dev["used"] == 0, dev
"""


def test_oom_message_names_sizes_and_memory_is_usable_again():
    proc = run_child("""
    assert torch.acme.mem_get_info(0) == (CAP, CAP), torch.acme.mem_get_info(0)
    keep = torch.empty(40 * MiB, dtype=torch.uint8, device="acme")
    try:
        torch.empty(40 * MiB, dtype=torch.uint8, device="acme")
    except torch.OutOfMemoryError as e:
        msg = str(e)
    else:
        raise AssertionError("a 40 MiB allocation next to 40 MiB on a 64 MiB device succeeded")
    # requested, capacity, free and reserved bytes, and where the capacity comes from
    for needle in ("acme:0", str(40 * MiB), "capacity " + str(CAP), "free", "reserved",
                   "ACME_MEMORY_CAPACITY"):
        assert needle in msg, (needle, msg)
    assert isinstance(torch.OutOfMemoryError("x"), RuntimeError)
    assert torch.accelerator.memory_stats(0)["num_ooms"] >= 1
    del keep
    torch.acme.empty_cache()
    assert torch.acme.mem_get_info(0) == (CAP, CAP)
    # the same process can use (almost) the whole device again
    big = torch.ones(60 * MiB // 4, device="acme")
    assert big.sum().item() == 60 * MiB // 4
    del big
    assert_baseline()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_oom_on_second_device_names_it_and_spares_the_first():
    proc = run_child("""
    a = torch.empty(50 * MiB, dtype=torch.uint8, device="acme:0")
    b = torch.empty(50 * MiB, dtype=torch.uint8, device="acme:1")
    try:
        torch.empty(20 * MiB, dtype=torch.uint8, device="acme:1")
    except torch.OutOfMemoryError as e:
        assert "acme:1" in str(e) and "acme:0" not in str(e), str(e)
    else:
        raise AssertionError("OOM expected on acme:1")
    del a, b
    assert_baseline()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_cached_blocks_are_released_before_oom():
    """Memory held only by the cache must not cause an OOM: the allocator frees
    its cached segments and retries."""
    proc = run_child("""
    # 2 MiB requests get 2 MiB segments each (no split remainder)
    small = [torch.empty(2 * MiB, dtype=torch.uint8, device="acme") for _ in range(28)]
    del small
    assert torch.accelerator.memory_allocated(0) == 0
    assert torch.accelerator.memory_reserved(0) >= 50 * MiB  # cached, not freed
    retries = torch.accelerator.memory_stats(0)["num_alloc_retries"]
    big = torch.empty(56 * MiB, dtype=torch.uint8, device="acme")
    assert torch.accelerator.memory_stats(0)["num_alloc_retries"] == retries + 1
    del big
    assert_baseline()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_next_model_fits_between_the_last_models_cached_blocks():
    """Found by running torchvision's family one model after another in one process:
    vgg11_bn (1.5 GiB of 2) hit OOM after swin_v2_b with 1 GiB free on the device,
    because swin's cached segments had left the free memory in holes between the
    new model's tensors. Like a GPU behind its MMU, the device serves a block as
    large as its free memory whatever the holes: in miniature, one model's cache,
    then the next model's parameters landing between the cached blocks, then its
    largest buffer."""
    proc = run_child("""
    first = [torch.empty(8 * MiB, dtype=torch.uint8, device="acme") for _ in range(6)]
    del first  # 48 MiB cached in 8 MiB segments
    # The next model's 10 MiB parameters do not fit the cached segments: the first
    # gets new memory next to them, the second makes the allocator release its
    # cache and retry, and lands where the cache was, leaving 38 MiB behind it.
    params = [torch.empty(10 * MiB, dtype=torch.uint8, device="acme") for _ in range(2)]
    assert torch.accelerator.memory_allocated(0) == 20 * MiB
    # 44 MiB are free, in holes of 38 and 6 MiB: the next 40 MiB still fit.
    big = torch.empty(40 * MiB, dtype=torch.uint8, device="acme")
    big.fill_(1)
    assert int(big[-1]) == 1
    del big, params
    assert_baseline()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_a_limited_address_space_falls_back_to_capacity_sized_arenas():
    """Under `ulimit -v` the 4x address reservation can fail; acme then reserves
    only its capacity (and keeps working) instead of refusing to start. Each device
    maps its memory twice (device addresses, and the device's view of the bytes)."""
    # torch's own mappings plus 2 devices x 2 mappings x 1 GiB fit; x 4 GiB do not
    limit = int(5.5 * (1 << 30))
    script = textwrap.dedent(f"""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    import json, torch
    import torch_fl_acme._C as native
    x = torch.ones(1 << 20, device="acme:1")
    assert float(x.sum()) == float(1 << 20)
    devices = json.loads(native.runtime_get_option("stats"))["devices"]
    assert [d["capacity"] for d in devices] == [1 << 30] * 2, devices
    assert all(d["address_space"] in (1 << 30, 4 << 30) for d in devices), devices
    assert devices[1]["address_space"] == 1 << 30, devices  # the 4x reservation did not fit
    print("CHILD OK")
    """)
    env = dict(os.environ, ACME_MEMORY_CAPACITY="1GiB", ACME_DEVICE_COUNT="2")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert_child_ok(proc)


def test_oom_inside_ops_and_copies_is_recoverable():
    """OOM raised from inside an op (its result), a host->device copy and the
    CPU fallback's copy back; nothing leaks and the device keeps working."""
    proc = run_child("""
    import torch_fl_acme._C as native
    native_ops = set(native.native_ops())
    x = torch.ones(3000, 3000, device="acme")            # ~34 MiB
    failures = []
    for name, fn in [
        ("mm", lambda: x @ x),                                   # result does not fit
        ("add", lambda: x + 1),
        ("h2d", lambda: torch.ones(3000, 3000).to("acme")),
        ("fallback", lambda: torch.special.i0e(x)),
    ]:
        try:
            fn()
        except torch.OutOfMemoryError as e:
            failures.append(name)
            assert "acme" in str(e)
        else:
            raise AssertionError(name + " did not run out of memory")
    assert failures == ["mm", "add", "h2d", "fallback"], failures
    y = x[:10, :10] * 2                                          # small work still runs
    assert torch.equal(y.cpu(), torch.full((10, 10), 2.0))
    del x, y
    assert_baseline()
    big = torch.empty(62 * MiB, dtype=torch.uint8, device="acme")
    del big
    assert_baseline()
    print("CHILD OK")
    """)
    assert_child_ok(proc)


def test_memory_stats_return_to_baseline_in_process():
    """In this (shared) process: allocate on both devices, check the stats move,
    free, and check they come back."""
    count = torch.accelerator.device_count()
    base = [torch.accelerator.memory_allocated(i) for i in range(count)]
    tensors = [torch.ones(1 << 20, device=f"acme:{i}") for i in range(count)]
    for i in range(count):
        assert torch.accelerator.memory_allocated(i) >= base[i] + (4 << 20)
        stats = torch.accelerator.memory_stats(i)
        assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated(i)
        assert torch.accelerator.max_memory_allocated(i) >= torch.accelerator.memory_allocated(i)
        assert torch.accelerator.memory_reserved(i) >= torch.accelerator.memory_allocated(i)
    del tensors
    assert [torch.accelerator.memory_allocated(i) for i in range(count)] == base
