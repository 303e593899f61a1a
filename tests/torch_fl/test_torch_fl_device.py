"""torch_fl on a real flsdk backend (acme in CI): discovery, ops, fallback, memory.

Skipped when no backend is installed; an installed backend that does not load fails
every test with the cause."""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from required_backend import required

import torch_fl
from torch_fl import _backends
from torch_fl.ops import privateuse1_route
from torch_fl.testing.fallback_probe import FALLBACK_PROBE, fallback_probe


def _first_device():
    dev = _backends.first_device()
    if dev is None:
        reasons = [f"{r['name']}: {r['error']}" for r in torch_fl.backend_reports()]
        if reasons:  # installed but not loadable: the tests fail with the cause
            return None, "no flsdk backend loads: " + "; ".join(reasons)
        return None, "no flsdk backend installed"
    return dev, ""


DEVICE, WHY = _first_device()
# Where acme is required (CI), no backend at all fails too (tests/support/required_backend.py).
pytestmark = pytest.mark.skipif(DEVICE is None and WHY == "no flsdk backend installed" and not required(),
                                reason=WHY)


@pytest.fixture(autouse=True)
def _backend_loads():
    if DEVICE is None:
        pytest.fail(WHY)


NAME = DEVICE.split(":")[0] if DEVICE else None

@pytest.fixture
def no_native_op():
    """(call, names in the log) of an op without a native kernel on this backend:
    torch_fl.testing's probe op, defined with a CPU kernel only, so it takes the
    CPU fallback on every backend, whatever kernels the backend gains."""
    return fallback_probe(), (FALLBACK_PROBE,)


@pytest.fixture(autouse=True)
def _restore_fallback_state():
    yield
    if DEVICE:
        torch_fl.set_fallback_mode(True)
        torch_fl.set_fallback_deny_list([])
        torch_fl.set_fallback_warn(False)


# --- discovery ----------------------------------------------------------------

def test_backend_reports_and_list_devices():
    reports = {r["name"]: r for r in torch_fl.backend_reports()}
    assert NAME in reports
    r = reports[NAME]
    assert r["loaded"] and r["error"] is None and r["package"] == f"torch_fl_{NAME}"
    count = torch.accelerator.device_count()
    assert r["device_count"] == count >= 1
    devices = torch_fl.list_devices()
    assert devices[0] == "cpu"
    assert [d for d in devices if d.startswith(NAME + ":")] == [f"{NAME}:{i}" for i in range(count)]
    if NAME == "acme":  # the reference backend has two devices (device.yaml)
        assert devices == ["cpu", "acme:0", "acme:1"]


def test_init_device_and_default_device():
    count = torch.accelerator.device_count()
    last = f"{NAME}:{count - 1}"
    dev = torch_fl.init_device(last)
    assert dev == torch.device(last)
    assert torch.accelerator.current_device_index() == count - 1
    assert torch_fl.init_device(f"{NAME}:0") == torch.device(NAME, 0)
    assert torch.accelerator.current_device_index() == 0
    with pytest.raises(ValueError, match=f"{NAME}:{count} does not exist"):
        torch_fl.init_device(f"{NAME}:{count}")
    with pytest.raises(ValueError, match="not an installed flsdk backend"):
        torch_fl.init_device("nosuchchip:0")
    try:
        torch_fl.set_default_device(last)
        assert torch.ones(2).device == torch.device(last)
    finally:
        torch_fl.set_default_device(None)
        torch_fl.init_device(f"{NAME}:0")
    assert torch.ones(2).device.type == "cpu"


def test_device_info():
    info = torch_fl.device_info(DEVICE)
    mod = _backends.backend(DEVICE)
    assert info["device"] == DEVICE and info["display_name"] == mod.DESCRIPTOR["display_name"]
    assert info["memory_capacity"] > 0 and 0 < info["memory_free"] <= info["memory_capacity"]
    assert "float32" in info["dtypes"] and info["amp_dtypes"] == mod.DESCRIPTOR["amp_dtypes"]
    assert info["torch_version_built_for"] == mod.TORCH_VERSION
    assert info["device_count"] == torch.accelerator.device_count()
    if NAME == "acme":
        assert info["comm_backend"] == "acmeccl"
        assert info["quantization"]["dtypes"] == ["int8"]
        assert info["memory_capacity"] == mod.DESCRIPTOR["memory_capacity"]


# --- ops ----------------------------------------------------------------------

def test_get_supported_ops_reads_the_dispatcher():
    ops = torch_fl.get_supported_ops(DEVICE)
    assert ops == sorted(ops) and not any(o.startswith("c10d::") for o in ops)
    from flsdk.codegen.glue import GLUE_HOOK_KERNELS

    native = _backends.backend(DEVICE).native().native_ops()
    # every kernel the backend says it compiled is registered (but those the glue
    # calls itself: copy_, from _copy_from) ...
    assert set(native) - set(GLUE_HOOK_KERNELS) <= set(ops), set(native) - set(ops)
    # ... plus the generated glue (allocation, copies, views)
    assert {"empty.memory_format", "_copy_from", "as_strided"} <= set(ops)


def test_check_ops_reports_native_and_fallback_ops(no_native_op):
    call, names = no_native_op

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return call(self.lin(x).relu())

    report = torch_fl.check_ops(M(), (torch.randn(3, 4),), DEVICE, backward=False)
    by_op = {u.op: u for u in report.ops}
    fallback_name = next(n for n in names if n in by_op)
    assert by_op[fallback_name].status == "fallback"
    assert fallback_name in report.fallback
    assert by_op["addmm"].status == ("native" if privateuse1_route("addmm") == "native"
                                     else "fallback")
    assert by_op["addmm"].dtypes == ["float32"]
    assert fallback_name in report.table() and report.ok
    with torch_fl.fallback_mode(False):
        off = torch_fl.check_ops(M(), (torch.randn(3, 4),), DEVICE)
    assert fallback_name in off.errors and not off.ok
    bwd = torch_fl.check_ops(M(), (torch.randn(3, 4),), DEVICE, backward=True)
    assert "threshold_backward" in {u.op for u in bwd.ops}


def _with_op_dtypes(monkeypatch):
    """The backend module, with the table of the dtypes its kernels compute. acme
    installed from a tree generated before the table existed gets the one `flsdk gen`
    writes for it now (the generated C++, hence the routes, are the same)."""
    import runpy
    from pathlib import Path

    mod = _backends.backend(DEVICE)
    if not hasattr(mod, "op_dtypes"):
        if NAME != "acme":
            pytest.skip(f"{NAME} was generated before op_dtypes.py existed: run flsdk gen and rebuild")
        table = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "acme_backend" /
                                   "torch_fl_acme" / "_generated" / "op_dtypes.py"))["OP_DTYPES"]
        monkeypatch.setattr(mod, "op_dtypes", lambda: table, raising=False)
    return mod


def test_check_ops_reports_calls_in_a_dtype_the_kernel_does_not_compute_as_fallback(monkeypatch):
    """mm's kernel computes floating dtypes only: the wrapper sends an int64 mm to the CPU
    fallback although int64 is a device dtype. check_ops says so, as the fallback log does."""
    table = _with_op_dtypes(monkeypatch).op_dtypes()
    if "mm" not in table or "int64" in table["mm"]["dtypes"] or "float32" not in table["mm"]["dtypes"]:
        pytest.skip(f"{NAME}'s mm kernel is not float-only")

    def mm(a, b):
        return torch.mm(a, b)

    def ints():
        return torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 2, dtype=torch.int64)

    def floats():
        return torch.ones(2, 2), torch.ones(2, 2)

    # what really happens on the device
    for inputs, falls_back in ((ints(), True), (floats(), False)):
        torch_fl.clear_fallback_log()
        mm(*(t.to(DEVICE) for t in inputs)).cpu()
        assert ("mm" in {e["op"] for e in torch_fl.get_fallback_log()}) == falls_back, inputs[0].dtype

    use = {u.op: u for u in torch_fl.check_ops(mm, ints(), DEVICE).ops}["mm"]
    assert use.status == "fallback", use
    assert "int64 calls run on the CPU fallback" in use.note and "its op spec" in use.note, use.note
    assert {u.op: u for u in torch_fl.check_ops(mm, floats(), DEVICE).ops}["mm"].status == "native"
    # float32 and int64 calls: native, and the note names the dtype that falls back
    use = {u.op: u for u in torch_fl.check_ops(lambda a, b: (mm(*floats()), mm(a, b)), ints(), DEVICE).ops}["mm"]
    assert use.status == "native" and "int64 calls run on the CPU fallback" in use.note, use
    with torch_fl.fallback_mode(False):
        assert {u.op: u for u in torch_fl.check_ops(mm, ints(), DEVICE).ops}["mm"].status == "error"


def test_check_ops_follows_the_device_paths_not_the_cpu_ones():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Dropout(0.5))
    model.train()
    report = torch_fl.check_ops(model, (torch.randn(2, 3, 8, 8),), DEVICE, backward=True)
    ops = {u.op for u in report.ops}
    # convolution reaches a PrivateUse1 backend as convolution_overrideable (CPU: mkldnn)
    assert {"convolution_overrideable", "convolution_backward_overrideable"} <= ops
    # dropout is the fused native_dropout on the device (CPU draws with bernoulli_)
    assert {"native_dropout", "native_dropout_backward"} <= ops
    assert "bernoulli_.float" not in ops
    for u in report.ops:  # the status agrees with the dispatcher
        route = privateuse1_route(u.op)
        if route == "native":
            assert u.status == "native", u


# --- fallback -----------------------------------------------------------------

def test_fallback_off_raises_naming_op_device_dtype(no_native_op):
    call, names = no_native_op
    x = torch.rand(5, device=DEVICE)
    assert torch_fl.get_fallback_mode() is True
    previous = torch_fl.set_fallback_mode(False)
    assert previous is True and torch_fl.get_fallback_mode() is False
    with pytest.raises(NotImplementedError) as err:
        call(x)
    msg = str(err.value)
    assert any(f"{n} " in msg for n in names), msg
    assert DEVICE in msg and "Float" in msg and "disabled" in msg
    torch_fl.set_fallback_mode(True)
    expected = call(x.cpu())
    torch.testing.assert_close(call(x).cpu(), expected)


def test_fallback_log_counts_and_report(no_native_op):
    call, names = no_native_op
    x = torch.rand(64, device=DEVICE)
    torch_fl.clear_fallback_log()
    assert torch_fl.get_fallback_log() == []
    for _ in range(3):
        call(x)
    log = {e["op"]: e for e in torch_fl.get_fallback_log()}
    name = next(n for n in names if n in log)
    assert log[name]["count"] == 3
    assert log[name]["time_s"] > 0
    # 64 floats in and out per call (at least)
    assert log[name]["bytes_copied"] >= 3 * 2 * 64 * 4
    report = torch_fl.fallback_report()
    assert name in report and "total" in report and "CPU fallback: on" in report
    torch_fl.clear_fallback_log()
    assert "no op ran on the CPU fallback" in torch_fl.fallback_report()


def test_fallback_deny_list(no_native_op):
    call, names = no_native_op
    x = torch.rand(5, device=DEVICE)
    torch_fl.set_fallback_deny_list(["aten::cumprod"])  # an aten:: prefix is dropped
    assert torch_fl.get_fallback_deny_list() == ["cumprod"]
    torch_fl.set_fallback_deny_list(list(names))
    assert torch_fl.get_fallback_deny_list() == sorted(names)
    with pytest.raises(NotImplementedError, match="deny list"):
        call(x)
    torch_fl.set_fallback_deny_list([])
    call(x)  # allowed again
    with pytest.raises(TypeError):
        torch_fl.set_fallback_deny_list("cumprod")


def test_fallback_warn_once(no_native_op, capfd):
    """One warning per op until the log is cleared, none when switched off. The
    probe is called through torch.ops, whose binding does not turn C++ warnings
    into Python ones (torch.i0 & co. do: the same warning then is a UserWarning),
    so the warning is read where c10 prints it."""
    call, names = no_native_op
    x = torch.rand(5, device=DEVICE)
    torch_fl.clear_fallback_log()  # re-arms the warn-once set
    torch_fl.set_fallback_warn(True)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(x)
        call(x)
    printed = capfd.readouterr().err + "".join(str(w.message) for w in caught)
    msgs = [line for line in printed.splitlines() if "CPU fallback" in line]
    assert len(msgs) == 1 and names[0] in msgs[0], msgs
    torch_fl.set_fallback_warn(False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch_fl.clear_fallback_log()
        call(x)
    printed = capfd.readouterr().err + "".join(str(w.message) for w in caught)
    assert "CPU fallback" not in printed


# --- memory -------------------------------------------------------------------

def test_memory_config_round_trip_and_errors():
    before = torch_fl.get_memory_config(DEVICE)
    assert set(before) == {"round_size", "max_split_size_mb", "garbage_collection_threshold",
                           "pool_limit_mb"}
    try:
        new = torch_fl.set_memory_config(DEVICE, {"round_size": 1024, "max_split_size_mb": 64,
                                                  "garbage_collection_threshold": 0.5,
                                                  "pool_limit_mb": 512})
        assert new == {"round_size": 1024, "max_split_size_mb": 64.0,
                       "garbage_collection_threshold": 0.5, "pool_limit_mb": 512.0}
        assert torch_fl.get_memory_config(DEVICE) == new
        with pytest.raises(ValueError, match="unknown memory config key 'bogus'"):
            torch_fl.set_memory_config(DEVICE, {"round_size": 2048, "bogus": 1})
        assert torch_fl.get_memory_config(DEVICE) == new  # nothing changed
        # the backend validates too (same rules), should Python be bypassed
        with pytest.raises(RuntimeError, match="unknown allocator config key"):
            _backends.native(DEVICE).set_memory_config("bogus:1")
        torch_fl.set_memory_config({"max_split_size_mb": None, "pool_limit_mb": None})
        cfg = torch_fl.get_memory_config(DEVICE)
        assert cfg["max_split_size_mb"] is None and cfg["pool_limit_mb"] is None
    finally:
        torch_fl.set_memory_config(DEVICE, {k: v for k, v in before.items()})
    assert torch_fl.get_memory_config(DEVICE) == before


def test_memory_stats_follow_allocation_and_empty_cache():
    gc.collect()
    torch_fl.empty_cache(DEVICE)
    base_alloc = torch_fl.memory_allocated(DEVICE)
    base_reserved = torch_fl.memory_reserved(DEVICE)
    s0 = torch_fl.memory_stats(DEVICE)
    nbytes = 4 * 1024 * 1024
    t = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE)
    s1 = torch_fl.memory_stats(DEVICE)
    assert s1["allocated_bytes.all.current"] >= base_alloc + nbytes
    assert s1["reserved_bytes.all.current"] >= base_reserved + nbytes
    assert s1["allocation.all.allocated"] == s0["allocation.all.allocated"] + 1
    assert s1["allocated_bytes.all.peak"] >= s1["allocated_bytes.all.current"]
    summary = torch_fl.memory_summary(DEVICE)
    for word in ("allocated memory", "reserved memory", "active memory", "segments", "OOMs",
                 "alloc retries", "peak"):
        assert word in summary
    del t
    s2 = torch_fl.memory_stats(DEVICE)
    assert s2["allocated_bytes.all.current"] == base_alloc
    assert s2["reserved_bytes.all.current"] >= base_reserved + nbytes  # cached, not returned
    torch_fl.empty_cache(DEVICE)
    assert torch_fl.memory_reserved(DEVICE) == base_reserved
    free, total = torch.accelerator.get_memory_info(torch.device(DEVICE).index)
    assert free <= total


def test_small_blocks_taken_again_at_once_leave_the_stats_as_if_coalesced():
    """The allocator keeps a freed small block aside for the next request of its
    size (an eager tiny op frees and allocates the same sizes: issue 39). It comes
    back at the same address, and what the stats and empty_cache see is the cache
    as if every free had coalesced at once."""
    gc.collect()
    torch_fl.empty_cache(DEVICE)
    base = torch_fl.memory_stats(DEVICE)
    a = torch.empty(256, device=DEVICE)
    address = a.data_ptr()
    del a
    b = torch.empty(256, device=DEVICE)
    assert b.data_ptr() == address
    del b
    # more blocks than are ever kept aside, of several sizes, freed in turns
    many = [torch.empty(n, device=DEVICE) for _ in range(40) for n in (8, 100, 256, 1000, 4000)]
    del many[::2]
    del many
    s = torch_fl.memory_stats(DEVICE)
    for key in ("allocated_bytes.all.current", "active_bytes.all.current",
                "inactive_split.all.current", "inactive_split_bytes.all.current"):
        assert s[key] == base[key], key
    assert s["allocation.all.allocated"] == base["allocation.all.allocated"] + 202
    torch_fl.empty_cache(DEVICE)
    assert torch_fl.memory_reserved(DEVICE) == base["reserved_bytes.all.current"]


def test_memory_functions_reject_cpu():
    with pytest.raises(ValueError, match="not cpu"):
        torch_fl.memory_stats("cpu")


def test_fresh_process_finds_the_device_without_importing_torch_first():
    # torch_fl imports torch itself; torch's autoloader then loads the backend,
    # and torch_fl's own load() must not register it a second time.
    import subprocess
    import sys

    code = "import torch_fl; print(torch_fl.list_devices()); print(torch_fl.backend_reports())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"'{DEVICE}'" in out.stdout.splitlines()[0], out.stdout
    assert "'error': None" in out.stdout
