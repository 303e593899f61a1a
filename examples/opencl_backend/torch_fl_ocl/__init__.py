"""PyTorch backend for the OpenCL device (device "ocl").

Installing this package is enough: `import torch` loads it through the
`torch.backends` entry point, and `torch.ones(2, device="ocl")` works.
"""


def _find_driver():
    """Points the runtime at an OpenCL driver when none is configured: without
    OCL_DRIVER and without a vendors folder (/etc/OpenCL/vendors, or
    OCL_ICD_VENDORS), the PoCL of the pocl-binary-distribution wheel, which
    installs its ICD (libpocl and pocl.icd) under site-packages/pyopencl/.libs.
    Standard library only, and never raises (it runs inside `import torch`)."""
    import os

    if os.environ.get("OCL_DRIVER"):
        return
    vendors = os.environ.get("OCL_ICD_VENDORS") or "/etc/OpenCL/vendors"
    try:
        if any(name.endswith(".icd") for name in os.listdir(vendors)):
            return
    except OSError:
        pass
    try:
        import importlib.util

        spec = importlib.util.find_spec("pocl_binary_distribution")
        if spec is None or not spec.submodule_search_locations:
            return
        site = os.path.dirname(list(spec.submodule_search_locations)[0])
        libs = os.path.join(site, "pyopencl", ".libs")
        icd = os.path.join(libs, "pocl.icd")
        with open(icd) as f:
            name = f.read().strip()
        path = name if os.path.isabs(name) else os.path.join(libs, name)
        if os.path.isfile(path):
            os.environ["OCL_DRIVER"] = path
    except Exception:  # a broken install: the runtime's error names what it tried
        return


# Defined before anything imports torch: torch's autoloader calls this while
# `import torch` runs, and importing torch first from here would re-enter it.
def _autoload():
    """torch.backends entry point. Never raises: a failure must not break
    `import torch`; it warns once with the cause (torch_fl.list_devices() and
    flsdk doctor report it too). TORCH_FL_BACKEND=<name> picks one of several."""
    _find_driver()
    try:
        from ._generated import backend
    except Exception as exc:  # e.g. a source folder where `flsdk gen` never ran
        import warnings

        warnings.warn(f"the 'ocl' device backend was not loaded: cannot import "
                      f"its generated code ({type(exc).__name__}: {exc}); `flsdk doctor` checks "
                      "the installation.", RuntimeWarning, stacklevel=2)
        return
    backend.try_load()


_find_driver()  # also when the package is imported directly, before load()

from ._generated.backend import load, load_error  # noqa: E402

__all__ = ["load", "load_error"]
