"""Static check of conformance samples (the sample DSL of docs/architecture.md).

A sample is a list of positional arguments, optionally ending with a mapping
of keyword arguments. Strings that look like tensor constructors (`T(`, `F(`,
`L(`, `B(`) must follow the grammar, and `dtype:<name>` must name a known
dtype; other strings are literal arguments (e.g. rounding_mode "floor").
Catching a typo here gives a file:line at `flsdk check` time instead of a
failure inside a generated conformance test.
"""

from __future__ import annotations

import re

from .dtypes import DTYPES, did_you_mean

_DIMS = r"\s*(?:\d+\s*(?:,\s*\d+\s*)*,?)?\s*"
_NUM = r"\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*"
_VIEW = r"(?:\.t\(\))?"
_TENSOR_RES = [
    # T(2,3) F(2,3), optionally strictly positive (+) or uniform in [lo, hi), optionally .t()
    re.compile(rf"^[TF]\({_DIMS}\)(?:\+|\[{_NUM},{_NUM}\])?{_VIEW}$"),
    # L(2,3;10): int64 in [0, 10)
    re.compile(rf"^L\({_DIMS}(?:;\s*\d+\s*)?\){_VIEW}$"),
    # B(2,3): bool
    re.compile(rf"^B\({_DIMS}\){_VIEW}$"),
]
_LOOKS_TENSOR = re.compile(r"^[TFLB]\(")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

EXPECTED_TENSOR = 'T(2,3), T(2,3)+, T(2,3)[0,1], T(2,3).t(), T(), F(2,3), L(2,3;10), B(2,3)'


def check_sample(sample: list) -> list[tuple[tuple, str, str]]:
    """Problems in one sample as (sub-path, message, expected); [] when fine."""
    problems: list[tuple[tuple, str, str]] = []
    for i, arg in enumerate(sample):
        if isinstance(arg, dict):
            if i != len(sample) - 1:
                problems.append(((i,), "keyword arguments must be the last entry of a sample",
                                 "[positional..., {name: value}]"))
            for key, value in arg.items():
                if not _IDENT.match(key):
                    problems.append(((i, key), f"{key!r} is not an argument name", "an identifier"))
                problems.extend(((i, key) + p, m, e) for p, m, e in _check_value(value))
        else:
            problems.extend(((i,) + p, m, e) for p, m, e in _check_value(arg))
    return problems


def _check_value(value: object) -> list[tuple[tuple, str, str]]:
    if isinstance(value, str):
        if _LOOKS_TENSOR.match(value) and not any(r.match(value) for r in _TENSOR_RES):
            return [((), f"malformed tensor argument {value!r}", EXPECTED_TENSOR)]
        if value.startswith("dtype:"):
            name = value[len("dtype:"):]
            if name not in DTYPES:
                hint = did_you_mean(name, DTYPES)
                return [((), f"unknown dtype {name!r}" + (f"; {hint}" if hint else ""),
                         "dtype:<name> with a name from " + ", ".join(DTYPES))]
        return []
    if isinstance(value, list):
        out = []
        for j, item in enumerate(value):
            out.extend(((j,) + p, m, e) for p, m, e in _check_value(item))
        return out
    if isinstance(value, dict):
        return [((), "a mapping is only allowed as the last entry (keyword arguments)",
                 "numbers, text, true/false, null, lists")]
    if value is None or isinstance(value, (bool, int, float)):
        return []
    return [((), f"unsupported literal {value!r}", "numbers, text, true/false, null, lists")]
