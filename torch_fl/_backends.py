"""Finding installed flsdk backends and mapping a device to its backend.

Every backend wheel declares an entry point in the group `torch_fl.backends`
that points at its generated `backend` module (NAME, PACKAGE, DESCRIPTOR,
TORCH_VERSION, NATIVE_OPS, load(), try_load(), is_loaded(), load_error(),
native()). Everything in torch_fl goes through this file to reach a backend,
so the rules live in one place:

* importing an entry point's module must not import the backend's native code
  (the generated module only imports torch inside load()), so listing is cheap;
* only one PrivateUse1 backend can live in a process, so "the active backend" is
  the one that owns the PrivateUse1 slot, or else the first installed one.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

ENTRY_POINT_GROUP = "torch_fl.backends"


class NoBackendError(RuntimeError):
    """No flsdk backend is installed (or none could be loaded)."""


@dataclass
class BackendEntry:
    name: str             # entry point name (the device type, e.g. "acme")
    value: str            # "torch_fl_acme._generated.backend"
    dist: str | None      # distribution that declared it, for messages
    module: ModuleType | None = None
    import_error: str | None = None


_lock = threading.RLock()
_entries: list[BackendEntry] | None = None


def entries(refresh: bool = False) -> list[BackendEntry]:
    """Installed backends, their module imported (not loaded). Never raises."""
    global _entries
    with _lock:
        if _entries is not None and not refresh:
            return _entries
        found = []
        eps: Iterable[importlib.metadata.EntryPoint]
        try:
            eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        except Exception:  # broken metadata of an unrelated dist must not break us
            eps = []
        seen = set()
        for ep in sorted(eps, key=lambda e: e.name):
            if ep.name in seen:  # the same dist found twice on sys.path
                continue
            seen.add(ep.name)
            dist = getattr(getattr(ep, "dist", None), "name", None)
            entry = BackendEntry(ep.name, ep.value, dist)
            try:
                entry.module = ep.load()
            except Exception as exc:
                entry.import_error = f"cannot import {ep.value}: {type(exc).__name__}: {exc}"
            found.append(entry)
        _entries = found
        return found


def package_of(entry: BackendEntry) -> str:
    mod = entry.module
    if mod is not None and getattr(mod, "PACKAGE", None):
        return mod.PACKAGE
    return entry.value.split(".", 1)[0]


def _import_torch() -> None:
    """Import torch before calling a backend's load(): `import torch` runs the
    torch.backends autoloader, which loads the backend itself; a load() that
    imported torch first would re-enter and then register everything twice."""
    import torch  # noqa: F401


def try_load(entry: BackendEntry) -> tuple[bool, str | None]:
    """Load the backend into this process; (loaded, error). Never raises."""
    if entry.module is None:
        return False, entry.import_error
    try:
        _import_torch()
        entry.module.load()
        return True, None
    except Exception as exc:
        err = None
        try:
            err = entry.module.load_error()
        except Exception:
            pass
        return False, err or f"{type(exc).__name__}: {exc}"


def _privateuse1_owner() -> str | None:
    import torch

    owner = torch._C._get_privateuse1_backend_name()
    return None if owner == "privateuseone" else owner


def _by_name(name: str) -> BackendEntry | None:
    for entry in entries():
        if entry.name == name:
            return entry
    return None


def _installed_names() -> list[str]:
    return [e.name for e in entries()]


def backend(device: Any = None) -> ModuleType:
    """The loaded backend module for `device` (a device, "acme", "acme:1", an
    index, or None for the active backend). Loads it if needed; raises
    NoBackendError / ValueError / the backend's BackendLoadError with a reason."""
    name = None
    if device is not None and not isinstance(device, int):
        type_name = device if isinstance(device, str) else getattr(device, "type", None)
        if type_name is None:
            raise TypeError(f"expected a device, device string or index, got {device!r}")
        name = type_name.split(":", 1)[0]
        if name == "cpu":
            raise ValueError("cpu is not an flsdk backend device; pass a device such as "
                             f"'{(_installed_names() or ['<backend>'])[0]}:0'")
    if name is None:
        name = _privateuse1_owner()
        if name is None:
            if not entries():
                raise NoBackendError(
                    "no flsdk backend is installed (no 'torch_fl.backends' entry point); "
                    "install one, e.g. pip install --no-build-isolation examples/acme_backend")
            # The first one that loads; report every failure if none does.
            errors = []
            for candidate in entries():
                ok, err = try_load(candidate)
                if ok:
                    assert candidate.module is not None  # try_load loaded it
                    return candidate.module
                errors.append(f"{candidate.name}: {err}")
            raise NoBackendError("no flsdk backend could be loaded: " + "; ".join(errors))
    entry = _by_name(name)
    if entry is None:
        known = ", ".join(_installed_names()) or "none"
        raise ValueError(f"'{name}' is not an installed flsdk backend (installed: {known})")
    if entry.module is None:
        raise NoBackendError(entry.import_error)
    _import_torch()
    entry.module.load()  # raises BackendLoadError with the backend's own reason
    return entry.module


def native(device: Any = None):
    """The backend's `_C` module (device_count, fallback_log, ...)."""
    return backend(device).native()


def device_index(device: Any, mod: ModuleType | None = None) -> int:
    """Index of `device` on its backend; None/"acme" mean the current device."""
    if isinstance(device, int):
        return device
    if device is None:
        return native(None).current_device()
    import torch

    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.index is not None:
        return dev.index
    return (mod or backend(dev)).native().current_device()


def resolve_device(device: Any = None):
    """A full torch.device ("acme:0") for device; None -> current device of the
    active backend. Validates the index."""
    import torch

    if isinstance(device, torch.device) and device.type == "cpu":
        return device
    if isinstance(device, str) and device.split(":", 1)[0] == "cpu":
        return torch.device(device)
    mod = backend(device)
    idx = device_index(device, mod)
    count = mod.native().device_count()
    if not 0 <= idx < count:
        raise ValueError(f"{mod.NAME}:{idx} does not exist: the {mod.NAME} backend has "
                         f"{count} device(s) ({mod.NAME}:0..{mod.NAME}:{count - 1})")
    return torch.device(mod.NAME, idx)


def first_device() -> str | None:
    """'acme:0' for the first loadable backend with a device, else None. Never raises."""
    for entry in entries():
        ok, _ = try_load(entry)
        if not ok:
            continue
        assert entry.module is not None  # try_load loaded it
        try:
            if entry.module.native().device_count() > 0:
                return f"{entry.module.NAME}:0"
        except Exception:
            continue
    return None
