"""Kernels that use acme's own approximations (no libm) stay accurate over the
whole input range, not only on the conformance samples, on every vector
instruction set acme can use (scalar loops, AVX2, AVX-512: conftest's each_isa)."""

import pytest
import torch

pytestmark = pytest.mark.usefixtures("each_isa")


def test_gelu_and_its_backward_match_float64_everywhere():
    x = torch.linspace(-12, 12, 240001)
    ones = torch.ones_like(x)
    ref = torch.nn.functional.gelu(x.double())
    ref_grad = torch.ops.aten.gelu_backward(ones.double(), x.double())
    out = torch.nn.functional.gelu(x.to("acme")).cpu().double()
    grad = torch.ops.aten.gelu_backward(ones.to("acme"), x.to("acme")).cpu().double()
    assert (out - ref).abs().max() < 1e-6
    assert (grad - ref_grad).abs().max() < 1e-6
    # far tails: gelu is 0 and x, its slope 0 and 1, to float32 precision
    assert out[0] == 0 and out[-1] == 12 and abs(grad[0]) < 1e-30 and grad[-1] == 1


def test_erfinv_matches_float64_over_the_whole_domain():
    """float32 erfinv is a vector polynomial approximation (vec_math_impl.h):
    within 2e-6 relative of float64 from 0 to the last float below 1, with
    torch's edges (+-1 -> +-inf, |x| > 1 and NaN -> NaN, -0 -> -0)."""
    below_one = 1 - torch.logspace(-7.2, 0, 20001, dtype=torch.float64)  # approaching 1, ~2^-24
    x = torch.cat([torch.linspace(-1, 1, 200001, dtype=torch.float64)[1:-1], below_one, -below_one])
    x = x.float()
    x = x[x.abs() < 1]
    ref = torch.erfinv(x.double())
    got = torch.erfinv(x.to("acme")).cpu().double()
    rel = ((got - ref).abs() / ref.abs().clamp_min(1e-30)).max().item()
    assert rel < 2e-6, f"erfinv off by {rel:.2e} relative"
    edges = torch.tensor([1.0, -1.0, 1.5, -2.0, float("nan"), -0.0, 0.0])
    got = torch.erfinv(edges.to("acme")).cpu()
    want = torch.erfinv(edges)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[:2], want[:2])
    assert torch.equal(torch.signbit(got[5:]), torch.tensor([True, False])) and (got[5:] == 0).all()


def _ulp_error(got: torch.Tensor, x: torch.Tensor, ref_fn) -> torch.Tensor:
    """|got - f(x)| in units in the last place of float32 at f(x) (subnormal ULP below)."""
    ref = ref_fn(x.double())
    _, exponent = torch.frexp(ref.float().abs().clamp_min(torch.finfo(torch.float32).tiny))
    ulp = torch.ldexp(torch.ones_like(ref), exponent.to(torch.float64) - 24)
    return (got.double() - ref).abs() / ulp


def test_erfc_matches_float64_within_5_ulp_everywhere():
    """float32 erfc is acme's own approximation (vec_math_impl.h `erfc_`, two ranges
    split at |x| = 0.5): within 5 ULP of float64 from -11 to 11, the range split, the
    subnormal tail near 10 and the values that round to 0 or 2 included, with
    torch's edges (+inf -> 0, -inf -> 2, NaN -> NaN, +-0 -> 1)."""
    x = torch.cat([torch.linspace(-11, 11, 2_000_001), torch.linspace(0.49, 0.51, 20001),
                   -torch.linspace(0.49, 0.51, 20001), torch.linspace(9, 10.1, 100001)])
    err = _ulp_error(torch.erfc(x.to("acme")).cpu(), x, torch.erfc)
    assert err.max() <= 5, f"erfc off by {err.max():.2f} ULP at x = {x[err.argmax()].item()!r}"
    edges = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 10.5, -10.5])
    got = torch.erfc(edges.to("acme")).cpu()
    assert got[2].isnan() and got[[0, 1, 3, 4, 5, 6]].tolist() == [0.0, 2.0, 1.0, 1.0, 0.0, 2.0]


def test_maximum_minimum_vector_path_matches_cpu_bitwise():
    """float32 maximum/minimum of same-shape dense tensors take the vector path
    (vec_math Binary::Maximum/Minimum): NaN from either side, signed zeros as
    CPU's, and every tail length."""
    special = torch.tensor([float("nan"), 1.0, -0.0, 0.0, float("inf"), -float("inf"), 2.0])
    for n in (1, 7, 16, 17, 1000):
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, generator=g)
        b = torch.randn(n, generator=g)
        a[: min(n, 7)] = special[: min(n, 7)]
        b[: min(n, 7)] = special.flip(0)[: min(n, 7)]
        for f in (torch.maximum, torch.minimum):
            got, want = f(a.to("acme"), b.to("acme")).cpu(), f(a, b)
            assert torch.equal(got.isnan(), want.isnan()), (f.__name__, n)
            ok = ~want.isnan()
            assert torch.equal(got[ok].view(torch.int32), want[ok].view(torch.int32)), (f.__name__, n)


def test_softmax_vector_rows_match_float64_with_torchs_edges():
    """float32 softmax and log_softmax rows take one vectorized pass each
    (vec_math_impl.h row_f32): every row length around the vector width (a
    partial last vector must not enter the max or the sum), large and tiny
    values, rows along an inner dim, and CPU's results for NaN, +-inf and
    all -inf rows."""
    gen = torch.Generator().manual_seed(0)
    for d in (1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257):
        x = torch.randn(6, d, generator=gen) * 30 - 10
        # softmax: relative where float32 can hold the probability
        ref = torch.softmax(x.double(), -1)
        got = torch.softmax(x.to("acme"), -1).cpu().double()
        held = ref > 1e-30
        err = ((got - ref).abs()[held] / ref[held]).max().item()
        assert err < 5e-6 and (got - ref).abs().max() < 3e-7, f"softmax D={d}: {err:.2e} relative"
        # log_softmax: relative, absolute near 0 (the row maximum's value is -log(sum))
        ref = torch.log_softmax(x.double(), -1)
        got = torch.log_softmax(x.to("acme"), -1).cpu().double()
        err = ((got - ref).abs() / ref.abs().clamp_min(1)).max().item()
        assert err < 5e-6, f"log_softmax D={d}: {err:.2e}"
    x = torch.randn(4, 37, 5, generator=gen)  # softmax dim not innermost: gathered rows
    for fn in (torch.softmax, torch.log_softmax):
        torch.testing.assert_close(fn(x.to("acme"), 1).cpu(), fn(x, 1), rtol=2e-6, atol=1e-7)
    inf, nan = float("inf"), float("nan")
    edges = torch.tensor([[0.0, 1.0, nan] + [0.0] * 14,
                          [-inf] * 17,
                          [inf, 0.0, 1.0] + [0.0] * 14,
                          [-inf, 2.0, -inf] + [-inf] * 14,
                          [1e30, -1e30, 0.0] + [0.0] * 14,
                          [-300.0 - i for i in range(17)]])  # a 0 in a padded lane would win the max
    for fn in (torch.softmax, torch.log_softmax):
        got, want = fn(edges.to("acme"), -1).cpu(), fn(edges, -1)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=2e-6, atol=1e-7)
