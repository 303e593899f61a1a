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
_pending: OptimizedGraph | None = None  # just finished: to be kept with the code Inductor caches
_cache_hooks_installed = False


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
    global _building, _pending
    with _lock:
        if _building is None or _building["device"] != device:
            return
        gm = _building["gm"]
        graph = OptimizedGraph(device=device, nodes=list(gm.graph.nodes), kernels=_building["kernels"],
                               extern_calls=_building["extern"], op_fusion=_op_fusion,
                               graph_module=gm)
        _building, _pending = None, graph
    _publish(graph)


def _publish(graph: OptimizedGraph) -> None:
    global _last
    with _lock:
        _last = graph
        observers = list(_observers)
    for callback in observers:
        callback(graph)


# --- Inductor's caches ---------------------------------------------------------------------
#
# The graph is recorded while Inductor compiles it (the cache-key pass and the codegen
# above). A warm cache skips all of that: an FX graph cache hit, or an AOTAutograd cache
# hit that skips tracing as well, hands back the CompiledFxGraph saved by an earlier
# process, and nothing of the compile runs. So the recorded graph travels with the
# compiled code: when Inductor builds a CompiledFxGraph of a graph just recorded, the
# graph is attached to it (serialized: kernels, device kernel calls, the fusion setting
# and the post-grad GraphModule, through torch.fx's GraphPickler), and is thereby in every
# cache entry made of it (local or remote FX graph cache, bundled AOTAutograd cache).
# `CompiledFxGraph.post_compile` runs "whether or not we have a cache hit, directly after
# we get a CompiledFxGraph" (torch's words) on every path: there a graph that came out
# of a cache is set to be published when it first runs, which is when a cold compile
# would have published it (an AOTAutograd cache hit loads a training step's backward
# graph with its forward: published at load, the backward would pass for "the last
# graph" of a forward-only run). One compiled in this process was published by
# _finish_graph already; it is not published twice.

class _CachedGraph:
    """An OptimizedGraph as Inductor's cache entries keep it (picklable)."""

    def __init__(self, graph: OptimizedGraph) -> None:
        self.device = graph.device
        self.kernels = [(k.name, tuple(k.ops)) for k in graph.kernels]
        self.extern_calls = list(graph.extern_calls)
        self.op_fusion = graph.op_fusion
        self.graph_module = _dump_graph_module(graph.graph_module)
        self.published = True  # by _finish_graph, in this process

    def __getstate__(self) -> dict:
        # a copy read back (in this process or another one) is not published yet
        return dict(self.__dict__, published=False)

    def to_graph(self) -> OptimizedGraph:
        gm = _load_graph_module(self.graph_module)
        return OptimizedGraph(device=self.device, nodes=list(gm.graph.nodes) if gm is not None else [],
                              kernels=[Kernel(name, tuple(ops)) for name, ops in self.kernels],
                              extern_calls=list(self.extern_calls), op_fusion=self.op_fusion,
                              graph_module=gm)


def _dump_graph_module(gm) -> bytes | None:
    """The GraphModule with its nodes' metadata (fake tensors as 'val'); without
    metadata if some of it cannot be pickled; None if the graph itself cannot."""
    if gm is None:
        return None
    import copy

    from torch.fx._graph_pickler import GraphPickler, Options

    try:
        return GraphPickler.dumps(gm, Options(ops_filter=None))
    except Exception:
        pass
    try:
        bare = copy.deepcopy(gm)
        for node in bare.graph.nodes:
            node.meta.clear()
        return GraphPickler.dumps(bare, Options(ops_filter=None))
    except Exception:
        return None


def _load_graph_module(data: bytes | None):
    if data is None:
        return None
    from torch._subclasses import FakeTensorMode
    from torch.fx import GraphModule
    from torch.fx._graph_pickler import GraphPickler
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    gm = GraphPickler.loads(data, FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()))
    assert isinstance(gm, GraphModule)  # what _dump_graph_module pickled
    gm.recompile()
    return gm


def _attach_to_compiled(compiled, gm) -> None:
    """Inductor built `compiled` (a CompiledFxGraph) from `gm`: keep the graph recorded
    from `gm`, if any, with it."""
    global _pending
    with _lock:
        graph, _pending = _pending, None
    if graph is None or graph.graph_module is not gm:
        return
    from torch._inductor import config as inductor_config

    if not inductor_config.force_disable_caches:  # else no cache entry is written
        compiled._torch_fl_graph = _CachedGraph(graph)


def _compiled_ready(compiled) -> None:
    """`compiled` is ready to run (compiled now or read from a cache): if it came out
    of a cache, publish its graph on its first run (its callable is wrapped for that
    one call, then put back)."""
    cached = getattr(compiled, "_torch_fl_graph", None)
    if cached is None or cached.published:
        return
    run = getattr(compiled, "current_callable", None)
    if run is None:
        _publish_cached(cached)
        return

    def first_run(*args, **kwargs):
        if compiled.current_callable is first_run:
            compiled.current_callable = run
        _publish_cached(cached)
        return run(*args, **kwargs)

    compiled.current_callable = first_run


def _publish_cached(cached: _CachedGraph) -> None:
    if cached.published:
        return
    cached.published = True
    try:
        graph = cached.to_graph()
    except Exception as exc:  # the graph API must never break a compiled model
        import warnings

        warnings.warn(f"torch_fl.get_optimized_graph: the graph of a cached compilation on "
                      f"'{cached.device}' could not be read back ({type(exc).__name__}: {exc}); "
                      f"its kernels are still listed, its nodes are not", RuntimeWarning, stacklevel=2)
        graph = OptimizedGraph(device=cached.device, nodes=[],
                               kernels=[Kernel(name, tuple(ops)) for name, ops in cached.kernels],
                               extern_calls=list(cached.extern_calls), op_fusion=cached.op_fusion)
    _publish(graph)


def _install_cache_hooks() -> None:
    """Wrap CompiledFxGraph's constructor (attach) and post_compile (publish), once.
    Called by torch_fl.compile's registration, before Inductor's first cache lookup
    (the cache key itself needs the registration)."""
    global _cache_hooks_installed
    with _lock:
        if _cache_hooks_installed:
            return
        import functools

        from torch._inductor.output_code import CompiledFxGraph

        init, post_compile = CompiledFxGraph.__init__, CompiledFxGraph.post_compile

        @functools.wraps(init)
        def __init__(self, current_callable, graph, gm, *args, **kwargs):
            init(self, current_callable, graph, gm, *args, **kwargs)
            _attach_to_compiled(self, gm)

        @functools.wraps(post_compile)
        def post_compile_(self, *args, **kwargs):
            result = post_compile(self, *args, **kwargs)
            _compiled_ready(self)
            return result

        # Deliberate patches of Inductor's class (mypy forbids assigning to methods).
        CompiledFxGraph.__init__ = __init__  # type: ignore[method-assign]
        CompiledFxGraph.post_compile = post_compile_  # type: ignore[method-assign]
        _cache_hooks_installed = True
