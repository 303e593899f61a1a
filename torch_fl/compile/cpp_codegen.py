"""`codegen: cpp`: Inductor's C++ kernels run on the device's memory.

For a device whose memory the host can address (a simulator, unified memory),
Inductor's CPU code generator (CppScheduling) can produce the fused kernels:
they only need the buffers' pointers, which the Python wrapper passes exactly
as on CPU. On a discrete device whose runtime runs host code as device work
(runtime primitive host_kernels), the same kernels are launched on the current
stream instead and reach the buffers through the device's view
(host_kernels.py). What the device adds over CPU is small and lives here:

* op overrides: the device module's set_device / synchronize / device guard;
* the wrapper: calls host kernels inline for this device (stock Inductor
  knows only cpu and mps) and allocates buffers on the device *with* its index;
  with `workarounds.py` it also enters a device guard around the graph, so
  extern and custom ops see the graph's device as current (trap c);
* the scheduling: CppScheduling with the 2.13 fixes of `workarounds.py`, and
  the device's vector math (`vector_math.py`: device.yaml `compile.sleef_u35`).

Matmuls, convolutions and other extern kernels stay the backend's own
kernels: Inductor calls the aten ops, which dispatch to the device.
"""

from __future__ import annotations

import threading
from textwrap import dedent


def make_classes(name: str, sleef_u35=(), discrete: bool = False):
    """(DeviceOpOverrides instance, wrapper class, scheduling class) for device `name`;
    its fused kernels compute the float32 functions `sleef_u35` with Sleef's 3.5-ULP versions.
    On a `discrete` device (memory.model: discrete) each kernel call is launched on the
    current stream as device work (host_kernels.py) instead of called."""
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.ir import ExternKernel
    from torch._inductor.virtualized import V

    from .. import graph as graph_api
    from .registration import device_op_overrides_base
    from .vector_math import kernel_proxy_class

    class OpOverrides(device_op_overrides_base(name)):  # type: ignore[misc]  # base built per device at runtime
        def import_get_raw_stream_as(self, alias: str) -> str:
            # Host kernels run inline in the wrapper: no stream handle to pass them.
            return dedent(f"""
                def {alias}(_):
                    return 0
                """)

        def cpp_kernel_type(self) -> str:
            return "void*"

    class HostKernelCalls:
        """Mixin of both wrappers: call host-compiled kernels on `name` buffers inline,
        allocate on the buffer's own device index."""

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None,
                                         triton=True, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if device.type == name and not triton:
                if discrete:
                    call_args = _host_values_to_device(kernel_name, call_args,
                                                       kwargs.get("arg_types"), device)
                call = self.wrap_kernel_call(kernel_name, call_args)
                guards = self._flsdk_device_guards()
                if device.index is not None and (not guards or guards[-1] != device.index):
                    # CppScheduling batches its kernels and writes them at a flush, and the
                    # scheduler's last flush comes after it has left the graph's device guard:
                    # the graph's last kernels would run with the caller's device current, on
                    # that device's stream, racing the graph's own stream (slow-device test).
                    call = f"with {V.graph.device_ops.device_guard(device.index)}: {call}"
                self.writeline(call)
                return
            return super()._generate_kernel_call_helper(
                kernel_name, call_args, device=device, triton=triton, **kwargs)

        # The device guards open at this point of the wrapper's code, innermost last.
        def _flsdk_device_guards(self) -> list:
            if not hasattr(self, "_flsdk_guard_stack"):
                self._flsdk_guard_stack: list[int] = []
            return self._flsdk_guard_stack

        def codegen_device_guard_enter(self, device_idx, *args, **kwargs):
            super().codegen_device_guard_enter(device_idx, *args, **kwargs)
            self._flsdk_device_guards().append(device_idx)

        def codegen_device_guard_exit(self):
            super().codegen_device_guard_exit()
            if self._flsdk_device_guards():
                self._flsdk_device_guards().pop()

        def define_kernel(self, kernel_name, kernel_body, *args, **kwargs):
            stock = "async_compile.cpp_pybinding("
            # Only kernels of `name`'s scheduling are device work: a graph may also
            # hold CPU kernels (an optimizer's CPU step counters), called on the host.
            if discrete and _defining.device == name and kernel_body.startswith(stock):
                # launched on the stream with the device's view of its pointers
                kernel_body = "_flsdk_host_kernels.pybinding(async_compile, " + kernel_body[len(stock):]
            return super().define_kernel(kernel_name, kernel_body, *args, **kwargs)

        def make_allocation(self, buf_name, device, dtype, shape, stride,
                            allocation_shape=None, is_pinned=False):
            line = super().make_allocation(buf_name, device, dtype, shape, stride,
                                           allocation_shape, is_pinned)
            if device.type == name and device.index is not None:
                # Trap (c): stock code writes device='<type>' (current device), not the index.
                line = line.replace(f"device='{name}'", f"device='{name}:{device.index}'")
            return line

    class SubgraphWrapperCodegen(HostKernelCalls, SubgraphPythonWrapperCodegen):
        """Wrapper of a subgraph (torch.cond / while_loop bodies)."""

    class WrapperCodegen(HostKernelCalls, PythonWrapperCodegen):
        """Python wrapper of a graph with tensors on `name`."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            # Stock create() builds PythonWrapperCodegen itself, not the registered class.
            if is_subgraph:
                return SubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return WrapperCodegen()

        def write_header(self) -> None:
            super().write_header()
            if discrete:  # the kernels' definitions call it (define_kernel above)
                self.imports.writeline("from torch_fl.compile import host_kernels as _flsdk_host_kernels")

        def generate(self, is_inference):
            result = super().generate(is_inference)
            for op in V.graph.operations:
                if isinstance(op, ExternKernel) and op.get_device() is not None \
                        and op.get_device().type == name:
                    graph_api._record_extern(name, _extern_name(op))
            graph_api._finish_graph(name)
            return result

    class Scheduling(CppScheduling):
        """CppScheduling for `name`; fuses as on CPU unless torch_fl's op fusion is off,
        and reports each kernel to torch_fl.graph."""

        kernel_proxy_cls = kernel_proxy_class(name, sleef_u35)

        def can_fuse_vertical(self, node1, node2) -> bool:
            return graph_api.op_fusion_enabled() and super().can_fuse_vertical(node1, node2)

        def can_fuse_horizontal(self, node1, node2) -> bool:
            return graph_api.op_fusion_enabled() and super().can_fuse_horizontal(node1, node2)

        # CppScheduling emits consecutive loop nests into one C++ function
        # (a "kernel group"); a *kernel* here is one loop nest: one codegen_node call,
        # computing the ops of the scheduler nodes fused into it.
        def codegen_node(self, node):
            graph_api._record_kernel(name, None, _origin_ops([node]))
            return super().codegen_node(node)

        def define_kernel(self, src_code, nodes, kernel_args=None):
            # Inductor shares one definition between kernels of equal source: the
            # device's kernels say whose they are, so a CPU kernel never shares one.
            src_code = f"// flsdk: a kernel of device {name}\n" + src_code
            _defining.device = name
            try:
                kernel_name = super().define_kernel(src_code, nodes, kernel_args)
            finally:
                _defining.device = None
            graph_api._name_pending_kernels(name, kernel_name)
            return kernel_name

    WrapperCodegen.__name__ = WrapperCodegen.__qualname__ = f"{name.capitalize()}PythonWrapperCodegen"
    Scheduling.__name__ = Scheduling.__qualname__ = f"{name.capitalize()}CppScheduling"
    return OpOverrides(), WrapperCodegen, Scheduling


class _Defining(threading.local):
    """The device whose Scheduling is defining a kernel right now (None: another's)."""
    device = None


_defining = _Defining()


def _host_values_to_device(kernel_name: str, call_args, arg_types, device):
    """A device kernel's arguments, with each 0-dim CPU tensor it reads (an
    optimizer's step count: Inductor hands those to device kernels as they are)
    replaced by a copy on the device. On a discrete device the kernel runs later,
    on the stream, where host memory is not its to read; the copy also takes the
    value as it is now, as the eager op would, not as it is when the kernel runs."""
    from torch._inductor.virtualized import V

    from . import CompileNotSupportedError

    out = []
    for position, arg in enumerate(call_args):
        buf = V.graph.try_get_buffer(arg) if isinstance(arg, str) else None
        on = buf.get_device() if buf is not None and hasattr(buf, "get_size") else None
        if on is None or on.type != "cpu":
            out.append(arg)
            continue
        arg_type = arg_types[position] if arg_types and position < len(arg_types) else ""
        if not str(arg_type).startswith("const "):
            raise CompileNotSupportedError(
                f"kernel {kernel_name} on {device} writes the CPU tensor {arg} "
                f"({arg_type or 'unknown type'}): a kernel of a discrete device cannot write "
                f"host memory; keep that state on the device")
        assert buf is not None  # `on` is its device
        if list(buf.get_size()) != []:
            raise CompileNotSupportedError(
                f"kernel {kernel_name} on {device} reads the CPU tensor {arg} of shape "
                f"{list(buf.get_size())}: only 0-dim CPU tensors can be handed to it")
        out.append(f"{arg}.to('{device.type}:{device.index or 0}')")
    return out


def _origin_ops(nodes) -> list[str]:
    """The aten ops a kernel computes, from the FX origins of its scheduler nodes."""
    ops = []
    for snode in nodes:
        for inner in snode.get_nodes():
            ir_node = getattr(inner, "node", None)
            for origin in sorted(getattr(ir_node, "origins", ()) or (), key=lambda n: n.name):
                if origin.op == "call_function":
                    ops.append(str(origin.target))
    return ops


def _extern_name(op) -> str:
    return str(getattr(op, "python_kernel_name", None) or type(op).__name__)


def register(name: str, config: dict, key: str) -> dict:
    """Register device `name` for Inductor's C++ codegen; returns the hook objects."""
    from .. import _backends
    from . import workarounds
    from .registration import register_with_inductor

    discrete = (getattr(_backends.backend(name), "DESCRIPTOR", {}) or {}).get("memory_model") == "discrete"
    if discrete:
        from . import host_kernels

        host_kernels.set_entry_points(_backends.native(name))
    overrides, wrapper, scheduling = make_classes(name, config.get("sleef_u35", ()), discrete)
    hooks = register_with_inductor(
        name, key, scheduling=scheduling, wrapper=wrapper, op_overrides=overrides,
        no_cpp_wrapper_why="Inductor's C++ wrapper needs a per-device C shim "
                           "(aoti_torch_<device>_*), which flsdk does not generate yet")
    workarounds.apply(name, "cpp")
    return hooks
