"""The sample DSL of docs/architecture.md: the static check of op spec samples.

The grammar (tensor tokens, `dtype:<name>`, plain words) is kept once, in
torch_fl._tables.samples (torch-free, shared with torch_fl.testing.conformance,
which materializes samples with the same `classify` / `parse_tensor`, so what
passes the check is what the tests build); flsdk re-exports its names here.
`flsdk check` runs `check_sample` so a typo gives a file:line before any test runs.
"""

from __future__ import annotations

from torch_fl._tables.samples import WORD as _WORD
from torch_fl._tables.samples import TensorToken, classify, parse_tensor  # noqa: F401  (re-exported)

from .dtypes import DTYPES, did_you_mean

EXPECTED_TENSOR = 'T(2,3), T(2,3)+, T(2,3)[0,1], T(2,3).t(), T(), F(2,3), L(2,3;10), B(2,3)'


# --- the static check -----------------------------------------------------------

def check_sample(sample: list) -> list[tuple[tuple, str, str]]:
    """Problems in one sample as (sub-path, message, expected); [] when fine."""
    problems: list[tuple[tuple, str, str]] = []
    for i, arg in enumerate(sample):
        if isinstance(arg, dict):
            if i != len(sample) - 1:
                problems.append(((i,), "keyword arguments must be the last entry of a sample",
                                 "[positional..., {name: value}]"))
            for key, value in arg.items():
                if not _WORD.match(key):
                    problems.append(((i, key), f"{key!r} is not an argument name", "an identifier"))
                problems.extend(((i, key) + p, m, e) for p, m, e in _check_value(value))
        else:
            problems.extend(((i,) + p, m, e) for p, m, e in _check_value(arg))
    return problems


def _check_value(value: object) -> list[tuple[tuple, str, str]]:
    if isinstance(value, str):
        try:
            kind, parsed = classify(value)
        except ValueError as exc:
            return [((), f"malformed tensor argument {value!r}: {exc}", EXPECTED_TENSOR)]
        if kind == "dtype":
            assert isinstance(parsed, str)  # classify: ("dtype", name)
            if parsed not in DTYPES:
                hint = did_you_mean(parsed, DTYPES)
                return [((), f"unknown dtype {parsed!r}" + (f"; {hint}" if hint else ""),
                         "dtype:<name> with a name from " + ", ".join(DTYPES))]
        return []
    if isinstance(value, list):
        out: list[tuple[tuple, str, str]] = []
        for j, item in enumerate(value):
            out.extend(((j,) + p, m, e) for p, m, e in _check_value(item))
        return out
    if isinstance(value, dict):
        return [((), "a mapping is only allowed as the last entry (keyword arguments)",
                 "numbers, text, true/false, null, lists")]
    if value is None or isinstance(value, (bool, int, float)):
        return []
    return [((), f"unsupported literal {value!r}", "numbers, text, true/false, null, lists")]


def check_sample_arity(sample: list, schema: str) -> list[tuple[tuple, str, str]]:
    """Problems of a sample against an op schema: too many or too few positional
    arguments, unknown or repeated keyword names. `schema` is torchgen's text
    ("fused_gelu(Tensor x, *, float a=1.) -> Tensor"), already validated."""
    from torchgen.model import FunctionSchema

    args = FunctionSchema.parse(schema).arguments
    positional = [a.name for a in args.flat_positional]
    keyword_only = [a.name for a in args.flat_kwarg_only]
    required = {a.name for a in list(args.flat_positional) + list(args.flat_kwarg_only) if a.default is None}
    kwargs = sample[-1] if sample and isinstance(sample[-1], dict) else {}
    given = [v for v in sample if not isinstance(v, dict)]
    call = f"the schema is {schema}"
    problems: list[tuple[tuple, str, str]] = []
    if len(given) > len(positional):
        problems.append(((len(positional),), f"{len(given)} positional arguments, but the schema takes "
                         f"{len(positional)} ({', '.join(positional) or 'none'})", call))
    named = set(positional[:len(given)])
    for key in kwargs:
        if key not in positional and key not in keyword_only:
            problems.append(((len(sample) - 1, key), f"{key!r} is not an argument of the op",
                             "argument names among: " + ", ".join(positional + keyword_only)))
        elif key in named:
            problems.append(((len(sample) - 1, key), f"{key!r} is given both by position and by name", call))
    missing = [name for name in positional + keyword_only
               if name in required and name not in named and name not in kwargs]
    if missing and not problems:
        problems.append(((), f"missing argument(s) {', '.join(missing)}", call))
    return problems
