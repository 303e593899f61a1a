"""Per-op routing at run time: take one suspicious kernel off the chip without a
rebuild (the real Torch-FL's FLAGOS_OP_<op> switches).

    >>> torch_fl.set_op_route("aten::mm", "fallback")   # mm now runs on the CPU fallback
    >>> torch_fl.get_op_routes()
    {'aten::mm': 'fallback'}
    >>> torch_fl.set_op_route("aten::mm", "native")     # back on the device
    >>> with torch_fl.op_route("aten::addmm", "fallback"):
    ...     y = model(x)

`TORCH_FL_OP_ROUTES="aten::mm=fallback,aten::exp=fallback"` does the same when the
backend loads. Routed calls appear in torch_fl.get_fallback_log() with the reason
"routed to the CPU (<who routed it>)". The checks and the environment variable
live in the backend's own glue (torch_fl/backend_glue/op_routes.py), so they work
without torch_fl too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from . import _backends
from .backend_glue import op_routes as _glue

__all__ = ["set_op_route", "get_op_routes", "op_route", "clear_op_routes", "ROUTES_ENV"]

ROUTES_ENV = _glue.ROUTES_ENV


def set_op_route(op: str, route: str, device: Any = None) -> None:
    """Send the calls of `op` ("aten::mm": every overload with a native kernel;
    "aten::add.Tensor": one overload) to the CPU fallback (`route="fallback"`) or back
    to the device's kernel (`"native"`). ValueError for an unknown op, one without a
    native kernel, one PyTorch has no CPU kernel for, or another route."""
    import torch

    mod = _backends.backend(device)
    _glue.set_route(torch, mod.native(), mod.NAME, op, route)


def get_op_routes(device: Any = None) -> dict[str, str]:
    """The ops routed to the CPU now: {'aten::mm': 'fallback'} (every other native op
    runs on the device)."""
    return _glue.routes(_backends.native(device))


def clear_op_routes(device: Any = None) -> None:
    """Every op back on its native kernel."""
    native = _backends.native(device)
    for op in list(native.op_routes()):
        native.set_op_route(op, False, "")


@contextlib.contextmanager
def op_route(op: str, route: str, device: Any = None) -> Iterator[None]:
    """`with torch_fl.op_route("aten::mm", "fallback"): ...` - the route inside the
    block only (the routes before it come back after)."""
    native = _backends.native(device)
    before = dict(native.op_routes())
    set_op_route(op, route, device)
    try:
        yield
    finally:
        for name in list(native.op_routes()):
            if name not in before:
                native.set_op_route(name, False, "")
        for name, origin in before.items():
            native.set_op_route(name, True, origin)
