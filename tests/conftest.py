"""Shared fixtures of the flsdk/torch_fl tests. The tests are grouped by what they
test (spec/, codegen/, scaffold/, torch_fl/, benchmarks/); the helpers they share
are modules of support/, importable by name (`from scaffold import flsdk`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import pytest  # noqa: E402
from required_backend import acme_skip_reason
from scaffold import build_into, flsdk


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
