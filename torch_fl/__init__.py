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
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> submodule that defines it (one name per line; add a name here
# and in the TYPE_CHECKING block below, tests/torch_fl/test_torch_fl_api.py checks both)
_EXPORTS = {
    "discovery": (
        "backend_reports",
        "list_devices",
        "init_device",
        "set_default_device",
        "device_info",
    ),
    "ops": (
        "get_supported_ops",
        "check_ops",
        "OpsReport",
    ),
    "fallback": (
        "set_fallback_mode",
        "get_fallback_mode",
        "fallback_mode",
        "get_fallback_log",
        "clear_fallback_log",
        "set_fallback_deny_list",
        "get_fallback_deny_list",
        "set_fallback_warn",
        "fallback_report",
    ),
    "routing": (
        "set_op_route",
        "get_op_routes",
        "op_route",
        "clear_op_routes",
    ),
    "memory": (
        "set_memory_config",
        "get_memory_config",
        "memory_stats",
        "memory_summary",
        "empty_cache",
        "memory_allocated",
        "memory_reserved",
        "reset_peak_memory_stats",
    ),
    "precision": (
        "get_supported_precision",
        "set_auto_mixed_precision",
        "get_auto_mixed_precision",
        "grad_scaler",
        "compare_precision",
        "tensor_diff",
    ),
    "compare": (
        "compare_model",
        "ModelCompareReport",
    ),
    "compat": (
        "compat_matrix",
        "compat_report",
        "check_compat",
        "IncompatibleBackendError",
        "CompatWarning",
    ),
    "distributed": (
        "init_distributed",
        "set_comm_backend",
        "comm_backend_for",
        "register_comm_backend",
    ),
    "quantization": (
        "calibrate",
        "mixed_plan",
        "QuantizationNotSupported",
    ),
    "graph": (
        "set_graph_optimization",
        "set_op_fusion",
        "get_optimized_graph",
        "optimize",
        "OptimizedGraph",
    ),
    # module named apart from its function: `torch_fl.readiness` must stay callable
    "checklist": (
        "readiness",
        "ReadinessReport",
    ),
    "syncs": (
        "host_syncs",
        "reset_host_syncs",
        "count_host_syncs",
    ),
    "_backends": (
        "NoBackendError",
    ),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = ["__version__", *sorted(_WHERE)]

if TYPE_CHECKING:
    # What the lazy __getattr__ below resolves, spelled out for IDEs and type
    # checkers; never executed, so importing torch_fl stays cheap.
    from ._backends import NoBackendError as NoBackendError
    from .checklist import ReadinessReport as ReadinessReport
    from .checklist import readiness as readiness
    from .compare import ModelCompareReport as ModelCompareReport
    from .compare import compare_model as compare_model
    from .compat import CompatWarning as CompatWarning
    from .compat import IncompatibleBackendError as IncompatibleBackendError
    from .compat import check_compat as check_compat
    from .compat import compat_matrix as compat_matrix
    from .compat import compat_report as compat_report
    from .discovery import backend_reports as backend_reports
    from .discovery import device_info as device_info
    from .discovery import init_device as init_device
    from .discovery import list_devices as list_devices
    from .discovery import set_default_device as set_default_device
    from .distributed import comm_backend_for as comm_backend_for
    from .distributed import init_distributed as init_distributed
    from .distributed import register_comm_backend as register_comm_backend
    from .distributed import set_comm_backend as set_comm_backend
    from .fallback import clear_fallback_log as clear_fallback_log
    from .fallback import fallback_mode as fallback_mode
    from .fallback import fallback_report as fallback_report
    from .fallback import get_fallback_deny_list as get_fallback_deny_list
    from .fallback import get_fallback_log as get_fallback_log
    from .fallback import get_fallback_mode as get_fallback_mode
    from .fallback import set_fallback_deny_list as set_fallback_deny_list
    from .fallback import set_fallback_mode as set_fallback_mode
    from .fallback import set_fallback_warn as set_fallback_warn
    from .graph import OptimizedGraph as OptimizedGraph
    from .graph import get_optimized_graph as get_optimized_graph
    from .graph import optimize as optimize
    from .graph import set_graph_optimization as set_graph_optimization
    from .graph import set_op_fusion as set_op_fusion
    from .memory import empty_cache as empty_cache
    from .memory import get_memory_config as get_memory_config
    from .memory import memory_allocated as memory_allocated
    from .memory import memory_reserved as memory_reserved
    from .memory import memory_stats as memory_stats
    from .memory import memory_summary as memory_summary
    from .memory import reset_peak_memory_stats as reset_peak_memory_stats
    from .memory import set_memory_config as set_memory_config
    from .ops import OpsReport as OpsReport
    from .ops import check_ops as check_ops
    from .ops import get_supported_ops as get_supported_ops
    from .precision import compare_precision as compare_precision
    from .precision import get_auto_mixed_precision as get_auto_mixed_precision
    from .precision import get_supported_precision as get_supported_precision
    from .precision import grad_scaler as grad_scaler
    from .precision import set_auto_mixed_precision as set_auto_mixed_precision
    from .precision import tensor_diff as tensor_diff
    from .quantization import QuantizationNotSupported as QuantizationNotSupported
    from .quantization import calibrate as calibrate
    from .quantization import mixed_plan as mixed_plan
    from .routing import clear_op_routes as clear_op_routes
    from .routing import get_op_routes as get_op_routes
    from .routing import op_route as op_route
    from .routing import set_op_route as set_op_route
    from .syncs import count_host_syncs as count_host_syncs
    from .syncs import host_syncs as host_syncs
    from .syncs import reset_host_syncs as reset_host_syncs


# submodules reachable as attributes without importing them first
_SUBMODULES = ("checklist", "compare", "compat", "compile", "discovery", "distributed",
               "fallback", "graph", "memory", "models", "ops", "precision", "quantization",
               "routing", "syncs", "testing")


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
