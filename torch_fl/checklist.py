"""The production-readiness checklist of the Torch-FL article (section 5.3), as
a check that runs: `torch_fl.readiness(device, model, inputs)` and
`flsdk readiness`.

Each of the seven items gives pass / warn / fail and the evidence behind it:

1. versions_pinned    installed driver and runtime equal what the backend was
                      built with (the runtime compiles its versions in), or, for a
                      backend that loads the installed driver at run time (an
                      OpenCL ICD), the driver implements at least the API it was
                      built against; and the running torch is the one the
                      backend was built for;
2. versions_recorded  torch, torch_fl, flsdk, backend, runtime and driver
                      versions are written to a record file; a later run compares
                      against it (a difference warns);
3. precision          every layer of the model against CPU, forward and
                      gradients (torch_fl.compare_model), within tolerance;
4. memory             peak device memory of one training step against the
                      allocator's pool limit and the device capacity, with headroom;
5. fallback           ops the step sends to the CPU fallback, with their share of
                      the step's time; a fallback on conv or matmul is a fail;
6. bandwidth          all_reduce between two devices (two processes, staged
                      process group) over a size sweep, against a minimum;
7. error_handling     an out-of-memory is a catchable torch.OutOfMemoryError and
                      the device works afterwards (real and injected); a lost
                      device is reported as an error naming it (injected).

Without a model, items 3-5 warn "not checked". A check that cannot run (the
backend cannot inject faults, one device only) warns instead of passing.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _backends

__all__ = ["readiness", "ReadinessReport", "Check", "DEFAULT_RECORD", "FALLBACK_FAIL_PATTERN"]

PASS, WARN, FAIL = "pass", "warn", "fail"
DEFAULT_RECORD = "torch_fl.lock.json"
# Fallback of these ops is a fail (the article: conv and matmul must be native).
FALLBACK_FAIL_PATTERN = re.compile(
    r"^(_?conv|convolution|cudnn_conv|mkldnn_conv|matmul|mm|bmm|addmm|addbmm|baddbmm|addmv|mv|"
    r"linear|_addmm_activation|dot|vdot)")
DEFAULT_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22)  # bytes per all_reduce
BANDWIDTH_TIMEOUT = 120  # seconds for the two worker processes


@dataclass
class Check:
    id: str
    title: str
    status: str                    # pass | warn | fail
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReadinessReport:
    device: str
    model: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def status(self) -> str:
        found = {c.status for c in self.checks}
        return FAIL if FAIL in found else WARN if WARN in found else PASS

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return self.status != FAIL

    def __getitem__(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "model": self.model, "status": self.status,
                "checks": [asdict(c) for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def table(self) -> str:
        lines = [f"production readiness of {self.device}"
                 + (f" with {self.model}" if self.model else "") + f": {self.status.upper()}"]
        width = max(len(c.id) for c in self.checks) if self.checks else 0
        for i, c in enumerate(self.checks, 1):
            lines.append(f"{i}. [{c.status.upper():4}] {c.id:<{width}}  {c.summary}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# ---------------------------------------------------------------- 1 + 2 versions

def _versions(mod) -> dict[str, Any]:
    import torch

    from . import __version__
    from .compat import _dist_version, runtime_versions

    entry = next((e for e in _backends.entries() if e.name == mod.NAME), None)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_fl": __version__,
        "flsdk_generated_backend": getattr(mod, "FLSDK_VERSION", None),
        "backend": mod.NAME,
        "backend_package": getattr(mod, "PACKAGE", None),
        "backend_version": _dist_version(entry.dist if entry else None),
        "backend_built_for_torch": getattr(mod, "TORCH_VERSION", None),
        **{f"{k}_version": v for k, v in runtime_versions(mod).items()},
    }


def _check_pinned(versions: dict[str, Any]) -> Check:
    ev = {k: versions.get(k) for k in ("torch", "backend_built_for_torch", "runtime_version",
                                       "driver_version", "built_driver_version", "api_version",
                                       "built_api_version")}
    title = "driver and runtime versions pinned"
    built_torch = (versions["backend_built_for_torch"] or "").split("+")[0]
    if built_torch != versions["torch"].split("+")[0]:
        return Check("versions_pinned", title, FAIL, f"backend built for torch {built_torch}, "
                     f"running {versions['torch']}", ev)
    if not versions.get("built_driver_version") and versions.get("built_api_version"):
        return _check_api(versions, title, ev)
    if not versions["driver_version"] or not versions["built_driver_version"]:
        return Check("versions_pinned", title, WARN, "the backend's runtime does not report its "
                     "driver/runtime versions (runtime options driver_version, "
                     "built_driver_version): cannot check they are pinned", ev)
    if versions["driver_version"] != versions["built_driver_version"]:
        return Check("versions_pinned", title, WARN,
                     f"installed driver {versions['driver_version']} differs from the "
                     f"{versions['built_driver_version']} the backend was built and tested with "
                     "(same major: it runs, but it is not the tested stack)", ev)
    return Check("versions_pinned", title, PASS,
                 f"driver {versions['driver_version']} and runtime {versions['runtime_version']} "
                 f"as built; torch {versions['torch']} as built", ev)


def _check_api(versions: dict[str, Any], title: str, ev: dict[str, Any]) -> Check:
    """A backend that loads the installed driver at run time (an OpenCL ICD) is
    built against an API, not a driver: the driver found must implement at least
    that API; which driver it is goes into the evidence and the record."""
    from .compat import api_at_least

    needed, found = versions["built_api_version"], versions.get("api_version")
    driver = versions.get("driver_version") or "?"
    if not found:
        return Check("versions_pinned", title, WARN, f"the backend needs {needed} but its runtime "
                     "does not report the API the driver implements (runtime option api_version)", ev)
    if not api_at_least(found, needed):
        return Check("versions_pinned", title, FAIL, f"the driver found (version {driver}) implements "
                     f"{found}, older than the {needed} the backend was built against", ev)
    return Check("versions_pinned", title, PASS,
                 f"driver {driver}, loaded at run time, implements {found}: at least the {needed} "
                 f"the backend was built against; torch {versions['torch']} as built "
                 "(versions_recorded keeps the driver found)", ev)


def _check_recorded(versions: dict[str, Any], record: str | os.PathLike | None,
                    update: bool) -> Check:
    title = "torch, torch_fl and backend versions recorded"
    if record is None:
        return Check("versions_recorded", title, WARN, "no record file given (record=None)",
                     {"versions": versions})
    path = Path(record)
    ev: dict[str, Any] = {"record": str(path), "versions": versions}
    previous = None
    if path.is_file():
        try:
            previous = json.loads(path.read_text()).get("versions")
        except (OSError, ValueError) as exc:
            return Check("versions_recorded", title, FAIL, f"{path} is not a readable record: "
                         f"{exc}", ev)
    if previous is not None and previous != versions and not update:
        changed = {k: [previous.get(k), v] for k, v in versions.items() if previous.get(k) != v}
        ev["changed"] = changed
        return Check("versions_recorded", title, WARN,
                     f"versions differ from the record {path}: "
                     + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
                     + " (rerun with update_record=True / --update-record to accept)", ev)
    if previous == versions:
        return Check("versions_recorded", title, PASS, f"matches the record {path}", ev)
    try:
        path.write_text(json.dumps({"written_by": "torch_fl.readiness",
                                    "date": datetime.datetime.now(datetime.timezone.utc)
                                    .isoformat(timespec="seconds"),
                                    "versions": versions}, indent=2) + "\n")
    except OSError as exc:
        return Check("versions_recorded", title, FAIL, f"cannot write the record {path}: {exc}",
                     ev)
    return Check("versions_recorded", title, PASS, f"recorded to {path}", ev)


# ---------------------------------------------------------------- 3 precision

def _check_precision(model, inputs, device, loss_fn, targets, atol, rtol) -> Check:
    from .compare import compare_model

    title = "every layer precision-aligned against CPU"
    report = compare_model(model, inputs, "cpu", device, loss_fn=loss_fn, targets=targets,
                           atol=atol, rtol=rtol, train=False)
    rows = report.forward + report.grads
    worst = max(rows, key=lambda d: d.max_abs, default=None)
    ev = {"layers": len(report.forward), "gradients": len(report.grads), "atol": atol,
          "rtol": rtol, "first_divergent": report.first_divergent,
          "first_divergent_grad": report.first_divergent_grad,
          "worst": {"name": worst.name, "kind": worst.kind, "max_abs": worst.max_abs,
                    "max_rel": worst.max_rel} if worst else None,
          "loss_cpu": report.loss_a, "loss_device": report.loss_b,
          "missing": report.missing, "warnings": report.warnings}
    if report.ok:
        return Check("precision", title, PASS,
                     f"{len(report.forward)} layer outputs and {len(report.grads)} gradients "
                     f"within atol={atol:g} rtol={rtol:g} (worst {worst.name} "
                     f"max_abs {worst.max_abs:.2e})" if worst else "no layer to compare", ev)
    where = report.first_divergent or report.first_divergent_grad or "; ".join(
        report.missing + report.warnings)
    return Check("precision", title, FAIL, f"diverges from CPU first at {where}", ev)


# ---------------------------------------------------------------- 4 + 5 one step

def _loss(out, loss_fn, targets):
    import torch
    from torch.utils._pytree import tree_leaves

    if loss_fn is not None:
        return loss_fn(out, targets) if targets is not None else loss_fn(out)
    return sum(t.float().pow(2).mean() for t in tree_leaves(out)
               if isinstance(t, torch.Tensor) and t.is_floating_point())


def _measured_step(model, inputs, device, loss_fn, targets) -> dict[str, Any]:
    """One warm-up and one measured forward+backward on the device: peak memory,
    step time and the fallback log of the measured step."""
    import copy

    import torch

    from . import fallback, memory
    from .precision import _to

    dev_model = copy.deepcopy(model).to(device).train()
    args, tgt = _to(inputs, device), _to(targets, device)

    def step():
        for p in dev_model.parameters():
            p.grad = None
        _loss(dev_model(*args), loss_fn, tgt).backward()
        torch.accelerator.synchronize(device.index)

    step()
    memory.reset_peak_memory_stats(device)
    fallback.clear_fallback_log(device)
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    stats = memory.memory_stats(device)
    log = fallback.get_fallback_log(device)
    # drop the device copies before the caller measures the next model
    dev_model = args = tgt = None
    return {"seconds": seconds, "peak_allocated": int(stats.get("allocated_bytes.all.peak", 0)),
            "peak_reserved": int(stats.get("reserved_bytes.all.peak", 0)), "fallback_log": log}


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _check_memory(step: dict[str, Any], device, headroom: float) -> Check:
    import torch

    from . import memory

    title = "memory pool sized for the model"
    capacity = int(torch.accelerator.get_memory_info(device.index)[1])
    pool_mb = memory.get_memory_config(device).get("pool_limit_mb")
    pool = int(pool_mb * 2**20) if pool_mb else None
    limit = min(capacity, pool) if pool else capacity
    peak = step["peak_reserved"]
    ev = {"peak_allocated": step["peak_allocated"], "peak_reserved": peak, "pool_limit": pool,
          "capacity": capacity, "limit": limit, "headroom_wanted": headroom,
          "headroom": 1 - peak / limit if limit else 0.0}
    where = f"pool limit {_mib(pool)}" if pool and pool < capacity else f"capacity {_mib(capacity)}"
    text = (f"step peak {_mib(peak)} reserved ({_mib(step['peak_allocated'])} allocated) of "
            f"{where}")
    if peak > limit:
        return Check("memory", title, FAIL, text + ": does not fit", ev)
    if peak * (1 + headroom) > limit:
        return Check("memory", title, WARN, text + f": less than {headroom:.0%} headroom", ev)
    return Check("memory", title, PASS, text + f": {ev['headroom']:.0%} free", ev)


def _check_fallback(step: dict[str, Any], static_fallback: list[str]) -> Check:
    title = "fallback list reviewed"
    log = step["fallback_log"]
    total = step["seconds"]
    ops = [{"op": e["op"], "count": e["count"], "time_s": e["time_s"],
            "share": (e["time_s"] / total) if total else 0.0,
            "bytes_copied": e["bytes_copied"]} for e in log]
    names = sorted({o["op"] for o in ops} | set(static_fallback))
    critical = [n for n in names if FALLBACK_FAIL_PATTERN.match(n.split("::")[-1])]
    share = sum(o["share"] for o in ops)
    ev = {"step_seconds": total, "fallback_ops": ops, "traced_fallback": static_fallback,
          "fallback_share": share, "critical": critical}
    if critical:
        return Check("fallback", title, FAIL, f"conv/matmul on the CPU fallback: "
                     f"{', '.join(critical)} ({share:.0%} of the step)", ev)
    if names:
        listed = ", ".join(f"{o['op']} x{o['count']} {o['share']:.1%}" for o in ops) or \
            ", ".join(names)
        return Check("fallback", title, WARN, f"{len(names)} op(s) fall back, {share:.1%} of the "
                     f"step: {listed}", ev)
    return Check("fallback", title, PASS, "no op falls back to the CPU", ev)


# ---------------------------------------------------------------- 6 bandwidth

_WORKER = r"""
import json, sys, time, datetime
import torch, torch.distributed as dist, torch_fl
rank, world, path, device_type, sizes = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                         sys.argv[4], json.loads(sys.argv[5]))
store = dist.FileStore(path, world)
dev = torch_fl.init_distributed(f"{device_type}:{rank}", rank, world, store=store,
                                timeout=datetime.timedelta(seconds=60))
backend = dist.group.WORLD._get_backend(dev)
engine = {"name": backend.name(),
          "engine": {True: "native", False: "staged"}.get(getattr(backend, "native", None), "?")}
rows = []
for size in sizes:
    x = torch.ones(max(1, size // 4), device=dev)
    dist.all_reduce(x)  # warm-up
    iters = 3 if size >= 1 << 20 else 10
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.accelerator.synchronize(dev.index)
    seconds = (time.perf_counter() - start) / iters
    assert float(x[0].cpu()) == world ** (iters + 1), "all_reduce gave a wrong sum"
    rows.append({"bytes": x.numel() * 4, "seconds": seconds})
dist.destroy_process_group()
if rank == 0:
    print("RESULT " + json.dumps({"rows": rows, **engine}))
"""


def _measure_bandwidth(device_type: str, sizes, world: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="torch_fl_bw_") as tmp:
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(r), str(world), store,
                                   device_type, json.dumps(list(sizes))],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(world)]
        outputs = []
        try:
            for p in procs:
                outputs.append(p.communicate(timeout=BANDWIDTH_TIMEOUT))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0:
            raise RuntimeError(f"all_reduce worker failed (exit {p.returncode}): "
                               f"{err.strip().splitlines()[-1] if err.strip() else ''}")
    line = next(ln for ln in outputs[0][0].splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    for r in result["rows"]:  # bus bandwidth, as NCCL's tests define it for all_reduce
        r["bus_gbps"] = 2 * (world - 1) / world * r["bytes"] / r["seconds"] / 1e9
    return result


def _check_bandwidth(device, min_gbps: float, sizes, measure: bool) -> Check:
    import torch

    title = "communication bandwidth between devices"
    count = torch.accelerator.device_count()
    ev: dict[str, Any] = {"min_gbps": min_gbps, "devices": count}
    if not measure:
        return Check("bandwidth", title, WARN, "not measured (bandwidth=False)", ev)
    if count < 2:
        return Check("bandwidth", title, WARN, f"only {count} device: nothing to measure", ev)
    try:
        result = _measure_bandwidth(device.type, sizes)
    except Exception as exc:
        ev["error"] = f"{type(exc).__name__}: {exc}"
        return Check("bandwidth", title, FAIL, f"all_reduce between 2 devices failed: {exc}", ev)
    rows = result["rows"]
    ev.update(sweep=rows, backend=result["name"], engine=result["engine"])
    best = max(r["bus_gbps"] for r in rows)
    sweep = ", ".join(f"{_human(r['bytes'])} {r['bus_gbps']:.3g}" for r in rows)
    text = (f"all_reduce bus bandwidth GB/s ({result['name']}, {result['engine']}): {sweep}; "
            f"best {best:.3g} vs minimum {min_gbps:g}")
    return Check("bandwidth", title, PASS if best >= min_gbps else FAIL, text, ev)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n} B"


# ---------------------------------------------------------------- 7 faults

def _check_errors(device, mod) -> Check:
    import torch

    title = "error handling: OOM recoverable, device loss reported"
    native = mod.native()
    ev: dict[str, Any] = {}
    problems, unchecked = [], []

    def works() -> bool:
        y = torch.arange(4.0, device=device) * 2
        return float(y.sum().cpu()) == 12.0

    # a real out-of-memory: more than the device holds
    capacity = int(torch.accelerator.get_memory_info(device.index)[1])
    try:
        torch.empty(capacity + (1 << 20), dtype=torch.uint8, device=device)
        problems.append("allocating more than the capacity did not fail")
    except torch.OutOfMemoryError as exc:
        ev["oom"] = str(exc).splitlines()[0]
    except RuntimeError as exc:
        problems.append(f"OOM is not a torch.OutOfMemoryError: {exc}")
    ev["works_after_oom"] = works()
    # injected allocation failure and device loss (runtime options, if the backend has them)
    setter = getattr(native, "runtime_set_option", None)
    if setter is None:
        unchecked.append("the backend has no runtime_set_option: cannot inject faults")
    else:
        try:
            # an empty cache makes the next allocation reach the runtime
            torch.accelerator.synchronize(device.index)
            mod.native().empty_cache()
            setter("fault_malloc", "1")
            try:
                torch.empty(3 << 20, dtype=torch.uint8, device=device)
                problems.append("an injected allocation failure was not reported")
            except torch.OutOfMemoryError as exc:
                ev["injected_oom"] = str(exc).splitlines()[0]
            finally:
                setter("fault_malloc", "0")
            ev["works_after_injected_oom"] = works()
        except RuntimeError as exc:
            unchecked.append(f"cannot inject an allocation failure: {exc}")
        x = torch.ones(8, device=device)
        try:
            setter("device_lost", str(device.index))
        except RuntimeError as exc:
            unchecked.append(f"cannot inject device loss: {exc}")
        else:
            try:
                float(x.sum().cpu())
                problems.append("work on a lost device did not fail")
            except RuntimeError as exc:
                ev["device_lost"] = str(exc).splitlines()[0]
                if str(device.index) not in ev["device_lost"] or "lost" not in ev["device_lost"]:
                    problems.append("device loss error does not name the lost device: "
                                    + ev["device_lost"])
            finally:
                setter("device_lost", "none")
            ev["works_after_device_restored"] = works()
    for key in ("works_after_oom", "works_after_injected_oom", "works_after_device_restored"):
        if ev.get(key) is False:
            problems.append(f"device unusable after the fault ({key})")
    ev["problems"], ev["unchecked"] = problems, unchecked
    if problems:
        return Check("error_handling", title, FAIL, "; ".join(problems), ev)
    if unchecked:
        return Check("error_handling", title, WARN, "OOM recoverable; " + "; ".join(unchecked), ev)
    return Check("error_handling", title, PASS, "OOM (real and injected) raised "
                 "torch.OutOfMemoryError and the device kept working; injected device loss "
                 f"reported: {ev['device_lost']!r}", ev)


# ---------------------------------------------------------------- entry point

def readiness(device: Any = None, model: Any = None, example_inputs: Any = None, *,
              loss_fn: Callable | None = None, targets: Any = None,
              model_name: str | None = None,
              record: str | os.PathLike | None = DEFAULT_RECORD, update_record: bool = False,
              atol: float = 1e-3, rtol: float = 1e-3, headroom: float = 0.2,
              min_bandwidth_gbps: float = 0.01, bandwidth_sizes=DEFAULT_SIZES,
              bandwidth: bool = True, faults: bool = True) -> ReadinessReport:
    """Walk the article's production checklist on `device` (see the module doc).

    * model / example_inputs (a tensor or tuple of args) / loss_fn(out[, targets])
      / targets: the workload of items 3-5 (loss default: mean of squares).
    * record: the version record file (None: not written); update_record accepts
      changed versions.
    * headroom: free fraction of the memory limit wanted above the step's peak.
    * min_bandwidth_gbps: the best all_reduce bus bandwidth of the sweep must
      reach it. The default (0.01 GB/s) is only a floor that catches a broken
      link; set what your training needs. bandwidth=False skips the measurement
      (two processes) and warns.
    * faults=False skips item 7 (it injects an OOM and a device loss)."""
    import torch

    dev = _backends.resolve_device(device)
    if dev.type == "cpu":
        raise ValueError("readiness checks a backend device (e.g. 'acme:0'), not cpu")
    mod = _backends.backend(dev)
    name = model_name or (type(model).__name__ if model is not None else None)
    report = ReadinessReport(device=str(dev), model=name)
    versions = _versions(mod)
    report.checks.append(_check_pinned(versions))
    report.checks.append(_check_recorded(versions, record, update_record))
    if model is None:
        for cid, title in (("precision", "every layer precision-aligned against CPU"),
                           ("memory", "memory pool sized for the model"),
                           ("fallback", "fallback list reviewed")):
            report.checks.append(Check(cid, title, WARN, "not checked: no model given"))
    else:
        from .ops import check_ops

        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        report.checks.append(_check_precision(model, inputs, dev, loss_fn, targets, atol, rtol))
        step = _measured_step(model, inputs, dev, loss_fn, targets)
        report.checks.append(_check_memory(step, dev, headroom))
        traced = check_ops(model, inputs, dev, backward=True,
                           loss_fn=(lambda out: _loss(out, loss_fn, targets)))
        report.checks.append(_check_fallback(step, traced.fallback + traced.errors))
        torch.accelerator.synchronize(dev.index)
    report.checks.append(_check_bandwidth(dev, min_bandwidth_gbps, bandwidth_sizes, bandwidth))
    if faults:
        report.checks.append(_check_errors(dev, mod))
    else:
        report.checks.append(Check("error_handling", "error handling: OOM recoverable, device "
                                   "loss reported", WARN, "not checked (faults=False)"))
    return report
