"""Resolution of op names against the installed torch's ATen operators.

The truth is torch's own native_functions.yaml, parsed by torchgen through
`native_functions()` below (torchgen is imported lazily: it costs about a
second, and a malformed spec file should fail before paying it). From
it we build, once per process, an index of overload names and of each
functional op's in-place and out siblings: torchgen's `FunctionSchema.signature()`
strips in-place/out-ness, so ops with equal signatures form one group, the
same rule torchgen uses for NativeFunctionsGroup.

Parsing native_functions.yaml costs 1-7 s depending on machine load, which
would dominate `flsdk check`. The small index (names, kinds, variants) is
therefore cached as JSON under $FLSDK_CACHE_DIR, else $XDG_CACHE_HOME/flsdk,
else ~/.cache/flsdk, keyed by the yaml's path, size and mtime, so a torch
upgrade invalidates it. Set FLSDK_NO_CACHE=1 to bypass it. A cache that
cannot be read or written is ignored: it only ever costs speed.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .dtypes import did_you_mean


@dataclass(frozen=True)
class _Index:
    kinds: dict[str, str]                 # "add.Tensor" -> "functional"
    variants: dict[str, dict[str, str]]   # "add.Tensor" -> {"inplace": "add_.Tensor", "out": "add.out"}
    bases: frozenset[str]                 # "add", "relu", ...


_CACHE_FORMAT = 1


def _native_yaml() -> Path | None:
    """torchgen's packaged native_functions.yaml, found without importing torchgen."""
    spec = importlib.util.find_spec("torchgen")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "packaged" / "ATen" / "native" / "native_functions.yaml"
        if path.is_file():
            return path
    return None


def cache_dir() -> Path:
    if os.environ.get("FLSDK_CACHE_DIR"):
        return Path(os.environ["FLSDK_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flsdk"


def _cache_key() -> dict | None:
    path = _native_yaml()
    if path is None:
        return None
    st = path.stat()
    return {"format": _CACHE_FORMAT, "yaml": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cache_path(key: dict) -> Path:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"aten-index-{digest}.json"


def _read_cache(key: dict) -> _Index | None:
    try:
        data = json.loads(_cache_path(key).read_text(encoding="utf-8"))
        if data["key"] != key:
            return None
        return _Index(kinds=dict(data["kinds"]), variants={k: dict(v) for k, v in data["variants"].items()},
                      bases=frozenset(data["bases"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_cache(key: dict, index: _Index) -> None:
    data = {"key": key, "kinds": index.kinds, "variants": index.variants, "bases": sorted(index.bases)}
    target = _cache_path(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # write-then-rename: a concurrent reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".aten-index-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, target)
    except OSError:
        pass


@functools.lru_cache(maxsize=1)
def _index() -> _Index:
    key = None if os.environ.get("FLSDK_NO_CACHE") else _cache_key()
    if key is not None:
        cached = _read_cache(key)
        if cached is not None:
            return cached
    index = build_index()
    if key is not None:
        _write_cache(key, index)
    return index


@functools.lru_cache(maxsize=1)
def native_functions() -> dict:
    """All ATen overloads of the installed torch, by `name.overload`, as
    torchgen NativeFunction objects (the model codegen builds on)."""
    import torchgen
    from torchgen.gen import parse_native_yaml

    root = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(
        os.path.join(root, "native_functions.yaml"),
        os.path.join(root, "tags.yaml"),
    )
    return {str(f.func.name): f for f in parsed.native_functions}


def build_index() -> _Index:
    """Parse native_functions.yaml through torchgen (slow; _index caches it)."""
    from torchgen.model import SchemaKind

    groups: dict[object, dict[SchemaKind, str]] = {}
    kinds: dict[str, str] = {}
    for name, f in native_functions().items():
        kind = f.func.kind()
        kinds[name] = kind.name
        groups.setdefault(f.func.signature(), {}).setdefault(kind, name)
    variants: dict[str, dict[str, str]] = {}
    for group in groups.values():
        functional = group.get(SchemaKind.functional)
        if functional is None:
            continue
        variants[functional] = {
            label: group[kind]
            for label, kind in (("inplace", SchemaKind.inplace), ("out", SchemaKind.out))
            if kind in group
        }
    bases = frozenset(name.partition(".")[0] for name in kinds)
    return _Index(kinds=kinds, variants=variants, bases=bases)


def is_custom(op: str) -> bool:
    """`acme::fused_gelu` is custom; aten ops are written without namespace."""
    return "::" in op


def exists(op: str) -> bool:
    """Whether `op` (`add.Tensor`, `relu`) is an overload of the installed torch."""
    return op in _index().kinds


def suggestions(op: str) -> str:
    """'did you mean ...?' for an unknown op name, or ''."""
    return op_suggestions(op, _index().kinds)


def op_suggestions(op: str, choices) -> str:
    """Like did_you_mean, but overloads of the same base name come first:
    for `relu.Tensor`, `relu` is the likely intent even though difflib
    ranks `mul.Tensor` closer."""
    choices = list(choices)
    base = op.partition(".")[0]
    same = [c for c in choices if c.partition(".")[0] == base]
    same.sort(key=lambda c: -difflib.SequenceMatcher(None, op.lower(), c.lower()).ratio())
    same = same[:3]
    if not same:
        return did_you_mean(op, choices)
    return "did you mean " + ", ".join(repr(c) for c in same) + "?"


def op_kind(op: str) -> str:
    """'functional', 'inplace', 'out', 'mutable' or 'scratch' (torchgen's SchemaKind)."""
    return _index().kinds[op]


def variant_ops(op: str) -> dict[str, str]:
    """In-place and out overloads generated from functional op `op`.

    `variant_ops("add.Tensor") == {"inplace": "add_.Tensor", "out": "add.out"}`;
    keys are present only for overloads that exist. Ops that are not
    functional have no variants ({}). Raises KeyError for an unknown op.
    """
    if op not in _index().kinds:
        raise KeyError(op)
    return dict(_index().variants.get(op, {}))


def matches_op_or_base(name: str) -> bool:
    """For fallback lists: a full overload name (`add.Tensor`) or a base name
    (`add`, meaning every overload); an `aten::` prefix is accepted."""
    name = name.removeprefix("aten::")
    return name in _index().kinds or name in _index().bases


def fallback_suggestions(name: str) -> str:
    name = name.removeprefix("aten::")
    return did_you_mean(name, list(_index().kinds) + sorted(_index().bases))


def check_custom_schema(op: str, schema: str) -> str:
    """Parse a custom op's schema; return it normalized, or raise ValueError.

    The schema is written without namespace and its name must be the op's
    (`acme::fused_gelu` -> `fused_gelu(Tensor x) -> Tensor`). torchgen's parser
    (which codegen uses) is lenient where PyTorch's is not (`float a=(1.0` parses
    as a default of `(1.0`): unbalanced brackets are refused here, and
    torch_schema_problem asks PyTorch's own parser (it imports torch, ~2 s, so
    `flsdk check` and `gen` call it, not every load).
    """
    from torchgen.model import FunctionSchema

    text = schema.strip()
    problem = _bracket_problem(text)
    if problem:
        raise ValueError(f"cannot parse schema: {problem}")
    try:
        parsed = FunctionSchema.parse(text)
    except Exception as exc:  # torchgen raises AssertionError/ValueError/... on bad text
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot parse schema: {detail}") from None
    want = op.split("::", 1)[1]
    if str(parsed.name) != want:
        raise ValueError(f"schema names {str(parsed.name)!r} but the op is {want!r}")
    return str(parsed)


def _bracket_problem(text: str) -> str:
    """'unclosed ( at column 11' and the like, or '' (quoted defaults are skipped)."""
    pairs = {")": "(", "]": "["}
    stack: list[tuple[str, int]] = []
    quote = None
    for col, ch in enumerate(text, 1):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            stack.append((ch, col))
        elif ch in pairs:
            if not stack or stack[-1][0] != pairs[ch]:
                return f"{ch} at column {col} closes nothing"
            stack.pop()
    if stack:
        ch, col = stack[-1]
        return f"unclosed {ch} at column {col}"
    return ""


def torch_schema_problem(op: str, schema: str) -> str:
    """What PyTorch's schema parser (the one TORCH_LIBRARY's def uses when the backend
    loads) says about custom op `op`'s schema, or '' when it accepts it."""
    import torch

    qualified = f"{op.split('::', 1)[0]}::{schema.strip()}"
    try:
        torch._C.parse_schema(qualified)
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()
        detail = lines[0].removesuffix(":").removesuffix(" here").strip() if lines else "refused"
        marker = next((line for line in lines if "~" in line and "HERE" in line), None)
        if marker is not None and len(lines) >= 2:
            # the line above the marker is the schema; the ~ is under the offending character
            schema_line = lines[lines.index(marker) - 1]
            column = marker.index("~") - (len(schema_line) - len(schema_line.lstrip()))
            column -= len(qualified.split("::", 1)[0]) + 2  # as written, without `ns::`
            if column >= 0:
                detail += f" at column {column + 1}"
        return f"{detail} (PyTorch's schema parser)"
    return ""
