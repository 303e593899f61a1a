"""acme test setup: conformance tests run in protect mode, where device memory
is unreadable from the host outside kernels and copies, so a kernel or glue
path that touches device memory without the runtime crashes the test."""

import gc

import pytest


@pytest.fixture(autouse=True)
def protect_device_memory(request):
    if "generated" not in request.node.path.parts:
        yield
        return
    import torch  # noqa: F401  (loads the backend)
    import torch_fl_acme._C as native

    native.runtime_set_option("protect", "1")
    try:
        yield
    finally:
        native.runtime_set_option("protect", "0")


# --run-slow: tests/conftest.py defines it when both test directories run
# (./run test); this makes `pytest examples/acme_backend/tests` alone skip the
# slow tests too instead of running them unasked.
def pytest_addoption(parser):
    try:
        parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")
    except ValueError:
        pass  # already added by tests/conftest.py


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords and not item.get_closest_marker("skip"):
            item.add_marker(skip)


@pytest.fixture
def no_device_memory_leak():
    """The test leaves the caching allocator's allocated bytes where it found them."""
    import torch

    count = torch.accelerator.device_count()
    gc.collect()
    before = [torch.accelerator.memory_allocated(i) for i in range(count)]
    yield
    gc.collect()
    after = [torch.accelerator.memory_allocated(i) for i in range(count)]
    assert after == before, f"acme memory allocated before/after the test: {before} -> {after}"
