"""The adapter headers are versioned (issue 36 item 12): runtime_adapter.h and
ccl_adapter.h carry a major/minor version and a list of changes, device.yaml records
the versions a backend's adapters were written for, and `flsdk gen` / `flsdk check`
compare the two and say what changed. Also: gen says when memory.model changed."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from flsdk.cli import main
from flsdk.spec import adapter_versions as av

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def _run(*args, cwd: Path) -> Run:
    """`flsdk ARGS` in this process (the CLI's own entry point; a subprocess per
    call would pay torch's import each time)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, str(cwd)]) if args[0] in ("check", "gen") else main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("versions") / "zeta"
    proc = _run("new-backend", "zeta", "--out", str(root), cwd=root.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def _set_versions(root: Path, line: str | None) -> Path:
    device = root / "device.yaml"
    text = re.sub(r"^adapter_versions: .*\n", "", device.read_text(), flags=re.M)
    device.write_text(text + (line + "\n" if line else ""))
    return device


def test_both_headers_carry_a_version_and_its_changes():
    headers = av.shipped()
    for key, head in headers.items():
        assert head.version >= (1, 0), key
        assert head.version in head.changes, f"{head.header}: no 'Changes:' entry for its own version"
        assert (1, 0) in head.changes, head.header
    runtime = headers["runtime"]
    # the 1.1 entry says what issue 36 changed, joined over its continuation lines
    assert "copy_strided converts exactly as PyTorch's CPU" in runtime.changes[(1, 1)]
    assert "current_op()" in runtime.changes[(1, 1)]
    assert runtime.changes_after((1, 0))[0] == f"1.1: {runtime.changes[(1, 1)]}"
    # 1.2 states what the glue does with a device address (issue 40: a handle-based driver)
    assert "never dereferences it" in runtime.changes[(1, 2)]
    assert runtime.changes_after((1, 1)) == [f"1.2: {runtime.changes[(1, 2)]}"]
    # the rule of what bumps which, and the stance, are in the header
    text = (av.STATIC_GLUE_DIR / "runtime_adapter.h").read_text()
    for words in ("source-level API", "a new minor adds optional calls", "a new major changes a declaration"):
        assert words in text, words


def test_compare_says_what_changed_and_how_much_it_matters():
    head = av.HeaderVersion("runtime_adapter.h", (2, 1), {(1, 0): "first", (2, 0): "a promise moved",
                                                           (2, 1): "a new call"})
    headers = {"runtime": head}
    assert av.compare({"runtime": "2.1"}, False, headers) == []
    (minor,) = av.compare({"runtime": "2.0"}, False, headers)
    assert not minor.error and "2.1: a new call" in minor.message and "2.0:" not in minor.message
    assert 'set `adapter_versions: {runtime: "2.1"}`' in minor.message
    (major,) = av.compare({"runtime": "1.0"}, False, headers)
    assert major.error and "must be revisited" in major.message
    assert "2.0: a promise moved; 2.1: a new call" in major.message
    (newer,) = av.compare({"runtime": "3.0"}, False, headers)
    assert newer.error and "upgrade flsdk" in newer.message
    (unrecorded,) = av.compare({}, False, headers)
    assert "1.0 (no adapter_versions recorded)" in unrecorded.message
    # the ccl adapter counts only for a backend that implements it
    ccl = {"ccl": av.HeaderVersion("ccl_adapter.h", (1, 1), {(1, 1): "x"})}
    assert av.compare({}, False, ccl) == [] and len(av.compare({}, True, ccl)) == 1


def test_a_fresh_scaffold_records_the_current_versions(scaffold):
    heads = av.shipped()
    text = (scaffold / "device.yaml").read_text()
    runtime, ccl = heads["runtime"].version, heads["ccl"].version
    want = f'adapter_versions: {{runtime: "{runtime[0]}.{runtime[1]}", ccl: "{ccl[0]}.{ccl[1]}"}}'
    assert want in text
    check = _run("check", cwd=scaffold)
    assert check.returncode == 0 and "adapter" not in check.stdout, check.stdout + check.stderr
    # the scaffold's adapter stops its build on a new major (static_assert)
    adapter = (scaffold / "runtime" / "adapter.cpp").read_text()
    assert f"kRuntimeAdapterVersionMajor == {heads['runtime'].version[0]}" in adapter


def test_check_and_gen_print_the_changes_since_an_older_minor(scaffold):
    device = _set_versions(scaffold, 'adapter_versions: {runtime: "1.0"}')
    try:
        line = next(i for i, t in enumerate(device.read_text().splitlines(), 1) if t.startswith("adapter_versions"))
        check = _run("check", cwd=scaffold)
        assert check.returncode == 0, check.stderr
        note = next(t for t in check.stdout.splitlines() if "runtime adapter was written for" in t)
        assert note.startswith(f"warning: {device}:{line}: the runtime adapter was written for "
                               "runtime_adapter.h 1.0; this flsdk's is 1.2 (compatible)"), note
        assert "1.1: copy_strided converts exactly" in note
        gen = _run("gen", cwd=scaffold)
        assert gen.returncode == 0, gen.stderr
        assert re.search(r"^  adapter   .*runtime_adapter\.h 1\.0; this flsdk's is 1\.2", gen.stdout, re.M), gen.stdout
        # without the field: written for 1.0, said so
        _set_versions(scaffold, None)
        check = _run("check", cwd=scaffold)
        assert "1.0 (no adapter_versions recorded)" in check.stdout, check.stdout
    finally:
        _set_versions(scaffold, 'adapter_versions: {runtime: "1.2", ccl: "1.0"}')


def test_an_older_major_or_a_newer_version_is_an_error_naming_the_field(scaffold):
    device = _set_versions(scaffold, 'adapter_versions: {runtime: "0.9", ccl: "1.0"}')
    try:
        check = _run("check", cwd=scaffold)
        assert check.returncode == 2, check.stdout + check.stderr
        assert re.search(rf"{re.escape(str(device))}:\d+: adapter_versions\.runtime: .*must be revisited",
                         check.stderr), check.stderr
        gen = _run("gen", cwd=scaffold)
        assert gen.returncode == 1 and "must be revisited" in gen.stderr, gen.stdout + gen.stderr
        _set_versions(scaffold, 'adapter_versions: {runtime: "7.0"}')
        check = _run("check", cwd=scaffold)
        assert check.returncode == 2 and "upgrade flsdk" in check.stderr, check.stderr
        _set_versions(scaffold, "adapter_versions: {runtime: 1.1}")  # unquoted: a YAML number
        check = _run("check", cwd=scaffold)
        assert check.returncode == 2 and "adapter_versions.runtime" in check.stderr, check.stderr
        assert 'a quoted MAJOR.MINOR version, e.g. "1.1"' in check.stderr, check.stderr
    finally:
        _set_versions(scaffold, 'adapter_versions: {runtime: "1.2", ccl: "1.0"}')


def test_gen_says_once_when_the_memory_model_changed(scaffold):
    device = scaffold / "device.yaml"
    original = device.read_text()
    assert "  model: host\n" in original
    try:
        device.write_text(original.replace("  model: host\n", "  model: discrete\n"))
        gen = _run("gen", cwd=scaffold)
        assert gen.returncode == 0, gen.stderr
        said = [t for t in gen.stdout.splitlines() if t.startswith("  memory ")]
        assert len(said) == 1 and "memory.model host -> discrete: host code can no longer read device memory" in said[0]
        assert "pip install --no-build-isolation ." in said[0] and "Moving between memory models" in said[0]
        assert 'kMemoryModel = "discrete"' in (scaffold / "generated" / "device_config.h").read_text()
        again = _run("gen", cwd=scaffold)
        assert "memory.model" not in again.stdout, again.stdout
    finally:
        device.write_text(original)
        back = _run("gen", cwd=scaffold)
        assert "memory.model discrete -> host" in back.stdout, back.stdout
