"""Fixes for places where torch 2.13's Inductor treats only the literal "cpu" (or
only GPU types) right, reproduced on torch 2.13.0 with an flsdk device.

Each fix names the trap it works around; `versions.check_torch` refuses any
other torch before these run.
"""

from __future__ import annotations

_applied: set[tuple[str, str]] = set()


def apply(name: str, codegen: str) -> None:
    if (name, codegen) in _applied:
        return
    _applied.add((name, codegen))
