"""Shared pytest options: slow tests (stress, full builds) run only with --run-slow."""

import pytest


def pytest_addoption(parser):
    try:
        parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")
    except ValueError:
        pass  # examples/acme_backend/tests/conftest.py, loaded first, added it


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
