"""Layer-by-layer precision comparison of one model on two devices.

The model is copied to both devices with identical weights, run on the same
inputs, and every module's forward output (forward hooks) and every
parameter's gradient is compared with device_a as the reference. The first
layer whose output leaves the tolerance is where a wrong kernel shows up
first: layers after it inherit its error.

    >>> report = torch_fl.compare_model(model, (x,), "cpu", "acme:0")
    >>> print(report.table())
    >>> report.first_divergent          # 'layer3.0.conv1' or None

With `bisect=True` a diverging model is run again on device_b with ops routed to the
CPU (torch_fl.set_op_route) until the smallest set of ops whose routing removes the
divergence is found: `report.bisection.ops` (e.g. ['aten::mm']), with each op's spec
line and kernel.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _backends
from .precision import TensorDiff, tensor_diff

__all__ = ["compare_model", "ModelCompareReport", "LayerDiff", "Bisection"]


@dataclass
class LayerDiff:
    name: str            # module path ('layer1.0.conv1'); '#2' marks a module's 2nd call
    kind: str            # 'forward' (module output) or 'grad' (a parameter's gradient)
    module_type: str
    shape: list[int]
    max_abs: float
    max_rel: float
    mean_abs: float
    cosine: float
    ok: bool
    note: str = ""


@dataclass
class Bisection:
    """Which ops make device_b diverge: the smallest set whose routing to the CPU
    (torch_fl.set_op_route) removes the divergence, found by bisection."""

    ops: list[str]                 # 'aten::mm', ...: route these and the model agrees
    found: bool                    # False: routing every candidate did not remove it
    candidates: list[str]          # the native ops the model reached on device_b
    runs: int                      # runs of the model on device_b the search took
    specs: dict[str, str] = field(default_factory=dict)  # op -> 'spec file:line, kernel k_mm in file'
    note: str = ""

    def summary(self) -> str:
        if not self.found:
            return f"bisection: {self.note}"
        where = "; ".join(f"{op}: {self.specs.get(op, 'spec unknown')}" for op in self.ops)
        return (f"bisection: routing {', '.join(self.ops)} to the CPU removes the divergence "
                f"({self.runs} runs over {len(self.candidates)} native ops) - {where}")


@dataclass
class ModelCompareReport:
    model: str
    device_a: str
    device_b: str
    atol: float
    rtol: float
    forward: list[LayerDiff] = field(default_factory=list)   # in execution order
    grads: list[LayerDiff] = field(default_factory=list)     # in backward order
    loss_a: float | None = None
    loss_b: float | None = None
    missing: list[str] = field(default_factory=list)         # seen on one device only
    warnings: list[str] = field(default_factory=list)        # e.g. weight tying lost
    bisection: Bisection | None = None                       # compare_model(bisect=True)

    @property
    def first_divergent(self) -> str | None:
        """First module (execution order) whose forward output is out of tolerance."""
        return next((d.name for d in self.forward if not d.ok), None)

    @property
    def first_divergent_grad(self) -> str | None:
        """First parameter gradient (backward order: output side first) out of tolerance."""
        return next((d.name for d in self.grads if not d.ok), None)

    @property
    def ok(self) -> bool:
        return self.agrees and not self.missing and not self.warnings

    @property
    def agrees(self) -> bool:
        """Every compared layer output and gradient within tolerance."""
        return all(d.ok for d in self.forward + self.grads)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items()}
        out["first_divergent"] = self.first_divergent
        out["first_divergent_grad"] = self.first_divergent_grad
        out["ok"] = self.ok
        return out

    def to_json(self, path: str | None = None) -> str:
        """The report as JSON (non-finite numbers as strings); written to path if given."""
        def clean(v):
            if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                return str(v)
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v
        text = json.dumps(clean(self.to_dict()), indent=2)
        if path:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def table(self, all_rows: bool = True) -> str:
        """Readable report. all_rows=False lists only layers out of tolerance."""
        def fmt_loss(v):
            return "-" if v is None else f"{v:.6g}"
        lines = [
            f"precision report: {self.model}: {self.device_b} vs {self.device_a} (reference); "
            f"atol={self.atol:g} rtol={self.rtol:g}",
            f"loss: {fmt_loss(self.loss_a)} ({self.device_a}) vs {fmt_loss(self.loss_b)} "
            f"({self.device_b})",
            f"first divergent layer (forward): {self.first_divergent or 'none'}",
        ]
        if self.grads:
            lines.append(f"first divergent gradient: {self.first_divergent_grad or 'none'}")
        if self.missing:
            lines.append("seen on one device only: " + ", ".join(self.missing))
        lines += [f"WARNING: {w}" for w in self.warnings]
        if self.bisection is not None:
            lines.append(self.bisection.summary())
        rows = [d for d in self.forward + self.grads if all_rows or not d.ok]
        if rows:
            width = max(len(d.name) for d in rows)
            twidth = max(len(d.module_type) for d in rows)
            lines.append(f"{'kind':<7}  {'layer':<{width}}  {'type':<{twidth}}  {'max_abs':>9}  "
                         f"{'max_rel':>9}  {'cosine':>10}  ok")
            for d in rows:
                mark = "ok" if d.ok else "DIVERGES"
                note = f"  {d.note}" if d.note else ""
                lines.append(f"{d.kind:<7}  {d.name:<{width}}  {d.module_type:<{twidth}}  "
                             f"{d.max_abs:>9.2e}  {d.max_rel:>9.2e}  {d.cosine:>10.7f}  "
                             f"{mark}{note}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _shared_parameters(model) -> list[tuple[str, ...]]:
    """Groups of parameter names that are one tensor (tied weights)."""
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return sorted(tuple(g) for g in groups.values() if len(g) > 1)


def _merge(diffs: list[TensorDiff]) -> dict[str, Any]:
    """Several output tensors of one layer -> the worst of each metric."""
    return dict(
        shape=diffs[0].shape if len(diffs) == 1 else [],
        max_abs=max(d.max_abs for d in diffs),
        max_rel=max(d.max_rel for d in diffs),
        mean_abs=max(d.mean_abs for d in diffs),
        cosine=min(d.cosine for d in diffs),
        ok=all(d.ok for d in diffs),
        note="; ".join(d.note for d in diffs if d.note),
    )


def _run(model, inputs, device, loss_fn, targets, backward):
    """Run one copy; returns (forward records {name: (type, [cpu tensors])} in
    call order, grads {param name: (module type, cpu tensor)}, loss)."""
    import torch
    from torch.utils._pytree import tree_leaves

    from .precision import _to

    records: dict[str, tuple[str, list]] = {}
    calls: dict[str, int] = {}
    handles = []

    def hook_for(name: str, module):
        def hook(_mod, _args, output):
            calls[name] = calls.get(name, 0) + 1
            key = name if calls[name] == 1 else f"{name}#{calls[name]}"
            # Copy now: an in-place op later (ReLU(inplace=True)) would change it.
            tensors = [t.detach().to("cpu", copy=True) for t in tree_leaves(output)
                       if isinstance(t, torch.Tensor)]
            if tensors:
                records[key] = (type(module).__name__, tensors)
        return hook

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(hook_for(name or "(model)", module)))
    try:
        args = _to(inputs, device)
        out = model(*args)
        loss = None
        if backward:
            if loss_fn is not None:
                loss = loss_fn(out, _to(targets, device)) if targets is not None else loss_fn(out)
            else:
                # Mean of squares: its gradient depends on the output values, so a
                # forward error also shows up in every gradient.
                loss = sum(t.float().pow(2).mean() for t in tree_leaves(out)
                           if isinstance(t, torch.Tensor) and t.is_floating_point())
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    grads = {}
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if p.grad is not None:
                full = f"{mname}.{pname}" if mname else pname
                grads[full] = (type(module).__name__, p.grad.detach().to("cpu", copy=True))
    loss_value = float(loss.detach().to("cpu")) if loss is not None else None
    return records, grads, loss_value


def _report(model, dev_a, dev_b, atol, rtol, run_a, run_b, warnings) -> ModelCompareReport:
    """The layer-by-layer comparison of run_b with run_a (each `_run`'s result)."""
    rec_a, grads_a, loss_a = run_a
    rec_b, grads_b, loss_b = run_b
    report = ModelCompareReport(model=type(model).__name__, device_a=str(dev_a),
                                device_b=str(dev_b), atol=atol, rtol=rtol,
                                loss_a=loss_a, loss_b=loss_b, warnings=list(warnings))
    report.missing = sorted((set(rec_a) ^ set(rec_b)) | (set(grads_a) ^ set(grads_b)))
    for name, (mtype, tensors_a) in rec_a.items():  # dicts keep call order
        if name not in rec_b:
            continue
        tensors_b = rec_b[name][1]
        if len(tensors_a) != len(tensors_b):
            report.forward.append(LayerDiff(name, "forward", mtype, [], float("inf"),
                                            float("inf"), float("inf"), float("nan"), False,
                                            f"{len(tensors_a)} vs {len(tensors_b)} outputs"))
            continue
        diffs = [tensor_diff(a, b, atol, rtol) for a, b in zip(tensors_a, tensors_b)]
        report.forward.append(LayerDiff(name, "forward", mtype, **_merge(diffs)))
    # Backward order: parameters of the last executed modules get gradients first.
    module_order = [n.split("#", 1)[0] for n in rec_a]
    first_call = {n: i for i, n in reversed(list(enumerate(module_order)))}

    def backward_rank(pname: str) -> int:
        owner = pname.rsplit(".", 1)[0] if "." in pname else "(model)"
        return -first_call.get(owner, -1)
    for pname in sorted(set(grads_a) & set(grads_b), key=backward_rank):
        mtype, ga = grads_a[pname]
        d = tensor_diff(ga, grads_b[pname][1], atol, rtol)
        report.grads.append(LayerDiff(pname, "grad", mtype, **_merge([d])))
    return report


def _device_copy(model, dev, train):
    m = copy.deepcopy(model).to(dev)
    if train is not None:
        m.train(train)
    return m


def compare_model(model, inputs: Any, device_a: Any = "cpu", device_b: Any = None, *,
                  loss_fn: Callable | None = None, targets: Any = None,
                  atol: float = 1e-3, rtol: float = 1e-3, backward: bool = True,
                  train: bool | None = None, bisect: bool = False) -> ModelCompareReport:
    """Compare `model(*inputs)` on device_a (reference) and device_b layer by layer.

    * model: an nn.Module on any device; it is deep-copied, never modified.
    * inputs: a tensor or tuple of args (copied to each device).
    * loss_fn: loss_fn(output, targets) if targets is given, else loss_fn(output);
      default: mean of squares of the float outputs. backward=False skips gradients.
    * train: put both copies in train (True) / eval (False) mode; None keeps the
      model's mode. Dropout draws different random numbers on two devices, so
      compare models with dropout in eval mode.
    * bisect: when device_b diverges, find the smallest set of ops whose routing to
      the CPU removes the divergence (report.bisection; device_b must be a backend's).
    """
    import torch

    dev_a = _backends.resolve_device(device_a)
    dev_b = _backends.resolve_device(device_b if device_b is not None
                                     else _backends.first_device())
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    copies = [_device_copy(model, dev, train) for dev in (dev_a, dev_b)]
    warnings = []
    tied_a, tied_b = _shared_parameters(copies[0]), _shared_parameters(copies[1])
    if tied_a != tied_b:
        # Module.to() makes one new Parameter per module when the two devices'
        # tensors are not "shallow-copy compatible": tied weights come apart and
        # training silently changes (each copy gets only part of the gradient).
        lost = [" = ".join(g) for g in tied_a if g not in tied_b]
        warnings.append(f"parameter sharing differs: tied on {dev_a} but not on {dev_b}: "
                        + "; ".join(lost) + " (model.to() broke weight tying; the backend "
                        "needs a PrivateUse1 kernel for aten::_has_compatible_shallow_copy_type)")
    # Same seed before each run: ops drawing random numbers on the CPU agree.
    torch.manual_seed(0)
    run_a = _run(copies[0], args, dev_a, loss_fn, targets, backward)
    torch.manual_seed(0)
    run_b = _run(copies[1], args, dev_b, loss_fn, targets, backward)
    report = _report(model, dev_a, dev_b, atol, rtol, run_a, run_b, warnings)
    if bisect and not report.agrees:
        def run_on_b():
            torch.manual_seed(0)
            run = _run(_device_copy(model, dev_b, train), args, dev_b, loss_fn, targets, backward)
            return _report(model, dev_a, dev_b, atol, rtol, run_a, run, warnings).agrees
        report.bisection = bisect_ops(run_on_b, dev_b)
    return report


def bisect_ops(agrees: Callable[[], bool], device: Any) -> Bisection:
    """The smallest set of native ops whose routing to the CPU makes `agrees()` (a run
    of the model on `device` compared with the reference) true.

    Candidates are the ops the model reaches natively: with every routable op of the
    backend routed, the fallback log names the routed calls. Then, with the ops found
    so far routed, a binary search over the remaining candidates finds the shortest
    prefix whose routing removes the divergence; its last op is needed, and the search
    repeats until the found ops alone suffice (assuming that routing more ops to the
    CPU never brings a divergence back). Each found op is then checked to be needed.
    The user's routes and fallback mode are restored afterwards."""
    dev = _backends.resolve_device(device)
    if dev.type == "cpu":
        return Bisection([], False, [], 0, note=f"{dev} is the CPU: nothing to route")
    mod = _backends.backend(dev)
    native = mod.native()
    saved_routes = dict(native.op_routes())
    saved_mode = bool(native.fallback_enabled())
    runs = 0

    def route(ops) -> None:
        for op in list(native.op_routes()):
            native.set_op_route(op, False, "")
        for op in ops:
            native.set_op_route(op, True, "compare_model bisection")

    def agrees_with(ops) -> bool:
        nonlocal runs
        route(ops)
        runs += 1
        return agrees()

    try:
        native.set_fallback_enabled(True)
        native.clear_fallback_log()
        everything = sorted(native.routable_ops())
        if not agrees_with(everything):
            return Bisection([], False, [], runs, note=(
                "routing every native op to the CPU does not remove the divergence: it is "
                "not in a kernel (the glue's copies, the model, or ops without a CPU kernel)"))
        reached = {e["op"] for e in native.fallback_log() if e.get("reason", "").startswith("routed")}
        candidates = [op for op in everything if op in reached]
        found: list[str] = []
        rest = list(candidates)
        while not agrees_with(found):
            lo, hi = 1, len(rest)  # routing found + rest[:hi] agrees
            while lo < hi:
                mid = (lo + hi) // 2
                if agrees_with(found + rest[:mid]):
                    hi = mid
                else:
                    lo = mid + 1
            found.append(rest[hi - 1])
            rest = rest[:hi - 1]
            if not rest and not agrees_with(found):
                return Bisection([f"aten::{op}" for op in found], False,
                                 [f"aten::{op}" for op in candidates], runs,
                                 note="the divergence comes and goes with routing (not monotone)")
        for op in list(found):  # each one needed?
            if len(found) > 1 and agrees_with([o for o in found if o != op]):
                found.remove(op)
    finally:
        route([])
        for op, origin in saved_routes.items():
            native.set_op_route(op, True, origin)
        native.set_fallback_enabled(saved_mode)
    specs_of = getattr(mod, "op_specs", None)
    table = specs_of() if specs_of else {}
    specs = {}
    for op in found:
        if op in table:
            spec, kernel, kernel_file = table[op]
            specs[f"aten::{op}"] = f"{spec}, kernel {kernel}" + (f" in {kernel_file}" if kernel_file else "")
    return Bisection([f"aten::{op}" for op in found], True, [f"aten::{op}" for op in candidates],
                     runs, specs)
