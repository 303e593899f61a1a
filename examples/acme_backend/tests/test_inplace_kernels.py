"""acme's in-place kernels (`bool k_mul__Tensor(...)`: kernels/binary.cpp, pointwise.cpp).

They write `self` directly for plain calls (one dtype, same shape, contiguous, no
partial overlap) and decline the rest, which the generated wrapper then computes
with the functional kernel and copies into `self`. The generated conformance tests
compare every in-place variant with CPU; these check which path ran (a declined
call costs one device-to-device copy in the runtime's stats) and that declined
and aliased calls still give CPU's answer and errors.
"""

import pytest
import torch


class CopyCounter:
    """Counts aten::copy_ calls (the generated path's copy into self) while active."""

    def __enter__(self):
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)
        self.count = sum(e.count for e in self.prof.key_averages() if e.key == "aten::copy_")


def on_both(fn, *tensors):
    """fn applied to CPU copies and to acme copies; returns (cpu result, acme result)."""
    cpu = [t.clone() for t in tensors]
    dev = [t.to("acme") for t in tensors]
    return fn(*cpu), fn(*dev).cpu()


# Each in-place op acme writes directly, called as optimizers call it
# (b is away from zero: it divides).
DIRECT = {
    "add_.Tensor": lambda s, a, b: s.add_(a, alpha=-0.5),
    "sub_.Tensor": lambda s, a, b: s.sub_(a, alpha=2),
    "mul_.Tensor": lambda s, a, b: s.mul_(a),
    "div_.Tensor": lambda s, a, b: s.div_(b),
    "add_.Scalar": lambda s, a, b: s.add_(1.5),
    "mul_.Scalar": lambda s, a, b: s.mul_(0.9),
    "div_.Scalar": lambda s, a, b: s.div_(3.0),
    "addcmul_": lambda s, a, b: s.addcmul_(a, b, value=0.1),
    "addcdiv_": lambda s, a, b: s.addcdiv_(a, b, value=-0.1),
    "lerp_.Scalar": lambda s, a, b: s.lerp_(a, 0.1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", sorted(DIRECT))
def test_plain_call_writes_self_without_a_copy(op, dtype):
    torch.manual_seed(0)
    s, a = torch.randn(257, 33).to(dtype), torch.randn(257, 33).to(dtype)
    b = (torch.randn(257, 33).abs() + 1).to(dtype)
    dev = [t.to("acme") for t in (s, a, b)]
    # The same values in a transposed layout: the in-place kernel declines that self,
    # so the generated path (functional kernel, then copy) computes the reference.
    declined = dev[0].t().contiguous().t()
    storage = dev[0].untyped_storage().data_ptr()
    with CopyCounter() as direct:
        result = DIRECT[op](*dev)
    assert direct.count == 0, f"{op}: the in-place call copied a result into self"
    assert result.untyped_storage().data_ptr() == storage
    with CopyCounter() as fallback:
        DIRECT[op](declined, dev[1], dev[2])
    assert fallback.count >= 1, "the counter sees the generated path's copy"
    torch.testing.assert_close(dev[0].cpu(), declined.cpu(), atol=0, rtol=0)  # bit for bit
    torch.testing.assert_close(dev[0].cpu(), DIRECT[op](s, a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_python_number_operand_is_written_in_place(dtype):
    """x.mul_(0.9) from Python sends a wrapped CPU number (mul_.Tensor, not .Scalar)."""
    x = (torch.randn(300) * 10).to(dtype)
    dev = x.to("acme")
    with CopyCounter() as copies:
        dev.mul_(3).add_(2).sub_(1)
    assert copies.count == 0
    torch.testing.assert_close(dev.cpu(), x.mul_(3).add_(2).sub_(1))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 40_000, 100_003])
def test_float32_number_operands_use_the_vector_units_with_cpus_bits(n):
    """float32 `x.mul_(number)` / `x.add_(number)`, both the Python-number (.Tensor)
    and the .Scalar overloads, run on the vector units (vec::Unary::MulScalar and
    AddScalar): the same IEEE operation as CPU's, so the same bits, for every tail
    length and for NaN, infinities and signed zeros."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * 100
    x[: min(n, 6)] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 3e38])[: min(n, 6)]
    calls = {
        "mul_ number": lambda t: t.mul_(0.9),
        "mul_ -0.0": lambda t: t.mul_(-0.0),
        "mul_.Scalar": lambda t: torch.ops.aten.mul_.Scalar(t, 1e-3),
        "add_ number": lambda t: t.add_(-2.5),
        "add_ alpha": lambda t: t.add_(torch.tensor(1.5, dtype=torch.float64), alpha=3),
        "add_.Scalar": lambda t: torch.ops.aten.add_.Scalar(t, 0.25, alpha=-4),
        "add_ 0.0 to -0.0": lambda t: t.add_(0.0),
    }
    for name, call in calls.items():
        want, got = on_both(call, x)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), name


def test_self_as_its_own_operand():
    x = torch.randn(1000)
    want, got = on_both(lambda t: t.mul_(t).add_(t, alpha=2).addcmul_(t, t), x)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)  # CPU's addcmul may fuse (FMA)


@pytest.mark.parametrize("case", ["broadcast", "strided self", "other dtype", "expanded other"])
def test_declined_calls_take_the_copy_path_and_match_cpu(case):
    torch.manual_seed(0)
    x, row = torch.randn(64, 32), torch.randn(32)
    fns = {
        "broadcast": lambda s, r: s.mul_(r),
        "strided self": lambda s, r: s.t().add_(s.t(), alpha=0.5),
        "other dtype": lambda s, r: s.mul_(r.to(torch.float64)),
        "expanded other": lambda s, r: s.mul_(r.expand(64, 32)),
    }
    cpu_x, dev_x, dev_row = x.clone(), x.to("acme"), row.to("acme")
    with CopyCounter() as copies:
        fns[case](dev_x, dev_row)
    assert copies.count >= 1, f"{case}: expected the generated copy path"
    fns[case](cpu_x, row)
    want, got = cpu_x, dev_x.cpu()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_partial_overlap_is_declined():
    # self and other share memory shifted by one element: writing self in place
    # would change other's later elements before they are read. torch's CPU kernel
    # refuses the call; the copy path computes from unchanged inputs.
    base = torch.arange(10.0, device="acme")
    try:
        with CopyCounter() as copies:
            base[1:].add_(base[:-1])
    except RuntimeError as exc:
        assert "overlap" in str(exc) or "memory location" in str(exc)
    else:
        assert copies.count >= 1, "a partly overlapping call was written in place"
        torch.testing.assert_close(base.cpu(), torch.tensor([0.0, 1, 3, 5, 7, 9, 11, 13, 15, 17]))


def test_declined_errors_match_cpu():
    # An in-place result that would not fit self: CPU's error, not a silent write.
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.randn(1, 4, device="acme").add_(torch.randn(3, 4, device="acme"))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(4, dtype=torch.int64, device="acme").mul_(torch.randn(4, device="acme"))
