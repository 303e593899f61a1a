"""Precision: what a device supports, automatic mixed precision on top of
torch.autocast, GradScaler, and comparing a computation across two devices.

    >>> torch_fl.get_supported_precision("acme:0")["amp_dtypes"]
    [torch.bfloat16, torch.float16]
    >>> with torch_fl.set_auto_mixed_precision(True, dtype=torch.bfloat16):
    ...     y = model(x)                       # torch.autocast("acme") underneath
    >>> scaler = torch_fl.grad_scaler()        # torch.amp.GradScaler("acme")
    >>> torch_fl.compare_precision(torch.matmul, (a, b), "cpu", "acme:0")
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from . import _backends

__all__ = ["get_supported_precision", "set_auto_mixed_precision", "get_auto_mixed_precision",
           "AutoMixedPrecision", "grad_scaler", "compare_precision", "PrecisionComparison",
           "TensorDiff", "tensor_diff", "as_dtype"]


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def as_dtype(value: Any):
    """torch.float16, "float16" or "torch.float16" -> torch.float16; ValueError
    naming the value otherwise."""
    import torch

    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        found = getattr(torch, value.removeprefix("torch."), None)
        if isinstance(found, torch.dtype):
            return found
        raise ValueError(f"unknown dtype {value!r}; expected a torch dtype name such as "
                         "'float16' or 'bfloat16'")
    raise TypeError(f"dtype must be a torch.dtype or its name, got {type(value).__name__} "
                    f"{value!r}")


def get_supported_precision(device: Any = None) -> dict[str, Any]:
    """{'dtypes': [...], 'amp_dtypes': [...], 'autocast_dtype': default autocast
    dtype, 'bf16': bool, 'fp16': bool, 'quantization': {'schemes', 'dtypes'}}."""
    dev = _backends.resolve_device(device)
    mod = _backends.backend(dev)
    d = mod.DESCRIPTOR
    amp = [_dtype(n) for n in d.get("amp_dtypes", [])]
    return {
        "device": str(dev),
        "dtypes": [_dtype(n) for n in d.get("dtypes", [])],
        "amp_dtypes": amp,
        "autocast_dtype": amp[0] if amp else None,
        "bf16": _dtype("bfloat16") in amp,
        "fp16": _dtype("float16") in amp,
        "quantization": {"schemes": list(d.get("quantization_schemes", [])),
                         "dtypes": [_dtype(n) for n in d.get("quantization_dtypes", [])]},
    }


# --- automatic mixed precision -----------------------------------------------

_state = threading.local()  # autocast state is thread-local in PyTorch too


def _stack() -> list[AutoMixedPrecision]:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


class AutoMixedPrecision:
    """A torch.autocast region for a backend device type, entered when created.

    Used as a plain call it is a global switch (until the next
    set_auto_mixed_precision call on this thread); used in a `with` block it is
    undone at the end of the block. The autocast weight cache is off: in a
    global region that never exits, cached low-precision weight copies would go
    stale after the optimizer updates the weights."""

    def __init__(self, device_type: str, dtype, enabled: bool) -> None:
        import torch

        self.device_type = device_type
        self.dtype = dtype
        self.enabled = enabled
        self._scoped = False
        self._active = False
        self._autocast = torch.autocast(device_type=device_type, dtype=dtype, enabled=enabled,
                                        cache_enabled=False)

    def _enter(self) -> None:
        self._autocast.__enter__()
        self._active = True

    def _exit(self) -> None:
        if self._active:
            self._active = False
            self._autocast.__exit__(None, None, None)

    def __enter__(self) -> AutoMixedPrecision:
        self._scoped = True
        return self

    def __exit__(self, *exc) -> None:
        stack = _stack()
        # Undo everything set on top of this region (global switches inside the block too).
        while stack:
            top = stack.pop()
            top._exit()
            if top is self:
                break

    def __repr__(self) -> str:
        return (f"AutoMixedPrecision(device_type={self.device_type!r}, enabled={self.enabled}, "
                f"dtype={self.dtype})")


def set_auto_mixed_precision(enabled: bool = True, dtype=None, device: Any = None) -> AutoMixedPrecision:
    """Turn autocast on (or off) for the backend's device type on this thread.

    `dtype` (a torch.dtype or its name, "float16") defaults to the device's
    first AMP dtype (descriptor `amp_dtypes`);
    a dtype the device does not list raises ValueError (torch.autocast would only
    warn and silently disable itself). Returns an AutoMixedPrecision that also
    works as a context manager:

        torch_fl.set_auto_mixed_precision(True)               # global, this thread
        with torch_fl.set_auto_mixed_precision(True, torch.float16):
            ...                                               # only in the block
    """
    mod = _backends.backend(device)
    amp = [_dtype(n) for n in mod.DESCRIPTOR.get("amp_dtypes", [])]
    if dtype is None:
        if enabled and not amp:
            raise ValueError(f"{mod.NAME} lists no AMP dtypes (device.yaml amp_dtypes)")
        dtype = amp[0] if amp else _dtype("bfloat16")
    else:
        dtype = as_dtype(dtype)
        if enabled and dtype not in amp:
            raise ValueError(f"{mod.NAME} does not support autocast to {dtype}; supported: "
                             + (", ".join(str(d) for d in amp) or "none")
                             + " (device.yaml amp_dtypes)")
    stack = _stack()
    if stack and not stack[-1]._scoped:  # replace the previous global switch
        stack.pop()._exit()
    region = AutoMixedPrecision(mod.NAME, dtype, bool(enabled))
    region._enter()
    stack.append(region)
    return region


def get_auto_mixed_precision(device: Any = None) -> dict[str, Any]:
    """{'enabled': bool, 'dtype': torch.dtype} of autocast for the backend on this thread."""
    import torch

    mod = _backends.backend(device)
    return {"enabled": torch.is_autocast_enabled(mod.NAME),
            "dtype": torch.get_autocast_dtype(mod.NAME)}


def grad_scaler(device: Any = None, **kwargs):
    """torch.amp.GradScaler for the backend's device type (kwargs pass through:
    init_scale, growth_factor, ...). Equivalent to torch.amp.GradScaler("acme")."""
    import torch

    mod = _backends.backend(device)
    return torch.amp.GradScaler(mod.NAME, **kwargs)


# --- comparing numbers across devices ---------------------------------------

@dataclass
class TensorDiff:
    """How far tensor b is from reference a."""
    shape: list[int]
    dtype_a: str
    dtype_b: str
    max_abs: float        # max |a - b|
    max_rel: float        # max |a - b| / |a| over elements with |a| > atol
    mean_abs: float
    cosine: float         # cosine similarity of the flattened tensors (1.0 = same direction)
    ok: bool              # allclose(b, a, atol, rtol) and same shape; NaN/inf must match
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tensor_diff(a, b, atol: float = 1e-5, rtol: float = 1.3e-6) -> TensorDiff:
    """Metrics of b against the reference a (any devices, any float dtypes;
    computed in float64 on the CPU)."""
    import torch

    a64 = a.detach().to("cpu", torch.float64) if a.is_floating_point() or a.is_complex() \
        else a.detach().to("cpu").double()
    b64 = b.detach().to("cpu", torch.float64) if b.is_floating_point() or b.is_complex() \
        else b.detach().to("cpu").double()
    base: dict[str, Any] = dict(shape=list(a.shape), dtype_a=str(a.dtype).replace("torch.", ""),
                dtype_b=str(b.dtype).replace("torch.", ""))
    if a64.shape != b64.shape:
        return TensorDiff(**base, max_abs=math.inf, max_rel=math.inf, mean_abs=math.inf,
                          cosine=math.nan, ok=False,
                          note=f"shape differs: {list(a.shape)} vs {list(b.shape)}")
    if a64.numel() == 0:
        return TensorDiff(**base, max_abs=0.0, max_rel=0.0, mean_abs=0.0, cosine=1.0, ok=True)
    # Non-finite values must agree position by position (and infs in sign);
    # the metrics are computed over the positions finite in both.
    fin_a, fin_b = torch.isfinite(a64), torch.isfinite(b64)
    inf_a = torch.isinf(a64)
    same_nonfinite = (torch.equal(torch.isnan(a64), torch.isnan(b64))
                      and torch.equal(inf_a, torch.isinf(b64))
                      and torch.equal(a64[inf_a], b64[inf_a]))
    mask = fin_a & fin_b
    av, bv = a64[mask], b64[mask]
    diff = (av - bv).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    # Relative error only where the reference is not ~0 (|a| > atol): near zero
    # it is meaningless (and infinite at 0); atol covers those elements.
    big = av.abs() > atol
    max_rel = float((diff[big] / av[big].abs()).max()) if big.any() else 0.0
    na, nb = float(av.norm()), float(bv.norm())
    if na == 0 and nb == 0:
        cosine = 1.0
    elif na == 0 or nb == 0:
        cosine = 0.0
    else:
        cosine = max(-1.0, min(1.0, float((av * bv).sum() / (na * nb))))
    ok = same_nonfinite and bool((diff <= atol + rtol * av.abs()).all())
    note = "" if same_nonfinite else "NaN/inf positions differ"
    return TensorDiff(**base, max_abs=max_abs, max_rel=max_rel,
                      mean_abs=float(diff.mean()) if diff.numel() else 0.0,
                      cosine=cosine, ok=ok, note=note)


def _to(value, device):
    import torch
    from torch.utils._pytree import tree_map

    def move(t):
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t
    return tree_map(move, value)


class PrecisionComparison(tuple):
    """Result of compare_precision: unpacks as the Torch-FL article's pair

        max_diff, rel_diff = compare_precision(conv, x)

    (the worst max |a - b| and max relative difference over all outputs) and
    keeps the full report: `.diffs` (one TensorDiff per output), `.ok`,
    `.cosine`, `.device_a`, `.device_b`."""

    diffs: list[TensorDiff]
    device_a: str
    device_b: str

    def __new__(cls, diffs: list[TensorDiff], device_a: str, device_b: str):
        max_diff = max((d.max_abs for d in diffs), default=0.0)
        rel_diff = max((d.max_rel for d in diffs), default=0.0)
        self = super().__new__(cls, (max_diff, rel_diff))
        self.diffs, self.device_a, self.device_b = diffs, device_a, device_b
        return self

    @property
    def max_diff(self) -> float:
        return self[0]

    @property
    def rel_diff(self) -> float:
        return self[1]

    @property
    def ok(self) -> bool:
        """Every output within its tolerance (see compare_precision)."""
        return all(d.ok for d in self.diffs)

    @property
    def cosine(self) -> float:
        return min((d.cosine for d in self.diffs), default=1.0)

    def to_dict(self) -> dict[str, Any]:
        return {"device_a": self.device_a, "device_b": self.device_b, "max_diff": self[0],
                "rel_diff": self[1], "ok": self.ok, "diffs": [d.to_dict() for d in self.diffs]}

    def __repr__(self) -> str:
        return (f"PrecisionComparison(max_diff={self[0]:.3g}, rel_diff={self[1]:.3g}, "
                f"ok={self.ok}, outputs={len(self.diffs)}, {self.device_b} vs {self.device_a})")


def _on(fn: Callable, device):
    """fn itself, or for a module a copy of it on `device` (same weights)."""
    import copy

    import torch

    if isinstance(fn, torch.nn.Module):
        return copy.deepcopy(fn).to(device)
    return fn


def compare_precision(fn: Callable, inputs: Any, device_a: Any = "cpu", device_b: Any = None,
                      atol: float | None = None, rtol: float | None = None
                      ) -> PrecisionComparison:
    """Run fn(*inputs) on device_a and on device_b (inputs copied to each; a
    module `fn` is copied to each device too, the original is not touched) and
    compare every tensor output, with device_a as the reference. device_b
    defaults to the first backend device ("acme:0"). atol/rtol default per
    output dtype to the conformance tolerances (float32: 1e-5 / 1.3e-6,
    bfloat16: 1e-2 / 1.6e-2, ...; exact for integers).

    Returns a PrecisionComparison: unpacks as (max_diff, rel_diff); `.diffs`
    has one TensorDiff per output (flattened in pytree order)."""
    import torch
    from torch.utils._pytree import tree_leaves

    dev_a = _backends.resolve_device(device_a)
    dev_b = _backends.resolve_device(device_b if device_b is not None
                                     else _backends.first_device())
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    # Same seed before each run: ops drawing random numbers on the CPU agree.
    torch.manual_seed(0)
    out_a = [t for t in tree_leaves(_on(fn, dev_a)(*_to(args, dev_a)))
             if isinstance(t, torch.Tensor)]
    torch.manual_seed(0)
    out_b = [t for t in tree_leaves(_on(fn, dev_b)(*_to(args, dev_b)))
             if isinstance(t, torch.Tensor)]
    if len(out_a) != len(out_b):
        raise RuntimeError(f"fn returned {len(out_a)} tensors on {dev_a} but {len(out_b)} on {dev_b}")
    from ._tables.dtypes import tolerance_for

    diffs = []
    for a, b in zip(out_a, out_b):
        d_atol, d_rtol = tolerance_for(str(b.dtype))
        diffs.append(tensor_diff(a, b, d_atol if atol is None else atol,
                                 d_rtol if rtol is None else rtol))
    return PrecisionComparison(diffs, str(dev_a), str(dev_b))
