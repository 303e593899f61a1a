"""A CPU reference for a backend's autocast: CPU autocast with CUDA's policy.

A flsdk backend's `torch.autocast("<device>")` runs PyTorch's CUDA policy (the
op lists of torch's autocast_mode.h, read by torch_fl._tables.autocast);
`torch.autocast("cpu")` runs CPU's own, which differs in what matters for whole
models: CPU keeps `cross_entropy_loss` in
float32 where CUDA computes the log-probabilities in the low precision
(cross_entropy passes its input's dtype to log_softmax), CUDA runs
`layer_norm`, `group_norm`, `softmax`, `exp`, `sum` ... in float32 where CPU
keeps the input's dtype. A model stepped under both rounds to the low
precision in different places, so comparing a device with plain CPU autocast
mixes the policy difference (legitimate) with the kernels' (what a test is
after); in a batch-normed CNN in bfloat16 the policy difference alone moves the
loss by several percent.

`cuda_autocast_policy_on_cpu()` makes the CPU follow CUDA's policy instead, for
the duration of a `with` block: every op of CUDA's policy gets a kernel on the
AutocastCPU dispatch key doing what at::autocast::WrapFunction does on CUDA
(cast every eligible Tensor, Tensor? and Tensor[] argument; eligible: a
floating CPU tensor that is not float64), and every op only CPU's policy wraps
falls through. Then the CPU step and the device step cast the same ops to the
same dtypes, and what is left between them is the kernels' rounding. Python
registrations on `aten`, removed (restoring CPU's own policy) when the block
ends. Meant for tests.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from .._tables.autocast import BANNED_MESSAGE, cuda_policies, header_policy

__all__ = ["cuda_autocast_policy_on_cpu"]


@contextlib.contextmanager
def cuda_autocast_policy_on_cpu() -> Iterator[None]:
    import torch

    policies = cuda_policies()
    redispatch = {op: entry[0] for op, entry in header_policy().redispatch.items()}
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel" is the point
        for name in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"):
            ns, _, op = name.partition("::")
            if ns == "aten" and op not in policies:
                lib.impl(op, torch.library.fallthrough_kernel, "AutocastCPU")
        for op, policy in policies.items():
            lib.impl(op, _kernel(op, policy, redispatch.get(op)), "AutocastCPU")
    try:
        yield
    finally:
        lib._destroy()


def _overload(name: str):
    import torch

    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _kernel(op: str, policy: str, redispatch_func: str | None):
    """The AutocastCPU kernel of one op under CUDA's `policy`. fp32_append_dtype
    ops (norm) call `redispatch_func` (the header's: another overload of the same
    function) with their arguments and dtype=float32, as CUDA's wrapper does."""
    import torch

    func = _overload(op)
    redispatch = getattr(torch.ops.aten, redispatch_func) if redispatch_func else None
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def eligible(t) -> bool:
        return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type == "cpu"
                and t.dtype != torch.float64)

    def cast(x, dtype):
        if eligible(x):
            return x.to(dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(cast(v, dtype) for v in x)
        return x

    def tensors(args, kwargs):
        for x in [*args, *kwargs.values()]:
            if isinstance(x, (list, tuple)):
                yield from (v for v in x if isinstance(v, torch.Tensor))
            elif isinstance(x, torch.Tensor):
                yield x

    def first_eligible(args) -> bool:
        return bool(args) and eligible(args[0])

    def kernel(*args, **kwargs):
        low = torch.get_autocast_dtype("cpu")
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            if policy == "banned":
                raise RuntimeError(BANNED_MESSAGE[op])
            if policy == "lower_precision_fp":
                return func(*cast(args, low), **cast(kwargs, low))
            if policy == "fp32":
                return func(*cast(args, torch.float32), **cast(kwargs, torch.float32))
            if policy == "fp32_set_opt_dtype":
                # CUDA: if the first argument is eligible, every unset optional
                # dtype argument becomes float32 (the op then computes in it).
                if not first_eligible(args):
                    return func(*args, **kwargs)
                args, kwargs = _with_float_dtype(func, args, kwargs, torch.float32)
                return func(*args, **kwargs)
            if policy == "fp32_append_dtype":
                if not first_eligible(args):
                    return func(*args, **kwargs)
                args, kwargs = _every_argument(func, args, kwargs)
                return redispatch(*args, **kwargs, dtype=torch.float32)
            if policy == "promote":
                # the widest eligible floating dtype, low precision < float32
                widest = low
                for t in tensors(args, kwargs):
                    if eligible(t) and t.dtype == torch.float32:
                        widest = torch.float32
                return func(*cast(args, widest), **cast(kwargs, widest))
            raise AssertionError(f"autocast policy {policy!r} of {op} is not reproduced")

    return kernel


def _every_argument(func, args, kwargs):
    """args and kwargs with the defaults func's schema has and the call left out
    (Python kernels receive calls without them; CUDA's C++ wrapper always has every
    argument, so the other overload it redispatches to gets them all)."""
    args = list(args)
    kwargs = dict(kwargs)
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) or a.name in kwargs or not a.has_default_value():
            continue
        if a.kwarg_only:
            kwargs[a.name] = a.default_value
        else:
            args.append(a.default_value)
    return args, kwargs


def _with_float_dtype(func, args, kwargs, dtype):
    """args and kwargs with every unset `ScalarType?` argument of func's schema
    set to dtype, as (positional args, kwargs). (The schema's Python types show
    ScalarType as int, so the names are read from its text.)"""
    import re

    optional_dtypes = set(re.findall(r"ScalarType\?\s+(\w+)", str(func._schema)))
    args = list(args)
    kwargs = dict(kwargs)
    for i, a in enumerate(func._schema.arguments):
        if a.name not in optional_dtypes:
            continue
        if i < len(args):
            if args[i] is None:
                args[i] = dtype
        elif kwargs.get(a.name) is None:
            kwargs[a.name] = dtype
    return args, kwargs
