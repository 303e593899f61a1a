"""Indexing on acme as real models use it, natively (fallback log asserted empty)
and equal to CPU:

* `_index_put_impl_` (what `x[idx] = v`, `index_put_` and the backward of
  `table[idx]` reach): accumulate on and off, bool masks, broadcast values,
  non-contiguous targets, negative indices; a Swin-style relative position bias
  trains natively;
* int32 index tensors wherever CPU accepts them (gather, scatter, scatter_add,
  scatter_reduce, index_select, index, index_put, index_add, embedding,
  embedding_bag), and the same refusal as CPU where CPU refuses them.
"""

import pytest
import torch

DEVICE = "acme:0"


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _on_both(fn, *tensors):
    """fn on CPU tensors and on their acme copies; returns (cpu, acme-as-cpu)."""
    cpu = fn(*[t.clone() for t in tensors])
    dev = fn(*[t.to(DEVICE) for t in tensors])
    return cpu, (dev.cpu() if isinstance(dev, torch.Tensor) else tuple(d.cpu() for d in dev))


INDEX_PUTS = {
    "accumulate-repeated": lambda x, v: x.index_put_((torch.tensor([0, 2, 0, 4, 2], device=x.device),),
                                                     v[:5], accumulate=True),
    "set": lambda x, v: x.index_put_((torch.tensor([3, 1], device=x.device),), v[:2]),
    "negative": lambda x, v: x.index_put_((torch.tensor([-1, -5], device=x.device),), v[:2], accumulate=True),
    "two-dims": lambda x, v: x.index_put_((torch.tensor([0, 4, 4], device=x.device),
                                           torch.tensor([1, 2, 2], device=x.device)), v[0, :3], accumulate=True),
    "broadcast-row": lambda x, v: x.index_put_((torch.tensor([1, 1, 3], device=x.device),), v[0], accumulate=True),
    "broadcast-scalar": lambda x, v: x.index_put_((torch.tensor([2, 0], device=x.device),), v[0, 0]),
    "bool-mask": lambda x, v: x.index_put_((x > 0,), v[0, 0]),
    "bool-rows": lambda x, v: x.index_put_((torch.tensor([True, False, True, False, True], device=x.device),),
                                           v[:3], accumulate=True),
    "setitem-mask": lambda x, v: x.__setitem__(x < 0, 0.0) or x,
    "setitem-slice-and-index": lambda x, v: x.__setitem__((slice(None), torch.tensor([3, 0], device=x.device)),
                                                          v[:5, :2]) or x,
    "non-contiguous-self": lambda x, v: x.t().index_put_((torch.tensor([1, 0, 1], device=x.device),),
                                                         v[:3, :5], accumulate=True),
    "int32-index": lambda x, v: x.index_put_((torch.tensor([4, 0, 4], dtype=torch.int32, device=x.device),),
                                             v[:3], accumulate=True),
}


@pytest.mark.parametrize("case", sorted(INDEX_PUTS))
def test_index_put_matches_cpu_natively(case, no_fallback):
    x = torch.randn(5, 4, generator=_gen(0))
    v = torch.randn(6, 5, generator=_gen(1))[:, :4].contiguous()
    if case == "non-contiguous-self":
        x = torch.randn(5, 4, generator=_gen(0))
        v = torch.randn(6, 5, generator=_gen(1))
    cpu, dev = _on_both(INDEX_PUTS[case], x, v)
    torch.testing.assert_close(dev, cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.int64, torch.bool])
def test_index_put_other_dtypes(dtype, no_fallback):
    x = (torch.randn(6, 3, generator=_gen(0)) * 4).to(dtype)
    v = (torch.randn(4, 3, generator=_gen(1)) * 4).to(dtype)
    idx = torch.tensor([5, 0, 5, 2])
    cpu, dev = _on_both(lambda a, b, i: a.index_put_((i,), b, accumulate=True), x, v, idx)
    torch.testing.assert_close(dev, cpu)


def test_relative_position_bias_trains_natively(no_fallback):
    # Swin / MaxViT / LeViT: a learned table indexed by a fixed relative-position
    # index; the backward of table[index] is _index_put_impl_(accumulate=True).
    w, heads = 3, 2
    coords = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (w - 1)
    index = rel[..., 0] * (2 * w - 1) + rel[..., 1]          # [w*w, w*w]
    table = torch.randn((2 * w - 1) ** 2, heads, generator=_gen(2))
    attn = torch.randn(4, heads, w * w, w * w, generator=_gen(3))
    results = []
    for device in ["cpu", DEVICE]:
        t = table.clone().to(device).requires_grad_()
        bias = t[index.to(device).view(-1)].view(w * w, w * w, heads).permute(2, 0, 1)
        out = (attn.to(device) + bias.unsqueeze(0)).softmax(-1)
        (out * torch.linspace(-1, 1, out.numel(), device=device).view_as(out)).sum().backward()
        opt = torch.optim.SGD([t], lr=0.5)
        grad = t.grad.detach().cpu()
        opt.step()
        results.append((out.detach().cpu(), grad, t.detach().cpu()))
    for c, d in zip(results[0], results[1]):
        torch.testing.assert_close(d, c, atol=1e-5, rtol=1e-5)


def _int32(t):
    return t.to(torch.int32)


INT32_OPS = {
    "gather": lambda x, i2, i1, s: torch.gather(x, 1, i2),
    "scatter.value": lambda x, i2, i1, s: x.scatter(1, i2, 1.5),
    "scatter.src": lambda x, i2, i1, s: x.scatter(1, i2, s),
    "scatter_": lambda x, i2, i1, s: x.clone().scatter_(1, i2, s),
    "scatter_add": lambda x, i2, i1, s: x.scatter_add(1, i2, s),
    "scatter_reduce": lambda x, i2, i1, s: x.scatter_reduce(1, i2, s, "amax"),
    "index_select": lambda x, i2, i1, s: x.index_select(0, i1),
    "index": lambda x, i2, i1, s: x[i1],
    "index_add": lambda x, i2, i1, s: x.index_add(0, i1, x[:3] * 2),
    "embedding": lambda x, i2, i1, s: torch.nn.functional.embedding(i1, x),
    # a weight that requires grad: without it torch picks _embedding_bag_forward_only,
    # which acme does not implement natively yet (CPU fallback)
    "embedding_bag": lambda x, i2, i1, s: torch.nn.functional.embedding_bag(
        i1, x.detach().requires_grad_(), torch.tensor([0, 2], dtype=torch.int32, device=x.device)).detach(),
}


@pytest.mark.parametrize("case", sorted(INT32_OPS))
def test_int32_indices_accepted_like_cpu(case, no_fallback):
    x = torch.randn(4, 5, generator=_gen(0))
    # one index per row (no repeats in a row: scatter's winner stays defined)
    i2 = _int32(torch.stack([torch.randperm(5, generator=_gen(r))[:2] for r in range(4)]))
    i1 = _int32(torch.tensor([3, 0, 3]))
    s = torch.randn(4, 2, generator=_gen(1))
    cpu, dev = _on_both(lambda *a: INT32_OPS[case](*a), x, i2, i1, s)
    torch.testing.assert_close(dev, cpu)


INT64_ONLY = {
    "index_copy": lambda x, i: x.index_copy(0, i, x[:2]),
    "index_fill": lambda x, i: x.index_fill(0, i, 2.0),
    "take": lambda x, i: x.take(i),
    "put": lambda x, i: x.put(i, x.flatten()[:2]),
}


@pytest.mark.parametrize("case", sorted(INT64_ONLY))
def test_int32_indices_refused_where_cpu_refuses(case):
    x = torch.randn(4, 5, generator=_gen(0))
    i = torch.tensor([1, 3], dtype=torch.int32)
    with pytest.raises((RuntimeError, IndexError)):
        INT64_ONLY[case](x, i)
    with pytest.raises((RuntimeError, IndexError), match=f"acme: {case}"):
        INT64_ONLY[case](x.to(DEVICE), i.to(DEVICE))


def test_gather_and_scatter_on_a_0d_tensor(no_fallback):
    x = torch.tensor(2.5)
    cpu, dev = _on_both(lambda t, i: torch.gather(t, 0, i), x, torch.zeros(1, dtype=torch.long))
    torch.testing.assert_close(dev, cpu)
    cpu, dev = _on_both(lambda t, i, s: t.scatter(0, i, s), x, torch.zeros(1, dtype=torch.long),
                        torch.tensor(7.0))
    torch.testing.assert_close(dev, cpu)


def test_gather_with_an_empty_index_of_any_dtype(no_fallback):
    # torch checks the index dtype only when the index holds something (an
    # OpInfo sample gathers with an empty uint8 index); a non-empty one is refused
    x = torch.randn(5, generator=_gen(0))
    cpu, dev = _on_both(lambda t, i: torch.gather(t, 0, i), x, torch.empty(0, dtype=torch.uint8))
    assert dev.shape == cpu.shape == (0,)
    with pytest.raises(RuntimeError, match="acme: gather: .*int64 or int32"):
        torch.gather(x.to(DEVICE), 0, torch.ones(2, dtype=torch.uint8, device=DEVICE))


@pytest.mark.parametrize("op", ["gather", "scatter", "scatter_add", "scatter_reduce"])
def test_an_empty_index_of_another_rank_or_dtype_is_not_checked(op, no_fallback):
    # as torch (OpInfo gather samples 3/4 and gather's backward): nothing to index, no checks
    x = torch.randn(3, 4, generator=_gen(1))
    index = torch.empty(0, 5, dtype=torch.uint8)
    calls = {
        "gather": lambda t, i: torch.gather(t, 1, i),
        "scatter": lambda t, i: t.scatter(0, i, torch.zeros(0, 5, device=t.device)),
        "scatter_add": lambda t, i: t.scatter_add(0, i, torch.zeros(0, 5, device=t.device)),
        "scatter_reduce": lambda t, i: t.scatter_reduce(0, i, torch.zeros(0, 5, device=t.device), "amax"),
    }
    cpu, dev = _on_both(calls[op], x, index)
    assert dev.shape == cpu.shape
    torch.testing.assert_close(dev, cpu)
    if op == "gather":  # a non-empty index of another rank is still refused
        with pytest.raises(RuntimeError, match="same number of dimensions"):
            torch.gather(x.to(DEVICE), 1, torch.zeros(1, 1, 1, dtype=torch.long, device=DEVICE))


def test_index_put_errors_name_op_and_device():
    x = torch.zeros(4, 3, device=DEVICE)
    # float64 values are not in the kernel's dtypes: the call runs on the CPU
    # fallback, which refuses the mismatch as CPU does
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        x.index_put_((torch.tensor([0], device=DEVICE),), torch.ones(1, 3, dtype=torch.float64, device=DEVICE))
    # An index's value is known on the device only: as on CUDA, the kernel's error
    # is reported when the host next waits for the stream (here, at synchronize).
    with pytest.raises(RuntimeError, match="acme: _index_put_impl_: index 4 is out of bounds for dimension 0"):
        x.index_put_((torch.tensor([4], device=DEVICE),), torch.ones(3, device=DEVICE))
        torch.acme.synchronize()
    with pytest.raises(RuntimeError, match="acme: _index_put_impl_: shapes are not broadcastable: \\[2, 3\\] \\[2\\]"):
        x.index_put_((torch.tensor([0, 1], device=DEVICE),), torch.ones(2, device=DEVICE))
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor"):
        torch.zeros(1, device=DEVICE).expand(4).index_put_((torch.tensor([0], device=DEVICE),),
                                                           torch.ones(1, device=DEVICE))
