"""The example's own tests (beside tests/generated/, whose conftest does the
same for the generated tests): the backend is loaded before any test, whether or
not `import torch` autoloaded it (a venv holding another flsdk backend turns
autoload off: one process holds one PrivateUse1 backend)."""

import pytest
import torch_fl_ocl


@pytest.fixture(scope="session", autouse=True)
def backend_loaded():
    torch_fl_ocl.load()
