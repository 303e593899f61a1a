"""Hostile and broken inputs are refused fast, with exit 2 and file:line (and the
field when there is one): alias bombs, huge and deeply nested documents,
custom-op samples that do not fit the op's schema, bad `reference:`s."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from custom_op_spec import REFERENCE, add_custom_spec, custom_spec

from flsdk.cli import main as flsdk_main
from flsdk.scaffold import render_backend
from flsdk.spec import SpecError, load_backend
from flsdk.spec.yamlfile import MAX_DEPTH, parse_yaml


def _billion_laughs(levels: int = 9, width: int = 10) -> str:
    """~400 bytes that expand to width**levels values."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb(levels: int = 40) -> str:
    """Merge keys copy lists: expanded naively this doubles per level."""
    lines = ["m0: &m0 {k: 1}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.fixture()
def backend(tmp_path):
    root = tmp_path / "zeta"
    render_backend("zeta", root)
    return root


def _check(root: Path):
    """`flsdk check` in a subprocess: (exit code, stderr lines, seconds)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "flsdk.cli", "check", str(root)],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr.strip().splitlines(), time.perf_counter() - start


@pytest.mark.parametrize("name,text", [("alias bomb", _billion_laughs()), ("merge bomb", _merge_bomb())])
def test_alias_bombs_are_refused_within_a_second(name, text):
    assert len(text) < 2000
    start = time.perf_counter()
    with pytest.raises(SpecError, match="once YAML aliases are expanded") as info:
        parse_yaml(text, "device.yaml")
    assert time.perf_counter() - start < 1.0, name
    assert str(info.value).startswith("device.yaml:")


def test_alias_bomb_in_device_yaml_exits_2_naming_the_file(backend):
    device = backend / "device.yaml"
    device.write_text(device.read_text() + _billion_laughs())
    start = time.perf_counter()
    assert flsdk_main(["check", str(backend)]) == 2
    assert time.perf_counter() - start < 5.0  # the bomb itself is refused in milliseconds
    code, err, _ = _check(backend)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{device}:") and "alias bomb" in err[0], err


def test_deep_and_huge_documents_are_refused(tmp_path):
    deep = "x: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels"):
        parse_yaml(deep, "deep.yaml")
    # deeper than libyaml's own limit: still a SpecError, no crash
    with pytest.raises(SpecError, match="deep.yaml:1"):
        parse_yaml("x: " + "[" * 100_000 + "]" * 100_000, "deep.yaml")
    huge = tmp_path / "huge.yaml"
    huge.write_text("a: '" + "x" * (5 << 20) + "'\n")
    start = time.perf_counter()
    from flsdk.spec.yamlfile import load_yaml

    with pytest.raises(SpecError, match="file too large"):
        load_yaml(huge)
    assert time.perf_counter() - start < 1.0


def test_real_files_are_far_below_the_limits():
    from flsdk.spec.paths import canonical_opspec_files

    for path in canonical_opspec_files():
        parse_yaml(path.read_text(), str(path))  # must not raise


def _with_custom(root: Path, *samples: str, reference: str = REFERENCE) -> Path:
    return add_custom_spec(root, custom_spec(*samples, reference=reference))


def test_a_good_custom_op_sample_passes(backend):
    _with_custom(backend, '["T(4,3)", "T(4,3)"]', '["T(4,3)", "T(3)", {alpha: 2.0}]')
    ops = {spec.op: spec for spec in load_backend(backend).ops}
    assert ops["zeta::scale_add"].reference.startswith("lambda")


@pytest.mark.parametrize("samples,field,needle", [
    ('["T(4,3)", "T(4,3)", "T(4,3)"]', "ops[0].samples[0][2]", "3 positional arguments"),
    ('["T(4,3)"]', "ops[0].samples[0]", "missing argument(s) y"),
    ('["T(4,3)", "T(4,3)", {beta: 2}]', "ops[0].samples[0][2].beta", "'beta' is not an argument"),
    ('["T(4,3)", {x: "T(3)", y: "T(3)"}]', "ops[0].samples[0][1].x", "both by position and by name"),
])
def test_custom_op_samples_are_checked_against_the_schema(backend, samples, field, needle):
    spec = _with_custom(backend, samples)
    code, err, _ = _check(backend)
    assert code == 2, err
    line = 8  # the sample's line
    mine = [e for e in err if e.startswith(f"{spec}:{line}: {field}: ")]
    assert len(mine) == 1 and needle in mine[0], err


@pytest.mark.parametrize("reference,needle", [
    ('"lambda x, y: x +"', "not a Python expression"),
    ('""', "ops[0].reference"),
])
def test_bad_references_are_refused(backend, reference, needle):
    spec = _with_custom(backend, '["T(4,3)", "T(4,3)"]', reference=reference)
    code, err, _ = _check(backend)
    assert code == 2, err
    mine = [e for e in err if e.startswith(f"{spec}:6: ops[0].reference: ")]
    assert len(mine) == 1 and needle in mine[0], err


def test_reference_on_an_aten_op_is_refused(tmp_path, backend):
    (backend / "opspec").mkdir()
    (backend / "opspec" / "mine.yaml").write_text(
        "family: mine\nops:\n  - op: sigmoid\n    dtypes: [float32]\n    reference: torch.sigmoid\n")
    code, err, _ = _check(backend)
    assert code == 2 and "ops[0].reference: aten ops are tested against PyTorch's CPU kernel" in err[0], err
