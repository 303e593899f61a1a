"""Edge cases where acme's native kernels answered differently from CPU (found by
PyTorch's OpInfo samples); each test pins CPU's answer, or CPU's refusal.
"""

import math

import pytest
import torch

DEVICE = "acme:0"


def _both(fn, *tensors):
    return fn(*tensors), fn(*[t.to(DEVICE) for t in tensors]).cpu()


def test_addr_beta_zero_ignores_nan_in_self(no_fallback):
    cpu, dev = _both(lambda s, a, b: torch.addr(s, a, b, beta=0.0, alpha=0.5),
                     torch.full((3, 2), math.nan), torch.arange(3.0), torch.arange(2.0))
    assert not dev.isnan().any()
    torch.testing.assert_close(dev, cpu)


def test_addr_alpha_zero_still_propagates_nan_from_vectors(no_fallback):
    # torch's addr is elementwise: 0 * NaN is NaN (unlike addmm's BLAS semantics)
    cpu, dev = _both(lambda s, a, b: torch.addr(s, a, b, beta=0.0, alpha=0.0),
                     torch.zeros(1, 1), torch.tensor([math.nan]), torch.tensor([math.nan]))
    assert cpu.isnan().all()
    torch.testing.assert_close(dev, cpu, equal_nan=True)


@pytest.mark.parametrize("dtypes", [(torch.int64, torch.int64), (torch.float64, torch.float32),
                                    (torch.bool, torch.bool)], ids=str)
def test_addr_dtypes_and_promotion_like_cpu(dtypes, no_fallback):
    self_dt, vec_dt = dtypes
    g = torch.Generator().manual_seed(0)
    s = (torch.randn(4, 1, generator=g) * 3).to(self_dt)
    a, b = (torch.randn(4, generator=g) * 3).to(vec_dt), (torch.randn(3, generator=g) * 3).to(vec_dt)
    kwargs = {} if self_dt == torch.bool else {"beta": 2, "alpha": 3}
    cpu, dev = _both(lambda *t: torch.addr(*t, **kwargs), s, a, b)
    assert dev.dtype == cpu.dtype
    torch.testing.assert_close(dev, cpu)


def test_addr_in_place_and_broadcast_self(no_fallback):
    cpu, dev = _both(lambda s, a, b: s.clone().addr_(a, b, beta=0.5),
                     torch.randn(4, 3), torch.randn(4), torch.randn(3))
    torch.testing.assert_close(dev, cpu)
    cpu, dev = _both(lambda s, a, b: torch.addr(s, a, b), torch.randn(3), torch.randn(4), torch.randn(3))
    torch.testing.assert_close(dev, cpu)


@pytest.mark.parametrize("start,end", [(3.0, 7.0), (-1.5, -1.5), (5, 0)])
def test_linspace_one_step_is_start(start, end, no_fallback):
    cpu = torch.linspace(start, end, 1)
    dev = torch.linspace(start, end, 1, device=DEVICE).cpu()
    assert dev.tolist() == [float(start)]
    torch.testing.assert_close(dev, cpu)
    torch.testing.assert_close(torch.linspace(start, end, 2, device=DEVICE).cpu(), torch.linspace(start, end, 2))


# OpInfo arange, int64: torch truncates float start/end/step to int64 before
# sizing an int64 range (an integer division), every other dtype sizes it in double
@pytest.mark.parametrize("args", [(0, 3.1), (0.0, -8.000001, -4.0), (1.0, 5.000001, 2.0),
                                  (-0.9, 2.1, 2.0), (2.1, -2.9, -1.0), (0, 10, 3)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float16, torch.float32])
def test_arange_sizes_int64_ranges_from_truncated_bounds(args, dtype, no_fallback):
    cpu = torch.arange(*args, dtype=dtype)
    dev = torch.arange(*args, dtype=dtype, device=DEVICE).cpu()
    assert dev.tolist() == cpu.tolist()


def test_arange_int64_step_truncated_to_zero_is_refused_like_cpu():
    with pytest.raises(ValueError, match="step must be nonzero"):
        torch.arange(0, 3, 0.5, dtype=torch.int64)
    with pytest.raises(ValueError, match="acme: arange.start_out: step must be nonzero"):
        torch.arange(0, 3, 0.5, dtype=torch.int64, device=DEVICE)


# logspace with CPU's arithmetic (exponent in double): bit-equal in every dtype
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("args", [(0, 4, 4), (2, 4, 2), (-1.5, 2.5, 7), (0, 2, 5, 2.0)])
def test_logspace_bit_equal_to_cpu(args, dtype, no_fallback):
    cpu = torch.logspace(*args, dtype=dtype)
    dev = torch.logspace(*args, dtype=dtype, device=DEVICE).cpu()
    assert torch.equal(dev, cpu), (dev, cpu)


def test_masked_fill_mask_larger_than_self_broadcasts_self(no_fallback):
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(5, generator=g), torch.rand(4, 5, generator=g) > 0.5
    cpu, dev = _both(lambda t, m: t.masked_fill(m, -1.0), x, mask)
    assert dev.shape == (4, 5)
    torch.testing.assert_close(dev, cpu)
    cpu, dev = _both(lambda t, m: t.masked_fill(m, torch.tensor(2.0, device=t.device)), x, mask)
    torch.testing.assert_close(dev, cpu)


def test_masked_scatter_mask_larger_than_self_broadcasts_self(no_fallback):
    g = torch.Generator().manual_seed(0)
    x, mask, src = torch.randn(5, generator=g), torch.rand(4, 5, generator=g) > 0.5, torch.randn(20, generator=g)
    cpu, dev = _both(lambda t, m, s: t.masked_scatter(m, s), x, mask, src)
    assert dev.shape == (4, 5)
    torch.testing.assert_close(dev, cpu)


@pytest.mark.parametrize("op", ["masked_fill_", "masked_scatter_"])
def test_in_place_masked_ops_refuse_a_larger_mask_like_cpu(op):
    x, mask = torch.randn(5), torch.ones(4, 5, dtype=torch.bool)
    args = (-1.0,) if op == "masked_fill_" else (torch.randn(20),)
    with pytest.raises(RuntimeError):
        getattr(x, op)(mask, *args)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        getattr(x.to(DEVICE), op)(mask.to(DEVICE), *[a.to(DEVICE) if isinstance(a, torch.Tensor) else a
                                                    for a in args])


# bloom's ALiBi slopes: a float 0-dim base raised to an int32 tensor (the
# family sweep saw pow.Tensor_Tensor fall back); and integer tensors to integer
# powers, negative ones by torch's rule (1 ** -n = 1, (-1) ** -n = +-1, else 0)
def test_pow_float_base_int_exponent_and_int_powers(no_fallback):
    base = torch.tensor(2 ** -0.5)
    powers = torch.arange(1, 9, dtype=torch.int32)
    cpu, dev = _both(torch.pow, base, powers)
    assert dev.dtype == torch.float32
    assert torch.equal(dev, cpu)
    ints = torch.tensor([[2, -3, 1, -1, 0, 5]])
    exps = torch.tensor([[3, 2, -4, -3, 2, -1]])
    cpu, dev = _both(torch.pow, ints, exps)
    assert dev.tolist() == cpu.tolist() == [[8, 9, 1, -1, 0, 0]]


# topk among equal values: PyTorch leaves the choice open, but MoE routers hit it
# (bf16 router logits tie at the k-th expert: minimax_m2, jetmoe under bf16
# autocast routed tokens to other experts than CPU). acme runs CPU's own
# selection loop, so ties, NaN and sorted=False come out as on CPU.
@pytest.mark.parametrize("n", [8, 64, 1000])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("sorted_", [True, False])
def test_topk_picks_among_ties_as_cpu(n, largest, sorted_, no_fallback):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-3, 4, (6, n), generator=g).to(torch.bfloat16)
    x[0, 1] = math.nan
    for k in (1, 2, 5):
        cpu = torch.topk(x, k, largest=largest, sorted=sorted_)
        dev = torch.topk(x.to(DEVICE), k, largest=largest, sorted=sorted_)
        assert torch.equal(dev.indices.cpu(), cpu.indices)
        assert torch.equal(dev.values.cpu().nan_to_num(99), cpu.values.nan_to_num(99))
    t = torch.randn(4, 6, 7, generator=g)
    for dim in (0, 1, 2):
        assert torch.equal(torch.topk(t.to(DEVICE), 3, dim=dim).indices.cpu(), torch.topk(t, 3, dim=dim).indices)


@pytest.mark.parametrize("op", [torch.fmod, torch.remainder,
                                lambda a, b: torch.div(a, b, rounding_mode="floor"),
                                lambda a, b: torch.div(a, b, rounding_mode="trunc")],
                         ids=["fmod", "remainder", "div_floor", "div_trunc"])
def test_integer_division_by_a_zero_element_raises_like_cpu(op, no_fallback):
    # The divisor is data: the device part raises, reported at the next sync. (It
    # once set a host flag from the asynchronous device part: the check ran before
    # the device did and the answer was a silent 0.)
    a, b = torch.tensor([7, -7, 5]), torch.tensor([2, 0, 3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(a.to(DEVICE), b.to(DEVICE)).cpu()
    nz = torch.tensor([2, -3, 3])
    cpu, dev = _both(op, a, nz)
    assert torch.equal(dev, cpu)
