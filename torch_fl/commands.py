"""torch_fl's commands: compare, readiness, conformance, and doctor's runtime half.

The one module of torch_fl that flsdk's CLI uses (tests/codegen/test_import_layering.py
holds it; docs/architecture.md, "Repository layout"): `flsdk` registers these
commands with `add_commands` and prints `doctor()` after its own checks, so the
commands live with the runtime they exercise and flsdk reaches none of torch_fl's
internals. Importing this module is cheap (standard library only); each command
imports torch and the rest of torch_fl when it runs.

    compare      layer-by-layer precision report of a model on two devices
                 (torch_fl.compare_model on ResNet-18, the small GPT, or the user's own
                 model given as `module:factory`)
    readiness    the production checklist (torch_fl.readiness) on a reference model
                 (ResNet-18, the small GPT, or none), as a table or JSON
    conformance  PyTorch's OpInfo suite on a device vs CPU (torch_fl.testing.opinfo)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["COMMANDS", "add_commands", "doctor", "run_compare", "run_readiness", "run_conformance"]

# name -> help, in the order `flsdk --help` lists them
COMMANDS = {
    "compare": "layer-by-layer precision report of a model on two devices",
    "readiness": "the production-readiness checklist on a device (pass/warn/fail with evidence; "
                 "exit 1 on a fail)",
    "conformance": "run PyTorch's OpInfo suite on a device vs CPU (acceptance test of a backend)",
}


def add_commands(sub: Any) -> None:
    """Add COMMANDS to `sub` (argparse's add_subparsers()), each with its arguments
    and `func` (args -> exit code) as its default."""
    p = sub.add_parser("compare", help=COMMANDS["compare"])
    p.add_argument("--model", default="resnet18",
                   help="resnet18, gpt, or module:factory: your own model; factory() returns "
                   "(model, inputs[, loss_fn[, targets]])")
    p.add_argument("--device-a", default="cpu")
    p.add_argument("--device-b", default=None)
    p.add_argument("--json", help="write the report as JSON to this file")
    p.add_argument("--atol", type=float, default=1e-3)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--bisect", action="store_true",
                   help="when the model diverges, find the smallest set of ops whose routing to "
                   "the CPU removes the divergence (their spec lines and kernels are printed)")
    p.set_defaults(func=run_compare)

    p = sub.add_parser("readiness", help=COMMANDS["readiness"])
    p.add_argument("--device", default=None, help="e.g. acme:0 (default: first backend device)")
    p.add_argument("--model", default="resnet18", help="resnet18, gpt or none")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from .checklist import DEFAULT_RECORD  # standard library only: cheap

    p.add_argument("--record", default=DEFAULT_RECORD,
                   help="version record file to write / compare (default: %(default)s)")
    p.add_argument("--update-record", action="store_true", help="accept changed versions")
    p.add_argument("--min-bandwidth", type=float, default=0.01,
                   help="minimum all_reduce bus bandwidth in GB/s (default: %(default)s, a floor "
                   "that catches a broken link; set what your training needs)")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the 2-process measurement")
    p.add_argument("--no-faults", action="store_true", help="skip OOM / device-loss injection")
    p.add_argument("--atol", type=float, default=1e-3)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.set_defaults(func=run_readiness)

    p = sub.add_parser("conformance", help=COMMANDS["conformance"])
    p.add_argument("--opinfo", action="store_true",
                   help="the OpInfo suite: every op of torch's op_db, device vs CPU")
    from .testing.opinfo import add_arguments  # no torch import at parse time

    add_arguments(p)
    p.set_defaults(func=run_conformance)


# ---------------------------------------------------------------- compare

MODELS = ("resnet18", "gpt")


def build_workload(name: str, seed: int = 0) -> tuple[Any, tuple, Any, Any]:
    """(model, inputs, loss_fn, targets) of a reference model, seeded."""
    import torch
    from torch.nn import functional as F

    from .models import GPT, GPTConfig, resnet18

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if name == "resnet18":
        model = resnet18(num_classes=10)
        model.train()  # batch-norm on batch statistics, as in training
        x = torch.randn(8, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        return model, (x,), F.cross_entropy, y
    if name == "gpt":
        gpt = GPT(GPTConfig(dropout=0.0))  # dropout would differ between devices
        tok = torch.randint(0, gpt.config.vocab_size, (4, 16), generator=g)
        return gpt, (tok, tok.roll(-1, dims=1)), (lambda out: out[1]), None
    if ":" in name:
        return user_workload(name)
    raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}, "
                     "or module:factory (your own model)")


def user_workload(spec: str) -> tuple[Any, tuple, Any, Any]:
    """A user's model given as `module:factory` (module importable from the current
    folder or sys.path). factory() returns (model, inputs) or (model, inputs,
    loss_fn) or (model, inputs, loss_fn, targets); inputs is a tensor or a tuple
    of them. Every problem is a ValueError naming what to fix."""
    import importlib

    import torch

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--model {spec!r}: expected module:factory, e.g. my_models:build")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
    except ImportError as exc:
        raise ValueError(f"--model {spec!r}: cannot import {module_name!r}: {exc}") from None
    except AttributeError:
        raise ValueError(f"--model {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(factory):
        raise ValueError(f"--model {spec!r}: {attr!r} is not callable")
    made = factory()
    if not isinstance(made, tuple) or not 2 <= len(made) <= 4 or not isinstance(made[0], torch.nn.Module):
        raise ValueError(f"--model {spec!r}: {attr}() must return (model, inputs[, loss_fn[, targets]]) "
                         f"with model a torch.nn.Module; it returned {type(made).__name__}")
    model, inputs, loss_fn, targets = (tuple(made) + (None, None))[:4]
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    return model, inputs, loss_fn, targets


def run_compare(args) -> int:
    """args: model, device_a, device_b (None: first non-CPU device), json, atol, rtol, bisect."""
    from . import _backends
    from .compare import compare_model

    try:
        model, inputs, loss_fn, targets = build_workload(args.model)
    except ValueError as exc:
        print(f"flsdk compare: {exc}", file=sys.stderr)
        return 2
    device_b = args.device_b or _backends.first_device()
    if device_b is None:
        from .discovery import backend_reports

        reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
        print("flsdk compare: no device to compare with: "
              + ("; ".join(reasons) if reasons else "no flsdk backend is installed"),
              file=sys.stderr)
        return 1
    try:
        report = compare_model(model, inputs, args.device_a, device_b, loss_fn=loss_fn,
                               targets=targets, atol=args.atol, rtol=args.rtol,
                               bisect=getattr(args, "bisect", False))
    except Exception as exc:  # an op the device cannot run, a model error: say which, one line
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"flsdk compare: {args.model} failed on {args.device_a} vs {device_b}: "
              f"{type(exc).__name__}: {first} (flsdk ops / flsdk doctor say what the device runs)",
              file=sys.stderr)
        return 1
    report.model = args.model
    print(report.table())
    if args.json:
        report.to_json(args.json)
        print(f"report written to {args.json}")
    return 0


# ---------------------------------------------------------------- readiness


def run_readiness(args) -> int:
    """args: device, model, json, record, update_record, min_bandwidth, no_bandwidth,
    no_faults, atol, rtol. Exit 0 (pass / warn), 1 (a check failed), 2 (bad arguments)."""
    from . import _backends
    from .checklist import readiness

    device = args.device or _backends.first_device()
    if device is None:
        from .discovery import backend_reports

        reasons = [f"{r['name']}: {r['error']}" for r in backend_reports() if not r["loaded"]]
        print("flsdk readiness: no device: " + ("; ".join(reasons) if reasons
                                               else "no flsdk backend is installed"),
              file=sys.stderr)
        return 1
    model = inputs = loss_fn = targets = None
    if args.model != "none":
        if args.model not in MODELS:
            print(f"flsdk readiness: unknown model {args.model!r}; choose one of: "
                  f"{', '.join(MODELS)}, none", file=sys.stderr)
            return 2
        model, inputs, loss_fn, targets = build_workload(args.model)
    report = readiness(device, model, inputs, loss_fn=loss_fn, targets=targets,
                       model_name=None if args.model == "none" else args.model,
                       record=args.record or None, update_record=args.update_record,
                       atol=args.atol, rtol=args.rtol, min_bandwidth_gbps=args.min_bandwidth,
                       bandwidth=not args.no_bandwidth, faults=not args.no_faults)
    print(report.to_json() if args.json else report.table())
    return 0 if report.ok else 1


# ---------------------------------------------------------------- conformance


def run_conformance(args) -> int:
    """args: opinfo and torch_fl.testing.opinfo's arguments."""
    if not args.opinfo:
        print("flsdk: error: conformance: choose a suite: --opinfo (PyTorch's OpInfo op_db on "
              "the device; the generated per-op tests run with `pytest tests`)", file=sys.stderr)
        return 2
    from .testing.opinfo import run_cli

    return run_cli(args)


# ---------------------------------------------------------------- doctor


def doctor() -> int:
    """Print the runtime's half of `flsdk doctor`: the installed backends (loaded or
    why not, shadowed by a source folder), TORCH_FL_BACKEND, the version matrix and
    why a device cannot start. Returns the number of problems found."""
    from .compat import INIT_FAILURE_CAUSES, compat_matrix, compat_report
    from .discovery import backend_reports

    problems = 0
    for report in backend_reports():
        state = "ok" if report["loaded"] else f"BROKEN: {report['error']}"
        print(f"installed backend {report['name']} ({report['package']}, memory model "
              f"{report['memory_model']}): {state}")
        problems += 0 if report["loaded"] else 1
        shadow = _shadowing_source(report["package"])
        if shadow:
            print(f"backend {report['name']}: SHADOWED in this folder: {shadow}")
            problems += 1
    chosen = os.environ.get("TORCH_FL_BACKEND")
    if chosen:
        print(f"TORCH_FL_BACKEND={chosen}: `import torch` autoloads only that backend")
    print("version compatibility (torch <-> torch_fl <-> backend <-> driver/runtime):")
    print("  " + compat_report().replace("\n", "\n  "))
    for row in compat_matrix():
        if row["loaded"] and not row["torch_fl_ok"]:
            problems += 1
        if row["cause"]:
            name, fix, _ = INIT_FAILURE_CAUSES[row["cause"]]
            print(f"backend {row['name']} cannot start: {name} ({fix})")
    return problems


def installed_build_problem(package: str, root: str) -> str | None:
    """Why the installed `package` is not the build of the backend sources at `root`
    (backend_glue/build_record.py), or None; "not installed" when it is not. Finds the
    installed copy through its distribution's files, so a source folder of the same
    name on sys.path (the backend root itself) is not taken for it."""
    import importlib.metadata as md

    from .backend_glue import build_record

    try:
        dist = md.distribution(package.replace("_", "-"))
    except md.PackageNotFoundError:
        return f"{package} is not installed: pip install --no-build-isolation . (in {root})"
    package_dir = str(dist.locate_file(package))
    if build_record.read_record(package_dir) is None:
        return None  # built before builds were recorded
    return build_record.problem(package_dir, root)


def _shadowing_source(package: str) -> str | None:
    """`python` started in the current folder imports ./<package> first (sys.path[0]
    is ''); when that is a source folder without the built extension, every
    `python -c "import torch ..."` run here gets the broken copy. doctor itself runs
    from its script's folder and would not notice, so it looks."""
    cwd = Path.cwd().resolve()
    local = cwd / package
    if not (local / "__init__.py").is_file() or list(local.glob("_C*.so")) or list(local.glob("_C*.pyd")):
        return None
    installed = None
    for entry in sys.path:  # where python would find it if this folder were not first
        base = Path(entry or ".").resolve()
        if base != cwd and (base / package / "__init__.py").is_file():
            installed = base / package
            break
    return (f"python started here imports {local} (a source folder, no built extension) instead of "
            + (f"the installed {installed}" if installed else "an installed package (none found)")
            + "; run python from another folder")
