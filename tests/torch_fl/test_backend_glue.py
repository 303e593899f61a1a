"""torch_fl/backend_glue: the Python glue every backend ships (loader, torch.<name>,
torch's per-device tables), exercised directly with a fake backend name, and as
`flsdk gen` ships it: copied verbatim into a scaffolded backend, whose tiny
generated modules load a pure-Python stand-in for the native module in a process
where torch_fl and flsdk cannot be imported. No C++ is built here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from flsdk.codegen import context
from flsdk.codegen.writer import edited_by_hand
from torch_fl.backend_glue import device_defaults
from torch_fl.backend_glue.device_module import INDUCTOR_HOOKS, DeviceModule
from torch_fl.backend_glue.loader import SELECT_ENV, BackendLoader, BackendLoadError

REPO = Path(__file__).resolve().parents[2]
GLUE = REPO / "torch_fl" / "backend_glue"
ACME_GLUE = REPO / "examples" / "acme_backend" / "torch_fl_acme" / "_generated" / "backend_glue"


class FakeNative:
    """The calls torch.<name> makes on a backend's `_C`, recorded."""

    def __init__(self, count=2):
        self.count = count
        self.current = 0
        self.calls = []
        self.states = {i: bytes([i]) * 4 for i in range(count)}
        self.config = {"max_split_size": "0"}
        self.sync_mode = 0

    def device_count(self):
        return self.count

    def current_device(self):
        return self.current

    def set_device(self, index):
        self.current = index

    def init(self):
        self.calls.append(("init",))

    def synchronize(self, index):
        self.calls.append(("synchronize", index))

    def manual_seed(self, index, seed):
        self.calls.append(("manual_seed", index, seed))

    def seed(self, index):
        self.calls.append(("seed", index))
        return 7

    def initial_seed(self, index):
        return 100 + index

    def get_rng_state(self, index):
        return self.states[index]

    def set_rng_state(self, index, state):
        self.states[index] = state

    def empty_cache(self):
        self.calls.append(("empty_cache",))

    def set_memory_config(self, text):
        self.calls.append(("set_memory_config", text))

    def get_memory_config(self):
        return list(self.config.items())

    def set_sync_debug_mode(self, mode):
        self.sync_mode = mode

    def get_sync_debug_mode(self):
        return self.sync_mode


# ------------------------------------------------------------------ torch.<name>


def test_device_module_picks_the_device_and_calls_native():
    native = FakeNative()
    mod = DeviceModule("fakedev", native, ["bfloat16", "float16"])
    assert mod.is_available() and mod.device_count() == 2
    mod.set_device(1)
    assert mod.current_device() == 1 and mod.index() == 1
    mod.synchronize()
    mod.synchronize(0)
    assert native.calls[-2:] == [("synchronize", 1), ("synchronize", 0)]
    with pytest.raises(ValueError, match="expected a fakedev device, got cpu"):
        mod.synchronize("cpu")
    with mod.device(0) as ctx:
        assert native.current == 0 and isinstance(ctx, mod.device)
    assert native.current == 1
    with mod.device(None):
        assert native.current == 1
    assert mod.device.__name__ == "device"


def test_device_module_seeds_rng_state_and_memory_config():
    native = FakeNative()
    mod = DeviceModule("fakedev", native, [])
    mod.manual_seed(3.0)
    mod.manual_seed_all(5)
    assert native.calls == [("manual_seed", 0, 3), ("manual_seed", 0, 5), ("manual_seed", 1, 5)]
    assert mod.seed() == 7 and mod.initial_seed() == 100
    mod.seed_all()
    assert native.calls[-2:] == [("seed", 0), ("seed", 1)]
    state = mod.get_rng_state(1)
    assert state.dtype == torch.uint8 and state.tolist() == [1] * 4
    mod.set_rng_state(torch.tensor([9, 9], dtype=torch.uint8), 0)
    assert native.states[0] == b"\x09\x09"
    assert [s.tolist() for s in mod.get_rng_state_all()] == [[9, 9], [1] * 4]
    mod.set_rng_state_all([torch.tensor([2], dtype=torch.uint8)] * 2)
    assert native.states == {0: b"\x02", 1: b"\x02"}
    mod.set_memory_config({"max_split_size": 512, "round_size": 64})
    mod.set_memory_config("max_split_size:1024")
    assert native.calls[-2:] == [("set_memory_config", "max_split_size:512,round_size:64"),
                                 ("set_memory_config", "max_split_size:1024")]
    assert mod.get_memory_config() == {"max_split_size": "0"}
    mod.empty_cache()
    assert native.calls[-1] == ("empty_cache",)


def test_device_module_sync_debug_amp_and_init():
    native = FakeNative()
    mod = DeviceModule("fakedev", native, ["float16"])
    mod.set_sync_debug_mode("warn")
    assert mod.get_sync_debug_mode() == 1
    mod.set_sync_debug_mode(2)
    assert native.sync_mode == 2
    with pytest.raises(RuntimeError, match="invalid sync debug mode 'loud'"):
        mod.set_sync_debug_mode("loud")
    assert mod.get_amp_supported_dtype() == [torch.float16] and not mod.is_bf16_supported()
    assert DeviceModule("fakedev", native, ["bfloat16"]).is_bf16_supported()
    assert not mod.is_initialized() and not mod._is_in_bad_fork()
    mod.init()
    assert mod.is_initialized() and native.calls == [("init",)]
    assert mod.stream(None) is not None  # a null context


def test_device_module_fills_a_module_namespace(monkeypatch):
    native = FakeNative()
    mod = DeviceModule("fakedev", native, [])
    namespace = {"__name__": "torch_fl_fakedev._generated.device_module"}
    mod.fill(namespace)
    assert set(namespace) == set(DeviceModule.EXPORTS) | {"__name__", "__getattr__", "_initialized"}
    assert namespace["device"] is mod.device and namespace["synchronize"] == mod.synchronize
    # torch reads `_initialized` from the module (torch.utils.checkpoint does)
    assert namespace["_initialized"] is False
    namespace["_lazy_init"]()
    assert namespace["_initialized"] is True and namespace["is_initialized"]()
    getattr_ = namespace["__getattr__"]
    with pytest.raises(AttributeError, match="module 'torch.fakedev' has no attribute 'nope'"):
        getattr_("nope")
    asked = []
    monkeypatch.setattr("torch_fl.compile.inductor_hook", lambda name, attr: asked.append((name, attr)) or attr)
    assert [getattr_(name) for name in INDUCTOR_HOOKS] == list(INDUCTOR_HOOKS)
    assert asked == [("fakedev", name) for name in INDUCTOR_HOOKS]


# ------------------------------------------------------------------ loading


def test_loader_refuses_another_torch_and_says_so_once():
    loader = BackendLoader("fakedev", "torch_fl_fakedev", "2.1.0+cpu", {})
    with pytest.raises(BackendLoadError, match=r"torch_fl_fakedev was built for torch 2\.1\.0\+cpu but "
                                               r"torch .* is installed\. Install torch==2\.1\.0,"):
        loader.load()
    assert not loader.is_loaded() and "built for torch 2.1.0" in loader.load_error()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert loader.try_load() is False
        assert loader.try_load() is False
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    assert str(caught[0].message).startswith("the 'fakedev' device backend (torch_fl_fakedev) was not "
                                             "loaded: torch_fl_fakedev was built for torch 2.1.0")


def test_loader_stays_out_when_another_backend_is_selected(monkeypatch):
    loader = BackendLoader("fakedev", "torch_fl_fakedev", "2.1.0", {})
    monkeypatch.setenv(SELECT_ENV, "other")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader.try_load() is False
    assert loader.load_error() is None  # it did not try


def test_loader_refuses_a_taken_privateuse1_slot(monkeypatch):
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "other")
    loader = BackendLoader("fakedev", "torch_fl_fakedev", torch.__version__, {})
    with pytest.raises(BackendLoadError) as info:
        loader.load()
    message = str(info.value)
    assert "already taken by the 'other' backend" in message and "'fakedev' (torch_fl_fakedev)" in message
    assert f"{SELECT_ENV}=fakedev" in message and f"{SELECT_ENV}=other" in message


@pytest.mark.parametrize("source_folder", [False, True])
def test_loader_explains_a_missing_native_module(tmp_path, monkeypatch, source_folder):
    package = f"torch_fl_nonative{int(source_folder)}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    if source_folder:
        (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    loader = BackendLoader("nonative", package, torch.__version__, {})
    with pytest.raises(BackendLoadError) as info:
        loader.load()
    sys.modules.pop(package, None)
    here = str(tmp_path / package)
    if source_folder:
        assert str(info.value).startswith(f"{package} was imported from its source folder {here}")
        assert f"the current directory ({tmp_path}) shadows the installed package" in str(info.value)
    else:
        assert str(info.value).startswith(f"{package}._C (the compiled extension) is missing from {here}")


# ------------------------------------------------------------------ torch's per-device tables


def test_device_defaults_give_amp_dtypes_cudas_accumulation(monkeypatch):
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions as Options

    # restored after the test: the patch below wraps whatever is installed now
    monkeypatch.setattr(Options, "_resolve_auto_acc_dtype", Options.__dict__["_resolve_auto_acc_dtype"])
    before = Options._resolve_auto_acc_dtype
    # "meta" stands in for a backend name: a device type torch.device accepts
    device_defaults.install_device_defaults(torch, "meta", ["bfloat16"])
    resolve = Options._resolve_auto_acc_dtype
    assert resolve.__wrapped__ is before
    assert resolve(torch.bfloat16, torch.device("meta")) == torch.float32
    meta, cpu = torch.device("meta"), torch.device("cpu")
    assert resolve(torch.float16, meta) == before(torch.float16, meta)
    assert resolve(torch.bfloat16, cpu) == before(torch.bfloat16, cpu)
    assert resolve(torch.bfloat16, None) == before(torch.bfloat16, None)


def test_device_defaults_do_nothing_on_a_torch_without_the_table(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.nn.modules.linear_cross_entropy_options")
    device_defaults.install_device_defaults(torch, "meta", ["bfloat16"])


# ------------------------------------------------------------------ as flsdk gen ships it


def test_the_copied_files_are_the_folder():
    on_disk = {p.name for p in GLUE.iterdir() if p.suffix == ".py"}
    assert on_disk == set(context.BACKEND_GLUE)
    assert context.BACKEND_GLUE_DIR == GLUE.relative_to(REPO).as_posix()


@pytest.mark.parametrize("name", context.BACKEND_GLUE)
def test_acme_ships_a_verbatim_copy(name):
    text = (ACME_GLUE / name).read_text()
    header, body = text.split("\n", 2)[0], text.split("\n", 2)[2]
    assert f"torch_fl/backend_glue/{name}, copied verbatim" in header
    assert not edited_by_hand(text)
    assert body == (GLUE / name).read_text()


FAKE_NATIVE = '''
"""A pure-Python stand-in for the compiled extension: what load() and torch.zeta call."""
FAIL = None
_current = 0


def init():
    if FAIL:
        raise RuntimeError(FAIL)


def device_count():
    return 2


def current_device():
    return _current


def set_device(index):
    global _current
    _current = index
'''

STANDALONE = r"""
import importlib.abc, sys


class Unimportable(importlib.abc.MetaPathFinder):
    # a backend wheel installed alone: no torch_fl, no flsdk
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch_fl", "flsdk"):
            raise ModuleNotFoundError(f"No module named {name!r} (made unimportable)", name=name)
        return None


sys.meta_path.insert(0, Unimportable())

import torch
import torch_fl_zeta
import torch_fl_zeta._C as native
from torch_fl_zeta._generated import backend

assert backend.NAME == "zeta" and backend.PACKAGE == "torch_fl_zeta" and not backend.is_loaded()
assert backend.TORCH_VERSION == torch.__version__ and backend.SELECT_ENV == "TORCH_FL_BACKEND"
assert backend.DESCRIPTOR["amp_dtypes"] == ["bfloat16", "float16"]
assert isinstance(backend.NATIVE_OPS, list) and isinstance(backend.DEVICE_ONLY_OPS, dict)
# read at load time (as acme's test_compile does): the aot_eager fallback needs
# torch_fl, which is missing here, so load() goes on without it
backend.DESCRIPTOR["compile"] = {"codegen": "none"}

native.FAIL = "device held by another process"
try:
    torch_fl_zeta.load()
except backend.BackendLoadError as exc:
    assert str(exc) == ("torch_fl_zeta failed to load: RuntimeError: device held by another "
                        "process"), exc
else:
    raise SystemExit("load() ignored the native module's failure")
assert torch_fl_zeta.load_error() == "RuntimeError: device held by another process"

native.FAIL = None
torch_fl_zeta.load()   # a retry after a failed init() loads
torch_fl_zeta.load()   # and loading again does nothing
assert backend.is_loaded() and backend.load_error() is None and backend.native() is native
assert torch._C._get_privateuse1_backend_name() == "zeta"
assert torch.get_device_module("zeta") is torch.zeta
assert torch.zeta.__name__ == "torch_fl_zeta._generated.device_module"
assert hasattr(torch.Tensor, "zeta") and hasattr(torch.nn.Module, "zeta")

assert torch.zeta.is_available() and torch.zeta.device_count() == 2
torch.zeta.set_device("zeta:1")
assert torch.zeta.current_device() == 1
with torch.zeta.device(torch.device("zeta", 0)):
    assert torch.zeta.current_device() == 0
assert torch.zeta.current_device() == 1
assert torch.zeta.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
torch.zeta._lazy_init()   # torch reads `_initialized` as a module attribute
assert torch.zeta._initialized is True and torch.zeta.is_initialized()
try:
    torch.zeta.Scheduling
except ImportError as exc:
    assert "torch.compile on 'zeta' needs torch_fl" in str(exc), exc
else:
    raise SystemExit("torch.zeta.Scheduling without torch_fl")

from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions
assert LinearCrossEntropyOptions._resolve_auto_acc_dtype(torch.bfloat16, torch.device("zeta")) \
    == torch.float32
assert not [m for m in sys.modules if m.partition(".")[0] in ("torch_fl", "flsdk")]
print("ok")
"""


def test_a_generated_backend_loads_with_torch_alone(tmp_path):
    from flsdk.codegen.generate import generate
    from flsdk.scaffold import render_backend

    root = tmp_path / "zeta"
    render_backend("zeta", root)
    generate(root)
    (root / "torch_fl_zeta" / "_C.py").write_text(FAKE_NATIVE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "PYTHON"))}
    env.update(PYTHONPATH=str(root), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(STANDALONE)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
