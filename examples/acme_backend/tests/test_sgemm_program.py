"""acme's float32 GEMM kernel (examples/acme_backend/kernels/math/sgemm.h): build and
run its standalone C++ test program (every operand layout against a
double-precision reference, tiles' and k blocks' edges, beta == 0 with NaN in C,
blocks of C cut anywhere having the bits of one call, and no read past an
operand that ends at an inaccessible page)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ACME = Path(__file__).resolve().parents[1]
CXX = os.environ.get("CXX", "g++")
EXPECTED = ["matches_reference", "beta_zero_ignores_c", "cut_does_not_change_bits",
            "reads_nothing_past_the_operands"]

pytestmark = pytest.mark.build


def test_sgemm_program_passes(tmp_path: Path):
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX}) on PATH")
    exe, kernel = tmp_path / "test_sgemm", tmp_path / "sgemm_avx512.o"
    common = [CXX, "-O2", "-std=c++20", "-Wall", "-Wextra", "-Werror", f"-I{ACME / 'kernels'}",
              f"-I{ACME / 'runtime'}"]
    # The kernel's file with the flags cmake/vendor.cmake gives it; the test
    # program without them, as gemm.h's callers are (it checks the CPU first).
    for build in ([*common, "-mavx512f", "-mfma", "-c", str(ACME / "kernels" / "sgemm_avx512.cpp"),
                   "-o", str(kernel)],
                  [*common, str(ACME / "tests" / "cpp" / "test_sgemm.cpp"), str(kernel),
                   str(ACME / "runtime" / "vector_isa.cpp"), "-o", str(exe)]):
        res = subprocess.run(build, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"build failed:\n{' '.join(build)}\n{res.stderr}"
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"sgemm tests failed:\n{res.stdout}\n{res.stderr}"
    if res.stdout.startswith("SKIP"):
        pytest.skip(res.stdout.strip())
    # acme's C++ test harness (tests/cpp/harness.h): a PASS line per test, in order
    assert re.findall(r"^PASS (\w+)", res.stdout, re.M) == EXPECTED, res.stdout
    assert f"sgemm tests: {len(EXPECTED)} passed, 0 failed" in res.stdout, res.stdout
