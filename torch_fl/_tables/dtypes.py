"""The one table of dtypes: names, kinds, default tolerances, C++ enumerators.

Torch-free, so both flsdk (spec validation, code generation; it re-exports these
names as flsdk.spec.dtypes) and torch_fl (conformance comparisons, precision
checks) read their dtype facts from here. Names are torch's (`torch.<name>`); the
JSON Schemas' dtype enums must equal `list(DTYPES)` (tests/spec/test_spec_yaml.py
checks it).

Each dtype carries the default conformance tolerance used when an op spec gives
none for it; the values are those of `torch.testing.assert_close`, so a
conformance test without explicit tolerances is as strict as PyTorch's own
comparison. Integer and bool results must match exactly.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import NamedTuple


class Dtype(NamedTuple):
    kind: str           # "float" | "complex" | "int" | "bool"
    atol: float         # default conformance tolerance
    rtol: float
    scalar_type: str    # c10::ScalarType enumerator


# In the order the schemas' enums list them.
DTYPES: dict[str, Dtype] = {
    "float32": Dtype("float", 1e-5, 1.3e-6, "Float"),
    "float64": Dtype("float", 1e-7, 1e-7, "Double"),
    "float16": Dtype("float", 1e-5, 1e-3, "Half"),
    "bfloat16": Dtype("float", 1e-5, 1.6e-2, "BFloat16"),
    "int64": Dtype("int", 0.0, 0.0, "Long"),
    "int32": Dtype("int", 0.0, 0.0, "Int"),
    "int16": Dtype("int", 0.0, 0.0, "Short"),
    "int8": Dtype("int", 0.0, 0.0, "Char"),
    "uint8": Dtype("int", 0.0, 0.0, "Byte"),
    "bool": Dtype("bool", 0.0, 0.0, "Bool"),
    "complex64": Dtype("complex", 1e-5, 1.3e-6, "ComplexFloat"),
    "complex128": Dtype("complex", 1e-7, 1e-7, "ComplexDouble"),
    "uint16": Dtype("int", 0.0, 0.0, "UInt16"),
    "uint32": Dtype("int", 0.0, 0.0, "UInt32"),
    "uint64": Dtype("int", 0.0, 0.0, "UInt64"),
}

# torch's other spellings of the same dtypes (torch.float is torch.float32).
ALIASES: dict[str, str] = {
    "float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
}

# Dtypes a quantized tensor can be stored as (quint8, qint8, qint32).
QUANT_DTYPES = ("int8", "uint8", "int32")

# torch.qscheme values.
QSCHEMES = (
    "per_tensor_affine",
    "per_channel_affine",
    "per_channel_affine_float_qparams",
    "per_tensor_symmetric",
    "per_channel_symmetric",
)

# Reduced-precision dtypes autocast can lower to.
AMP_DTYPES = ("float16", "bfloat16")


def canonical(name: str) -> str:
    """'half' -> 'float16'; table names pass through; KeyError for unknown names."""
    name = ALIASES.get(name, name)
    if name not in DTYPES:
        raise KeyError(name)
    return name


def is_floating(name: str) -> bool:
    return DTYPES[name].kind == "float"


def default_tolerance(name: str) -> tuple[float, float]:
    """(atol, rtol) used when an op spec gives no tolerance for `name`."""
    info = DTYPES[canonical(name)]
    return info.atol, info.rtol


def tolerance_for(name: str) -> tuple[float, float]:
    """default_tolerance of a torch dtype's name (`str(dtype)`: "torch.float16" or
    "float16"); (0, 0), exact, for a dtype the table does not hold (quantized, float8)."""
    name = name.removeprefix("torch.")
    return default_tolerance(name) if name in DTYPES else (0.0, 0.0)


def scalar_type(name: str) -> str:
    """'float32' -> 'Float' (the c10::ScalarType enumerator)."""
    return DTYPES[canonical(name)].scalar_type


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """' (did you mean X, Y?)'-style hint, or '' when nothing is close.

    Case-insensitive first: `Float32` -> `float32` even though difflib's
    ratio for it is low on short words.
    """
    choices = list(choices)
    lower = {c.lower(): c for c in choices}
    if word.lower() in lower and lower[word.lower()] != word:
        matches = [lower[word.lower()]]
    else:
        matches = difflib.get_close_matches(word, choices, n=n, cutoff=0.6)
        if not matches:
            by_lower = difflib.get_close_matches(word.lower(), list(lower), n=n, cutoff=0.6)
            matches = [lower[m] for m in by_lower]
    if not matches:
        return ""
    return "did you mean " + ", ".join(repr(m) for m in matches) + "?"
