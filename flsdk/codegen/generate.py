"""`flsdk gen`: write a backend's generated files and create missing kernel stubs.

Reads device.yaml and the op specs, scans kernels/, renders the templates and
writes through GeneratedWriter (atomic, idempotent, hand-edit aware). Also
records the schemas it generated against in generated/ops.lock.json, so the
next run after a torch upgrade reports schema drift.
"""

from __future__ import annotations

import json
import pprint
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from flsdk.spec import load_backend
from flsdk.spec.model import Backend

from . import signatures
from .context import build_context, kernel_name
from .kernel_scan import scan_kernels
from .writer import GeneratedWriter, WriteReport, atomic_write, with_header

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
LOCK_FILE = "generated/ops.lock.json"


@dataclass
class GenResult:
    backend: Backend
    report: WriteReport
    stubs_created: list[str] = field(default_factory=list)
    orphan_kernels: list[str] = field(default_factory=list)   # kernels whose op left the specs
    superseded_stubs: dict[str, str] = field(default_factory=dict)  # stub file -> real kernel file
    drift: list[str] = field(default_factory=list)            # ops whose schema changed
    skipped_variants: list[str] = field(default_factory=list)
    seconds: float = 0.0


def installed_torch_version() -> str:
    import torch

    return torch.__version__


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["tojson"] = lambda value: json.dumps(value)
    return env


def _stub_text(backend: Backend, op: str, sig: signatures.KernelSignature) -> str:
    ns = backend.name
    return f"""// Kernel of aten::{op} on the {ns} device. Created once by `flsdk gen`; this file
// is yours and flsdk never rewrites it. Until you delete the marker line below,
// the file is not compiled and {op} runs on the CPU fallback.
// flsdk:stub {sig.kernel}
#include "kernels.h"

#include <c10/util/Exception.h>

namespace {ns}::kernels {{

// {sig.schema}
{sig.defn} {{
  TORCH_CHECK(false, "{ns}: {op}: kernel body not written yet");
}}

}}  // namespace {ns}::kernels
"""


def _drift(root: Path, backend: Backend, torch_version: str) -> list[str]:
    """Ops whose schema differs from the one recorded at the last generation."""
    lock = root / LOCK_FILE
    if not lock.exists():
        return []
    try:
        old = json.loads(lock.read_text())
    except (OSError, ValueError):
        return []
    functions = signatures.native_functions()
    custom = {spec.op: spec.schema for spec in backend.ops if spec.is_custom}
    changed = []
    for op, schema in sorted(old.get("schemas", {}).items()):
        if "::" in op:
            if op in custom and custom[op] != schema:
                changed.append(f"{op}: {schema} -> {custom[op]}")
            continue
        now = str(functions[op].func) if op in functions else None
        if now != schema:
            changed.append(f"{op}: {schema} -> {now or 'removed from torch ' + torch_version}")
    return changed


def generate(root: str | Path, *, check: bool = False, dry_run: bool = False,
             force: bool = False) -> GenResult:
    start = time.perf_counter()
    root = Path(root).resolve()
    backend = load_backend(root)
    torch_version = installed_torch_version()
    writer = GeneratedWriter(root, dry_run=dry_run or check, force=force)
    result = GenResult(backend=backend, report=writer.report)
    result.drift = _drift(root, backend, torch_version)

    # Stubs first: a new stub changes nothing in the build (stub files are not
    # compiled), but the scan below must see every kernel file.
    scan = scan_kernels(root)
    for spec in backend.ops:
        kernel = kernel_name(spec)
        if scan.status(kernel) == "missing":
            rel = f"kernels/{kernel[2:]}.cpp"
            result.stubs_created.append(rel)
            if not (dry_run or check) and not (root / rel).exists():
                sig = (signatures.custom_kernel_signature(spec.schema) if spec.is_custom
                       else signatures.signature_of(spec.op))
                atomic_write(root / rel, _stub_text(backend, spec.op, sig))
    if result.stubs_created and not (dry_run or check):
        scan = scan_kernels(root)
    wanted = {kernel_name(spec) for spec in backend.ops}
    result.orphan_kernels = sorted(
        f"{name} ({path})" for name, path in {**scan.stubs, **scan.native}.items() if name not in wanted
    )

    result.superseded_stubs = dict(sorted(scan.superseded.items()))
    ctx = build_context(backend, scan, torch_version)
    result.skipped_variants = ctx.skipped_variants
    env = _environment()
    sources = "device.yaml and op specs"

    def emit(template: str, out: str, **extra) -> None:
        body = env.get_template(template).render(header="", header_py="", header_cmake="",
                                                 **ctx.values, **extra)
        writer.write(out, with_header(out, body.lstrip("\n"), sources))

    cpp = {
        "runtime_adapter.h": {}, "backend.h": {}, "device_config.h": {},
        "runtime_init.cpp": {}, "allocator.h": {}, "allocator.cpp": {}, "guard.cpp": {},
        "hooks.cpp": {}, "minimal_ops.cpp": {}, "fallback.h": {}, "fallback.cpp": {},
        "kernels.h": {"kernels": ctx.kernel_sigs},
        "register_kernels.cpp": {"wrappers": ctx.wrappers, "custom_wrappers": ctx.custom_wrappers,
                                 "custom_schemas": ctx.custom_schemas},
        "autocast.cpp": {}, "python_module.cpp": {},
    }
    for name, extra in cpp.items():
        emit(f"cpp/{name}.j2", f"generated/{name}", **extra)
    emit("cmake/sources.cmake.j2", "generated/sources.cmake")
    package = ctx.values["package"]
    emit("python/init.py.j2", f"{package}/_generated/__init__.py")
    emit("python/backend.py.j2", f"{package}/_generated/backend.py")
    emit("python/device_module.py.j2", f"{package}/_generated/device_module.py")

    cases, skipped = _conformance_cases(backend, ctx.registered_ops)
    emit("tests/test_conformance.py.j2", f"tests/generated/test_{backend.name}_conformance.py",
         cases_py=pprint.pformat(cases, width=100), skipped_py=pprint.pformat(skipped, width=100))

    functions = signatures.native_functions()
    lock = {"torch_version": torch_version,
            "schemas": {spec.op: spec.schema if spec.is_custom else str(functions[spec.op].func)
                        for spec in backend.ops}}
    writer.write(LOCK_FILE, json.dumps(lock, indent=1, sort_keys=True) + "\n", generated=False)
    result.seconds = time.perf_counter() - start
    return result


def _conformance_cases(backend: Backend, registered: list[str]):
    cases, skipped = [], {}
    registered_set = set(registered)
    for spec in backend.ops:
        if spec.op not in registered_set:
            continue
        if spec.is_custom:
            skipped[spec.op] = "custom op: no CPU reference kernel to compare with"
            continue
        if spec.skip_conformance:
            skipped[spec.op] = spec.skip_conformance
            continue
        for dtype in backend.dtypes_for(spec):
            tol = spec.tolerances[dtype]
            for sample in spec.samples:
                cases.append((spec.op, sample, dtype, tol.atol, tol.rtol))
    return cases, skipped
