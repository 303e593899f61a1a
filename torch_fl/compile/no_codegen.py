"""`codegen: none`: torch.compile runs the captured graph on the device's own kernels.

Inductor cannot generate code for a device whose memory the host cannot address
and that has no Triton backend. The default `torch.compile(model)` (backend
"inductor") then falls back to "aot_eager": Dynamo's graph capture and
AOTAutograd (one graph, decomposed, forward and backward), each op run by the
backend's kernels, no fusion. One warning says so.

The divert must happen before Inductor starts (it would fail inside its
lowering), and Inductor asks the device module only later, so the backend's
`load()` calls `install(name)`: it wraps torch's inductor entry object, which
costs nothing at `import torch` (no Inductor import) and only acts on graphs
with a tensor on the device.
"""

from __future__ import annotations

import threading
import warnings

_lock = threading.Lock()
_devices: set[str] = set()
_warned: set[str] = set()
_original_call = None


def install(name: str) -> bool:
    """Make the default torch.compile backend fall back to aot_eager for graphs on
    `name`. Returns False (and changes nothing) on a torch this was not tested with."""
    global _original_call
    import torch

    from .versions import TESTED_TORCH, base_version

    if base_version(torch.__version__) not in TESTED_TORCH:
        return False
    with _lock:
        _devices.add(name)
        if _original_call is None:
            wrapper_cls = torch._TorchCompileInductorWrapper
            _original_call = wrapper_cls.__call__

            def __call__(self, model_, inputs_, **kwargs):
                device = _none_device_of(inputs_)
                if device is None:
                    return _original_call(self, model_, inputs_, **kwargs)
                return aot_eager_fallback(device, model_, inputs_)

            wrapper_cls.__call__ = __call__  # type: ignore[method-assign]  # a deliberate patch of torch.compile
    return True


def _none_device_of(inputs) -> str | None:
    import torch

    for value in inputs:
        if isinstance(value, torch.Tensor) and value.device.type in _devices:
            return value.device.type
    return None


def aot_eager_fallback(name: str, model_, inputs_):
    """Compile with aot_eager, warning once per device."""
    from torch._dynamo.backends.debugging import aot_eager

    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"torch.compile on '{name}': the backend's device.yaml says compile: {{codegen: none}}, "
            f"so Inductor cannot generate kernels for it; running the graph with backend "
            f"'aot_eager' instead (graph capture + AOTAutograd, the device's own kernels, no "
            f"fusion).", stacklevel=2)
    return aot_eager(model_, inputs_)


def register(name: str, config: dict, key: str) -> dict:
    """Inductor reached the device anyway (e.g. compile_fx called directly, or a
    graph whose first tensor input is elsewhere): refuse clearly."""
    from . import CompileNotSupportedError

    def refuse(*args, **kwargs):
        raise CompileNotSupportedError(
            f"Inductor cannot generate code for '{name}' (device.yaml compile: {{codegen: none}}); "
            f"use torch.compile(model) with the inputs on '{name}' (falls back to aot_eager) or "
            f"torch.compile(model, backend='aot_eager')")

    class Refused:
        def __init__(self, *args, **kwargs):
            refuse()

        @classmethod
        def create(cls, *args, **kwargs):
            refuse()

    return {"Scheduling": Refused, "PythonWrapperCodegen": Refused,
            "CppWrapperCodegen": Refused, "WrapperFxCodegen": Refused}
