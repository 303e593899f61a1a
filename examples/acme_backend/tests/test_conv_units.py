"""acme's convolutions split their batch over the compute units when their GEMMs
are too small for BLAS threads (kernels/conv.cpp, conv_blocks): forward, input
gradient and weight gradient must be bitwise equal whatever the unit count (the
weight gradient sums per-chunk partials in chunk order) and close to CPU.

Every case has several image blocks (images_per_gemm packs ~512 GEMM columns per
block) with small GEMMs, so the split happens, and a batch that leaves the last
block or chunk short."""

import pytest
import torch
import torch.nn.functional as F

import torch_fl_acme._C as native

# name: (conv, input shape, weight shape, kwargs); blocks = images per block x count
CASES = {
    # P=298 columns: 2 images per block, 4 blocks (2, 2, 2, 1)
    "conv1d": (F.conv1d, (7, 3, 300), (5, 3, 3), {}),
    # P=256: 2 images per block, 11 blocks (the last of 1 image), 6 chunks of 2 blocks (last 1)
    "conv2d": (F.conv2d, (21, 4, 16, 16), (6, 4, 3, 3), {"padding": 1}),
    # P=8x8x8=512: 1 image per block, 7 blocks
    "conv3d": (F.conv3d, (7, 2, 8, 8, 8), (4, 2, 3, 3, 3), {"padding": 1}),
    # P=256, 4 groups: 2 images per block, 5 blocks (2, 2, 2, 2, 1)
    "conv2d_grouped": (F.conv2d, (9, 8, 16, 16), (12, 2, 3, 3), {"padding": 1, "groups": 4}),
    # strided 3x3: P=12x12=144, 4 images per block, 3 blocks (4, 4, 1)
    "conv2d_strided": (F.conv2d, (9, 3, 24, 24), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    # 1x1 on 24x24 (P=576): one image per block, GEMMs straight on the images
    "conv2d_1x1": (F.conv2d, (5, 6, 24, 24), (4, 6, 1, 1), {}),
    # transposed: its forward is the input-gradient kernel and vice versa
    "conv_transpose2d": (F.conv_transpose2d, (9, 6, 16, 16), (6, 3, 3, 3), {"padding": 1}),
}


def _run(case, device, dtype=torch.float32):
    conv, xs, ws, kw = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g, dtype=dtype).to(device).requires_grad_()
    w = torch.randn(ws, generator=g, dtype=dtype).to(device).requires_grad_()
    out = conv(x, w, **kw)
    go = torch.randn(out.shape, generator=g, dtype=dtype).to(device)
    gx, gw = torch.autograd.grad(out, (x, w), go)
    return [t.detach().cpu() for t in (out, gx, gw)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_does_not_depend_on_unit_count(units, case, dtype):
    units(1)
    native.clear_fallback_log()
    one = _run(case, "acme", dtype)
    assert native.fallback_log() == [], f"conv fell back to CPU: {native.fallback_log()}"
    for n in (2, 3):
        units(n)
        for name, a, b in zip(("output", "input grad", "weight grad"), one, _run(case, "acme", dtype)):
            assert torch.equal(a, b), f"{case} {name}: 1 unit and {n} units differ"
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for a, c in zip(one, _run(case, "cpu", dtype)):
        torch.testing.assert_close(a, c, **tol)


# Convs with kernel taps that read only padding (kernels/conv.cpp, live_taps):
# acme computes them on the live taps only. name: (conv, input, weight, kwargs)
DEAD_TAP_CASES = {
    # ResNet's last stage on small images: 3x3, padding 1 on a 1x1 map, 1 live tap of 9
    "1x1_map": (F.conv2d, (8, 16, 1, 1), (24, 16, 3, 3), {"padding": 1}),
    # stride 2 from 2x2 to 1x1: the 2x2 taps at the bottom right live
    "strided_2x2_map": (F.conv2d, (4, 8, 2, 2), (12, 8, 3, 3), {"padding": 1, "stride": 2}),
    # dilation 2, padding 1, 3 wide: one output column, only the middle tap of a
    # row lives (the live conv's padding is 1 - 2 = -1)
    "dilated": (F.conv2d, (3, 4, 5, 3), (6, 4, 3, 3), {"padding": 1, "dilation": 2}),
    # every tap reads padding only: the output is the bias
    "all_dead": (F.conv2d, (2, 3, 1, 1), (5, 3, 3, 3), {"padding": 3, "stride": 4}),
    # 1-d and 3-d, grouped, and a transposed conv (its input gradient is the forward)
    "conv1d": (F.conv1d, (5, 6, 1), (4, 3, 5), {"padding": 2, "groups": 2}),
    "conv3d": (F.conv3d, (2, 3, 1, 2, 2), (4, 3, 3, 3, 3), {"padding": 1}),
    "transposed": (F.conv_transpose2d, (4, 6, 1, 1), (6, 5, 3, 3), {"padding": 1}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(DEAD_TAP_CASES))
def test_conv_with_dead_taps_matches_cpu(case, dtype):
    """Output, input, weight and bias gradients equal CPU's; the dead taps'
    weight gradient is exactly zero."""
    conv, xs, ws, kw = DEAD_TAP_CASES[case]
    results = {}
    for device in ("cpu", "acme"):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(xs, generator=g, dtype=dtype).to(device).requires_grad_()
        w = torch.randn(ws, generator=g, dtype=dtype).to(device).requires_grad_()
        bias_size = ws[1] * kw.get("groups", 1) if conv is F.conv_transpose2d else ws[0]
        b = torch.randn(bias_size, generator=g, dtype=dtype).to(device).requires_grad_()
        native.clear_fallback_log()
        out = conv(x, w, b, **kw)
        go = torch.randn(out.shape, generator=g, dtype=dtype).to(device)
        grads = torch.autograd.grad(out, (x, w, b), go)
        if device == "acme":
            assert native.fallback_log() == [], f"fell back to CPU: {native.fallback_log()}"
        results[device] = [t.detach().cpu() for t in (out, *grads)]
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    for name, a, c in zip(("output", "input grad", "weight grad", "bias grad"), results["acme"], results["cpu"]):
        torch.testing.assert_close(a, c, **tol, msg=lambda m: f"{case} {name}: {m}")
    if case == "1x1_map":
        gw = results["acme"][2]
        dead = torch.ones(3, 3, dtype=torch.bool)
        dead[1, 1] = False
        assert torch.count_nonzero(gw[:, :, dead]) == 0, "dead taps got a weight gradient"
        assert torch.count_nonzero(gw[:, :, 1, 1]) == gw[:, :, 1, 1].numel()


# Stride-1, undilated convs whose output keeps the input's size (kernels/conv.cpp,
# shifted_plane): each tap's column row is the input plane shifted, zero outside.
# (H, W, kernel, padding): square and not, shifts past the plane's edges (5x5 on
# 1x2), a 1x1 plane, and a tall kernel with no width padding.
SAME_SIZE_CASES = [
    (8, 8, (3, 3), (1, 1)),
    (5, 3, (3, 5), (1, 2)),
    (1, 2, (5, 5), (2, 2)),
    (2, 2, (3, 3), (1, 1)),
    (4, 7, (7, 1), (3, 0)),
    (1, 1, (1, 1), (0, 0)),
]


@pytest.mark.parametrize("h,w,kernel,padding", SAME_SIZE_CASES)
def test_same_size_unfold_fold_and_conv_match_cpu(h, w, kernel, padding):
    """unfold (im2col) copies: equal to CPU's bit for bit; fold (col2im) and
    the conv's output and gradients, which sum, close to CPU's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, h, w, generator=g, dtype=torch.float64)
    cols = torch.randn(3, 5 * kernel[0] * kernel[1], h * w, generator=g, dtype=torch.float64)
    assert torch.equal(F.unfold(x.to("acme"), kernel, padding=padding).cpu(),
                       F.unfold(x, kernel, padding=padding))
    torch.testing.assert_close(F.fold(cols.to("acme"), (h, w), kernel, padding=padding).cpu(),
                               F.fold(cols, (h, w), kernel, padding=padding))
    weight = torch.randn(4, 5, *kernel, generator=g)
    results = {}
    for device in ("cpu", "acme"):
        xd = x.float().to(device).requires_grad_()
        wd = weight.to(device).requires_grad_()
        out = F.conv2d(xd, wd, padding=padding)
        assert out.shape[-2:] == (h, w)
        grads = torch.autograd.grad(out, (xd, wd), torch.ones_like(out))
        results[device] = [t.detach().cpu() for t in (out, *grads)]
    for name, a, c in zip(("output", "input grad", "weight grad"), results["acme"], results["cpu"]):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")


def test_dead_taps_of_a_large_weight_do_not_depend_on_unit_count(units):
    """A late-ResNet weight (256 x 128 x 3 x 3 on a 1x1 map, one live tap):
    its slice is gathered and its gradient scattered over the units in several
    chunks; any unit count gives the same bits, and CPU's values."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 128, 1, 1, generator=g)
    w = torch.randn(256, 128, 3, 3, generator=g)
    go = torch.randn(4, 256, 1, 1, generator=g)

    def run(device):
        xd, wd = x.to(device).requires_grad_(), w.to(device).requires_grad_()
        out = F.conv2d(xd, wd, padding=1)
        return [t.detach().cpu() for t in (out, *torch.autograd.grad(out, (xd, wd), go.to(device)))]

    units(1)
    one = run("acme")
    for n in (2, 3):
        units(n)
        for name, a, b in zip(("output", "input grad", "weight grad"), one, run("acme")):
            assert torch.equal(a, b), f"{name}: 1 unit and {n} units differ"
    for name, a, c in zip(("output", "input grad", "weight grad"), one, run("cpu")):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")
