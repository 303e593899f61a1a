"""Which backends and devices exist, and picking one.

    >>> import torch_fl
    >>> torch_fl.list_devices()
    ['cpu', 'acme:0', 'acme:1']
    >>> dev = torch_fl.init_device("acme:1")      # loads acme, makes acme:1 current
"""

from __future__ import annotations

from typing import Any

from . import _backends

__all__ = ["backend_reports", "list_devices", "init_device", "set_default_device",
           "device_info"]


def backend_reports() -> list[dict[str, Any]]:
    """One dict per installed `torch_fl.backends` entry point:
    {name, package, loaded, error, torch_version (built for), device_count, memory_model}.

    Loads each backend (that is how we know it works). Never raises: a broken
    backend is reported with its cause (`flsdk doctor` prints these)."""
    reports = []
    for entry in _backends.entries():
        report: dict[str, Any] = {
            "name": entry.name,
            "package": _backends.package_of(entry),
            "loaded": False,
            "error": None,
            "torch_version": getattr(entry.module, "TORCH_VERSION", None),
            "device_count": 0,
            # device.yaml memory.model: may host code read device memory (host) or not (discrete)
            "memory_model": (getattr(entry.module, "DESCRIPTOR", None) or {}).get("memory_model", "host"),
        }
        ok, err = _backends.try_load(entry)
        report["loaded"], report["error"] = ok, err
        if ok:
            assert entry.module is not None  # try_load loaded it
            try:
                report["device_count"] = int(entry.module.native().device_count())
            except Exception as exc:  # runtime init failure: still a report, not a crash
                report["loaded"] = False
                report["error"] = f"loaded but device_count() failed: {type(exc).__name__}: {exc}"
        reports.append(report)
    return reports


def list_devices() -> list[str]:
    """'cpu' followed by every device of every loadable backend ('acme:0', ...).
    Backends that fail to load are left out (see backend_reports() for why)."""
    devices = ["cpu"]
    for report in backend_reports():
        if report["loaded"]:
            devices += [f"{report['name']}:{i}" for i in range(report["device_count"])]
    return devices


def init_device(device: Any = None):
    """Load the device's backend, make the device current, return its torch.device.
    None picks the first non-CPU device. Raises with the backend's reason."""
    import torch

    if device is None:
        device = _backends.first_device()
        if device is None:
            reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
            raise _backends.NoBackendError(
                "no flsdk device available" + (" (" + "; ".join(reasons) + ")" if reasons
                                              else ": no backend is installed"))
    dev = _backends.resolve_device(device)
    if dev.type != "cpu":
        getattr(torch, dev.type).set_device(dev.index)
    return dev


def set_default_device(device: Any) -> Any:
    """torch.set_default_device for a backend device (loading it first); returns it.
    None resets the default (factory functions create CPU tensors again)."""
    import torch

    if device is None:
        torch.set_default_device(None)
        return None
    dev = init_device(device)
    torch.set_default_device(dev)
    return dev


def device_info(device: Any = None) -> dict[str, Any]:
    """Facts about a device, from its descriptor and its runtime."""
    import torch

    dev = _backends.resolve_device(device)
    if dev.type == "cpu":
        return {"device": "cpu", "type": "cpu", "display_name": "host CPU",
                "torch_version": torch.__version__}
    mod = _backends.backend(dev)
    d = mod.DESCRIPTOR
    free, total = torch.accelerator.get_memory_info(dev.index)
    n = mod.native()
    return {
        "device": str(dev),
        "type": dev.type,
        "index": dev.index,
        "backend_package": mod.PACKAGE,
        "display_name": d.get("display_name", dev.type),
        "device_count": int(n.device_count()),
        "memory_capacity": int(total),
        "memory_free": int(free),
        "memory_capacity_descriptor": d.get("memory_capacity"),
        "memory_alignment": d.get("memory_alignment"),
        "dtypes": list(d.get("dtypes", [])),
        "amp_dtypes": list(d.get("amp_dtypes", [])),
        "quantization": {"schemes": list(d.get("quantization_schemes", [])),
                         "dtypes": list(d.get("quantization_dtypes", []))},
        "comm_backend": d.get("comm_backend"),
        "torch_version_built_for": mod.TORCH_VERSION,
        "torch_version_running": torch.__version__,
        "native_op_count": len(getattr(mod, "NATIVE_OPS", [])),
    }
