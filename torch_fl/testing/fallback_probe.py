"""An op that always takes a backend's CPU fallback, for testing the fallback itself.

Tests of the fallback (disabled, deny list, log, warnings) need an op that has no
native kernel. Picking "the first ATen op not native yet" makes them skip once a
backend implements every candidate; this op cannot be native anywhere: it is
defined here, with a CPU kernel only, so on any PrivateUse1 device the dispatcher
hands it to the backend's boxed CPU fallback.

    op = fallback_probe()            # torch.ops.flsdk_probe.scale.Tensor
    op(x)                            # x * 2 + 1, computed on the CPU fallback
    FALLBACK_PROBE                   # "flsdk_probe::scale.Tensor", as the fallback log names it
"""

from __future__ import annotations

import functools

NAMESPACE = "flsdk_probe"
FALLBACK_PROBE = f"{NAMESPACE}::scale.Tensor"   # the overload the fallback log reports
FALLBACK_PROBE_BASE = f"{NAMESPACE}::scale"     # its base name (deny lists accept both)

_libraries: list = []  # keeps the registration alive for the process


@functools.cache
def fallback_probe():
    """torch.ops.flsdk_probe.scale.Tensor: `self * 2 + 1`, with a CPU kernel only."""
    import torch

    lib = torch.library.Library(NAMESPACE, "DEF")
    lib.define("scale.Tensor(Tensor self) -> Tensor")
    lib.impl("scale.Tensor", lambda self: self * 2 + 1, "CPU")
    _libraries.append(lib)
    op = torch.ops.flsdk_probe.scale.Tensor
    # d(2x + 1)/dx = 2; the backward runs ordinary (device) ops, not the fallback.
    torch.library.register_autograd(op, lambda ctx, grad: grad * 2, lib=lib)
    return op
