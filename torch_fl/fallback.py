"""The CPU fallback of a backend: ops without a native kernel copy their inputs
to the host, run PyTorch's CPU kernel and copy the results back. It is on by
default (models run), logged (you see what is slow), and can be switched off
globally or denied per op (then such an op raises NotImplementedError naming
op, device and dtypes).

    >>> torch_fl.clear_fallback_log()
    >>> y = torch.cumprod(x, 0)               # no native kernel: falls back
    >>> print(torch_fl.fallback_report())

The controls act on the process's backend (only one PrivateUse1 backend can be
loaded); `device` picks it explicitly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from . import _backends

__all__ = ["set_fallback_mode", "get_fallback_mode", "fallback_mode", "get_fallback_log",
           "clear_fallback_log", "set_fallback_deny_list", "get_fallback_deny_list",
           "set_fallback_warn", "fallback_report"]


def set_fallback_mode(enabled: bool, device: Any = None) -> bool:
    """Allow (True) or forbid (False) the CPU fallback; returns the previous mode."""
    n = _backends.native(device)
    previous = bool(n.fallback_enabled())
    n.set_fallback_enabled(bool(enabled))
    return previous


def get_fallback_mode(device: Any = None) -> bool:
    return bool(_backends.native(device).fallback_enabled())


@contextlib.contextmanager
def fallback_mode(enabled: bool, device: Any = None) -> Iterator[None]:
    """`with torch_fl.fallback_mode(False): ...` - the mode inside the block only."""
    previous = set_fallback_mode(enabled, device)
    try:
        yield
    finally:
        set_fallback_mode(previous, device)


def get_fallback_log(device: Any = None) -> list[dict[str, Any]]:
    """[{'op', 'reason', 'count', 'time_s', 'bytes_copied'}] since the last clear, the
    most expensive op (by time) first; an op that fell back for two reasons has two
    entries. reason: 'no native kernel', 'dtype not computed by the native kernel',
    'a conjugate or negative view, resolved on the CPU' (x.conj() or a negative view
    handed to clone, mm, ...: kernels read bytes as stored), or
    'routed to the CPU (torch_fl.set_op_route)' / '(TORCH_FL_OP_ROUTES)'. bytes_copied
    counts device bytes moved both ways."""
    log = [dict(e) for e in _backends.native(device).fallback_log()]
    for e in log:
        e.setdefault("reason", "no native kernel")  # a backend built before reasons
    return sorted(log, key=lambda e: (-e["time_s"], e["op"], e["reason"]))


def clear_fallback_log(device: Any = None) -> None:
    """Empty the log (and re-arm the warn-once warnings)."""
    _backends.native(device).clear_fallback_log()


def set_fallback_deny_list(ops: Iterable[str], device: Any = None) -> None:
    """Ops that must never fall back (they raise instead), e.g. ['cumprod'].
    Names are ATen overload names as in the log: 'add.Tensor', 'relu'. Replaces
    the current list; [] clears it."""
    if isinstance(ops, str):
        raise TypeError("set_fallback_deny_list takes a list of op names, not a string")
    names = []
    for op in ops:
        if not isinstance(op, str) or not op:
            raise TypeError(f"op names must be non-empty strings, got {op!r}")
        names.append(op[len("aten::"):] if op.startswith("aten::") else op)
    _backends.native(device).set_fallback_deny_list(names)


def get_fallback_deny_list(device: Any = None) -> list[str]:
    return sorted(_backends.native(device).fallback_deny_list())


def set_fallback_warn(enabled: bool, device: Any = None) -> None:
    """Warn once per op (a Python UserWarning) the first time it falls back."""
    _backends.native(device).set_fallback_warn(bool(enabled))


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def fallback_report(device: Any = None) -> str:
    """The fallback log as a readable table (most time first) with totals."""
    mod = _backends.backend(device)
    n = mod.native()
    log = get_fallback_log(device)
    mode = "on" if n.fallback_enabled() else "OFF"
    deny = ", ".join(sorted(n.fallback_deny_list())) or "none"
    head = f"{mod.NAME} CPU fallback: {mode}; deny list: {deny}"
    if not log:
        return head + "\nno op ran on the CPU fallback"
    width = max(len(e["op"]) for e in log + [{"op": "total"}])
    lines = [head, f"{'op':<{width}}  {'calls':>7}  {'time (ms)':>10}  {'copied':>10}  why"]
    for e in log:
        lines.append(f"{e['op']:<{width}}  {e['count']:>7}  {e['time_s'] * 1e3:>10.2f}  "
                     f"{_human_bytes(e['bytes_copied']):>10}  {e['reason']}")
    lines.append(f"{'total':<{width}}  {sum(e['count'] for e in log):>7}  "
                 f"{sum(e['time_s'] for e in log) * 1e3:>10.2f}  "
                 f"{_human_bytes(sum(e['bytes_copied'] for e in log)):>10}")
    return "\n".join(lines)
