"""Conformance helpers: run an ATen op on CPU and on a device, compare the results.

The inputs of an op come from the samples of its op spec, written in the sample
DSL of docs/architecture.md ("T(2,3)+", "L(4;10)", "dtype:float16", ...). Its
grammar is kept once, in torch_fl._tables.samples (the parser `flsdk check` uses
too), and read here; a malformed token raises ValueError naming it.

Inputs are always made on CPU with a seeded generator, then copied to the device,
so CPU and device see identical values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._tables.dtypes import ALIASES as DTYPE_ALIASES
from .._tables.dtypes import DTYPES as DTYPE_TABLE
from .._tables.dtypes import tolerance_for
from .._tables.samples import TensorToken, classify
from . import rnn_reference

__all__ = [
    "CompareResult", "compare", "compare_reference", "compare_statistics", "compare_variant",
    "default_tolerance", "materialize", "resolve_op", "run_op", "to_device", "parse_dtype",
]

# Names, aliases and default tolerances come from the one dtype table (torch-free,
# shared with flsdk's spec loader); torch.<name> is the dtype itself.
_DTYPES = {name: getattr(torch, name) for name in DTYPE_TABLE}
_DTYPES.update({alias: _DTYPES[name] for alias, name in DTYPE_ALIASES.items()})

def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """"float16" -> torch.float16 (torch.dtype passes through)."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(_DTYPES)}") from None


def default_tolerance(dtype: str | torch.dtype) -> tuple[float, float]:
    """(atol, rtol) used when an op spec gives none for `dtype` (torch.testing.
    assert_close's; op specs widen them where an op accumulates or rounds
    differently); (0, 0) = exact, as for integer and bool results."""
    return tolerance_for(str(parse_dtype(dtype)))



def _case_tolerance(dtype: torch.dtype, atol: float | None, rtol: float | None):
    """The (atol, rtol) of one case: the spec's, else the case dtype's default.
    An integer or bool case held exact (its default, which generated tests pass
    explicitly) gets (None, None): integer results still compare exactly, and a
    floating result (sqrt of an int64 tensor is float32) is held to its own
    dtype's default (_float_tolerance), not bit for bit."""
    d_atol, d_rtol = default_tolerance(dtype)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    if not (dtype.is_floating_point or dtype.is_complex) and atol == 0 and rtol == 0:
        return None, None
    return atol, rtol


def _float_tolerance(dtype: torch.dtype, atol: float | None, rtol: float | None):
    return default_tolerance(dtype) if atol is None else (atol, rtol)

# --- materialize --------------------------------------------------------------

def _random(shape, dtype: torch.dtype, gen: torch.Generator, positive: bool,
            bounds: tuple[float, float] | None) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point or dtype.is_complex:
        if bounds is not None:
            lo, hi = bounds
        elif positive:
            lo, hi = 0.5, 2.0   # away from 0 so log/rsqrt/div stay well conditioned
        else:
            lo, hi = -2.0, 2.0
        # Draw in float64 and round once, so every dtype gets "the same" values.
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    # integers
    if bounds is not None:
        lo, hi = int(math.floor(bounds[0])), int(math.ceil(bounds[1]))
    elif positive:
        lo, hi = 1, 10
    else:
        lo, hi = (0 if dtype == torch.uint8 else -10), 10
    if hi <= lo:
        hi = lo + 1
    return torch.randint(lo, hi, shape, generator=gen).to(dtype)


def _tensor(t: TensorToken, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if t.kind == "L":
        assert t.high is not None  # parse_tensor gives every L token its bound
        out = torch.randint(0, t.high, t.shape, generator=gen, dtype=torch.int64)
    elif t.kind == "B":
        out = _random(t.shape, torch.bool, gen, False, None)
    else:
        out = _random(t.shape, dtype if t.kind == "T" else torch.float32, gen, t.positive, t.bounds)
    if t.transposed and out.dim() >= 2:
        out = out.transpose(-2, -1)
    return out


def _materialize_value(value: Any, dtype: torch.dtype, gen: torch.Generator) -> Any:
    if isinstance(value, str):
        kind, parsed = classify(value)
        if kind == "dtype":
            assert isinstance(parsed, str)
            return parse_dtype(parsed)
        if kind == "word":
            return value
        assert isinstance(parsed, TensorToken)
        return _tensor(parsed, dtype, gen)
    if isinstance(value, (list, tuple)):
        return [_materialize_value(v, dtype, gen) for v in value]
    if isinstance(value, dict):
        return {k: _materialize_value(v, dtype, gen) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise ValueError(f"bad sample value {value!r} (type {type(value).__name__})")


def materialize(sample: list, dtype: str | torch.dtype, device: str | torch.device = "cpu",
                seed: int = 0) -> tuple[list, dict]:
    """Turn a DSL sample into (args, kwargs) of real values on `device`.

    Values are drawn on CPU from a generator seeded with `seed` (same sample,
    dtype and seed give the same values on every device) and then copied.
    """
    if not isinstance(sample, (list, tuple)):
        raise ValueError(f"a sample is a list of args (optionally ending with a kwargs dict), "
                         f"got {sample!r}")
    dtype = parse_dtype(dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    items = list(sample)
    kwargs_src = items.pop() if items and isinstance(items[-1], dict) else {}
    args = [_materialize_value(v, dtype, gen) for v in items]
    kwargs = {k: _materialize_value(v, dtype, gen) for k, v in kwargs_src.items()}
    if torch.device(device).type != "cpu":
        args, kwargs = to_device(args, device), to_device(kwargs, device)
    return args, kwargs


def to_device(value: Any, device: str | torch.device) -> Any:
    """Copy every tensor inside `value` (lists, tuples, dicts) to `device`.

    Always a copy, also to the same device (in-place ops must not share inputs
    between the two runs), and strides are kept (a transposed input stays
    non-contiguous).
    """
    if isinstance(value, torch.Tensor):
        if torch._debug_has_internal_overlap(value) != 0:
            # expand()-ed or otherwise self-overlapping: cannot be written with
            # its own strides, so the copy is contiguous.
            out = torch.empty(value.size(), dtype=value.dtype, device=device)
        else:
            out = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype,
                                      device=device)
        return out.copy_(value) if value.numel() else out
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


# --- running and comparing ----------------------------------------------------

def resolve_op(op_name: str) -> torch._ops.OpOverload:
    """"add.Tensor" -> torch.ops.aten.add.Tensor; "relu" -> torch.ops.aten.relu.default."""
    base, _, overload = op_name.partition(".")
    namespace = "aten"
    if "::" in base:
        namespace, base = base.split("::", 1)
    try:
        packet = getattr(getattr(torch.ops, namespace), base)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as e:
        raise ValueError(f"no op {op_name!r} in torch {torch.__version__}: {e}") from None


def _written_args(op: torch._ops.OpOverload, args: list, kwargs: dict,
                  verb: str = "written") -> list[tuple[str, Any]]:
    """(label, value) of each argument the op writes to, among those passed:
    `<verb> arg <i>` for positional ones, `<verb> <name>=` for keyword-only ones."""
    written = []
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        if not a.kwarg_only and i < len(args):
            written.append((f"{verb} arg {i}", args[i]))
        elif a.kwarg_only and a.name in kwargs:
            written.append((f"{verb} {a.name}=", kwargs[a.name]))
    return written


@dataclass
class _Inputs:
    """One sample's inputs for a CPU run and a device run: independent copies of the
    same values (an in-place op must not write the other run's inputs)."""

    cpu_args: list
    cpu_kwargs: dict
    dev_args: list
    dev_kwargs: dict

    @classmethod
    def of(cls, sample: list, dtype: torch.dtype, device: str | torch.device, seed: int) -> _Inputs:
        args, kwargs = materialize(sample, dtype, "cpu", seed)
        return cls(to_device(args, "cpu"), to_device(kwargs, "cpu"),
                   to_device(args, device), to_device(kwargs, device))

    def check_written(self, op: torch._ops.OpOverload, verb: str, atol: float, rtol: float,
                      errs: _Errors) -> None:
        """The arguments `op` wrote on the device must hold what it wrote on CPU."""
        expected = _written_args(op, self.cpu_args, self.cpu_kwargs, verb)
        actual = _written_args(op, self.dev_args, self.dev_kwargs, verb)
        for (where, e), (_, a) in zip(expected, actual):
            _check(e, _to_cpu(a), where, atol, rtol, errs)


def _insert_bias_sizes(args: list, kwargs: dict) -> tuple[list, dict]:
    # convolution_backward takes bias_sizes after weight; [C_out] gives grad_bias.
    return list(args[:3]) + [[args[2].size(0)]] + list(args[3:]), kwargs


def _same(args: list, kwargs: dict) -> tuple[list, dict]:
    return list(args), kwargs


# Ops that CPU never runs, because on PrivateUse1 a composite routes to a
# device-only entry point: the CPU op computing the same thing (an op name, or a
# Python composition of CPU ops for ops no CPU kernel computes), and how to adapt
# the arguments. compare() uses it for the CPU side (and for both sides on CPU).
CPU_REFERENCE: dict[str, tuple[str | Callable[..., Any], Callable[[list, dict], tuple[list, dict]]]] = {
    "convolution_overrideable": ("convolution", _same),
    "convolution_backward_overrideable": ("convolution_backward", _insert_bias_sizes),
    "_thnn_fused_lstm_cell": (rnn_reference.fused_lstm_cell, _same),
    "_thnn_fused_lstm_cell_backward_impl": (rnn_reference.fused_lstm_cell_backward_impl, _same),
    "_thnn_fused_gru_cell": (rnn_reference.fused_gru_cell, _same),
    "_thnn_fused_gru_cell_backward": (rnn_reference.fused_gru_cell_backward, _same),
}


def run_op(op_name: str, args: list, kwargs: dict, device: str | torch.device | None = None):
    """Call the op; a factory op (schema has `device`) gets `device` unless given.

    On CPU an op of CPU_REFERENCE runs as its CPU counterpart.
    """
    if (device is None or torch.device(device).type == "cpu") and op_name in CPU_REFERENCE:
        ref, adapt = CPU_REFERENCE[op_name]
        args, kwargs = adapt(args, kwargs)
        if callable(ref):
            return ref(*args, **kwargs)
        op_name = ref
    op = resolve_op(op_name)
    if device is not None and "device" not in kwargs and any(
            a.name == "device" and a.kwarg_only for a in op._schema.arguments):
        kwargs = dict(kwargs, device=torch.device(device))
    return op(*args, **kwargs)


def run_cpu_reference(op_name: str, args: list, kwargs: dict, dtype: torch.dtype,
                      cpu_reference_dtype: str | torch.dtype | dict | None = None):
    """The op on CPU, the conformance reference. The op spec's `cpu_reference_dtype`
    makes it run on inputs of `dtype` cast to a wider dtype, its tensor results cast
    back to `dtype`: a dtype name does so when CPU's kernel refuses `dtype`
    (NotImplementedError: histc on integers, which CUDA takes); a mapping
    {dtype name: wider dtype name} does so always for the dtypes it names (CPU
    computing bfloat16 in bfloat16 arithmetic where the device, as CUDA, uses float32)."""
    if isinstance(cpu_reference_dtype, dict):
        name = str(dtype).removeprefix("torch.")
        if name not in cpu_reference_dtype:
            return run_op(op_name, args, kwargs, "cpu")
        wide = parse_dtype(cpu_reference_dtype[name])
    else:
        try:
            return run_op(op_name, args, kwargs, "cpu")
        except NotImplementedError:
            if cpu_reference_dtype is None:
                raise
        wide = parse_dtype(cpu_reference_dtype)

    def widen(x):
        return x.to(wide) if isinstance(x, torch.Tensor) and x.dtype == dtype else x

    def narrow(x):
        if isinstance(x, (tuple, list)):
            return type(x)(narrow(v) for v in x)
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == wide else x
    return narrow(run_op(op_name, [widen(a) for a in args], {k: widen(v) for k, v in kwargs.items()}, "cpu"))


@dataclass
class CompareResult:
    op: str
    dtype: torch.dtype
    max_abs_err: float
    max_rel_err: float
    compared: int       # number of tensors / scalars compared


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


class _Errors:
    def __init__(self) -> None:
        self.abs = 0.0
        self.rel = 0.0
        self.count = 0


def _check(expected: Any, actual: Any, where: str, atol: float | None, rtol: float | None,
           errs: _Errors) -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{where}: expected a tensor, got {type(actual).__name__}")
        if expected.dtype != actual.dtype:
            raise AssertionError(f"{where}: dtype {actual.dtype} != expected {expected.dtype}")
        if expected.shape != actual.shape:
            raise AssertionError(f"{where}: shape {tuple(actual.shape)} != expected "
                                 f"{tuple(expected.shape)}")
        errs.count += 1
        if expected.numel() == 0:
            return
        if expected.dtype == torch.bool or not (expected.is_floating_point() or expected.is_complex()):
            mismatch = expected != actual
            if mismatch.any():
                idx = mismatch.nonzero()[0].tolist()
                raise AssertionError(
                    f"{where}: {int(mismatch.sum())} of {expected.numel()} elements differ "
                    f"(first at {idx}: {actual[tuple(idx)].item()} != {expected[tuple(idx)].item()})")
            return
        e = expected.to(torch.complex128 if expected.is_complex() else torch.float64)
        a = actual.to(e.dtype)
        nan_e, nan_a = e.isnan(), a.isnan()
        if not torch.equal(nan_e, nan_a):
            raise AssertionError(f"{where}: NaN at different positions")
        finite = e.isfinite() & a.isfinite()
        inf_mismatch = ~finite & ~nan_e & (e != a)
        if inf_mismatch.any():
            raise AssertionError(f"{where}: infinities differ")
        diff = (e - a).abs()[finite]
        atol, rtol = _float_tolerance(expected.dtype, atol, rtol)
        if diff.numel():
            ref = e.abs()[finite]
            rel = diff / ref.clamp_min(torch.finfo(torch.float64).tiny)
            errs.abs = max(errs.abs, float(diff.max()))
            errs.rel = max(errs.rel, float(torch.where(ref > 0, rel, diff).max()))
            bad = diff > atol + rtol * ref
            if bad.any():
                i = int(bad.nonzero()[0])
                raise AssertionError(
                    f"{where}: {int(bad.sum())} of {diff.numel()} elements beyond "
                    f"atol={atol} rtol={rtol}; max abs err {float(diff.max()):.3g}, "
                    f"first: {float(a[finite][i])} vs expected {float(e[finite][i])}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)}, got {actual!r}")
        for i, (x, y) in enumerate(zip(expected, actual)):
            _check(x, y, f"{where}[{i}]", atol, rtol, errs)
        return
    if isinstance(expected, bool) or expected is None or isinstance(expected, (int, str)):
        if expected != actual or type(expected) is not type(actual):
            raise AssertionError(f"{where}: {actual!r} != expected {expected!r}")
        errs.count += 1
        return
    if isinstance(expected, float):
        if not isinstance(actual, (float, int)):
            raise AssertionError(f"{where}: expected a float, got {actual!r}")
        errs.count += 1
        if math.isnan(expected) and math.isnan(actual):
            return
        gap = abs(expected - actual)
        atol, rtol = _float_tolerance(torch.float64, atol, rtol)
        errs.abs = max(errs.abs, gap)
        errs.rel = max(errs.rel, gap / abs(expected) if expected else gap)
        if not gap <= atol + rtol * abs(expected):
            raise AssertionError(f"{where}: {actual!r} != expected {expected!r}")
        return
    if expected != actual:
        raise AssertionError(f"{where}: {actual!r} != expected {expected!r}")


# Ops returning (values, indices) where equal values make the index a free
# choice; PyTorch documents that devices may pick different ones. Device
# indices are accepted when they point at the right values.
# base name -> (dim position, default dim, keepdim position (None: dim kept), default keepdim)
_TIE_INDEX_OPS = {
    "topk": (2, -1, None, True),
    "sort": (1, -1, None, True),
    "kthvalue": (2, -1, 3, False),
    "median": (1, None, 2, False),
    "nanmedian": (1, None, 2, False),
    "mode": (1, -1, 2, False),
    "max": (1, None, 2, False),
    "min": (1, None, 2, False),
    "cummax": (1, None, None, True),
    "cummin": (1, None, None, True),
}


def _accept_equivalent_indices(op_name: str, args: list, kwargs: dict, expected: Any,
                               actual: Any) -> Any:
    """`expected` with the device's indices swapped in when they are an equally
    valid answer (they select exactly the values both devices returned)."""
    rule = _TIE_INDEX_OPS.get(op_name.split(".")[0])
    if (rule is None or not isinstance(expected, tuple) or len(expected) != 2
            or not isinstance(actual, tuple) or not args or not isinstance(args[0], torch.Tensor)):
        return expected
    dim_pos, dim_default, keep_pos, keep_default = rule
    dim = kwargs.get("dim", args[dim_pos] if len(args) > dim_pos else dim_default)
    inp, (values, indices) = args[0], actual
    if dim is None or inp.dim() == 0 or not isinstance(dim, int) or indices.dtype != torch.long:
        return expected
    keep = True if keep_pos is None else kwargs.get(
        "keepdim", args[keep_pos] if len(args) > keep_pos else keep_default)
    try:
        picked = torch.gather(inp, dim, indices if keep else indices.unsqueeze(dim))
    except RuntimeError:  # malformed indices: let the plain comparison report them
        return expected
    if not keep:
        picked = picked.squeeze(dim)
    same_nans = torch.equal(picked.isnan(), values.isnan())
    if picked.shape == values.shape and same_nans and torch.equal(picked.nan_to_num(), values.nan_to_num()):
        return (expected[0], indices)
    return expected


def compare(op_name: str, sample: list, dtype: str | torch.dtype,
            device: str | torch.device, atol: float | None = None,
            rtol: float | None = None, seed: int = 0,
            cpu_reference_dtype: str | None = None) -> CompareResult:
    """Run the op on CPU and on `device` with identical inputs; assert equal results.

    Compares the returned value(s) and, for in-place / out ops, the arguments the
    op writes to. Raises AssertionError naming the op, dtype and what differs.
    With device="cpu" this checks that a sample is valid and deterministic.
    `cpu_reference_dtype`: see run_cpu_reference.
    """
    dtype = parse_dtype(dtype)
    atol, rtol = _case_tolerance(dtype, atol, rtol)
    op = resolve_op(op_name)
    inputs = _Inputs.of(sample, dtype, device, seed)

    label = f"{op_name} [{dtype}] sample {sample!r}"
    expected = run_cpu_reference(op_name, inputs.cpu_args, inputs.cpu_kwargs, dtype, cpu_reference_dtype)
    actual = run_op(op_name, inputs.dev_args, inputs.dev_kwargs, device)

    errs = _Errors()
    actual_cpu = _to_cpu(actual)
    expected = _accept_equivalent_indices(op_name, inputs.cpu_args, inputs.cpu_kwargs, expected, actual_cpu)
    try:
        _check(expected, actual_cpu, "result", atol, rtol, errs)
        inputs.check_written(op, "mutated", atol, rtol, errs)
    except AssertionError as e:
        raise AssertionError(f"{label} on {device}: {e}") from None
    return CompareResult(op_name, dtype, errs.abs, errs.rel, errs.count)


def _written_kwargs(op: torch._ops.OpOverload) -> list[str]:
    return [a.name for a in op._schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def compare_variant(kind: str, variant_name: str, op_name: str, sample: list,
                    dtype: str | torch.dtype, device: str | torch.device,
                    atol: float | None = None, rtol: float | None = None,
                    seed: int = 0, cpu_reference_dtype: str | None = None) -> CompareResult | None:
    """The in-place (`add_.Tensor`) or out (`add.out`) variant of a functional op
    on the functional op's samples, CPU vs `device`: the result and every
    argument the variant writes must match. An out variant is held to CPU's
    functional result, its out= starting empty (so the wrapper's resize is tested
    too); an in-place variant to CPU's in-place op. When CPU refuses an in-place
    sample (a result that would not fit `self`), the device must refuse it as
    well; returns None then."""
    dtype = parse_dtype(dtype)
    atol, rtol = _case_tolerance(dtype, atol, rtol)
    variant = resolve_op(variant_name)
    inputs = _Inputs.of(sample, dtype, device, seed)
    label = f"{variant_name} ({kind} variant of {op_name}) [{dtype}] sample {sample!r} on {device}"
    errs = _Errors()
    if kind == "out":
        # The out variant's contract: out == op(...). CPU's functional op is the
        # reference (some CPU out kernels are themselves off: binary_cross_entropy.out
        # into an empty out= gives NaN). The device's out= starts empty, so the
        # wrapper's resize is exercised.
        written = _written_kwargs(variant)
        if len(written) != 1:
            raise ValueError(f"{variant_name}: expected one out= argument, schema has {written}")
        expected = run_cpu_reference(op_name, inputs.cpu_args, inputs.cpu_kwargs, dtype, cpu_reference_dtype)
        inputs.dev_kwargs[written[0]] = torch.empty(0, dtype=expected.dtype, device=device)
        actual = variant(*inputs.dev_args, **inputs.dev_kwargs)
        try:
            _check(expected, _to_cpu(inputs.dev_kwargs[written[0]]), f"written {written[0]}=", atol, rtol, errs)
            _check(expected, _to_cpu(actual), "result", atol, rtol, errs)
        except AssertionError as e:
            raise AssertionError(f"{label}: {e}") from None
        return CompareResult(variant_name, dtype, errs.abs, errs.rel, errs.count)
    try:
        expected = variant(*inputs.cpu_args, **inputs.cpu_kwargs)
    except RuntimeError as cpu_error:
        try:
            variant(*inputs.dev_args, **inputs.dev_kwargs)
        except Exception:  # the device refuses too: that is the contract
            return None
        raise AssertionError(f"{label}: CPU refuses this sample ({str(cpu_error).splitlines()[0]}) "
                             f"but {device} accepted it") from None
    actual = variant(*inputs.dev_args, **inputs.dev_kwargs)
    try:
        _check(expected, _to_cpu(actual), "result", atol, rtol, errs)
        inputs.check_written(variant, "written", atol, rtol, errs)
    except AssertionError as e:
        raise AssertionError(f"{label}: {e}") from None
    return CompareResult(variant_name, dtype, errs.abs, errs.rel, errs.count)


def compare_reference(op_name: str, reference, sample: list, dtype: str | torch.dtype,
                      device: str | torch.device, atol: float | None = None,
                      rtol: float | None = None, seed: int = 0) -> CompareResult:
    """A custom op (`acme::fused_bias_gelu`) on `device` against `reference`, the
    Python callable of its spec's `reference:` run on CPU with the same inputs."""
    dtype = parse_dtype(dtype)
    atol, rtol = _case_tolerance(dtype, atol, rtol)
    op = resolve_op(op_name)
    inputs = _Inputs.of(sample, dtype, device, seed)
    expected = reference(*inputs.cpu_args, **inputs.cpu_kwargs)
    actual = op(*inputs.dev_args, **inputs.dev_kwargs)
    errs = _Errors()
    try:
        _check(expected, _to_cpu(actual), "result", atol, rtol, errs)
    except AssertionError as e:
        raise AssertionError(f"{op_name} [{dtype}] sample {sample!r} on {device} vs its reference: {e}") from None
    return CompareResult(op_name, dtype, errs.abs, errs.rel, errs.count)


# --- random ops -------------------------------------------------------------------

def _tensors_of(value: Any, where: str = "result") -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(where, value)]
    if isinstance(value, (list, tuple)):
        out = []
        for i, v in enumerate(value):
            out += _tensors_of(v, f"{where}[{i}]")
        return out
    return []


def _seeded(device: str | torch.device, seed: int | None):
    """Both global generators (CPU's and the device's) seeded with `seed` for the
    duration, their states restored afterwards (None: left alone)."""
    import contextlib

    if seed is None:
        return contextlib.nullcontext()
    dev = torch.device(device)
    devices = [] if dev.type == "cpu" else [
        dev.index if dev.index is not None else torch.get_device_module(dev.type).current_device()]

    @contextlib.contextmanager
    def seeded():
        with torch.random.fork_rng(devices=devices, device_type=dev.type):
            torch.manual_seed(seed)  # CPU and every device's default generator
            yield
    return seeded()


def _draw(op_name: str, args: list, kwargs: dict, device: str | torch.device,
          out: tuple[str, torch.dtype] | None = None) -> list[tuple[str, torch.Tensor]]:
    """One run of a random op on fresh copies of the inputs on `device`: the tensors
    it returns and the arguments it writes, on CPU. `out`: (out= argument, dtype) of
    an out variant, passed empty (so the wrapper's resize runs too)."""
    op = resolve_op(op_name)
    a, kw = to_device(args, device), to_device(kwargs, device)
    if out is not None:
        kw[out[0]] = torch.empty(0, dtype=out[1], device=device)
    tensors = _tensors_of(run_op(op_name, a, kw, device))
    tensors += [t for where, value in _written_args(op, a, kw) for t in _tensors_of(value, where)]
    dev_type = torch.device(device).type
    for where, t in tensors:
        if t.device.type != dev_type:
            raise AssertionError(f"{op_name}: {where} is on {t.device}, not on {device}: the op did "
                                 f"not sample on the device")
    return [(where, t.cpu()) for where, t in tensors]


def _ks_distance(e: torch.Tensor, a: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest distance between the
    empirical distribution functions of `e` and `a` (1-d, float64, no NaN)."""
    e, a = e.sort().values, a.sort().values
    grid = torch.cat([e, a]).unique()
    fe = torch.searchsorted(e, grid, right=True).double() / len(e)
    fa = torch.searchsorted(a, grid, right=True).double() / len(a)
    return float((fe - fa).abs().max())


def _compare_draws(label: str, where: str, e: torch.Tensor, a: torch.Tensor, atol: float,
                   rtol: float, sigmas: float) -> float:
    """`e` (CPU) and `a` (device): R draws of one output each, shape (R, *shape).
    Returns the largest difference of per-position means."""
    draws = e.shape[0]
    e = e.double().reshape(draws, -1)
    a = a.double().reshape(draws, -1)
    e_finite, a_finite = e.isfinite(), a.isfinite()
    if not a_finite.all() and e_finite.all():
        raise AssertionError(f"{label}: {where}: non-finite values where CPU has none")
    if e_finite.all() and a_finite.all():
        mask = None
    else:  # compare where both drew finite values
        mask = e_finite.all(0) & a_finite.all(0)
        e, a = e[:, mask], a[:, mask]
    if e.numel() == 0:
        return 0.0
    # 1. every position (element of the output): its mean over the draws.
    #    Deterministic positions (no spread in either run) must match CPU's value.
    mean_e, mean_a = e.mean(0), a.mean(0)
    var_e, var_a = (e.var(0), a.var(0)) if draws > 1 else (torch.zeros_like(mean_e),) * 2
    allowed = sigmas * ((var_e + var_a) / draws).sqrt() + atol + rtol * mean_e.abs()
    diff = (mean_a - mean_e).abs()
    worst = int(diff.sub(allowed).argmax())
    if diff[worst] > allowed[worst]:
        raise AssertionError(
            f"{label}: {where}: element {worst}: mean {float(mean_a[worst]):.4g} vs CPU "
            f"{float(mean_e[worst]):.4g} over {draws} draws (allowed difference {float(allowed[worst]):.3g})")
    # 2. all draws pooled: the mean, more sensitive than one position's
    n = e.numel()
    pooled_e, pooled_a = float(e.mean()), float(a.mean())
    allowed_pooled = sigmas * math.sqrt((float(e.var()) + float(a.var())) / n) + atol + rtol * abs(pooled_e)
    if abs(pooled_a - pooled_e) > allowed_pooled:
        raise AssertionError(f"{label}: {where}: mean {pooled_a:.4g} vs CPU {pooled_e:.4g} over "
                             f"{n} values (allowed difference {allowed_pooled:.3g})")
    if draws > 1:
        # 3. the spread of each position over the draws (a generator that repeats
        #    itself, or a wrong scale): within-position variance, with its standard
        #    error estimated from the squared deviations themselves
        dev_e, dev_a = (e - mean_e).square(), (a - mean_a).square()
        k = draws / (draws - 1)
        w_e, w_a = float(dev_e.mean()) * k, float(dev_a.mean()) * k
        se = k * math.sqrt((float(dev_e.var()) + float(dev_a.var())) / n)
        slack = 2 * (atol + rtol * math.sqrt(float(e.square().mean()))) * math.sqrt(w_e)
        if abs(w_a - w_e) > sigmas * se + slack:
            raise AssertionError(
                f"{label}: {where}: spread over draws (variance of an element) {w_a:.4g} vs CPU "
                f"{w_e:.4g} (allowed difference {sigmas * se + slack:.3g})")
    # 4. the shape of the distribution: two-sample Kolmogorov-Smirnov test on all
    #    draws, at the significance of `sigmas` standard deviations
    alpha = math.erfc(sigmas / math.sqrt(2))
    critical = math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt(2 / n)
    distance = _ks_distance(e.reshape(-1), a.reshape(-1))
    if distance > critical:
        raise AssertionError(
            f"{label}: {where}: distribution differs from CPU's (Kolmogorov-Smirnov distance "
            f"{distance:.4f} over {n} values per side, allowed {critical:.4f})")
    return float(diff.max())


def compare_statistics(op_name: str, sample: list, dtype: str | torch.dtype,
                       device: str | torch.device, sigmas: float = 6.0,
                       seed: int = 0, draws: int | None = None, rng_seed: int | None = 0,
                       variant: tuple[str, str] | None = None) -> CompareResult:
    """Check a random op (skip_conformance "random: checked statistically") on `device`.

    Random streams differ between devices, so results are compared as samples of a
    distribution. The op runs `draws` times on CPU and on `device` (alternately,
    CPU first; each run on fresh copies of the sample's inputs, made with `seed`),
    from global generators seeded with `rng_seed` (None: unseeded) and restored
    afterwards. Each output (the result and the arguments the op writes) must have
    CPU's dtype and shape, be finite where CPU's is, and its draws must agree with
    CPU's: each element's mean over the draws, the mean of all draws, each element's
    spread over the draws, and the distribution of all draws (two-sample
    Kolmogorov-Smirnov), each within `sigmas` standard errors. A deterministic
    output (no spread) must match CPU's up to the dtype's tolerance.

    `variant` ("inplace" or "out", variant op name): the device runs that variant
    of `op_name`; CPU runs the in-place op itself, or the functional op for "out".
    Default `draws`: enough for about 32k values of each output (64 to 1024): a mean
    off by a tenth of a standard deviation, or a scale off by 10%, fails.
    """
    dtype = parse_dtype(dtype)
    atol, rtol = default_tolerance(dtype)
    args, kwargs = materialize(sample, dtype, "cpu", seed)
    name = variant[1] if variant else op_name
    label = f"{name} [{dtype}] sample {sample!r} on {device}"
    if variant is not None and variant[0] not in ("inplace", "out"):
        raise ValueError(f"variant kind {variant[0]!r}: expected 'inplace' or 'out'")
    cpu_op = variant[1] if variant and variant[0] == "inplace" else op_name
    expected_runs, actual_runs = [], []
    with _seeded(device, rng_seed):
        first = _draw(cpu_op, args, kwargs, "cpu")
        out = None
        if variant and variant[0] == "out":
            written = _written_kwargs(resolve_op(variant[1]))
            if len(written) != 1:
                raise ValueError(f"{variant[1]}: expected one out= argument, schema has {written}")
            out = (written[0], first[0][1].dtype)
        size = max([1] + [t.numel() for _, t in first])
        count = draws or min(1024, max(64, math.ceil(32768 / size)))
        for i in range(count):
            expected_runs.append(first if i == 0 else _draw(cpu_op, args, kwargs, "cpu"))
            actual_runs.append(_draw(name, args, kwargs, device, out))
    expected, actual = expected_runs[0], actual_runs[0]
    if out is not None:  # the device's out= and its result are both CPU's result
        expected = [expected[0], (f"written {out[0]}=", expected[0][1])]
        expected_runs = [[run[0], (f"written {out[0]}=", run[0][1])] for run in expected_runs]
    if len(expected) != len(actual):
        raise AssertionError(f"{label}: {len(actual)} tensors, expected {len(expected)}")
    worst = 0.0
    for j, ((where, e), (_, a)) in enumerate(zip(expected, actual)):
        if e.dtype != a.dtype or e.shape != a.shape:
            raise AssertionError(f"{label}: {where}: {a.dtype}{tuple(a.shape)} != expected "
                                 f"{e.dtype}{tuple(e.shape)}")
        if e.numel() == 0:
            continue
        for run in actual_runs:
            if run[j][1].dtype != e.dtype or run[j][1].shape != e.shape:
                raise AssertionError(f"{label}: {where}: {run[j][1].dtype}{tuple(run[j][1].shape)} "
                                     f"in one draw, expected {e.dtype}{tuple(e.shape)}")
        e_all = torch.stack([run[j][1] for run in expected_runs])
        a_all = torch.stack([run[j][1] for run in actual_runs])
        worst = max(worst, _compare_draws(label, where, e_all, a_all, atol, rtol, sigmas))
    return CompareResult(name, dtype, worst, 0.0, len(expected))
