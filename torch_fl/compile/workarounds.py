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

Beyond the issue's traps, Inductor tunes some choices for its C++ backend but
keys them on the literal "cpu", so a host device got the GPU choice. Each was
found by profiling the compiled GPT train step against the same step compiled
for CPU (the kernels were 2.5-4.7x slower than CPU's identical-looking ones):

(h) heuristics for realizing intermediates (`ir.is_cpu`): how many ops and reads
    a pointwise node may inline before it is materialized.
(v) variance (LayerNorm): rows up to `config.cpp.use_two_step_variance_threshold`
    use a sum-then-sum-of-squares reduction; elsewhere Welford, which on CPU
    vectors costs 2-4x more for short rows (64-wide GPT LayerNorm: 26 vs 9 us).
(i) arg-reductions over several dims of a non-contiguous input (`x.t().argmax()`):
    the lowering computes the logical (row-major) index only for Triton and
    "cpu"; elsewhere it returned the index in Inductor's reordered loop order, a
    silently wrong answer (acme: argmin 12 where eager says 16).
(k) cat: the C++ backend lowers every cat to a ConcatKernel (each input written
    into its slice, vectorized); other devices may get a pointwise cat, which in
    C++ is a scalar loop of masked loads (GPT's q/k/v cat: 43 vs 9 us). Right-pad
    is not rewritten as a cat for the same reason.
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
    _patch_realize_heuristics()
    _patch_variance_algorithm()
    _patch_cat()
    _patch_argreduce_logical_index()
    _installed = True


def _on_host_device(node) -> bool:
    device = node.get_device()
    return device is not None and device.type in _host_devices


def _patch_is_cpu() -> None:
    """Trap (a)."""
    from torch._inductor.scheduler import BaseSchedulerNode

    stock = BaseSchedulerNode.is_cpu

    def is_cpu(self) -> bool:
        if stock(self):
            return True
        device = self.get_device()
        return device is not None and device.type in _host_devices

    BaseSchedulerNode.is_cpu = is_cpu  # type: ignore[method-assign]  # a deliberate patch of Inductor


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


def _patch_realize_heuristics() -> None:
    """(h). Only ir.py calls `is_cpu`, and only in these heuristics."""
    import torch._inductor.ir as ir

    stock = ir.is_cpu

    def is_cpu(x) -> bool:
        return stock(x) or ir.get_device_type(x) in _host_devices

    ir.is_cpu = is_cpu


def _patch_variance_algorithm() -> None:
    """(v). The stock function uses `config.unroll_reductions_threshold` (8) as its
    threshold for a device it does not know; a host device gets the C++ one."""
    import torch._inductor.lowering as lowering
    from torch._inductor import config

    stock = lowering.use_two_step_variance

    def use_two_step_variance(x, axis, keepdim, input_dtype):
        if not _on_host_device(x):
            return stock(x, axis, keepdim, input_dtype)
        with config.patch(unroll_reductions_threshold=config.cpp.use_two_step_variance_threshold):
            return stock(x, axis, keepdim, input_dtype)

    lowering.use_two_step_variance = use_two_step_variance


def _patch_cat() -> None:
    """(k). With no room for pointwise-cat inputs the stock lowering takes its
    ConcatKernel path, as it always does for "cpu"; `force_pointwise_cat` still wins."""
    import torch._inductor.lowering as lowering
    from torch._inductor import config

    def concat_kernel_on_host(stock_lowering):
        def cat(inputs, *args, **kwargs):
            if not inputs or not _on_host_device(inputs[0]):
                return stock_lowering(inputs, *args, **kwargs)
            with config.patch(max_complex_pointwise_cat_inputs=0, max_pointwise_cat_inputs=0):
                return stock_lowering(inputs, *args, **kwargs)
        return cat

    cat_ops = (lowering.aten.cat, *lowering.aten.cat.op_overloads())
    for op in cat_ops:
        if op in lowering.lowerings:
            lowering.lowerings[op] = concat_kernel_on_host(lowering.lowerings[op])
    lowering.cat = concat_kernel_on_host(lowering.cat)  # called by name from other lowerings

    stock_pad_as_cat = lowering._pad_as_cat

    def _pad_as_cat(x, padding, fill_value):
        return None if _on_host_device(x) else stock_pad_as_cat(x, padding, fill_value)

    lowering._pad_as_cat = _pad_as_cat


_in_argreduce = threading.local()


def _patch_argreduce_logical_index() -> None:
    """(i). The lowering asks `is_triton(x) or (x on "cpu" and the C++ backend)`;
    within an arg-reduction on a host device `is_triton` answers yes to that one
    question, which the rest of `_make_reduction_inner` never asks."""
    import torch._inductor.lowering as lowering

    stock_inner = lowering._make_reduction_inner
    stock_is_triton = lowering.is_triton

    def is_triton(x) -> bool:
        if getattr(_in_argreduce, "active", False) and _on_host_device(x):
            return True
        return stock_is_triton(x)

    def _make_reduction_inner(x, *, reduction_type=None, **kwargs):
        if not (reduction_type or "").startswith("arg") or not _on_host_device(x):
            return stock_inner(x, reduction_type=reduction_type, **kwargs)
        _in_argreduce.active = True
        try:
            return stock_inner(x, reduction_type=reduction_type, **kwargs)
        finally:
            _in_argreduce.active = False

    lowering.is_triton = is_triton
    lowering._make_reduction_inner = _make_reduction_inner
