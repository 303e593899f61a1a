"""acme's compute units (examples/acme_backend/runtime/compute_units.h): build
and run the standalone C++ test program runtime/tests/test_compute_units.cpp
(every chunk once, exceptions, concurrent and nested loops, reconfiguration,
options, fork, loops run from device work). It links the runtime's sources (a
loop run from device work runs as device work on every unit) and shares its
harness and build with test_runtime_programs.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_runtime_programs import build_program, outcome, passed_tests, run_program

EXPECTED = ["every_chunk_once", "exceptions_propagate", "concurrent_and_nested",
            "reconfigure_while_running", "options", "fork_child",
            "device_work_on_every_unit", "host_work_stays_host"]

pytestmark = pytest.mark.build


def test_compute_units_program_passes(tmp_path_factory, tmp_path: Path):
    exe = build_program("test_compute_units", tmp_path_factory.mktemp("acme_compute_units"))
    res = run_program(exe, tmp_path, timeout=120)
    assert res.returncode == 0, f"compute units tests failed: {outcome(res)}"
    assert passed_tests(res.stdout) == EXPECTED, res.stdout
    assert f"compute units tests: {len(EXPECTED)} passed, 0 failed" in res.stdout
    assert not re.search(r"^FAIL ", res.stdout, re.M), res.stdout
