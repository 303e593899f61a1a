"""Loading one backend into PyTorch: what stands behind the `load()`, `try_load()`,
`is_loaded()`, `load_error()` and `native()` of a backend's generated `backend`
module (the object of its `torch_fl.backends` entry point).

Loading imports the native module `<package>._C` (which registers the device with
PyTorch), names the device, installs `torch.<name>` (the generated
`<package>._generated.device_module`) and the tensor/module/storage methods. It
refuses a torch other than the one the backend was generated and built for, a
build older than its sources (build_record.py), and a process where another
backend already owns PyTorch's PrivateUse1 slot.

Nothing here imports torch or the native module before load() runs: torch_fl
imports every installed backend's `backend` module just to list it.
"""

import atexit
import importlib
import os
import threading
import time
import warnings

from . import build_record
from .device_defaults import install_device_defaults
from .op_routes import apply_env as apply_env_op_routes

# Which installed backend torch's autoloader loads when several are installed
# (one PrivateUse1 backend per process): unset = the first that loads.
SELECT_ENV = "TORCH_FL_BACKEND"


class BackendLoadError(RuntimeError):
    """The backend cannot be used in this process; the message says why."""


def base_version(version):
    """'2.13.0+cpu' -> '2.13.0': the local part names the build, not the ABI."""
    return version.split("+", 1)[0]


def let_autograd_threads_settle():
    """Exit-time guard for a race in PyTorch's autograd engine: after
    `backward()` returns, the device's autograd thread may still be dropping
    its graph task, which takes the GIL to release Python objects. If Python
    is already finalizing then, the thread is killed mid-unwind and the process
    aborts ("terminate called without an active exception") although all work
    is done. Giving that thread a moment while Python is alive avoids it."""
    time.sleep(0.02)


class BackendLoader:
    """The load state of one backend. `name` is the device type ("acme"),
    `package` the Python package ("torch_fl_acme"), `torch_version` the torch
    `flsdk gen` ran with, `descriptor` device.yaml as a dict (read at load time,
    not copied: a test may change it before loading)."""

    def __init__(self, name, package, torch_version, descriptor):
        self.name = name
        self.package = package
        self.torch_version = torch_version
        self.descriptor = descriptor
        # load() runs under torch's autoloader and from any thread that asks first.
        self._lock = threading.RLock()
        self._loaded = False
        self._methods_generated = False
        self._error = None
        self._warned = False

    def check_torch(self, torch):
        if base_version(torch.__version__) != base_version(self.torch_version):
            raise BackendLoadError(
                f"{self.package} was built for torch {self.torch_version} but torch "
                f"{torch.__version__} is installed. Install torch=={base_version(self.torch_version)}, "
                f"or rebuild the backend (flsdk gen && pip install --no-build-isolation .) against "
                f"this torch."
            )

    def check_privateuse1_free(self, torch):
        owner = torch._C._get_privateuse1_backend_name()
        if owner not in ("privateuseone", self.name):
            raise BackendLoadError(
                f"PyTorch's PrivateUse1 slot is already taken by the '{owner}' backend; only one "
                f"PrivateUse1 backend can live in a process, so '{self.name}' ({self.package}) was "
                f"not loaded. Choose the backend `import torch` loads with {SELECT_ENV}={self.name} "
                f"(or {SELECT_ENV}={owner}), or uninstall one of them."
            )

    def import_native(self):
        """The compiled extension; when it is missing because Python imported the
        package from its source folder (the current directory shadows the installed
        package, and a source folder has no built `_C`), say so instead of a bare
        ModuleNotFoundError."""
        try:
            return importlib.import_module(self.package + "._C")
        except ModuleNotFoundError as exc:
            if exc.name != self.package + "._C":
                raise
            here = os.path.dirname(os.path.abspath(importlib.import_module(self.package).__file__))
            source = os.path.dirname(here)
            if os.path.isfile(os.path.join(source, "pyproject.toml")):
                raise BackendLoadError(
                    f"{self.package} was imported from its source folder {here}, which has no "
                    f"built extension: the current directory ({source}) shadows the installed "
                    f"package. Run Python from another folder (the installed {self.package} "
                    f"then loads)."
                ) from None
            raise BackendLoadError(
                f"{self.package}._C (the compiled extension) is missing from {here}: reinstall "
                f"the backend (pip install --no-build-isolation .)"
            ) from None

    def build_problem(self, root=None):
        """Why the installed build is not the build of the backend's sources at `root`
        (default: the folder it was built from, when that is still here), or None: a
        kernel, generated file or runtime source changed since the build, so the
        extension would run old code (build_record.py)."""
        package_dir = os.path.dirname(os.path.abspath(importlib.import_module(self.package).__file__))
        return build_record.problem(package_dir, root)

    def check_build(self):
        if os.environ.get(build_record.SKIP_ENV, "") == "1":
            return
        problem = self.build_problem()
        if problem:
            raise BackendLoadError(f"{problem} ({build_record.SKIP_ENV}=1 loads it anyway)")

    def install_compile_fallback(self):
        """device.yaml compile: {codegen: none}: the default torch.compile backend runs
        graphs on this device with aot_eager (torch_fl.compile.no_codegen). Cheap: it
        imports neither Inductor nor torch_fl's heavy parts; cpp/triton register lazily
        through torch.<name>.__getattr__ instead."""
        if (self.descriptor.get("compile") or {}).get("codegen", "none") != "none":
            return
        try:
            from torch_fl.compile.no_codegen import install
        except ImportError:  # torch_fl not installed: torch.compile reports it on use
            return
        install(self.name)

    def load(self):
        """Load and register the backend. Idempotent; raises BackendLoadError."""
        with self._lock:
            if self._loaded:
                return
            try:
                import torch

                # `import torch` may have run torch's autoloader, which loaded us already.
                if self._loaded:
                    return
                self.check_torch(torch)
                self.check_privateuse1_free(torch)
                self.check_build()
                native = self.import_native()
                device_module = importlib.import_module(self.package + "._generated.device_module")

                if torch._C._get_privateuse1_backend_name() != self.name:
                    torch.utils.rename_privateuse1_backend(self.name)
                if not hasattr(torch, self.name):
                    torch._register_device_module(self.name, device_module)
                # torch refuses to generate them twice: a retry after a failed
                # init() would otherwise report that instead of the real cause.
                if not self._methods_generated:
                    torch.utils.generate_methods_for_privateuse1_backend(
                        for_tensor=True, for_module=True, for_storage=True,
                        for_packed_sequence=True)
                    self._methods_generated = True
                native.init()
                # The device's c10d backend, under device.yaml's comm_backend: a torchrun
                # script's init_process_group finds it without importing torch_fl.
                from .distributed import register_from_descriptor
                register_from_descriptor(self.name, native, self.descriptor)
                # Its tensors through torch.multiprocessing (queues, process arguments).
                if hasattr(native, "_ipc_share"):
                    from .multiprocessing import install as install_sharing
                    install_sharing(self.name, native)
                apply_env_op_routes(torch, native, self.name)  # TORCH_FL_OP_ROUTES; warns, never raises
                atexit.register(let_autograd_threads_settle)
                self.install_compile_fallback()
                install_device_defaults(torch, self.name, self.descriptor.get("amp_dtypes") or ())
            except BackendLoadError as exc:
                self._error = str(exc)
                raise
            except Exception as exc:  # any other cause: keep it, with its type
                self._error = f"{type(exc).__name__}: {exc}"
                raise BackendLoadError(f"{self.package} failed to load: {self._error}") from exc
            self._loaded = True
            self._error = None

    def try_load(self):
        """torch's autoloader: load unless TORCH_FL_BACKEND names another backend; never
        raise (that would break `import torch`), but warn once naming the backend and
        the cause. Returns True when loaded."""
        chosen = os.environ.get(SELECT_ENV, "").strip()
        if chosen and chosen != self.name:
            return False
        try:
            self.load()
            return True
        except Exception as exc:
            if not self._warned:
                self._warned = True
                reason = str(self._error or exc).rstrip(".")  # one period, not two
                warnings.warn(f"the '{self.name}' device backend ({self.package}) was not loaded: "
                              f"{reason}. `import torch` works without it; "
                              f"`flsdk doctor` checks the installation.", RuntimeWarning,
                              stacklevel=2)
            return False

    def is_loaded(self):
        return self._loaded

    def load_error(self):
        """Why the last load failed, or None."""
        return self._error

    def native(self):
        """The native module torch_fl talks to (loads the backend first)."""
        self.load()
        return importlib.import_module(self.package + "._C")

    def op_dtypes(self):
        """The registered ops whose kernels compute fewer dtypes than the device, and
        which arguments decide (the generated op_dtypes.py: imported on first use, as
        it is large and `import torch` should not pay for it)."""
        return importlib.import_module(self.package + "._generated.op_dtypes").OP_DTYPES

    def op_specs(self):
        """Registered op -> (spec file:line, kernel, kernel file): the generated
        op_specs.py, imported on first use."""
        return importlib.import_module(self.package + "._generated.op_specs").OP_SPECS
