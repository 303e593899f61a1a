"""The grammar of the sample DSL of docs/architecture.md ("Op spec file").

A sample is a list of positional arguments, optionally ending with a mapping
of keyword arguments. Each string is exactly one of:

* `dtype:<name>`: a torch dtype;
* a plain word (`floor`, `tanh`, `sum`): a string argument;
* a tensor token, `T(2,3)` and friends (grammar in `parse_tensor`).

Numbers, booleans, null and lists are literals (lists are read item by item).

Kept once, here: `flsdk check` checks op spec samples with it
(flsdk.spec.samples) and torch_fl.testing.conformance materializes them with it,
so what passes the check is what the tests build. Pure Python without torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A plain word: a string argument, or a keyword argument's name.
WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
    if WORD.match(text):
        return "word", text
    return "tensor", parse_tensor(text)
