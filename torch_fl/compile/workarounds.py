"""Fixes for places where torch 2.13's Inductor treats only the literal "cpu" right,
reproduced on torch 2.13.0 with acme (`codegen: cpp`).

Each fix is a small wrapper around one Inductor function that adds the
host-codegen devices to what the function already does for "cpu", and leaves
every other device alone. `versions.check_torch` refuses any other torch before
these are applied. The traps (named as in issue #10):

(a) reductions (softmax, layer_norm): the scheduler's loop-reindexing and
    loop-reordering fusion steps are "not validated for CPU" and skipped only when
    `BaseSchedulerNode.is_cpu()` (device.type == "cpu"); on a host device they ran
    the GPU variant and failed (TypeError in _try_reindex_pointwise_for_reduction).
(b) indexed loads / index_expr: `utils.get_current_backend()` answers "triton"
    (config.cuda_backend) for every device it does not know, so C++ codegen took
    Triton-only paths (CSE variables without dtype: AssertionError in arange).
(c) device index: buffers are allocated without it (fixed in the wrapper itself,
    cpp_codegen.HostKernelCalls.make_allocation), and `utils.device_need_guard`
    answers True only for GPU types, so the wrapper entered no device guard: a
    graph on `acme:1` ran its extern and custom ops with `acme:0` current.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_host_devices: set[str] = set()   # devices generated with Inductor's C++ codegen
_installed = False


def apply(name: str, codegen: str) -> None:
    if codegen != "cpp":
        return
    with _lock:
        _host_devices.add(name)
        _install_once()


def _install_once() -> None:
    global _installed
    if _installed:
        return
    _patch_is_cpu()
    _patch_get_current_backend()
    _patch_device_need_guard()
    _installed = True


def _patch_is_cpu() -> None:
    """Trap (a)."""
    from torch._inductor.scheduler import BaseSchedulerNode

    stock = BaseSchedulerNode.is_cpu

    def is_cpu(self) -> bool:
        if stock(self):
            return True
        device = self.get_device()
        return device is not None and device.type in _host_devices

    BaseSchedulerNode.is_cpu = is_cpu


def _patch_get_current_backend() -> None:
    """Trap (b). The function is bound by name in codegen/common.py too."""
    import torch._inductor.codegen.common as common
    import torch._inductor.utils as utils

    stock = utils.get_current_backend

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type in _host_devices:
            return "cpp"
        return stock(device_type)

    utils.get_current_backend = get_current_backend
    common.get_current_backend = get_current_backend


def _patch_device_need_guard() -> None:
    """Trap (c), the guard half. The scheduler binds the function by name."""
    import torch._inductor.scheduler as scheduler
    import torch._inductor.utils as utils

    stock = utils.device_need_guard

    def device_need_guard(device: str) -> bool:
        return device in _host_devices or stock(device)

    utils.device_need_guard = device_need_guard
    scheduler.device_need_guard = device_need_guard
