"""Shared fixtures of the flsdk/torch_fl tests."""

from __future__ import annotations

import pytest

from scaffold import build_into, flsdk


@pytest.fixture(scope="session")
def zeta_first_build(tmp_path_factory):
    """A freshly scaffolded backend `zeta` with the discrete memory model (its
    device addresses are never readable by the host), built once per session
    (minutes on two cores): (root, site) where `site` holds the extracted wheel of
    the untouched scaffold. Tests may change `root` afterwards (and rebuild
    elsewhere); `site` stays. (test_first_day builds the default, host-memory one.)"""
    base = tmp_path_factory.mktemp("scaffold")
    root = base / "zeta"
    flsdk("new-backend", "zeta", "--out", str(root), "--memory", "discrete")
    site = base / "site_first"
    build_into(root, site)
    return root, site
