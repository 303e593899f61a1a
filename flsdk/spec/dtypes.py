"""The fixed table of dtype names op specs and descriptors may use.

Names are torch's (`torch.<name>`). Each carries the default conformance
tolerance used when an op spec gives none for that dtype; the values are
those of `torch.testing.assert_close`, so a conformance test without explicit
tolerances is as strict as PyTorch's own comparison.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# name -> (kind, default atol, default rtol)
DTYPES: dict[str, tuple[str, float, float]] = {
    "float32": ("float", 1e-5, 1.3e-6),
    "float64": ("float", 1e-7, 1e-7),
    "float16": ("float", 1e-5, 1e-3),
    "bfloat16": ("float", 1e-5, 1.6e-2),
    "int64": ("int", 0.0, 0.0),
    "int32": ("int", 0.0, 0.0),
    "int16": ("int", 0.0, 0.0),
    "int8": ("int", 0.0, 0.0),
    "uint8": ("int", 0.0, 0.0),
    "bool": ("bool", 0.0, 0.0),
    "complex64": ("complex", 1e-5, 1.3e-6),
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


def is_floating(name: str) -> bool:
    return DTYPES[name][0] == "float"


def default_tolerance(name: str) -> tuple[float, float]:
    """(atol, rtol) used when an op spec gives no tolerance for `name`."""
    _, atol, rtol = DTYPES[name]
    return atol, rtol


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
