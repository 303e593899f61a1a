"""Shared fixtures of the flsdk/torch_fl tests. The tests are grouped by what they
test (spec/, codegen/, scaffold/, torch_fl/, benchmarks/); the helpers they share
are modules of support/, importable by name (`from scaffold import flsdk`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import opencl_build  # noqa: E402
import pytest  # noqa: E402
from background_build import BackgroundJob  # noqa: E402
from required_backend import acme_skip_reason  # noqa: E402
from scaffold import build_into, flsdk  # noqa: E402


@pytest.hookimpl(trylast=True)  # after flsdk.pytest_slow has marked what it skips
def pytest_collection_modifyitems(config, items):
    """The tests of the OpenCL example run last: its build runs in the background
    while the others run (support/background_build.py)."""
    late = [item for item in items if opencl_build.needs_build(item)]
    if late:
        moved = set(map(id, late))
        items[:] = [item for item in items if id(item) not in moved] + late


@pytest.fixture(scope="session", autouse=True)
def background_builds(request, tmp_path_factory):
    """Starts the OpenCL example's build when a test of this session will use it
    (its fixture, ocl_build, waits for it); stops it if the session ends first."""
    wanted = any(opencl_build.needs_build(item) and not item.get_closest_marker("skip")
                 for item in request.session.items)
    job = None
    if wanted:
        base = tmp_path_factory.mktemp("opencl")
        job = BackgroundJob("the OpenCL example's build", lambda job: opencl_build.prepare(base, job.run))
        request.config.stash[opencl_build.JOB] = job
    yield
    if job is not None:
        job.cancel()


@pytest.fixture(scope="session")
def zeta_first_build(tmp_path_factory):
    """A freshly scaffolded backend `zeta` with the discrete memory model (its
    device addresses are never readable by the host), built once per session
    (minutes on two cores): (root, site) where `site` holds the extracted wheel of
    the untouched scaffold. A test that changes `root` puts it back when it is done:
    the backend refuses a build older than its sources (build_record.py), and other
    tests load `site`. Beside `site`: build.log (the build's verbose output) and
    progress.log (its progress lines). (test_first_day builds the default,
    host-memory one.)"""
    base = tmp_path_factory.mktemp("scaffold")
    root = base / "zeta"
    flsdk("new-backend", "zeta", "--out", str(root), "--memory", "discrete")
    site = base / "site_first"
    # everything the build prints (build.log) and its progress lines (progress.log),
    # for test_scaffold_build's checks of what a build says
    build_into(root, site, log=base / "build.log", FLSDK_BUILD_PROGRESS=str(base / "progress.log"))
    return root, site


@pytest.fixture(scope="session")
def acme_backend():
    """The acme backend, loaded in this process. Skips only when acme is not
    installed at all and not required (tests/support/required_backend.py); an installed
    acme that does not load, or a missing one in CI, fails every test using it."""
    reason = acme_skip_reason()
    if reason:
        pytest.skip(reason)
    return "acme"
