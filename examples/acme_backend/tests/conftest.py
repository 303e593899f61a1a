"""acme test setup. acme is a discrete, asynchronous device: its memory is never
readable by host code (a glue path or kernel that touches it crashes the test),
and every stream queues its work. ACME_SLOW_DEVICE=<microseconds> (set before
pytest starts) holds every piece of queued work back, so a missing
synchronization shows as a wrong answer: CI runs a subset that way."""

import gc

import pytest

# The option that runs slow tests is defined once, by the flsdk.pytest_slow plugin (see the
# repository's pyproject.toml).


@pytest.fixture(autouse=True)
def no_device_error_left_behind():
    """A kernel's error (an index out of range, found on the device) is reported
    when the host next waits for its stream. Each test waits at its end, so such
    an error fails the test that caused it, not whichever test waits next."""
    yield
    import torch

    if not hasattr(torch, "acme"):  # the backend did not load: nothing ran on it
        return
    for index in range(torch.acme.device_count()):
        torch.acme.synchronize(index)


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
