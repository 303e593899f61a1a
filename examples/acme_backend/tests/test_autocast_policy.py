"""acme's autocast behaves like CUDA's: the loaded backend registers exactly the
generated policy, and PyTorch's own CUDA autocast test lists
(torch/testing/_internal/autocast_test_lists.py, run by test_cuda.py on CUDA)
give the dtypes and values CUDA's policy gives, on acme."""

from __future__ import annotations

import collections.abc
import functools
from pathlib import Path

import pytest
import torch
from torch.testing._internal.autocast_test_lists import AutocastTestLists

from flsdk.codegen import autocast
from flsdk.spec import load_backend

DEVICE = "acme:0"
ACME = Path(__file__).resolve().parents[1]


def test_loaded_backend_registers_exactly_the_generated_policy():
    import torch_fl_acme  # noqa: F401  (registers the kernels)

    loaded = {name.removeprefix("aten::")
              for name in torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1")}
    generated = {rule.op for rule in autocast.policy_rules(load_backend(ACME).ops)}
    assert loaded == generated


@functools.lru_cache(maxsize=1)
def lists() -> AutocastTestLists:
    torch.manual_seed(0)
    return AutocastTestLists(torch.device(DEVICE))


def cast(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, dtype) for v in value)
    return value


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, collections.abc.Iterable):
        return all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def run(module, entry, amp_dtype, run_as, out_type=None):
    """As test_cuda.py's _run_autocast_outofplace: the op under autocast gives
    `out_type` and equals the op on inputs cast to `run_as` by hand."""
    op, args = entry[0], entry[1]
    kwargs = entry[2] if len(entry) > 2 and isinstance(entry[2], dict) else {}
    fn = getattr(module, op) if hasattr(module, op) else getattr(torch.Tensor, op)
    try:
        with torch.autocast("acme", dtype=amp_dtype):
            out = fn(*args, **kwargs)
        with torch.autocast("acme", enabled=False):
            control = fn(*cast(args, run_as), **kwargs)
    except (RuntimeError, TypeError) as exc:
        return [f"{op}: {str(exc).splitlines()[0]}"]
    first = out[0] if isinstance(out, tuple) else out
    problems = []
    if isinstance(first, torch.Tensor) and first.dtype != (out_type or run_as):
        problems.append(f"{op}: {first.dtype}, CUDA's policy gives {out_type or run_as}")
    elif not same(out, control):
        problems.append(f"{op}: result differs from the op on inputs cast to {run_as} by hand")
    return problems


# list name -> (module, runs as: "amp" for the autocast dtype, or a dtype)
LISTS = {
    "torch_fp16": (torch, "amp"), "nn_fp16": (torch._C._nn, "amp"), "linalg_fp16": (torch._C._linalg, "amp"),
    "methods_fp16": (None, "amp"),
    "torch_fp32": (torch, torch.float32), "nn_fp32": (torch._C._nn, torch.float32),
    "methods_fp32": (None, torch.float32),
    "torch_need_autocast_promote": (torch, torch.float32),
}
SKIP = {op for op, why in autocast.CUDA_EXTRAS.items() if why.startswith("skip")}
# Ops of the lists acme's kernels cannot run yet, whatever the autocast policy (the
# cast itself is right: the error comes from the kernel below it). Strict: an entry
# that starts to pass fails the test, so the list shrinks as the kernels land.
KNOWN_KERNEL_GAPS: dict[str, str] = {
    # op -> why acme fails it; empty since 3-d convs, the fused RNN cells (native)
    # and soft_margin_loss's int64 target (CPU fallback by dtype routing) work.
}


# Every list under fp16 (CUDA's default) and bf16, except the promote list under bf16:
# it mixes float16 inputs, which promote refuses under bf16 (on CUDA too).
CASES = [(name, dtype) for name in sorted(LISTS) for dtype in (torch.float16, torch.bfloat16)
         if not (name == "torch_need_autocast_promote" and dtype == torch.bfloat16)]


@pytest.mark.parametrize("name, amp_dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
def test_pytorch_cuda_autocast_list_on_acme(name, amp_dtype):
    module, run_as = LISTS[name]
    problems, ops = [], set()
    for entry in getattr(lists(), name):
        # A third element that is not kwargs is test_cuda.py's skip flag (TEST_WITH_ROCM;
        # einsum's entry carries its operands there, which test_cuda.py skips the same way).
        if entry[0] in SKIP or (len(entry) > 2 and not isinstance(entry[2], dict) and entry[2]):
            continue
        target = module if module is not None else torch.Tensor
        ops.add(entry[0])
        problems += run(target, entry, amp_dtype, amp_dtype if run_as == "amp" else run_as)
    failing = {p.split(":")[0] for p in problems}
    assert [p for p in problems if p.split(":")[0] not in KNOWN_KERNEL_GAPS] == []
    fixed = {op for op in KNOWN_KERNEL_GAPS if op in ops and op not in failing}
    assert not fixed, f"now pass on acme, remove from KNOWN_KERNEL_GAPS: {sorted(fixed)}"


def test_builtin_promotion_the_policy_relies_on():
    problems = []
    for op, args, out_type in lists().torch_expect_builtin_promote:
        with torch.autocast("acme", dtype=torch.float16):
            out = getattr(torch, op)(*args)
        if isinstance(out, torch.Tensor) and out.dtype != out_type:
            problems.append(f"{op}: {out.dtype}, expected {out_type}")
    assert problems == []


def test_banned_ops_raise_as_on_cuda():
    for op, args, module in lists().banned:
        with torch.autocast("acme", dtype=torch.float16), pytest.raises(RuntimeError, match="unsafe to autocast"):
            getattr(module, op)(*args)
