"""PyTorch backend for the OpenCL device (device "ocl").

Installing this package is enough: `import torch` loads it through the
`torch.backends` entry point, and `torch.ones(2, device="ocl")` works.
"""


# Defined before anything imports torch: torch's autoloader calls this while
# `import torch` runs, and importing torch first from here would re-enter it.
def _autoload():
    """torch.backends entry point. Never raises: a failure must not break
    `import torch`; it warns once with the cause (torch_fl.list_devices() and
    flsdk doctor report it too). TORCH_FL_BACKEND=<name> picks one of several."""
    try:
        from ._generated import backend
    except Exception as exc:  # e.g. a source folder where `flsdk gen` never ran
        import warnings

        warnings.warn(f"the 'ocl' device backend was not loaded: cannot import "
                      f"its generated code ({type(exc).__name__}: {exc}); `flsdk doctor` checks "
                      "the installation.", RuntimeWarning, stacklevel=2)
        return
    backend.try_load()


from ._generated.backend import load, load_error  # noqa: E402

__all__ = ["load", "load_error"]
