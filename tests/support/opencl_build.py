"""The OpenCL example (examples/opencl_backend) built for the tests: a copy of
its folder, PoCL's wheel (the OpenCL driver, from the package index) and the
backend's wheel extracted into one `site` folder. About 2.5 min of a quiet
two-core machine without a compiler cache, so the session starts it in the
background (tests/conftest.py, background_build.py) and the tests that use it
(tests/scaffold/test_opencl_backend.py) run last."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from background_build import BackgroundJob

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "opencl_backend"
FIXTURE = "ocl_build"   # the fixture of the tests that need this build
JOB = pytest.StashKey[BackgroundJob]()   # the background build, in the session's config


def needs_build(item: pytest.Item) -> bool:
    """Whether the test `item` uses this build."""
    return FIXTURE in getattr(item, "fixturenames", ())


def prepare(base: Path, run) -> tuple[Path, Path] | str:
    """Build into `base`: (root, site), or why it cannot be built here (a skip
    reason). `run(cmd, timeout, env=...)` runs a command like subprocess.run with
    its output captured; a failed build raises AssertionError with its output."""
    root = base / "opencl_backend"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("build", "dist", "__pycache__", "*.so"))
    site = base / "site"
    # The OpenCL driver: PoCL's wheel, beside the backend (the runtime finds its ICD
    # through torch_fl_ocl._find_driver, as in a user's venv).
    pocl = run([sys.executable, "-m", "pip", "install", "-q", "--target", str(site),
                "pocl-binary-distribution"], timeout=600)
    if pocl.returncode != 0:
        return f"pocl-binary-distribution not installable here: {pocl.stderr[-500:]}"
    wheels = base / "wheels"
    env = dict(os.environ, MAX_JOBS="2", CMAKE_BUILD_PARALLEL_LEVEL="2", FLSDK_BUILD_PROGRESS="0")
    build = run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                 "-w", str(wheels), str(root)], timeout=2400, env=env)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    with zipfile.ZipFile(next(wheels.glob("torch_fl_ocl-*.whl"))) as zf:
        zf.extractall(site)
    return root, site
