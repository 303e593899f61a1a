"""PyTorch backend for the ACME simulated accelerator (device "acme").

Installing this package is enough: `import torch` loads it through the
`torch.backends` entry point, and `torch.ones(2, device="acme")` works.
"""


# Defined before anything imports torch: torch's autoloader calls this while
# `import torch` runs, and importing torch first from here would re-enter it.
def _autoload():
    """torch.backends entry point. Never raises: a failure must not break
    `import torch`; it is reported by torch_fl.list_devices() and flsdk doctor."""
    from ._generated import backend

    backend.try_load()


from ._generated.backend import load, load_error  # noqa: E402

__all__ = ["load", "load_error"]
