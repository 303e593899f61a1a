"""Load op spec files, device descriptors and whole backends into the model.

Every loader collects all problems it can find and raises them together as
`SpecErrors`; anything a user can get wrong in a YAML file ends up as a
SpecError with file, line and field, never as a Python traceback.

Order of checks per file: YAML syntax, then the JSON Schema (structure),
then meaning (aten names, variants, sizes, selections). A file that fails
its schema gets no meaning checks: its data is not trustworthy enough to
produce useful messages.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as _field
from pathlib import Path

from . import aten
from .dtypes import default_tolerance, did_you_mean
from .errors import ErrorCollector, SpecError, SpecErrors, format_path
from .model import (
    Autocast,
    Backend,
    Codegen,
    Collectives,
    CompileConfig,
    DeviceDescriptor,
    FallbackMode,
    FallbackPolicy,
    KernelLaunch,
    MemoryModel,
    NativeSelection,
    OpSpec,
    SelectionKind,
    Tolerance,
)
from .names import BUILTIN_COMM_BACKENDS, backend_name_problem
from .paths import canonical_opspec_files
from .reference import REFERENCE_EXPECTED, reference_problem
from .samples import check_sample, check_sample_arity
from .schema import validate
from .sizes import SizeError, parse_size
from .yamlfile import Document, load_yaml


def _reports_spec_errors(fn):
    """Public loaders raise SpecErrors only (the CLI catches that one type),
    even for a lone SpecError raised on the way (missing file, broken install)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecErrors:
            raise
        except SpecError as err:
            raise SpecErrors([err]) from None
    return wrapper


# ---------------------------------------------------------------- op specs

@_reports_spec_errors
def load_opspecs(paths: Iterable[str | Path]) -> list[OpSpec]:
    """Load op spec files, in the given order; raise SpecErrors on any problem.

    Checks each file against opspec.schema.json, resolves aten ops against the
    installed torch, and rejects an op defined twice (in one file or across files).
    """
    errors = ErrorCollector()
    ops = _load_opspecs(paths, errors)
    errors.raise_if_any()
    return ops


@dataclass
class _Invalid:
    """What op spec files with errors name: ops and families that exist but did not
    load. A `native:` entry or fallback list naming one of them is not reported again
    as unknown (its spec's own errors say what is wrong)."""

    ops: set[str] = _field(default_factory=set)
    families: set[str] = _field(default_factory=set)
    unreadable: bool = False   # a file whose ops could not be read at all (malformed YAML, no `ops` list)


def _load_opspecs(paths: Iterable[str | Path], errors: ErrorCollector,
                  invalid: _Invalid | None = None) -> list[OpSpec]:
    invalid = _Invalid() if invalid is None else invalid
    ops: list[OpSpec] = []
    seen: dict[str, OpSpec] = {}
    for path in paths:
        for spec in _load_opspec_file(path, errors, invalid):
            first = seen.get(spec.op)
            if first is not None:
                errors.add(SpecError(spec.file, spec.line, "op",
                                     f"duplicate op {spec.op!r}, first defined at {first.file}:{first.line}",
                                     "each op in exactly one op spec file"))
                continue
            seen[spec.op] = spec
            ops.append(spec)
    return ops


def _load_opspec_file(path: str | Path, errors: ErrorCollector, invalid: _Invalid) -> list[OpSpec]:
    try:
        doc = load_yaml(path)
    except SpecError as err:
        errors.add(err)
        invalid.unreadable = True
        invalid.families.add(Path(path).stem)
        return []
    schema_errors = validate(doc, "opspec")
    for problem in schema_errors:
        errors.add(problem)
    clean = _Clean(problem.path for problem in schema_errors)
    if not isinstance(doc.data, dict) or not isinstance(doc.data.get("ops"), list):
        invalid.unreadable = True
        invalid.families.add(Path(path).stem)
        if isinstance(doc.data, dict) and isinstance(doc.data.get("family"), str):
            invalid.families.add(doc.data["family"])
        return []
    # A family with a schema error still lets the ops be checked; the
    # placeholder never reaches a returned OpSpec since the file has errors.
    family = doc.data["family"] if clean(("family",)) else "?"
    out = []
    for i, entry in enumerate(doc.data["ops"]):
        problems = ErrorCollector()
        spec = _build_op(doc, family, i, entry, problems, clean)
        for problem in problems.errors:
            errors.add(problem)
        if spec is not None and not problems and not schema_errors:
            out.append(spec)
        elif isinstance(entry, dict) and isinstance(entry.get("op"), str):
            invalid.ops.add(entry["op"])
    if schema_errors or len(out) < len(doc.data["ops"]):
        invalid.families.add(Path(path).stem)
        if isinstance(doc.data.get("family"), str):
            invalid.families.add(doc.data["family"])
    return out


class _Clean:
    """Which paths have no schema error in, above or below them.

    Meaning checks only look at clean fields, so one structural mistake does
    not hide the other problems of the file nor cause follow-up noise.
    """

    def __init__(self, bad_paths: Iterable[tuple]):
        self.bad = [tuple(p) for p in bad_paths]

    def __call__(self, path: tuple) -> bool:
        n = len(path)
        return not any(b[:n] == path or path[:len(b)] == b for b in self.bad)


def _build_op(doc: Document, family: str, i: int, entry: dict, errors: ErrorCollector,
              clean: _Clean) -> OpSpec | None:
    base = ("ops", i)
    if not isinstance(entry, dict):
        return None
    ok = {key: clean(base + (key,)) for key in
          ("op", "schema", "dtypes", "variants", "autocast", "tolerance", "samples", "skip_conformance",
           "reference", "cpu_reference_dtype")}
    op = entry.get("op") if ok["op"] else None
    custom = op is not None and aten.is_custom(op)
    variants = tuple(entry.get("variants", ())) if ok["variants"] else ()
    schema = entry.get("schema") if ok["schema"] else None
    variant_ops: dict[str, str] = {}

    if op is None:
        pass
    elif custom:
        if "schema" not in entry:
            errors.add(doc.error(base + ("op",), f"custom op {op!r} needs a `schema`",
                                 f'schema: "{op.split("::", 1)[1].split(".")[0]}(Tensor self) -> Tensor"'))
        elif schema is not None:
            try:
                schema = aten.check_custom_schema(op, schema)
            except ValueError as exc:
                errors.add(doc.error(base + ("schema",), str(exc),
                                     f'a schema like "{op.split("::", 1)[1]}(Tensor self) -> Tensor"'))
                schema = None  # nothing below may parse it again
        if "cpu_reference_dtype" in entry:
            errors.add(doc.error(base + ("cpu_reference_dtype",),
                                 "custom ops are compared with their `reference:`",
                                 "no `cpu_reference_dtype` on a custom op (only on aten ops)"))
        if variants:
            errors.add(doc.error(base + ("variants",), "variants are generated only for aten ops",
                                 "no variants on a custom op (declare each overload as its own op)"))
        if ok["reference"] and "reference" in entry:
            problem = reference_problem(entry["reference"])
            if problem:
                errors.add(doc.error(base + ("reference",), problem, REFERENCE_EXPECTED))
        if ok["autocast"] and entry.get("autocast", "none") != "none":
            errors.add(doc.error(base + ("autocast",), "autocast policies are generated only for aten ops",
                                 "no autocast on a custom op (cast its inputs in the kernel or the caller)"))
    else:
        if "schema" in entry:
            errors.add(doc.error(base + ("schema",), "aten ops take their schema from torch",
                                 "no `schema` on an aten op (only on vendor::name ops)"))
        if "reference" in entry:
            errors.add(doc.error(base + ("reference",), "aten ops are tested against PyTorch's CPU kernel",
                                 "no `reference` on an aten op (only on vendor::name ops)"))
        if not aten.exists(op):
            hint = aten.suggestions(op)
            errors.add(doc.error(base + ("op",), f"unknown aten op {op!r}" + (f"; {hint}" if hint else ""),
                                 "an overload name from torch's native_functions.yaml, e.g. add.Tensor"))
        elif variants:
            available = aten.variant_ops(op)
            for j, variant in enumerate(variants):
                if variant in available:
                    variant_ops[variant] = available[variant]
                    continue
                if aten.op_kind(op) != "functional":
                    message = f"{op!r} is {aten.op_kind(op)}; variants are generated from functional ops only"
                else:
                    message = f"{op!r} has no {variant} overload in this torch"
                errors.add(doc.error(base + ("variants", j), message,
                                     "variants among: " + (", ".join(available) or "none for this op")))

    dtypes = tuple(entry["dtypes"]) if ok["dtypes"] else None
    given = entry.get("tolerance", {})
    given = given if isinstance(given, dict) else {}
    for key, tol in given.items():
        if not clean(base + ("tolerance", key)):
            continue
        if dtypes is not None and key not in dtypes:
            errors.add(doc.error(base + ("tolerance", key),
                                 f"tolerance for {key!r}, which the op does not list in dtypes",
                                 "tolerance keys among: " + ", ".join(dtypes)))
        for part in ("atol", "rtol"):
            if not math.isfinite(tol[part]):
                errors.add(doc.error(base + ("tolerance", key, part), f"{tol[part]!r} is not a finite number",
                                     "a number >= 0"))

    reference_map = entry.get("cpu_reference_dtype")
    if ok["cpu_reference_dtype"] and isinstance(reference_map, dict) and dtypes is not None:
        for key in reference_map:
            if key not in dtypes:
                errors.add(doc.error(base + ("cpu_reference_dtype", key),
                                     f"reference dtype for {key!r}, which the op does not list in dtypes",
                                     "keys among: " + ", ".join(dtypes)))

    samples = entry.get("samples", [])
    samples = samples if isinstance(samples, list) else []
    for s, sample in enumerate(samples):
        if not clean(base + ("samples", s)):
            continue
        problems = check_sample(sample)
        for sub, message, expected in problems:
            errors.add(doc.error(base + ("samples", s) + sub, message, expected))
        # Custom ops only: aten samples are checked by running them on CPU
        # (tests/spec/test_opspec_samples.py); parsing all aten schemas here would slow `check`.
        if not problems and custom and isinstance(schema, str) and ok["schema"]:
            for sub, message, expected in check_sample_arity(sample, schema):
                errors.add(doc.error(base + ("samples", s) + sub, message, expected))

    if op is None or dtypes is None or not all(ok.values()):
        return None
    tolerances: dict[str, Tolerance] = {}
    for dtype in dtypes:
        if dtype in given:
            tolerances[dtype] = Tolerance(float(given[dtype]["atol"]), float(given[dtype]["rtol"]))
        else:
            tolerances[dtype] = Tolerance(*default_tolerance(dtype))
    return OpSpec(
        op=op,
        family=family,
        file=doc.file,
        line=doc.line(base),
        dtypes=dtypes,
        variants=variants,
        autocast=Autocast(entry.get("autocast", "none")),
        tolerances=tolerances,
        samples=tuple(samples),
        skip_conformance=entry.get("skip_conformance"),
        schema=schema if custom else None,
        is_custom=custom,
        variant_ops=variant_ops,
        reference=entry.get("reference") if custom else None,
        cpu_reference_dtype=None if custom else entry.get("cpu_reference_dtype"),
        schema_at=(doc.line(base + ("schema",)), format_path(base + ("schema",))) if custom else None,
    )


# ---------------------------------------------------------------- device

@_reports_spec_errors
def load_device(path: str | Path) -> DeviceDescriptor:
    """Load a device.yaml; raise SpecErrors on any problem."""
    errors = ErrorCollector()
    loaded = _load_device(path, errors)
    errors.raise_if_any()
    # No error recorded: _load_device read the whole file (see _LoadedDevice).
    assert loaded is not None and loaded.descriptor is not None
    return loaded.descriptor


@dataclass
class _LoadedDevice:
    """A device.yaml as far as it could be read: the descriptor when the file has no
    error, else None; and what load_backend's cross-file checks need either way (only
    fields without a schema error of their own, so one mistake is reported once)."""

    descriptor: DeviceDescriptor | None
    doc: Document
    name: str | None                        # None: `name` itself is wrong
    dtypes: tuple[str, ...] | None          # None: `dtypes` itself is wrong
    native: list[tuple[int, NativeSelection]] = _field(default_factory=list)   # (index, entry)
    fallback: list[tuple[str, int, str]] = _field(default_factory=list)        # (list, index, entry)


def _at(data, path: tuple, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


class _DeviceReader:
    """One device.yaml being read: its document, the paths free of schema errors,
    and where meaning errors go (each named by file, line and field)."""

    def __init__(self, doc: Document, schema_errors: list, errors: ErrorCollector):
        self.doc, self.data, self.errors = doc, doc.data, errors
        self.clean = _Clean(schema_error.path for schema_error in schema_errors)

    def ok(self, *path) -> bool:
        """The field is present and free of schema errors (in, above or below it)."""
        return self.clean(path) and _at(self.data, path, _MISSING) is not _MISSING

    def error(self, path: tuple, message: str, expected: str) -> None:
        self.errors.add(self.doc.error(path, message, expected))

    def section(self, key: str) -> dict:
        """A mapping section, or {} when it is absent or not a mapping (the schema said so)."""
        value = self.data.get(key, {})
        return value if isinstance(value, dict) else {}

    def size(self, path: tuple, default: int | None = None) -> int:
        if not self.ok(*path):
            return default if default is not None else 0
        try:
            return parse_size(_at(self.data, path))
        except SizeError as exc:
            self.error(path, exc.message, exc.expected)
            return default or 1


def _load_device(path: str | Path, errors: ErrorCollector) -> _LoadedDevice | None:
    """Every problem of the file: schema errors, then the meaning checks of every
    field that has no schema error (a typo in one field hides nothing else)."""
    try:
        doc = load_yaml(path)
    except SpecError as err:
        errors.add(err)
        return None
    schema_errors = validate(doc, "device")
    for schema_error in schema_errors:
        errors.add(schema_error)
    if not isinstance(doc.data, dict):
        return None  # the schema (type: object) reported it
    r = _DeviceReader(doc, schema_errors, errors)
    before = len(errors.errors)
    name = _read_name(r)
    capacity, alignment = r.size(("memory", "capacity")), _read_alignment(r)
    allocator = _read_allocator(r, alignment)
    dtypes, amp, qdtypes = _read_dtypes(r)
    _check_comm(r, name)
    native = _read_native(r, dtypes)
    fallback = _read_fallback(r)
    compile_section = _read_compile(r)
    memory_model, primitives = _read_memory_model_and_primitives(r, compile_section)
    loaded = _LoadedDevice(descriptor=None, doc=doc, name=name, dtypes=dtypes, native=native,
                           fallback=fallback)
    if schema_errors or len(errors.errors) > before:
        return loaded
    # No error in the file: every field read as None above (a field with a schema
    # error of its own) has a value; name and dtypes are required by the schema.
    assert name is not None and dtypes is not None and compile_section is not None
    assert memory_model is not None and primitives is not None
    loaded.descriptor = _descriptor(r, name, capacity, alignment, allocator, dtypes, amp, qdtypes, native,
                                    compile_section, memory_model, primitives)
    return loaded


def _read_name(r: _DeviceReader) -> str | None:
    name: str | None = r.data["name"] if r.ok("name") else None
    if name is not None:
        problem = backend_name_problem(name)
        if problem:
            r.error(("name",), problem, "lowercase letters and _ (what torch.device accepts), "
                                        "not a torch device type, torch module or keyword")
    return name


def _read_alignment(r: _DeviceReader) -> int:
    alignment = r.size(("memory", "alignment"), 512)
    if alignment & (alignment - 1):
        r.error(("memory", "alignment"), f"{alignment} is not a power of two", "e.g. 256, 512, 4096")
    return alignment


def _read_allocator(r: _DeviceReader, alignment: int) -> dict:
    """allocator: round_size, max_split_size (None: unlimited) and the GC threshold."""
    alloc = r.section("allocator")
    round_size = r.size(("allocator", "round_size"), alignment)
    max_split = alloc.get("max_split_size", "unlimited") if r.clean(("allocator", "max_split_size")) \
        else "unlimited"
    if isinstance(max_split, str) and max_split.strip().lower() == "unlimited":
        max_split_size = None
    else:
        max_split_size = r.size(("allocator", "max_split_size"))
    gc = 0.0
    if r.ok("allocator", "garbage_collection_threshold"):
        gc = float(alloc.get("garbage_collection_threshold", 0.0))
    if not math.isfinite(gc):
        r.error(("allocator", "garbage_collection_threshold"), f"{gc!r} is not a number", "a number in [0, 1)")
    return {"round_size": round_size, "max_split_size": max_split_size, "garbage_collection_threshold": gc}


def _read_dtypes(r: _DeviceReader) -> tuple[tuple[str, ...] | None, tuple[str, ...], tuple[str, ...]]:
    """dtypes (None: the field itself is wrong), amp_dtypes and quantization dtypes,
    the last two among the first."""
    dtypes = tuple(r.data["dtypes"]) if r.ok("dtypes") else None
    amp = tuple(r.data["amp_dtypes"]) if r.ok("amp_dtypes") else ()
    qdtypes = tuple(r.section("quantization")["dtypes"]) if r.ok("quantization", "dtypes") else ()
    if dtypes is not None:
        for j, d in enumerate(amp):
            if d not in dtypes:
                r.error(("amp_dtypes", j), f"{d!r} is not in dtypes", "amp dtypes the device supports")
        for j, d in enumerate(qdtypes):
            if d not in dtypes:
                r.error(("quantization", "dtypes", j), f"{d!r} is not in dtypes",
                        "quantized storage dtypes the device supports")
    return dtypes, amp, qdtypes


def _check_comm(r: _DeviceReader, name: str | None) -> None:
    comm = r.data.get("comm_backend") if r.ok("comm_backend") else None
    if comm in BUILTIN_COMM_BACKENDS:
        r.error(("comm_backend",), f"{comm!r} is a torch.distributed backend already",
                f"a name of your own, e.g. {name or 'mychip'}ccl")
    if r.ok("collectives") and r.data.get("collectives") == "native" and not comm:
        r.error(("collectives",), "`collectives: native` registers the backend's collective library "
                "with torch.distributed under `comm_backend`, which is not set",
                f"comm_backend: {name or 'mychip'}ccl")


def _read_native(r: _DeviceReader, dtypes: tuple[str, ...] | None) -> list[tuple[int, NativeSelection]]:
    native: list[tuple[int, NativeSelection]] = []
    entries = r.data.get("native", [])
    for j, item in enumerate(entries if isinstance(entries, list) else []):
        if not r.clean(("native", j)):
            continue
        selection = _native_selection(r.doc, j, item, dtypes, r.errors)
        if selection is not None:
            native.append((j, selection))
    return native


def _read_fallback(r: _DeviceReader) -> list[tuple[str, int, str]]:
    """The deny and allow lists' entries, aten ones checked against the installed torch."""
    fb = r.section("fallback")
    fallback: list[tuple[str, int, str]] = []
    for listname in ("deny", "allow"):
        for j, entry in enumerate(fb.get(listname, []) if r.ok("fallback", listname) else []):
            fallback.append((listname, j, entry))
            if aten.is_custom(entry) and not entry.startswith("aten::"):
                continue  # vendor ops are checked against the backend's specs by load_backend
            if not aten.matches_op_or_base(entry):
                hint = aten.fallback_suggestions(entry)
                r.error(("fallback", listname, j), f"unknown aten op {entry!r}" + (f"; {hint}" if hint else ""),
                        "an op overload (add.Tensor) or base name (add)")
    return fallback


def _read_compile(r: _DeviceReader) -> dict | None:
    """The compile section (default codegen none), None when it has a schema error;
    keys that do not apply to its codegen are errors."""
    data = r.data
    section = data.get("compile", {"codegen": "none"}) if r.ok("compile") or "compile" not in data else None
    if section is None:
        return None
    codegen = section["codegen"]
    if codegen != "triton":
        for key in ("triton_backend", "cudagraphs", "autotune"):
            if key in section:
                r.error(("compile", key), f"`{key}` applies to codegen triton only, not {codegen}",
                        "remove it, or set codegen: triton")
    if codegen == "none" and "channels_last" in section:
        r.error(("compile", "channels_last"), "`channels_last` applies to codegen cpp or triton, not none "
                "(nothing is compiled)", "remove it, or set codegen: cpp or triton")
    if codegen != "cpp" and "sleef_u35" in section:
        r.error(("compile", "sleef_u35"), "`sleef_u35` applies to codegen cpp only (Inductor's C++ kernels), "
                f"not {codegen}", "remove it, or set codegen: cpp")
    return section


def _read_memory_model_and_primitives(r: _DeviceReader, compile_section: dict | None
                                      ) -> tuple[str | None, tuple[str, ...] | None]:
    """memory.model and runtime_primitives (None: the field itself is wrong); Inductor's
    C++ kernels on a discrete device need host_kernels."""
    memory_model = r.section("memory").get("model", "host") if r.clean(("memory", "model")) else None
    primitives = tuple(r.data.get("runtime_primitives", ())) if r.clean(("runtime_primitives",)) else None
    if (compile_section is not None and compile_section["codegen"] == "cpp" and memory_model == "discrete"
            and primitives is not None and "host_kernels" not in primitives):
        r.error(("compile", "codegen"),
                "codegen cpp makes Inductor's kernels host code, which cannot read the memory of a discrete "
                "device (memory.model: discrete) unless the runtime runs host code on a stream with the "
                "device's view of its pointers",
                "add host_kernels to runtime_primitives (and implement launch_host_kernel and device_view "
                "in runtime/adapter.cpp), or use codegen triton or none")
    return memory_model, primitives


def _descriptor(r: _DeviceReader, name: str, capacity: int, alignment: int, allocator: dict,
                dtypes: tuple[str, ...], amp: tuple[str, ...], qdtypes: tuple[str, ...],
                native: list[tuple[int, NativeSelection]], compile_section: dict, memory_model: str,
                primitives: tuple[str, ...]) -> DeviceDescriptor:
    """The descriptor of an error-free file: what was read, the defaults filled in."""
    data, upper = r.data, name.upper()
    memory, fb = r.section("memory"), r.section("fallback")
    count = data.get("device_count", {"default": 1})
    units = data.get("compute_units", {"default": 1})
    return DeviceDescriptor(
        name=name,
        display_name=data.get("display_name", name),
        device_count_default=int(count["default"]),
        device_count_env=count.get("env", f"{upper}_DEVICE_COUNT"),
        memory_capacity=capacity,
        memory_capacity_env=memory.get("capacity_env", f"{upper}_MEMORY_CAPACITY"),
        memory_alignment=alignment,
        allocator=allocator | {"env": r.section("allocator").get("env", f"{upper}_ALLOC_CONF")},
        dtypes=dtypes,
        amp_dtypes=amp,
        quantization_schemes=tuple(r.section("quantization").get("schemes", ())),
        quantization_dtypes=qdtypes,
        comm_backend=data.get("comm_backend"),
        native=tuple(sel for _, sel in native),
        fallback=FallbackPolicy(
            mode=FallbackMode(fb.get("mode", "allow")),
            deny=tuple(fb.get("deny", ())),
            allow=tuple(fb.get("allow", ())),
            warn_env=fb.get("warn_once_env", f"{upper}_FALLBACK_WARN"),
        ),
        file=r.doc.file,
        compile=_compile_config(compile_section, name),
        compute_units=0 if units["default"] == "auto" else int(units["default"]),
        compute_units_env=units.get("env", f"{upper}_COMPUTE_UNITS"),
        memory_model=MemoryModel(memory_model),
        kernel_launch=KernelLaunch(data.get("kernel_launch", "inline")),
        runtime_primitives=primitives,
        collectives=Collectives(data.get("collectives", "staged")),
        device_code_suffixes=tuple((data.get("device_code") or {}).get("suffixes", ())),
        device_code_language=(data.get("device_code") or {}).get("language", ""),
        adapter_versions=dict(data.get("adapter_versions") or {}),
    )


_MISSING = object()
_NATIVE_ENTRY = "exactly one of `opspec: <all|family>` or `op: <name>` per entry"


def _native_selection(doc: Document, j: int, item: dict, device_dtypes: tuple[str, ...] | None,
                      errors: ErrorCollector) -> NativeSelection | None:
    """One schema-valid `native` entry as a NativeSelection, or None (errors added)."""
    base = ("native", j)
    if "op" in item and "opspec" in item:
        errors.add(doc.error(base, "selects a family (`opspec`) and an op (`op`) at once", _NATIVE_ENTRY))
        return None
    if "dtypes" in item and "op" not in item:
        if "opspec" in item:
            errors.add(doc.error(base + ("dtypes",), "`dtypes` narrows one op, not a family",
                                 f"a separate `{{op: <name>, dtypes: [...]}}` entry for each op of "
                                 f"{item['opspec']!r} to narrow"))
        else:
            errors.add(doc.error(base + ("dtypes",), "`dtypes` without an `op`", "{op: <name>, dtypes: [...]}"))
        return None
    dtypes = None
    if "dtypes" in item:
        dtypes = tuple(item["dtypes"])
        bad = False
        for k, dtype in enumerate(dtypes):
            if device_dtypes is not None and dtype not in device_dtypes:
                bad = True
                errors.add(doc.error(base + ("dtypes", k), f"{dtype!r} is not in the device's dtypes",
                                     "dtypes among device.yaml `dtypes`: " + ", ".join(device_dtypes)))
        if bad:
            return None
    kind = SelectionKind.OP if "op" in item else SelectionKind.OPSPEC
    return NativeSelection(kind=kind, name=item[kind.value], line=doc.line(base), dtypes=dtypes)


def _compile_config(section: dict, name: str) -> CompileConfig:
    """device.yaml `compile` (schema-validated), defaults filled in."""
    codegen = Codegen(section["codegen"])
    return CompileConfig(
        codegen=codegen,
        triton_backend=section.get("triton_backend", name) if codegen == "triton" else None,
        cudagraphs=bool(section.get("cudagraphs", False)),
        autotune=bool(section.get("autotune", False)),
        channels_last=bool(section.get("channels_last", False)),
        sleef_u35=tuple(section.get("sleef_u35", ())),
    )


# ---------------------------------------------------------------- backend

def backend_opspec_files(root: str | Path, canonical: Iterable[str | Path] | None = None) -> list[Path]:
    """Op spec files a backend sees: the canonical ones, then root/opspec/*.yaml.

    `canonical` replaces the installed canonical files (tests, or a vendor
    pinning its own copy); None means `flsdk.spec.paths.canonical_opspec_files()`.
    """
    files = [Path(p) for p in (canonical_opspec_files() if canonical is None else canonical)]
    own = Path(root) / "opspec"
    known = {p.resolve() for p in files}
    if own.is_dir():
        files += [p for p in sorted(own.glob("*.yaml")) if p.is_file() and p.resolve() not in known]
    return files


@_reports_spec_errors
def load_backend(root: str | Path, canonical: Iterable[str | Path] | None = None) -> Backend:
    """Load a backend repo: root/device.yaml, the canonical op specs and the
    backend's own root/opspec/*.yaml, and resolve the `native` selection.

    `canonical`: see backend_opspec_files (None = the installed canonical set).

    Raises SpecErrors with every problem found in any of those files.
    """
    root = Path(root)
    errors = ErrorCollector()
    device_path = root / "device.yaml"
    if not device_path.is_file():
        raise SpecError(str(device_path), None, "", "file not found",
                        "a backend directory containing device.yaml") from None
    device = _load_device(device_path, errors)
    invalid = _Invalid()
    all_ops = _load_opspecs(backend_opspec_files(root, canonical), errors, invalid)
    if device is None:
        errors.raise_if_any()
    # _load_device returns None only after recording an error.
    assert device is not None
    doc = device.doc

    for spec in all_ops:
        if spec.is_custom and device.name is not None and spec.namespace != device.name:
            errors.add(SpecError(spec.file, spec.line, "op",
                                 f"custom op namespace {spec.namespace!r} is not the backend name",
                                 f"{device.name}::{spec.name.split('.')[0]}"))

    def only_invalid(name: str) -> bool:
        """`name` has a spec that did not load (or may be in an unreadable file):
        its spec's errors are reported, a 'no op spec' here would only mislead."""
        if name in invalid.ops:
            return True
        own_custom = aten.is_custom(name) and not name.startswith("aten::")
        return own_custom and invalid.unreadable

    by_name = {spec.op: spec for spec in all_ops}
    families = sorted({spec.family for spec in all_ops})
    selected: set[str] = set()
    op_dtypes: dict[str, tuple[str, ...]] = {}
    narrowed_at: dict[str, int] = {}
    for j, sel in device.native:
        field = ("native", j, sel.kind)
        if sel.kind == "opspec":
            if sel.name == "all":
                selected.update(by_name)
            elif sel.name in families:
                selected.update(s.op for s in all_ops if s.family == sel.name)
            elif sel.name in invalid.families:
                pass  # the family's file has errors, reported there
            else:
                hint = did_you_mean(sel.name, families + ["all"])
                errors.add(doc.error(field, f"unknown op family {sel.name!r}" + (f"; {hint}" if hint else ""),
                                     "all, or one of the families: "
                                     + (", ".join(families) or "(no op spec files found)")))
        else:
            if sel.name in by_name:
                selected.add(sel.name)
                if sel.dtypes is not None:
                    _narrow(doc, j, sel, by_name[sel.name], op_dtypes, narrowed_at, errors)
            elif only_invalid(sel.name):
                pass
            elif not aten.is_custom(sel.name) and aten.exists(sel.name):
                variant = _variant_of(sel.name, all_ops)
                if variant is not None:  # relu_, add.out: generated from their functional op
                    kind, spec = variant
                    listed = kind in spec.variants
                    errors.add(doc.error(
                        field, f"{sel.name!r} is the {'in-place' if kind == 'inplace' else 'out='} form of "
                        f"{spec.op!r}, which its op spec ({spec.file}:{spec.line}) "
                        + ("generates from it (variants: [" + ", ".join(spec.variants) + "])" if listed
                           else f"can generate (add `{kind}` to its variants)"),
                        f"list {spec.op!r} instead; {sel.name!r} then comes with it"))
                else:
                    errors.add(doc.error(field, f"{sel.name!r} has no op spec",
                                         "add it to an op spec file (opspec/*.yaml of the backend) first"))
            elif aten.is_custom(sel.name) and not sel.name.startswith("aten::"):
                # The custom-op counterpart of the hint above: where its spec goes, with
                # the fields it needs; close names only among the custom ops.
                hint = aten.op_suggestions(sel.name, [n for n in by_name if aten.is_custom(n)])
                base = sel.name.split("::", 1)[1].split(".")[0]
                errors.add(doc.error(field, f"custom op {sel.name!r} has no op spec" + (f"; {hint}" if hint else ""),
                                     f"define it in an op spec file of the backend, opspec/<family>.yaml: "
                                     f"`- op: {sel.name}` with `schema: \"{base}(Tensor self) -> Tensor\"` "
                                     f"and `dtypes: [float32]` (docs/custom-ops.md)"))
            else:
                hint = aten.op_suggestions(sel.name, list(by_name))
                if not hint and not aten.is_custom(sel.name):
                    hint = aten.suggestions(sel.name)
                errors.add(doc.error(field, f"unknown op {sel.name!r}" + (f"; {hint}" if hint else ""),
                                     "an op listed in an op spec file"))

    for listname, j, entry in device.fallback:
        if (aten.is_custom(entry) and not entry.startswith("aten::") and entry not in by_name
                and not only_invalid(entry)):
            errors.add(doc.error(("fallback", listname, j), f"unknown custom op {entry!r}",
                                 "a custom op defined in the backend's opspec/*.yaml"))

    errors.raise_if_any()
    # No error in device.yaml either, so it loaded whole.
    assert device.descriptor is not None
    ops = [spec for spec in all_ops if spec.op in selected]
    return Backend(descriptor=device.descriptor, ops=ops, all_ops=all_ops, root=root, op_dtypes=op_dtypes)


def _variant_of(name: str, all_ops: list[OpSpec]) -> tuple[str, OpSpec] | None:
    """("inplace" | "out", the spec of the functional op) when aten op `name` is the
    in-place or out= overload of an op with a spec (`relu_` of `relu`), else None."""
    for spec in all_ops:
        if spec.is_custom or not aten.exists(spec.op):
            continue
        for kind, overload in aten.variant_ops(spec.op).items():
            if overload == name:
                return kind, spec
    return None


def _narrow(doc: Document, j: int, sel: NativeSelection, spec: OpSpec, op_dtypes: dict,
            narrowed_at: dict, errors: ErrorCollector) -> None:
    """`{op: <name>, dtypes: [...]}`: the dtypes must be the op spec's (the device's
    were checked with device.yaml), and one entry per op narrows it."""
    if sel.name in narrowed_at:
        errors.add(doc.error(("native", j, "dtypes"),
                             f"{sel.name!r} is narrowed twice (first at line {narrowed_at[sel.name]})",
                             "one `dtypes` list per op"))
        return
    assert sel.dtypes is not None  # load_backend narrows only entries with dtypes
    narrowed_at[sel.name] = sel.line
    bad = False
    for k, dtype in enumerate(sel.dtypes):
        if dtype not in spec.dtypes:
            bad = True
            errors.add(doc.error(("native", j, "dtypes", k),
                                 f"{dtype!r} is not among the dtypes of {sel.name!r} ({spec.file}:{spec.line})",
                                 "dtypes among: " + ", ".join(spec.dtypes)))
    if not bad:
        op_dtypes[sel.name] = sel.dtypes


def check_schemas_with_torch(ops: Iterable[OpSpec]) -> None:
    """Raise SpecErrors for custom ops whose schema PyTorch's own parser refuses
    (torchgen's, which the loaders use, accepts some of those). It imports torch
    (~2 s), so `flsdk check` and `flsdk gen` call it, not every load."""
    errors = ErrorCollector()
    for spec in ops:
        if spec.is_custom and spec.schema and spec.schema_at:
            problem = aten.torch_schema_problem(spec.op, spec.schema)
            if problem:
                line, field = spec.schema_at
                base = spec.name.split(".")[0]
                errors.add(SpecError(spec.file, line, field, f"cannot parse schema: {problem}",
                                     f'a schema like "{base}(Tensor self) -> Tensor"'))
    errors.raise_if_any()


__all__ = ["load_opspecs", "load_device", "load_backend", "backend_opspec_files", "check_schemas_with_torch"]
