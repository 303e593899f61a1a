"""The registration steps every codegen shares (Dynamo interface, cache key)."""

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


def make_cache_key_pass(name: str, key: str):
    """A post-grad graph pass that changes nothing but whose uuid() enters the key of
    Inductor's FX graph cache: compiled code from another flsdk, backend build or
    device.yaml, or with another fusion setting, is never reused."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    from .. import graph as graph_api

    class CacheKeyPass(CustomGraphModulePass):
        """Also records the graph for torch_fl.get_optimized_graph and, with op fusion
        off, marks every op's result to be materialized in its own buffer."""

        def __call__(self, gm) -> None:
            graph_api._record_graph(name, gm)
            if not graph_api.op_fusion_enabled():
                for node in gm.graph.nodes:
                    if node.op == "call_function" and _is_tensor(node.meta.get("val")):
                        node.meta["inductor_realize_to_strides"] = True

        def uuid(self) -> str:
            return f"torch_fl:{name}:{key};fusion={graph_api.op_fusion_enabled()}"

    return CacheKeyPass()


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
