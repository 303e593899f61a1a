"""Misuse of the acme device gives a clear error, never a wrong result:
invalid device indices, tensors on two devices, unsupported dtypes, and ops
without a native kernel while the CPU fallback is off or denied."""


import pytest
import torch

import torch_fl_acme._C as native
from torch_fl.testing.fallback_probe import FALLBACK_PROBE_BASE, fallback_probe

# Every test leaves acme's allocated bytes where it found them (conftest.py).
pytestmark = pytest.mark.usefixtures("no_device_memory_leak")


@pytest.fixture
def fallback_state():
    """Restores the fallback switches whatever the test does."""
    enabled, deny = native.fallback_enabled(), native.fallback_deny_list()
    yield
    native.set_fallback_enabled(enabled)
    native.set_fallback_deny_list(deny)


def fallback_op():
    """(base name, call) of an op that always takes the CPU fallback: defined by
    torch_fl.testing with a CPU kernel only, so no acme kernel can ever replace it."""
    return FALLBACK_PROBE_BASE, fallback_probe()


def test_invalid_device_index_names_index_and_count():
    count = torch.accelerator.device_count()
    assert count == 2
    attempts = {
        "empty": lambda: torch.empty(2, device="acme:7"),
        "to": lambda: torch.ones(2).to("acme:7"),
        "set_device_index": lambda: torch.accelerator.set_device_index(7),
        "torch.acme.set_device": lambda: torch.acme.set_device(7),
        "memory_allocated": lambda: torch.accelerator.memory_allocated(7),
        "mem_get_info": lambda: torch.acme.mem_get_info(7),
        "manual_seed": lambda: native.manual_seed(7, 1),
        "synchronize": lambda: torch.acme.synchronize(7),
    }
    for what, attempt in attempts.items():
        with pytest.raises((IndexError, RuntimeError, ValueError)) as info:
            attempt()
        msg = str(info.value)
        assert "7" in msg and "2" in msg, f"{what}: {msg}"
    assert torch.accelerator.current_device_index() == 0  # a failed switch changes nothing


def test_tensors_on_two_acme_devices_are_refused_naming_op_and_devices():
    a0 = torch.ones(4, device="acme:0")
    a1 = torch.ones(4, device="acme:1")
    m0, m1 = torch.ones(2, 2, device="acme:0"), torch.ones(2, 2, device="acme:1")
    cases = {
        "add": lambda: a0 + a1,                       # native kernel
        "mm": lambda: m0 @ m1,                        # native kernel
        "cat": lambda: torch.cat([a0, a1]),           # tensor list
        "where": lambda: torch.where(a0 > 0, a0, a1),
        "hypot": lambda: torch.hypot(a0, a1),         # CPU fallback (structured)
        "index_add": lambda: a0.index_add(0, torch.tensor([0], device="acme:0"), a1[:1]),
    }
    for op, case in cases.items():
        with pytest.raises(RuntimeError) as info:
            case()
        msg = str(info.value)
        assert "acme:0" in msg and "acme:1" in msg, f"{op}: {msg}"
        assert op in msg, f"{op}: the message does not name the op: {msg}"


def test_fallback_op_with_tensors_on_two_devices_is_refused():
    """The CPU fallback sees host copies only; it must not quietly mix devices
    (it used to return a result on the first device)."""
    natives = set(native.native_ops())
    m0, m1 = torch.rand(3, 2, device="acme:0"), torch.rand(3, 2, device="acme:1")
    boundaries = torch.tensor([0.2, 0.5], device="acme:1")
    cases = {"_cdist_forward": lambda: torch.cdist(m0, m1),
             "bucketize": lambda: torch.bucketize(m0, boundaries),
             "searchsorted": lambda: torch.searchsorted(boundaries, m0)}
    for op, case in cases.items():
        if op in natives or op + ".Tensor" in natives:
            continue  # now native: covered by the wrapper test above
        with pytest.raises(RuntimeError) as info:
            case()
        msg = str(info.value)
        assert op in msg and "acme:0" in msg and "acme:1" in msg, f"{op}: {msg}"
    # same device still falls back fine
    torch.testing.assert_close(torch.cdist(m0, m0).cpu(), torch.cdist(m0.cpu(), m0.cpu()))
    # per-tensor _foreach_ ops may span devices, as on CUDA (the fallback allows
    # it; a native _foreach_ kernel's wrapper does not, see the report)
    if "_foreach_exp" not in natives:
        a0, a1 = torch.zeros(3, device="acme:0"), torch.zeros(3, device="acme:1")
        out = torch._foreach_exp([a0, a1])
        assert [t.device.index for t in out] == [0, 1]
        assert all(torch.equal(t.cpu(), torch.ones(3)) for t in out)


def test_acme_with_non_scalar_cpu_tensor_is_refused_cpu_scalar_is_fine():
    a = torch.ones(4, device="acme")
    c = torch.ones(4)
    for op, case in {"add": lambda: a + c, "mm": lambda: a.reshape(2, 2) @ c.reshape(2, 2),
                     "mul": lambda: c * a, "cat": lambda: torch.cat([a, c])}.items():
        with pytest.raises(RuntimeError) as info:
            case()
        msg = str(info.value)
        assert "cpu" in msg and "acme" in msg, f"{op}: {msg}"
        assert op in msg, f"{op}: {msg}"
    # a 0-dim CPU tensor is a scalar, as PyTorch allows for CUDA
    r = a + torch.tensor(2.0)
    assert r.device.type == "acme" and torch.equal(r.cpu(), torch.full((4,), 3.0))


def test_cpu_index_tensors_are_accepted_as_on_cuda():
    def index_with_cpu_tensors():
        x = torch.arange(5.0, device="acme")
        assert torch.equal(x[torch.tensor([0, 4])].cpu(), torch.tensor([0.0, 4.0]))
        x[torch.tensor([1, 2])] = 9.0
        assert torch.equal(x.cpu(), torch.tensor([0.0, 9.0, 9.0, 3.0, 4.0]))

    error = None
    try:
        index_with_cpu_tensors()
    except RuntimeError as e:  # keep only the text: the traceback would hold device tensors
        error = str(e).splitlines()[0]
    if error:
        pytest.fail(error)


def test_disabled_fallback_names_op_device_and_dtypes(fallback_state):
    base, fn = fallback_op()
    x = torch.full((3,), 0.5, device="acme:1")
    expected = fn(x.cpu())
    native.set_fallback_enabled(False)
    with pytest.raises(NotImplementedError) as info:
        fn(x)
    msg = str(info.value)
    for needle in (base, "acme:1", "Float", "disabled"):
        assert needle in msg, (needle, msg)
    native.set_fallback_enabled(True)
    torch.testing.assert_close(fn(x).cpu(), expected)


def test_deny_list_by_overload_and_by_base_name(fallback_state):
    base, fn = fallback_op()
    x = torch.full((3,), 0.5, device="acme")
    native.clear_fallback_log()
    fn(x)
    ops = [entry["op"] for entry in native.fallback_log() if entry["op"].split(".")[0] == base]
    assert ops, native.fallback_log()
    for entry in (ops[0], base):      # 'flsdk_probe::scale.Tensor' and 'flsdk_probe::scale'
        native.set_fallback_deny_list([entry])
        with pytest.raises(NotImplementedError) as info:
            fn(x)
        assert "deny list" in str(info.value) and base in str(info.value), str(info.value)
    native.set_fallback_deny_list(["some_other_op"])
    torch.testing.assert_close(fn(x).cpu(), fn(x.cpu()))
    native.set_fallback_deny_list([])
    assert native.fallback_deny_list() == []
