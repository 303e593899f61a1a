"""Nothing stale passes (issue 36 item 4): a backend build records its sources
(torch_fl/backend_glue/build_record.py), and the installed build is refused once
they change, with the command that rebuilds it. Here on a fake backend tree; the
scaffold tests check it on real builds (load(), the generated tests, doctor)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_fl.backend_glue import build_record

RECORDER = Path(build_record.__file__)


@pytest.fixture
def tree(tmp_path) -> tuple[Path, Path]:
    """(source root, installed package folder) of a tiny fake backend `zeta`."""
    root = tmp_path / "zeta"
    for rel, text in {"device.yaml": "name: zeta\n", "CMakeLists.txt": "project(x)\n",
                      "pyproject.toml": "[project]\n", "generated/glue.cpp": "int glue;\n",
                      "kernels/relu.cpp": "int relu;\n", "kernels/README.md": "notes\n",
                      "runtime/adapter.cpp": "int adapter;\n", "torch_fl_zeta/__init__.py": "\n",
                      "build/cp311/obj.o": "x", "tests/test_x.py": "\n"}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    site = tmp_path / "site" / "torch_fl_zeta"
    (site / "_generated").mkdir(parents=True)
    # as the build does: the recorder run as a script
    subprocess.run([sys.executable, str(RECORDER), "write", str(root), "torch_fl_zeta",
                    str(site / "_generated" / build_record.RECORD_NAME)], check=True)
    return root, site


def test_the_record_lists_what_the_build_compiles_and_installs(tree):
    root, site = tree
    record = build_record.read_record(str(site))
    assert record["root"] == str(root) and record["package"] == "torch_fl_zeta"
    assert sorted(record["files"]) == ["CMakeLists.txt", "generated/glue.cpp", "kernels/relu.cpp",
                                       "runtime/adapter.cpp", "torch_fl_zeta/__init__.py"]
    assert build_record.problem(str(site)) is None


def test_a_changed_added_or_removed_source_is_refused_with_the_rebuild_command(tree):
    root, site = tree
    (root / "kernels" / "relu.cpp").write_text("int relu2;\n")
    (root / "kernels" / "abs.cpp").write_text("int abs;\n")
    (root / "runtime" / "adapter.cpp").unlink()
    problem = build_record.problem(str(site))
    assert problem.startswith(f"the installed torch_fl_zeta ({site}) is older than its sources in {root}: ")
    for change in ("kernels/relu.cpp changed", "kernels/abs.cpp added", "runtime/adapter.cpp removed"):
        assert change in problem, change
    assert "rebuild: pip install --no-build-isolation ." in problem


def test_the_vendors_own_changes_are_named_before_the_generated_ones(tree):
    """A new kernel changes many generated files too; the message names five
    changes, and the kernel that caused them must be among them."""
    root, site = tree
    for i in range(6):
        (root / "generated" / f"register_{i}.cpp").write_text(f"int r{i};\n")
    (root / "kernels" / "abs.cpp").write_text("int abs;\n")
    problem = build_record.problem(str(site))
    assert "older than its sources" in problem
    listed = problem.split(": ", 1)[1]
    assert listed.startswith("kernels/abs.cpp added, generated/"), listed
    assert "and 2 more since the build" in listed, listed


def test_what_the_build_does_not_read_changes_nothing(tree):
    """Docs, tests, pyproject (pytest and release settings), build outputs; and a file
    rewritten with the same bytes (a checkout, `flsdk gen` putting a stub back)."""
    root, site = tree
    (root / "kernels" / "README.md").write_text("more notes\n")
    (root / "tests" / "test_x.py").write_text("# edited\n")
    (root / "pyproject.toml").write_text("[project]\nversion = '2'\n")
    (root / "build" / "cp311" / "obj.o").write_text("y")
    relu = root / "kernels" / "relu.cpp"
    relu.write_text(relu.read_text())
    os.utime(relu, ns=(1, 1))  # another mtime, the same content
    assert build_record.problem(str(site)) is None


def test_sources_that_are_not_there_are_no_problem(tree, tmp_path):
    """A wheel installed on another machine: its build folder does not exist here."""
    root, site = tree
    root.rename(tmp_path / "moved")
    assert build_record.problem(str(site)) is None
    # ... but compared with a tree given explicitly (the generated tests' own folder)
    assert build_record.problem(str(site), str(tmp_path / "moved")) is None
    (tmp_path / "moved" / "kernels" / "relu.cpp").write_text("int other;\n")
    problem = build_record.problem(str(site), str(tmp_path / "moved"))
    assert "kernels/relu.cpp changed" in problem and f"(it was built from {root})" in problem


def test_a_build_without_a_record_is_not_judged(tmp_path):
    assert build_record.problem(str(tmp_path)) is None
