"""Per-device choices torch makes in Python tables that name only CUDA and the CPU.

torch 2.13's `F.linear_cross_entropy` (chunked: `options=LinearCrossEntropyOptions()`)
resolves its accumulation dtype per device type
(`LinearCrossEntropyOptions._resolve_auto_acc_dtype`): float32 for float16 and
bfloat16 inputs on the CPU and on CUDA (sm 7.0+/8.0+), the input dtype on every
other device. On a flsdk device the chunked loss of a bfloat16 model therefore
accumulated in bfloat16: OpInfo's `nn.functional.linear_cross_entropy.chunked_none`
sample 56 gave 0.0 where the CPU gives 0.00153 (float64: 0.00153).

A flsdk device that lists a dtype in its descriptor's `amp_dtypes` computes
that dtype's matmuls in mixed precision (float32 accumulation), as CUDA does,
so it gets CUDA's answer: float32. The chunking policy stays torch's default
for unlisted devices (CUDA's: "compact", "aspect_ratio:2").

`install(name, descriptor)` runs when the backend loads (the generated
`load()`); it only touches modules `import torch` has already imported, so it
costs nothing measurable. On a torch without this table it does nothing;
`installed()` says whether the hook is in place (a test checks it on the torch
we support, so an upgrade that moves the table is noticed).
"""

from __future__ import annotations

import sys
import threading

__all__ = ["install", "installed", "accumulation_dtypes"]

_OPTIONS_MODULE = "torch.nn.modules.linear_cross_entropy_options"
_lock = threading.Lock()
_amp: dict[str, frozenset] = {}   # device type -> dtypes computed with float32 accumulation
_hooked = False


def accumulation_dtypes(device_type: str) -> frozenset:
    """The dtypes a registered flsdk device accumulates in float32."""
    return _amp.get(device_type, frozenset())


def installed() -> bool:
    return _hooked


def _hook_linear_cross_entropy() -> bool:
    module = sys.modules.get(_OPTIONS_MODULE)
    cls = getattr(module, "LinearCrossEntropyOptions", None)
    original = getattr(cls, "_resolve_auto_acc_dtype", None)
    if original is None:
        return False
    import torch

    def resolve_auto_acc_dtype(dtype, device):
        if device is not None and dtype in accumulation_dtypes(torch.device(device).type):
            return torch.float32
        return original(dtype, device)

    resolve_auto_acc_dtype.__wrapped__ = original
    cls._resolve_auto_acc_dtype = staticmethod(resolve_auto_acc_dtype)
    return True


def install(name: str, descriptor: dict) -> None:
    """Registers device `name`'s defaults from its descriptor (idempotent)."""
    global _hooked
    import torch

    dtypes = frozenset(getattr(torch, d) for d in descriptor.get("amp_dtypes") or ()
                       if isinstance(getattr(torch, d, None), torch.dtype))
    with _lock:
        _amp[name] = dtypes
        if not _hooked:
            _hooked = _hook_linear_cross_entropy()
