"""torch.compile (Inductor) for every flsdk backend, registered on first compile.

A backend says how Inductor should generate code for its device in the
`compile:` section of its device.yaml (carried in the generated
`DESCRIPTOR["compile"]`):

* `codegen: cpp`    the device's memory is host-addressable: Inductor's C++
                    kernels run on it directly (`cpp_codegen.py`);
* `codegen: triton` the vendor ships a Triton backend (`triton_codegen.py`);
* `codegen: none`   no code generation: torch.compile runs the graph through
                    AOTAutograd with the device's own kernels (aot_eager), with
                    one warning (`no_codegen.py`).

Registration is lazy: importing torch_inductor costs seconds, so nothing
happens at `import torch`. The generated device module `torch.<name>` answers
Inductor's lookup of `torch.<name>.Scheduling` (made in
`init_backend_registration()`, the first thing every Inductor compile does)
by calling `inductor_hook`, which registers everything for the device once.
The device's own registration is the only one: the hook then reports the names
as absent, so Inductor does not register them a second time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from .versions import TESTED_TORCH, UnsupportedTorchError, check_torch

__all__ = ["register", "inductor_hook", "compile_config", "cache_key", "is_registered",
           "CompileNotSupportedError", "UnsupportedTorchError", "TESTED_TORCH", "CODEGENS"]

CODEGENS = ("cpp", "triton", "none")
# Inductor looks these names up on torch.<privateuse1 name> (torch 2.13).
HOOK_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")

_lock = threading.RLock()
_registered: dict[str, dict[str, Any]] = {}


class CompileNotSupportedError(Exception):
    """The backend's compile configuration does not support what was asked.

    Not a RuntimeError on purpose: Inductor's hook lookup swallows RuntimeErrors
    (and would then fail later with a bare KeyError naming the device)."""


def compile_config(name: str) -> dict[str, Any]:
    """The backend's `compile:` section (defaults filled in by flsdk's loader).
    A backend generated before the section existed gets codegen none."""
    from .. import _backends

    mod = _backends.backend(name)
    config = dict((getattr(mod, "DESCRIPTOR", {}) or {}).get("compile") or {"codegen": "none"})
    if config.get("codegen") not in CODEGENS:
        raise CompileNotSupportedError(
            f"{name}: device.yaml compile.codegen is {config.get('codegen')!r}; expected one of "
            f"{', '.join(CODEGENS)}")
    return config


def cache_key(name: str) -> str:
    """What Inductor's caches must key on for this backend besides the graph: the
    torch_fl/flsdk version, the backend's package and flsdk version, a digest
    of its descriptor (a change of device.yaml invalidates compiled kernels), and
    a digest of torch_fl.compile's own code (its workarounds shape the kernels; an
    editable install changes them without a version bump, and a warm cache then
    served kernels of the old code)."""
    import hashlib
    import json

    from .. import __version__, _backends

    mod = _backends.backend(name)
    descriptor = json.dumps(getattr(mod, "DESCRIPTOR", {}), sort_keys=True, default=str)
    parts = {
        "torch_fl": __version__,
        "backend": f"{getattr(mod, 'PACKAGE', name)}",
        "backend_version": _dist_version(getattr(mod, "PACKAGE", name)),
        "flsdk": getattr(mod, "FLSDK_VERSION", "?"),
        "descriptor": hashlib.sha256(descriptor.encode()).hexdigest()[:16],
        "compile_code": source_digest(Path(__file__).parent),
    }
    return ";".join(f"{k}={v}" for k, v in parts.items())


def source_digest(package_dir: Path) -> str:
    """A digest of the .py files directly in `package_dir` (names and contents)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(package_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _dist_version(package: str) -> str:
    import importlib.metadata

    for dist in (package.replace("_", "-"), package):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "?"


def is_registered(name: str) -> bool:
    return name in _registered


def register(name: str) -> dict[str, Any]:
    """Register backend `name` with Dynamo and Inductor (idempotent). Returns the
    registered codegen classes by Inductor's hook names. Raises UnsupportedTorchError on an
    untested torch, CompileNotSupportedError on a bad compile section."""
    with _lock:
        if name in _registered:
            return _registered[name]
        check_torch(name)
        config = compile_config(name)
        codegen = config["codegen"]
        if codegen == "cpp":
            from .cpp_codegen import register as register_codegen
        elif codegen == "triton":
            from .triton_codegen import register as register_codegen
        else:
            from .no_codegen import register as register_codegen
        hooks = register_codegen(name, config, cache_key(name))
        if codegen != "none":
            from . import layout

            layout.apply(name, bool(config.get("channels_last", False)))
        _registered[name] = hooks
        return hooks


def inductor_hook(name: str, attr: str) -> Any:
    """Called by the generated `torch.<name>.__getattr__` for Inductor's hook names.

    Registers the device directly (with its cache-key pass, which the stock
    registration from these names would drop), then answers "no such attribute":
    Inductor's `init_backend_registration` then leaves the registration alone."""
    if attr not in HOOK_NAMES:
        raise AttributeError(attr)
    try:
        register(name)
    except RuntimeError as exc:  # e.g. the backend failed to load: keep the reason visible
        raise CompileNotSupportedError(f"torch.compile on '{name}': {exc}") from exc
    raise AttributeError(f"torch.{name}.{attr}: registered with Inductor directly by torch_fl.compile")
