"""Graph mode: torch_fl's switches over torch.compile, as the Torch-FL article spells them.

    torch_fl.set_graph_optimization(True)   # torch_fl.optimize(model) compiles (Inductor)
    torch_fl.set_op_fusion(True)            # Inductor fuses ops into kernels (default)
    model = torch_fl.optimize(model)        # = torch.compile(model) while graph mode is on
    loss = model(x); ...
    g = torch_fl.get_optimized_graph()      # the most recently optimized graph
    print(g.fused_kernels, len(g.nodes))

Everything goes through the default `torch.compile` (backend "inductor"): the
flsdk backend's code generation is registered on the first compile by
`torch_fl.compile`. With fusion off, every op of the graph is materialized in
its own buffer and the scheduler fuses nothing, so graphs compile to one kernel
per op (or the device's own kernel): the difference to fusion on is the fusion win.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

_lock = threading.Lock()
_graph_optimization = False
_op_fusion = True
_last: OptimizedGraph | None = None
_building: dict[str, Any] | None = None  # the graph being compiled (one at a time: Inductor holds a lock)
_observers: list = []  # callables given every OptimizedGraph as it is finished (add_graph_observer)


@dataclasses.dataclass
class Kernel:
    """One kernel Inductor generated (one loop nest over the data): the function
    that holds it (consecutive kernels may share one C++ function) and the aten
    ops it computes."""

    name: str | None
    ops: tuple[str, ...]

    @property
    def fused(self) -> bool:
        return len(self.ops) > 1


@dataclasses.dataclass
class OptimizedGraph:
    """A graph Inductor compiled for an flsdk device."""

    device: str                   # device type, e.g. "acme"
    nodes: list                   # torch.fx nodes of the post-grad graph (the ops after decomposition)
    kernels: list[Kernel]         # generated kernels, in order
    extern_calls: list[str]       # ops left to the device's own kernels (matmul, conv, ...)
    op_fusion: bool               # the fusion setting it was compiled with
    graph_module: Any = None      # the torch.fx.GraphModule

    @property
    def fused_kernels(self) -> int:
        """Kernels that compute more than one op."""
        return sum(k.fused for k in self.kernels)

    @property
    def num_kernels(self) -> int:
        return len(self.kernels)

    def summary(self) -> str:
        ops = sum(1 for n in self.nodes if n.op == "call_function")
        lines = [f"optimized graph on {self.device}: {ops} ops -> {len(self.kernels)} generated "
                 f"kernels ({self.fused_kernels} fused) + {len(self.extern_calls)} device kernel "
                 f"calls; op fusion {'on' if self.op_fusion else 'off'}"]
        for k in self.kernels:
            lines.append(f"  {'fused' if k.fused else 'single'} kernel in {k.name}: {', '.join(k.ops)}")
        for name in self.extern_calls:
            lines.append(f"  device kernel: {name}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def set_graph_optimization(enabled: bool = True) -> None:
    """Graph mode on: `torch_fl.optimize(model)` returns `torch.compile(model)`;
    off: it returns the model unchanged (eager)."""
    global _graph_optimization
    _graph_optimization = bool(enabled)


def graph_optimization_enabled() -> bool:
    return _graph_optimization


def set_op_fusion(enabled: bool = True) -> None:
    """Whether Inductor fuses ops into kernels on flsdk devices (default on).
    Takes effect for graphs compiled afterwards (the setting is part of the cache key)."""
    global _op_fusion
    _op_fusion = bool(enabled)


def op_fusion_enabled() -> bool:
    return _op_fusion


def optimize(model, **compile_kwargs):
    """`torch.compile(model, **compile_kwargs)` if graph optimization is on, else `model`."""
    if not _graph_optimization:
        return model
    import torch

    return torch.compile(model, **compile_kwargs)


def get_optimized_graph(model=None, *example_inputs, **compile_kwargs) -> OptimizedGraph:
    """The most recently optimized graph; with a model (and its example inputs), compile
    and run it once (`torch.compile(model)`) and return the graph it produced (the last
    one, e.g. the backward graph of a training step run inside `model`)."""
    if model is not None:
        import torch

        global _last
        _last = None
        compiled = model if _is_compiled(model) else torch.compile(model, **compile_kwargs)
        compiled(*example_inputs)
    if _last is None:
        raise RuntimeError(
            "no graph has been optimized for an flsdk device in this process yet: call "
            "torch_fl.get_optimized_graph(model, *example_inputs), or run a torch.compile'd "
            "model on the device first")
    return _last


def add_graph_observer(callback) -> None:
    """Call `callback(graph)` with every OptimizedGraph compiled from now on (each
    forward and backward graph, not only the last one get_optimized_graph keeps)."""
    with _lock:
        _observers.append(callback)


def remove_graph_observer(callback) -> None:
    with _lock:
        _observers.remove(callback)


def _is_compiled(model) -> bool:
    return hasattr(model, "_torchdynamo_orig_callable") or type(model).__name__ == "OptimizedModule"


# --- recording, called by torch_fl.compile while Inductor compiles a graph ---------------

def _record_graph(device: str, gm) -> None:
    global _building
    with _lock:
        _building = {"device": device, "gm": gm, "kernels": [], "extern": []}


def _record_kernel(device: str, name: str | None, ops) -> None:
    """A generated kernel (one loop nest); name None until its function is defined."""
    if _building is not None and _building["device"] == device:
        _building["kernels"].append(Kernel(name, tuple(ops)))


def _name_pending_kernels(device: str, function: str) -> None:
    """The C++ function that holds the kernels recorded since the last one."""
    if _building is not None and _building["device"] == device:
        for kernel in _building["kernels"]:
            if kernel.name is None:
                kernel.name = function


def _record_extern(device: str, name: str) -> None:
    if _building is not None and _building["device"] == device:
        _building["extern"].append(name)


def _finish_graph(device: str) -> None:
    global _building, _last
    with _lock:
        if _building is None or _building["device"] != device:
            return
        gm = _building["gm"]
        graph = OptimizedGraph(device=device, nodes=list(gm.graph.nodes), kernels=_building["kernels"],
                               extern_calls=_building["extern"], op_fusion=_op_fusion,
                               graph_module=gm)
        _last, _building = graph, None
        observers = list(_observers)
    for callback in observers:
        callback(graph)
