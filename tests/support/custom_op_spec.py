"""The custom op the scaffold tests give a `zeta` backend: zeta::scale_add (x + alpha * y,
with a Python reference), optionally zeta::twice (no reference, no samples), in
opspec/zeta_custom.yaml, selected native after relu in device.yaml.

Line numbers are part of the contract: tests of error messages expect the reference
on line 6 and the first sample on line 8 of the spec file."""

from __future__ import annotations

from pathlib import Path

REFERENCE = '"lambda x, y, alpha=1.0: x + alpha * y"'

TWICE = """\
  - op: zeta::twice
    schema: "twice(Tensor x) -> Tensor"
    dtypes: [float32]
"""


def custom_spec(*samples: str, reference: str = REFERENCE, twice: bool = False) -> str:
    """The text of opspec/zeta_custom.yaml; `samples`: one YAML flow list each,
    e.g. '["T(4,3)", "T(3)", {alpha: 2.0}]'."""
    text = f"""\
family: zeta_custom
ops:
  - op: zeta::scale_add
    schema: "scale_add(Tensor x, Tensor y, *, float alpha=1.) -> Tensor"
    dtypes: [float32]
    reference: {reference}
    samples:
""" + "".join(f"      - {sample}\n" for sample in samples)
    return text + (TWICE if twice else "")


def add_custom_spec(root: Path, text: str, ops: tuple[str, ...] = ("zeta::scale_add",)) -> Path:
    """Write `text` as the backend's opspec/zeta_custom.yaml and select `ops` native
    in device.yaml, after relu. Returns the spec file."""
    (root / "opspec").mkdir(exist_ok=True)
    spec = root / "opspec" / "zeta_custom.yaml"
    spec.write_text(text)
    device = root / "device.yaml"
    entries = "".join(f"  - op: {op}\n" for op in ops)
    device.write_text(device.read_text().replace("  - op: relu\n", "  - op: relu\n" + entries))
    return spec
