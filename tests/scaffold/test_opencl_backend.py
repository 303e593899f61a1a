"""examples/opencl_backend, the flsdk backend over a real OpenCL driver (issue 40),
built from a copy of its folder and tested against PoCL from the package index.

One build per session (the `ocl_build` fixture, tests/support/opencl_build.py:
PoCL's wheel into a folder, the backend's wheel built and extracted beside it;
about 2.5 min on 2 cores without a compiler cache). The session starts it in the
background and runs these tests last (tests/conftest.py). CI runs a fast subset
of the backend's own tests on it: the training test, the real-driver cases, the
runtime adapter tests and the first float32 sample of every 8th native op (each
op's OpenCL C is compiled by PoCL at first use: under a minute with cold caches,
where every native op takes 110 s); --run-slow runs all of them. Needs `pip install pocl-binary-distribution` to
work: without the package index the tests skip, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import opencl_build
import pytest

# The fast subset: what shows the backend works on a real driver end to end
# (paths under the example's tests/), and a stratified sample of the native ops.
FAST_TESTS = ("test_training.py", "test_smoke.py", "test_real_driver_cases.py",
              "generated/test_ocl_adapter.py",
              "generated/test_ocl_conformance.py::test_native_ops_are_registered")
FAST_OP_STRIDE = 8


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="session")
def ocl_build(request) -> tuple[Path, Path]:
    """(root, site): a copy of the example, built; `site` holds its wheel and PoCL's.
    Built in the background from the session's start (tests/conftest.py)."""
    job = request.config.stash[opencl_build.JOB]
    result = job.result(timeout=3600)
    print(f"OpenCL example built in the background in {job.seconds():.0f} s")
    if isinstance(result, str):
        pytest.skip(result)
    return result


def _backend_pytest(root: Path, site: Path, cache: Path, *args: str):
    # Autoload off (the test venv holds acme, and one process holds one
    # PrivateUse1 backend): the generated tests load the backend themselves.
    # Both kernel caches (the backend's, PoCL's own) start empty: a first run.
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, TORCH_DEVICE_BACKEND_AUTOLOAD="0",
               TORCH_FL_BACKEND="ocl", OCL_KERNEL_CACHE=str(cache), POCL_CACHE_DIR=str(cache / "pocl"))
    return _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                cwd=cache.parent, env=env, timeout=1800)


def _backend_tests(root: Path, site: Path, cache: Path, *targets: str) -> str:
    tests = _backend_pytest(root, site, cache, "-q", *targets)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    assert tests.returncode == 0, tests.stdout[-5000:] + tests.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary, summary
    return summary


def _sampled_op_tests(root: Path, site: Path, cache: Path) -> list[str]:
    """The first float32 sample of every FAST_OP_STRIDE-th native op, as test ids."""
    listed = _backend_pytest(root, site, cache, str(root / "tests" / "generated" / "test_ocl_conformance.py"),
                             "--collect-only", "-q", "-k", "test_conformance and float32-s0")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-2000:]
    ids = [line.strip() for line in listed.stdout.splitlines() if "::test_conformance[" in line]
    assert len(ids) >= 200, listed.stdout[-2000:]  # every native op with a float32 sample
    return [str(root / i) for i in ids[::FAST_OP_STRIDE]]


def test_opencl_backend_builds_and_a_fast_subset_of_its_tests_passes(ocl_build, tmp_path):
    root, site = ocl_build
    cache = tmp_path / "kernel_cache"
    ops = _sampled_op_tests(root, site, cache)
    summary = _backend_tests(root, site, cache, *(str(root / "tests" / t) for t in FAST_TESTS), *ops)
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= len(ops) + 20, summary
    # the kernel cache was written: the next process start builds nothing
    assert any(p.name != "pocl" for p in cache.iterdir())


@pytest.mark.slow
def test_opencl_backend_passes_all_its_tests(ocl_build, tmp_path):
    root, site = ocl_build
    summary = _backend_tests(root, site, tmp_path / "kernel_cache", str(root / "tests"))
    assert int(summary.split(" passed")[0].split()[-1]) >= 9000, summary
