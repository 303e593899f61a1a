"""acme test setup: conformance tests run in protect mode, where device memory
is unreadable from the host outside kernels and copies, so a kernel or glue
path that touches device memory without the runtime crashes the test."""

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
