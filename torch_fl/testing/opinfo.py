"""PyTorch's own OpInfo suite against any flsdk backend.

    from torch_fl.testing import opinfo
    report = opinfo.run_opinfo("acme:0", dtypes=["float32"], phases=["forward", "grad"])
    print(report.markdown())
    report.to_json("opinfo.json")

Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` (from
the installed torch) is run on the device, sample by sample, and compared with
the CPU (torch_fl.testing.opinfo_check says how). Per op, dtype and phase
(forward, grad) the report has a status:

    pass       every compared sample matches the CPU
    mismatch   a sample's result differs from the CPU's
    error      the device raised where the CPU did not
    crash      the worker process died (signal, abort) or hung past the timeout
    skip       nothing to compare, with the reason (the CPU itself raises, the
               op is random, the OpInfo skips the CPU comparison, no gradient...)

and whether it ran natively (no op of the backend's CPU fallback log was hit).

Ops run in worker processes (`_opinfo_worker`), fed one op at a time; a worker
that dies marks its current op as a crash and a fresh worker takes the next op,
so one bad kernel does not end the run. `flsdk conformance --opinfo` is the
command-line face of `main()` below.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["run_opinfo", "OpInfoReport", "compare_baseline", "list_opinfos", "main",
           "STATUSES", "PHASES"]

STATUSES = ("pass", "mismatch", "error", "crash", "skip")
PHASES = ("forward", "grad")
FAILING = ("mismatch", "error", "crash")


# --- which ops ------------------------------------------------------------------

def list_opinfos(op_db: str | None = None, patterns: Iterable[str] | None = None) -> list[str]:
    """Ids ('name' or 'name.variant') of the OpInfos to run, in op_db order;
    `patterns` are fnmatch patterns over the ids (e.g. 'nn.functional.*')."""
    from .opinfo_db import load_op_db

    ids = [oid for oid, _ in load_op_db(op_db)]
    if not patterns:
        return ids
    patterns = list(patterns)
    chosen = [oid for oid in ids if any(fnmatch.fnmatchcase(oid, p) for p in patterns)]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(oid, p) for oid in ids)]
    if unmatched:
        raise ValueError(f"no OpInfo matches {', '.join(map(repr, unmatched))}")
    return chosen


def stratified_subset(ids: list[str], every: int) -> list[str]:
    """Every `every`-th op of each family (the id's first dotted part: torch
    functions, nn.functional, linalg, special, fft ...), so a small subset still
    covers each family; deterministic."""
    families: dict[str, list[str]] = {}
    for oid in ids:
        head = oid.split(".")[0]
        family = ".".join(oid.split(".")[:2]) if head in ("nn", "_refs") else head
        families.setdefault(family if "." in family or family in
                            ("linalg", "special", "fft", "masked", "sparse", "signal") else "torch",
                            []).append(oid)
    keep = set()
    for members in families.values():
        keep.update(members[::every])
    return [oid for oid in ids if oid in keep]


# --- the report -----------------------------------------------------------------

@dataclass
class OpInfoReport:
    device: str
    dtypes: list[str]
    phases: list[str]
    rows: list[dict] = field(default_factory=list)   # one per (op, dtype)
    seconds: float = 0.0
    torch_version: str = ""
    backend: str = ""

    def results(self, phase: str, dtype: str | None = None) -> list[tuple[dict, dict]]:
        return [(row, row[phase]) for row in self.rows
                if phase in row and (dtype is None or row["dtype"] == dtype)]

    def summary(self) -> dict:
        """{"forward": {"float32": {counts, tested, pass_pct, native_pct}}, ...}.
        tested = ops not skipped; pass % and native % are shares of tested."""
        out: dict[str, dict] = {}
        for phase in self.phases:
            out[phase] = {}
            for dtype in self.dtypes:
                res = [r for _, r in self.results(phase, dtype)]
                counts = {s: sum(r["status"] == s for r in res) for s in STATUSES}
                tested = len(res) - counts["skip"]
                native = sum(r["status"] != "skip" and r.get("native") is True for r in res)
                out[phase][dtype] = {
                    "ops": len(res), "tested": tested, "counts": counts,
                    "pass_pct": round(100.0 * counts["pass"] / tested, 2) if tested else None,
                    "native_pct": round(100.0 * native / tested, 2) if tested else None,
                }
        return out

    def to_dict(self) -> dict:
        return {"suite": "opinfo", "device": self.device, "backend": self.backend,
                "torch_version": self.torch_version, "dtypes": self.dtypes,
                "phases": self.phases, "seconds": round(self.seconds, 1),
                "summary": self.summary(), "ops": self.rows}

    def to_json(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    def summary_text(self) -> str:
        lines = []
        for phase, per_dtype in self.summary().items():
            for dtype, s in per_dtype.items():
                c = s["counts"]
                lines.append(
                    f"{phase:7} {dtype:9} {s['tested']:5} tested: pass {_pct(s['pass_pct'])}, "
                    f"native {_pct(s['native_pct'])}; " + ", ".join(f"{c[k]} {k}" for k in STATUSES))
        return "\n".join(lines)

    def markdown(self, failures_only: bool = False) -> str:
        head = [f"# OpInfo conformance: {self.device}",
                "",
                f"torch {self.torch_version}, {len({r['op'] for r in self.rows})} OpInfos, "
                f"dtypes {', '.join(self.dtypes)}, phases {', '.join(self.phases)}, "
                f"{self.seconds:.0f} s.",
                "",
                "| phase | dtype | tested | pass % | native % | " + " | ".join(STATUSES) + " |",
                "| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in STATUSES) + " |"]
        for phase, per_dtype in self.summary().items():
            for dtype, s in per_dtype.items():
                head.append(f"| {phase} | {dtype} | {s['tested']} | {_pct(s['pass_pct'])} | "
                            f"{_pct(s['native_pct'])} | "
                            + " | ".join(str(s["counts"][k]) for k in STATUSES) + " |")
        cols = []
        for phase in self.phases:
            cols += [phase, f"{phase} native"]
        head += ["", "| op | dtype | " + " | ".join(cols) + " | detail |",
                 "| --- | --- | " + " | ".join("---" for _ in cols) + " | --- |"]
        for row in self.rows:
            statuses = [row[p]["status"] for p in self.phases if p in row]
            if failures_only and not any(s in FAILING for s in statuses):
                continue
            cells, details = [], []
            for phase in self.phases:
                r = row.get(phase, {})
                cells += [r.get("status", ""), _native_cell(r)]
                if r.get("detail") and r.get("status") != "pass":
                    details.append(f"{phase}: {r['detail']}")
            detail = "; ".join(details).replace("|", "\\|").replace("\n", " ")
            head.append(f"| `{row['op']}` | {row['dtype']} | " + " | ".join(cells)
                        + f" | {detail[:300]} |")
        return "\n".join(head) + "\n"


    def failure_groups(self) -> dict[str, list[tuple[str, str, str, str]]]:
        """Failures grouped the way kernel authors act on them:
        {"crash" | "native-kernel mismatch" | "native-kernel error" |
         "fallback mismatch" | "fallback error": [(op, dtype, phase, detail)]}.
        native/fallback is that of the first failing sample (the fallback ops
        it hit are named in the detail)."""
        groups: dict[str, list] = {k: [] for k in (
            "crash", "native-kernel mismatch", "native-kernel error", "fallback mismatch",
            "fallback error")}
        for row in self.rows:
            for phase in self.phases:
                r = row.get(phase)
                if not r or r["status"] not in FAILING:
                    continue
                detail = r.get("detail") or ""
                if r["status"] == "crash":
                    groups["crash"].append((row["op"], row["dtype"], phase, detail))
                    continue
                used = r.get("failing_sample_fallback_ops") or []
                kind = f"{'fallback' if used else 'native-kernel'} {r['status']}"
                if used:
                    detail = f"[fallback: {', '.join(used)}] {detail}"
                groups[kind].append((row["op"], row["dtype"], phase, detail))
        return groups

    def failures_markdown(self) -> str:
        """The failures, grouped (failure_groups), one line per op and phase."""
        lines = [f"# OpInfo failures on {self.device}", "", self.summary_text(), ""]
        for group, items in self.failure_groups().items():
            lines.append(f"## {group} ({len(items)})")
            lines += [f"- `{op}` [{dtype}, {phase}]: {detail[:400]}"
                      for op, dtype, phase, detail in items] or ["- none"]
            lines.append("")
        return "\n".join(lines)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _native_cell(r: dict) -> str:
    if r.get("native") is None:
        return ""
    if r["native"]:
        return "native"
    return "fallback: " + ", ".join(r.get("fallback_ops", [])[:4])


def load_report(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())


def compare_baseline(report: OpInfoReport | dict, baseline: dict) -> tuple[list[str], list[str]]:
    """(regressions, improvements) of `report` against a baseline (a saved
    report, or {"ops": {"op|dtype|phase": {"status", "native"}}}). A regression
    is an op that passed and now does not, one that did not crash and now
    crashes, or one that was native and now falls back."""
    now = baseline_entries(report)
    before = baseline["ops"] if isinstance(baseline.get("ops"), dict) else baseline_entries(baseline)
    regressions, improvements = [], []
    for key, cur in sorted(now.items()):
        old = before.get(key)
        if old is None:
            continue
        if old["status"] == "pass" and cur["status"] != "pass" and cur["status"] != "skip":
            regressions.append(f"{key}: was pass, now {cur['status']}: {cur.get('detail') or ''}")
        elif cur["status"] == "crash" and old["status"] != "crash":
            regressions.append(f"{key}: was {old['status']}, now crash: {cur.get('detail') or ''}")
        elif old.get("native") is True and cur.get("native") is False and cur["status"] == "pass":
            regressions.append(f"{key}: was native, now falls back to the CPU "
                               f"({', '.join(cur.get('fallback_ops', []))})")
        elif old["status"] != "pass" and cur["status"] == "pass":
            improvements.append(f"{key}: was {old['status']}, now pass")
        elif old.get("native") is False and cur.get("native") is True and cur["status"] == "pass":
            improvements.append(f"{key}: now native")
    return regressions, improvements


def baseline_entries(report: OpInfoReport | dict) -> dict[str, dict]:
    """{"op|dtype|phase": {"status", "native", "detail"}} of a report."""
    data = report.to_dict() if isinstance(report, OpInfoReport) else report
    out = {}
    for row in data["ops"]:
        for phase in PHASES:
            if phase in row:
                r = row[phase]
                out[f"{row['op']}|{row['dtype']}|{phase}"] = {
                    "status": r["status"], "native": r.get("native"),
                    "detail": r.get("detail"), "fallback_ops": r.get("fallback_ops", [])}
    return out


def baseline_file(report: OpInfoReport) -> dict:
    """The compact form of a report kept in a repo as a CI baseline."""
    entries = baseline_entries(report)
    for e in entries.values():
        e.pop("fallback_ops", None)
        if e["status"] == "pass":
            e.pop("detail", None)
    return {"suite": "opinfo", "device": report.device.split(":")[0],
            "torch_version": report.torch_version, "summary": report.summary(), "ops": entries}


# --- workers --------------------------------------------------------------------

class WorkerDied(Exception):
    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class _Worker:
    """One worker process and the threads that read its output."""

    def __init__(self, config: dict, startup_timeout: float):
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")   # workers run side by side
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch_fl.testing._opinfo_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=env)
        assert self.proc.stdin is not None  # stdin=PIPE
        self.stdin: IO[str] = self.proc.stdin
        self.events: queue.Queue = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=30)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.stdin.write(json.dumps(config) + "\n")
        self.stdin.flush()
        event = self.next_event(startup_timeout)
        if event.get("event") != "ready":
            raise WorkerDied(f"worker did not start: {event}")
        self.jobs_done = 0

    def _read_stdout(self):
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                self.stderr_tail.append(line.rstrip())
        self.events.put(None)   # end of output: the process is gone

    def _read_stderr(self):
        for line in self.proc.stderr:
            if line.strip():
                self.stderr_tail.append(line.rstrip())

    def next_event(self, timeout: float) -> dict:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerDied(f"timed out after {timeout:.0f} s (worker killed)") from None
        if event is None:
            raise WorkerDied(self._death())
        return event

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        last = next((line for line in reversed(self.stderr_tail) if not line.startswith(" ")), "")
        return f"worker {how}" + (f"; last stderr: {last[:200]}" if last else "")

    def send(self, job: dict) -> None:
        try:
            self.stdin.write(json.dumps(job) + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death()) from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        try:
            self.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.kill()


def _crash(detail: str) -> dict:
    return {"status": "crash", "detail": detail, "native": None, "fallback_ops": [],
            "samples": {}}


def _run_job(worker: _Worker, job: dict, timeout: float) -> tuple[dict, bool]:
    """{phase: result} of one op; (results, worker still alive)."""
    results: dict[str, dict] = {}
    worker.send(job)
    current, sample = None, None
    try:
        while True:
            event = worker.next_event(timeout)
            kind = event.get("event")
            if kind == "begin":
                current, sample = event["phase"], None
            elif kind == "sample":
                sample = event
            elif kind == "end":
                result = event["result"]
                result["seconds"] = event.get("seconds")
                results[event["phase"]] = result
                current = None
            elif kind == "done":
                return results, True
    except WorkerDied as died:
        phase = current or next((p for p in job["phases"] if p not in results), job["phases"][0])
        where = f" in sample {sample['index']}: {sample['summary']}" if sample else ""
        results[phase] = _crash(died.detail + where)
        for later in job["phases"]:
            if later not in results:
                results[later] = {"status": "skip", "detail": f"not run: the {phase} crashed",
                                  "native": None, "fallback_ops": [], "samples": {}}
        return results, False


# --- the run --------------------------------------------------------------------

def _resolve_dtypes(dtypes, device: str) -> list[str]:
    import torch

    if dtypes in (None, "float32"):
        return ["float32"]
    if isinstance(dtypes, str):
        dtypes = [d.strip() for d in dtypes.split(",") if d.strip()]
    out = []
    for name in dtypes:
        if name == "device":
            from torch_fl.discovery import device_info

            out += [d for d in device_info(device)["dtypes"] if d not in out]
        elif isinstance(getattr(torch, str(name), None), torch.dtype):
            if name not in out:
                out.append(str(name))
        else:
            raise ValueError(f"unknown dtype {name!r} (use names like float32, bfloat16, "
                             "or 'device' for every dtype the device lists)")
    return out


def run_opinfo(device: str | None = None, dtypes: Iterable[str] | str | None = None,
               phases: Iterable[str] = ("forward",), ops: Iterable[str] | None = None,
               op_db: str | None = None, workers: int | None = None, timeout: float = 300.0,
               max_ops_per_worker: int = 200, max_samples: int | None = None, seed: int = 0,
               progress: bool | Callable[[str], None] = True, subset_every: int | None = None,
               ) -> OpInfoReport:
    """Run the OpInfos on `device` (default: the first device of the installed
    backends) and return the report. `ops`: fnmatch patterns over op ids;
    `dtypes`: names, or "device" for every dtype the device lists (default
    float32); `phases`: forward and/or grad; `workers`: parallel worker
    processes (default: min(2, cpu count)); `timeout`: seconds one op phase may
    take before it counts as a hang (crash); `subset_every`: run only every
    n-th op of each op family (a fast stratified subset)."""
    import torch

    from .. import _backends

    phases = list(phases)
    for phase in phases:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    if device is None:
        device = _backends.first_device()
        if device is None:
            raise RuntimeError("no flsdk device found to test; install a backend "
                               "(or pass device='cpu' to test the runner against itself)")
    device = str(device)
    backend = "cpu"
    if not device.startswith("cpu"):
        backend = _backends.backend(device).NAME
        device = str(_backends.resolve_device(device))
    dtype_names = _resolve_dtypes(dtypes, device)
    ids = list_opinfos(op_db, ops)
    if subset_every and subset_every > 1:
        ids = stratified_subset(ids, subset_every)
    say = progress if callable(progress) else ((lambda m: print(m, file=sys.stderr, flush=True))
                                               if progress else (lambda m: None))
    workers = max(1, workers or min(2, os.cpu_count() or 1))
    config = {"device": device, "op_db": op_db, "seed": seed, "max_samples": max_samples}
    jobs: queue.Queue = queue.Queue()
    for oid in ids:
        for dtype in dtype_names:
            jobs.put({"op": oid, "dtype": dtype, "phases": phases})
    total = jobs.qsize()
    results: dict[tuple[str, str], dict] = {}
    lock = threading.Lock()
    start = time.perf_counter()
    state: dict[str, Any] = {"done": 0, "last_say": 0.0, "failures": []}

    def record(job: dict, res: dict) -> None:
        with lock:
            results[(job["op"], job["dtype"])] = res
            state["done"] += 1
            bad = [f"{p} {r['status']}" for p, r in res.items() if r["status"] in FAILING]
            now = time.perf_counter()
            if bad:
                say(f"  {job['op']} [{job['dtype']}]: {', '.join(bad)}: "
                    f"{next(r['detail'] for r in res.values() if r['status'] in FAILING)}"[:240])
            if now - state["last_say"] > 15 or state["done"] == total:
                state["last_say"] = now
                elapsed = now - start
                eta = elapsed / state["done"] * (total - state["done"])
                say(f"opinfo: {state['done']}/{total} ops done, {elapsed:.0f} s elapsed, "
                    f"~{eta:.0f} s left")

    def lane() -> None:
        worker = None
        while True:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                break
            if worker is None:
                try:
                    worker = _Worker(config, startup_timeout=max(timeout, 600))
                except WorkerDied as died:
                    record(job, {p: _crash(f"worker could not start: {died.detail}")
                                 for p in job["phases"]})
                    continue
            res, alive = _run_job(worker, job, timeout)
            record(job, res)
            worker.jobs_done += 1
            if not alive or worker.jobs_done >= max_ops_per_worker:
                if alive:
                    worker.close()
                worker = None
        if worker is not None:
            worker.close()

    say(f"opinfo: {len(ids)} OpInfos x {len(dtype_names)} dtype(s) ({', '.join(dtype_names)}), "
        f"phases {', '.join(phases)}, on {device}, {workers} worker(s)")
    threads = [threading.Thread(target=lane, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = OpInfoReport(device=device, dtypes=dtype_names, phases=phases,
                          seconds=time.perf_counter() - start,
                          torch_version=torch.__version__, backend=backend)
    for oid in ids:
        for dtype in dtype_names:
            res = results.get((oid, dtype))
            if res is None:
                continue
            report.rows.append({"op": oid, "dtype": dtype, **res})
    return report


# --- command line ---------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="device to test (default: the first flsdk device, e.g. acme:0)")
    p.add_argument("--dtypes", default="float32",
                   help="comma-separated dtypes, or 'device' for every dtype the device lists "
                        "(default: float32)")
    p.add_argument("--grad", action="store_true", help="also compare gradients (phase grad)")
    p.add_argument("--grad-only", action="store_true", help="only the gradient phase")
    # nargs + extend: `--ops relu add sum` and `--ops relu --ops add` both name three
    p.add_argument("--ops", action="extend", nargs="+", metavar="PATTERN",
                   help="only OpInfos whose id matches one of these fnmatch patterns "
                        "(several after one flag, or the flag repeated)")
    p.add_argument("--subset", type=int, metavar="N",
                   help="a fast stratified subset: every N-th op of each op family")
    p.add_argument("--op-db", metavar="FILE.py[:NAME]",
                   help="a Python file with a list of OpInfos to run instead of torch's op_db")
    p.add_argument("--workers", type=int, help="parallel worker processes (default: min(2, cores))")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds one op may take before it counts as a hang (default 300)")
    p.add_argument("--max-samples", type=int, help="at most this many samples per op")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the report as a Markdown table")
    p.add_argument("--failures", metavar="FILE",
                   help="write the failures, grouped (crash, native-kernel / fallback "
                        "mismatch / error), as Markdown")
    p.add_argument("--baseline", metavar="FILE",
                   help="compare with this baseline: exit 1 on regressions, list improvements")
    p.add_argument("--write-baseline", metavar="FILE", help="write this run as a baseline file")
    p.add_argument("--min-pass", type=float, metavar="PCT",
                   help="exit 1 if the pass %% of any phase/dtype is below PCT")
    p.add_argument("--min-native", type=float, metavar="PCT",
                   help="exit 1 if the native %% of any phase/dtype is below PCT")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def run_cli(args) -> int:
    phases = ["grad"] if args.grad_only else (["forward", "grad"] if args.grad else ["forward"])
    try:
        report = run_opinfo(device=args.device, dtypes=args.dtypes, phases=phases, ops=args.ops,
                            op_db=args.op_db, workers=args.workers, timeout=args.timeout,
                            max_samples=args.max_samples, progress=not args.quiet,
                            subset_every=args.subset)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"flsdk conformance: {exc}", file=sys.stderr)
        return 2
    print(report.summary_text())
    print(f"({report.seconds:.0f} s)")
    if args.json:
        report.to_json(args.json)
        print(f"report written to {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(report.markdown())
        print(f"Markdown table written to {args.markdown}")
    if args.failures:
        Path(args.failures).write_text(report.failures_markdown())
        print(f"failures written to {args.failures}")
    if args.write_baseline:
        Path(args.write_baseline).write_text(json.dumps(baseline_file(report), indent=1,
                                                        sort_keys=True) + "\n")
        print(f"baseline written to {args.write_baseline}")
    code = 0
    if args.baseline:
        regressions, improvements = compare_baseline(report, load_report(args.baseline))
        for line in improvements:
            print(f"improved:  {line}")
        for line in regressions:
            print(f"REGRESSED: {line}")
        print(f"against {args.baseline}: {len(regressions)} regression(s), "
              f"{len(improvements)} improvement(s)")
        code |= 1 if regressions else 0
    for phase, per_dtype in report.summary().items():
        for dtype, s in per_dtype.items():
            for limit, key, label in ((args.min_pass, "pass_pct", "pass"),
                                      (args.min_native, "native_pct", "native")):
                if limit is not None and s[key] is not None and s[key] < limit:
                    print(f"{phase} {dtype}: {label} {s[key]:.1f}% is below {limit}%")
                    code |= 1
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_fl.testing.opinfo",
                                     description="PyTorch's OpInfo suite on an flsdk device")
    add_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
