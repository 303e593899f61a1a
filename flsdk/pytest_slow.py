"""pytest plugin: tests marked `slow` (stress runs, full builds) run only with --run-slow.

Registered once, by `addopts = ["-p", "flsdk.pytest_slow"]` in the repository's
pyproject.toml, so `./run test` (both test directories) and pytest on either
directory alone see the same single definition.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords and not item.get_closest_marker("skip"):
            item.add_marker(skip)
