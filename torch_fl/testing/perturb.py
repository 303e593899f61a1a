"""A deliberately wrong kernel, to prove that a precision check catches one.

`perturbed_kernel("_adaptive_avg_pool2d", "acme", add=0.5)` registers, for the
duration of a `with` block, a Python kernel for that ATen op on the backend's
dispatch key (PrivateUse1) that computes the right answer on the CPU and then
perturbs it. It overrides the backend's own kernel (native or fallback) and
the dispatcher restores that kernel when the block ends (the registration is
removed; PyTorch keeps the previous kernel underneath). Only the chosen device
type is affected: the CPU reference stays exact.

Meant for tests and for checking a comparison pipeline, not for production.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def perturbed_kernel(op: str, device_type: str | None = None, *, scale: float = 1.0,
                     add: float = 0.0) -> Iterator[None]:
    """Inside the block, floating outputs of aten `op` (overload name as in
    'add.Tensor', 'relu', '_adaptive_avg_pool2d') computed on the backend become
    `out * scale + add`. Works for functional ops (not in-place / out= overloads)."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    from .. import _backends

    mod = _backends.backend(device_type)
    base, _, overload = op.partition(".")
    overload_packet = getattr(torch.ops.aten, base)
    func = getattr(overload_packet, overload or "default")
    if any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
        raise ValueError(f"perturbed_kernel supports functional ops only; {op} writes an argument")

    def kernel(*args, **kwargs):
        devices = [t.device for t in tree_leaves((args, kwargs))
                   if isinstance(t, torch.Tensor) and t.device.type == mod.NAME]
        device = devices[0] if devices else torch.device(mod.NAME)

        def to_cpu(x):
            return x.to("cpu") if isinstance(x, torch.Tensor) else x

        def back(x):
            if not isinstance(x, torch.Tensor):
                return x
            if x.is_floating_point():
                x = x * scale + add
            return x.to(device)
        out = func(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))
        return tree_map(back, out)

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel" is the point here.
        warnings.simplefilter("ignore")
        lib.impl(op if overload else base, kernel, "PrivateUse1")
    try:
        yield
    finally:
        lib._destroy()
