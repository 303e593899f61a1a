"""acme's compute units (examples/acme_backend/runtime/compute_units.h): build
and run the standalone C++ test program (every chunk once, exceptions,
concurrent and nested loops, reconfiguration, options, fork)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "examples" / "acme_backend" / "runtime"
CXX = os.environ.get("CXX", "g++")
EXPECTED = ["every_chunk_once", "exceptions_propagate", "concurrent_and_nested",
            "reconfigure_while_running", "options", "fork_child"]

pytestmark = pytest.mark.build


def test_compute_units_program_passes(tmp_path: Path):
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    exe = tmp_path / "test_compute_units"
    build = [CXX, "-O1", "-std=c++20", "-pthread", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME}",
             str(RUNTIME / "tests" / "test_compute_units.cpp"), str(RUNTIME / "compute_units.cpp"),
             "-o", str(exe)]
    res = subprocess.run(build, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"build failed:\n{' '.join(build)}\n{res.stderr}"
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, f"compute units tests failed:\n{res.stdout}\n{res.stderr}"
    passed = set(re.findall(r"^PASS (\w+)", res.stdout, re.M))
    assert passed == set(EXPECTED), res.stdout
    assert f"compute units tests: {len(EXPECTED)} passed, 0 failed" in res.stdout
