"""`flsdk gen`: write a backend's generated files and create missing kernel stubs.

Reads device.yaml and the op specs, scans kernels/, renders the templates and
writes through GeneratedWriter (atomic, idempotent, hand-edit aware). Also
records the schemas it generated against in generated/ops.lock.json, so the
next run after a torch upgrade reports schema drift. A gen whose inputs and
outputs are as the last one left them returns at once (gen_state.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from flsdk.spec import load_backend
from flsdk.spec.adapter_versions import check_descriptor
from flsdk.spec.loader import check_schemas_with_torch
from flsdk.spec.model import Backend

from . import gen_state, signatures
from .context import build_context, kernel_name, stub_values, variant_kernel_names
from .kernel_check import find_mismatches
from .kernel_scan import scan_kernels
from .writer import GeneratedWriter, WriteReport, atomic_write, with_header

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
# The folder holding the packages flsdk and torch_fl (the repository, or
# site-packages): static outputs are copied from files under it.
DISTRIBUTION = Path(__file__).resolve().parents[2]
STATIC_GLUE_DIR = DISTRIBUTION / "flsdk" / "static_glue"  # the C++ glue copied into generated/
LOCK_FILE = "generated/ops.lock.json"


@dataclass
class GenResult:
    backend: Backend | None   # None when nothing had to run (gen_state): see backend_name
    report: WriteReport
    backend_name: str = ""
    native_count: int = 0     # ops selected native
    up_to_date: bool = False  # inputs and outputs as the last gen left them: nothing ran
    stubs_created: list[str] = field(default_factory=list)
    orphan_kernels: list[str] = field(default_factory=list)   # kernels whose op left the specs
    superseded_stubs: dict[str, str] = field(default_factory=dict)  # stub file -> real kernel file
    drift: list[str] = field(default_factory=list)            # ops whose schema changed
    mismatches: list = field(default_factory=list)            # kernels defined with another signature
    skipped_variants: list[str] = field(default_factory=list)
    adapter_notes: list[str] = field(default_factory=list)    # adapter headers newer than the backend's (compatible)
    adapter_errors: list = field(default_factory=list)        # ... of a new major, or older than the backend's
    memory_change: str = ""                                   # memory.model since the last gen, said once
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
    env.filters["cpp_bool"] = cpp_bool
    return env


def cpp_bool(value: bool) -> str:
    """A Python bool as a C++ literal; anything else is a builder's mistake."""
    if not isinstance(value, bool):
        raise TypeError(f"cpp_bool expects a bool, got {value!r}")
    return "true" if value else "false"


def static_source(source: str) -> str:
    """The text of `source` ("flsdk/static_glue/guard.cpp"), which its generated
    copy repeats after the header."""
    return (DISTRIBUTION / source).read_text()


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


# What moving between memory models changes, for `flsdk gen` to say once.
MEMORY_MODEL_CHANGE = {
    "discrete": ("host code can no longer read device memory: the scaffold's simulated device "
                 "(runtime/simulator/) keeps it unreadable, so a kernel whose host part reads "
                 "data_ptr() crashes naming the op; Inductor's C++ kernels are launched as device "
                 "work (runtime_primitives: host_kernels)"),
    "host": ("host code may read device memory again: the scaffold's simulated device hands "
             "out host memory; Inductor's C++ kernels are called directly"),
}


def _memory_change(root: Path, backend: Backend) -> str:
    """"host -> discrete: ..." when memory.model differs from the last gen's (the lock
    records it); "" otherwise, and for a lock that predates the record."""
    try:
        old = json.loads((root / LOCK_FILE).read_text()).get("memory_model")
    except (OSError, ValueError):
        return ""
    new = backend.descriptor.memory_model
    if old is None or old == new:
        return ""
    return (f"memory.model {old} -> {new}: {MEMORY_MODEL_CHANGE[new]}. Rebuild "
            "(pip install --no-build-isolation .) and run the tests (pytest tests); "
            "docs/runtime-adapter.md, \"Moving between memory models\"")


def generate(root: str | Path, *, check: bool = False, dry_run: bool = False,
             force: bool = False) -> GenResult:
    start = time.perf_counter()
    root = Path(root).resolve()
    digest = None if force else gen_state.inputs_digest(root)
    state = gen_state.load(root, digest) if digest else None
    if state is not None:
        return _up_to_date(state, start)
    backend = load_backend(root)
    check_schemas_with_torch(backend.all_ops)  # custom schemas as TORCH_LIBRARY will parse them
    torch_version = installed_torch_version()
    writer = GeneratedWriter(root, dry_run=dry_run or check, force=force)
    result = GenResult(backend=backend, report=writer.report, backend_name=backend.name,
                       native_count=len(backend.ops))
    result.drift = _drift(root, backend, torch_version)
    result.adapter_notes, result.adapter_errors = check_descriptor(backend.descriptor)
    result.memory_change = _memory_change(root, backend)

    # Stubs first: a new stub changes nothing in the build (stub files are not
    # compiled), but the scan below must see every kernel file.
    scan = scan_kernels(root)
    env = _environment()
    for spec in backend.ops:
        kernel = kernel_name(spec)
        if scan.status(kernel) == "missing":
            rel = f"kernels/{kernel[2:]}.cpp"
            result.stubs_created.append(rel)
            if not (dry_run or check) and not (root / rel).exists():
                stub = env.get_template("kernels/kernel_stub.cpp.j2").render(**stub_values(backend, spec))
                atomic_write(root / rel, stub)
    if result.stubs_created and not (dry_run or check):
        scan = scan_kernels(root)
    wanted = {kernel_name(spec) for spec in backend.ops} | variant_kernel_names(backend)
    result.orphan_kernels = sorted(
        f"{name} ({path})" for name, path in {**scan.stubs, **scan.native}.items() if name not in wanted
    )

    result.superseded_stubs = dict(sorted(scan.superseded.items()))
    ctx = build_context(backend, scan, torch_version)
    result.skipped_variants = ctx.skipped_variants
    declared = {k.kernel: k.decl for k in ctx.kernel_sigs}
    declared.update({w.variant_kernel.kernel: w.variant_kernel.decl for w in ctx.wrappers
                     if w.variant_kernel is not None})
    result.mismatches = find_mismatches(root, declared)
    sources = "device.yaml and op specs"
    for out in ctx.outputs:
        if out.static:
            source = f"{out.static_dir}/{out.template}"
            writer.write(out.path, with_header(out.path, static_source(source),
                                               f"{source}, copied verbatim",
                                               f"change {source} in flsdk"))
            continue
        body = env.get_template(out.template).render(header="", header_py="", header_cmake="",
                                                     **ctx.values, **out.extra)
        writer.write(out.path, with_header(out.path, body.lstrip("\n"), sources))
    for folder in ("generated", "generated/kernel_lib"):
        writer.remove_obsolete(folder, {out.path for out in ctx.outputs})

    functions = signatures.native_functions()
    lock = {"torch_version": torch_version, "memory_model": backend.descriptor.memory_model,
            "schemas": {spec.op: spec.schema if spec.is_custom else str(functions[spec.op].func)
                        for spec in backend.ops}}
    writer.write(LOCK_FILE, json.dumps(lock, indent=1, sort_keys=True) + "\n", generated=False)
    _remember(root, result, dry_run=dry_run, check=check)
    result.seconds = time.perf_counter() - start
    return result


# What an up-to-date gen repeats from the last full one (what it said once, drift,
# a memory-model change and new stubs, it does not repeat).
_REPEATED = ("backend_name", "native_count", "orphan_kernels", "superseded_stubs", "skipped_variants",
             "adapter_notes")


def _remember(root: Path, result: GenResult, *, dry_run: bool, check: bool) -> None:
    """Record a gen that left the outputs right, for the next one (gen_state)."""
    r = result.report
    if dry_run or r.conflicts or result.adapter_errors or result.mismatches or \
            (check and (r.created or r.updated or r.removed or result.stubs_created)):
        gen_state.forget(root)
        return
    outputs = r.created + r.updated + r.unchanged
    gen_state.save(root, gen_state.inputs_digest(root), outputs,
                   {key: getattr(result, key) for key in _REPEATED})


def _up_to_date(state: dict, start: float) -> GenResult:
    result = GenResult(backend=None, report=WriteReport(unchanged=sorted(state["outputs"])),
                       up_to_date=True, **state["summary"])
    result.seconds = time.perf_counter() - start
    return result

