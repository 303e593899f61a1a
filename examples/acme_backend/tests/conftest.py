"""acme test setup: conformance tests run in protect mode, where device memory
is unreadable from the host outside kernels and copies, so a kernel or glue
path that touches device memory without the runtime crashes the test."""

import gc

import pytest


@pytest.fixture(autouse=True)
def protect_device_memory(request):
    # Not the compile tests: Inductor's C++ kernels read and write acme memory directly
    # (device.yaml `codegen: cpp`: the arenas are host-addressable by design).
    if "generated" not in request.node.path.parts or request.node.path.name.endswith("_compile.py"):
        yield
        return
    import torch  # noqa: F401  (loads the backend)
    import torch_fl_acme._C as native

    native.runtime_set_option("protect", "1")
    try:
        yield
    finally:
        native.runtime_set_option("protect", "0")


# The option that runs slow tests is defined once, by the flsdk.pytest_slow plugin (see the
# repository's pyproject.toml).


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


@pytest.fixture
def no_fallback():
    """The test runs natively: nothing reaches the CPU fallback."""
    import torch  # noqa: F401  (loads the backend)
    import torch_fl_acme._C as native

    native.clear_fallback_log()
    yield
    assert native.fallback_log() == [], f"fell back to CPU: {native.fallback_log()}"


@pytest.fixture
def units():
    """Run with a given number of acme compute units: units(n). torch's intra-op
    threads stay at 4 whatever the count (they cap acme's units, and ops that fall
    back to CPU would otherwise change with them: CPU's own results depend on its
    thread count). Restores both afterwards."""
    import torch
    import torch_fl_acme._C as native

    before_units = native.runtime_get_option("compute_units")
    before_threads = torch.get_num_threads()

    def use(n):
        native.runtime_set_option("compute_units", str(n))
        torch.set_num_threads(4)

    yield use
    native.runtime_set_option("compute_units", before_units)
    torch.set_num_threads(before_threads)


ISAS = ("scalar", "avx2", "avx512")


@pytest.fixture(params=ISAS)
def each_isa(request):
    """Run the test once per vector instruction set acme's kernels can use
    (runtime option "isa", runtime/vector_isa.h). A set this CPU lacks is a skip
    that names the CPU's best: its code would die of SIGILL here."""
    import torch  # noqa: F401  (loads the backend)
    import torch_fl_acme._C as native

    try:
        native.runtime_set_option("isa", request.param)
    except RuntimeError as e:
        pytest.skip(str(e))
    try:
        yield request.param
    finally:
        native.runtime_set_option("isa", "auto")
