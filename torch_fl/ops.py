"""Which ATen ops a device runs natively, and which ops a model would send to
the CPU fallback.

Source of truth is PyTorch's dispatcher, not the op specs: what counts is what
is registered for the PrivateUse1 key in this process.

    >>> torch_fl.get_supported_ops("acme")[:3]
    ['_adaptive_avg_pool2d', '_adaptive_avg_pool2d.out', ...]
    >>> print(torch_fl.check_ops(model, (x,), "acme:0", backward=True).table())
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from . import _backends

__all__ = ["get_supported_ops", "check_ops", "OpsReport", "OpUse", "privateuse1_route"]

# Namespaces torch itself registers on every backend key (process-group ops
# dispatch to the process group, they are not the backend's kernels).
_TORCH_OWNED_NAMESPACES = ("c10d",)


def _short(qualified: str) -> str:
    """'aten::add.Tensor' -> 'add.Tensor'; other namespaces keep theirs."""
    return qualified[len("aten::"):] if qualified.startswith("aten::") else qualified


def get_supported_ops(device: Any = None) -> list[str]:
    """Ops with a kernel registered for the device's dispatch key (PrivateUse1),
    sorted; aten ops without the 'aten::' prefix, custom ops with their
    namespace ('acme::fused_gelu'). The CPU fallback is not a kernel and is not
    listed; neither are torch's own c10d registrations."""
    import torch

    _backends.backend(device)  # load it: registrations happen at import of _C
    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return sorted(_short(r) for r in regs
                  if r.split("::", 1)[0] not in _TORCH_OWNED_NAMESPACES)


def privateuse1_route(op: str) -> str:
    """How the dispatcher serves `op` ('add.Tensor' or 'aten::add.Tensor') on
    PrivateUse1: 'native' (a kernel), 'composite' (a CompositeExplicitAutograd
    kernel that calls other ops), 'structured' (the functional form of a
    structured op: it calls the '.out' overload), 'fallback' (the backend's
    boxed CPU fallback), or 'missing' (nothing: the op would fail)."""
    import torch

    name = op if "::" in op else "aten::" + op
    try:
        table = torch._C._dispatch_dump_table(name)
    except RuntimeError:
        return "missing"
    line = next((ln for ln in table.splitlines() if ln.startswith("PrivateUse1:")), "")
    if "[kernel]" in line:
        return "native"
    if "[backend fallback]" in line:
        return "fallback"
    if "CompositeExplicitAutogradNonFunctional" in line:
        return "structured"
    if "[default backend kernel]" in line or "[math kernel]" in line:
        return "composite"
    return "missing"


@dataclass
class OpUse:
    op: str
    status: str            # native | fallback | error | composite
    dtypes: list[str]
    note: str = ""


@dataclass
class OpsReport:
    device: str
    backward: bool
    ops: list[OpUse] = field(default_factory=list)
    fallback_enabled: bool = True

    def _with(self, status: str) -> list[str]:
        return [u.op for u in self.ops if u.status == status]

    @property
    def native(self) -> list[str]:
        return self._with("native")

    @property
    def fallback(self) -> list[str]:
        """Ops that would run on the CPU fallback (slow, but they work)."""
        return self._with("fallback")

    @property
    def errors(self) -> list[str]:
        """Ops that would fail: no kernel and the fallback is off or denies them."""
        return self._with("error")

    @property
    def composite(self) -> list[str]:
        return self._with("composite")

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "backward": self.backward,
                "fallback_enabled": self.fallback_enabled,
                "ops": [u.__dict__.copy() for u in self.ops]}

    def table(self) -> str:
        width = max([len(u.op) for u in self.ops] + [2])
        lines = [f"ops reached on {self.device} ({'forward+backward' if self.backward else 'forward'}): "
                 f"{len(self.native)} native, {len(self.fallback)} CPU fallback, "
                 f"{len(self.composite)} composite, {len(self.errors)} would fail",
                 f"{'op':<{width}}  {'status':<9}  dtypes"]
        order = {"error": 0, "fallback": 1, "composite": 2, "native": 3}
        for u in sorted(self.ops, key=lambda u: (order.get(u.status, 9), u.op)):
            note = f"  ({u.note})" if u.note else ""
            lines.append(f"{u.op:<{width}}  {u.status:<9}  {','.join(u.dtypes)}{note}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _out_overload(name: str) -> str | None:
    """'add.Tensor' -> 'add.out', 'pow.Tensor_Scalar' -> 'pow.Tensor_Scalar_out'."""
    import torch

    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    available = set(packet.overloads())
    for candidate in ((overload + "_out") if overload else "out", "out"):
        if candidate in available:
            return f"{base}.{candidate}"
    return None


def _cpu_can_run(name: str) -> bool:
    """Does the CPU fallback have something to run for `name` (a CPU kernel or a
    composite that CPU dispatch reaches)?"""
    import torch

    qualified = "aten::" + name
    try:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        return any(has(qualified, key) for key in
                   ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
                    "CompositeExplicitAutogradNonFunctional"))
    except RuntimeError:
        return False


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_ops(model: Callable, example_inputs: Any, device: Any = None, *,
              backward: bool = False,
              loss_fn: Callable[[Any], Any] | None = None) -> OpsReport:
    """Trace which ATen ops `model(*example_inputs)` (and its backward when
    `backward=True`) makes the device's backend run, and say for each whether the
    device has a kernel or it would fall back to the CPU.

    The model runs once on the CPU (a deep copy; the original is not touched)
    under a TorchDispatchMode that sees ops after autograd, autocast and
    CompositeImplicitAutograd decomposition, i.e. what a backend key is asked
    for (torch_fl.models.trace has the details). Each op is then looked up in
    the dispatcher's PrivateUse1 table. `loss_fn(output)` makes the scalar for
    backward (default: sum of all floating outputs)."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    from .models.trace import CPU_DROPOUT_MARKER, GLUE_OPS, PRIVATEUSE1_DROPOUT, record_ops

    dev = _backends.resolve_device(device)
    mod = _backends.backend(dev)
    native = mod.native()
    fb_enabled = bool(native.fallback_enabled())
    denied = set(native.fallback_deny_list())
    device_dtypes = set(mod.DESCRIPTOR.get("dtypes", []))
    # Ops without a CPU kernel the backend does not implement: the glue's stand-in.
    device_only = getattr(mod, "DEVICE_ONLY_OPS", {})

    cpu_model = copy.deepcopy(model).to("cpu") if isinstance(model, torch.nn.Module) else model
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    inputs = tree_map(lambda t: t.detach().to("cpu").requires_grad_(t.requires_grad)
                      if isinstance(t, torch.Tensor) else t, inputs)
    with record_ops() as trace:
        out = cpu_model(*inputs)
        if backward:
            loss = loss_fn(out) if loss_fn else sum(
                t.float().sum() for t in tree_leaves(out)
                if isinstance(t, torch.Tensor) and t.is_floating_point())
            loss.backward()

    report = OpsReport(device=str(dev), backward=backward, fallback_enabled=fb_enabled)
    names = set(trace.backend_ops) | set(trace.glue_ops)
    if PRIVATEUSE1_DROPOUT[0] in names:
        # CPU's unfused dropout draws with bernoulli_; the device takes the fused
        # native_dropout path instead (the trace already added that op).
        names.discard(CPU_DROPOUT_MARKER)
    for name in sorted(names):
        dtypes = sorted(_dtype_name(d) for d in trace.reached.get(name, ()))
        route = privateuse1_route(name)
        note = ""
        if name in device_only:
            # The glue registered a kernel for it, but not a native one.
            runs_as = device_only[name]["runs_as"]
            status = {"cpu_reference": "fallback", "composite": "composite"}.get(runs_as, "error")
            note = device_only[name]["note"]
        elif route == "native" or name in GLUE_OPS and route != "fallback":
            status = "native"
        elif route == "composite":
            status = "composite"
            note = "decomposes on the device into other ops"
        elif route == "structured":
            # The functional form of a structured op calls its out overload.
            out_op = _out_overload(name)
            if out_op and privateuse1_route(out_op) == "native":
                status, note = "native", f"via {out_op}"
            else:
                status, note = "fallback", f"via {out_op or 'its out overload'}"
        else:
            status = "fallback"
        if status == "fallback" and (not fb_enabled or name in denied):
            status = "error"
            note = ("fallback denied for this op" if name in denied
                    else "fallback disabled") + (f"; {note}" if note else "")
        if status == "fallback" and name not in device_only:
            # The fallback runs CPU's kernel: an op CPU has none for cannot run anywhere.
            if not _cpu_can_run(name):
                status, note = "error", "no native kernel and CPU has none either: must be native"
        unsupported = [d for d in dtypes if d not in device_dtypes]
        if unsupported:
            note = (note + "; " if note else "") + (
                f"dtype(s) {','.join(unsupported)} not computed natively (device.yaml dtypes): "
                "those calls run on the CPU fallback")
        report.ops.append(OpUse(name, status, dtypes, note))
    return report
