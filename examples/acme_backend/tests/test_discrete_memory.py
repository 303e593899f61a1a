"""Protect mode: device memory is unreadable from the host outside kernels and
runtime copies, so a glue path that touches it directly crashes in tests
instead of silently working on a simulator only.

Each scenario runs in a fresh interpreter started with ACME_PROTECT=1.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch


def run_child(code, timeout=120, protect="1"):
    env = dict(os.environ, ACME_PROTECT=protect, ACME_MEMORY_CAPACITY="256MiB")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


RAW_READ = """
import ctypes, torch
t = torch.arange(16, dtype=torch.float32, device="acme")
print("BEFORE READ", flush=True)
value = ctypes.c_float.from_address(t.data_ptr()).value   # host reads device memory
print("READ", value, flush=True)
"""


def test_host_read_of_device_memory_dies_with_sigsegv():
    proc = run_child(RAW_READ)
    assert "BEFORE READ" in proc.stdout, proc.stderr[-2000:]
    assert "READ " not in proc.stdout.replace("BEFORE READ", ""), proc.stdout
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr[-2000:])


def test_same_read_works_without_protect_mode():
    """Control: the crash above is protect mode, not a bad pointer."""
    proc = run_child(RAW_READ, protect="0")
    assert proc.returncode == 0 and "READ 0.0" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


def test_protect_mode_can_be_switched_on_at_run_time():
    proc = run_child("""
    import ctypes, torch
    import torch_fl_acme._C as native
    t = torch.arange(16, dtype=torch.float32, device="acme")
    print("UNPROTECTED", ctypes.c_float.from_address(t.data_ptr() + 4).value, flush=True)
    native.runtime_set_option("protect", "1")
    assert native.runtime_get_option("protect") == "1"
    assert torch.equal(t.cpu(), torch.arange(16.0))
    print("BEFORE READ", flush=True)
    ctypes.c_float.from_address(t.data_ptr()).value
    print("SURVIVED", flush=True)
    """, protect="0")
    assert "UNPROTECTED 1.0" in proc.stdout and "BEFORE READ" in proc.stdout, proc.stderr[-2000:]
    assert "SURVIVED" not in proc.stdout
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr[-2000:])


def test_glue_paths_work_in_protect_mode():
    """Everything the generated glue does on its own (copies of every kind,
    fills, views, resize, scalars, printing, save/load, pinned and stream
    copies, the CPU fallback, both devices) goes through kernels or runtime
    copies: none of it may crash in protect mode."""
    proc = run_child("""
    import io, torch
    import torch_fl_acme._C as native
    assert native.runtime_get_option("protect") == "1"
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d = x.to("acme")
    checks = {
        "d2h": lambda: d.cpu(),
        "non-contiguous d2h": lambda: d.t().cpu(),
        "non-contiguous h2d": lambda: x.t().to("acme").cpu(),
        "dtype change on device": lambda: d.to(torch.int32).cpu().float(),
        "dtype change h2d": lambda: x.double().to("acme", torch.float32).cpu(),
        "d2d strided copy": lambda: torch.empty(6, 4, device="acme").copy_(d.t()).cpu(),
        "peer": lambda: d.to("acme:1").cpu(),
        "peer strided": lambda: d.t().to("acme:1").cpu(),
        "fill": lambda: torch.empty(3, device="acme").fill_(2.5).cpu(),
        "zero": lambda: d.clone().zero_().cpu(),
        "item": lambda: torch.tensor(d[1, 2].item()),
        "resize": lambda: d.clone().resize_(100)[:24].cpu(),
        "print": lambda: torch.tensor(len(repr(d))),
        "native op": lambda: (d * 2 + 1).sum(0).cpu(),
        "fallback op": lambda: torch.special.i0e(d).cpu(),
        "index": lambda: d[1:3, ::2].cpu(),
        "pinned": lambda: x.pin_memory().to("acme", non_blocking=True).cpu(),
    }
    for name, check in checks.items():
        result = check()
        assert isinstance(result, torch.Tensor) and result.device.type == "cpu", name
        print("ok", name, flush=True)
    s = torch.Stream(device="acme")
    with s:
        y = x.pin_memory().to("acme", non_blocking=True) + 1
    s.synchronize()
    assert torch.equal(y.cpu(), x + 1)
    buf = io.BytesIO()
    torch.save({"d": d, "y": y}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["d"].device.type == "acme" and torch.equal(loaded["d"].cpu(), x)
    g = torch.Generator(device="acme").manual_seed(1)
    r = torch.randn(5, device="acme", generator=g)
    assert r.cpu().abs().sum() > 0
    print("CHILD OK", flush=True)
    """)
    assert proc.returncode == 0 and "CHILD OK" in proc.stdout, (
        proc.returncode, proc.stdout[-1500:], proc.stderr[-2500:])
