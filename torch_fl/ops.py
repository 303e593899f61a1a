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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import _backends

__all__ = ["get_supported_ops", "check_ops", "OpsReport", "OpUse", "privateuse1_route",
           "SupportedOps", "OpSupport"]

# Namespaces torch itself registers on every backend key (process-group ops
# dispatch to the process group, they are not the backend's kernels).
_TORCH_OWNED_NAMESPACES = ("c10d",)


def _short(qualified: str) -> str:
    """'aten::add.Tensor' -> 'add.Tensor'; other namespaces keep theirs."""
    return qualified[len("aten::"):] if qualified.startswith("aten::") else qualified


@dataclass
class OpSupport:
    """Whether (and how) a device runs an op without the CPU fallback."""
    op: str
    supported: bool
    how: str       # native | composite | fallback | missing | unknown
    detail: str = ""


class SupportedOps(list):
    """The sorted list of ops with a PrivateUse1 kernel (what get_supported_ops
    always returned), whose `in` answers the Torch-FL article's question "does
    the device run this op?":

    * exact overloads, with or without namespace: 'add.Tensor', 'aten::add.Tensor',
      'acme::fused_gelu';
    * base names: 'aten::add' is in it when any overload of add is supported;
    * composite ops (CompositeImplicitAutograd such as conv2d and batch_norm, or
      CompositeExplicitAutograd kernels) count when their decomposition runs
      without the fallback. That is decided by running the op once on small CPU
      inputs built from its schema under the same dispatcher trace as check_ops
      (the ops a backend key is asked for after decomposition), then looking each
      reached op up in the PrivateUse1 dispatch table. An op whose schema gives no
      runnable probe is reported 'unknown' and not counted.

    `explain(op)` says why; results are cached per instance (forward only)."""

    def __init__(self, names: list[str], device: str) -> None:
        super().__init__(names)
        self.device = device
        self._registered = frozenset(names)
        self._cache: dict[str, OpSupport] = {}

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and self.explain(op).supported

    def explain(self, op: str) -> OpSupport:
        if op not in self._cache:
            self._cache[op] = self._explain(op)
        return self._cache[op]

    def _explain(self, op: str) -> OpSupport:
        import torch

        namespace, _, rest = op.rpartition("::")
        namespace = namespace or "aten"
        short = rest if namespace == "aten" else f"{namespace}::{rest}"
        if short in self._registered:
            return OpSupport(op, True, "native", f"{self.device} has a kernel for {short}")
        base, dot, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, namespace, None), base, None)
        if packet is None or not hasattr(packet, "overloads"):
            return OpSupport(op, False, "missing", f"no operator {namespace}::{base}")
        overloads = packet.overloads()
        if dot:
            if overload not in overloads:
                return OpSupport(op, False, "missing", f"{namespace}::{base} has no overload "
                                 f"{overload!r} (overloads: {', '.join(overloads)})")
            return self._overload(getattr(packet, overload), short)
        # A base name: supported when any overload is (native ones first, cheap).
        names = [(o, base if o == "default" else f"{base}.{o}") for o in overloads]
        for _o, name in names:
            full = name if namespace == "aten" else f"{namespace}::{name}"
            if full in self._registered:
                return OpSupport(op, True, "native", f"{self.device} has a kernel for {full}")
        results = [self._overload(getattr(packet, o), name) for o, name in names]
        good = [r for r in results if r.supported]
        if good:
            return OpSupport(op, True, good[0].how, good[0].detail)
        worst = next((r for r in results if r.how == "fallback"), results[0] if results else None)
        if worst is None:
            return OpSupport(op, False, "missing", f"{namespace}::{base} has no overloads")
        return OpSupport(op, False, worst.how, worst.detail)

    def _overload(self, func, name: str) -> OpSupport:
        route = privateuse1_route(str(func._schema.name) + (
            "." + func._schema.overload_name if func._schema.overload_name else ""))
        if route == "native":
            return OpSupport(name, True, "native", f"{self.device} has a kernel for {name}")
        if route == "structured":
            out = _out_overload(name)
            if out and privateuse1_route(out) == "native":
                return OpSupport(name, True, "native", f"{name} runs {self.device}'s {out} kernel")
            return OpSupport(name, False, "fallback", f"{name}: {out or 'its out overload'} "
                             "has no kernel")
        if route == "fallback":
            return OpSupport(name, False, "fallback", f"{name} runs on the CPU fallback")
        if route == "missing":
            return OpSupport(name, False, "missing", f"{name} has no PrivateUse1 kernel and no "
                             "fallback")
        return self._probe(func, name)

    def _probe(self, func, name: str) -> OpSupport:
        """Run the composite once on CPU probe inputs and check what it reaches."""
        for args, kwargs in _probe_arguments(func._schema):
            try:
                report = check_ops(lambda *a: func(*a, **kwargs), tuple(args), self.device)
            except Exception:
                continue  # this probe does not fit the op's shape rules; try the next
            bad = report.fallback + report.errors
            reached = sorted(report.native + report.composite)
            if bad:
                return OpSupport(name, False, "fallback", f"{name} decomposes into ops that "
                                 f"fall back to the CPU: {', '.join(sorted(bad))}")
            return OpSupport(name, True, "composite", f"{name} decomposes into ops native on "
                             f"{self.device}: {', '.join(reached) or 'none (views or aliases only)'}")
        return OpSupport(name, False, "unknown", f"{name} is composite, but no probe input built "
                         "from its schema runs on the CPU; use check_ops with real inputs")


# Shapes tried for the probe's tensors, in order (4-D first: it fits conv,
# pooling and batch norm; the same shape for every tensor argument fits
# elementwise ops and e.g. conv2d's weight).
_PROBE_SHAPES = ((2, 3, 4, 4), (3, 4), (4,))
_MAX_PROBES_PER_SHAPE = 16


def _probe_arguments(schema):
    """Candidate (args, kwargs) for a schema: required tensors get a probe shape,
    optional ones None then a tensor; non-tensor arguments keep their defaults,
    required ones get a simple value (bools both ways)."""
    import itertools

    import torch

    C = torch._C

    def is_tensor(t) -> bool:
        return isinstance(t, C.TensorType)

    def choices(arg, shape):
        t = arg.type
        # index-like arguments need integers (embedding's indices, nll_loss's target)
        integer = arg.name in ("indices", "index", "target", "offsets")
        tensor = (lambda: torch.zeros(shape, dtype=torch.long)) if integer else \
            (lambda: torch.randn(shape))
        optional = isinstance(t, C.OptionalType)
        inner = t.getElementType() if optional else t
        if is_tensor(inner):
            return [None, tensor()] if optional else [tensor()]
        element = inner.getElementType() if isinstance(inner, C.ListType) else None
        if isinstance(element, C.OptionalType):
            element = element.getElementType()
        if element is not None and is_tensor(element):
            return [[tensor(), tensor()]]
        if arg.has_default_value():
            return [arg.default_value]
        if optional:
            return [None]
        if isinstance(inner, C.BoolType):
            return [False, True]
        if isinstance(inner, (C.IntType, C.SymIntType)):
            return [1, 0]
        if isinstance(inner, (C.FloatType, C.NumberType)):
            return [0.1, 1]
        if isinstance(element, (C.IntType, C.SymIntType)):
            return [[shape[-1]], [1], [1, 1]]  # e.g. normalized_shape, then sizes/dims
        raise LookupError(str(t))

    for shape in _PROBE_SHAPES:
        positional, keyword = [], []
        try:
            for arg in schema.arguments:
                (keyword if arg.kwarg_only else positional).append((arg.name,
                                                                     choices(arg, shape)))
        except LookupError:
            return
        combos = itertools.product(*[c for _, c in positional + keyword])
        for combo in itertools.islice(combos, _MAX_PROBES_PER_SHAPE):
            args = list(combo[:len(positional)])
            kwargs = {n: v for (n, _), v in zip(keyword, combo[len(positional):])}
            yield args, kwargs


def get_supported_ops(device: Any = None) -> SupportedOps:
    """Ops with a kernel registered for the device's dispatch key (PrivateUse1),
    sorted; aten ops without the 'aten::' prefix, custom ops with their
    namespace ('acme::fused_gelu'). The CPU fallback is not a kernel and is not
    listed; neither are torch's own c10d registrations.

    The result is a list; `"aten::conv2d" in ops` also accepts base names and
    composite ops that run without the fallback (see SupportedOps)."""
    import torch

    dev = _backends.resolve_device(device)  # loads it: registrations happen at import of _C
    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    names = sorted(_short(r) for r in regs
                   if r.split("::", 1)[0] not in _TORCH_OWNED_NAMESPACES)
    return SupportedOps(names, str(dev))


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

    # The tracer names aten ops bare and other namespaces' ops in full.
    qualified = name if "::" in name else "aten::" + name
    try:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        return any(has(qualified, key) for key in
                   ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd",
                    "CompositeExplicitAutogradNonFunctional"))
    except RuntimeError:
        return False


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _kernel_dtypes(name: str, routed: dict, arg_dtypes: dict, device_dtypes: set[str],
                   note: str) -> tuple[str, str]:
    """(status, note) of a native op whose kernel computes only `routed["dtypes"]` for the
    arguments `routed["args"]` (the backend's op_dtypes table): the calls that pass another
    dtype there leave the kernel, to the CPU fallback (or fail, for an op without a CPU
    kernel). Every such call: the op's status says so; some: its note names the dtypes.
    Dtypes the device lacks altogether have check_ops' own note."""
    allowed = set(routed["dtypes"])
    seen = {_dtype_name(d) for arg in routed["args"] for d in arg_dtypes.get(arg, ())}
    outside = sorted((seen & device_dtypes) - allowed)
    if not outside:
        return "native", note
    where = routed.get("narrowed_in") or "its op spec"
    falls_back = routed.get("falls_back", True)
    leave = "run on the CPU fallback" if falls_back else "raise (the op has no CPU kernel)"
    why = (f"{name}'s kernel computes {', '.join(routed['dtypes'])} only ({where}): "
           f"{', '.join(outside)} calls {leave}")
    note = f"{note}; {why}" if note else why
    if seen & allowed:
        return "native", note
    return ("fallback" if falls_back else "error"), note


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
    # Kernels that compute fewer dtypes than the device (the op spec's list, or device.yaml
    # narrowing it): their wrappers send other dtypes to the fallback. Backends generated
    # before the table existed do not ship it: their ops are judged by the device's dtypes.
    op_dtypes = mod.op_dtypes() if hasattr(mod, "op_dtypes") else {}

    cpu_model = copy.deepcopy(model).to("cpu") if isinstance(model, torch.nn.Module) else model
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    inputs = tree_map(lambda t: t.detach().to("cpu").requires_grad_(t.requires_grad)
                      if isinstance(t, torch.Tensor) else t, inputs)
    with record_ops() as trace:
        out = cpu_model(*inputs)
        if backward:
            if loss_fn:
                loss = loss_fn(out)
            else:
                loss = sum(t.float().sum() for t in tree_leaves(out)
                           if isinstance(t, torch.Tensor) and t.is_floating_point())
                if not isinstance(loss, torch.Tensor):  # sum() of nothing: 0
                    raise ValueError("check_ops(backward=True): the model's output has no floating-point "
                                     "tensor to sum for backward; pass loss_fn=")
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
        kernel_op = name  # the registered op whose kernel runs it
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
                status, note, kernel_op = "native", f"via {out_op}", out_op
            else:
                status, note = "fallback", f"via {out_op or 'its out overload'}"
        else:
            status = "fallback"
        if status == "native" and kernel_op in op_dtypes:
            status, note = _kernel_dtypes(kernel_op, op_dtypes[kernel_op], trace.arg_dtypes.get(name, {}),
                                          device_dtypes, note)
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
