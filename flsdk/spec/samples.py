"""The sample DSL of docs/architecture.md: its one grammar, and the static check
of op spec samples built on it.

A sample is a list of positional arguments, optionally ending with a mapping
of keyword arguments. Each string is exactly one of:

* `dtype:<name>`: a torch dtype;
* a plain word (`floor`, `tanh`, `sum`): a string argument;
* a tensor token, `T(2,3)` and friends (grammar in `parse_tensor`).

Numbers, booleans, null and lists are literals (lists are read item by item).

`flsdk check` runs `check_sample` so a typo gives a file:line before any test
runs; torch_fl.testing.conformance materializes samples with the same
`classify` / `parse_tensor`, so what passes the check is what the tests build.
Pure Python without torch: both packages import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .dtypes import DTYPES, did_you_mean

EXPECTED_TENSOR = 'T(2,3), T(2,3)+, T(2,3)[0,1], T(2,3).t(), T(), F(2,3), L(2,3;10), B(2,3)'

_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(
    r"""^(?P<kind>[TFLB])
        \((?P<shape>[^;)]*)(?:;(?P<high>[^)]*))?\)
        (?:(?P<pos>\+)|\[(?P<lo>[^,\]]+),(?P<hi>[^\]]+)\])?
        (?P<t>\.t\(\))?$""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class TensorToken:
    kind: str                              # T: tested dtype, F: float32, L: int64, B: bool
    shape: tuple[int, ...]
    high: int | None                       # L(...;high): values in [0, high)
    positive: bool                         # T(...)+ : strictly positive
    bounds: tuple[float, float] | None     # T(...)[lo,hi]: uniform in [lo, hi)
    transposed: bool                       # .t(): last two dims swapped (a non-contiguous view)


def _shape(text: str, token: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise ValueError(f"bad shape {text!r} in sample token {token!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative size in sample token {token!r}")
    return dims


def _number(text: str, token: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"bad bound {text!r} in sample token {token!r}") from None


def parse_tensor(token: str) -> TensorToken:
    """`T(2,3)[0,1].t()` -> TensorToken; ValueError naming the token when malformed.

    T(dims) / F(dims) take an optional `+` or `[lo,hi]`; L(dims;high) takes
    neither; B(dims) takes neither; only L takes `;high`. Any token may end
    with `.t()`. Spaces are ignored.
    """
    m = _TOKEN.match(token.replace(" ", ""))
    if m is None:
        raise ValueError(f"bad sample token {token!r}")
    kind = m["kind"]
    shape = _shape(m["shape"], token)
    positive = m["pos"] is not None
    bounds = None
    if m["lo"] is not None:
        bounds = (_number(m["lo"], token), _number(m["hi"], token))
        if bounds[1] <= bounds[0]:
            raise ValueError(f"empty range in sample token {token!r}")
    high = None
    if kind == "L":
        if m["high"] is None:
            raise ValueError(f"sample token {token!r}: L(...) needs an upper bound, e.g. L(2,3;10)")
        if positive or bounds:
            raise ValueError(f"sample token {token!r}: L(...) takes no + or [lo,hi]")
        high = int(_number(m["high"], token))
        if high <= 0:
            raise ValueError(f"sample token {token!r}: upper bound must be > 0")
    else:
        if m["high"] is not None:
            raise ValueError(f"sample token {token!r}: only L(...) takes ';N'")
        if kind == "B" and (positive or bounds):
            raise ValueError(f"sample token {token!r}: B(...) takes no + or [lo,hi]")
    return TensorToken(kind=kind, shape=shape, high=high, positive=positive, bounds=bounds,
                       transposed=m["t"] is not None)


def classify(text: str) -> tuple[str, object]:
    """A sample string as ("dtype", name), ("word", text) or ("tensor", TensorToken).
    The dtype name is not checked here (callers resolve it); a malformed tensor
    token raises ValueError."""
    if text.startswith("dtype:"):
        return "dtype", text[len("dtype:"):]
    if _WORD.match(text):
        return "word", text
    return "tensor", parse_tensor(text)


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
        if kind == "dtype" and parsed not in DTYPES:
            hint = did_you_mean(parsed, DTYPES)
            return [((), f"unknown dtype {parsed!r}" + (f"; {hint}" if hint else ""),
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
