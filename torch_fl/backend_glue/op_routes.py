"""Per-op routing at run time: send the calls of an op with a native kernel to the
CPU fallback (or back), without a rebuild. The generated wrappers check the route
on every call (one atomic load while nothing is routed); the fallback log names the
routed calls with the reason. torch_fl.set_op_route / get_op_routes are the API;
`TORCH_FL_OP_ROUTES="aten::mm=fallback,aten::exp=fallback"` is read when the backend
loads (a bad entry warns and is skipped: loading never fails over it).

Names: "aten::mm" (or "mm") routes every overload of mm that has a native kernel
(mm, mm.out); "aten::add.Tensor" one overload. In-place ops are ops of their own
("aten::relu_"), as in PyTorch.
"""

import os
import warnings

ROUTES_ENV = "TORCH_FL_OP_ROUTES"
ROUTES = ("fallback", "native")


def op_key(op):
    """'aten::add.Tensor' -> 'add.Tensor', 'mm' -> 'mm'; other namespaces are refused
    (a backend's own ops have no CPU kernel to route to)."""
    if not isinstance(op, str) or not op.strip():
        raise ValueError(f"an op name is a non-empty string such as 'aten::mm', got {op!r}")
    op = op.strip()
    if "::" in op:
        namespace, _, op = op.partition("::")
        if namespace != "aten":
            raise ValueError(f"'{namespace}::{op}' is not an aten op: only aten ops have a CPU "
                             f"kernel to route to")
    return op


def _exists(torch, key):
    name, _, overload = key.partition(".")
    schemas = torch._C._jit_get_schemas_for_operator("aten::" + name)
    return bool(schemas) and (not overload or any(s.overload_name == overload for s in schemas))


def check_route(torch, native, backend, op, route):
    """The C++ key of `op` ('mm', 'add.Tensor') after checking that it can take
    `route`; ValueError naming op, backend and why not."""
    if route not in ROUTES:
        raise ValueError(f"route of {op!r} must be 'fallback' or 'native', got {route!r}")
    key = op_key(op)
    if not _exists(torch, key):
        raise ValueError(f"aten::{key} is not a PyTorch op (check the spelling: 'aten::mm', "
                         f"'aten::add.Tensor')")
    native_ops = set(native.native_ops())
    routable = set(native.routable_ops())

    def covers(names):
        return key in names or any(n.partition(".")[0] == key for n in names)

    if not covers(native_ops):
        raise ValueError(f"aten::{key} has no native {backend} kernel: its calls already run on "
                         f"the CPU fallback (torch_fl.get_fallback_log() shows them)")
    if route == "fallback" and not covers(routable):
        raise ValueError(f"aten::{key} cannot be routed to the CPU on {backend}: PyTorch has no CPU "
                         f"kernel (or CPU reference op) for it, only the device's")
    return key


def set_route(torch, native, backend, op, route, origin="torch_fl.set_op_route"):
    """Route `op` to 'fallback' or back to 'native' (checked first)."""
    key = check_route(torch, native, backend, op, route)
    native.set_op_route(key, route == "fallback", origin)


def routes(native):
    """{'aten::mm': 'fallback', ...}: the ops routed to the CPU now."""
    return {"aten::" + op: "fallback" for op in native.op_routes()}


def parse_env(text):
    """[(op, route)] from 'aten::mm=fallback, aten::exp=fallback'; ValueError names
    the bad entry."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        op, sep, route = item.partition("=")
        if not sep or not op.strip():
            raise ValueError(f"{ROUTES_ENV}: '{item}' is not op=route (e.g. aten::mm=fallback)")
        out.append((op.strip(), route.strip()))
    return out


def apply_env(torch, native, backend):
    """Apply TORCH_FL_OP_ROUTES; each bad entry warns (RuntimeWarning) and is skipped.
    Returns the entries applied."""
    text = os.environ.get(ROUTES_ENV, "")
    if not text.strip():
        return []
    try:
        entries = parse_env(text)
    except ValueError as exc:
        warnings.warn(f"{backend}: {exc}; no op was routed", RuntimeWarning, stacklevel=2)
        return []
    applied = []
    for op, route in entries:
        try:
            set_route(torch, native, backend, op, route, origin=ROUTES_ENV)
            applied.append((op, route))
        except ValueError as exc:
            warnings.warn(f"{backend}: {ROUTES_ENV}: {exc}; entry '{op}={route}' skipped",
                          RuntimeWarning, stacklevel=2)
    return applied
