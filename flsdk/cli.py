"""The `flsdk` command: new-backend, gen, check, ops, doctor, compare, readiness,
conformance.

compare, readiness, conformance and doctor's runtime half are torch_fl's commands
(torch_fl.commands, the one torch_fl module flsdk's CLI imports); the rest is the SDK's.

User mistakes (bad specs, bad arguments) print one clear message and exit 2;
a Python traceback means a bug in flsdk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from flsdk import __version__

EXIT_USER_ERROR = 2


def _err(message: str) -> int:
    print(f"flsdk: error: {message}", file=sys.stderr)
    return EXIT_USER_ERROR


def _backend_root(path: str | None) -> Path:
    root = Path(path or ".").resolve()
    if not (root / "device.yaml").is_file():
        raise FileNotFoundError(f"{root} has no device.yaml; run flsdk in a backend repo "
                                "(or pass its path), or create one with `flsdk new-backend NAME`")
    return root


def cmd_gen(args) -> int:
    from flsdk.codegen.generate import generate

    result = generate(_backend_root(args.path), check=args.check, dry_run=args.dry_run,
                      force=args.force)
    r = result.report
    verb = "would write" if (args.check or args.dry_run) else "wrote"
    for label, items in (("created", r.created), ("updated", r.updated), ("removed", r.removed)):
        for item in items:
            print(f"  {label:9} {item}")
    for item in result.stubs_created:
        print(f"  {'stub':9} {item}  (new kernel stub: fill it, delete its flsdk:stub line)")
    for item in r.conflicts:
        print(f"  {'EDITED':9} {item}  (edited by hand; not overwritten - rerun with --force, "
              "which keeps a .bak copy)", file=sys.stderr)
    for item in r.backups:
        print(f"  {'backup':9} {item}")
    for item in result.orphan_kernels:
        print(f"  {'orphan':9} {item}: its op is no longer in the specs; not registered, not deleted")
    for stub, real in result.superseded_stubs.items():
        print(f"  {'old stub':9} {stub}: its kernel now lives in {real}; the stub can be deleted")
    for item in result.drift:
        print(f"  {'drift':9} {item}  (schema changed since the last gen: check the kernel)")
    if args.verbose:
        for item in result.skipped_variants:
            print(f"  {'skipped':9} {item}")
    elif result.skipped_variants:
        print(f"  {'skipped':9} {len(result.skipped_variants)} in-place/out variants flsdk cannot derive "
              "(--verbose lists them; they run on the CPU fallback)")
    if result.memory_change:
        print(f"  {'memory':9} {result.memory_change}")
    for note in result.adapter_notes:
        print(f"  {'adapter':9} {note}")
    for err in result.adapter_errors:
        print(f"error: {err}", file=sys.stderr)
    n_native = result.native_count
    print(f"flsdk gen: {result.backend_name}: {n_native} native ops selected; {verb} "
          f"{len(r.created)} created, {len(r.updated)} updated, {len(r.unchanged)} unchanged, "
          f"{len(result.stubs_created)} stubs ({result.seconds:.2f} s)")
    for mismatch in result.mismatches:
        print(f"error: {mismatch.message()}", file=sys.stderr)
    if r.conflicts or result.adapter_errors:
        return 1
    if result.mismatches:
        print(f"flsdk gen: {len(result.mismatches)} kernel(s) defined with another signature than "
              "generated/kernels.h declares: the build would fail on them", file=sys.stderr)
        return 1
    if args.check and (r.created or r.updated or r.removed or result.stubs_created):
        print("flsdk gen --check: generated files are stale; run `flsdk gen`", file=sys.stderr)
        return 1
    return 0


def cmd_check(args) -> int:
    from flsdk.spec import check_backend, load_backend

    root = _backend_root(args.path)
    backend = load_backend(root)
    for warning in check_backend(root) + device_only_warnings(root):
        print(f"warning: {warning}")
    print(f"flsdk check: {root}: device.yaml and {len(backend.all_ops)} op specs are valid; "
          f"{len(backend.ops)} ops selected native")
    return 0


def op_statuses(root: Path) -> list[dict]:
    """Every op the backend sees: native, stub, missing (no kernel file yet),
    fallback (not selected), glue (implemented by the generated glue),
    composite (a device-only op the glue decomposes) or must-be-native (a
    device-only op with no CPU kernel: calling it fails until it is native).
    Device-only ops (flsdk/spec/device_only.py) say in `note` what runs them."""
    from flsdk.codegen.context import falls_back, kernel_name
    from flsdk.codegen.glue import GLUE_OPS
    from flsdk.codegen.kernel_scan import scan_kernels
    from flsdk.spec import load_backend
    from flsdk.spec.device_only import DEVICE_ONLY_OPS

    backend = load_backend(root)
    scan = scan_kernels(root)
    selected = {spec.op for spec in backend.ops}
    rows = [{"op": op, "family": "minimal", "status": "glue", "kernel": "generated/minimal_ops.cpp"}
            for op in GLUE_OPS]
    for spec in backend.all_ops:
        kernel = kernel_name(spec)
        if spec.op in selected:
            status = scan.status(kernel)
            where = scan.native.get(kernel) or scan.stubs.get(kernel) or ""
        else:
            status, where = "fallback", ""
        spec_at = f"{os.path.relpath(spec.file)}:{spec.line}"  # relative to where the user stands
        row = {"op": spec.op, "family": spec.family, "status": status, "kernel": where, "spec": spec_at}
        if spec.op in selected:
            # what its kernel computes: the generated wrapper sends the op's other dtypes
            # to the CPU fallback (an op with no CPU kernel refuses them)
            row["dtypes"] = list(backend.dtypes_for(spec))
            row["other_dtypes"] = "CPU fallback" if falls_back(spec) else "error (the op has no CPU kernel)"
            line = backend.narrowed_at(spec.op)
            if line is not None:
                row["narrowed"] = f"{os.path.relpath(root / 'device.yaml')}:{line}"
        rows.append(row)
    by_op = {r["op"]: r for r in rows}
    for op, info in DEVICE_ONLY_OPS.items():
        row = by_op.get(op) or {"op": op, "family": "device-only", "status": "fallback", "kernel": ""}
        if row["status"] != "native":
            if info.runs_as == "composite":
                row["status"] = "composite"
            elif info.runs_as == "error":
                row["status"] = "must-be-native"
            row["note"] = info.without_native
        if op not in by_op:
            rows.append(row)
    return rows


def op_locations(root: Path, ops: list[str]) -> dict[str, dict]:
    """For each spec op in `ops`, what `flsdk gen` makes of it: `registered`
    {overload: generated/register_kernels_<i>.cpp} and `tests`, the pytest node ids
    of its generated conformance cases. Both come from the context `flsdk gen`
    renders (flsdk.codegen.context), not from reading the generated files back, so
    they hold for the current specs and kernels even before the next gen."""
    from flsdk.codegen.context import build_context
    from flsdk.codegen.kernel_scan import scan_kernels
    from flsdk.spec import load_backend

    backend = load_backend(root)
    # The torch version only goes into generated text; locating ops does not need it.
    ctx = build_context(backend, scan_kernels(root), torch_version="")

    def here(path: str) -> str:  # relative to where the user stands, as op_statuses' spec
        return os.path.relpath(root / path)

    located = {}
    for op in ops:
        located[op] = {"registered": {overload: here(path) for overload, path in ctx.registrations.get(op, {}).items()},
                       "tests": [here(node) for node in ctx.conformance_test_ids(op)]}
        if op in ctx.conformance_cases["skipped"]:  # its one test is a visible skip saying why
            located[op]["not_compared"] = ctx.conformance_cases["skipped"][op]
    return located


def device_only_warnings(root: Path) -> list[str]:
    """`flsdk check`'s warning for the device-only ops that must be native but are not:
    one line for all of them, grouped by what reaches them (the five ops of
    nn.SyncBatchNorm were five near-identical lines on every run)."""
    from flsdk.spec.device_only import DEVICE_ONLY_OPS

    missing = [r["op"] for r in op_statuses(root) if r["status"] == "must-be-native"]
    if not missing:
        return []
    groups: dict[str, list[str]] = {}
    for op in missing:
        groups.setdefault(DEVICE_ONLY_OPS[op].reached_by, []).append(f"aten::{op}")
    listed = "; ".join(f"{by}: {', '.join(ops)}" for by, ops in groups.items())
    return [f"{root / 'device.yaml'}: {len(missing)} op(s) must be native: no CPU kernel exists "
            f"({listed}); calling one raises until the backend implements it "
            "(`flsdk ops --status must-be-native`)"]


def cmd_ops(args) -> int:
    root = _backend_root(args.path)
    rows = op_statuses(root)
    if args.op:
        # "add" matches every overload (add.Tensor, add.Scalar, ...), like get_supported_ops.
        rows = [r for r in rows if r["op"] in args.op or r["op"].split(".")[0] in args.op]
        unknown = [op for op in args.op if not any(op in (r["op"], r["op"].split(".")[0]) for r in rows)]
        if unknown:  # an empty table would look like an answer
            return _err(f"no op spec, glue op or device-only op named {', '.join(unknown)} in {root} "
                        "(`flsdk ops` lists them all)")
    if args.status:
        rows = [r for r in rows if r["status"] in args.status]
    if args.op:
        # Named ops also get where gen registers and tests them (it costs a build of
        # gen's context, a few seconds, so only for the ops asked about).
        located = op_locations(root, [r["op"] for r in rows if r.get("spec")])
        for r in rows:
            r.update(located.get(r["op"], {}))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    if args.format == "json":
        print(json.dumps({"ops": rows, "counts": counts}, indent=1))
        return 0
    if args.format == "markdown":
        print("| op | family | status | kernel | spec |\n| --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| `{r['op']}` | {r['family']} | {r['status']}{_narrowed(r, ' ')} "
                  f"| {r['kernel'] or r.get('note', '')} | {r.get('spec', '')} |")
    else:
        width = max([len(r["op"]) for r in rows] + [2])
        kwidth = max([len(r["kernel"] or r.get("note", "")) for r in rows if r.get("spec")] + [6])
        print(f"{'op':{width}}  {'family':12}  {'status':8}  {'kernel':{kwidth}}  spec")
        for r in rows:
            print(f"{r['op']:{width}}  {r['family']:12}  {r['status']:8}  "
                  f"{r['kernel'] or r.get('note', ''):{kwidth}}  {r.get('spec', '')}{_narrowed(r, '  ')}".rstrip())
        for r in rows:
            if "tests" in r:
                print("\n" + _op_details(r))
    print("\n" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0


def _narrowed(row: dict, sep: str) -> str:
    """A narrowed op's note: its status holds for these dtypes only."""
    if "narrowed" not in row:
        return ""
    return f"{sep}({', '.join(row['dtypes'])} only, narrowed at {row['narrowed']}; others: {row['other_dtypes']})"


def _op_details(row: dict) -> str:
    """The registration shard and the conformance tests of one op, as lines a newcomer
    can act on: files relative to where they stand, node ids to paste into pytest."""
    lines = [f"{row['op']}:"]
    if row["status"] == "native" and "dtypes" in row:
        where = f"narrowed at {row['narrowed']}" if "narrowed" in row else "its spec's dtypes the device lists"
        lines.append(f"  kernel computes {', '.join(row['dtypes'])} ({where}); "
                     f"other dtypes: {row['other_dtypes']}")
    by_file: dict[str, list[str]] = {}
    for overload, path in row["registered"].items():
        by_file.setdefault(path, []).append(overload)
    for path, overloads in sorted(by_file.items()):
        lines.append(f"  registered in {path}: {', '.join(overloads)}")
    if not by_file:
        why = {"native": "no wrapper of its own (the generated glue calls its kernel)",
               "glue": "the generated glue implements it",
               "stub": "its kernel is still a `// flsdk:stub`",
               "missing": "it has no kernel file yet (`flsdk gen` creates its stub)",
               "fallback": "not selected native in device.yaml"}.get(row["status"], row["status"])
        lines.append(f"  not registered: {why}")
    if "not_compared" in row:
        lines.append(f"  not compared by the generated conformance tests: {row['not_compared']}; "
                     f"its skip: {', '.join(row['tests'])}")
    elif row["tests"]:
        lines.append(f"  tested by {len(row['tests'])} generated conformance test(s); "
                     "run one with `pytest NODE_ID`:")
        lines += [f"    {node}" for node in row["tests"]]
    else:
        lines.append("  tested by no generated conformance test (the op is not selected native)")
    return "\n".join(lines)


def cmd_new_backend(args) -> int:
    from flsdk.scaffold import render_backend

    out = Path(args.out or args.name).resolve()
    existed = out.exists()
    if existed and (not out.is_dir() or any(out.iterdir())):
        return _err(f"{out} exists and is not empty; flsdk never overwrites a backend repo")
    try:
        written = render_backend(args.name, out, args.display_name, args.memory)
        print(f"flsdk new-backend: {args.name}: {len(written)} files in {out}")
        code = 0 if args.no_gen else cmd_gen(
            argparse.Namespace(path=str(out), check=False, dry_run=False, force=False, verbose=False))
    except BaseException:
        _remove_scaffold(out, existed)
        raise
    if code:  # a refused backend leaves nothing half-written behind
        _remove_scaffold(out, existed)
        return code
    print(next_steps(args.name, out))
    return 0


def next_steps(name: str, out: Path) -> str:
    """The hint new-backend ends with: build the backend, then one op on its device.
    Python runs in a subshell in the parent folder: inside the backend's source folder
    the package directory shadows the installed one (no compiled _C there), and the
    vendor stays in the backend folder for what comes next (README's vendor's day)."""
    import shlex

    # (a backend name is a plain identifier: nothing in the double quotes needs escaping)
    check = f"\"import torch; print(torch.ones(2, device='{name}') + 1)\""
    return (f"next: cd {shlex.quote(str(out))} && pip install --no-build-isolation . && "
            f"(cd .. && python -c {check})\n"
            f"      (python runs outside {out.name}/: there its source folder would shadow "
            f"the installed package)")


def _remove_scaffold(out: Path, existed: bool) -> None:
    """Undo a refused new-backend: the folder it created, or (when it was given an
    empty folder) what it wrote into it. render_backend refuses non-empty folders,
    so nothing of the user's is removed."""
    if not out.is_dir():
        return
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in out.iterdir():
        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)


def _version_of(command: list[str]) -> str:
    exe = shutil.which(command[0])
    if not exe:
        return "not found"
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "found, but did not answer"


def cmd_doctor(args) -> int:
    problems = 0
    print(f"flsdk {__version__}, Python {sys.version.split()[0]} ({sys.executable})")
    try:
        import torch

        print(f"torch {torch.__version__} ({Path(torch.__file__).parent})")
    except Exception as exc:  # a broken torch is exactly what doctor reports
        print(f"torch: NOT importable: {exc}")
        return 1
    print(f"C++ compiler: {_version_of([os.environ.get('CXX', 'c++'), '--version'])}")
    print(f"cmake: {_version_of(['cmake', '--version'])}")
    print(f"ninja: {_version_of(['ninja', '--version'])}")
    root = Path(args.path or ".").resolve()
    lock = root / "generated" / "ops.lock.json"
    if lock.is_file():
        generated_for = json.loads(lock.read_text()).get("torch_version", "?")
        same = generated_for.split("+")[0] == torch.__version__.split("+")[0]
        print(f"backend {root.name}: generated for torch {generated_for}: "
              + ("matches" if same else "DOES NOT MATCH the installed torch: run flsdk gen and rebuild"))
        problems += 0 if same else 1
        print(f"backend {root.name}: {_memory_model_line(root)}")
        stale = _installed_build_line(root)
        if stale:
            print(f"backend {root.name}: {stale}")
            problems += 1
    from torch_fl import commands  # the runtime's half: installed backends, versions

    problems += commands.doctor()
    print("doctor: " + ("all good" if not problems else f"{problems} problem(s)"))
    return 1 if problems else 0


def _installed_build_line(root: Path) -> str | None:
    """The problem of the installed build against the sources at `root` (older than
    them, or not installed), or None when it is their build."""
    from flsdk.spec import SpecError, SpecErrors, load_device
    from torch_fl.commands import installed_build_problem

    try:
        name = load_device(root / "device.yaml").name
    except (SpecError, SpecErrors):
        return None  # memory model line already says the device.yaml does not load
    problem = installed_build_problem(f"torch_fl_{name}", str(root))
    return f"INSTALLED BUILD IS STALE: {problem}" if problem else None


def _memory_model_line(root: Path) -> str:
    """What device.yaml's memory.model says, as doctor prints it (the loader's
    errors are `flsdk check`'s to report)."""
    from flsdk.spec import SpecError, SpecErrors, load_device

    try:
        desc = load_device(root / "device.yaml")
    except (SpecError, SpecErrors) as exc:
        return f"memory model unknown: device.yaml does not load ({str(exc).splitlines()[0]}; see flsdk check)"
    meaning = {"host": "host code may read device memory",
               "discrete": "host code cannot read device memory"}[desc.memory_model]
    return f"memory model {desc.memory_model} ({meaning}; device.yaml memory.model)"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit 2) like every other error."""

    def error(self, message):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flsdk", description="Generate and inspect PyTorch "
                                     "PrivateUse1 backends from op specs.")
    parser.add_argument("--version", action="version", version=f"flsdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("new-backend", help="scaffold a new backend repo and generate it")
    p.add_argument("name")
    p.add_argument("--out", help="folder to create (default: ./NAME)")
    p.add_argument("--display-name")
    p.add_argument("--memory", choices=("host", "discrete"), default="host",
                   help="the scaffolded runtime adapter's memory: host (host code can read device "
                        "memory) or discrete (it cannot, as on a discrete accelerator)")
    p.add_argument("--no-gen", action="store_true", help="only render the template")
    p.set_defaults(func=cmd_new_backend)

    p = sub.add_parser("gen", help="(re)generate generated/ and create missing kernel stubs")
    p.add_argument("path", nargs="?")
    p.add_argument("--check", action="store_true", help="exit 1 if generated files are stale")
    p.add_argument("--dry-run", action="store_true", help="report, write nothing")
    p.add_argument("--force", action="store_true",
                   help="overwrite hand-edited generated files (keeps .bak); regenerate even when up to date")
    p.add_argument("-v", "--verbose", action="store_true", help="list each in-place/out variant not derived")
    p.set_defaults(func=cmd_gen)

    p = sub.add_parser("check", help="validate device.yaml and the op specs")
    p.add_argument("path", nargs="?")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("ops", help="op coverage: native / stub / fallback")
    p.add_argument("path", nargs="?")
    p.add_argument("--format", choices=["table", "markdown", "json"], default="table")
    p.add_argument("--status", action="append", help="only ops with this status (repeatable)")
    p.add_argument("--op", action="append", help="only this op (a base name matches every overload; repeatable)")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("doctor", help="check torch, compiler, cmake and installed backends")
    p.add_argument("path", nargs="?")
    p.set_defaults(func=cmd_doctor)

    # compare, readiness, conformance: torch_fl's commands (the runtime they exercise)
    from torch_fl import commands  # standard library only at import: cheap

    commands.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    if args.command in ("new-backend", "gen", "check", "ops") and previous is None:
        # These read torch's schemas only; loading installed device backends
        # (torch's autoload) would cost time and mix their state into codegen.
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        return _run(args)
    finally:
        if previous is None:
            os.environ.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)


def _run(args) -> int:
    from flsdk.scaffold import ScaffoldError
    from flsdk.spec import SpecError

    try:
        return args.func(args)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USER_ERROR
    except (ScaffoldError, FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        return _err(str(exc))
    except OSError as exc:
        return _err(f"{exc.strerror or exc}: {exc.filename or ''}".strip(": "))
    except KeyboardInterrupt:
        return _err("interrupted")
    except Exception as exc:
        # Anything else is a failure at run time (a device error, a broken
        # install) or a bug in flsdk: one line for the user, the traceback on demand.
        if os.environ.get("FLSDK_TRACEBACK"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"flsdk {args.command}: {type(exc).__name__}: {first} "
              "(FLSDK_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
