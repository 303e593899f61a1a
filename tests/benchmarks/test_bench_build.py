"""benchmarks/bench_build.py's command line, dry run, JSON and failure report
(issue 28), without building anything; and benchmarks/README.md's links into
HISTORY.md resolve."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_build.py"
ROWS = ["acme-clean", "acme-one-kernel", "scaffold-first", "fresh-clone-main", "fresh-clone-ci"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_build", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_build"] = module  # its dataclass looks its module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_build", None)


def test_help_lists_every_row_and_target():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for row in ROWS:
        assert row in text
    for target in ("≤ 5 min", "≤ 20 s", "≤ 60 s", "≤ 8 min", "≤ 25 min", "--dry-run", "--json"):
        assert target in text, target


@pytest.mark.parametrize("args, message", [
    (["--only", "acme-dirty"], "invalid choice: 'acme-dirty'"),
    (["--only"], "expected at least one argument"),
    (["--only", "acme-clean", "--all"], "--only and --all exclude each other"),
    (["--runs", "3"], "unrecognized arguments"),
])
def test_argument_errors_exit_2(args, message):
    proc = _run(*args)
    assert proc.returncode == 2 and message in proc.stderr, (proc.returncode, proc.stderr)


def test_dry_run_prints_every_command_and_writes_json(tmp_path):
    out = tmp_path / "build.json"
    proc = _run("--dry-run", "--all", "--workdir", str(tmp_path / "work"), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "work").exists(), "a dry run creates nothing"
    result = json.loads(out.read_text())
    assert result["dry_run"] and result["failures"] == []
    assert {r["row"] for r in result["rows"]} == set(ROWS)
    assert all(r["seconds"] is None for r in result["rows"])
    assert {s["status"] for s in result["steps"]} == {"dry-run"}
    machine = result["machine"]
    for key in ("cores", "cpu_model", "compiler", "ccache", "load_average_at_start"):
        assert machine[key] not in (None, ""), key
    commands = "\n".join(s["command"] for s in result["steps"])
    assert "pip wheel -v --no-build-isolation --no-deps" in commands
    assert "new-backend zeta --out zeta" in commands
    assert "pip install -v --no-build-isolation --no-deps --target" in commands
    assert re.search(r"FLSDK_VENV=\S+ \./run main", commands)
    assert "FLSDK_VENV=" in commands and ".ci/run" in commands
    # the printed table has a row per timed thing and the machine header
    assert "| row | what is timed | seconds | target |" in proc.stdout
    assert "load average at start" in proc.stdout and "ccache:" in proc.stdout
    assert "append a comment line to kernels/copy.cpp" in proc.stdout


def test_default_rows_leave_out_the_long_ones(tmp_path):
    out = tmp_path / "build.json"
    assert _run("--dry-run", "--json", str(out)).returncode == 0
    assert [r["row"] for r in json.loads(out.read_text())["rows"]] == [
        "acme-clean", "acme-one-kernel", "scaffold-first", "scaffold-first"]


def test_one_kernel_row_builds_the_clean_copy_first(tmp_path):
    out = tmp_path / "build.json"
    proc = _run("--dry-run", "--only", "acme-one-kernel", "--kernel", "kernels/unary.cpp",
                "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    steps = [s["step"] for s in json.loads(out.read_text())["steps"]]
    assert steps == ["pip wheel (clean)", "pip wheel (one kernel edited)"]
    assert "kernels/unary.cpp" in proc.stdout


def test_table_marks_targets_without_failing(bench):
    info = {"cores": 2, "cores_usable": 2, "cpu_model": "x", "compiler": "c++", "cmake": None,
            "ccache": "off", "load_average_at_start": [1.0, 2.0, 3.0], "commit": "abc",
            "python": "3.11"}
    text = bench.table([
        {"row": "scaffold-first", "what": "build", "seconds": 75.0, "target_s": 60},
        {"row": "acme-clean", "what": "build", "seconds": 200.0, "target_s": 300},
        {"row": "scaffold-first", "what": "whole", "seconds": 80.0, "target_s": None},
    ], info)
    assert "| scaffold-first | build | 75.0 s | ≤ 60 s ✗ |" in text
    assert "| acme-clean | build | 200 s (3.3 min) | ≤ 5 min ✓ |" in text
    assert "| scaffold-first | whole | 80.0 s | - |" in text


def test_a_failing_step_exits_1_with_its_log_tail(bench, tmp_path, monkeypatch, capsys):
    """A build that fails (here: new-backend replaced by a command that exits 3)
    makes the run exit 1, prints its log's tail and records it in the JSON."""
    monkeypatch.setattr(bench, "_flsdk", lambda: [
        sys.executable, "-c", "import sys; print('compiler said: boom'); sys.exit(3)", "--"])
    out = tmp_path / "build.json"
    rc = bench.main(["--only", "scaffold-first", "--workdir", str(tmp_path / "work"),
                     "--json", str(out)])
    captured = capsys.readouterr()
    assert rc == 1
    assert "compiler said: boom" in captured.err and "scaffold-first failed" in captured.err
    result = json.loads(out.read_text())
    assert result["failures"][0]["row"] == "scaffold-first"
    assert result["steps"][0]["status"] == "failed (exit 3)"
    assert Path(result["workdir"]).is_dir(), "a failed run keeps its logs"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(), re.M)}


@pytest.mark.parametrize("name, other", [("README.md", "HISTORY.md"), ("HISTORY.md", "README.md")])
def test_benchmark_docs_links_resolve(name, other):
    """README.md (current numbers) and HISTORY.md (every entry) link each other,
    anchors included."""
    bench_dir = ROOT / "benchmarks"
    page = bench_dir / name
    links = re.findall(r"\]\(([^)\s]*)\)", page.read_text())
    assert any(link.startswith(other) for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = bench_dir / target if target else page
        assert path.is_file(), link
        if anchor:
            assert anchor in _anchors(path), f"{link}: no such heading in {path.name}"
