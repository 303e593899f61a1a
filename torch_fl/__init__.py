"""torch_fl: one runtime API over every flsdk backend.

    import torch, torch_fl
    torch_fl.list_devices()                      # ['cpu', 'acme:0', 'acme:1']
    dev = torch_fl.init_device("acme:0")
    print(torch_fl.fallback_report())

Importing torch_fl is cheap and never fails: torch and the backends are only
imported when a function needs them (the names below resolve lazily), so a
machine without any backend can still import it and ask why.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    "discovery": ("backend_reports", "list_devices", "init_device", "set_default_device",
                  "device_info"),
    "ops": ("get_supported_ops", "check_ops", "OpsReport"),
    "fallback": ("set_fallback_mode", "get_fallback_mode", "fallback_mode", "get_fallback_log",
                 "clear_fallback_log", "set_fallback_deny_list", "get_fallback_deny_list",
                 "set_fallback_warn", "fallback_report"),
    "memory": ("set_memory_config", "get_memory_config", "memory_stats", "memory_summary",
               "empty_cache", "memory_allocated", "memory_reserved", "reset_peak_memory_stats"),
    "precision": ("get_supported_precision", "set_auto_mixed_precision",
                  "get_auto_mixed_precision", "grad_scaler", "compare_precision", "tensor_diff"),
    "compare": ("compare_model", "ModelCompareReport"),
    "compat": ("compat_matrix", "compat_report", "check_compat", "IncompatibleBackendError",
               "CompatWarning"),
    "distributed": ("init_distributed", "set_comm_backend", "comm_backend_for",
                    "register_comm_backend"),
    "quantization": ("calibrate", "mixed_plan", "QuantizationNotSupported"),
    "graph": ("set_graph_optimization", "set_op_fusion", "get_optimized_graph", "optimize",
              "OptimizedGraph"),
    # module named apart from its function: `torch_fl.readiness` must stay callable
    "checklist": ("readiness", "ReadinessReport"),
    "_backends": ("NoBackendError",),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = ["__version__", *sorted(_WHERE)]


# submodules reachable as attributes without importing them first
_SUBMODULES = ("checklist", "compare", "compat", "compile", "discovery", "distributed",
               "fallback", "graph", "memory", "models", "ops", "precision", "quantization",
               "testing")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'torch_fl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


# The version-compatibility matrix (torch <-> torch_fl <-> backend) is checked at
# import: a mismatch warns (CompatWarning), nothing here can raise, and neither
# torch nor any backend's native code is imported for it.
from .compat import warn_if_incompatible as _warn_if_incompatible  # noqa: E402

_warn_if_incompatible()
