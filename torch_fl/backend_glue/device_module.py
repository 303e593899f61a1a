"""`torch.<name>`: the device module PyTorch looks up by the device's name
(torch.get_device_module, torch.random.fork_rng, torch.load, checkpointing,
Inductor), with the function names of torch.cuda.

The backend's generated `device_module.py` is that module: it fills its globals
with `DeviceModule(name, native, amp_dtypes).fill(globals())`, and the loader
registers it as `torch.<name>`. Memory statistics come from `torch.accelerator`, which reads
the generated caching allocator; these functions only pick the device.
"""

import contextlib

import torch

from .memory import install_memory_module

_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}

# torch.compile: Inductor asks torch.<name> for these names on its first compile
# (torch 2.13 `init_backend_registration`). torch_fl.compile then registers the
# device with Dynamo and Inductor as device.yaml's `compile:` section says. Asked
# lazily, so `import torch` does not import Inductor.
INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


class DeviceContext:
    """Context manager: `device` (index, "<name>:1", torch.device) is current inside
    the block. torch.load and torch.utils.checkpoint use it; None changes nothing.
    DeviceModule makes one subclass per backend (its `device`), which sets `_module`."""

    _module = None  # the backend's DeviceModule

    def __init__(self, device):
        self.idx = -1 if device is None else self._module.index(device)
        self.prev_idx = -1

    def __enter__(self):
        native = self._module.native
        self.prev_idx = native.current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            native.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            self._module.native.set_device(self.prev_idx)
        return False


class DeviceModule:
    """The functions of `torch.<name>` for the backend `name` ("acme"), whose native
    module is `native` (`<package>._C`) and whose device.yaml lists `amp_dtypes`
    (names such as "bfloat16")."""

    # What fill() exports: torch.cuda's names, and the private ones torch calls on
    # a device module (_lazy_init, _is_in_bad_fork).
    EXPORTS = (
        "is_available", "device_count", "current_device", "set_device", "synchronize",
        "set_sync_debug_mode", "get_sync_debug_mode",
        "is_initialized", "_lazy_init", "init", "_is_in_bad_fork",
        "get_amp_supported_dtype", "is_bf16_supported",
        "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
        "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        "empty_cache", "memory_stats", "memory_allocated", "max_memory_allocated",
        "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "mem_get_info",
        "memory_summary", "memory_snapshot", "reset_accumulated_memory_stats", "memory",
        "set_memory_config", "get_memory_config",
        "current_stream", "stream", "device", "Stream", "Event", "ipc_collect",
    )

    def __init__(self, name, native, amp_dtypes):
        self.name = name
        self.native = native
        self.amp_dtypes = tuple(amp_dtypes)
        # A class, as torch.cuda.device, bound to this backend.
        self.device = type("device", (DeviceContext,), {"_module": self, "__module__": __name__})
        # Where `_initialized` lives: torch reads it as an attribute of the device
        # module (torch.utils.checkpoint stashes the device's RNG state only when it
        # is true), so once fill() has run it is the device module's own globals.
        self.globals = {"_initialized": False}
        # torch.<name>.memory, as torch.cuda.memory (memory.py).
        self.memory_functions, self.memory = install_memory_module(self)

    def fill(self, module_globals):
        """Make `module_globals` (the generated device module's) torch.<name>: EXPORTS,
        the module-level `__getattr__` that answers Inductor's hook names, and the
        `_initialized` flag that _lazy_init sets."""
        module_globals.update({name: getattr(self, name) for name in self.EXPORTS})
        module_globals["__getattr__"] = self.module_getattr
        module_globals["_initialized"] = self.globals["_initialized"]
        self.globals = module_globals

    def index(self, device=None):
        """The index of `device` (None: the current one; an int; "<name>:1"; a
        torch.device of this backend's type)."""
        if device is None:
            return self.native.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        if device.type != self.name:
            raise ValueError(f"expected a {self.name} device, got {device}")
        return self.native.current_device() if device.index is None else device.index

    def is_available(self):
        return self.native.device_count() > 0

    def device_count(self):
        return self.native.device_count()

    def current_device(self):
        return self.native.current_device()

    def set_device(self, device):
        self.native.set_device(self.index(device))

    def synchronize(self, device=None):
        self.native.synchronize(self.index(device))

    def set_sync_debug_mode(self, debug_mode):
        """As torch.cuda.set_sync_debug_mode: "default"/0 off, "warn"/1 warn once per op,
        "error"/2 raise, when an op makes the host wait for the device without the
        user asking (a copy to the host, .item(), a data-dependent shape, the CPU
        fallback). synchronize() and event waits are never reported."""
        if isinstance(debug_mode, str):
            if debug_mode not in _SYNC_DEBUG_MODES:
                raise RuntimeError(f"invalid sync debug mode {debug_mode!r}: expected one of "
                                   f"{list(_SYNC_DEBUG_MODES)} or 0, 1, 2")
            debug_mode = _SYNC_DEBUG_MODES[debug_mode]
        self.native.set_sync_debug_mode(int(debug_mode))

    def get_sync_debug_mode(self):
        return self.native.get_sync_debug_mode()

    def is_initialized(self):
        return self.globals["_initialized"]

    def _lazy_init(self):
        self.native.init()
        self.globals["_initialized"] = True

    def init(self):
        self._lazy_init()

    def _is_in_bad_fork(self):
        return False

    def get_amp_supported_dtype(self):
        return [getattr(torch, d) for d in self.amp_dtypes]

    def is_bf16_supported(self, including_emulation=True):
        return torch.bfloat16 in self.get_amp_supported_dtype()

    def manual_seed(self, seed):
        self.native.manual_seed(self.native.current_device(), int(seed))

    def manual_seed_all(self, seed):
        for index in range(self.native.device_count()):
            self.native.manual_seed(index, int(seed))

    def seed(self):
        return self.native.seed(self.native.current_device())

    def seed_all(self):
        for index in range(self.native.device_count()):
            self.native.seed(index)

    def initial_seed(self):
        return self.native.initial_seed(self.native.current_device())

    def get_rng_state(self, device=None):
        state = self.native.get_rng_state(self.index(device))
        return torch.frombuffer(bytearray(state), dtype=torch.uint8)

    def set_rng_state(self, new_state, device=None):
        self.native.set_rng_state(self.index(device), bytes(new_state.cpu().numpy().tobytes()))

    def get_rng_state_all(self):
        return [self.get_rng_state(i) for i in range(self.native.device_count())]

    def set_rng_state_all(self, states):
        for index, state in enumerate(states):
            self.set_rng_state(state, index)

    def empty_cache(self):
        self.native.empty_cache()

    def memory_stats(self, device=None):
        """torch.cuda.memory_stats' keys (memory.py)."""
        return self.memory_functions.memory_stats(device)

    def memory_summary(self, device=None, abbreviated=False):
        return self.memory_functions.memory_summary(device, abbreviated)

    def memory_snapshot(self):
        return self.memory_functions.memory_snapshot()

    def reset_accumulated_memory_stats(self, device=None):
        self.memory_functions.reset_accumulated_memory_stats(device)

    def memory_allocated(self, device=None):
        return torch.accelerator.memory_allocated(self.index(device))

    def max_memory_allocated(self, device=None):
        return torch.accelerator.max_memory_allocated(self.index(device))

    def memory_reserved(self, device=None):
        return torch.accelerator.memory_reserved(self.index(device))

    def max_memory_reserved(self, device=None):
        return torch.accelerator.max_memory_reserved(self.index(device))

    def reset_peak_memory_stats(self, device=None):
        torch.accelerator.reset_peak_memory_stats(self.index(device))

    def mem_get_info(self, device=None):
        return torch.accelerator.get_memory_info(self.index(device))

    def set_memory_config(self, config):
        """Set caching-allocator options: a dict or 'key:value,...' string."""
        if isinstance(config, dict):
            config = ",".join(f"{k}:{v}" for k, v in config.items())
        self.native.set_memory_config(config)

    def get_memory_config(self):
        return dict(self.native.get_memory_config())

    def ipc_collect(self):
        """Drop the device storages this process shared with other processes that no
        consumer holds any more (torch.cuda.ipc_collect); returns how many are still
        held."""
        collect = getattr(self.native, "ipc_collect", None)
        return collect() if collect is not None else 0

    def current_stream(self, device=None):
        return torch.accelerator.current_stream(self.index(device))

    def stream(self, stream):
        """Context manager: `stream` is current on its device inside the block."""
        return contextlib.nullcontext() if stream is None else stream

    def Stream(self, device=None, priority=0):  # noqa: N802 - mirrors torch.cuda.Stream
        return torch.Stream(device=torch.device(self.name, self.index(device)), priority=priority)

    def Event(self, enable_timing=False):  # noqa: N802
        return torch.Event(device=self.name, enable_timing=enable_timing)

    def module_getattr(self, name):
        """The device module's `__getattr__`: Inductor's hook names, through
        torch_fl.compile (an extra of the backend, so maybe not installed)."""
        if name not in INDUCTOR_HOOKS:
            raise AttributeError(f"module 'torch.{self.name}' has no attribute {name!r}")
        try:
            from torch_fl.compile import inductor_hook
        except ImportError as exc:
            raise ImportError(
                f"torch.compile on '{self.name}' needs torch_fl (pip install flsdk); "
                f"without it use torch.compile(model, backend='aot_eager'): {exc}") from exc
        return inductor_hook(self.name, name)
