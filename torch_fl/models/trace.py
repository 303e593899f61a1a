"""Which ATen ops does a workload make a PrivateUse1 backend run?

We run the workload on CPU under a TorchDispatchMode. The mode sits at the Python
dispatch key, after Autograd and autocast and after CompositeImplicitAutograd
decomposition, i.e. it sees what a backend key would be asked for. Three things
differ between the CPU run and a PrivateUse1 run, and are corrected here:

* Ops whose only kernel is CompositeExplicitAutograd (clone, zeros_like, the
  slow `_foreach_*` loops, `_to_copy`, ...) also serve PrivateUse1, so a backend
  need not implement them; we run their composite kernel with the mode still
  active to record what they call instead.
* Some composites pick a path by device type: `convolution` /
  `convolution_backward` end in `convolution_overrideable` /
  `convolution_backward_overrideable` on PrivateUse1 (CPU goes to mkldnn), and
  `copy_` ends in `_copy_from` (part of the generated glue). Those are mapped.
* Scaled-dot-product attention asks `_fused_sdp_choice`; CPU answers "flash for
  CPU", which no PrivateUse1 backend sees. We trace with the math backend, which is
  what the glue's default choice leads to (see `TraceResult.sdpa_overrideable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .._tables import glue

# Implemented by the generated glue of every backend, never by op specs. The list
# is kept once, in torch_fl._tables.glue (shared with flsdk's code generator).
GLUE_OPS = frozenset(glue.GLUE_OPS)

# CompositeExplicitAutograd ops that select a device-specific path: the op a
# PrivateUse1 backend is asked for instead.
PRIVATEUSE1_ROUTE = {
    "convolution": "convolution_overrideable",
    "convolution_backward": "convolution_backward_overrideable",
    "copy_": "_copy_from",
}

# ATen's dropout takes the fused `native_dropout` path on PrivateUse1 (as on CUDA;
# see is_fused_kernel_acceptable in ATen/native/Dropout.cpp) but the unfused
# bernoulli_ + mul path on CPU. Seeing the CPU path means the backend gets these.
PRIVATEUSE1_DROPOUT = ("native_dropout", "native_dropout_backward")
CPU_DROPOUT_MARKER = "bernoulli_.float"

# Reached on PrivateUse1 when the glue's `_fused_sdp_choice` answers "overrideable".
SDPA_OVERRIDEABLE = (
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_fused_attention_overrideable_backward",
)


def op_name(func: torch._ops.OpOverload) -> str:
    """`aten::add.Tensor` -> `add.Tensor`; the empty overload gives `relu`. Other
    namespaces stay (`acme::fused_gelu`), as the dispatcher and the fallback log name them."""
    namespace, name = func._schema.name.split("::", 1)
    if namespace != "aten":
        name = f"{namespace}::{name}"
    return name + ("." + func._schema.overload_name if func._schema.overload_name else "")


def _only_composite_explicit(func: torch._ops.OpOverload) -> bool:
    """True when PrivateUse1 would run the op's CompositeExplicitAutograd kernel.

    An op that also has a CPU kernel (native_layer_norm, ...) is worth a native
    kernel; CompositeExplicitAutogradNonFunctional kernels of structured ops just
    call the `.out` overload, so they do not count as a decomposition either.
    """
    name = func.name()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(name, "CompositeExplicitAutograd") and not has(name, "CPU")


def _is_view(func: torch._ops.OpOverload) -> bool:
    # View ops (detach, t, expand, ...) are composites over as_strided/view, which
    # the glue provides; some of them (detach) re-enter themselves when run
    # through their composite kernel under a Python mode, so they are not expanded.
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in func._schema.returns)


@dataclass
class TraceResult:
    # op name -> dtypes of the tensors among its arguments
    reached: dict[str, set[torch.dtype]] = field(default_factory=dict)
    # composites that PrivateUse1 runs through their CompositeExplicitAutograd kernel
    composite: set[str] = field(default_factory=set)
    # op name -> argument name -> dtypes of the tensors passed as it: a backend's kernel
    # may compute fewer dtypes than its device for some arguments only (check_ops)
    arg_dtypes: dict[str, dict[str, set[torch.dtype]]] = field(default_factory=dict)

    def add(self, name: str, dtypes: Iterable[torch.dtype],
            arg_dtypes: dict[str, set[torch.dtype]] | None = None) -> None:
        self.reached.setdefault(name, set()).update(dtypes)
        by_arg = self.arg_dtypes.setdefault(name, {})
        for arg, seen in (arg_dtypes or {}).items():
            by_arg.setdefault(arg, set()).update(seen)

    @property
    def backend_ops(self) -> list[str]:
        """Ops a PrivateUse1 backend must provide: not composite, not glue."""
        return sorted(n for n in self.reached if n not in self.composite and n not in GLUE_OPS)

    @property
    def glue_ops(self) -> list[str]:
        return sorted(n for n in self.reached if n in GLUE_OPS)

    @property
    def sdpa_overrideable(self) -> tuple[str, ...]:
        return SDPA_OVERRIDEABLE

    def merge(self, other: TraceResult) -> TraceResult:
        for n, d in other.reached.items():
            self.add(n, d, other.arg_dtypes.get(n))
        self.composite |= other.composite
        return self


def _dtypes_by_argument(func: torch._ops.OpOverload, args, kwargs) -> dict[str, set[torch.dtype]]:
    """{argument name: dtypes of the tensors in it} for one call, by the op's schema."""
    names = [a.name for a in func._schema.arguments]
    out: dict[str, set[torch.dtype]] = {}
    for name, value in list(zip(names, args)) + list(kwargs.items()):
        seen = {t.dtype for t in tree_leaves(value) if isinstance(t, torch.Tensor)}
        if seen:
            out[name] = seen
    return out


class OpRecorder(TorchDispatchMode):
    def __init__(self, result: TraceResult | None = None) -> None:
        super().__init__()
        self.result = result if result is not None else TraceResult()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        dtypes = {t.dtype for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        by_arg = _dtypes_by_argument(func, args, kwargs)
        base = name.split(".", 1)[0]
        if base in PRIVATEUSE1_ROUTE:
            self.result.composite.add(name)
            self.result.add(name, dtypes, by_arg)
            # (the routed ops name their arguments as these do, but _copy_from: glue)
            self.result.add(PRIVATEUSE1_ROUTE[base], dtypes, by_arg)
            return func(*args, **kwargs)
        if name == CPU_DROPOUT_MARKER:
            for extra in PRIVATEUSE1_DROPOUT:
                self.result.add(extra, dtypes)
        self.result.add(name, dtypes, by_arg)
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        if has(func.name(), "CompositeImplicitAutograd") and not has(func.name(), "CPU"):
            # A CompositeImplicitAutograd op called from inside a composite kernel
            # (softmax.int from _safe_softmax): it decomposes on any backend that
            # has no kernel of its own (silu_backward has CPU's, so it is kept).
            self.result.composite.add(name)
            # (C++ kernel only: Python-registered decompositions, e.g. of
            # native_batch_norm, are not what a C++ backend sees.)
            with self:
                return func._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd,
                                   *args, **kwargs)
        if _is_view(func):
            self.result.composite.add(name)
            return func(*args, **kwargs)
        if _only_composite_explicit(func):
            self.result.composite.add(name)
            # Re-enter the mode so the ops the composite calls are recorded too.
            with self:
                return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd,
                                   *args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def record_ops(result: TraceResult | None = None):
    """`with record_ops() as r: ...` then `r.backend_ops`."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mode = OpRecorder(result)
    with sdpa_kernel(SDPBackend.MATH), mode:
        yield mode.result


# --- the reference workloads -------------------------------------------------

def _optimizers(params: list[torch.nn.Parameter]) -> dict[str, Callable[[], torch.optim.Optimizer]]:
    # foreach=True is what a PrivateUse1 device gets by default (its name is in
    # torch.utils._foreach_utils._get_foreach_kernels_supported_devices()).
    return {
        "sgd_momentum": lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=False),
        "sgd_momentum_foreach": lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9,
                                                        foreach=True),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-3, foreach=False),
        "adamw_foreach": lambda: torch.optim.AdamW(params, lr=1e-3, foreach=True),
    }


def _workload(model: torch.nn.Module, batch, loss_fn,
              optimizers: dict[str, Callable[[], torch.optim.Optimizer]],
              autocast: bool) -> TraceResult:
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if autocast
           else contextlib.nullcontext())
    opts = {name: make() for name, make in optimizers.items()}
    with record_ops() as result:
        # Two rounds: the first step of AdamW / momentum SGD creates state and
        # takes another path than the following ones. The optimizers share the
        # gradients of one backward per round (their ops do not depend on it).
        for _ in range(2):
            for p in model.parameters():
                p.grad = None
            with ctx:
                loss = loss_fn(model, batch)
            loss.backward()
            for opt in opts.values():
                opt.step()
            loss.item()
    return result


def trace_reference_models(autocast: bool = True, small: bool = True) -> dict[str, TraceResult]:
    """Trace forward, backward and optimizer steps of the reference models.

    Keys: "<model>[/autocast_bf16]"; each run steps SGD with momentum and AdamW,
    with foreach=False and with foreach=True. `small` traces the same layer
    types with less repetition, which gives the same op set in a fraction of the
    time: a width-8 ResNet with one BasicBlock per stage (stages 2-4 keep their
    downsampling block) and a one-layer GPT.
    """
    from torch.nn import functional as F

    from . import GPT, GPTConfig, ResNet, resnet18

    torch.manual_seed(0)
    if small:
        resnet = ResNet((1, 1, 1, 1), num_classes=10, width=8)
    else:
        resnet = resnet18(num_classes=10)
    img = (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))
    layers = 1 if small else GPTConfig.n_layer
    gpt = GPT(GPTConfig(n_layer=layers))
    gpt_sdpa = GPT(GPTConfig(n_layer=layers, use_sdpa=True))
    tok = torch.randint(0, 256, (2, 16))
    tokens = (tok, tok.roll(-1, dims=1))

    def classify(m, b):
        return F.cross_entropy(m(b[0]), b[1])

    def lm(m, b):
        return m(b[0], b[1])[1]

    runs = {}
    # One intra-op thread: the tensors are tiny, and on a loaded machine OpenMP's
    # spinning threads make the run 100x slower. Op choice does not depend on it.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for mname, model, batch, fn in (("resnet18", resnet, img, classify),
                                        ("gpt", gpt, tokens, lm),
                                        ("gpt_sdpa", gpt_sdpa, tokens, lm)):
            model.train()
            for ac in ((False, True) if autocast else (False,)):
                key = mname + ("/autocast_bf16" if ac else "")
                runs[key] = _workload(model, batch, fn, _optimizers(list(model.parameters())), ac)
    finally:
        torch.set_num_threads(threads)
    return runs


def union(results: Iterable[TraceResult]) -> TraceResult:
    total = TraceResult()
    for r in results:
        total.merge(r)
    return total
