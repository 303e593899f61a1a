"""Resolution of op names against the installed torch's ATen operators.

The truth is torch's own native_functions.yaml, parsed by torchgen through
`flsdk.codegen.signatures.native_functions()` (imported lazily: torchgen costs
about a second, and a malformed spec file should fail before paying it). From
it we build, once per process, an index of overload names and of each
functional op's in-place and out siblings: torchgen's `FunctionSchema.signature()`
strips in-place/out-ness, so ops with equal signatures form one group, the
same rule torchgen uses for NativeFunctionsGroup.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass

from .dtypes import did_you_mean


@dataclass(frozen=True)
class _Index:
    kinds: dict[str, str]                 # "add.Tensor" -> "functional"
    variants: dict[str, dict[str, str]]   # "add.Tensor" -> {"inplace": "add_.Tensor", "out": "add.out"}
    bases: frozenset[str]                 # "add", "relu", ...


@functools.lru_cache(maxsize=1)
def _index() -> _Index:
    from torchgen.model import SchemaKind

    from flsdk.codegen.signatures import native_functions

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
    (`acme::fused_gelu` -> `fused_gelu(Tensor x) -> Tensor`).
    """
    from torchgen.model import FunctionSchema

    try:
        parsed = FunctionSchema.parse(schema.strip())
    except Exception as exc:  # torchgen raises AssertionError/ValueError/... on bad text
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot parse schema: {detail}") from None
    want = op.split("::", 1)[1]
    if str(parsed.name) != want:
        raise ValueError(f"schema names {str(parsed.name)!r} but the op is {want!r}")
    return str(parsed)
