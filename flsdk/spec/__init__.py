"""flsdk.spec: load and validate op specs and device descriptors into a typed model.

Public API:
    load_opspecs(paths) -> list[OpSpec]
    load_device(path) -> DeviceDescriptor
    load_backend(root) -> Backend
    check_backend(root) -> list[str]          (warnings; errors raise)
    SpecError, SpecErrors                     (every user-caused problem)
    opspec_dir() -> Path                      (canonical op specs + schema/)
Model: Tolerance, OpSpec, DeviceDescriptor, NativeSelection, FallbackPolicy, Backend.
ATen helpers live in flsdk.spec.aten (variant_ops, exists, ...).
"""

from .check import check_backend
from .errors import SpecError, SpecErrors
from .loader import backend_opspec_files, load_backend, load_device, load_opspecs
from .model import Backend, DeviceDescriptor, FallbackPolicy, NativeSelection, OpSpec, Tolerance
from .paths import opspec_dir, schema_dir

__all__ = [
    "Backend", "DeviceDescriptor", "FallbackPolicy", "NativeSelection", "OpSpec", "SpecError",
    "SpecErrors", "Tolerance", "backend_opspec_files", "check_backend", "load_backend",
    "load_device", "load_opspecs", "opspec_dir", "schema_dir",
]
