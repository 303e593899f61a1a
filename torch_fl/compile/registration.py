"""The registration steps every codegen shares: Dynamo interface, op overrides that
reach the device through its generated module, cache key, refused C++ wrapper, and
the one call that registers them with Inductor."""

from __future__ import annotations

from typing import Any


def register_device_interface(name: str, properties: dict[str, Any] | None = None) -> type:
    """Give Dynamo/Inductor a DeviceInterface for `name` and each `name:i`."""
    import torch
    from torch._dynamo.device_interface import register_interface_for_device

    from .device_interface import make_device_interface

    interface = make_device_interface(name, properties)
    register_interface_for_device(name, interface)
    for index in range(getattr(torch, name).device_count()):
        register_interface_for_device(f"{name}:{index}", interface)
    return interface


def make_cache_key_pass(name: str, key: str, cudagraphs: bool = False):
    """A post-grad graph pass that changes nothing but whose uuid() enters the key of
    Inductor's FX graph cache: compiled code from another flsdk, backend build or
    device.yaml, or with another fusion setting, is never reused. `cudagraphs`: the
    device supports CUDA graphs (else mode="reduce-overhead" warns once, below)."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    from .. import graph as graph_api

    class CacheKeyPass(CustomGraphModulePass):
        """Also records the graph for torch_fl.get_optimized_graph and, with op fusion
        off, marks every op's result to be materialized in its own buffer."""

        def __call__(self, gm) -> None:
            if not cudagraphs:
                warn_if_cudagraphs_asked(name)
            graph_api._record_graph(name, gm)
            if not graph_api.op_fusion_enabled():
                for node in gm.graph.nodes:
                    if node.op == "call_function" and _is_tensor(node.meta.get("val")):
                        node.meta["inductor_realize_to_strides"] = True

        def uuid(self) -> str:
            return f"torch_fl:{name}:{key};fusion={graph_api.op_fusion_enabled()}"

    return CacheKeyPass()


_warned_cudagraphs: set[str] = set()


def warn_if_cudagraphs_asked(name: str) -> None:
    """mode="reduce-overhead" asks for CUDA graphs. Inductor skips them for a device
    that has none, but says so only in a debug log (TORCH_LOGS=cudagraphs): the user
    would not learn why the mode changes nothing. One warning per device and process."""
    import warnings

    from torch._inductor import config as inductor_config

    if not inductor_config.triton.cudagraphs or name in _warned_cudagraphs:
        return
    _warned_cudagraphs.add(name)
    warnings.warn(
        f"torch.compile(mode='reduce-overhead') on '{name}': the device has no CUDA graphs, "
        f"so graphs are compiled and run without them (same fused kernels and results as "
        f"mode='default'; the launch-overhead saving of graph replay does not apply)",
        UserWarning, stacklevel=2)


def refusing_cpp_wrapper(name: str, why: str) -> type:
    """Stands for the cpp_wrapper codegen (also used by AOTInductor) of a backend that
    has no C shim: constructing it raises a clear error instead of emitting C++ that
    cannot link."""

    class RefusedCppWrapper:
        supports_caching = False  # asked before create(); nothing gets compiled anyway

        @classmethod
        def create(cls, *args, **kwargs):
            from . import CompileNotSupportedError

            raise CompileNotSupportedError(
                f"torch.compile on '{name}': cpp_wrapper=True and AOTInductor "
                f"(torch._inductor.aoti_compile_and_package) are not supported: {why}. Use the "
                f"default Python wrapper (torch.compile(model) without options['cpp_wrapper']), "
                f"or torch.export without AOTInductor.")

    RefusedCppWrapper.__name__ = RefusedCppWrapper.__qualname__ = f"{name.capitalize()}RefusedCppWrapper"
    return RefusedCppWrapper


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def device_op_overrides_base(name: str) -> type:
    """DeviceOpOverrides whose device calls go to the generated `torch.<name>` module
    (every flsdk backend has the same set_device/synchronize/device functions). Each
    codegen subclasses it for what differs: the raw stream, the kernel pointer type."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    mod_expr = f"torch.{name}"

    class ModuleOpOverrides(DeviceOpOverrides):
        def set_device(self, device_idx: int) -> str:
            return f"{mod_expr}.set_device({device_idx})"

        def synchronize(self) -> str:
            return f"{mod_expr}.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"{mod_expr}.device({device_idx})"

    return ModuleOpOverrides


def register_with_inductor(name: str, key: str, *, scheduling: type, wrapper: type,
                           op_overrides, no_cpp_wrapper_why: str, cudagraphs: bool = False,
                           interface_properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """Register `name` with Dynamo (device interface) and Inductor (op overrides,
    scheduling, Python wrapper, refused C++ wrapper, FX wrapper, cache-key pass).
    Returns the hook objects by Inductor's names, and the interface under "interface"."""
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    from .. import graph as graph_api

    interface = register_device_interface(name, interface_properties)
    graph_api._install_cache_hooks()  # get_optimized_graph after a cache hit too
    register_device_op_overrides(name, op_overrides)
    cpp_wrapper = refusing_cpp_wrapper(name, no_cpp_wrapper_why)
    register_backend_for_device(name, scheduling, wrapper, cpp_wrapper, WrapperFxCodegen,
                                device_custom_pass=make_cache_key_pass(name, key, cudagraphs))
    return {"Scheduling": scheduling, "PythonWrapperCodegen": wrapper,
            "CppWrapperCodegen": cpp_wrapper, "WrapperFxCodegen": WrapperFxCodegen,
            "interface": interface}
