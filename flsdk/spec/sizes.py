"""Byte sizes in device descriptors: integers or strings like "1 GiB".

Accepted: a positive integer (bytes), or a string `<number> <unit>` with a
binary unit B, KiB, MiB, GiB, TiB (case-insensitive, space optional,
fractions allowed when they give a whole number of bytes: "1.5 GiB").

Decimal/ambiguous units (KB, MB, GB, TB, K, M, G) are rejected on purpose:
chip memory is quoted as "16 GB" but means 16 GiB, and guessing wrong makes
the simulated capacity silently ~7% off. The error says what to write.
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_AMBIGUOUS = {"k", "kb", "m", "mb", "g", "gb", "t", "tb"}
_SIZE_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")

EXPECTED = 'a positive number of bytes, or a size like "512 MiB", "1 GiB" (units B, KiB, MiB, GiB, TiB)'


class SizeError(ValueError):
    """A size that cannot be used; `expected` says what form would work."""

    def __init__(self, message: str, expected: str = EXPECTED):
        super().__init__(message)
        self.message = message
        self.expected = expected


def parse_size(value: object, allow_zero: bool = False) -> int:
    """Bytes as an int; raises SizeError for anything else."""
    if isinstance(value, bool):
        raise SizeError(f"{value!r} is not a size")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match:
            raise SizeError(f"{value!r} is not a size")
        amount, unit = Fraction(match.group(1)), match.group(2).lower()
        if unit in _AMBIGUOUS:
            whole = int(amount) if amount.denominator == 1 else amount
            raise SizeError(
                f"{value!r} uses the ambiguous unit {match.group(2)!r}",
                f'a binary unit, e.g. "{whole} {match.group(2)[0].upper()}iB", '
                f"or the exact number of bytes",
            )
        if unit not in _UNITS and unit != "":
            raise SizeError(f"{value!r} has an unknown unit {match.group(2)!r}")
        exact = amount * _UNITS.get(unit, 1)
        if exact.denominator != 1:
            raise SizeError(f"{value!r} is not a whole number of bytes")
        number = int(exact)
    else:
        raise SizeError(f"{value!r} is not a size")
    if number < 0 or (number == 0 and not allow_zero):
        raise SizeError(f"{value!r} must be {'>= 0' if allow_zero else 'positive'}")
    return number
