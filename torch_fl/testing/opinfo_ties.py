"""OpInfo results that may differ from the CPU's only in how equal values are ordered.

`sort` and `argsort` without `stable=True`, `msort`, `topk`, `mode`, `kthvalue`
and `median`/`nanmedian` over a dim return indices whose choice among equal
values PyTorch leaves unspecified (torch.median's documentation says so). The CPU's own
unstable sort is not stable on large inputs, while acme sorts stably: OpInfo's
first `sort` sample (8000 integers cast to float16, so many ties) gives other
indices on the two devices, and the gradient, which follows the indices, lands
on other (equal-valued) positions. Neither is wrong.

A sample of these ops that fails the plain comparison passes when
* forward: every non-index output equals the CPU's within tolerance, and every
  index output selects the same values as the CPU's (`input.gather(dim, idx)`,
  NaN equal to NaN); sort's and argsort's indices must also be a permutation of
  the CPU's, and topk's distinct;
* grad: the gradient summed over the positions holding each distinct input value
  equals the CPU's (a tie swap moves gradient between equal values only).
Anything else stays a mismatch: wrong values, an index to an unequal value, a
gradient that moves between different values.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

__all__ = ["TIE_ORDER_OPS", "applies", "same_up_to_ties"]

# op name -> (position of `dim` among the sample's args or None, default dim,
#             index outputs must be a permutation along dim)
TIE_ORDER_OPS = {
    "sort": (0, -1, True),
    "argsort": (0, -1, True),
    "msort": (None, 0, True),
    "topk": (1, -1, False),
    "mode": (0, -1, False),
    "kthvalue": (1, -1, False),
    "median": (0, -1, False),
    "nanmedian": (0, -1, False),
}


def applies(op, sample) -> bool:
    """True if the op leaves the order of ties open for this sample
    (sort/argsort with stable=True promise the CPU's order)."""
    return op.name in TIE_ORDER_OPS and sample.kwargs.get("stable") is not True \
        and isinstance(sample.input, torch.Tensor)


def _dim(name: str, sample, ndim: int) -> int:
    pos, default, _ = TIE_ORDER_OPS[name]
    dim = sample.kwargs.get("dim")
    if dim is None and pos is not None and len(sample.args) > pos:
        arg = sample.args[pos]
        if isinstance(arg, int) and not isinstance(arg, bool):
            dim = arg
    dim = default if dim is None else dim
    return dim % ndim if ndim else 0


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all()) \
        if a.is_floating_point() else torch.equal(a, b)


def _same_selection(x: torch.Tensor, a: torch.Tensor, e: torch.Tensor, dim: int,
                    permutation: bool) -> bool:
    if a.shape != e.shape or a.dtype != e.dtype:
        return False
    if x.dim() == 0:
        return torch.equal(a, e)
    if a.dim() < x.dim():  # mode without keepdim
        a, e = a.unsqueeze(dim), e.unsqueeze(dim)
    if bool(((a < 0) | (a >= x.size(dim))).any()):
        return False
    if not _equal(x.gather(dim, a), x.gather(dim, e)):
        return False
    if a.size(dim) < 2:
        return True
    ordered = a.sort(dim).values
    if permutation:
        return torch.equal(ordered, e.sort(dim).values)
    return bool((ordered.diff(dim=dim) != 0).all())


def _forward_ok(name, x, actual, expected, dim, mismatch) -> bool:
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if a_spec != e_spec:
        return False
    permutation = TIE_ORDER_OPS[name][2]
    # argsort returns indices; the others (values, indices), or values alone
    index_at = 0 if name == "argsort" else 1 if len(a_leaves) == 2 else None
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if i == index_at:
            if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
                    and _same_selection(x, a, e, dim, permutation)):
                return False
        elif mismatch(a, e) is not None:
            return False
    return True


def _grad_ok(x, actual, expected, mismatch) -> bool:
    a_leaves = [t for t in pytree.tree_leaves(actual) if isinstance(t, torch.Tensor)]
    e_leaves = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    if len(a_leaves) != len(e_leaves):
        return False
    _, groups = torch.unique(x.detach(), return_inverse=True)
    n = int(groups.max()) + 1 if groups.numel() else 0
    for a, e in zip(a_leaves, e_leaves):
        if a.shape != x.shape or e.shape != x.shape or a.dtype != e.dtype:
            if mismatch(a, e) is not None:
                return False
            continue
        sums = [torch.zeros(n, dtype=torch.float64).index_add_(0, groups.flatten(), g.double().flatten())
                for g in (a, e)]
        if mismatch(sums[0].to(a.dtype), sums[1].to(e.dtype)) is not None:
            return False
    return True


def same_up_to_ties(op, sample, actual, expected, phase: str, mismatch) -> bool:
    """True if `actual` differs from the CPU's `expected` only in the order of
    equal values. `sample` is the CPU copy of the sample; mismatch(a, e) returns
    None when two outputs agree within the comparison's tolerance."""
    x = sample.input.detach()
    if phase == "grad":
        return _grad_ok(x, actual, expected, mismatch)
    return _forward_ok(op.name, x, actual, expected, _dim(op.name, sample, x.dim()), mismatch)
