"""Which memory format Inductor may give the convolutions of a graph on the device.

Inductor's layout optimization rewrites a graph with convolutions to channels-last
(NHWC): weights and activations are copied into that format, and every convolution
gets channels-last inputs. That pays off where convolution kernels are fastest in
NHWC (oneDNN on CPU, cuDNN on recent GPUs), and costs a copy per weight per step
plus strided inputs elsewhere. Its heuristic knows only CPU and GPUs; for a device
it does not know it guesses. acme's convolutions, like most first kernels a
vendor writes, are NCHW: with the guess, a compiled ResNet-18 train step ran 1.7×
slower than eager on acme (conv forward twice as slow, the weight copies in the
fused kernels).

So the device says: device.yaml `compile: {channels_last: true}` lets Inductor
decide as it does for its own devices; the default (false) keeps every graph with
a convolution on the device in the format the model gave it.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_policy: dict[str, bool] = {}   # device type -> may Inductor use channels-last
_installed = False


def apply(name: str, channels_last: bool) -> None:
    """Record device `name`'s choice and hook Inductor's decision (once per process)."""
    global _installed
    with _lock:
        _policy[name] = bool(channels_last)
        if not _installed:
            _hook_decide_layout_opt()
            _installed = True


def allows_channels_last(device_type: str) -> bool | None:
    """The device's choice, or None for a device torch_fl did not register."""
    return _policy.get(device_type)


def _conv_devices(gm) -> set[str]:
    import torch

    devices = set()
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.convolution.default:
            for arg in node.args[:2]:
                value = getattr(arg, "meta", {}).get("val")
                if isinstance(value, torch.Tensor):
                    devices.add(value.device.type)
    return devices


def _hook_decide_layout_opt() -> None:
    from torch._inductor.graph import GraphLowering

    stock = GraphLowering.decide_layout_opt

    def decide_layout_opt(gm, *, is_inference: bool) -> bool:
        if any(_policy.get(device) is False for device in _conv_devices(gm)):
            return False
        return stock(gm, is_inference=is_inference)

    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)  # type: ignore[method-assign]  # a patch
