"""Dynamo's DeviceInterface for an flsdk backend, built from its device module.

PyTorch 2.13 has no automatic hook that gives a PrivateUse1 device a Dynamo
device interface (`torch._dynamo.device_interface.init_device_reg` knows only
the in-tree devices), so torch_fl makes one per backend from `torch.<name>`,
which every flsdk backend generates with the same functions.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What Inductor asks of a device's properties (name, type, compute units)."""

    name: str
    type: str
    index: int
    multi_processor_count: int


def make_device_interface(name: str, properties: dict[str, Any] | None = None) -> type:
    """A DeviceInterface subclass for device type `name` (its device module must be
    registered as torch.<name>). `properties` are extra vendor facts (Triton path)."""
    import os

    import torch
    from torch._dynamo.device_interface import DeviceInterface

    mod = getattr(torch, name)
    extra = dict(properties or {})
    compute_units = int(extra.pop("multi_processor_count", os.cpu_count() or 1))

    def _idx(device) -> int:
        if device is None:
            return mod.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        return mod.current_device() if device.index is None else device.index

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            mod.set_device(device)

        @staticmethod
        def current_device() -> int:
            return mod.current_device()

        @staticmethod
        def get_device_properties(device=None) -> DeviceProperties:
            return DeviceProperties(name=name, type=name, index=_idx(device),
                                    multi_processor_count=compute_units)

    class Interface(DeviceInterface):
        device = mod.device
        Event = torch.Event
        Stream = torch.Stream

        @staticmethod
        def current_device() -> int:
            return mod.current_device()

        @staticmethod
        def set_device(device) -> None:
            mod.set_device(_idx(device))

        @staticmethod
        def exchange_device(device: int) -> int:
            prev = mod.current_device()
            if device != prev:
                mod.set_device(device)
            return prev

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = mod.current_device()
            if device >= 0 and device != prev:
                mod.set_device(device)
            return prev

        @staticmethod
        def device_count() -> int:
            return mod.device_count()

        @staticmethod
        def is_available() -> bool:
            return mod.is_available()

        @staticmethod
        def stream(stream):
            return mod.stream(stream)

        @staticmethod
        def current_stream():
            return torch.accelerator.current_stream()

        @staticmethod
        def set_stream(stream) -> None:
            torch.accelerator.set_stream(stream)

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            # Host-side kernels run inline in the caller; there is no raw stream handle.
            return 0

        @staticmethod
        def synchronize(device=None) -> None:
            mod.synchronize(device)

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return mod.is_bf16_supported(including_emulation)

        @staticmethod
        def memory_allocated(device=None) -> int:
            return mod.memory_allocated(device)

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    # A duck-typed Worker, as torch's own interfaces have (CudaInterface.Worker does not
    # subclass DeviceInterface.Worker either); mypy wants a subclass, and no class
    # attribute assigned after the class statement.
    Interface.Worker = Worker  # type: ignore[misc, assignment]
    Interface.__name__ = Interface.__qualname__ = f"{name.capitalize()}Interface"
    return Interface
