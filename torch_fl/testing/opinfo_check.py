"""One OpInfo on one device: run its samples there and on the CPU, classify.

This is the in-process half of `torch_fl.testing.opinfo` (which runs it in
worker processes so that a crashing kernel only ends its worker). For one
OpInfo, one dtype and one phase it returns a plain dict:

    {"status": "pass" | "mismatch" | "error" | "skip",
     "detail": "first line of what went wrong, or why it was skipped",
     "native": True | False | None,     # None: the device never ran a sample
     "fallback_ops": ["aten ops that ran on the CPU fallback"],
     "failing_sample_fallback_ops": [...] | None,   # of the first failing sample
     "samples": {"total", "compared", "passed", "passed_vs_float64", "passed_tie_order", "mismatch",
                 "error", "cpu_error", "random", "no_grad", "cpu_only"}}

Samples come from `op.sample_inputs(device, dtype)`, seeded, as in PyTorch's
own TestCommon.test_compare_cpu; each is copied to the CPU (same values), so
tensors a sample function keeps on the CPU on purpose (tensor_split's indices)
stay there and factory ops get `device=` right. A sample that never reaches the
device (arange(2)) is not a test (cpu_only).

Phases:
* "forward": the op's function variant on both, the device result compared
  with the CPU result.
* "grad": samples with requires_grad=True; the gradient of a weighted sum of
  the op's differentiable outputs (fixed random weights, the same on both
  sides) with respect to every input that requires grad, compared with CPU.

How a sample is judged:
* the CPU run raises            -> not a test (cpu_error); if no sample is left,
                                   the op is skipped with the reason
* the device run raises         -> error
* the results differ            -> mismatch, unless
    - the op is random: it draws from (or seeds) the CPU's RNG, or its CPU
      result changes with the seed; its values cannot be compared, so only
      shapes and dtypes are, or
    - the device is as accurate as the CPU: both are compared with the op run
      on the CPU in float64, and the device's error is at most twice the CPU's
      largest error plus the tolerance (passed_vs_float64: summing in another
      order is not wrong)
    - the op leaves the order of equal values unspecified (sort, argsort,
      msort, topk, mode, kthvalue, median) and the results differ only in that order
      (passed_tie_order; see opinfo_ties.py)
* equal within tolerance        -> pass
Tolerances: the OpInfo's own toleranceOverride for the CPU-vs-device test
(TestCommon.test_compare_cpu) when it has one, else torch.testing.assert_close's
defaults for the dtype. An op whose OpInfo skips that test with a reason (e.g.
`empty`: "output is non-deterministic") is skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import opinfo_ties

__all__ = ["check_opinfo", "opinfo_id", "compare_tolerance", "opinfo_skip_reason"]

# The PyTorch test that compares an accelerator with the CPU; OpInfos attach their
# skips and tolerance overrides for exactly this comparison to it.
COMPARE_TEST = ("TestCommon", "test_compare_cpu")


def opinfo_id(op) -> str:
    """'add', 'nn.functional.conv2d', 'max.reduction_with_dim' (name.variant)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _active_decorators(op, device_type: str, dtype: torch.dtype):
    cls_name, test_name = COMPARE_TEST
    from torch.testing._internal.opinfo.core import DecorateInfo

    for info in getattr(op, "decorators", ()) or ():
        if not isinstance(info, DecorateInfo):  # plain decorators apply to every test
            continue
        # device_type given means "only on that device" (cuda, cpu, ...): not ours
        if info.device_type is not None and info.device_type != device_type:
            continue
        try:
            if not info.is_active(cls_name, test_name, device_type, dtype, {}):
                continue
        except Exception:  # an active_if that needs test parameters we do not have
            continue
        yield from info.decorators


def opinfo_skip_reason(op, device_type: str, dtype: torch.dtype) -> str | None:
    """The OpInfo's own reason to skip the CPU-vs-device comparison, if any."""
    for deco in _active_decorators(op, device_type, dtype):
        # unittest.skip(reason) is a closure over `reason`; unittest.skipIf too
        closure = getattr(deco, "__closure__", None) or ()
        qualname = getattr(deco, "__qualname__", "")
        if qualname.startswith("skip.") or "skip" in qualname.split(".")[0]:
            for cell in closure:
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                # The bare "Skipped!" placeholders in op_db mark CI flakiness on
                # CUDA (conv3d, embedding...), not undefined results: run those.
                if isinstance(value, str) and value.strip() != "Skipped!":
                    return f"OpInfo skips {COMPARE_TEST[1]}: {value}"
    return None


def compare_tolerance(op, device_type: str, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """(atol, rtol) of the OpInfo's toleranceOverride for this comparison and
    dtype, else (None, None) = assert_close's defaults for the dtype."""
    for deco in _active_decorators(op, device_type, dtype):
        overrides = getattr(deco, "d", None)
        if isinstance(overrides, dict) and dtype in overrides:
            tol = overrides[dtype]
            return float(tol.atol), float(tol.rtol)
    return None, None


# --- moving samples ---------------------------------------------------------------

def _map_sample(sample, fn: Callable[[Any, Any], Any]):
    """A copy of `sample` with fn(leaf, its kwarg name or None) applied to every leaf
    of input, args, kwargs."""
    from torch.testing._internal.opinfo.core import SampleInput

    def tree(x, key=None):
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(tree(v) for v in x)
        if isinstance(x, dict):
            return {k: tree(v, k) for k, v in x.items()}
        return fn(x, key)

    return SampleInput(tree(sample.input), args=tree(sample.args), kwargs=tree(sample.kwargs),
                       output_process_fn_grad=sample.output_process_fn_grad,
                       broadcasts_input=sample.broadcasts_input, name=sample.name)


def _is_device(x, device: torch.device) -> bool:
    if isinstance(x, torch.Tensor):
        return x.device.type == device.type
    if isinstance(x, torch.device):
        return x.type == device.type
    return isinstance(x, str) and x.split(":")[0] == device.type


def _touches_device(sample, device: torch.device) -> bool:
    """False for samples that never reach the device (arange(2): no tensor, no
    device argument): the op runs on the CPU twice, which tests nothing."""
    return any(_is_device(x, device) for x in
               pytree.tree_leaves((sample.input, sample.args, sample.kwargs)))


def _names_cpu(sample) -> bool:
    """The sample asks for the CPU itself (a device="cpu" argument)."""
    return any(_is_device(x, torch.device("cpu")) and not isinstance(x, torch.Tensor)
               for x in pytree.tree_leaves((sample.input, sample.args, sample.kwargs)))


def _cpu_twin(x: torch.Tensor) -> torch.Tensor:
    """CPU copy of a device tensor. A view into a larger storage (a slice, an
    offset) keeps its storage, offset, sizes and strides, so ops that read
    outside the view (as_strided with an explicit storage_offset) see the same
    memory on both sides; other tensors are plain copies."""
    if x.layout != torch.strided:
        return x.to("cpu")
    if x.is_conj() or x.is_neg() or x.is_quantized:  # lazy bits / quantizer live on the tensor
        return x.cpu()
    try:
        st = x.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensors without a storage
        return x.cpu()
    if x.storage_offset() == 0 and st.nbytes() == x.numel() * x.element_size():
        return x.cpu()
    return torch.empty(0, dtype=x.dtype).set_(st.cpu(), x.storage_offset(), x.size(), x.stride())


def _to_cpu_sample(sample, device: torch.device):
    """The CPU twin of a device sample: the same values, device arguments
    (factory ops' device=, Tensor.to's "acme:0") retargeted to the CPU; tensors
    the sample function keeps on the CPU on purpose stay where they are."""
    def move(x, key):
        if isinstance(x, torch.Tensor):
            if x.device.type != device.type:
                return x
            t = _cpu_twin(x.detach())
            return t.requires_grad_(x.requires_grad)
        if _is_device(x, device) and not isinstance(x, torch.Tensor):
            return torch.device("cpu") if isinstance(x, torch.device) else "cpu"
        return x

    return _map_sample(sample, move)


def _clone(sample):
    def copy(x, key):
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    return _map_sample(sample, copy)


def _sample_tensors(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


# --- comparing ------------------------------------------------------------------

def _to_cpu(out, device: torch.device):
    """Outputs on the CPU for comparison; a tensor left on another device than
    the one tested is a bug of the backend, reported as a mismatch."""
    wrong = []

    def move(x):
        if isinstance(x, torch.Tensor):
            if x.device.type != device.type:
                wrong.append(str(x.device))
            return x.detach().cpu()
        return x

    return pytree.tree_map(move, out), wrong


def _mismatch(actual, expected, atol, rtol) -> str | None:
    """None if equal within tolerance, else the first line of the difference."""
    kwargs = {} if atol is None else {"atol": atol, "rtol": rtol}
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False,
                                   check_stride=False, **kwargs)
        return None
    except AssertionError as exc:
        return " ".join(line.strip() for line in str(exc).strip().splitlines()[:4])[:400]
    except Exception as exc:  # outputs assert_close cannot compare (str, Size vs int...)
        if actual == expected:
            return None
        return f"cannot compare outputs: {_first_line(exc)}"


def _meta(out):
    return pytree.tree_map(lambda x: (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor)
                           else type(x).__name__, out)


# --- running --------------------------------------------------------------------

class _Fallback:
    """The backend's fallback log around a device run (absent on plain CPU runs)."""

    def __init__(self, device: torch.device):
        self.enabled = device.type != "cpu"
        if self.enabled:
            from torch_fl import fallback
            self._fb = fallback

    def clear(self):
        if self.enabled:
            self._fb.clear_fallback_log()

    def ops(self) -> list[str]:
        if not self.enabled:
            return []
        return sorted(e["op"] for e in self._fb.get_fallback_log())


def _forward(op, sample):
    return sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))


def _grads(op, sample, seed: int):
    """Outputs and d(sum_i w_i * out_i)/d(inputs that require grad); None if the
    sample has no input or no output that takes part in autograd."""
    inputs = [t for t in _sample_tensors(sample) if t.requires_grad]
    if not inputs:
        return None
    out = _forward(op, sample)
    outs = [t for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.dtype.is_floating_point or t.dtype.is_complex)]
    if not outs:
        return None
    gen = torch.Generator().manual_seed(seed)
    # Drawn in float32 whatever the dtype, so a float64 twin gets the same
    # weights; outside any dispatch mode, so _is_random does not see the
    # runner's own draws as the op's.
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        weights = [torch.randn(t.shape, generator=gen).to(device=t.device, dtype=t.dtype)
                   for t in outs]
    grads = torch.autograd.grad(outs, inputs, weights, allow_unused=True, materialize_grads=True)
    return grads


class _Tally:
    def __init__(self):
        self.counts = dict(total=0, compared=0, passed=0, passed_vs_float64=0, passed_tie_order=0,
                           mismatch=0,
                           error=0, cpu_error=0, random=0, no_grad=0, cpu_only=0)
        self.first = {}       # kind -> first detail line
        self.fallback = set()
        self.device_ran = False
        self.error_fallback = None  # fallback ops of the first failing sample

    def note(self, kind: str, detail: str | None = None, fallback=()):
        self.counts[kind] += 1
        if detail and kind not in self.first:
            self.first[kind] = detail
            if kind in ("error", "mismatch") and self.error_fallback is None:
                self.error_fallback = sorted(set(fallback))

    def result(self, phase: str) -> dict:
        c = self.counts
        if c["error"]:
            status, detail = "error", self.first["error"]
        elif c["mismatch"]:
            status, detail = "mismatch", self.first["mismatch"]
        elif c["passed"]:
            status, notes = "pass", []
            if c["random"]:
                notes.append(f"{c['random']} random sample(s) compared by shapes and dtypes only")
            if c["passed_tie_order"]:
                notes.append(f"{c['passed_tie_order']} sample(s) order equal values otherwise than "
                             "the CPU (unspecified)")
            detail = "; ".join(notes) or None
        elif c["random"]:
            status, detail = "skip", ("random op: its output depends on the RNG state; "
                                      "shapes and dtypes match")
        elif c["cpu_error"]:
            status, detail = "skip", f"every sample raises on the CPU: {self.first['cpu_error']}"
        elif c["no_grad"]:
            status, detail = "skip", "no sample has an input and an output that take part in autograd"
        else:
            status, detail = "skip", f"the OpInfo has no {phase} samples for this dtype"
        return {"status": status, "detail": detail,
                "native": (not self.fallback) if self.device_ran else None,
                "fallback_ops": sorted(self.fallback),
                "failing_sample_fallback_ops": self.error_fallback,
                "samples": dict(c)}


def _skip(detail: str) -> dict:
    return {"status": "skip", "detail": detail, "native": None, "fallback_ops": [],
            "failing_sample_fallback_ops": None, "samples": {}}


def check_opinfo(op, device, dtype: torch.dtype, phase: str = "forward", seed: int = 0,
                 max_samples: int | None = None,
                 on_sample: Callable[[int, Any], None] | None = None) -> dict:
    """Run one OpInfo's samples on `device` and on the CPU; see the module doc.
    on_sample(index, sample) is called before each device run (the worker
    reports it, so a crash names its sample)."""
    if phase not in ("forward", "grad"):
        raise ValueError(f"phase must be 'forward' or 'grad', got {phase!r}")
    device = torch.device(device)
    if dtype not in op.supported_dtypes("cpu"):
        return _skip(f"the OpInfo does not list {dtype} for the CPU")
    if phase == "grad":
        if not op.supports_autograd:
            return _skip("the OpInfo says the op does not support autograd")
        if not (dtype.is_floating_point or dtype.is_complex):
            return _skip(f"no gradients in {dtype}")
        if dtype not in op.supported_backward_dtypes("cpu"):
            return _skip(f"the OpInfo does not list {dtype} for backward on the CPU")
    reason = opinfo_skip_reason(op, device.type, dtype)
    if reason:
        return _skip(reason)
    atol, rtol = compare_tolerance(op, device.type, dtype)
    fallback = _Fallback(device)
    tally = _Tally()
    torch.manual_seed(seed)
    requires_grad = phase == "grad"
    try:
        samples = iter(op.sample_inputs(device, dtype, requires_grad=requires_grad))
    except Exception as exc:
        return _sample_failure(op, device, dtype, requires_grad, exc, tally)
    index = 0
    while max_samples is None or index < max_samples:
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as exc:
            if not tally.counts["total"]:
                return _sample_failure(op, device, dtype, requires_grad, exc, tally)
            break  # keep the samples made so far
        tally.counts["total"] += 1
        _check_sample(op, sample, index, device, phase, seed + index, atol, rtol, fallback, tally,
                      on_sample)
        index += 1
    return tally.result(phase)


def _sample_failure(op, device, dtype, requires_grad, exc, tally) -> dict:
    """sample_inputs raised on the device: the op's fault only if it does not on the CPU."""
    try:
        for _ in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
            pass
    except Exception as cpu_exc:
        return _skip(f"sample_inputs raises on the CPU: {_first_line(cpu_exc)}")
    result = tally.result("forward")
    result.update(status="error", detail=f"sample_inputs raises on {device.type} (not on the "
                  f"CPU): {_first_line(exc)}")
    return result


def _check_sample(op, sample, index, device, phase, seed, atol, rtol, fallback, tally,
                  on_sample):
    where = f"sample {index}"
    if not _touches_device(sample, device):
        tally.note("cpu_only")
        return
    try:
        cpu_sample = _to_cpu_sample(sample, device)
    except Exception as exc:  # the device cannot copy its own tensors back
        tally.device_ran = True
        tally.note("error", f"{where}: copying the sample to the CPU: {_first_line(exc)}")
        return
    spare = _clone(cpu_sample)   # before the CPU run, which may mutate its inputs
    run = _forward if phase == "forward" else (lambda o, s: _grads(o, s, seed))
    torch.manual_seed(seed)
    try:
        expected = run(op, cpu_sample)
    except Exception as exc:
        tally.note("cpu_error", _first_line(exc))
        return
    if on_sample is not None:
        on_sample(index, sample)
    if expected is None:
        tally.note("no_grad")
        return
    fallback.clear()
    tally.device_ran = True
    torch.manual_seed(seed)
    try:
        actual, wrong = _to_cpu(run(op, sample), device)
    except Exception as exc:
        used = fallback.ops()
        tally.fallback.update(used)
        tally.note("error", f"{where}: {_first_line(exc)}", used)
        return
    used = fallback.ops()
    tally.fallback.update(used)
    tally.counts["compared"] += 1
    if wrong and not _names_cpu(sample):  # full_like(x, device="cpu") belongs on the CPU
        tally.note("mismatch", f"{where}: output on {wrong[0]}, expected {device.type}", used)
        return
    if op.name in UNINITIALIZED:
        if _meta(actual) == _meta(expected):
            tally.note("random")
        else:
            tally.note("mismatch", f"{where}: other shapes/dtypes than on CPU: "
                       f"{_meta(actual)} vs {_meta(expected)}", used)
        return
    diff = _mismatch(actual, expected, atol, rtol)
    if diff is None:
        tally.note("passed")
        return
    if _is_random(lambda: run(op, _clone(spare)), expected, seed, atol, rtol):
        if _meta(actual) == _meta(expected):
            tally.note("random")
        else:
            tally.note("mismatch", f"{where}: random op with other shapes/dtypes than on CPU: "
                       f"{_meta(actual)} vs {_meta(expected)}", used)
        return
    # Rounding differently from the CPU is not wrong: judge both against float64.
    torch.manual_seed(seed)
    if _as_accurate_as_cpu(actual, expected, lambda: run(op, _to_float64(spare)), atol, rtol):
        tally.note("passed_vs_float64")
        tally.counts["passed"] += 1
        return
    if opinfo_ties.applies(op, spare) and opinfo_ties.same_up_to_ties(
            op, spare, actual, expected, phase, lambda a, e: _mismatch(a, e, atol, rtol)):
        tally.note("passed_tie_order")
        tally.counts["passed"] += 1
        return
    tally.note("mismatch", f"{where}: {diff}", used)


# OpInfos whose outputs are uninitialized memory (torch.empty and friends):
# their values mean nothing even when two CPU runs happen to agree (which made
# the rerun-with-another-seed test of _is_random call empty_strided a mismatch
# now and then). Like random ops, they are compared by shapes and dtypes only.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                           "new_empty_strided"})


def _is_random(rerun, expected, seed, atol, rtol) -> bool:
    """The op draws random numbers: it calls an ATen op tagged
    nondeterministic_seeded (bernoulli_, normal_...: this also catches OpInfo's
    dropout wrappers, which seed the RNG themselves, so the CPU gives the same
    values every time but the device's generator need not), or its CPU result
    changes with the seed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class SeededOps(TorchDispatchMode):
        seen = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
                SeededOps.seen = True
            return func(*args, **(kwargs or {}))

    torch.manual_seed(seed + 7919)
    try:
        with SeededOps():
            again = rerun()
    except Exception:
        return SeededOps.seen
    return SeededOps.seen or _mismatch(again, expected, atol, rtol) is not None


def _to_float64(sample):
    low = (torch.float32, torch.float16, torch.bfloat16)

    def up(x, key):
        if isinstance(x, torch.Tensor) and x.dtype in low:
            return x.detach().double().requires_grad_(x.requires_grad)
        if key == "dtype" and x in low:  # factories (linspace(..., dtype=torch.half))
            return torch.float64
        return x

    return _map_sample(sample, up)


def _as_accurate_as_cpu(actual, expected, reference, atol, rtol) -> bool:
    """True if every floating output of the device is as close to the float64
    result as the CPU's is (twice the CPU's largest error, plus the dtype's
    tolerance), and every other output equals the CPU's."""
    try:
        ref = reference()
    except Exception:
        return False
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    r_leaves, r_spec = pytree.tree_flatten(ref)
    if not (a_spec == e_spec == r_spec):
        return False
    for a, e, r in zip(a_leaves, e_leaves, r_leaves):
        if not (isinstance(a, torch.Tensor) and a.dtype.is_floating_point
                and isinstance(r, torch.Tensor) and r.shape == a.shape):
            if _mismatch(a, e, atol, rtol) is not None:
                return False
            continue
        if a.dtype != e.dtype or a.shape != e.shape:
            return False
        d_atol, d_rtol = (atol, rtol) if atol is not None else _default_tolerance(a.dtype)
        a, e, r = a.double(), e.double(), r.detach().double()
        if not torch.equal(a.isnan(), r.isnan()):
            return False
        finite = r.isfinite()
        if not torch.equal(a[~finite & ~r.isnan()], r[~finite & ~r.isnan()]):
            return False   # infinities must match exactly
        a, e, r = a[finite], e[finite], r[finite]
        if a.numel() == 0:
            continue
        cpu_err = (e - r).abs().nan_to_num(0.0).max().item()
        if not bool(((a - r).abs() <= d_atol + d_rtol * r.abs() + 2 * cpu_err).all()):
            return False
    return True


def _default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    from torch.testing._comparison import default_tolerances

    rtol, atol = default_tolerances(dtype)
    return atol, rtol
