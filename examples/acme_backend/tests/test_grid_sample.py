"""F.grid_sample on acme, as users call it (kernels/grid_sample.cpp): every
interpolation and padding mode, both align_corners, forward and both gradients
(input and grid) through autograd, against CPU, on 4-d and 5-d inputs. The
generated conformance cases cover three samples of each op; these cover the 18
(2-d) and 12 (3-d) mode combinations, grid points far outside the image (where
reflection folds several times), points on pixel edges, non-finite points, half
precision, the unit count, a spatial transformer step and the errors."""

import itertools

import pytest
import torch
import torch.nn.functional as F

DEVICE = "acme:0"
MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]


def _case(seed, n=2, c=3, h=5, w=7, ho=6, wo=4, spread=1.6, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64).to(dtype)
    grid = ((torch.rand(n, ho, wo, 2, generator=g, dtype=torch.float64) * 2 - 1) * spread).to(dtype)
    return x, grid


def _sample_and_grads(x, grid, mode, padding, align_corners, device, seed=0):
    x = x.to(device).detach().requires_grad_()
    grid = grid.to(device).detach().requires_grad_()
    out = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align_corners)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    (out * weight.to(device)).sum().backward()
    return out.detach().cpu(), x.grad.cpu(), grid.grad.cpu()


@pytest.mark.parametrize("mode,padding,align_corners",
                         list(itertools.product(MODES, PADDINGS, [False, True])))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_mode_matches_cpu_forward_and_gradients(mode, padding, align_corners, dtype, no_fallback):
    # spread 2.5: a third of the points lie outside [-1, 1], many beyond one reflection
    x, grid = _case(len(mode) + 7 * len(padding) + align_corners, spread=2.5, dtype=dtype)
    want = _sample_and_grads(x, grid, mode, padding, align_corners, "cpu")
    got = _sample_and_grads(x, grid, mode, padding, align_corners, DEVICE)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    for name, g, w in zip(("output", "input grad", "grid grad"), got, want):
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"{n}: {m}")
    if mode == "nearest":  # piecewise constant: no gradient flows to the grid
        assert (got[2] == 0).all()


def _volume_case(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 4, 5, 6, generator=g, dtype=torch.float64).to(dtype)
    grid = ((torch.rand(2, 3, 4, 2, 3, generator=g, dtype=torch.float64) * 2 - 1) * 2.5).to(dtype)
    return x, grid


@pytest.mark.parametrize("mode,padding,align_corners",
                         list(itertools.product(["bilinear", "nearest"], PADDINGS, [False, True])))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_volumes_every_mode_matches_cpu(mode, padding, align_corners, dtype, no_fallback):
    """5-d inputs (grid_sampler_3d): trilinear and nearest, forward and both gradients."""
    x, grid = _volume_case(len(mode) + 7 * len(padding) + align_corners, dtype)
    want = _sample_and_grads(x, grid, mode, padding, align_corners, "cpu")
    got = _sample_and_grads(x, grid, mode, padding, align_corners, DEVICE)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    for name, g, w in zip(("output", "input grad", "grid grad"), got, want):
        assert g.shape == w.shape, name
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_volumes_in_half_precision_are_float32_math_rounded_once(dtype, no_fallback):
    x, grid = _volume_case(11, dtype)
    got = F.grid_sample(x.to(DEVICE), grid.to(DEVICE), mode="bilinear", padding_mode="reflection",
                        align_corners=True).cpu()
    want = F.grid_sample(x.float(), grid.float(), mode="bilinear", padding_mode="reflection",
                         align_corners=True).to(dtype)
    assert torch.equal(got, want)


def test_volumes_have_no_bicubic_mode():
    x = torch.randn(1, 1, 2, 2, 2, device=DEVICE)
    grid = torch.zeros(1, 1, 1, 1, 3, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"bicubic.*only supports 4-d input"):
        torch.grid_sampler_3d(x, grid, 2, 0, False)
    with pytest.raises(RuntimeError, match=r"grid_sampler_3d.*size 3 in its last dimension"):
        torch.grid_sampler_3d(x, torch.zeros(1, 1, 1, 1, 2, device=DEVICE), 0, 0, False)


@pytest.mark.parametrize("align_corners", [False, True])
def test_points_on_pixel_centres_and_edges(align_corners, no_fallback):
    """Grid values that unnormalize to whole and half pixels: floor, the bilinear
    neighbours and nearest's round-half-to-even decide exactly there."""
    x = torch.randn(1, 2, 4, 6, generator=torch.Generator().manual_seed(1))
    steps = torch.linspace(-1.25, 1.25, 21)  # multiples of 1/8: exact in float32
    grid = torch.stack(torch.meshgrid(steps, steps, indexing="xy"), dim=-1)[None]
    for mode, padding in itertools.product(MODES, PADDINGS):
        want = _sample_and_grads(x, grid, mode, padding, align_corners, "cpu")
        got = _sample_and_grads(x, grid, mode, padding, align_corners, DEVICE)
        for name, g, w in zip(("output", "input grad", "grid grad"), got, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5,
                                       msg=lambda m, n=f"{mode}/{padding} {name}": f"{n}: {m}")


def test_non_finite_grid_points(no_fallback):
    """A coordinate still not finite after the padding mode gives NaN (bilinear,
    bicubic) or 0 (nearest), as CPU with zeros padding; border clamps an infinity
    to the edge, as CPU. (With border or reflection padding CPU reads some edge
    pixel for NaN: that is not compared.)"""
    x = torch.randn(1, 2, 4, 4)
    nan, inf = float("nan"), float("inf")
    grid = torch.tensor([[[[nan, 0.0], [0.0, inf], [-inf, 0.5], [0.25, -0.5], [1e30, 0.2]]]])
    for mode, padding in itertools.product(MODES, PADDINGS):
        got = F.grid_sample(x.to(DEVICE), grid.to(DEVICE), mode=mode, padding_mode=padding,
                            align_corners=False).cpu()[0, :, 0]
        want = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=False)[0, :, 0]
        blank = 0.0 if mode == "nearest" else nan
        clamped = padding == "border" and mode != "bicubic"  # bicubic pads its taps, not the point
        compare = [3, 4] + ([1, 2] if clamped else [])
        for i in {0, 1, 2} - set(compare):
            torch.testing.assert_close(got[:, i], torch.full((2,), blank), equal_nan=True,
                                       msg=lambda m: f"{mode}/{padding} point {i}: {m}")
        torch.testing.assert_close(got[:, compare], want[:, compare], atol=1e-6, rtol=1e-6,
                                   msg=lambda m: f"{mode}/{padding}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_is_float32_math_rounded_once(dtype, mode, no_fallback):
    """In bfloat16 and float16 acme computes in float32 and rounds the results once,
    as CUDA does: exactly CPU's float32 answer on the same (rounded) inputs. CPU's
    own half-precision kernel rounds the coordinates to the half dtype, so nearest
    may read another pixel there; it is compared loosely."""
    x, grid = _case(3, dtype=dtype)
    got = _sample_and_grads(x, grid, mode, "border", False, DEVICE)
    exact = _sample_and_grads(x.float(), grid.float(), mode, "border", False, "cpu")
    for name, g, w in zip(("output", "input grad", "grid grad"), got, exact):
        assert g.dtype == dtype
        if name == "output":
            assert torch.equal(g, w.to(dtype)), f"{name} is not float32 math rounded once"
        else:  # the incoming gradient is rounded to the dtype first
            torch.testing.assert_close(g.float(), w, atol=0.05, rtol=0.05, msg=lambda m, n=name: f"{n}: {m}")
    if mode != "nearest":
        cpu_half = _sample_and_grads(x, grid, mode, "border", False, "cpu")
        torch.testing.assert_close(got[0].float(), cpu_half[0].float(), atol=0.15, rtol=0.1)


def test_results_do_not_depend_on_unit_count(units, no_fallback):
    x, grid = _case(5, n=3, c=4, h=9, w=11, ho=17, wo=13)
    vx, vgrid = _volume_case(6)
    results = []
    for count in (1, 3):
        units(count)
        results.append(_sample_and_grads(x, grid, "bicubic", "reflection", True, DEVICE)
                       + _sample_and_grads(vx, vgrid, "bilinear", "border", False, DEVICE))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_spatial_transformer_step_matches_cpu(no_fallback):
    """A spatial transformer (affine_grid + grid_sample) predicting its own warp, one SGD step."""
    torch.manual_seed(0)

    class STN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                           torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                           torch.nn.Linear(8, 6))
            self.head = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                                            torch.nn.Linear(4 * 14 * 14, 10))

        def forward(self, x):
            theta = self.loc(x).view(-1, 2, 3) + torch.tensor([[1.0, 0, 0], [0, 1.0, 0]], device=x.device)
            warped = F.grid_sample(x, F.affine_grid(theta, x.shape, align_corners=False), align_corners=False)
            return self.head(warped)

    model = STN()
    images, labels = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    results = {}
    for device in ("cpu", DEVICE):
        m = STN().to(device)
        m.load_state_dict(model.state_dict())
        loss = F.cross_entropy(m(images.to(device)), labels.to(device))
        loss.backward()
        results[device] = (loss.item(), {k: p.grad.cpu() for k, p in m.named_parameters()})
    assert abs(results["cpu"][0] - results[DEVICE][0]) < 1e-5
    for name, grad in results["cpu"][1].items():
        torch.testing.assert_close(results[DEVICE][1][name], grad, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_errors_name_the_op_and_device():
    x = torch.randn(1, 2, 4, 4, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"acme: grid_sampler_2d: .*same dtype.*device acme:0"):
        torch.grid_sampler_2d(x, torch.zeros(1, 3, 3, 2, dtype=torch.float64, device=DEVICE), 0, 0, False)
    with pytest.raises(RuntimeError, match=r"grid_sampler_2d.*same batch size"):
        torch.grid_sampler_2d(x, torch.zeros(2, 3, 3, 2, device=DEVICE), 0, 0, False)
    with pytest.raises(RuntimeError, match=r"grid_sampler_2d.*size 2 in its last dimension"):
        torch.grid_sampler_2d(x, torch.zeros(1, 3, 3, 3, device=DEVICE), 0, 0, False)
    with pytest.raises(ValueError, match=r"grid_sampler_2d.*interpolation_mode must be"):
        torch.grid_sampler_2d(x, torch.zeros(1, 3, 3, 2, device=DEVICE), 5, 0, False)
    with pytest.raises(ValueError, match=r"grid_sampler_2d.*padding_mode must be"):
        torch.grid_sampler_2d(x, torch.zeros(1, 3, 3, 2, device=DEVICE), 0, -1, False)
